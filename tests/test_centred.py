"""A dim inside a shift: centred kernels, ``X[b,c,i+u-R]`` ("same" padding).

A kernel of ``2R + 1`` taps centred on ``i`` reads ``R`` positions to each
side: ``Y[b,c,i] = sum_u X[b,c,i+u-R] W[c,u]``, with ``R`` zeros padded on
each side of X's axis (``pad: [0, 0, [R, R]]``), so that the output keeps
X's ``I`` positions.  ``R`` in the index is a dim: the constant of the affine
index, as ``-1`` is in ``s-1``.  (It was read as a letter: "index 'R' with
another operand".)

Expected values come from outside the engine: counts by hand in the
comments, PyTorch's ``conv1d``/``conv2d`` with ``padding=R`` (values,
autograd's gradients, ``FlopCounterMode``), and enumerations of the tuples
whose index lands inside the axis.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.numeric import backward, forward
from symflops.checks.verify import verify
from symflops.core.errors import SymflopsError
from symflops.count.cost import costs
from symflops.count.padding import padded_reads
from symflops.lang.statement import AffineTerm

B, C, O, I, J, R = sympy.symbols("B C O I J R", positive=True, integer=True)

DEPTHWISE = """\
name: conv1d_centred_depthwise
title: Depthwise 1-D convolution, centred kernel ("same" padding)
dims:
  B: sequences in the batch
  C: channels
  I: positions (in and out)
  R: reach of the kernel to each side
tensors:
  X: {shape: [B, C, I], role: input, pad: [0, 0, [R, R]]}
  W: {shape: [C, 2*R + 1], role: param}
ops:
  - Y[b,c,i] = X[b,c,i+u-R] W[c,u]
examples:
  toy: {B: 2, C: 3, I: 8, R: 1}
"""

STANDARD = """\
name: conv1d_centred
title: 1-D convolution, centred kernel ("same" padding)
dims: {B: batch, C: input channels, O: output channels, I: positions, R: reach}
tensors:
  X: {shape: [B, C, I], role: input, pad: [0, 0, [R, R]]}
  W: {shape: [O, C, 2*R + 1], role: param}
ops:
  - Y[b,o,i] = X[b,c,i+u-R] W[o,c,u]
examples:
  toy: {B: 2, C: 3, O: 2, I: 8, R: 1}
"""

CONV2D = """\
name: conv2d_centred
title: 2-D convolution, centred kernel ("same" padding)
dims: {B: batch, C: input channels, O: output channels, I: rows, J: columns, R: reach}
tensors:
  X: {shape: [B, C, I, J], role: input, pad: [0, 0, [R, R], [R, R]]}
  W: {shape: [O, C, 2*R + 1, 2*R + 1], role: param}
ops:
  - Y[b,o,i,j] = X[b,c,i+u-R,j+v-R] W[o,c,u,v]
examples:
  toy: {B: 1, C: 2, O: 3, I: 5, J: 4, R: 1}
