"""The grammar of one op statement.

::

    statement := ref ("=" | "+=") rhs ["where" condition ("," condition)*]
                                       ("+=": a scatter, Agg[dst[e], d] += M[e,d], the
                                        output's lookup selecting where each term adds)
    rhs       := ["-"] term (("+" | "-") term)*
    term      := factor (["*"] factor | "/" constant | "/" ref | "/" "(" ref (["*"] ref)* ")")*
                                       (N[s,f] / Z[s]: a product with reciprocal(Z[s]))
    factor    := ref | call | constant
    call      := NAME "(" ref ["," constant | ("," ref)+] ")"
               | NAME "{" INDEX ("," INDEX)* "}" "(" ref ["," constant] ")"
                                       (NAME ends in "_": layernorm_{c,p}(X[b,c,p]))
    ref       := NAME "[" [index ("," index)*] "]"
    index     := INDEX | NAME "[" INDEX ("," INDEX)* "]"       (a lookup: E[tok[b], d])
               | affine                                      (X[b,c,p+k], X[b,c,2*p+k], H[b,s-1,d])
    affine    := ["+"|"-"] aterm (("+" | "-") aterm)*      (two tokens or more)
    aterm     := INDEX | N "*" INDEX | INDEX "*" N | NAME "*" INDEX | N
                                       (N a whole number; NAME a dim, checked later)
    condition := side ("<=" | "<" | ">=" | ">") side    (t <= s, s - t < W; see .conditions)
    constant  := NUMBER | NAME | NAME "(" ... ")" | "(" ... ")"     (no brackets inside)

Examples: ``H[b,f] = X[b,d] W_in[d,f]``, ``A[s,t] = Q[s,h] K[t,h] / sqrt(H)``,
``Y[b,d] = X[b,d] + F[b,d]``, ``G[b,f] = silu(A[b,f]) * U[b,f]``,
``Z[b,d] = dropout(A[b,d], 0.1)``, ``X[b,d] = E[tok[b], d]``,
``A[s,t] = Q[s,e] K[t,e] / sqrt(E) where t <= s``, ``Y[s,e] = N[s,e] / Z[s]``.
Juxtaposition and ``*`` both multiply; a division by a tensor is parsed as the
call ``reciprocal(Z[s])``, by a parenthesised product ``(Z[s] W[f])`` as one
such call per tensor (a division by a call or by a parenthesised sum of
tensors is refused where it is written).
A call whose argument is an indexed tensor applies a function (or an op such
as ``softmax_t``, or ``layernorm_{c,p}`` over several letters) to it; any other parenthesised or named factor is a
constant, kept as text with its column and read later by the whitelisting
:mod:`symflops.lang.expr`.  Nothing here evaluates anything.  The records it
produces are in :mod:`symflops.lang.syntax` (re-exported here).
"""

from __future__ import annotations

import re

from ..core.errors import Span, SymflopsError
from .affine import affine_terms
from .assignment import AssignmentParser
from .calls import BRACED, EXAMPLE, CallParser
from .conditions import ConditionParser
from .syntax import (AffineTerm, Call, Condition, Constant, Gather, Reduced, Ref, Shift, Statement,
                     Summand, Term, Token)

__all__ = ["AffineTerm", "Call", "Condition", "Constant", "Gather", "MAX_FACTORS", "MAX_LETTERS",
           "MAX_TENSORS", "MAX_TERMS", "Reduced", "Ref", "Shift", "Statement", "Summand", "Term",
           "Token", "output_name", "parse_statement", "tokenize"]

_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<punct>\*\*|<=|>=|[\[\],=*/()+\-^<>{}])"
)

