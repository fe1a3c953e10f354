"""Serving quantities: the key/value cache and the bytes a decoded token reads.

In a causal op (a where-clause ``t <= s``) the position ``s`` attends to the
positions ``t`` before it.  An operand indexed by the earlier position ``t``
and not by ``s`` (the keys ``K[b,t,n,e]`` and values ``V[b,t,n,e]``), that is
not a parameter, is what autoregressive decoding keeps from one step to the
next: the key/value cache.  Its size is the tensor's elements (at the
declared context ``S``) times the copies of its block, so grouped-query
attention's smaller ``K`` and ``V`` give a smaller cache without any special
case.  Decoding one token reads every weight once and the whole cache of its
sequence once, which bounds the decode rate by memory bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .cost import Costs
from .derive import Derivation
from .ir import Contraction, comparison


@dataclass(frozen=True)
class Inference:
    cache: tuple[tuple[str, sympy.Expr], ...]   # (tensor, elements of one copy)
    cache_elements: sympy.Expr                   # every copy, for the declared sequences
    cache_bytes: sympy.Expr
    weights_bytes: sympy.Expr
    sequences: sympy.Expr | None

    @property
    def cache_elements_per_sequence(self) -> sympy.Expr | None:
        return None if self.sequences is None else sympy.expand(self.cache_elements / self.sequences)

    @property
    def cache_bytes_per_sequence(self) -> sympy.Expr | None:
        return None if self.sequences is None else sympy.expand(self.cache_bytes / self.sequences)

    @property
    def bytes_per_decoded_token(self) -> sympy.Expr | None:
        """One sequence decoding at the declared context: every weight and its
        whole cache are read once per token."""
        per = self.cache_bytes_per_sequence
        return None if per is None else sympy.expand(self.weights_bytes + per)


def cached_tensors(derivation: Derivation) -> tuple[str, ...]:
    layer = derivation.layer
    tensors = layer.tensor_map
    found: list[str] = []
    for op in layer.ops:
        if not isinstance(op, Contraction):
            continue
        for term in op.terms:
            for low, high, _ in (comparison(f) for f in term.operands if f.is_comparison):
                for f in term.operands:
                    if (f.is_indicator or not f.tensor or tensors[f.tensor].is_param
                            or tensors[f.tensor].role == "index"):
                        continue
                    if low in f.indices and high not in f.indices and f.tensor not in found:
                        found.append(f.tensor)
    return tuple(found)


def inference(derivation: Derivation, costs: Costs) -> Inference | None:
    """The cache of a causal layer; None when nothing is causal."""
    layer = derivation.layer
    names = cached_tensors(derivation)
    if not names:
        return None
    tensors = layer.tensor_map
    p = costs.precision
    cache = tuple((n, tensors[n].elements) for n in names)
    elements = sympy.expand(sum((e * layer.copies(n) for n, e in cache), sympy.Integer(0)))
    return Inference(cache, elements, sympy.expand(elements * p.activations),
                     sympy.expand(costs.params * p.params), layer.sequences)
