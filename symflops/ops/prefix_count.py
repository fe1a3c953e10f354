"""What a prefix sum costs: the running sums and the differences between them.

A *prefix sum* is a sum over a where-domain that an output letter bounds:
``Cs[b,s,h] = La[b,u,h] where u <= s`` (the output letter ``s`` is on no
operand; it bounds the summed letter ``u``).  Its backward rule,
``dLa[b,u,h] = dCs[b,s,h] where u <= s``, is one too (a suffix sum).  Every
such term is one tensor ``X`` times the where-clause's indicators; each of its
summed letters ``x`` lies, for each output element, in a range
``lo(o) <= x <= hi(o)`` whose limits are output letters plus constants (the
summed letters are never compared with each other: the domain is a box).

**Counting convention** (exact, every operation an add or a subtraction, so
1 FLOP each and 1 in MACs too; elementwise bucket, no multiply anywhere):

* *scans*: a running sum of ``X`` along each summed letter ``x``, over the
  whole axis, ``ext(x) - 1`` adds per row of ``X``'s other letters, the
  sequential prefix sum (``torch.cumsum``): ``B·H·(S - 1)`` for ``Cs`` above,
  as the gate-less recurrence ``H[b,s,d] = H[b,s-1,d] + X[b,s,d]`` is counted
  (:mod:`symflops.ops.recurrence` counts ``S - 1`` steps a row likewise).
  Several summed letters are scanned one after the other (a summed-area table).
  A scan runs from the start of the axis or from its end (*orientation*);
* *combines*: an output element whose range of ``x`` is not a whole running
  sum (it starts after the axis's start, for a scan from the start; ends
  before its end, for a scan from the end) is the difference of two running
  sums, one subtraction; with ``k`` such letters, ``2^k`` corners and
  ``2^k - 1`` adds and subtractions (inclusion-exclusion).  An element whose
  range is empty is 0, written without work.  So a prefix sum costs no
  combine, the window ``u <= s, s - u < W`` costs ``S - min(S, W)`` a row
  (the outputs whose window has left position 0), and Mamba-2's segment sum
  ``Seg[l,m] = A[u] where m < u, u <= l`` over a chunk of ``C`` costs
  ``C - 1`` adds and ``(C - 1)(C - 2)/2`` subtractions (scanned from the end).

The orientation of each letter is the one with the fewest combines, proved
for all dims (from the start where none is proved the least): a suffix sum
(``u >= s``, the rule above) runs from the end and costs ``S - 1`` a row, as
the reverse-time recurrence does.  The parallel (Brent-Kung / Blelloch) scan
is another algorithm and is not mixed in (:func:`parallel_scan_adds`).

Each count is checked, the first time it is computed, against an enumeration
of the output elements at small dims (a mismatch is a bug and raises).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import sympy

from ..core.domain import Bound, Uncountable
from ..core.ir import Einsum, comparison
from ..core.offsets import count_offsets, proved_at_most

#: Where a letter's running sum starts.
Orientation = Literal["start", "end"]
#: A limit of a summed letter: ``(output letter, constant)``, ``x >= y + c`` or ``x <= y + c``.
Limit = tuple[str, sympy.Expr]
#: Summed letters a prefix sum may have (a box of that many dimensions; 2^k corners).
MAX_SUMMED = 3


@dataclass(frozen=True)
class PrefixCount:
    """The adds of the running sums (``scans``) and of the differences that
    join them per output element (``combines``), with each summed letter's
    orientation."""

    scans: sympy.Expr
    combines: sympy.Expr
    orientation: tuple[tuple[str, Orientation], ...]

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.scans + self.combines)


@dataclass(frozen=True)
class Box:
    """A prefix-sum term read as a box: the summed tensor's letters, the
    output letters, each summed letter's lower and upper limits (by output
    letters), and the where-clause's bounds between output letters."""

    operand: tuple[str, ...]
    output: tuple[str, ...]
    lowers: tuple[tuple[str, tuple[Limit, ...]], ...]
    uppers: tuple[tuple[str, tuple[Limit, ...]], ...]
    among: tuple[Bound, ...]

    @property
    def summed(self) -> tuple[str, ...]:
        return tuple(x for x, _ in self.lowers)


