"""Exact numbers from text without SymPy: ``2e12``, ``2**20``, ``1.2e13``, ``0.4``.

``symflops plan`` reads every number of its command line here, so that its
start-up does not pay for importing SymPy (most of a second).  The grammar
is that of :func:`symflops.lang.expr.parse_number`: the expression grammar
of :mod:`symflops.lang.expr` without names, functions or comparisons::

    sum     := product (('+' | '-') product)*
    product := factor (('*' | '/') factor)*
    factor  := ('+' | '-')* atom (('**' | '^') factor)?
    atom    := NUMBER | '(' sum ')'

Invariants:

* user text is never executed: a tokenizer and a recursive-descent reader
  compute :class:`fractions.Fraction` values directly, never through float.
* the same text gives the same value, or the same refusal with the same
  message, hint and position, as ``parse_number`` (tests/test_numbers.py
  compares the two over many inputs, so that they cannot drift apart): the
  same limits (:data:`MAX_DIGITS`, :data:`MAX_DEPTH`, :data:`MAX_LENGTH`,
  :data:`MAX_ROOT_DIGITS`), checked in the same order.
* one difference, by design: SymPy carries a root that is not a fraction
  (``2**0.5``) symbolically, checks it against the limits as a real number,
  and its simplification sometimes makes a value rational again
  (``2**0.5 * 2**0.5``, ``0 * 2**0.5``).  Here every value is a fraction or
  :data:`INEXACT`: a power that is not a fraction is INEXACT, and so is all
  that is computed from it, the limits being checked on the exact operands
  only; the rest of the text is still read, so that a mistake after it is
  reported as ``parse_number`` reports it, and an INEXACT result is refused at
  the end with the message ``parse_number`` gives a value that is not exact
  (and where SymPy refuses what such a root's value gives, ``0/0**2**0.5``,
  the reader refuses the root instead).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import NoReturn

from .errors import Span, SymflopsError

MAX_DEPTH = 100             # nesting of factors (parentheses, signs, powers)
MAX_DIGITS = 1_000          # digits of any number, given or computed
MAX_ROOT_DIGITS = 300       # digits of a number whose root is taken
MAX_LENGTH = 20_000         # characters of the text
#: Digits of the largest exact result reported (Python refuses to print an int
#: of more than 4,300 digits; the FLOPs of any real run have fewer than 40).
MAX_RESULT_DIGITS = 4_000

_PART = r"[0-9]+(?:_[0-9]+)*"
_LEXEME = re.compile(
    rf"(?P<ws>\s+)|(?P<num>(?:{_PART}(?:\.(?:{_PART})?)?|\.{_PART})(?:[eE][+-]?{_PART})?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<cmp>==|!=|<=|>=|<|>)|(?P<op>\*\*|[-+*/^])|(?P<punct>[(),])")

_NO_QUOTES = "quotes are not allowed: write names bare, e.g. B*D"
#: What to write instead of a character no token starts with.
_INSTEAD = dict.fromkeys("'\"", _NO_QUOTES) | dict.fromkeys("[]{}", "use parentheses ( ) for grouping") | {
    "=": "use '==' to compare", "!": "use '!=' for 'not equal'", ";": "write a single expression",
    "%": "there is no '%'; use floor(a/b)",
    ".": "'.' joins name parts (flops.total) or starts a decimal (0.5)"}
_OTHERWISE = "allowed are numbers, names, + - * / ** ^ ( ) and function calls"
_NOT_EXACT = "write an integer or fraction such as 4096, 2**20, 1e6 or 0.5"
_SMALLER = "use smaller numbers"


class _Inexact:
    """A value that is not a fraction (``2**0.5``, ``(-1)**0.5``), or one computed from it."""

    def __neg__(self) -> "_Inexact":
        return self

    def __repr__(self) -> str:
        return "INEXACT"


INEXACT = _Inexact()

Value = Fraction | _Inexact


@dataclass(frozen=True)
class Lexeme:
    kind: str   # num, name, cmp, op, the punctuation itself ('(', ')', ','), or end
    text: str
    pos: int    # offset into the text: the column shift of a message about it


def _quoted(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _digits(x: Fraction) -> float:
    """About how many digits the larger of numerator and denominator has."""
    return math.log10(max(abs(x.numerator), x.denominator))


def _size(x: Value) -> float:
    """The digits ``x`` adds to a product (0 for INEXACT: not counted, see the module)."""
    return 0.0 if x is INEXACT else _digits(x)


def _root(n: int, k: int) -> int | None:
    """The whole ``k``-th root of ``n >= 0``, or None when ``n`` is not a ``k``-th power."""
    if n < 2:
        return n
    if k >= n.bit_length():  # 2**k > n: only 0 and 1 are k-th powers
        return None
    low, high = 1, 1 << (n.bit_length() // k + 1)
    while low < high:  # the largest r with r**k <= n
        mid = (low + high + 1) // 2
        low, high = (mid, high) if mid**k <= n else (low, mid - 1)
    return low if low**k == n else None


def _power(base: Fraction, exponent: Fraction) -> Fraction | None:
    """``base ** exponent`` when it is a fraction (a whole exponent, or a
    positive base whose numerator and denominator are perfect powers), else None."""
    if exponent.denominator == 1:
        return base ** exponent.numerator
    if base <= 0:  # 0 ** positive is 0; a negative base has a complex root
        return Fraction(0) if base == 0 else None
    num, den = (_root(part, exponent.denominator) for part in (base.numerator, base.denominator))
    if num is None or den is None:
        return None
    return Fraction(num, den) ** exponent.numerator


def _lex(text: str, span: Span | None) -> list[Lexeme]:
    out, pos = [], 0
    while pos < len(text):
        m = _LEXEME.match(text, pos)
        if m is None:
            _refuse(f"unexpected character {text[pos]!r}", span, pos,
                    _INSTEAD.get(text[pos], _OTHERWISE))
        kind = m.lastgroup or ""
        if kind == "num" and text.startswith(".", m.end()):
            _refuse(f"malformed number {_quoted(text[pos:m.end() + 1])}", span, pos,
                    "write a number like 0.5 or 1e6")
        if kind != "ws":
            out.append(Lexeme(m.group() if kind == "punct" else kind, m.group(), pos))
        pos = m.end()
    return out + [Lexeme("end", "", len(text))]


def _refuse(message: str, span: Span | None, pos: int, hint: str | None = None) -> NoReturn:
    raise SymflopsError(message, None if span is None else span.shifted(pos), hint)


def _literal(lexeme: Lexeme, span: Span | None) -> Fraction:
    """The exact value of a number as written (``4.5e14``, ``1_048_576``, ``.5``)."""
    mantissa, _, exponent = lexeme.text.replace("_", "").lower().partition("e")
    whole, _, decimals = mantissa.partition(".")
    significant = (whole + decimals).lstrip("0") or "0"
    # An exponent of eight digits or more is refused before 10**shift is computed.
    shift = (10**8 if len(exponent.lstrip("+-").lstrip("0")) > 7 else int(exponent or 0)) \
        - len(decimals)
    if len(significant) + abs(shift) > MAX_DIGITS:
        _refuse(f"number {_quoted(lexeme.text)} needs more than {MAX_DIGITS} digits", span,
                lexeme.pos, "use a number of moderate size")
    return Fraction(int(significant)) * Fraction(10) ** shift


class _Reader:
    """One pass over the lexemes of ``text``; each method reads one rule of the grammar."""

    def __init__(self, text: str, span: Span | None):
        self.text, self.span = text, span
        self.lexemes = _lex(text, span)
        self.at = self.depth = 0

    @property
    def next(self) -> Lexeme:
        return self.lexemes[self.at]

    @property
    def last(self) -> Lexeme:
        return self.lexemes[self.at - 1]

    def take(self) -> Lexeme:
        lexeme = self.next
        self.at = min(self.at + 1, len(self.lexemes) - 1)
        return lexeme

    def is_op(self, *texts: str) -> bool:
        return self.next.kind == "op" and self.next.text in texts

    def refuse(self, message: str, pos: int, hint: str | None = None) -> NoReturn:
        _refuse(message, self.span, pos, hint)

    def written(self, start: int) -> str:
        """The text read since ``start``, quoted, for a message."""
        return _quoted(self.text[start:self.next.pos].strip())

    def checked(self, value: Fraction, pos: int, what: str) -> Fraction:
        if _digits(value) > MAX_DIGITS:
            self.refuse(f"{what} is too large: the value would have more than {MAX_DIGITS} "
                        "digits", pos, _SMALLER)
        return value

    def close(self, wanted: str, opening: Lexeme | None = None) -> None:
        """Read ``wanted`` (')' or the end), or say what the lexeme in its place means."""
        here = self.next
        if here.kind == wanted:
            self.take()
        elif here.kind in ("num", "name", "("):
            self.refuse(f"missing operator between {self.last.text!r} and {here.text!r}",
                        here.pos, f"implicit multiplication is not supported; write "
                                  f"{self.last.text}*{here.text}")
        elif here.kind == "end" and opening is not None:
            self.refuse("unbalanced parentheses: '(' is never closed", opening.pos,
                        "add the missing ')'")
        elif here.kind == ")":
            self.refuse("unbalanced parentheses: unmatched ')'", here.pos,
                        "remove it or add the matching '('")
        elif here.kind == "cmp":
            self.refuse(f"comparison {here.text!r} is not allowed here", here.pos,
                        "this field takes a value, not a condition")
        else:
            self.refuse(f"unexpected {here.text!r}", here.pos,
                        "',' only separates function arguments")

    def whole(self) -> Fraction:
        if self.next.kind == "end":
            self.refuse("empty expression", 0, "write an expression such as 2*B*D")
        value = self.sum()
        self.close("end")
        if value is INEXACT:
            raise SymflopsError(f"{_quoted(self.text)} is not an exact number", self.span, _NOT_EXACT)
        return value

    def sum(self) -> Value:
        start, terms = self.next.pos, [self.product()]
        while self.is_op("+", "-"):
            minus = self.take().text == "-"
            term = self.product()
            terms.append(-term if minus else term)
        if len(terms) == 1:
            return terms[0]
        exact = [t for t in terms if t is not INEXACT]
        # Adding fractions needs every denominator's digits at once.
        if exact and (max(map(_digits, exact)) + sum(math.log10(t.denominator) for t in exact)
                      > MAX_DIGITS):
            self.refuse(f"sum {self.written(start)} is too large: more than {MAX_DIGITS} digits",
                        start, _SMALLER)
        if len(exact) < len(terms):
            return INEXACT
        return self.checked(sum(exact, Fraction(0)), start, self.written(start))

    def product(self) -> Value:
        start, value = self.next.pos, self.factor()
        digits, factors = _size(value), 1
        while self.is_op("*", "/"):
            op, right = self.take(), self.next.pos
            factor = self.factor()
            if op.text == "/" and factor == 0:
                self.refuse(f"division by zero: {self.written(right)} is 0", right,
                            "divide by a non-zero value")
            digits, factors = digits + _size(factor), factors + 1
            if digits > MAX_DIGITS:
                self.refuse(f"product {self.written(start)} is too large: more than {MAX_DIGITS} "
                            "digits", op.pos, _SMALLER)
            if value is INEXACT or factor is INEXACT:
                value = INEXACT
            else:
                value = value * factor if op.text == "*" else value / factor
        if factors == 1 or value is INEXACT:
            return value
        return self.checked(value, start, self.written(start))

    def factor(self) -> Value:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                self.refuse(f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                            self.next.pos, "split it into named parts")
            negative = False
            while self.is_op("+", "-"):
                negative ^= self.take().text == "-"
            start, value = self.next.pos, self.atom()
            if self.is_op("**", "^"):
                op = self.take()
                value = self.power(value, self.factor(), op.pos, start)
            return -value if negative else value
        finally:
            self.depth -= 1

    def power(self, base: Value, exponent: Value, pos: int, start: int) -> Value:
        what = self.written(start)
        if base is INEXACT or exponent is INEXACT:
            return INEXACT
        if base == 0 and exponent < 0:
            self.refuse(f"division by zero in {what}", pos, "a negative power of 0 is undefined")
        size = _digits(base)
        if size and exponent and (math.log10(abs(exponent.numerator))
                                  - math.log10(exponent.denominator) + math.log10(size)
                                  > math.log10(MAX_DIGITS)):
            self.refuse(f"power {what} is too large: the result would have more than "
                        f"{MAX_DIGITS} digits", pos, "use a smaller base or exponent")
        if exponent.denominator != 1 and size > MAX_ROOT_DIGITS:
            self.refuse(f"root {what} of a number with more than {MAX_ROOT_DIGITS} digits", pos,
                        "use a smaller number")
        value = _power(base, exponent)
        if value is None:
            return INEXACT
        return self.checked(value, pos, what)

    def atom(self) -> Value:
        here = self.next
        if here.kind == "num":
            return _literal(self.take(), self.span)
        if here.kind == "(":
            self.take()
            value = self.sum()
            self.close(")", opening=here)
            return value
        if here.kind == "name":
            self.take()
            if self.next.kind == "(":
                self.refuse(f"unknown function {here.text!r}", here.pos,
                            "no functions are allowed here")
            self.refuse(f"unknown name {here.text!r}", here.pos,
                        "no names are allowed here; write a number such as 4096, 2**20 or 1e6")
        if here.kind == "end":
            self.refuse(f"expression ends after {self.last.text!r}", here.pos,
                        f"add an operand after {self.last.text!r}")
        if here.kind == ")" and self.last.kind == "(":
            self.refuse("empty parentheses '()'", self.last.pos,
                        "put an expression inside or remove them")
        self.refuse(f"expected a number, name or '(' but found {here.text!r}", here.pos,
                    "put an operand here or remove the operator")


def read_number(text: str, *, span: Span | None = None) -> Fraction:
    """The exact value of a name-free, function-free number expression
    (``2**20``, ``1e6``, ``0.4``), as :func:`symflops.lang.expr.parse_number`
    reads it; SymflopsError (at ``span`` shifted to the place) when it is not one."""
    if len(text) > MAX_LENGTH:
        raise SymflopsError(f"expression is longer than {MAX_LENGTH} characters", span,
                            "split it into named parts")
    return _Reader(text, span).whole()


def whole_digits(value: int) -> int:
    """Decimal digits of ``|value|``, within one, without printing it."""
    return int(abs(value).bit_length() * math.log10(2)) + 1
