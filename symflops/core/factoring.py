"""``sympy.factor``, with the factoring itself done by FLINT where it can be.

SymPy factors a polynomial in many variables in its dense recursive
representation: the compute-bound condition of a whole model (a hundred
terms in twenty dims) takes it more than a second, and a roofline section
factors several such polynomials (the condition, its threshold, the two
sides of its inequality).  FLINT's sparse multivariate factoring
(python-flint's ``fmpz_mpoly.factor``) takes milliseconds for the same
polynomial.

:func:`factor` gives exactly the expression ``sympy.factor`` gives.  A
fraction's irreducible factors, and the number in front of them, are its
value's, whatever form it is written in, but for their signs; each factor is
given the sign SymPy gives it (a positive leading coefficient in SymPy's
order of its variables), the number in front takes the rest, and the product
is built as SymPy builds it.  So the expression is taken apart wherever that
is cheap: a product of sums of terms (fractions times dims to whole powers,
negative ones too), each sum as a polynomial over a monomial; else as SymPy
does, over a common denominator, each polynomial the ``Poly`` SymPy would
make of it.  FLINT factors the polynomials.  Anything else (a coefficient
that is not a fraction, a power that is not whole, a function SymPy factors
its own way, a symbol that does not commute), or a machine without
python-flint, goes to ``sympy.factor`` itself.  ``tests/test_factoring.py``
holds the two to the same expression.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import sympy
from sympy.core.mul import _keep_coeff

try:  # a dependency; without it every expression goes to SymPy, as slowly as ever
    import flint
except ImportError:  # pragma: no cover - exercised by hand
    flint = None

#: The number in front of a polynomial and its factors, each with its power.
Listed = tuple[sympy.Rational, list[tuple[sympy.Expr, int]]]


def factor(expr: Any) -> sympy.Expr:
    """``sympy.factor(expr)``, the same expression, faster for large polynomials."""
    expr = sympy.sympify(expr)
    if (flint is None or not isinstance(expr, sympy.Expr) or hasattr(expr, "_eval_factor")
            or not expr.is_commutative):
        return sympy.factor(expr)
    out = _product(expr)
    if out is None:
        out = _factored(sympy.together(expr))
    return sympy.factor(expr) if out is None else out


def factor_ratio(expr: Any) -> sympy.Expr:
    """``sympy.factor(sympy.cancel(expr))``, the same expression: where
    :func:`factor` takes ``expr`` itself, the cancelling is the factoring's
    (a fraction's factors are its value's, common ones gone), and ``cancel``,
    seconds for a ratio of two long sums, is not needed."""
    expr = sympy.sympify(expr)
    if (flint is not None and isinstance(expr, sympy.Expr) and not hasattr(expr, "_eval_factor")
            and expr.is_commutative):
        out = _product(expr)
        if out is not None:
            return out
    return sympy.factor(sympy.cancel(expr))


def _product(expr: sympy.Expr) -> sympy.Expr | None:
    """``expr``, a product of numbers and of sums of terms ``c * x**e * ...``
    (fractions ``c``, dims ``x``, whole ``e``, negative ones too, as a
    roofline's bytes per op have) to whole powers, factored without
    ``together``, which takes seconds over a hundred terms: each sum as a
    polynomial over a monomial, the polynomial factored.  None for anything else."""
    def sum_to_a_power(arg: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
        base, exp = arg.as_base_exp() if arg.is_Pow else (arg, sympy.Integer(1))
        if not exp.is_Integer or not isinstance(base, (sympy.Add, sympy.Symbol)):
            base, exp = arg, sympy.Integer(1)   # a monomial, e.g. 1/(B*D), as a sum of one term
        return base, exp

    return _multiplied(expr, sum_to_a_power, _over_a_monomial)


def _multiplied(expr: sympy.Expr,
                power: Callable[[sympy.Expr], tuple[sympy.Expr, sympy.Expr] | None],
                factors_of: Callable[[sympy.Expr], Listed | None]) -> sympy.Expr | None:
    """The product of the factors of ``expr``'s multiplicands, built as SymPy
    builds it: each number goes in front, each other multiplicand is a base
    to a whole power (``power``: None for one SymPy must take), and
    ``factors_of(base)`` lists the base's factors (None: SymPy must)."""
    coeff: sympy.Expr = sympy.Integer(1)
    factors: list[tuple[sympy.Expr, int]] = []
    for arg in sympy.Mul.make_args(expr):
        if arg.is_Rational:
            coeff *= arg
            continue
        split = power(arg)
        found = None if split is None else factors_of(split[0])
        if found is None:
            return None
        (c, fs), exp = found, int(split[1])
        coeff *= c ** exp
        factors += [(f, k * exp) for f, k in fs]
    return _keep_coeff(coeff, sympy.Mul(*[f ** k for f, k in factors]))


def _over_a_monomial(expr: sympy.Expr) -> Listed | None:
    """A sum of terms ``c * x**e * ...`` as the number in front and its
    factors, each with its power (the monomial's dims to negative ones);
    None when it is not such a sum."""
    terms = []
    for term in sympy.Add.make_args(expr):
        c, rest = term.as_coeff_Mul()
        if not c.is_Rational:
            return None
        powers: dict[sympy.Symbol, int] = {}
        for f in sympy.Mul.make_args(rest):
            base, exp = f.as_base_exp()
            if f == 1:
                continue
            if not (base.is_Symbol and exp.is_Integer):
                return None
            powers[base] = powers.get(base, 0) + int(exp)
        terms.append((c, powers))
    low: dict[sympy.Symbol, int] = {}
    for _, powers in terms:
        for x, e in powers.items():
            low[x] = min(low.get(x, 0), e)
    every = {x for _, powers in terms for x in powers}
    shifted = [(c, {x: powers.get(x, 0) - low.get(x, 0) for x in every
                    if powers.get(x, 0) != low.get(x, 0)}) for c, powers in terms]
    present = {x for _, powers in shifted for x in powers}
    if not present:   # a number over a monomial
        return _number_over(terms, low)
    gens = sympy.Poly(sympy.Add(*present)).gens   # SymPy's order of them
    scale = math.lcm(*(int(c.q) for c, _ in shifted))
    whole: dict[tuple[int, ...], int] = {}
    for c, powers in shifted:
        m = tuple(powers.get(g, 0) for g in gens)
        whole[m] = whole.get(m, 0) + int(c.p) * (scale // int(c.q))
    whole = {m: c for m, c in whole.items() if c}
    if not whole:
        return sympy.Integer(0), []
    coeff, factors = _integer_factors(whole, gens)
    return coeff / scale, factors + [(x, e) for x, e in low.items() if e]


def _number_over(terms: list, low: dict) -> Listed:
    """A sum whose terms share one monomial (``3/B``): its number, and the monomial's dims."""
    return (sum((c for c, _ in terms), sympy.Integer(0)),
            [(x, e) for x, e in low.items() if e])


def _factored(expr: sympy.Expr) -> sympy.Expr | None:
    """The product of ``expr``'s factors (``expr`` over a common denominator,
    as SymPy takes it apart); None for what is left to SymPy."""
    def poly_to_a_power(arg: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
        if hasattr(arg, "_eval_factor") or arg.is_number:
            return None
        base, exp = arg.as_base_exp() if arg.is_Pow else (arg, sympy.Integer(1))
        return None if not exp.is_Integer or base.is_number else (base, exp)

    return _multiplied(expr, poly_to_a_power, factor_list)


def factor_list(expr: sympy.Expr) -> Listed | None:
    """``Poly(expr).factor_list()`` as expressions: the number in front and
    each irreducible factor with its multiplicity; None when ``expr`` is not
    a polynomial with fractions for coefficients."""
    try:
        p = sympy.Poly(expr)
    except sympy.PolynomialError:
        return None
    if p.domain not in (sympy.ZZ, sympy.QQ) or not p.gens:
        return None
    if p.is_zero:
        return sympy.Integer(0), []
    denominator, p = p.clear_denoms(convert=True)   # an integer polynomial, times a whole number
    coeff, factors = _integer_factors({m: int(c) for m, c in p.terms()}, p.gens)
    return coeff / int(denominator), factors


def _integer_factors(whole: dict[tuple[int, ...], int], gens: tuple[sympy.Expr, ...]) -> Listed:
    """FLINT's factors of the polynomial ``{exponents of gens: integer}``, each
    with SymPy's sign, and the number in front."""
    ctx = flint.fmpz_mpoly_ctx.get(tuple(f"x{i}" for i in range(len(gens))), "lex")
    constant, found = ctx.from_dict(whole).factor()
    coeff = sympy.Integer(int(constant))
    out = []
    for f, k in found:
        g = sympy.Poly.from_dict({tuple(int(e) for e in m): int(c) for m, c in f.to_dict().items()},
                                 *gens, domain=sympy.ZZ)
        content, g = g.primitive()
        if g.LC() < 0:   # SymPy's sign: a positive leading coefficient in its order
            content, g = -content, -g
        coeff *= sympy.Integer(int(content)) ** int(k)
        out.append((g.as_expr(), int(k)))
    return coeff, out
