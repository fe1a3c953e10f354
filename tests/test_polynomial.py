"""The fast polynomial helpers against SymPy's own slow, general routines.

Each helper replaces a SymPy call that was too slow for a build (``cancel``,
``factor``, ``Max``), so each is
checked here against that call, or against brute force, on random input:

* ``exact_quotient(a*b, b) == expand(a)``, and None exactly when
  ``sympy.cancel(a/b)`` leaves a denominator with a dim in it;
* ``readable(p)`` multiplies back to ``p``; its sum has integer coefficients
  with gcd 1 and no dim common to all its terms; and it agrees with
  ``sympy.factor`` (up to the sign taken out) whenever ``factor`` finds no
  product of sums;
* ``largest`` drops a candidate only when a kept one is at least as large at
  random points with every dim >= 1, and keeps the true maximum there;
* ``substituted(p, {dim: a sum of terms})`` is ``expand(p.xreplace(...))``,
  structurally (the sheets print it), also when a value has negative powers.

(The contraction-order search is tested against brute force in test_orders.py.)
"""

from __future__ import annotations

import math

import sympy
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from symflops.core.ir import dim_symbol
from symflops.core.polynomial import (cancelled, common_factor, exact_quotient, largest,
                                      monomials, substitute_max, substituted)
from symflops.sheets.printing import readable

DIMS = [dim_symbol(n) for n in "BDFSV"]
QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def polynomials(draw, max_terms: int = 4, negative: bool = True) -> sympy.Expr:
    """A random polynomial in a few dims with small rational coefficients."""
    n = draw(st.integers(1, max_terms))
    low = -6 if negative else 1
    total = sympy.Integer(0)
    for _ in range(n):
        c = sympy.Rational(draw(st.integers(low, 6)), draw(st.sampled_from([1, 1, 1, 2, 3])))
        powers = draw(st.lists(st.tuples(st.sampled_from(DIMS), st.integers(1, 2)), max_size=3))
        total += c * sympy.Mul(*(d ** e for d, e in powers))
    return sympy.expand(total)


@QUICK
@given(polynomials(), polynomials(max_terms=3))
def test_exact_quotient_of_a_product_is_the_other_factor(a, b):
    assume(b != 0)
    assert exact_quotient(sympy.expand(a * b), b) == sympy.expand(a)


@st.composite
def single_terms(draw) -> sympy.Expr:
    """A defined dim's formula such as N/G or c*k*B*S/M: one term, powers of either sign."""
    c = sympy.Rational(draw(st.integers(1, 4)), draw(st.sampled_from([1, 2])))
    powers = draw(st.lists(st.tuples(st.sampled_from(DIMS[:3] + EXTRA), st.integers(-2, 2)),
                           max_size=3))
    return c * sympy.Mul(*(d ** e for d, e in powers))


EXTRA = [dim_symbol(n) for n in ("N", "G")]


@QUICK
@given(polynomials(), single_terms(), single_terms())
def test_substituted_is_expand_of_xreplace(p, s, v):
    mapping = {DIMS[3]: s, DIMS[4]: v}  # S and V are defined dims
    fast = substituted(p, mapping)
    slow = sympy.expand(p.xreplace(mapping))
    assert fast == slow and sympy.srepr(fast) == sympy.srepr(slow)


@QUICK
@given(polynomials(), st.lists(single_terms(), min_size=1, max_size=3), single_terms())
def test_substituted_is_expand_of_xreplace_when_a_value_is_a_sum(p, parts, v):
    """``T = M + S`` or ``(N + 2)/G``: several terms, powers of either sign."""
    mapping = {DIMS[3]: sympy.Add(*parts), DIMS[4]: v}
    fast = substituted(p, mapping)
    slow = sympy.expand(p.xreplace(mapping))
    assert fast == slow and sympy.srepr(fast) == sympy.srepr(slow)


def test_substituted_of_a_sum_of_dims_expands():
    B, D, S = (dim_symbol(n) for n in "BDS")
    assert substituted(3 * B * S, {S: B + D}) == 3 * B**2 + 3 * B * D  # not a single term: SymPy's way


@QUICK
@given(polynomials(), polynomials(max_terms=3))
def test_exact_quotient_is_none_exactly_when_cancel_leaves_a_denominator(a, b):
    assume(b != 0)
    _, den = sympy.fraction(sympy.cancel(a / b))
    got = exact_quotient(a, b)
    if den.free_symbols:
        assert got is None
    else:
        assert got is not None and sympy.expand(got - a / b) == 0


