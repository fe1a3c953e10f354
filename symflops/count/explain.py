"""The counts a sheet explains, as records: how each op's count arises, what a
lookup, a shift or a condition does to it, when each order of a crossing
term is the cheapest, the numbers at each configuration and the whole model.

:func:`explain` computes all of it once per declaration, from the
derivation and its costs; the sheet (:mod:`symflops.sheets`) only formats
these records, in either format.  Every record is frozen and holds SymPy
expressions (or, for the numbers table, the exact numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Mapping, Sequence, Union

import sympy

from .cost import Costs, costs as count_costs
from .evaluate import example_config, find_example, number
from .indices import check_index_widths
from .padding import PaddedReads, padded_reads
from .records import WholeModel
from .summary import whole_model
from ..core.ir import SHIFT, Einsum, Factor, Layer, substitute
from ..core.polynomial import exact_quotient
from ..core.records import Derivation, OpCost, TermOrders, grad_name
from ..ops.einsum.cost import einsum_flops
from ..ops.einsum.orders import bounds_of, size, steps, written


@dataclass(frozen=True)
class PairwiseCount:
    """A one-term, two-operand op's count from its one pairwise step:
    ``factor x outputs x inner`` for a sum of products (``kind`` 'sum'),
    ``outputs`` products otherwise.  ``outputs`` and ``inner`` are the
    products of their letters' extents, as written (not expanded)."""

    kind: Literal["sum", "products"]
    outputs: sympy.Expr
    inner: sympy.Expr
    #: what one multiply-add counts: 2 FLOPs or 1 MAC
    factor: int
    total: sympy.Expr


@dataclass(frozen=True)
class Scatter:
    """A lookup's backward: ``grad`` scatter-adds ``elementwise`` adds, one
    per element of ``read`` (the op's output gradient)."""

    grad: str
    read: str
    elementwise: sympy.Expr


@dataclass(frozen=True)
class LookupNote:
    """A lookup copies: each of ``elements`` elements of ``output`` copies an
    element of ``tables`` that ``selectors`` select; as a dense product with
    the one-hot matrices ``onehot`` it would cost ``dense``."""

    output: str
    elements: sympy.Expr
    tables: tuple[str, ...]
    selectors: tuple[str, ...]
    onehot: tuple[Factor, ...]
    dense: sympy.Expr
    scatters: tuple[Scatter, ...]
    #: the term is the table alone (a copy); else the selected elements
    #: multiply other operands (a combine: ``Gt[b,s,j] Ye[ex[b,s,j], sl[b,s,j], d]``)
    copy: bool = True


@dataclass(frozen=True)
class ScatterNote:
    """A scatter, the adjoint of a lookup (``Agg[dst[e], d] += M[e,d]``): each of
    the ``terms`` values of ``sources`` adds into the element of ``output``
    that ``selectors`` select (elementwise work, one add each); as a dense
    product with the one-hot matrices ``onehot`` it would cost ``dense``.
    ``gathers`` are its backward rules, which read the output's gradient
    ``read`` where the selectors point (lookups)."""

    output: str
    terms: sympy.Expr
    sources: tuple[str, ...]
    selectors: tuple[str, ...]
    onehot: tuple[Factor, ...]
    dense: sympy.Expr
    gathers: tuple[str, ...]
    read: str


@dataclass(frozen=True)
class ShiftNote:
    """A convolution: the brackets ``shifts`` fix the shifted position, so only
    those terms are counted; as a dense product it would cost ``dense``.
    ``grads`` are the input gradients (full correlations of ``read``; with a
    stride, a dilation or an offset, not ``plain``: scatters of ``read``
    through the same brackets, a transposed convolution for a stride)."""

    shifts: tuple[Factor, ...]
    dense: sympy.Expr
    grads: tuple[str, ...]
    read: str
    plain: bool = True
    #: a padded read: the tensors whose zero padding it multiplies, and how
    #: many of its products read inside their axes (see :mod:`.padding`)
    padded: PaddedReads | None = None


@dataclass(frozen=True)
class ConditionNote:
    """A where-clause: the sum runs over ``inside`` of the ``tuples`` tuples
    of ``letters`` (in the op's order) that ``domain`` allows; over the full
    range it would cost ``full``."""

    domain: tuple[Factor, ...]
    inside: sympy.Expr
    tuples: sympy.Expr
    letters: tuple[str, ...]
    full: sympy.Expr


@dataclass(frozen=True)
class PrefixNote:
    """A prefix sum (:mod:`symflops.ops.prefix`): running sums of ``operand``
    along ``summed`` (``scans`` adds) and their differences (``combines``),
    where one add per term of the domain would be ``direct``; ``grads``: its
    rules, each a prefix sum too, with their adds."""

    operand: str
    summed: tuple[str, ...]
    scans: sympy.Expr
    combines: sympy.Expr
    direct: sympy.Expr
    grads: tuple[tuple[str, sympy.Expr], ...]


