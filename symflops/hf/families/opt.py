"""OPT (``opt``, OPTForCausalLM): facebook/opt-125m ... opt-66b, opt-350m.

Learned positions: ``embed_positions`` has ``max_position_embeddings + 2``
rows (the offset of 2 rows kept from fairseq) read at position + 2 through
an index tensor, so the table's parameters do not change with S; multi-head
attention (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), an MLP ``fc1``,
activation (ReLU), ``fc2``; LayerNorms; the head tied to the token embedding
by default. What changes a count:

* ``do_layer_norm_before`` (default true): pre-norm layers and a final
  LayerNorm (unless ``_remove_final_layer_norm``); false (opt-350m): post-norm
  layers (``Y1 = LN(X + attn(X))``, ``Y = LN(Y1 + mlp(Y1))``), no final norm;
* ``word_embed_proj_dim`` (default hidden_size): when it differs (opt-350m),
  the token embedding and the head are that wide, with ``project_in`` and
  ``project_out`` (no bias) between it and the model width;
* ``enable_bias`` (default true): biases of the attention and MLP Linears;
  ``layer_norm_elementwise_affine`` (default true): LayerNorm gains and biases;
* ``dropout`` (default 0.1) on the attention and MLP outputs and
  ``attention_dropout`` on the probabilities, in training;
* ``ffn_dim``, ``activation_function``, ``tie_word_embeddings``, the sizes.

``layerdrop`` > 0 (layers skipped at random in training) and
``activation_dropout`` > 0 (which transformers' OPT never applies) are refused.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention, attention
from ..config import Config
from ..emit import Block, Declaration
from ..parts import Mlp, mlp, token_inputs
from .common import Family, Options, dropout, layer_count, model_base

READ = frozenset(("vocab_size", "hidden_size", "num_hidden_layers", "ffn_dim",
                  "max_position_embeddings", "do_layer_norm_before", "_remove_final_layer_norm",
                  "word_embed_proj_dim", "dropout", "attention_dropout", "num_attention_heads",
                  "activation_function", "layerdrop", "enable_bias",
                  "layer_norm_elementwise_affine", "tie_word_embeddings", "activation_dropout"))
#: init_std: initialisation only. (pad_token_id, the embedding's padding_idx, only
#: zeroes that row's gradient; prefix is a tokenizer setting: both in config.IGNORED.)
IGNORED = frozenset(("init_std",))


def _ln(blk: Block, affine: bool, out: str, x: str, gain: str, module: str,
        comment: str | None = None) -> None:
    """``out = layernorm_d(x)``, with its gain and bias when ``affine``."""
    stmt = f"{out}[b,s,d] = layernorm_d({x}[b,s,d])"
    if affine:
        bias = "c" + gain[1:]
        blk.tensor(gain, ["D"], "param", f"gain of the {module} (LayerNorm)")
        blk.tensor(bias, ["D"], "param", f"bias of the {module} (LayerNorm)")
        stmt += f" * {gain}[d] + {bias}[d]"
    if not affine:
        note = "no gain or bias: layer_norm_elementwise_affine false"
        comment = f"{comment} ({note})" if comment else note
    blk.op(stmt, comment)


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"OPT decoder (from {o.source})")
    if c.fraction("layerdrop", Fraction(0)) != 0:
        raise c.error("layerdrop", "key 'layerdrop' is not 0: training skips each layer at "
                                   "random, so a step's count is not a fixed number",
                      "set layerdrop to 0.0, or write the declaration by hand with the layers "
                      "a step keeps")
    c.zero("activation_dropout", "transformers' OPT applies no dropout after the activation, "
                                 "so the model it builds is not the one the key describes")
    d.dim("V", "vocabulary size", c.integer("vocab_size", 50272), "vocab_size")
    positions = c.integer("max_position_embeddings", 2048)
    d.dim("S", "sequence length (the context; at most max_position_embeddings)", positions,
          "max_position_embeddings")
    width = c.integer("hidden_size", 768)
    d.dim("D", "model width (d_model)", width, "hidden_size")
    n = c.integer("num_attention_heads", 12)
    e = c.divide("hidden_size", width, "num_attention_heads", n,
                 "hidden_size must be a multiple of num_attention_heads")
    d.dim("N", "attention heads (each with its own key and value)", n, "num_attention_heads")
    d.dim("E", "head width", e, "hidden_size / num_attention_heads")
    d.dim("F", "MLP hidden width", c.integer("ffn_dim", 3072), "ffn_dim")
    d.dim("P", "rows of the learned position table: max_position_embeddings + 2 (the offset "
               "of 2)", positions + 2, "max_position_embeddings + 2")
    d.longest = (positions, "max_position_embeddings; its learned position table has 2 rows more")
    proj = c.integer("word_embed_proj_dim", width)
    projected = proj != width
    if projected:
        d.dim("Dw", "width of the token embedding and of the head (word_embed_proj_dim)",
              proj, "word_embed_proj_dim")
    pre = c.flag("do_layer_norm_before", True)
    final = pre and not c.flag("_remove_final_layer_norm", False)
    affine = c.flag("layer_norm_elementwise_affine", True)
    bias = c.flag("enable_bias", True)
    activation = c.activation("activation_function", "relu")
    drop = dropout(c, "dropout", "0.1")   # OPTConfig's default
    attn = dropout(c, "attention_dropout")
    tied = c.flag("tie_word_embeddings", True)

    token_inputs(d)
    m = d.model
    ew = "Dw" if projected else "D"
    m.tensor("pos", ["B", "S"], "index", "the row of each token's position in the table: "
                                         "position + 2 (cumsum of the attention mask - 1, "
                                         "plus the offset 2), integers in [2, S + 2)")
    m.tensor("W_E", ["V", ew], "param", "token embedding (embed_tokens)"
             + (", tied with lm_head" if tied else ""))
    m.tensor("W_P", ["P", "D"], "param", "learned positions (embed_positions: "
                                         "max_position_embeddings + 2 rows)")
    if projected:
        m.tensor("W_pin", ["Dw", "D"], "param", "project_in (no bias)")
        m.op("Xe[b,s,c] = W_E[tok[b,s], c]", "token embedding, word_embed_proj_dim wide")
        m.op("X0[b,s,d] = Xe[b,s,c] W_pin[c,d] + W_P[pos[b,s], d]",
             "project_in to the model width, then the positions added")
        m.component("embedding", ["Xe", "X0"])
    else:
        m.op("X0[b,s,d] = W_E[tok[b,s], d] + W_P[pos[b,s], d]",
             "token and position embeddings (the table read at position + 2)")
        m.component("embedding", ["X0"])

    blk = d.block("layer", "OPT decoder block (" + ("pre-norm" if pre else "post-norm") + ")")
    blk.uses("B", "S", "D", "F")
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")

    def resid(out: str, x: str, y: str, comment: str | None = None) -> None:
        blk.op(f"{out}[b,s,d] = {x}[b,s,d] + " + (f"dropout({y}[b,s,d], {drop})" if drop else
                                                  f"{y}[b,s,d]"), comment)

    a = Attention("n", (bias,) * 4, rotary=False, count=o.attention, dropout=attn)
    names = ("q_proj", "k_proj", "v_proj", "out_proj")
    mnames = ("fc1", "fc1", "fc2")
    if pre:
        _ln(blk, affine, "Xn", "X", "g1", "self_attn_layer_norm",
            "attention sub-block: LayerNorm, attention, dropout, residual")
        outs = attention(d, blk, a, "", "Xn", "Ya", names)
        resid("Y1", "X", "Ya", "dropout (config.dropout) and the residual")
        _ln(blk, affine, "Yn", "Y1", "g2", "final_layer_norm",
            "MLP sub-block: LayerNorm, fc1, activation, fc2, dropout, residual")
        mouts = mlp(blk, Mlp(False, activation, bias), "", "Yn", "Ym", mnames)
        resid("Y", "Y1", "Ym")
        norms = ["Xn", "Yn"]
        outs.append("Y1")
        mouts.append("Y")
    else:
        outs = attention(d, blk, a, "", "X", "Ya", names)
        resid("Y1r", "X", "Ya", "post-norm (do_layer_norm_before false): dropout, residual, "
                                "then the LayerNorm")
        _ln(blk, affine, "Y1", "Y1r", "g1", "self_attn_layer_norm")
        mouts = mlp(blk, Mlp(False, activation, bias), "", "Y1", "Ym", mnames)
        resid("Yr", "Y1", "Ym")
        _ln(blk, affine, "Y", "Yr", "g2", "final_layer_norm")
        norms = ["Y1", "Y"]
        outs.append("Y1r")
        mouts.append("Yr")
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", norms)
    m.include("layer", layer_count(d, "all", c.integer("num_hidden_layers", 12), 1),
              {"X": "X0", "Y": "XL"})

    last = "XL"
    if final:
        _ln(m, affine, "Xf", "XL", "g_f", "final_layer_norm", "the decoder's final norm")
        m.component("final norm", ["Xf"])
        last = "Xf"
    letter = "c" if projected else "d"
    if projected:
        m.tensor("W_pout", ["D", "Dw"], "param", "project_out (no bias)")
        m.op(f"Xo[b,s,c] = {last}[b,s,d] W_pout[d,c]", "project_out to word_embed_proj_dim")
        m.component("project out", ["Xo"])
        last = "Xo"
    if tied:
        m.op(f"Z[b,s,v] = {last}[b,s,{letter}] W_E[v,{letter}]",
             "logits; the unembedding is the token embedding (tie_word_embeddings: true)")
    else:
        m.tensor("W_U", [ew, "V"], "param", "unembedding (lm_head; tie_word_embeddings: false)")
        m.op(f"Z[b,s,v] = {last}[b,s,{letter}] W_U[{letter},v]", "logits")
    m.op("Loss[] = cross_entropy_mean_v(Z[b,s,v], y[b,s])",
         "mean cross-entropy of the next token at every position")
    m.component("output head", ["Z"])
    m.component("loss", ["Loss"])
    return d


FAMILIES = (Family("opt", ("OPTForCausalLM",), READ, IGNORED, build),)
