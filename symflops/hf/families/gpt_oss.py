"""gpt-oss (``gpt_oss``, GptOssForCausalLM), as transformers 5.24 builds it.

Each layer: RMSNorm, attention with grouped key/value heads, biases on q, k, v and
o (``attention_bias``, default true), rotary positions and **attention sinks** (a
learned logit per head, one more term of every softmax's denominator), residual;
RMSNorm, routed experts, residual.  ``layer_types`` (default: sliding-window and
full layers alternating from a sliding one) with ``sliding_window`` (128): two
blocks.  The router has a bias; the k largest logits are kept and their softmax
weights the experts; each expert has biases and the **clamped SwiGLU**: the gate
clamped above at ``swiglu_limit``, the up-projection to [-limit, limit],
``(up + 1) * gate * sigmoid(swiglu_alpha * gate)``.  The experts' fused
``gate_up_proj`` interleaves gate and up columns; they are written as two
tensors (the same parameters and products).

The experts are counted as transformers' ``batched_mm`` runs them, each token's
k pairs once.  Eager mode (the experts' own forward) loops over the experts a
batch hits, each over its own tokens: the same k B S pairs' products, so the
same count (``tests/test_hf_gpt_oss.py`` checks both against FlopCounterMode).
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention
from ..config import BY_HAND, Config
from ..emit import Declaration
from ..experts import Moe, moe_dims
from ..layers import Kind, Layout, layers
from ..parts import Norm, model_head, rotary_embedding
from .common import Family, Options, dropout, number_text, rope_keys, routed_experts, \
    sized_decoder, types_of

READ = frozenset(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
                  "max_position_embeddings", "tie_word_embeddings", "attention_dropout",
                  "attention_bias", "num_local_experts", "num_experts", "num_experts_per_tok",
                  "experts_per_token", "output_router_logits", "sliding_window",
                  "layer_types", "swiglu_alpha", "swiglu_limit"))
#: initial_context_length: the rotary YaRN scaling's original length (a table's values);
#: router_aux_loss_coef: the load-balancing loss's weight (output_router_logits refused)
IGNORED = frozenset(rope_keys("rms_norm_eps", "initial_context_length",
                              "router_aux_loss_coef"))
DEFAULTS = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8,
                head_dim=64, max_position_embeddings=131072)


def build(c: Config, o: Options) -> Declaration:
    d, heads, n = sized_decoder(c, o, "gpt-oss", DEFAULTS, True)
    experts, active, key = routed_experts(c, ("num_local_experts", "num_experts"), 128, 4)
    if c.has("experts_per_token") and c.integer("experts_per_token") != active:
        raise c.error("experts_per_token", f"experts_per_token = "
                                           f"{c.data['experts_per_token']} differs from "
                                           f"num_experts_per_tok = {active}, which "
                                           "transformers reads",
                      "make the two agree, or remove experts_per_token")
    moe_dims(d, experts, active, key, "num_experts_per_tok")
    d.dim("F", "hidden width of one expert", c.integer("intermediate_size",
                                                       DEFAULTS["intermediate_size"]),
          "intermediate_size")
    if c.data.get("hidden_act", "silu") != "silu":
        raise c.error("hidden_act", f"hidden_act = {c.data['hidden_act']!r}: gpt-oss's experts "
                                    "apply their clamped SwiGLU whatever it says",
                      "set hidden_act to \"silu\", " + BY_HAND)
    limit = c.number("swiglu_limit", Fraction(7))
    alpha = c.number("swiglu_alpha", Fraction(1702, 1000))
    assert limit is not None and alpha is not None
    types = types_of(c, n, ("full_attention", "sliding_attention"),
                     ["sliding_attention" if (i + 1) % 2 else "full_attention"
                      for i in range(n)])
    if "sliding_attention" in types:
        if "sliding_window" in c.data and c.data["sliding_window"] is None:
            raise c.error("sliding_window", "key 'sliding_window' is null but some layers are "
                                            "sliding_attention layers",
                          "give sliding_window, the window's length in positions")
        d.dim("W", "attention window of the sliding-window layers (positions a query sees, "
                   "itself included)", c.integer("sliding_window", 128), "sliding_window")
    ffn = Moe("silu", renormalize=False, scores="topk-softmax",
              routing="the k largest logits kept, their softmax the weights",
              modules=("router.weight", "experts.gate_up_proj", "experts.down_proj"),
              router_bias=True, bias=True,
              clamp=(number_text(limit, c.data.get("swiglu_limit")),
                     number_text(alpha, c.data.get("swiglu_alpha"))))
    bias = (c.flag("attention_bias", True),) * 4
    attn_p = dropout(c, "attention_dropout")
    both = len(set(types)) > 1
    kinds = [Kind("sliding" if t == "sliding_attention" else "full",
                  "sliding-window layers" if t == "sliding_attention" else
                  "full-attention layers", types.count(t),
                  Attention(heads, bias, window=t == "sliding_attention", sinks=True,
                            count=o.attention, dropout=attn_p), ffn,
                  suffix="_sw" if t == "sliding_attention" else "_f",
                  count_key="layer_types" if c.has("layer_types") else
                  "num_hidden_layers (alternating)",
                  title=("sliding window" if t == "sliding_attention" else "full attention")
                  if both else "")
             for t in dict.fromkeys(types)]
    rotary_embedding(d)
    layers(d, kinds, Layout(Norm("rmsnorm")), "gpt-oss")
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = (Family("gpt_oss", ("GptOssForCausalLM",), READ, IGNORED, build),)
