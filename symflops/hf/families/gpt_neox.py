"""GPT-NeoX / Pythia (``gpt_neox``, GPTNeoXForCausalLM).

Each block: LayerNorm (with bias), causal multi-head attention from one fused
``query_key_value`` Linear with partial rotary positions, ``dense``; an MLP
``dense_h_to_4h``, activation, ``dense_4h_to_h`` (always biased). What
changes a count:

* ``use_parallel_residual`` (default true): ``Y = X + attn(LN1(X)) +
  mlp(LN2(X))``; false: ``Y1 = X + attn(LN1(X))``, ``Y = Y1 + mlp(LN2(Y1))``;
* ``rotary_pct`` (default 0.25; ``partial_rotary_factor`` of
  ``rope_parameters`` / ``rope_scaling`` wins when given): the rotated
  entries of each head, ``2 ceil(int(E * factor) / 2)`` (the rotary tables are
  buffers, the rotation elementwise), the rest passed through;
* ``attention_bias`` (default true): biases of ``query_key_value`` and ``dense``;
* ``tie_word_embeddings`` (default false): ``lm_head`` (``embed_out``) its own
  ``[V, D]`` parameter or the token embedding;
* ``hidden_dropout`` and ``attention_dropout`` (default 0): a positive value
  adds dropout (the embedding, the attention and MLP outputs; the
  probabilities) with its saved masks;
* ``hidden_size``, ``num_attention_heads``, ``intermediate_size``,
  ``num_hidden_layers``, ``vocab_size``, ``hidden_act``.

The fused ``query_key_value`` (per head ``[3, E]``: q, k, v) is declared as
its parts, split at the rotary boundary: a declaration cannot slice one
tensor at a constant index, and the parts have the same parameters and the
same matrix products (``2 T D 3D`` forward, as much for each of ``dW`` and
``dX``).

:func:`_attention` (also used by :mod:`.falcon`) is the attention of
:func:`symflops.hf.attention.attention` with partial rotary and ALiBi added.
"""

from __future__ import annotations

import math

from ..attention import mixing
from ..config import BY_HAND, Config
from ..emit import Block, Declaration
from ..parts import AttentionCount, Mlp, Norm, embedding, mlp, model_head, norm, token_inputs
from .common import Family, Options, dropout, layer_count, model_base

READ = frozenset(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "use_parallel_residual", "attention_bias",
                  "tie_word_embeddings", "rotary_pct", "rope_parameters", "rope_scaling",
                  "attention_dropout", "hidden_dropout", "max_position_embeddings"))
#: rotary_emb_base and rope_theta: the rotary frequencies (the tables' values, not their
#: shape); layer_norm_eps: numerics; classifier_dropout: only the token-classification
#: head's dropout, not the causal LM's.
IGNORED = frozenset(("rotary_emb_base", "rope_theta", "layer_norm_eps", "classifier_dropout"))




