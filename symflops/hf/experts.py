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
    #: how the router's logits become the k weights: a softmax or a sigmoid of every
    #: expert's logit, read at the k chosen; a softmax or a sigmoid of the k chosen
    #: logits only (gpt-oss, Llama 4); the sparse mixer (PhiMoE: a softmax over the
    #: experts in each of its two rounds, the logits masked to the round's candidates)
    scores: Literal["softmax", "sigmoid", "topk-softmax", "topk-sigmoid",
                    "sparsemixer"] = "softmax"
    scale: str | None = None          # a constant the weights are multiplied by
    routing: str = "the top k kept"   # how the k experts are chosen (a comment)
    modules: tuple[str, str, str] = ("gate.weight", "experts.gate_up_proj",
                                     "experts.down_proj")
    router_bias: bool = False         # the router's bias (gpt-oss)
    bias: bool = False                # the experts' biases (gpt-oss)
    #: the gate: act(gate) * up, or gpt-oss's clamped SwiGLU ``(clamp(up) + 1) *
    #: g sigmoid(alpha g)``, ``g = min(gate, limit)``, ``clamp`` to [-limit, limit]
    clamp: tuple[str, str] | None = None     # (limit, alpha)
    #: where the weights apply: to each pair's output, or to its input (Llama 4)
    weighting: Literal["output", "input"] = "output"
    #: every expert on every token, the weights of the others zero (Llama 4's
    #: experts as transformers 5.24 runs them, eager), instead of the k pairs
    every_expert: bool = False


def moe(blk: Block, m: Moe, xn: str) -> tuple[list[str], str]:
    """Routed experts of ``xn``: router, the k weights, each token repeated for its
    k experts (``Xp``, a lookup), each pair's gated MLP with its expert's weights
    (a lookup of the weights inside the product) over the unit axis ``o``, each
    output weighted.  Returns the ops' outputs and the term that sums the k
    weighted outputs, for the caller's residual op."""
    if m.every_expert:
        return _every_expert(blk, m, xn)
    f = m.width
    router, gate_up, down = m.modules
    blk.uses("B", "S", "D", f, "M", "k", "O")
    _weights(blk, m, xn)
    blk.tensor("ex", ["B", "S", "k"], "index", "the k experts a token is routed to")
    blk.tensor("pb", ["B", "S", "k", "O"], "index", "the sequence of each token-expert pair's "
                                                     "token (b itself: the token repeated k times)")
    blk.tensor("ps", ["B", "S", "k", "O"], "index", "the position of each pair's token (s)")
    outs = _routing(blk, m, xn)
    weight = outs[-1]
    blk.op(f"Xp[b,s,i,o,d] = {xn}[pb[b,s,i,o], ps[b,s,i,o], d]",
           "each token repeated for its k experts (repeat_interleave), a row o of one")
    outs.append("Xp")
    x = "Xp"
    if m.weighting == "input":
        blk.op(f"Xw[b,s,i,o,d] = {weight}[b,s,i] Xp[b,s,i,o,d]",
               "each pair's input times its weight (the router's score scales the token "
               "before its expert)")
        x = "Xw"
        outs.append("Xw")
    bg, bu, bd = ((" + b_gate[ex[b,s,i],j]", " + b_up[ex[b,s,i],j]",
                   " + b_down[ex[b,s,i],d]") if m.bias else ("", "", ""))
    blk.op(f"U[b,s,i,o,j] = {x}[b,s,i,o,d] W_gate[ex[b,s,i],d,j]{bg}",
           "each token-expert pair through its expert (batched_mm: a bmm over the k B S pairs)")
    blk.op(f"H[b,s,i,o,j] = {x}[b,s,i,o,d] W_up[ex[b,s,i],d,j]{bu}")
    outs += ["U", "H", *_gate(blk, m, "b,s,i,o,j")]
    blk.op(f"Ye[b,s,i,o,d] = Mx[b,s,i,o,j] W_down[ex[b,s,i],j,d]{bd}")
    outs.append("Ye")
    if m.weighting == "input":
        return outs, "Ye[b,s,i,o,d]"
    blk.op(f"Yw[b,s,i,o,d] = {weight}[b,s,i] Ye[b,s,i,o,d]",
           "each pair's output times its weight (elementwise), then summed over the k pairs")
    return [*outs, "Yw"], "Yw[b,s,i,o,d]"


