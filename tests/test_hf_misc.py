"""symflops import-hf for Phi-3, StarCoder2, Qwen2-MoE and Qwen3-MoE: the
published checkpoints against transformers (slow), their parameter counts and
training FLOPs by hand, the causal triangle, and the refusals."""

import json

import pytest

from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_data

from hf_oracle import hf_counts, symflops_counts

# microsoft/Phi-3-mini-4k-instruct config.json (as published, auto_map and all)
PHI3_MINI_4K = {
    "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                 "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
    "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True,
    "vocab_size": 32064}
# bigcode/starcoder2-3b config.json
STARCODER2_3B = {
    "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1,
    "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072, "initializer_range": 0.018042,
    "intermediate_size": 12288, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 16384,
    "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05,
    "norm_type": "layer_norm", "num_attention_heads": 24, "num_hidden_layers": 30,
    "num_key_value_heads": 2, "rope_theta": 999999.4420358813, "sliding_window": 4096,
    "torch_dtype": "float32", "transformers_version": "4.37.0.dev0", "use_bias": True,
    "use_cache": True, "vocab_size": 49152}
# Qwen/Qwen1.5-MoE-A2.7B config.json
QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "max_window_layers": 21, "model_type": "qwen2_moe", "num_attention_heads": 16,
    "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.39.0.dev0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936, "decoder_sparse_step": 1,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": False,
    "output_router_logits": False, "router_aux_loss_coef": 0.001}
# Qwen/Qwen3-30B-A3B config.json
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936}

# microsoft/Phi-4-mini-instruct config.json (model_type phi3: tied, partial_rotary_factor
# 0.75).  The longrope factor lists are NOT the published values (which change no count):
# 48 placeholders each, the length transformers checks (rotated entries / 2).
PHI4_MINI = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1,
    "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": False,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "pad_token_id": 199999,
    "partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0] * 48, "short_factor": [1.0] * 48, "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.45.0", "use_cache": True,
    "vocab_size": 200064}

CHECKPOINTS = {"microsoft/Phi-3-mini-4k-instruct": PHI3_MINI_4K,
               "microsoft/Phi-4-mini-instruct": PHI4_MINI,
               "bigcode/starcoder2-3b": STARCODER2_3B,
               "Qwen/Qwen1.5-MoE-A2.7B": QWEN15_MOE_A27B,
               "Qwen/Qwen3-30B-A3B": QWEN3_30B_A3B}


def imported(config, attention="full-square"):
    text = json.dumps(config, indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def with_(config, **changes):
    out = dict(config)
    out.update(changes)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_the_published_checkpoint_counts_as_transformers(name):
    config = CHECKPOINTS[name]
    assert symflops_counts(config, 32) == hf_counts(config, 32)


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    # Qwen1.5-MoE-A2.7B's sizes with dense layers (decoder_sparse_step 2, mlp_only_layers [1]:
    # 13 dense, 11 sparse), and Qwen3-30B-A3B's with mlp_only_layers [0, 1, 2]
    with_(QWEN15_MOE_A27B, decoder_sparse_step=2, mlp_only_layers=[1]),
    with_(QWEN3_30B_A3B, mlp_only_layers=[0, 1, 2]),
    # starcoder2-3b untied; Phi-3-mini with its dropouts on
    with_(STARCODER2_3B, tie_word_embeddings=False),
    with_(PHI3_MINI_4K, resid_pdrop=0.1, attention_dropout=0.1),
], ids=["qwen2_moe dense+sparse", "qwen3_moe dense+sparse", "starcoder2 untied",
        "phi3 dropouts"])
def test_variants_count_as_transformers(config):
    assert symflops_counts(config, 32) == hf_counts(config, 32)


# -- parameters and FLOPs by hand (no transformers) --------------------------

def test_phi3_mini_parameters():
    # hand sum: per layer qkv 3072 x 9216, o 3072^2, gate_up 3072 x 16384, down 8192 x 3072,
    # two norms; embedding and lm_head 32064 x 3072 each; final norm.  3.8B (model card).
    layer = 3072 * 9216 + 3072 * 3072 + 3072 * 16384 + 8192 * 3072 + 2 * 3072
    assert 32 * layer + 2 * 32064 * 3072 + 3072 == 3_821_079_552
    assert symflops_counts(PHI3_MINI_4K, 32)[0] == 3_821_079_552


def test_phi4_mini_parameters_and_partial_rotary():
    # hand sum: qkv 3072 x (3072 + 2 x 1024), o, gate_up, down, norms; one tied table of
    # 200064 x 3072; 3.8B (model card)
    layer = 3072 * 5120 + 3072 * 3072 + 3072 * 16384 + 8192 * 3072 + 2 * 3072
    assert 32 * layer + 200064 * 3072 + 3072 == 3_836_021_760
    assert symflops_counts(PHI4_MINI, 32)[0] == 3_836_021_760
    imp = imported(PHI4_MINI)
    assert (imp.dims["E_r"], imp.dims["E_p"]) == (96, 32)       # 0.75 of 128 rotated
    assert "concat_e(Qa[b,s,g,r,u], Qb[b,s,g,r,w])" in imp.text
    # the rotary fraction changes no parameter and no matrix FLOP
    whole = with_(PHI4_MINI, partial_rotary_factor=1.0)
    assert symflops_counts(whole, 32) == symflops_counts(PHI4_MINI, 32)


