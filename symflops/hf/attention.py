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
from typing import Literal

from .emit import Block, Declaration
from .parts import AttentionCount, Norm, dropped_residual, norm, residual_target, shape_of, \
    softcap_op


@dataclass(frozen=True)
class Attention:
    heads: str                        # "n" (every head its own key/value) or "g,r" (grouped)
    bias: tuple[bool, bool, bool, bool] = (False, False, False, False)   # q, k, v, o
    qk_norm: Norm | None = None       # a norm of the queries and keys (Qwen3, Gemma 3, OLMo 2)
    #: what the q/k norm's statistics run over: each head's E entries, or all the heads'
    #: entries of a position together (OLMo 2, OLMoE, MiniMax-M2: q_norm of N E entries)
    qk_norm_over: Literal["head", "all"] = "head"
    #: its gain: one of E entries shared by the heads, or one per head (Cohere, N x E)
    qk_norm_gain: Literal["shared", "per-head"] = "shared"
    qk_norm_after_rotary: bool = False   # the norm after the rotation (Llama 4)
    rotary: bool = True               # RoPE (buffers); False: no position signal (NoPE layers)
    #: only the first E_r entries of a head rotated, the E_p others passed through
    #: (partial_rotary_factor: dims E_r, E_p, E = E_r + E_p; see families.common)
    partial: bool = False
    interleaved: bool = False         # the rotation pairs entries 2i, 2i+1 (not the halves)
    scale: str = "sqrt(E)"            # the scores' divisor
    multiplier: str | None = None     # instead: the scores times this (Granite)
    query_scale: str | None = None    # a buffer per position the queries are scaled by
    window: bool = False              # a sliding window of W positions
    chunked: bool = False             # chunks of C positions (Llama 4), causal inside
    sinks: bool = False               # a learned logit per head in the softmax (gpt-oss)
    softcap: str | None = None        # tanh soft-capping of the scores at this value
    count: AttentionCount = "exact"
    dropout: str | None = None        # dropout of the probabilities (GPT-2)
    residual_dropout: str | None = None   # dropout of the output before the residual
    residual_note: str = "resid_pdrop"    # the key behind it, for the comment
    residual_scale: str | None = None     # the output times this before the residual
    tables: tuple[str, str] = ("cos", "sin")   # the rotary tables (one pair per layer kind)
    #: the output gated per entry by sigmoid(a second query projection) before o_proj
    #: (Qwen3-Next, Qwen3.5: q_proj gives each head's query and its gate)
    output_gate: bool = False


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
    if a.qk_norm is not None and not a.qk_norm_after_rotary:
        q, kk = _qk_norm(blk, a, h, k, q, kk, outs)
    if a.rotary:
        q, kk = _rotary(blk, a, h, k, q, kk, outs)
    if a.qk_norm is not None and a.qk_norm_after_rotary:
        q, kk = _qk_norm(blk, a, h, k, q, kk, outs)
    if a.query_scale is not None:
        blk.tensor(a.query_scale, ["S"], "buffer", "attention temperature of each position "
                                                   "(attn_temperature_tuning): 1 + attn_scale "
                                                   "log1p(floor((s + 1) / floor_scale))")
        blk.op(f"Qt[b,s,{h},e] = {q}[b,s,{h},e] {a.query_scale}[s]",
               "the queries scaled per position (a buffer: attention temperature tuning)")
        q = "Qt"
        outs.append("Qt")
    outs += mixing(blk, h, k, q, kk, "V", a.scale, a.count, window=a.window,
                   softcap=a.softcap, dropout=a.dropout, multiplier=a.multiplier,
                   sinks="snk" if a.sinks else None, chunked=a.chunked)
    if a.sinks:
        blk.tensor("snk", qs, "param", "the sinks: a learned logit per head, one more term "
                                       "of each softmax's denominator (sinks)")
    o = "O"
    if a.output_gate:
        o = _output_gate(blk, a, h, xn, qs, names[0], outs)
    branch, dropped = residual_target(out, x, a.residual_dropout, "Ya")
    m = f"{a.residual_scale} " if a.residual_scale else ""
    stmt = f"{branch}[b,s,d] = {x}[b,s,d] + {m}{o}[b,s,{h},e] W_o[{h},e,d]" \
        if x and not dropped else f"{branch}[b,s,d] = {m}{o}[b,s,{h},e] W_o[{h},e,d]"
    if a.bias[3]:
        blk.tensor("b_o", ["D"], "param", "bias of the output projection")
        stmt += f" + {m}b_o[d]"
    blk.op(stmt, f"the output projection times residual_multiplier ({a.residual_scale}), then "
                 "the residual" if a.residual_scale else None)
    outs.append(branch)
    if dropped:
        outs.append(dropped_residual(  # type: ignore[arg-type]
            blk, out, x, branch, a.residual_dropout, a.residual_note))
    return outs


