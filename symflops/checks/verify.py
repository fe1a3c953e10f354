"""``symflops verify``: check a derivation numerically and against PyTorch.

What is checked, at small random sizes in float64 (dims drawn distinct, so
that a transposed rule cannot pass by accident):

1. *each backward rule on its own*: the rules that forward op ``k`` sends to
   tensor ``T`` (one, or several when ``T`` sits on and off a diagonal) are
   evaluated with a random upstream gradient ``G`` and compared with central
   finite differences of the op's scalar ``sum(G * op_k(...))`` in ``T``; and,
   where PyTorch is installed, with ``torch.autograd.grad`` of the same
   scalar, the op built with ``torch.einsum``.
2. *the chained rules*: every gradient the derivation computes (leaves and
   intermediates, contributions summed) against finite differences of the
   layer's scalar ``sum over outputs of dY * Y`` (``dY`` random), perturbing
   the tensor where it is read, and against torch.autograd on the whole layer.
3. *FLOPs* (PyTorch only): each forward op and the backward of each op, at the
   small sizes and at medium sizes (dims 8..64, on the meta device), against
   ``torch.utils.flop_counter.FlopCounterMode``.
4. *saved activations* (PyTorch only): ``derivation.saved`` against what
   autograd saves (``saved_tensors_hooks``), tensors identified by storage
   (a view of a forward tensor is that tensor) or else by value (a copy).

What is a failure (exit 1), and what only a note:

* failure: a rule group or a chained gradient off by more than
  ``FD_TOLERANCE`` (finite differences) or ``TORCH_TOLERANCE`` (autograd)
  relative to ``max(1, max |reference|)``; a rule that cannot be evaluated.
* failure: a FLOP count that disagrees with PyTorch for a *plain contraction*:
  two operands, no repeated letter, every summed letter on both operands and at
  least one of them.  PyTorch lowers exactly these to one bmm, whose count
  is the derived ``2 * product of all extents``.
* note only: every other FLOP difference, for the ones PyTorch lowers differently
  by convention: products without a sum become ``mul`` and reductions ``sum``
  (not counted); a letter summed on one operand only is summed out first by a
  ``sum``; an outer product inside a backward becomes a bmm over a length-1
  axis (counted 2 per term where symflops counts 1); three or more operands
  are contracted in PyTorch's own order, and autograd's backward reuses the
  forward's partial products where symflops's rules do not.
* note only: any difference in saved tensors.  PyTorch saves what its bmm
  decomposition needs (reshaped views, sometimes copies or partial products),
  which is a convention of that implementation, not a property of the math.

PyTorch is imported lazily; without it only the finite-difference checks run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy

from ..count.cost import Costs, costs
from ..core.records import Derivation, Rule, grad_name
from ..core.errors import SymflopsError
from ..core.ir import Einsum, Factor, Layer, dim_symbol, index_ranges
from ..ops.einsum.orders import steps, written
from ..ops.einsum.numeric import extents_at, run_einsum
from ..core.text import table

FD_TOLERANCE = 1e-6      # central differences of a polynomial: rounding ~1e-10 at eps 1e-6
TORCH_TOLERANCE = 1e-10  # the same float64 arithmetic in another order: ~1e-15
EPS = 1e-6
MEDIUM = (8, 64)         # range of the medium dim sizes for FLOP counts


# ------------------------------------------------------------------ sizes --

def _extent(expr: sympy.Expr, dims: Mapping[str, int]) -> int:
    return int(expr.subs({s: dims[str(s)] for s in expr.free_symbols}))


#: Elements a tensor may hold, and an op's letters may span, at the small sizes
#: (real float64 arrays, differenced one element at a time: time grows with
#: the square of a tensor's size) and at the medium sizes (the meta device:
#: shapes only, but counts must stay far inside int64).  The shipped models
#: hold at most about 5 * 10**4 elements per tensor at the small sizes.
SMALL_LIMITS = (10**5, 10**7)
MEDIUM_LIMITS = (10**15, 10**15)


def _all_extents_positive(layer: Layer, dims: Mapping[str, int]) -> bool:
    return all(_extent(e, dims) >= 1 for t in layer.tensors for e in t.shape)


def _too_large(layer: Layer, dims: Mapping[str, int], limits: tuple[int, int]
               ) -> tuple[str, Any] | None:
    """What holds or spans more elements than ``limits`` (per tensor, per op)
    at ``dims``, in words, and where it is declared; None when nothing does."""
    for t in layer.tensors:
        sizes = [_extent(e, dims) for e in t.shape]
        if math.prod(sizes) > limits[0]:
            axis = max(range(len(sizes)), key=sizes.__getitem__)
            return (f"{t.name} [{', '.join(map(sympy.sstr, t.shape))}] holds "
                    f"{math.prod(sizes):,} elements (its axis {sympy.sstr(t.shape[axis])} is "
                    f"{sizes[axis]:,}), more than {limits[0]:,}", t.span)
    for op in layer.ops:
        span = math.prod(_extent(e, dims) for e in op.dims().values())
        if span > limits[1]:
            return (f"the letters of {op.statement()!r} span {span:,} elements, more than "
                    f"{limits[1]:,}", getattr(op, "span", None))
    return None


def choose_sizes(layer: Layer, rng: np.random.Generator, low: int, high: int,
                 limits: tuple[int, int] = SMALL_LIMITS) -> dict[str, int]:
    """Distinct dim values in ``[low, high]`` where there are enough (a rule
    with two axes swapped then fails on shape or value), such that every
    declared axis (``P - K + 1`` too) is at least 1 and nothing exceeds
    ``limits`` (elements per tensor, per op)."""
    n = len(layer.dims)
    # Sizes are proved polynomials with non-negative coefficients in dim - 1:
    # the smallest are at the lowest dims, so too large there means too large anywhere.
    problem = _too_large(layer, {d.name: low for d in layer.dims}, limits)
    if problem is not None:
        raise SymflopsError(f"verify needs small sizes, but with every dim {low} {problem[0]}",
                            problem[1],
                            "verify checks a layer at dims of a few units: give the axes sizes "
                            "of low degree (B, 4*D, P + K - 1 rather than B**40)")
    for _ in range(100):
        if high - low + 1 >= n:
            values = rng.choice(np.arange(low, high + 1), size=n, replace=False)
        else:
            values = rng.integers(low, high + 1, size=n)
        dims = {d.name: int(v) for d, v in zip(layer.dims, values)}
        if _all_extents_positive(layer, dims) and _too_large(layer, dims, limits) is None:
            return dims
    raise SymflopsError(f"cannot find dim sizes in {low}..{high} that make every axis of "
                        f"{layer.name} positive and every tensor small", hint="check the shape "
                        "expressions")


def random_leaves(layer: Layer, dims: Mapping[str, int],
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard normal inputs and parameters; index tensors get integers in
    the range of the axis they select along (``[0, V)`` for ``E[tok[b], d]``)."""
    ranges = index_ranges(layer)
    return {t.name: (rng.integers(0, _extent(ranges.get(t.name, sympy.Integer(1)), dims),
                                  _shape(layer, t.name, dims))
                     if t.role == "index" else rng.standard_normal(_shape(layer, t.name, dims)))
            for t in layer.tensors if t.role != "activation"}


