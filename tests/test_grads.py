"""``symflops grads``: derived gradients on given arrays.

References: NumPy matrix products written by hand (dW = X^T dY, ...), and
torch.autograd in float64 where PyTorch is installed.
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from symflops.checks import grads
from symflops.commands import grads as grads_command
from symflops.core.errors import SymflopsError

ROOT = Path(__file__).resolve().parent.parent
FFN = str(ROOT / "derivations" / "ffn.yaml")

MATMUL = """\
name: mm
dims: {M: rows, K: inner, N: columns}
tensors:
  A: {shape: [M, K], role: input}
  W: {shape: [K, N], role: param}
ops:
  - C[m,n] = A[m,k] W[k,n]
"""

SCORES = """\
name: scores
dims: {S: queries, T: keys, H: head width}
tensors:
  Q: {shape: [S, H], role: input}
  K: {shape: [T, H], role: input}
ops:
  - A[s,t] = Q[s,h] K[t,h]
"""


def invoke(argv, capsys):
    parser = argparse.ArgumentParser(prog="symflops grads")
    grads_command.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        status = grads_command.run(args)
    except SymflopsError as exc:
        print(f"symflops: {exc}", file=sys.stderr)
        status = 2
    out, err = capsys.readouterr()
    return status, out, err


def declaration(tmp_path, text, name="layer.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_grads(tmp_path, capsys, layer, **arrays):
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **arrays)
    status, stdout, err = invoke([layer, "--inputs", str(inputs), "--out", str(out)], capsys)
    assert status == 0, err
    with np.load(out) as data:
        return {k: data[k] for k in data.files}, stdout


def ffn_arrays(rng, b=5, d=3, f=4):
    return {"X": rng.standard_normal((b, d)), "W_in": rng.standard_normal((d, f)),
            "W_out": rng.standard_normal((f, d))}


def test_matmul_by_hand(tmp_path, capsys):
    rng = np.random.default_rng(0)
    A, W, dC = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    got, _ = run_grads(tmp_path, capsys, declaration(tmp_path, MATMUL), A=A, W=W, dC=dC)
    assert sorted(got) == ["dA", "dW"]
    np.testing.assert_allclose(got["dW"], A.T @ dC, rtol=1e-13)
    np.testing.assert_allclose(got["dA"], dC @ W.T, rtol=1e-13)


def test_ffn_by_hand_with_default_upstream(tmp_path, capsys):
    rng = np.random.default_rng(1)
    a = ffn_arrays(rng)
    got, stdout = run_grads(tmp_path, capsys, FFN, **a)
    assert {"dW_in", "dW_out", "dX"} <= set(got)
    H, dY = a["X"] @ a["W_in"], np.ones((5, 3))  # no dY given: gradient of sum(Y)
    dH = dY @ a["W_out"].T
    np.testing.assert_allclose(got["dW_out"], H.T @ dY, rtol=1e-13)
    np.testing.assert_allclose(got["dH"], dH, rtol=1e-13)
    np.testing.assert_allclose(got["dW_in"], a["X"].T @ dH, rtol=1e-13)
    np.testing.assert_allclose(got["dX"], dH @ a["W_in"].T, rtol=1e-13)
    assert got["dX"].dtype == np.float64
    assert "dW_in" in stdout and "4x3" in stdout  # dW_out is F x D = 4 x 3


def test_frozen_and_gradient_free_tensors_get_no_gradient(tmp_path, capsys):
    text = Path(FFN).read_text()
    for old, new in (("X: {shape: [B, D], role: input,", "X: {shape: [B, D], role: input, requires_grad: false,"),
                     ("W_in: {shape: [D, F], role: param,", "W_in: {shape: [D, F], role: frozen,")):
        assert old in text, f"derivations/ffn.yaml no longer declares {old!r}; update this test"
        text = text.replace(old, new)
    got, _ = run_grads(tmp_path, capsys, declaration(tmp_path, text), **ffn_arrays(np.random.default_rng(2)))
    assert sorted(got) == ["dW_out"]


def _torch_reference(torch, ops, arrays, upstream, wanted):
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k in wanted) for k, v in arrays.items()}
    out = ops(t)
    s = sum((out[k] * torch.tensor(v)).sum() for k, v in upstream.items())
    return dict(zip(wanted, (g.numpy() for g in torch.autograd.grad(s, [t[k] for k in wanted]))))


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_ffn_agrees_with_torch_autograd(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a = ffn_arrays(rng, 6, 4, 7)
    dY = rng.standard_normal((6, 4))
    got, _ = run_grads(tmp_path, capsys, FFN, dY=dY, **a)

    def ops(t):
        return {"Y": (t["X"] @ t["W_in"]) @ t["W_out"]}

    ref = _torch_reference(torch, ops, a, {"Y": dY}, ["X", "W_in", "W_out"])
    for name in ref:
        assert _rel(got["d" + name], ref[name]) < 1e-10, name


def test_attention_scores_agree_with_torch_autograd(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a = {"Q": rng.standard_normal((5, 3)), "K": rng.standard_normal((7, 3))}
    dA = rng.standard_normal((5, 7))
    got, _ = run_grads(tmp_path, capsys, declaration(tmp_path, SCORES), dA=dA, **a)
    ref = _torch_reference(torch, lambda t: {"A": t["Q"] @ t["K"].T}, a, {"A": dA}, ["Q", "K"])
    assert sorted(got) == ["dK", "dQ"]
    for name in ref:
        assert _rel(got["d" + name], ref[name]) < 1e-10, name
    # and by hand: dQ = dA K, dK = dA^T Q
    np.testing.assert_allclose(got["dQ"], dA @ a["K"], rtol=1e-13)
    np.testing.assert_allclose(got["dK"], dA.T @ a["Q"], rtol=1e-13)


@pytest.mark.parametrize("name,causal", [("attention", False), ("attention_causal", True)])
def test_full_attention_agrees_with_torch_autograd(tmp_path, capsys, name, causal):
    """The shipped single-head attention (projections, scaled scores, softmax,
    value product, output projection), against the same layer written here in
    PyTorch with its own softmax."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    S, D, H = 6, 5, 4
    a = {"X": rng.standard_normal((S, D))}
    a.update({n: rng.standard_normal((D, H)) for n in ("W_q", "W_k", "W_v")})
    a["W_o"] = rng.standard_normal((H, D))
    dY = rng.standard_normal((S, D))
    got, _ = run_grads(tmp_path, capsys, str(ROOT / "derivations" / f"{name}.yaml"), dY=dY, **a)

    def ops(t):
        q, k, v = t["X"] @ t["W_q"], t["X"] @ t["W_k"], t["X"] @ t["W_v"]
        scores = q @ k.T / H ** 0.5
        if causal:  # position s sees t <= s only
            scores = scores.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1),
                                        float("-inf"))
        return {"Y": torch.softmax(scores, dim=1) @ v @ t["W_o"]}

    ref = _torch_reference(torch, ops, a, {"Y": dY}, list(a))
    for n in ref:
        assert _rel(got["d" + n], ref[n]) < 1e-10, n


