"""Turn user-written arithmetic into SymPy objects without ever executing it.

Security invariant: user text is never executed.  Nothing here hands user text
to ``eval``, ``exec``, ``sympify`` or ``parse_expr`` (all of them run Python
code).  A tokenizer and a recursive-descent parser build SymPy objects directly
from a whitelisted grammar, so hostile text can at worst raise SymflopsError.

Grammar (``^`` means the same as ``**``)::

    text    := sum | sum CMP sum          # CMP only, and then required, when comparisons=True
    sum     := product (('+' | '-') product)*
    product := factor (('*' | '/') factor)*
    factor  := ('+' | '-')* atom (('**' | '^') factor)?   # -2**2 == -4, 2**3**2 == 512
    atom    := NUMBER | NAME | NAME '(' sum (',' sum)* ')' | '(' sum ')'
    NUMBER  := 4096 | 1_048_576 | 0.4 | .5 | 1e6 | 4.5e14  # exact Integer/Rational, never Float
    NAME    := identifier ('.' identifier)*    # 'flops.total' is one name
    CMP     := '==' | '!=' | '<' | '<=' | '>' | '>='

Implicit multiplication (``2B``, ``2 B``) is an error.  Numbers beyond
10**±MAX_DIGITS and nesting deeper than MAX_DEPTH are refused: either would let
a one-line input hang SymPy or exhaust the Python stack.  So are a power of
names with an exponent above MAX_EXPONENT (``D**(10**999)``), and any value
whose total degree in the names exceeds MAX_DEGREE or whose expansion would
have more than MAX_EXPANDED_TERMS terms (``(B+D)**100000``, a product of many sums)
or coefficients of more than MAX_DIGITS digits (``(10**999*B + 1)**5``):
:func:`measure` bounds all three from the expression tree, before anything expands
(the limits and the measures live in :mod:`symflops.lang.limits`).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, NoReturn

import sympy

from ..core.errors import Span, SymflopsError
from .limits import (MAX_DEGREE, MAX_DEPTH, MAX_DIGITS, MAX_EXPANDED_TERMS, MAX_EXPONENT,
                     MAX_LENGTH, MAX_ROOT_DIGITS, Measure, factor_digits, log10_size, measure,
                     number_digits, root_digits)

Function = Callable[..., sympy.Expr]
DEFAULT_FUNCTIONS: Mapping[str, Function] = MappingProxyType({
    "sqrt": sympy.sqrt, "log": sympy.log, "exp": sympy.exp, "max": sympy.Max,
    "min": sympy.Min, "ceiling": sympy.ceiling, "floor": sympy.floor, "abs": sympy.Abs,
})
# (fewest, most) arguments; callables not listed are called and their TypeError reported.
# Max/Min compare every pair symbolically: 64 arguments already take seconds.
_ARITY: dict[object, tuple[int, int | None]] = {
    sympy.sqrt: (1, 1), sympy.log: (1, 2), sympy.exp: (1, 1), sympy.Max: (1, 16),
    sympy.Min: (1, 16), sympy.ceiling: (1, 1), sympy.floor: (1, 1), sympy.Abs: (1, 1),
}
_UNDEFINED = (sympy.S.ComplexInfinity, sympy.S.NaN, sympy.S.Infinity, sympy.S.NegativeInfinity)

_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_TOKEN = re.compile(rf"""
    (?P<ws>\s+)
  | (?P<num>(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<cmp>==|!=|<=|>=|<|>)
  | (?P<op>\*\*|[-+*/^])
  | (?P<punct>[(),])
""", re.VERBOSE)
_QUOTES = "quotes are not allowed: write names bare, e.g. B*D"
_CHAR_HINTS = {
    "'": _QUOTES, '"': _QUOTES, "=": "use '==' to compare", "!": "use '!=' for 'not equal'",
    ";": "write a single expression", "%": "there is no '%'; use floor(a/b)",
    ".": "'.' joins name parts (flops.total) or starts a decimal (0.5)",
    **{c: "use parentheses ( ) for grouping" for c in "[]{}"},
}
_ALLOWED = "allowed are numbers, names, + - * / ** ^ ( ) and function calls"


@dataclass(frozen=True)
class Comparison:
    """``lhs op rhs`` kept as written (sympy.Eq would collapse to True/False)."""

    lhs: sympy.Expr
    op: str  # one of == != < <= > >=
    rhs: sympy.Expr


@dataclass(frozen=True)
class _Token:
    kind: str  # num, name, cmp, op, '(', ')', ',', end
    text: str
    pos: int  # 0-based offset into the parsed text, i.e. the column shift


def _fail(message: str, span: Span | None, pos: int, hint: str | None = None) -> NoReturn:
    raise SymflopsError(message, span.shifted(pos) if span is not None else None, hint)


def _show(text: str) -> str:
    """Quote user text, shortened so a pasted novel does not flood the error line."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _reason(exc: Exception) -> str:
    """One short line from an exception (SymPy's can embed 1000-digit numbers)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:100]


def _listing(names: Mapping[str, object]) -> str:
    shown = sorted(names)
    return ", ".join(shown[:20]) + (", ..." if len(shown) > 20 else "")


def _tokenize(text: str, span: Span | None) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            _fail(f"unexpected character {text[pos]!r}", span, pos, _CHAR_HINTS.get(text[pos], _ALLOWED))
        kind, end = match.lastgroup or "", match.end()
        if kind == "num" and text.startswith(".", end):
            _fail(f"malformed number {_show(text[pos:end + 1])}", span, pos, "write a number like 0.5 or 1e6")
        if kind != "ws":
            tokens.append(_Token(match.group() if kind == "punct" else kind, match.group(), pos))
        pos = end
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _number(token: _Token, span: Span | None) -> sympy.Rational:
    """Exact value of a literal: decimals and exponents never pass through float."""
    mantissa, _, exponent = token.text.replace("_", "").lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0") or "0"
    huge = len(exponent.lstrip("+-").lstrip("0")) > 7  # 1e99999999 must fail before 10**shift
    shift = (10**8 if huge else int(exponent or 0)) - len(fraction)
    if len(digits) + abs(shift) > MAX_DIGITS:
        _fail(f"number {_show(token.text)} needs more than {MAX_DIGITS} digits", span, token.pos,
              "use a number of moderate size")
    value = int(digits)
    return sympy.Rational(value * 10**shift, 1) if shift >= 0 else sympy.Rational(value, 10**-shift)




class _Parser:
    def __init__(self, text: str, symbols: Mapping[str, sympy.Expr],
                 functions: Mapping[str, Function], span: Span | None, comparisons: bool):
        self.text, self.symbols, self.functions = text, symbols, functions
        self.span, self.comparisons = span, comparisons
        self.tokens = _tokenize(text, span)
        self.index = self.depth = 0
        self.measured: dict[sympy.Expr, Measure] = {}

    @property
    def tok(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tok
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def fail(self, message: str, pos: int, hint: str | None = None) -> NoReturn:
        _fail(message, self.span, pos, hint)

    def source(self, start: int) -> str:
        """The user's text from ``start`` up to the current token, for messages."""
        return _show(self.text[start:self.tok.pos].strip())

    def parse(self) -> sympy.Expr | Comparison:
        if self.tok.kind == "end":
            self.fail("empty expression", 0, "write an expression such as 2*B*D")
        lhs = self.sum()
        if self.comparisons and self.tok.kind == "cmp":
            op = self.advance()
            rhs = self.sum()
            self.expect("end")
            return Comparison(lhs, op.text, rhs)
        self.expect("end")
        if self.comparisons:
            self.fail(f"{_show(self.text.strip())} is not a comparison", 0, "write e.g. B <= 4096")
        return lhs

    def expect(self, kind: str, opening: _Token | None = None) -> None:
        """Consume ``kind`` or explain what the stray token in its place means."""
        tok, prev = self.tok, self.tokens[self.index - 1]
        if tok.kind == kind:
            self.advance()
            return
        if tok.kind in ("num", "name", "("):
            self.fail(f"missing operator between {prev.text!r} and {tok.text!r}", tok.pos,
                      f"implicit multiplication is not supported; write {prev.text}*{tok.text}")
        if tok.kind == "end" and opening is not None:
            self.fail("unbalanced parentheses: '(' is never closed", opening.pos, "add the missing ')'")
        if tok.kind == ")":
            self.fail("unbalanced parentheses: unmatched ')'", tok.pos, "remove it or add the matching '('")
        if tok.kind == "cmp" and self.comparisons:
            self.fail(f"misplaced comparison {tok.text!r}", tok.pos,
                      "the whole text must be one comparison like B*D <= 4096, unchained and unparenthesised")
        if tok.kind == "cmp":
            self.fail(f"comparison {tok.text!r} is not allowed here", tok.pos,
                      "this field takes a value, not a condition")
        self.fail(f"unexpected {tok.text!r}", tok.pos, "',' only separates function arguments")

    def sum(self) -> sympy.Expr:
        first, terms = self.tok.pos, [self.product()]
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            negate = self.advance().text == "-"
            rhs = self.product()
            terms.append(sympy.Mul(-1, rhs) if negate else rhs)
        if len(terms) == 1:
            return terms[0]
        # Fractions merge over a common denominator, which can need every
        # denominator's digits at once (1e999 + 1/1e999).
        coefficients = [term.as_coeff_Mul()[0] for term in terms]
        digits = max(map(number_digits, coefficients)) + sum(math.log10(c.q) for c in coefficients if c.is_Rational)
        if digits > MAX_DIGITS:
            self.fail(f"sum {self.source(first)} is too large: more than {MAX_DIGITS} digits", first,
                      "use smaller numbers")
        return self.guard(sympy.Add(*terms), first, self.source(first))  # one Add: pairwise is O(n**2)

    def product(self) -> sympy.Expr:
        first, factors = self.tok.pos, [self.factor()]
        # Bounds on what one Mul of all factors would build: numbers multiply into the
        # coefficient (digits add up) and exact roots merge (sqrt(2)*sqrt(3) -> sqrt(6)).
        digits, roots = factor_digits(factors[0]), root_digits(factors[0])
        while self.tok.kind == "op" and self.tok.text in ("*", "/"):
            op, start = self.advance(), self.tok.pos
            rhs = self.factor()
            if op.text == "/" and rhs.is_zero:
                self.fail(f"division by zero: {self.source(start)} is 0", start, "divide by a non-zero value")
            factors.append(rhs if op.text == "*" else sympy.Pow(rhs, -1))
            digits, roots = digits + factor_digits(rhs), roots + root_digits(rhs)
            if digits > MAX_DIGITS:
                self.fail(f"product {self.source(first)} is too large: more than {MAX_DIGITS} digits",
                          op.pos, "use smaller numbers")
            if roots > MAX_ROOT_DIGITS:
                self.fail(f"roots in {self.source(first)} would merge into a number with more than "
                          f"{MAX_ROOT_DIGITS} digits", op.pos, "use smaller numbers")
        if len(factors) == 1:
            return factors[0]
        return self.guard(sympy.Mul(*factors), first, self.source(first))  # one Mul: pairwise is O(n**2)

    def factor(self) -> sympy.Expr:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                self.fail(f"expression nested too deeply (more than {MAX_DEPTH} levels)", self.tok.pos,
                          "split it into named parts")
            negate = False
            while self.tok.kind == "op" and self.tok.text in ("+", "-"):
                negate ^= self.advance().text == "-"
            start, value = self.tok.pos, self.atom()
            if self.tok.kind == "op" and self.tok.text in ("**", "^"):
                op = self.advance()
                value = self.power(value, self.factor(), op.pos, start)
            return sympy.Mul(-1, value) if negate else value
        finally:
            self.depth -= 1

    def power(self, base: sympy.Expr, exponent: sympy.Expr, pos: int, start: int) -> sympy.Expr:
        """``base**exponent``, refused before SymPy would compute an enormous exact value."""
        what = self.source(start)
        if base.is_zero and exponent.is_negative:
            self.fail(f"division by zero in {what}", pos, "a negative power of 0 is undefined")
        # SymPy distributes a power over a product and computes its numeric factors exactly.
        factors = base.args if base.is_Mul else (base,)
        size = max((number_digits(f) for f in factors if f.is_number), default=0.0)
        scale = log10_size(exponent)
        if size and scale is not None and scale + math.log10(size) > math.log10(MAX_DIGITS):
            self.fail(f"power {what} is too large: the result would have more than {MAX_DIGITS} digits",
                      pos, "use a smaller base or exponent")
        if base.free_symbols and scale is not None and scale > math.log10(MAX_EXPONENT):
            self.fail(f"power {what} has an exponent above {MAX_EXPONENT}", pos,
                      f"a power of names takes an exponent of at most {MAX_EXPONENT} in size")
        if exponent.is_Rational and not exponent.is_Integer and any(
                f.is_Rational and number_digits(f) > MAX_ROOT_DIGITS for f in factors):
            self.fail(f"root {what} of a number with more than {MAX_ROOT_DIGITS} digits", pos,
                      "use a smaller number")
        return self.guard(sympy.Pow(base, exponent), pos, what)

    def atom(self) -> sympy.Expr:
        tok, prev = self.tok, self.tokens[self.index - 1]
        if tok.kind == "num":
            self.advance()
            return _number(tok, self.span)
        if tok.kind == "name":
            self.advance()
            return self.call(tok) if self.tok.kind == "(" else self.lookup(tok)
        if tok.kind == "(":
            self.advance()
            value = self.sum()
            self.expect(")", opening=tok)
            return value
        if tok.kind == "end":
            self.fail(f"expression ends after {prev.text!r}", tok.pos, f"add an operand after {prev.text!r}")
        if tok.kind == ")" and prev.kind == "(":
            self.fail("empty parentheses '()'", prev.pos, "put an expression inside or remove them")
        self.fail(f"expected a number, name or '(' but found {tok.text!r}", tok.pos,
                  "put an operand here or remove the operator")

    def lookup(self, tok: _Token) -> sympy.Expr:
        name = tok.text
        if name in self.symbols:
            return self.symbols[name]
        if name in self.functions:
            self.fail(f"function {name!r} used without arguments", tok.pos, f"write {name}(...)")
        close = difflib.get_close_matches(name, list(self.symbols), n=1)
        known = f"known names: {_listing(self.symbols)}" if self.symbols else \
            "no names are allowed here; write a number such as 4096, 2**20 or 1e6"
        self.fail(f"unknown name {name!r}", tok.pos, (f"did you mean {close[0]!r}? " if close else "") + known)

    def call(self, tok: _Token) -> sympy.Expr:
        name, opening = tok.text, self.advance()
        if name not in self.functions:
            if name in self.symbols:
                self.fail(f"{name!r} is a symbol, not a function", tok.pos, f"write {name}*(...) to multiply")
            allowed = f"allowed functions: {_listing(self.functions)}" if self.functions else \
                "no functions are allowed here"
            self.fail(f"unknown function {name!r}", tok.pos, allowed)
        args: list[sympy.Expr] = []
        if self.tok.kind != ")":
            args.append(self.sum())
            while self.tok.kind == ",":
                self.advance()
                args.append(self.sum())
        self.expect(")", opening=opening)
        return self.apply(tok, self.functions[name], args)

    def apply(self, tok: _Token, func: Function, args: list[sympy.Expr]) -> sympy.Expr:
        low, high = _ARITY.get(func, (0, None))
        if len(args) < low or (high is not None and len(args) > high):
            count = f"{low} argument" if low == high else f"{low} to {high} arguments"
            self.fail(f"{tok.text}() takes {count}, got {len(args)}", tok.pos,
                      f"write e.g. {tok.text}({', '.join(['B'] * max(low, 1))})")
        what = self.source(tok.pos)
        if func is sympy.sqrt:  # through power() so that the root-size limit applies
            return self.power(args[0], sympy.S.Half, tok.pos, tok.pos)
        if func is sympy.exp and (log10_size(args[0]) or 0.0) > math.log10(MAX_DIGITS * math.log(10)):
            self.fail(f"{what} is too large (more than {MAX_DIGITS} digits)", tok.pos, "use a smaller argument")
        try:
            result = func(*args)
        except (TypeError, ValueError, ArithmeticError) as exc:
            self.fail(f"cannot compute {what}: {_reason(exc)}", tok.pos, "check the arguments")
        if not isinstance(result, sympy.Expr):
            self.fail(f"{tok.text}() did not return an expression", tok.pos)
        if func in (sympy.floor, sympy.ceiling) and result.is_number and not result.is_Integer:
            # SymPy gave up rounding (e.g. floor(exp(1000))); such a value makes later
            # printing and comparisons raise, so refuse it here.
            self.fail(f"cannot compute {what} exactly", tok.pos, "round a smaller number")
        return self.guard(result, tok.pos, what)

    def guard(self, value: sympy.Expr, pos: int, what: str) -> sympy.Expr:
        """Reject undefined results (x/0, log(0)) and numbers SymPy could not handle quickly."""
        if value.has(*_UNDEFINED):
            self.fail(f"{what} is undefined (division by zero or similar)", pos,
                      "make sure no divisor or log argument is zero")
        if number_digits(value) > MAX_DIGITS:
            self.fail(f"{what} is too large: the value would have more than {MAX_DIGITS} digits", pos,
                      "use smaller numbers")
        found = measure(value, self.measured)
        if found.digits > MAX_DIGITS:  # (10**999*B + 1)**5 writes no number above the limit
            self.fail(f"{what} would expand to coefficients of more than {MAX_DIGITS} digits", pos,
                      "use smaller numbers")
        if found.degree > MAX_DEGREE:
            self.fail(f"{what} has a degree above {MAX_DEGREE} in the names", pos,
                      f"formulas of dims are polynomials of degree at most {MAX_DEGREE}")
        if found.terms > MAX_EXPANDED_TERMS:
            self.fail(f"{what} would expand to more than {MAX_EXPANDED_TERMS} terms", pos,
                      "write a smaller formula (expanding it would take minutes)")
        return value


def parse_expression(text: str, symbols: Mapping[str, sympy.Expr], *, span: Span | None = None,
                     functions: Mapping[str, Function] | None = None,
                     comparisons: bool = False) -> sympy.Expr | Comparison:
    """Parse ``text`` into a SymPy expression, or a Comparison when ``comparisons``."""
    if len(text) > MAX_LENGTH:
        raise SymflopsError(f"expression is longer than {MAX_LENGTH} characters", span,
                            "split it into named parts")
    try:
        parser = _Parser(text, symbols, DEFAULT_FUNCTIONS if functions is None else functions,
                         span, comparisons)
        return parser.parse()
    except (ArithmeticError, RecursionError, TypeError, ValueError) as exc:
        # Last line of defence: SymPy can still raise on exotic input, and callers
        # rely on SymflopsError being the only exception that leaves this module.
        raise SymflopsError(f"cannot compute {_show(text)}: {_reason(exc)}", span,
                            "SymPy could not pin the value down; simplify the expression") from None


def parse_number(text: str, *, span: Span | None = None) -> sympy.Expr:
    """Parse a name-free, function-free number expression (``2**20``, ``1e6``) exactly."""
    value = parse_expression(text, {}, span=span, functions={})
    if not isinstance(value, sympy.Rational):
        raise SymflopsError(f"{_show(text)} is not an exact number", span,
                            "write an integer or fraction such as 4096, 2**20, 1e6 or 0.5")
    return value
