"""DeepSeek-V2 (``deepseek_v2``) and DeepSeek-V3 (``deepseek_v3``), as
transformers builds them (``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``).

Each layer: RMSNorm, multi-head latent attention (MLA), residual; RMSNorm, an
MLP, residual.  The first ``first_k_dense_replace`` layers have a dense SwiGLU
MLP (``intermediate_size``), the others DeepSeekMoE: a router over
``n_routed_experts`` experts of width ``moe_intermediate_size``,
``num_experts_per_tok`` per token, plus one shared MLP of width
``n_shared_experts * moe_intermediate_size``.  What changes a count:

* MLA: ``q_lora_rank`` (a query latent with its RMSNorm, or null: one
  ``q_proj``), ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``, ``attention_bias`` (biases of q_a_proj, kv_a_proj_with_mqa
  and o_proj only), ``attention_dropout`` (a dropout of the probabilities);
* ``first_k_dense_replace``, ``num_hidden_layers``, ``intermediate_size``,
  ``moe_intermediate_size``, ``n_routed_experts``, ``n_shared_experts``,
  ``num_experts_per_tok``, ``mlp_bias`` (V2: the dense and shared MLPs' biases,
  never the routed experts'), ``hidden_act``, ``tie_word_embeddings``;
* elementwise only: V2's softmax router and V3's sigmoid router with
  ``norm_topk_prob`` (V3) and ``routed_scaling_factor``.

Routing choices (``topk_method``, ``n_group``, ``topk_group``, V3's
``e_score_correction_bias``, a buffer) select k experts per token whatever
they are: no count changes; they are checked so that the model runs.  The MTP
module (``num_nextn_predict_layers``) is not built by transformers' causal LM
(the checkpoint's extra layer is dropped at load): not counted.

Conventions.  Fused projections (q_b_proj, kv_a_proj_with_mqa, kv_b_proj, the
experts' gate_up_proj) are written as the parts the code splits them into:
the same parameters and products.  The routed experts are counted as
transformers' ``batched_mm`` runs them, each token-expert pair's products
once (:func:`symflops.hf.experts.moe`: exact at every B and S); the combine
(weights times outputs, summed over a token's k experts) is elementwise.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import mixing
from ..config import Config
from ..emit import Block, Declaration
from ..experts import Moe, moe, moe_dims, shared_mlp
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, check_expert_groups, include_block, model_base, number_text, \
    rope_keys

_READ = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "max_position_embeddings", "q_lora_rank", "kv_lora_rank",
         "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size",
         "moe_intermediate_size", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
         "first_k_dense_replace", "attention_bias", "attention_dropout", "hidden_act",
         "tie_word_embeddings", "norm_topk_prob", "routed_scaling_factor", "n_group",
         "topk_group", "topk_method", "scoring_func", "moe_layer_freq")
READ = {
    # num_experts: transformers' alias of n_routed_experts (attribute_map)
    "deepseek_v2": frozenset(_READ + ("mlp_bias", "num_experts")),
    # num_local_experts: the alias of n_routed_experts
    "deepseek_v3": frozenset(_READ + ("num_local_experts",)),
}
_IGNORED = rope_keys(
    "rms_norm_eps",
    # not read by the modeling code
    "pretraining_tp",
    # overwritten in the config's __post_init__ (qk_rope_head_dim; qk_nope + qk_rope)
    "head_dim", "qk_head_dim",
    # DeepSeek's own code: the balance loss's weight and kind (transformers computes no
    # auxiliary loss for these models) and the expert-parallel degree (one device)
    "aux_loss_alpha", "seq_aux", "ep_size",
    # the router's logits returned as an output: no loss is added, no count changes
    "output_router_logits",
)
IGNORED = {
    "deepseek_v2": frozenset(_IGNORED),
    "deepseek_v3": frozenset(_IGNORED + (
        # interleaved pairs or rotate_half: the same elementwise rotation
        "rope_interleave",
        # the multi-token-prediction module: DeepseekV3ForCausalLM does not build it (its
        # weights, model.layers.61, are dropped at load); transformers' MtpModel is a
        # separate model for speculative decoding only
        "num_nextn_predict_layers", "num_mtp_layers")),
}
TITLES = {"deepseek_v2": "DeepSeek-V2", "deepseek_v3": "DeepSeek-V3"}
LM = {"deepseek_v2": ("DeepseekV2ForCausalLM",), "deepseek_v3": ("DeepseekV3ForCausalLM",)}
DEFAULTS = {  # the config classes' defaults (transformers 5.24)
    "deepseek_v2": dict(first_k_dense_replace=0, routed_scaling_factor=Fraction(1),
                        topk_method="greedy", norm_topk_prob=False, scoring="softmax",
                        experts=64, shared=2, moe_width=1407, q_lora=1536),
    "deepseek_v3": dict(first_k_dense_replace=3, routed_scaling_factor=Fraction(5, 2),
                        topk_method="noaux_tc", norm_topk_prob=True, scoring="sigmoid",
                        experts=256, shared=1, moe_width=2048, q_lora=1536),
}


def _experts(c: Config, default: int) -> int:
    aliases = [k for k in ("n_routed_experts", "num_experts", "num_local_experts") if c.has(k)]
    values = {c.integer(k) for k in aliases}
    if len(values) > 1:
        raise c.error(aliases[1], f"{' and '.join(aliases)} disagree",
                      "give the number of routed experts once, as n_routed_experts")
    return values.pop() if values else default


def _mla(blk: Block, qlora: bool, bias: bool, full_square: bool, dropout: str | None) -> list[str]:
    """Multi-head latent attention of ``Xn`` added to ``X``, into ``Y1``."""
    blk.uses("B", "S", "D", "N", *(("Q",) if qlora else ()), "K", "En", "Er", "E")
    outs: list[str] = []
    if qlora:
        blk.tensor("W_dq", ["D", "Q"], "param", "query down-projection (q_a_proj)")
        if bias:
            blk.tensor("b_dq", ["Q"], "param", "bias of q_a_proj (attention_bias)")
        blk.tensor("g_q", ["Q"], "param", "gain of the query latent's RMSNorm (q_a_layernorm)")
        src, letter, shape = "Cqn", "q", "Q"
        blk.op("Cq[b,s,q] = Xn[b,s,d] W_dq[d,q]" + (" + b_dq[q]" if bias else ""),
               "queries: a latent (q_lora_rank wide), RMS-normalised, then up-projected "
               "per head (q_b_proj)")
        blk.op("Cqn[b,s,q] = rmsnorm_q(Cq[b,s,q]) * g_q[q]")
        outs += ["Cq", "Cqn"]
        module = "q_b_proj"
    else:
        src, letter, shape = "Xn", "d", "D"
        module = "q_proj"
    blk.tensor("W_uq", [shape, "N", "En"], "param", f"query projection, position-free part ({module})")
    blk.tensor("W_qr1", [shape, "N", "Er"], "param", f"query projection, first rotary half ({module})")
    blk.tensor("W_qr2", [shape, "N", "Er"], "param", f"query projection, second rotary half ({module})")
    blk.tensor("W_dkv", ["D", "K"], "param", "key/value down-projection to the latent "
                                             "(kv_a_proj_with_mqa, its first kv_lora_rank rows)")
    blk.tensor("W_kr1", ["D", "Er"], "param", "shared rotary key, first half (kv_a_proj_with_mqa)")
    blk.tensor("W_kr2", ["D", "Er"], "param", "shared rotary key, second half (kv_a_proj_with_mqa)")
    if bias:
        blk.tensor("b_dkv", ["K"], "param", "bias of kv_a_proj_with_mqa, latent part (attention_bias)")
        blk.tensor("b_kr1", ["Er"], "param", "bias of kv_a_proj_with_mqa, rotary first half")
        blk.tensor("b_kr2", ["Er"], "param", "bias of kv_a_proj_with_mqa, rotary second half")
    blk.tensor("g_kv", ["K"], "param", "gain of the latent's RMSNorm (kv_a_layernorm)")
    blk.tensor("W_uk", ["K", "N", "En"], "param", "key up-projection from the latent (kv_b_proj)")
    blk.tensor("W_uv", ["K", "N", "E"], "param", "value up-projection from the latent (kv_b_proj)")
    blk.tensor("W_o", ["N", "E", "D"], "param", "output projection (o_proj)")
    if bias:
        blk.tensor("b_o", ["D"], "param", "bias of o_proj (attention_bias)")
    blk.tensor("cos", ["S", "Er"], "buffer", "rotary table cos(position * frequency)")
    blk.tensor("sin", ["S", "Er"], "buffer", "rotary table sin(position * frequency)")
    x = letter
    blk.op(f"Qc[b,s,n,c] = {src}[b,s,{x}] W_uq[{x},n,c]")
    blk.op(f"Qp1[b,s,n,i] = {src}[b,s,{x}] W_qr1[{x},n,i]")
    blk.op(f"Qp2[b,s,n,i] = {src}[b,s,{x}] W_qr2[{x},n,i]")
    blk.op("Qr1[b,s,n,i] = Qp1[b,s,n,i] cos[s,i] - Qp2[b,s,n,i] sin[s,i]",
           "rotary positions on the rotary part, as pairs (V2's complex product, V3's "
           "interleaved pairs): elementwise")
    blk.op("Qr2[b,s,n,i] = Qp2[b,s,n,i] cos[s,i] + Qp1[b,s,n,i] sin[s,i]")
    blk.op("Qh[b,s,n,e] = concat_e(Qc[b,s,n,c], Qr1[b,s,n,i], Qr2[b,s,n,j])",
           "each head's query: [position-free | rotary], a copy")
    bl, b1, b2 = (" + b_dkv[l]", " + b_kr1[i]", " + b_kr2[i]") if bias else ("", "", "")
    blk.op(f"Ckv[b,t,l] = Xn[b,t,d] W_dkv[d,l]{bl}",
           "keys and values: one latent (kv_lora_rank) and one rotary key shared by the heads "
           "(kv_a_proj_with_mqa); the latent RMS-normalised and up-projected (kv_b_proj)")
    blk.op("Ckvn[b,t,l] = rmsnorm_l(Ckv[b,t,l]) * g_kv[l]")
    blk.op("Kc[b,t,n,c] = Ckvn[b,t,l] W_uk[l,n,c]")
    blk.op("Vh[b,t,n,f] = Ckvn[b,t,l] W_uv[l,n,f]")
    blk.op(f"Kp1[b,t,i] = Xn[b,t,d] W_kr1[d,i]{b1}")
    blk.op(f"Kp2[b,t,i] = Xn[b,t,d] W_kr2[d,i]{b2}")
    blk.op("Kr1[b,t,i] = Kp1[b,t,i] cos[t,i] - Kp2[b,t,i] sin[t,i]")
    blk.op("Kr2[b,t,i] = Kp2[b,t,i] cos[t,i] + Kp1[b,t,i] sin[t,i]")
    blk.op("Kh[b,t,n,e] = concat_e(Kc[b,t,n,c], Kr1[b,t,i], Kr2[b,t,j])",
           "each head's key: its own position-free part and the shared rotary key (a copy; "
           "the rotary key's gradient sums over the heads)")
    outs += ["Qc", "Qp1", "Qp2", "Qr1", "Qr2", "Qh", "Ckv", "Ckvn", "Kc", "Vh", "Kp1", "Kp2",
             "Kr1", "Kr2", "Kh"]
    outs += mixing(blk, "n", "n", "Qh", "Kh", "Vh", "sqrt(En + 2*Er)",
                   "full-square" if full_square else "exact", dropout=dropout,
                   extra_note="; the scale, YaRN's mscale included, is a constant", value="f")
    blk.op("Y1[b,s,d] = X[b,s,d] + O[b,s,n,f] W_o[n,f,d]" + (" + b_o[d]" if bias else ""))
    return outs + ["Y1"]


def _moe(blk: Block, v3: bool, activation: str, renormalize: bool, scale: str | None,
         shared: bool, mlp_bias: bool) -> list[str]:
    """DeepSeekMoE of ``Yn`` added to ``Y1``, into ``Y``: routed experts
    (:func:`symflops.hf.experts.moe`), shared experts."""
    routing = ("the choice of the k experts adds e_score_correction_bias (a buffer) and "
               "keeps topk_group of n_group groups" if v3 else
               "the k experts chosen greedily or group-limited")
    outs, routed = moe(blk, Moe(activation, "Fe", renormalize, "sigmoid" if v3 else "softmax",
                                scale, routing, ("gate.weight, kept in fp32; no bias",
                                                 "experts.gate_up_proj", "experts.down_proj")),
                       "Yn")
    if shared:
        blk.uses("Ns", "Fs")
    last = f"Y[b,s,d] = Y1[b,s,d] + {routed}"
    if shared:
        souts, term = shared_mlp(blk, activation, "Yn", bias=mlp_bias,
                                 comment="shared experts: one gated MLP, n_shared_experts * "
                                         "moe_intermediate_size wide")
        last += f" + {term}"
        outs += souts
    if mlp_bias:
        # with n_shared_experts 0 the (empty) shared MLP keeps its down_proj bias
        blk.tensor("b_sdown", ["D"], "param", "bias of the shared down_proj (mlp_bias)")
        last += " + b_sdown[d]"
    blk.op(last)
    return outs + ["Y"]


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    v3 = t == "deepseek_v3"
    dflt = DEFAULTS[t]
    d = model_base(c, o, f"{TITLES[t]} decoder (from {o.source})")
    full_square = o.attention == "full-square"
    # -- dims of the attention
    d.dim("V", "vocabulary size", c.integer("vocab_size"), "vocab_size")
    seq = c.integer("max_position_embeddings")
    d.dim("S", "sequence length (the context)", seq, "max_position_embeddings")
    d.dim("D", "model width (d_model)", c.integer("hidden_size"), "hidden_size")
    heads = c.integer("num_attention_heads")
    d.dim("N", "attention heads", heads, "num_attention_heads")
    if c.integer("num_key_value_heads", heads) != heads:
        raise c.error("num_key_value_heads", f"num_key_value_heads = "
                                             f"{c.data['num_key_value_heads']} differs from "
                                             f"num_attention_heads = {heads}",
                      "MLA's kv_b_proj makes a key and a value for every head; transformers' "
                      "eager attention would repeat them again and fail: set "
                      "num_key_value_heads to num_attention_heads")
    q_lora = c.optional_integer("q_lora_rank") if "q_lora_rank" in c.data else dflt["q_lora"]
    if q_lora is not None:
        d.dim("Q", "query latent rank", q_lora, "q_lora_rank")
    d.dim("K", "key/value latent rank", c.integer("kv_lora_rank", 512), "kv_lora_rank")
    d.dim("En", "per-head query/key width without position", c.integer("qk_nope_head_dim", 128),
          "qk_nope_head_dim")
    rope = c.integer("qk_rope_head_dim", 64)
    if rope % 2:
        raise c.error("qk_rope_head_dim", f"qk_rope_head_dim = {rope} is odd",
                      "rotary positions rotate pairs: give an even width")
    d.dim("Er", "half the rotary width (pairs of the rotary part)", rope // 2,
          "qk_rope_head_dim / 2")
    d.dim("E", "per-head value width", c.integer("v_head_dim", 128), "v_head_dim")
    bias = c.flag("attention_bias", False)
    drop = c.fraction("attention_dropout", Fraction(0))
    dropout = None if drop == 0 else number_text(drop, c.data.get("attention_dropout"))
    # -- layers and MLPs
    layers = c.integer("num_hidden_layers")
    dense = min(c.integer("first_k_dense_replace", dflt["first_k_dense_replace"], minimum=0),
                layers)
    routed = layers - dense
    activation = c.activation("hidden_act", "silu")
    mlp_bias = c.flag("mlp_bias", False) if not v3 else False
    c.must_be("moe_layer_freq", 1, 1, "transformers makes every layer from "
                                      "first_k_dense_replace on an MoE layer (DeepSeek's own code "
                                      "would skip some): the two disagree")
    if dense:
        d.dim("F", "dense MLP hidden width", c.integer("intermediate_size"), "intermediate_size")
    if routed:
        experts = _experts(c, dflt["experts"])
        active = c.integer("num_experts_per_tok", 8 if v3 else None)
        if active > experts:
            raise c.error("num_experts_per_tok", f"num_experts_per_tok = {active} exceeds "
                                                 f"n_routed_experts = {experts}",
                          "a token is routed to at most every expert")
        c.must_be("scoring_func", dflt["scoring"], dflt["scoring"],
                  f"transformers' {TITLES[t]} router always uses {dflt['scoring']} scores")
        if v3:
            c.must_be("topk_method", "noaux_tc", "noaux_tc",
                      "transformers' DeepSeek-V3 router always picks the experts with the "
                      "correction bias within the best groups (noaux_tc)")
            limited = True
            renormalize = c.flag("norm_topk_prob", True)
        else:
            method = c.choice("topk_method", "greedy", ("greedy", "group_limited_greedy"),
                              "transformers' DeepSeek-V2 router has only these two")
            limited = method == "group_limited_greedy"
            c.must_be("norm_topk_prob", False, False,
                      "transformers' DeepSeek-V2 router ignores it, DeepSeek's own code "
                      "renormalises the weights: the two disagree")
            renormalize = False
        check_expert_groups(c, experts, active, limited, v3)
        factor = c.number("routed_scaling_factor", dflt["routed_scaling_factor"])
        scale = None if factor == 1 else number_text(factor, c.data.get("routed_scaling_factor"))
        shared = c.integer("n_shared_experts", dflt["shared"], minimum=0)
        d.dim("Fe", "hidden width of one routed expert",
              c.integer("moe_intermediate_size", dflt["moe_width"]), "moe_intermediate_size")
        if shared:
            d.dim("Ns", "shared experts (one MLP of their summed width)", shared,
                  "n_shared_experts")
            d.dim("Fs", "hidden width of the shared experts (n_shared_experts x "
                        "moe_intermediate_size)", equals="Ns * Fe")
        moe_dims(d, experts, active, "n_routed_experts", "num_experts_per_tok")
    # -- the model
    rotary_embedding(d)
    kinds = [(k, n) for k, n in (("dense", dense), ("moe", routed)) if n]
    previous = "X0"
    for i, (kind, count) in enumerate(kinds):
        name = "layer" if len(kinds) == 1 else f"layer_{kind}"
        blk = d.block(name, f"{TITLES[t]} decoder layer, " +
                      ("dense MLP" if kind == "dense" else "DeepSeekMoE"))
        blk.tensor("X", ["B", "S", "D"], "input", "the layer's input (the residual stream)")
        norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
             "attention sub-block: RMSNorm, multi-head latent attention, residual")
        outs = _mla(blk, q_lora is not None, bias, full_square, dropout)
        norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn", "Y1", "g2",
             "b,s,d", "d", "MLP sub-block: RMSNorm, " +
             ("dense SwiGLU MLP" if kind == "dense" else "routed and shared experts") +
             ", residual")
        if kind == "dense":
            mouts = mlp(blk, Mlp(True, activation, mlp_bias), "Y1", "Yn", "Y")
        else:
            mouts = _moe(blk, v3, activation, renormalize, scale, shared > 0, mlp_bias)
        blk.component("attention", outs)
        blk.component("MLP" if kind == "dense" else "experts", mouts)
        blk.component("norms", ["Xn", "Yn"])
        nxt = "XL" if i == len(kinds) - 1 else f"X{i + 1}"
        if len(kinds) == 1:
            repeat = d.dim("L", "layers (decoder blocks)", count, "num_hidden_layers")
        elif kind == "dense":
            repeat = d.dim("L_dense", "the first layers, with a dense MLP", count,
                           "first_k_dense_replace")
        else:
            repeat = d.dim("L_moe", "the mixture-of-experts layers", count,
                           "num_hidden_layers - first_k_dense_replace")
        include_block(d, blk, repeat, previous, nxt, "_d" if kind == "dense" and routed else "",
                  None if len(kinds) == 1 else f"{count} {kind} layers" +
                  (" (their tensors renamed with _d: the MoE layers' have the same names)"
                   if kind == "dense" else ""))
        previous = nxt
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
