"""symflops import-hf for the mixtures of experts PhiMoE (Phi-3.5-MoE), GLM-4.5 and
MiniMax-M2.  The published checkpoints against transformers 5.24 on the meta
device (slow: parameters and FlopCounterMode's training FLOPs, equal to the
integer, at two layers with every other size as published, dense and MoE layers
present), the published parameter counts summed by hand, the experts' share of
the FLOPs by hand, and the refusals."""

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, hf_counts, imported, symflops_counts

# microsoft/Phi-3.5-MoE-instruct config.json (its remote-code class name in architectures).
# The longrope factor lists are NOT the published values (which change no count): 64
# placeholders each, the length transformers checks (head_dim / 2).
PHI35_MOE = {
    "architectures": ["PhiMoEForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_phimoe.PhiMoEConfig",
                 "AutoModelForCausalLM": "modeling_phimoe.PhiMoEForCausalLM"},
    "bos_token_id": 1, "eos_token_id": 32000, "hidden_act": "silu", "hidden_dropout": 0.0,
    "hidden_size": 4096, "initializer_range": 0.02, "input_jitter_noise": 0.01,
    "intermediate_size": 6400, "lm_head_bias": True, "max_position_embeddings": 131072,
    "model_type": "phimoe", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 16,
    "original_max_position_embeddings": 4096, "output_router_logits": False, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0] * 64, "long_mscale": 1.243163121016122,
                   "original_max_position_embeddings": 4096, "short_factor": [1.0] * 64,
                   "short_mscale": 1.243163121016122, "type": "longrope"},
    "rope_theta": 10000.0, "router_aux_loss_coef": 0.0, "router_jitter_noise": 0.01,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.3", "use_cache": True, "vocab_size": 32064}
# zai-org/GLM-4.5-Air config.json
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5,
    "initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1408, "norm_topk_prob": True,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000,
    "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.54.0", "use_cache": True, "use_qk_norm": False,
    "vocab_size": 151552}
# MiniMaxAI/MiniMax-M2 config.json (with the keys of MiniMax's own code)
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "attn_type_list": [1] * 62,
    "auto_map": {"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config",
               "AutoModelForCausalLM": "modeling_minimax_m2.MiniMaxM2ForCausalLM"},
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 1536,
    "max_position_embeddings": 196608, "model_type": "minimax_m2", "mtp_transformer_layers": 1,
    "num_attention_heads": 48, "num_experts_per_tok": 8, "num_hidden_layers": 62,
    "num_key_value_heads": 8, "num_local_experts": 256, "num_mtp_modules": 3,
    "qk_norm_type": "per_layer", "rms_norm_eps": 1e-06, "rope_theta": 5000000, "rotary_dim": 64,
    "scoring_func": "sigmoid", "shared_intermediate_size": 0, "tie_word_embeddings": False,
    "transformers_version": "4.46.1", "use_cache": True, "use_mtp": True, "use_qk_norm": True,
    "use_routing_bias": True, "vocab_size": 200064, "torch_dtype": "bfloat16"}


# PhiMoE's input jitter (a training-time random multiplier, refused) off; its longrope
# rotary reads the largest position id, which the meta device cannot, so the oracle runs
# it without rope_scaling (the tables' values change no count)
PHIMOE_ORACLE = {**PHI35_MOE, "input_jitter_noise": 0.0, "rope_scaling": None}
ORACLE = {
    "Phi-3.5-MoE-instruct": at_layers(PHIMOE_ORACLE),
    "Phi-3.5-MoE-instruct unwindowed, no biases": at_layers(PHIMOE_ORACLE, sliding_window=None,
                                                     lm_head_bias=False, attention_bias=False),
    # one dense layer (first_k_dense_replace 1) and one MoE layer
    "GLM-4.5-Air": at_layers(GLM45_AIR),
    "GLM-4.5-Air qk norms, two shared, scaled, groups": at_layers(
        GLM45_AIR, use_qk_norm=True, n_shared_experts=2, routed_scaling_factor=2.5, n_group=4,
        topk_group=2),
    "GLM-4.5-Air no shared expert, no dense layer": at_layers(GLM45_AIR, n_shared_experts=0,
                                                       first_k_dense_replace=0),
    "MiniMax-M2": at_layers(MINIMAX_M2),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORACLE))
def test_counts_equal_transformers(name):
    config = ORACLE[name]
    assert symflops_counts(config, 32) == hf_counts(config, 32)


