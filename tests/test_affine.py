"""Affine index expressions: strides ``X[b,c,2*i+u]``, dilations ``X[b,c,p+2*k]``,
offsets ``H[b,s-1,d]``, differences ``bias[n,s-t]`` and patches ``X[b,c,P*i+u]``.

Expected values are written by hand in each test (columns counted on the
statement text, counts derived in the comments).
"""

import re

import pytest

from symflops.core.errors import SymflopsError
from symflops.lang.statement import AffineTerm, parse_statement


def _shift(text, ref=0):
    (shift,) = parse_statement(text).refs[ref].shifts
    return shift


# --- grammar ---------------------------------------------------------------

def test_a_stride_is_read_with_its_coefficient_and_columns():
    s = _shift("Y[b,o,i] = X[b,c,2*i+u] W[o,c,u]")
    # "2*i+u" starts at column 17; i is at 19, u at 21
    assert (s.position, s.column, s.text, s.constant) == (2, 17, "2*i+u", 0)
    assert s.terms == (AffineTerm("i", 19, 2), AffineTerm("u", 21, 1))
    assert not s.is_plain


def test_a_dilation_an_offset_a_difference_and_a_patch():
    assert _shift("Y[b,c,p] = X[b,c,p+2*k] W[c,k]").terms == (
        AffineTerm("p", 17), AffineTerm("k", 21, 2))
    offset = _shift("H[b,s,d] = A[d] H[b,s-1,d]", ref=1)
    assert (offset.terms, offset.constant, offset.column) == ((AffineTerm("s", 20),), -1, 20)
    diff = _shift("A[n,s,t] = bias[n,s-t]")
    assert diff.terms == (AffineTerm("s", 18), AffineTerm("t", 20, 1, negative=True))
    patch = _shift("Y[b,i] = X[b,P*i+u]")
    assert patch.terms == (AffineTerm("i", 15, "P"), AffineTerm("u", 17))
    # constants add up wherever they stand; a coefficient may follow its letter
    odd = _shift("Y[s] = B[k*2+s+1-3]")
    assert (odd.terms, odd.constant) == ((AffineTerm("k", 9, 2), AffineTerm("s", 13)), -2)


def test_the_two_letter_shift_is_read_as_before():
    s = _shift("Y[b,o,p] = X[b,c,p+k] W[o,c,k]")
    assert s.is_plain and (s.left, s.left_column, s.right, s.right_column) == ("p", 17, "k", 19)


@pytest.mark.parametrize("index, why", [
    ("p*k*2", "a term is a letter times one coefficient"),
    ("p/2", "'/' stands where '+' or '-' must"),
    ("(p+k)", "only whole numbers, dims and letters"),
    ("p**2", "'**' stands where"),
    ("p+0.5", "a number in an index is a whole number"),
    ("p+", "the expression ends after a sign"),
    ("2*3+p", "a product of two numbers"),
    ("0*p", "a coefficient is a positive whole number"),
    ("1+2", "an index holds at least one letter"),
])
def test_other_arithmetic_is_refused_by_name_at_its_column(index, why):
    with pytest.raises(SymflopsError) as e:
        parse_statement(f"Y[p] = X[{index}]")
    assert str(e.value.message) == f"index arithmetic of the form {index} in X[...] is not supported"
    assert why in e.value.hint


def test_a_product_of_two_letters_is_refused_once_the_dims_are_known():
    import symflops
    with pytest.raises(SymflopsError, match=r"index arithmetic of the form p\*k in X\[\.\.\.\] "
                       r"is not supported") as e:
        symflops.declare("bad", dims={"P": "positions", "K": "kernel"}, tensors={
            "X": {"shape": ["P"], "role": "input"}, "W": {"shape": ["K"], "role": "param"}},
            ops=["Y[p] = X[p*k] W[k]"])
    assert "'p' is no dim" in e.value.hint


# --- shared helpers ------------------------------------------------------------

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import sympy  # noqa: E402

import symflops  # noqa: E402
from symflops.checks.numeric import backward, forward  # noqa: E402
from symflops.count.cost import costs  # noqa: E402
from gradcheck import gradient_errors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
B, C, O, I, J, U, V, P, K, D, S, N = sympy.symbols("B C O I J U V P K D S N", positive=True,
                                                  integer=True)