def _output_gate(blk: Block, a: Attention, h: str, xn: str, qs: list[str], module: str,
                 outs: list[str]) -> str:
    """The attention's output times sigmoid(its gate), the gate a second query
    projection (q_proj's second half of each head's rows); returns the gated output."""
    blk.tensor("W_qg", ["D", *qs, "E"], "param", f"the output gate's projection ({module}, "
                                                 "the second half of each head's rows)")
    stmt = f"Qg[b,s,{h},e] = {xn}[b,s,d] W_qg[d,{h},e]"
    if a.bias[0]:
        blk.tensor("b_qg", [*qs, "E"], "param", f"bias of the W_qg product ({module})")
        stmt += f" + b_qg[{h},e]"
    blk.op(stmt, "the output gate: each entry of the attention's output times sigmoid(gate), "
                 "before o_proj")
    blk.op(f"Og[b,s,{h},e] = sigmoid(Qg[b,s,{h},e]) * O[b,s,{h},e]")
    outs += ["Qg", "Og"]
    return "Og"


def _qk_norm(blk: Block, a: Attention, h: str, k: str, q: str, kk: str,
             outs: list[str]) -> tuple[str, str]:
    """The norms of the queries and keys (q_norm, k_norm): each head over its E
    entries, or every head of a position together; their gains shared by the
    heads, per head, or none (an L2 norm)."""
    n = a.qk_norm
    assert n is not None
    whole = a.qk_norm_over == "all"
    qo, ko = (f"{h},e", f"{k},e") if whole else ("e", "e")
    qg, kg = (f"{h},e", f"{k},e") if whole or a.qk_norm_gain == "per-head" else (None, None)
    what = ("the queries normalised over all the heads' entries of a position together "
            "(q_norm of N E entries)" if whole else
            "each query head normalised over its width (q_norm)")
    if a.qk_norm_gain == "per-head":
        what += ", each head its own gain"
    if not n.affine:
        what += ", no gain"
    outs += norm(blk, n, "Qn", q, "g_q", f"b,s,{h},e", qo, what, qg)
    outs += norm(blk, n, "Kn", kk, "g_k", f"b,t,{k},e", ko,
                 "and the keys (k_norm)" if whole else "and each key head (k_norm)", kg)
    return "Qn", "Kn"


def _rotary(blk: Block, a: Attention, h: str, k: str, q: str, kk: str,
            outs: list[str]) -> tuple[str, str]:
    """Rotary positions: ``x cos + partner(x) sin``, elementwise, on the whole head
    or (partial) on its first E_r entries, the E_p others passed through and joined."""
    cos, sin = a.tables
    width = "E_r" if a.partial else "E"
    e = "u" if a.partial else "e"
    each = "each rotated entry" if a.partial else "each entry"
    pair = (f"the neighbour of {each}: {e} + 1 for even {e}, {e} - 1 for odd {e} (pairs 2i, "
            "2i+1)" if a.interleaved else
            f"rotate-half partner of {each}: {e} + {width}/2 on the first half, "
            f"{e} - {width}/2 on the second")
    layout = "interleaved pairs" if a.interleaved else "rotate-half layout"
    blk.tensor(cos, ["S", width], "buffer", "rotary table cos(position * frequency)"
               + (" of the rotated entries" if a.partial else "")
               + f", each frequency twice ({layout})")
    blk.tensor(sin, ["S", width], "buffer", "rotary table sin(position * frequency)"
               + (" of the rotated entries" if a.partial else "")
               + (", negative on the even entries" if a.interleaved
                  else ", negative on the first half (rotate-half)"))
    blk.tensor("rot", [width], "index", pair)
    note = ("rotary positions (RoPE, interleaved pairs): x cos + swap_pairs(x) sin, "
            "elementwise" if a.interleaved else
            "rotary positions (RoPE, rotate-half): x cos + rotate_half(x) sin, elementwise")
    if not a.partial:
        blk.op(f"Qr[b,s,{h},e] = {q}[b,s,{h},e] {cos}[s,e] + {q}[b,s,{h},rot[e]] {sin}[s,e]",
               note)
        blk.op(f"Kr[b,t,{k},e] = {kk}[b,t,{k},e] {cos}[t,e] + {kk}[b,t,{k},rot[e]] "
               f"{sin}[t,e]")
        outs += ["Qr", "Kr"]
        return "Qr", "Kr"
    blk.uses("E_r", "E_p")
    blk.tensor("lo", ["E_r"], "index", "the rotated entries of a head: 0 .. E_r - 1")
    blk.tensor("hi", ["E_p"], "index", "the entries passed through: E_r .. E - 1")
    for x, src, pos, heads in (("Q", q, "s", h), ("K", kk, "t", k)):
        blk.op(f"{x}a[b,{pos},{heads},u] = {src}[b,{pos},{heads},lo[u]] {cos}[{pos},u] + "
               f"{src}[b,{pos},{heads},rot[u]] {sin}[{pos},u]",
               note + "\npartial_rotary_factor: the first E_r entries rotated, the E_p others "
                      "passed through, then joined" if x == "Q" else "and the keys")
        blk.op(f"{x}b[b,{pos},{heads},w] = {src}[b,{pos},{heads},hi[w]]")
        blk.op(f"{x}r[b,{pos},{heads},e] = concat_e({x}a[b,{pos},{heads},u], "
               f"{x}b[b,{pos},{heads},w])")
    outs += ["Qa", "Qb", "Qr", "Ka", "Kb", "Kr"]
    return "Qr", "Kr"