@dataclass(frozen=True)
class Running:
    """What a sheet says of a prefix sum: the tensor it sums, along which
    letters, its count, and the adds of summing each output element's terms
    on its own (one add per term of the domain, the lone reduction's count)."""

    operand: str
    summed: tuple[str, ...]
    count: PrefixCount
    direct: sympy.Expr


def prefix_letters(e: Einsum) -> tuple[str, ...]:
    """The output letters of ``e`` that no tensor operand carries and that a
    comparison ties to a summed letter: empty unless ``e`` is a prefix sum."""
    carried = {i for f in e.factors for i in f.indices}
    summed = set(e.summed) - {i for f in e.operands if f.is_select or f.is_shift or f.is_offset
                              for i in f.indices[:1]}
    out = []
    for letter in dict.fromkeys(e.output.indices):
        if letter in carried:
            continue
        if any(f.is_comparison and letter in f.indices and (set(f.indices) - {letter}) & summed
               for f in e.operands):
            out.append(letter)
    return tuple(out)


def box(e: Einsum) -> Box:
    """``e``'s box; ValueError when ``e`` is not one tensor with a
    where-clause in which every summed letter is bounded by output letters only."""
    if len(e.factors) != 1 or e.factors[0].fn is not None or any(
            f.is_indicator and not f.is_comparison for f in e.operands):
        raise ValueError(f"{e.statement()}: a prefix sum reads one plain tensor")
    (x_factor,) = e.factors
    output = tuple(dict.fromkeys(e.output.indices))
    summed = [x for x in dict.fromkeys(x_factor.indices) if x not in output]
    lowers: dict[str, list[Limit]] = {x: [] for x in summed}
    uppers: dict[str, list[Limit]] = {x: [] for x in summed}
    among: list[Bound] = []
    for f in e.operands:
        if not f.is_comparison:
            continue
        b = comparison(f)
        c = b.offset - (1 if b.strict else 0)  # low <= high + c
        if b.low in lowers and b.high in lowers:
            raise ValueError(f"{e.statement()}: two summed letters compared")
        if b.high in lowers:    # y <= x + c: x >= y - c
            lowers[b.high].append((b.low, sympy.expand(-c)))
        elif b.low in lowers:   # x <= y + c
            uppers[b.low].append((b.high, sympy.expand(c)))
        else:
            among.append(b)
    if any(not lowers[x] and not uppers[x] for x in summed) or not summed:
        raise ValueError(f"{e.statement()}: a summed letter no output letter bounds")
    return Box(x_factor.indices, output, tuple((x, tuple(lowers[x])) for x in summed),
               tuple((x, tuple(uppers[x])) for x in summed), tuple(among))


def prefix_count(e: Einsum, extents: Mapping[str, sympy.Expr]) -> PrefixCount:
    """The adds and subtractions of the prefix sum ``e`` (see the module's
    docstring); :class:`Uncountable` when a count is not one closed form."""
    letters = tuple(sorted({*e.indices}))
    return _count(e, tuple((i, sympy.sympify(extents[i])) for i in letters))


@functools.lru_cache(maxsize=1024)
def _count(e: Einsum, extents_items: tuple[tuple[str, sympy.Expr], ...]) -> PrefixCount:
    extents = dict(extents_items)
    b = box(e)
    if len(b.summed) > MAX_SUMMED:
        raise Uncountable(f"more than {MAX_SUMMED} summed letters")
    scans = sympy.Integer(0)
    for x in b.summed:
        rows = sympy.Mul(*(extents[a] for a in dict.fromkeys(b.operand) if a != x))
        scans += (extents[x] - 1) * rows
    choices = list(itertools.product(("start", "end"), repeat=len(b.summed)))
    # the output letters no limit names multiply every count alike: compared without them
    named = {y for _, ls in (*b.lowers, *b.uppers) for y, _ in ls} | \
        {x for a in b.among for x in (a.low, a.high)}
    free = sympy.Mul(*(extents[y] for y in b.output if y not in named))
    combines = [_combines(b, dict(zip(b.summed, o)), extents, named) for o in choices]
    best = next((k for k in range(len(choices))
                 if all(proved_at_most(combines[k], c) for c in combines)), 0)
    found = PrefixCount(sympy.expand(scans), sympy.expand(free * combines[best]),
                        tuple(zip(b.summed, choices[best])))  # type: ignore[arg-type]
    _check(found, b, extents)
    return found


