"""``plan --hf-config`` on many devices: Llama-2-7B, Mixtral-8x7B and DeepSeek-V3 with
tensor, pipeline, data and sequence parallelism and ZeRO-1.

The configs are the published ones (tests/test_hf_import.py, tests/test_hf_deepseek.py).
Each device's weights are counted here by hand from the config: a stage's layers
(1F1B lays the layers out in order, the first L mod p stages one more), each
tensor divided by t where Megatron splits it (heads, MLP and expert hidden widths,
the vocabulary) and whole otherwise (norm gains, MLA's latent projections, the
router); bf16 weights and gradients (ZeRO-1 keeps gradients whole), fp32 Adam m, v
and master weights over dp.  The work is checked by conservation: the devices of a
step together do each token's model FLOPs once (nothing is computed twice under
sequence parallelism).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from symflops.cli import run as cli_run

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_deepseek import DEEPSEEK_V3  # noqa: E402
from test_hf_import import LLAMA2_7B, MIXTRAL_8X7B  # noqa: E402


def plan(capsys, tmp_path, config, *args):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert cli_run(["plan", "--hf-config", str(path), "--seq", "4096", "--precision",
                    "mixed-adam", "--accelerator", "h100", "--mfu", "0.4",
                    *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def check_states(devices, weights, dp):
    """bf16 weights and gradients, Adam's two fp32 states and fp32 master over dp (ZeRO-1)."""
    m = devices["memory"]
    assert m["weights"] == 2 * weights
    assert m["grads"] == 2 * weights
    assert m["optimizer"] == 8 * weights / dp
    assert m["master"] == 4 * weights / dp


def test_llama2_7b(capsys, tmp_path):
    data = plan(capsys, tmp_path, LLAMA2_7B, "--tp", 8, "--pp", 4, "--dp", 4, "--zero", 1,
                "--sp", "--micro-batches", 16)
    d = data["devices"]
    assert d["devices"] == 128 and d["batch"] == 4 * 16
    D, F, V, t = 4096, 11008, 32000, 8
    layer = (4 * D * D + 3 * D * F) // t + 2 * D   # q, k, v, o and the SwiGLU split; 2 norms
    first = 8 * layer + V * D // t                 # 32 layers / 4 stages, the embedding
    check_states(d, first, 4)
    assert data["memory"]["weights"] == 2 * first  # the plan's memory rows are the device's
    stages = {s["name"]: s for s in d["report"]["stages"]}
    last = 8 * layer + D + D * V // t               # the final norm and the head
    assert stages["last stage"]["weights"] == 2 * last
    # conservation: per token, the 4 stages x 8 tensor-parallel devices do 6N + attention
    fb = {k: s["flops_forward"] + s["flops_backward"] for k, s in stages.items()}
    per_token = 8 * (3 * fb["first stage"] + fb["last stage"]) / 4096
    assert per_token == pytest.approx(data["flops"]["per_token"], rel=1e-12)
    assert d["report"]["pipeline"]["of_ideal"] == 3 / 16
    assert d["memory"]["fits"] is True


def test_mixtral_8x7b(capsys, tmp_path):
    data = plan(capsys, tmp_path, MIXTRAL_8X7B, "--tp", 8, "--pp", 4, "--dp", 8, "--zero", 1,
                "--sp", "--micro-batches", 8)
    d = data["devices"]
    D, F, V, M, G, E, t = 4096, 14336, 32000, 8, 8, 128, 8
    attention = (2 * D * D + 2 * D * G * E) // t     # q and o; k and v over the 8 kv heads
    layer = attention + 3 * M * D * F // t + D * M + 2 * D   # experts' F split; router whole
    check_states(d, 8 * layer + V * D // t, 8)
    assert "G (heads)" in d["report"]["strategies"][0]


@pytest.mark.slow
def test_deepseek_v3(capsys, tmp_path):
    data = plan(capsys, tmp_path, DEEPSEEK_V3, "--tp", 8, "--pp", 16, "--dp", 8, "--zero", 1,
                "--sp", "--micro-batches", 32)
    d = data["devices"]
    D, N, Q, K, En, Er, E, V, t = 7168, 128, 1536, 512, 128, 32, 128, 129280, 8
    F, Fe, Fs, M = 18432, 2048, 2048, 256
    latent = D * Q + Q + D * K + 2 * D * Er + K + 2 * D   # W_dq, g_q, W_dkv, W_kr1/2, g_kv, norms
    heads = (Q * N * En + 2 * Q * N * Er + K * N * En + K * N * E + N * E * D) // t
    dense = latent + heads + 3 * D * F // t
    moe = latent + heads + D * M + 3 * M * D * Fe // t + 3 * D * Fs // t
    # 61 layers on 16 stages: the first 13 stages hold 4, the first the 3 dense and a MoE one
    check_states(d, 3 * dense + moe + V * D // t, 8)
    stages = {s["name"]: s for s in d["report"]["stages"]}
    assert stages["last stage"]["weights"] == 2 * (3 * moe + D + D * V // t)
