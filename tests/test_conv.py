"""Shifted indices: a 1-D convolution ``Y[b,o,p] = X[b,c,p+k] W[o,c,k]``.

The shift is lowered to ``X[b,c,q]`` times the indicator ``[q = p + k]``;
expected counts are derived by hand in each test: every output element
Y[b,o,p] sums C*K products, so the forward is 2*B*O*P*C*K FLOPs, and each
backward rule touches the same (b, o, c, p, k) tuples once.
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.ops.einsum.cost import einsum_flops
from symflops.core.errors import SymflopsError
from symflops.checks.numeric import backward, forward
from symflops.lang.statement import parse_statement
from gradcheck import gradient_errors

ROOT = Path(__file__).resolve().parent.parent
B, C, O, P, K = sympy.symbols("B C O P K", positive=True, integer=True)
DIMS = {"B": "batch", "C": "in channels", "O": "out channels", "P": "positions", "K": "width"}


def conv(op="Y[b,o,p] = X[b,c,p+k] W[o,c,k]", x=("B", "C", "P + K - 1"), w=("O", "C", "K")):
    return symflops.declare("conv", dims=DIMS, tensors={
        "X": {"shape": list(x), "role": "input"}, "W": {"shape": list(w), "role": "param"}},
        ops=[op])


def shipped():
    return symflops.load(ROOT / "derivations" / "conv1d.yaml")


def test_the_output_positions_follow_from_the_axis():
    layer = shipped()
    # p is on no operand: ext(p) = (P + K - 1) - K + 1 = P.
    assert layer.tensor("Y").shape == (B, O, P)
    dims = layer.ops[0].dims()
    assert dims["p"] == P and dims["k"] == K and sympy.expand(dims["q"] - (P + K - 1)) == 0


def test_the_statement_prints_the_shift_inline_and_reparses():
    op = shipped().ops[0]
    assert op.statement() == "Y[b,o,p] = X[b,c,p+k] W[o,c,k]"
    (shift,) = parse_statement(op.statement()).refs[0].shifts
    # the third index of X, "p+k", with p at column 17 and k at 19 of the text above
    assert (shift.position, shift.left, shift.left_column, shift.right, shift.right_column) == (
        2, "p", 17, "k", 19)


def test_derived_rules():
    d = symflops.derive(shipped())
    assert [r.statement for r in d.rules] == [
        "dW[o,c,k] = X[b,c,p+k] dY[b,o,p]",
        "dX[b,c,q] = dY[b,o,p] W[o,c,k] where q = p + k",
    ]


def test_flops_forward_and_each_backward_rule():
    c = costs(symflops.derive(shipped()))
    # Y[b,o,p] = sum_{c,k} X[b,c,p+k] W[o,c,k]: B*O*P outputs, C*K multiply-adds each.
    assert c.forward[0].flops == 2 * B * O * C * P * K
    # dW[o,c,k] = sum_{b,p} X[b,c,p+k] dY[b,o,p]: O*C*K outputs, B*P multiply-adds each.
    # dX[b,c,q] = sum_{o,p,k: p+k=q} dY[b,o,p] W[o,c,k]: each (b,c,o,p,k) once.
    assert [r.flops for r in c.backward] == [2 * B * O * C * P * K] * 2
    assert c.flops_backward == 4 * B * O * C * P * K
    assert c.elementwise_forward == 0 and c.elementwise_backward == 0
    assert costs(symflops.derive(shipped()), unit="MACs").flops_forward == B * O * C * P * K


@pytest.mark.parametrize("order", ["declared", "equal-sizes"])
def test_every_rule_counts_the_same_under_both_path_orders(order):
    d = symflops.derive(shipped())
    extents = d.layer.ops[0].dims()
    for r in d.rules:
        ext = r.dims()
        for t in r.terms:
            assert einsum_flops(t, ext, order=order) == 2 * B * O * C * P * K
    assert einsum_flops(d.layer.ops[0].einsum, extents, order=order) == 2 * B * O * C * P * K


def test_flops_match_enumeration_at_small_sizes():
    """Count the multiply-adds of a direct loop: (b, o, p, c, k) with p + k in range."""
    sizes = {B: 2, C: 3, O: 4, P: 5, K: 3}
    n = sum(1 for b in range(2) for o in range(4) for p in range(5) for c in range(3)
            for k in range(3) if p + k < 5 + 3 - 1)
    c = costs(symflops.derive(shipped()))
    assert c.flops_forward.subs(sizes) == 2 * n


def _numpy_conv(x, w):
    b, c, n = x.shape
    o, _, k = w.shape
    p = n - k + 1
    return np.stack([np.einsum("bck,ock->bo", x[:, :, i:i + k], w) for i in range(p)], axis=-1)


def test_forward_and_backward_match_a_direct_convolution():
    torch = pytest.importorskip("torch")
    layer = shipped()
    rng = np.random.default_rng(0)
    dims = {"B": 2, "C": 3, "O": 4, "P": 5, "K": 3}
    x, w = rng.standard_normal((2, 3, 7)), rng.standard_normal((4, 3, 3))
    values = forward(layer, {"X": x, "W": w}, dims)
    assert np.allclose(values["Y"], _numpy_conv(x, w))
    dy = rng.standard_normal((2, 4, 5))
    grads = backward(symflops.derive(layer), values, {"dY": dy}, dims)
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv1d(tx, tw).backward(torch.tensor(dy))
    assert np.allclose(grads["dX"], tx.grad.numpy()) and np.allclose(grads["dW"], tw.grad.numpy())
    # The input gradient is a full correlation of dY with the flipped kernel.
    full = np.pad(dy, ((0, 0), (0, 0), (2, 2)))
    flipped = w[:, :, ::-1].transpose(1, 0, 2)  # [c, o, k]
    assert np.allclose(grads["dX"], _numpy_conv(full, flipped))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_match_finite_differences(seed):
    errors = gradient_errors(shipped(), seed=seed)
    assert set(errors) == {"X", "W"} and max(errors.values()) < 1e-6, errors


def test_the_kernel_width_can_follow_from_the_axis_instead():
    # Here the output positions index the kernel: p is bound by W, k solved.
    layer = conv("Y[b,o,k] = X[b,c,p+k] W[o,c,p]", w=("O", "C", "P"))
    assert layer.tensor("Y").shape == (B, O, K)
    c = costs(symflops.derive(layer))
    assert c.flops_forward == 2 * B * O * C * P * K
    assert [r.flops for r in c.backward] == [2 * B * O * C * P * K] * 2
    assert max(gradient_errors(layer, seed=0).values()) < 1e-6


def test_a_shift_whose_letters_are_both_unbound_is_an_error():
    with pytest.raises(SymflopsError, match="the shift p\\+k leaves an index unbound"):
        conv("Y[b,c,p] = X[b,c,p+k] X[b,c,p+k]")


def test_a_shift_on_the_output_reads_letters_of_the_operands():
    # Y[b,c,p+k] = X[b,c,p] W[o,c,k] is legal since affine output indices (a
    # transposed convolution, tests/test_affine.py); a letter no operand has is not.
    with pytest.raises(SymflopsError, match="the output index p\\+j of Y reads 'j', which no "
                       "operand carries"):
        conv("Y[b,c,p+j] = X[b,c,p] W[o,c,k]", x=("B", "C", "P"))


def test_a_letter_added_to_itself_is_an_error():
    with pytest.raises(SymflopsError, match="adds a letter to itself"):
        conv("Y[b,o,k] = X[b,c,k+k] W[o,c,k]")


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_sheet_says_the_input_gradient_is_a_full_correlation(fmt):
    text = (ROOT / "build" / f"conv1d.{fmt}").read_text()
    assert "full correlation" in text and "flipped kernel" in text
    assert "2BCOPK" in text


def test_grads_solves_the_output_positions_from_the_input_axis():
    torch = pytest.importorskip("torch")
    from symflops.checks import grads
    layer = shipped()
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 7)), rng.standard_normal((4, 3, 3))
    # No array has an axis declared as plain P: P + K - 1 = 7 with K = 3 gives P = 5.
    assert grads.infer_dims(layer, {"X": x, "W": w}) == {"B": 2, "C": 3, "O": 4, "P": 5, "K": 3}
    out = grads.compute(symflops.derive(layer), {"X": x, "W": w})
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv1d(tx, tw).sum().backward()
    assert np.allclose(out["dX"], tx.grad.numpy()) and np.allclose(out["dW"], tw.grad.numpy())


def test_a_shift_past_the_axis_is_an_error():
    # p bound by Z to P, k by W to K, but X has only P positions: p+k overruns.
    with pytest.raises(SymflopsError, match="runs past the axis of X"):
        symflops.declare("conv", dims=DIMS, tensors={
            "X": {"shape": ["B", "C", "P"], "role": "input"},
            "W": {"shape": ["O", "C", "K"], "role": "param"},
            "Z": {"shape": ["B", "O", "P"], "role": "input"}},
            ops=["Y[b,o,p] = X[b,c,p+k] W[o,c,k] Z[b,o,p]"])
    # An axis at least P + K - 1 long is fine.
    layer = symflops.declare("conv", dims=DIMS, tensors={
        "X": {"shape": ["B", "C", "P + K"], "role": "input"},
        "W": {"shape": ["O", "C", "K"], "role": "param"},
        "Z": {"shape": ["B", "O", "P"], "role": "input"}},
        ops=["Y[b,o,p] = X[b,c,p+k] W[o,c,k] Z[b,o,p]"])
    assert max(gradient_errors(layer, seed=0).values()) < 1e-6
