"""Small operations on polynomials in the dims that SymPy does slowly.

SymPy's own ``Max`` compares every pair of its arguments symbolically when it
is built (seconds for a few dozen polynomials), and rebuilds itself that way
whenever a dim is substituted.  :func:`largest` keeps only the candidates that
no other one bounds, by a cheap sufficient test on their coefficients, and
:func:`substitute_max` substitutes inside a Max without SymPy's comparisons.
The others read an expanded polynomial's terms straight from SymPy's term
dictionary (:func:`monomials`): exact division (long division on exponent
tuples) instead of ``cancel`` or ``div``, a defined dim's single-term formula
substituted term by term instead of ``expand``, and the common factor a sheet
prints outside a sum instead of ``factor``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Sequence

import sympy
from . import factoring

Monomial = dict[sympy.Expr, int]  # {symbol: power}


def terms(e: sympy.Expr, gens: tuple[sympy.Symbol, ...]) -> dict | None:
    """``e`` as ``{exponents: coefficient}``; None if it is not a polynomial."""
    found = monomials(sympy.expand(e))
    return None if found is None else by_exponents(found, gens)


def plain_terms(e: sympy.Expr, gens: tuple[sympy.Symbol, ...]) -> dict | None:
    """:func:`terms` with Python numbers for coefficients (an ``int``, else a
    ``Fraction``): exact, and far quicker to add and compare than SymPy's."""
    found = terms(e, gens)
    return None if found is None else {m: _number(c) for m, c in found.items()}


def _number(c: sympy.Rational) -> Fraction | int:
    """A SymPy rational as a Python ``int``, else a ``Fraction``."""
    return int(c.p) if c.q == 1 else Fraction(int(c.p), int(c.q))


def by_exponents(found: list[tuple[sympy.Rational, Monomial]], gens: Sequence[sympy.Symbol]
                 ) -> dict[tuple[int, ...], sympy.Rational]:
    """Terms from :func:`monomials` as ``{exponents of gens: coefficient}``."""
    return {tuple(powers.get(g, 0) for g in gens): c for c, powers in found}


def dominated(a: dict | None, b: dict | None) -> bool:
    """Whether ``a <= b`` for all dims >= 1, by a cheap sufficient test: each
    negative term of ``b - a`` is paid for by positive terms of ``b - a`` whose
    monomials it divides (``B <= B V`` since ``V >= 1``)."""
    if a is None or b is None:
        return False
    diff = {m: b.get(m, 0) - a.get(m, 0) for m in set(a) | set(b)}
    credit = {m: c for m, c in diff.items() if c > 0}
    payers = sorted(credit)
    for m, c in sorted(((m, -c) for m, c in diff.items() if c < 0), key=lambda t: t[0]):
        for p in payers:
            if c <= 0:
                break
            if credit[p] > 0 and all(x <= y for x, y in zip(m, p)):
                used = min(c, credit[p])
                credit[p] -= used
                c -= used
        if c > 0:
            return False
    return True


#: Where :func:`largest` first compares two candidates: at every dim 2, then at
#: the dims set to these primes in turn (any point with dims >= 1 would do).
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71)


def _values(coefficients: dict | None, points: Sequence[Sequence[int]]) -> tuple | None:
    """A polynomial from :func:`plain_terms` at each point (one whole number per gen), exactly."""
    if coefficients is None:
        return None
    out = []
    for point in points:
        total = 0
        for exponents, c in coefficients.items():
            value = c
            for x, e in zip(point, exponents):
                value *= x ** e
            total += value
        out.append(total)
    return tuple(out)


def largest(candidates: list[sympy.Expr]) -> sympy.Expr:
    """The largest of polynomials, keeping only those no other one bounds
    coefficient by coefficient (SymPy's own Max compares every pair
    symbolically, which takes seconds for a few dozen).

    :func:`dominated` is sound (it says ``a <= b`` only where ``a <= b`` at
    every point with dims >= 1), so a candidate larger than another at some
    such point is not dominated by it: the exact values at two points rule
    most pairs out before the test on coefficients."""
    unique = list(dict.fromkeys(candidates))
    gens = tuple(sorted(set().union(*(c.free_symbols for c in unique)), key=str))
    coefficients = [plain_terms(c, gens) for c in unique]
    points = ((2,) * len(gens), tuple(_PRIMES[k % len(_PRIMES)] for k in range(len(gens))))
    values = [_values(c, points) for c in coefficients]

    def below(k: int, j: int) -> bool:  # dominated(coefficients[k], coefficients[j])
        vk, vj = values[k], values[j]
        if vk is None or vj is None or any(x > y for x, y in zip(vk, vj)):
            return False
        return dominated(coefficients[k], coefficients[j])

    keep = [a for k, a in enumerate(unique)
            if not any(j != k and below(k, j) and not (below(j, k) and j > k)
                       for j in range(len(unique)))]
    if not keep:
        return sympy.Integer(0)
    return keep[0] if len(keep) == 1 else sympy.Max(*keep, evaluate=False)


