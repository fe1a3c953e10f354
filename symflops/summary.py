"""The quantities of a derived layer as one nested structure.

:func:`summary` gathers what ``symflops derive`` reports into plain dicts and
lists whose leaves are SymPy expressions or text.  The same structure is
printed symbolically (``--json``: formulas as strings SymPy parses) and
numerically (:mod:`symflops.evaluate`), so the two outputs cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import sympy

from .cost import Costs
from .derive import Derivation

_ORDER = ("forward products are contracted pairwise in the order written, backward rules in "
          "the cheapest order at equal dim sizes; 'flops' counts contractions only, "
          "'flops_elementwise' everything else")

CONVENTIONS = {
    "FLOPs": "one multiply-add = 2 FLOPs; " + _ORDER,
    "MACs": "one multiply-accumulate = 1 MAC; " + _ORDER,
}


def summary(derivation: Derivation, costs: Costs) -> dict[str, Any]:
    layer = derivation.layer
    p = costs.precision
    per_param = {k: costs.per_param(v) for k, v in
                 (("forward", costs.flops_forward), ("backward", costs.flops_backward),
                  ("total", costs.flops_total))}
    return {
        "name": layer.name,
        "title": layer.title,
        "unit": costs.unit,
        "conventions": CONVENTIONS[costs.unit],
        "dims": {d.name: d.description for d in layer.dims},
        "tensors": {
            t.name: {"shape": list(t.shape), "role": t.role,
                     "requires_grad": t.name in derivation.needs_grad, "elements": t.elements}
            for t in layer.tensors
        },
        "params": costs.params,
        "trainable_params": costs.trainable,
        "flops": {"forward": costs.flops_forward, "backward": costs.flops_backward,
                  "total": costs.flops_total},
        "flops_per_param": per_param if all(v is not None for v in per_param.values()) else None,
        "flops_elementwise": {"forward": costs.elementwise_forward,
                              "backward": costs.elementwise_backward,
                              "total": sympy.expand(costs.elementwise_forward
                                                    + costs.elementwise_backward)},
        "forward": [
            {"op": op.statement(), "output": op.output, "flops": c.flops,
             "flops_elementwise": c.elementwise,
             "matrix_form": _matrix(op.terms[0]) if len(op.terms) == 1 else None}
            for op, c in zip(layer.ops, costs.forward)
        ],
        "backward": [
            {"grad": r.grad, "wrt": r.wrt, "rule": r.statement, "flops": c.flops,
             "flops_elementwise": c.elementwise,
             "matrix_form": str(r.matrix_form) if r.matrix_form else None,
             "reads": list(r.reads), "from_op": layer.ops[r.op].statement()}
            for r, c in zip(derivation.rules, costs.backward)
        ],
        "saved": [s.name for s in costs.saved],
        "saved_detail": [{"tensor": s.name, "elements": s.elements, "needed_by": list(s.needed_by)}
                         for s in costs.saved],
        "memory": costs.memory(),
        "precision": {"name": p.name, "description": p.description, "params": p.params,
                      "grads": p.grads, "optimizer_states": p.optimizer_states,
                      "optimizer": p.optimizer, "master": p.master,
                      "activations": p.activations},
    }


def _matrix(e: Any) -> str | None:
    from .derive import matrix_form

    m = matrix_form(e)
    return str(m) if m else None


def to_json_ready(value: Any) -> Any:
    """Formulas become strings that ``sympy.parse_expr`` reads back (with the
    dims as symbols); everything else is left as it is."""
    if isinstance(value, dict):
        return {k: to_json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_ready(v) for v in value]
    if isinstance(value, sympy.Basic):
        return sympy.sstr(value)
    return value
