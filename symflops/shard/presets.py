"""Strategies as presets: placements of every tensor on a mesh, from the dims' roles.

The mesh has one axis per strategy whose degree is not 1, innermost first
(the order the links are assigned in, :mod:`.timing`): ``tp`` (tensor and
sequence parallelism), ``cp`` (context), ``ep`` (experts), ``dp`` (data);
pipeline parallelism splits a repeated block's copies into stages instead
(:mod:`.pipeline`).  Each tensor's axes are placed by the role of their dim,
the first axis of a tensor over a dim only (``A[s,t]``: the queries' ``s``):

* **data parallelism** (``dp``): the batch dim of every activation, input
  and index tensor over ``dp``; parameters whole.  With expert parallelism
  the batch is split over ``dp`` and ``ep`` together (Megatron's expert
  parallelism inside the data-parallel group: ``--dp`` counts every
  data-parallel replica, ``ep`` of them hold different experts);
* **ZeRO** (``zero``: 1 optimizer state and master weights, 2 also
  gradients, 3 also the weights themselves) over the axes a parameter's
  gradient is summed over (the data axes it is whole along): flat shards
  (:attr:`~symflops.core.sharding.Placement.flat`), gathered whole before each
  use at stage 3;
* **Megatron tensor parallelism** (``tp``): the heads, hidden and vocabulary
  dims of parameters and activations over ``tp``; with **sequence
  parallelism** (``sp``) also the sequence dim of every activation that no
  ``tp`` dim splits (norms, dropout, residuals);
* **context parallelism** (``cp``): the sequence dim of every activation and
  index over ``cp`` (ring attention's queries; the keys and values are
  gathered where the scores need them);
* **expert parallelism** (``ep``): the experts dim of the expert weights
  (those an op reads with the experts letter on another operand too) and of
  the activations that are not rows of tokens (an MoE's slots ``Xe[x,q,d]``).

A tensor with a batch or sequence axis takes the token axes first, the
others the model axes first; no tensor uses a mesh axis twice.  Buffers are
whole on every device.  The explicit form (``mesh:``, ``dims:``,
``tensors:``) places dims and tensors as written, ZeRO over the axes the
batch dim is split over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, Tensor, dim_symbol, selections
from ..core.sharding import Axes, Layout, Parallel, Placement
from .roles import Roles

#: The preset axes, innermost first, and what each is.
AXES = (("tp", "tensor parallel"), ("cp", "context parallel"), ("ep", "expert parallel"),
        ("dp", "data parallel"))


@dataclass(frozen=True)
class Pipeline:
    stages: sympy.Expr
    micro_batches: sympy.Expr
    interleave: sympy.Expr
    schedule: str


@dataclass(frozen=True)
class Sharding:
    """A layer's placements on a mesh: ``layout`` for the work (a gradient
    ``dX`` placed as ``X``; a parameter's gradient as the reduction leaves it:
    its optimizer's shards under ZeRO), ``grads`` and ``states`` the storage of
    each parameter's gradient and of its optimizer state and master weights."""

    layout: Layout
    axes: tuple[tuple[str, sympy.Expr, str], ...]       # name, size, what it is
    grads: tuple[tuple[str, Placement], ...]
    states: tuple[tuple[str, Placement], ...]
    zero: int
    pipeline: Pipeline | None
    summary: tuple[str, ...]                            # which dims each strategy splits
    parallel: Parallel = field(compare=False, default=None)  # type: ignore[assignment]

    def grad(self, param: str) -> Placement:
        return dict(self.grads)[param]

    def state(self, param: str) -> Placement:
        return dict(self.states)[param]


def _degree(parallel: Parallel, key: str) -> sympy.Expr:
    value = parallel.option(key, sympy.Integer(1))
    return value if isinstance(value, sympy.Expr) else sympy.Integer(value)  # type: ignore[arg-type]


def expert_weights(layer: Layer, experts: tuple[sympy.Symbol, ...]) -> tuple[dict[str, str], ...]:
    """Parameters with an experts axis, by how an op reads it there: ``batched``
    (the experts letter on another operand too: the slot form's
    ``Xe[x,q,d] W_gate[x,d,f]``) or ``lookup`` (selected per row:
    ``W_gate[ex[b,s,i],d,j]``, the pair form); a router ``W_r[d,x]`` is neither."""
    kinds: dict[str, str] = {}
    params = {t.name: t for t in layer.params}
    for op in layer.ops:
        for term in op.terms:
            chosen = selections(term.operands)
            for f in term.factors:
                t = params.get(f.tensor)
                if t is None:
                    continue
                for k, ax in enumerate(t.shape):
                    if ax not in experts or k >= len(f.indices):
                        continue
                    x = f.indices[k]
                    if x in chosen:
                        kinds[t.name] = "lookup"
                    elif any(x in g.indices for g in term.factors if g is not f):
                        kinds.setdefault(t.name, "batched")
    return (kinds,)


