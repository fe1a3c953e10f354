"""symflops import-hf for Llama 4's text model: the published checkpoints against
transformers 5.24 on the meta device (slow: parameters to the integer, and
FlopCounterMode's training FLOPs equal to the integer to the experts as
transformers runs them, every expert on every token, ``--experts executed``), at
two layers with each kind present; the model's own count (each token's k
experts) beside it, the difference by hand; chunked attention counted exactly
against the full square by hand; the published parameter counts; the view of
positions as (chunk, offset) pairs; and the refusals."""

import json

import pytest

from symflops.core.errors import SymflopsError
from symflops.hf.importer import import_data

from hf_oracle import hf_counts, imported, symflops_counts
import forked

# meta-llama/Llama-4-Scout-17B-16E-Instruct config.json, its text_config (model_type
# llama4_text; 16 experts, every layer MoE, every fourth layer NoPE).  attn_temperature_tuning
# is published as 4, which transformers 5.24's strict config refuses (it wants a bool;
# earlier versions read 4 as true): true here, and 4 is refused below as transformers does.
SCOUT = {
    "architectures": ["Llama4ForCausalLM"], "attention_bias": False, "attention_chunk_size": 8192,
    "attention_dropout": 0.0, "attn_scale": 0.1, "attn_temperature_tuning": True,
    "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192,
    "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 262144, "model_type": "llama4_text",
    "moe_layers": list(range(48)), "no_rope_layers": [1, 1, 1, 0] * 12, "num_attention_heads": 40,
    "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
    "num_local_experts": 16, "output_router_logits": False, "pad_token_id": 200018,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    "torch_dtype": "bfloat16", "use_cache": True, "use_qk_norm": True, "vocab_size": 202048}
# meta-llama/Llama-4-Maverick-17B-128E-Instruct's text_config (128 experts, MoE every
# second layer, dense between; no q/k norm; NoPE every fourth layer by default)
MAVERICK = {
    "architectures": ["Llama4ForCausalLM"], "attention_bias": False, "attention_chunk_size": 8192,
    "attention_dropout": 0.0, "attn_scale": 0.1, "attn_temperature_tuning": True,
    "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192,
    "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
    "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
    "output_router_logits": False, "pad_token_id": 200018, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 500000.0, "router_aux_loss_coef": 0.001,
    "router_jitter_noise": 0.0, "torch_dtype": "bfloat16", "use_cache": True, "use_qk_norm": False,
    "vocab_size": 202048}


def counts(config, seq, attention="full-square", experts="model"):
    """(parameters, training matrix FLOPs) of the declaration for ``experts``."""
    return symflops_counts(config, seq, attention, experts=experts)


# two layers: a chunked layer with rotary positions and a NoPE layer, both MoE (Scout);
# a NoPE dense layer and a rotary MoE layer (Maverick, NoPE every second layer here)
SCOUT_2 = {**SCOUT, "num_hidden_layers": 2, "no_rope_layers": [1, 0], "moe_layers": [0, 1]}
MAVERICK_2 = {**MAVERICK, "num_hidden_layers": 2, "no_rope_layer_interval": 2}
ORACLE = {"Llama-4-Scout-17B-16E": SCOUT_2, "Llama-4-Maverick-17B-128E": MAVERICK_2,
          # chunks of 16 at S = 32: the chunk mask bites (two chunks)
          "Scout, chunks of 16": {**SCOUT_2, "attention_chunk_size": 16},
          "Scout, no q/k norm, no temperature tuning, biases": {
              **SCOUT_2, "use_qk_norm": False, "attn_temperature_tuning": False,
              "attention_bias": True}}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORACLE))
def test_executed_experts_equal_transformers(name):
    """transformers 5.24 runs every expert on every token: its count is the
    declaration's with --experts executed, exactly; the parameters are the
    model's either way."""
    config = ORACLE[name]
    params, flops = hf_counts(config, 32)
    assert counts(config, 32, experts="executed") == (params, flops)
    assert counts(config, 32)[0] == params


