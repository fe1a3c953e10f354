"""The sheet's account of each loop over chunks (:mod:`symflops.ops.loop`):
where the totals its rules read come from, the reverse loop.

Every formula comes from the engine's records: the reverse loop's products
(:func:`~symflops.ops.loop_rules.contributions`, the einsum machinery's rules
of each statement over the totals, which ``verify`` runs against finite
differences), the rules the layer runs and the reverse loop's cost
(:func:`~symflops.ops.loop_rules.reverse_cost`).  A product that reads the
state one step back contributes to the state's total one step earlier; it is
printed at the step after (``c+1``), as the reverse loop adds it.
"""

from __future__ import annotations

from typing import Any, Callable

import sympy

from ..core.ir import Einsum, Factor
from ..core.records import Derivation, IndexTerm, grad_name
from ..count.cost import Costs
from ..ops.loop_rules import contributions, reverse_cost
from ..ops.recurrence import total_name
from .backward import relabel
from .notation import Math
from .recurrences import at_letter


def _line(m: Math, lhs: Factor, terms: list[Einsum], time: str,
          later: frozenset[int] = frozenset()) -> str | None:
    """``lhs &= a + b - c``: each term in ``lhs``'s letters (:func:`relabel`),
    those numbered in ``later`` read one step on (each factor's ``c`` as
    ``c+1``); None when a term's output letters do not map onto ``lhs``'s."""
    text = ""
    for k, t in enumerate(terms):
        t = relabel(t, lhs.indices)
        if t.output.indices != lhs.indices:
            return None
        rhs = m.terms([IndexTerm(t.coefficient, t.operands, (), t.summed)])
        if k in later:
            for f in t.operands:
                if time in f.indices and not f.is_indicator:
                    rhs = rhs.replace(m.ix(f), at_letter(m, f, time, time + "+1"))
        if k and rhs.startswith("-"):
            text += " - " + rhs[1:].lstrip()
        else:
            text += (" + " if k else "") + rhs
    return f"{m.ix(lhs)} &= {text}"


def loop_items(derivation: Derivation, costs: Costs, m: Math,
               poly: Callable[[sympy.Expr], str]) -> list[dict[str, Any]]:
    """One item per loop whose inputs need a gradient: its statements, the
    previous state, each total as the sum of the products that give it (the
    state's one step later), where the reverse loop starts, and its count."""
    layer = derivation.layer
    items = []
    for k, op in enumerate(layer.ops):
        if op.kind != "loop" or not any(r.op == k for r in derivation.rules):
            continue
        time, state = op.time, op.state
        prev = next(s.out for s in op.statements if s.output == state)
        by_target: dict[str, list[Einsum]] = {}
        for c in contributions(op):
            by_target.setdefault(c.target, []).append(c.term)
        totals = [_line(m, Factor(total_name(f.tensor), f.indices), by_target.get(f.tensor, []),
                        time) for f in op.outs if f.tensor not in (op.output, state)]
        # the state's total: the rules reading it at its step, then those
        # reading it as the previous state, one step on
        own, after = by_target.get(state, []), by_target.get(op.previous_name, [])
        totals.append(_line(m, Factor(total_name(state), prev.indices), own + after, time,
                            frozenset(range(len(own), len(own) + len(after)))))
        if None in totals:   # a product in other letters: no section rather than a wrong one
            continue
        cost = reverse_cost(op, costs.unit)
        first = next(r for r in derivation.rules if r.op == k)
        items.append({
            "op": op.latex(m),
            "output": m.t(op.output),
            "dout": m.t(grad_name(op.output)),
            "time": time,
            "steps": m.poly(op.steps),
            "previous": f"{m.ix(Factor(op.previous_name, prev.indices))} = "
                        f"{at_letter(m, prev, time, time + '-1')}",
            "state": m.t(state),
            "names": m.ts([total_name(f.tensor) for f in op.outs if f.tensor != op.output]),
            "totals": totals,
            "last": f"{time} = {m.poly(op.steps - 1)}",
            "flops": poly(cost.flops),
            "elementwise": poly(cost.elementwise),
            "first": m.t(first.grad),
        })
    return items
