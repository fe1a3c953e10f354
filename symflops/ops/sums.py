"""SymPy sums of tensor elements: deciding the guards delta summation puts on
its answers (:func:`in_range`), evaluating the sums that differentiation
creates while leaving the forward pass's own sums opaque, and recognising a
full sum over a row (one or several reduced letters) so that a saved tensor
can take its place.

Invariants: indices always lie in their range; nothing here guesses (an
undecidable guard is an error); a row sum runs over each reduced letter from 0
to its extent minus 1, its limits in the order of the letters.
"""

from __future__ import annotations

from typing import Callable, Mapping

import sympy
from sympy.concrete.delta import deltasummation

Positions = tuple[int, ...]  # where the reduced letters stand among an element's indices
Letters = tuple[sympy.Symbol, ...]


# -------------------------------------------------- Piecewise clean-up --

def _relation_truth(rel: sympy.core.relational.Relational,
                    extents: Mapping[sympy.Symbol, sympy.Expr]) -> bool | None:
    """Whether an inequality holds for every (True), no (False) or some (None)
    value of its index in ``0 .. extent - 1``.  An equality holds where both
    ``>=`` and ``<=`` do (an index of extent 1 is always 0)."""
    if isinstance(rel, (sympy.Eq, sympy.Ne)):
        both = [_relation_truth(op(rel.lhs, rel.rhs, evaluate=False), extents)
                for op in (sympy.Ge, sympy.Le)]
        equal = False if False in both else (True if both == [True, True] else None)
        return equal if equal is None or isinstance(rel, sympy.Eq) else not equal
    if not isinstance(rel, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
        return None
    gap = sympy.expand(rel.gts - rel.lts)  # the relation says gap >= 0 (or > 0)
    strict = isinstance(rel, (sympy.Gt, sympy.Lt))
    indices = [s for s in gap.free_symbols if s in extents]
    # Other symbols must be dimensions (positive); an index of unknown range
    # or two indices in one relation leave the answer open.
    if len(indices) > 1 or not all(s in extents or s.is_positive for s in gap.free_symbols):
        return None
    worst = best = gap
    if indices:
        i = indices[0]
        slope = gap.diff(i)
        if not slope.is_number or slope == 0 or gap.diff(i, 2) != 0:
            return None
        low, high = sympy.Integer(0), extents[i] - 1
        worst = gap.subs(i, low if slope > 0 else high)
        best = gap.subs(i, high if slope > 0 else low)
    if (worst.is_positive if strict else worst.is_nonnegative):
        return True
    if (best.is_nonpositive if strict else best.is_negative):
        return False
    return None


def _truth(cond: sympy.Basic, extents: Mapping[sympy.Symbol, sympy.Expr]) -> bool | None:
    """Whether ``cond`` holds whenever every index lies in its range: True,
    False, or None when that depends on the values."""
    if cond is sympy.true:
        return True
    if cond is sympy.false:
        return False
    if isinstance(cond, sympy.Not):
        inner = _truth(cond.args[0], extents)
        return None if inner is None else not inner
    if isinstance(cond, (sympy.And, sympy.Or)):
        parts = [_truth(c, extents) for c in cond.args]
        decided, wanted = (False, True) if isinstance(cond, sympy.And) else (True, False)
        if decided in parts:   # one False decides an And, one True an Or
            return decided
        return wanted if all(p is wanted for p in parts) else None
    if isinstance(cond, sympy.core.relational.Relational):
        return _relation_truth(cond, extents)
    return None


def in_range(expr: sympy.Expr, extents: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Replace every ``Piecewise`` in ``expr`` by its branch that holds when
    each index ``i`` in ``extents`` lies in ``0 .. extents[i] - 1``.

    Delta summation guards its answer with the range of the summed index
    (``Piecewise((x, (0 <= t') & (t' <= T - 1)), (0, True))``); the indices of
    a tensor element are in range by construction.  Branches are tried in
    order; one whose condition is false in range is skipped; a condition that
    depends on the values (or names an index of unknown range) is an error
    rather than a guess."""

    def pick(pw: sympy.Piecewise) -> sympy.Expr:
        for value, cond in pw.args:
            truth = _truth(cond, extents)
            if truth is True:
                return value
            if truth is None:
                raise ValueError(f"cannot decide {cond} for indices in range")
        raise ValueError(f"no branch of {pw} holds for indices in range")

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), pick)


# --------------------------------------------------- evaluating sums --

def evaluate_created_sums(expr: sympy.Expr, opaque: set[sympy.Sum],
                           extents: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Evaluate the sums that differentiation created, leaving the forward
    pass's own sums (``opaque``) untouched: by linearity, a summand free of
    the summed index is multiplied by the count, one with a delta in it goes
    to SymPy's delta summation (then :func:`in_range`), any other is kept as a
    sum with its constant factors pulled out."""
    # Opaque sums become placeholders -- undefined functions of the sum's free
    # symbols, so that dependence on a summed index stays visible and delta
    # summation can substitute into it -- and expanding a summand never opens them.
    holders: dict[sympy.Sum, tuple[sympy.Expr, tuple[sympy.Symbol, ...]]] = {}
    for k, s in enumerate(sorted(opaque, key=sympy.default_sort_key)):
        args = tuple(sorted(s.free_symbols, key=str))
        holders[s] = (sympy.Function(f"_opaque{k}")(*args), args)
    restore = {h.func: (s, args) for s, (h, args) in holders.items()}

    def reopen(e: sympy.Expr) -> sympy.Expr:
        s, args = restore[e.func]
        return s.xreplace(dict(zip(args, e.args)))

    def evaluate(s: sympy.Sum) -> sympy.Expr:
        body = s.function.xreplace({o: h for o, (h, _) in holders.items()})
        for limit in s.limits:  # innermost first
            j, low, high = limit
            total = sympy.Integer(0)
            for term in sympy.Add.make_args(sympy.expand(body)):
                const, dep = term.as_independent(j, as_Add=False)
                if dep == 1:
                    total += term * (high - low + 1)
                elif dep.has(sympy.KroneckerDelta):
                    total += const * in_range(deltasummation(dep, limit), extents)
                else:
                    total += const * sympy.Sum(dep, limit)
            body = total
        # A summand kept over several letters is one sum over all of them.
        body = body.replace(lambda e: isinstance(e, sympy.Sum) and isinstance(e.function, sympy.Sum),
                            lambda e: sympy.Sum(e.function.function, *e.function.limits, *e.limits))
        return body.replace(lambda e: getattr(e, "func", None) in restore, reopen)

    return expr.replace(lambda e: isinstance(e, sympy.Sum) and e not in opaque, evaluate)


# ------------------------------------------------------- row sums --


def full_sum(e: sympy.Basic, dims: tuple[sympy.Expr, ...]) -> tuple[Letters, sympy.Expr] | None:
    """``((j, ...), f)`` when ``e`` is ``Sum(f, (j, 0, dims[0] - 1), ...)``, one
    limit per reduced letter, in order."""
    if isinstance(e, sympy.Sum) and len(e.limits) == len(dims):
        if all(low == 0 and high == dim - 1 for (_, low, high), dim in zip(e.limits, dims)):
            return tuple(j for j, _, _ in e.limits), e.function
    return None


def row_of_element(element: sympy.Expr, base: sympy.IndexedBase, ks: Positions,
         js: Letters | None = None) -> tuple[sympy.Expr, ...] | None:
    """The indices other than those at positions ``ks`` of ``element`` when it
    is an element of ``base`` (whose indices there are ``js``, when given, and
    no other index holds one of them)."""
    if not (isinstance(element, sympy.Indexed) and element.base == base):
        return None
    idx = element.indices
    rest = tuple(i for n, i in enumerate(idx) if n not in ks)
    if js is not None and (tuple(idx[k] for k in ks) != js
                           or any(i.has(j) for i in rest for j in js)):
        return None
    return rest


def replace_row_sums(expr: sympy.Expr, dims: tuple[sympy.Expr, ...],
                      summand: Callable[[Letters, sympy.Expr], tuple[sympy.Expr, ...] | None],
                      value: Callable[[tuple[sympy.Expr, ...]], sympy.Expr]) -> sympy.Expr:
    """Replace each ``Sum(f, (j, 0, dims[0] - 1), ...)`` whose summand ``f`` is
    recognised by ``summand`` (which returns the row's other indices) by
    ``value(row)``; any names of the summed letters match."""

    def row_of(e: sympy.Basic) -> tuple[sympy.Expr, ...] | None:
        found = full_sum(e, dims)
        return summand(*found) if found else None

    return expr.replace(lambda e: row_of(e) is not None, lambda e: value(row_of(e)))


def elements(base: sympy.IndexedBase, ks: Positions) -> Callable[[Letters, sympy.Expr], tuple | None]:
    """Recognise summands ``base[..., j, ...]`` (the ``js`` at positions ``ks``)."""
    return lambda js, f: row_of_element(f, base, ks, js)


def exp_elements(base: sympy.IndexedBase, ks: Positions) -> Callable[[Letters, sympy.Expr], tuple | None]:
    """Recognise summands ``exp(base[..., j, ...])``."""
    return lambda js, f: row_of_element(f.args[0], base, ks, js) if isinstance(f, sympy.exp) else None
