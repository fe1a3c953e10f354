"""GPT-2 (``gpt2``): learned positions, pre-norm blocks with LayerNorm,
multi-head attention and a GELU MLP, biases everywhere, dropout where the
config's probabilities are positive (a training run applies them), the
unembedding tied to the token embedding."""

from __future__ import annotations


from ..attention import Attention, attention
from ..config import Config
from ..emit import Declaration
from ..parts import Mlp, Norm, embedding, mlp, model_head, norm, token_inputs
from .common import Family, Options, decoder_dims, dropout, layer_count, model_base

READ = frozenset(("n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "n_inner",
                  "activation_function", "embd_pdrop", "attn_pdrop", "resid_pdrop",
                  "tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                  "reorder_and_upcast_attn", "add_cross_attention"))
#: n_ctx is the old name of n_positions (transformers reads n_positions); the
#: summary_* keys configure the double-heads model's classifier, not the LM.
IGNORED = frozenset(("n_ctx", "layer_norm_epsilon", "summary_type", "summary_use_proj",
                     "summary_activation", "summary_proj_to_labels", "summary_first_dropout"))




def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"GPT-2 decoder (from {o.source})")
    decoder_dims(d, c, heads="n_head", kv=None, width="n_embd", head_dim=None,
                 context="n_positions")
    d.longest = (c.integer("n_positions"), "n_positions, the rows of its learned position table")
    d.dim("P", "rows of the learned position table (n_positions)", c.integer("n_positions"),
          "n_positions")
    width = c.integer("n_embd")
    d.dim("F", "MLP hidden width", c.integer("n_inner", 4 * width), "n_inner (default 4 n_embd)")
    c.must_be("scale_attn_weights", True, True, "the declaration scales the scores by 1/sqrt(E)")
    for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                "add_cross_attention"):
        c.must_be(key, False, False, "the declaration has no such variant")
    activation = c.activation("activation_function", "gelu_new")
    embd, attn, resid = dropout(c, "embd_pdrop", "0.1"), dropout(c, "attn_pdrop", "0.1"), \
        dropout(c, "resid_pdrop", "0.1")
    token_inputs(d)
    m = d.model
    m.tensor("pos", ["S"], "index", "the position of each token, integers in [0, P)")
    m.tensor("W_E", ["V", "D"], "param", "token embedding (wte)")
    m.tensor("W_P", ["P", "D"], "param", "learned position embedding (wpe)")
    embedding(d, "W_E[tok[b,s], d] + W_P[pos[s], d]", "token and position embeddings", embd,
              "X0p", "embedding dropout (embd_pdrop)")
    blk = d.block("layer", "GPT-2 decoder block")
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    ln = Norm("layernorm", bias=True, module="ln_1")
    norm(blk, ln, "Xn", "X", "g1", "b,s,d", "d", "attention sub-block: LayerNorm, causal "
                                                 "attention, residual")
    outs = attention(d, blk, Attention("n", (True,) * 4, rotary=False, count=o.attention,
                                       dropout=attn, residual_dropout=resid), "X", "Xn", "Y1",
                     ("c_attn", "c_attn", "c_attn", "c_proj"))
    norm(blk, Norm("layernorm", bias=True, module="ln_2"), "Yn", "Y1", "g2", "b,s,d", "d",
         "MLP sub-block: LayerNorm, GELU MLP, residual")
    mouts = mlp(blk, Mlp(False, activation, True, residual_dropout=resid), "Y1", "Yn", "Y",
                ("c_fc", "c_fc", "c_proj"))
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", "Yn"])
    m.include("layer", layer_count(d, "all", c.integer("n_layer"), 1, "n_layer"), {"X": "X0", "Y": "XL"})
    model_head(d, Norm("layernorm", bias=True, module="ln_f"),
               c.flag("tie_word_embeddings", True), "tie_word_embeddings")
    return d


FAMILIES = (Family("gpt2", ("GPT2LMHeadModel",), READ, IGNORED, build),)
