"""The quantities of a derived layer as one nested structure.

:func:`summary` gathers what ``symflops derive`` reports into plain dicts and
lists whose leaves are SymPy expressions or text.  The same structure is
printed symbolically (``--json``: formulas as strings SymPy parses) and
numerically (:mod:`symflops.count.evaluate`), so the two outputs cannot drift apart.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import sympy

from .cost import Costs, saved_blocks
from ..core.records import Derivation
from .inference import inference
from ..core.ir import RECOMPUTE_POLICIES, substitute
from ..core.polynomial import quotient
from .params import param_counts
from .recompute import recompute

_ORDER = ("products of several tensors are contracted pairwise: forward terms in the order "
          "written (or the cheapest, with forward_order: cheapest), backward rules in the cheapest "
          "order (where the cheapest orders cross: the one cheapest at the declared sizes, else the "
          "least of their costs); 'flops' counts the pairwise products that multiply two tensors, "
          "sum over a letter and keep a letter only one of them has (matrix products), "
          "'flops_elementwise' everything else")

CONVENTIONS = {
    "FLOPs": "one multiply-add = 2 FLOPs; " + _ORDER,
    "MACs": "one multiply-accumulate = 1 MAC; " + _ORDER,
}


def summary(derivation: Derivation, costs: Costs) -> dict[str, Any]:
    """Everything ``symflops derive`` reports, with defined dims substituted."""
    subs = derivation.layer.substitutions
    data = _summary(derivation, costs)
    return _substitute(data, subs) if subs else data


def _substitute(value: Any, subs: Mapping[sympy.Symbol, sympy.Expr]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, subs) for v in value]
    if isinstance(value, sympy.Basic):
        return substitute(value, subs)
    return value


def _per(expr: sympy.Expr, tokens: sympy.Expr | None) -> sympy.Expr | None:
    return None if tokens is None else sympy.expand(quotient(expr, tokens))


@functools.lru_cache(maxsize=8)  # a sheet asks once per format
def whole_model(derivation: Derivation, costs: Costs) -> dict[str, Any]:
    """The whole-model keys: parameter classes, per-token counts, the 6N rule,
    recomputation policies, the key/value cache and per-block lines."""
    layer = derivation.layer
    p = costs.precision
    tokens = layer.tokens
    counts = param_counts(layer, costs.trainable)
    dense = counts.active_dense
    policies = {}
    for name in RECOMPUTE_POLICIES:
        if name == "selective" and not layer.selective:
            continue
        r = recompute(derivation, costs, name)
        policies[name] = {
            "ops": list(r.ops),
            "flops_recomputed": r.flops,
            "flops_elementwise_recomputed": r.elementwise,
            "flops_executed": sympy.expand(costs.flops_total + r.flops),
            "kept": [s.name for s in r.kept],
            "activations": r.activations,
            "activation_bytes": r.activation_bytes(costs),
            "working": r.working,
        }
    chosen = policies[layer.recompute]
    per_token = None
    if tokens is not None:
        per_token = {
            "flops": {k: _per(v, tokens) for k, v in (("forward", costs.flops_forward),
                                                      ("backward", costs.flops_backward),
                                                      ("total", costs.flops_total))},
            "flops_executed": _per(chosen["flops_executed"], tokens),
            "flops_elementwise": _per(costs.elementwise_forward + costs.elementwise_backward, tokens),
            "six_n": sympy.expand(6 * dense),
            "beyond_six_n": sympy.expand(_per(costs.flops_total, tokens) - 6 * dense),
            "inference_forward": _per(costs.flops_forward, tokens),
        }
    inf = inference(derivation, costs, counts.read)
    return {
        "tokens": tokens,
        "sequences": layer.sequences,
        "definitions": {n: e for n, e in layer.definitions},
        "parameters": {"total": counts.total, "trainable": counts.trainable,
                       "active": counts.active, "active_dense": counts.active_dense,
                       "read_per_token": counts.read,
                       **dict(counts.by_class),
                       "classes": dict(counts.classes)},
        "per_token": per_token,
        "flops_executed": chosen["flops_executed"],
        "recompute": {"policy": layer.recompute, "selective": list(layer.selective),
                      "policies": policies},
        "inference": None if inf is None else {
            "cache": [n for n, _ in inf.cache],
            "cache_elements": inf.cache_elements,
            "cache_bytes": inf.cache_bytes,
            "cache_elements_per_sequence": inf.cache_elements_per_sequence,
            "cache_bytes_per_sequence": inf.cache_bytes_per_sequence,
            "weights_bytes": inf.weights_bytes,
            "weights_bytes_read": inf.weights_bytes_read,
            "bytes_per_decoded_token": inf.bytes_per_decoded_token,
        },
        "blocks": [_block(derivation, costs, b) for b in layer.blocks],
    }


def _block(derivation: Derivation, costs: Costs, block: Any) -> dict[str, Any]:
    """One copy of a block: its parameters, FLOPs and the activations it keeps."""
    layer = derivation.layer
    p = costs.precision
    outer = sympy.Mul(*(b.repeat for b in layer.blocks if set(block.tensors) <= set(b.tensors)))
    ops = set(block.ops)
    fwd = [(c, n) for op, c, n in zip(layer.ops, costs.forward, costs.forward_copies)
           if op.output in ops]
    bwd = [(c, n) for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies)
           if layer.ops[r.op].output in ops]
    one = (lambda items, kind: sympy.expand(sum((getattr(c, kind) * n for c, n in items),
                                                sympy.Integer(0)) / outer))
    saved = [s for s in costs.saved if block in saved_blocks(layer, derivation, s.name)]
    params = [t for t in layer.params if t.name in block.tensors]
    return {
        "name": block.name, "title": block.title, "source": block.source, "repeat": block.repeat,
        "copies": outer,
        "params": sympy.expand(sum((t.elements * layer.copies(t.name) for t in params),
                                   sympy.Integer(0)) / outer),
        "flops": {"forward": one(fwd, "flops"), "backward": one(bwd, "flops"),
                  "total": sympy.expand(one(fwd, "flops") + one(bwd, "flops"))},
        "flops_elementwise": {"forward": one(fwd, "elementwise"),
                              "backward": one(bwd, "elementwise")},
        "saved": [{"tensor": s.name, "elements": s.elements, "mask": s.mask,
                   "bytes": s.elements * (p.masks if s.mask else p.activations),
                   "needed_by": list(s.needed_by)} for s in saved],
        "activations": sympy.expand(sum((s.elements for s in saved), sympy.Integer(0))),
        "activation_bytes": sympy.expand(sum((s.elements * (p.masks if s.mask else p.activations)
                                              for s in saved), sympy.Integer(0))),
    }


def _summary(derivation: Derivation, costs: Costs) -> dict[str, Any]:
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
        "forward_order": layer.forward_order,
        "sizes": dict(layer.sizes) or None,
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
            {"op": op.statement(), "output": op.output, "copies": n, "flops": c.flops,
             "flops_elementwise": c.elementwise,
             "matrix_form": _matrix(op.terms[0]) if len(op.terms) == 1 else None,
             **_orders(c, layer)}
            for op, c, n in zip(layer.ops, costs.forward, costs.forward_copies)
        ],
        "backward": [
            {"grad": r.grad, "wrt": r.wrt, "rule": r.statement, "copies": n, "flops": c.flops,
             "flops_elementwise": c.elementwise,
             "matrix_form": str(r.matrix_form) if r.matrix_form else None,
             "reads": list(r.reads), "from_op": layer.ops[r.op].statement(), **_orders(c, layer)}
            for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies)
        ],
        "saved": [s.name for s in costs.saved],
        "saved_detail": [{"tensor": s.name, "elements": s.elements, "copies": s.copies,
                          "needed_by": list(s.needed_by)}
                         for s in costs.saved],
        "memory": costs.memory(),
        "precision": {"name": p.name, "description": p.description, "params": p.params,
                      "grads": p.grads, "optimizer_states": p.optimizer_states,
                      "optimizer": p.optimizer, "master": p.master,
                      "activations": p.activations},
        **whole_model(derivation, costs),
    }


#: Beyond this many candidate orders, the condition under which each is the
#: cheapest is not written out (``cheaper_when`` is null).
MAX_CONDITIONS = 4


def _orders(c: Any, layer: Any) -> dict[str, Any]:
    """``{"orders": [...]}`` for an op or rule with a term whose cheapest
    orders cross, else nothing: each candidate's order and cost, when it is
    the cheapest, and which one is counted."""
    if not c.orders:
        return {}
    dims = [d.name for d in layer.free_dims]
    out = []
    for o in c.orders:
        conditions = (o.cheaper_when(dims) if len(o.candidates) <= MAX_CONDITIONS
                      else (None,) * len(o.candidates))
        out.append({
            "term": o.term,
            "counted": (o.texts[o.chosen] if o.chosen is not None else "the least of the candidates"),
            "sizes": dict(o.sizes) if o.chosen is not None else None,
            "candidates": [{"order": text, "flops": cand.flops,
                            "flops_elementwise": cand.elementwise,
                            "cheaper_when": None if cond is None else sympy.sstr(cond)}
                           for text, cand, cond in zip(o.texts, o.candidates, conditions)],
        })
    return {"orders": out}


def _matrix(e: Any) -> str | None:
    from ..core.records import matrix_form

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
