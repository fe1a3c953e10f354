"""FLOP and memory polynomials of a derived layer.

Conventions (stated on every sheet and in ``--json``):

* one multiply-add is 2 FLOPs; with ``unit="MACs"`` every product costs one
  MAC per term instead (multiply-accumulates, as fvcore, ptflops and thop report).
* each einsum term is contracted pairwise (:mod:`symflops.core.contraction`
  counts each step and puts it in a bucket by one rule): forward terms in the
  order written (or the cheapest, with ``forward_order: cheapest``), backward
  rules in the cheapest order.  Where the cheapest orders cross, the count is
  the one cheapest at the declared ``sizes:``, else the least of them.
* ``flops`` counts the contraction steps (matrix products, the 6N
  convention); everything else is ``elementwise``: other products, scaling by
  a constant, pointwise functions, adding terms and gradient contributions.
* memory polynomials are in elements; bytes come from a precision policy.
* a where-clause restricts the domain: a step whose letters include both
  letters of a condition ``t <= s`` counts the terms inside the domain only,
  in closed form (:mod:`symflops.core.domain`: ``S(S+1)/2`` pairs for ``t <= s``
  over ``S``).  A lookup ``[v = tok[b]]`` leaves one ``v`` per ``b``: it
  multiplies nothing, and ``v`` is counted as ``tok``'s letters (a gather
  copies; its backward, a scatter-add, adds once per element read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import sympy

from ..core.contraction import Candidate, Order, bounds_of, candidate, cheapest, size, tree_text, written
from ..derive.backward import repeat_only_gradients
from ..core.records import Derivation, OpCost, Rule, TermOrders
from ..ops.functions import cost as function_cost
from ..core.ir import Contraction, Einsum, Layer, dim_symbol
from ..core.polynomial import Cheapest, Least, dominated, exact_quotient, largest, terms
from .precision import Precision, policy

UNITS = ("FLOPs", "MACs")
#: How a count is chosen where a term's cheapest orders cross (their costs
#: compare differently at different sizes): ``declared`` takes the order
#: cheapest at the declaration's ``sizes:`` (their minimum where none are
#: declared); ``minimum`` is always the minimum, which the commands that
#: evaluate at given sizes use, so that each size gets its cheapest order.
Choice = Literal["declared", "minimum"]


def einsum_flops(e: Einsum, extents: Mapping[str, sympy.Expr], unit: str = "FLOPs",
                 order: Order = "written") -> sympy.Expr:
    """All the work of contracting ``e``'s operands pairwise in ``order``
    (both buckets; see :mod:`symflops.core.contraction`); for ``cheapest`` orders
    whose costs cross, the least of them.

    >>> from symflops.core.ir import Einsum, Factor
    >>> M, N, K = sympy.symbols("M N K", positive=True)
    >>> mm = Einsum(Factor("C", ("m", "n")), (Factor("A", ("m", "k")), Factor("B", ("k", "n"))))
    >>> einsum_flops(mm, {"m": M, "n": N, "k": K})
    2*K*M*N
    """
    if order == "written" or len(e.factors) <= 2:
        return candidate(e, extents, unit, written(len(e.factors))).total
    found = cheapest(e, extents, unit)
    return found[0].total if len(found) == 1 else Least(*(c.total for c in found))


def einsum_elementwise(e: Einsum, extents: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """FLOPs outside the contraction: one multiply per output element for a
    constant coefficient other than 1 (and -1, a sign flip), and each
    pointwise function at its documented cost per element of its operand."""
    total = sympy.Integer(0)
    bounds = bounds_of(e)
    for f in e.factors:
        if f.fn:
            total += function_cost(f.fn) * size(set(f.indices), extents, bounds)
    if e.coefficient in (1, -1, 0) or not e.factors:
        return total
    return total + size(set(e.output.indices) & {i for f in e.operands for i in f.indices},
                        extents, bounds)


def _choose(found: tuple[Candidate, ...], sizes: tuple[tuple[str, int], ...]) -> list[int]:
    """The positions of the candidates cheapest at ``sizes`` (several when
    dims the sizes leave out still decide; all of them without sizes)."""
    if not sizes:
        return list(range(len(found)))
    at = {dim_symbol(n): sympy.Integer(v) for n, v in sizes}
    totals = [sympy.expand(c.total.xreplace(at)) for c in found]
    if all(t.is_number for t in totals):
        return [totals.index(min(totals))]
    gens = tuple(sorted(set().union(*(t.free_symbols for t in totals)), key=str))
    polys = [terms(t, gens) for t in totals]
    return [k for k in range(len(found))
            if not any(j != k and dominated(polys[j], polys[k])
                       and not (dominated(polys[k], polys[j]) and k < j) for j in range(len(found)))]


def _minimum(found: Sequence[Candidate]) -> tuple[sympy.Expr, sympy.Expr]:
    """``(flops, elementwise)`` of whichever candidate costs least."""
    if len(found) == 1:
        return found[0].flops, found[0].elementwise
    if len({c.elementwise for c in found}) == 1:
        return Least(*(c.flops for c in found)), found[0].elementwise
    if len({c.flops for c in found}) == 1:
        return found[0].flops, Least(*(c.elementwise for c in found))
    totals = [c.total for c in found]
    least = [sympy.And(*(sympy.Le(totals[k], t, evaluate=False) for j, t in enumerate(totals)
                         if j != k), evaluate=False) for k in range(len(found))]
    return (Cheapest(*((c.flops, w) for c, w in zip(found[:-1], least)), (found[-1].flops, True)),
            Cheapest(*((c.elementwise, w) for c, w in zip(found[:-1], least)),
                     (found[-1].elementwise, True)))


def term_cost(e: Einsum, extents: Mapping[str, sympy.Expr], unit: str, order: Order,
              sizes: tuple[tuple[str, int], ...] = (), choice: Choice = "declared", term: int = 0
              ) -> tuple[sympy.Expr, sympy.Expr, TermOrders | None]:
    """``(flops, elementwise, orders)`` of one term counted in ``order``;
    ``orders`` records the crossing candidates of a cheapest order, if any."""
    if order == "written" or len(e.factors) <= 2:
        c = candidate(e, extents, unit, written(len(e.factors)))
        return c.flops, c.elementwise, None
    found = cheapest(e, extents, unit)
    if len(found) == 1:
        return found[0].flops, found[0].elementwise, None
    left = _choose(found, sizes if choice == "declared" else ())
    chosen = left[0] if len(left) == 1 else None
    flops, elementwise = _minimum([found[k] for k in left])
    return flops, elementwise, TermOrders(term, tuple(tree_text(e, c.tree) for c in found), found,
                                          chosen, sizes if chosen is not None else ())


@dataclass(frozen=True)
class SavedTensor:
    name: str
    elements: sympy.Expr          # of one copy
    needed_by: tuple[str, ...]
    mask: bool = False  # a dropout keep-mask, stored at the policy's mask width
    copies: sympy.Expr = sympy.Integer(1)  # copies kept: the repeats of the blocks that keep it

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.elements * self.copies)


def _total(costs: tuple[OpCost, ...], copies: tuple[sympy.Expr, ...], kind: str) -> sympy.Expr:
    return sympy.expand(sum((getattr(c, kind) * n for c, n in zip(costs, copies)), sympy.Integer(0)))


@dataclass(frozen=True)
class Costs:
    """Every polynomial symflops reports for one layer.  ``forward`` and
    ``backward`` hold the cost of one copy of each op and rule; an op inside
    a repeated block runs ``forward_copies`` times (the product of the
    repeats), and the totals count every copy."""

    unit: str
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

    def __post_init__(self) -> None:
        if not self.forward_copies:
            object.__setattr__(self, "forward_copies", (sympy.Integer(1),) * len(self.forward))
        if not self.backward_copies:
            object.__setattr__(self, "backward_copies", (sympy.Integer(1),) * len(self.backward))

    @property
    def flops_forward(self) -> sympy.Expr:
        return _total(self.forward, self.forward_copies, "flops")

    @property
    def flops_backward(self) -> sympy.Expr:
        return _total(self.backward, self.backward_copies, "flops")

    @property
    def flops_total(self) -> sympy.Expr:
        return sympy.expand(self.flops_forward + self.flops_backward)

    @property
    def elementwise_forward(self) -> sympy.Expr:
        return _total(self.forward, self.forward_copies, "elementwise")

    @property
    def elementwise_backward(self) -> sympy.Expr:
        return sympy.expand(_total(self.backward, self.backward_copies, "elementwise")
                            + self.accumulate)

    @property
    def activations(self) -> sympy.Expr:
        return sympy.expand(sum((s.total for s in self.saved), sympy.Integer(0)))

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
        act_bytes = sum((s.total * (p.masks if s.mask else p.activations) for s in self.saved),
                        sympy.Integer(0))
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
            "total_bytes": sympy.expand(fixed + act_bytes),
        }


def rule_cost(rule: Rule, unit: str, sizes: tuple[tuple[str, int], ...] = (),
              choice: Choice = "declared") -> OpCost:
    """A rule's terms, each in its cheapest order, step by step in their
    buckets; the additions joining its terms are elementwise."""
    extents = rule.dims()
    flops = elementwise = sympy.Integer(0)
    orders = []
    for k, t in enumerate(rule.terms):
        f, w, crossing = term_cost(t, extents, unit, "cheapest", sizes, choice, k)
        flops += f
        elementwise += w + einsum_elementwise(t, extents)
        orders += [crossing] if crossing else []
    elementwise += (len(rule.terms) - 1) * _grad_elements(rule)
    return OpCost(sympy.expand(flops), sympy.expand(elementwise), tuple(orders))


def op_cost(op: Contraction, unit: str, order: Order = "written",
            sizes: tuple[tuple[str, int], ...] = (), choice: Choice = "declared") -> OpCost:
    """A forward op: each term step by step in its bucket (in ``order``), its
    constant factors and pointwise functions, and the additions between terms."""
    extents = op.dims()
    flops = elementwise = sympy.Integer(0)
    orders = []
    for k, t in enumerate(op.terms):
        f, w, crossing = term_cost(t, extents, unit, order, sizes, choice, k)
        flops += f
        elementwise += w + einsum_elementwise(t, extents)
        orders += [crossing] if crossing else []
    elementwise += (len(op.terms) - 1) * size(set(op.out.indices), extents)
    return OpCost(sympy.expand(flops), sympy.expand(elementwise), tuple(orders))


def _grad_elements(rule: Rule) -> sympy.Expr:
    return size(set(rule.terms[0].output.indices), rule.dims())


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
    for k, op in enumerate(layer.ops):
        live.add(op.output)
        candidates.append(sympy.expand(sum((tensors[n].elements for n in sorted(live)),
                                           sympy.Integer(0))))
        live = {n for n in live if last_use.get(n, -1) > k or n in outputs}
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


def costs(derivation: Derivation, unit: str = "FLOPs", precision: Precision | str | None = None,
          choice: Choice = "declared") -> Costs:
    """All FLOP and memory polynomials of ``derivation``; ``choice`` says how
    a count is chosen where a term's cheapest orders cross (see :data:`Choice`)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}")
    layer = derivation.layer
    prec = precision if isinstance(precision, Precision) else policy(precision or layer.precision)
    sizes = layer.sizes
    forward = tuple(op_cost(op, unit, layer.forward_order, sizes, choice)
                    if isinstance(op, Contraction) else op.cost(unit) for op in layer.ops)
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
    accumulate = sympy.expand(sum(((n - 1) * tensors[name].elements * runs[name]
                                   for name, n in counts.items()), sympy.Integer(0)))
    params = sympy.expand(sum((t.elements * layer.copies(t.name) for t in layer.params),
                              sympy.Integer(0)))
    trainable = sympy.expand(sum((t.elements * layer.copies(t.name) for t in layer.params
                                  if t.requires_grad), sympy.Integer(0)))
    saved = tuple(SavedTensor(n, tensors[n].elements, derivation.needed_by(n),
                              tensors[n].role == "mask", saved_copies(derivation, backward_copies, n))
                  for n in derivation.saved)
    return Costs(unit, prec, forward, backward, accumulate, params, trainable, saved,
                 _inference_peak(layer), forward_copies, backward_copies)