@pytest.mark.parametrize("config, moe_layers", [(SCOUT_2, 2), (MAVERICK_2, 1)])
def test_executed_minus_routed_is_the_other_experts(config, moe_layers):
    """Every expert on every token against each token's k: (M - k) S more copies
    of an expert's three products (2 D F each) forward, and of their two
    gradients, per MoE layer: 18 D F (M - k) S FLOPs a layer; nothing else
    differs in the matrix products (the router and the shared expert are the
    same; the scores scale the copies elementwise)."""
    seq, d, f = 32, 5120, 8192
    m, k = config["num_local_experts"], config["num_experts_per_tok"]
    routed = counts(config, seq)[1]
    executed = counts(config, seq, experts="executed")[1]
    assert executed - routed == moe_layers * 18 * d * f * (m - k) * seq
    # Scout at two layers: 2 x 18 x 5120 x 8192 x 15 x 32 = 724,775,731,200
    if m == 16:
        assert executed - routed == 724_775_731_200


def test_chunked_attention_exactly():
    """Chunks of C = 16 at S = 32 (Nc = 2): the chunked layer's query sees its own
    chunk up to itself, Nc C (C + 1) / 2 = 272 pairs, the NoPE layer the causal
    528; the full square has 1024 each.  Per pair and head the two products and
    their four gradients are 12 E FLOPs (N = 40 heads of E = 128)."""
    config = {**SCOUT_2, "attention_chunk_size": 16}
    exact = counts(config, 32, "exact")[1]
    full = counts(config, 32, "full-square")[1]
    assert full - exact == 12 * 40 * 128 * ((1024 - 272) + (1024 - 528)) == 76_677_120
    # the chunk view: Nc = S / C chunks, promised whole (refused at evaluation otherwise)
    assert "Nc: {description:" in imported(config, "exact").text
    assert "equals: S / C" in imported(config, "exact").text


def test_a_view_of_positions_as_chunks_whose_count_a_defined_dim_promises(tmp_path):
    """The language piece chunked attention needs: X[C*c+u] views an axis of S
    positions as Nc chunks of C when a dim promises Nc = S / C; the chunked
    scores then count E S (C + 1) FLOPs (Nc C (C + 1) / 2 pairs, 2 E each), and
    a sequence that is not a multiple of C is refused at evaluation."""
    path = tmp_path / "chunk.yaml"
    path.write_text("""name: chunk
dims:
  S: sequence
  C: chunk length
  Nc: {description: chunks, equals: S / C}
  E: width
tensors:
  Q: {shape: [S, E], role: input}
  K: {shape: [S, E], role: input}
  V: {shape: [S, E], role: input}
  W: {shape: [E, E], role: param}
ops:
  - Qv[c,u,e] = Q[C*c+u, e]
  - Kv[c,w,e] = K[C*c+w, e]
  - Vv[c,w,e] = V[C*c+w, e]
  - A[c,u,w] = Qv[c,u,e] Kv[c,w,e] where w <= u
  - P[c,u,w] = softmax_w(A[c,u,w]) where w <= u
  - Oc[c,u,e] = P[c,u,w] Vv[c,w,e] where w <= u
  - O[C*c+u,e] = Oc[c,u,e]
  - Y[s,f] = Q[s,e] W[e,f] + O[s,f]
""")
    ok = forked.run("eval", str(path), "S=64", "C=16", "E=4")
    assert ok.returncode == 0, ok.stderr
    # the scores: 4 x 64 x 17 = 4,352 FLOPs (2 chunks x 136 pairs x 2 x 4)
    assert "A[c,u,w] = Qv[c,u,e] Kv[c,w,e] where w <= u    4,352" in ok.stdout
    bad = forked.run("eval", str(path), "S=24", "C=16", "E=4")
    assert bad.returncode == 2 and "Nc = S/C is 3/2" in bad.stderr


