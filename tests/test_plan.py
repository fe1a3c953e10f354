"""The run planner, checked against the seeds and against hand computations.

Expected values are literals from ../shared/seeds (002: the training-cost
cards; 004: "Training FLOPs: 6ND"), from the ZeRO paper (Rajbhandari et al.
2019, Figure 1: Ψ = 7.5B, K = 12, Nd = 64 -> 120 / 31.4 / 16.6 / 1.9 GB), or
computed by hand in the test itself; never from the code under test.
"""

import contextlib
import io
import json
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest

from symflops.cli import run as cli_run
from symflops.core.errors import SymflopsError
from symflops.core.hardware import PRESETS, preset
from symflops.planner.compute import (compute, rate, run_from_phases, run_from_steps,
                                      run_from_tokens, timing)
from symflops.planner.memory import inference, memory
from symflops.planner.plan import make_plan, model_from_declaration, model_from_params
from symflops.planner.records import Formula, Model, TokenFlops
from symflops.count.precision import POLICIES
import forked

MIXED = POLICIES["mixed-adam"]
DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"


# --- seed 002: 7B on 2T tokens ----------------------------------------------------

def test_seed_002_compute_and_time():
    c = compute(model_from_params(7 * 10**9), run_from_tokens(2 * 10**12))
    assert c.model == 84 * 10**21                       # 8.4e22, exactly
    t = timing(c, rate(1024, sustained=4 * 10**14))
    assert t.accelerator_seconds == 21 * 10**7          # 2.1e8 GPU-seconds
    assert round(t.accelerator_hours) == 58333          # "≈ 58,000 GPU-hours"
    assert round(float(t.hours), 2) == 56.97            # "≈ 57 hours on 1,024 GPUs"


def test_seed_002_sixteen_bytes_per_param():
    m = memory(model_from_params(7 * 10**9), MIXED)
    # the seed's table: bf16 weights 2, bf16 gradients 2, fp32 master 4, Adam 8 -> 16
    assert (m.weights, m.grads, m.master, m.optimizer) == (14 * 10**9, 14 * 10**9,
                                                           28 * 10**9, 56 * 10**9)
    assert m.total == 112 * 10**9                       # "about 112 GB"
    assert m.activations is None


def test_seed_002_exercise():
    model = model_from_params(10**9)
    assert compute(model, run_from_tokens(10**11)).model == 6 * 10**20
    assert memory(model, MIXED).total == 16 * 10**9


# --- seed 004: 70.6B on 15T tokens, 16,384 GPUs ------------------------------------

def test_seed_004_compute():
    c = compute(model_from_params(706 * 10**8), run_from_tokens(15 * 10**12))
    assert c.model == 6354 * 10**21                     # 6.354e24


def test_seed_004_time_at_40_and_20_percent_mfu():
    c = compute(model_from_params(706 * 10**8), run_from_tokens(15 * 10**12))
    r = rate(16384, peak=989 * 10**12, mfu=Fraction(40, 100))
    assert round(float(r.delivered) / 1e18, 2) == 6.48  # 6.48e18 FLOP/s
    t = timing(c, r)
    assert abs(float(t.seconds) - 980_000) < 1_000      # "≈ 980,000 s"
    assert round(float(t.days), 1) == 11.3              # "≈ 11.3 days"
    slow = timing(c, rate(16384, peak=989 * 10**12, mfu=Fraction(20, 100)))
    assert round(float(slow.days), 1) == 22.7           # "about 22.7 days"
    assert slow.seconds == 2 * t.seconds


def test_seed_004_full_recomputation_executes_8N():
    n = 706 * 10**8
    f = model_from_params(n, "full").flops_per_token(None)
    assert (f.model, f.executed) == (6 * n, 8 * n)
    c = compute(model_from_params(n, "full"), run_from_tokens(15 * 10**12))
    assert c.executed == 8 * n * 15 * 10**12
    # time still counts model FLOPs (MFU's definition); HFU counts the executed 8N
    t = timing(c, rate(16384, peak=989 * 10**12, mfu=Fraction(2, 5)))
    assert t.hfu == Fraction(2, 5) * Fraction(8, 6)


