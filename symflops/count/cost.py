"""The FLOP and memory polynomials of a derived layer.

Each op counts itself (:meth:`symflops.ops.base.Op.cost`) and each rule is
counted like any einsum (:func:`symflops.ops.einsum.cost.rule_cost`); this
module adds them up over the copies of repeated blocks, adds the accumulation
of several contributions to one gradient, and counts memory:

* memory polynomials are in elements; bytes come from a precision policy;
* parameters and gradients are counted once per copy of their block, the
  optimizer state and master weights from the policy; a parameter ``shared:``
  by a block's copies is one tensor (:meth:`~symflops.core.ir.Layer.copies`),
  with one gradient: each copy runs its rules, and adding the copies'
  contributions into that gradient costs ``(contributions - 1)·|W|``, that is
  ``(L - 1)·|W|`` a step for a block repeated L times (elementwise:
  additions, as every gradient accumulation is), kept apart as ``shared_sum``;
* buffers (``role: buffer``: constant tables the layer reads) are neither
  parameters nor activations: their elements are counted apart, their bytes
  at the policy's parameter width (a table stored like the weights), and they
  join the total bytes only;
* a saved tensor is kept in as many copies as the rule that reads it most
  often runs (:func:`saved_copies`); in inference nothing is saved and the
  largest set of live activations is reported instead.

The counting conventions (one multiply-add = 2 FLOPs, the bucket rule,
contraction orders, domains) are those of :mod:`symflops.ops.einsum.orders`
and :mod:`symflops.ops.einsum.cost`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence, get_args

import sympy

from ..derive.backward import repeat_only_gradients
from ..core.records import Derivation, OpCost
from ..ops.base import Choice, Unit
from ..ops.einsum.cost import rule_cost
from ..core.ir import Layer
from ..core.polynomial import exact_quotient, largest
from .indices import index_widths
from .precision import Precision, policy

UNITS: tuple[Unit, ...] = get_args(Unit)


@dataclass(frozen=True)
class SavedTensor:
    name: str
    elements: sympy.Expr          # of one copy
    needed_by: tuple[str, ...]
    mask: bool = False  # a dropout keep-mask, stored at the policy's mask width
    copies: sympy.Expr = sympy.Integer(1)  # copies kept: the repeats of the blocks that keep it
    #: bytes per element of an index tensor, from its range (:mod:`.indices`);
    #: None: the policy's activation (or mask) width
    width: int | None = None

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.elements * self.copies)

    def element_bytes(self, p: Precision) -> int:
        """Bytes per element under policy ``p``: an index tensor's own width, a
        keep-mask's, else the policy's activation width."""
        if self.width is not None:
            return self.width
        return p.masks if self.mask else p.activations


def _total(costs: tuple[OpCost, ...], copies: tuple[sympy.Expr, ...], kind: str) -> sympy.Expr:
    return sympy.expand(sympy.Add(*(getattr(c, kind) * n for c, n in zip(costs, copies))))


@dataclass(frozen=True)
class Costs:
    """Every polynomial symflops reports for one layer.  ``forward`` and
    ``backward`` hold the cost of one copy of each op and rule; an op inside
    a repeated block runs ``forward_copies`` times (the product of the
    repeats), and the totals count every copy (each total is worked out
    once, when first read)."""

    unit: Unit
    precision: Precision
    forward: tuple[OpCost, ...]       # one per forward op, in layer order
    backward: tuple[OpCost, ...]      # one per rule, in derivation order
    accumulate: sympy.Expr            # adds that sum several rules into one gradient
    params: sympy.Expr
    trainable: sympy.Expr
    saved: tuple[SavedTensor, ...]
    inference_peak: sympy.Expr
    forward_copies: tuple[sympy.Expr, ...] = ()
    backward_copies: tuple[sympy.Expr, ...] = ()
    buffers: sympy.Expr = sympy.Integer(0)  # elements of the buffers, every copy
    #: the part of ``accumulate`` that sums the copies' gradients of shared parameters
    shared_sum: sympy.Expr = sympy.Integer(0)

    def __post_init__(self) -> None:
        if not self.forward_copies:
            object.__setattr__(self, "forward_copies", (sympy.Integer(1),) * len(self.forward))
        if not self.backward_copies:
            object.__setattr__(self, "backward_copies", (sympy.Integer(1),) * len(self.backward))

    @functools.cached_property
    def flops_forward(self) -> sympy.Expr:
        return _total(self.forward, self.forward_copies, "flops")

    @functools.cached_property
    def flops_backward(self) -> sympy.Expr:
        return _total(self.backward, self.backward_copies, "flops")

    @functools.cached_property
    def flops_total(self) -> sympy.Expr:
        return sympy.expand(self.flops_forward + self.flops_backward)

    @functools.cached_property
    def elementwise_forward(self) -> sympy.Expr:
        return _total(self.forward, self.forward_copies, "elementwise")

    @functools.cached_property
    def elementwise_backward(self) -> sympy.Expr:
        return sympy.expand(_total(self.backward, self.backward_copies, "elementwise")
                            + self.accumulate)

    @functools.cached_property
    def activations(self) -> sympy.Expr:
        return sympy.expand(sum((s.total for s in self.saved), sympy.Integer(0)))

    def at(self, precision: Precision) -> Costs:
        """The same counts under another precision policy: a policy turns
        elements into bytes and adds optimizer state, read off ``precision``
        when asked (:meth:`memory`); it changes no polynomial held here, so
        the totals already worked out are handed on, not worked out again."""
        if precision == self.precision:
            return self
        out = dataclasses.replace(self, precision=precision)
        out.__dict__.update((k, v) for k, v in self.__dict__.items() if k in _TOTALS)
        return out

    def per_param(self, flops: sympy.Expr) -> sympy.Expr | None:
        """``flops / params`` when that is a polynomial (e.g. 6*B for 12*B*D*F
        over 2*D*F), else None."""
        if self.params == 0:
            return None
        return exact_quotient(flops, self.params)

    def memory(self) -> dict[str, sympy.Expr]:
        """Element counts and bytes, keyed as in ``symflops derive --json``."""
        p = self.precision
        fixed = (self.params * p.params + self.trainable * p.grads
                 + self.trainable * p.optimizer_states * p.optimizer + self.trainable * p.master)
        act_bytes = sum((s.total * s.element_bytes(p) for s in self.saved),
                        sympy.Integer(0))
        buffer_bytes = self.buffers * p.params
        return {
            "params": self.params,
            "grads": self.trainable,
            "optimizer": self.trainable * p.optimizer_states,
            "activations": self.activations,
            "inference_peak": self.inference_peak,
            "params_bytes": self.params * p.params,
            "grads_bytes": self.trainable * p.grads,
            "optimizer_bytes": self.trainable * p.optimizer_states * p.optimizer,
            "master_bytes": self.trainable * p.master,
            "fixed_bytes": sympy.expand(fixed),
            "activation_bytes": sympy.expand(act_bytes),
            "total_bytes": sympy.expand(fixed + act_bytes + buffer_bytes),
            # zero, hence left out of --json, for a layer without buffers
            "buffers": self.buffers,
            "buffers_bytes": buffer_bytes,
        }


#: The totals :class:`Costs` works out when first read: polynomials in
#: elements, the same under every precision policy (:meth:`Costs.at`).
_TOTALS = frozenset(("flops_forward", "flops_backward", "flops_total", "elementwise_forward",
                     "elementwise_backward", "activations"))


def _inference_peak(layer: Layer) -> sympy.Expr:
    """Largest sum of live activation elements while running the forward pass
    (parameters excluded): an op's operands and its output are live together,
    and a tensor dies after its last reader."""
    tensors = layer.tensor_map
    last_use: dict[str, int] = {}
    for k, op in enumerate(layer.ops):
        for name in op.inputs:
            last_use[name] = k
    outputs = set(layer.outputs)
    candidates = []
    live: set[str] = {t.name for t in layer.tensors if t.role in ("input", "index")}
    # the live elements kept as a running sum (an expanded polynomial is one
    # expression whatever order its terms were added in): each op adds its
    # output and takes away the tensors that die after it
    total = sympy.expand(sum((tensors[n].elements for n in sorted(live)), sympy.Integer(0)))
    for k, op in enumerate(layer.ops):
        if op.output not in live:
            live.add(op.output)
            total = sympy.expand(total + tensors[op.output].elements)
        candidates.append(total)
        dead = sorted(n for n in live if not (last_use.get(n, -1) > k or n in outputs))
        if dead:
            live.difference_update(dead)
            total = sympy.expand(total - sum((tensors[n].elements for n in dead),
                                             sympy.Integer(0)))
    return largest(candidates)


def saved_blocks(layer: Layer, derivation: Derivation, name: str) -> tuple:
    """The blocks whose copies each keep their own copy of a saved tensor:
    those of the deepest rule that reads it (see :func:`saved_copies`)."""
    owners = [layer.blocks_of(layer.ops[r.op].output) for r in derivation.rules if name in r.reads]
    return max(owners, key=len, default=())


def saved_copies(derivation: Derivation, runs: Sequence[sympy.Expr], name: str) -> sympy.Expr:
    """Copies of a saved tensor in the unrolled network: as many as the rule
    that reads it most often runs (``runs``, from :func:`rule_copies`).  Each
    run of a rule reads its own copy: a tensor made and read inside a
    repeated block exists once per copy; a block's bound input once per copy
    that reads it (the first copy's input, then each copy's output, which is
    the next copy's input; only L - 1 of them when just the gradient that the
    first copy need not compute reads it); a block's output read after the
    block, once (the last copy's: the others are the next copies' inputs,
    counted there)."""
    readers = [n for r, n in zip(derivation.rules, runs) if name in r.reads]
    return largest(readers) if readers else sympy.Integer(0)


def rule_copies(layer: Layer, derivation: Derivation) -> tuple[sympy.Expr, ...]:
    """How many times each rule runs: its op's copies, less one copy when only
    the later copies of a repeated block need the gradient it computes."""
    later = repeat_only_gradients(layer)
    out = []
    for r in derivation.rules:
        blocks = layer.blocks_of(layer.ops[r.op].output)
        n = sympy.Mul(*(b.repeat for b in blocks))
        if r.wrt in later and blocks:
            n = n * (blocks[-1].repeat - 1) / blocks[-1].repeat
        out.append(sympy.expand(n))
    return tuple(out)


def costs(derivation: Derivation, unit: Unit = "FLOPs", precision: Precision | str | None = None,
          choice: Choice = "declared") -> Costs:
    """All FLOP and memory polynomials of ``derivation``; ``choice`` says how
    a count is chosen where a term's cheapest orders cross (see :data:`Choice`)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}")
    layer = derivation.layer
    prec = precision if isinstance(precision, Precision) else policy(precision or layer.precision)
    return _counted(derivation, unit, prec, choice)