#: Limits on one op, checked as soon as it is parsed.  Deriving and pricing an
#: op grows fast with its size (the product rule writes each operand's
#: gradient as a product of all the others, which SymPy multiplies out and
#: checks; the costs factor polynomials in every dim an op spans), so an op
#: beyond these would run for minutes instead of failing.  Real layers stay
#: far below them: a transformer block's ops have at most 3 operands and 5
#: letters.
MAX_LETTERS = 16  # distinct index letters in one op, output included
MAX_FACTORS = 16  # factors in one product (tensors, calls and constants)
MAX_TERMS = 64    # products added in one op
#: Tensors (plain or through a function) in one product: its backward rules
#: search every pairwise order over subsets of them (3**n / 2 splits).
MAX_TENSORS = 8


def tokenize(text: str, span: Span | None = None) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    braces = 0  # open '{' of a call's index list
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is not None and m.group() == "{":
            # Only a call's index list opens a brace, right after its name: softmax_{c,p}.
            last = tokens[-1] if tokens else None
            adjacent = last is not None and last.kind == "name" and last.column + len(last.text) == pos
            if adjacent and last.text.endswith("_"):
                braces += 1
            elif adjacent:
                raise SymflopsError(f"'{{' right after {last.text!r}", _at(span, pos),
                                    f"a call's index list follows an underscore: write "
                                    f"{last.text}_{{...}}(...), e.g. {BRACED}")
            else:
                m = None
        elif m is not None and m.group() == "}":
            m, braces = (m, braces - 1) if braces else (None, braces)
        if m is None:
            raise SymflopsError(
                f"unexpected character {text[pos]!r} in op {text!r}", _at(span, pos),
                f"an op is written like {EXAMPLE}: tensor names, index letters in square "
                "brackets, '=', and '*' or spaces between factors")
        if m.lastgroup != "space":
            tokens.append(Token(m.lastgroup or "", m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _at(span: Span | None, column: int) -> Span | None:
    return span.shifted(column) if span is not None else None


class _Parser(ConditionParser, AssignmentParser, CallParser):
    def __init__(self, text: str, span: Span | None, tensors: frozenset[str] = frozenset()):
        self.text = text
        self.span = span
        self.tensors = tensors
        self.tokens = tokenize(text, span)
        self.pos = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.pos + k, len(self.tokens) - 1)]

    def error(self, message: str, hint: str, token: Token | None = None) -> SymflopsError:
        token = token or self.tok
        return SymflopsError(message, _at(self.span, token.column), hint)

    @staticmethod
    def describe(token: Token) -> str:
        return "the end of the op" if token.kind == "end" else repr(token.text)

    def expect(self, text: str, message: str, hint: str) -> Token:
        if self.tok.text != text or self.tok.kind == "end":
            raise self.error(f"{message}, found {self.describe(self.tok)}", hint)
        token = self.tok
        self.pos += 1
        return token

    def at_where(self) -> bool:
        """The keyword ``where`` (a name not followed by '[' or '(')."""
        return (self.tok.kind == "name" and self.tok.text == "where"
                and self.peek().text not in ("[", "("))

    def ref(self, inner: bool = False) -> Ref:
        name = self.tok
        if name.kind != "name":
            raise self.error(f"expected a tensor name, found {self.describe(name)}",
                             "each factor is a tensor with its indices, e.g. 'X[b,d]'")
        self.pos += 1
        if self.tok.text != "[":
            raise self.error(
                f"expected '[' after tensor {name.text!r}, found {self.describe(self.tok)}",
                f"give the indices of {name.text} in square brackets, e.g. '{name.text}[b,d]'")
        opening = self.tok
        self.pos += 1
        indices: list[str] = []
        columns: list[int] = []
        gathers: list[Gather] = []
        shifts: list[Shift] = []
        start = self.pos
        while self.tok.text != "]":
            if self.tok.kind == "end":
                raise self.error(f"'[' after {name.text!r} is never closed",
                                 "close the index list with ']'", opening)
            if indices:
                self.expect(",", f"expected ',' or ']' in the indices of {name.text!r}",
                            "separate index letters with commas, e.g. 'X[b,d]'")
            start = self.pos
            shift = self._affine(start, name.text, len(indices), inner)
            if shift is not None:  # an affine index: X[b,c,p+k], X[b,c,2*p+k], H[b,s-1,d]
                shifts.append(shift)
                indices.append("")
                columns.append(shift.column)
                continue
            if self.tok.kind != "name":
                raise self.error(
                    f"expected an index name in {name.text}[...], found {self.describe(self.tok)}",
                    "indices are names such as b, d, head, t1, or affine expressions of "
                    "letters such as p+k, 2*p+k or s-1")
            if self.peek().text == "[":  # a lookup through an index tensor: E[tok[b], d]
                if inner:
                    raise self.error(f"a lookup inside the lookup {name.text}[...]",
                                     "index tensors take plain letters, e.g. E[tok[b], d]")
                gathers.append(Gather(len(indices), self.ref(inner=True)))
                indices.append("")
                columns.append(gathers[-1].ref.column)
                continue
            indices.append(self.tok.text)
            columns.append(self.tok.column)
            self.pos += 1
        self.pos += 1
        if inner and not indices:
            raise self.error(f"the index tensor {name.text} has no index", "give it letters, "
                             f"e.g. {name.text}[b]", name)
        return Ref(name.text, name.column, tuple(indices), tuple(columns), tuple(gathers),
                   tuple(shifts))

    def _run(self, start: int) -> list[Token]:
        """The tokens of one index position: from ``start`` to the next ','
        or ']' at this bracket depth."""
        end, depth = start, 0
        while self.tokens[end].kind != "end":
            text = self.tokens[end].text
            if depth == 0 and text in (",", "]"):
                break
            depth += text == "["
            depth -= text == "]"
            end += 1
        return self.tokens[start:end]

    def _affine(self, start: int, tensor: str, position: int, inner: bool) -> Shift | None:
        """The index position at ``start`` as an affine expression (moving
        past it), or None when it is a letter, a lookup, or not arithmetic at
        all (the grammar's own messages then apply)."""
        run = self._run(start)
        if len(run) < 2 or (run[0].kind == "name" and run[1].text == "["):
            return None
        if not any(t.kind == "number" or t.text in "+-*/()" for t in run):
            return None
        terms, constant = affine_terms(run, tensor, _at(self.span, run[0].column))
        if inner:
            raise self.error(f"a shifted index inside the lookup {tensor}[...]",
                             "index tensors take plain letters, e.g. E[tok[b], d]", run[0])
        self.pos = start + len(run)
        return Shift(position, terms, constant, run[0].column, "".join(t.text for t in run))

    def term(self, negative: bool) -> Term:
        start = self.tok.column
        factors: list[Ref | Call | Constant] = [self.constant_or_call()]
        while self.tok.kind != "end" and self.tok.text not in ("+", "-") and not self.at_where():
            if self.tok.text == "/":
                self.pos += 1
                factors += self.divisors()
                continue
            if self.tok.text == "*":
                self.pos += 1
                if self.tok.kind == "end":
                    raise self.error("the op ends after '*'", "put a factor after '*' or remove it")
            if self.tok.text in ("**", "^"):
                raise self.error("powers of tensors are not supported",
                                 "write a product, e.g. X[b,d] X[b,d]")
            factors.append(self.constant_or_call())
        return Term(negative, tuple(factors), start)

    def statement(self) -> Statement:
        if self.tok.kind == "end":
            raise self.error("empty op", f"write an op like {EXAMPLE}")
        lhs = self.ref()
        accumulate = self._assignment(lhs)
        if self.tok.kind == "end":
            raise self.error("nothing after '='", f"write an op like {EXAMPLE}")
        terms = []
        negative = False
        if self.tok.text == "-":
            negative = True
            self.pos += 1
        terms.append(self.term(negative))
        while self.tok.kind != "end" and not self.at_where():
            negative = self.tok.text == "-"
            self.pos += 1
            if self.tok.kind == "end":
                raise self.error("the op ends after '+' or '-'", "add the missing term")
            terms.append(self.term(negative))
        where: list[Condition] = []
        if self.at_where():
            self.pos += 1
            partial = Statement(lhs, tuple(terms), self.text)
            letters = frozenset(i for r in (lhs, *partial.refs) for i in r.indices if i) | \
                frozenset(x for r in partial.refs for sh in r.shifts for x in (sh.left, sh.right))
            where.append(self.condition(letters))
            while self.tok.text == ",":
                self.pos += 1
                where.append(self.condition(letters))
            if self.tok.kind != "end":
                raise self.error(f"unexpected {self.describe(self.tok)} in the where-clause",
                                 "separate conditions with commas, e.g. 'where t <= s, u < t'; "
                                 "the where-clause ends the op")
        statement = Statement(lhs, tuple(terms), self.text, tuple(where), accumulate)
        self.check_size(statement)
        return statement

    def check_size(self, st: Statement) -> None:
        """Refuse an op larger than MAX_TERMS, MAX_TENSORS, MAX_FACTORS or MAX_LETTERS,
        pointing at the first term, factor or letter past the limit."""
        if len(st.terms) > MAX_TERMS:
            raise SymflopsError(
                f"the op adds {len(st.terms)} products, more than the limit of {MAX_TERMS}",
                _at(self.span, st.terms[MAX_TERMS].column),
                f"add them in several ops of at most {MAX_TERMS} products each, e.g. "
                "'S1[b,d] = X1[b,d] + X2[b,d]' then 'Y[b,d] = S1[b,d] + X3[b,d]'")
        for term in st.terms:
            tensors = [f for f in term.factors if not isinstance(f, Constant)]
            if len(tensors) > MAX_TENSORS:
                raise SymflopsError(
                    f"a product of {len(tensors)} tensors, more than the limit of {MAX_TENSORS}",
                    _at(self.span, tensors[MAX_TENSORS].column),
                    "contract it in steps through intermediate tensors, e.g. "
                    "'T[i,k] = A[i,j] B[j,k]' then 'Y[i,l] = T[i,k] C[k,l]'")
            if len(term.factors) > MAX_FACTORS:
                raise SymflopsError(
                    f"a product of {len(term.factors)} factors, more than the limit of "
                    f"{MAX_FACTORS}", _at(self.span, term.factors[MAX_FACTORS].column),
                    "contract it in steps through intermediate tensors, e.g. "
                    "'T[i,k] = A[i,j] B[j,k]' then 'Y[i,l] = T[i,k] C[k,l]'")
        letters: list[tuple[int, str]] = list(zip(st.lhs.index_columns, st.lhs.indices))
        for ref in st.refs:
            letters += [(c, i) for c, i in zip(ref.index_columns, ref.indices) if i]
            letters += [(t.column, t.letter) for s in ref.shifts for t in s.terms]
        seen: set[str] = set()
        for column, letter in sorted(letters):
            seen.add(letter)
            if len(seen) > MAX_LETTERS:
                count = len({i for _, i in letters})
                raise SymflopsError(
                    f"the op has {count} distinct index letters, more than the limit of "
                    f"{MAX_LETTERS}", _at(self.span, column),
                    f"split it into ops of at most {MAX_LETTERS} letters (contract some "
                    "operands into an intermediate tensor first), or merge axes that always "
                    "go together into one dim")


def parse_statement(text: str, span: Span | None = None,
                    tensors: frozenset[str] = frozenset()) -> Statement:
    """Parse one op.  ``span`` is where ``text`` starts in its file; errors
    point at the offending column.  Names in ``tensors`` must carry indices
    (so a forgotten bracket is reported as such, not read as a constant)."""
    return _Parser(text, span, tensors).statement()


def output_name(text: str) -> str | None:
    """The output tensor's name, read off the start of a statement, if any."""
    m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[", text)
    return m.group(1) if m else None