def small_sizes(layer: Layer, rng: np.random.Generator) -> dict[str, int]:
    return choose_sizes(layer, rng, 2, max(5, len(layer.dims) + 1))


def _shape(layer: Layer, name: str, dims: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(_extent(e, dims) for e in layer.tensor(name).shape)


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    """``max |value - reference| / max(1, max |reference|)``; inf on a shape mismatch."""
    value, reference = np.asarray(value, dtype=float), np.asarray(reference, dtype=float)
    if value.shape != reference.shape:
        return float("inf")
    if reference.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(reference))))
    return float(np.max(np.abs(value - reference))) / scale


# ---------------------------------------------------------------- results --

@dataclass(frozen=True)
class RuleCheck:
    """The rules forward op number ``op`` (1-based, in ``layer.ops`` order)
    sends to ``wrt``, checked on their own."""

    op: int
    wrt: str
    grad: str
    statements: tuple[str, ...]
    fd_error: float
    torch_error: float | None
    passed: bool
    problem: str = ""


@dataclass(frozen=True)
class GradCheck:
    """One gradient through the whole chain of rules."""

    grad: str
    fd_error: float
    torch_error: float | None
    passed: bool
    problem: str = ""


@dataclass(frozen=True)
class FlopCheck:
    """Derived FLOPs of one forward op, or of one op's backward, against PyTorch.
    ``op`` is the op's 1-based number, None for the whole layer's totals.  ``status`` is 'agree',
    'not counted' (PyTorch counted 0), or 'differs'."""

    direction: str  # forward | backward
    op: int | None
    statement: str
    size: str  # small | medium
    derived: int
    torch: int
    status: str
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class SavedCheck:
    derived: tuple[str, ...]
    torch: tuple[str, ...]           # forward tensors autograd saves (params excluded)
    copies: tuple[str, ...]          # of those, saved as a copy rather than a view
    internal: tuple[str, ...]        # saved tensors that are no forward tensor (shapes)
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    layer: str
    source: str
    seed: int
    small: Mapping[str, int]
    medium: Mapping[str, int]
    torch_version: str | None
    rules: tuple[RuleCheck, ...]
    gradients: tuple[GradCheck, ...]
    flops: tuple[FlopCheck, ...]
    saved: SavedCheck | None
    notes: tuple[str, ...] = field(default=())

    @property
    def failures(self) -> int:
        return (sum(not r.passed for r in self.rules) + sum(not g.passed for g in self.gradients)
                + sum(not f.passed for f in self.flops))

    @property
    def passed(self) -> bool:
        return self.failures == 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["small"], d["medium"] = dict(self.small), dict(self.medium)
        d["passed"], d["failures"] = self.passed, self.failures
        d["tolerances"] = {"finite_differences": FD_TOLERANCE, "torch": TORCH_TOLERANCE}
        return d