def mixing(blk: Block, h: str, k: str, q: str, kk: str, v: str, scale: str,
           count: AttentionCount, *, window: bool = False, softcap: str | None = None,
           dropout: str | None = None, extra: str = "", extra_note: str = "",
           value: str = "e", multiplier: str | None = None, sinks: str | None = None,
           chunked: bool = False) -> list[str]:
    """The heart of causal attention, written once for every family: the scores
    ``A = q kk / scale (+ extra)`` (or ``multiplier q kk``), soft-capped or not,
    the masked softmax ``P`` (with ``sinks``: one more logit per head in each
    denominator), dropped out or not, and the mixing ``O = P v`` (its letter
    ``value``).  The two products carry the where-clause under ``count="exact"``
    (the pairs ``t <= s``, within the window ``s - t < W``), none under
    ``"full-square"``; the softmax always does.  A chunked layer (``chunked``)
    is written over the full square with its mask a buffer added to the scores
    (:func:`_chunked`).  Returns the ops' outputs; A and P (and the sinks'
    exponentials and sums) are the ops a selective recomputation runs again."""
    if chunked:
        return _chunked(blk, h, k, q, kk, v, scale, count, multiplier)
    mask = "where t <= s" + (", s - t < W" if window else "")
    product = "" if count == "full-square" else f" {mask}"
    note = ("both products over the full S x S square, as eager attention runs them; the "
            "softmax masks" if count == "full-square" else
            "causal: the products count only the pairs t <= s"
            + (" within the window" if window else ""))
    factor, divisor = _scaling(scale, multiplier)
    blk.op(f"A[b,{h},s,t] = {factor}{q}[b,s,{h},e] {kk}[b,t,{k},e]{divisor}{extra}{product}",
           f"scores ({note}{extra_note}" + (f"; times attention_multiplier {multiplier}"
                                            if multiplier else "") + ")")
    outs, scores = ["A"], "A"
    if softcap is not None:
        scores = softcap_op(blk, "A", f"b,{h},s,t", softcap, ("Ad", "At", "Ac"), product,
                            f"soft-capping of the scores at {softcap}: divide, tanh, multiply")
        outs += ["Ad", "At", "Ac"]
    window_note = "the sliding window: key t within W positions of query s" if window else None
    if sinks is None:
        blk.op(f"P[b,{h},s,t] = softmax_t({scores}[b,{h},s,t]) {mask}", window_note)
        outs.append("P")
        blk.selective.extend(["A", "P"])
    else:
        blk.op(f"Ex[b,{h},s,t] = exp({scores}[b,{h},s,t]) {mask}",
               "the softmax with a sink: exp(A) / (sum of exp(A) over the keys + exp(sink)), "
               "the sink a learned logit\nper head (attention sinks; transformers appends it "
               "as a column of the scores and drops it after the softmax)"
               + (f"; {window_note}" if window_note else ""))
        blk.op(f"Sk[b,{h},s] = Ex[b,{h},s,t] {mask}")
        blk.op(f"Es[{h}] = exp({sinks}[{h}])")
        blk.op(f"Sd[b,{h},s] = Sk[b,{h},s] + Es[{h}]")
        blk.op(f"P[b,{h},s,t] = Ex[b,{h},s,t] / Sd[b,{h},s] {mask}")
        outs += ["Ex", "Sk", "Es", "Sd", "P"]
        blk.selective.extend(["A", "Ex", "Sk", "Sd", "P"])
    probs = "P"
    if dropout is not None:
        blk.op(f"Pd[b,{h},s,t] = dropout(P[b,{h},s,t], {dropout}) {mask}",
               "dropout of the probabilities in training (attention_dropout)")
        probs = "Pd"
        outs.append("Pd")
    blk.op(f"O[b,s,{h},{value}] = {probs}[b,{h},s,t] {v}[b,t,{k},{value}]{product}")
    return [*outs, "O"]