def test_published_parameter_counts():
    """Summed by hand: per layer q, k, v, o (40 heads of 128, 8 key/value heads),
    two norms; an MoE layer the router (D M), M experts of 3 D F and the shared
    expert (3 D F); a dense layer 3 D 16384; the embedding and the head.  Scout's
    text model 107.8B (109B with its vision encoder), Maverick's 400.7B (400B)."""
    d, f = 5120, 8192
    attention = 2 * d * 5120 + 2 * d * 1024 + 2 * d
    moe = lambda m: m * 3 * d * f + d * m + 3 * d * f          # noqa: E731
    scout = 48 * (attention + moe(16)) + 2 * 202048 * d + d
    maverick = 24 * (attention + moe(128)) + 24 * (attention + 3 * d * 16384) \
        + 2 * 202048 * d + d
    assert counts(SCOUT, 32)[0] == scout == 107_769_861_120
    assert counts(MAVERICK, 32)[0] == maverick == 400_711_848_960


def test_layers_and_kinds_as_written():
    scout = imported(SCOUT)
    assert (scout.dims["L_chunked_moe"], scout.dims["L_full_nope_moe"]) == (36, 12)
    assert "tau[s]" in scout.text and "rmsnorm_e(Qr[b,s,g,r,e])" in scout.text
    maverick = imported(MAVERICK)
    # MoE every second layer (1, 3, ...), NoPE every fourth (3, 7, ...): the NoPE layers
    # are all MoE layers
    assert {k: v for k, v in maverick.dims.items() if k.startswith("L_")} == {
        "L_chunked_dense": 24, "L_chunked_moe": 12, "L_full_nope_moe": 12}
    # the model's experts: each token's k, scaled before its expert
    assert "Xw[b,s,i,o,d] = Gt[b,s,i] Xp[b,s,i,o,d]" in scout.text
    executed = import_data(SCOUT, "config.json", "", "full-square", "executed")
    assert "U[b,s,x,j] = Xs[b,s,x,d] W_gate[x,d,j]" in executed.text
    assert "--attention full-square --experts executed -o" in executed.command


def test_plan_reports_the_executed_figure_beside(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SCOUT))
    out = forked.run("plan", "--hf-config", str(tmp_path / "config.json"), "--seq", "8192", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    other = data["declaration"]["other_experts"]
    assert data["declaration"]["experts"] == "model" and other["experts"] == "executed"
    assert other["training_flops_per_token"] > data["flops"]["per_token"]


@pytest.mark.parametrize("config, key", [
    ({**SCOUT, "attn_temperature_tuning": 4}, "attn_temperature_tuning"),
    ({**SCOUT, "moe_layers": [48]}, "moe_layers"),
    ({**SCOUT, "no_rope_layers": [1, 2] * 24}, "no_rope_layers"),
    ({**SCOUT, "attention_chunk_size": None, "layer_types": ["chunked_attention"] * 48},
     "layer_types"),
    ({**SCOUT, "router_jitter_noise": 0.1}, "router_jitter_noise"),
    ({**SCOUT, "output_router_logits": True}, "output_router_logits"),
    ({"model_type": "llama4", "text_config": SCOUT}, "text_config"),
])
def test_refused_naming_the_key(config, key):
    with pytest.raises(SymflopsError, match=key):
        imported(config)


@pytest.mark.slow
def test_plan_refuses_a_length_not_a_multiple_of_the_chunk_and_offers_the_full_square(
        tmp_path, capsys):
    """Counted exactly, the chunked layers need whole chunks; the full square (the chunk
    mask as eager attention applies it) takes any length, and the refusal says so."""
    from symflops.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SCOUT_2, "attention_chunk_size": 16}))
    assert main(["plan", "--hf-config", str(path), "--seq", "40", "--tokens", "1e9"]) == 2
    err = capsys.readouterr().err
    assert "a sequence of 40 tokens is not a whole number of the model's chunks of 16 " \
           "positions (attention_chunk_size)" in err
    assert "a multiple of 16, or with --attention full-square" in err
    assert main(["plan", "--hf-config", str(path), "--seq", "40", "--tokens", "1e9",
                 "--attention", "full-square"]) == 0
