"""The parts of a decoder-only transformer, as declaration text: what
:mod:`symflops.hf.families` compose into a whole model.

Each function adds a part's tensors and ops to a :class:`~symflops.hf.emit.Block`
(an inline block, or the model itself), each op with a comment naming the
Hugging Face module it stands for.  Letters: ``b`` the sequence of the
micro-batch, ``s`` and ``t`` query and key positions, ``d`` the model width,
``n`` a head (``g, r``: a key/value group and a query head within it when
heads are grouped), ``e`` a head's width, ``j`` the MLP's hidden width,
``x`` an expert, ``q`` an expert's slot, ``v`` the vocabulary.

Attention is causal.  Under ``attention="exact"`` its two products are
counted over the S(S+1)/2 pairs ``t <= s`` (within a window of ``W`` when it
has one); under ``"full-square"`` they are written without the where-clause,
over all S^2 pairs, as eager PyTorch runs them (the mask then only zeroes the
probabilities: the softmax keeps it), so that counts match tools and traces
that count the full square.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .emit import Block, Declaration

AttentionCount = Literal["exact", "full-square"]


@dataclass(frozen=True)
class Norm:
    kind: Literal["rmsnorm", "layernorm"]
    bias: bool = False          # LayerNorm's additive bias
    unit_offset: bool = False   # the gain is applied as (1 + g) (Gemma)
    module: str = "norm"        # the Hugging Face module, for the description


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


@dataclass(frozen=True)
class Mlp:
    gated: bool                       # act(gate) * up, then down (SwiGLU / GeGLU)
    activation: str                   # a symflops function name
    bias: bool = False
    width: str = "F"
    residual_dropout: str | None = None   # dropout of the output before the residual
    residual_note: str = "resid_pdrop"    # the key behind it, for the comment


def _residual(out: str, x: str, p: str | None, branch: str) -> tuple[str, bool]:
    """Where a branch writes: ``out`` itself, or (dropped out before the residual
    ``x``) ``branch``, which :func:`_dropped` then adds."""
    if p is None or not x:
        return out, False
    return branch, True


def _dropped(blk: Block, out: str, x: str, branch: str, p: str, note: str) -> str:
    blk.op(f"{out}[b,s,d] = {x}[b,s,d] + dropout({branch}[b,s,d], {p})",
           f"residual dropout ({note})")
    return out


def heads_of(d: Declaration, grouped: bool) -> tuple[str, str]:
    """The letters of the query heads and of the key/value heads."""
    return ("g,r", "g") if grouped else ("n", "n")


def _shape(letters: str) -> list[str]:
    """The dims of a letter list (the letters' upper-case dims)."""
    sizes = {"n": "N", "g": "G", "r": "R", "e": "E", "d": "D", "j": "F", "s": "S", "t": "S",
             "b": "B", "v": "V", "x": "M", "q": "C", "i": "k"}
    return [sizes[x] for x in letters.split(",")]


def norm(blk: Block, n: Norm, out: str, x: str, gain: str, letters: str, over: str,
         comment: str | None = None) -> list[str]:
    """``out = norm_over(x) * gain (+ bias)``, the gain over ``over`` alone; with
    ``unit_offset`` (Gemma) the gain is ``1 + gain``, an op of its own (a sum
    with a tensor is no factor of a product).  Returns the ops' outputs."""
    dim = _shape(over)[0] if over != "e" else "E"
    kind = "RMSNorm" if n.kind == "rmsnorm" else "LayerNorm"
    outs = []
    if n.unit_offset:
        blk.tensor(gain, [dim], "param", f"weight of the {n.module} ({kind}: the gain is "
                                         "1 + weight)")
        g = "c" + gain[1:] if gain.startswith("g") else gain + "_1"
        blk.op(f"{g}[{over}] = 1 + {gain}[{over}]", comment)
        comment = None
        outs.append(g)
    else:
        blk.tensor(gain, [dim], "param", f"gain of the {n.module} ({kind})")
        g = gain
    stmt = f"{out}[{letters}] = {n.kind}_{over}({x}[{letters}]) * {g}[{over}]"
    if n.bias:
        bias = "c" + gain[1:] if gain.startswith("g") else gain + "_bias"
        blk.tensor(bias, [dim], "param", f"bias of the {n.module} (LayerNorm)")
        stmt += f" + {bias}[{over}]"
    blk.op(stmt, comment)
    return [*outs, out]


def softcap_op(blk: Block, x: str, letters: str, cap: str, names: tuple[str, str, str],
            where: str = "", comment: str | None = None) -> str:
    """``cap * tanh(x / cap)`` in three ops (a function takes one tensor), as
    transformers computes it; returns the capped tensor's name."""
    scaled, tanh, capped = names
    blk.op(f"{scaled}[{letters}] = {x}[{letters}] / {cap}{where}", comment)
    blk.op(f"{tanh}[{letters}] = tanh({scaled}[{letters}]){where}")
    blk.op(f"{capped}[{letters}] = {cap} * {tanh}[{letters}]{where}")
    return capped


def attention(d: Declaration, blk: Block, a: Attention, x: str, xn: str, out: str,
              names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")
              ) -> list[str]:
    """Causal self-attention of ``xn`` added to the residual ``x``, into ``out``;
    returns the ops' outputs (for components)."""
    h, k = ("g,r", "g") if a.heads == "g,r" else ("n", "n")
    blk.uses("B", "S", "D", "N", "E", *(("G", "R") if a.heads == "g,r" else ()))
    if a.window:
        blk.uses("W")
    qs, ks = _shape(h), _shape(k)
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
    branch, dropped = _residual(out, x, a.residual_dropout, "Ya")
    stmt = f"{branch}[b,s,d] = {x}[b,s,d] + O[b,s,{h},e] W_o[{h},e,d]" if x and not dropped \
        else f"{branch}[b,s,d] = O[b,s,{h},e] W_o[{h},e,d]"
    if a.bias[3]:
        blk.tensor("b_o", ["D"], "param", "bias of the output projection")
        stmt += " + b_o[d]"
    blk.op(stmt)
    outs.append(branch)
    if dropped:
        outs.append(_dropped(blk, out, x, branch, a.residual_dropout,  # type: ignore[arg-type]
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


def mlp(blk: Block, m: Mlp, x: str, xn: str, out: str,
        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> list[str]:
    """An MLP of ``xn`` added to the residual ``x`` (none: ``""``), into ``out``."""
    blk.uses("B", "S", "D", m.width)
    f = m.width

    def bias(w: str, dim: str, letter: str) -> str:
        if not m.bias:
            return ""
        b = "b" + w[1:]
        blk.tensor(b, [dim], "param", f"bias of the {w} product")
        return f" + {b}[{letter}]"

    final, dropped = _residual(out, x, m.residual_dropout, "Ym")
    res = f"{x}[b,s,d] + " if x and not dropped else ""
    last = out
    out = final

    def tail() -> list[str]:  # after the branch's ops
        return ([_dropped(blk, last, x, final, m.residual_dropout,  # type: ignore[arg-type]
                          m.residual_note)] if dropped else [])
    if m.gated:
        blk.tensor("W_gate", ["D", f], "param", f"gate projection ({names[0]})")
        blk.tensor("W_up", ["D", f], "param", f"up-projection ({names[1]})")
        blk.tensor("W_down", [f, "D"], "param", f"down-projection ({names[2]})")
        blk.op(f"U[b,s,j] = {xn}[b,s,d] W_gate[d,j]{bias('W_gate', f, 'j')}")
        blk.op(f"H[b,s,j] = {xn}[b,s,d] W_up[d,j]{bias('W_up', f, 'j')}")
        blk.op(f"M[b,s,j] = {m.activation}(U[b,s,j]) * H[b,s,j]")
        blk.op(f"{out}[b,s,d] = {res}M[b,s,j] W_down[j,d]{bias('W_down', 'D', 'd')}")
        return ["U", "H", "M", out, *tail()]
    blk.tensor("W_in", ["D", f], "param", f"up-projection ({names[1]})")
    blk.tensor("W_out", [f, "D"], "param", f"down-projection ({names[2]})")
    blk.op(f"H[b,s,j] = {xn}[b,s,d] W_in[d,j]{bias('W_in', f, 'j')}")
    blk.op(f"M[b,s,j] = {m.activation}(H[b,s,j])")
    blk.op(f"{out}[b,s,d] = {res}M[b,s,j] W_out[j,d]{bias('W_out', 'D', 'd')}")
    return ["H", "M", out, *tail()]


def model_head(d: Declaration, final: Norm, tied: bool, tied_key: str,
               cap: str | None = None, head_module: str = "lm_head") -> None:
    """The final norm, the unembedding (tied: the token embedding's transpose)
    and the mean cross-entropy over the B S next tokens."""
    m = d.model
    final_outs = norm(m, final, "Xf", "XL", "g_f", "b,s,d", "d", "the final norm")
    if tied:
        m.op("Z[b,s,v] = Xf[b,s,d] W_E[v,d]", f"logits; the unembedding is the token "
                                              f"embedding ({tied_key}: true)")
    else:
        m.tensor("W_U", ["D", "V"], "param", f"unembedding ({head_module}; {tied_key}: false)")
        m.op("Z[b,s,v] = Xf[b,s,d] W_U[d,v]", "logits")
    logits = "Z"
    if cap is not None:
        logits = softcap_op(m, "Z", "b,s,v", cap, ("Zd", "Zt", "Zc"), "",
                         f"soft-capping of the logits at {cap}")
    m.op(f"Loss[] = cross_entropy_mean_v({logits}[b,s,v], y[b,s])",
         "mean cross-entropy of the next token at every position")
    m.component("final norm", final_outs)
    m.component("output head", ["Z", *(["Zd", "Zt", "Zc"] if cap else [])])
    m.component("loss", ["Loss"])


def rotary_embedding(d: Declaration, note: str = "") -> None:
    """The inputs, and ``X0``: the token embedding (``embed_tokens``) of a model
    whose positions are rotary (no parameter)."""
    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_tokens)")
    m.op("X0[b,s,d] = W_E[tok[b,s], d]", "token embedding (rotary positions add no parameter"
                                         + (f"; {note}" if note else "") + ")")
    m.component("embedding", ["X0"])


def embedding(d: Declaration, rhs: str, comment: str, p: str | None = None,
              pre: str = "X0e", dropout_comment: str = "", plain: str | None = None) -> None:
    """``X0[b,s,d] = rhs`` (the embeddings' sum), dropped out with probability ``p``
    through ``pre`` when it is given; ``plain``: the comment without dropout, when
    it differs from ``comment``."""
    m = d.model
    if p is None:
        m.op(f"X0[b,s,d] = {rhs}", comment if plain is None else plain)
        m.component("embedding", ["X0"])
        return
    m.op(f"{pre}[b,s,d] = {rhs}", comment)
    m.op(f"X0[b,s,d] = dropout({pre}[b,s,d], {p})", dropout_comment)
    m.component("embedding", [pre, "X0"])


def token_inputs(d: Declaration) -> None:
    m = d.model
    m.tensor("tok", ["B", "S"], "index", "input token ids, integers in [0, V)")
    m.tensor("y", ["B", "S"], "index", "the next token at each position (targets)")