"""

# A dilated centred kernel: taps 2 apart, reaching 2R to each side.
DILATED = STANDARD.replace("[R, R]", "[2*R, 2*R]").replace("i+u-R", "i+2*u-2*R")


def _layer(text):
    return symflops.loads(text, "centred.yaml")


def _total(cost):
    return sympy.expand(cost.flops + cost.elementwise)


# --------------------------------------------------------------- binding --

def test_the_dim_is_the_constant_of_the_index_and_the_output_keeps_the_axis():
    layer = _layer(DEPTHWISE)
    (op,) = layer.ops
    (shift,) = [f for f in op.terms[0].operands if f.is_shift]
    # [q = i + u - R]: coefficients 1, 1 and the constant -R
    assert shift.affine.coefficients == (1, 1) and shift.affine.offset == -R
    assert op.statement() == "Y[b,c,i] = X[b,c,i+u-R] W[c,u]"
    # i on the output only: it reaches X's last position I - 1 + R (its R zeros after)
    # at u = 2R, so i runs over I - 1 + R - (2R - R) + 1 = I positions
    assert layer.tensor("Y").shape == (B, C, I)


def test_the_grammar_reads_the_dim_as_a_term_and_the_binding_moves_it():
    from symflops.lang.statement import parse_statement
    (s,) = parse_statement("Y[b,c,i] = X[b,c,i+u-R] W[c,u]").refs[0].shifts
    assert s.terms[-1] == AffineTerm("R", 21, 1, negative=True) and s.named == ()
    # a dim with a coefficient (2*R) and one written after its letter (i*P is P*i)
    # (X's axis P*I + 2*R - 2: the index runs from 2R - 2 >= 0 up to P*I + 2*R - 3)
    layer = symflops.declare("d", dims={"B": "b", "I": "i", "P": "p", "R": "r"}, tensors={
        "X": {"shape": ["B", "P*I + 2*R - 2"], "role": "input"},
        "W": {"shape": ["P"], "role": "param"}}, ops=["Y[b,i] = X[b,i*P+u+2*R-2] W[u]"])
    assert layer.tensor("Y").shape == (B, I)
    (shift,) = [f for f in layer.ops[0].terms[0].operands if f.is_shift]
    assert shift.affine.offset == 2 * R - 2
    assert shift.affine.coefficients == (sympy.Symbol("P", positive=True, integer=True), 1)


def test_a_letter_named_like_a_dim_stays_a_letter():
    # R indexes Z, so it is a letter of the statement, bound over Z's axis, not the dim
    layer = symflops.declare("d", dims={"I": "i", "K": "k", "R": "r"}, tensors={
        "X": {"shape": ["I + K - 1"], "role": "input"}, "Z": {"shape": ["K"], "role": "param"}},
        ops=["Y[i] = X[i+R] Z[R]"])
    (shift,) = [f for f in layer.ops[0].terms[0].operands if f.is_shift]
    assert shift.affine.offset == 0 and len(shift.affine.coefficients) == 2


# ---------------------------------------------------------------- counts --

def test_depthwise_counts_by_hand():
    c = costs(symflops.derive(_layer(DEPTHWISE)))
    # B*C*I outputs, each 2R + 1 multiply-adds (border terms with the zeros included)
    assert sympy.expand(c.flops_forward - 2 * B * C * I * (2 * R + 1)) == 0
    # dW[c,u] sums (b, i) and dX scatters each (b, c, i, u) once: the same count each
    assert [_total(r) for r in c.backward] == [sympy.expand(2 * B * C * I * (2 * R + 1))] * 2


@pytest.mark.parametrize("text,by_hand", [
    (STANDARD, 2 * B * O * C * I * (2 * R + 1)),
    (DILATED, 2 * B * O * C * I * (2 * R + 1)),
    (CONV2D, 2 * B * O * C * I * J * (2 * R + 1) ** 2),
])
def test_standard_dilated_and_2d_count_by_hand(text, by_hand):
    c = costs(symflops.derive(_layer(text)))
    assert sympy.expand(c.flops_forward - by_hand) == 0
    assert [_total(r) for r in c.backward] == [sympy.expand(by_hand)] * 2


def _inside_by_enumeration(i_, r_, dilation=1):
    """(i, u) with 0 <= i + d*u - d*R <= I - 1: the products reading a value of X."""
    return sum(1 for i in range(i_) for u in range(2 * r_ + 1)
               if 0 <= i + dilation * (u - r_) <= i_ - 1)


def test_the_products_inside_the_axis_are_stated_beside_the_border_terms():
    layer = _layer(DEPTHWISE)
    (op,) = layer.ops
    reads = padded_reads(op.terms[0], layer, op.dims())
    assert reads.tensors == ("X",) and sympy.expand(reads.tuples - B * C * I * (2 * R + 1)) == 0
    for i_, r_ in [(8, 1), (8, 3), (3, 1), (3, 2), (2, 5), (1, 1), (1, 4), (7, 3)]:
        got = reads.inside.subs({B: 2, C: 3, I: i_, R: r_})
        assert got == 2 * 3 * _inside_by_enumeration(i_, r_)
        if i_ >= r_ + 1:  # each side loses 1 + 2 + ... + R products: I(2R + 1) - R(R + 1)
            assert got == 2 * 3 * (i_ * (2 * r_ + 1) - r_ * (r_ + 1))
    # 2-D: the rows and the columns each restricted, independently
    layer = _layer(CONV2D)
    (op,) = layer.ops
    reads = padded_reads(op.terms[0], layer, op.dims())
    for i_, j_, r_ in [(5, 4, 1), (2, 6, 2), (3, 3, 3)]:
        rows, cols = _inside_by_enumeration(i_, r_), _inside_by_enumeration(j_, r_)
        assert reads.inside.subs({B: 1, C: 2, O: 3, I: i_, J: j_, R: r_}) == 6 * rows * cols


def test_one_letter_shifted_by_a_dim_counts_its_inside_reads():
    # Y[b,s,d] = Z[b,s-R,d] + X[b,s,d], R zeros before Z's axis: s - R lands
    # inside for s = R .. S - 1, S - R of the S values when S > R, none else
    text = """dims: {B: b, S: s, D: d, R: r}
