"""Mixtures of experts of 2024-2026, as transformers 5.24 builds them: ``phimoe``
(Phi-3.5-MoE), ``glm4_moe`` (GLM-4.5, 4.6, 4.7), ``minimax_m2`` (MiniMax-M2).

The experts are counted as transformers' ``batched_mm`` runs them, each token's
k pairs once (:func:`symflops.hf.experts.moe`).  What each family has:

* ``phimoe``: LayerNorms with bias; attention with biases on q, k, v and o
  (``attention_bias``) and every layer windowed when ``sliding_window`` is set;
  16 experts of which the sparse mixer keeps two (its two rounds: a softmax of the
  router's logits over the experts, each round's logits masked to its candidates,
  read at its expert); ``lm_head_bias``;
* ``glm4_moe``: the first ``first_k_dense_replace`` layers a gated MLP of
  ``intermediate_size``, the others ``n_routed_experts`` of
  ``moe_intermediate_size`` with a sigmoid router (``e_score_correction_bias``, a
  buffer, and the groups only choose the experts), ``norm_topk_prob``,
  ``routed_scaling_factor``, and ``n_shared_experts`` shared ones (one gated MLP
  ``n_shared_experts`` times as wide); half of each head rotated
  (``partial_rotary_factor``); biases on q, k and v; ``use_qk_norm``;
* ``minimax_m2``: q_norm and k_norm over all the heads of a position (OLMo 2's);
  ``rotary_dim`` of each head rotated; ``num_local_experts`` of
  ``intermediate_size``, a sigmoid router (with its correction bias, a buffer), the
  k weights renormalised.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention
from ..config import Config
from ..emit import Declaration
from ..experts import Moe, moe_dims
from ..layers import Kind, Layout, Shared, layers
from ..parts import Mlp, Norm, model_head, rotary_embedding
from .common import Family, Options, check_expert_groups, dropout, number_text, partial_rotary, \
    rope_keys, rotary_fraction, routed_experts, sized_decoder

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
         "tie_word_embeddings", "attention_dropout", "num_experts_per_tok",
         "output_router_logits")
READ = {
    "phimoe": frozenset(_BASE + ("num_local_experts", "attention_bias", "sliding_window",
                                 "lm_head_bias", "router_jitter_noise", "input_jitter_noise",
                                 "hidden_dropout")),
    "glm4_moe": frozenset(_BASE + ("head_dim", "attention_bias", "moe_intermediate_size",
                                   "n_routed_experts", "num_local_experts", "n_shared_experts",
                                   "routed_scaling_factor", "n_group", "topk_group",
                                   "first_k_dense_replace", "norm_topk_prob", "use_qk_norm",
                                   "partial_rotary_factor", "rope_parameters", "rope_scaling")),
    "minimax_m2": frozenset(_BASE + ("head_dim", "num_local_experts", "num_experts",
                                     "router_jitter_noise", "rotary_dim", "attn_type_list",
                                     "use_qk_norm", "qk_norm_type", "scoring_func",
                                     "use_routing_bias", "shared_intermediate_size")),
}
_MTP = ("num_nextn_predict_layers", "num_mtp_layers")
IGNORED = {
    # router_aux_loss_coef: the load-balancing loss's weight (output_router_logits refused);
    # original_max_position_embeddings: longrope's switch between its factors (values)
    "phimoe": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef",
                                  "original_max_position_embeddings")),
    # the multi-token-prediction layer (num_nextn_predict_layers): Glm4MoeForCausalLM does
    # not build it (its weights are dropped at load)
    "glm4_moe": frozenset(("rope_theta", "rms_norm_eps", "router_aux_loss_coef") + _MTP),
    # the MTP modules of MiniMax's own code (mtp_transformer_layers, num_mtp_modules,
    # use_mtp): transformers' MiniMaxM2ForCausalLM does not build them
    "minimax_m2": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef",
                                      "mtp_transformer_layers", "num_mtp_modules", "use_mtp")),
}
TITLES = {"phimoe": "PhiMoE", "glm4_moe": "GLM-4.5 (MoE)", "minimax_m2": "MiniMax-M2"}
LM = {"phimoe": ("PhimoeForCausalLM", "PhiMoEForCausalLM"),
      "glm4_moe": ("Glm4MoeForCausalLM",), "minimax_m2": ("MiniMaxM2ForCausalLM",)}
DEFAULTS = {
    "phimoe": dict(vocab_size=32064, hidden_size=4096, intermediate_size=6400,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   max_position_embeddings=131072),
    "glm4_moe": dict(vocab_size=151552, hidden_size=4096, intermediate_size=10944,
                     num_hidden_layers=46, num_attention_heads=96, num_key_value_heads=8,
                     max_position_embeddings=131072),
    "minimax_m2": dict(vocab_size=200064, hidden_size=3072, intermediate_size=1536,
                       num_hidden_layers=62, num_attention_heads=48, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=196608),
}


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    dflt = DEFAULTS[t]
    d, heads, n = sized_decoder(c, o, TITLES[t], dflt, "head_dim" in READ[t])
    activation = c.activation("hidden_act", "silu")
    attn_p = dropout(c, "attention_dropout")
    width = c.integer("intermediate_size", dflt["intermediate_size"])
    width_e = d.dims["E"].value
    assert width_e is not None
    layout = Layout(Norm("rmsnorm"))
    final = Norm("rmsnorm", module="norm")
    head_bias = False
    if t == "phimoe":
        kinds, layout, final, head_bias = _phimoe(d, c, o, heads, attn_p, activation, width, n)
    elif t == "glm4_moe":
        kinds = _glm4_moe(d, c, o, heads, attn_p, activation, width, n, width_e)
    else:
        kinds = _minimax_m2(d, c, o, heads, attn_p, activation, width, n, width_e)
    rotary_embedding(d)
    layers(d, kinds, layout, TITLES[t])
    model_head(d, final, c.flag("tie_word_embeddings", False), "tie_word_embeddings",
               bias=head_bias)
    return d


def _phimoe(d: Declaration, c: Config, o: Options, heads: str, attn_p: str | None,
            activation: str, width: int, n: int) -> tuple[list[Kind], Layout, Norm, bool]:
    c.zero("input_jitter_noise", "in training PhiMoE multiplies each MoE layer's input by "
                                 "uniform noise (twice, in place), a random tensor the "
                                 "declaration has no op for")
    c.zero("hidden_dropout", "a key of the checkpoint's own code that transformers' PhiMoE "
                             "never applies")
    c.fraction("router_jitter_noise", Fraction(1, 100))   # the mixer's threshold: no count
    experts, active, key = routed_experts(c, ("num_local_experts",), 16, 2)
    if active != 2:
        raise c.error("num_experts_per_tok", f"num_experts_per_tok = {active}: transformers' "
                                             "PhiMoE sparse mixer always keeps two experts",
                      "set num_experts_per_tok to 2")
    d.dim("M", "routed experts in a block", experts, key)
    d.dim("O", "a unit axis (size 1): the rows of batched_mm's per-pair products", equals="1")
    d.dim("k", "experts each token is routed to: the sparse mixer's two rounds",
          equals="2*O")
    d.dim("F", "hidden width of one expert", width, "intermediate_size")
    window = c.has("sliding_window")
    if window:
        d.dim("W", "attention window (positions a query sees, itself included)",
              c.integer("sliding_window"), "sliding_window (every layer)")
    ffn = Moe(activation, renormalize=False, scores="sparsemixer",
              routing="the sparse mixer's two rounds (router_jitter_noise sets its threshold)",
              modules=("router.weight", "experts.gate_up_proj", "experts.down_proj"))
    attn = Attention(heads, (c.flag("attention_bias", False),) * 4, window=window,
                     count=o.attention, dropout=attn_p)
    ln = Norm("layernorm", bias=True)
    return ([Kind("layer", "layers", n, attn, ffn)], Layout(ln),
            Norm("layernorm", bias=True, module="norm"), c.flag("lm_head_bias", False))


def _glm4_moe(d: Declaration, c: Config, o: Options, heads: str, attn_p: str | None,
              activation: str, width: int, n: int, width_e: int) -> list[Kind]:
    fraction, key = rotary_fraction(c, Fraction(1, 2))
    partial = partial_rotary(d, c, key, width_e, int(width_e * float(fraction)))
    qk = Norm("rmsnorm", module="q_norm / k_norm") if c.flag("use_qk_norm", False) else None
    attn = Attention(heads, (c.flag("attention_bias", False),) * 3 + (False,), qk,
                     partial=partial, count=o.attention, dropout=attn_p)
    dense = min(c.integer("first_k_dense_replace", 1, minimum=0), n)
    kinds = []
    if dense:
        d.dim("Fd", "MLP hidden width of the first, dense layers", width, "intermediate_size")
        kinds.append(Kind("dense", "dense layers", dense, attn, Mlp(True, activation, width="Fd"),
                          suffix="_d", count_key="first_k_dense_replace",
                          title="dense MLP"))
    if n > dense:
        experts, active, ekey = routed_experts(c, ("n_routed_experts", "num_local_experts"),
                                               128, 8)
        check_expert_groups(c, experts, active, True, True, ekey, (1, 1))
        moe_dims(d, experts, active, ekey, "num_experts_per_tok")
        d.dim("F", "hidden width of one routed expert", c.integer("moe_intermediate_size", 1408),
              "moe_intermediate_size")
        factor = c.number("routed_scaling_factor", Fraction(1))
        assert factor is not None
        shared = c.integer("n_shared_experts", 1, minimum=0)
        if shared:
            d.dim("Ns", "shared experts (one MLP of their summed width)", shared,
                  "n_shared_experts")
            d.dim("Fs", "hidden width of the shared experts (n_shared_experts x "
                        "moe_intermediate_size)", equals="Ns * F")
        ffn = Moe(activation, renormalize=c.flag("norm_topk_prob", True), scores="sigmoid",
                  scale=None if factor == 1 else number_text(
                      factor, c.data.get("routed_scaling_factor")),
                  routing="the choice adds e_score_correction_bias (a buffer) and keeps "
                          "topk_group of n_group groups")
        kinds.append(Kind("moe", "MoE layers", n - dense, attn, ffn,
                          Shared(comment="shared experts: one gated MLP, n_shared_experts * "
                                         "moe_intermediate_size wide") if shared else None,
                          suffix="_m", count_key="num_hidden_layers - first_k_dense_replace",
                          title="routed and shared experts"))
    return kinds


def _minimax_m2(d: Declaration, c: Config, o: Options, heads: str, attn_p: str | None,
                activation: str, width: int, n: int, width_e: int) -> list[Kind]:
    if c.has("attn_type_list"):
        kinds_of = c.integers("attn_type_list")
        if len(kinds_of) < n or any(k != 1 for k in kinds_of[:n]):
            raise c.error("attn_type_list", "attn_type_list must give 1 (full attention) for "
                                            f"each of the {n} layers: transformers' MiniMax-M2 "
                                            "builds full attention everywhere (0, MiniMax's "
                                            "lightning attention, it does not build)",
                          "list 1 for every layer")
    for key, wanted, why in (
            ("use_qk_norm", True, "transformers' MiniMax-M2 always normalises the queries "
                                  "and keys"),
            ("qk_norm_type", "per_layer", "transformers' MiniMax-M2 normalises all the heads "
                                          "of a position together"),
            ("scoring_func", "sigmoid", "transformers' MiniMax-M2 router always uses a sigmoid"),
            ("use_routing_bias", True, "transformers' MiniMax-M2 always chooses the experts "
                                       "with e_score_correction_bias"),
            ("shared_intermediate_size", 0, "transformers' MiniMax-M2 has no shared expert")):
        c.must_be(key, wanted, wanted, why)
    c.zero("router_jitter_noise", "the declaration has no router jitter")
    if c.has("rotary_dim"):
        rotated, key = c.integer("rotary_dim"), "rotary_dim"
    else:
        fraction, key = rotary_fraction(c)
        rotated = int(width_e * float(fraction))
    partial = partial_rotary(d, c, key, width_e, rotated)
    experts, active, ekey = routed_experts(c, ("num_local_experts", "num_experts"), 256, 8)
    moe_dims(d, experts, active, ekey, "num_experts_per_tok")
    d.dim("F", "hidden width of one expert", width, "intermediate_size")
    attn = Attention(heads, qk_norm=Norm("rmsnorm", module="q_norm / k_norm"),
                     qk_norm_over="all", partial=partial, count=o.attention, dropout=attn_p)
    ffn = Moe(activation, scores="sigmoid",
              routing="the choice adds e_score_correction_bias (a buffer)",
              modules=("gate.weight", "experts.gate_up_proj", "experts.down_proj"))
    return [Kind("layer", "layers", n, attn, ffn)]


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
