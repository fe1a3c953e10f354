"""Causal self-attention, as declaration text: the projections, the norms of
the queries and keys, rotary positions, and the heart of attention
(:func:`mixing`: scores, masked softmax, mixing) that every family shares.

Attention is causal.  Under ``attention="exact"`` its two products are
counted over the S(S+1)/2 pairs ``t <= s`` (within a window of ``W`` when it
has one); under ``"full-square"`` they are written without the where-clause,
over all S^2 pairs, as eager PyTorch runs them (the mask then only zeroes the
probabilities: the softmax keeps it), so that counts match tools and traces
that count the full square.  Letters as in :mod:`symflops.hf.parts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .emit import Block, Declaration
from .parts import AttentionCount, Norm, dropped_residual, norm, residual_target, shape_of, \
    softcap_op


@dataclass(frozen=True)
class Attention:
    heads: str                        # "n" (every head its own key/value) or "g,r" (grouped)
    bias: tuple[bool, bool, bool, bool] = (False, False, False, False)   # q, k, v, o
    qk_norm: Norm | None = None       # a norm of each query and key head (Qwen3, Gemma 3)
    rotary: bool = True               # rotate-half RoPE over the whole head (buffers)
    scale: str = "sqrt(E)"            # the scores' divisor
    window: bool = False              # a sliding window of W positions
    softcap: str | None = None        # tanh soft-capping of the scores at this value
    count: AttentionCount = "exact"
    dropout: str | None = None        # dropout of the probabilities (GPT-2)
    residual_dropout: str | None = None   # dropout of the output before the residual
    residual_note: str = "resid_pdrop"    # the key behind it, for the comment
    tables: tuple[str, str] = ("cos", "sin")   # the rotary tables (one pair per layer kind)


def attention(d: Declaration, blk: Block, a: Attention, x: str, xn: str, out: str,
              names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")
              ) -> list[str]:
    """Causal self-attention of ``xn`` added to the residual ``x``, into ``out``;
    returns the ops' outputs (for components)."""
    h, k = ("g,r", "g") if a.heads == "g,r" else ("n", "n")
    blk.uses("B", "S", "D", "N", "E", *(("G", "R") if a.heads == "g,r" else ()))
    if a.window:
        blk.uses("W")
    qs, ks = shape_of(h), shape_of(k)
    blk.tensor("W_q", ["D", *qs, "E"], "param", f"query projection ({names[0]})")
    blk.tensor("W_k", ["D", *ks, "E"], "param", f"key projection ({names[1]})")
    blk.tensor("W_v", ["D", *ks, "E"], "param", f"value projection ({names[2]})")
    blk.tensor("W_o", [*qs, "E", "D"], "param", f"output projection ({names[3]})")
    outs: list[str] = []

    def proj(name: str, w: str, letters: str, pos: str, bias: bool, shape: list[str]) -> None:
        stmt = f"{name}[b,{pos},{letters},e] = {xn}[b,{pos},d] {w}[d,{letters},e]"
        if bias:
            b = "b" + w[1:]
            blk.tensor(b, [*shape, "E"], "param", f"bias of the {w} product")
            stmt += f" + {b}[{letters},e]"
        blk.op(stmt)
        outs.append(name)

    proj("Q", "W_q", h, "s", a.bias[0], qs)
    proj("K", "W_k", k, "t", a.bias[1], ks)
    proj("V", "W_v", k, "t", a.bias[2], ks)
    q, kk = "Q", "K"
    if a.qk_norm is not None:
        outs += norm(blk, a.qk_norm, "Qn", "Q", "g_q", f"b,s,{h},e", "e",
                     "each query head normalised over its width (q_norm)")
        outs += norm(blk, a.qk_norm, "Kn", "K", "g_k", f"b,t,{k},e", "e",
                     "and each key head (k_norm)")
        q, kk = "Qn", "Kn"
    if a.rotary:
        cos, sin = a.tables
        blk.tensor(cos, ["S", "E"], "buffer", "rotary table cos(position * frequency), "
                                               "each frequency twice (rotate-half layout)")
        blk.tensor(sin, ["S", "E"], "buffer", "rotary table sin(position * frequency), "
                                               "negative on the first half (rotate-half)")
        blk.tensor("rot", ["E"], "index", "rotate-half partner of each entry: e + E/2 on "
                                          "the first half, e - E/2 on the second")
        blk.op(f"Qr[b,s,{h},e] = {q}[b,s,{h},e] {cos}[s,e] + {q}[b,s,{h},rot[e]] {sin}[s,e]",
               "rotary positions (RoPE, rotate-half): x cos + rotate_half(x) sin, elementwise")
        blk.op(f"Kr[b,t,{k},e] = {kk}[b,t,{k},e] {cos}[t,e] + {kk}[b,t,{k},rot[e]] {sin}[t,e]")
        q, kk = "Qr", "Kr"
        outs += ["Qr", "Kr"]
    outs += mixing(blk, h, k, q, kk, "V", a.scale, a.count, window=a.window,
                   softcap=a.softcap, dropout=a.dropout)
    branch, dropped = residual_target(out, x, a.residual_dropout, "Ya")
    stmt = f"{branch}[b,s,d] = {x}[b,s,d] + O[b,s,{h},e] W_o[{h},e,d]" if x and not dropped \
        else f"{branch}[b,s,d] = O[b,s,{h},e] W_o[{h},e,d]"
    if a.bias[3]:
        blk.tensor("b_o", ["D"], "param", "bias of the output projection")
        stmt += " + b_o[d]"
    blk.op(stmt)
    outs.append(branch)
    if dropped:
        outs.append(dropped_residual(blk, out, x, branch, a.residual_dropout,  # type: ignore[arg-type]
                             a.residual_note))
    return outs


