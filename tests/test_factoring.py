"""``symflops.core.factoring.factor`` against ``sympy.factor``: the same expression.

The sheets print what ``factor`` returns, so "the same" means structurally
the same (``srepr``), not merely equal in value.  The oracle is SymPy's own
factoring, a separate algorithm (Wang's, on dense polynomials) from FLINT's.
The inputs are built as products of random polynomials, so that they have
factors to find: repeated ones, monomials, negative leading coefficients,
fractions, a denominator; and the kinds of expression that ``factor`` leaves
to SymPy (a square root, a ``Max``, an exponential, a float).
"""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from symflops.core import factoring
from symflops.core.ir import dim_symbol

DIMS = [dim_symbol(n) for n in ("B", "D", "F", "S", "N")]
PLAIN = list(sympy.symbols("x y z"))   # no sign assumed
GENS = DIMS + PLAIN


def same(expr: sympy.Expr) -> None:
    ours, theirs = factoring.factor(expr), sympy.factor(expr)
    assert sympy.srepr(ours) == sympy.srepr(theirs), (expr, ours, theirs)


@st.composite
def polynomials(draw, terms: int = 4, lowest: int = 0) -> sympy.Expr:
    """A sum of terms; with ``lowest`` < 0, dims in denominators too (a
    Laurent polynomial, as a roofline's bytes per FLOP have)."""
    out = sympy.Integer(0)
    for _ in range(draw(st.integers(1, terms))):
        coeff = sympy.Rational(draw(st.integers(-9, 9).filter(bool)), draw(st.sampled_from([1, 1, 2, 3])))
        monomial = sympy.Mul(*(g ** draw(st.integers(lowest, 2))
                               for g in draw(st.lists(st.sampled_from(GENS), max_size=3))))
        out += coeff * monomial
    return out


@st.composite
def products(draw) -> sympy.Expr:
    parts = draw(st.lists(polynomials(), min_size=1, max_size=4))
    powers = [draw(st.integers(-1, 3).filter(bool)) for _ in parts]
    expr = sympy.Mul(*(p ** k for p, k in zip(parts, powers)))
    return sympy.expand(expr) if draw(st.booleans()) else expr


@settings(max_examples=100, deadline=None)
@given(products())
def test_the_same_expression_as_sympy(expr):
    same(expr)


@settings(max_examples=100, deadline=None)
@given(polynomials(terms=6, lowest=-2))
def test_a_sum_with_dims_in_denominators_is_the_same(expr):
    same(expr)
    same(sympy.expand(expr * (GENS[0] - GENS[5]) ** 2))


def test_terms_over_different_dims_share_one_denominator():
    x, y, z = PLAIN
    for expr in (x ** 2 / y ** 2 - 1, x + 1 / x, 2 / x, 1 / (x * y) + 1 / (x * z), x / 2 + y / 3,
                 -x / (2 * y) - 1 / y, 1 / x - 1 / x, (DIMS[0] - DIMS[1]) / DIMS[2] ** 3 + DIMS[0]):
        same(expr)


@settings(max_examples=25, deadline=None)
@given(products(), products())
def test_a_sum_of_fractions_is_the_same(a, b):
    x, y = PLAIN[:2]
    same(a / (x + 2) + b / (y * (x + 2)))


