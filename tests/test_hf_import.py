"""``symflops import-hf`` of the Llama-style families and GPT-2: the declaration
it writes, the published counts it reproduces, and the keys it refuses.

Expected figures come from outside the code: the parameter counts published
with the checkpoints (model cards), sums written by hand here, and, in the
tests marked slow, the Hugging Face model itself (:mod:`tests.hf_oracle`).
The configs are the published config.json files' keys (abridged), written
here by hand: no file is fetched."""

from __future__ import annotations

import json

import pytest

from hf_oracle import hf_counts, symflops_counts
from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_config, import_data

# openai-community/gpt2
GPT2_SMALL = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
              "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
              "n_inner": None, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
              "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
              "layer_norm_epsilon": 1e-05, "initializer_range": 0.02,
              "summary_type": "cls_index", "summary_use_proj": True,
              "summary_first_dropout": 0.1, "bos_token_id": 50256, "eos_token_id": 50256,
              "task_specific_params": {"text-generation": {"do_sample": True}}}
# meta-llama/Llama-2-7b-hf
LLAMA2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
             "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
             "torch_dtype": "float16", "vocab_size": 32000, "pretraining_tp": 1,
             "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02, "use_cache": True}
# huggyllama/llama-7b (Llama 1): 6,738,415,616 parameters, as Llama 2's sizes at 2,048 positions
LLAMA1_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
             "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 2048,
             "num_attention_heads": 32, "num_hidden_layers": 32, "rms_norm_eps": 1e-06,
             "tie_word_embeddings": False, "torch_dtype": "float16", "vocab_size": 32000,
             "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True,
             "initializer_range": 0.02}
# meta-llama/Meta-Llama-3-8B: grouped keys and values (8 of 32), a vocabulary of 128,256
LLAMA3_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
             "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "vocab_size": 128256, "attention_bias": False,
             "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
             "pretraining_tp": 1, "mlp_bias": False, "rope_scaling": None}
# meta-llama/Llama-3.2-1B: tied embeddings, head_dim given, llama3 rope scaling
LLAMA32_1B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
              "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": True,
              "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "rope_type": "llama3",
                                                        "high_freq_factor": 4.0,
                                                        "low_freq_factor": 1.0,
                                                        "original_max_position_embeddings": 8192},
              "rms_norm_eps": 1e-05, "attention_bias": False, "mlp_bias": False,
              "hidden_act": "silu", "attention_dropout": 0.0, "torch_dtype": "bfloat16"}
# mistralai/Mistral-7B-v0.1
MISTRAL_7B = {"model_type": "mistral", "architectures": ["MistralForCausalLM"],
              "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
              "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
              "vocab_size": 32000, "rms_norm_eps": 1e-05, "hidden_act": "silu"}
# mistralai/Mixtral-8x7B-v0.1
MIXTRAL_8X7B = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                "hidden_size": 4096, "intermediate_size": 14336,
                "max_position_embeddings": 32768, "num_attention_heads": 32,
                "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
                "num_local_experts": 8, "output_router_logits": False, "vocab_size": 32000,
                "router_aux_loss_coef": 0.02, "rope_theta": 1e6, "sliding_window": None}
# Qwen/Qwen2.5-0.5B: q, k, v biases, tied
QWEN25_05B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
              "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
              "max_window_layers": 24, "sliding_window": 32768, "use_sliding_window": False,
              "tie_word_embeddings": True, "rope_theta": 1e6, "rms_norm_eps": 1e-06,
              "hidden_act": "silu", "attention_dropout": 0.0, "bos_token_id": 151643}
# Qwen/Qwen3-0.6B: q/k norms, head_dim 128 (not 1024 / 16), tied
QWEN3_06B = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
             "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
             "max_position_embeddings": 40960, "max_window_layers": 28, "sliding_window": None,
             "use_sliding_window": False, "tie_word_embeddings": True, "attention_bias": False,
             "rope_theta": 1000000, "rms_norm_eps": 1e-06, "hidden_act": "silu",
             "attention_dropout": 0.0}

# Qwen/Qwen2.5-0.5B with its layers from 20 on windowed (use_sliding_window), two blocks
QWEN25_WINDOWED = {**QWEN25_05B, "use_sliding_window": True, "max_window_layers": 20,
                   "sliding_window": 4096}

