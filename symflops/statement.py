"""The grammar of one op statement, e.g. ``H[b,f] = X[b,d] W_in[d,f]``.

::

    statement := ref "=" product
    product   := [number ["*"]] ref (["*"] ref)*
    ref       := NAME "[" [INDEX ("," INDEX)*] "]"

NAME and INDEX are identifiers (letters, digits, underscores; not starting
with a digit).  Juxtaposition and ``*`` both mean multiplication.  Nothing in a
statement is ever evaluated: numbers are read by :func:`symflops.expr.parse_number`
(through a whitelist) and everything else becomes plain strings with their
columns, for :mod:`symflops.spec` to bind to tensors and dimensions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sympy

from .errors import Span, SymflopsError

_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<punct>[\[\],=*/()+-])"
)


@dataclass(frozen=True)
class Token:
    kind: str  # 'name' | 'number' | 'punct' | 'end'
    text: str
    column: int  # 0-based offset in the statement


@dataclass(frozen=True)
class Ref:
    """``NAME[i, j]`` with the 0-based column of the name and of each index."""

    name: str
    column: int
    indices: tuple[str, ...]
    index_columns: tuple[int, ...]


@dataclass(frozen=True)
class Statement:
    lhs: Ref
    factors: tuple[Ref, ...]
    coefficient: sympy.Expr
    text: str


def tokenize(text: str, span: Span | None = None) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SymflopsError(
                f"unexpected character {text[pos]!r} in op {text!r}",
                _at(span, pos),
                "an op is written like 'H[b,f] = X[b,d] W[d,f]': tensor names, "
                "index letters in square brackets, '=', and '*' or spaces between factors",
            )
        if m.lastgroup != "space":
            tokens.append(Token(m.lastgroup or "", m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _at(span: Span | None, column: int) -> Span | None:
    return span.shifted(column) if span is not None else None


class _Parser:
    def __init__(self, text: str, span: Span | None):
        self.text = text
        self.span = span
        self.tokens = tokenize(text, span)
        self.pos = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def error(self, message: str, hint: str, token: Token | None = None) -> SymflopsError:
        token = token or self.tok
        return SymflopsError(message, _at(self.span, token.column), hint)

    def describe(self, token: Token) -> str:
        return "the end of the op" if token.kind == "end" else repr(token.text)

    def expect(self, text: str, message: str, hint: str) -> Token:
        if self.tok.text != text or self.tok.kind == "end":
            raise self.error(f"{message}, found {self.describe(self.tok)}", hint)
        token = self.tok
        self.pos += 1
        return token

    def ref(self) -> Ref:
        name = self.tok
        if name.kind != "name":
            raise self.error(
                f"expected a tensor name, found {self.describe(name)}",
                "each factor is a tensor with its indices, e.g. 'X[b,d]'",
            )
        self.pos += 1
        if self.tok.text != "[":
            raise self.error(
                f"expected '[' after tensor {name.text!r}, found {self.describe(self.tok)}",
                f"give the indices of {name.text} in square brackets, e.g. '{name.text}[b,d]'",
            )
        opening = self.tok
        self.pos += 1
        indices: list[str] = []
        columns: list[int] = []
        while self.tok.text != "]":
            if self.tok.kind == "end":
                raise self.error(
                    f"'[' after {name.text!r} is never closed",
                    "close the index list with ']'",
                    opening,
                )
            if indices:
                self.expect(",", f"expected ',' or ']' in the indices of {name.text!r}",
                            "separate index letters with commas, e.g. 'X[b,d]'")
            if self.tok.kind != "name":
                raise self.error(
                    f"expected an index name in {name.text}[...], found {self.describe(self.tok)}",
                    "indices are names such as b, d, head, t1; "
                    "arithmetic on indices is not allowed here",
                )
            indices.append(self.tok.text)
            columns.append(self.tok.column)
            self.pos += 1
        self.pos += 1
        return Ref(name.text, name.column, tuple(indices), tuple(columns))

    def statement(self) -> Statement:
        if self.tok.kind == "end":
            raise self.error("empty op", "write an op like 'H[b,f] = X[b,d] W[d,f]'")
        lhs = self.ref()
        self.expect("=", "expected '=' after the output tensor",
                    "an op assigns one output, e.g. 'H[b,f] = X[b,d] W[d,f]'")
        coefficient = sympy.Integer(1)
        if self.tok.kind == "number":
            from .expr import parse_number  # the whitelisting number reader

            coefficient = parse_number(self.tok.text, span=_at(self.span, self.tok.column))
            self.pos += 1
            if self.tok.text == "*":
                self.pos += 1
        factors = [self.ref()]
        while self.tok.kind != "end":
            if self.tok.text == "*":
                self.pos += 1
            if self.tok.kind == "end":
                raise self.error("the op ends after '*'", "put a factor after '*' or remove it")
            if self.tok.kind != "name":
                raise self.error(
                    f"unexpected {self.describe(self.tok)} in the product",
                    "a contraction is a product of indexed tensors, e.g. "
                    "'Y[b,e] = H[b,f] W[f,e]'",
                )
            factors.append(self.ref())
        return Statement(lhs, tuple(factors), coefficient, self.text)


def parse_statement(text: str, span: Span | None = None) -> Statement:
    """Parse one op.  ``span`` is where ``text`` starts in its file; errors
    point at the offending column."""
    return _Parser(text, span).statement()
