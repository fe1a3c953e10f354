"""Routed experts, as declaration text: the router, each token-expert pair's
products and the combine (:func:`moe`), and the dims they use (:func:`moe_dims`),
for the mixture-of-experts families of :mod:`symflops.hf.families`.

Experts are counted as transformers' ``batched_mm`` runs them: each token
repeated for its k experts (a lookup), each token-expert pair multiplied by
its expert's weights over a unit axis ``o`` (``O = 1``, the row of
batched_mm's ``(pairs, 1, D) @ (pairs, D, F)``), so that the weight gradient
sums over it and counts as a matrix product, as FlopCounterMode counts the
bmm: exact at every B and S (no capacity, no token dropped or padded).  The
combine multiplies each pair by its weight elementwise and sums the k pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .emit import Block, Declaration

@dataclass(frozen=True)
class Moe:
    """Routed experts, each a gated MLP of width ``width``, counted as
    transformers' ``batched_mm`` runs them: each token-expert pair's products
    once, exact at every B and S (no capacity, no token dropped or padded)."""

    activation: str
    width: str = "F"
    renormalize: bool = True          # the top-k weights divided by their sum (norm_topk_prob)
    scores: Literal["softmax", "sigmoid"] = "softmax"
    scale: str | None = None          # a constant the weights are multiplied by
    routing: str = "the top k kept"   # how the k experts are chosen (a comment)
    modules: tuple[str, str, str] = ("gate.weight", "experts.gate_up_proj",
                                     "experts.down_proj")


def moe(blk: Block, m: Moe, xn: str) -> tuple[list[str], str]:
    """Routed experts of ``xn``: router, the k weights, each token repeated for its
    k experts (``Xp``, a lookup), each pair's gated MLP with its expert's weights
    (a lookup of the weights inside the product) over the unit axis ``o``, each
    output weighted.  Returns the ops' outputs and the term that sums the k
    weighted outputs, for the caller's residual op."""
    f = m.width
    router, gate_up, down = m.modules
    blk.uses("B", "S", "D", f, "M", "k", "O")
    blk.tensor("W_r", ["D", "M"], "param", f"router ({router}): one logit per expert")
    blk.tensor("W_gate", ["M", "D", f], "param", f"gate projections, one per expert "
                                                 f"({gate_up}, first half)")
    blk.tensor("W_up", ["M", "D", f], "param", f"up-projections, one per expert "
                                               f"({gate_up}, second half)")
    blk.tensor("W_down", ["M", f, "D"], "param", f"down-projections, one per expert ({down})")
    blk.tensor("ex", ["B", "S", "k"], "index", "the k experts a token is routed to")
    blk.tensor("pb", ["B", "S", "k", "O"], "index", "the sequence of each token-expert pair's "
                                                     "token (b itself: the token repeated k times)")
    blk.tensor("ps", ["B", "S", "k", "O"], "index", "the position of each pair's token (s)")
    score = "softmax_x(Rl[b,s,x])" if m.scores == "softmax" else "sigmoid(Rl[b,s,x])"
    blk.op(f"Rl[b,s,x] = {xn}[b,s,d] W_r[d,x]",
           f"router: {m.scores} scores, {m.routing} (the routing is data: ex)")
    blk.op(f"Rp[b,s,x] = {score}")
    blk.op("Gt[b,s,i] = Rp[b,s,ex[b,s,i]]")
    outs = ["Rl", "Rp", "Gt"]
    weight = "Gt"
    if m.renormalize:
        blk.op("Gz[b,s] = Gt[b,s,i]", "the k weights divided by their sum (norm_topk_prob)")
        blk.op("Gn[b,s,i] = Gt[b,s,i] / Gz[b,s]")
        weight = "Gn"
        outs += ["Gz", "Gn"]
    if m.scale is not None:
        blk.op(f"Gs[b,s,i] = {m.scale} {weight}[b,s,i]", "times routed_scaling_factor")
        weight = "Gs"
        outs.append("Gs")
    blk.op(f"Xp[b,s,i,o,d] = {xn}[pb[b,s,i,o], ps[b,s,i,o], d]",
           "each token repeated for its k experts (repeat_interleave), a row o of one")
    blk.op("U[b,s,i,o,j] = Xp[b,s,i,o,d] W_gate[ex[b,s,i],d,j]",
           "each token-expert pair through its expert (batched_mm: a bmm over the k B S pairs)")
    blk.op("H[b,s,i,o,j] = Xp[b,s,i,o,d] W_up[ex[b,s,i],d,j]")
    blk.op(f"Mx[b,s,i,o,j] = {m.activation}(U[b,s,i,o,j]) * H[b,s,i,o,j]")
    blk.op("Ye[b,s,i,o,d] = Mx[b,s,i,o,j] W_down[ex[b,s,i],j,d]")
    blk.op(f"Yw[b,s,i,o,d] = {weight}[b,s,i] Ye[b,s,i,o,d]",
           "each pair's output times its weight (elementwise), then summed over the k pairs")
    return [*outs, "Xp", "U", "H", "Mx", "Ye", "Yw"], "Yw[b,s,i,o,d]"


def moe_dims(d: Declaration, experts: int, active: int, experts_key: str,
             active_key: str, unit: str = "") -> None:
    d.dim("M", "routed experts in a block", experts, experts_key)
    d.dim("k", "experts each token is routed to (top-k)", active, active_key)
    d.dim("O", "a unit axis (size 1): the rows of batched_mm's per-pair products" + unit,
          equals="1")
