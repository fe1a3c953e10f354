"""symflops import-hf for GPT-NeoX / Pythia, Falcon and OPT.

The configs are the published config.json files of the checkpoints named,
written out here with their extra keys (so the ignore lists are exercised).
The slow tests compare with transformers (tests/hf_oracle.py): parameters and
FlopCounterMode's training FLOPs, exactly; the fast ones check published or
hand-summed parameter counts, the causal triangle, and the refusals.
"""

import json

import pytest

from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_data

from hf_oracle import hf_counts, symflops_counts

# EleutherAI/pythia-160m config.json
PYTHIA_160M = {
    "architectures": ["GPTNeoXForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "bos_token_id": 0, "classifier_dropout": 0.1, "eos_token_id": 0, "hidden_act": "gelu",
    "hidden_dropout": 0.0, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12,
    "rope_scaling": None, "rotary_emb_base": 10000, "rotary_pct": 0.25,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.24.0",
    "use_cache": True, "use_parallel_residual": True, "vocab_size": 50304}
# EleutherAI/pythia-1.4b config.json
PYTHIA_1_4B = {**PYTHIA_160M, "hidden_size": 2048, "intermediate_size": 8192,
               "num_attention_heads": 16, "num_hidden_layers": 24}
_AUTO_MAP = {"AutoConfig": "configuration_falcon.FalconConfig",
             "AutoModel": "modeling_falcon.FalconModel",
             "AutoModelForSequenceClassification": "modeling_falcon.FalconForSequenceClassification",
             "AutoModelForTokenClassification": "modeling_falcon.FalconForTokenClassification",
             "AutoModelForQuestionAnswering": "modeling_falcon.FalconForQuestionAnswering",
             "AutoModelForCausalLM": "modeling_falcon.FalconForCausalLM"}
# tiiuae/falcon-7b config.json
FALCON_7B = {
    "alibi": False, "apply_residual_connection_post_layernorm": False,
    "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "auto_map": _AUTO_MAP,
    "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
    "hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "model_type": "falcon", "multi_query": True, "new_decoder_architecture": False,
    "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.27.4", "use_cache": True,
    "vocab_size": 65024}
# tiiuae/falcon-40b config.json
FALCON_40B = {**{k: v for k, v in FALCON_7B.items() if k != "multi_query"},
              "hidden_size": 8192, "new_decoder_architecture": True, "num_attention_heads": 128,
              "num_hidden_layers": 60, "num_kv_heads": 8}
# facebook/opt-125m config.json
OPT_125M = {
    "_name_or_path": "facebook/opt-125m", "_remove_final_layer_norm": False,
    "activation_dropout": 0.0, "activation_function": "relu", "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": True, "dropout": 0.1,
    "eos_token_id": 2, "ffn_dim": 3072, "hidden_size": 768, "init_std": 0.02, "layerdrop": 0.0,
    "max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": 12,
    "num_hidden_layers": 12, "pad_token_id": 1, "prefix": "</s>", "torch_dtype": "float16",
    "transformers_version": "4.21.0.dev0", "use_cache": True, "vocab_size": 50272,
    "word_embed_proj_dim": 768}
# facebook/opt-350m config.json
OPT_350M = {**OPT_125M, "_name_or_path": "facebook/opt-350m", "do_layer_norm_before": False,
            "ffn_dim": 4096, "hidden_size": 1024, "num_attention_heads": 16,
            "num_hidden_layers": 24, "transformers_version": "4.20.0.dev0",
            "word_embed_proj_dim": 512}

CHECKPOINTS = {"EleutherAI/pythia-160m": PYTHIA_160M, "EleutherAI/pythia-1.4b": PYTHIA_1_4B,
               "tiiuae/falcon-7b": FALCON_7B, "tiiuae/falcon-40b": FALCON_40B,
               "facebook/opt-125m": OPT_125M, "facebook/opt-350m": OPT_350M}


def imported(config, attention="exact"):
    text = json.dumps(config, indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def refused(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_counts_equal_transformers(name):
    config = CHECKPOINTS[name]
    assert symflops_counts(config, 32, "full-square") == hf_counts(config, 32)


# Small configs (no checkpoint) for the values the checkpoints above do not take.
_NEOX = {"model_type": "gpt_neox", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 64}
_FALCON = {"model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4}
_OPT = {"model_type": "opt", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "ffn_dim": 128, "max_position_embeddings": 40}
VARIANTS = {
    "neox tied, dropout": {**_NEOX, "tie_word_embeddings": True, "hidden_dropout": 0.1,
                           "attention_dropout": 0.1},
    "neox full rotary": {**_NEOX, "rotary_pct": 1.0},
    "neox no rotary": {**_NEOX, "rotary_pct": 0.01},
    "neox odd rotary_ndims": {**_NEOX, "rotary_pct": 0.3},
    "neox sequential, rope_parameters": {**_NEOX, "use_parallel_residual": False,
                                         "rope_parameters": {"rope_type": "default",
                                                             "partial_rotary_factor": 0.5}},
    "neox sequential, no attention bias": {**_NEOX, "use_parallel_residual": False,
                                           "attention_bias": False},
    "falcon untied, hidden dropout": {**_FALCON, "tie_word_embeddings": False,
                                      "hidden_dropout": 0.1},
    "falcon new architecture, one norm, bias": {**_FALCON, "new_decoder_architecture": True,
                                                "num_kv_heads": 2, "num_ln_in_parallel_attn": 1,
                                                "ffn_hidden_size": 96, "bias": True},
    "falcon multi-head, bias, relu": {**_FALCON, "multi_query": False, "bias": True,
                                      "activation": "relu"},
    "falcon sequential, dropout": {**_FALCON, "parallel_attn": False, "attention_dropout": 0.1,
                                   "hidden_dropout": 0.1},
    "falcon multi-query alibi": {**_FALCON, "alibi": True, "attention_dropout": 0.1},
    "falcon-rw style": {**_FALCON, "alibi": True, "bias": True, "multi_query": False,
                        "parallel_attn": False},
    "opt no affine, no bias": {**_OPT, "layer_norm_elementwise_affine": False,
                               "enable_bias": False, "attention_dropout": 0.1},
    "opt pre-norm projections, untied": {**_OPT, "word_embed_proj_dim": 32,
                                         "tie_word_embeddings": False, "dropout": 0.0},
    "opt no final norm": {**_OPT, "_remove_final_layer_norm": True},
    "opt post-norm projections, untied": {**_OPT, "word_embed_proj_dim": 48,
                                          "do_layer_norm_before": False,
                                          "tie_word_embeddings": False},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
def test_variants_equal_transformers(name):
    config = VARIANTS[name]
    assert symflops_counts(config, 32, "full-square") == hf_counts(config, 32)


@pytest.mark.parametrize("name", VARIANTS)
def test_variants_differ_from_full_square_by_the_triangle(name):
    config = VARIANTS[name]
    s, heads = 32, config["num_attention_heads"]
    head = config["hidden_size"] // heads
    full, exact = (symflops_counts(config, s, a) for a in ("full-square", "exact"))
    assert full[0] == exact[0]
    assert full[1] - exact[1] == config["num_hidden_layers"] * 6 * 2 * heads * head * (
        s * s - s * (s + 1) // 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_every_key_of_the_config_class_is_read_or_ignored(name):
    """transformers' whole config (every field of the class, defaults included, as
    to_dict() writes it) imports to the same counts as the published file."""
    transformers = pytest.importorskip("transformers")
    config = CHECKPOINTS[name]
    keys = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    full = transformers.AutoConfig.for_model(config["model_type"], **keys).to_dict()
    assert symflops_counts(full, 32) == symflops_counts(config, 32)


# -- published and hand-summed parameter counts ------------------------------

def _params(config):
    return symflops_counts(config, 32, "full-square")[0]


def test_pythia_parameters_are_the_model_cards():
    # Pythia model card (EleutherAI/pythia-*): non-embedding parameters 85,056,000 (160M)
    # and 1,208,602,624 (1.4B); plus embed_in and embed_out, 2 V D (untied).
    assert _params(PYTHIA_160M) == 85_056_000 + 2 * 50304 * 768 == 162_322_944
    assert _params(PYTHIA_1_4B) == 1_208_602_624 + 2 * 50304 * 2048 == 1_414_647_808


def test_falcon_parameters_by_hand():
    d, f, e, v = 4544, 4 * 4544, 64, 65024
    # falcon-7b: query_key_value D x (N + 2) E (multi-query), dense D^2, the MLP 2 D F,
    # two LayerNorm vectors; word_embeddings tied with lm_head; ln_f.
    layer = d * (71 + 2) * e + d * d + 2 * d * f + 2 * d
    assert _params(FALCON_7B) == 32 * layer + v * d + 2 * d == 6_921_720_704
    d, f = 8192, 4 * 8192
    # falcon-40b: query_key_value D x (N + 2 G) E with G = num_kv_heads = 8; ln_attn and
    # ln_mlp (2 x 2 D).
    layer = d * (128 + 2 * 8) * e + d * d + 2 * d * f + 4 * d
    assert _params(FALCON_40B) == 60 * layer + v * d + 2 * d == 41_303_293_952


def test_opt_parameters_by_hand():
    d, f, v = 768, 3072, 50272
    # q, k, v, out_proj with biases, fc1 and fc2 with biases, two LayerNorms
    layer = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
    # embed_tokens (tied with lm_head), embed_positions 2048 + 2 rows, final_layer_norm
    assert _params(OPT_125M) == 12 * layer + v * d + 2050 * d + 2 * d == 125_239_296
    d, f, w = 1024, 4096, 512
    layer = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
    # embed_tokens [V, 512] (tied), project_in and project_out 512 x 1024, positions; no
    # final_layer_norm (post-norm)
    assert _params(OPT_350M) == 24 * layer + v * w + 2 * w * d + 2050 * d == 331_196_416


def test_position_table_does_not_grow_with_the_sequence():
    p32 = symflops_counts(OPT_125M, 32)[0]
    p64 = symflops_counts(OPT_125M, 64)[0]
    assert p32 == p64 == 125_239_296
    text = imported(OPT_125M).text
    assert "W_P: {shape: [P, D]" in text and "W_P[pos[b,s], d]" in text
    assert "P: \"rows of the learned position table" in text


# -- the causal triangle ----------------------------------------------------------

@pytest.mark.parametrize("name", CHECKPOINTS)
def test_exact_differs_from_full_square_by_the_triangle(name):
    config = CHECKPOINTS[name]
    s = 32
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head = config["hidden_size"] // heads
    full = symflops_counts(config, s, "full-square")[1]
    exact = symflops_counts(config, s, "exact")[1]
    # six products of 2 N E pairs-FLOPs per layer (Q K^T and P V, forward, and two
    # backward each): S^2 pairs against S (S + 1) / 2.
    assert full - exact == layers * 6 * 2 * heads * head * (s * s - s * (s + 1) // 2)


# -- what each key changes ---------------------------------------------------------

def test_pythia_partial_rotary_split():
    text = imported(PYTHIA_160M).text
    assert "U: {description" not in text
    assert "E: {description: \"head width\", equals: U + Ep}" in text
    assert "U: 16" in text and "Ep: 48" in text      # int(64 * 0.25) = 16 rotated
    assert "concat_e(Qa[b,s,n,u], Qp[b,s,n,p])" in text


def test_pythia_rope_parameters_factor_wins_over_rotary_pct():
    text = imported({**PYTHIA_160M, "rope_parameters": {"rope_type": "default",
                                                        "partial_rotary_factor": 0.5}}).text
    assert "U: 32" in text and "Ep: 32" in text


def test_pythia_full_and_no_rotary():
    full = imported({**PYTHIA_160M, "rotary_pct": 1.0}).text
    assert "Ep" not in full and "cos: {shape: [S, E]" in full
    none = imported({**PYTHIA_160M, "rotary_pct": 0.01}).text
    assert "cos" not in none and "rot[" not in none


def test_falcon_multi_query_ignores_num_kv_heads_as_transformers_does():
    assert imported({**FALCON_7B, "num_kv_heads": 8}).dims["G"] == 1


# -- refusals ---------------------------------------------------------------------

@pytest.mark.parametrize("config, key", [
    ({**PYTHIA_160M, "hidden_act": "quick_gelu"}, "hidden_act"),
    ({**PYTHIA_160M, "rotary_pct": 1.5}, "rotary_pct"),
    ({**PYTHIA_160M, "hidden_size": 36, "num_attention_heads": 4, "rotary_pct": 1.0},
     "rotary_pct"),                                  # 9 entries: 5 frequencies, 10 > 9
    ({**PYTHIA_160M, "num_attention_heads": 7}, "num_attention_heads"),
    ({**PYTHIA_160M, "hidden_dropout": 1.5}, "hidden_dropout"),
    ({**FALCON_7B, "apply_residual_connection_post_layernorm": True},
     "apply_residual_connection_post_layernorm"),
    ({**FALCON_7B, "multi_query": False, "num_kv_heads": 8}, "num_kv_heads"),
    ({**FALCON_40B, "parallel_attn": False}, "parallel_attn"),
    ({**FALCON_40B, "num_kv_heads": 7}, "num_kv_heads"),
    ({**FALCON_7B, "num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn"),
    ({**FALCON_7B, "hidden_size": 4473}, "num_attention_heads"),     # head width 63: odd
    ({**FALCON_7B, "activation": "quick_gelu"}, "activation"),
    ({**OPT_125M, "layerdrop": 0.1}, "layerdrop"),
    ({**OPT_125M, "activation_dropout": 0.1}, "activation_dropout"),
    ({**OPT_125M, "num_attention_heads": 5}, "num_attention_heads"),
    ({**OPT_125M, "architectures": ["OPTForSequenceClassification"]}, "architectures"),
])
def test_a_value_that_cannot_be_expressed_is_refused_by_key(config, key):
    refused(config, key)


@pytest.mark.parametrize("config, key", [
    (PYTHIA_160M, "rotary_dim"),       # GPT-J's key, not GPT-NeoX's
    (FALCON_7B, "n_head"),             # the RefinedWeb name transformers 5 no longer reads
    (FALCON_7B, "n_head_kv"),
    (OPT_125M, "scale_embedding"),
])
def test_an_unknown_key_is_refused(config, key):
    refused({**config, key: 1}, key)
