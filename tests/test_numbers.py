"""The SymPy-free number reader (symflops.core.numbers.read_number) against
the expression grammar's (symflops.lang.expr.parse_number), over many texts:
the same value, or the same refusal (message, hint, position), so that the two
cannot drift apart.  The expected side is always parse_number, the reader
every other part of symflops uses; the values of a few texts are also checked
against hand-written fractions.
"""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symflops.core import numbers
from symflops.core.errors import Span, SymflopsError
from symflops.lang import expr
from symflops.lang.expr import parse_number
from symflops.core.numbers import read_number

SPAN = Span("plan.yaml", 3, 7, "  tokens: TEXT")


def outcome(read, text: str, span: Span | None = None):
    """('value', Fraction) or ('error', message, hint, span)."""
    try:
        value = read(text, span=span)
    except SymflopsError as exc:
        return ("error", exc.message, exc.hint, exc.span)
    return ("value", Fraction(int(value.p), int(value.q)) if hasattr(value, "p") else value)


def assert_same(text: str) -> None:
    for span in (None, SPAN):
        assert outcome(read_number, text, span) == outcome(parse_number, text, span), text


VALID = ["0", "7", "7e9", "2e12", "1.2e13", "0.4", ".5", "5.", "1_000", "1_000.000_1", "1e-5",
         "1E+3", "2**20", "2^20", "2**-3", "2^3^2", "-2**2", "(-2)**2", "--3", "+-+3", "-0",
         "1/3", "1/3*3", "2/4", "(1+2)*3", "1 - 2 - 3", "2*3/4", "  42  ", "\t3\n", "4**0.5",
         "8**(1/3)", "(27/8)**(2/3)", "0**0", "0**5", "1**1000000",
         "(2/3)**-2", "10**999", "9" * 1000, "0." + "0" * 998 + "1", "1e999", "1e-999",
         "2**(3**2)", "((((((1))))))", "1.5e3/2", "3*-2", "10**1000", "10**-1000",
         "(10**300)**(1/2)", "-" * 101 + "1"]

INVALID = ["", " ", "abc", "B*D", "f(2)", "sqrt(4)", "1/0", "0**-1", "(0)**(-2)", "2**0.5",
           "(-1)**0.5", "(-4)**(1/2)", "(-8)**(1/3)", "2**2**-1", "2**(1/3)", "1 2", "(1", "1)", "()", "1+", "*2", "2**",
           "1,2", "1 == 1", "1 < 2", "'3'", '"3"', "[3]", "{3}", "3;4", "40%", "3!", "1 = 1",
           "1..2", "1e", "1e+", "_1", "1_", "1__0", "x.y", "1.2.3", "#", "é", "1e1001",
           "1e-1001", "9" * 1001, "10**1001", "10**-1001", "(10**301)**0.5", "2**0.5)", "2**0.5 2",
           "2**0.5+", "2**0.5/0", "1/(2**0.5)", "(2**0.5)**3", "2**0.5*1e1001", "2**0.5*1e999*1e9",
           "2**1e9", "2**(2**64)", "(1/3)**(10**6)", "1.0e" + "9" * 20,
           "(" * 101 + "1" + ")" * 101, "2**" * 101 + "2",
           "1" + "+1" * 10_000, "1" * 20_001, " " * 20_001]

LIMITS = ["(" * numbers.MAX_DEPTH + "1" + ")" * numbers.MAX_DEPTH,
          "(" * (numbers.MAX_DEPTH + 1) + "1" + ")" * (numbers.MAX_DEPTH + 1),
          "9" * numbers.MAX_DIGITS, "9" * (numbers.MAX_DIGITS + 1),
          "1" * numbers.MAX_LENGTH, "1" * (numbers.MAX_LENGTH + 1),
          f"(10**{numbers.MAX_ROOT_DIGITS - 1})**(1/2)", f"(10**{numbers.MAX_ROOT_DIGITS})**(1/2)",
          f"(10**{numbers.MAX_ROOT_DIGITS + 1})**(1/2)", f"(10**{numbers.MAX_ROOT_DIGITS + 2})**0.5",
          f"10**{numbers.MAX_DIGITS - 1}", f"10**{numbers.MAX_DIGITS}",
          f"10**-{numbers.MAX_DIGITS - 1}", f"10**-{numbers.MAX_DIGITS}"]


