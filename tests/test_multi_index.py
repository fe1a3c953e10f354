"""Calls over several indices: ``layernorm_{c,p}(X[b,c,p])``.

The grammar: the braced index list is parsed with the column of each letter
(columns counted by hand below), the single-index form is unchanged, and
malformed lists are refused where they go wrong.
"""

import pytest

from symflops.core.errors import SymflopsError
from symflops.lang.statement import Call, Reduced, parse_statement


def lone_call(text: str) -> Call:
    st = parse_statement(text)
    call = st.terms[0].factors[0]
    assert isinstance(call, Call)
    return call


def test_braced_call_carries_its_letters_and_columns():
    #       0         1         2         3
    #       0123456789012345678901234567890123
    text = "N[b,c,p] = layernorm_{c, p}(X[b,c,p]) * g[c]"
    call = lone_call(text)
    assert call.name == "layernorm_{c,p}"
    assert call.column == 11
    assert call.reduced == (Reduced("c", 22), Reduced("p", 25))
    assert call.ref.name == "X" and call.ref.indices == ("b", "c", "p")


def test_single_index_call_is_unchanged():
    call = lone_call("P[s,t] = softmax_t(A[s,t])")
    assert call == Call("softmax_t", 9, call.ref, None)
    assert call.reduced == ()


@pytest.mark.parametrize("text, message, column", [
    ("N[b,c] = softmax_{}(X[b,c])", "softmax_{} names no index", 17),
    ("N[b,c] = softmax_{c,c}(X[b,c])", "the index 'c' is listed twice", 20),
    ("N[b,c] = softmax_{c", "'{' after 'softmax_' is never closed", 17),
    ("N[b,c] = softmax_{c b}(X[b,c])", "expected ',' or '}'", 20),
    ("N[b,c] = softmax_{c,b} X[b,c]", "expected '(' after softmax_{c,b}", 23),
    ("N[b,c] = softmax_{c,b}(2)", "softmax_{c,b}(...) applies to a tensor", 23),
    ("N[b,c] = softmax{c}(X[b,c])", "'{' right after 'softmax'", 16),
    ("N[b,c] = X[b,c] }", "unexpected character '}'", 16),
])
def test_malformed_index_lists_are_refused_where_they_go_wrong(text, message, column):
    from symflops.core.errors import Span

    with pytest.raises(SymflopsError) as err:
        parse_statement(text, Span("f.yaml", 1, 1))
    assert message in str(err.value)
    assert err.value.span.column == 1 + column