def test_published_parameter_counts():
    # Phi-3.5-MoE (41.9B): attention with biases (8 of 32 heads of 128), 16 experts of
    # 3 D F, the router, two LayerNorms with bias; the embedding, lm_head with its bias,
    # the final LayerNorm
    d, f = 4096, 6400
    attention = (d * d + d) + 2 * (d * 1024 + 1024) + (d * d + d)
    layer = attention + 16 * 3 * d * f + 16 * d + 4 * d
    assert symflops_counts(PHIMOE_ORACLE)[0] == 32 * layer + 2 * 32064 * d + 32064 + 2 * d \
        == 41_873_153_344
    # GLM-4.5-Air (106B): 96 heads of 128 and 8 key/value heads, biases on q, k, v; one
    # dense layer (3 D 10944), 45 MoE layers of 128 experts of 3 D 1408, the router, one
    # shared expert of 3 D 1408; two norms a layer; the embedding and the head
    attention = (d * 12288 + 12288) + 2 * (d * 1024 + 1024) + 12288 * d
    dense = attention + 3 * d * 10944 + 2 * d
    moe = attention + 128 * 3 * d * 1408 + 128 * d + 3 * d * 1408 + 2 * d
    assert symflops_counts(GLM45_AIR)[0] == dense + 45 * moe + 2 * 151552 * d + d \
        == 106_852_245_504
    # MiniMax-M2 (230B): 48 heads of 128 and 8 key/value heads, q_norm (6144) and k_norm
    # (1024), 256 experts of 3 D 1536 and the router, two norms
    d = 3072
    layer = d * 6144 + 2 * d * 1024 + 6144 * d + 6144 + 1024 + 256 * (3 * d * 1536 + d) + 2 * d
    assert symflops_counts(MINIMAX_M2)[0] == 62 * layer + 2 * 200064 * d + d \
        == 228_689_748_992


def test_experts_flops_by_hand():
    """One MoE layer's experts at S = 32: k B S pairs, each three products of 2 D F
    forward and twice that backward (dX and dW), 6 per multiply-add in all; dropping
    one expert per token takes exactly one pair's share per token."""
    seq = 32
    glm = at_layers(GLM45_AIR, first_k_dense_replace=0, layers=1)
    fewer = {**glm, "num_experts_per_tok": 7}
    assert symflops_counts(glm, seq)[1] - symflops_counts(fewer, seq)[1] == \
        seq * 3 * 2 * 4096 * 1408 * 3


def test_layers_and_routers_as_written():
    glm = imported(GLM45_AIR)
    assert (glm.dims["L_dense"], glm.dims["L_moe"], glm.dims["M"], glm.dims["k"]) == \
        (1, 45, 128, 8)
    assert "Rp[b,s,x] = sigmoid(Rl[b,s,x])" in glm.text
    phimoe = imported(PHIMOE_ORACLE)
    assert "Gt[b,s,i] = concat_i(G1[b,s,o], G2[b,s,u])" in phimoe.text    # two rounds
    assert "b_U[v]" in phimoe.text and "layernorm_d" in phimoe.text
    minimax = imported(MINIMAX_M2)
    assert (minimax.dims["E_r"], minimax.dims["E_p"]) == (64, 64)
    assert "rmsnorm_{g,r,e}(Q[b,s,g,r,e]) * g_q[g,r,e]" in minimax.text


def test_multi_token_prediction_keys_change_no_count():
    base = symflops_counts(at_layers(GLM45_AIR))
    assert symflops_counts(at_layers(GLM45_AIR, num_nextn_predict_layers=3)) == base
    mini = symflops_counts(at_layers(MINIMAX_M2))
    assert symflops_counts(at_layers(MINIMAX_M2, num_mtp_modules=1, use_mtp=False)) == mini


@pytest.mark.parametrize("config, key", [
    (PHI35_MOE, "input_jitter_noise"),                       # as published: 0.01
    ({**PHIMOE_ORACLE, "num_experts_per_tok": 4}, "num_experts_per_tok"),
    ({**PHIMOE_ORACLE, "hidden_dropout": 0.1}, "hidden_dropout"),
    ({**PHIMOE_ORACLE, "output_router_logits": True}, "output_router_logits"),
    ({**GLM45_AIR, "n_group": 3}, "n_group"),
    ({**GLM45_AIR, "num_local_experts": 64}, "num_local_experts"),
    ({**GLM45_AIR, "num_experts_per_tok": 200}, "num_experts_per_tok"),
    ({**MINIMAX_M2, "attn_type_list": [0] + [1] * 61}, "attn_type_list"),
    ({**MINIMAX_M2, "qk_norm_type": "per_head"}, "qk_norm_type"),
    ({**MINIMAX_M2, "scoring_func": "softmax"}, "scoring_func"),
    ({**MINIMAX_M2, "shared_intermediate_size": 1536}, "shared_intermediate_size"),
    ({**MINIMAX_M2, "rotary_dim": 63}, "rotary_dim"),
    ({**MINIMAX_M2, "router_jitter_noise": 0.1}, "router_jitter_noise"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)
