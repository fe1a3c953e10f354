"""Falcon (``falcon``, FalconForCausalLM): falcon-7b, falcon-40b, falcon-rw.

One fused ``query_key_value`` FalconLinear, declared as its parts (q, k, v:
the same parameters and matrix products); rotary positions over the whole
head (buffers, elementwise) or ALiBi; an MLP ``dense_h_to_4h``, activation,
``dense_4h_to_h``; LayerNorms with bias; the head tied to the embedding by
default. What changes a count:

* the key/value heads G: ``new_decoder_architecture`` true: ``num_kv_heads``
  (falcon-40b: the fused output is ``[G, R + 2, E]``); else ``multi_query``
  (default true): one key and one value head (falcon-7b; ``num_kv_heads`` is
  not read then, as transformers does not); else every head its own (``[N,
  3, E]``, ``num_kv_heads`` must be N);
* the residual: ``parallel_attn`` (default true) ``Y = X + attn(LN(X)) +
  mlp(LN'(X))`` with one LayerNorm (``input_layernorm``) or, with
  ``new_decoder_architecture`` and ``num_ln_in_parallel_attn`` 2 (its default
  there), two (``ln_attn``, ``ln_mlp``); false: sequential, with
  ``post_attention_layernorm``;
* ``bias`` (default false): biases of every Linear; ``alibi`` (default false):
  ALiBi scores (a bias buffer) instead of rotary;
* ``ffn_hidden_size`` (default 4 hidden_size), ``activation``,
  ``tie_word_embeddings`` (default true);
* ``hidden_dropout``, ``attention_dropout``: dropout where transformers
  applies it (the residual branches; the probabilities only under ALiBi).
"""

from __future__ import annotations

from ..config import BY_HAND, Config
from ..emit import Declaration
from ..parts import Mlp, Norm, mlp, model_head, norm, token_inputs
from .common import Family, Options, dropout, layer_count, model_base, rope_keys
from .gpt_neox import _attention

READ = frozenset(("vocab_size", "hidden_size", "n_embed", "num_hidden_layers",
                  "num_attention_heads", "num_kv_heads", "multi_query",
                  "new_decoder_architecture", "parallel_attn", "num_ln_in_parallel_attn",
                  "bias", "alibi", "ffn_hidden_size", "activation", "tie_word_embeddings",
                  "hidden_dropout", "attention_dropout", "max_position_embeddings",
                  "apply_residual_connection_post_layernorm"))