def _weights(blk: Block, m: Moe, xn: str) -> None:
    """The router's and the experts' parameters."""
    f = m.width
    router, gate_up, down = m.modules
    blk.tensor("W_r", ["D", "M"], "param", f"router ({router}): one logit per expert")
    if m.router_bias:
        blk.tensor("b_r", ["M"], "param", "bias of the router")
    half = ("even columns", "odd columns") if m.clamp else ("first half", "second half")
    blk.tensor("W_gate", ["M", "D", f], "param", f"gate projections, one per expert "
                                                 f"({gate_up}, {half[0]})")
    blk.tensor("W_up", ["M", "D", f], "param", f"up-projections, one per expert "
                                               f"({gate_up}, {half[1]})")
    blk.tensor("W_down", ["M", f, "D"], "param", f"down-projections, one per expert ({down})")
    if m.bias:
        blk.tensor("b_gate", ["M", f], "param", f"biases of the gate projections "
                                                f"({gate_up}_bias, {half[0]})")
        blk.tensor("b_up", ["M", f], "param", f"biases of the up-projections "
                                              f"({gate_up}_bias, {half[1]})")
        blk.tensor("b_down", ["M", "D"], "param", f"biases of the down-projections ({down}_bias)")


def _routing(blk: Block, m: Moe, xn: str) -> list[str]:
    """The router's logits and the k weights of a token; the last output is the
    weight each pair is multiplied by."""
    kind = m.scores
    blk.op(f"Rl[b,s,x] = {xn}[b,s,d] W_r[d,x]" + (" + b_r[x]" if m.router_bias else ""),
           f"router: {kind.replace('topk-', '') if kind != 'sparsemixer' else 'sparse mixer'} "
           f"scores, {m.routing} (the routing is data: ex)")
    if kind in ("softmax", "sigmoid"):
        score = "softmax_x(Rl[b,s,x])" if kind == "softmax" else "sigmoid(Rl[b,s,x])"
        blk.op(f"Rp[b,s,x] = {score}")
        blk.op("Gt[b,s,i] = Rp[b,s,ex[b,s,i]]")
        outs = ["Rl", "Rp", "Gt"]
    elif kind == "sparsemixer":
        blk.tensor("e1", ["B", "S", "O"], "index", "the sparse mixer's first expert of a token")
        blk.tensor("e2", ["B", "S", "O"], "index", "its second expert (the second round's)")
        blk.op("P1[b,s,x] = softmax_x(Rl[b,s,x])",
               "the sparse mixer's first round: a softmax over the experts of the logits, those "
               "far below the best masked\n(masked_fill to minus infinity: the mask is data, "
               "computed without gradient, as ex is), read at the round's expert")
        blk.op("G1[b,s,o] = P1[b,s,e1[b,s,o]]")
        blk.op("P2[b,s,x] = softmax_x(Rl[b,s,x])",
               "the second round: the same with the first round's expert masked too")
        blk.op("G2[b,s,u] = P2[b,s,e2[b,s,u]]")
        blk.op("Gt[b,s,i] = concat_i(G1[b,s,o], G2[b,s,u])", "the two rounds' weights")
        outs = ["Rl", "P1", "G1", "P2", "G2", "Gt"]
    else:
        blk.op("Gl[b,s,i] = Rl[b,s,ex[b,s,i]]", "the logits of the k experts chosen")
        blk.op("Gt[b,s,i] = softmax_i(Gl[b,s,i])" if kind == "topk-softmax" else
               "Gt[b,s,i] = sigmoid(Gl[b,s,i])",
               "their softmax" if kind == "topk-softmax" else "their sigmoids")
        outs = ["Rl", "Gl", "Gt"]
    if m.renormalize:
        blk.op("Gz[b,s] = Gt[b,s,i]", "the k weights divided by their sum (norm_topk_prob)")
        blk.op("Gn[b,s,i] = Gt[b,s,i] / Gz[b,s]")
        outs += ["Gz", "Gn"]
    if m.scale is not None:
        blk.op(f"Gs[b,s,i] = {m.scale} {outs[-1]}[b,s,i]", "times routed_scaling_factor")
        outs.append("Gs")
    return outs


def _gate(blk: Block, m: Moe, letters: str) -> list[str]:
    """``Mx = act(U) * H``, or gpt-oss's clamped SwiGLU; returns the outputs."""
    if m.clamp is None:
        blk.op(f"Mx[{letters}] = {m.activation}(U[{letters}]) * H[{letters}]")
        return ["Mx"]
    limit, alpha = m.clamp
    blk.op(f"Ul[{letters}] = {limit} - U[{letters}]",
           f"the clamped SwiGLU (swiglu_limit {limit}, swiglu_alpha {alpha}): the gate clamped "
           f"above at {limit},\nmin(U, L) = L - relu(L - U) (the declaration has no clamp: "
           "three elementwise operations where a kernel takes one)")
    blk.op(f"Ur[{letters}] = relu(Ul[{letters}])")
    blk.op(f"Uc[{letters}] = {limit} - Ur[{letters}]")
    blk.op(f"Ha[{letters}] = H[{letters}] - {limit}",
           f"the up-projection clamped to [-{limit}, {limit}]: H - relu(H - L) + relu(-H - L)")
    blk.op(f"Hb[{letters}] = -H[{letters}] - {limit}")
    blk.op(f"Hp[{letters}] = relu(Ha[{letters}])")
    blk.op(f"Hq[{letters}] = relu(Hb[{letters}])")
    blk.op(f"Hc[{letters}] = H[{letters}] - Hp[{letters}] + Hq[{letters}]")
    blk.op(f"Ua[{letters}] = {alpha} Uc[{letters}]",
           f"glu = g sigmoid({alpha} g), times (up + 1)")
    blk.op(f"Us[{letters}] = sigmoid(Ua[{letters}])")
    blk.op(f"Ug[{letters}] = Uc[{letters}] * Us[{letters}]")
    blk.op(f"H1[{letters}] = Hc[{letters}] + 1")
    blk.op(f"Mx[{letters}] = H1[{letters}] * Ug[{letters}]")
    return ["Ul", "Ur", "Uc", "Ha", "Hb", "Hp", "Hq", "Hc", "Ua", "Us", "Ug", "H1", "Mx"]


