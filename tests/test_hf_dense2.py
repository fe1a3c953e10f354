"""symflops import-hf for the dense decoders of 2024-2026: Cohere Command R and
R7B, Phi-1/2, SmolLM3, Granite, GLM-4, EXAONE 4, ERNIE 4.5.  The published
checkpoints against transformers 5.24 on the meta device (slow: parameters and
FlopCounterMode's training FLOPs, equal to the integer, at two layers with every
other size as published and each kind of layer present), the published
parameter counts summed by hand, the pairs a query sees, and the refusals."""

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, causal_surplus, hf_counts, imported, symflops_counts

# CohereForAI/c4ai-command-r-v01 config.json
COMMAND_R = {
    "architectures": ["CohereForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 5, "eos_token_id": 255001, "hidden_act": "silu", "hidden_size": 8192,
    "initializer_range": 0.02, "intermediate_size": 22528, "layer_norm_eps": 1e-05,
    "logit_scale": 0.0625, "max_position_embeddings": 8192, "model_type": "cohere",
    "num_attention_heads": 64, "num_hidden_layers": 40, "num_key_value_heads": 64,
    "pad_token_id": 0, "rope_theta": 8000000.0, "torch_dtype": "float16",
    "transformers_version": "4.38.2", "use_cache": True, "use_qk_norm": False,
    "vocab_size": 256000}
# CohereForAI/c4ai-command-r-plus config.json (grouped heads, use_qk_norm)
COMMAND_R_PLUS = {
    "architectures": ["CohereForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 5, "eos_token_id": 255001, "hidden_act": "silu", "hidden_size": 12288,
    "initializer_range": 0.02, "intermediate_size": 33792, "layer_norm_eps": 1e-05,
    "logit_scale": 0.8333333333333334, "max_position_embeddings": 8192, "model_type": "cohere",
    "num_attention_heads": 96, "num_hidden_layers": 64, "num_key_value_heads": 8,
    "pad_token_id": 0, "rope_theta": 75000000.0, "torch_dtype": "float16",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "use_qk_norm": True,
    "vocab_size": 256000}
# CohereForAI/c4ai-command-r7b-12-2024 config.json (cohere2: with the keys of Cohere's own code)
COMMAND_R7B = {
    "architectures": ["Cohere2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 5, "cache_implementation": "hybrid", "eos_token_id": 255001, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "layer_norm_eps": 1e-05, "layer_switch": 4, "logit_scale": 0.25,
    "max_position_embeddings": 8192, "model_type": "cohere2", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8,
    "order_of_interleaved_layers": "local_attn_first", "pad_token_id": 0,
    "position_embedding_type": "rope_gptj", "rope_scaling": None, "rope_theta": 50000,
    "rotary_pct": 1.0, "sliding_window": 4096, "sliding_window_pattern": 4,
    "torch_dtype": "bfloat16", "transformers_version": "4.48.0.dev0", "use_cache": True,
    "use_embedding_sharing": True, "use_gated_activation": True, "vocab_size": 256000}
# microsoft/phi-2 config.json
PHI2 = {
    "_name_or_path": "microsoft/phi-2", "architectures": ["PhiForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256,
    "hidden_act": "gelu_new", "hidden_size": 2560, "initializer_range": 0.02,
    "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "phi", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False,
    "resid_pdrop": 0.1, "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.37.0", "use_cache": True,
    "vocab_size": 51200}
# HuggingFaceTB/SmolLM3-3B config.json (every fourth layer NoPE)
SMOLLM3_3B = {
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": None, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 11008, "layer_types": ["full_attention"] * 36,
    "max_position_embeddings": 65536, "max_window_layers": 28, "mlp_bias": False,
    "model_type": "smollm3", "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0] * 9,
    "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "pad_token_id": 128004, "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 5000000.0, "sliding_window": None, "torch_dtype": "bfloat16",
    "transformers_version": "4.54.0.dev0", "use_cache": False, "use_sliding_window": False,
    "vocab_size": 128256}
# ibm-granite/granite-3.3-2b-instruct config.json
GRANITE_33_2B = {
    "architectures": ["GraniteForCausalLM"], "attention_bias": False, "attention_dropout": 0.1,
    "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0,
    "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "logits_scaling": 8.0, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "granite", "num_attention_heads": 32, "num_hidden_layers": 40,
    "num_key_value_heads": 8, "pad_token_id": 0, "residual_multiplier": 0.22,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000000.0,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.49.0",
    "use_cache": True, "vocab_size": 49159}
# THUDM/GLM-4-9B-0414 config.json
GLM4_9B_0414 = {
    "architectures": ["Glm4ForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 13696,
    "max_position_embeddings": 32768, "model_type": "glm4", "num_attention_heads": 32,
    "num_hidden_layers": 40, "num_key_value_heads": 2, "pad_token_id": 151329,
    "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.52.0.dev0",
    "use_cache": True, "vocab_size": 151552}
# LGAI-EXAONE/EXAONE-4.0-32B config.json (three sliding-window layers, then a global one)
EXAONE4_32B = {
    "architectures": ["Exaone4ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 361, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "intermediate_size": 27392,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 16,
    "max_position_embeddings": 131072, "model_type": "exaone4", "num_attention_heads": 40,
    "num_hidden_layers": 64, "num_key_value_heads": 8, "pad_token_id": 0, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 1000000, "sliding_window": 4096, "sliding_window_pattern": "LLLG",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.54.0",
    "use_cache": True, "vocab_size": 102400}
# baidu/ERNIE-4.5-0.3B-PT config.json
ERNIE45_03B = {"architectures": ["Ernie4_5ForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
  "max_position_embeddings": 131072, "model_type": "ernie4_5", "num_attention_heads": 16,
  "num_hidden_layers": 18, "num_key_value_heads": 2, "pad_token_id": 0, "rms_norm_eps": 1e-05,
  "rope_theta": 500000, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_bias": False,
  "use_cache": False, "vocab_size": 103424}


ORACLE = {
    "c4ai-command-r-v01": at_layers(COMMAND_R),
    "c4ai-command-r-plus": at_layers(COMMAND_R_PLUS),
    # the published pattern puts the first global layer fourth: a pattern of 2 gives one
    # sliding-window layer (rotary) and one global layer (NoPE) at two layers
    "c4ai-command-r7b-12-2024": at_layers(COMMAND_R7B, sliding_window_pattern=2, layer_switch=2),
    "phi-2": at_layers(PHI2),
    "phi-2 qk_layernorm, tied, embedding dropout": at_layers(PHI2, qk_layernorm=True,
                                                      tie_word_embeddings=True, embd_pdrop=0.1),
    # layers 3 (NoPE) and 0: both kinds of layer
    "SmolLM3-3B": at_layers(SMOLLM3_3B, no_rope_layers=[1, 0]),
    "SmolLM3-3B windowed NoPE layers, biases": at_layers(
        SMOLLM3_3B, 4, no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=8,
        layer_types=["full_attention", "sliding_attention"] * 2, attention_bias=True,
        mlp_bias=True, tie_word_embeddings=False),
    "granite-3.3-2b-instruct": at_layers(GRANITE_33_2B),
    "granite-3.3-2b-instruct biases": at_layers(GRANITE_33_2B, attention_bias=True, mlp_bias=True),
    "GLM-4-9B-0414": at_layers(GLM4_9B_0414),
    "EXAONE-4.0-32B": at_layers(EXAONE4_32B, layer_types=["sliding_attention", "full_attention"]),
    "ERNIE-4.5-0.3B-PT": at_layers(ERNIE45_03B),
    "ERNIE-4.5-0.3B-PT use_bias": at_layers(ERNIE45_03B, use_bias=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORACLE))
def test_counts_equal_transformers(name):
    config = ORACLE[name]
    assert symflops_counts(config, 32) == hf_counts(config, 32)


def test_published_parameter_counts():
    # Command R (35B): per layer q, k, v, o 4 D^2, the gated MLP 3 D F, one LayerNorm
    # gain (no bias); the tied embedding; the final norm
    d, f = 8192, 22528
    assert symflops_counts(COMMAND_R)[0] == 40 * (4 * d * d + 3 * d * f + d) + 256000 * d + d \
        == 34_980_831_232
    # Command R+ (104B): grouped keys and values (8 of 96 heads of 128), q_norm and k_norm
    # gains per head (96 x 128 and 8 x 128)
    d, f, e = 12288, 33792, 128
    layer = 2 * d * d + 2 * d * 8 * e + 3 * d * f + d + 96 * e + 8 * e
    assert symflops_counts(COMMAND_R_PLUS)[0] == 64 * layer + 256000 * d + d == 103_810_674_688
    # Command R7B (8B): 8 key/value heads of 128
    d, f = 4096, 14336
    layer = 2 * d * d + 2 * d * 8 * 128 + 3 * d * f + d
    assert symflops_counts(COMMAND_R7B)[0] == 32 * layer + 256000 * d + d == 8_028_033_024
    # phi-2 (2.7B): q, k, v, dense with biases, fc1 and fc2 with biases, a LayerNorm with
    # bias; the embedding and the head (with its bias); the final LayerNorm
    d, f, v = 2560, 10240, 51200
    layer = 4 * (d * d + d) + 2 * d * f + f + d + 2 * d
    assert symflops_counts(PHI2)[0] == 32 * layer + v * d + v * d + v + 2 * d == 2_779_683_840
    # SmolLM3-3B: grouped 4 of 16 heads of 128, tied
    d, f = 2048, 11008
    layer = 2 * d * d + 2 * d * 512 + 3 * d * f + 2 * d
    assert symflops_counts(SMOLLM3_3B)[0] == 36 * layer + 128256 * d + d == 3_075_098_624
    # granite-3.3-2b: 8 of 32 heads of 64, tied
    layer = 2 * d * d + 2 * d * 512 + 3 * d * 8192 + 2 * d
    assert symflops_counts(GRANITE_33_2B)[0] == 40 * layer + 49159 * d + d == 2_533_539_840
    # GLM-4-9B-0414: biases on q, k, v (not o), 2 of 32 heads of 128, four norms a layer
    d, f = 4096, 13696
    layer = (d * d + d) + 2 * (d * 256 + 256) + d * d + 3 * d * f + 4 * d
    assert symflops_counts(GLM4_9B_0414)[0] == 40 * layer + 2 * 151552 * d + d \
        == 9_400_279_040
    # EXAONE-4.0-32B: 8 of 40 heads of 128, q_norm and k_norm (128 each), two norms
    d, f = 5120, 27392
    layer = 2 * d * d + 2 * d * 1024 + 3 * d * f + 2 * d + 2 * 128
    assert symflops_counts(EXAONE4_32B)[0] == 64 * layer + 2 * 102400 * d + d \
        == 32_003_216_384
    # ERNIE-4.5-0.3B: 2 of 16 heads of 128 (q is 2048 wide), tied
    d = 1024
    layer = 2 * d * 2048 + 2 * d * 256 + 3 * d * 3072 + 2 * d
    assert symflops_counts(ERNIE45_03B)[0] == 18 * layer + 103424 * d + d == 360_748_032


@pytest.mark.parametrize("config, windows, heads, width", [
    (at_layers(COMMAND_R7B, 4, sliding_window=8), [8, 8, 8, None], 32, 128),
    (at_layers(EXAONE4_32B, sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
     [8, None], 40, 128),
    # without layer_types SmolLM3 windows its NoPE layers when use_sliding_window is on
    (at_layers(SMOLLM3_3B, 4, no_rope_layers=[1, 0, 1, 0], use_sliding_window=True,
               sliding_window=8, layer_types=None), [None, 8, None, 8], 16, 128),
    (at_layers(GLM4_9B_0414), [None, None], 32, 128),
    (at_layers(PHI2), [None, None], 32, 80),
])
def test_exact_counts_the_pairs_a_query_sees(config, windows, heads, width):
    seq = 32
    full = symflops_counts(config, seq, "full-square")[1]
    exact = symflops_counts(config, seq, "exact")[1]
    assert full - exact == sum(causal_surplus(seq, width, heads, w) for w in windows)


def test_kinds_and_conventions_as_written():
    r7b = imported(COMMAND_R7B)
    assert (r7b.dims["L_sliding"], r7b.dims["L_full"]) == (24, 8)
    # the global layers have no rotary positions: their block has no rotation
    text = r7b.text.split("  layer_full:")[1]
    assert "Qr[" not in text and "A[b,g,r,s,t] = Q[b,s,g,r,e] K[b,t,g,e]" in text
    assert "Zs[b,s,v] = 0.25 Z[b,s,v]" in r7b.text                    # logit_scale
    assert "Y[b,s,d] = X[b,s,d] + Ya[b,s,d] + Ym[b,s,d]" in r7b.text   # parallel block
    smol = imported(SMOLLM3_3B)
    assert (smol.dims["L_rope"], smol.dims["L_nope"]) == (27, 9)
    granite = imported(GRANITE_33_2B)
    for fragment in ("W_E[tok[b,s], d] * 12.0", "A[b,g,r,s,t] = 0.015625 Qr",
                     "Y1[b,s,d] = X[b,s,d] + 0.22 O[b,s,g,r,e] W_o[g,r,e,d]",
                     "Y[b,s,d] = Y1[b,s,d] + 0.22 M[b,s,j] W_down[j,d]",
                     "Zs[b,s,v] = Z[b,s,v] / 8.0", "dropout(P[b,g,r,s,t], 0.1)"):
        assert fragment in granite.text, fragment
    glm = imported(GLM4_9B_0414)
    assert (glm.dims["E_r"], glm.dims["E_p"]) == (64, 64)
    assert "post_mlp_layernorm" in glm.text
    exaone = imported(EXAONE4_32B)
    assert (exaone.dims["L_rope_sliding"], exaone.dims["L_nope"]) == (48, 16)
    phi = imported(PHI2)
    assert (phi.dims["E_r"], phi.dims["E_p"]) == (32, 48)
    assert "b_U[v]" in phi.text and "dropout(Ya[b,s,d], 0.1)" in phi.text


def test_keys_of_cohere_own_code_and_others_that_change_no_count():
    base = symflops_counts(at_layers(COMMAND_R7B, 4))
    # without the legacy keys, the same model
    plain = {k: v for k, v in at_layers(COMMAND_R7B, 4).items()
             if k not in ("order_of_interleaved_layers", "position_embedding_type", "rotary_pct",
                          "use_gated_activation", "use_embedding_sharing", "layer_switch",
                          "head_dim", "cache_implementation")}
    assert symflops_counts(plain) == base
    smol = {k: v for k, v in SMOLLM3_3B.items() if k not in ("pretraining_tp", "max_window_layers")}
    assert symflops_counts(smol) == symflops_counts(SMOLLM3_3B)


@pytest.mark.parametrize("config, key", [
    ({**COMMAND_R7B, "rotary_pct": 0.5}, "rotary_pct"),
    ({**COMMAND_R7B, "position_embedding_type": "rope"}, "position_embedding_type"),
    ({**COMMAND_R7B, "use_embedding_sharing": False}, "use_embedding_sharing"),
    ({**COMMAND_R7B, "layer_switch": 3}, "layer_switch"),
    ({**COMMAND_R7B, "sliding_window": None}, "sliding_window"),
    ({**COMMAND_R, "logit_scale": None}, "logit_scale"),
    ({**COMMAND_R, "head_dim": 64}, "head_dim"),
    ({**PHI2, "partial_rotary_factor": 0.4125}, "partial_rotary_factor"),  # 33 entries: odd
    ({**PHI2, "partial_rotary_factor": 1.5}, "partial_rotary_factor"),
    ({**PHI2, "head_dim": 64}, "head_dim"),
    ({**SMOLLM3_3B, "no_rope_layers": [1, 2] * 18}, "no_rope_layers"),
    ({**SMOLLM3_3B, "no_rope_layers": [1, 0]}, "no_rope_layers"),
    ({**SMOLLM3_3B, "layer_types": ["sliding_attention"] * 36}, "sliding_window"),
    ({**GRANITE_33_2B, "residual_multiplier": -1}, "residual_multiplier"),
    ({**GRANITE_33_2B, "logits_scaling": 0}, "logits_scaling"),
    ({**EXAONE4_32B, "layer_types": None}, "sliding_window_pattern"),
    ({**EXAONE4_32B, "sliding_window": None, "layer_types": None}, "sliding_window"),
    ({**ERNIE45_03B, "attention_dropout": 0.1}, "attention_dropout"),
    ({**GLM4_9B_0414, "partial_rotary_factor": 0.2890625}, "partial_rotary_factor"),  # 37
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)