def test_a_whole_models_condition_and_its_sides():
    """A compute-bound condition with a hundred terms in twenty dims, as a
    whole model's roofline writes (work minus the ridge times the bytes), and
    the kind of pieces the roofline section factors."""
    names = ("B S D E G N F Fs Gm Nm Ph Rm Qc k L_a L_m V Wx Wy").split()
    d = {n: dim_symbol(n) for n in names}
    ridge = sympy.Symbol("I_acc", positive=True)
    work = sympy.expand(2 * d["B"] * d["S"] * (d["L_a"] * d["D"] * d["E"] * (d["G"] + d["N"])
                                               + 3 * d["L_m"] * d["D"] * d["Gm"] * d["Ph"] * d["Rm"]
                                               + d["k"] * d["D"] * d["Fs"] * (d["L_a"] + d["L_m"])
                                               + d["D"] * d["V"] + d["Wx"] * d["Wy"]))
    moved = sympy.expand(2 * (d["B"] * d["S"] * d["D"] * (d["L_a"] + d["L_m"] + 1)
                              + d["D"] * d["E"] * d["N"] * d["L_a"] * (d["k"] + 1)
                              + d["Qc"] ** 2 * d["Nm"] * d["Ph"] + d["D"] * d["V"]) / d["Qc"] ** 2)
    condition = sympy.expand(work - ridge * moved)
    same(condition)
    same(sympy.expand(condition * (d["B"] + d["S"]) ** 2))
    same(sympy.cancel(work / moved))
    same(-condition)


@given(st.sampled_from([
    sympy.Integer(0), sympy.Integer(-6), sympy.Rational(3, 4), PLAIN[0],
    sympy.sqrt(2) * PLAIN[0] + PLAIN[0],
    sympy.Max(DIMS[0], DIMS[1]) * PLAIN[0] + PLAIN[0],
    sympy.exp(PLAIN[0]) * PLAIN[0] + PLAIN[1] * PLAIN[0],
    sympy.Float(0.5) * PLAIN[0] + PLAIN[1] / 2,
    sympy.I * PLAIN[0] + PLAIN[0],
    PLAIN[0] ** sympy.Rational(1, 2) * (PLAIN[1] ** 2 - 1),
    sympy.floor(DIMS[0] / 2) * DIMS[1] + DIMS[1],
    sympy.Eq(PLAIN[0] ** 2, 1),
    sympy.Symbol("A", commutative=False) * sympy.Symbol("Bn", commutative=False) + PLAIN[0],
]))
def test_what_factor_leaves_to_sympy_is_still_the_same(expr):
    if isinstance(expr, sympy.Expr):
        same(expr)
    else:
        assert factoring.factor(expr) == sympy.factor(expr)


def test_flint_does_the_factoring():
    """Without python-flint every expression would go to SymPy (the same
    results, as slowly as before): the dependency must be there."""
    assert factoring.flint is not None
    c, fs = factoring.factor_list(sympy.expand(-6 * (PLAIN[0] - PLAIN[1]) ** 2 * PLAIN[2]))
    assert c == -6 and sorted((str(f), k) for f, k in fs) == [("x - y", 2), ("z", 1)]


@settings(max_examples=100, deadline=None)
@given(polynomials(terms=6, lowest=-2), st.sampled_from(GENS))
def test_a_sums_degree_is_its_numerators_less_its_denominators(expr, x):
    """``growth.degree`` reads a sum of terms' largest power without putting
    it over a common denominator: the same as the degree of the numerator
    less the denominator's, which is how a rational function's growth is
    defined (counted here by SymPy on ``together``)."""
    from symflops.count.growth import degree

    expr = sympy.expand(expr)
    if x not in expr.free_symbols:
        return
    num, den = sympy.fraction(sympy.together(expr))
    assert degree(expr, x) == sympy.degree(sympy.expand(num), x) - sympy.degree(sympy.expand(den), x)


@settings(max_examples=100, deadline=None)
@given(polynomials(terms=6, lowest=-1), polynomials(terms=4, lowest=-1), polynomials(terms=2))
def test_a_ratio_is_factored_as_sympy_factors_it_cancelled(a, b, common):
    """``factor_ratio(e)`` is ``sympy.factor(sympy.cancel(e))``: a ratio of
    two sums with a common factor, as a roofline's FLOPs over bytes."""
    e = sympy.expand(a * common) / sympy.expand(b * common)
    ours, theirs = factoring.factor_ratio(e), sympy.factor(sympy.cancel(e))
    assert sympy.srepr(ours) == sympy.srepr(theirs), (e, ours, theirs)
