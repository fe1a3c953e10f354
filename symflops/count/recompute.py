"""Activation recomputation: which tensors a policy keeps, and what it costs.

A policy names a set R of forward ops to run again during the backward pass:

* ``none``: R is empty; every saved tensor is kept (model = executed FLOPs);
* ``full``: R is every op inside an included block (every op, when the layer
  includes none), so each copy of a block keeps only its input;
* ``selective``: R is the ops the declaration lists under
  ``recompute: {selective: [...]}`` (named by the tensors they write);
* ``fused_attention``: R is each attention core's chain (:func:`attention_chains`),
  the score product of two activations (``A = Q Kᵀ``), the elementwise ops after
  it, the softmax and the elementwise ops on its probabilities (a dropout), up
  to the product that reads them with another activation (``O = P V``, not in
  R): one fused kernel (FlashAttention) that never writes the scores or the
  probabilities to memory and recomputes them in the backward pass.  Besides
  the kernel's inputs it keeps one statistic per row of each softmax (the
  log-sum-exp of the row, in fp32: :data:`STATISTICS_BYTES`), from which the
  backward pass rebuilds the probabilities without a second pass over the row.

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
from .indices import index_widths
from ..core.records import Derivation
from ..core.ir import RECOMPUTE_POLICIES, Layer


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
        return sympy.expand(sum((s.total * s.element_bytes(p) for s in self.kept),
                                sympy.Integer(0)))


#: Bytes per element of the per-row statistic a fused attention kernel keeps
#: (FlashAttention's log-sum-exp is fp32, whatever the activations' width).
STATISTICS_BYTES = 4


def _matmul_of_activations(layer: Layer, k: int, costs: Costs) -> bool:
    """Op ``k`` has a matmul-type product of two tensors neither of which is
    a parameter or a buffer (``Q Kᵀ``, ``P V``)."""
    if costs.forward[k].flops == 0:
        return False
    tensors = layer.tensor_map
    for t in layer.ops[k].terms:
        names = [f.tensor for f in t.factors]
        if (len(names) >= 2 and t.contracted
                and all(not (tensors[n].is_param or tensors[n].is_buffer) for n in names)):
            return True
    return False


def attention_chains(derivation: Derivation, costs: Costs) -> tuple[tuple[int, ...], ...]:
    """The op positions of each attention core a fused kernel runs: from a
    matmul-type product of two activations, through elementwise ops, a
    softmax and elementwise ops on its output, up to (not including) the
    product of the probabilities with another activation.  Every tensor of a
    chain but the last product's operand is read by the next op of the
    chain only (else the kernel would have to write it out), and none is an
    output of the layer."""
    layer = derivation.layer
    readers: dict[str, list[int]] = {}
    for k, op in enumerate(layer.ops):
        for n in dict.fromkeys(op.inputs):
            readers.setdefault(n, []).append(k)
    producer = {op.output: k for k, op in enumerate(layer.ops)}
    outputs = set(layer.outputs)

    def only_reader(name: str) -> int | None:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None

    chains = []
    for k, op in enumerate(layer.ops):
        if getattr(op, "kind", None) != "softmax":
            continue
        chain = [k]
        j = producer.get(op.inputs[0])  # back to the score product
        while j is not None and only_reader(layer.ops[j].output) is not None:
            chain.insert(0, j)
            if _matmul_of_activations(layer, j, costs):
                break
            computed = [n for n in layer.ops[j].inputs if n in producer]
            if costs.forward[j].flops != 0 or len(computed) != 1:
                j = None
                break
            j = producer[computed[0]]
        else:
            j = None
        if j is None or not _matmul_of_activations(layer, chain[0], costs):
            continue
        nxt = only_reader(op.output)  # on to the product with the values
        while nxt is not None and not _matmul_of_activations(layer, nxt, costs):
            if costs.forward[nxt].flops != 0:
                nxt = None
                break
            chain.append(nxt)
            nxt = only_reader(layer.ops[nxt].output)
        if nxt is not None:
            chains.append(tuple(chain))
    return tuple(chains)


def _statistics(derivation: Derivation, costs: Costs,
                chains: tuple[tuple[int, ...], ...]) -> list[SavedTensor]:
    """One statistic per row of each fused softmax, every copy."""
    layer = derivation.layer
    taken = {t.name for t in layer.tensors}
    out = []
    for chain in chains:
        for k in chain:
            op = layer.ops[k]
            if getattr(op, "kind", None) != "softmax":
                continue
            extents = op.dims()
            rows = sympy.Mul(*(extents[i] for i in dict.fromkeys(op.out.indices)
                               if i not in op.index))
            name = f"lse_{op.output}"
            while name in taken:
                name += "_"
            taken.add(name)
            out.append(SavedTensor(name, sympy.expand(rows), ("recomputation",), False,
                                   layer.copies(op.output), STATISTICS_BYTES))
    return out


def recomputed_ops(derivation: Derivation, policy: str,
                   costs: Costs | None = None) -> tuple[str, ...]:
    layer = derivation.layer
    if policy not in RECOMPUTE_POLICIES:
        raise ValueError(f"unknown recompute policy {policy!r}")
    if policy == "none":
        return ()
    if policy == "selective":
        return layer.selective
    if policy == "fused_attention":
        if costs is None:
            raise ValueError("the fused_attention policy needs the layer's costs")
        return tuple(layer.ops[k].output for c in attention_chains(derivation, costs) for k in c)
    inside = {n for b in layer.blocks for n in b.ops}
    return tuple(op.output for op in layer.ops if not layer.blocks or op.output in inside)


def recompute(derivation: Derivation, costs: Costs, policy: str) -> Recompute:
    """The effect of ``policy`` on ``derivation``'s FLOPs and kept activations."""
    layer = derivation.layer
    tensors = layer.tensor_map
    names = recomputed_ops(derivation, policy, costs)
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
    widths = index_widths(layer)
    have = {s.name for s in kept}
    for n in needed:
        if n not in have:
            # as for any saved tensor: one copy per copy of the deepest block that keeps it
            owners = [layer.blocks_of(layer.ops[k].output) for k in chosen
                      if n in layer.ops[k].inputs] + [saved_blocks(layer, derivation, n)]
            copies = sympy.Mul(*(b.repeat for b in max(owners, key=len)))
            kept.append(SavedTensor(n, tensors[n].elements, ("recomputation",),
                                    tensors[n].role == "mask", copies, widths.get(n)))
    order = {t.name: k for k, t in enumerate(layer.tensors)}
    kept.sort(key=lambda s: order[s.name])
    if policy == "fused_attention":  # after the tensors: statistics no op writes
        kept += _statistics(derivation, costs, attention_chains(derivation, costs))
    working = sympy.expand(sum((s.elements for s in costs.saved if s.name in regenerated),
                               sympy.Integer(0)))
    return Recompute(policy, names, flops, elementwise, tuple(kept), working)