def shipped(name):
    return symflops.load(ROOT / "derivations" / f"{name}.yaml")


def counts(layer):
    c = costs(symflops.derive(layer))
    return c, [sympy.expand(r.flops) for r in c.backward]


def torch_flops(fn):
    """FLOPs PyTorch's own counter gives ``fn`` (its conv formula: 2 per multiply-add)."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def run(layer, arrays, dims, dy):
    values = forward(layer, arrays, dims)
    return values, backward(symflops.derive(layer), values, dy, dims)


# --- strided 2-D convolution ---------------------------------------------------

def test_strided_conv_counts_by_hand():
    layer = shipped("conv2d_strided")
    # X's rows are declared 2*I + U - 2: the last output row i = I - 1 reads up to 2(I-1) + U - 1.
    assert layer.tensor("Y").shape == (B, O, I, J)
    c, rules = counts(layer)
    assert c.params == O * C * U * V
    # forward: B*O*I*J outputs, each C*U*V multiply-adds: 2*B*O*C*I*J*U*V
    assert sympy.expand(c.flops_forward - 2 * B * O * C * I * J * U * V) == 0
    # dW[o,c,u,v] sums (b,i,j); dX[b,c,q,r] scatters each (b,o,c,i,j,u,v) once: same count
    assert rules == [2 * B * O * C * I * J * U * V] * 2
    assert c.elementwise_forward == 0 and c.elementwise_backward == 0


def test_strided_conv_counts_match_enumeration_and_pytorch():
    torch = pytest.importorskip("torch")
    sizes = {"B": 2, "C": 3, "O": 2, "I": 3, "J": 4, "U": 3, "V": 2}
    c, _ = counts(shipped("conv2d_strided"))
    # a direct loop over output positions and the kernel, every read inside the image
    h, w = 2 * 3 + 3 - 2, 2 * 4 + 2 - 2
    n = sum(1 for b in range(2) for o in range(2) for i in range(3) for j in range(4)
            for cc in range(3) for u in range(3) for v in range(2)
            if 2 * i + u < h and 2 * j + v < w)
    value = c.flops_forward.subs({sympy.Symbol(k, positive=True, integer=True): x
                                  for k, x in sizes.items()})
    assert value == 2 * n
    x = torch.zeros(2, 3, h, w, dtype=torch.float64)
    k = torch.zeros(2, 3, 3, 2, dtype=torch.float64)
    assert torch_flops(lambda: torch.nn.functional.conv2d(x, k, stride=2)) == 2 * n


def _against_torch(name, dims, shapes, conv, seed):
    """The shipped layer's forward and gradients against PyTorch's ``conv(X, W)``
    and its autograd, at random X, W, dY of ``shapes``; returns dY, W and the
    derived gradients for further checks."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x, w, dy = (rng.standard_normal(s) for s in shapes)
    values, grads = run(shipped(name), {"X": x, "W": w}, dims, {"dY": dy})
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    y = conv(tx, tw)
    assert np.allclose(values["Y"], y.detach().numpy())
    y.backward(torch.tensor(dy))
    assert np.allclose(grads["dX"], tx.grad.numpy()) and np.allclose(grads["dW"], tw.grad.numpy())
    return torch.tensor(dy), torch.tensor(w), grads


def test_strided_conv_forward_and_gradients_match_pytorch():
    torch = pytest.importorskip("torch")
    dims = {"B": 2, "C": 3, "O": 4, "I": 3, "J": 2, "U": 3, "V": 2}
    dy, w, grads = _against_torch("conv2d_strided", dims, ((2, 3, 7, 4), (4, 3, 3, 2), (2, 4, 3, 2)),
                                  lambda x, w: torch.nn.functional.conv2d(x, w, stride=2), 0)
    # The input gradient is the transposed convolution of dY with the same kernel.
    transposed = torch.nn.functional.conv_transpose2d(dy, w, stride=2)
    assert np.allclose(grads["dX"], transposed.numpy())


def test_strided_conv_gradients_match_finite_differences():
    errors = gradient_errors(shipped("conv2d_strided"), seed=1)
    assert set(errors) == {"X", "W"} and max(errors.values()) < 1e-6, errors


