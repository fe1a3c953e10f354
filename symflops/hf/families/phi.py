"""Phi-1, Phi-1.5 and Phi-2 (``phi``, PhiForCausalLM), as transformers 5.24 builds
them.

A layer is parallel: one LayerNorm (with bias) feeds the attention and an MLP
(``fc1``, activation, ``fc2``, with biases), both dropped out (``resid_pdrop``)
and added to the input.  The attention has biases on q, k, v and ``dense``;
the rotary embedding rotates the first ``int(head_dim * partial_rotary_factor)``
entries of each head (default factor 0.5), the others pass through;
``qk_layernorm`` adds a LayerNorm (with bias) of each query and key head.  The
embedding is dropped out (``embd_pdrop``), the final norm is ``final_layernorm``,
and ``lm_head`` has a bias (also when tied).
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention
from ..config import Config
from ..emit import Declaration
from ..layers import Kind, Layout, layers
from ..parts import Mlp, Norm, embedding, model_head, token_inputs
from .common import Family, Options, dropout, partial_rotary, rope_keys, rotary_fraction, \
    sized_decoder

READ = frozenset(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "resid_pdrop", "embd_pdrop",
                  "attention_dropout", "hidden_act", "max_position_embeddings",
                  "tie_word_embeddings", "qk_layernorm", "partial_rotary_factor",
                  "rope_parameters", "rope_scaling"))
IGNORED = frozenset(("rope_theta", "layer_norm_eps"))
DEFAULTS = dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192,
                num_hidden_layers=24, num_attention_heads=32, max_position_embeddings=2048)


def build(c: Config, o: Options) -> Declaration:
    d, heads, n = sized_decoder(c, o, "Phi", DEFAULTS, False)
    width = d.dims["E"].value
    assert width is not None
    fraction, key = rotary_fraction(c, Fraction(1, 2))
    # int(head_dim * partial_rotary_factor), in floating point, as transformers computes it
    partial = partial_rotary(d, c, key, width, int(width * float(fraction)))
    d.dim("F", "MLP hidden width", c.integer("intermediate_size",
                                             DEFAULTS["intermediate_size"]), "intermediate_size")
    qk = Norm("layernorm", bias=True, module="q_layernorm / k_layernorm") \
        if c.flag("qk_layernorm", False) else None
    attn = Attention(heads, (True,) * 4, qk, partial=partial,
                     count=o.attention, dropout=dropout(c, "attention_dropout"))
    ffn = Mlp(False, c.activation("hidden_act", "gelu_new"), bias=True)
    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_tokens)")
    embedding(d, "W_E[tok[b,s], d]", "token embedding (rotary positions add no parameter)",
              dropout(c, "embd_pdrop"), dropout_comment="embed_dropout (embd_pdrop)")
    layers(d, [Kind("layer", "layers", n, attn, ffn)],
           Layout(Norm("layernorm", bias=True), "parallel", ("input_layernorm",),
                  dropout=dropout(c, "resid_pdrop"),
                  attention_names=("q_proj", "k_proj", "v_proj", "dense"),
                  mlp_names=("fc1", "fc1", "fc2")), "Phi")
    model_head(d, Norm("layernorm", bias=True, module="final_layernorm"),
               c.flag("tie_word_embeddings", False), "tie_word_embeddings", bias=True)
    return d


FAMILIES = (Family("phi", ("PhiForCausalLM",), READ, IGNORED, build),)
