"""Reductions other than sums (issue 17, item 6): ``max_t``, max-pooling over a
window and mean pooling.

Every expected value comes from outside the code under test: NumPy and
PyTorch (``torch.amax``, ``torch.max(dim)``, ``F.max_pool1d``/``F.max_pool2d``
with their indices, ``torch.mean``, autograd) for values and gradients, and
FLOP counts worked out by hand in the comments from the conventions stated
in :mod:`symflops.ops.maximum` and :mod:`symflops.ops.mean` (a row of N
elements: N - 1 comparisons for a max; N - 1 adds and one multiply for a mean).
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.numeric import backward, forward
from symflops.core.errors import SymflopsError
from symflops.count.cost import costs

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROOT = Path(__file__).resolve().parent.parent
B, C, I, J, U, V, P, K, S, T, H, W, N = sympy.symbols("B C I J U V P K S T H W N",
                                                       positive=True, integer=True)


def layer(op, shapes, dims):
    return symflops.declare("t", dims={d: "" for d in dims},
                            tensors={n: {"shape": list(s), "role": "input"} for n, s in shapes.items()},
                            ops=[op])


def pool1d():
    return layer("Y[b,c,p] = max_k(X[b,c,p+k])", {"X": ("B", "C", "P + K - 1")}, "BCPK")


def shipped(name):
    return symflops.load(ROOT / "derivations" / f"{name}.yaml")


def grads_of(d, arrays, dims, upstream):
    """The derived rules run on ``arrays`` (forward first) with ``upstream`` gradients."""
    values = forward(d.layer, arrays, dims)
    return values, backward(d, values, upstream, dims)


# ------------------------------------------------------------- forward --

def test_max_forward_is_numpy_max_and_torch_amax_in_the_output_order():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 5))
    lay = layer("Y[u,s] = max_t(A[s,t,u])", {"A": ("S", "T", "U")}, "STU")
    y = forward(lay, {"A": a}, {"S": 3, "T": 4, "U": 5})["Y"]
    np.testing.assert_array_equal(y, a.max(axis=1).T)
    np.testing.assert_array_equal(y, torch.amax(torch.tensor(a), dim=1).T.numpy())


def test_max_over_two_letters_is_amax_over_both():
    a = np.random.default_rng(1).standard_normal((3, 4, 5))
    lay = layer("Y[s] = max_{t,u}(A[s,t,u])", {"A": ("S", "T", "U")}, "STU")
    values = forward(lay, {"A": a}, {"S": 3, "T": 4, "U": 5})
    np.testing.assert_array_equal(values["Y"], torch.amax(torch.tensor(a), dim=(1, 2)).numpy())
    # the saved positions point at the maximum
    np.testing.assert_array_equal(a[np.arange(3), values["I_Y_t"], values["I_Y_u"]], values["Y"])


def test_maxpool1d_values_and_indices_are_pytorchs():
    x = np.random.default_rng(2).standard_normal((2, 3, 8))  # P = 6 outputs, K = 3
    values = forward(pool1d(), {"X": x}, {"B": 2, "C": 3, "P": 6, "K": 3})
    y, where = F.max_pool1d(torch.tensor(x), 3, stride=1, return_indices=True)
    np.testing.assert_array_equal(values["Y"], y.numpy())
    # I_Y is the position on X's axis, as PyTorch's indices are
    np.testing.assert_array_equal(values["I_Y"], where.numpy())


def test_shipped_maxpool2d_is_f_max_pool2d():
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 7))  # I = 4, J = 4 with U = 3, V = 4
    dims = {"B": 2, "C": 3, "I": 4, "J": 4, "U": 3, "V": 4}
    values = forward(shipped("maxpool"), {"X": x}, dims)
    y, where = F.max_pool2d(torch.tensor(x), (3, 4), stride=1, return_indices=True)
    np.testing.assert_array_equal(values["Y"], y.numpy())
    # PyTorch's index is flat over the input's rows and columns: row * 7 + column
    np.testing.assert_array_equal(values["I_Y_q"] * 7 + values["I_Y_r"], where.numpy())


def test_mean_forward_is_torch_mean():
    x = np.random.default_rng(4).standard_normal((2, 5, 3, 4))
    values = forward(shipped("meanpool"), {"X": x, "W_fc": np.zeros((5, 2)), "b_fc": np.zeros(2)},
                     {"B": 2, "C": 5, "H": 3, "W": 4, "N": 2})
    np.testing.assert_allclose(values["Y"], torch.mean(torch.tensor(x), dim=(2, 3)).numpy(),
                               rtol=1e-15)


# ------------------------------------------------------------ backward --

def test_the_rules_read_the_saved_argmax():
    assert [r.statement for r in symflops.derive(pool1d()).rules] == [
        "dX[b,c,q] = dY[b,c,p] where q = I_Y[b,c,p]"]
    assert [r.statement for r in symflops.derive(shipped("maxpool")).rules] == [
        "dX[b,c,q,r] = dY[b,c,i,j] where q = I_Y_q[b,c,i,j], r = I_Y_r[b,c,i,j]"]
    d = symflops.derive(shipped("meanpool"))
    assert d.rules[-1].statement == "dX[b,c,h,w] = dY[b,c] / (H*W)"


def test_sympy_differentiates_max_to_a_heaviside_step():
    red = pool1d().ops[0].shown()
    b, c, p, k, q, b1, c1, q1 = sympy.symbols("b c p k q b' c' q'", integer=True)
    X, m = sympy.IndexedBase("X", real=True), sympy.IndexedBase("m", real=True)
    # Y[b,c,p] = Max(X[b,c,q], m) with m the window's other elements' maximum:
    # d/dX[b',c',q'] = Heaviside(X[b,c,q] - m) times the deltas of the element
    assert red.stage("forward") == sympy.Max(X[b, c, q], m[b, c, p, k])
    assert red.stage("derivative") == (sympy.Heaviside(X[b, c, q] - m[b, c, p, k])
                                       * sympy.KroneckerDelta(b, b1) * sympy.KroneckerDelta(c, c1)
                                       * sympy.KroneckerDelta(q, q1))
    # the step is 1 at the saved argmax: [q = I_Y[b,c,p]]
    assert red.stage("substituted") == (sympy.KroneckerDelta(q, sympy.IndexedBase("I_Y")[b, c, p])
                                        * sympy.KroneckerDelta(b, b1) * sympy.KroneckerDelta(c, c1)
                                        * sympy.KroneckerDelta(q, q1))


def test_maxpool_gradient_is_autograds():
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((2, 3, 9)), rng.standard_normal((2, 3, 5))  # P = 5, K = 5
    d = symflops.derive(pool1d())
    _, grads = grads_of(d, {"X": x}, {"B": 2, "C": 3, "P": 5, "K": 5}, {"dY": g})
    xt = torch.tensor(x, requires_grad=True)
    (F.max_pool1d(xt, 5, stride=1) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(grads["dX"], xt.grad.numpy(), rtol=0, atol=1e-14)


def test_mean_gradient_is_autograds():
    rng = np.random.default_rng(6)
    x, g = rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 3))
    d = symflops.derive(layer("Y[c,b] = mean_p(X[b,c,p])", {"X": ("B", "C", "P")}, "BCP"))
    _, grads = grads_of(d, {"X": x}, {"B": 3, "C": 2, "P": 4}, {"dY": g})
    xt = torch.tensor(x, requires_grad=True)
    (xt.mean(dim=2).T * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(grads["dX"], xt.grad.numpy(), rtol=1e-14)


def test_ties_send_the_gradient_to_the_first_maximum_as_torch_max_does():
    a = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    d = symflops.derive(layer("Y[s] = max_t(A[s,t])", {"A": ("S", "T")}, "ST"))
    values, grads = grads_of(d, {"A": a}, {"S": 2, "T": 4}, {"dY": np.array([1.0, 5.0])})
    assert values["I_Y"].tolist() == [1, 0]
    at = torch.tensor(a, requires_grad=True)
    (torch.max(at, dim=1).values * torch.tensor([1.0, 5.0])).sum().backward()
    np.testing.assert_array_equal(grads["dA"], at.grad.numpy())
    np.testing.assert_array_equal(grads["dA"], [[0, 1, 0, 0], [5, 0, 0, 0]])
    # not amax's convention, which splits the gradient among the ties
    at.grad = None
    (torch.amax(at, dim=1) * torch.tensor([1.0, 5.0])).sum().backward()
    assert not np.array_equal(grads["dA"], at.grad.numpy())


def test_pooling_ties_follow_max_pool1d():
    x = np.array([[[1.0, 3.0, 3.0, 0.0, 3.0]]])  # windows of 2: [1,3] [3,3] [3,0] [0,3]
    d = symflops.derive(pool1d())
    values, grads = grads_of(d, {"X": x}, {"B": 1, "C": 1, "P": 4, "K": 2},
                             {"dY": np.ones((1, 1, 4))})
    xt = torch.tensor(x, requires_grad=True)
    y, where = F.max_pool1d(xt, 2, stride=1, return_indices=True)
    y.sum().backward()
    np.testing.assert_array_equal(values["I_Y"], where.numpy())  # [1, 1, 2, 4]
    np.testing.assert_array_equal(grads["dX"], xt.grad.numpy())  # [0, 2, 1, 0, 1]
    assert grads["dX"].tolist() == [[[0, 2, 1, 0, 1]]]


# --------------------------------------------------------------- counts --

def test_max_counts_by_hand():
    c = costs(symflops.derive(layer("Y[s] = max_t(A[s,t])", {"A": ("S", "T")}, "ST")))
    # forward: T - 1 comparisons per row, S rows; no matmul-type work
    assert c.flops_forward == 0 and sympy.expand(c.elementwise_forward - S * (T - 1)) == 0
    # backward dA[s,t] = dY[s] [t = I_Y[s]]: each dY lands on an element of its own, a copy
    assert c.flops_backward == 0 and c.elementwise_backward == 0
    # saved: one index per row
    assert [(s.name, s.elements) for s in c.saved] == [("I_Y", S)]


def test_maxpool1d_counts_by_hand():
    c = costs(symflops.derive(pool1d()))
    # forward: K - 1 comparisons for each of the B*C*P windows
    assert sympy.expand(c.elementwise_forward - B * C * P * (K - 1)) == 0
    # backward: the scatter adds each of the B*C*P elements of dY into dX
    assert sympy.expand(c.elementwise_backward - B * C * P) == 0
    assert c.flops_forward == c.flops_backward == 0


def test_shipped_maxpool_at_googlenet_inception_3a():
    c = costs(symflops.derive(shipped("maxpool")))
    at = {"B": 32, "C": 192, "I": 28, "J": 28, "U": 3, "V": 3}
    value = lambda e: int(e.subs({sympy.Symbol(k, positive=True, integer=True): v for k, v in at.items()}))
    assert c.params == 0
    # forward: 3*3 - 1 = 8 comparisons per output, 32*192*28*28 = 4,816,896 outputs
    assert value(c.elementwise_forward) == 38_535_168
    # backward: one add per element of dY
    assert value(c.elementwise_backward) == 4_816_896
    assert value(c.flops_forward) == value(c.flops_backward) == 0
    # saved: two integers (row and column of the maximum) per output
    assert value(c.activations) == 9_633_792


def test_shipped_meanpool_at_resnet50s_head():
    d = symflops.derive(shipped("meanpool"))
    c = costs(d)
    at = {"B": 256, "C": 2048, "H": 7, "W": 7, "N": 1000}
    value = lambda e: int(e.subs({sympy.Symbol(k, positive=True, integer=True): v for k, v in at.items()}))
    # params: the fc's 2048 x 1000 weights and 1000 biases
    assert value(c.params) == 2_049_000
    # forward: the fc, 2*B*C*N = 2*256*2048*1000; the pool is elementwise:
    # 49 - 1 adds and 1 multiply per (b, c), 256*2048*49 = 25,690,112, plus the bias, 256*1000
    assert value(c.flops_forward) == 1_048_576_000
    assert value(c.elementwise_forward) == 25_690_112 + 256_000
    # backward: dW_fc and dY, 2*B*C*N each; db_fc adds 256*1000; dX = dY / 49 multiplies
    # each dY once (256*2048) and broadcasts it
    assert value(c.flops_backward) == 2_097_152_000
    assert value(c.elementwise_backward) == 256_000 + 524_288
    assert d.saved == ("Y",)  # the mean saves nothing; the fc's dW_fc reads Y


# -------------------------------------------------------------- verify --

# ------------------------------------------------------------- refusals --

DECLARATION = """name: bad
title: refused
dims: {{B: b, C: c, P: p, S: s, T: t}}
tensors:
  A: {{shape: [S, T], role: input}}
  X: {{shape: [B, C, P], role: input}}
