"""The sheet's account of each linear recurrence (:mod:`symflops.ops.recurrence`):
how its backward pass follows from the einsum rules, and its two counting
conventions, one line each.

Every formula comes from the engine's records: the unrolled statement and the
einsum machinery's rule for the previous state (with its derivation steps),
the rules the layer runs (:class:`~symflops.ops.recurrence.ScanRule`), their
costs, and the parallel-scan count (:func:`~symflops.ops.recurrence.parallel_scan`).
A recurrence is recognised by its rules (those with a ``scan``), as the
evaluators and the cost model recognise them.
"""

from __future__ import annotations

from typing import Any, Callable

import sympy

from ..core.ir import Factor
from ..core.records import Derivation, IndexTerm, grad_name
from ..count.cost import Costs
from ..ops.recurrence import parallel_scan, total_name
from .derivations import derivation_lines
from .notation import Math
from ..core import factoring


def at_letter(m: Math, f: Factor, time: str, at: str) -> str:
    """``H_{b,s-1,d}``: a factor with ``at`` in place of its time letter, in the
    sheet's style (``(G_{\\text{H}})_{b,s+1,d}`` for a name with its own subscript)."""
    letters = ",".join(at if i == time else i for i in f.indices)
    name = m.t(f.tensor)
    return f"{'(' + name + ')' if '_' in name else name}_{{{letters}}}"


class _Log2(sympy.Function):
    """``log2(S)`` as the sheet prints it, ``\\log_2 S``."""

    def _latex(self, printer: Any) -> str:
        return r"\log_2 " + printer._print(self.args[0])


def _with_log2(expr: sympy.Expr, size: sympy.Expr) -> str:
    """A parallel-scan count, ``log(S)/log(2)`` printed ``\\log_2 S``, factored."""
    return sympy.latex(factoring.factor(sympy.expand(
        expr.subs(sympy.log(size), sympy.log(2) * _Log2(size)))))


def recurrence_items(derivation: Derivation, costs: Costs, m: Math,
                     poly: Callable[[sympy.Expr], str],
                     fold: Callable[[list[str]], list[str]] = lambda lines: lines
                     ) -> list[dict[str, Any]]:
    """One item per recurrence whose output needs a gradient: its unrolled
    form, the derivation of the previous state's rule (its lines folded to
    the page by ``fold``, as the sheet's other derivations), the reverse-time
    recurrence it gives, the rules with it, and the counts."""
    layer = derivation.layer
    unit = costs.unit
    items = []
    for k, op in enumerate(layer.ops):
        mine = [(r, c) for r, c in zip(derivation.rules, costs.backward)
                if r.op == k and getattr(r, "scan", None) is not None]
        if not mine:
            continue
        time, out, gate = op.time, op.out, op.gate
        prev = op.previous
        unrolled = op.unrolled()
        g = Factor(total_name(op.output), out.indices)
        rule_lines = [f"{m.ix(r.terms[0].output)} &= "
                      + m.terms([IndexTerm(t.coefficient, t.operands, (), t.summed)
                                 for t in r.terms]) for r, _ in mine]
        scan = parallel_scan(op, unit)
        items.append({
            "op": op.latex(m),
            "previous": f"{m.ix(prev)} = {at_letter(m, out, time, time + '-1')}",
            "zero": at_letter(m, out, time, "-1") + " = 0",
            "unrolled": f"{m.ix(out)} = " + " + ".join(m.einsum_rhs(t) for t in unrolled.terms),
            "lines": fold(derivation_lines([op.previous_rule(k)], m)),
            "total": m.ix(g),
            "scan": (f"{m.ix(g)} = {m.ix(Factor(grad_name(op.output), out.indices))} + "
                     f"{at_letter(m, gate, time, time + '+1')}\\, {at_letter(m, g, time, time + '+1')}"),
            "end": at_letter(m, g, time, m.poly(op.dims()[time])) + " = 0",
            "dstate": m.t(grad_name(op.output)),
            "rules": rule_lines,
            "forward": poly(op.cost(unit).elementwise),
            "backward": [{"grad": m.t(r.grad), "elementwise": poly(c.elementwise),
                          "scan": r.scan.counted} for r, c in mine],
            "combines": _with_log2(scan.combines, op.dims()[time]),
            "parallel": _with_log2(scan.flops, op.dims()[time]),
            "depth": _with_log2(scan.depth, op.dims()[time]),
            "time": m.poly(op.dims()[time]),
            "steps": m.poly(op.dims()[time] - 1),
        })
    return items
