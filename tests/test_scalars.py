"""Scalar tensors (``shape: []``) through ``verify`` and ``grads``.

NumPy turns a 0-d result into a numpy scalar (``np.exp(np.array(1.0))`` is a
``numpy.float64``), which has no element to perturb: ``verify`` exited 70 on
any op whose output is a scalar computed from a scalar (``s[] = exp(t[])``,
CLIP's learned temperature), with "'numpy.float64' object does not support
item assignment" in the finite differences.  Every value is now an array, 0-d
for a scalar.  The two layers here are the ones that met it: CLIP's
contrastive loss with a learned logit scale and differential attention with a
learned lambda; each passes ``verify`` (finite differences and
torch.autograd), and ``grads`` on arrays given as 0-d arrays returns 0-d
gradients equal to the same layer written here in PyTorch.
"""

import argparse
import sys

import numpy as np
import pytest

import symflops
from symflops.checks.verify import verify
from symflops.commands import grads as grads_command
from symflops.core.errors import SymflopsError

# CLIP (Radford et al. 2021, Fig. 3): logits = exp(t) * I T^T; the loss is
# the mean of the cross-entropy over the texts and over the images.
CLIP = """\
name: clip_loss
title: CLIP contrastive loss with a learned temperature
dims:
  B: image-text pairs in the batch
  D: embedding width
tensors:
  I: {shape: [B, D], role: input}
  T: {shape: [B, D], role: input}
  t: {shape: [], role: param, description: log of the logit scale}
  y: {shape: [B], role: index}
ops:
  - s[] = exp(t[])
  - Z[a,b] = I[a,d] T[b,d] s[]
  - Li[] = cross_entropy_mean_b(Z[a,b], y[a])
  - Lt[] = cross_entropy_mean_a(Z[a,b], y[b])
  - L[] = Li[] / 2 + Lt[] / 2
examples:
  toy: {B: 4, D: 3}
"""

# Differential attention (Ye et al. 2024): the difference of two causal
# softmax maps, the second weighted by lambda = exp(a1) - exp(a2), a learned
# scalar (the paper's lambda_init left out).
DIFF = """\
name: diff_attention
title: Differential attention with a learned scalar lambda
dims:
  S: positions
  E: head width
  F: value width
tensors:
  Q1: {shape: [S, E], role: input}
  K1: {shape: [S, E], role: input}
  Q2: {shape: [S, E], role: input}
  K2: {shape: [S, E], role: input}
  V: {shape: [S, F], role: input}
  a1: {shape: [], role: param}
  a2: {shape: [], role: param}
ops:
  - lam[] = exp(a1[]) - exp(a2[])
  - A1[s,t] = Q1[s,e] K1[t,e] / sqrt(E) where t <= s
  - P1[s,t] = softmax_t(A1[s,t]) where t <= s
  - A2[s,t] = Q2[s,e] K2[t,e] / sqrt(E) where t <= s
  - P2[s,t] = softmax_t(A2[s,t]) where t <= s
  - D[s,t] = P1[s,t] - lam[] P2[s,t]
  - Y[s,f] = D[s,t] V[t,f]
examples:
  toy: {S: 4, E: 3, F: 2}
"""


def _write(tmp_path, text, name="layer.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text,scalars", [(CLIP, ("dt", "ds", "dLi", "dLt")),
                                          (DIFF, ("da1", "da2", "dlam"))])
def test_verify_passes_with_scalar_tensors(tmp_path, text, scalars):
    pytest.importorskip("torch")
    report = verify(symflops.derive(symflops.load(_write(tmp_path, text))), seed=1)
    assert report.passed, [r for r in report.rules + report.gradients if not r.passed]
    assert report.torch_version is not None
    checked = {r.grad for r in report.rules} | {g.grad for g in report.gradients}
    for name in scalars:
        assert name in checked, name
    # the scalars' rules were compared with torch.autograd, not skipped
    assert all(r.torch_error is not None for r in report.rules)
    assert all(g.torch_error is not None for g in report.gradients)


def test_verify_without_torch_differences_a_scalar(tmp_path):
    report = verify(symflops.derive(symflops.load(_write(tmp_path, CLIP))), seed=2,
                    use_torch=False)
    assert report.passed
    dt = next(g for g in report.gradients if g.grad == "dt")
    assert dt.fd_error < 1e-6


