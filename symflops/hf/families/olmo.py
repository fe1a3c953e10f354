"""OLMo 2 (``olmo2``), OLMo 3 (``olmo3``) and OLMoE (``olmoe``), as transformers
5.24 builds them.

* ``olmo2``: the norms after the sub-layers, not before (``post_attention_layernorm``
  on the attention's output, ``post_feedforward_layernorm`` on the MLP's, each
  then added to the residual); ``q_norm`` and ``k_norm`` RMS-normalise the
  queries and the keys over all the heads' entries of a position together
  (gains of N E and G E entries); ``attention_bias`` (q, k, v and o);
* ``olmo3``: as ``olmo2``, with ``layer_types`` (default: three sliding-window
  layers, then a full one) and ``sliding_window`` (default 4096): two blocks,
  each with its rotary tables (the layer types' rotary settings differ);
* ``olmoe``: pre-norm layers, the q/k norms of OLMo 2, routed experts
  (``num_experts`` of ``intermediate_size``, ``num_experts_per_tok``, a softmax
  router, ``norm_topk_prob``).

Every family: ``tie_word_embeddings`` (default false), ``hidden_act``,
``attention_dropout`` (a dropout of the probabilities when positive).
"""

from __future__ import annotations

from ..attention import Attention
from ..config import Config
from ..emit import Declaration
from ..experts import Moe, moe_dims
from ..layers import Kind, Layout, layers
from ..parts import Mlp, Norm, model_head, rotary_embedding
from .common import Family, Options, dropout, rope_keys, routed_experts, sized_decoder, types_of

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
         "tie_word_embeddings", "attention_bias", "attention_dropout")
READ = {
    "olmo2": frozenset(_BASE),
    "olmo3": frozenset(_BASE + ("sliding_window", "layer_types")),
    "olmoe": frozenset(_BASE + ("num_experts", "num_local_experts", "num_experts_per_tok",
                                "norm_topk_prob", "output_router_logits", "clip_qkv")),
}
IGNORED = {
    "olmo2": frozenset(rope_keys("rms_norm_eps")),
    "olmo3": frozenset(rope_keys("rms_norm_eps")),
    # router_aux_loss_coef: the load-balancing loss's weight, computed only with
    # output_router_logits (refused)
    "olmoe": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef")),
}
TITLES = {"olmo2": "OLMo 2", "olmo3": "OLMo 3", "olmoe": "OLMoE"}
LM = {"olmo2": ("Olmo2ForCausalLM",), "olmo3": ("Olmo3ForCausalLM",),
      "olmoe": ("OlmoeForCausalLM",)}
#: the config classes' defaults (transformers 5.24), for absent keys
DEFAULTS = {
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32, max_position_embeddings=2048),
    "olmo3": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32, max_position_embeddings=2048),
    "olmoe": dict(vocab_size=50304, hidden_size=2048, intermediate_size=2048,
                  num_hidden_layers=16, num_attention_heads=16, max_position_embeddings=4096),
}


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    dflt = DEFAULTS[t]
    d, heads, n = sized_decoder(c, o, TITLES[t], dflt, False)
    activation = c.activation("hidden_act", "silu")
    bias = (c.flag("attention_bias", False),) * 4
    attn_p = dropout(c, "attention_dropout")
    qk = Norm("rmsnorm", module="q_norm / k_norm")
    width = c.integer("intermediate_size", dflt["intermediate_size"])
    if t == "olmoe":
        if c.has("clip_qkv"):
            raise c.error("clip_qkv", "key 'clip_qkv' clamps the queries, keys and values, "
                                      "which the declaration does not write",
                          "set clip_qkv to null (as the published OLMoE checkpoints do)")
        experts, active, key = routed_experts(c, ("num_experts", "num_local_experts"), 64, 8)
        moe_dims(d, experts, active, key, "num_experts_per_tok")
        d.dim("F", "hidden width of one expert", width, "intermediate_size")
        ffn: Mlp | Moe = Moe(activation, renormalize=c.flag("norm_topk_prob", False),
                             modules=("gate.weight", "experts.gate_up_proj",
                                      "experts.down_proj"))
        kinds = [Kind("layer", "layers", n,
                      Attention(heads, bias, qk, qk_norm_over="all", count=o.attention,
                                dropout=attn_p), ffn)]
        layout = Layout(Norm("rmsnorm"))
    else:
        d.dim("F", "MLP hidden width", width, "intermediate_size")
        ffn = Mlp(True, activation)
        types = ["full_attention"] * n if t == "olmo2" else types_of(
            c, n, ("full_attention", "sliding_attention"),
            ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)])
        kinds = []
        both = len(set(types)) > 1
        for kind in dict.fromkeys(types):
            sliding = kind == "sliding_attention"
            tables = ("cos_sw", "sin_sw") if sliding and both else ("cos", "sin")
            kinds.append(Kind(
                "sliding" if sliding else "full",
                "sliding-window layers" if sliding else "full-attention layers",
                types.count(kind),
                Attention(heads, bias, qk, qk_norm_over="all", window=sliding,
                          count=o.attention, dropout=attn_p, tables=tables), ffn,
                suffix="_sw" if sliding else "_f",
                count_key="layer_types" if c.has("layer_types") else
                "num_hidden_layers" if t == "olmo2" else "num_hidden_layers (pattern)",
                title="sliding window" if sliding and both else
                "full attention" if both else ""))
        if "sliding_attention" in types:
            d.dim("W", "attention window of the sliding-window layers (positions a query sees, "
                       "itself included)", c.integer("sliding_window", 4096), "sliding_window")
        layout = Layout(Norm("rmsnorm"), "post",
                        ("post_attention_layernorm", "post_feedforward_layernorm"))
    rotary_embedding(d)
    layers(d, kinds, layout, TITLES[t])
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
