"""Exact sizes of the summation domains that where-clauses cut out.

A where-clause ``where t <= s`` restricts an op's letters to the tuples that
satisfy it.  The number of such tuples is what a restricted product costs per
multiply-add, so it must be exact for every value of the dims:
:func:`domain_size` returns it in closed form.

Every letter ``x`` ranges over ``0 .. n_x - 1`` (its extent ``n_x``, a
positive integer polynomial in the dims); a :class:`Bound` says
``x_low <= x_high`` (or ``<``, when strict).  The bounds form a directed
acyclic graph (the declaration reader refuses a cycle).  The count is an iterated sum, each
letter summed inside every letter that bounds it from above, with upper limit

    U_x = min(n_x - 1, x_high - strict, ...)    (lower limit 0).

A polynomial summand is summed in closed form (Faulhaber's formulas, by
``sympy.summation`` over a fresh symbol).  A summand that contains
``min(x + a, C)`` (left by a letter summed earlier, ``C`` free of ``x``) is
split where the two arguments cross, ``x = C - a``:

    sum_{x=0}^{U} f(x, min(x + a, C))
        = sum_{x=0}^{K} f(x, x + a) + sum_{x=K+1}^{U} f(x, C),   K = min(U, C - a),

each part again a sum of that kind with one ``min`` fewer.  Both parts are
exact whenever ``K >= -1``, which holds here: ``U >= -1`` and ``C - a >= -1``,
since every upper limit is at least ``-1`` (a strict bound on a letter at 0)
and ``a <= 0`` (an upper letter minus its strictness).  When the letters range
over one dim, the ``min`` collapse (``min(S - 1, S - 1) = S - 1``) and the
count is a polynomial: ``S(S + 1)/2`` for ``t <= s``.  Between different dims
it is a polynomial in the dims and ``min`` of them: ``s <= t`` with ``s`` over
``S`` and ``t`` over ``T`` has ``m(m + 1)/2 + S(T - m)`` tuples, ``m = min(S, T)``.

**Offsets (sliding windows).**  A bound may carry an offset, an integer
expression in the dims: ``x_low <= x_high + c`` (``s - t < W`` is
``s <= t + W - 1``; ``t >= s - W + 1`` the same).  Such bounds may go round
(``t <= s`` and ``s <= t + W - 1``) and give letters lower limits other than 0,
so they are counted by :func:`_count_affine` instead, a Fourier-Motzkin
elimination: the innermost letter ``x`` runs from the largest of its lower
limits to the least of its upper ones; each choice of which limit is the
largest and which the least is one case, stated by difference bounds on the
remaining letters (ties go to the first listed, so the cases partition the
domain), together with ``lower <= upper`` (outside it the range is empty and
adds nothing).  Inside a case the sum is Faulhaber's polynomial, exact; the
last letter's limits are dims only, ``L = max(...)``, ``U = min(...)``, and
its sum runs to ``max(U, L - 1)``, exact when the range is empty too.  A
condition on the dims alone that arises inside (``W >= K``) and cannot be
proved or refuted for all dims is refused (:class:`Uncountable`): the count
would be piecewise in the dims; only limits in the dims alone are clamped
like the last letter's.  Plain bounds (no offset) keep the algorithm
above and its closed forms.  The causal window ``t <= s, s - t < W`` over
``S`` has ``m(m + 1)/2 + (S - m)W`` pairs, ``m = min(S, W)``.

Each closed form is checked, the first time it is computed, against a count
by enumeration at every assignment of small values to the dims (a mismatch is
a bug in symflops and raises).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import sympy


class Uncountable(ValueError):
    """A where-clause whose count is not one closed form in the dims (it
    depends on how two dim expressions compare), or whose domain is empty."""


@dataclass(frozen=True)
class Bound:
    """``low <= high + offset`` between two index letters (``<`` when
    ``strict``); ``offset`` is an integer-valued expression in the dims."""

    low: str
    high: str
    strict: bool = False
    offset: sympy.Expr = sympy.Integer(0)

    @property
    def letters(self) -> frozenset[str]:
        return frozenset((self.low, self.high))


def domain_size(extents: Mapping[str, sympy.Expr], bounds: Sequence[Bound]) -> sympy.Expr:
    """The number of tuples of ``extents``' letters (each in ``0 .. extent - 1``)
    that satisfy every bound, in closed form (see the module's docstring).
    Letters no bound names multiply the count by their extents."""
    named = {x for b in bounds for x in b.letters}
    free = sympy.Mul(*(extents[x] for x in sorted(extents) if x not in named))
    if not bounds:
        return free
    key = tuple(sorted(set(bounds), key=lambda b: (b.low, b.high, b.strict, sympy.srepr(b.offset))))
    restricted = _restricted(key, tuple((x, extents[x]) for x in sorted(named)))
    return sympy.expand(free * restricted)


@functools.lru_cache(maxsize=1024)
def _restricted(bounds: tuple[Bound, ...], extents: tuple[tuple[str, sympy.Expr], ...]) -> sympy.Expr:
    """:func:`domain_size` of the letters the bounds name, remembered and checked."""
    plain = all(b.offset == 0 for b in bounds)
    count = _count(bounds, dict(extents)) if plain else _count_affine(bounds, dict(extents))
    _check(count, bounds, dict(extents))
    return count


def _count(bounds: tuple[Bound, ...], extents: dict[str, sympy.Expr]) -> sympy.Expr:
    letters = {x: sympy.Dummy(x, integer=True, nonnegative=True) for x in extents}
    summand: sympy.Expr = sympy.Integer(1)
    done: list[str] = []
    # Each letter is summed inside the letters that bound it from above, so
    # every bound below it has already been summed away when its turn comes.
    while len(done) < len(extents):
        x = min(x for x in extents if x not in done
                and all(b.low in done for b in bounds if b.high == x))
        upper = sympy.Min(extents[x] - 1, *(letters[b.high] - (1 if b.strict else 0)
                                            for b in bounds if b.low == x))
        summand = _sum(letters[x], upper, summand)
        done.append(x)
    return _tidy(summand)


def _sum(x: sympy.Symbol, upper: sympy.Expr, f: sympy.Expr) -> sympy.Expr:
    """``sum_{x=0}^{upper} f``, exact when ``upper >= -1`` (an empty sum at -1)."""
    f = _flat(f)
    atoms = sorted((m for m in f.atoms(sympy.Min) if x in m.free_symbols), key=sympy.default_sort_key)
    if not atoms:
        return _faulhaber(sympy.expand(f), x).xreplace({_TOP: upper})
    atom = atoms[0]
    with_x = [a for a in atom.args if x in a.free_symbols]
    rest = [a for a in atom.args if x not in a.free_symbols]
    # Letters enter bounds with coefficient 1, so the arguments with x are
    # x + a for constants a, and SymPy keeps only the least of them.
    offset = with_x[0] - x
    if len(with_x) != 1 or x in offset.free_symbols or not offset.is_number:
        raise AssertionError(f"unexpected bound {atom} while summing over {x}")
    if not rest:  # min(x + a) alone
        return _sum(x, upper, f.xreplace({atom: with_x[0]}))
    crossing = sympy.Min(*rest)
    split = _flat(sympy.Min(upper, crossing - offset))
    below = f.xreplace({atom: x + offset})
    above = f.xreplace({atom: crossing})
    return _flat(_sum(x, split, below) + _sum(x, upper, above) - _sum(x, split, above))


_TOP = sympy.Dummy("top", integer=True)


@functools.lru_cache(maxsize=4096)
def _faulhaber(f: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """``sum_{x=0}^{top} f`` for a summand polynomial in ``x``, as a polynomial in ``top``."""
    if x not in f.free_symbols:
        return sympy.expand(f * (_TOP + 1))
    return sympy.expand(sympy.summation(f, (x, 0, _TOP)))


def _flat(expr: sympy.Expr) -> sympy.Expr:
    """``min(a, b) + c`` for a number ``c`` as ``min(a + c, b + c)``, so that
    nested minima flatten and each argument is a letter or a dim plus a constant."""
    def shifted(e: sympy.Expr) -> bool:
        constant, rest = e.as_coeff_Add()
        return constant != 0 and isinstance(rest, sympy.Min)

    def distribute(e: sympy.Expr) -> sympy.Expr:
        constant, rest = e.as_coeff_Add()
        return sympy.Min(*(a + constant for a in rest.args))

    return expr.replace(shifted, distribute)


def _tidy(expr: sympy.Expr) -> sympy.Expr:
    """The count expanded, each ``min(a - c, b - c)`` written ``min(a, b) - c``."""
    def lift(m: sympy.Min) -> sympy.Expr:
        shift = min((a.as_coeff_Add()[0] for a in m.args), default=sympy.Integer(0))
        if all(a.as_coeff_Add()[0] == shift for a in m.args) and shift != 0:
            return sympy.Min(*(a - shift for a in m.args)) + shift
        return m

    return sympy.expand(expr.replace(lambda e: isinstance(e, sympy.Min), lift))


#: The check enumerates every assignment of 1 .. CHECK_MAX to the dims (at most CHECK_POINTS of them).
CHECK_MAX = 4
CHECK_POINTS = 256


def _check(count: sympy.Expr, bounds: tuple[Bound, ...], extents: dict[str, sympy.Expr]) -> None:
    """Compare ``count`` with an enumeration at small dim values; raise on a mismatch."""
    dims = sorted(set().union(*(e.free_symbols for e in extents.values()),
                              *(b.offset.free_symbols for b in bounds)), key=str)
    points = itertools.islice(itertools.product(range(1, CHECK_MAX + 1), repeat=len(dims)),
                              CHECK_POINTS)
    for values in points:
        at = dict(zip(dims, values))
        sizes = {x: int(e.xreplace(at)) for x, e in extents.items()}
        if min(sizes.values()) < 1:  # an extent such as P - K + 1 can be empty at small values
            continue
        letters = sorted(sizes)
        offsets = [int(b.offset.xreplace(at)) - (1 if b.strict else 0) for b in bounds]
        expected = sum(
            all(t[letters.index(b.low)] <= t[letters.index(b.high)] + c
                for b, c in zip(bounds, offsets))
            for t in itertools.product(*(range(sizes[x]) for x in letters)))
        got = count.xreplace(at)
        if got != expected:
            raise AssertionError(f"domain count {count} gives {got} at {at}, enumeration {expected}")


# ------------------------------------------------ bounds with offsets --

#: ``(low, high, c)``: ``x_low <= x_high + c``; ``None`` stands for the number 0.
_Constraint = tuple["str | None", "str | None", sympy.Expr]


def _count_affine(bounds: tuple[Bound, ...], extents: dict[str, sympy.Expr]) -> sympy.Expr:
    """:func:`domain_size` for bounds with offsets (see the module's docstring)."""
    cons: set[_Constraint] = set()
    for x, n in extents.items():
        cons |= {(None, x, sympy.Integer(0)), (x, None, n - 1)}
    cons |= {(b.low, b.high, b.offset - (1 if b.strict else 0)) for b in bounds}
    # Innermost the letter most often bounded above by a plain bound (the key t of t <= s).
    order = sorted(extents, key=lambda x: (-sum(b.low == x and b.offset == 0 for b in bounds), x))
    letters = {x: sympy.Dummy(x, integer=True) for x in extents}
    count = _eliminate(tuple(order), _merged(cons), sympy.Integer(1), letters)
    return _tidy(_simplified(count))


def _merged(cons: Iterable[_Constraint]) -> frozenset[_Constraint]:
    """One constraint per pair of ends, the tightest (the least offset)."""
    best: dict[tuple[str | None, str | None], list[sympy.Expr]] = {}
    for low, high, c in cons:
        best.setdefault((low, high), []).append(c)
    return frozenset((low, high, _simplified(sympy.Min(*cs))) for (low, high), cs in best.items())


def _eliminate(order: tuple[str, ...], cons: frozenset[_Constraint], summand: sympy.Expr,
               letters: dict[str, sympy.Symbol]) -> sympy.Expr:
    """``sum`` over ``order``'s letters of ``summand`` on the domain ``cons``,
    every letter outside ``order`` already summed away.  The innermost is the
    letter with the fewest cases (lower limits times upper ones), ties going
    to the first in ``order``: a key bounded by its query before the query."""
    def limits(x: str) -> tuple[list, list]:
        return (_pruned([(y, c) for y, h, c in cons if h == x], cons, lower=True),  # x >= y - c
                _pruned([(z, c) for l, z, c in cons if l == x], cons, lower=False))  # x <= z + c

    found = {x: limits(x) for x in order}
    x = min(order, key=lambda y: (len(found[y][0]) * len(found[y][1]), order.index(y)))
    rest = tuple(y for y in order if y != x)
    value = (lambda end: sympy.Integer(0) if end is None else letters[end])
    lowers, uppers = found[x]
    others = [k for k in cons if x not in k[:2]]
    if not rest:
        low = _max(*(-c for _, c in lowers))
        high = sympy.Min(*(c for _, c in uppers))
        return _range_sum(summand, letters[x], _max(high, low - 1), low)
    total: sympy.Expr = sympy.Integer(0)
    for i, (y, cl) in enumerate(lowers):
        for j, (z, cu) in enumerate(uppers):
            case = list(others)
            # lower i is the largest (strictly larger than those listed before it) ...
            case += [(y2, y, c2 - cl - (1 if k < i else 0))
                     for k, (y2, c2) in enumerate(lowers) if k != i]
            # ... upper j the least, and the range is not empty
            case += [(z, z2, c2 - cu - (1 if k < j else 0))
                     for k, (z2, c2) in enumerate(uppers) if k != j]
            high = value(z) + cu
            if y is None and z is None and not _nonnegative(cl + cu):
                # limits in the dims alone (-cl to cu) that may cross: summed up to
                # max(cu, -cl - 1), an empty sum where they do, as for the last letter
                if _nonnegative(-cl - cu - 1):
                    continue
                high = _max(cu, -cl - 1)
            else:
                case.append((y, z, cl + cu))
            kept = _feasible(case)
            if kept is None:
                continue
            inner = _range_sum(summand, letters[x], high, value(y) - cl)
            total += _eliminate(rest, _merged(kept), inner, letters)
    return sympy.expand(total)


def _pruned(ends: list[tuple[str | None, sympy.Expr]], cons: frozenset[_Constraint],
            lower: bool) -> list[tuple[str | None, sympy.Expr]]:
    """The limits of a letter without those another implies through one more
    constraint (``t <= s`` and ``s <= S - 1`` imply ``t <= S - 1``), in the
    order ties are broken: an offset of 0 first (``t <= s`` before ``t <= T - 1``,
    ``t >= 0`` before ``t >= s - W + 1``), so the cases split where a window
    is cut."""
    def implied(k: int) -> bool:
        e1, c1 = ends[k]
        for j, (e2, c2) in enumerate(ends):
            if j == k:
                continue
            # upper: x <= e2 + c2 <= e1 + c3 + c2; lower: x >= e2 - c2 >= e1 - c3 - c2
            for low, high, c3 in cons:
                if (low, high) == ((e2, e1) if not lower else (e1, e2)) \
                        and _nonnegative(c1 - c2 - c3) and (j < k or not _nonnegative(c2 + c3 - c1)):
                    return True
        return False

    kept = [ends[k] for k in range(len(ends)) if not implied(k)]
    return sorted(kept, key=lambda end: (end[1] != 0, str(end[0]), sympy.default_sort_key(end[1])))


def _max(*args: sympy.Expr) -> sympy.Expr:
    """``max`` of two dim expressions as ``a + b - min(a, b)``, so a count is
    written in minima only (``max(S, W) - W = S - min(S, W)``)."""
    m = sympy.Max(*args)
    if isinstance(m, sympy.Max) and len(m.args) == 2:
        a, b = m.args
        return a + b - sympy.Min(a, b)
    return m


def _feasible(case: list[_Constraint]) -> list[_Constraint] | None:
    """The case's constraints between letters; None when one on the dims alone
    is false for all dims.  One that holds for some dims only is refused."""
    kept = []
    for low, high, c in case:
        if low != high:
            kept.append((low, high, c))
        elif not _nonnegative(c):
            if _nonnegative(-c - 1):
                return None
            raise Uncountable(f"the count depends on whether {sympy.sstr(c)} >= 0")
    return kept


def _nonnegative(e: sympy.Expr) -> bool:
    """Whether ``e >= 0`` for all positive integer dims, proved: a ``min`` or
    ``max`` that ``e`` is linear in is split into its arguments (``k min(a, b) + r
    >= 0`` for ``k > 0`` when both ``k a + r`` and ``k b + r`` are), then a
    polynomial whose coefficients in ``u = dim - 1`` are all non-negative."""
    e = sympy.expand(e)
    atom = next(iter(sorted(e.atoms(sympy.Min, sympy.Max), key=sympy.default_sort_key)), None)
    if atom is not None:
        k = e.coeff(atom)
        if not k.is_number or k == 0 or atom in (e - k * atom).atoms(sympy.Min, sympy.Max):
            return _by_regions(e)
        parts = [_nonnegative(e - k * atom + k * a) for a in atom.args]
        every = isinstance(atom, sympy.Min) == bool(k > 0)
        return all(parts) if every else any(parts)
    return _positive_coefficients(e, {d: d + 1 for d in e.free_symbols})


def proved_at_most(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether ``a <= b`` for all positive integer dims, proved (see :func:`_nonnegative`;
    a count in ``min(S, W)`` is proved in each of the regions ``S <= W``, ``W <= S``)."""
    return _nonnegative(b - a)


def _positive_coefficients(e: sympy.Expr, shift: dict[sympy.Expr, sympy.Expr]) -> bool:
    """Whether ``e`` with ``shift`` applied has no negative coefficient (each
    variable then ranges over the integers >= 0)."""
    shifted = sympy.expand(e.xreplace(shift))
    if not shifted.free_symbols:
        return bool(shifted >= 0)
    poly = sympy.Poly(shifted, *sorted(shifted.free_symbols, key=str))
    return all(c >= 0 for c in poly.coeffs())


def _by_regions(e: sympy.Expr) -> bool:
    """``e >= 0`` for an ``e`` polynomial in dims and minima of two dims each
    (``min(S, W)``), proved in every region: where ``S <= W``, ``W = S + k``
    (``k >= 0``) and the minimum is ``S``; and the other way round."""
    atoms = sorted(e.atoms(sympy.Min, sympy.Max), key=sympy.default_sort_key)
    if not atoms or any(not isinstance(m, sympy.Min) or len(m.args) != 2
                        or not all(isinstance(a, sympy.Symbol) for a in m.args) for m in atoms):
        return False
    pairs = [tuple(sorted(m.args, key=str)) for m in atoms]
    if len({d for p in pairs for d in p}) != 2 * len(pairs):
        return False  # minima sharing a dim: regions that are not a product
    for choice in itertools.product((0, 1), repeat=len(pairs)):
        shift: dict[sympy.Expr, sympy.Expr] = {}
        value: dict[sympy.Expr, sympy.Expr] = {}
        for m, (a, b), low in zip(atoms, pairs, choice):
            small, big = (a, b) if low == 0 else (b, a)
            k = sympy.Dummy("k", integer=True, nonnegative=True)
            value[m] = small
            shift[big] = small + 1 + k   # small = u + 1, big = small + k (applied at once)
        inner = sympy.expand(e.xreplace(value))
        free = {d: d + 1 for d in inner.free_symbols if d not in shift}
        if not _positive_coefficients(inner, {**shift, **free}):
            return False
    return True


def _simplified(e: sympy.Expr) -> sympy.Expr:
    """``min`` and ``max`` of dim expressions without the arguments another
    provably undercuts (``min(S, W, max(S, W)) = min(S, W)``), written with
    minima only: ``max(a, b) = a + b - min(a, b)``, ``min(-a, -b) = -max(a, b)``."""
    def prune(m: sympy.Expr) -> sympy.Expr:
        args = list(m.args)
        sign = 1 if isinstance(m, sympy.Min) else -1
        keep = [a for i, a in enumerate(args)
                if not any(_nonnegative(sign * (a - b)) and (j < i or not _nonnegative(sign * (b - a)))
                           for j, b in enumerate(args) if j != i)]
        if len(keep) == 1:
            return keep[0]
        if isinstance(m, sympy.Min) and all(a.could_extract_minus_sign() for a in keep):
            return -prune(sympy.Max(*(-a for a in keep), evaluate=False))
        # min(0, W - S) = min(S, W) - S: a dim subtracted in some argument, added to all
        for d in sorted(m.free_symbols, key=str):
            moved = [sympy.expand(a + d) for a in keep]
            if any(sympy.expand(a).coeff(d) == -1 for a in keep) and all(
                    not a.could_extract_minus_sign() and a != 0 and
                    all(c > 0 for c in sympy.Poly(a, *sorted(a.free_symbols, key=str)).coeffs())
                    for a in moved if a.free_symbols) and all(a.free_symbols for a in moved):
                return type(m)(*moved) - d
        if isinstance(m, sympy.Max) and len(keep) == 2:
            a, b = keep
            return a + b - sympy.Min(a, b)
        return type(m)(*keep)

    done: set[sympy.Expr] = set()
    while True:  # one atom at a time, innermost first, until none changes
        atoms = sorted(e.atoms(sympy.Min, sympy.Max) - done,
                       key=lambda m: (len(m.atoms(sympy.Min, sympy.Max)), sympy.default_sort_key(m)))
        if not atoms:
            return sympy.expand(e)
        m = atoms[0]
        value = prune(m)
        if value == m:
            done.add(m)
        else:
            e = sympy.expand(e.xreplace({m: value}))


def _range_sum(f: sympy.Expr, x: sympy.Symbol, high: sympy.Expr, low: sympy.Expr) -> sympy.Expr:
    """``sum_{x=low}^{high} f`` for ``f`` polynomial in ``x``, exact when ``high >= low - 1``."""
    top = _faulhaber(sympy.expand(f), x)
    return sympy.expand(top.xreplace({_TOP: high}) - top.xreplace({_TOP: low - 1}))