def _conditions(b: Box, x: str, side: Orientation, extents: Mapping[str, sympy.Expr]
                ) -> list[tuple[str | None, str | None, sympy.Expr]]:
    """For each limit of ``x`` that leaves a running sum from ``side``
    incomplete, the condition on the output letters under which it does
    (``count_offsets``' form: ``(low, high, c)`` is ``low <= high + c``, None
    the number 0): from the start, a lower limit ``y + c >= 1``; from the
    end, an upper limit ``y + c <= ext(x) - 2``."""
    if side == "start":
        return [(None, y, sympy.expand(c - 1)) for y, c in dict(b.lowers)[x]]
    return [(y, None, sympy.expand(extents[x] - 2 - c)) for y, c in dict(b.uppers)[x]]


def _nonempty(b: Box, extents: Mapping[str, sympy.Expr]
              ) -> list[tuple[str | None, str | None, sympy.Expr]]:
    """The output elements whose box is not empty: every lower limit at most
    every upper one and inside the axis, and the bounds between output letters."""
    cons: list[tuple[str | None, str | None, sympy.Expr]] = [
        (a.low, a.high, sympy.expand(a.offset - (1 if a.strict else 0))) for a in b.among]
    for x in b.summed:
        lows, highs = dict(b.lowers)[x], dict(b.uppers)[x]
        for y, c in lows:
            for z, d in highs:
                if y != z:
                    cons.append((y, z, sympy.expand(d - c)))
                elif proved_at_most(d - c, sympy.Integer(-1)):  # y + c <= y + d: on the dims alone
                    raise Uncountable(f"the range of {x!r} is empty for all dims")
                elif not proved_at_most(sympy.Integer(0), d - c):
                    raise Uncountable(f"the range of {x!r} is empty unless "
                                      f"{sympy.sstr(d - c)} >= 0")
        cons += [(y, None, sympy.expand(extents[x] - 1 - c)) for y, c in lows]
        cons += [(None, z, d) for z, d in highs]
    return cons


def _combines(b: Box, orientation: Mapping[str, Orientation],
              extents: Mapping[str, sympy.Expr], named: set[str]) -> sympy.Expr:
    """Sum over the output elements (their letters in ``named``: the others
    change nothing) of ``prod_x (1 + a_x) - 1``, ``a_x`` whether ``x``'s range
    is not a whole running sum: over every non-empty set ``T`` of summed
    letters, the elements where each of ``T`` is incomplete, each an "or"
    over its limits by inclusion-exclusion."""
    base = _nonempty(b, extents)
    out_extents = {y: extents[y] for y in b.output if y in named}
    total = sympy.Integer(0)
    for size in range(1, len(b.summed) + 1):
        for subset in itertools.combinations(b.summed, size):
            options = [_conditions(b, x, orientation[x], extents) for x in subset]
            if any(not o for o in options):
                continue
            for picks in itertools.product(*(_nonempty_subsets(o) for o in options)):
                sign = (-1) ** sum(len(p) - 1 for p in picks)
                cons = base + [c for p in picks for c in p]
                total += sign * count_offsets(cons, out_extents)
    return settled(sympy.expand(total))