def test_the_rules_print_the_scatter_as_a_where_clause():
    d = symflops.derive(shipped("conv2d_strided"))
    assert [r.statement for r in d.rules] == [
        "dW[o,c,u,v] = X[b,c,2*i+u,2*j+v] dY[b,o,i,j]",
        "dX[b,c,q,r] = dY[b,o,i,j] W[o,c,u,v] where q = 2*i + u, r = 2*j + v",
    ]


# --- in range, or refused --------------------------------------------------------

def _declare(op, x, w=("O", "C", "U"), extra=None):
    tensors = {"X": {"shape": list(x), "role": "input"}, "W": {"shape": list(w), "role": "param"}}
    tensors.update(extra or {})
    return symflops.declare("t", dims={k: k for k in "BCOIUSN"}, tensors=tensors, ops=[op])


def test_an_index_with_every_letter_bound_is_proved_in_range():
    # 2*i+u over i < I, u < U reaches 2I + U - 3: an axis of 2I + U - 2 holds it, a longer one too
    for axis in ("2*I + U - 2", "2*I + U"):
        layer = _declare("Y[b,o,i] = X[b,c,2*i+u] W[o,c,u] M[i]", ("B", "C", axis),
                         extra={"M": {"shape": ["I"], "role": "input"}})
        assert counts(layer)[0].flops_forward == 2 * B * O * C * I * U


def test_an_index_past_the_axis_is_refused_with_the_size_it_needs():
    with pytest.raises(SymflopsError) as e:
        _declare("Y[b,o,i] = X[b,c,2*i+u] W[o,c,u] M[i]", ("B", "C", "I + U - 1"),
                 extra={"M": {"shape": ["I"], "role": "input"}})
    assert e.value.message == ("the shift 2*i+u runs past the axis of X: X's axis 3 has "
                               "I + U - 1 positions, 2*i+u reaches index 2*I + U - 3")
    assert "declare X as [B, C, 2*I + U - 2]" in e.value.hint


def test_an_axis_that_is_not_a_whole_number_of_strides_is_refused():
    # (2*I + U - 1 - U)/2 + 1 = I + 1/2: no whole number of output positions
    with pytest.raises(SymflopsError, match="ranges over I \\+ 1/2, which is not a whole number"):
        _declare("Y[b,o,i] = X[b,c,2*i+u] W[o,c,u]", ("B", "C", "2*I + U - 1"))


# --- dilated causal 1-D convolution --------------------------------------------

@pytest.mark.parametrize("name", ["conv1d_dilated_causal", "conv1d_causal"])
def test_causal_convs_count_the_border_terms_by_hand(name):
    # conv1d_dilated_causal: X declared left-padded, P + 2(K-1) positions, p+2*k reaching
    # P - 1 + 2(K - 1); conv1d_causal: X of P positions with pad [K - 1, 0], p-k from -(K-1).
    layer = shipped(name)
    assert layer.tensor("Y").shape == (B, O, P)  # as many outputs as the sequence has steps
    c, rules = counts(layer)
    assert c.params == O * C * K
    # every (b, o, c, p, k) is one multiply-add, the products with padding zeros included
    assert c.flops_forward == 2 * B * O * C * P * K
    assert rules == [2 * B * O * C * P * K] * 2


def test_dilated_causal_conv_border_and_nonzero_terms_by_enumeration():
    torch = pytest.importorskip("torch")
    b, c, o, p, k = 2, 3, 2, 7, 3
    pad = 2 * (k - 1)
    every = sum(1 for _ in range(b * o * c) for q in range(p) for t in range(k))
    # tap t reads real data iff p + 2t >= 2(K - 1): P*K - K*(K - 1) pairs (P >= 2(K-1))
    nonzero = b * o * c * sum(1 for q in range(p) for t in range(k) if q + 2 * t >= pad)
    assert nonzero == b * o * c * (p * k - k * (k - 1))
    c_, _ = counts(shipped("conv1d_dilated_causal"))
    sizes = dict(zip((B, C, O, P, K), (b, c, o, p, k)))
    assert c_.flops_forward.subs(sizes) == 2 * every
    x = torch.zeros(b, c, p + pad, dtype=torch.float64)
    w = torch.zeros(o, c, k, dtype=torch.float64)
    assert torch_flops(lambda: torch.nn.functional.conv1d(x, w, dilation=2)) == 2 * every


