"""Qwen3-Next (``qwen3_next``) and Qwen3.5's text model (``qwen3_5_text``),
transformers 5.24: gated DeltaNet layers (:mod:`symflops.hf.deltanet`) and, every
``full_attention_interval`` layers (or as ``layer_types`` lists them), gated
full-attention layers; Qwen3-Next's feed-forward is ``num_experts`` routed experts
(the softmax of every expert's logit, the top ``num_experts_per_tok`` kept,
renormalised with ``norm_topk_prob``) with a shared expert scaled by
``sigmoid(shared_expert_gate(x))``, on the layers ``mlp_only_layers`` and
``decoder_sparse_step`` make sparse, else a gated MLP of ``intermediate_size``;
Qwen3.5's is the gated MLP on every layer.  Up to four blocks (mixer x
feed-forward).

The full-attention layer: ``q_proj`` gives each head's query and its output gate
(2 N E rows), q_norm and k_norm (zero-centred RMSNorms, gain ``1 + w``, of each
head's width), rotary positions on the first ``E_r = int(E partial_rotary_factor)``
entries of a head, grouped keys and values, the output times ``sigmoid(gate)``
before ``o_proj``; biases on q (both halves), k, v and o with ``attention_bias``.
Every norm of the model is zero-centred (``(1 + w)``) but the DeltaNet's gated one.

Where transformers' torch path runs other matrix products than the model defines,
the declaration counts the model's; the differences, tested exactly in
``tests/test_hf_qwen3_next.py``: ``q k^T`` once per value head (q and k repeated);
the triangular solves, not counted by FlopCounterMode but for their matrix's
gradient over the full square; the chunk loop's products with the zero state and the
final state's; the convolution over ``S + K - 1`` outputs, and FlopCounterMode's
ungrouped count of its weight gradient; and the other way, the gradients of the
products with a tensor broadcast over the value heads of a key head or over a
head's width, which symflops counts as matrix-vector products and torch, after its
repeat or broadcast, as elementwise.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention, attention
from ..config import BY_HAND, Config
from ..deltanet import DeltaNet, deltanet
from ..emit import Block, Declaration
from ..experts import Moe, moe, moe_dims
from ..layers import kinds_as_blocks
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, dropout, partial_rotary, rope_keys, rotary_fraction, \
    sized_decoder
from .qwen_moe import _shared_expert

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
         "max_position_embeddings", "tie_word_embeddings", "attention_bias",
         "attention_dropout", "partial_rotary_factor", "layer_types", "full_attention_interval",
         "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
         "linear_num_key_heads", "linear_num_value_heads")
READ = {
    "qwen3_next": frozenset(_BASE + ("decoder_sparse_step", "moe_intermediate_size",
                                     "shared_expert_intermediate_size", "num_experts_per_tok",
                                     "num_experts", "norm_topk_prob", "output_router_logits",
                                     "mlp_only_layers", "use_sliding_window")),
    "qwen3_5_text": frozenset(_BASE + ("attn_output_gate",)),
}
# rms_norm_eps: a value (also the l2norm's and gated norm's epsilon); rope_theta,
# rope_scaling, rope_parameters: the rotary tables' values (partial_rotary_factor inside
# rope_parameters is read); router_aux_loss_coef: the load-balancing loss's weight
# (output_router_logits refused); Qwen3.5's mtp_num_hidden_layers and
# mtp_use_dedicated_embeddings: the multi-token-prediction layers, which transformers does
# not build (their weights are ignored on loading); mamba_ssm_dtype: the state's dtype
IGNORED = {
    "qwen3_next": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef")),
    "qwen3_5_text": frozenset(rope_keys("rms_norm_eps", "mtp_num_hidden_layers",
                                        "mtp_use_dedicated_embeddings", "mamba_ssm_dtype")),
}
TITLES = {"qwen3_next": "Qwen3-Next", "qwen3_5_text": "Qwen3.5"}
LM = {"qwen3_next": ("Qwen3NextForCausalLM",), "qwen3_5_text": ("Qwen3_5ForCausalLM",)}
DEFAULTS = {
    "qwen3_next": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                       num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2,
                       head_dim=256, max_position_embeddings=32768),
    "qwen3_5_text": dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288,
                         num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4,
                         head_dim=256, max_position_embeddings=32768),
}
#: transformers' torch_chunk_gated_delta_rule's chunk length (not a config key)
CHUNK = 64


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    title = TITLES[t]
    d, heads, n = sized_decoder(c, o, title, DEFAULTS[t], True)
    activation = c.activation("hidden_act", "silu")
    attn_p = dropout(c, "attention_dropout")
    if t == "qwen3_5_text":
        c.must_be("attn_output_gate", True, True, "transformers' Qwen3.5 always gates the "
                                                  "attention's output")
    else:
        c.must_be("use_sliding_window", False, False, "transformers' Qwen3-Next has no "
                                                      "sliding window")
    kinds = _mixers(c, n)
    sparse = _sparse(c, n) if t == "qwen3_next" else [False] * n
    plan = [(k, "moe" if s else "mlp") for k, s in zip(kinds, sparse)]
    if "full" in kinds:
        fraction, key = rotary_fraction(c, Fraction(1, 4))   # the classes' default
        width = d.dims["E"].value
        assert width is not None
        partial = partial_rotary(d, c, key, width, int(width * fraction))
    else:
        partial = False
    if "linear" in kinds:
        _deltanet_dims(d, c)
    if any(f == "moe" for _, f in plan):
        experts = c.integer("num_experts", 512)
        active = c.integer("num_experts_per_tok", 10)
        if active > experts:
            raise c.error("num_experts_per_tok", f"num_experts_per_tok = {active} exceeds "
                                                 f"num_experts = {experts}",
                          "a token is routed to at most every expert")
        moe_dims(d, experts, active, "num_experts", "num_experts_per_tok",
                 " and the one output of the shared expert gate")
        d.dim("F", "hidden width of one routed expert", c.integer("moe_intermediate_size", 512),
              "moe_intermediate_size")
        d.dim("Fs", "hidden width of the shared expert",
              c.integer("shared_expert_intermediate_size", 512),
              "shared_expert_intermediate_size")
    if t == "qwen3_next":
        c.must_be("output_router_logits", False, False, "symflops counts no load-balancing loss")
    if any(f == "mlp" for _, f in plan):
        d.dim("Fd", "MLP hidden width of a dense layer",
              c.integer("intermediate_size", DEFAULTS[t]["intermediate_size"]),
              "intermediate_size")
    attn = Attention(heads, (c.flag("attention_bias", False),) * 4, qk_norm=Norm(
        "rmsnorm", unit_offset=True, module="q_norm / k_norm"), partial=partial,
        count=o.attention, dropout=attn_p, output_gate=True)
    mixer = DeltaNet(activation, o.attention, fused=t == "qwen3_next")
    ffn = Moe(activation, renormalize=c.flag("norm_topk_prob", True),
              modules=("gate.weight", "experts.gate_up_proj", "experts.down_proj"))
    rotary_embedding(d, note="partial: E_r entries of a head" if partial else "")
    # the DeltaNet blocks first (no count depends on the blocks' order)
    order = sorted(dict.fromkeys(plan), key=lambda kind: kind[0] != "linear")
    kinds_as_blocks(
        d, order, plan, title,
        lambda mix, ff: ("gated DeltaNet" if mix == "linear" else "full-attention")
        + " layers with " + ("routed experts" if ff == "moe" else "an MLP"),
        lambda blk, mix, ff: _layer(d, blk, mix, ff, attn, mixer, ffn, activation),
        "layer_types or full_attention_interval"
        + (", mlp_only_layers, decoder_sparse_step" if t == "qwen3_next" else ""))
    model_head(d, Norm("rmsnorm", unit_offset=True, module="norm"),
               c.flag("tie_word_embeddings", False), "tie_word_embeddings")
    if "linear" in kinds:
        d.multiple = (CHUNK, "the gated DeltaNet's chunk length, "
                             "torch_chunk_gated_delta_rule's chunk_size")
    return d


def _mixers(c: Config, n: int) -> list[str]:
    """Each layer's sequence mixer, "linear" (gated DeltaNet) or "full" (attention):
    ``layer_types`` (the interval then unused, as in transformers), else every
    ``full_attention_interval``-th layer full (default 4)."""
    given = c.strings("layer_types", ("linear_attention", "full_attention"), n)
    interval = c.integer("full_attention_interval", 4)
    if given is not None:       # transformers reads layer_types, the interval unused
        return ["linear" if k == "linear_attention" else "full" for k in given]
    return ["linear" if (i + 1) % interval else "full" for i in range(n)]


def _sparse(c: Config, n: int) -> list[bool]:
    """Whether each layer's feed-forward is the routed experts (Qwen3-Next's rule)."""
    only = c.integers("mlp_only_layers")
    if any(i >= n for i in only) or len(set(only)) != len(only):
        raise c.error("mlp_only_layers", f"mlp_only_layers must name distinct layers among "
                                         f"0 .. {n - 1}",
                      "list each dense layer's index once, or remove the key")
    experts = c.integer("num_experts", 512, minimum=0)
    step = c.integer("decoder_sparse_step", 1)
    return [i not in only and experts > 0 and (i + 1) % step == 0 for i in range(n)]


def _deltanet_dims(d: Declaration, c: Config) -> None:
    hk = c.integer("linear_num_key_heads", 16)
    hv = c.integer("linear_num_value_heads", 32)
    rv = c.divide("linear_num_value_heads", hv, "linear_num_key_heads", hk,
                  "each key head serves a whole group of value heads")
    d.dim("Hk", "key heads of the gated DeltaNet (q and k)", hk, "linear_num_key_heads")
    d.dim("Rv", "value heads per key head", rv, "linear_num_value_heads / linear_num_key_heads")
    d.dim("Hv", "value heads of the gated DeltaNet", equals="Hk * Rv")
    d.dim("Dk", "width of a key head", c.integer("linear_key_head_dim", 128),
          "linear_key_head_dim")
    d.dim("Dv", "width of a value head", c.integer("linear_value_head_dim", 128),
          "linear_value_head_dim")
    taps = c.integer("linear_conv_kernel_dim", 4)
    if taps < 2:
        raise c.error("linear_conv_kernel_dim", f"linear_conv_kernel_dim = {taps}: a "
                      "convolution of one tap has no padding, which the declaration writes as "
                      "Kp = taps - 1 >= 1 zeros",
                      "use linear_conv_kernel_dim >= 2, " + BY_HAND)
    d.dim("Kp", "zeros in front of the causal depthwise convolution's input (its taps less "
                "one: the kernel has Kp + 1 taps)", taps - 1, "linear_conv_kernel_dim - 1")
    d.dim("Qc", "chunk length of the gated delta rule (S must be a multiple of it)", CHUNK,
          "transformers' torch_chunk_gated_delta_rule (64)")
    d.dim("Nk", "chunks of a sequence (S / Qc)", equals="S / Qc")


def _layer(d: Declaration, blk: Block, mix: str, ff: str, attn: Attention, mixer: DeltaNet,
           ffn: Moe, activation: str) -> None:
    blk.uses("B", "S", "D")
    n1 = norm(blk, Norm("rmsnorm", unit_offset=True, module="input_layernorm"), "Xn", "X",
              "g1", "b,s,d", "d", "mixer sub-layer: norm (zero-centred: gain 1 + w), "
              + ("gated DeltaNet" if mix == "linear" else "gated causal attention")
              + ", residual")
    if mix == "linear":
        outs = deltanet(blk, mixer, "X", "Xn", "Y1")
    else:
        outs = attention(d, blk, attn, "X", "Xn", "Y1")
    n2 = norm(blk, Norm("rmsnorm", unit_offset=True, module="post_attention_layernorm"), "Yn",
              "Y1", "g2", "b,s,d", "d", "feed-forward sub-layer: norm, " + (
                  "routed experts and the gated shared expert" if ff == "moe" else "gated MLP")
              + ", residual")
    if ff == "moe":
        fouts, routed = moe(blk, ffn, "Yn")
        fouts += _shared_expert(d, blk, activation, "Yn")
        blk.op(f"Y[b,s,d] = Y1[b,s,d] + {routed} + Gsh[b,s] Ys[b,s,d]",
               "the routed experts' sum, the gated shared expert, the residual")
        fouts.append("Y")
    else:
        blk.uses("Fd")
        fouts = mlp(blk, Mlp(True, activation, width="Fd"), "Y1", "Yn", "Y")
    blk.component("gated DeltaNet" if mix == "linear" else "attention", outs)
    blk.component("experts" if ff == "moe" else "MLP", fouts)
    blk.component("norms", [*n1, *n2])


#: the multimodal wrapper's keys, read only to refuse it with its advice.
_MULTIMODAL = frozenset({"text_config", "vision_config", "image_token_id", "video_token_id",
                         "vision_start_token_id", "vision_end_token_id", "tie_word_embeddings"})


def refuse_multimodal(c: Config, o: Options) -> Declaration:
    raise c.error("model_type", "model_type 'qwen3_5' is Qwen3.5's multimodal model (vision "
                                "encoder, merger and text model); symflops imports its text "
                                "model",
                  "write the object under \"text_config\" to a config.json of its own (its "
                  "model_type is \"qwen3_5_text\", architectures [\"Qwen3_5ForCausalLM\"]) and "
                  "import that; " + BY_HAND)


FAMILIES = (*(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ),
            Family("qwen3_5", ("Qwen3_5ForConditionalGeneration",), _MULTIMODAL, frozenset(),
                   refuse_multimodal))
