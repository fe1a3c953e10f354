"""The grammar of a where-clause's conditions (part of :mod:`symflops.lang.statement`)::

    condition := side ("<=" | "<" | ">=" | ">") side              (t <= s, s - t < W)
    side      := ["-"] atom (("+" | "-") atom)*    (atom: INDEX, a dim's NAME, a whole NUMBER)

with two index letters in all, one added and one subtracted once everything is
moved to one side: a condition is a letter against a letter plus a constant
(``s - t < W`` is read as ``s < t + W``, ``t >= s - W + 1`` as ``t >= s + (1 - W)``).
Which names are letters is known from the op's own indices; any other name is
a dim, checked when the op is lowered.  A plain ``t <= s`` gives the same
:class:`Condition` as before offsets existed.  What is not of this form is
refused at its column by name: ``s/C == t/C`` (a chunk: give it its own letter),
a multiple of a letter (``2*t``), both letters added (``t + s <= W``).
"""

from __future__ import annotations

from typing import Protocol

from ..core.errors import SymflopsError
from .syntax import Condition, Summand, Token


class _Tokens(Protocol):
    tokens: list[Token]
    tensors: frozenset[str]
    pos: int

    @property
    def tok(self) -> Token: ...

    def peek(self, k: int = 1) -> Token: ...

    def error(self, message: str, hint: str, token: Token | None = None) -> SymflopsError: ...

    @staticmethod
    def describe(token: Token) -> str: ...

    def side(self, letters: frozenset[str]) -> list[tuple[bool, Token]]: ...


class ConditionParser:
    """The where-clause rules of the statement parser (a mixin of its class,
    which provides the tokens, the position and the errors)."""

    def condition(self: _Tokens, letters: frozenset[str]) -> Condition:
        """``t <= s``, or affine in two letters: ``s - t < W``, ``t >= s - W + 1``
        (``letters``: the op's index letters; any other name is a dim)."""
        hint = "a condition compares two index letters of the op, e.g. 'where t <= s'"
        first = self.tok
        left = self.side(letters)
        op = self.tok
        if op.text not in ("<=", "<", ">=", ">"):
            raise self.error(f"expected <=, <, >= or > after {self.tokens[self.pos - 1].text!r}, "
                             f"found {self.describe(op)}", hint)
        self.pos += 1
        right = self.side(letters)
        if len(left) == 1 and len(right) == 1 and not left[0][0] and not right[0][0]:
            a, b = left[0][1], right[0][1]
            if a.kind != "name":
                raise self.error(f"expected an index letter in the where-clause, found "
                                 f"{self.describe(a)}", hint, a)
            if b.kind != "name":
                raise self.error(f"expected an index letter after {op.text!r}, found "
                                 f"{self.describe(b)}", hint, b)
            return Condition(a.text, op.text, b.text, a.column, b.column)
        # Everything moved to the left: a - b + constants OP 0, that is a OP b - constants.
        moved = left + [(not negative, token) for negative, token in right]
        named = [(negative, t) for negative, t in moved if t.kind == "name" and t.text in letters]
        if len(named) != 2 or named[0][0] == named[1][0]:
            found = ", ".join(("-" if n else "+") + t.text for n, t in named) or "none"
            raise self.error(
                f"a condition compares two index letters, one added and one subtracted; "
                f"this one has the letters {found}", "write it as a letter against a letter "
                "plus or minus dims and whole numbers, e.g. 's - t < W' or "
                "'t >= s - W + 1'", first)
        (_, a), (_, b) = sorted(named, key=lambda n: n[0])
        offset = tuple(Summand(not negative, t.text, t.column) for negative, t in moved
                       if (negative, t) not in named)
        return Condition(a.text, op.text, b.text, a.column, b.column, offset)

    def side(self: _Tokens, letters: frozenset[str]) -> list[tuple[bool, Token]]:
        """``[-] atom (("+" | "-") atom)*`` of a condition, each atom an index
        letter, a dim's name or a whole number, with its sign."""
        out: list[tuple[bool, Token]] = []
        negative = False
        while True:
            if self.tok.text == "-" and not out:
                negative, self.pos = True, self.pos + 1
            atom = self.tok
            if atom.kind not in ("name", "number") or (atom.kind == "name"
                                                         and self.peek().text in ("[", "(")):
                raise self.error(f"expected an index letter, a dim or a whole number in the "
                                 f"where-clause, found {self.describe(atom)}",
                                 "e.g. 'where t <= s, s - t < W'")
            if atom.kind == "name" and atom.text in self.tensors and atom.text not in letters:
                raise self.error(f"{atom.text!r} in the where-clause is a tensor",
                                 "a condition compares index letters plus dims and whole "
                                 "numbers, e.g. 's - t < W'", atom)
            if atom.kind == "number" and not atom.text.replace("_", "").isdigit():
                raise self.error(f"{atom.text!r} in the where-clause is not a whole number",
                                 "a condition adds dims and whole numbers, e.g. 's - t <= W - 1'",
                                 atom)
            self.pos += 1
            out.append((negative, atom))
            after = self.tok
            if after.text == "/":
                raise self.error(
                    "a condition of the form s/C == t/C (the same chunk) is not supported",
                    "for chunked attention give the chunk its own letter: declare the positions "
                    "as (chunk, offset) pairs over dims N and C (S = N*C), Q[n,c,e] K[n,u,e] "
                    "where u <= c; see derivations/attention_chunked.yaml", after)
            if after.text in ("*", "(", "**", "^"):
                other = self.peek()
                if atom.text in letters or (after.text == "*" and other.text in letters):
                    written = f"{atom.text}*{other.text}" if after.text == "*" else atom.text
                    raise self.error(
                        f"a multiple of an index letter ({written}) in the where-clause is not "
                        "supported", "a condition compares a letter with a letter plus dims and "
                        "whole numbers (s - t < W); strides and dilations go in the index "
                        "itself, not in a where-clause", atom)
                raise self.error(
                    f"{after.text!r} after {atom.text!r} in the where-clause: a condition adds "
                    "dims and whole numbers only", "for a multiple of a dim define one, e.g. "
                    "'W2: {equals: 2 * W}', and add that", after)
            if after.text not in ("+", "-"):
                return out
            negative = after.text == "-"
            self.pos += 1
