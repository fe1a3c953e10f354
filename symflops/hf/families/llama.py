"""Llama-style decoders: ``llama`` (Llama 1-3), ``mistral``, ``mixtral``,
``qwen2`` (Qwen2, Qwen2.5), ``qwen3``.

Each block: RMSNorm, causal attention with grouped key/value heads and
rotary positions, residual; RMSNorm, a gated MLP (or Mixtral's routed
experts), residual.  What the families change:

* ``llama``: ``attention_bias`` (biases on q, k, v and o), ``mlp_bias``;
* ``mistral``: ``sliding_window`` (every layer attends to the last W positions);
* ``mixtral``: routed experts (``num_local_experts``, ``num_experts_per_tok``),
  top-k weights renormalised; ``sliding_window``;
* ``qwen2``: biases on q, k and v (not o); ``use_sliding_window`` with
  ``max_window_layers`` or ``layer_types`` (which layers are windowed);
* ``qwen3``: a norm of each query and key head (q_norm, k_norm), ``head_dim``,
  ``attention_bias`` (q, k, v and o), windows as for qwen2;
* every family: ``attention_dropout`` (a dropout of the probabilities in training).
"""

from __future__ import annotations

from ..attention import Attention, attention
from ..config import Config
from ..emit import Declaration
from ..experts import Moe, moe, moe_dims
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, decoder_dims, dropout, include_block, layer_count, \
    layer_kinds, model_base, rope_keys, window_dim

_BASE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "vocab_size", "max_position_embeddings", "num_key_value_heads", "head_dim",
         "tie_word_embeddings", "hidden_act", "attention_dropout")
_WINDOWS = ("sliding_window", "use_sliding_window", "max_window_layers", "layer_types")
_MOE = ("num_local_experts", "num_experts_per_tok", "output_router_logits",
        "router_jitter_noise")

READ = {
    "llama": frozenset(_BASE + ("attention_bias", "mlp_bias")),
    "mistral": frozenset(_BASE + ("sliding_window",)),
    "mixtral": frozenset(_BASE + ("sliding_window",) + _MOE),
    "qwen2": frozenset(_BASE + _WINDOWS),
    "qwen3": frozenset(_BASE + _WINDOWS + ("attention_bias",)),
}
IGNORED = {
    "llama": frozenset(rope_keys("rms_norm_eps") + ("pretraining_tp",)),
    "mistral": frozenset(rope_keys("rms_norm_eps")),
    "mixtral": frozenset(rope_keys("rms_norm_eps") + ("router_aux_loss_coef",)),
    "qwen2": frozenset(rope_keys("rms_norm_eps")),
    "qwen3": frozenset(rope_keys("rms_norm_eps")),
}
TITLES = {"llama": "Llama", "mistral": "Mistral", "mixtral": "Mixtral", "qwen2": "Qwen2",
          "qwen3": "Qwen3"}
LM = {"llama": ("LlamaForCausalLM",), "mistral": ("MistralForCausalLM",),
      "mixtral": ("MixtralForCausalLM",), "qwen2": ("Qwen2ForCausalLM",),
      "qwen3": ("Qwen3ForCausalLM",)}


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    d = model_base(c, o, f"{TITLES[t]} decoder (from {o.source})")
    attn_p = dropout(c, "attention_dropout")
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim")
    layers = c.integer("num_hidden_layers")
    activation = c.activation("hidden_act", "silu")
    bias = (False,) * 4
    mlp_bias = False
    if t == "llama":
        ab = c.flag("attention_bias", False)
        bias, mlp_bias = (ab,) * 4, c.flag("mlp_bias", False)
    elif t == "qwen2":
        bias = (True, True, True, False)
    elif t == "qwen3":
        bias = (c.flag("attention_bias", False),) * 4   # q, k, v and o_proj
    experts = None
    if t == "mixtral":
        experts = c.integer("num_local_experts")
        active = c.integer("num_experts_per_tok")
        if active > experts:
            raise c.error("num_experts_per_tok", f"num_experts_per_tok = {active} exceeds "
                                                 f"num_local_experts = {experts}",
                          "a token is routed to at most every expert")
        c.must_be("output_router_logits", False, False,
                  "symflops counts no load-balancing loss")
        c.zero("router_jitter_noise", "the declaration has no router jitter")
        moe_dims(d, experts, active, "num_local_experts", "num_experts_per_tok")
        d.dim("F", "hidden width of one expert", c.integer("intermediate_size"),
              "intermediate_size")
    else:
        d.dim("F", "MLP hidden width", c.integer("intermediate_size"), "intermediate_size")
    kinds = layer_kinds(c, layers, windowed_family=t in ("mistral", "mixtral"))
    if any(kind == "sliding" for kind, _ in kinds):
        window_dim(d, c)
    qk = Norm("rmsnorm", module="q_norm / k_norm") if t == "qwen3" else None
    rotary_embedding(d)
    previous = "X0"
    for i, (kind, count) in enumerate(kinds):
        window = kind == "sliding"
        name = "layer" if len(kinds) == 1 else f"layer_{kind}"
        blk = d.block(name, f"{TITLES[t]} decoder block" + (" (sliding window)" if window
                                                              else ""))
        blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
        norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
             "attention sub-block: RMSNorm, causal attention, residual")
        outs = attention(d, blk, Attention("g,r" if grouped else "n", bias, qk, window=window,
                                           count=o.attention, dropout=attn_p), "X", "Xn", "Y1")
        norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn", "Y1", "g2",
             "b,s,d", "d", "MLP sub-block: RMSNorm, " + ("routed experts" if experts else
                                                         "gated MLP") + ", residual")
        if experts:
            mouts, routed = moe(blk, Moe(activation), "Yn")
            blk.op(f"Y[b,s,d] = Y1[b,s,d] + {routed}", "the k experts' sum, the residual")
            mouts.append("Y")
        else:
            mouts = mlp(blk, Mlp(True, activation, mlp_bias), "Y1", "Yn", "Y")
        blk.component("attention", outs)
        blk.component("experts" if experts else "MLP", mouts)
        blk.component("norms", ["Xn", "Yn"])
        nxt = "XL" if i == len(kinds) - 1 else f"X{i + 1}"
        repeat = layer_count(d, kind, count, len(kinds), "num_hidden_layers" if len(kinds) == 1
                             else "layer_types" if c.has("layer_types")
                             else "num_hidden_layers, use_sliding_window, max_window_layers")
        include_block(d, blk, repeat, previous, nxt, "_sw" if i else "",
                      None if len(kinds) == 1 else f"the {count} layers of {kind} attention"
                      + (" (their tensors renamed _sw)" if i else ""))
        previous = nxt
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