tensors:
  X: {shape: [B, S, D], role: input}
  Z: {shape: [B, S, D], role: input, pad: [0, [R, 0], 0]}
ops:
  - Y[b,s,d] = Z[b,s-R,d] + X[b,s,d]
"""
    layer = _layer(text)
    (op,) = layer.ops
    reads = padded_reads(op.terms[0], layer, op.dims())
    S, D = sympy.symbols("S D", positive=True, integer=True)
    for s_, r_ in [(5, 2), (2, 5), (3, 3), (1, 1), (6, 1)]:
        inside = sum(1 for s in range(s_) if 0 <= s - r_ <= s_ - 1)
        assert inside == max(0, s_ - r_)
        assert reads.inside.subs({B: 2, D: 3, S: s_, R: r_}) == 2 * 3 * inside


# -------------------------------------------------------------- PyTorch --

def _torch_flops(fn):
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


CASES = {
    # (declaration, dims, X shape, W shape, PyTorch's convolution of (x, w))
    "depthwise": (DEPTHWISE, {"B": 2, "C": 3, "I": 7, "R": 2}, (2, 3, 7), (3, 5),
                  lambda F, x, w: F.conv1d(x, w.unsqueeze(1), padding=2, groups=3)),
    "standard": (STANDARD, {"B": 2, "C": 3, "O": 4, "I": 6, "R": 1}, (2, 3, 6), (4, 3, 3),
                 lambda F, x, w: F.conv1d(x, w, padding=1)),
    "dilated": (DILATED, {"B": 2, "C": 2, "O": 3, "I": 9, "R": 2}, (2, 2, 9), (3, 2, 5),
                lambda F, x, w: F.conv1d(x, w, padding=4, dilation=2)),
    "2d": (CONV2D, {"B": 2, "C": 2, "O": 3, "I": 5, "J": 4, "R": 1}, (2, 2, 5, 4), (3, 2, 3, 3),
           lambda F, x, w: F.conv2d(x, w, padding=1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_gradients_and_flops_match_pytorch_convolution_with_padding_r(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    text, dims, x_shape, w_shape, conv = CASES[case]
    layer = _layer(text)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    values = forward(layer, {"X": x, "W": w}, dims)
    dy = rng.standard_normal(values["Y"].shape)
    grads = backward(symflops.derive(layer), values, {"dY": dy}, dims)
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    y = conv(F, tx, tw)  # PyTorch correlates: tap u reads position i + u - R, as written
    np.testing.assert_allclose(values["Y"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(grads["dX"], tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["dW"], tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    # FLOPs: PyTorch's counter counts the padded convolution, border terms included
    d = symflops.derive(layer)
    c = costs(d)
    at = {sympy.Symbol(k, positive=True, integer=True): v for k, v in dims.items()}
    forward_flops = int(c.flops_forward.subs(at))
    assert forward_flops == _torch_flops(lambda: conv(F, tx.detach(), tw.detach()))

    derived = {r.grad: int(_total(w).subs(at)) for r, w in zip(d.rules, c.backward)}
    counted = {}
    for name in ("dX", "dW"):  # each gradient alone: PyTorch's conv backward with one output
        a = torch.tensor(x, requires_grad=name == "dX")
        b = torch.tensor(w, requires_grad=name == "dW")
        y = conv(F, a, b)
        counted[name] = _torch_flops(lambda: y.backward(torch.tensor(dy)))
    assert derived["dX"] == counted["dX"] == forward_flops
    if case == "depthwise":
        # PyTorch's counter runs the weight gradient of a grouped convolution as one
        # convolution over all C x C channel pairs (its formula ignores groups): C
        # times the 2*B*C*I*(2R + 1) of the products there are.
        assert derived["dW"] == forward_flops and counted["dW"] == dims["C"] * forward_flops
    else:
        assert derived["dW"] == counted["dW"] == forward_flops


@pytest.mark.parametrize("text", [DEPTHWISE, CONV2D])
def test_verify_passes(text):
    pytest.importorskip("torch")
    report = verify(symflops.derive(_layer(text)), seed=4)
    assert report.passed
    assert all(r.torch_error is not None for r in report.rules)


def test_the_input_gradient_is_the_correlation_with_the_flipped_kernel():
    (dw, dx) = symflops.derive(_layer(DEPTHWISE)).rules
    assert dw.statement == "dW[c,u] = X[b,c,i+u-R] dY[b,c,i]"
    assert dx.statement == "dX[b,c,q] = dY[b,c,i] W[c,u] where q = i + u - R"
    # by hand, at R = 1: dX[q] = dY[q+1] W[0] + dY[q] W[1] + dY[q-1] W[2] (dY zero outside)
    layer = _layer(DEPTHWISE)
    dims = {"B": 1, "C": 1, "I": 4, "R": 1}
    x, w, dy = np.arange(4.0).reshape(1, 1, 4), np.array([[2.0, 3.0, 5.0]]), np.array([[[1.0, 10.0, 100.0, 1000.0]]])
    grads = backward(symflops.derive(layer), forward(layer, {"X": x, "W": w}, dims), {"dY": dy}, dims)
    padded = np.pad(dy[0, 0], 1)
    by_hand = [padded[q + 2] * 2 + padded[q + 1] * 3 + padded[q] * 5 for q in range(4)]
    assert np.allclose(grads["dX"][0, 0], by_hand)


def test_the_sheet_prints_the_dim_in_the_bracket_and_the_inside_count():
    from symflops.count.explain import explain
    from symflops.derive.patterns import with_patterns
    from symflops.sheets.render import render
    d = with_patterns(symflops.derive(_layer(DEPTHWISE)))
    md = render(d, explain(d, costs(d), ()), "md")
    assert "$[q = i + u - R]$" in md
    # the inside count, B C (I (2m - 1) - m (m - 1)) with m = min(I, R + 1)
    assert "of them read inside the axis" in md and r"\min\left(I, R + 1\right)" in md
    tex = render(d, explain(d, costs(d), ()), "tex")
    assert "i + u - R" in tex


def test_an_included_block_maps_the_dim_of_the_constant(tmp_path):
    (tmp_path / "block.yaml").write_text(DEPTHWISE)
    (tmp_path / "net.yaml").write_text("""