DomainNote = Union[LookupNote, ScatterNote, ShiftNote, ConditionNote, PrefixNote]


@dataclass(frozen=True)
class OrderChoice:
    """A term whose cheapest orders cross: its orders and, for each, the
    condition under which it is the cheapest (None when there are too many
    candidates to solve for)."""

    term: Einsum
    orders: TermOrders
    cheaper_when: tuple[sympy.Basic | None, ...]


@dataclass(frozen=True)
class OpCounts:
    """How one forward op's count arises."""

    #: its one pairwise step, for a one-term op with two operands and a count
    pairwise: PairwiseCount | None
    #: per term, what a lookup, a shift or a condition does to the count
    domain: tuple[DomainNote, ...]
    orders: tuple[OrderChoice, ...]


#: Bytes in one GB (decimal, as disks and most spec sheets count) and one GiB
#: (binary, as ``nvidia-smi`` and PyTorch's memory summaries count).
BYTES_PER: dict[Literal["GB", "GiB"], int] = {"GB": 10**9, "GiB": 2**30}


def in_unit(nbytes: int | float, unit: Literal["GB", "GiB"]) -> Fraction | float:
    """``nbytes`` in GB or GiB: an exact fraction for a whole number of bytes."""
    if isinstance(nbytes, int):
        return Fraction(nbytes, BYTES_PER[unit])
    return nbytes / BYTES_PER[unit]


@dataclass(frozen=True)
class NumbersAt:
    """The sheet's numbers at one configuration (free dims' values; defined
    dims take their formulas' values), exact: ints where the count is whole.
    ``name`` is the declared example's (``examples:``), None for an ``--at``
    column.  FLOPs are in the costs' unit (FLOPs or MACs); ``params`` and
    ``activations`` in elements; the memory in bytes, and in GB and GiB
    through the properties below (exact fractions)."""

    config: tuple[tuple[str, int], ...]
    forward: int | float
    backward: int | float
    training: int | float
    params: int | float
    activations: int | float
    fixed_bytes: int | float
    activation_bytes: int | float
    training_bytes: int | float
    name: str | None = None
    buffer_bytes: int | float = 0  # role: buffer, at the parameter width (in training_bytes)

    # Each memory figure in GB and GiB (Fraction | float, from the bytes: never out of step).
    fixed_gb = property(lambda self: in_unit(self.fixed_bytes, "GB"))
    activation_gb = property(lambda self: in_unit(self.activation_bytes, "GB"))
    training_gb = property(lambda self: in_unit(self.training_bytes, "GB"))
    fixed_gib = property(lambda self: in_unit(self.fixed_bytes, "GiB"))
    activation_gib = property(lambda self: in_unit(self.activation_bytes, "GiB"))
    training_gib = property(lambda self: in_unit(self.training_bytes, "GiB"))


@dataclass(frozen=True)
class SheetCounts:
    """Everything a sheet says about counts, computed once for both formats."""

    costs: Costs
    forward: tuple[OpCounts, ...]
    #: per backward rule, its terms whose orders cross
    backward: tuple[tuple[OrderChoice, ...], ...]
    numbers: tuple[NumbersAt, ...]
    model: WholeModel | None
    #: backward / forward FLOPs when that is a rational number (None otherwise)
    backward_per_forward: sympy.Rational | None
    #: elementwise work of forward and backward together
    elementwise: sympy.Expr
    #: the inference peak with defined dims substituted (C = c k B S / M can
    #: reveal that one bounds another), as ``--json`` reports it, and the
    #: candidates it is the largest of
    inference_peak: sympy.Expr
    inference_candidates: tuple[sympy.Expr, ...]
    #: the dims the saved activations scale with that no parameter has
    batch: frozenset[sympy.Symbol]

    @property
    def examples(self) -> tuple[NumbersAt, ...]:
        """The columns at the declaration's named examples (the first is the
        sheet's worked example), before any ``--at`` column."""
        return tuple(n for n in self.numbers if n.name is not None)

    @property
    def worked(self) -> NumbersAt | None:
        """The sheet's worked configuration: its first named example, else the
        first ``--at`` one (None without either).  The front page's shares,
        the why sentences' percentages and the plots are all at it."""
        return self.numbers[0] if self.numbers else None


