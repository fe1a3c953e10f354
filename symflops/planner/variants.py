"""Variants of a shipped declaration, IR to IR, for a Hugging Face config.

A config can switch on what a shipped declaration leaves out (Llama's
``attention_bias``), name another activation (``hidden_act``), or drop out a
tensor the declaration keeps (GPT-2's ``embd_pdrop``).  Rather than one
declaration file per combination, the planner changes the loaded IR the way
the declaration's text would have:

* :func:`with_biases` adds a bias to the product of each named weight: a
  parameter over the weight's letters that the output keeps
  (``Q[b,s,g,r,e] = Xn[b,s,d] W_q[d,g,r,e]`` gains ``+ b_q[g,r,e]``);
* :func:`with_function` replaces a pointwise function by another
  (``silu`` by ``gelu``: a GeGLU MLP);
* :func:`with_dropout` drops out a tensor after the op that writes it, as
  ``X[..] = dropout(X_pre[..], p)`` would: a keep-mask ``mask_X`` (role
  ``mask``) and a factor ``1/(1 - p)``.

Each returns a new :class:`~symflops.core.ir.Layer` keeping the IR's invariants
(unique names, each op after its operands' producers, every block listing
its tensors and ops), so every count still comes out of the engine.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import sympy

from ..core.ir import Apply, Einsum, Factor, Layer, Tensor
from ..ops.einsum.node import Contraction


def _with_tensor(layer: Layer, tensor: Tensor, after: str, blocks_of: str) -> Layer:
    """``layer`` with ``tensor`` declared after ``after`` and listed in the
    blocks that hold the op writing (or the tensor named) ``blocks_of``."""
    if tensor.name in layer.tensor_map or "d" + tensor.name in layer.tensor_map:
        raise ValueError(f"the variant's tensor {tensor.name!r} exists already")
    at = [t.name for t in layer.tensors].index(after) + 1
    blocks = tuple(dataclasses.replace(b, tensors=(*b.tensors, tensor.name))
                   if blocks_of in b.tensors or blocks_of in b.ops else b for b in layer.blocks)
    return dataclasses.replace(layer, tensors=(*layer.tensors[:at], tensor, *layer.tensors[at:]),
                               blocks=blocks)


def _bias_name(weight: str) -> str:
    return "b" + weight[1:] if weight.startswith("W") else "b_" + weight


def with_biases(layer: Layer, weights: Iterable[str]) -> Layer:
    """``layer`` with a bias added to the product of each of ``weights`` (one
    op each, the op where the weight meets an activation in a matrix product)."""
    for weight in weights:
        found = [(k, term) for k, op in enumerate(layer.ops)
                 for term in op.terms if term.contracted
                 and any(f.tensor == weight for f in term.factors)]
        if len(found) != 1:
            raise ValueError(f"{weight!r} takes part in {len(found)} products, not one")
        k, term = found[0]
        op = layer.ops[k]
        factor = next(f for f in term.factors if f.tensor == weight)
        letters = tuple(x for x in factor.indices if x in op.out.indices)
        name = _bias_name(weight)
        extents = op.dims()
        bias = Tensor(name, tuple(extents[x] for x in letters), "param", True,
                      f"bias of the product with {weight}")
        grown = dataclasses.replace(op, terms=(*op.terms, Einsum(op.out, (Factor(name, letters),))))
        grown = dataclasses.replace(grown, text=grown.statement())
        layer = _with_tensor(layer, bias, weight, op.output)
        layer = dataclasses.replace(layer, ops=(*layer.ops[:k], grown, *layer.ops[k + 1:]))
    return layer


def with_function(layer: Layer, old: str, new: str) -> Layer:
    """``layer`` with every pointwise ``old`` of its forward ops replaced by ``new``."""
    ops = []
    before, after = Apply(old), Apply(new)
    for op in layer.ops:
        if any(f.fn == before for t in op.terms for f in t.operands):
            terms = tuple(dataclasses.replace(t, operands=tuple(
                dataclasses.replace(f, fn=after) if f.fn == before else f for f in t.operands))
                for t in op.terms)
            op = dataclasses.replace(op, terms=terms)
            op = dataclasses.replace(op, text=op.statement())
        ops.append(op)
    return dataclasses.replace(layer, ops=tuple(ops))


def with_dropout(layer: Layer, name: str, p: sympy.Rational) -> Layer:
    """``layer`` with the tensor ``name`` dropped out with probability ``p``
    after the op that writes it: that op writes ``name_pre`` instead, and
    ``name[..] = name_pre[..] mask_name[..] / (1 - p)`` follows it."""
    k = next(j for j, op in enumerate(layer.ops) if op.output == name)
    op, tensor = layer.ops[k], layer.tensor_map[name]
    pre, mask = f"{name}_pre", f"mask_{name}"
    writes = Factor(pre, op.out.indices)
    renamed = dataclasses.replace(op, terms=tuple(dataclasses.replace(t, output=writes)
                                                  for t in op.terms))
    renamed = dataclasses.replace(renamed, text=renamed.statement())
    letters = op.out.indices
    extents = op.dims()
    drop = Contraction(
        (Einsum(op.out, (writes, Factor(mask, letters)), 1 / (1 - sympy.Rational(p))),),
        tuple((x, extents[x]) for x in letters), span=op.span)
    drop = dataclasses.replace(drop, text=drop.statement())
    layer = _with_tensor(layer, dataclasses.replace(tensor, name=pre), name, name)
    layer = _with_tensor(layer, Tensor(mask, tensor.shape, "mask", False,
                                       f"dropout keep-mask of {name} (drop probability {p})"),
                         pre, name)
    blocks = tuple(dataclasses.replace(b, ops=tuple(x for o in b.ops for x in
                                                    ((pre, name) if o == name else (o,))))
                   for b in layer.blocks)
    return dataclasses.replace(layer, ops=(*layer.ops[:k], renamed, drop, *layer.ops[k + 1:]),
                               blocks=blocks)


