"""Phi-3 (``phi3``: Phi-3 mini/small/medium 4k and 128k, and the Phi-4-mini
configs that reuse the type).

Each block: RMSNorm, causal attention with grouped key/value heads and
rotary positions, residual (through ``resid_pdrop`` dropout); RMSNorm, a
gated MLP, residual (through the same dropout).  What changes a count:

* the sizes; ``head_dim`` (else hidden_size / num_attention_heads);
* the fused projections: ``qkv_proj`` is one ``nn.Linear(D, (N + 2G) E)``
  and ``gate_up_proj`` one ``nn.Linear(D, 2F)``; the declaration writes their
  row blocks as separate tensors (``W_q``, ``W_k``, ``W_v``; ``W_gate``,
  ``W_up``): the same parameters, and the same matrix-product FLOPs (the
  fused forward mm is the sum of the blocks' products, and so are its dW
  and dX mms);
* ``sliding_window``: every layer attends to the last W positions (a null
  window: causal);
* ``tie_word_embeddings`` (default false; true in Phi-4-mini);
* ``resid_pdrop`` (dropout on both residual branches), ``attention_dropout``
  (on the probabilities): elementwise work and masks when positive.

``embd_pdrop`` is never applied by transformers' Phi3Model, so it changes
nothing.  ``partial_rotary_factor`` (Phi-4-mini: 0.75) rotates only the first
``int(E f)`` entries of each head, the rest passed through (elementwise work
and the tables' size only).  Refused: biases (``attention_bias``,
``mlp_bias``, ``lm_head_bias`` true: transformers' Phi3 builds none).
"""

from __future__ import annotations

from ..attention import Attention, attention
from ..config import Config
from ..emit import Declaration
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, decoder_dims, dropout, layer_count, layer_kinds, model_base, \
    partial_rotary, rope_keys, rotary_fraction, window_dim

READ = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "hidden_act", "attention_dropout", "resid_pdrop", "sliding_window",
    "partial_rotary_factor",
    # not read by transformers' Phi3 (which has no bias anywhere): false only
    "attention_bias", "mlp_bias", "lm_head_bias",
    # keys of Phi-4-mini's remote code, not read by transformers: 1 only
    "full_attn_mod", "interpolate_factor",
))
IGNORED = frozenset(rope_keys(
    "rms_norm_eps",
    # longrope's switch between its short and long factors: buffer values only
    "original_max_position_embeddings",
    # declared by Phi3Config but never applied by Phi3Model (transformers 5.24): no op
    "embd_pdrop",
))


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"Phi-3 decoder (from {o.source})")
    for key in ("attention_bias", "mlp_bias", "lm_head_bias"):
        c.must_be(key, False, False, "transformers' Phi3 has no biases")
    for key in ("full_attn_mod", "interpolate_factor"):
        c.must_be(key, 1, 1, "a key of remote code transformers does not run")
    fraction, rotary_key = rotary_fraction(c)
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim")
    width = d.dims["E"].value
    assert width is not None
    # int(head_dim * partial_rotary_factor) in floating point, as transformers computes it
    partial = partial_rotary(d, c, rotary_key, width, int(width * float(fraction)))
    layers = c.integer("num_hidden_layers")
    activation = c.activation("hidden_act", "silu")
    d.dim("F", "MLP hidden width (gate_up_proj is 2F wide)", c.integer("intermediate_size"),
          "intermediate_size")
    kinds = layer_kinds(c, layers, windowed_family=True)
    window = kinds[0][0] == "sliding"
    if window:
        window_dim(d, c)
    attn_p, resid_p = dropout(c, "attention_dropout"), dropout(c, "resid_pdrop")
    rotary_embedding(d, "embd_pdrop is not applied by transformers")
    m = d.model
    blk = d.block("layer", "Phi-3 decoder block" + (" (sliding window)" if window else ""))
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
         "attention sub-block: RMSNorm, causal attention, residual.  qkv_proj is one linear "
         "of (N + 2G) E outputs: W_q, W_k, W_v\nare its row blocks (the same parameters and "
         "matrix-product FLOPs as the fused product)")
    outs = attention(d, blk, Attention("g,r" if grouped else "n", window=window,
                                       count=o.attention, dropout=attn_p, partial=partial),
                     "" if resid_p else "X", "Xn", "Ya" if resid_p else "Y1",
                     ("qkv_proj, query rows", "qkv_proj, key rows", "qkv_proj, value rows",
                      "o_proj"))
    if resid_p:
        blk.op(f"Y1[b,s,d] = X[b,s,d] + dropout(Ya[b,s,d], {resid_p})",
               "residual dropout (resid_pdrop: resid_attn_dropout)")
        outs.append("Y1")
    norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn", "Y1", "g2", "b,s,d",
         "d", "MLP sub-block: RMSNorm, gated MLP, residual.  gate_up_proj is one linear of 2F "
              "outputs, chunked: W_gate, W_up\nare its two halves (the same parameters and "
              "FLOPs)")
    mouts = mlp(blk, Mlp(True, activation, residual_dropout=resid_p,
                         residual_note="resid_pdrop: resid_mlp_dropout"), "Y1", "Yn", "Y",
                ("gate_up_proj, first half", "gate_up_proj, second half", "down_proj"))
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", "Yn"])
    m.include("layer", layer_count(d, kinds[0][0], layers, 1), {"X": "X0", "Y": "XL"})
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = (Family("phi3", ("Phi3ForCausalLM",), READ, IGNORED, build),)