# Llama-3.2-1B trained with attention dropout 0.1; Qwen3-0.6B with attention_bias
LLAMA32_DROPOUT = {**LLAMA32_1B, "attention_dropout": 0.1}
QWEN3_BIAS = {**QWEN3_06B, "attention_bias": True}

CHECKPOINTS = {"huggyllama/llama-7b": LLAMA1_7B, "meta-llama/Meta-Llama-3-8B": LLAMA3_8B,
               "Llama-3.2-1B, attention dropout": LLAMA32_DROPOUT,
               "Qwen3-0.6B, attention_bias": QWEN3_BIAS,
               "openai-community/gpt2": GPT2_SMALL, "Qwen2.5-0.5B, windowed": QWEN25_WINDOWED, "meta-llama/Llama-2-7b-hf": LLAMA2_7B,
               "meta-llama/Llama-3.2-1B": LLAMA32_1B, "mistralai/Mistral-7B-v0.1": MISTRAL_7B,
               "mistralai/Mixtral-8x7B-v0.1": MIXTRAL_8X7B, "Qwen/Qwen2.5-0.5B": QWEN25_05B,
               "Qwen/Qwen3-0.6B": QWEN3_06B}


def imported(config, attention="exact"):
    text = json.dumps(config, indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def params(config):
    return symflops_counts(config, 32)[0]


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", sorted(CHECKPOINTS))
def test_the_hugging_face_model_agrees_exactly(checkpoint):
    """Parameters to the integer; training FLOPs (FlopCounterMode's matrix
    products over forward and backward, eager attention over the full square)
    to the integer."""
    config = CHECKPOINTS[checkpoint]
    assert symflops_counts(config, 32) == hf_counts(config, 32)


@pytest.mark.parametrize("checkpoint, published", [
    ("openai-community/gpt2", 124_439_808),        # the model card's 124M, to the parameter
    ("meta-llama/Llama-2-7b-hf", 6_738_415_616),
    ("huggyllama/llama-7b", 6_738_415_616),
    ("meta-llama/Meta-Llama-3-8B", 8_030_261_248),   # the model card's 8.03B
    ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704),
    ("Qwen/Qwen2.5-0.5B", 494_032_768),           # the model card's 0.49B
])
def test_published_parameter_counts(checkpoint, published):
    assert params(CHECKPOINTS[checkpoint]) == published


def test_llama32_1b_by_hand():
    # tied: V D once; 16 x (q 2048 x 32 x 64, k and v 2048 x 8 x 64, o = q, MLP 3 x 2048 x
    # 8192, two gains 2048), the final gain 2048
    D, L, V, E = 2048, 16, 128256, 64
    block = D * 32 * E * 2 + D * 8 * E * 2 + 3 * D * 8192 + 2 * D
    assert params(LLAMA32_1B) == V * D + L * block + D == 1_235_814_400


def test_qwen_biases_and_norms_by_hand():
    # Qwen2: biases on q (14 x 64), k and v (2 x 64 each), none on o
    base = params({**QWEN25_05B, "model_type": "llama", "architectures": None,
                   "max_window_layers": None, "sliding_window": None,
                   "use_sliding_window": None, "tie_word_embeddings": True})
    assert params(QWEN25_05B) - base == 24 * (14 * 64 + 2 * 2 * 64)
    # Qwen3: a gain of width 128 for the query heads and one for the keys, per layer
    plain = {**QWEN3_06B, "model_type": "llama", "architectures": None,
             "max_window_layers": None, "use_sliding_window": None}
    assert params(QWEN3_06B) - params(plain) == 28 * 2 * 128