dims: {B: b, C: c, I: i}
tensors:
  X: {shape: [B, C, I], role: input}
ops:
  - include: block.yaml
    dims: {R: 2}
""")
    layer = symflops.load(tmp_path / "net.yaml")
    (shift,) = [f for f in layer.ops[0].terms[0].operands if f.is_shift]
    assert shift.affine.offset == -2
    assert costs(symflops.derive(layer)).flops_forward == 2 * B * C * I * 5


# -------------------------------------------------------------- refusals --

def _refused(x, op="Y[b,c,i] = X[b,c,i+u-R] W[c,u]", dims="{B: b, C: c, I: i, R: r}"):
    text = f"dims: {dims}\ntensors:\n  X: {x}\n  W: {{shape: [C, 2*R + 1], role: param}}\n" \
           f"ops:\n  - {op}\n"
    with pytest.raises(SymflopsError) as e:
        _layer(text)
    return e.value


def test_without_padding_the_advice_is_the_padding_that_keeps_the_axis():
    e = _refused("{shape: [B, C, I], role: input}")
    assert "reads before the start of X's axis 3: it goes down to -R" in str(e)
    assert "pad: [0, 0, [R, R]] keeps 'i' over the axis's I positions" in e.hint
    # padded in front only: the output would have I - R positions, not provably positive
    e = _refused("{shape: [B, C, I], role: input, pad: [0, 0, [R, 0]]}")
    assert "ranges over I - R" in str(e) and "pad: [0, 0, [R, R]]" in e.hint


def test_an_undeclared_capital_in_a_shift_is_advised_as_a_dim():
    e = _refused("{shape: [B, C, I], role: input, pad: [0, 0, [R, R]]}",
                 op="Y[b,c,i] = X[b,c,i+u-Q] W[c,u]")
    assert "leaves an index unbound" in str(e)
    assert "if 'Q' is a constant, declare it under 'dims:'" in e.hint


def test_an_index_of_dims_alone_is_refused():
    e = _refused("{shape: [B, C, I], role: input, pad: [0, 0, [R, R]]}",
                 op="Y[b,c] = X[b,c,R+1] W[c,u]")
    assert "the index R+1 of X holds no letter" in str(e)