#: What a count holds besides dims: a window's ``Min(S, W)``, a stride's floor.
PARTS = [sympy.Min(DIMS[3], DIMS[4]), sympy.floor(DIMS[3] / 2)]


@st.composite
def counts(draw) -> sympy.Expr:
    """A polynomial in dims and in :data:`PARTS`, rational coefficients of either sign."""
    p = draw(polynomials())
    part = draw(st.sampled_from(PARTS))
    return sympy.expand(p + draw(st.integers(-3, 3)) * part * draw(st.sampled_from(DIMS))
                        + draw(st.integers(-2, 2)) * part ** 2)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counts(), counts(), polynomials(max_terms=2), st.booleans())
def test_cancelled_is_the_expression_sympy_cancel_gives(a, b, common, shared):
    """The same expression, term for term, as ``sympy.cancel(a / b)``; with a
    factor common to both half the time, so that there is a gcd to divide out."""
    if shared:
        a, b = sympy.expand(a * common), sympy.expand(b * common)
    assume(b != 0)
    fast, slow = cancelled(a, b), sympy.cancel(a / b)
    assert sympy.srepr(fast) == sympy.srepr(slow)


def test_cancelled_of_numbers_zero_and_piecewise():
    B, D = DIMS[:2]
    for top, bottom in ((sympy.Integer(6), sympy.Integer(4)), (sympy.Integer(0), B + D),
                        (-2 * B * D - 2 * B, 4 * D + 4),
                        (sympy.Piecewise((B, B > D), (D, True)) * B, B ** 2),
                        (B, sympy.Integer(0))):
        assert sympy.srepr(cancelled(top, bottom)) == sympy.srepr(sympy.cancel(top / bottom))
    # by hand: -2B(D + 1) / (4(D + 1)) = -B/2
    assert cancelled(-2 * B * D - 2 * B, 4 * D + 4) == -B / 2


@QUICK
@given(polynomials(max_terms=5))
def test_readable_multiplies_back_and_leaves_a_primitive_sum(p):
    assume(p != 0 and not p.is_number)
    assert sympy.expand(readable(p) - p) == 0
    coefficient, monomial, rest = common_factor(p)
    terms = monomials(rest)
    assert all(c.is_Integer for c, _ in terms)
    assert math.gcd(*(int(c) for c, _ in terms)) == 1
    if len(terms) > 1:
        common = set.intersection(*(set(powers) for _, powers in terms))
        assert not common, f"{rest} still has a common factor {common}"


@QUICK
@given(polynomials(max_terms=5))
def test_readable_agrees_with_sympy_factor_without_products_of_sums(p):
    assume(p != 0 and not p.is_number)
    full = sympy.factor(p)
    sums = [f for f in sympy.Mul.make_args(full) if f.as_base_exp()[0].is_Add]
    assume(len(sums) <= 1 and all(f.is_Add for f in sums))  # no (a+b)**2, no (a+b)(c+d)
    # The sign is taken out only when every term is negative; factor takes it
    # out when its leading term is.  Either way the same factors remain.
    assert readable(p) == full or readable(-p) == -full


@QUICK
@given(st.lists(polynomials(negative=False), min_size=1, max_size=6), st.randoms())
def test_largest_keeps_the_maximum_at_random_points(candidates, rnd):
    kept = largest(candidates)
    kept_args = kept.args if isinstance(kept, sympy.Max) else (kept,)
    assert set(kept_args) <= set(candidates)
    for _ in range(20):
        point = {d: rnd.randint(1, 50) for d in DIMS}
        values = [c.xreplace(point) for c in candidates]
        assert max(a.xreplace(point) for a in kept_args) == max(values)


@QUICK
@given(polynomials(negative=False), polynomials(negative=False), st.lists(polynomials(), max_size=3),
       st.booleans())
def test_largest_drops_a_candidate_that_another_bounds_term_by_term(p, q, others, first):
    """``p + q`` with every coefficient of ``q`` positive bounds ``p`` term by term,
    so ``p`` is dropped whatever else is there (a quick comparison at a few
    points must not keep it)."""
    assume(p != q + p)
    bigger = sympy.expand(p + q)
    kept = largest([p, bigger, *others] if first else [*others, bigger, p])
    kept_args = kept.args if isinstance(kept, sympy.Max) else (kept,)
    assert p not in kept_args or p in others
    assert bigger in kept_args or any(largest([bigger, o]) == o for o in others)


