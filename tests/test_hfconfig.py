"""Reading Hugging Face config.json files: the published figures of four
models, written here by hand, and the error cases."""

import json
from fractions import Fraction

import pytest

from symflops.core.errors import SymflopsError
from symflops.planner.hfconfig import Architecture, load

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
# EleutherAI/pythia-1.4b (GPT-NeoX): 1,414,647,808 parameters
PYTHIA_1_4B = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
               "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 2048,
               "num_attention_heads": 16, "num_hidden_layers": 24, "rotary_pct": 0.25,
               "rotary_emb_base": 10000, "use_parallel_residual": True, "vocab_size": 50304,
               "tie_word_embeddings": False, "hidden_act": "gelu", "layer_norm_eps": 1e-05}
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
    path = write(tmp_path, GPT2_SMALL)
    assert load(path) == Architecture(
        family="gpt2", layers=12, width=768, heads=12, kv_heads=12, head_width=64,
        mlp_width=3072, vocab=50257, experts=1, active_experts=1, tied=True, context=1024,
        mlp="gelu", norm="layernorm", attention_bias=True, mlp_bias=True, position="learned",
        activation="gelu_tanh", embedding_dropout=Fraction(1, 10), source=str(path))


def test_gpt2_explicit_n_inner(tmp_path):
    assert load(write(tmp_path, {**GPT2_SMALL, "n_inner": 2048})).mlp_width == 2048


def test_llama2_7b(tmp_path):
    path = write(tmp_path, LLAMA2_7B)
    assert load(path) == Architecture(
        family="llama", layers=32, width=4096, heads=32, kv_heads=32, head_width=128,
        mlp_width=11008, vocab=32000, experts=1, active_experts=1, tied=False, context=4096,
        mlp="swiglu", norm="rmsnorm", attention_bias=False, mlp_bias=False, position="rotary",
        activation="silu", source=str(path))


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


def test_no_model_type_is_refused_not_guessed(tmp_path):
    """Issue 14 item 8: a config without model_type was sniffed by its keys, so
    Pythia-1.4B's GPT-NeoX config became a Llama of 1,816,758,272 parameters
    (it has 1,414,647,808). Now every config without model_type is refused."""
    no_type = lambda d: {k: v for k, v in d.items() if k != "model_type"}  # noqa: E731
    for config in (PYTHIA_1_4B, GPT2_SMALL, LLAMA2_7B, MIXTRAL_8X7B):
        message, path = error(tmp_path, no_type(config))
        assert "key 'model_type' is missing" in message and str(path) in message
        assert "gpt2, llama, mistral, mixtral" in message


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
    assert "'model_type' is missing" in message
    message, _ = error(tmp_path, PYTHIA_1_4B)
    assert '"gpt_neox" is not a decoder-only family symflops reads' in message


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


# --- issue 14 item 8: every key is read, ignored on purpose, or refused ---------------

def test_sliding_window_and_activations_are_read(tmp_path):
    assert load(write(tmp_path, MISTRAL_7B)).sliding_window == 4096
    assert load(write(tmp_path, {**MISTRAL_7B, "sliding_window": None})).sliding_window is None
    assert load(write(tmp_path, LLAMA2_7B)).activation == "silu"
    assert load(write(tmp_path, {**LLAMA2_7B, "hidden_act": "gelu"})).activation == "gelu"
    # GPT-2's default and published gelu_new is the tanh approximation
    assert load(write(tmp_path, {**GPT2_SMALL, "activation_function": None})).activation == \
        "gelu_tanh"
    a = load(write(tmp_path, {**LLAMA2_7B, "attention_bias": True}))
    assert (a.attention_bias, a.mlp_bias) == (True, False)


def test_keys_that_change_no_count_are_ignored(tmp_path):
    quiet = {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 5e5,
             "pretraining_tp": 2, "torch_dtype": "bfloat16", "id2label": {"0": "a"},
             "_name_or_path": "x", "temperature": 0.7, "attention_dropout": 0.0}
    assert load(write(tmp_path, {**LLAMA2_7B, **quiet})).width == 4096
    assert load(write(tmp_path, {**GPT2_SMALL, "summary_type": "cls_index", "n_ctx": 1024,
                                 "layer_norm_epsilon": 1e-5})).width == 768


@pytest.mark.parametrize("base, extra, fragment", [
    (LLAMA2_7B, {"quantization_config": {"bits": 4}}, "key 'quantization_config' is not one"),
    (LLAMA2_7B, {"auto_map": {"AutoModel": "x.Y"}}, "key 'auto_map' is not one"),
    (LLAMA2_7B, {"sliding_window": 4096}, "key 'sliding_window' is not one"),
    (GPT2_SMALL, {"hidden_size": 768}, "key 'hidden_size' is not one"),
    (LLAMA2_7B, {"hidden_act": "gelu_fast"}, "'hidden_act' = \"gelu_fast\" names an activation"),
    (GPT2_SMALL, {"activation_function": "quick_gelu"}, "'activation_function' = \"quick_gelu\""),
    (LLAMA2_7B, {"attention_dropout": 0.1}, "key 'attention_dropout' is not 0"),
    (MISTRAL_7B, {"attention_bias": True}, "transformers' Mistral has no biases"),
    (MIXTRAL_8X7B, {"output_router_logits": True}, "no load-balancing loss"),
    (MIXTRAL_8X7B, {"router_jitter_noise": 0.01}, "key 'router_jitter_noise' is not 0"),
    (GPT2_SMALL, {"tie_word_embeddings": False}, "'tie_word_embeddings' = false is not supported"),
    (GPT2_SMALL, {"attn_pdrop": 0}, "key 'attn_pdrop' = 0 is not supported"),
    (GPT2_SMALL, {"scale_attn_weights": False}, "'scale_attn_weights' = false"),
    (GPT2_SMALL, {"add_cross_attention": True}, "'add_cross_attention' = true"),
    (LLAMA2_7B, {"architectures": ["LlamaForSequenceClassification"]},
     "symflops plans the causal language model LlamaForCausalLM"),
    (LLAMA2_7B, {"pruned_heads": {"0": [1]}}, "key 'pruned_heads' lists pruned"),
    (LLAMA2_7B, {"is_encoder_decoder": True}, "'is_encoder_decoder' = true"),
    (LLAMA2_7B, {"hidden_size": 10**13}, "key 'hidden_size' = 10000000000000 is beyond 10^12"),
    (LLAMA2_7B, {"attention_bias": "yes"}, "'attention_bias' must be true or false"),
])
def test_a_key_that_may_change_a_count_is_refused_by_name(tmp_path, base, extra, fragment):
    message, path = error(tmp_path, {**base, **extra})
    assert fragment in message and f"{path}:" in message


def test_a_duplicate_key_is_refused(tmp_path):
    text = json.dumps(LLAMA2_7B)[:-1] + ', "hidden_size": 2048}'
    message, path = error(tmp_path, text)
    assert "key 'hidden_size' appears twice" in message and f"{path}:1:" in message
