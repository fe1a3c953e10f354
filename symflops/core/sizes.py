"""What a size is, and the sign proofs behind it.

Invariant: every size symflops counts with is a positive integer at every
positive integer value of the dims.  A dim is a positive integer symbol; the
other sizes are formulas of dims, accepted only when that is proved:

* an **axis extent** (``P + K - 1``), a block's **repeat** (``L``) and a
  block's **mapped dim** (``F: 4*D``) must be a *proved size*: a polynomial in
  the dims (rational coefficients allowed) that is

  - *integer-valued*: a polynomial of degree ``d_i`` in dim ``x_i`` that is an
    integer at every point of the grid ``x_i in {1, ..., d_i + 1}`` is an
    integer at every positive integer point (its Newton coefficients, the
    forward differences at ``x = 1``, are integer combinations of those
    values); integer coefficients make it so at once;
  - *positive*: :func:`polynomial_sign` proves it, from the coefficients in
    ``u = dim - 1 >= 0`` (all non-negative with a positive constant term).

* a **defined dim** (``equals:``) must be a proved size, or else a *promised
  quotient*: a single term ``c * prod(d_i ** e_i)`` with ``c > 0`` and whole
  exponents, some negative (``N / G``, ``c * k * B * S / M``).  It is
  positive, but whether it is whole depends on the values: every command
  that takes values checks it there (:func:`symflops.count.evaluate.check_definitions`).

Nothing else is a size: ``-D``, ``B - B``, ``S - 1`` (zero at S = 1),
``D / 2`` as an axis, ``sqrt(D)``, ``exp(L)`` are refused where they are written.

The sign proofs here are also those of ``symflops check``'s inequalities.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Sequence

import sympy

from .errors import Span, SymflopsError
from .polynomial import monomials

# The sign of an expression, as far as it is proved for all positive integer dims.
ZERO, POSITIVE, NONNEGATIVE, NEGATIVE, NONPOSITIVE, UNKNOWN = (
    "zero", "positive", "nonnegative", "negative", "nonpositive", "unknown")

#: A sign proof by shifting gives up (undetermined) beyond this many terms, and
#: an integrality proof beyond this many grid points times terms.
MAX_SHIFTED_TERMS = 20_000

FLIP = {POSITIVE: NEGATIVE, NEGATIVE: POSITIVE, NONNEGATIVE: NONPOSITIVE,
        NONPOSITIVE: NONNEGATIVE, ZERO: ZERO, UNKNOWN: UNKNOWN}


def polynomial_sign(p: sympy.Expr, dims: Sequence[sympy.Symbol]) -> str:
    """Sign of a polynomial for every dim >= 1, from its coefficients in
    ``u = dim - 1 >= 0``: all of one sign proves that sign, strictly when the
    constant term (the value at all dims 1) is not zero."""
    p = sympy.expand(p)
    if p == 0:
        return ZERO
    present = [d for d in dims if d in p.free_symbols]
    if p.free_symbols - set(present):
        return UNKNOWN
    if not present:
        return POSITIVE if p > 0 else NEGATIVE
    terms = monomials(p)
    if terms is not None:  # rational coefficients: the same proof on Python numbers
        return _rational_sign([(Fraction(int(c.p), int(c.q)), tuple(m.get(d, 0) for d in present))
                               for c, m in terms])
    return _sympy_sign(p, present)


def _sympy_sign(p: sympy.Expr, present: Sequence[sympy.Symbol]) -> str:
    """:func:`polynomial_sign` of an expanded, nonzero polynomial in the dims
    ``present`` (coefficients any real numbers), with SymPy's polynomials."""
    plain = sympy.Poly(p, *present)
    if all(c.is_comparable for c in plain.coeffs()):
        # Every monomial is positive at positive dims: one sign of coefficients
        # decides, strictly (the shifted constant term is their sum).
        if all(c >= 0 for c in plain.coeffs()):
            return POSITIVE
        if all(c <= 0 for c in plain.coeffs()):
            return NEGATIVE
    # The shift writes each monomial prod d**e as prod (u + 1)**e: prod (e + 1) terms.
    if sum(math.prod(e + 1 for e in m) for m in plain.monoms()) > MAX_SHIFTED_TERMS:
        return UNKNOWN
    shift = {d: sympy.Dummy(f"u_{d}", nonnegative=True) for d in present}
    shifted = sympy.Poly(p.subs({d: u + 1 for d, u in shift.items()}, simultaneous=True),
                         *shift.values())
    coefficients = shifted.coeffs()
    if not all(c.is_comparable for c in coefficients):  # real numbers only
        return UNKNOWN
    constant = shifted.coeff_monomial(1)
    if all(c >= 0 for c in coefficients):
        return POSITIVE if constant > 0 else NONNEGATIVE
    if all(c <= 0 for c in coefficients):
        return NEGATIVE if constant < 0 else NONPOSITIVE
    return UNKNOWN