class _Placer:
    def __init__(self, layer: Layer, roles: Roles, present: dict[str, sympy.Expr],
                 sp: bool, zero: int) -> None:
        self.layer, self.roles, self.present, self.sp, self.zero = layer, roles, present, sp, zero
        self.model: dict[sympy.Symbol, str] = {}
        self.tokens: dict[sympy.Symbol, tuple[str, ...]] = {}
        self.experts: set[sympy.Symbol] = set()
        self.expert_params: set[str] = set()

    def data_axes(self) -> tuple[str, ...]:
        return tuple(a for a in ("cp", "ep", "dp") if a in self.present)

    def place(self, t: Tensor) -> Placement:
        placed: list[list[str]] = [[] for _ in t.shape]
        used: set[str] = set()
        seen: set[sympy.Expr] = set()
        first: dict[sympy.Symbol, int] = {}
        for k, ax in enumerate(t.shape):
            if ax not in seen and isinstance(ax, sympy.Symbol):
                first[ax] = k
            seen.add(ax)

        def put(dim: sympy.Symbol, axes: tuple[str, ...]) -> None:
            k = first.get(dim)
            if k is None:
                return
            for a in axes:
                if a not in used:
                    placed[k].append(a)
                    used.add(a)

        if t.is_buffer:
            return Placement(tuple(() for _ in t.shape))
        token = set(self.roles.of("batch")) | set(self.roles.of("sequence"))
        has_tokens = any(d in token for d in first)

        def model(with_experts: bool) -> None:
            for d in first:
                if d in self.experts and not with_experts:
                    continue
                if d in self.model:
                    put(d, (self.model[d],))

        def rows() -> None:
            for d in first:
                if d in self.tokens:
                    put(d, self.tokens[d])

        if t.is_param:
            for d in first:
                if d in self.model and (d not in self.experts or t.name in self.expert_params):
                    put(d, (self.model[d],))
            flat = ()
            if self.zero >= 3:
                flat = tuple(a for a in self.data_axes() if a not in used)
            return Placement(tuple(tuple(p) for p in placed), flat)
        if has_tokens:
            rows()
            model(False)
        else:
            model(True)
            rows()
        if self.sp and "tp" in self.present and "tp" not in used and t.role != "index":
            for d in self.roles.of("sequence"):
                put(d, ("tp",))
        return Placement(tuple(tuple(p) for p in placed))


def presets(layer: Layer, parallel: Parallel, roles: Roles) -> Sharding:
    """The placements the strategies of ``parallel`` give ``layer``."""
    degrees = {key: _degree(parallel, key) for key in ("dp", "tp", "cp", "ep")}
    present = {k: v for k, v in degrees.items() if v != 1}
    if "ep" in present:  # expert parallelism inside the data-parallel group
        if "dp" not in present:
            raise SymflopsError(f"{layer.source}: expert parallelism splits the experts inside "
                                "the data-parallel group, and dp is 1",
                                hint="give dp, a multiple of ep (--dp counts every "
                                     "data-parallel replica, ep of them hold different experts)")
        rest = sympy.simplify(present["dp"] / present["ep"])
        if rest.is_number and not rest.is_Integer:
            raise SymflopsError(f"{layer.source}: ep = {present['ep']} does not divide dp = "
                                f"{present['dp']}", hint="give dp a multiple of ep")
        if rest == 1:
            del present["dp"]
        else:
            present["dp"] = rest
    sp = bool(parallel.option("sp", False))
    zero = int(parallel.option("zero", 0))  # type: ignore[arg-type]
    if sp and "tp" not in present:
        raise SymflopsError(f"{layer.source}: sequence parallelism splits the sequence over the "
                            "tensor-parallel axis, and tp is 1",
                            hint="give tp (e.g. --tp 8) with sp, or leave sp out")
    placer = _Placer(layer, roles, present, sp, zero)
    summary = []
    if "tp" in present:
        found = [(role, d) for role in ("heads", "hidden", "vocab") for d in roles.of(role)]
        if not found:
            roles.need("heads", "tensor parallelism (tp)")
        for role, d in found:
            placer.model[d] = "tp"
        summary.append("tp splits " + ", ".join(f"{d} ({role})" for role, d in found))
    if "ep" in present:
        experts = roles.need("experts", "expert parallelism (ep)")
        (kinds,) = expert_weights(layer, experts)
        pair = sorted(n for n, k in kinds.items() if k == "lookup")
        if pair:
            raise SymflopsError(
                f"{layer.source}: the experts' weights ({', '.join(pair)}) are read per "
                "token-expert pair through a lookup of the routing (the pair form): which "
                "device holds a pair is decided by the routing, which a placement of letters "
                "does not express", hint="expert parallelism needs the slot form, tokens "
                "dispatched to expert slots (derivations/moe_block.yaml: Xe[x,q,d] = "
                "Yn[tb[x,q], ts[x,q], d]); or split the experts' hidden dim with tp")
        placer.experts = set(experts)
        placer.expert_params = {n for n, k in kinds.items() if k == "batched"}
        for d in experts:
            placer.model[d] = "ep"
        summary.append("ep splits " + ", ".join(f"{d} (experts)" for d in experts))
    batch_axes = tuple(a for a in ("ep", "dp") if a in present)
    if batch_axes:
        for d in roles.need("batch", "data parallelism (dp)" if "dp" in present
                            else "expert parallelism (ep)"):
            placer.tokens[d] = batch_axes
        summary.append(f"{' and '.join(batch_axes)} split{'s' if len(batch_axes) == 1 else ''}"
                       f" {', '.join(str(d) for d in roles.of('batch'))} (batch)")
    if "cp" in present:
        for d in roles.need("sequence", "context parallelism (cp)"):
            placer.tokens[d] = ("cp",)
        summary.append(f"cp splits {', '.join(str(d) for d in roles.of('sequence'))} (sequence)")
    if sp:
        seq = roles.need("sequence", "sequence parallelism (sp)")
        summary.append(f"sp splits {', '.join(str(d) for d in seq)} (sequence) over tp "
                       "where no tp dim does")
    for name, formula in layer.definitions:
        axes = tuple(a for d in sorted(formula.free_symbols, key=str)
                     for a in placer.tokens.get(d, ()))
        if axes:
            placer.tokens[dim_symbol(name)] = tuple(dict.fromkeys(axes))
    if zero and not placer.data_axes():
        raise SymflopsError(f"{layer.source}: ZeRO shards the optimizer state over the "
                            "data-parallel axis, and dp is 1", hint="give dp (e.g. --dp 8)")
    if zero:
        summary.append(f"ZeRO-{zero} over {', '.join(placer.data_axes())}")
    placements = {t.name: placer.place(t) for t in layer.tensors}
    axes = tuple((name, present[name], what) for name, what in AXES if name in present)
    return _finish(layer, placements, axes, zero, placer.data_axes, roles,
                   _pipeline(parallel), tuple(summary), parallel)


