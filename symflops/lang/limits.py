"""How large a parsed value may grow: the limits of :mod:`symflops.lang.expr`,
and the measures that enforce them without expanding anything.

Invariant: every measure is read off the expression tree and is an upper bound
(a sum's terms add, a product's multiply, a power's follow the multinomial
count), so that a value is refused before SymPy would spend minutes or
gigabytes building it.  No function here evaluates user text: they take SymPy
objects the parser has already built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import sympy

MAX_DEPTH = 100  # each level costs ~4 Python frames; stays well inside the recursion limit
# SymPy's assumption queries run primality tests on big integers (seconds each at
# 4000 digits), and Python refuses to print ints of over 4300 digits.
MAX_DIGITS = 1_000
MAX_ROOT_DIGITS = 300  # SymPy factors radicands: time grows steeply past a few hundred digits
MAX_LENGTH = 20_000  # characters; bounds the remaining polynomial costs of a long text
# Far above any real layer (shipped counts have degree <= 7 and <= 20 terms); beyond
# them SymPy's expansion of a 50-byte formula takes minutes and gigabytes.
MAX_EXPONENT = 64  # |exponent| of a power whose base holds names
MAX_DEGREE = 64  # total degree in the names
MAX_EXPANDED_TERMS = 1_000  # terms of the full expansion (expanding 8,000 takes seconds)


def log10_size(value: sympy.Expr) -> float | None:
    """Approximate log10|value| of a numeric value; None when symbolic, zero or unknown."""
    if not value.is_number:
        return None
    if value.is_Rational:
        return math.log10(abs(value.p)) - math.log10(value.q) if value.p else None
    # Cheap only because every numeric operand was already checked to be moderate.
    try:
        parts = value.n(15).as_real_imag()
    except ArithmeticError:  # e.g. floor(exp(1000)) cannot be pinned down: size unknown
        return None
    if not all(part.is_Float or part.is_Integer for part in parts):
        return None
    size = mpmath.hypot(mpmath.mpf(parts[0]), mpmath.mpf(parts[1]))
    return float(mpmath.log10(size)) if size else None


def number_digits(value: sympy.Expr) -> float:
    """Digits of the largest exact number written in ``value``, or log10 of its magnitude."""
    if value.is_Rational:
        return math.log10(max(abs(value.p), value.q))
    exact = max((number_digits(atom) for atom in value.atoms(sympy.Rational)), default=0.0)
    return max(exact, abs(log10_size(value) or 0.0)) if value.is_number else exact


def factor_digits(value: sympy.Expr) -> float:
    """Digits a factor adds to a product's coefficient (its magnitude if purely numeric)."""
    return number_digits(value if value.is_number else value.as_coeff_Mul()[0])


def root_digits(value: sympy.Expr) -> float:
    """Digits of the exact roots in a product, which SymPy merges: sqrt(2)*sqrt(3) -> sqrt(6)."""
    factors = value.args if value.is_Mul else (value,)
    return sum(number_digits(f.base) for f in factors if f.is_Pow and f.base.is_Rational and f.exp.is_Rational)


@dataclass(frozen=True)
class Measure:
    """Upper bounds on what expanding a value would build (see :func:`measure`)."""

    degree: int    # total degree in the names
    terms: int     # terms of the full expansion
    digits: float  # digits of its largest coefficient


def measure(value: sympy.Expr, memo: dict[sympy.Expr, Measure] | None = None) -> Measure:
    """Upper bounds on (total degree in the names, terms of the full
    expansion, digits of its largest coefficient) of ``value``, read off its
    tree without expanding it: a sum takes the largest degree and adds terms,
    a product adds degrees and multiplies terms, a whole power ``s**n``
    multiplies the degree by ``|n|`` and has at most ``C(n + t - 1, t - 1)``
    terms for ``t`` terms of ``s``; no polynomial has more terms than the
    monomials of its degree.  The digits bound the sum of the coefficients'
    sizes (a product's is at most the product of its factors').  Degree and
    terms are capped just above MAX_DEGREE and MAX_EXPANDED_TERMS (only the
    comparison with them matters)."""
    memo = {} if memo is None else memo
    if not value.free_symbols:
        return Measure(0, 1, number_digits(value))
    if value in memo:
        return memo[value]
    if value.is_Symbol:
        found = Measure(1, 1, 0.0)
    elif value.is_Add or value.is_Mul:
        parts = [measure(a, memo) for a in value.args]
        if value.is_Add:
            found = Measure(max(p.degree for p in parts), sum(p.terms for p in parts),
                            max(p.digits for p in parts) + math.log10(len(parts)))
        else:
            found = Measure(sum(p.degree for p in parts),
                            math.prod(min(p.terms, MAX_EXPANDED_TERMS + 1) for p in parts),
                            sum(p.digits for p in parts))
    elif value.is_Pow and value.exp.is_number:
        base = measure(value.base, memo)
        power = abs(value.exp)
        n = MAX_DEGREE + 1 if power > MAX_DEGREE else math.ceil(power)
        found = Measure(base.degree * n, math.comb(n + base.terms - 1, base.terms - 1)
                        if power.is_Integer and base.terms > 1 else 1,
                        n * (base.digits + math.log10(base.terms)))
    else:  # a function, or a power with names in its exponent: one term, not expanded
        parts = [measure(a, memo) for a in value.args]
        found = Measure(max(p.degree for p in parts), 1, max(p.digits for p in parts))
    degree = min(found.degree, MAX_DEGREE + 1)
    monomials = math.comb(degree + len(value.free_symbols), degree)
    found = Measure(degree, min(found.terms, monomials, MAX_EXPANDED_TERMS + 1), min(found.digits, 1e9))
    memo[value] = found
    return found
