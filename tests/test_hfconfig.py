"""Reading Hugging Face config.json files: the published figures of four
models, written here by hand, and the error cases."""

import json

import pytest

from symflops.errors import SymflopsError
from symflops.hfconfig import Architecture, load

# The keys of the published config.json files (abridged: extra keys kept to
# show they are ignored).
GPT2_SMALL = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function":
              "gelu_new", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None,
              "n_layer": 12, "n_positions": 1024, "vocab_size": 50257, "resid_pdrop": 0.1}
LLAMA2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
             "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
             "torch_dtype": "float16", "vocab_size": 32000}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
              "max_position_embeddings": 32768, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000.0,
              "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                "max_position_embeddings": 32768, "num_attention_heads": 32,
                "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
                "num_local_experts": 8, "output_router_logits": False, "vocab_size": 32000,
                "router_aux_loss_coef": 0.02}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2) if not isinstance(data, str) else data)
    return path


def test_gpt2_small(tmp_path):
    assert load(write(tmp_path, GPT2_SMALL)) == Architecture(
        family="gpt2", layers=12, width=768, heads=12, kv_heads=12, head_width=64,
        mlp_width=3072, vocab=50257, experts=1, active_experts=1, tied=True, context=1024,
        mlp="gelu", norm="layernorm", biases=True, position="learned")


def test_gpt2_explicit_n_inner(tmp_path):
    assert load(write(tmp_path, {**GPT2_SMALL, "n_inner": 2048})).mlp_width == 2048


def test_llama2_7b(tmp_path):
    assert load(write(tmp_path, LLAMA2_7B)) == Architecture(
        family="llama", layers=32, width=4096, heads=32, kv_heads=32, head_width=128,
        mlp_width=11008, vocab=32000, experts=1, active_experts=1, tied=False, context=4096,
        mlp="swiglu", norm="rmsnorm", biases=False, position="rotary")


def test_mistral_7b_grouped_query_attention(tmp_path):
    a = load(write(tmp_path, MISTRAL_7B))
    assert (a.family, a.heads, a.kv_heads, a.head_width, a.mlp_width, a.context) == \
        ("llama", 32, 8, 128, 14336, 32768)
    assert (a.experts, a.active_experts, a.tied) == (1, 1, False)


def test_mixtral_8x7b(tmp_path):
    a = load(write(tmp_path, MIXTRAL_8X7B))
    assert (a.family, a.experts, a.active_experts, a.kv_heads, a.mlp_width) == \
        ("mixtral", 8, 2, 8, 14336)
    assert (a.mlp, a.norm, a.position) == ("swiglu", "rmsnorm", "rotary")


def test_kv_heads_default_to_heads_and_head_dim_is_read(tmp_path):
    data = {k: v for k, v in LLAMA2_7B.items() if k != "num_key_value_heads"}
    assert load(write(tmp_path, data)).kv_heads == 32
    assert load(write(tmp_path, {**data, "head_dim": 96})).head_width == 96


def test_family_from_keys_without_model_type(tmp_path):
    no_type = lambda d: {k: v for k, v in d.items() if k != "model_type"}  # noqa: E731
    assert load(write(tmp_path, no_type(GPT2_SMALL))).family == "gpt2"
    assert load(write(tmp_path, no_type(LLAMA2_7B))).family == "llama"
    assert load(write(tmp_path, no_type(MIXTRAL_8X7B))).family == "mixtral"


def test_tied_and_biases_flags(tmp_path):
    a = load(write(tmp_path, {**LLAMA2_7B, "tie_word_embeddings": True, "attention_bias": True}))
    assert a.tied and a.biases


def error(tmp_path, data):
    path = write(tmp_path, data)
    with pytest.raises(SymflopsError) as exc:
        load(path)
    return str(exc.value), path


def test_missing_required_key_names_key_and_file(tmp_path):
    data = {k: v for k, v in LLAMA2_7B.items() if k != "intermediate_size"}
    message, path = error(tmp_path, data)
    assert "'intermediate_size' is missing" in message and str(path) in message
    message, _ = error(tmp_path, {k: v for k, v in GPT2_SMALL.items() if k != "n_layer"})
    assert "'n_layer' is missing" in message
    message, _ = error(tmp_path, {k: v for k, v in MIXTRAL_8X7B.items()
                                  if k != "num_experts_per_tok"})
    assert "'num_experts_per_tok' is missing" in message


def test_wrong_type_names_key_and_position(tmp_path):
    message, path = error(tmp_path, {**LLAMA2_7B, "hidden_size": "4096"})
    assert "'hidden_size' must be a positive integer" in message
    assert f"{path}:" in message and '"4096"' in message
    for bad in (4096.0, True, -1, 0):
        message, _ = error(tmp_path, {**LLAMA2_7B, "num_hidden_layers": bad})
        assert "'num_hidden_layers' must be" in message
    message, _ = error(tmp_path, {**LLAMA2_7B, "tie_word_embeddings": "no"})
    assert "'tie_word_embeddings' must be true or false" in message


def test_unrecognised_family(tmp_path):
    message, path = error(tmp_path, {"model_type": "bert", "hidden_size": 768})
    assert '"bert"' in message and str(path) in message
    message, _ = error(tmp_path, {"d_model": 512, "num_layers": 6})
    assert "match no family" in message


def test_inconsistent_heads(tmp_path):
    message, _ = error(tmp_path, {**LLAMA2_7B, "num_key_value_heads": 5})
    assert "not a multiple of num_key_value_heads" in message
    message, _ = error(tmp_path, {**GPT2_SMALL, "n_head": 7})
    assert "n_embd = 768 is not a multiple of n_head = 7" in message
    message, _ = error(tmp_path, {**MIXTRAL_8X7B, "num_experts_per_tok": 9})
    assert "exceeds num_local_experts" in message


def test_not_json_not_an_object_no_file(tmp_path):
    message, path = error(tmp_path, '{"hidden_size": 4096,,}')
    assert "not valid JSON" in message and f"{path}:1:" in message
    message, _ = error(tmp_path, "[1, 2]")
    assert "must hold a JSON object" in message
    with pytest.raises(SymflopsError, match="no such file"):
        load(tmp_path / "absent.json")
