"""Activation recomputation: which tensors a policy keeps, and what it costs.

A policy names a set R of forward ops to run again during the backward pass:

* ``none``: R is empty; every saved tensor is kept (model = executed FLOPs);
* ``full``: R is every op inside an included block (every op, when the layer
  includes none), so each copy of a block keeps only its input;
* ``selective``: R is the ops the declaration lists under
  ``recompute: {selective: [...]}`` (named by the tensors they write).

Under R, a saved tensor that an op of R produces (with the tensors produced
alongside it: a norm's ``rstd``, a loss's probabilities, a dropout's mask,
which is redrawn from the saved random-number state) is not kept; the
operands R needs from outside (not parameters) are kept instead.  The
executed FLOPs add one more forward run of every op in R.  While one block's
backward runs, the tensors its ops recompute are alive again: that one copy
is reported apart as the working set.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .cost import Costs, SavedTensor, saved_blocks
from ..core.records import Derivation
from ..core.ir import RECOMPUTE_POLICIES


@dataclass(frozen=True)
class Recompute:
    policy: str
    ops: tuple[str, ...]              # outputs of the recomputed ops
    flops: sympy.Expr                 # extra contraction FLOPs (every copy)
    elementwise: sympy.Expr           # extra elementwise FLOPs (every copy)
    kept: tuple[SavedTensor, ...]     # what stays in memory between forward and backward
    working: sympy.Expr               # elements recomputed for one copy of a block at a time

    @property
    def activations(self) -> sympy.Expr:
        return sympy.expand(sum((s.total for s in self.kept), sympy.Integer(0)))

    def activation_bytes(self, costs: Costs) -> sympy.Expr:
        p = costs.precision
        return sympy.expand(sum((s.total * (p.masks if s.mask else p.activations) for s in self.kept),
                                sympy.Integer(0)))


def recomputed_ops(derivation: Derivation, policy: str) -> tuple[str, ...]:
    layer = derivation.layer
    if policy not in RECOMPUTE_POLICIES:
        raise ValueError(f"unknown recompute policy {policy!r}")
    if policy == "none":
        return ()
    if policy == "selective":
        return layer.selective
    inside = {n for b in layer.blocks for n in b.ops}
    return tuple(op.output for op in layer.ops if not layer.blocks or op.output in inside)


def recompute(derivation: Derivation, costs: Costs, policy: str) -> Recompute:
    """The effect of ``policy`` on ``derivation``'s FLOPs and kept activations."""
    layer = derivation.layer
    tensors = layer.tensor_map
    names = recomputed_ops(derivation, policy)
    chosen = [k for k, op in enumerate(layer.ops) if op.output in names]
    regenerated: set[str] = set()
    for k in chosen:
        op = layer.ops[k]
        regenerated.add(op.output)
        regenerated.update(f.tensor for f in getattr(op, "aux", ()))
        regenerated.update(n for n in op.inputs if tensors[n].role == "mask")
    needed = []
    for k in chosen:
        for n in layer.ops[k].inputs:
            t = tensors[n]
            if (n not in regenerated and not (t.is_param or t.is_buffer)  # buffers stay anyway
                    and t.role != "mask" and n not in needed):
                needed.append(n)
    flops = sympy.expand(sum((costs.forward[k].flops * costs.forward_copies[k] for k in chosen),
                             sympy.Integer(0)))
    elementwise = sympy.expand(sum((costs.forward[k].elementwise * costs.forward_copies[k]
                                    for k in chosen), sympy.Integer(0)))
    kept = [s for s in costs.saved if s.name not in regenerated]
    have = {s.name for s in kept}
    for n in needed:
        if n not in have:
            # as for any saved tensor: one copy per copy of the deepest block that keeps it
            owners = [layer.blocks_of(layer.ops[k].output) for k in chosen
                      if n in layer.ops[k].inputs] + [saved_blocks(layer, derivation, n)]
            copies = sympy.Mul(*(b.repeat for b in max(owners, key=len)))
            kept.append(SavedTensor(n, tensors[n].elements, ("recomputation",),
                                    tensors[n].role == "mask", copies))
    order = {t.name: k for k, t in enumerate(layer.tensors)}
    kept.sort(key=lambda s: order[s.name])
    working = sympy.expand(sum((s.elements for s in costs.saved if s.name in regenerated),
                               sympy.Integer(0)))
    return Recompute(policy, names, flops, elementwise, tuple(kept), working)