def _attention(blk: Block, *, heads: str, bias: bool, rotary: str | None, count: AttentionCount,
               xn: str, out: str, names: tuple[str, str], dropout: str | None = None,
               alibi: bool = False) -> list[str]:
    """Causal self-attention of ``xn`` into ``out`` (no residual).

    ``heads``: ``"n"`` (a key and value per head) or ``"g,r"`` (G key/value
    heads, R query heads each); ``bias``: on q, k, v and the output;
    ``rotary``: None, ``"full"`` (rotate-half over the head width E) or
    ``"partial"`` (over the first U entries of a head; the other Ep are
    passed through, E = U + Ep); ``alibi``: a bias buffer added to the scores;
    ``dropout``: of the probabilities. ``names``: the fused projection's and
    the output projection's modules, for the descriptions."""
    h, k = ("g,r", "g") if heads == "g,r" else ("n", "n")
    qs, ks = (["G", "R"], ["G"]) if heads == "g,r" else (["N"], ["N"])
    blk.uses("B", "S", "D", "N", "E", *(["G", "R"] if heads == "g,r" else []))
    fused, dense = names
    outs: list[str] = []

    def proj(name: str, what: str, letters: str, pos: str, shape: list[str], width: str,
             e: str) -> None:
        w, b = f"W_{name.lower()}", f"b_{name.lower()}"
        blk.tensor(w, ["D", *shape, width], "param", f"{fused}, the {what} rows")
        stmt = f"{name}[b,{pos},{letters},{e}] = {xn}[b,{pos},d] {w}[d,{letters},{e}]"
        if bias:
            blk.tensor(b, [*shape, width], "param", f"{fused} bias, the {what} rows")
            stmt += f" + {b}[{letters},{e}]"
        blk.op(stmt)
        outs.append(name)

    if rotary == "partial":
        blk.uses("U", "Ep")
        proj("Qr", "query (rotated)", h, "s", qs, "U", "u")
        proj("Qp", "query (passed through)", h, "s", qs, "Ep", "p")
        proj("Kr", "key (rotated)", k, "t", ks, "U", "u")
        proj("Kp", "key (passed through)", k, "t", ks, "Ep", "p")
    else:
        proj("Q", "query", h, "s", qs, "E", "e")
        proj("K", "key", k, "t", ks, "E", "e")
    proj("V", "value", k, "t", ks, "E", "e")
    q, kk = "Q", "K"
    if rotary is not None:
        width, e = ("U", "u") if rotary == "partial" else ("E", "e")
        src_q, src_k = ("Qr", "Kr") if rotary == "partial" else ("Q", "K")
        blk.tensor("cos", ["S", width], "buffer", "rotary table cos(position * frequency), "
                                                   "each frequency twice (rotate-half layout)")
        blk.tensor("sin", ["S", width], "buffer", "rotary table sin(position * frequency), "
                                                   "negative on the first half (rotate-half)")
        blk.tensor("rot", [width], "index", f"rotate-half partner of each entry: +{width}/2 on "
                                            f"the first half, -{width}/2 on the second")
        blk.op(f"Qa[b,s,{h},{e}] = {src_q}[b,s,{h},{e}] cos[s,{e}] + "
               f"{src_q}[b,s,{h},rot[{e}]] sin[s,{e}]",
               "rotary positions (RoPE, rotate-half): x cos + rotate_half(x) sin, elementwise"
               + (" (the first U entries of each head)" if rotary == "partial" else ""))
        blk.op(f"Ka[b,t,{k},{e}] = {src_k}[b,t,{k},{e}] cos[t,{e}] + "
               f"{src_k}[b,t,{k},rot[{e}]] sin[t,{e}]")
        q, kk = "Qa", "Ka"
        outs += ["Qa", "Ka"]
        if rotary == "partial":
            blk.op(f"Qe[b,s,{h},e] = concat_e(Qa[b,s,{h},u], Qp[b,s,{h},p])",
                   "each head: its rotated entries, then those passed through (a copy)")
            blk.op(f"Ke[b,t,{k},e] = concat_e(Ka[b,t,{k},u], Kp[b,t,{k},p])")
            q, kk = "Qe", "Ke"
            outs += ["Qe", "Ke"]
    extra, extra_note = "", ""
    if alibi:
        blk.tensor("alibi", [*qs, "S"], "buffer", "ALiBi bias: each head's slope times the key "
                                                  "position (build_alibi_tensor)")
        extra = f" + alibi[{h},t] / sqrt(E)"
        extra_note = "; ALiBi adds each head's slope times the key position (elementwise)"
    outs += mixing(blk, h, k, q, kk, "V", "sqrt(E)", count, dropout=dropout, extra=extra,
                   extra_note=extra_note)
    blk.tensor("W_o", [*qs, "E", "D"], "param", f"output projection ({dense})")
    stmt = f"{out}[b,s,d] = O[b,s,{h},e] W_o[{h},e,d]"
    if bias:
        blk.tensor("b_o", ["D"], "param", f"{dense} bias")
        stmt += " + b_o[d]"
    blk.op(stmt)
    return [*outs, out]


def rotary_width(c: Config, head: int, factor: float, key: str) -> int:
    """The entries of a head the rotary embedding rotates (U): HF's
    ``int(head * factor)`` rotary_ndims, rounded up to even (its tables hold
    ``ceil(rotary_ndims / 2)`` frequencies, each twice)."""
    if not 0 <= factor <= 1:
        raise c.error(key, f"{key} = {factor} is not a fraction of the head in [0, 1]",
                      f"write {key} as a number such as 0.25")
    ndims = int(head * factor)
    u = 2 * math.ceil(ndims / 2)
    if u > head:
        raise c.error(key, f"{key} = {factor} rotates {u} entries of a head of {head} (rotary "
                           f"tables hold ceil({ndims}/2) frequencies, each twice), more than "
                           "the head has; transformers fails on it too",
                      f"use a {key} whose int(head width * {key}) is even, {BY_HAND}")
    return u