def test_dilated_causal_conv_matches_pytorch_on_the_padded_input():
    torch = pytest.importorskip("torch")
    layer = shipped("conv1d_dilated_causal")
    rng = np.random.default_rng(2)
    dims = {"B": 2, "C": 3, "O": 4, "P": 6, "K": 3}
    raw = rng.standard_normal((2, 3, 6))
    x = np.pad(raw, ((0, 0), (0, 0), (4, 0)))  # causal: 2(K-1) zeros in front
    w, dy = rng.standard_normal((4, 3, 3)), rng.standard_normal((2, 4, 6))
    values, grads = run(layer, {"X": x, "W": w}, dims, {"dY": dy})
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    y = torch.nn.functional.conv1d(tx, tw, dilation=2)
    assert np.allclose(values["Y"], y.detach().numpy())
    # causal: output step p depends on raw steps <= p only
    assert np.allclose(values["Y"][:, :, 0], np.einsum("bc,oc->bo", raw[:, :, 0], w[:, :, 2]))
    y.backward(torch.tensor(dy))
    assert np.allclose(grads["dX"], tx.grad.numpy()) and np.allclose(grads["dW"], tw.grad.numpy())


# --- ViT patch embedding --------------------------------------------------------

def test_patch_embedding_counts_by_hand():
    layer = shipped("vit_patch_embedding")
    assert layer.tensor("Y").shape == (B, I, J, D)
    c, rules = counts(layer)
    assert c.params == C * P * P * D + D
    # B*I*J*D outputs, each C*P*P multiply-adds; the bias adds one per output (elementwise)
    assert c.flops_forward == 2 * B * I * J * D * C * P**2
    assert c.elementwise_forward == B * I * J * D
    # dW and dX each touch every (b, i, j, d, c, u, v) once; dbias sums B*I*J*D elements
    assert sorted(rules, key=str) == sorted([2 * B * I * J * D * C * P**2] * 2 + [0], key=str)
    assert c.elementwise_backward == B * I * J * D
    # ViT-B/16: 3*16*16*768 + 768 parameters, as the paper's patch projection
    assert c.params.subs({C: 3, P: 16, D: 768}) == 590_592


def test_patch_embedding_matches_a_stride_p_convolution():
    torch = pytest.importorskip("torch")
    layer = shipped("vit_patch_embedding")
    rng = np.random.default_rng(3)
    dims = {"B": 2, "C": 3, "P": 2, "I": 3, "J": 2, "D": 4}
    x, w, bias = (rng.standard_normal(s) for s in ((2, 3, 6, 4), (3, 2, 2, 4), (4,)))
    dy = rng.standard_normal((2, 3, 2, 4))
    values, grads = run(layer, {"X": x, "W": w, "bias": bias}, dims, {"dY": dy})
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, bias))
    y = torch.nn.functional.conv2d(tx, tw.permute(3, 0, 1, 2), tb, stride=2).permute(0, 2, 3, 1)
    assert np.allclose(values["Y"], y.detach().numpy())
    y.backward(torch.tensor(dy))
    for name, t in (("dX", tx), ("dW", tw), ("dbias", tb)):
        assert np.allclose(grads[name], t.grad.numpy()), name
    flops = torch_flops(lambda: torch.nn.functional.conv2d(tx, tw.permute(3, 0, 1, 2), stride=2))
    assert flops == 2 * 2 * 3 * 2 * 4 * 3 * 2 * 2  # 2*B*I*J*D*C*P*P


# --- transposed convolution, an affine index on the output ------------------------

def test_transposed_conv_counts_by_hand():
    layer = shipped("conv_transpose2d")
    # the output holds 2*(I - 1) + (U - 1) + 1 = 2I + U - 2 rows: PyTorch's (I - 1)*2 + U
    assert layer.tensor("Y").shape == (B, O, 2 * I + U - 2, 2 * J + V - 2)
    c, rules = counts(layer)
    assert c.params == C * O * U * V
    # one multiply-add per (b, o, c, i, j, u, v), added into Y[b, o, 2i+u, 2j+v]
    assert c.flops_forward == 2 * B * O * C * I * J * U * V
    assert rules == [2 * B * O * C * I * J * U * V] * 2


