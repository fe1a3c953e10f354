"""FLOP and memory polynomials of a derived layer.

Conventions (stated on every sheet and in ``--json``):

* one multiply-add is 2 FLOPs.  A pairwise product that sums over some index
  costs ``2 * (product of the extents of all its distinct indices)``; one that
  sums over nothing (outer or elementwise product) costs ``1 *`` that product,
  as opt_einsum counts them.  Operands are contracted pairwise in the order they
  are written.  A single-operand reduction costs one add per element read; a
  copy or broadcast costs nothing.
* with ``unit="MACs"`` every pairwise product costs one MAC per term instead
  (multiply-accumulates, as fvcore, ptflops and thop report).
* ``flops`` counts contractions only (the 6N convention); scaling by a constant
  and adding gradient contributions are counted apart in ``elementwise``.
* memory polynomials are in elements; bytes come from a precision policy.
* a where-clause restricts the domain: a step whose indices include both
  letters of a condition ``t <= s`` counts the terms inside the domain only,
  ``sympy.summation`` over it (``S(S+1)/2`` pairs for ``t <= s`` over ``S``).
  A lookup ``[v = tok[b]]`` leaves one ``v`` per ``b``: it multiplies nothing,
  and ``v`` is counted as ``tok``'s letters (a gather copies; its backward, a
  scatter-add, adds once per element read).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

import sympy

from .derive import Derivation, Rule, repeat_only_gradients
from .functions import cost as function_cost
from .polynomial import exact_quotient, largest
from .ir import Contraction, Einsum, Factor, Layer, comparison, selections
from .precision import Precision, policy

UNITS = ("FLOPs", "MACs")


def _size(indices: set[str] | frozenset[str], extents: Mapping[str, sympy.Expr],
          conditions: tuple[tuple[str, str, bool], ...] = ()) -> sympy.Expr:
    """How many index tuples ``indices`` range over: the product of their
    extents, or, where ``conditions`` ``(low, high, strict)`` bound some of
    them, the sum of 1 over that domain (by ``sympy.summation``)."""
    applied = [c for c in conditions if c[0] in indices and c[1] in indices]
    if not applied:
        return sympy.Mul(*(extents[i] for i in sorted(indices)))
    bound = {x for c in applied for x in c[:2]}
    free = sympy.Mul(*(extents[i] for i in sorted(indices) if i not in bound))
    count = _domain_size(tuple(sorted(applied)), tuple((x, extents[x]) for x in sorted(bound)))
    return sympy.expand(free * count)


@functools.lru_cache(maxsize=1024)
def _domain_size(applied: tuple[tuple[str, str, bool], ...],
                 extents: tuple[tuple[str, sympy.Expr], ...]) -> sympy.Expr:
    """The number of tuples of the ``extents`` letters that satisfy every
    condition ``(low, high, strict)`` of ``applied`` (remembered: causal
    attention asks the same question for every term and rule)."""
    extent = dict(extents)
    symbols = {x: sympy.Dummy(x, integer=True, positive=True) for x in extent}
    order: list[str] = []  # every low letter before its high letters: summed inside them
    while len(order) < len(extent):
        ready = sorted(x for x in extent if x not in order
                       and all(low in order for low, high, _ in applied if high == x))
        order.append(ready[0])
    count: sympy.Expr = sympy.Integer(1)
    for x in order:
        uppers = []
        for low, high, strict in applied:
            if low == x:
                top = symbols[high] - (1 if strict else 0)
                uppers.append(top if extent[high] == extent[x] else sympy.Min(extent[x], top))
        upper = sympy.Min(*uppers) if len(uppers) > 1 else uppers[0] if uppers else extent[x]
        count = sympy.summation(count, (symbols[x], 1, upper))
    return count


def _conditions(e: Einsum) -> tuple[tuple[str, str, bool], ...]:
    return tuple(comparison(f) for f in e.operands if f.is_comparison)


def _start(e: Einsum) -> tuple[list[set[str]], list[set[str]]]:
    """The index sets of ``e``'s operands and its pending conditions, before
    any step.  Indicators are not operands: a lookup's letter stands for tok's
    letters, and a condition keeps its letters alive until a step holds both."""
    chosen = selections(e.operands)
    sets = [{j for i in f.indices for j in chosen.get(i, (i,))} for f in e.factors]
    return sets, [set(c[:2]) for c in _conditions(e)]


def _step(sets: list[set[str]], pending: list[set[str]], out: set[str], i: int, j: int
          ) -> tuple[set[str], bool, list[set[str]], list[set[str]]]:
    """One pairwise step (operands ``i`` and ``j``): the indices it spans,
    whether it sums over one, and the operand sets and pending conditions after it."""
    a, b = sets[i], sets[j]
    rest = [s for k, s in enumerate(sets) if k not in (i, j)]
    union = a | b
    keep = {x for x in union if x in out or any(x in s for s in rest)
            or any(x in p and not p <= union for p in pending)}
    return union, bool(union - keep), rest + [keep], [p for p in pending if not p <= union]


def _steps(e: Einsum, path: list[tuple[int, int]]) -> list[tuple[set[str], bool]]:
    """The pairwise steps of ``path``: for each, the indices it spans and
    whether it sums over one (a multiply-add) or not (a multiply).  A final
    single-operand reduction, when an index is left to sum, is a step too."""
    out = set(e.output.indices)
    sets, pending = _start(e)
    steps = []
    for i, j in path:
        union, summed, sets, pending = _step(sets, pending, out, i, j)
        steps.append((union, summed))
    if len(sets) == 1 and sets[0] - out:
        steps.append((sets[0], True))
    return steps


def contraction_path(e: Einsum, extents: Mapping[str, sympy.Expr],
                     order: str = "declared") -> list[tuple[int, int]]:
    """The pairwise order used to count ``e``.

    ``declared``: left to right as written.  ``equal-sizes``: the cheapest
    order when every dimension has the same large size (that is, the lowest
    degree of the cost polynomial); ties keep the earliest order in
    enumeration (pairs ``(i, j)``, ``i < j``, in lexicographic order at each
    step), which is left to right.  Backward rules use this, since no one
    declared their order.  The search is depth first over every pairwise
    order, dropping a partial order once it costs as much as the best whole one.
    """
    n = len(e.factors)
    declared = [(0, 1)] * max(n - 1, 0)
    if order == "declared" or n <= 2:
        return declared
    if n > 6:  # exhaustive search grows too fast; keep the written order
        return declared
    # The order depends on the letters' pattern and extents only: searched once
    # per pattern (a model's rules repeat its blocks' under other names).
    letter = {x: f"i{k}" for k, x in enumerate(e.indices)}
    pattern = Einsum(Factor("Y", tuple(letter[i] for i in e.output.indices)),
                     tuple(Factor(f"X{k}", tuple(letter[i] for i in f.indices), fn=f.fn)
                           for k, f in enumerate(e.operands)))
    return list(_cheapest(pattern, tuple((letter[x], extents[x]) for x in e.indices
                                         if x in extents)))


@functools.lru_cache(maxsize=4096)
def _cheapest(e: Einsum, index_extents: tuple[tuple[str, sympy.Expr], ...]
              ) -> tuple[tuple[int, int], ...]:
    """The search of :func:`contraction_path` for ``equal-sizes``."""
    extents = dict(index_extents)
    symbols = set().union(*(x.free_symbols for x in extents.values()))
    probe = {s: 1009 for s in symbols}
    conditions = _conditions(e)
    sizes: dict[frozenset[str], int] = {}  # many orders share their steps' index sets
    out = set(e.output.indices)

    def size(span: set[str]) -> int:
        key = frozenset(span)
        if key not in sizes:
            sizes[key] = int(_size(span, extents, conditions).subs(probe))
        return sizes[key]

    best: list = [None, []]  # score, path

    def search(sets: list[set[str]], pending: list[set[str]], path: list[tuple[int, int]],
               score: int) -> None:
        if best[0] is not None and score >= best[0]:
            return
        if len(sets) == 1:
            if sets[0] - out:
                score += 2 * size(sets[0])
            if best[0] is None or score < best[0]:
                best[0], best[1] = score, path
            return
        for i in range(len(sets)):
            for j in range(i + 1, len(sets)):
                union, summed, after, left = _step(sets, pending, out, i, j)
                search(after, left, path + [(i, j)], score + size(union) * (2 if summed else 1))

    search(*_start(e), [], 0)
    return tuple(best[1])


def einsum_flops(e: Einsum, extents: Mapping[str, sympy.Expr], unit: str = "FLOPs",
                 order: str = "declared") -> sympy.Expr:
    """Contraction cost of ``e``, contracting operands pairwise in ``order``.

    >>> from symflops.ir import Einsum, Factor
    >>> M, N, K = sympy.symbols("M N K", positive=True)
    >>> mm = Einsum(Factor("C", ("m", "n")), (Factor("A", ("m", "k")), Factor("B", ("k", "n"))))
    >>> einsum_flops(mm, {"m": M, "n": N, "k": K})
    2*K*M*N
    """
    if not e.factors:
        return sympy.Integer(0)
    total = sympy.Integer(0)
    conditions = _conditions(e)
    for span, summed in _steps(e, contraction_path(e, extents, order)):
        if len(e.factors) == 1:  # a lone reduction: one add per element read
            total += _size(span, extents, conditions)
        else:
            total += (2 if summed and unit == "FLOPs" else 1) * _size(span, extents, conditions)
    return sympy.expand(total)


def einsum_elementwise(e: Einsum, extents: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """FLOPs outside the contraction: one multiply per output element for a
    constant coefficient other than 1 (and -1, a sign flip), and each
    pointwise function at its documented cost per element of its operand."""
    total = sympy.Integer(0)
    conditions = _conditions(e)
    for f in e.factors:
        if f.fn:
            total += function_cost(f.fn) * _size(set(f.indices), extents, conditions)
    if e.coefficient in (1, -1, 0) or not e.factors:
        return total
    return total + _size(set(e.output.indices) & {i for f in e.operands for i in f.indices},
                         extents, conditions)


@dataclass(frozen=True)
class OpCost:
    """Cost of one forward op or one backward rule."""

    flops: sympy.Expr
    elementwise: sympy.Expr


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


def rule_cost(rule: Rule, unit: str) -> OpCost:
    """A rule's products count as ``flops`` when its forward term was
    matmul-type (summed over an index), else as elementwise work."""
    extents = rule.dims()
    products = sympy.expand(sum((einsum_flops(t, extents, unit, "equal-sizes") for t in rule.terms),
                                sympy.Integer(0)))
    other = sympy.expand(sum((einsum_elementwise(t, extents) for t in rule.terms), sympy.Integer(0))
                         + (len(rule.terms) - 1) * _grad_elements(rule))
    if rule.matmul:
        return OpCost(products, other)
    return OpCost(sympy.Integer(0), sympy.expand(products + other))


def op_cost(op: Contraction, unit: str) -> OpCost:
    """A forward op: each matmul-type term (one that sums over an index) in
    ``flops``; elementwise terms, pointwise functions, constant factors and
    the additions between terms as elementwise work."""
    extents = op.dims()
    flops = elementwise = sympy.Integer(0)
    for t in op.terms:
        work = einsum_flops(t, extents, unit)
        if t.contracted:
            flops += work
        else:
            elementwise += work
        elementwise += einsum_elementwise(t, extents)
    elementwise += (len(op.terms) - 1) * _size(set(op.out.indices), extents)
    return OpCost(sympy.expand(flops), sympy.expand(elementwise))


def _grad_elements(rule: Rule) -> sympy.Expr:
    extents = rule.dims()
    return _size(set(rule.terms[0].output.indices), extents)


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
    """The blocks whose every copy keeps its own copy of a saved tensor: the
    tensor's own blocks, or, for a tensor a repeated block reads from outside
    (its bound input), that block's, since each copy saves its own input.
    The deepest nesting wins."""
    owners = [layer.blocks_of(name)]
    for r in derivation.rules:
        if name in r.reads:
            owners.append(layer.blocks_of(layer.ops[r.op].output))
    return max(owners, key=len)


def saved_copies(layer: Layer, derivation: Derivation, name: str) -> sympy.Expr:
    """Copies of a saved tensor in the unrolled network (see :func:`saved_blocks`)."""
    return sympy.Mul(*(b.repeat for b in saved_blocks(layer, derivation, name)))


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


def costs(derivation: Derivation, unit: str = "FLOPs", precision: Precision | str | None = None) -> Costs:
    """All FLOP and memory polynomials of ``derivation``."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}")
    layer = derivation.layer
    prec = precision if isinstance(precision, Precision) else policy(precision or layer.precision)
    forward = tuple(op_cost(op, unit) if isinstance(op, Contraction) else op.cost(unit)
                    for op in layer.ops)
    backward = tuple(rule_cost(r, unit) for r in derivation.rules)
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
                              tensors[n].role == "mask", saved_copies(layer, derivation, n))
                  for n in derivation.saved)
    return Costs(unit, prec, forward, backward, accumulate, params, trainable, saved,
                 _inference_peak(layer), forward_copies, backward_copies)
