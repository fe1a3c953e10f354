"""The factors of a product that are not a plain tensor: constants, calls,
and what follows a '/' (part of :mod:`symflops.lang.statement`)::

    factor    := ref | call | constant
    call      := NAME "(" ref ["," constant | ("," ref)+] ")"
               | NAME "{" INDEX ("," INDEX)* "}" "(" ref ["," constant] ")"
    constant  := NUMBER | NAME | NAME "(" ... ")" | "(" ... ")"     (no brackets inside)
    divisor   := constant | ref | "(" ref (["*"] ref)* ")"   (a tensor: reciprocal(Z[s]))

A call on an indexed tensor applies a function or an op to it; any other
parenthesised or named factor is a constant, kept as text with its column.
A division by a call, or by parentheses holding a sum of tensors, is refused
where it starts.  A mixin of the statement parser, as
:class:`~symflops.lang.assignment.AssignmentParser` is.
"""

from __future__ import annotations

from typing import Any

from ..core.factors import RECIPROCAL
from .syntax import Call, Constant, Reduced, Ref, Token

#: An example of the braced call, for messages.
BRACED = "layernorm_{c,p}(X[b,c,p])"
#: An op, for messages.
EXAMPLE = "'H[b,f] = X[b,d] W[d,f]'"


class CallParser:
    """Reads constants, calls and divisors; the parser provides ``text``,
    ``tokens``, ``tensors``, ``tok``, ``peek``, ``pos``, ``error``,
    ``describe``, ``expect`` and ``ref``."""

    text: str
    tokens: list[Token]
    tensors: frozenset[str]
    pos: int
    tok: Any
    peek: Any
    error: Any
    describe: Any
    expect: Any
    ref: Any

    def _balanced(self) -> Constant:
        """Raw text from here to the matching ')' (the current token is '(' or
        a name followed by '('); it must hold no tensor reference."""
        start = self.tok
        if self.tok.kind == "name":
            self.pos += 1
        depth = 0
        while True:
            tok = self.tok
            if tok.kind == "end":
                raise self.error("'(' is never closed", "add the missing ')'", start)
            if tok.text == "[":
                raise self.error("a tensor inside a constant factor",
                                 "functions apply to one tensor, e.g. gelu(H[b,f]); sums of "
                                 "tensors inside parentheses are not supported: write them "
                                 "as a separate op", tok)
            self.pos += 1
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
                if depth == 0:
                    end = tok.column + 1
                    return Constant(self.text[start.column:end], start.column)

    def constant_or_call(self) -> Ref | Call | Constant:
        tok = self.tok
        if tok.kind == "number":
            self.pos += 1
            return Constant(tok.text, tok.column)
        if tok.kind == "name" and self.peek().text == "[":
            return self.ref()
        if tok.kind == "name" and self.peek().text == "{":
            return self.braced_call()
        if tok.kind == "name" and self.peek().text == "(":
            # A call on an indexed tensor is a function or an op; else a constant.
            if self.peek(2).kind == "name" and self.peek(3).text == "[":
                self.pos += 1
                return self.call(tok, tok.text)
            return self._balanced()
        if tok.kind == "name":
            if tok.text in self.tensors:  # a tensor without its indices
                return self.ref()
            self.pos += 1
            return Constant(tok.text, tok.column)
        if tok.text == "(":
            return self._balanced()
        raise self.error(f"unexpected {self.describe(tok)}",
                         f"the right side is a sum of products of tensors, e.g. {EXAMPLE}")

    def call(self, name: Token, written: str, reduced: tuple[Reduced, ...] = ()) -> Call:
        """The rest of a call from its '(' (the current token) on: the tensor,
        an optional second argument, and ')'."""
        self.pos += 1
        ref = self.ref()
        argument = None
        if self.tok.text == ",":
            self.pos += 1
            argument = self.constant_or_call()
            if isinstance(argument, Call):
                raise self.error("the second argument must be a constant or a tensor",
                                 "e.g. dropout(A[b,d], 0.1) or "
                                 "cross_entropy_v(Z[b,v], y[b])")
        more: list[Ref] = []
        while isinstance(argument, Ref) and self.tok.text == ",":  # concat_t(A[..], B[..], C[..])
            self.pos += 1
            more.append(self.ref())
        self.expect(")", f"expected ')' to close {written}(...)",
                    f"a call takes one tensor, e.g. {written}(X[b,d])")
        return Call(written, name.column, ref, argument, reduced, tuple(more))

    def braced_call(self) -> Call:
        """``NAME_{a,b}(ref ...)``: a call over the letters in braces (the
        current token is the name, the next '{')."""
        name = self.tok
        self.pos += 1
        opening = self.tok
        self.pos += 1
        hint = f"list the letters it reduces over, each once, e.g. {BRACED}"
        reduced: list[Reduced] = []
        while self.tok.text != "}":
            if self.tok.kind == "end":
                raise self.error(f"'{{' after {name.text!r} is never closed",
                                 f"close the index list with '}}', e.g. {BRACED}", opening)
            if reduced:
                self.expect(",", f"expected ',' or '}}' in the index list of {name.text}{{...}}",
                            f"separate the letters with commas, e.g. {BRACED}")
            letter = self.tok
            if letter.kind != "name":
                raise self.error(f"expected an index letter in {name.text}{{...}}, found "
                                 f"{self.describe(letter)}", hint)
            if any(r.letter == letter.text for r in reduced):
                raise self.error(f"the index {letter.text!r} is listed twice in "
                                 f"{name.text}{{...}}", hint, letter)
            reduced.append(Reduced(letter.text, letter.column))
            self.pos += 1
        if not reduced:
            raise self.error(f"{name.text}{{}} names no index", hint + " (or one index as "
                             f"{name.text}d(X[b,d]))", opening)
        self.pos += 1
        written = f"{name.text}{{{','.join(r.letter for r in reduced)}}}"
        if self.tok.text != "(":
            raise self.error(f"expected '(' after {written}, found {self.describe(self.tok)}",
                             f"apply it to a tensor, e.g. {BRACED}")
        if not (self.peek().kind == "name" and self.peek(2).text == "["):
            raise self.error(f"{written}(...) applies to a tensor with its indices, found "
                             f"{self.describe(self.peek())}", f"e.g. {BRACED}", self.peek())
        return self.call(name, written, tuple(reduced))

    def divisors(self) -> list[Call | Constant]:
        """What follows a '/': a constant, an indexed tensor, read as the call
        ``reciprocal(Z[s])``, or a product of tensors in parentheses, one such
        call each (``/ (Z[s] W[f])`` is ``/ Z[s] / W[f]``).  A call
        (``/ sqrt(Z[s])``) or parentheses holding a sum of tensors
        (``/ (Z[s] + W[s])``) are refused here, where they start."""
        tok = self.tok
        if tok.kind == "end":
            raise self.error("the op ends after '/'", "put a divisor after '/', e.g. "
                             "'/ sqrt(H)' or '/ Z[s]'")
        found = (self._bracketed_tensor()
                 if tok.text == "(" or (tok.kind == "name" and self.peek().text in ("(", "{"))
                 else None)
        if found is not None and tok.text == "(":
            refs = self._product_in_parentheses()
            if refs:
                return [Call(RECIPROCAL, r.column, r) for r in refs]
            raise self.error("division by parentheses holding a sum of tensors (or anything "
                             "but their product) is not supported",
                             "compute the sum as an op of its own, e.g. 'Zw[s] = Z[s] + W[s]', "
                             "and divide by Zw[s]; a product may be divided by, e.g. "
                             "'N[s,f] / (Z[s] W[f])'")
        if found is not None:
            call, letters = found
            raise self.error(f"division by the call {call} is not supported",
                             f"compute it as an op of its own, e.g. 'R[{letters}] = {call}', "
                             f"and divide by R[{letters}]")
        divisor = self.constant_or_call()
        if isinstance(divisor, Constant):
            return [Constant(divisor.text, divisor.column, divide=True)]
        if not isinstance(divisor, Ref):  # a call was refused above
            raise AssertionError(f"unexpected divisor {divisor}")
        return [Call(RECIPROCAL, divisor.column, divisor)]

    def _product_in_parentheses(self) -> list[Ref]:
        """``(Z[s] W[f])`` or ``(Z[s] * W[f])`` from the '(' here: its tensors,
        the position moved past ')'; else nothing, the position unmoved."""
        start, refs = self.pos, []
        self.pos += 1
        while self.tok.kind == "name" and self.peek().text == "[":
            refs.append(self.ref())
            if self.tok.text == "*":
                self.pos += 1
        if refs and self.tok.text == ")":
            self.pos += 1
            return refs
        self.pos = start
        return []

    def _bracketed_tensor(self) -> tuple[str, str] | None:
        """For the '(' or the call's name here: its text to the matching ')'
        and the letters of the first tensor inside it, or None when it holds
        no tensor (a constant such as ``sqrt(H)``)."""
        k, depth, letters = self.pos, 0, None
        while self.tokens[k].kind != "end":
            text = self.tokens[k].text
            if text == "[" and letters is None:
                close = next(j for j in range(k, len(self.tokens))
                             if self.tokens[j].text == "]" or self.tokens[j].kind == "end")
                letters = "".join(t.text for t in self.tokens[k + 1:close])
            depth += (text == "(") - (text == ")")
            if text == ")" and depth == 0:
                break
            k += 1
        if letters is None:
            return None
        return self.text[self.tok.column:self.tokens[k].column + 1], letters
