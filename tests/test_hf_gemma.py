"""symflops import-hf for Gemma 1 (gemma), Gemma 2 (gemma2) and Gemma 3's text model
(gemma3_text): the published checkpoints against transformers (slow), their published
parameter counts and hand sums, the causal and windowed pairs against the full square, and
every value refused by name (fast, no transformers)."""

import json

import pytest

from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_data

from hf_oracle import hf_counts, symflops_counts

# google/gemma-2b config.json, as published (transformers 4.38 era).
GEMMA_2B = {
    "architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 16384,
    "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 8,
    "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
    "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": True,
    "vocab_size": 256000}
# google/gemma-2-2b config.json, as published.
GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "torch_dtype": "float32", "transformers_version": "4.42.4",
    "use_cache": True, "vocab_size": 256000}
# google/gemma-3-1b-pt config.json, as published.
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": 1, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144}
# google/gemma-3-270m config.json, as published (transformers 4.55: layer_types written out,
# with _sliding_window_pattern and use_bidirectional_attention beside it).
GEMMA3_270M = {
    "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "attn_logit_softcapping": None,
    "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640, "initializer_range": 0.02,
    "intermediate_size": 2048,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
    "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512,
    "torch_dtype": "bfloat16", "transformers_version": "4.55.0.dev0",
    "use_bidirectional_attention": False, "use_cache": True, "vocab_size": 262144}
