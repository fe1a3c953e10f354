"""StarCoder2 (``starcoder2``: bigcode/starcoder2-3b, -7b, -15b).

Each block: LayerNorm (always with a bias), causal attention with grouped
key/value heads and rotary positions, residual dropout, residual; LayerNorm,
a plain (non-gated) MLP ``c_fc``, GELU (tanh), ``c_proj``, residual dropout,
residual.  What changes a count:

* the sizes; ``head_dim`` (else hidden_size / num_attention_heads);
* ``use_bias`` (default true): biases on q, k, v, o, c_fc and c_proj (the
  LayerNorms keep theirs either way);
* ``sliding_window``: every layer attends to the last W positions;
* ``tie_word_embeddings`` (default **true**: an absent key means tied);
* ``hidden_act`` (default gelu_pytorch_tanh);
* ``embedding_dropout`` (after the lookup), ``residual_dropout`` (after
  o_proj and after c_proj), ``attention_dropout`` (on the probabilities):
  elementwise work and masks when positive (starcoder2-3b: 0.1 each).

``mlp_type`` and ``norm_type`` are keys of the original training code that
transformers never reads: only their published values (``default``,
``layer_norm``) describe the model transformers builds; others are refused.
"""

from __future__ import annotations

from ..attention import Attention, attention
from ..config import Config
from ..emit import Declaration
from ..parts import Mlp, Norm, embedding, mlp, model_head, norm, token_inputs
from .common import Family, Options, decoder_dims, dropout, layer_count, layer_kinds, model_base, \
    rope_keys, window_dim

READ = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "hidden_act", "use_bias", "sliding_window", "attention_dropout",
    "residual_dropout", "embedding_dropout", "mlp_type", "norm_type",
))
#: norm_epsilon (and the older layer_norm_epsilon of the published configs): epsilons.
IGNORED = frozenset(rope_keys("norm_epsilon", "layer_norm_epsilon"))


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"StarCoder2 decoder (from {o.source})")
    c.must_be("mlp_type", "default", "default", "transformers' StarCoder2 has one MLP: c_fc, "
                                                "GELU, c_proj")
    c.must_be("norm_type", "layer_norm", "layer_norm", "transformers' StarCoder2 normalises "
                                                       "with LayerNorm")
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim")
    layers = c.integer("num_hidden_layers")
    activation = c.activation("hidden_act", "gelu_pytorch_tanh")
    bias = c.flag("use_bias", True)
    d.dim("F", "MLP hidden width", c.integer("intermediate_size"), "intermediate_size")
    kinds = layer_kinds(c, layers, windowed_family=True)
    window = kinds[0][0] == "sliding"
    if window:
        window_dim(d, c)
    attn_p = dropout(c, "attention_dropout")
    resid_p = dropout(c, "residual_dropout")
    embd_p = dropout(c, "embedding_dropout")
    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_tokens)")
    embedding(d, "W_E[tok[b,s], d]", "token embedding (rotary positions add no parameter)",
              embd_p, "Xe", "embedding dropout (embedding_dropout)")
    blk = d.block("layer", "StarCoder2 decoder block" + (" (sliding window)" if window else ""))
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    ln = Norm("layernorm", bias=True, module="input_layernorm")
    norm(blk, ln, "Xn", "X", "g1", "b,s,d", "d", "attention sub-block: LayerNorm, causal "
                                                 "attention, residual")
    outs = attention(d, blk, Attention("g,r" if grouped else "n", (bias,) * 4, window=window,
                                       count=o.attention, dropout=attn_p,
                                       residual_dropout=resid_p,
                                       residual_note="residual_dropout"), "X", "Xn", "Y1")
    norm(blk, Norm("layernorm", bias=True, module="post_attention_layernorm"), "Yn", "Y1",
         "g2", "b,s,d", "d", "MLP sub-block: LayerNorm, c_fc, GELU, c_proj, residual")
    mouts = mlp(blk, Mlp(False, activation, bias, residual_dropout=resid_p,
                         residual_note="residual_dropout"), "Y1", "Yn", "Y",
                ("c_fc", "c_fc", "c_proj"))
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", "Yn"])
    m.include("layer", layer_count(d, kinds[0][0], layers, 1), {"X": "X0", "Y": "XL"})
    model_head(d, Norm("layernorm", bias=True, module="norm"),
               c.flag("tie_word_embeddings", True), "tie_word_embeddings")
    return d


FAMILIES = (Family("starcoder2", ("Starcoder2ForCausalLM",), READ, IGNORED, build),)
