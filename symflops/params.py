"""Parameter counts by the work each parameter does.

* ``dense``: it is an operand of a product that sums over an index together
  with another tensor (a weight matrix; an unembedding, tied or not).  These
  are the N of the "6N FLOPs per token" rule.
* ``lookup``: it is only ever read through a lookup (an embedding table that
  is not tied): a gather does no multiply-adds.
* ``elementwise``: everything else (biases, norm gains, a learned position
  table that is added): no multiply-adds per token beyond one or two.

``active`` counts each dense parameter as many times as a token uses it in
the forward pass (FLOPs of the products it takes part in, over 2 x tokens x its
elements): a mixture of experts whose tokens reach k of E experts has active
expert parameters k/E of its total (times the capacity factor when experts
pad to capacity).  Without a declared token count, active = total.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .cost import einsum_flops
from .ir import Contraction, Layer

CLASSES = ("dense", "lookup", "elementwise")


@dataclass(frozen=True)
class ParamCounts:
    total: sympy.Expr
    trainable: sympy.Expr
    by_class: tuple[tuple[str, sympy.Expr], ...]   # (class, elements, every copy)
    classes: tuple[tuple[str, str], ...]           # (tensor, class)
    active: sympy.Expr
    active_dense: sympy.Expr   # the dense parameters a token uses: the N of 6N

    def of(self, kind: str) -> sympy.Expr:
        return dict(self.by_class)[kind]


def param_class(layer: Layer, name: str) -> str:
    looked_up = False
    for op in layer.ops:
        if not isinstance(op, Contraction):
            continue
        for term in op.terms:
            names = [f.tensor for f in term.operands if f.reads_tensor and not f.is_select]
            if name not in names:
                continue
            if term.contracted and len(names) >= 2:
                return "dense"
            if any(f.is_select for f in term.operands) and len(names) == 1:
                looked_up = True
    return "lookup" if looked_up else "elementwise"


def param_counts(layer: Layer, trainable: sympy.Expr, unit: str = "FLOPs") -> ParamCounts:
    classes = tuple((t.name, param_class(layer, t.name)) for t in layer.params)
    tensors = layer.tensor_map
    by = {k: sympy.Integer(0) for k in CLASSES}
    for name, kind in classes:
        by[kind] += tensors[name].elements * layer.copies(name)
    total = sympy.expand(sum(by.values(), sympy.Integer(0)))
    active, active_dense = total, by["dense"]
    if layer.tokens is not None:
        active = active_dense = sympy.Integer(0)
        for name, kind in classes:
            t = tensors[name]
            if kind != "dense":
                active += t.elements * layer.copies(name)
                continue
            work = sympy.Integer(0)
            for op in layer.ops:
                if isinstance(op, Contraction):
                    for term in op.terms:
                        if term.contracted and any(f.tensor == name for f in term.operands):
                            work += einsum_flops(term, op.dims(), "FLOPs")
            uses = sympy.cancel(work / (2 * layer.tokens * t.elements))
            active += t.elements * uses * layer.copies(name)
            active_dense += t.elements * uses * layer.copies(name)
    return ParamCounts(total, trainable, tuple((k, sympy.expand(v)) for k, v in by.items()),
                       classes, sympy.expand(active), sympy.expand(active_dense))