# ------------------------------------------------------------ bad input --

def _fails(tmp_path, capsys, layer, arrays, out_name="out.npz"):
    inputs, out = tmp_path / "in.npz", tmp_path / out_name
    np.savez(inputs, **arrays)
    status, stdout, err = invoke([layer, "--inputs", str(inputs), "--out", str(out)], capsys)
    assert status == 2 and stdout == ""
    return err, out


def test_missing_array_names_the_tensor_and_its_shape(tmp_path, capsys):
    a = ffn_arrays(np.random.default_rng(5))
    del a["W_out"]
    err, out = _fails(tmp_path, capsys, FFN, a)
    assert "'W_out'" in err and "[F, D]" in err
    assert not out.exists()


def test_conflicting_sizes(tmp_path, capsys):
    a = ffn_arrays(np.random.default_rng(6))
    a["W_out"] = np.zeros((9, 3))  # F is 4 from W_in
    err, _ = _fails(tmp_path, capsys, FFN, a)
    assert "'W_out'" in err and "F=4" in err and "[F, D]" in err


def test_wrong_rank_and_wrong_upstream_shape(tmp_path, capsys):
    a = ffn_arrays(np.random.default_rng(7))
    err, _ = _fails(tmp_path, capsys, FFN, {**a, "X": np.zeros(5)})
    assert "'X'" in err and "[B, D]" in err
    err, _ = _fails(tmp_path, capsys, FFN, {**a, "dY": np.zeros((5, 4))})
    assert "'dY'" in err


def test_unknown_or_misspelt_array(tmp_path, capsys):
    a = ffn_arrays(np.random.default_rng(8))
    err, _ = _fails(tmp_path, capsys, FFN, {**a, "dy": np.ones((5, 3))})
    assert "did you mean 'dY'" in err
    err, _ = _fails(tmp_path, capsys, FFN, {**a, "H": np.ones((5, 4))})
    assert "activation" in err


def test_failure_leaves_an_existing_output_untouched(tmp_path, capsys):
    out = tmp_path / "out.npz"
    out.write_bytes(b"previous")
    a = ffn_arrays(np.random.default_rng(9))
    del a["X"]
    _fails(tmp_path, capsys, FFN, a)
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == ["in.npz", "out.npz"]


def test_not_an_npz(tmp_path, capsys):
    status, _, err = invoke([FFN, "--inputs", FFN, "--out", str(tmp_path / "o.npz")], capsys)
    assert status == 2 and "not a NumPy .npz archive" in err


def test_shape_expressions_are_checked_not_solved(tmp_path):
    import symflops

    layer = symflops.declare("conv", dims={"P": "", "K": ""},
                             tensors={"x": {"shape": ["P + K - 1"], "role": "input"},
                                      "w": {"shape": ["K"], "role": "param"},
                                      "y0": {"shape": ["P"], "role": "input"}},
                             ops=["z[p] = y0[p] w[k]"])
    arrays = {"x": np.zeros(6), "w": np.zeros(3), "y0": np.zeros(4)}  # P + K - 1 = 6
    assert grads.infer_dims(layer, arrays) == {"P": 4, "K": 3}
    with pytest.raises(SymflopsError, match="expected K \\+ P - 1 = 6 with P=4, K=3"):
        grads.infer_dims(layer, {**arrays, "x": np.zeros(5)})


def test_write_is_atomic_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "g.npz"
    grads_command.write_npz(str(out), {"dW": np.arange(3.0)})
    with np.load(out) as data:
        np.testing.assert_array_equal(data["dW"], [0.0, 1.0, 2.0])
    assert os.listdir(tmp_path) == ["g.npz"]