def test_attention_counted_exactly_differs_from_the_full_square_by_the_triangle():
    """Causal attention: each of the six products (Q K^T, P V forward; four in the
    backward) counts S(S+1)/2 pairs instead of S^2: L N E S(S-1)/2 x 2 FLOPs each."""
    S, L, N, E = 32, 32, 32, 128
    full = symflops_counts(LLAMA2_7B, S, "full-square")[1]
    exact = symflops_counts(LLAMA2_7B, S, "exact")[1]
    assert full - exact == 6 * 2 * L * N * E * (S * (S - 1) // 2)


def test_a_sliding_window_counts_the_pairs_inside_it():
    """Mistral-7B's window of W = 4096 at S = 8192: pairs m(m+1)/2 + (S - m) W with
    m = min(S, W), as enumerated in tests/test_windows.py; causal would be S(S+1)/2."""
    S, W, L, N, E = 8192, 4096, 32, 32, 128
    pairs = W * (W + 1) // 2 + (S - W) * W
    windowed = symflops_counts(MISTRAL_7B, S, "exact")[1]
    causal = symflops_counts({**MISTRAL_7B, "sliding_window": None}, S, "exact")[1]
    assert causal - windowed == 6 * 2 * L * N * E * (S * (S + 1) // 2 - pairs)


def test_the_declaration_names_its_keys_and_values():
    text = imported(LLAMA32_1B).text
    assert "E: \"head width\"   # head_dim" in text
    assert "Z[b,s,v] = Xf[b,s,d] W_E[v,d]" in text          # tied
    assert ': {B: 1, V: 128256, S: 131072, D: 2048, N: 32, G: 8, E: 64, F: 8192, L: 16}' in text
    assert "sin: {shape: [S, E], role: buffer" in text        # rotary tables are buffers
    full = imported(LLAMA32_1B, "full-square").text
    assert "/ sqrt(E)\n" in full and "softmax_t(A[b,g,r,s,t]) where t <= s" in full


def test_the_example_is_named_after_the_checkpoint_directory(tmp_path):
    folder = tmp_path / "Llama-3.2-1B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA32_1B))
    assert import_config(folder / "config.json").example == "Llama-3.2-1B"


def error(config) -> str:
    with pytest.raises(SymflopsError) as exc:
        imported(config)
    return str(exc.value)


def test_no_model_type_is_refused_not_guessed():
    """A config without model_type was once sniffed by its keys, so Pythia-1.4B's
    GPT-NeoX config became a Llama of the wrong size; now it is refused."""
    for config in CHECKPOINTS.values():
        message = error({k: v for k, v in config.items() if k != "model_type"})
        assert "key 'model_type' is missing" in message and "does not guess" in message


@pytest.mark.parametrize("base, extra, fragment", [
    (LLAMA2_7B, {"mystery": {"bits": 4}}, "key 'mystery' is not one"),
    (LLAMA2_7B, {"max_sequence_length": 4096}, "key 'max_sequence_length' is not one"),
    (LLAMA2_7B, {"sliding_window": 4096}, "key 'sliding_window' is not one"),
    (GPT2_SMALL, {"hidden_size": 768}, "key 'hidden_size' is not one"),
    (MISTRAL_7B, {"attention_bias": True}, "key 'attention_bias' is not one"),
    (LLAMA2_7B, {"hidden_act": "gelu_fast"}, "'hidden_act' = \"gelu_fast\" names an activation"),
    (GPT2_SMALL, {"activation_function": "quick_gelu"}, "'activation_function' = \"quick_gelu\""),
    (MIXTRAL_8X7B, {"output_router_logits": True}, "no load-balancing loss"),
    (MIXTRAL_8X7B, {"router_jitter_noise": 0.01}, "key 'router_jitter_noise' is not 0"),
    (MIXTRAL_8X7B, {"num_experts_per_tok": 9}, "exceeds num_local_experts"),
    (GPT2_SMALL, {"scale_attn_weights": False}, "'scale_attn_weights' = false"),
    (GPT2_SMALL, {"add_cross_attention": True}, "'add_cross_attention' = true"),
    (GPT2_SMALL, {"n_head": 7}, "n_embd = 768 is not a multiple of n_head = 7"),
    (LLAMA2_7B, {"architectures": ["LlamaForSequenceClassification"]},
     "symflops counts the causal language model LlamaForCausalLM"),
    (LLAMA2_7B, {"pruned_heads": {"0": [1]}}, "key 'pruned_heads' lists pruned"),
    (LLAMA2_7B, {"is_encoder_decoder": True}, "'is_encoder_decoder' = true"),
    (LLAMA2_7B, {"hidden_size": 10**13}, "key 'hidden_size' = 10000000000000 is beyond 10^12"),
    (LLAMA2_7B, {"hidden_size": "4096"}, "'hidden_size' must be a positive integer"),
    (LLAMA2_7B, {"num_hidden_layers": 0}, "'num_hidden_layers' must be positive"),
    (LLAMA2_7B, {"attention_bias": "yes"}, "'attention_bias' must be true or false"),
    (LLAMA2_7B, {"num_key_value_heads": 5}, "is not a multiple of num_key_value_heads = 5"),
    (QWEN25_05B, {"use_sliding_window": True, "sliding_window": None, "max_window_layers": 0},
     "'sliding_window' is not given"),
    (QWEN3_06B, {"layer_types": ["full_attention"]}, "for each of the 28 layers"),
    ({"model_type": "bert", "hidden_size": 768}, {}, 'model_type "bert" is not a family'),
])
def test_a_key_that_may_change_a_count_is_refused_by_name(base, extra, fragment):
    message = error({**base, **extra})
    assert fragment in message and "config.json" in message


def test_attention_dropout_and_qwen3_biases():
    # a dropout of the probabilities: an op with its keep-mask, no parameter
    text = imported(LLAMA32_DROPOUT).text
    assert "Pd[b,g,r,s,t] = dropout(P[b,g,r,s,t], 0.1) where t <= s" in text
    assert params(LLAMA32_DROPOUT) == params(LLAMA32_1B)
    # Qwen3's attention_bias: q (16 x 128), k and v (8 x 128 each), and o (1024), 28 layers
    assert params(QWEN3_BIAS) - params(QWEN3_06B) == 28 * (16 * 128 + 2 * 8 * 128 + 1024)


def test_keys_that_change_no_count_are_ignored():
    quiet = {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 5e5,
             "pretraining_tp": 2, "torch_dtype": "bfloat16", "id2label": {"0": "a"},
             "_name_or_path": "x", "temperature": 0.7, "attention_dropout": 0.0,
             "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"},
             "quantization_config": {"quant_method": "fp8"}}
    assert params({**LLAMA2_7B, **quiet}) == 6_738_415_616


def test_qwen_windowed_layers_follow_max_window_layers():
    # use_sliding_window with max_window_layers 20 of 24: layers 20..23 are windowed
    text = imported({**QWEN25_05B, "use_sliding_window": True, "max_window_layers": 20,
                     "sliding_window": 4096}).text
    assert "L_full: " in text and "L_sliding: " in text and "s - t < W" in text
    assert "W: 4096, L_full: 20, L_sliding: 4}" in text
    # the two blocks read back (the second's tensors renamed), the same parameters, and
    # the four windowed layers' products count S(S+1)/2 - pairs fewer pairs at S = 8192:
    # pairs = W(W+1)/2 + (S - W) W; 6 products x 2 x N E per pair, N = 14, E = 64
    windowed = {**QWEN25_05B, "use_sliding_window": True, "max_window_layers": 20,
                "sliding_window": 4096}
    S, W = 8192, 4096
    p_w, f_w = symflops_counts(windowed, S, "exact")
    p_c, f_c = symflops_counts(QWEN25_05B, S, "exact")
    assert p_w == p_c == 494_032_768
    assert f_c - f_w == 4 * 6 * 2 * 14 * 64 * (S * (S + 1) // 2 - (W * (W + 1) // 2 + (S - W) * W))


def test_a_layer_count_beyond_any_model_is_refused_in_bounded_time():
    """Families lay their layers out one by one (which are windowed, which dense):
    10**12 layers made Mistral's import run out of memory (exit 70) and Gemma 2's
    and Qwen3-MoE's run for ever. Every family now refuses it by its key."""
    import time

    from test_hf_deepseek import DEEPSEEK_V3
    from test_hf_gemma import GEMMA2_2B
    from test_hf_misc import QWEN3_30B_A3B
    from test_hf_neox import PYTHIA_1_4B

    for config in (MISTRAL_7B, LLAMA2_7B, GEMMA2_2B, QWEN3_30B_A3B, DEEPSEEK_V3, PYTHIA_1_4B,
                   {**GPT2_SMALL, "n_layer": 10**12}):
        start = time.process_time()   # this process's CPU seconds: no other load counts
        message = error({**config, "num_hidden_layers": 10**12} if "n_layer" not in config
                        else config)
        assert "layers is beyond 100,000" in message and time.process_time() - start < 5
