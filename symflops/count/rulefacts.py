"""Facts about each backward rule and each saved tensor that a sheet says
*why* with (the seed's intuitions, derived per op):

* :class:`ShapeFact`: a weight's gradient has the weight's shape; of the two
  tensors the rule multiplies (the input of the product and the incoming
  gradient, "the two tensors around the weight"), their product of that
  shape contracts their common letters: "dW_in has W_in's shape [D, F]; X is
  [B, D] and dH is [B, F]: the product with that shape sums over b";
* :class:`SavedFact`: a forward tensor some rule reads is kept from the
  forward pass until the backward pass reaches it; recomputing it instead
  costs the forward op that produces it (its matmul-type and elementwise
  work, one copy), or, for an input of the layer, it is not produced here.

Each record is built from the derivation and the costs only; a rule the
facts do not fit (several terms, an operand read through a lookup or a
shift, more than two tensors) gets no shape fact: no sentence is better than
a wrong one.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .cost import Costs
from ..core.records import Derivation


@dataclass(frozen=True)
class ShapeFact:
    """Rule ``rule`` computes ``grad`` of shape ``shape`` (that of ``wrt``)
    as the product of ``operands`` (name and shape each), contracting the
    letters ``summed`` (extents ``extents``)."""

    rule: int
    grad: str
    wrt: str
    shape: tuple[sympy.Expr, ...]
    operands: tuple[tuple[str, tuple[sympy.Expr, ...]], ...]
    summed: tuple[str, ...]
    extents: tuple[sympy.Expr, ...]


@dataclass(frozen=True)
class SavedFact:
    """Forward tensor ``tensor`` is read by the rules computing ``readers``;
    ``producer`` is the position of the op that writes it (None for a tensor
    the layer is given: an input, an index), whose one copy costs
    ``flops`` matmul-type and ``elementwise`` FLOPs to run again."""

    tensor: str
    readers: tuple[str, ...]
    producer: int | None
    flops: sympy.Expr
    elementwise: sympy.Expr


def shape_facts(derivation: Derivation) -> tuple[ShapeFact, ...]:
    """A shape fact for each rule that is one product of two tensors (for a
    weight: the input of its product and the incoming gradient; for an
    input: the incoming gradient and the weight)."""
    layer = derivation.layer
    tensors = layer.tensor_map
    out = []
    for i, r in enumerate(derivation.rules):
        t = tensors[r.wrt]
        if len(r.terms) != 1:
            continue
        e = r.terms[0]
        if any(f.is_indicator or f.fn for f in e.operands) or len(e.operands) != 2:
            continue
        extents = r.dims()
        if len(set(e.output.indices)) != len(e.output.indices):
            continue
        summed = tuple(x for x in dict.fromkeys(i for f in e.operands for i in f.indices)
                       if x not in e.output.indices)
        operands = tuple((f.tensor, tuple(extents[x] for x in f.indices)) for f in e.operands)
        out.append(ShapeFact(i, r.grad, r.wrt, tuple(t.shape), operands, summed,
                             tuple(extents[x] for x in summed)))
    return tuple(out)


def saved_facts(derivation: Derivation, costs: Costs) -> tuple[SavedFact, ...]:
    """For each saved tensor, who reads it and what recomputing it costs."""
    layer = derivation.layer
    producer = {op.output: k for k, op in enumerate(layer.ops)}
    for k, op in enumerate(layer.ops):  # a norm's rstd is written by the norm
        for f in getattr(op, "aux", ()):
            producer.setdefault(f.tensor, k)
    out = []
    for s in costs.saved:
        k = producer.get(s.name)
        out.append(SavedFact(
            s.name, tuple(s.needed_by), k,
            costs.forward[k].flops if k is not None else sympy.Integer(0),
            costs.forward[k].elementwise if k is not None else sympy.Integer(0)))
    return tuple(out)
