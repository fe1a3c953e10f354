"""Attention's products, found from the structure of the ops, and the
full-square convention for products restricted by a where-clause.

**Attention products.**  A pairwise product is *attention* when

* it is matrix-type work (the ``flops`` bucket: it multiplies two tensors,
  sums over a letter and keeps a letter only one of them has);
* it multiplies no parameter and no buffer (two activations, or an
  activation and a gradient): token pairs, not learned weights;
* two of its distinct letters range over the same *sequence dim*: a dim of
  the declared ``tokens:`` (``S`` of ``B*S``), or, without ``tokens:``, a
  dim of a data input's axis that no parameter has (a token row).

So the score product ``A[s,t] = Q[s,e] K[t,e]`` and the mixing product
``O[s,e] = P[s,t] V[t,e]`` are attention, and so are their backward rules
(``dQ = dA K``, ``dK = dA^T Q``, ``dP = dO V^T``, ``dV = P^T dO``, which
carry the same two letters); the projections are not (a parameter), nor is
linear attention's ``K^T V`` (one sequence letter).  The forward and
backward totals count every copy of a repeated block.

**Full square.**  :func:`full_square` is the layer with the where-clauses
taken off every matrix-type product (``A = Q K^T where t <= s`` counted over
all S^2 pairs), and kept on everything else (the softmax masks, dropout's
mask): what eager PyTorch runs and FLOP counters count, and what
``symflops import-hf --attention full-square`` writes for a config
(:mod:`symflops.hf.parts`), here for any declaration.  Each product keeps its
op; only the domain its count ranges over changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Einsum, Layer
from ..core.records import Derivation
from ..ops.base import Unit
from ..ops.einsum.cost import term_cost


@dataclass(frozen=True)
class AttentionTerm:
    """One attention product: term ``term`` of forward op ``op`` (``rule`` is
    None) or of backward rule ``rule``; its count for one copy, its copies,
    and, when a where-clause restricts it, its count over the full square."""

    op: int
    rule: int | None
    term: int
    text: str            # the product, as the statement grammar prints it
    letters: tuple[str, str]  # the two sequence letters
    flops: sympy.Expr    # one copy, in the layer's unit
    copies: sympy.Expr
    full: sympy.Expr | None  # one copy over the full square; None: no where-clause

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.flops * self.copies)


@dataclass(frozen=True)
class Attention:
    terms: tuple[AttentionTerm, ...]

    def total(self, backward: bool | None = None) -> sympy.Expr:
        """Forward (``backward=False``), backward (True) or both (None)."""
        return sympy.expand(sum((t.total for t in self.terms
                                 if backward is None or (t.rule is not None) == backward),
                                sympy.Integer(0)))


def sequence_dims(layer: Layer) -> frozenset[sympy.Expr]:
    """The dims of token rows: those of ``tokens:``, else those of a data
    input's (or index's) axes that no parameter has."""
    if layer.tokens is not None:
        return frozenset(sympy.expand(layer.tokens).free_symbols)
    held = {n for t in layer.tensors if t.is_param for n in t.shape}
    produced = {op.output for op in layer.ops}
    return frozenset(n for t in layer.tensors
                     if t.role in ("input", "index") and t.name not in produced
                     for n in t.shape if n.is_Symbol and n not in held)


def _pair(e: Einsum, extents: dict[str, sympy.Expr], dims: frozenset[sympy.Expr]
          ) -> tuple[str, str] | None:
    """Two distinct letters of ``e`` over one sequence dim, or None."""
    seen: dict[sympy.Expr, str] = {}
    for x in e.indices:
        n = extents.get(x)
        if n in dims:
            if n in seen:
                return seen[n], x
            seen[n] = x
    return None


def _learned(layer: Layer, e: Einsum) -> bool:
    """Whether ``e`` multiplies a parameter or a buffer (a learned or constant table)."""
    tensors = layer.tensor_map
    return any(f.tensor in tensors and (tensors[f.tensor].is_param or tensors[f.tensor].is_buffer)
               for f in e.factors)


def _unrestricted(e: Einsum) -> Einsum:
    return dataclasses.replace(e, operands=tuple(f for f in e.operands if not f.is_comparison))


def _terms(layer: Layer, derivation: Derivation, unit: Unit, copies_fwd: Sequence[sympy.Expr],
           copies_bwd: Sequence[sympy.Expr]) -> Iterable[AttentionTerm]:
    dims = sequence_dims(layer)
    if not dims:
        return
    for k, op in enumerate(layer.ops):
        if getattr(op, "kind", None) != "contraction":
            continue
        extents = op.dims()
        for j, e in enumerate(op.terms):
            found = _attention(layer, e, extents, dims, unit, layer.forward_order)
            if found is not None:
                yield AttentionTerm(k, None, j, e.statement(), found[0], found[1],
                                    copies_fwd[k], found[2])
    for i, r in enumerate(derivation.rules):
        if getattr(r, "own_cost", None) is not None:  # a recurrence counts itself
            continue
        extents = r.dims()
        for j, e in enumerate(r.terms):
            found = _attention(layer, e, extents, dims, unit, "cheapest")
            if found is not None:
                yield AttentionTerm(r.op, i, j, e.statement(), found[0], found[1],
                                    copies_bwd[i], found[2])


def _attention(layer: Layer, e: Einsum, extents: dict[str, sympy.Expr],
               dims: frozenset[sympy.Expr], unit: Unit, order: str
               ) -> tuple[tuple[str, str], sympy.Expr, sympy.Expr | None] | None:
    pair = _pair(e, extents, dims)
    if pair is None or _learned(layer, e) or len(e.factors) < 2:
        return None
    flops = term_cost(e, extents, unit, order, layer.sizes)[0]  # type: ignore[arg-type]
    if flops == 0:
        return None
    full = None
    if any(f.is_comparison for f in e.operands):
        full = term_cost(_unrestricted(e), extents, unit, order, layer.sizes)[0]  # type: ignore[arg-type]
    return pair, sympy.expand(flops), None if full is None else sympy.expand(full)


def attention(derivation: Derivation, unit: Unit, forward_copies: Sequence[sympy.Expr],
              backward_copies: Sequence[sympy.Expr]) -> Attention:
    """Every attention product of the layer, forward and backward (see the module)."""
    return Attention(tuple(_terms(derivation.layer, derivation, unit, forward_copies,
                                  backward_copies)))


# ----------------------------------------------------------- full square --

def restricted_products(layer: Layer, unit: Unit = "FLOPs") -> tuple[tuple[int, int], ...]:
    """(op, term) of every matrix-type forward product a where-clause restricts."""
    out = []
    for k, op in enumerate(layer.ops):
        if getattr(op, "kind", None) != "contraction":
            continue
        for j, e in enumerate(op.terms):
            if not any(f.is_comparison for f in e.operands):
                continue
            if term_cost(e, op.dims(), unit, layer.forward_order, layer.sizes)[0] != 0:
                out.append((k, j))
    return tuple(out)


def full_square(layer: Layer) -> Layer:
    """``layer`` with every matrix-type product counted over the full square
    (its comparisons dropped; see the module).  SymflopsError when no product
    is restricted (the convention changes nothing), or when a restricted
    product reads an index that the where-clause keeps inside its axis."""
    found = restricted_products(layer)
    if not found:
        raise SymflopsError(f"{layer.name} has no matrix product restricted by a where-clause, "
                            "so --attention full-square changes nothing",
                            hint="leave the attention convention out for this declaration")
    ops = list(layer.ops)
    for k in sorted({k for k, _ in found}):
        op = ops[k]
        terms = list(op.terms)
        for kk, j in found:
            if kk != k:
                continue
            e = terms[j]
            compared = {x for f in e.operands if f.is_comparison for x in f.indices}
            if any(f.is_shift and compared & set(f.indices) for f in e.operands):
                raise SymflopsError(f"cannot count {op.statement()!r} over the full square: an "
                                    "index of it stays inside its axis only under the "
                                    "where-clause", getattr(op, "span", None),
                                    "leave the attention convention out for this declaration")
            terms[j] = _unrestricted(e)
        ops[k] = dataclasses.replace(op, terms=tuple(terms))
    return dataclasses.replace(layer, ops=tuple(ops))
