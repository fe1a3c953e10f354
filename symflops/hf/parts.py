"""The parts of a decoder-only transformer, as declaration text: what
:mod:`symflops.hf.families` compose into a whole model.

Each function adds a part's tensors and ops to a :class:`~symflops.hf.emit.Block`
(an inline block, or the model itself), each op with a comment naming the
Hugging Face module it stands for.  Letters: ``b`` the sequence of the
micro-batch, ``s`` and ``t`` query and key positions, ``d`` the model width,
``n`` a head (``g, r``: a key/value group and a query head within it when
heads are grouped), ``e`` a head's width, ``j`` the MLP's hidden width,
``x`` an expert, ``q`` an expert's slot, ``v`` the vocabulary.

Attention is in :mod:`symflops.hf.attention`, routed experts in
:mod:`symflops.hf.experts`.
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
    affine: bool = True         # False: no gain (Llama 4's L2 norm of the queries and keys)


@dataclass(frozen=True)
class Mlp:
    gated: bool                       # act(gate) * up, then down (SwiGLU / GeGLU)
    activation: str                   # a symflops function name
    bias: bool = False
    width: str = "F"
    residual_dropout: str | None = None   # dropout of the output before the residual
    residual_note: str = "resid_pdrop"    # the key behind it, for the comment
    residual_scale: str | None = None     # the output times this before the residual


def residual_target(out: str, x: str, p: str | None, branch: str) -> tuple[str, bool]:
    """Where a branch writes: ``out`` itself, or (dropped out before the residual
    ``x``) ``branch``, which :func:`dropped_residual` then adds."""
    if p is None or not x:
        return out, False
    return branch, True


def dropped_residual(blk: Block, out: str, x: str, branch: str, p: str, note: str) -> str:
    blk.op(f"{out}[b,s,d] = {x}[b,s,d] + dropout({branch}[b,s,d], {p})",
           f"residual dropout ({note})")
    return out


def heads_of(d: Declaration, grouped: bool) -> tuple[str, str]:
    """The letters of the query heads and of the key/value heads."""
    return ("g,r", "g") if grouped else ("n", "n")


def shape_of(letters: str) -> list[str]:
    """The dims of a letter list (the letters' upper-case dims)."""
    sizes = {"n": "N", "g": "G", "r": "R", "e": "E", "d": "D", "j": "F", "s": "S", "t": "S",
             "b": "B", "v": "V", "x": "M", "q": "C", "i": "k"}
    return [sizes[x] for x in letters.split(",")]


def norm(blk: Block, n: Norm, out: str, x: str, gain: str, letters: str, over: str,
         comment: str | None = None, gain_over: str | None = None) -> list[str]:
    """``out = norm_over(x) * gain (+ bias)``: the statistics over the letter ``over``
    (or several, ``"g,r,e"``: joint), the gain over ``gain_over`` (default ``over``;
    Cohere's per-head gains are over ``"n,e"`` while each head is normalised over
    ``"e"``); with ``unit_offset`` (Gemma) the gain is ``1 + gain``, an op of its own
    (a sum with a tensor is no factor of a product); without ``affine``, no gain.
    Returns the ops' outputs."""
    g_over = gain_over or over
    dims = shape_of(g_over)
    kind = "RMSNorm" if n.kind == "rmsnorm" else "LayerNorm"
    call = f"{n.kind}_{over}" if "," not in over else f"{n.kind}_{{{over}}}"
    if not n.affine:
        blk.op(f"{out}[{letters}] = {call}({x}[{letters}])", comment)
        return [out]
    outs = []
    if n.unit_offset:
        blk.tensor(gain, dims, "param", f"weight of the {n.module} ({kind}: the gain is "
                                        "1 + weight)")
        g = "c" + gain[1:] if gain.startswith("g") else gain + "_1"
        blk.op(f"{g}[{g_over}] = 1 + {gain}[{g_over}]", comment)
        comment = None
        outs.append(g)
    else:
        blk.tensor(gain, dims, "param", f"gain of the {n.module} ({kind})")
        g = gain
    stmt = f"{out}[{letters}] = {call}({x}[{letters}]) * {g}[{g_over}]"
    if n.bias:
        bias = "c" + gain[1:] if gain.startswith("g") else gain + "_bias"
        blk.tensor(bias, dims, "param", f"bias of the {n.module} (LayerNorm)")
        stmt += f" + {bias}[{g_over}]"
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
        scaled = f"{m.residual_scale} " if m.residual_scale and dim == "D" else ""
        return f" + {scaled}{b}[{letter}]"

    final, dropped = residual_target(out, x, m.residual_dropout, "Ym")
    res = f"{x}[b,s,d] + " if x and not dropped else ""
    if m.residual_scale:
        res += f"{m.residual_scale} "
    last = out
    out = final

    def tail() -> list[str]:  # after the branch's ops
        return ([dropped_residual(blk, last, x, final, m.residual_dropout,  # type: ignore[arg-type]
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
               cap: str | None = None, head_module: str = "lm_head", bias: bool = False,
               scale: tuple[str, str, str] | None = None) -> None:
    """The final norm, the unembedding (tied: the token embedding's transpose;
    ``bias``: lm_head's bias), the logits scaled (``scale``: ``("*", value, key)``
    or ``("/", value, key)``, Cohere's logit_scale, Granite's logits_scaling) or
    soft-capped, and the mean cross-entropy over the B S next tokens."""
    m = d.model
    final_outs = norm(m, final, "Xf", "XL", "g_f", "b,s,d", "d", "the final norm")
    plus = ""
    if bias:
        m.tensor("b_U", ["V"], "param", f"bias of the unembedding ({head_module})")
        plus = " + b_U[v]"
    if tied:
        m.op(f"Z[b,s,v] = Xf[b,s,d] W_E[v,d]{plus}", f"logits; the unembedding is the token "
                                                     f"embedding ({tied_key}: true)")
    else:
        m.tensor("W_U", ["D", "V"], "param", f"unembedding ({head_module}; {tied_key}: false)")
        m.op(f"Z[b,s,v] = Xf[b,s,d] W_U[d,v]{plus}", "logits")
    logits, head = "Z", ["Z"]
    if scale is not None:
        how, value, key = scale
        m.op(f"Zs[b,s,v] = Z[b,s,v] / {value}" if how == "/" else
             f"Zs[b,s,v] = {value} Z[b,s,v]",
             f"the logits {'divided by' if how == '/' else 'times'} {key} ({value})")
        logits = "Zs"
        head.append("Zs")
    if cap is not None:
        logits = softcap_op(m, logits, "b,s,v", cap, ("Zd", "Zt", "Zc"), "",
                            f"soft-capping of the logits at {cap}")
        head += ["Zd", "Zt", "Zc"]
    m.op(f"Loss[] = cross_entropy_mean_v({logits}[b,s,v], y[b,s])",
         "mean cross-entropy of the next token at every position")
    m.component("final norm", final_outs)
    m.component("output head", head)
    m.component("loss", ["Loss"])


def rotary_embedding(d: Declaration, note: str = "", scale: str | None = None) -> None:
    """The inputs, and ``X0``: the token embedding (``embed_tokens``) of a model
    whose positions are rotary (no parameter); ``scale``: a constant it is
    multiplied by (Granite's embedding_multiplier)."""
    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_tokens)")
    m.op("X0[b,s,d] = W_E[tok[b,s], d]" + (f" * {scale}" if scale else ""),
         "token embedding" + (f" times embedding_multiplier ({scale})" if scale else "")
         + " (rotary positions add no parameter" + (f"; {note}" if note else "") + ")")
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