def _grads(tmp_path, capsys, layer, arrays):
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **arrays)
    parser = argparse.ArgumentParser(prog="symflops grads")
    grads_command.add_arguments(parser)
    args = parser.parse_args([layer, "--inputs", str(inputs), "--out", str(out)])
    try:
        status = grads_command.run(args)
    except SymflopsError as exc:
        print(f"symflops: {exc}", file=sys.stderr)
        status = 2
    _, err = capsys.readouterr()
    assert status == 0, err
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def _autograd(torch, arrays, forward, upstream, wanted):
    t = {k: torch.tensor(v, dtype=torch.int64 if v.dtype.kind == "i" else torch.float64,
                         requires_grad=k in wanted) for k, v in arrays.items()}
    out = forward(torch, t)
    total = sum((out[k] * torch.tensor(v)).sum() for k, v in upstream.items())
    return {k: g.numpy() for k, g in zip(wanted, torch.autograd.grad(total, [t[k] for k in wanted]))}


def _close(got, ref):
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_grads_clip_temperature_is_a_0d_gradient_equal_to_autograd(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    B, D = 5, 3
    arrays = {"I": rng.standard_normal((B, D)), "T": rng.standard_normal((B, D)),
              "t": np.array(0.3), "y": rng.permutation(B)}
    dL = np.array(1.7)  # a 0-d upstream gradient in the archive too
    got = _grads(tmp_path, capsys, _write(tmp_path, CLIP), {**arrays, "dL": dL})
    assert got["dt"].shape == () and got["ds"].shape == ()

    def forward(torch, t):
        z = torch.exp(t["t"]) * t["I"] @ t["T"].T
        f = torch.nn.functional.cross_entropy
        return {"L": (f(z, t["y"]) + f(z.T, t["y"])) / 2}

    ref = _autograd(torch, arrays, forward, {"L": dL}, ["I", "T", "t"])
    for name, value in ref.items():
        _close(got["d" + name], value)
    # and by hand: d/dt of L(exp(t) M) is exp(t) * sum(dZ * M), M = I T^T
    assert np.isclose(got["dt"], np.exp(0.3) * np.sum(got["dZ"] * (arrays["I"] @ arrays["T"].T)))


def test_grads_differential_attention_lambda_is_a_0d_gradient_equal_to_autograd(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    S, E, F = 5, 3, 4
    arrays = {n: rng.standard_normal((S, E)) for n in ("Q1", "K1", "Q2", "K2")}
    arrays.update(V=rng.standard_normal((S, F)), a1=np.array(0.2), a2=np.array(-0.4))
    dY = rng.standard_normal((S, F))
    got = _grads(tmp_path, capsys, _write(tmp_path, DIFF), {**arrays, "dY": dY})
    assert got["da1"].shape == () and got["da2"].shape == () and got["dlam"].shape == ()

    def forward(torch, t):
        future = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)  # t > s is masked

        def probs(q, k):
            return torch.softmax((q @ k.T / E ** 0.5).masked_fill(future, float("-inf")), dim=1)

        lam = torch.exp(t["a1"]) - torch.exp(t["a2"])
        return {"Y": (probs(t["Q1"], t["K1"]) - lam * probs(t["Q2"], t["K2"])) @ t["V"]}

    ref = _autograd(torch, arrays, forward, {"Y": dY}, list(arrays))
    for name, value in ref.items():
        _close(got["d" + name], value)


def test_softmax_of_a_tensor_with_no_row_letter_is_refused_at_the_call(tmp_path):
    """Its normaliser would be one number for the whole tensor, which the
    derivation indexes by a row: a derive exited 70 ('Indexed needs at least
    one index'); now refused with the form that works, as logsumexp is."""
    text = ("name: r\ndims: {S: positions}\ntensors:\n  A: {shape: [S], role: input}\n"
            "ops:\n  - P[s] = softmax_s(A[s])\n")
    with pytest.raises(SymflopsError) as info:
        symflops.derive(symflops.load(_write(tmp_path, text)))
    message = str(info.value)
    assert ":6:12:" in message and "no other index" in message
    assert "softmax_s(A[r,s]), with 'r' on the output too" in message
    # the advice works: a row letter over a dim of extent 1 derives and verifies
    fixed = text.replace("{S: positions}", "{S: positions, R: one row}").replace(
        "[S]", "[R, S]").replace("P[s] = softmax_s(A[s])", "P[r,s] = softmax_s(A[r,s])")
    assert verify(symflops.derive(symflops.load(_write(tmp_path, fixed, "ok.yaml"))),
                  use_torch=False).passed


@pytest.mark.parametrize("call", ["layernorm_s(A[s])", "rmsnorm_s(A[s])"])
def test_norm_of_a_tensor_with_no_row_letter_is_refused(tmp_path, call):
    text = ("name: r\ndims: {S: positions}\ntensors:\n  A: {shape: [S], role: input}\n"
            f"ops:\n  - P[s] = {call}\n")
    with pytest.raises(SymflopsError, match="no other index"):
        symflops.derive(symflops.load(_write(tmp_path, text)))