def _every_expert(blk: Block, m: Moe, xn: str) -> tuple[list[str], str]:
    """Every expert on every token (Llama 4's experts in transformers 5.24's
    eager mode): the input repeated for all M experts and scaled by the router's
    score (zero for an expert not among the k chosen), one bmm per weight over the
    M experts' copies of all B S tokens, then summed over the experts."""
    f = m.width
    blk.uses("B", "S", "D", f, "M")
    _weights(blk, m, xn)
    blk.op(f"Rl[b,s,x] = {xn}[b,s,d] W_r[d,x]",
           "router: the k largest logits kept, the others minus infinity (scatter: data), then "
           "a sigmoid of every expert's")
    blk.op("Rs[b,s,x] = sigmoid(Rl[b,s,x])",
           "the M scores of a token, zero but for its k experts")
    blk.tensor("rb", ["B", "S", "M"], "index", "the sequence of each token's copy for an expert "
                                               "(b itself: the token repeated M times)")
    blk.tensor("rs", ["B", "S", "M"], "index", "the position of each copy's token (s)")
    blk.op(f"Xr[b,s,x,d] = {xn}[rb[b,s,x], rs[b,s,x], d]",
           "every token repeated for every expert (repeat: as eager runs it, every expert "
           "processes every token,\nM / k times the pairs the routing keeps)")
    blk.op("Xs[b,s,x,d] = Rs[b,s,x] Xr[b,s,x,d]", "each copy times its expert's score (routed_in)")
    blk.op("U[b,s,x,j] = Xs[b,s,x,d] W_gate[x,d,j]",
           "each expert on all B S tokens (torch.bmm over the M experts)")
    blk.op("H[b,s,x,j] = Xs[b,s,x,d] W_up[x,d,j]")
    outs = ["Rl", "Rs", "Xr", "Xs", "U", "H", *_gate(blk, m, "b,s,x,j")]
    blk.op("Ye[b,s,x,d] = Mx[b,s,x,j] W_down[x,j,d]")
    return [*outs, "Ye"], "Ye[b,s,x,d]"


def shared_mlp(blk: Block, activation: str, xn: str, width: str = "Fs", bias: bool = False,
               comment: str = "shared experts: one gated MLP on every token",
               module: str = "shared experts'") -> tuple[list[str], str]:
    """The shared experts (DeepSeekMoE, GLM-4.5, Llama 4): one gated MLP of
    ``width`` on every token.  Returns its ops' outputs and the term of its
    down-projection, for the caller's residual op."""
    blk.uses(width)
    blk.tensor("W_sgate", ["D", width], "param", f"{module} gate_proj")
    blk.tensor("W_sup", ["D", width], "param", f"{module} up_proj")
    blk.tensor("W_sdown", [width, "D"], "param", f"{module} down_proj")
    if bias:
        blk.tensor("b_sgate", [width], "param", "bias of the shared gate_proj (mlp_bias)")
        blk.tensor("b_sup", [width], "param", "bias of the shared up_proj (mlp_bias)")
    bg, bu = (" + b_sgate[j]", " + b_sup[j]") if bias else ("", "")
    blk.op(f"Us[b,s,j] = {xn}[b,s,d] W_sgate[d,j]{bg}", comment)
    blk.op(f"Hs[b,s,j] = {xn}[b,s,d] W_sup[d,j]{bu}")
    blk.op(f"Ms[b,s,j] = {activation}(Us[b,s,j]) * Hs[b,s,j]")
    return ["Us", "Hs", "Ms"], "Ms[b,s,j] W_sdown[j,d]"


def moe_dims(d: Declaration, experts: int, active: int, experts_key: str,
             active_key: str, unit: str = "") -> None:
    d.dim("M", "routed experts in a block", experts, experts_key)
    d.dim("k", "experts each token is routed to (top-k)", active, active_key)
    d.dim("O", "a unit axis (size 1): the rows of batched_mm's per-pair products" + unit,
          equals="1")
