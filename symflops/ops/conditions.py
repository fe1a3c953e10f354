"""A where-clause's conditions as indicator factors, shared by the op kinds
that take one (an einsum, a masked softmax).

``t <= s`` becomes ``Factor("", (t, s), fn="<=")`` exactly as before offsets
existed; ``s - t < W`` becomes ``Factor("", (s, t), fn=Offset("<", W))``, its
offset read by the whitelisting expression parser (a dim's name or a whole
number per summand, never evaluated) and integer-valued by construction.  A
where-clause with offsets is counted once here, so that a domain the engine
cannot count exactly (or an empty one) is refused at the clause rather than
deep inside a cost.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import sympy

from ..core.domain import Uncountable, domain_size
from ..core.errors import SymflopsError
from ..core.ir import Factor, comparison, relation
from ..lang.expr import parse_expression
from ..lang.syntax import Condition
from .base import Scope


def condition_factor(c: Condition, scope: Scope) -> Factor:
    """The indicator ``[left op right + offset]`` of one condition."""
    offset: sympy.Expr = sympy.Integer(0)
    for s in c.offset:
        value = parse_expression(s.text, dict(scope.dims), span=scope.at(s.column))
        if not (value.is_integer and value.is_finite):
            raise SymflopsError(f"{s.text!r} in the where-clause is not a dim or a whole number",
                                scope.at(s.column), "add or subtract dims and whole numbers, "
                                "e.g. 's - t < W' or 't >= s - W + 1'")
        offset += -value if s.negative else value
    return Factor("", (c.left, c.right), scope.at(c.column), relation(c.op, offset))  # type: ignore[arg-type]


def check_domain(factors: Iterable[Factor], scope: Scope, where: Sequence[Condition]) -> None:
    """Refuse a where-clause whose domain is empty for all dims (``t <= s, s -
    t < 0``) or whose size is not one closed form (see :mod:`symflops.core.domain`).
    A diagonal (``t < s + 1, t > s - 1``, ``t <= s, t >= s``) is counted."""
    conditions = [f for f in factors if f.is_comparison]
    if not conditions:
        return
    letters = {i for f in conditions for i in f.indices}
    try:
        size = domain_size({x: scope.extents[x] for x in letters},
                           [comparison(f) for f in conditions])
    except Uncountable as exc:
        raise SymflopsError(f"the where-clause cannot be counted exactly: {exc}",
                            scope.at(where[0].column),
                            "state the window so that its size does not depend on how two dims "
                            "compare (e.g. 't <= s, s - t < W'), or split the op") from None
    if size == 0:
        named = tuple(dict.fromkeys(i for c in where for i in (c.left, c.right)))
        what = {2: "pair", 3: "triple"}.get(len(named), "tuple")
        raise SymflopsError(f"the where-clause's conditions leave no {what} "
                            f"({', '.join(named)}) for any dims", scope.at(where[0].column),
                            "check the directions of the comparisons")