def explain(derivation: Derivation, c: Costs,
            configs: Sequence[Mapping[str, sympy.Expr]] = (),
            examples: Sequence[str] | None = None) -> SheetCounts:
    """The sheet's counts of ``derivation`` with costs ``c``, and its numbers
    table: a column at each of the layer's examples named in ``examples``
    (all of them when None), in that order, then one at each of ``configs``
    (no table without either).  An unknown example name is a SymflopsError
    listing the layer's."""
    layer = derivation.layer
    named = (layer.examples if examples is None
             else tuple(find_example(layer, name) for name in examples))
    columns = [*((e.name, example_config(e)) for e in named),
               *((None, cfg) for cfg in configs)]
    for _, cfg in columns:  # an index tensor's bytes hold its range at every column
        check_index_widths(layer, cfg)
    forward = tuple(OpCounts(
        pairwise=(pairwise(op.einsum, op.dims(), oc.flops, c.unit)
                  if len(op.terms) == 1 and oc.flops != 0 else None),
        domain=domain_notes(k, derivation, c),
        orders=order_choices(op.terms, oc, layer),
    ) for k, (op, oc) in enumerate(zip(layer.ops, c.forward)))
    backward = tuple(order_choices(r.terms, rc, layer)
                     for r, rc in zip(derivation.rules, c.backward))
    has_model = layer.tokens is not None or bool(layer.blocks)
    peak = substitute(c.inference_peak, layer.substitutions)
    param_dims = set().union(*(t.elements.free_symbols for t in layer.params))
    return SheetCounts(
        c, forward, backward,
        numbers(at_each_size(derivation, c), [cfg for _, cfg in columns], layer.substitutions,
                [name for name, _ in columns]) if columns else (),
        whole_model(derivation, c) if has_model else None,
        backward_per_forward=ratio(c.flops_forward, c.flops_backward),
        elementwise=sympy.expand(c.elementwise_forward + c.elementwise_backward),
        inference_peak=peak,
        inference_candidates=peak.args if isinstance(peak, sympy.Max) else (peak,),
        batch=frozenset(c.activations.free_symbols - param_dims))


def ratio(forward: sympy.Expr, backward: sympy.Expr) -> sympy.Rational | None:
    """``backward / forward`` when it is a rational number (a constant ratio):
    their exact quotient when it is a number (``sympy.cancel``'s answer,
    without putting the two over one denominator)."""
    if forward == 0:
        return None
    q = exact_quotient(backward, forward)
    return q if q is not None and q.is_Rational else None


def pairwise(e: Einsum, extents: Mapping[str, sympy.Expr], flops: sympy.Expr,
             unit: str) -> PairwiseCount | None:
    """How a forward op's count arises, from the pairwise step the cost model
    took: None unless it took exactly one, of two operands."""
    found = steps(e, extents, unit, written(len(e.factors)))
    if len(found) != 1 or len(e.operands) != 2:
        return None
    span, summed = found[0].span, found[0].kind != "product"
    out = [i for i in dict.fromkeys(e.output.indices) if i in span]
    inner = [i for i in sorted(span) if i not in out]

    def extent(idx: Sequence[str]) -> sympy.Expr:
        return sympy.Mul(*(extents[i] for i in idx))

    factor = 2 if unit == "FLOPs" else 1
    if summed and inner:
        return PairwiseCount("sum", extent(out), extent(inner), factor, flops)
    return PairwiseCount("products", extent(out), sympy.Integer(1), factor, flops)