def test_starcoder2_3b_parameters():
    # hand sum with biases (use_bias) and LayerNorm biases, tied embedding; 3.03B (model card)
    d, kv, f = 3072, 2 * 128, 12288
    layer = (d * d + d) * 2 + (d * kv + kv) * 2 + (d * f + f) + (f * d + d) + 4 * d
    assert 30 * layer + 49152 * d + 2 * d == 3_030_371_328
    assert symflops_counts(STARCODER2_3B, 32)[0] == 3_030_371_328


def test_qwen15_moe_parameters():
    # hand sum: q/k/v with biases, o; 60 experts of 3 x 2048 x 1408; router 60 x 2048; the
    # shared expert 3 x 2048 x 5632 and its gate 2048; 14.3B (model card)
    d = 2048
    layer = 4 * d * d + 3 * d + 2 * d + 60 * d + 60 * 3 * d * 1408 + 3 * d * 5632 + d
    assert 24 * layer + 2 * 151936 * d + d == 14_315_784_192
    assert symflops_counts(QWEN15_MOE_A27B, 32)[0] == 14_315_784_192


def test_qwen3_30b_a3b_parameters():
    # hand sum: q 2048 x 4096, k, v 2048 x 512, o 4096 x 2048, q/k norms 128 each, 128 experts
    # of 3 x 2048 x 768, router; 30.5B (model card)
    d = 2048
    layer = 2 * d * 4096 + 2 * d * 512 + 2 * 128 + 2 * d + 128 * d + 128 * 3 * d * 768
    assert 48 * layer + 2 * 151936 * d + d == 30_532_122_624
    assert symflops_counts(QWEN3_30B_A3B, 32)[0] == 30_532_122_624


def test_moe_training_flops_by_hand_at_any_length():
    # each token-expert pair's products once (batched_mm), 3 x forward; S = 32 with 60
    # experts and top-4 (k B S / M = 32/15: no whole capacity, the pair form needs none)
    t = s = 32
    d, n, e, m, k, f, fs, v, layers = 2048, 16, 128, 60, 4, 1408, 5632, 151936, 24
    layer = (4 * 2 * t * d * n * e + 4 * n * s * s * e + 2 * t * d * m + 2 * k * t * 3 * d * f
             + 3 * 2 * t * d * fs + 2 * t * d)
    assert symflops_counts(QWEN15_MOE_A27B, 32)[1] == 3 * (layers * layer + 2 * t * d * v) \
        == 457_134_047_232
    d, n, g, m, k, f, layers = 2048, 32, 4, 128, 8, 768, 48
    layer = (2 * t * d * n * e + 2 * 2 * t * d * g * e + 2 * t * n * e * d + 4 * n * s * s * e
             + 2 * t * d * m + 2 * k * t * 3 * d * f)
    assert symflops_counts(QWEN3_30B_A3B, 32)[1] == 3 * (layers * layer + 2 * t * d * v) \
        == 586_414_030_848


@pytest.mark.parametrize("config,heads,width,layers,window", [
    (PHI3_MINI_4K, 32, 96, 32, 2047),
    (PHI4_MINI, 24, 128, 32, 262144),
    (STARCODER2_3B, 24, 128, 30, 4096),
    (QWEN15_MOE_A27B, 16, 128, 24, None),
    (QWEN3_30B_A3B, 32, 128, 48, None),
])
@pytest.mark.parametrize("seq", [32, 4096])
def test_exact_counts_the_causal_pairs_only(config, heads, width, layers, window, seq):
    # the two attention products, 2 E FLOPs per (head, pair) each, 3 x forward: 12 N E per
    # pair; full-square has S^2 pairs, exact S(S+1)/2, or within a window W
    # m(m + 1)/2 + (S - m) W with m = min(S, W)
    if window is None:
        pairs = seq * (seq + 1) // 2
    else:
        mm = min(seq, window)
        pairs = mm * (mm + 1) // 2 + (seq - mm) * window
    full = symflops_counts(config, seq, "full-square")
    exact = symflops_counts(config, seq, "exact")
    assert full[0] == exact[0]
    assert full[1] - exact[1] == 12 * layers * heads * width * (seq * seq - pairs)


def test_the_dropouts_are_written():
    text = imported(STARCODER2_3B).text
    assert "X0[b,s,d] = dropout(Xe[b,s,d], 0.1)" in text          # embedding_dropout
    assert "Y1[b,s,d] = X[b,s,d] + dropout(Ya[b,s,d], 0.1)" in text  # residual_dropout
    assert "Pd[b,g,r,s,t] = dropout(P[b,g,r,s,t], 0.1)" in text     # attention_dropout
    assert "dropout" not in imported(PHI3_MINI_4K).text
    assert "dropout(Ym[b,s,d], 0.2)" in imported(with_(PHI3_MINI_4K, resid_pdrop=0.2)).text


