"""symflops import-hf for OLMo 2, OLMo 3 and OLMoE: the published checkpoints
against transformers 5.24 on the meta device (slow: parameters and
FlopCounterMode's training FLOPs, equal to the integer, at two layers with every
other size as published and both kinds of layer present), the published
parameter counts summed by hand, the causal triangle, and the refusals."""

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import causal_surplus, hf_counts, imported, symflops_counts

# allenai/OLMo-2-1124-7B config.json
OLMO2_7B = {
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "olmo2", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
    "torch_dtype": "float32", "transformers_version": "4.47.0.dev0", "use_cache": True,
    "vocab_size": 100352}
# allenai/Olmo-3-1025-7B config.json: three sliding-window layers (4096), then a full one
OLMO3_7B = {
    "architectures": ["Olmo3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 11008,
    "layer_types": ["sliding_attention"] * 3 + ["full_attention"]
                   + (["sliding_attention"] * 3 + ["full_attention"]) * 7,
    "max_position_embeddings": 65536, "model_type": "olmo3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1,
                     "factor": 8.0, "original_max_position_embeddings": 8192,
                     "rope_type": "yarn"},
    "rope_theta": 500000, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.57.0", "use_cache": True,
    "vocab_size": 100278}
# allenai/OLMoE-1B-7B-0924 config.json
OLMOE_1B_7B = {
    "architectures": ["OlmoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "clip_qkv": None, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 1024, "max_position_embeddings": 4096,
    "model_type": "olmoe", "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16,
    "num_key_value_heads": 16, "output_router_logits": False, "pad_token_id": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
    "router_aux_loss_coef": 0.01, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 50304}


def two_layers(config, **changes):
    """The config at two layers, every other size as published (OLMo 3: one
    sliding-window and one full layer)."""
    out = {**config, "num_hidden_layers": 2, **changes}
    if "layer_types" in config and "layer_types" not in changes:
        out["layer_types"] = ["sliding_attention", "full_attention"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    two_layers(OLMO2_7B), two_layers(OLMO3_7B), two_layers(OLMOE_1B_7B),
    # variants: grouped keys and values with biases and attention dropout; a tied
    # head; renormalised top-k weights
    two_layers(OLMO2_7B, num_key_value_heads=8, attention_bias=True, attention_dropout=0.1),
    two_layers(OLMO3_7B, tie_word_embeddings=True, num_key_value_heads=4),
    two_layers(OLMOE_1B_7B, norm_topk_prob=True, num_key_value_heads=4),
], ids=["OLMo-2-1124-7B", "Olmo-3-1025-7B", "OLMoE-1B-7B-0924", "olmo2 gqa-bias-dropout",
        "olmo3 tied-gqa", "olmoe renormalised-gqa"])
def test_counts_equal_transformers(config):
    assert symflops_counts(config, 32) == hf_counts(config, 32)


def test_published_parameter_counts():
    """Summed by hand: per layer q, k, v, o (4 D^2), the MLP (3 D F), the two
    norms and q_norm, k_norm (4 D); the embedding and the head (2 V D); the final
    norm.  OLMo-2-1124-7B: 7.3B; Olmo-3-1025-7B: 7.3B (the hub's 7,298,011,136)."""
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 4 * 4096
    assert symflops_counts(OLMO2_7B)[0] == 32 * layer + 2 * 100352 * 4096 + 4096 \
        == 7_298_617_344
    assert symflops_counts(OLMO3_7B)[0] == 32 * layer + 2 * 100278 * 4096 + 4096 \
        == 7_298_011_136
    # OLMoE-1B-7B: attention 4 D^2 and its norms 2 D, the router 64 D, 64 experts of
    # 3 D F, two norms; 6.9B (model card: 6.9B total, 1.3B active)
    layer = 4 * 2048**2 + 2 * 2048 + 64 * 2048 + 64 * 3 * 2048 * 1024 + 2 * 2048
    assert symflops_counts(OLMOE_1B_7B)[0] == 16 * layer + 2 * 50304 * 2048 + 2048 \
        == 6_919_161_856


@pytest.mark.parametrize("config, windows", [
    (two_layers(OLMO2_7B), [None, None]),
    (two_layers(OLMO3_7B, sliding_window=8), [8, None]),
    (two_layers(OLMOE_1B_7B), [None, None]),
])
def test_exact_counts_the_pairs_a_query_sees(config, windows):
    seq = 32
    full = symflops_counts(config, seq, "full-square")[1]
    exact = symflops_counts(config, seq, "exact")[1]
    heads, width = config["num_attention_heads"], config["hidden_size"] // \
        config["num_attention_heads"]
    assert full - exact == sum(causal_surplus(seq, width, heads, w) for w in windows)


def test_layers_and_norms_as_written():
    olmo3 = imported(OLMO3_7B)
    assert (olmo3.dims["L_sliding"], olmo3.dims["L_full"], olmo3.dims["W"]) == (24, 8, 4096)
    # post-norm: the attention's output normalised before the residual; q_norm over
    # all the heads' entries of a position
    assert "Y1[b,s,d] = X[b,s,d] + An[b,s,d]" in olmo3.text
    assert "rmsnorm_{n,e}(Q[b,s,n,e]) * g_q[n,e]" in olmo3.text
    assert "cos_sw" in olmo3.text       # the sliding layers' own rotary tables
    # OLMo 3 without layer_types: three sliding layers, then a full one
    default = imported({k: v for k, v in OLMO3_7B.items() if k != "layer_types"})
    assert (default.dims["L_sliding"], default.dims["L_full"]) == (24, 8)
    olmoe = imported(OLMOE_1B_7B)
    assert (olmoe.dims["M"], olmoe.dims["k"], olmoe.dims["L"]) == (64, 8, 16)
    assert "Xn[b,s,d] = rmsnorm_d(X[b,s,d])" in olmoe.text        # pre-norm


@pytest.mark.parametrize("config, key", [
    ({**OLMOE_1B_7B, "clip_qkv": 8.0}, "clip_qkv"),
    ({**OLMOE_1B_7B, "num_experts_per_tok": 65}, "num_experts_per_tok"),
    ({**OLMOE_1B_7B, "num_local_experts": 32}, "num_local_experts"),
    ({**OLMOE_1B_7B, "output_router_logits": True}, "output_router_logits"),
    ({**OLMO2_7B, "head_dim": 64}, "head_dim"),
    ({**OLMO2_7B, "sliding_window": 4096}, "sliding_window"),
    ({**OLMO3_7B, "layer_types": ["sliding_attention"] * 31}, "layer_types"),
    ({**OLMO3_7B, "layer_types": ["chunked_attention"] * 32}, "layer_types"),
    ({**OLMO2_7B, "num_key_value_heads": 5}, "num_key_value_heads"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)