def domain_notes(k: int, derivation: Derivation, c: Costs) -> tuple[DomainNote, ...]:
    """What a lookup, a shift or a where-clause does to op ``k``'s count, per
    term (empty for an op with none): a lookup copies and is no dense product
    with a one-hot matrix; a condition sums over part of the square only."""
    op, unit = derivation.layer.ops[k], c.unit
    extents = op.dims()
    notes: list[DomainNote] = []
    running = getattr(op, "running", None)  # a prefix sum (it lists no einsum terms)
    if running is not None:
        r = running()
        notes.append(PrefixNote(r.operand, r.summed, r.count.scans, r.count.combines, r.direct,
                                tuple((rule.grad, rc.elementwise) for rule, rc
                                      in zip(derivation.rules, c.backward) if rule.op == k)))
    for e in op.terms:
        lookups = [f for f in e.operands if f.is_select and f.indices[0] in e.summed]
        if lookups:
            scatters = tuple(
                Scatter(r.grad, grad_name(op.output), rc.elementwise)
                for r, rc in zip(derivation.rules, c.backward)
                if r.op == k and any(f.is_select and f.indices[0] in t.output.indices
                                     for t in r.terms for f in t.operands))
            notes.append(LookupNote(
                output=e.output.tensor, elements=size(set(e.output.indices), extents),
                tables=tuple(f.tensor for f in e.factors
                             if any(x.indices[0] in f.indices for x in lookups)),
                selectors=tuple(f.tensor for f in lookups), onehot=tuple(lookups),
                dense=einsum_flops(_dense(e), extents, unit), scatters=scatters,
                copy=len(e.factors) == 1))
        scattered = [f for f in e.operands if f.is_select and f.indices[0] in e.output.indices]
        if scattered:
            free = [i for f in scattered for i in f.indices[1:] if i not in e.output.indices]
            notes.append(ScatterNote(
                output=e.output.tensor,
                terms=size(set(e.output.indices) - {f.indices[0] for f in scattered} | set(free),
                           extents),
                sources=tuple(f.tensor for f in e.factors),
                selectors=tuple(f.tensor for f in scattered), onehot=tuple(scattered),
                dense=einsum_flops(_dense(e), extents, unit),
                gathers=tuple(r.grad for r in derivation.rules if r.op == k),
                read=grad_name(op.output)))
        shifts = [f for f in e.operands if f.is_shift]
        if shifts and e.factors:
            inputs = [f.tensor for f in e.factors if any(x.indices[0] in f.indices for x in shifts)]
            notes.append(ShiftNote(
                shifts=tuple(shifts), dense=einsum_flops(_dense(e), extents, unit),
                grads=tuple(r.grad for r in derivation.rules if r.op == k and r.wrt in inputs),
                read=grad_name(op.output), plain=all(f.fn == SHIFT for f in shifts),
                padded=padded_reads(e, derivation.layer, extents)))
        conditions = [f for f in e.operands if f.is_comparison]
        if conditions and e.factors:
            letters = {i for f in conditions for i in f.indices}
            notes.append(ConditionNote(
                domain=tuple(conditions), inside=size(letters, extents, bounds_of(e)),
                tuples=size(letters, extents),
                letters=tuple(sorted(letters, key=[i for i, _ in op.index_dims].index)),
                full=einsum_flops(Einsum(e.output, e.factors, e.coefficient), extents, unit)))
    return tuple(notes)


def _dense(e: Einsum) -> Einsum:
    """``e`` with each lookup's one-hot matrix as an ordinary dense operand."""
    return Einsum(e.output, tuple(Factor(f"onehot_{f.tensor}", f.indices) if f.is_select
                                  else Factor("shift", f.indices) if f.is_shift else f
                                  for f in e.operands), e.coefficient)


#: Beyond this many candidate orders, when each is the cheapest is not solved for.
MAX_SOLVED_CANDIDATES = 4


def order_choices(terms: Sequence[Einsum], oc: OpCost, layer: Layer) -> tuple[OrderChoice, ...]:
    """Each term of an op or rule whose cheapest orders cross, with the
    condition under which each order is the cheapest, solved for the first
    free dim that allows it."""
    dims = [d.name for d in layer.free_dims]
    return tuple(OrderChoice(terms[o.term], o,
                             o.cheaper_when(dims) if 1 < len(o.candidates) <= MAX_SOLVED_CANDIDATES
                             else (None,) * len(o.candidates))
                 for o in oc.orders)


def at_each_size(derivation: Derivation, c: Costs) -> Costs:
    """The costs a numbers table evaluates: where a term's orders cross, the
    least of them, which at each configuration is the cheapest order there
    (as ``symflops eval`` counts), not the one chosen at the declared sizes."""
    crossing = any(o.orders for o in (*c.forward, *c.backward))
    if not (crossing and derivation.layer.sizes):
        return c
    return count_costs(derivation, c.unit, c.precision, "minimum")


def numbers(c: Costs, configs: Sequence[Mapping[str, sympy.Expr]],
            subs: Mapping[sympy.Symbol, sympy.Expr],
            names: Sequence[str | None] = ()) -> tuple[NumbersAt, ...]:
    """The numbers table's columns, one per configuration, exactly; the
    ``j``-th is named ``names[j]`` (an example's name; None past its end)."""
    mem = c.memory()
    exprs = (c.flops_forward, c.flops_backward, c.flops_total, c.params, c.activations,
             mem["fixed_bytes"], mem["activation_bytes"], mem["total_bytes"])
    # Row by row, as the table reads: the first result too large to print is
    # the one reported.
    rows = [[number(substitute(expr, subs), cfg) for cfg in configs] for expr in exprs]
    buffers = [number(substitute(mem["buffers_bytes"], subs), cfg) for cfg in configs]
    return tuple(NumbersAt(tuple((k, int(v)) for k, v in cfg.items()), *(row[j] for row in rows),
                           name=names[j] if j < len(names) else None, buffer_bytes=buffers[j])
                 for j, cfg in enumerate(configs))
