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
``s <= t + W - 1``).  Such bounds may go round (``t <= s`` and
``s <= t + W - 1``) and give letters lower limits other than 0; they are
counted by :func:`symflops.core.offsets.count_offsets` instead (a
Fourier-Motzkin elimination, see there), and so are plain bounds that go
round (``t <= s, s <= t``: the diagonal ``t = s``).  Other plain bounds keep
the algorithm above and its closed forms.

Each closed form is checked, the first time it is computed, against a count
by enumeration at every assignment of small values to the dims (a mismatch is
a bug in symflops and raises).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

import sympy

from .offsets import TOP as _TOP
from .offsets import Uncountable, count_offsets  # noqa: F401  (Uncountable: re-exported)
from .offsets import faulhaber as _faulhaber


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
    plain = all(b.offset == 0 for b in bounds) and _acyclic(bounds)
    count = (_count(bounds, dict(extents)) if plain else _tidy(count_offsets(
        [(b.low, b.high, b.offset - (1 if b.strict else 0)) for b in bounds], dict(extents),
        [b.low for b in bounds if b.offset == 0])))
    _check(count, bounds, dict(extents))
    return count


def _acyclic(bounds: tuple[Bound, ...]) -> bool:
    """Whether no letter is bounded, through a chain of bounds, by itself
    (``t <= s, s <= t`` goes round: a diagonal, or nothing when one is strict)."""
    below: dict[str, set[str]] = {}
    for b in bounds:
        below.setdefault(b.high, set()).add(b.low)

    def under(x: str) -> set[str]:
        found, todo = set(), list(below.get(x, ()))
        while todo:
            y = todo.pop()
            if y not in found:
                found.add(y)
                todo.extend(below.get(y, ()))
        return found

    return not any(x in under(x) for x in below)


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
