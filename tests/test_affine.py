"""Affine index expressions: strides ``X[b,c,2*i+u]``, dilations ``X[b,c,p+2*k]``,
offsets ``H[b,s-1,d]``, differences ``bias[n,s-t]`` and patches ``X[b,c,P*i+u]``.

Expected values are written by hand in each test (columns counted on the
statement text, counts derived in the comments).
"""

import pytest

from symflops.core.errors import SymflopsError
from symflops.lang.statement import AffineTerm, parse_statement


def _shift(text, ref=0):
    (shift,) = parse_statement(text).refs[ref].shifts
    return shift


# --- grammar ---------------------------------------------------------------

def test_a_stride_is_read_with_its_coefficient_and_columns():
    s = _shift("Y[b,o,i] = X[b,c,2*i+u] W[o,c,u]")
    # "2*i+u" starts at column 17; i is at 19, u at 21
    assert (s.position, s.column, s.text, s.constant) == (2, 17, "2*i+u", 0)
    assert s.terms == (AffineTerm("i", 19, 2), AffineTerm("u", 21, 1))
    assert not s.is_plain


def test_a_dilation_an_offset_a_difference_and_a_patch():
    assert _shift("Y[b,c,p] = X[b,c,p+2*k] W[c,k]").terms == (
        AffineTerm("p", 17), AffineTerm("k", 21, 2))
    offset = _shift("H[b,s,d] = A[d] H[b,s-1,d]", ref=1)
    assert (offset.terms, offset.constant, offset.column) == ((AffineTerm("s", 20),), -1, 20)
    diff = _shift("A[n,s,t] = bias[n,s-t]")
    assert diff.terms == (AffineTerm("s", 18), AffineTerm("t", 20, 1, negative=True))
    patch = _shift("Y[b,i] = X[b,P*i+u]")
    assert patch.terms == (AffineTerm("i", 15, "P"), AffineTerm("u", 17))
    # constants add up wherever they stand; a coefficient may follow its letter
    odd = _shift("Y[s] = B[k*2+s+1-3]")
    assert (odd.terms, odd.constant) == ((AffineTerm("k", 9, 2), AffineTerm("s", 13)), -2)


def test_the_two_letter_shift_is_read_as_before():
    s = _shift("Y[b,o,p] = X[b,c,p+k] W[o,c,k]")
    assert s.is_plain and (s.left, s.left_column, s.right, s.right_column) == ("p", 17, "k", 19)


@pytest.mark.parametrize("index, why", [
    ("p*k*2", "a term is a letter times one coefficient"),
    ("p/2", "'/' stands where '+' or '-' must"),
    ("(p+k)", "only whole numbers, dims and letters"),
    ("p**2", "'**' stands where"),
    ("p+0.5", "a number in an index is a whole number"),
    ("p+", "the expression ends after a sign"),
    ("2*3+p", "a product of two numbers"),
    ("0*p", "a coefficient is a positive whole number"),
    ("1+2", "an index holds at least one letter"),
])
def test_other_arithmetic_is_refused_by_name_at_its_column(index, why):
    with pytest.raises(SymflopsError) as e:
        parse_statement(f"Y[p] = X[{index}]")
    assert str(e.value.message) == f"index arithmetic of the form {index} in X[...] is not supported"
    assert why in e.value.hint


def test_a_product_of_two_letters_is_refused_once_the_dims_are_known():
    import symflops
    with pytest.raises(SymflopsError, match=r"index arithmetic of the form p\*k in X\[\.\.\.\] "
                       r"is not supported") as e:
        symflops.declare("bad", dims={"P": "positions", "K": "kernel"}, tensors={
            "X": {"shape": ["P"], "role": "input"}, "W": {"shape": ["K"], "role": "param"}},
            ops=["Y[p] = X[p*k] W[k]"])
    assert "'p' is no dim" in e.value.hint
