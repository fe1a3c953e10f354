"""Backward rules of a layer: each op's, chained in reverse op order.

Each op derives its own rules (:meth:`symflops.ops.base.Op.rules`: an einsum
by index calculus, :mod:`symflops.ops.einsum.rules`; softmax, the norms and
the loss by SymPy, :mod:`symflops.ops.reductions`); this module decides which
tensors need a gradient and puts the rules in the order backprop computes
them.  A tensor read by several ops gets one rule per op, to be summed.
"""

from __future__ import annotations

from ..core.ir import Layer
from ..core.records import Derivation


def needs_gradient(layer: Layer, repeats: bool = True) -> frozenset[str]:
    """Tensors whose gradient is computed: those that want one, and every
    activation through which a gradient must flow to reach one.

    With ``repeats``, the data input of a repeated block with trained
    parameters needs one too: every copy but the first takes the previous
    copy's output, through which the earlier copies' gradients flow (see
    :func:`repeat_only_gradients`)."""
    need = {t.name for t in layer.tensors if t.role != "activation" and t.requires_grad}
    forced = set()
    if repeats:
        tensors = layer.tensor_map
        for b in layer.blocks:
            if b.repeat != 1 and any(tensors[n].is_param and tensors[n].requires_grad
                                     for n in b.tensors):
                forced.update(n for n in b.inputs if tensors[n].role != "index")
    # A forced input needs its gradient like any other, so the ops reading it
    # pass one back (through a norm as much as through a residual).
    need |= {n for n in forced if layer.tensor(n).role == "input"}
    for op in layer.ops:  # topological order: operands are decided first
        if op.output in forced or any(name in need for name in op.inputs):
            need.add(op.output)
    return frozenset(need)


def repeat_only_gradients(layer: Layer) -> frozenset[str]:
    """Block inputs whose gradient only the copies after the first need (the
    first copy's input has nothing upstream that wants a gradient)."""
    return needs_gradient(layer) - needs_gradient(layer, repeats=False)


def derive(layer: Layer) -> Derivation:
    """All backward rules of ``layer``, in the order backprop computes them:
    ops in reverse; within an op, weight gradients before the gradient that
    flows further back."""
    need = needs_gradient(layer)
    tensors = layer.tensor_map
    rules = []
    for number in reversed(range(len(layer.ops))):
        op = layer.ops[number]
        if op.output not in need:
            continue
        targets = sorted((n for n in op.inputs if n in need),
                         key=lambda n: not tensors[n].is_param)
        rules.extend(op.rules(number, tuple(targets)))
    return Derivation(layer, tuple(rules), need)
