"""Counting a summation domain whose bounds carry offsets: sliding windows.

A bound ``x_low <= x_high + c`` (``c`` an integer expression in the dims;
``s - t < W`` is ``s <= t + W - 1``) may go round with a plain one
(``t <= s``) and gives a letter lower limits other than 0 (``t`` runs from
``max(0, s - W + 1)``).  :func:`count_offsets` counts such a domain by a
Fourier-Motzkin elimination: the innermost letter ``x`` runs from the largest
of its lower limits to the least of its upper ones; each choice of which limit
is the largest and which the least is one case, stated by difference bounds on
the remaining letters (ties go to the first listed, so the cases partition the
domain), together with ``lower <= upper`` (outside it the range is empty and
adds nothing).  Inside a case the sum is Faulhaber's polynomial, exact; limits
in the dims alone, ``L = max(...)`` and ``U = min(...)`` (always so for the
last letter), are summed to ``max(U, L - 1)``, exact when the range is empty
too.  Two constraints that tie two letters, ``x <= y + c`` and ``y <= x - c``
(``t < s + 1, t > s - 1``), fix ``x = y + c``: ``x`` is replaced by it in every
other constraint before the elimination goes on (a diagonal: ``t = s - W``
over ``S`` has ``S - min(S, W)`` pairs).  A condition on the dims alone
between two letters' limits (``W <= U`` for ``t <= s - W, t >= s - U``) that
cannot be proved or refuted for all dims is refused (:class:`Uncountable`): the count would be piecewise in the dims.
The result is written in minima of the dims (``max(a, b) = a + b - min(a, b)``),
each minimum without the arguments another provably undercuts.  The causal
window ``t <= s, s - t < W`` over ``S`` has ``m(m + 1)/2 + (S - m)W`` pairs,
``m = min(S, W)``.  :func:`symflops.core.domain.domain_size` checks every
count against an enumeration.

The proofs (:func:`proved_at_most`) are sufficient tests: a polynomial whose
coefficients in ``u = dim - 1`` are non-negative, split first at a ``min`` or
``max`` it is linear in, or, for minima of two dims each, in every region of
their order.
"""

from __future__ import annotations

import functools
import itertools
from typing import Iterable, Mapping, Sequence

import sympy


class Uncountable(ValueError):
    """A where-clause whose count is not one closed form in the dims (it
    depends on how two dim expressions compare), or whose domain is empty."""


#: The upper limit in :func:`faulhaber`'s polynomials.
TOP = sympy.Dummy("top", integer=True)


