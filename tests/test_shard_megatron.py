"""Megatron's strategies derived from the GPT block declaration, against the papers.

* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", activation bytes per layer (s sequence, b micro-batch, h
  hidden, a heads, t tensor-parallel size; 2-byte activations, 1-byte dropout
  masks): sbh(34 + 5as/h) without parallelism; sbh(10 + 24/t + 5as/(ht)) with
  tensor parallelism; sbh/t (34 + 5as/h) with sequence parallelism too; sbh 34/t
  with selective recomputation (the scores, softmax and its dropout) as well.
  The engine derives them from derivations/decoder_block.yaml (a pre-norm GPT-2
  block with dropout) under the presets --tp t [--sp] [--recompute selective],
  with h = D = N E, a = N, F = 4h.  Where it differs, it is one term: the
  LayerNorms' per-row reciprocal standard deviations, 2 bytes a row and norm
  (4sb; 4sb/t when split), which the backward pass reads and the paper leaves
  out; the paper's "LayerNorm input" (2sbh) is, in the engine, the normalised
  output it saves instead, of the same size.  The causal mask changes no stored
  size: the scores are kept whole, as the paper counts them.
* Megatron-LM (Shoeybi et al. 2019): two AllReduces of the activations in the
  forward pass of a layer and two in the backward (f and g), 2sbh bytes each;
  with sequence parallelism an AllGather before and a ReduceScatter after each
  tensor-parallel region instead, and again in the backward pass.
* ZeRO (Rajbhandari et al. 2020), Figure 1: Psi = 7.5e9, K = 12 (mixed-precision
  Adam), N_d = 64: 120, 31.4, 16.6 and 1.875 GB per device.
* The Ultra-Scale Playbook's bubbles: (p-1)/m, (p-1)/(v m); p = 8, m = 32: 0.21875,
  with v = 2: 0.109375; GPipe's (p - 1)/(m + p - 1) = 7/39 = 0.1795 (to 4 places, as
  printed).  The in-flight micro-batches of Megatron-LM's schedules (p on the first
  stage of 1F1B; p + (p - 1)/v interleaved, Korthikanti's L(1 + (p-1)/(p v)) layers).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy

from symflops.cli import run as cli_run
import forked

DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"
B, S, D, N, E, F, t, h, a = sympy.symbols("B S D N E F t h a", positive=True)
NAMES = {"B": B, "S": S, "D": D, "N": N, "E": E, "F": F, "t": t}


def shard(capsys, *args):
    assert cli_run(["shard", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def per_layer(data) -> sympy.Expr:
    """One device's activation bytes, in the paper's letters (s = S, b = B)."""
    expr = sympy.sympify(data["stages"][0]["activations"], locals=NAMES)
    return sympy.expand(expr.subs({D: h, N: a, E: h / a, F: 4 * h}))


STATS = 4 * S * B  # two LayerNorms' rstd rows, 2 bytes each: not in the paper


def test_korthikanti_tensor_parallel(capsys):
    got = per_layer(shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t"))
    paper = S * B * h * (10 + 24 / t + 5 * a * S / (h * t))
    assert sympy.simplify(got - paper - STATS) == 0
    # t = 1: no parallelism, sbh(34 + 5as/h)
    assert sympy.simplify(got.subs(t, 1) - S * B * h * (34 + 5 * a * S / h) - STATS) == 0


def test_korthikanti_sequence_parallel(capsys):
    got = per_layer(shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t", "--sp"))
    paper = S * B * h / t * (34 + 5 * a * S / h)
    assert sympy.simplify(got - paper - STATS / t) == 0


def test_korthikanti_selective_recomputation(capsys):
    got = per_layer(shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t", "--sp",
                          "--recompute", "selective"))
    assert sympy.simplify(got - 34 * S * B * h / t - STATS / t) == 0


def test_megatron_communication_per_layer(capsys):
    data = shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t")
    rows = [(c["phase"], c["kind"], c["bytes"]) for c in data["collectives"]]
    assert rows == [("forward", "AllReduce", "2*B*D*S")] * 2 + \
        [("backward", "AllReduce", "2*B*D*S")] * 2
    data = shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t", "--sp")
    act = [(c["phase"], c["kind"], c["array"]) for c in data["collectives"]
           if c["bytes"] == "2*B*D*S"]
    # each tensor-parallel region: forward AllGather in, ReduceScatter out; backward the
    # adjoints (AllGather of the output's gradient, ReduceScatter of the input's) and the
    # input gathered again for the weight gradients (Korthikanti et al. sec. 4.2.2)
    assert act == [("forward", "AllGather", "Xn"), ("forward", "ReduceScatter", "Ya"),
                   ("forward", "AllGather", "Yn"), ("forward", "ReduceScatter", "Ym"),
                   ("backward", "AllGather", "dYm"), ("backward", "AllGather", "Yn"),
                   ("backward", "ReduceScatter", "dYn"), ("backward", "AllGather", "dYa"),
                   ("backward", "AllGather", "Xn"), ("backward", "ReduceScatter", "dXn")]


def test_norm_gains_stay_whole_under_tensor_parallelism(capsys):
    """llm-analysis #19/#27 divided norm parameters by t; here each tensor is divided by
    the axes its placement splits: 4 (DNE) + 2 DF + 3 NE + F split, the six D-vectors
    (two LayerNorms' gains and biases, two output biases) whole: 2 bytes each."""
    data = shard(capsys, DERIVATIONS / "decoder_block.yaml", "--tp", "t")
    weights = sympy.sympify(data["stages"][0]["weights"], locals=NAMES)
    assert sympy.expand(weights - 2 * (4 * D * N * E / t + 2 * D * F / t + 3 * N * E / t
                                       + F / t + 6 * D)) == 0


@pytest.mark.parametrize("zero, gb", [(0, 120), (1, 31.40625), (2, 16.640625), (3, 1.875)])
def test_zero_paper_figure_1(capsys, zero, gb):
    """Psi = 2 D F = 7.5e9 (D = 50,000, F = 75,000), mixed-precision Adam (2 + 2 + 12
    bytes a parameter), 64 data-parallel devices: (2 + 2 + 12) Psi = 120 GB; ZeRO-1
    4 Psi + 12 Psi / 64 = 31.4; ZeRO-2 2 Psi + 14 Psi / 64 = 16.6; ZeRO-3 16 Psi / 64 =
    1.875 (the paper prints 120, 31.4, 16.6 and 1.9)."""
    data = shard(capsys, DERIVATIONS / "ffn.yaml", "B=64", "D=50000", "F=75000", "X=64",
                 "--dp", "X", "--zero", zero, "--precision", "mixed-adam")
    s = data["stages"][0]
    assert s["weights"] + s["grads"] + s["optimizer"] + s["master"] == pytest.approx(gb * 1e9)


def plan(capsys, *args):
    assert cli_run(["plan", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from test_hf_import import LLAMA2_7B
    path = tmp_path_factory.mktemp("llama2") / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    return path


@pytest.mark.parametrize("extra, ideal, step", [
    ([], 7 / 32, 7 / 39),
    (["--interleave", "2"], 7 / 64, 7 / 71),
])
def test_playbook_bubbles(capsys, llama2, extra, ideal, step):
    data = plan(capsys, "--hf-config", llama2, "--seq", "4096", "--pp", "8",
                "--micro-batches", "32", *extra)
    p = data["devices"]["report"]["pipeline"]
    assert p["of_ideal"] == ideal  # 0.21875 and 0.109375, exactly
    assert p["of_step"] == pytest.approx(step)
    if not extra:
        assert round(p["of_step"], 4) == 0.1795  # GPipe's (p-1)/(m+p-1) as printed


BLOCKS = """\
name: stack
dims: {L: layers, B: sequences, S: sequence length, D: width, N: heads, E: head width,
       F: hidden}
tokens: B*S
sequences: B
tensors:
  X0: {shape: [B, S, D], role: input}
ops:
  - include: decoder_block.yaml
    repeat: L
    tensors: {X: X0, Y: XL}
"""


def stack(folder: Path) -> Path:
    (folder / "decoder_block.yaml").write_text((DERIVATIONS / "decoder_block.yaml").read_text())
    path = folder / "stack.yaml"
    path.write_text(BLOCKS)
    return path


def test_micro_batches_in_flight(capsys, tmp_path):
    """A stack of 12 GPT blocks on p = 4 stages (3 layers each), m = 8 micro-batches:
    GPipe keeps all 8 micro-batches' activations, 1F1B keeps p = 4 on the first stage
    (Korthikanti: p micro-batches of L/p layers, L layers' worth), the interleaved
    schedule with v = 3 keeps p + (p - 1)/v = 5, that is L (1 + (p - 1)/(p v)) layers."""
    path = stack(tmp_path)
    values = ["L=12", "B=1", "S=1024", "D=768", "N=12", "E=64", "F=3072"]

    def first(*args):
        data = shard(capsys, path, *values, "--pp", "4", "--micro-batches", "8", *args)
        return data["stages"][0]["activations"]

    one = shard(capsys, path, *values, "--micro-batches", "8")["stages"][0]["activations"]
    layer = one / 12
    assert first("--schedule", "gpipe") == 8 * 3 * layer
    assert first() == 4 * 3 * layer == 12 * layer
    assert first("--interleave", "3") == pytest.approx(12 * (1 + 3 / 12) * layer)


def test_more_stages_than_layers_is_refused(tmp_path):
    path = stack(tmp_path)
    r = forked.run("shard", str(path), "L=4", "B=1", "S=8", "D=8", "N=2", "E=4", "F=32", "--pp", "8")
    assert r.returncode == 2, r.stderr
    assert "8 pipeline stages for 4 layers" in r.stderr and "Traceback" not in r.stderr