def test_bare_count_says_attention_is_not_counted():
    for recompute, executed in (("none", 6), ("full", 8), ("selective", 6)):
        m = model_from_params(1000, recompute)
        f = m.flops_per_token(None)
        assert (f.model, f.executed, f.attention, f.inference) == (6000, executed * 1000, 0, 2000)
        assert "attention not counted" in f.formulas["model"].note
        assert not m.counts_attention and m.kv_cache_bytes_per_token is None


# --- ZeRO, the paper's Figure 1 -------------------------------------------------

@pytest.mark.parametrize("stage, expected_bytes, paper_gb", [
    # by hand, bytes per parameter (2 weights + 2 gradients + K = 12 optimizer and master):
    (0, (2 + 2 + 12) * 75 * 10**8, 120),
    (1, (2 + 2) * 75 * 10**8 + Fraction(12 * 75 * 10**8, 64), 31.4),
    (2, 2 * 75 * 10**8 + Fraction((2 + 12) * 75 * 10**8, 64), 16.6),
    (3, Fraction((2 + 2 + 12) * 75 * 10**8, 64), 1.9),
])
def test_zero_stages_match_the_paper(stage, expected_bytes, paper_gb):
    m = memory(model_from_params(75 * 10**8), MIXED, zero=stage, dp=64)
    assert m.total == expected_bytes
    assert round(float(m.total) / 1e9, 1) == paper_gb


def test_zero_stage_1_components():
    m = memory(model_from_params(75 * 10**8), MIXED, zero=1, dp=64)
    assert (m.weights, m.grads) == (15 * 10**9, 15 * 10**9)
    assert m.optimizer == Fraction(8 * 75 * 10**8, 64) and m.master == Fraction(4 * 75 * 10**8, 64)
    assert float(m.total) == 31_406_250_000.0
    assert memory(model_from_params(75 * 10**8), MIXED, zero=3, dp=64).total == 1_875_000_000


def test_fits_against_the_accelerator():
    a100 = preset("a100")
    assert not memory(model_from_params(75 * 10**8), MIXED, capacity=a100.memory_bytes).fits
    assert memory(model_from_params(75 * 10**8), MIXED, 1, 64, capacity=a100.memory_bytes).fits


# --- a Model with an attention term, a KV cache and activations (built by hand) ----

L, W = 32, 4096                 # Llama-2-7B: 32 layers, width 4096
KV = 2 * L * W * 2              # K and V, every layer, bf16: 524,288 bytes per token


def hand_model(n=7 * 10**9, active=None):
    def per_token(t):
        attention = 6 * L * t * W               # causal pair count, forward and backward
        return TokenFlops(6 * n + attention, 8 * n + attention, attention, 2 * n,
                          {"model": Formula("6 N + 6 L T W")})
    return Model("hand", n, active or n, n, per_token,
                 lambda b, t: b * t * W * L * 10, KV,
                 {"kv_cache_bytes_per_token": Formula("2 L W × 2 B")}, counts_attention=True)


def test_kv_cache_llama2_7b_by_hand():
    assert KV == 524_288
    inf = inference(hand_model(), POLICIES["bf16-adam"], context=4096, batch=1)
    assert inf.kv_per_sequence == 2 * 2**30              # 2 GiB per sequence at 4096
    assert inf.kv_batch == 2 * 2**30


