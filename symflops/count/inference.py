"""Serving quantities: the key/value cache and the bytes a decoded token reads.

In a causal op (a where-clause ``t <= s``) the position ``s`` attends to the
positions ``t`` before it.  An operand indexed by the earlier position ``t``
and not by ``s`` (the keys ``K[b,t,n,e]`` and values ``V[b,t,n,e]``), that is
not a parameter, is what autoregressive decoding keeps from one step to the
next: the key/value cache.  Its size is the tensor's elements (at the
declared context ``S``) times the copies of its block, so grouped-query
attention's smaller ``K`` and ``V`` give a smaller cache without any special
case.  A sliding window (``t <= s, s - t < W``) reads at most ``W`` earlier
positions, so decoding keeps the last ``W``: the cached axis counts
``min(S, W)`` positions.  A layer whose earlier position is not a position
of the sequence (a loop over chunks; an offset inside a chunk, or a chunk,
where a tensor splits the positions into both) gets no cache, and says why
(:func:`uncached`): decoding keeps a state, or the current chunk's keys.

Decoding one token of one sequence reads the weights that token reads (the
parameter elements :mod:`symflops.count.params` counts per token as ``read``:
the shared weights, the k of M experts it is routed to, one row of each
lookup table) and the whole cache of its sequence, once each; memory
bandwidth over these bytes bounds the decode rate.
:func:`~symflops.count.decoding.decode_step_bytes` is that sum for a step of
several sequences; ``symflops derive`` (one sequence, symbolically) and
``symflops plan`` (b sequences, in numbers) both compute it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import sympy

from .cost import Costs
from ..core.records import Derivation
from ..core.ir import comparison, substitute
from .decoding import decode_step_bytes, weights_read_bytes


@dataclass(frozen=True)
class Inference:
    cache: tuple[tuple[str, sympy.Expr], ...]   # (tensor, elements of one copy)
    cache_elements: sympy.Expr                   # every copy, for the declared sequences
    cache_bytes: sympy.Expr
    weights_bytes: sympy.Expr                    # every weight, stored
    weights_bytes_read: sympy.Expr | None        # the weights one token reads; None without tokens
    sequences: sympy.Expr | None

    @property
    def cache_elements_per_sequence(self) -> sympy.Expr | None:
        return None if self.sequences is None else sympy.expand(self.cache_elements / self.sequences)

    @property
    def cache_bytes_per_sequence(self) -> sympy.Expr | None:
        return None if self.sequences is None else sympy.expand(self.cache_bytes / self.sequences)

    @property
    def bytes_per_decoded_token(self) -> sympy.Expr | None:
        """One sequence decoding at the declared context: the weights a token
        reads and the sequence's whole cache, once each."""
        per = self.cache_bytes_per_sequence
        if per is None or self.weights_bytes_read is None:
            return None
        return sympy.expand(decode_step_bytes(self.weights_bytes_read, per, 1))


def cached_tensors(derivation: Derivation) -> tuple[str, ...]:
    return tuple(cached_windows(derivation))


def cached_windows(derivation: Derivation) -> dict[str, tuple[int, sympy.Expr] | None]:
    """The cached tensors, each with the window that caps its cache: (the axis
    of the earlier position, the most positions a query reads there), or None.
    Only a plain bound (``t <= s``) says which position is the earlier one; a
    window's bound (``s - t < W``, that is ``s <= t + W - 1``) caps it at
    ``W`` keys per query, so decoding keeps the last ``W``: ``min(S, W)``."""
    return {name: (axis, sympy.Min(*widths)) if widths else None
            for name, (axis, _, widths) in _earlier(derivation.layer).items()}


def _earlier(layer: Any) -> dict[str, tuple[int, str, list[sympy.Expr]]]:
    """Each tensor read at an earlier position than the one computed: the axis
    of that position, its letter, and the widths of the windows bounding it."""
    tensors = layer.tensor_map
    found: dict[str, tuple[int, str, list[sympy.Expr]]] = {}
    for op in layer.ops:
        for term in op.terms:
            bounds = [comparison(f) for f in term.operands if f.is_comparison]
            for bound in (b for b in bounds if b.offset == 0):
                widths = [b.offset + (0 if b.strict else 1) for b in bounds
                          if (b.low, b.high) == (bound.high, bound.low) and b.offset != 0]
                for f in term.operands:
                    if (f.is_indicator or not f.tensor or tensors[f.tensor].is_param
                            or tensors[f.tensor].role in ("index", "buffer")):
                        continue
                    if bound.low in f.indices and bound.high not in f.indices and f.tensor not in found:
                        found[f.tensor] = (f.indices.index(bound.low), bound.low, widths)
    return found


def _cached_elements(tensor: Any, window: tuple[int, sympy.Expr] | None) -> sympy.Expr:
    """A cached tensor's elements, its position axis capped by the window."""
    if window is None:
        return tensor.elements
    axis, width = window
    extent = tensor.shape[axis]
    return sympy.expand(tensor.elements / extent * sympy.Min(extent, width))


#: A piece of a sentence about the cache: words, or a symbol the sheet sets as
#: math (a tensor's name, a dim's formula, an index letter).
Piece = tuple[Literal["text", "tensor", "dim", "letter"], Any]


