"""The sign between a statement's output and its right side: ``=``, or ``+=``
for a scatter (``Agg[dst[e], d] += M[e,d]``), whose output looks up the
position each term adds into.  A mixin of the statement parser
(:mod:`symflops.lang.statement`), as :class:`~symflops.lang.conditions.ConditionParser` is.
"""

from __future__ import annotations

from typing import Any

from .syntax import Ref

_EXAMPLE = "'H[b,f] = X[b,d] W[d,f]'"


class AssignmentParser:
    """Reads ``=`` or ``+=``; the parser provides ``tok``, ``peek``, ``pos``,
    ``error`` and ``expect``."""

    tok: Any
    pos: int
    peek: Any
    error: Any
    expect: Any

    def _assignment(self, lhs: Ref) -> bool:
        """Past ``=`` or ``+=`` after the output: True for ``+=``, a scatter,
        whose output looks up the positions it adds into (``Agg[dst[e], d]``);
        each form only with its kind of output."""
        plus = self.tok
        if plus.text == "+" and self.peek().text == "=" and self.peek().column == plus.column + 1:
            self.pos += 2
            if not lhs.gathers:
                raise self.error(f"'+=' with the output {lhs.name}[{','.join(lhs.indices)}], "
                                 "which looks nothing up",
                                 "'+=' is a scatter: the output's lookup names where each term "
                                 "adds, e.g. 'Agg[dst[e], d] += M[e,d]'; an op with plain output "
                                 f"letters assigns, e.g. {_EXAMPLE}", plus)
            return True
        if lhs.gathers:
            g = lhs.gathers[0].ref
            raise self.error(
                f"a lookup on the output {lhs.name} with '=', which would assign each position "
                f"{g.name} selects once", "a lookup on the output adds every term into the "
                f"position {g.name} selects (a scatter; several terms may land on one): write "
                f"'+=' in place of '=', e.g. 'Agg[dst[e], d] += M[e,d]'",
                plus)
        self.expect("=", "expected '=' after the output tensor",
                    f"an op assigns one output, e.g. {_EXAMPLE}")
        return False