def _rational_sign(terms: list[tuple[Fraction, tuple[int, ...]]]) -> str:
    """:func:`polynomial_sign` of a polynomial with rational coefficients,
    given as ``(coefficient, exponents)``: each ``d**e`` is written as
    ``(u + 1)**e``, whose coefficients are the binomial ones."""
    if all(c >= 0 for c, _ in terms):
        return POSITIVE
    if all(c <= 0 for c, _ in terms):
        return NEGATIVE
    if sum(math.prod(e + 1 for e in m) for _, m in terms) > MAX_SHIFTED_TERMS:
        return UNKNOWN
    shifted: dict[tuple[int, ...], Fraction] = {}
    for c, m in terms:
        for js in itertools.product(*(range(e + 1) for e in m)):
            k = c * math.prod(math.comb(e, j) for e, j in zip(m, js))
            shifted[js] = shifted.get(js, 0) + k
    coefficients = [c for c in shifted.values() if c != 0]
    constant = shifted.get(tuple(0 for _ in terms[0][1]), 0)
    if all(c >= 0 for c in coefficients):
        return POSITIVE if constant > 0 else NONNEGATIVE
    if all(c <= 0 for c in coefficients):
        return NEGATIVE if constant < 0 else NONPOSITIVE
    return UNKNOWN


def sign(expr: sympy.Expr, dims: Sequence[sympy.Symbol]) -> str:
    """Proved sign of ``expr`` for every positive integer value of ``dims``."""
    if expr == 0:
        return ZERO
    num, den = sympy.fraction(sympy.together(expr))
    if num.is_polynomial(*dims) and den.is_polynomial(*dims):
        n, d = polynomial_sign(num, dims), polynomial_sign(den, dims)
        if n == ZERO:
            return ZERO
        if d in (POSITIVE, NEGATIVE) and n != UNKNOWN:
            return n if d == POSITIVE else FLIP[n]
        return UNKNOWN
    # Not a rational function (Max, sqrt, ...): ask SymPy's assumptions.
    for answer, attribute in ((ZERO, "is_zero"), (POSITIVE, "is_positive"),
                              (NEGATIVE, "is_negative"), (NONNEGATIVE, "is_nonnegative"),
                              (NONPOSITIVE, "is_nonpositive")):
        if getattr(expr, attribute) is True:
            return answer
    return UNKNOWN


# ------------------------------------------------------------------ sizes --

def _point(values: dict[sympy.Symbol, int]) -> str:
    return ", ".join(f"{s}={v}" for s, v in sorted(values.items(), key=lambda kv: str(kv[0])))


def _not_whole(p: sympy.Poly) -> dict[sympy.Symbol, int] | None | bool:
    """A point of the grid ``x_i in 1..deg_i + 1`` where ``p`` is not an
    integer; None when there is none (then ``p`` is integer-valued); False
    when the grid is too large to search (not proved)."""
    terms = [(tuple(m), Fraction(int(c.p), int(c.q))) for m, c in p.terms()]
    if all(c.denominator == 1 for _, c in terms):
        return None
    degrees = p.degree_list()
    if math.prod(d + 1 for d in degrees) * len(terms) > MAX_SHIFTED_TERMS:
        return False
    for point in itertools.product(*(range(1, d + 2) for d in degrees)):
        value = sum(c * math.prod(x ** e for x, e in zip(point, m)) for m, c in terms)
        if value.denominator != 1:
            return dict(zip(p.gens, point))
    return None


@functools.lru_cache(maxsize=4096)
def size_problem(expr: sympy.Expr) -> str | None:
    """Why ``expr`` is not a proved size (see the module doc), in words that
    follow ``... is EXPR,``; None when it is one.  Asked once per distinct
    ``expr`` (a declaration's axes repeat the same few dims)."""
    found = monomials(expr)
    if found and all(c.is_Integer and c > 0 for c, _ in found):
        return None  # whole coefficients, all positive: a size at once (the module doc)
    dims = sorted(expr.free_symbols, key=str)
    if not expr.is_polynomial(*dims):
        return "which is not a polynomial in the dims"
    if not dims:
        if not expr.is_Integer:
            return "which is not a whole number"
        return None if expr > 0 else "which is not positive"
    p = sympy.Poly(expr, *dims)
    if not p.domain.is_QQ and not p.domain.is_ZZ:
        return "which has coefficients that are not rational numbers"
    bad = _not_whole(p)
    if bad is False:
        return "which cannot be proved to be a whole number for every value of the dims"
    if bad is not None:
        return (f"which is not a whole number for every value of the dims "
                f"({_point(bad)} gives {expr.subs(bad)})")
    proved = polynomial_sign(expr, dims)
    if proved == POSITIVE:
        return None
    ones = {d: 1 for d in dims}
    low = expr.subs(ones)
    where = f" (it is {low} at {_point(ones)})" if low <= 0 else ""
    if proved in (NEGATIVE, NONPOSITIVE):
        return f"which is not positive for any value of the dims{where}"
    return f"which is not provably positive for every positive value of the dims{where}"


def promised_quotient(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is a single term with a positive rational coefficient
    and whole exponents (``N / G``, ``c*k*B*S/M``, ``D / 2``): positive, but
    whole only at some values."""
    found = monomials(sympy.expand(expr), negative=True)
    return (found is not None and len(found) == 1 and found[0][0] > 0
            and bool(expr.free_symbols))


def check_size(expr: sympy.Expr, lead: str, span: Span | None, hint: str,
               quotient: bool = False) -> bool:
    """Refuse ``expr`` unless it is a proved size (or, with ``quotient``, a
    promised quotient); True when it is accepted only as a promise.  The
    message reads ``{lead} {expr}, {why}``: "an axis of 'X' has size -D,
    which is not provably positive ..."."""
    problem = size_problem(expr)
    if problem is None:
        return False
    if quotient and promised_quotient(expr):
        return True
    raise SymflopsError(f"{lead} {sympy.sstr(expr)}, {problem}", span, hint)