def settled(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each ``min`` of a number and a dim plus a number replaced
    by the number where that is proved to change nothing: ``min(k, d + a)``
    is ``k`` for ``d >= k - a``, and the finitely many ``d`` below are
    substituted and compared; then each ``min(a + c, b + c)`` is written
    ``min(a, b) + c``.  So ``C**2/2 - 3C/2 - min(-1, C - 3)**2/2 - 3 min(-1, C - 3)/2``,
    a segment sum's count (``C = 1`` is the one ``C`` where the minimum is
    ``C - 3``), is ``(C - 1)(C - 2)/2``."""
    for atom in sorted(expr.atoms(sympy.Min), key=sympy.default_sort_key):
        numbers = [a for a in atom.args if a.is_number]
        rest = [a for a in atom.args if not a.is_number]
        if len(numbers) != 1 or len(rest) != 1 or len(rest[0].free_symbols) != 1:
            continue
        (d,) = rest[0].free_symbols
        a = sympy.expand(rest[0] - d)
        if not a.is_number or sympy.expand(rest[0] - d - a) != 0:
            continue
        k = numbers[0]
        candidate = sympy.expand(expr.xreplace({atom: k}))
        below = range(1, int(sympy.ceiling(k - a)))
        if all(sympy.expand(expr.xreplace({d: v}) - candidate.xreplace({d: v})) == 0
               for v in below):
            expr = candidate
    return sympy.expand(expr.replace(lambda e: isinstance(e, sympy.Min), _lifted))


def _lifted(m: sympy.Min) -> sympy.Expr:
    shift = min((a.as_coeff_Add()[0] for a in m.args), default=sympy.Integer(0))
    if shift != 0 and all(a.as_coeff_Add()[0] == shift for a in m.args):
        return sympy.Min(*(a - shift for a in m.args)) + shift
    return m


def _nonempty_subsets(items: Sequence) -> list[tuple]:
    return [s for k in range(1, len(items) + 1) for s in itertools.combinations(items, k)]


#: The check enumerates every assignment of 1 .. CHECK_MAX to the dims (at most CHECK_POINTS).
CHECK_MAX = 4
CHECK_POINTS = 128


def _check(found: PrefixCount, b: Box, extents: Mapping[str, sympy.Expr]) -> None:
    """Compare ``found`` with the algorithm run by enumeration at small dims:
    each output element's range of each summed letter, tested condition by
    condition, and its corners (the output letters no condition names each
    multiply the count by their extent); raise on a mismatch."""
    limits = [*((x, y, c, "low") for x, ls in b.lowers for y, c in ls),
              *((x, y, c, "high") for x, ls in b.uppers for y, c in ls)]
    exprs = [*extents.values(), *(c for _, _, c, _ in limits), *(a.offset for a in b.among)]
    dims = sorted(set().union(*(sympy.sympify(e).free_symbols for e in exprs)), key=str)
    orientation = dict(found.orientation)
    named = [y for y in b.output if any(y == l[1] for l in limits)
             or any(y in (a.low, a.high) for a in b.among)]
    for values in itertools.islice(itertools.product(range(1, CHECK_MAX + 1), repeat=len(dims)),
                                   CHECK_POINTS):
        at = dict(zip(dims, values))
        n = {i: int(sympy.sympify(e).xreplace(at)) for i, e in extents.items()}
        if min(n.values()) < 1:
            continue
        scans = sum((n[x] - 1) * _prod(n[a] for a in dict.fromkeys(b.operand) if a != x)
                    for x in b.summed)
        bounds = [(x, y, int(c.xreplace(at)), side) for x, y, c, side in limits]
        among = [(a.low, a.high, int(a.offset.xreplace(at)) - (1 if a.strict else 0))
                 for a in b.among]
        combines = 0
        for o in itertools.product(*(range(n[y]) for y in named)):
            at_o = dict(zip(named, o))
            if not all(at_o[low] <= at_o[high] + c for low, high, c in among):
                continue
            incomplete = 0
            empty = False
            for x in b.summed:
                inside = [v for v in range(n[x]) if all(
                    (v >= at_o[y] + c) if side == "low" else (v <= at_o[y] + c)
                    for x2, y, c, side in bounds if x2 == x)]
                if not inside:
                    empty = True
                    break
                if orientation[x] == "start" and inside[0] > 0 or \
                        orientation[x] == "end" and inside[-1] < n[x] - 1:
                    incomplete += 1
            if not empty:
                combines += 2 ** incomplete - 1
        combines *= _prod(n[y] for y in b.output if y not in named)
        got = (int(found.scans.xreplace(at)), int(found.combines.xreplace(at)))
        if got != (scans, combines):
            raise AssertionError(f"prefix-sum count {found} gives {got} at {at}, "
                                 f"enumeration {(scans, combines)}")


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def parallel_scan_adds(length: sympy.Expr) -> sympy.Expr:
    """The adds of a work-efficient parallel (Brent-Kung / Blelloch) inclusive
    scan of ``length`` values, a power of two: ``length - 1`` up the tree and
    ``length - 1 - log2(length)`` down it; stated beside the sequential
    ``length - 1``, never counted."""
    return 2 * length - 2 - sympy.log(length, 2)