# ------------------------------------------------------- finite differences --

def _forward_with(layer: Layer, leaves: Mapping[str, np.ndarray], dims: Mapping[str, int],
                  override: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The forward pass, with the activations in ``override`` replaced (so that
    a gradient with respect to an intermediate can be differenced)."""
    override = override or {}
    values = dict(leaves)
    for op in layer.ops:
        if op.output in override:
            values[op.output] = override[op.output]
        else:
            values.update(op.run(values, extents_at(op.index_dims, dims), dims))
    return values


def central_differences(scalar: Callable[[np.ndarray], float], at: np.ndarray,
                        eps: float = EPS) -> np.ndarray:
    """d scalar / d at, one element at a time; exact up to rounding for the
    polynomials of degree <= 2 in one element that einsums are (a tensor read
    at most twice), O(eps**2) beyond."""
    grad = np.zeros_like(at)
    for idx in np.ndindex(at.shape):
        plus, minus = at.copy(), at.copy()
        plus[idx] += eps
        minus[idx] -= eps
        grad[idx] = (scalar(plus) - scalar(minus)) / (2 * eps)
    return grad


def _group_rules(derivation: Derivation) -> list[tuple[int, str, list[Rule]]]:
    """Rules by (op, wrt), in derivation order."""
    groups: dict[tuple[int, str], list[Rule]] = {}
    for r in derivation.rules:
        groups.setdefault((r.op, r.wrt), []).append(r)
    return [(op, wrt, rules) for (op, wrt), rules in groups.items()]


def _apply_rules(rules: Sequence[Rule], env: Mapping[str, np.ndarray],
                 dims: Mapping[str, int]) -> np.ndarray:
    total: Any = 0
    for rule in rules:
        extents = extents_at(rule.index_dims, dims)
        for term in rule.terms:
            for f in term.operands:
                if not f.reads_tensor:
                    continue
                # Said here in the rule's own letters; NumPy would name its internal ones.
                want = tuple(extents[i] for i in (f.indices[1:] if f.is_select else f.indices))
                if env[f.tensor].shape != want:
                    raise ValueError(f"{f} needs shape {want}, but {f.tensor} has shape "
                                     f"{env[f.tensor].shape}")
            total = total + run_einsum(term, env, extents, dims)
    return np.asarray(total, dtype=float)


# ------------------------------------------------------------------ torch --

def load_torch() -> Any | None:
    """The torch module, or None when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_forward(torch: Any, layer: Layer, leaves: Mapping[str, Any],
                   dims: Mapping[str, int] | None = None) -> dict[str, Any]:
    values = dict(leaves)
    for op in layer.ops:
        values.update(op.torch(torch, values, dims))
    return values


def _torch_leaf(torch: Any, array: np.ndarray, requires_grad: bool = False) -> Any:
    """A float64 tensor, or an int64 one for an integer (index) array."""
    if np.asarray(array).dtype.kind in "iu":
        return torch.tensor(array, dtype=torch.int64)
    return torch.tensor(array, dtype=torch.float64, requires_grad=requires_grad)


def _grad_or_zeros(torch: Any, outputs: Any, inputs: Sequence[Any], grad_outputs: Any) -> list[Any]:
    grads = torch.autograd.grad(outputs, list(inputs), grad_outputs, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


# ------------------------------------------------------------ rule checks --

def check_rules(derivation: Derivation, values: Mapping[str, np.ndarray], dims: Mapping[str, int],
                rng: np.random.Generator, torch: Any | None) -> tuple[RuleCheck, ...]:
    """Each (op, wrt) group of rules against the derivative of the op alone."""
    layer = derivation.layer
    checks = []
    for k, wrt, rules in _group_rules(derivation):
        op = layer.ops[k]
        extents = extents_at(op.index_dims, dims)
        G = rng.standard_normal(_shape(layer, op.output, dims))
        statements = tuple(r.statement for r in rules)

        def scalar(x: np.ndarray, op=op, wrt=wrt, G=G, extents=extents) -> float:
            return float(np.sum(G * op.run({**values, wrt: x}, extents, dims)[op.output]))

        numeric = central_differences(scalar, values[wrt])
        problem = ""
        try:
            derived = _apply_rules(rules, {**values, grad_name(op.output): G}, dims)
            fd = relative_error(derived, numeric)
        except (ValueError, IndexError, KeyError) as exc:  # a malformed rule
            derived, fd, problem = None, float("inf"), f"cannot evaluate: {exc}"
        t_err = None
        if torch is not None:
            tensors = {n: _torch_leaf(torch, values[n]) for n in op.inputs}
            tensors[wrt].requires_grad_(True)
            out = op.torch(torch, tensors, dims)[op.output]
            (ref,) = _grad_or_zeros(torch, out, [tensors[wrt]], torch.tensor(G))
            t_err = float("inf") if derived is None else relative_error(derived, ref.numpy())
        passed = fd <= FD_TOLERANCE and (t_err is None or t_err <= TORCH_TOLERANCE)
        if derived is not None and derived.shape != numeric.shape:
            problem = f"the rules give shape {derived.shape}, {wrt} has shape {numeric.shape}"
        elif not passed and not problem:
            problem = "the derived gradient differs from the reference"
        checks.append(RuleCheck(k + 1, wrt, grad_name(wrt), statements, fd, t_err, passed, problem))
    return tuple(checks)


def _chained(derivation: Derivation, values: Mapping[str, np.ndarray],
             upstream: Mapping[str, np.ndarray], dims: Mapping[str, int]
             ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """:func:`symflops.checks.numeric.backward`, except that a rule that cannot be
    evaluated marks its gradient, and every gradient computed from it, as
    broken (gradient name -> why) instead of stopping the whole check."""
    env: dict[str, np.ndarray] = {**values, **upstream}
    grads: dict[str, np.ndarray] = {}
    broken: dict[str, str] = {}
    for rule in derivation.rules:
        bad = [g for g in rule.reads if g in broken]
        if bad:
            broken.setdefault(rule.grad, f"reads {bad[0]}, which cannot be evaluated")
            continue
        try:
            part = _apply_rules([rule], env, dims)
            total = grads[rule.grad] + part if rule.grad in grads else part
        except (ValueError, IndexError, KeyError) as exc:
            broken.setdefault(rule.grad, f"cannot evaluate {rule.statement}: {exc}")
            continue
        grads[rule.grad] = env[rule.grad] = total
    return grads, broken


def check_chain(derivation: Derivation, leaves: Mapping[str, np.ndarray], dims: Mapping[str, int],
                rng: np.random.Generator, torch: Any | None) -> tuple[GradCheck, ...]:
    """Every computed gradient, rules chained, against the whole layer's scalar."""
    layer = derivation.layer
    values = _forward_with(layer, leaves, dims)
    upstream = {grad_name(o): rng.standard_normal(values[o].shape) for o in layer.outputs}
    outputs = set(layer.outputs)
    targets = [t.name for t in layer.tensors
               if t.name in derivation.needs_grad and t.name not in outputs]
    grads, broken = _chained(derivation, values, upstream, dims)

    def total(new: Mapping[str, np.ndarray]) -> float:
        leaf = {n: new.get(n, v) for n, v in leaves.items()}
        override = {n: v for n, v in new.items() if n not in leaves}
        v = _forward_with(layer, leaf, dims, override)
        return sum(float(np.sum(upstream[grad_name(o)] * v[o])) for o in layer.outputs)

    references: dict[str, np.ndarray] = {}
    if torch is not None:
        tleaves = {n: _torch_leaf(torch, a, n in derivation.needs_grad) for n, a in leaves.items()}
        tvalues = _torch_forward(torch, layer, tleaves, dims)
        s = sum((tvalues[o] * torch.tensor(upstream[grad_name(o)])).sum() for o in layer.outputs)
        refs = _grad_or_zeros(torch, s, [tvalues[n] for n in targets], None)
        references = {n: r.detach().numpy() for n, r in zip(targets, refs)}

    checks = []
    for name in targets:
        numeric = central_differences(lambda x, name=name: total({name: x}), values[name])
        problem = broken.get(grad_name(name), "")
        derived = None if problem else grads.get(grad_name(name), np.zeros_like(numeric))
        fd = float("inf") if derived is None else relative_error(derived, numeric)
        t_err = None
        if name in references:
            t_err = float("inf") if derived is None else relative_error(derived, references[name])
        passed = fd <= FD_TOLERANCE and (t_err is None or t_err <= TORCH_TOLERANCE)
        why = problem or ("" if passed else "the chained gradient differs from the reference")
        checks.append(GradCheck(grad_name(name), fd, t_err, passed, why))
    return tuple(checks)


# ------------------------------------------------------------ FLOP checks --

def is_plain(e: Einsum) -> bool:
    """Two operands, no letter repeated within a factor, at least one summed
    letter, and every summed letter on both operands: PyTorch runs exactly one
    bmm for it, counted ``2 * product of all extents`` like symflops."""
    if len(e.operands) != 2 or any(f.is_indicator for f in e.operands):
        return False
    a, b = e.operands
    if any(len(set(f.indices)) != len(f.indices) for f in (a, b, e.output)):
        return False
    summed = e.summed
    return bool(summed) and all(i in a.indices and i in b.indices for i in summed)


def convention(e: Einsum) -> str:
    """Why PyTorch may count ``e`` differently from symflops (see the module doc)."""
    conditions = [f.condition() for f in e.operands if f.is_comparison]
    if conditions:
        return (f"restricted to {', '.join(conditions)}: PyTorch computes the full product and "
                "multiplies by a 0/1 mask; symflops counts the terms inside the domain only")
    if any(f.is_shift for f in e.operands):
        return ("a shifted index (a convolution): PyTorch's einsum multiplies by the 0/1 tensor "
                "[q = p + k] as a dense operand; symflops counts the terms with q = p + k only")
    if any(f.is_select for f in e.operands):
        return ("a lookup (gather) or its scatter-add: PyTorch runs index_select and index_add, "
                "which it does not count; symflops counts the scatter's adds as elementwise work")
    if len(e.operands) == 1:
        return "a single-operand reduction or copy: PyTorch runs sum/diagonal, which it does not count"
    if any(len(set(f.indices)) != len(f.indices) for f in e.operands):
        return "a repeated letter (a diagonal): PyTorch takes it as a view first"
    if len(e.operands) > 2:
        return ("three or more operands: symflops counts each backward rule in its cheapest "
                "order, while PyTorch's autograd reuses the forward's partial products")
    a, b = e.operands
    if not e.summed:
        return ("no summed letter (outer or elementwise product): PyTorch counts it 0 as a mul, "
                "or 2 per term as a bmm over a length-1 axis; symflops counts 1 per term")
    lone = [i for i in e.summed if not (i in a.indices and i in b.indices)]
    if lone:
        return (f"letter(s) {', '.join(lone)} summed on one operand only: PyTorch sums them out "
                "first (a sum, not counted), symflops counts them inside the product")
    return ""


def _as_run(e: Einsum, extents: Mapping[str, sympy.Expr]) -> list[Einsum]:
    """A forward term as PyTorch runs it here: three or more plain tensors as
    the pairwise products of the written order (:func:`_written_order`), each
    judged on its own by :func:`is_plain` and :func:`convention`."""
    if (len(e.factors) < 3 or len(e.factors) != len(e.operands)
            or any(len(set(f.indices)) != len(f.indices) for f in e.factors)):
        return [e]
    return [Einsum(Factor("T", tuple(sorted(s.span - s.summed))),
                   (Factor("A", tuple(sorted(s.left))), Factor("B", tuple(sorted(s.right)))))
            for s in steps(e, extents, "FLOPs", written(len(e.factors)))]


def _count(torch: Any, fn: Callable[[], Any]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _meta_leaves(torch: Any, layer: Layer, derivation: Derivation, dims: Mapping[str, int],
                 device: str) -> dict[str, Any]:
    return {t.name: (torch.zeros(_shape(layer, t.name, dims), dtype=torch.int64, device=device)
                     if t.role == "index" else
                     torch.randn(_shape(layer, t.name, dims), dtype=torch.float64, device=device,
                                 requires_grad=t.name in derivation.needs_grad))
            for t in layer.tensors if t.role != "activation"}


def check_flops(derivation: Derivation, c: Costs, sizes: Mapping[str, Mapping[str, int]],
                torch: Any) -> tuple[FlopCheck, ...]:
    """Each op's forward and backward FLOPs, and the layer totals, against
    FlopCounterMode at each named size (shapes only: the meta device)."""
    layer = derivation.layer
    rules_of: dict[int, list[int]] = {}
    for j, r in enumerate(derivation.rules):
        rules_of.setdefault(r.op, []).append(j)
    checks: list[FlopCheck] = []
    for size, dims in sizes.items():
        values = {d: sympy.Integer(v) for d, v in dims.items()}

        def num(expr: sympy.Expr) -> int:
            return int(expr.subs({dim_symbol(k): v for k, v in values.items()}))

        leaves = _meta_leaves(torch, layer, derivation, dims, "meta")
        full = _torch_forward(torch, layer, leaves, dims)  # operands of each op, autograd-connected
        for k, op in enumerate(layer.ops):
            inputs = {n: full[n].detach().requires_grad_(n in derivation.needs_grad)
                      for n in op.inputs}
            fwd = _count(torch, lambda: op.torch(torch, inputs, dims)[op.output])
            checks.append(_flop_check("forward", k + 1, op.statement(), size,
                                      num(c.forward[k].flops), fwd,
                                      [p for t in op.terms for p in _as_run(t, op.dims())] or None))
            if k not in rules_of:
                continue
            out = op.torch(torch, inputs, dims)[op.output]
            wanted = [inputs[n] for n in op.inputs if n in derivation.needs_grad]
            G = torch.ones_like(out)
            bwd = _count(torch, lambda: torch.autograd.grad(out, wanted, G))
            terms = [t for j in rules_of[k] for t in derivation.rules[j].terms]
            derived = sum(num(c.backward[j].flops) for j in rules_of[k])
            checks.append(_flop_check("backward", k + 1, op.statement(), size, derived, bwd,
                                      [*op.terms, *terms] if op.terms else None))
        # Whole-layer totals: differences are explained per op above, so never a failure.
        fresh = _meta_leaves(torch, layer, derivation, dims, "meta")
        holder: dict[str, Any] = {}
        fwd_total = _count(torch, lambda: holder.update(_torch_forward(torch, layer, fresh, dims)))
        checks.append(_flop_check("forward", None, "whole layer", size, num(c.flops_forward),
                                  fwd_total, None))
        wanted = [fresh[n] for n in fresh if n in derivation.needs_grad]
        if wanted:
            s = sum((holder[o] * torch.ones_like(holder[o])).sum() for o in layer.outputs)
            bwd_total = _count(torch, lambda: torch.autograd.grad(s, wanted, allow_unused=True))
            checks.append(_flop_check("backward", None, "whole layer", size,
                                      num(c.flops_backward), bwd_total, None))
    return tuple(checks)


def _flop_check(direction: str, op: int | None, statement: str, size: str, derived: int,
                counted: int, einsums: Sequence[Einsum] | None) -> FlopCheck:
    if counted == derived:
        return FlopCheck(direction, op, statement, size, derived, counted, "agree", True)
    status = "not counted" if counted == 0 else "differs"
    if einsums is None:
        return FlopCheck(direction, op, statement, size, derived, counted, status, True,
                         "see the per-op lines")
    reasons = list(dict.fromkeys(r for r in (convention(e) for e in einsums) if r))
    plain = all(is_plain(e) for e in einsums)
    if plain and counted:
        return FlopCheck(direction, op, statement, size, derived, counted, status, False,
                         "a plain contraction: PyTorch's bmm count should equal the derived one")
    note = "; ".join(reasons) if reasons else "PyTorch lowers this op differently"
    return FlopCheck(direction, op, statement, size, derived, counted, status, True, note)


# ----------------------------------------------------------- saved tensors --

def check_saved(derivation: Derivation, leaves: Mapping[str, np.ndarray], torch: Any,
                dims: Mapping[str, int] | None = None) -> SavedCheck:
    """Which forward tensors autograd saves, against ``derivation.saved``."""
    layer = derivation.layer
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    tleaves = {n: _torch_leaf(torch, a, n in derivation.needs_grad) for n, a in leaves.items()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        values = _torch_forward(torch, layer, tleaves, dims)
    tensors = layer.tensor_map
    by_storage: dict[int, str] = {}
    for n, v in values.items():  # leaves first: an einsum that only permutes returns a view
        by_storage.setdefault(v.untyped_storage().data_ptr(), n)
    found: dict[str, None] = {}
    copies: dict[str, None] = {}
    internal: list[str] = []
    for t in saved:
        name = by_storage.get(t.untyped_storage().data_ptr())
        copy = False
        if name is None:  # a copy made by a reshape: recognise it by its values
            flat = np.sort(t.detach().reshape(-1).numpy())
            name = next((n for n, v in values.items() if v.numel() == t.numel()
                         and np.array_equal(np.sort(v.detach().reshape(-1).numpy()), flat)), None)
            copy = name is not None
        if name is None:
            internal.append("x".join(map(str, t.shape)))
        elif not tensors[name].is_param:
            found.setdefault(name, None)
            if copy:
                copies.setdefault(name, None)
    order = [t.name for t in layer.tensors]
    torch_saved = tuple(sorted(found, key=order.index))
    notes = []
    for n in torch_saved:
        if n not in derivation.saved:
            notes.append(f"PyTorch saves {n}, which no derived rule reads")
    for n in derivation.saved:
        if n not in found:
            notes.append(f"the derived rules read {n}; PyTorch does not save it")
    for n in copies:
        notes.append(f"PyTorch saves a copy of {n} (a reshape that is not a view), not {n} itself")
    if internal:
        notes.append(f"PyTorch also saves {len(internal)} tensor(s) that are no forward tensor "
                     f"(shapes {', '.join(internal)}): intermediates of torch.einsum, such as a "
                     "partial product or an operand with a letter summed out")
    return SavedCheck(derivation.saved, torch_saved, tuple(copies), tuple(internal), tuple(notes))


# ---------------------------------------------------------------- verify --

def verify(derivation: Derivation, seed: int = 0, use_torch: bool = True) -> Report:
    """Every check of the module doc on ``derivation``; never raises for a
    wrong rule (that is a failed check in the report)."""
    layer = derivation.layer
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SymflopsError(f"--seed must be a whole number 0 or more, got {seed!r}",
                            hint="give e.g. --seed 0 or --seed 12345")
    rng = np.random.default_rng(seed)
    small = small_sizes(layer, rng)
    medium = choose_sizes(layer, rng, *MEDIUM, MEDIUM_LIMITS)
    torch = load_torch() if use_torch else None
    leaves = random_leaves(layer, small, rng)
    values = _forward_with(layer, leaves, small)
    rules = check_rules(derivation, values, small, rng, torch)
    chain = check_chain(derivation, leaves, small, rng, torch)
    notes: list[str] = []
    flops: tuple[FlopCheck, ...] = ()
    saved = None
    if torch is None:
        notes.append("PyTorch not installed: finite differences only" if use_torch
                     else "PyTorch not used (--no-torch): finite differences only")
    else:
        c = costs(derivation, "FLOPs", choice="minimum")  # the cheapest order at each size checked
        flops = check_flops(derivation, c, {"small": small, "medium": medium}, torch)
        saved = check_saved(derivation, leaves, torch, small)
    if not derivation.rules:
        notes.append("no gradient is needed: nothing to check in the backward pass")
    return Report(layer.name, layer.source, seed, small, medium,
                  None if torch is None else str(torch.__version__),
                  rules, chain, flops, saved, tuple(notes))


# ----------------------------------------------------------------- output --

def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def _dims(d: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def text_report(r: Report) -> str:
    torch = f"PyTorch {r.torch_version}" if r.torch_version else "no PyTorch"
    lines = [f"verify {r.layer} ({r.source}), seed {r.seed}, float64, {torch}",
             f"small sizes:  {_dims(r.small)}"]
    if r.flops:
        lines.append(f"medium sizes: {_dims(r.medium)} (FLOP counts only)")
    lines.append("")
    lines.append(f"backward rules, each on its own (max relative error; finite differences "
                 f"<= {FD_TOLERANCE:g}, torch.autograd <= {TORCH_TOLERANCE:g})")
    rows = [("", "rule", "fin. diff.", "autograd")]
    for c in r.rules:
        rows.append(("pass" if c.passed else "FAIL", c.statements[0], _err(c.fd_error),
                     _err(c.torch_error)))
        # Rules for one tensor from one op (diagonal and off-diagonal parts) are checked as a sum.
        rows += [("", "  + " + st, "", "") for st in c.statements[1:]]
    lines += table(rows) if r.rules else ["  (no rules)"]
    lines += [f"  {c.grad}: {c.problem}" for c in r.rules if c.problem]
    lines += ["", "gradients, rules chained through the layer (max relative error)"]
    rows = [("", "gradient", "fin. diff.", "autograd")]
    rows += [("pass" if g.passed else "FAIL", g.grad, _err(g.fd_error), _err(g.torch_error))
             for g in r.gradients]
    lines += table(rows) if r.gradients else ["  (none)"]
    lines += [f"  {g.grad}: {g.problem}" for g in r.gradients if g.problem]
    if r.flops:
        lines += ["", "FLOPs, derived vs torch.utils.flop_counter.FlopCounterMode "
                      "(derived / counted by PyTorch)"]
        sizes = list(dict.fromkeys(f.size for f in r.flops))
        rows = [("", "", "op", *sizes, "")]
        cells: dict[tuple[str, int | None], dict[str, FlopCheck]] = {}
        for f in r.flops:
            cells.setdefault((f.direction, f.op), {})[f.size] = f
        ordered = sorted(cells, key=lambda key: (key[1] is None, key[1] or 0, key[0] == "backward"))
        for key in ordered:
            by_size = cells[key]
            first = next(iter(by_size.values()))
            what = f"op {first.op}: {first.statement}" if first.op is not None else "whole layer"
            status = " / ".join(dict.fromkeys(f.status for f in by_size.values()))
            agree = all(f.status == "agree" for f in by_size.values())
            passed = all(f.passed for f in by_size.values())
            # 'note': PyTorch counts it differently by a documented convention.
            rows.append(("FAIL" if not passed else "pass" if agree else "note",
                         first.direction, what,
                         *(f"{by_size[z].derived:,} / {by_size[z].torch:,}" if z in by_size else "-"
                           for z in sizes), status))
        lines += table(rows)
        notes = list(dict.fromkeys(f"op {f.op} {f.direction}: {f.note}" for f in r.flops
                                   if f.note and f.op is not None))
        lines += [f"  note: {n}" for n in notes]
    if r.saved is not None:
        s = r.saved
        lines += ["", "saved activations (parameters excluded)",
                  f"  derived:  {', '.join(s.derived) or '(none)'}",
                  f"  autograd: {', '.join(s.torch) or '(none)'}"]
        lines += [f"  note: {n}" for n in s.notes] or ["  they agree"]
    if r.notes:
        lines += [""] + [f"note: {n}" for n in r.notes]
    checks = len(r.rules) + len(r.gradients) + len(r.flops)
    lines += ["", f"result: {'pass' if r.passed else 'FAIL'} ({checks} checks, "
                  f"{r.failures} failed)"]
    return "\n".join(lines) + "\n"


def json_ready(r: Report) -> dict[str, Any]:
    """The report as JSON values (``verify --json``): :meth:`Report.as_dict`
    with every error that could not be computed written "inf"."""
    return _finite(r.as_dict())


def _finite(value: Any) -> Any:
    """JSON has no infinity: an error that could not be computed becomes "inf"."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value
