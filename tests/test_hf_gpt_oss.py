"""symflops import-hf for gpt-oss: the published checkpoint against transformers 5.24
on the meta device (slow: parameters and FlopCounterMode's training FLOPs, equal to
the integer, at two layers, one sliding-window and one full, every other size as
published), how transformers runs the experts (eager, batched_mm, grouped_mm) on a
small model with weights, the published parameter count summed by hand, the sinks
and the clamped SwiGLU as written, and the refusals."""

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, causal_surplus, hf_counts, imported, symflops_counts

# openai/gpt-oss-20b config.json
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
    "vocab_size": 201088}

# what the oracle builds: transformers would quantize the experts (mxfp4) on loading a
# checkpoint; from a config the model is the same with or without quantization_config
ORACLE = {k: v for k, v in GPT_OSS_20B.items() if k != "quantization_config"}


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    at_layers(ORACLE),
    at_layers(ORACLE, attention_bias=False, swiglu_limit=3.5, swiglu_alpha=2.0,
              attention_dropout=0.1, num_key_value_heads=64, tie_word_embeddings=True),
], ids=["gpt-oss-20b", "no attention bias, other clamp, dropout, tied"])
def test_counts_equal_transformers(config):
    assert symflops_counts(config, 32) == hf_counts(config, 32)


@pytest.mark.slow
def test_how_transformers_runs_the_experts():
    """On a small model with weights (CPU, random routing): eager mode (the experts'
    own loop over the experts a batch hits, each over its tokens) and batched_mm
    both run each token's k pairs once, FlopCounterMode's count equal to
    symflops's; transformers 5.24's default, grouped_mm, is not counted by
    FlopCounterMode at all: exactly the experts' products are missing (k B S pairs,
    three products of 2 D F... here gate_up 2 D 2F and down 2 F D, forward and the
    two gradients)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    config = dict(hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  num_local_experts=4, num_experts_per_tok=2, vocab_size=128,
                  sliding_window=4, max_position_embeddings=64)
    seq = 16

    def counted(implementation):
        cfg = transformers.AutoConfig.for_model("gpt_oss", **config)
        torch.manual_seed(0)
        extra = {} if implementation is None else {"experts_implementation": implementation}
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                              **extra)
        model.train()
        ids = torch.randint(0, 128, (1, seq))
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids, labels=ids, use_cache=True).loss.backward()
        return model.config._experts_implementation, counter.get_total_flops()

    ours = symflops_counts({**config, "model_type": "gpt_oss"}, seq)[1]
    assert counted("eager") == ("eager", ours)
    assert counted("batched_mm") == ("batched_mm", ours)
    default, flops = counted(None)
    # per layer k S = 32 pairs: gate_up 2 x 64 x 64 and down 2 x 32 x 64 per pair, times
    # three (forward, dX, dW); two layers
    experts = 2 * 3 * 32 * (2 * 64 * 64 + 2 * 32 * 64)
    assert default == "grouped_mm" and ours - flops == experts == 2_359_296


def test_published_parameter_count():
    """gpt-oss-20b (20.9B): per layer q, k, v, o with biases (64 heads of 64, 8
    key/value heads), the sinks (64), the router with its bias, 32 experts with
    biases (gate_up 2880 x 5760 + 5760, down 2880 x 2880 + 2880), two norms; the
    embedding and the head; the final norm."""
    d, e = 2880, 64
    attention = (d * 4096 + 4096) + 2 * (d * 512 + 512) + (4096 * d + d) + 64
    experts = 32 * (d * 2 * 2880 + 2 * 2880 + 2880 * d + d) + (d * 32 + 32)
    layer = attention + experts + 2 * d
    assert symflops_counts(GPT_OSS_20B)[0] == 24 * layer + 2 * 201088 * d + d \
        == 20_914_757_184


def test_sinks_and_the_clamped_swiglu_as_written():
    text = imported(GPT_OSS_20B).text
    for fragment in ("Ex[b,g,r,s,t] = exp(A[b,g,r,s,t]) where t <= s, s - t < W",
                     "Sd[b,g,r,s] = Sk[b,g,r,s] + Es[g,r]", "snk: {shape: [G, R]",
                     "Ul[b,s,i,o,j] = 7.0 - U[b,s,i,o,j]", "Ua[b,s,i,o,j] = 1.702 Uc",
                     "Gt[b,s,i] = softmax_i(Gl[b,s,i])",
                     "U[b,s,i,o,j] = Xp[b,s,i,o,d] W_gate[ex[b,s,i],d,j] + b_gate[ex[b,s,i],j]"):
        assert fragment in text, fragment


def test_exact_counts_the_pairs_a_query_sees():
    """The sinks add no matrix product: exact and full square differ by the
    triangle (full layer) and the pairs outside the window (sliding layer)."""
    seq = 32
    config = at_layers(ORACLE, sliding_window=8)
    full = symflops_counts(config, seq, "full-square")[1]
    exact = symflops_counts(config, seq, "exact")[1]
    assert full - exact == causal_surplus(seq, 64, 64, 8) + causal_surplus(seq, 64, 64)


@pytest.mark.parametrize("config, key", [
    ({**GPT_OSS_20B, "experts_per_token": 2}, "experts_per_token"),
    ({**GPT_OSS_20B, "hidden_act": "gelu"}, "hidden_act"),
    ({**GPT_OSS_20B, "swiglu_limit": 0}, "swiglu_limit"),
    ({**GPT_OSS_20B, "sliding_window": None}, "sliding_window"),
    ({**GPT_OSS_20B, "output_router_logits": True}, "output_router_logits"),
    ({**GPT_OSS_20B, "num_experts": 16}, "num_experts"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)