def _pipeline(parallel: Parallel) -> Pipeline | None:
    p = _degree(parallel, "pp")
    m = _degree(parallel, "micro_batches")
    v = _degree(parallel, "interleave")
    schedule = str(parallel.option("schedule", "1f1b"))
    if v != 1 and schedule != "1f1b":
        raise SymflopsError("an interleaved pipeline (interleave > 1) runs the 1F1B schedule",
                            hint="leave the schedule at 1f1b, or interleave at 1")
    if p == 1:
        return None if m == 1 and v == 1 else Pipeline(p, m, v, schedule)
    return Pipeline(p, m, v, schedule)


def _finish(layer: Layer, placements: dict[str, Placement], axes, zero: int, data_axes,
            roles: Roles, pipeline, summary, parallel) -> Sharding:
    sizes = tuple((name, size) for name, size, _ in axes)
    grads, states = [], []
    out = dict(placements)
    for t in layer.params:
        p = placements[t.name]
        state = p
        if zero >= 1:
            extra = tuple(a for a in data_axes() if a not in p.used)
            state = Placement(p.axes, p.flat + tuple(a for a in extra if a not in p.flat))
        states.append((t.name, state))
        grads.append((t.name, state if zero >= 2 else p))
        out["d" + t.name] = state if zero >= 1 else p
    for t in layer.tensors:
        if not t.is_param and "d" + t.name not in out:
            out["d" + t.name] = placements[t.name]
    layout = Layout(sizes, tuple(out.items()), roles.rows)
    return Sharding(layout, axes, tuple(grads), tuple(states), zero, pipeline, summary, parallel)


def explicit(layer: Layer, parallel: Parallel, roles: Roles) -> Sharding:
    """The placements a ``mesh:``/``dims:``/``tensors:`` form writes out."""
    sizes = dict(parallel.mesh)
    by_dim = {dim_symbol(d): axes for d, axes in parallel.dims}
    by_tensor = dict(parallel.tensors)
    placements: dict[str, Placement] = {}
    for t in layer.tensors:
        if t.name in by_tensor:
            placements[t.name] = Placement(by_tensor[t.name])
            continue
        placed: list[Axes] = []
        used: set[str] = set()
        seen: set[sympy.Expr] = set()
        for ax in t.shape:
            group: Axes = ()
            if ax in by_dim and ax not in seen:
                group = tuple(a for a in by_dim[ax] if a not in used)
                used.update(group)
            seen.add(ax)
            placed.append(group)
        placements[t.name] = Placement(tuple(placed))
    zero = int(parallel.option("zero", 0))  # type: ignore[arg-type]
    batch_axes: tuple[str, ...] = ()
    if zero:
        for d in roles.need("batch", "ZeRO"):
            batch_axes += tuple(by_dim.get(d, ()))
        if not batch_axes:
            raise SymflopsError(f"{layer.source}: ZeRO shards the optimizer state over the axes "
                                "the batch dim is split over, and 'dims:' splits it over none",
                                hint="add e.g. dims: {B: X}")
        if zero >= 3:
            for t in layer.params:
                p = placements[t.name]
                placements[t.name] = Placement(p.axes, tuple(a for a in batch_axes
                                                              if a not in p.used))
    axes = tuple((name, size, "mesh axis") for name, size in sizes.items())
    summary = tuple(f"{d} over {', '.join(a)}" for d, a in parallel.dims)
    return _finish(layer, placements, axes, zero, lambda: batch_axes, roles,
                   _pipeline(parallel), summary, parallel)