def test_largest_drops_what_a_multiple_bounds_by_hand():
    # B <= B*V and 3*B*S <= B*S*V + 2*B*S for every dim >= 1 (V >= 1); 2*B*D and
    # B*D + B*S are not comparable (D = 1, S = 5 and D = 5, S = 1), so both stay.
    B, D, S, V = (dim_symbol(n) for n in "BDSV")
    assert largest([B, B * V]) == B * V
    assert largest([3*B*S, B*S*V + 2*B*S]) == B*S*V + 2*B*S
    assert set(largest([2*B*D, B*D + B*S]).args) == {2*B*D, B*D + B*S}


def test_a_peak_in_bytes_keeps_the_candidates_of_the_peak_in_elements():
    """A peak in bytes is the bytes per element times a Max of the peaks in
    elements.  With a dim substituted, both forms keep the same candidates.
    By hand, with R = N/G: D*R*G is D*N; 2*D + k <= D*c*k + D + 2*k for all
    dims >= 1 (the difference is D*(c*k - 1) + k); B*D*N and D*c*k + D + 2*k
    are not comparable (B = N = 1, c = k = 9, and B = N = 9, c = k = 1), so
    two candidates are left.  SymPy's own Max, which the product once went
    through, keeps three: it cannot see that c*k - 1 >= 0 inside the sum."""
    B, D, G, N, R, c, k = (dim_symbol(n) for n in ("B", "D", "G", "N", "R", "c", "k"))
    low, high = 2 * D * R * G / N + k, D * c * k + D + 2 * k
    peak = sympy.Max(low, high, B * D * R * G, evaluate=False)
    subs = {R: N / G}
    elements = substitute_max(peak, lambda e: substituted(e, subs))
    assert set(elements.args) == {D * c * k + D + 2 * k, B * D * N}
    assert len(sympy.Max(*(substituted(a, subs) for a in peak.args)).args) == 3
    assert substitute_max(2 * peak, lambda e: substituted(e, subs)) == 2 * elements
    assert substitute_max(sympy.Rational(1, 2) * peak, lambda e: substituted(e, subs)) \
        == elements / 2
    # a single candidate left: the product is multiplied out, as a sum would be
    alone = sympy.Max(low, high, evaluate=False)
    assert substitute_max(4 * alone, lambda e: substituted(e, subs)) == 4*D*c*k + 4*D + 8*k
    # a negative scale makes a Max a Min: that is left to SymPy
    assert substitute_max(-2 * peak, lambda e: sympy.expand(e.xreplace(subs))) \
        == sympy.expand(-2 * sympy.Max(2 * D + k, high, B * D * N))


def test_readable_pulls_common_factors_out_of_non_polynomials():
    # A strided count with a ceiling and a per-group count with 1/G, by hand:
    B, D, L, G = (dim_symbol(n) for n in "BDLG")
    assert readable(2*B*D*sympy.ceiling(L/2) + 4*B*sympy.ceiling(L/2)) \
        == 2*B*(D + 2)*sympy.ceiling(L/2)
    assert readable(2*B*D/G + 4*B/G) == 2*B*(D + 2)/G


@QUICK
@given(polynomials(), polynomials(), st.sampled_from([0, 1, 2, sympy.Rational(3, 2), -1]),
       st.booleans())
def test_the_backward_to_forward_ratio_is_cancels(f, g, q, proportional):
    """The constant ratio a sheet states (backward = 2 x forward) is what
    ``sympy.cancel`` makes of the quotient: a number when one count is a
    constant times the other, else none."""
    from symflops.count.explain import ratio

    assume(f != 0)
    b = sympy.expand(q * f) if proportional else g
    expected = sympy.cancel(b / f)
    assert ratio(f, b) == (expected if expected.is_Rational else None)


@QUICK
@given(polynomials(max_terms=5), st.booleans())
def test_the_sign_proof_on_python_numbers_is_sympys(p, shifted_down):
    """The sign of a polynomial for every dim >= 1, proved from its
    coefficients in u = dim - 1, reads the same on Python fractions as with
    SymPy's polynomials (kept for coefficients that are not rational)."""
    from symflops.core.sizes import _sympy_sign, polynomial_sign

    if shifted_down:  # push the constant term below zero: signs SymPy must shift to decide
        p = sympy.expand(p - p.subs({d: 1 for d in DIMS}) - 1)
    assume(p != 0 and p.free_symbols)
    present = [d for d in DIMS if d in p.free_symbols]
    assert polynomial_sign(p, DIMS) == _sympy_sign(p, present)
