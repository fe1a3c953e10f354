"""symflops import-hf for DeepSeek-V2 (deepseek_v2) and DeepSeek-V3 (deepseek_v3).

The oracle tests (slow) build each published checkpoint's model with
transformers on the meta device and compare its parameters and
FlopCounterMode's training FLOPs with the imported declaration's, exactly.
The fast tests check the parameter counts against sums written out here, the
causal count against the full square, and every refusal."""

import copy
import json

import pytest

from hf_oracle import hf_counts, symflops_counts
from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_data

# deepseek-ai/DeepSeek-V3 config.json (every key as published)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModel": "modeling_deepseek.DeepseekV3Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 129280,
}
# deepseek-ai/DeepSeek-V2-Lite config.json (q_lora_rank null: a plain q_proj)
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
                 "AutoModel": "modeling_deepseek.DeepseekV2Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "transformers_version": "4.39.3", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 102400,
}
# deepseek-ai/DeepSeek-V2 config.json: the Lite's keys with these values
DEEPSEEK_V2 = {**DEEPSEEK_V2_LITE, "aux_loss_alpha": 0.003, "ep_size": 1, "hidden_size": 5120,
               "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_group": 8,
               "n_routed_experts": 160, "num_attention_heads": 128, "num_hidden_layers": 60,
               "num_key_value_heads": 128, "q_lora_rank": 1536, "routed_scaling_factor": 16.0,
               "topk_group": 3, "topk_method": "group_limited_greedy"}

# Tiny configurations with the options the checkpoints leave off.
TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
        "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
        "intermediate_size": 96, "moe_intermediate_size": 16, "n_shared_experts": 2,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
        "num_hidden_layers": 3, "vocab_size": 128, "max_position_embeddings": 64}