def mixing(blk: Block, h: str, k: str, q: str, kk: str, v: str, scale: str,
           count: AttentionCount, *, window: bool = False, softcap: str | None = None,
           dropout: str | None = None, extra: str = "", extra_note: str = "",
           value: str = "e") -> list[str]:
    """The heart of causal attention, written once for every family: the scores
    ``A = q kk / scale (+ extra)``, soft-capped or not, the masked softmax ``P``,
    dropped out or not, and the mixing ``O = P v`` (its letter ``value``).  The
    two products carry the where-clause under ``count="exact"`` (the pairs
    ``t <= s``, within the window ``s - t < W``), none under ``"full-square"``;
    the softmax always does.  Returns the ops' outputs; A and P are the ops a
    selective recomputation runs again."""
    mask = "where t <= s" + (", s - t < W" if window else "")
    product = "" if count == "full-square" else f" {mask}"
    note = ("both products over the full S x S square, as eager attention runs them; the "
            "softmax masks" if count == "full-square" else
            "causal: the products count only the pairs t <= s"
            + (" within the window" if window else ""))
    blk.op(f"A[b,{h},s,t] = {q}[b,s,{h},e] {kk}[b,t,{k},e] / {scale}{extra}{product}",
           f"scores ({note}{extra_note})")
    outs, scores = ["A"], "A"
    if softcap is not None:
        scores = softcap_op(blk, "A", f"b,{h},s,t", softcap, ("Ad", "At", "Ac"), product,
                            f"soft-capping of the scores at {softcap}: divide, tanh, multiply")
        outs += ["Ad", "At", "Ac"]
    blk.op(f"P[b,{h},s,t] = softmax_t({scores}[b,{h},s,t]) {mask}",
           "the sliding window: key t within W positions of query s" if window else None)
    outs.append("P")
    probs = "P"
    if dropout is not None:
        blk.op(f"Pd[b,{h},s,t] = dropout(P[b,{h},s,t], {dropout}) {mask}",
               "dropout of the probabilities in training (attention_dropout)")
        probs = "Pd"
        outs.append("Pd")
    blk.op(f"O[b,s,{h},{value}] = {probs}[b,{h},s,t] {v}[b,t,{k},{value}]{product}")
    blk.selective.extend(["A", "P"])
    return [*outs, "O"]