def test_transposed_conv_input_gradient_is_the_strided_convolution():
    d = symflops.derive(shipped("conv_transpose2d"))
    assert [r.statement for r in d.rules] == [
        "dW[c,o,u,v] = X[b,c,i,j] dY[b,o,2*i+u,2*j+v]",
        "dX[b,c,i,j] = dY[b,o,2*i+u,2*j+v] W[c,o,u,v]",
    ]


def test_transposed_conv_matches_pytorch():
    torch = pytest.importorskip("torch")
    dims = {"B": 2, "C": 3, "O": 2, "I": 3, "J": 2, "U": 3, "V": 2}
    conv = (lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2))
    dy, w, grads = _against_torch("conv_transpose2d", dims,
                                  ((2, 3, 3, 2), (3, 2, 3, 2), (2, 2, 7, 4)), conv, 4)
    # its input gradient is conv2d of dY with the same kernel, stride 2
    strided = torch.nn.functional.conv2d(dy, w, stride=2)
    assert np.allclose(grads["dX"], strided.numpy())
    x = torch.zeros(2, 3, 3, 2, dtype=torch.float64)
    assert torch_flops(lambda: conv(x, w)) == 2 * 2 * 2 * 3 * 3 * 2 * 3 * 2  # 2*B*O*C*I*J*U*V


def test_transposed_conv_gradients_match_finite_differences():
    errors = gradient_errors(shipped("conv_transpose2d"), seed=0)
    assert set(errors) == {"X", "W"} and max(errors.values()) < 1e-6, errors


def test_an_output_index_term_must_carry_its_letters():
    with pytest.raises(SymflopsError, match="this term does not carry 'i' of the output index"):
        _declare("Y[b,o,2*i+u] = X[b,c,i] W[o,c,u] + W[o,c,u]", ("B", "C", "I"))


# --- a relative-position table: a difference in a lookup ----------------------------

def _relative(op="A[n,s,t] = Q[n,s,e] K[n,t,e] + bias[n,s-t] where t <= s"):
    return symflops.declare("rel", dims={"N": "heads", "S": "positions", "E": "width"}, tensors={
        "Q": {"shape": ["N", "S", "E"], "role": "input"},
        "K": {"shape": ["N", "S", "E"], "role": "input"},
        "bias": {"shape": ["N", "S"], "role": "param"}}, ops=[op])


def test_a_relative_position_bias_counts_the_causal_pairs():
    c, rules = counts(_relative())
    E = sympy.Symbol("E", positive=True, integer=True)
    pairs = S * (S + 1) / 2  # (s, t) with t <= s
    # Q K^T over the causal pairs: N*pairs outputs, E multiply-adds each
    assert sympy.expand(c.flops_forward - 2 * N * E * pairs) == 0
    # the two terms added, one add per causal pair: both terms carry t <= s, so
    # A[n,s,t] is 0 outside the triangle and only its N*pairs elements are added
    assert sympy.expand(c.elementwise_forward - N * pairs) == 0
    # dbias[n,q] sums dA over the pairs with s - t = q: one add per pair read
    assert sympy.expand(c.backward[0].elementwise - N * pairs) == 0
    assert sympy.expand(sum(rules) - 4 * N * E * pairs) == 0


def test_a_relative_position_bias_gradients_and_values():
    layer = _relative()
    errors = gradient_errors(layer, seed=0)
    assert set(errors) == {"Q", "K", "bias"} and max(errors.values()) < 1e-6, errors
    rng = np.random.default_rng(5)
    q, k, bias = (rng.standard_normal(s) for s in ((2, 4, 3), (2, 4, 3), (2, 4)))
    values = forward(layer, {"Q": q, "K": k, "bias": bias}, {"N": 2, "S": 4, "E": 3})
    s, t = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    expected = (np.einsum("nse,nte->nst", q, k) + bias[:, np.clip(s - t, 0, 3)]) * (t <= s)
    assert np.allclose(values["A"], expected)


