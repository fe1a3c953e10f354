"""The sheet's account of each triangular solve (:mod:`symflops.ops.solve`): how
its back substitution follows from the einsum rules, and its count.

Every formula comes from the engine's records: the unrolled statement and the
einsum machinery's rule for the earlier rows (with its derivation steps), the
rules the layer runs (:class:`~symflops.ops.solve.SolveRule`) and their costs.
A solve is recognised by its rules (those with a ``solve``), as the evaluators
and the cost model recognise them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import sympy

from ..core.ir import Factor
from ..core.records import Derivation, IndexTerm, grad_name
from ..count.cost import Costs
from ..ops.einsum.rules import contraction_rules
from ..ops.recurrence import total_name
from .derivations import derivation_lines
from .notation import Math


def solve_items(derivation: Derivation, costs: Costs, m: Math,
                poly: Callable[[sympy.Expr], str],
                fold: Callable[[list[str]], list[str]] = lambda lines: lines
                ) -> list[dict[str, Any]]:
    """One item per triangular solve whose output needs a gradient: its unrolled
    form, the derivation of the earlier rows' rule, the back substitution it
    gives, the rules with it, and the counts."""
    items = []
    for k, op in enumerate(derivation.layer.ops):
        mine = [(r, c) for r, c in zip(derivation.rules, costs.backward)
                if r.op == k and getattr(r, "solve", None) is not None]
        if not mine:
            continue
        unrolled = op.unrolled()
        g = Factor(total_name(op.output), op.out.indices)
        g_col = Factor(g.tensor, op.earlier.indices)
        sign = "-" if op.sign < 0 else "+"
        (step,) = contraction_rules(unrolled, k, op.earlier.tensor)
        items.append({
            "op": op.latex(m),
            "earlier": f"{m.ix(op.earlier)} = {m.ix(Factor(op.output, op.earlier.indices))}",
            "bound": f"{op.col} < {op.row}",
            "row": op.row,
            "unrolled": f"{m.ix(op.out)} = " + "".join(
                (" - " if t.coefficient.could_extract_minus_sign() else " + " if k else "")
                + m.einsum_rhs(dataclasses.replace(t, coefficient=abs(t.coefficient)))
                for k, t in enumerate(unrolled.terms)),
            "lines": fold(derivation_lines([step], m)),
            "back": (f"{m.ix(g_col)} = {m.ix(Factor(grad_name(op.output), op.earlier.indices))} "
                     f"{sign} \\sum_{{{op.row} > {op.col}}} {m.ix(op.matrix)}\\, {m.ix(g)}"),
            "dstate": m.t(grad_name(op.output)),
            "rules": [f"{m.ix(r.terms[0].output)} &= "
                      + m.terms([IndexTerm(t.coefficient, t.operands, (), t.summed)
                                 for t in r.terms]) for r, _ in mine],
            "forward": poly(op.cost(costs.unit).flops),
            "backward": [{"grad": m.t(r.grad), "flops": poly(c.flops),
                          "counted": r.counted} for r, c in mine],
        })
    return items