# google/gemma-3-4b-pt's text_config (the whole object, as published, model_type as given
# there): every other key takes Gemma3TextConfig's default (vocab_size 262208, 8 heads, 4
# key/value heads, head_dim 256, sliding_window_pattern 6, query_pre_attn_scalar 256).
GEMMA3_4B_TEXT = {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                  "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                  "sliding_window": 1024}

CHECKPOINTS = {"google/gemma-2b": GEMMA_2B, "google/gemma-2-2b": GEMMA2_2B,
               "google/gemma-3-1b-pt": GEMMA3_1B, "google/gemma-3-270m": GEMMA3_270M}


def imported(config, attention="exact"):
    text = json.dumps(config, indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def params(config):
    return symflops_counts(config, 32, "full-square")[0]


# -- the oracle: transformers 5.24 on the meta device ---------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_checkpoint_matches_transformers_exactly(name):
    config = CHECKPOINTS[name]
    assert symflops_counts(config, 32, "full-square") == hf_counts(config, 32)


VARIANTS = [
    {**GEMMA_2B, "attention_dropout": 0.1},
    {**GEMMA2_2B, "attention_bias": True, "tie_word_embeddings": False, "sliding_window": 8},
    {**GEMMA3_1B, "attention_bias": True, "final_logit_softcapping": 30.0,
     "num_key_value_heads": 2, "sliding_window": 8},
]


@pytest.mark.slow
@pytest.mark.parametrize("config", VARIANTS, ids=["dropout", "bias-untied-window", "gemma3-mix"])
def test_variants_match_transformers_exactly(config):
    assert symflops_counts(config, 32, "full-square") == hf_counts(config, 32)


@pytest.mark.slow
def test_gemma3_4b_text_config_with_class_defaults_matches_transformers():
    assert symflops_counts(GEMMA3_4B_TEXT, 32, "full-square") == hf_counts(GEMMA3_4B_TEXT, 32)


# -- parameters: published counts and hand sums ------------------------------------------

def gemma_params(V, D, L, N, G, E, F, extra_norms=0, qk=0):
    """Tied embedding, final norm, per layer q, k, v, o, gate, up, down and the norms."""
    layer = D * N * E + 2 * D * G * E + N * E * D + 3 * D * F + (2 + extra_norms) * D + qk * E
    return V * D + D + L * layer


def test_published_parameter_counts():
    # the published counts of KerasHub's presets gemma_2b_en, gemma2_2b_en, gemma3_1b
    # (the same weights); each also the hand sum
    assert params(GEMMA_2B) == 2_506_172_416 == gemma_params(256000, 2048, 18, 8, 1, 256, 16384)
    assert params(GEMMA2_2B) == 2_614_341_888 == \
        gemma_params(256000, 2304, 26, 8, 4, 256, 9216, extra_norms=2)
    assert params(GEMMA3_1B) == 999_885_952 == \
        gemma_params(262144, 1152, 26, 4, 1, 256, 6912, extra_norms=2, qk=2)


def test_layer_types_written_out():
    i = imported(GEMMA3_270M)
    assert (i.dims["L_sliding"], i.dims["L_full"], i.dims["W"]) == (15, 3, 512)
    assert params(GEMMA3_270M) == 268_098_176 == \
        gemma_params(262144, 640, 18, 4, 1, 256, 2048, extra_norms=2, qk=2)


def test_absent_keys_take_the_class_defaults():
    i = imported(GEMMA3_4B_TEXT)
    assert i.dims == {"B": 1, "V": 262208, "S": 131072, "D": 2560, "N": 8, "G": 4, "E": 256,
                      "F": 10240, "W": 1024, "L_sliding": 29, "L_full": 5}
    # 3,880,263,168 with transformers (KerasHub's 3,880,099,328 counts a 262144 vocabulary)
    assert params(GEMMA3_4B_TEXT) == 3_880_263_168 == \
        gemma_params(262208, 2560, 34, 8, 4, 256, 10240, extra_norms=2, qk=2)
    # Gemma 1's defaults: 16 key/value heads (not "= heads") and head_dim 256
    g = imported({"model_type": "gemma", "num_attention_heads": 16}).dims
    assert (g["N"], g["E"], g["D"]) == (16, 256, 3072) and "G" not in g


def test_untied_and_biases():
    untied = {**GEMMA_2B, "tie_word_embeddings": False, "attention_bias": True}
    # checked against transformers: 3,030,543,360
    assert params(untied) == 2_506_172_416 + 256000 * 2048 + 18 * (8 * 256 + 2 * 256 + 2048) \
        == 3_030_543_360


# -- the pairs: causal and windowed against the full square -----------------------------

def square_minus_exact(config, seq=32):
    full = symflops_counts(config, seq, "full-square")
    exact = symflops_counts(config, seq, "exact")
    assert full[0] == exact[0]
    return full[1] - exact[1]


def test_causal_count_is_the_full_square_minus_the_triangle():
    # two products (A = Q K, O = P V) of 2 N E per pair, three times (forward, two backward)
    S = 32
    triangle = S * S - S * (S + 1) // 2
    assert square_minus_exact(GEMMA_2B) == 18 * 3 * 2 * 2 * 8 * 256 * triangle
    # gemma-2-2b's window (4096) is longer than S: both kinds of layer count the triangle
    assert square_minus_exact(GEMMA2_2B) == 26 * 3 * 2 * 2 * 8 * 256 * triangle


def test_windowed_count_is_the_full_square_minus_the_pairs_outside_the_window():
    S, W = 32, 8
    m = min(S, W)
    window = m * (m + 1) // 2 + (S - m) * W                       # 36 + 24 * 8 = 228 pairs
    causal = S * (S + 1) // 2
    per_pair = 3 * 2 * 2 * 4 * 256                                 # N = 4, E = 256
    got = square_minus_exact({**GEMMA3_1B, "sliding_window": W})
    assert got == per_pair * (22 * (S * S - window) + 4 * (S * S - causal))


# -- what the declaration says ------------------------------------------------------------

def test_gemma_forms_are_written_faithfully():
    text = imported(GEMMA2_2B).text
    assert "X0[b,s,d] = W_E[tok[b,s], d] * sqrt(D)" in text
    assert "c1[d] = 1 + g1[d]" in text and "rmsnorm_d(X[b,s,d]) * c1[d]" in text
    assert "gelu_tanh(U[b,s,j])" in text and "/ sqrt(256)" in text
    assert "Ad[b,g,r,s,t] = A[b,g,r,s,t] / 50" in text and "Zc[b,s,v] = 30 * Zt[b,s,v]" in text
    assert "where t <= s, s - t < W" in text
    g3 = imported(GEMMA3_1B).text
    assert "rmsnorm_e(Q[b,s,g,r,e]) * c_q[e]" in g3 and "cos_l" in g3 and "cos_g" in g3
    assert "tanh(" not in g3.replace("gelu_tanh(", "")   # both soft-cappings null
    assert "sqrt(E)" in imported(GEMMA_2B).text  # Gemma 1: head_dim ** -0.5


def test_an_explicit_null_turns_a_soft_capping_off():
    text = imported({**GEMMA2_2B, "attn_logit_softcapping": None,
                     "final_logit_softcapping": None}).text
    assert "tanh(" not in text.replace("gelu_tanh(", "")
    assert "/ 30" in imported({k: v for k, v in GEMMA2_2B.items()
                               if k != "final_logit_softcapping"}).text   # absent: 30.0


def test_layer_types_and_pattern():
    dims = imported({**GEMMA3_1B, "sliding_window_pattern": 2}).dims
    assert (dims["L_sliding"], dims["L_full"]) == (13, 13)
    types = ["full_attention"] * 26
    dims = imported({**GEMMA2_2B, "layer_types": types}).dims
    assert dims["L"] == 26 and "W" not in dims


def test_gemma1_legacy_gelu_is_the_tanh_approximation():
    # GemmaConfig rewrites hidden_act "gelu" (the published value) to gelu_pytorch_tanh
    assert GEMMA_2B["hidden_act"] == "gelu"
    text = imported(GEMMA_2B).text
    assert "gelu_tanh(U[b,s,j])" in text and " gelu(U" not in text


def test_gemma1_hidden_activation_may_be_null_or_agree():
    # configs saved by transformers 4.40 - 4.x write hidden_activation beside hidden_act
    for value in (None, "gelu_pytorch_tanh"):
        assert "gelu_tanh(U[b,s,j])" in imported({**GEMMA_2B, "hidden_activation": value}).text


def test_attention_dropout_is_a_dropout_of_the_probabilities():
    config = {**GEMMA_2B, "attention_dropout": 0.1}
    assert "dropout(P[b,g,r,s,t], 0.1)" in imported(config).text
    assert symflops_counts(config, 32) == symflops_counts(GEMMA_2B, 32)


def test_the_declaration_reads_back_from_its_file(tmp_path):
    from symflops.declaration.reader import load
    from symflops.derive.backward import derive
    for config in CHECKPOINTS.values():
        path = tmp_path / "model.yaml"
        path.write_text(imported(config).text)
        assert derive(load(str(path))).rules


# -- refused, by name -----------------------------------------------------------------------

@pytest.mark.parametrize("config, key", [
    ({**GEMMA_2B, "use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({**GEMMA3_1B, "attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ({**GEMMA2_2B, "attn_logit_softcapping": -1.0}, "attn_logit_softcapping"),
    ({**GEMMA_2B, "head_dim": None}, "head_dim"),
    ({**GEMMA_2B, "head_dim": 255}, "head_dim"),
    ({**GEMMA_2B, "num_key_value_heads": 3}, "num_key_value_heads"),
    ({**GEMMA2_2B, "num_attention_heads": 10, "num_key_value_heads": 5}, "num_attention_heads"),
    ({**GEMMA2_2B, "sliding_window": None}, "sliding_window"),
    ({**GEMMA2_2B, "sliding_window_size": 2048}, "sliding_window_size"),
    ({**GEMMA2_2B, "layer_types": ["full_attention"] * 25}, "layer_types"),
    ({**GEMMA2_2B, "layer_types": ["chunked_attention"] * 26}, "layer_types"),
    ({**GEMMA3_1B, "_sliding_window_pattern": 4}, "_sliding_window_pattern"),
    ({**GEMMA_2B, "hidden_activation": "relu"}, "hidden_activation"),
    ({**GEMMA_2B, "hidden_act": "gelu_fast"}, "hidden_act"),
    ({**GEMMA_2B, "attention_dropout": 1.0}, "attention_dropout"),
    ({**GEMMA_2B, "architectures": ["GemmaForSequenceClassification"]}, "architectures"),
    ({**GEMMA_2B, "final_logit_softcapping": 30.0}, "final_logit_softcapping"),  # a Gemma 2 key
    ({**GEMMA2_2B, "sliding_window_pattern": 6}, "sliding_window_pattern"),     # a Gemma 3 key
    ({**GEMMA3_1B, "some_new_key": 1}, "some_new_key"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)


def test_the_multimodal_gemma3_is_refused_with_its_advice():
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": GEMMA3_4B_TEXT, "vision_config": {"model_type": "siglip_vision_model"},
              "mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000,
              "image_token_index": 262144, "initializer_range": 0.02,
              "transformers_version": "4.50.0.dev0"}
    with pytest.raises(SymflopsError, match="text_config.*gemma3_text"):
        imported(config)