def test_a_difference_without_its_condition_is_refused():
    # s - t over s, t < S goes down to 1 - S: before the start of bias's axis
    with pytest.raises(SymflopsError, match="the index s-t of bias reads before the start of "
                       "bias's axis 2: it goes down to 1 - S"):
        _relative("A[n,s,t] = Q[n,s,e] K[n,t,e] + bias[n,s-t]")


# --- padding: an index may fall outside its axis, reading zero --------------------

def test_a_pad_is_read_per_axis():
    assert shipped("conv1d_causal").tensor("X").pad == ((0, 0), (0, 0), (K - 1, 0))


def test_causal_conv_through_padding_matches_pytorch_and_enumeration():
    torch = pytest.importorskip("torch")
    layer = shipped("conv1d_causal")
    b, c, o, p, k = 2, 3, 4, 6, 3
    rng = np.random.default_rng(6)
    x, w, dy = (rng.standard_normal(s) for s in ((b, c, p), (o, c, k), (b, o, p)))
    values, grads = run(layer, {"X": x, "W": w}, dict(zip("BCOPK", (b, c, o, p, k))), {"dY": dy})
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    # PyTorch's conv1d correlates: tap j of its kernel reads step p - (K-1) + j = p - k with
    # k = K - 1 - j, so its kernel is W flipped along k
    run_conv = (lambda: torch.nn.functional.conv1d(torch.nn.functional.pad(tx, (k - 1, 0)),
                                                   tw.flip(-1)))
    y = run_conv()
    assert np.allclose(values["Y"], y.detach().numpy())
    y.backward(torch.tensor(dy))
    assert np.allclose(grads["dX"], tx.grad.numpy()) and np.allclose(grads["dW"], tw.grad.numpy())
    every = b * o * c * p * k
    counted = costs(symflops.derive(layer)).flops_forward.subs(dict(zip((B, C, O, P, K),
                                                                         (b, c, o, p, k))))
    assert counted == 2 * every == torch_flops(run_conv)
    # the products with a real input: p - k >= 0, P*K - K*(K-1)/2 pairs (P >= K - 1)
    real = b * o * c * sum(1 for q in range(p) for t in range(k) if q - t >= 0)
    assert real == b * o * c * (p * k - k * (k - 1) // 2)


def test_causal_conv_through_padding_gradients_match_finite_differences():
    errors = gradient_errors(shipped("conv1d_causal"), seed=2)
    assert set(errors) == {"X", "W"} and max(errors.values()) < 1e-6, errors


def _offset(pad, op="Y[b,s,d] = X[b,s-1,d] G[d]"):
    x = {"shape": ["B", "S", "D"], "role": "input"}
    if pad is not None:
        x["pad"] = pad
    return symflops.declare("offset", dims={"B": "b", "S": "s", "D": "d"}, tensors={
        "X": x, "G": {"shape": ["D"], "role": "param"}}, ops=[op])


def test_an_offset_reads_the_zero_before_the_axis():
    with pytest.raises(SymflopsError, match="goes down to -1") as e:
        _offset(None)
    assert "pad: [0, [1, 0], 0]" in e.value.hint
    # s on the output only takes every value that keeps s - 1 on the padded axis
    # -1 .. S - 1: S + 1 of them (a valid read of the padded axis)
    assert _offset([0, [1, 0], 0]).tensor("Y").shape == (B, S + 1, D)
    # bound by the second term, s < S: the first term reads X[b,-1,d] = 0 at s = 0
    layer = _offset([0, [1, 0], 0], "Y[b,s,d] = X[b,s-1,d] G[d] + X[b,s,d]")
    assert layer.tensor("Y").shape == (B, S, D)
    # a multiply per (b, s, d), the s = 0 products with the zero included, and the add
    assert counts(layer)[0].elementwise_forward == 2 * B * S * D
    x, g = np.arange(12.0).reshape(1, 4, 3), np.array([1.0, 2.0, 3.0])
    y = forward(layer, {"X": x, "G": g}, {"B": 1, "S": 4, "D": 3})["Y"]
    assert np.allclose(y[0, 0], x[0, 0]) and np.allclose(y[0, 1:], x[0, :3] * g + x[0, 1:])


@pytest.mark.parametrize("pad, fragment", [
    ([0, 0], "the pad of 'X' must be a list of 3 entries"),
    ([0, [-1, 0], 0], "a padding of 'X' is -1, which is not proved at least 0"),
    ([0, [1], 0], "a pad entry of 'X' is 0 or [before, after]"),
    ([0, ["D/2", 0], 0], "not a whole number of positions"),
])
def test_a_bad_pad_is_refused(pad, fragment):
    with pytest.raises(SymflopsError, match=re.escape(fragment)):
        _offset(pad)


def test_the_products_inside_the_axis_are_counted_beside_the_border_terms():
    from symflops.count.padding import padded_reads
    layer = shipped("conv1d_causal")
    op = layer.ops[0]
    (reads,) = [padded_reads(e, layer, op.dims()) for e in op.terms]
    assert reads.tensors == ("X",) and reads.tuples == B * O * C * P * K
    for b, c, o, p, k in ((2, 3, 2, 6, 3), (1, 2, 2, 2, 4)):  # P >= K - 1, and P < K
        real = b * o * c * sum(1 for q in range(p) for t in range(k) if q - t >= 0)
        assert reads.inside.subs(dict(zip((B, C, O, P, K), (b, c, o, p, k)))) == real
    # one letter: s - 1 reads the zero at s = 0 only, (S - 1) of the S values of s inside
    layer = _offset([0, [1, 0], 0], "Y[b,s,d] = X[b,s-1,d] G[d] + X[b,s,d]")
    reads = padded_reads(layer.ops[0].terms[0], layer, layer.ops[0].dims())
    assert reads.tuples == B * S * D and sympy.expand(reads.inside - B * D * (S - 1)) == 0
    assert padded_reads(layer.ops[0].terms[1], layer, layer.ops[0].dims()) is None


def test_an_included_block_maps_the_dims_of_its_coefficients_and_padding(tmp_path):
    # the patch side P of vit_patch_embedding mapped to 2*Q, and K of conv1d_causal to 3:
    # the coefficient of P*i and the pad K - 1 follow the mapping
    for name in ("vit_patch_embedding", "conv1d_causal"):
        (tmp_path / f"{name}.yaml").write_text((ROOT / "derivations" / f"{name}.yaml").read_text())
    (tmp_path / "net.yaml").write_text("""
dims: {B: b, C: c, Q: q, I: i, J: j, D: d, O: o, P: p}
tensors:
  X: {shape: [B, C, 2*Q*I, 2*Q*J], role: input}
  S: {shape: [B, C, P], role: input}
ops:
  - include: vit_patch_embedding.yaml
    dims: {P: 2*Q}
    tensors: {Y: E}
  - include: conv1d_causal.yaml
    dims: {K: 3}
    tensors: {X: S, Y: Z, W: W_2}
""")
    layer = symflops.load(tmp_path / "net.yaml")
    Q = sympy.Symbol("Q", positive=True, integer=True)
    assert layer.tensor("E").shape == (B, I, J, D)
    assert layer.tensor("S").shape == (B, C, P)
    c = costs(symflops.derive(layer))
    assert sympy.expand(c.forward[0].flops - 2 * B * I * J * D * C * 4 * Q**2) == 0
    assert c.forward[-1].flops == 2 * B * O * C * P * 3
    values = forward(layer, {"X": np.ones((1, 1, 4, 4)), "W": np.ones((1, 2, 2, 1)),
                             "bias": np.zeros(1), "S": np.ones((1, 1, 4)), "W_2": np.ones((1, 1, 3))},
                     {"B": 1, "C": 1, "Q": 1, "I": 2, "J": 2, "D": 1, "O": 1, "P": 4})
    assert np.allclose(values["E"], 4) and np.allclose(values["Z"], [[[1, 2, 3, 3]]])


def test_the_transposed_conv_prints_as_written_and_reparses():
    from symflops.lang.statement import parse_statement
    text = shipped("conv_transpose2d").ops[0].statement()
    assert text == "Y[b,o,2*i+u,2*j+v] = X[b,c,i,j] W[c,o,u,v]"
    assert [s.text for s in parse_statement(text).lhs.shifts] == ["2*i+u", "2*j+v"]
