"""The benchmark's harness (bench/run.py): the closed form against
FlopCounterMode on the same model, and the choice of the largest declaration."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_run"] = bench
spec.loader.exec_module(bench)


def test_transformer_block_differs_from_flopcountermode_by_the_causal_square_only():
    pytest.importorskip("torch")
    dims = {"S": 16, "D": 12, "N": 2, "E": 3, "F": 20}
    c = bench.compare(ROOT / "derivations" / "transformer_block.yaml", "transformer_block", dims,
                      repeats=1, commands=False, calls=10)
    S, D, N, E, F = dims.values()
    projections = 2 * S * D * N * E * 4 + 2 * 2 * S * D * F  # q, k, v, o; up, down
    assert c.torch_flops["forward"] == projections + 2 * 2 * N * S * S * E  # full squares
    assert c.symflops_flops["forward"] == projections + 2 * N * E * S * (S + 1)  # triangles
    assert c.torch_flops["backward"] == 2 * c.torch_flops["forward"]
    assert c.difference == c.causal > 0  # the whole difference
    assert c.full_square == c.torch_flops["total"]


def test_full_square_equals_the_total_without_a_where_clause():
    from symflops.count.cost import costs
    from symflops.derive.backward import derive
    from symflops.declaration.reader import load

    d = derive(load(ROOT / "derivations" / "attention.yaml"))
    assert bench.full_square_flops(d) == costs(d).flops_total


def test_largest_declaration_is_picked_by_op_count(tmp_path):
    for name in ("ffn", "transformer_block", "norms"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", tmp_path / f"{name}.yaml")
    paths = sorted(tmp_path.glob("*.yaml"))
    assert bench.largest_declaration(paths).stem == "transformer_block"
    ops = "\n".join(f"  - H{k + 1}[b,d] = H{k}[b,e] W{k}[e,d]" for k in range(20))
    weights = "\n".join(f"  W{k}: {{shape: [D, D], role: param}}" for k in range(20))
    (tmp_path / "deep.yaml").write_text(f"dims: {{B: b, D: d}}\ntensors:\n"
                                        f"  H0: {{shape: [B, D], role: input}}\n{weights}\n"
                                        f"ops:\n{ops}\n")
    assert bench.largest_declaration(sorted(tmp_path.glob("*.yaml"))).stem == "deep"


def test_sweep_grid_has_a_million_configurations():
    from symflops.declaration.reader import load

    for name in ("ffn", "transformer_block", "conv1d"):
        layer = load(ROOT / "derivations" / f"{name}.yaml")
        axes = bench.sweep_module.parse_axes(bench.grid_items(layer), layer)
        size = 1
        for a in axes:
            size *= len(a)
        assert 10**6 <= size < 4 * 10**6


@pytest.mark.skipif(not (ROOT / "derivations" / "llama.yaml").exists(),
                    reason="derivations/llama.yaml is not shipped yet")
def test_llama_differs_from_flopcountermode_by_the_causal_square_only():
    pytest.importorskip("torch")
    dims = {"L": 2, "B": 2, "S": 8, "D": 12, "N": 4, "G": 2, "E": 3, "F": 20, "V": 11}
    c = bench.compare(ROOT / "derivations" / "llama.yaml", "llama", dims, repeats=1,
                      commands=False, calls=10)
    assert c.difference == c.causal


def test_llama_model_traces_at_small_sizes():
    pytest.importorskip("torch")
    from llama_meta import traced_flops

    L, B, S, D, N, G, E, F, V = 2, 2, 8, 12, 4, 2, 3, 20, 11
    counts = traced_flops("llama", dict(L=L, B=B, S=S, D=D, N=N, G=G, E=E, F=F, V=V))
    T = B * S
    per_layer = 2 * T * D * (N * E + 2 * G * E) + 2 * T * N * E * D + 3 * 2 * T * D * F \
        + 2 * 2 * B * N * S * S * E  # projections, output, SwiGLU; Q K^T and P V, full squares
    assert counts["forward"] == L * per_layer + 2 * T * D * V
    assert counts["backward"] == 2 * counts["forward"]