def test_the_limits_are_the_grammar_limits():
    for name in ("MAX_DEPTH", "MAX_DIGITS", "MAX_ROOT_DIGITS", "MAX_LENGTH"):
        assert getattr(numbers, name) == getattr(expr, name), name


@pytest.mark.parametrize("text", VALID)
def test_valid_numbers_read_alike(text):
    assert outcome(parse_number, text)[0] == "value", text  # the list says what it is
    assert_same(text)


@pytest.mark.parametrize("text", INVALID)
def test_refusals_read_alike(text):
    assert outcome(parse_number, text)[0] == "error", text
    assert_same(text)


@pytest.mark.parametrize("text", LIMITS)
def test_at_and_past_each_limit(text):
    assert_same(text)


@pytest.mark.parametrize("text, value", [
    ("7e9", Fraction(7 * 10**9)), ("2e12", Fraction(2 * 10**12)), ("0.4", Fraction(2, 5)),
    ("1.2e13", Fraction(12 * 10**12)), ("2**20", Fraction(2**20)), ("2^3^2", Fraction(512)),
    ("8**(1/3)", Fraction(2)), ("(27/8)**(2/3)", Fraction(9, 4)), ("1e-5", Fraction(1, 10**5))])
def test_values_by_hand(text, value):
    assert read_number(text) == value
    assert isinstance(read_number(text), Fraction)


_ATOMS = st.one_of(
    st.integers(min_value=0, max_value=10**6).map(str),
    st.sampled_from(["0.5", ".25", "1e3", "2.5e-2", "1_0", "1e", "x", "1..", "()", "%", ""]),
)


@st.composite
def texts(draw, depth: int = 0):
    """Texts of the grammar, some slightly broken (a stray token, a bad atom)."""
    if depth > 3 or draw(st.booleans()):
        return draw(_ATOMS)
    kind = draw(st.sampled_from(["binary", "sign", "paren", "power", "junk"]))
    if kind == "binary":
        op = draw(st.sampled_from(["+", "-", "*", "/", " + ", "*-"]))
        return draw(texts(depth + 1)) + op + draw(texts(depth + 1))
    if kind == "sign":
        return draw(st.sampled_from(["-", "+", "--"])) + draw(texts(depth + 1))
    if kind == "paren":
        return "(" + draw(texts(depth + 1)) + ")"
    if kind == "power":
        exponent = draw(st.sampled_from(["2", "-1", "0.5", "(1/2)", "(1/3)", "3", "0", "(2/3)"]))
        return draw(texts(depth + 1)) + draw(st.sampled_from(["**", "^"])) + exponent
    return draw(texts(depth + 1)) + draw(st.sampled_from([" ", ")", "(", ",", "==", "**"]))


NOT_EXACT = "is not an exact number"
VALUE_REFUSALS = ("division by zero", "too large", "digits")


@settings(max_examples=400, deadline=None)
@given(texts())
def test_random_texts_read_alike(text):
    ours, theirs = outcome(read_number, text), outcome(parse_number, text)
    if ours[0] == "error" and NOT_EXACT in ours[1] and (
            theirs[0] == "value" or any(w in theirs[1] for w in VALUE_REFUSALS)):
        # the one difference by design (symflops.core.numbers): SymPy made a root
        # rational again (0 * 2**0.5, 2**0.5 * 2**0.5), or refused what a root's
        # value gave (0/0**2**0.5 divides by 0); the reader refuses the root
        assert "**" in text or "^" in text, text
        return
    assert_same(text)


@pytest.mark.parametrize("text", ["0*2**0.5", "2**0.5*2**0.5", "(2**(1/2))**2"])
def test_a_root_made_rational_by_sympy_is_refused(text):
    assert outcome(parse_number, text)[0] == "value"
    assert NOT_EXACT in outcome(read_number, text)[1]
