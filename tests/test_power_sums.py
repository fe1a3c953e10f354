"""Faulhaber's polynomials (core/offsets.py), which count the pairs of
where-clauses, against sums by enumeration."""

import sympy

from symflops.core.offsets import TOP, faulhaber, power_sum


def test_power_sums_equal_the_sums_they_stand_for():
    # sum_{x=0}^{n} x**k by enumeration (0**0 = 1), n = -1 the empty sum
    for k in range(9):
        for n in range(-1, 12):
            assert power_sum(k).xreplace({TOP: n}) == sum(x ** k for x in range(n + 1)), (k, n)


def test_faulhaber_of_a_polynomial_with_other_dims_in_its_coefficients():
    x, a, b = sympy.symbols("x a b", integer=True)
    f = sympy.expand(3 * a * x ** 3 + (b - 1) * x ** 2 + a * b + (x + a) ** 2)
    top = faulhaber(f, x)
    for n in range(-1, 7):
        for av, bv in ((2, 5), (-3, 4)):
            brute = sum(f.subs({x: i, a: av, b: bv}) for i in range(n + 1))
            assert top.subs({TOP: n, a: av, b: bv}) == brute
    # a summand without x: top + 1 copies of it (S - 1 + 1 for a range 0 .. S - 1)
    assert faulhaber(a * b, x) == sympy.expand(a * b * (TOP + 1))