@functools.lru_cache(maxsize=32)
def _counted(derivation: Derivation, unit: Unit, prec: Precision, choice: Choice) -> Costs:
    """:func:`costs`, once per derivation and convention in a process (a
    sheet, its figures and its page ask for the same counts several times;
    a :class:`Costs` is never changed, its totals only filled in when read)."""
    layer = derivation.layer
    sizes = layer.sizes
    forward = tuple(op.cost(unit, layer.forward_order, sizes, choice) for op in layer.ops)
    backward = tuple(rule_cost(r, unit, sizes, choice) for r in derivation.rules)
    forward_copies = tuple(layer.copies(op.output) for op in layer.ops)
    backward_copies = rule_copies(layer, derivation)
    # Gradient accumulation: a tensor reached by n rules needs n - 1 additions.
    counts: dict[str, int] = {}
    runs: dict[str, sympy.Expr] = {}
    for r, n in zip(derivation.rules, backward_copies):
        counts[r.wrt] = counts.get(r.wrt, 0) + 1
        runs.setdefault(r.wrt, n)
    tensors = layer.tensor_map
    shared = {name for name in counts if layer.sharing(name)}
    accumulate = sympy.expand(sum(((n - 1) * tensors[name].elements * runs[name]
                                   for name, n in counts.items() if name not in shared),
                                  sympy.Integer(0)))
    # One gradient of a shared parameter: every run of every rule reaching it
    # is a contribution, and all but one per copy of the tensor are additions.
    contributions: dict[str, sympy.Expr] = {}
    for r, n in zip(derivation.rules, backward_copies):
        if r.wrt in shared:
            contributions[r.wrt] = contributions.get(r.wrt, sympy.Integer(0)) + n
    shared_sum = sympy.expand(sum(((c - layer.copies(name)) * tensors[name].elements
                                   for name, c in contributions.items()), sympy.Integer(0)))
    accumulate = sympy.expand(accumulate + shared_sum)
    params = sympy.expand(sum((t.elements * layer.copies(t.name) for t in layer.params),
                              sympy.Integer(0)))
    trainable = sympy.expand(sum((t.elements * layer.copies(t.name) for t in layer.params
                                  if t.requires_grad), sympy.Integer(0)))
    widths = index_widths(layer)
    saved = tuple(SavedTensor(n, tensors[n].elements, derivation.needed_by(n),
                              tensors[n].role == "mask", saved_copies(derivation, backward_copies, n),
                              widths.get(n))
                  for n in derivation.saved)
    buffers = sympy.expand(sum((t.elements * layer.copies(t.name) for t in layer.buffers),
                               sympy.Integer(0)))
    return Costs(unit, prec, forward, backward, accumulate, params, trainable, saved,
                 _inference_peak(layer), forward_copies, backward_copies, buffers, shared_sum)