@functools.lru_cache(maxsize=4096)
def faulhaber(f: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """``sum_{x=0}^{top} f`` for a summand polynomial in ``x``, as a polynomial in
    ``top``: each power ``x**k`` summed by :func:`power_sum` (SymPy's general
    ``summation`` took a quarter of ``plan --hf-config`` for Llama-2-7B)."""
    if x not in f.free_symbols:
        return sympy.expand(f * (TOP + 1))
    terms = sympy.Poly(f, x).terms()
    return sympy.expand(sum((c * power_sum(k) for (k,), c in terms), sympy.Integer(0)))


@functools.lru_cache(maxsize=None)
def power_sum(k: int) -> sympy.Expr:
    """``sum_{x=0}^{top} x**k`` (``0**0 = 1``) as a polynomial in ``top``, exact
    for ``top >= -1``: telescoping ``(x + 1)**(k+1) - x**(k+1)`` over ``x = 0 ..
    top`` gives ``sum_{j<=k} C(k+1, j) S_j = (top + 1)**(k+1)``, solved for ``S_k``."""
    lower = sum((sympy.binomial(k + 1, j) * power_sum(j) for j in range(k)), sympy.Integer(0))
    return sympy.expand(((TOP + 1) ** (k + 1) - lower) / (k + 1))


#: ``(low, high, c)``: ``x_low <= x_high + c``; ``None`` stands for the number 0.
_Constraint = tuple["str | None", "str | None", sympy.Expr]


def count_offsets(bounds: Iterable[_Constraint], extents: Mapping[str, sympy.Expr],
                  keys: Sequence[str] = ()) -> sympy.Expr:
    """The number of tuples of ``extents``' letters (each in ``0 .. extent - 1``)
    with ``x_low <= x_high + c`` for every ``(low, high, c)`` of ``bounds``, in
    closed form.  Ties in the order of elimination go to the letters listed
    most often in ``keys`` (the key ``t`` of a plain ``t <= s``)."""
    cons: set[_Constraint] = set()
    for x, n in extents.items():
        cons |= {(None, x, sympy.Integer(0)), (x, None, n - 1)}
    cons |= set(bounds)
    order = sorted(extents, key=lambda x: (-list(keys).count(x), x))
    letters = {x: sympy.Dummy(x, integer=True) for x in extents}
    return _simplified(_eliminate(tuple(order), _merged(cons), sympy.Integer(1), letters))


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
    equal = _equality(order, cons)
    if equal is not None:
        # x = y + c: a diagonal.  x is no letter of its own; its limits bound y.
        x, y, c = equal
        kept = _feasible([_substituted(k, x, y, c) for k in cons if {k[0], k[1]} != {x, y}])
        if kept is None:
            return sympy.Integer(0)
        return _eliminate(tuple(z for z in order if z != x), _merged(kept),
                          sympy.expand(summand.xreplace({letters[x]: letters[y] + c})), letters)

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


def _equality(order: tuple[str, ...], cons: frozenset[_Constraint]
              ) -> tuple[str, str, sympy.Expr] | None:
    """``(x, y, c)`` when ``cons`` hold both ``x <= y + c`` and ``y <= x - c``,
    so that ``x = y + c`` (``t < s + 1, t > s - 1``: ``t = s``), ``x`` the
    later of the two in ``order``; None when no two letters are tied so."""
    for low, high, c in sorted(cons, key=sympy.default_sort_key):
        if low is None or high is None:
            continue
        for low2, high2, c2 in cons:
            if (low2, high2) == (high, low) and sympy.expand(c + c2) == 0:
                if order.index(low) > order.index(high):
                    return low, high, c
                return high, low, c2
    return None


def _substituted(k: _Constraint, x: str, y: str, c: sympy.Expr) -> _Constraint:
    """The constraint ``k`` with ``x`` replaced by ``y + c``."""
    low, high, d = k
    if low == x:   # y + c <= high + d
        return y, high, d - c
    if high == x:  # low <= y + c + d
        return low, y, d + c
    return k


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
        constants = {a.as_coeff_Add()[0] for a in args}
        if len(constants) == 1 and 0 not in constants:  # min(a - 1, b - 1) = min(a, b) - 1
            shift = constants.pop()
            return prune(type(m)(*(a - shift for a in args))) + shift
        sign = 1 if isinstance(m, sympy.Min) else -1
        keep = [a for i, a in enumerate(args)
                if not any(_nonnegative(sign * (a - b)) and (j < i or not _nonnegative(sign * (b - a)))
                           for j, b in enumerate(args) if j != i)]
        if len(keep) == 1:
            return keep[0]
        if isinstance(m, sympy.Min) and all(a.could_extract_minus_sign() for a in keep):
            return -prune(sympy.Max(*(-a for a in keep), evaluate=False))
        # min(0, W - S) = min(S, W) - S: a dim subtracted in some argument, added to all
        # (only among polynomial arguments: an argument may hold a minimum
        # that stayed, min(S, W + 1) inside a max, which Poly cannot take)
        polynomial = not any(a.atoms(sympy.Min, sympy.Max) for a in keep)
        for d in sorted(m.free_symbols, key=str) if polynomial else ():
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
    top = faulhaber(sympy.expand(f), x)
    return sympy.expand(top.xreplace({TOP: high}) - top.xreplace({TOP: low - 1}))