def test_decode_rate_by_hand():
    bw = 335 * 10**10                                   # H100 SXM, 3.35 TB/s
    weights = 2 * 7 * 10**9                             # bf16
    one = inference(hand_model(), POLICIES["bf16-adam"], 4096, 1, bw)
    assert one.bytes_per_token == weights + 2**31       # 16,147,483,648
    assert one.tokens_per_s == Fraction(bw, weights + 2**31)
    assert round(float(one.tokens_per_s), 1) == 207.5
    eight = inference(hand_model(), POLICIES["bf16-adam"], 4096, 8, bw)
    assert eight.step_bytes == weights + 8 * 2**31
    assert eight.bytes_per_token == Fraction(weights + 8 * 2**31, 8)   # 3,897,483,648
    assert round(float(eight.tokens_per_s), 1) == 859.5                # 8 × bw / 31,179,869,184
    assert eight.memory == weights + 8 * 2**31


def test_moe_reads_active_weights_and_stores_all():
    inf = inference(hand_model(n=10**9, active=3 * 10**8), POLICIES["bf16-adam"], 1, 1)
    assert (inf.weights_bytes, inf.weights_read) == (2 * 10**9, 6 * 10**8)


def test_phases_sum_their_own_flops_per_token():
    n = 7 * 10**9
    run = run_from_phases([(12 * 10**12, 4096), (3 * 10**11, 131072)])
    c = compute(hand_model(n), run)
    by_hand = (12 * 10**12 * (6 * n + 6 * L * 4096 * W) +
               3 * 10**11 * (6 * n + 6 * L * 131072 * W))
    assert c.model == by_hand
    assert c.attention == 12 * 10**12 * 6 * L * 4096 * W + 3 * 10**11 * 6 * L * 131072 * W
    assert run.tokens == 123 * 10**11


def test_steps_batch_seq():
    run = run_from_steps(1000, 512, 4096)
    assert run.tokens == 1000 * 512 * 4096 and run.longest == 4096


def test_plan_takes_activations_at_the_longest_phase():
    p = make_plan(hand_model(), MIXED, run=run_from_phases([(10**9, 2048), (10**8, 8192)]),
                  micro_batch=2)
    assert p.seq_len == 8192 and p.memory.activations == 2 * 8192 * W * L * 10


def test_attention_model_needs_a_sequence_length():
    with pytest.raises(SymflopsError, match="sequence length"):
        compute(hand_model(), run_from_tokens(10**12))


# --- input checks ---------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"peak": 10**15, "mfu": 0}, "must lie in \\(0, 1\\]"),
    ({"peak": 10**15, "mfu": Fraction(3, 2)}, "must lie in \\(0, 1\\]"),
    ({"peak": 10**15, "mfu": Fraction(1, 2), "sustained": 10**14}, "both given"),
    ({"mfu": Fraction(1, 2)}, "needs a peak"),
    ({"peak": 10**14, "sustained": 10**15}, "exceeds the peak"),
])
def test_rate_errors(kwargs, message):
    with pytest.raises(SymflopsError, match=message):
        rate(8, **kwargs)


def test_other_errors():
    with pytest.raises(SymflopsError, match="positive whole number"):
        run_from_tokens(0)
    with pytest.raises(SymflopsError, match="positive whole number"):
        run_from_tokens(Fraction(1, 2))
    with pytest.raises(SymflopsError, match="unknown accelerator preset 'tpu'.*h100-sxm"):
        preset("tpu")
    with pytest.raises(SymflopsError, match="no such file"):
        model_from_declaration("model.yaml", {"L": 32}, "none", MIXED)
    with pytest.raises(SymflopsError, match="exceeds the 8 accelerator"):
        make_plan(model_from_params(10**9), MIXED, throughput=rate(8), dp=16)