TINY_V2_ALL = {**TINY, "model_type": "deepseek_v2", "q_lora_rank": 32, "attention_bias": True,
               "mlp_bias": True, "routed_scaling_factor": 16.0,
               "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2}
TINY_V3_PLAIN = {**TINY, "model_type": "deepseek_v3", "q_lora_rank": None,
                 "attention_bias": True, "norm_topk_prob": False, "routed_scaling_factor": 1.0,
                 "n_group": 4, "topk_group": 2, "rope_interleave": False}
TINY_V2_NO_DENSE_TIED = {**TINY, "model_type": "deepseek_v2", "q_lora_rank": None,
                         "first_k_dense_replace": 0, "tie_word_embeddings": True}
TINY_V2_NO_SHARED_BIAS = {**TINY, "model_type": "deepseek_v2", "n_shared_experts": 0,
                          "mlp_bias": True}
TINY_V3_ALL_DENSE = {**TINY, "model_type": "deepseek_v3", "first_k_dense_replace": 5}


def imported(config, attention="full-square"):
    text = json.dumps(config, indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def mla_params(c):
    """One MLA attention, written out from transformers' modules."""
    d, n, r = c["hidden_size"], c["num_attention_heads"], c["qk_rope_head_dim"]
    qk = c["qk_nope_head_dim"] + r
    q = c.get("q_lora_rank")
    bias = c.get("attention_bias", False)
    query = d * n * qk if q is None else d * q + (q if bias else 0) + q + q * n * qk
    kv = d * (c["kv_lora_rank"] + r) + (c["kv_lora_rank"] + r if bias else 0) \
        + c["kv_lora_rank"] + c["kv_lora_rank"] * n * (c["qk_nope_head_dim"] + c["v_head_dim"])
    out = n * c["v_head_dim"] * d + (d if bias else 0)
    return query + kv + out


def hand_params(c):
    """Parameters of the causal LM, summed by hand: embedding, layers, norm, head."""
    d, layers = c["hidden_size"], c["num_hidden_layers"]
    dense = min(c["first_k_dense_replace"], layers)
    b = c.get("mlp_bias", False)
    dense_mlp = 3 * d * c["intermediate_size"] + (2 * c["intermediate_size"] + d if b else 0)
    fs = c["n_shared_experts"] * c["moe_intermediate_size"]
    moe = c["n_routed_experts"] * (d + 3 * d * c["moe_intermediate_size"]) \
        + 3 * d * fs + (2 * fs + d if b else 0)
    layer = mla_params(c) + 2 * d
    embedding = c["vocab_size"] * d
    head = 0 if c.get("tie_word_embeddings", False) else embedding
    return embedding + dense * (layer + dense_mlp) + (layers - dense) * (layer + moe) + d + head


# -- the published parameter counts ------------------------------------------

@pytest.mark.parametrize("config, published", [
    # DeepSeek-V3 technical report: 671B total parameters (the hub's 685B adds the
    # MTP module, which transformers' causal LM does not build)
    (DEEPSEEK_V3, 671_026_404_352),
    # DeepSeek-V2 paper: 236B total parameters
    (DEEPSEEK_V2, 235_741_434_880),
    # DeepSeek-V2-Lite model card: 15.7B total parameters
    (DEEPSEEK_V2_LITE, 15_706_484_224),
])
def test_published_parameters(config, published):
    assert hand_params(config) == published
    params, _ = symflops_counts(config, seq=32)
    assert params == published


def test_v3_published_rounding():
    assert round(671_026_404_352 / 1e9) == 671
    assert round(235_741_434_880 / 1e9) == 236
    assert round(15_706_484_224 / 1e8) == 157


@pytest.mark.parametrize("config", [TINY_V2_ALL, TINY_V3_PLAIN, TINY_V2_NO_DENSE_TIED,
                                    TINY_V2_NO_SHARED_BIAS, TINY_V3_ALL_DENSE])
def test_tiny_parameters_by_hand(config):
    cfg = {"first_k_dense_replace": 0 if config["model_type"] == "deepseek_v2" else 3,
           "q_lora_rank": 1536, **config}
    assert symflops_counts(config, seq=32)[0] == hand_params(cfg)


# -- causal (exact) against the full square ---------------------------------

@pytest.mark.parametrize("config, seq", [(DEEPSEEK_V2_LITE, 32), (TINY_V2_ALL, 16),
                                         (TINY_V3_PLAIN, 16)])
def test_exact_differs_by_the_triangle(config, seq):
    """Each layer's two attention products (and their four gradients) over
    S(S+1)/2 pairs instead of S^2: per layer 3 x 2 N (S^2 - S(S+1)/2) per
    width, the score width qk_nope + qk_rope and the value width v_head."""
    _, full = symflops_counts(config, seq, "full-square")
    _, exact = symflops_counts(config, seq, "exact")
    n, layers = config["num_attention_heads"], config["num_hidden_layers"]
    width = config["qk_nope_head_dim"] + config["qk_rope_head_dim"] + config["v_head_dim"]
    pairs = seq * seq - seq * (seq + 1) // 2
    assert full - exact == layers * 3 * 2 * n * pairs * width


# -- what the declaration looks like -------------------------------------------

def test_layers_and_blocks():
    v3 = imported(DEEPSEEK_V3)
    assert v3.dims["L_dense"] == 3 and v3.dims["L_moe"] == 58
    assert "L" not in v3.dims and v3.dims["B"] == 1
    no_dense = imported(TINY_V2_NO_DENSE_TIED)
    assert no_dense.dims["L"] == 3 and "L_dense" not in no_dense.dims
    assert "W_U" not in no_dense.text          # tied: the head reads the embedding
    all_dense = imported(TINY_V3_ALL_DENSE)
    assert all_dense.dims["L"] == 3 and "M" not in all_dense.dims


def test_experts_count_at_any_sequence_length(tmp_path):
    """DeepSeek-V2 at 4096 positions: k B S = 6 x 4096 pairs do not divide into
    M = 160 equal expert slots; the pair form counts them anyway, each pair's three
    products 2 D Fe each forward (D = 5120, Fe = 1536), per MoE layer (59 of 60)."""
    d = imported({**DEEPSEEK_V2, "max_position_embeddings": 4096})
    assert d.dims["B"] == 1 and "C" not in d.dims
    S = 4096
    _, flops = symflops_counts(DEEPSEEK_V2, S)
    _, fewer = symflops_counts({**DEEPSEEK_V2, "num_experts_per_tok": 5}, S)
    # one expert fewer per token: 59 layers x S pairs x 3 products x 2 D Fe x 3 (fwd + bwd)
    assert flops - fewer == 59 * S * 3 * 2 * 5120 * 1536 * 3


def test_mtp_and_routing_keys_change_no_count():
    base = symflops_counts(DEEPSEEK_V3, 32)
    other = {**DEEPSEEK_V3, "num_nextn_predict_layers": 3, "n_group": 4, "topk_group": 1,
             "rope_interleave": False, "routed_scaling_factor": 1.0}
    assert symflops_counts(other, 32) == base


# -- refusals ---------------------------------------------------------------

@pytest.mark.parametrize("config, key", [
    ({**DEEPSEEK_V3, "num_key_value_heads": 8}, "num_key_value_heads"),
    ({**DEEPSEEK_V3, "qk_rope_head_dim": 63}, "qk_rope_head_dim"),
    ({**DEEPSEEK_V3, "num_experts_per_tok": 300}, "num_experts_per_tok"),
    ({**DEEPSEEK_V3, "scoring_func": "softmax"}, "scoring_func"),
    ({**DEEPSEEK_V3, "topk_method": "greedy"}, "topk_method"),
    ({**DEEPSEEK_V3, "n_group": 7}, "n_group"),
    ({**DEEPSEEK_V3, "topk_group": 9}, "topk_group"),
    ({**DEEPSEEK_V3, "n_group": 128, "topk_group": 3}, "topk_group"),
    ({**DEEPSEEK_V3, "n_group": 256, "topk_group": 8}, "n_group"),
    ({**DEEPSEEK_V3, "moe_layer_freq": 2}, "moe_layer_freq"),
    ({**DEEPSEEK_V3, "num_local_experts": 128}, "num_local_experts"),
    ({**DEEPSEEK_V3, "hidden_act": "swiglu"}, "hidden_act"),
    ({**DEEPSEEK_V3, "mlp_bias": True}, "mlp_bias"),               # not a V3 key
    ({**DEEPSEEK_V2, "topk_method": "noaux_tc"}, "topk_method"),
    ({**DEEPSEEK_V2, "scoring_func": "sigmoid"}, "scoring_func"),
    ({**DEEPSEEK_V2, "norm_topk_prob": True}, "norm_topk_prob"),
    ({**DEEPSEEK_V2, "topk_group": 9}, "topk_group"),
    ({**DEEPSEEK_V2_LITE, "num_experts_per_tok": None}, "num_experts_per_tok"),
    ({**DEEPSEEK_V2, "rope_interleave": True}, "rope_interleave"),  # not a V2 key
    ({**DEEPSEEK_V2, "architectures": ["DeepseekV2ForSequenceClassification"]}, "architectures"),
    ({**DEEPSEEK_V3, "attention_dropout": 1.5}, "attention_dropout"),
    ({**DEEPSEEK_V3, "some_new_key": 1}, "some_new_key"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)


def test_attention_dropout_is_written():
    text = imported({**TINY_V2_ALL, "attention_dropout": 0.1}).text
    assert "dropout(P[b,n,s,t], 0.1)" in text


# -- the oracle: transformers on the meta device -------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("config, seq", [
    (DEEPSEEK_V3, 32),          # deepseek-ai/DeepSeek-V3
    (DEEPSEEK_V2_LITE, 32),     # deepseek-ai/DeepSeek-V2-Lite
    (DEEPSEEK_V2, 32),          # deepseek-ai/DeepSeek-V2
], ids=["DeepSeek-V3", "DeepSeek-V2-Lite", "DeepSeek-V2"])
def test_oracle_published(config, seq):
    assert symflops_counts(config, seq) == hf_counts(config, seq)


@pytest.mark.slow
@pytest.mark.parametrize("config", [TINY_V2_ALL, TINY_V3_PLAIN, TINY_V2_NO_DENSE_TIED,
                                    TINY_V2_NO_SHARED_BIAS, TINY_V3_ALL_DENSE,
                                    {**TINY_V2_ALL, "attention_dropout": 0.1}],
                         ids=["v2-every-option", "v3-plain-q", "v2-no-dense-tied",
                              "v2-no-shared-mlp-bias", "v3-all-dense", "v2-dropout"])
def test_oracle_options(config):
    config = copy.deepcopy(config)
    assert symflops_counts(config, 32) == hf_counts(config, 32)