def _factor(c: Config) -> tuple[float, str]:
    """The partial rotary factor and the key it comes from, as transformers
    resolves it: ``rope_scaling`` (or else ``rope_parameters``)'s
    ``partial_rotary_factor``, else ``rotary_pct``, else 0.25."""
    for key in ("rope_scaling", "rope_parameters"):
        if c.has(key) and c.data[key] != {}:
            value = c.data[key]
            if not isinstance(value, dict):
                raise c.error(key, f"key {key!r} must be a JSON object",
                              f"write {key} as {{\"rope_type\": \"default\", ...}}")
            if value.get("partial_rotary_factor") is not None:
                f = value["partial_rotary_factor"]
                if isinstance(f, bool) or not isinstance(f, (int, float)):
                    raise c.error(key, f"{key}.partial_rotary_factor must be a number",
                                  "write it as a number such as 0.25")
                return float(f), f"{key}.partial_rotary_factor"
            break       # transformers keeps the first of the two that is given
    if c.has("rotary_pct"):
        f = c.data["rotary_pct"]
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise c.error("rotary_pct", "key 'rotary_pct' must be a number",
                          "write rotary_pct as a number such as 0.25")
        return float(f), "rotary_pct"
    return 0.25, "rotary_pct"


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"GPT-NeoX decoder (from {o.source})")
    d.dim("V", "vocabulary size", c.integer("vocab_size"), "vocab_size")
    d.dim("S", "sequence length (the context)", c.integer("max_position_embeddings", 2048),
          "max_position_embeddings (default 2048)")
    width = c.integer("hidden_size")
    d.dim("D", "model width (d_model)", width, "hidden_size")
    n = c.integer("num_attention_heads")
    e = c.divide("hidden_size", width, "num_attention_heads", n,
                 "hidden_size must be a multiple of num_attention_heads")
    d.dim("N", "attention heads (each with its own key and value)", n, "num_attention_heads")
    factor, fkey = _factor(c)
    u = rotary_width(c, e, factor, fkey)
    rotary = None if u == 0 else "full" if u == e else "partial"
    if rotary == "partial":
        d.dim("U", "rotated entries of a head (rotary_ndims)", u,
              f"int(head width * {fkey}), even")
        d.dim("Ep", "entries of a head passed through unrotated", e - u,
              "head width - rotary_ndims")
        d.dim("E", "head width", equals="U + Ep")
    else:
        d.dim("E", "head width", e, "hidden_size / num_attention_heads")
    d.dim("F", "MLP hidden width", c.integer("intermediate_size"), "intermediate_size")
    activation = c.activation("hidden_act", "gelu")
    parallel = c.flag("use_parallel_residual", True)
    bias = c.flag("attention_bias", True)
    hidden, attn = dropout(c, "hidden_dropout"), dropout(c, "attention_dropout")

    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_in; rotary positions add "
                                         "no parameter)")
    embedding(d, "W_E[tok[b,s], d]", "token embedding", hidden, "X0e",
              "emb_dropout (hidden_dropout)", plain="token embedding (embed_in)")

    blk = d.block("layer", "GPT-NeoX decoder block (" + ("parallel" if parallel else
                                                         "sequential") + " residual)")
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    ln1 = Norm("layernorm", bias=True, module="input_layernorm")
    ln2 = Norm("layernorm", bias=True, module="post_attention_layernorm")
    norm(blk, ln1, "Xn", "X", "g1", "b,s,d", "d", "attention branch: LayerNorm, fused "
         "query_key_value, " + ("partial " if rotary == "partial" else "") + "rotary, causal "
         "attention, dense")
    outs = _attention(blk, heads="n", bias=bias, rotary=rotary, count=o.attention, xn="Xn",
                      out="Ya", names=("query_key_value", "dense"), dropout=attn)
    ya = "Ya"
    if hidden:
        blk.op(f"Yad[b,s,d] = dropout(Ya[b,s,d], {hidden})", "post_attention_dropout "
                                                              "(hidden_dropout)")
        ya = "Yad"
        outs.append("Yad")
    if parallel:
        mlp_in, note = "X", "MLP branch, in parallel: its own LayerNorm of the block's input"
    else:
        blk.op(f"Y1[b,s,d] = X[b,s,d] + {ya}[b,s,d]", "sequential residual "
                                                      "(use_parallel_residual false)")
        outs.append("Y1")
        mlp_in, note = "Y1", "MLP sub-block: LayerNorm of the attention's residual"
    norm(blk, ln2, "Xm", mlp_in, "g2", "b,s,d", "d", note)
    mouts = mlp(blk, Mlp(False, activation, True), "", "Xm", "Ym",
                ("dense_h_to_4h", "dense_h_to_4h", "dense_4h_to_h"))
    ym = "Ym"
    if hidden:
        blk.op(f"Ymd[b,s,d] = dropout(Ym[b,s,d], {hidden})", "post_mlp_dropout "
                                                              "(hidden_dropout)")
        ym = "Ymd"
        mouts.append("Ymd")
    if parallel:
        blk.op(f"Y[b,s,d] = X[b,s,d] + {ya}[b,s,d] + {ym}[b,s,d]",
               "parallel residual (use_parallel_residual true)")
    else:
        blk.op(f"Y[b,s,d] = Y1[b,s,d] + {ym}[b,s,d]")
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", "Xm"])
    blk.component("residual", ["Y"])
    m.include("layer", layer_count(d, "all", c.integer("num_hidden_layers"), 1),
              {"X": "X0", "Y": "XL"})
    model_head(d, Norm("layernorm", bias=True, module="final_layer_norm"),
               c.flag("tie_word_embeddings", False), "tie_word_embeddings",
               head_module="lm_head, published as embed_out")
    return d


FAMILIES = (Family("gpt_neox", ("GPTNeoXForCausalLM",), READ, IGNORED, build),)