def test_presets_are_dense_figures():
    # The datasheets' dense bf16 peaks, capacities and HBM bandwidths (see the sources in
    # symflops/core/hardware.py); B200 from DGX B200's 1,440 GB and 64 TB/s for 8 GPUs.
    assert {name: (a.peak_flops, a.memory_bytes, a.bandwidth) for name, a in PRESETS.items()} == {
        "a100-80gb-sxm": (312 * 10**12, 80 * 10**9, 2039 * 10**9),
        "h100-sxm": (989 * 10**12, 80 * 10**9, 3350 * 10**9),
        "h200": (989 * 10**12, 141 * 10**9, 4800 * 10**9),
        "b200": (2250 * 10**12, 1440 * 10**9 // 8, 64 * 10**12 // 8),
        "mi300x": (Fraction(13074, 10) * 10**12, 192 * 10**9, 5300 * 10**9),
        "tpu-v5e": (197 * 10**12, 16 * 10**9, 819 * 10**9),
        "tpu-v5p": (459 * 10**12, 95 * 10**9, 2765 * 10**9),
    }
    assert all("dense" in a.source for a in PRESETS.values())
    assert all(a.peak("bf16") == a.peak_flops for a in PRESETS.values())


def test_preset_ratios_are_the_scaling_book_s():
    # How to Scale Your Model (jax-ml/scaling-book at 0819a7d): a bf16 matmul is compute-bound
    # on TPU v5e above B = 1.97e14 / 8.2e11 = 240; on H100 above 9.89e14 / 3.35e12 = 295;
    # data parallelism on TPU v5p above 4.59e14 / 1.8e11 = 2550 tokens per chip; within an
    # H100 node above 990e12 / 450e9 = 2200.
    assert round(preset("v5e").peak("bf16") / preset("v5e").bandwidth) == 241  # 819 GB/s: 240.5
    assert int(preset("h100").peak("bf16") / preset("h100").bandwidth) == 295
    assert int(preset("v5p").peak("bf16") / preset("v5p").scale_up.ring) == 2550
    assert round(preset("h100").peak("bf16") / preset("h100").scale_up.ring) == 2198  # 989/450
    assert preset("v5e").scale_up.ring == 9 * 10**10  # the AllGather example's 9e10 B/s
    with pytest.raises(SymflopsError, match="no fp8 peak.*bf16, int8"):
        preset("v5e").peak("fp8")


# --- the command --------------------------------------------------------------------

SEED_002 = ["plan", "--params", "7e9", "--tokens", "2e12", "-n", "1024", "--sustained", "4e14",
            "--precision", "mixed-adam"]


def plan_json(capsys, *args):
    assert cli_run([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keys_and_numbers(capsys):
    j = plan_json(capsys, *SEED_002)
    assert j["params"] == {"total": 7 * 10**9, "active": 7 * 10**9, "trainable": 7 * 10**9}
    assert j["flops"]["per_token"] == 42 * 10**9
    assert j["flops"]["model"] == 84 * 10**21 and isinstance(j["flops"]["model"], int)
    assert j["flops"]["executed"] == 84 * 10**21
    assert j["time"]["seconds"] == 205078.125              # 2.1e8 / 1024, by hand
    assert round(j["time"]["accelerator_hours"]) == 58333
    assert round(j["time"]["days"], 3) == round(205078.125 / 86400, 3)
    assert j["memory"]["weights"] == 14 * 10**9 and j["memory"]["grads"] == 14 * 10**9
    assert j["memory"]["optimizer"] == 56 * 10**9 and j["memory"]["master"] == 28 * 10**9
    assert j["memory"]["total"] == 112 * 10**9
    assert j["memory"]["activations"] is None
    assert j["formulas"]["flops.model"] == "C = 6 N D = 6 × 7e9 × 2e12"
    assert "attention not counted" in j["notes"]["flops.per_token"]


def test_json_seed_004_with_preset_and_zero(capsys):
    j = plan_json(capsys, "plan", "--params", "70.6e9", "--tokens", "15e12", "-n", "16384",
                  "--accelerator", "h100-sxm", "--mfu", "40%", "--recompute", "full",
                  "--zero", "3", "--precision", "mixed-adam")
    assert j["flops"]["model"] == 6354 * 10**21
    assert j["flops"]["executed"] == 8 * 706 * 10**8 * 15 * 10**12
    assert round(j["time"]["days"], 1) == 11.3
    assert j["memory"]["dp"] == 16384
    assert j["memory"]["total"] == 16 * 706 * 10**8 / 16384   # every state sharded
    assert j["memory"]["fits"] is True and j["memory"]["capacity"] == 80 * 10**9


def test_json_inference(capsys):
    j = plan_json(capsys, "plan", "--params", "7e9", "--accelerator", "h100",
                  "--decode-batch", "4", "--context", "4096")
    inf = j["inference"]
    assert inf["kv_cache_bytes"] is None                       # not known for a bare count
    assert inf["bytes_per_token"] == 14 * 10**9 / 4            # weights only, a lower bound
    assert inf["decode_tokens_per_s"] == pytest.approx(4 * 3.35e12 / 14e9)
    assert "flops" in j and "time" not in j


def test_table_shows_formulas(capsys):
    assert cli_run(SEED_002) == 0
    out = capsys.readouterr().out
    assert "C = 6 N D = 6 × 7e9 × 2e12 = 8.4e22 FLOPs" in out
    assert "t = C / R = 8.4e22 / 4.096e17 = 205,078 s = 56.97 h" in out
    assert "58,333 accelerator-hours" in out and "2.1e8 accelerator-seconds" in out
    assert "1.12e11 B (112 GB" in out
    assert "activations  not known for a bare parameter count" in out
    assert "time = C_model / (accelerators × peak × MFU)" in out


def test_markdown(capsys):
    assert cli_run([*SEED_002, "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| section | quantity | value | unit | formula | note |" in out
    assert "| compute | model FLOPs | 8.4e+22 | FLOPs | C = 6 N D = 6 × 7e9 × 2e12 |" in out
    assert "| memory per accelerator | total | 112000000000 | B |" in out


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.png"
    assert cli_run([*SEED_002, "--accelerator", "h100", "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]    # no temporary left behind


def test_plot_of_a_model_with_attention(tmp_path):
    pytest.importorskip("matplotlib")
    from symflops.commands.plan import write_plot
    from symflops.planner.plot import _crossover
    p = make_plan(hand_model(), MIXED, run=run_from_tokens(10**12, 4096),
                  accelerator=preset("h100"))
    # attention (6 L T W) overtakes 6N where 6 × 32 × T × 4096 >= 6 × 7e9:
    # T >= 7e9 / 131,072 = 53,405.76..., so the first whole length is 53,406
    assert _crossover(p, 4096, 2**17) == 53406
    write_plot(p, str(tmp_path / "attn.png"))
    assert (tmp_path / "attn.png").read_bytes()[:4] == b"\x89PNG"


def cli(*args):
    return forked.run("plan", *args)


def plan(*args):
    """``symflops plan`` run in this process through :func:`symflops.cli.main`,
    for the tests of the figures a config gives (not of the process: the bad
    input above runs whole processes): the imports are paid once and equal
    configs share SymPy's cache."""
    from symflops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *map(str, args)])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


@pytest.mark.parametrize("args, message", [
    (["--params", "7e9", "--tokens", "2e12", "--peak", "1e15", "--mfu", "1.5"], "(0, 1]"),
    (["--params", "7e9", "--accelerator", "h100", "--mfu", "0.4", "--sustained", "4e14"],
     "both given"),
    (["--tokens", "2e12"], "no model given"),
    (["--params", "7e9", "--accelerator", "v100"], "unknown accelerator preset 'v100'"),
    (["--params", "7e9", "--tokens", "0"], "--tokens must be a positive whole number"),
    (["--params", "7e9", "--tokens=-2e12"], "--tokens must be a positive whole number"),
    (["--params", "__import__('os')"], "--params:"),
    (["--params", "7e9", "--phase", "1e12"], "expected TOKENS@SEQ"),
    (["--params", "7e9", "--phase", "1e12@4096", "--tokens", "1e12"], "--phase and --tokens"),
    (["--params", "7e9", "--steps", "10"], "--batch, --seq missing"),
    (["--params", "7e9", "--peak", "1e15"], "--peak given without --mfu"),
    (["--params", "7e9", "-n", "8", "--dp", "16"], "exceeds the 8 accelerator"),
    (["--params", "7e9", "--plot", "plan.pdf"], "the plot is a PNG image"),
    (["derivations/activations.yaml", "B=1"], "declares no 'tokens:'"),
    (["derivations/ffn.yaml", "B=1"], "needs a dimension 'S' (sequence length)"),
    (["--params", "7e9", "--hf-config", "x.json"], "several models given"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_hf_config_gpt2_small_is_planned_from_its_imported_declaration(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "vocab_size": 50257, "n_positions": 1024}))
    result = plan("--hf-config", str(path), "--tokens", "1e9", "--seq", "1024", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["params"]["total"] == 124_439_808  # GPT-2 small, published
    # dense N = 12 (4 x 768^2 + 2 x 768 x 3072) + 50257 x 768 (tied unembedding), by hand;
    # attention 6 L h (S + 1) per token, causal
    n = 12 * (4 * 768 ** 2 + 2 * 768 * 3072) + 50257 * 768
    assert out["flops"]["per_token"] == 6 * n + 6 * 12 * 768 * 1025
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768}))
    result = cli("--hf-config", str(bad))
    assert result.returncode == 2 and "is missing (required for a gpt2 config)" in result.stderr


def test_hf_config_mixtral_counts_every_expert_and_two_active(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
        "max_position_embeddings": 32768}))
    result = plan("--hf-config", str(path), "--tokens", "1e9", "--seq", "4096", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["params"]["total"] == 46_702_792_704  # Mixtral-8x7B's published count
    assert abs(out["params"]["active"] - 12.9e9) < 0.05e9  # "12.9B active parameters"


def test_hf_mixtral_decode_bytes_are_derive_s_bytes_per_decoded_token(tmp_path):
    """Issue 14 item 4: plan and derive compute decoding bytes once. By hand, bf16:
    a token reads, per layer, attention 2 D N E + 2 D G E, the router D M, its k = 2 of
    M = 8 experts 3 D F each and two gains 2 D; then the final gain D, the unembedding
    D V and one row D of the embedding table; plus K and V of 32 layers x 8 x 128 at
    4096 positions, 2 bytes each."""
    L, D, F, M, k, V, N, G, E, T = 32, 4096, 14336, 8, 2, 32000, 32, 8, 128, 4096
    read = L * (2 * D * N * E + 2 * D * G * E + D * M + k * 3 * D * F + 2 * D) + D + D * V + D
    cache = 2 * L * G * E * T * 2
    assert 2 * read + cache == 26_034_585_600    # before the fix: 26,296,721,408 (plan),
    path = tmp_path / "config.json"              # 93,942,456,320 (derive)
    path.write_text(json.dumps({
        "model_type": "mixtral", "hidden_size": D, "num_hidden_layers": L,
        "num_attention_heads": N, "num_key_value_heads": G, "intermediate_size": F,
        "vocab_size": V, "num_local_experts": M, "num_experts_per_tok": k,
        "max_position_embeddings": 32768}))
    result = plan("--hf-config", str(path), "--seq", str(T), "--decode-batch", "1", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)["inference"]
    assert out["weights_bytes_read"] == 2 * read
    assert out["bytes_per_token"] == 2 * read + cache
    derived = forked.run("eval", str(DERIVATIONS / "moe.yaml"), f"L={L}", f"D={D}", f"F={F}", f"M={M}", f"k={k}", f"V={V}", f"N={N}", f"G={G}", f"E={E}", "c=1", "B=1", f"S={T}", "--json")
    assert derived.returncode == 0, derived.stderr
    assert json.loads(derived.stdout)["inference"]["bytes_per_decoded_token"] == 2 * read + cache


# --- issue 14 item 8: Hugging Face keys honoured exactly, or refused -----------------

LLAMA2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
             "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "vocab_size": 32000}


def plan_config(tmp_path, config, *args):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return plan("--hf-config", str(path), *args)


def test_llama_attention_and_mlp_biases_are_counted(tmp_path):
    # transformers' Llama: attention_bias puts biases on q, k, v (N E, G E, G E = 4096 each
    # here) and o (D = 4096); mlp_bias on gate and up (F = 11008 each) and down (D)
    published = 6_738_415_616
    attention = 32 * (4096 + 4096 + 4096 + 4096)
    mlp = 32 * (11008 + 11008 + 4096)
    assert attention == 524_288
    for extra, added in (({}, 0), ({"attention_bias": True}, attention),
                         ({"mlp_bias": True}, mlp),
                         ({"attention_bias": True, "mlp_bias": True}, attention + mlp)):
        result = plan_config(tmp_path, {**LLAMA2_7B, **extra}, "--seq", "4096", "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["params"]["total"] == published + added
        # a bias add is elementwise work: the matmul FLOPs per token do not change
        assert out["flops"]["per_token"] == json.loads(plan_config(
            tmp_path, LLAMA2_7B, "--seq", "4096", "--json").stdout)["flops"]["per_token"]


MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
              "max_position_embeddings": 32768, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
              "vocab_size": 32000}


def test_mistral_sliding_window_is_counted_within_the_window(tmp_path):
    """Mistral-7B attends to the last W = 4096 positions: at T = 8192 a token sees
    on average (W(W+1)/2 + (T - W) W) / T positions, not (T + 1)/2; attention per
    token is 6 L N E (that average) x 2 (two products), by hand."""
    L, N, E, W, T = 32, 32, 128, 4096, 8192
    pairs = W * (W + 1) // 2 + (T - W) * W
    for extra, seen in (({}, pairs), ({"sliding_window": None}, T * (T + 1) // 2)):
        result = plan_config(tmp_path, {**MISTRAL_7B, **extra}, "--seq", str(T), "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["flops"]["attention_per_token"] == 6 * L * N * E * 2 * seen // T
        assert "Traceback" not in result.stderr


GPT2_SMALL = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
              "vocab_size": 50257, "n_positions": 1024}


def test_gpt2_embedding_dropout_keeps_one_mask_byte_per_element(tmp_path):
    """GPT-2 drops out the sum of its token and position embeddings (embd_pdrop, 0.1 by
    default): a keep-mask of B S D elements at 1 byte, 1 x 1024 x 768 bytes for one
    sequence of 1024 tokens, which the transformer declaration alone leaves out."""
    def activations(config):
        result = plan_config(tmp_path, config, "--seq", "1024", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["memory"]["activations"]
    assert activations(GPT2_SMALL) - activations({**GPT2_SMALL, "embd_pdrop": 0.0}) == 786_432


def test_activation_functions_are_the_config_s():
    """GPT-2's gelu_new is the tanh approximation, 14 operations per element by the
    README's count (the exact erf form: 8); Llama's hidden_act gelu makes a GeGLU."""
    from symflops.count.cost import costs
    from symflops.count.summary import summary
    from symflops.derive.backward import derive
    from symflops.hf.importer import import_data
    from symflops.planner.model import imported_layer

    layer = imported_layer(import_data(GPT2_SMALL))
    d = derive(layer)
    ops = {f.output: f for f in summary(d, costs(d)).forward}
    assert ops["M"].op == "M[b,s,j] = gelu_tanh(H[b,s,j])"
    assert str(ops["M"].flops_elementwise) == "14*B*F*S"
    layer = imported_layer(import_data({**LLAMA2_7B, "hidden_act": "gelu"}))
    assert any("gelu(U[b,s,j])" in op.statement() for op in layer.ops)