def _scaling(scale: str, multiplier: str | None) -> tuple[str, str]:
    """The scores' constant as written: a multiplier in front, or a divisor after."""
    return (f"{multiplier} ", "") if multiplier else ("", f" / {scale}")


def _chunked(blk: Block, h: str, k: str, q: str, kk: str, v: str, scale: str,
             count: AttentionCount, multiplier: str | None) -> list[str]:
    """Chunked causal attention (Llama 4's chunked_attention layers): a query sees
    the keys of its own chunk of C positions, up to itself.  The chunk is not an
    affine condition on (s, t), so under ``full-square`` the mask is written as
    eager attention applies it: a buffer of S x S entries (0 inside the query's
    chunk at or before it, minus infinity elsewhere) added to the scores, the
    softmax over every key; under ``exact`` the positions are viewed as (chunk,
    offset) pairs (:func:`_chunked_exact`)."""
    if count == "exact":
        return _chunked_exact(blk, h, k, q, kk, v, scale, multiplier)
    blk.uses("C")
    blk.tensor("Mch", ["S", "S"], "buffer", "the chunked causal mask (create_chunked_causal_mask): "
                                            "0 where key t is in query s's chunk of C "
                                            "positions and t <= s, minus infinity elsewhere")
    factor, divisor = _scaling(scale, multiplier)
    blk.op(f"A[b,{h},s,t] = {factor}{q}[b,s,{h},e] {kk}[b,t,{k},e]{divisor} + Mch[s,t]",
           "scores over the full S x S square, as eager attention runs them, plus the chunk "
           "mask (a query sees\nthe keys of its own chunk of C positions up to itself: not an "
           "affine condition on s and t, so the mask is\nthe buffer eager attention adds)")
    blk.op(f"P[b,{h},s,t] = softmax_t(A[b,{h},s,t])",
           "the softmax over every key (the masked ones add exp(-inf) = 0)")
    blk.op(f"O[b,s,{h},e] = P[b,{h},s,t] {v}[b,t,{k},e]")
    blk.selective.extend(["A", "P"])
    return ["A", "P", "O"]


def _chunked_exact(blk: Block, h: str, k: str, q: str, kk: str, v: str, scale: str,
                   multiplier: str | None) -> list[str]:
    """Chunked causal attention counted exactly: the positions viewed as (chunk c,
    offset u) pairs, ``s = C c + u`` (a view: no FLOP; ``Nc = S / C`` chunks, which
    must be whole), causal inside a chunk (``w <= u``: ``Nc C (C + 1) / 2`` pairs),
    nothing across chunks; the output viewed back as positions."""
    blk.uses("C", "Nc")
    factor, divisor = _scaling(scale, multiplier)
    blk.op(f"Qc[b,c,u,{h},e] = {q}[b,C*c+u,{h},e]",
           "chunked attention, exactly: position s = C c + u viewed as (chunk c, offset u) "
           "(Nc = S / C chunks: S must be a\nmultiple of C); a query sees the keys of its own "
           "chunk up to itself, Nc C (C + 1) / 2 pairs")
    blk.op(f"Kc[b,c,w,{k},e] = {kk}[b,C*c+w,{k},e]")
    blk.op(f"Vc[b,c,w,{k},e] = {v}[b,C*c+w,{k},e]")
    blk.op(f"A[b,{h},c,u,w] = {factor}Qc[b,c,u,{h},e] Kc[b,c,w,{k},e]{divisor} where w <= u")
    blk.op(f"P[b,{h},c,u,w] = softmax_w(A[b,{h},c,u,w]) where w <= u")
    blk.op(f"Oc[b,c,u,{h},e] = P[b,{h},c,u,w] Vc[b,c,w,{k},e] where w <= u")
    blk.op(f"O[b,C*c+u,{h},e] = Oc[b,c,u,{h},e]", "back to positions (a view)")
    blk.selective.extend(["A", "P"])
    return ["Qc", "Kc", "Vc", "A", "P", "Oc", "O"]