ops:
  - {op}
"""


@pytest.mark.parametrize("op,column,fragment", [
    # columns of the line "  - OP" (1-based): the call, the output, a clause, the shifted letter
    ("Y[s] = max_z(A[s,t])", 12, "max over 'z', an index A[...] does not have"),
    ("Y[s,t] = max_t(A[s,t])", 5, "the output Y[s,t] keeps the reduced index 't'"),
    ("Y[s] = max_t(A[s,t]) where t <= s", 32, "a where-clause on max_t(...) is not supported"),
    ("Y[s] = 2 * max_t(A[s,t])", 16, "max_t(...) must be the whole right side"),
    ("Y[b,c] = max_k(X[b,c,c+k])", 28, "the window 'k' of max_k(...) has no extent"),
    ("Y[b] = mean_c(X[b,c,p])", 5, "the output Y[b] must carry the argument's letters other than c"),
    ("Y[b,c] = mean_p(X[b,c,p], 2)", 31, "mean_p takes one tensor"),
])
def test_refusals_name_the_construct_and_its_place(tmp_path, op, column, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(DECLARATION.format(op=op))
    with pytest.raises(SymflopsError) as caught:
        symflops.load(path)
    assert fragment in caught.value.message
    assert (caught.value.span.line, caught.value.span.column) == (8, column)


def test_mean_over_a_window_is_refused_by_name(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(DECLARATION.format(op="Y[b,c,p] = mean_k(X[b,c,p+k])").replace(
        "P: p,", "P: p, K: k,").replace("[B, C, P]", "[B, C, P + K - 1]"))
    with pytest.raises(SymflopsError, match="mean over a window .* is not supported") as caught:
        symflops.load(path)
    assert (caught.value.span.line, caught.value.span.column) == (8, 29)


def test_a_shift_outside_a_window_call_is_still_refused():
    """The window hook binds only a letter the call reduces: the einsum
    ``Y[b,c,p] = X[b,c,p+k]`` keeps its refusal."""
    with pytest.raises(SymflopsError, match="the shift p\\+k leaves an index unbound"):
        layer("Y[b,c,p] = X[b,c,p+k]", {"X": ("B", "C", "P + K - 1")}, "BCPK")


# ------------------------------------------------ stride 2 (ResNet-50) --

def pool2d_stride2():
    return layer("Y[b,c,i,j] = max_{u,v}(X[b,c,2*i+u,2*j+v])",
                 {"X": ("B", "C", "2*I + U - 2", "2*J + V - 2")}, "BCIJUV")


def test_a_strided_max_pool_is_f_max_pool2d_with_stride_2():
    """ResNet-50's stem pool is 3 x 3 with stride 2: the same statement with
    strided indices, forward and gradient as PyTorch's."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 9, 11))  # I = 4, J = 5 with U = V = 3: 2*4 + 1 = 9, 2*5 + 1 = 11
    g = rng.standard_normal((2, 3, 4, 5))
    dims = {"B": 2, "C": 3, "I": 4, "J": 5, "U": 3, "V": 3}
    d = symflops.derive(pool2d_stride2())
    values, grads = grads_of(d, {"X": x}, dims, {"dY": g})
    xt = torch.tensor(x, requires_grad=True)
    y = F.max_pool2d(xt, 3, stride=2)
    np.testing.assert_array_equal(values["Y"], y.detach().numpy())
    (y * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(grads["dX"], xt.grad.numpy(), rtol=0, atol=1e-14)


def test_a_strided_max_pool_counts_by_hand():
    c = costs(symflops.derive(pool2d_stride2()))
    # forward: U*V - 1 comparisons for each of the B*C*I*J windows
    assert sympy.expand(c.elementwise_forward - B * C * I * J * (U * V - 1)) == 0
    # backward: the windows overlap (stride 2 < 3), so each dY element is added into dX
    assert sympy.expand(c.elementwise_backward - B * C * I * J) == 0