def substitute_max(expr: sympy.Expr, substitute: Callable[[sympy.Expr], sympy.Expr]) -> sympy.Expr:
    """``substitute`` applied to each argument of a Max, or of a positive
    number times a Max (a peak in bytes: the bytes per element times the
    peak in elements), and the Max rebuilt with :func:`largest`; ``substitute``
    applied to ``expr`` itself otherwise.  The two forms of one peak keep
    the same candidates."""
    scale, peak = expr.as_coeff_Mul()
    if isinstance(peak, sympy.Max) and scale.is_positive:
        kept = largest([substitute(a) for a in peak.args])
        if scale == 1 or isinstance(kept, sympy.Max):
            return scale * kept
        return sympy.expand(scale * kept)
    return substitute(expr)


def substituted(expr: sympy.Expr, mapping: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``sympy.expand(expr.xreplace(mapping))``, multiplied out term by term on
    Python numbers when ``expr`` is an expanded polynomial and every value a
    sum of terms with whole powers (a defined dim such as ``R = N/G`` or
    ``T = M + S``): the same canonical sum, without SymPy rebuilding and
    expanding the whole expression."""
    top = monomials(expr)
    values = {s: monomials(v, negative=True) for s, v in mapping.items()}
    if top is None or any(v is None for v in values.values()):
        return sympy.expand(expr.xreplace(mapping))
    plain = {s: [(_number(c), p) for c, p in v] for s, v in values.items()}
    collected: dict[tuple, Fraction | int] = {}
    for c, powers in top:
        product: list[tuple[Fraction | int, dict]] = [(_number(c), {})]
        for b, e in powers.items():
            factor = plain.get(b, [(1, {b: 1})])
            for _ in range(e):
                product = [(pc * fc, _times(pp, fp)) for pc, pp in product for fc, fp in factor]
        for pc, pp in product:
            key = tuple(sorted(((b, e) for b, e in pp.items() if e), key=lambda x: x[0].name))
            collected[key] = collected.get(key, 0) + pc
    return sympy.Add(*(sympy.Mul(sympy.Rational(c.numerator, c.denominator),
                                 *(b ** e for b, e in key))
                       for key, c in collected.items() if c != 0))


def _times(a: dict, b: dict) -> dict:
    """The product of two monomials as ``{symbol: power}``."""
    out = dict(a)
    for x, e in b.items():
        out[x] = out.get(x, 0) + e
    return out


def quotient(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    """``a / b`` expanded: a polynomial when ``b`` divides ``a``, else a sum
    of terms some of which keep a denominator."""
    exact = exact_quotient(a, b)
    return exact if exact is not None else sympy.expand(a / b)



def monomials(expr: sympy.Expr, negative: bool = False
              ) -> list[tuple[sympy.Rational, Monomial]] | None:
    """An expanded polynomial with rational coefficients as its terms,
    ``(coefficient, {symbol: power})``; None when ``expr`` is not one (with
    ``negative``, powers may be negative integers: ``N/G``).  Reads SymPy's
    own term dictionary, so it costs next to nothing.

    >>> B, D = sympy.symbols("B D")
    >>> monomials(3*B**2)
    [(3, {B: 2})]
    >>> monomials(D + 1/B) is None, monomials(sympy.Integer(0))
    (True, [])
    """
    out = []
    for monomial, c in expr.as_coefficients_dict().items():
        if c == 0:  # zero has no terms
            continue
        powers = {} if monomial == 1 else monomial.as_powers_dict()
        if not c.is_Rational or not all(b.is_Symbol and e.is_Integer and (negative or e > 0)
                                        for b, e in powers.items()):
            return None
        out.append((c, {b: int(e) for b, e in powers.items()}))
    return out


def from_monomials(terms: list[tuple[sympy.Rational, Monomial]]) -> sympy.Expr:
    return sympy.Add(*(sympy.Mul(c, *(b ** e for b, e in powers.items())) for c, powers in terms))


def exact_quotient(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """``a / b`` expanded when it is a polynomial in the dims (rational
    coefficients allowed: ``3*B*D / (2*D)`` is ``3*B/2``), else None.  By
    polynomial long division, much faster than ``sympy.cancel``; a quotient
    of expressions that are not polynomials goes through ``cancel``."""
    top, bottom = monomials(sympy.expand(a)), monomials(sympy.expand(b))
    if top is not None and bottom:
        gens = tuple(sorted({s for _, t in top + bottom for s in t}, key=lambda s: s.name))
        q = _divide(by_exponents(top, gens), by_exponents(bottom, gens))
        return None if q is None else from_monomials(
            [(c, {g: e for g, e in zip(gens, m) if e}) for m, c in q.items()])
    gens = tuple(sorted(a.free_symbols | b.free_symbols, key=str))
    if gens and a.is_polynomial(*gens) and b.is_polynomial(*gens):
        quotient, remainder = sympy.div(sympy.Poly(a, *gens, domain="QQ"),
                                        sympy.Poly(b, *gens, domain="QQ"))
        return sympy.expand(quotient.as_expr()) if remainder.is_zero else None
    num, den = sympy.fraction(sympy.cancel(a / b))
    return sympy.expand(num / den) if den.is_number else None


def cancelled(top: sympy.Expr, bottom: sympy.Expr) -> sympy.Expr:
    """``top / bottom`` with the common factors divided out: the expression
    ``sympy.cancel(top / bottom)`` gives, four to five times sooner on the
    roofline's intensities.  ``cancel`` first rewrites the whole quotient
    (its signs, then its common terms) before it reads off a numerator and a
    denominator; here the two are handed to ``cancel`` as a pair, whose
    answer divides out their gcd and makes the denominator's sign canonical
    the same way.  A Piecewise, or a zero ``bottom``, goes through ``cancel``
    whole."""
    if bottom == 0 or top.has(sympy.Piecewise) or bottom.has(sympy.Piecewise):
        return sympy.cancel(top / bottom)
    c, p, q = sympy.cancel((top, bottom))
    return c * (p / q)


def _divide(top: dict[tuple[int, ...], sympy.Rational], bottom: dict[tuple[int, ...], sympy.Rational]
            ) -> dict[tuple[int, ...], sympy.Rational] | None:
    """The quotient of two polynomials given as ``{exponents: coefficient}``
    when the division leaves no remainder, else None.  Long division in
    lexicographic order: if ``bottom`` divides ``top``, each step's leading
    term of what is left is a multiple of ``bottom``'s leading term."""
    lead = max(bottom)
    left, quotient = dict(top), {}
    while left:
        head = max(left)
        shift = tuple(x - y for x, y in zip(head, lead))
        if min(shift, default=0) < 0:
            return None
        c = left[head] / bottom[lead]
        quotient[shift] = c
        for m, k in bottom.items():
            at = tuple(x + y for x, y in zip(m, shift))
            value = left.get(at, 0) - c * k
            if value == 0:
                left.pop(at, None)
            else:
                left[at] = value
    return quotient


def common_factor(poly: sympy.Expr) -> tuple[sympy.Rational, sympy.Expr, sympy.Expr] | None:
    """An expanded polynomial with rational coefficients split as
    ``coefficient * monomial * rest``: the coefficient is the rational gcd of
    its coefficients (negative when all of them are), the monomial the common
    power of each dim; None when ``poly`` is not such a polynomial.

    >>> B, D, F = sympy.symbols("B D F")
    >>> common_factor(4*B*D + 2*B*F)
    (2, B, 2*D + F)
    """
    terms = monomials(poly)
    if not terms:
        return None
    numerators = [c.p for c, _ in terms]
    coefficient = sympy.Rational(math.gcd(*numerators), math.lcm(*(c.q for c, _ in terms)))
    if all(n < 0 for n in numerators):
        coefficient = -coefficient
    common = dict(terms[0][1])
    for _, powers in terms[1:]:
        common = {b: min(e, powers[b]) for b, e in common.items() if b in powers}
    rest = from_monomials([(c / coefficient, {b: e - common.get(b, 0) for b, e in powers.items()})
                           for c, powers in terms])
    return coefficient, sympy.Mul(*(b ** e for b, e in common.items())), rest


class Least(sympy.Min):
    """``Min`` of counts already pruned of any that another bounds (the
    cheapest orders of a product, :mod:`symflops.ops.einsum.orders`): SymPy's own
    ``Min`` compares every pair of its arguments symbolically each time it is
    rebuilt (by ``expand``, ``subs``, ``xreplace``), seconds for a dozen
    polynomials; this one compares them only once they are numbers.  It
    prints as ``Min`` (``--json`` formulas parse back with SymPy) and
    evaluates as ``Min`` in NumPy."""

    def __new__(cls, *args: sympy.Expr, **options: object) -> sympy.Expr:
        values = [sympy.sympify(a) for a in args]
        if all(v.is_number for v in values):
            return sympy.Min(*values)
        return super().__new__(cls, *values, evaluate=False)

    def _sympystr(self, printer: object) -> str:
        return "Min(" + ", ".join(printer._print(a) for a in self.args) + ")"

    def _latex(self, printer: object) -> str:
        return r"\min\left(" + ", ".join(printer._print(a) for a in self.args) + r"\right)"


class Cheapest(sympy.Piecewise):
    """The count of whichever candidate is cheapest, ``Piecewise((a1, c1),
    (a2, c2), ..., (an, True))`` with each ``ci`` saying that candidate i
    costs least: like :class:`Least`, it is not simplified while symbolic
    (SymPy distributes its conditions on every rebuild, minutes for a few
    candidates), and evaluates as ``Piecewise`` once the dims are numbers."""

    def __new__(cls, *args: object, **options: object) -> sympy.Expr:
        pairs = [sympy.functions.elementary.piecewise.ExprCondPair(*a) for a in args]
        if all(p.cond.is_Boolean and not p.cond.free_symbols for p in pairs):
            return sympy.Piecewise(*pairs)
        return super().__new__(cls, *pairs, evaluate=False)

    def totals(self) -> tuple[sympy.Expr, ...]:
        """Each candidate's whole cost (both buckets), in the order of its
        branches, read off the conditions: each but the last (True) is
        ``total_k <= total_j`` for every other candidate j."""
        sides = [list(cond.args) if isinstance(cond, sympy.And) else [cond]
                 for _, cond in self.args[:-1]]
        found = [le[0].lhs for le in sides]
        return (*found, next(x.rhs for x in sides[0] if x.rhs not in found))

    def _sympystr(self, printer: object) -> str:
        return "Piecewise(" + ", ".join(f"({printer._print(e)}, {printer._print(c)})"
                                        for e, c in self.args) + ")"

    # SymPy's printers skip a parent's method for a renamed subclass of a
    # function: print as the Piecewise it is.
    def _numpycode(self, printer: object) -> str:
        return printer._print_Piecewise(self)

    def _latex(self, printer: object) -> str:
        return printer._print_Piecewise(self)


def less_than(a: sympy.Expr, b: sympy.Expr, dims: Sequence[sympy.Symbol]) -> sympy.Basic:
    """``a < b`` for positive integer dims, solved for one dim where the
    difference is a positive or negative multiple of a power of that dim
    times a linear function of it: the linear order of linear attention is
    cheaper when ``S > 2 E F / (E + F)``.  Else the inequality as it stands."""
    difference = sympy.factor_terms(sympy.expand(a - b))
    for x in dims:
        if x not in difference.free_symbols:
            continue
        outside = sympy.Integer(1)   # factors free of x, and powers of x: their sign is known
        inside = sympy.Integer(1)
        for factor in sympy.Mul.make_args(difference):
            base, _ = factor.as_base_exp()
            if x not in factor.free_symbols:
                outside *= factor
            elif base != x:
                inside *= factor
        linear = sympy.expand(inside)
        if not linear.is_polynomial(x) or sympy.degree(linear, x) != 1:
            continue
        slope, intercept = sympy.Poly(linear, x).all_coeffs()
        sign = _sign(sympy.expand(outside * slope))
        if sign == 0:
            continue
        threshold = factoring.factor(-intercept / slope)
        return _integer(x, threshold, below=sign > 0)
    # Factors that are positive at every size (numbers, powers of dims) do not change the sign.
    kept = [f for f in sympy.Mul.make_args(difference)
            if not ((f.is_number and f > 0) or f.as_base_exp()[0].is_Symbol)]
    return sympy.StrictLessThan(sympy.Mul(*kept), 0)


def _integer(x: sympy.Symbol, threshold: sympy.Expr, below: bool) -> sympy.Basic:
    """``x < threshold`` (or ``>``) for an integer dim ``x >= 1``: a numeric
    threshold as a bound on ``x`` itself (``S < 4/3`` is ``S = 1``)."""
    if not threshold.is_number:
        return x < threshold if below else x > threshold
    if below:
        top = sympy.ceiling(threshold) - 1
        return sympy.false if top < 1 else sympy.Eq(x, 1) if top == 1 else x <= top
    return sympy.Ge(x, max(sympy.floor(threshold) + 1, 1))


def _sign(e: sympy.Expr) -> int:
    """+1 or -1 when ``e`` has that sign at every value of the dims >= 1
    (all its terms' coefficients share it), else 0."""
    found = monomials(e)
    if not found:
        return 0
    signs = {c > 0 for c, _ in found}
    return 0 if len(signs) != 1 else 1 if True in signs else -1