@dataclass(frozen=True)
class Said:
    """A sentence that names symbols: ``plan`` prints it as text
    (:meth:`text`), a sheet sets each symbol as math."""

    pieces: tuple[Piece, ...]

    def text(self) -> str:
        return "".join(str(v) for _, v in self.pieces)


def _said(*pieces: Piece | str) -> Said:
    return Said(tuple(("text", p) if isinstance(p, str) else p for p in pieces))


#: Why a layer with a loop over chunks gets no decoding figures.
NO_CACHE_OF_A_LOOP = _said(
    "not counted: a loop over chunks (as in the gated DeltaNet) decodes from the state it "
    "carries from chunk to chunk, whose size does not grow with the context, while the cache "
    "counted here is what grows with every token of context")


def uncached(layer: Any) -> Said | None:
    """Why ``layer``'s decoding cache is not counted, or None: a layer with a
    loop (:mod:`symflops.ops.loop`) keeps its state from one token to the
    next, not the keys of its chunks, which the rule above would take for a
    cache (the causal pairs inside a chunk); so does a layer whose earlier
    position runs over a part of the sequence (:func:`_within_chunks`)."""
    if any(op.kind == "loop" for op in layer.ops):
        return NO_CACHE_OF_A_LOOP
    return _within_chunks(layer)


def _within_chunks(layer: Any) -> Said | None:
    """Why the rule above does not apply to a layer that views a sequence's
    positions as (chunk, offset) pairs (a tensor with two axes whose extents
    multiply to the positions: Mamba-2's SSD, a chunked DeltaNet, Llama 4's
    chunked attention counted exactly) and reads a tensor at an earlier chunk
    or offset rather than at an earlier position: decoding keeps a state, or
    the current chunk's keys, not that tensor's elements per position of
    context, which the rule counts."""
    if layer.tokens is None or layer.sequences is None:
        return None
    subs = layer.substitutions
    positions = sympy.expand(substitute(layer.tokens / layer.sequences, subs))

    def extents(shape: Any) -> list[sympy.Expr]:
        return [sympy.expand(substitute(a, subs)) for a in shape]

    tensors = layer.tensor_map
    partial = [(name, letter, tensors[name].shape[axis])
               for name, (axis, letter, _) in _earlier(layer).items()
               if extents([tensors[name].shape[axis]])[0] != positions]
    if not partial:
        return None
    for t in layer.tensors:
        sizes = extents(t.shape)
        pairs = [(a, b) for i, a in enumerate(t.shape) for j, b in enumerate(t.shape)
                 if i < j and 1 not in (sizes[i], sizes[j])
                 and sympy.expand(sizes[i] * sizes[j] - positions) == 0]
        if pairs:
            (chunks, length), (name, letter, extent) = pairs[0], partial[0]
            where: tuple[Piece | str, ...] = \
                {length: ("an earlier position of the same chunk",),
                 chunks: ("an earlier chunk",)}.get(extent, ("an earlier ", ("letter", letter)))
            return _said(
                "not counted: the layer splits a sequence's positions into ", ("dim", chunks),
                " chunks of ", ("dim", length), " (", ("tensor", t.name), "'s axes) and reads ",
                ("tensor", name), " at ", *where, " (", ("letter", letter), ", over ",
                ("dim", extent), "), not at any earlier position of the sequence. Decoding such "
                "a layer keeps a running state, or the current chunk's keys; neither grows with "
                "every token of context, which is what the cache counted here holds")
    return None


def states_left_out(layer: Any) -> Said | None:
    """What a counted cache leaves out, or None: a recurrence (a scan along
    the positions, Mamba's) carries a state from one token to the next whose
    size does not grow with the context, and the cache counts what does."""
    scans = [op.output for op in layer.ops if op.kind == "recurrence"]
    if not scans:
        return None
    names: list[Piece | str] = []
    for k, name in enumerate(scans):
        names += [", "] * (k > 0) + [("tensor", name)]
    return _said("the state each recurrence (", *names, ") carries from one position to the "
                 "next, the same size at every context, is not in the cache: the bytes read "
                 "per token are a lower bound")


def cache_note(layer: Any, counted: bool) -> Said | None:
    """What is said beside the cache: what a counted one leaves out
    (:func:`states_left_out`), or why none is counted (:func:`uncached`)."""
    return states_left_out(layer) if counted else uncached(layer)


def inference(derivation: Derivation, costs: Costs, read: sympy.Expr | None) -> Inference | None:
    """The cache of a causal layer and the bytes a decoded token reads (``read``:
    the parameter elements one token reads); None when nothing is causal, or
    when the cache is not counted (:func:`uncached`)."""
    layer = derivation.layer
    windows = cached_windows(derivation)
    if not windows or uncached(layer) is not None:
        return None
    tensors = layer.tensor_map
    p = costs.precision
    cache = tuple((n, _cached_elements(tensors[n], w)) for n, w in windows.items())
    elements = sympy.expand(sum((e * layer.copies(n) for n, e in cache), sympy.Integer(0)))
    return Inference(cache, elements, sympy.expand(elements * p.activations),
                     sympy.expand(costs.params * p.params),
                     None if read is None else sympy.expand(weights_read_bytes(read, p)),
                     layer.sequences)