#: layer_norm_epsilon: numerics; the rotary keys: the
#: frequencies (Falcon's rotary reads rope_theta and the scaling type, never a partial
#: factor: the whole head is rotated).
IGNORED = frozenset(rope_keys("layer_norm_epsilon"))


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"Falcon decoder (from {o.source})")
    c.must_be("apply_residual_connection_post_layernorm", False, False,
              "transformers' Falcon never reads it: it builds the pre-norm residual whatever "
              "the value, so a checkpoint that sets it is not the model it builds")
    width_key = "n_embed" if c.has("n_embed") else "hidden_size"
    if c.has("n_embed") and c.has("hidden_size") and c.data["n_embed"] != c.data["hidden_size"]:
        raise c.error("n_embed", "n_embed and hidden_size disagree (transformers takes n_embed)",
                      "give one of them")
    width = c.integer(width_key, 4544)
    d.dim("V", "vocabulary size", c.integer("vocab_size", 65024), "vocab_size")
    d.dim("S", "sequence length (the context)", c.integer("max_position_embeddings", 2048),
          "max_position_embeddings (default 2048)")
    d.dim("D", "model width (d_model)", width, width_key)
    n = c.integer("num_attention_heads", 71)
    e = c.divide(width_key, width, "num_attention_heads", n,
                 "hidden_size must be a multiple of num_attention_heads")
    new = c.flag("new_decoder_architecture", False)
    multi_query = c.flag("multi_query", True)
    parallel = c.flag("parallel_attn", True)
    kv = c.integer("num_kv_heads", n)
    lns = c.integer("num_ln_in_parallel_attn", 2 if new else 1)
    if new:
        if n % kv:
            raise c.error("num_kv_heads", f"num_attention_heads = {n} is not a multiple of "
                                          f"num_kv_heads = {kv}",
                          "each key/value head serves a whole group of query heads")
        g, gkey = kv, "num_kv_heads"
        if not parallel:
            raise c.error("parallel_attn", "parallel_attn false with new_decoder_architecture "
                                           "true: transformers builds a layer its forward "
                                           "cannot run", "set parallel_attn to true, " + BY_HAND)
    elif multi_query:
        g, gkey = 1, "multi_query: one key/value head"
    else:
        if kv != n:
            raise c.error("num_kv_heads", f"num_kv_heads = {kv} with multi_query and "
                                          "new_decoder_architecture false: transformers "
                                          f"splits the fused projection into {n} key/value "
                                          "heads and cannot reshape them",
                          "remove num_kv_heads or set it to num_attention_heads")
        g, gkey = n, "num_attention_heads"
    if lns not in (1, 2) or (lns == 2 and parallel and not new):
        raise c.error("num_ln_in_parallel_attn", f"num_ln_in_parallel_attn = {lns} is not "
                                                 "one transformers runs here (2 needs "
                                                 "new_decoder_architecture)",
                      "use 1, or 2 with new_decoder_architecture, " + BY_HAND)
    two_ln = new and parallel and lns == 2
    grouped = g != n
    if grouped:
        d.dim("N", "query heads", n, "num_attention_heads")
        d.dim("G", "key/value heads (groups of query heads sharing one key and value)", g,
              gkey)
        d.dim("R", "query heads per key/value head", equals="N / G")
    else:
        d.dim("N", "attention heads (each with its own key and value)", n,
              "num_attention_heads")
    d.dim("E", "head width", e, f"{width_key} / num_attention_heads")
    d.dim("F", "MLP hidden width", c.integer("ffn_hidden_size", 4 * width),
          "ffn_hidden_size (default 4 hidden_size)")
    alibi = c.flag("alibi", False)
    if not alibi and e % 2:
        raise c.error("num_attention_heads", f"the head width {width_key} / "
                                             f"num_attention_heads = {e} is odd: rotate-half "
                                             "rotary needs an even head (transformers fails "
                                             "too)", "use an even head width, " + BY_HAND)
    activation = c.activation("activation", "gelu")
    bias = c.flag("bias", False)
    hidden, attn = dropout(c, "hidden_dropout"), dropout(c, "attention_dropout")

    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (word_embeddings)")
    m.op("X0[b,s,d] = W_E[tok[b,s], d]", "token embedding" + ("" if alibi else
                                                              " (rotary positions add no parameter)"))
    m.component("embedding", ["X0"])

    kind = "parallel" if parallel else "sequential"
    blk = d.block("layer", f"Falcon decoder block ({kind} attention and MLP"
                  + (", two LayerNorms" if two_ln else "") + ")")
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    if two_ln:
        norm(blk, Norm("layernorm", bias=True, module="ln_attn"), "Xn", "X", "g1", "b,s,d",
             "d", "attention branch on ln_attn (new_decoder_architecture)")
    else:
        norm(blk, Norm("layernorm", bias=True, module="input_layernorm"), "Xn", "X", "g1",
             "b,s,d", "d", "input_layernorm" + (", shared by attention and MLP" if parallel
                                                else ""))
    outs = _attention(blk, heads="g,r" if grouped else "n", bias=bias,
                      rotary=None if alibi else "full", count=o.attention, xn="Xn", out="Ya",
                      names=("query_key_value", "dense"),
                      dropout=attn if alibi else None, alibi=alibi)
    if parallel:
        xm = "Xn"
        if two_ln:
            norm(blk, Norm("layernorm", bias=True, module="ln_mlp"), "Xm", "X", "g2",
                 "b,s,d", "d", "MLP branch, in parallel, on ln_mlp")
            xm = "Xm"
        mouts = mlp(blk, Mlp(False, activation, bias), "", xm, "Ym",
                    ("dense_h_to_4h", "dense_h_to_4h", "dense_4h_to_h"))
        if hidden:
            blk.op("Yb[b,s,d] = Ya[b,s,d] + Ym[b,s,d]", "the two branches, then hidden_dropout")
            blk.op(f"Y[b,s,d] = X[b,s,d] + dropout(Yb[b,s,d], {hidden})")
            mouts += ["Yb"]
        else:
            blk.op("Y[b,s,d] = X[b,s,d] + Ya[b,s,d] + Ym[b,s,d]", "parallel residual")
    else:
        blk.op("Y1[b,s,d] = X[b,s,d] + " + (f"dropout(Ya[b,s,d], {attn})" if attn else
                                              "Ya[b,s,d]"),
               "sequential residual (parallel_attn false)"
               + ("; attention_dropout on the attention output" if attn else ""))
        outs.append("Y1")
        norm(blk, Norm("layernorm", bias=True, module="post_attention_layernorm"), "Xm", "Y1",
             "g2", "b,s,d", "d", "MLP sub-block on post_attention_layernorm")
        mouts = mlp(blk, Mlp(False, activation, bias), "", "Xm", "Ym",
                    ("dense_h_to_4h", "dense_h_to_4h", "dense_4h_to_h"))
        blk.op("Y[b,s,d] = Y1[b,s,d] + " + (f"dropout(Ym[b,s,d], {hidden})" if hidden else
                                              "Ym[b,s,d]"))
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", *(["Xm"] if two_ln or not parallel else [])])
    blk.component("residual", ["Y"])
    m.include("layer", layer_count(d, "all", c.integer("num_hidden_layers", 32), 1),
              {"X": "X0", "Y": "XL"})
    model_head(d, Norm("layernorm", bias=True, module="ln_f"),
               c.flag("tie_word_embeddings", True), "tie_word_embeddings")
    return d


FAMILIES = (Family("falcon", ("FalconForCausalLM",), READ, IGNORED, build),)