def test_tied_and_biases_follow_the_config():
    # starcoder2: tied by default; use_bias false drops the six biases of every layer
    tied = symflops_counts(STARCODER2_3B, 32)[0]
    assert symflops_counts(with_(STARCODER2_3B, tie_word_embeddings=False), 32)[0] \
        == tied + 49152 * 3072
    no_bias = symflops_counts(with_(STARCODER2_3B, use_bias=False), 32)[0]
    assert tied - no_bias == 30 * (3072 + 256 + 256 + 3072 + 12288 + 3072)
    # qwen3_moe: attention_bias puts biases on q, k, v and o
    biased = symflops_counts(with_(QWEN3_30B_A3B, attention_bias=True), 32)[0]
    assert biased - 30_532_122_624 == 48 * (4096 + 512 + 512 + 2048)
    # qwen2_moe: qkv_bias false drops q, k, v biases (o has none)
    assert 14_315_784_192 - symflops_counts(with_(QWEN15_MOE_A27B, qkv_bias=False), 32)[0] \
        == 24 * 3 * 2048
    # phi3: tied (Phi-4-mini style) shares the table
    assert 3_821_079_552 - symflops_counts(with_(PHI3_MINI_4K, tie_word_embeddings=True),
                                           32)[0] == 32064 * 3072


def test_dense_and_sparse_layers():
    # decoder_sparse_step 2 and mlp_only_layers [1]: layers 3, 5, ..., 23 sparse (11)
    imp = imported(with_(QWEN15_MOE_A27B, decoder_sparse_step=2, mlp_only_layers=[1]))
    assert imp.dims["L_dense"] == 13 and imp.dims["L_sparse"] == 11
    # num_experts 0: every layer dense
    imp = imported(with_(QWEN3_30B_A3B, num_experts=0))
    assert imp.dims["L"] == 48 and "M" not in imp.dims and imp.dims["Fd"] == 6144


def test_qwen3_moe_window_on_every_layer():
    imp = imported(with_(QWEN3_30B_A3B, use_sliding_window=True, sliding_window=1024),
                   "exact")
    assert imp.dims["W"] == 1024 and "s - t < W" in imp.text


@pytest.mark.parametrize("config,key", [
    (with_(PHI3_MINI_4K, partial_rotary_factor=0.28125), "partial_rotary_factor"),  # 27 of 96
    (with_(PHI3_MINI_4K, partial_rotary_factor=0.01), "partial_rotary_factor"),     # 0 of 96
    (with_(PHI3_MINI_4K, rope_scaling={"type": "longrope", "partial_rotary_factor": 1.5}),
     "rope_scaling"),
    (with_(PHI3_MINI_4K, attention_bias=True), "attention_bias"),
    (with_(PHI3_MINI_4K, lm_head_bias=True), "lm_head_bias"),
    (with_(PHI3_MINI_4K, resid_pdrop=1.0), "resid_pdrop"),
    (with_(PHI3_MINI_4K, num_key_value_heads=5), "num_key_value_heads"),
    (with_(STARCODER2_3B, mlp_type="moe"), "mlp_type"),
    (with_(STARCODER2_3B, norm_type="rms_norm"), "norm_type"),
    (with_(STARCODER2_3B, hidden_act="gelu_fast"), "hidden_act"),
    (with_(QWEN15_MOE_A27B, use_sliding_window=True), "use_sliding_window"),
    (with_(QWEN15_MOE_A27B, output_router_logits=True), "output_router_logits"),
    (with_(QWEN15_MOE_A27B, mlp_only_layers=[24]), "mlp_only_layers"),
    (with_(QWEN15_MOE_A27B, decoder_sparse_step=0), "decoder_sparse_step"),
    (with_(QWEN15_MOE_A27B, num_experts_per_tok=61), "num_experts_per_tok"),
    (with_(QWEN15_MOE_A27B, shared_expert_intermediate_size=0),
     "shared_expert_intermediate_size"),
    (with_(QWEN3_30B_A3B, num_local_experts=64), "num_local_experts"),
    (with_(QWEN3_30B_A3B, architectures=["Qwen3MoeForSequenceClassification"]),
     "architectures"),
])
def test_a_value_the_declaration_cannot_express_is_refused_by_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)


@pytest.mark.parametrize("config", [PHI3_MINI_4K, STARCODER2_3B, QWEN15_MOE_A27B,
                                    QWEN3_30B_A3B])
def test_an_unknown_key_is_refused(config):
    with pytest.raises(SymflopsError, match="shared_attention_every"):
        imported(with_(config, shared_attention_every=2))


def test_keys_of_other_families_are_refused():
    # Qwen3-MoE has no shared expert; Phi-3 no use_bias
    with pytest.raises(SymflopsError, match="shared_expert_intermediate_size"):
        imported(with_(QWEN3_30B_A3B, shared_expert_intermediate_size=4096))
    with pytest.raises(SymflopsError, match="use_bias"):
        imported(with_(PHI3_MINI_4K, use_bias=True))
