"""Affine index expressions: strides ``X[b,c,2*i+u]``, dilations ``X[b,c,p+2*k]``,
offsets ``H[b,s-1,d]``, differences ``bias[n,s-t]`` and patches ``X[b,c,P*i+u]``.

Expected values are written by hand in each test (columns counted on the
statement text, counts derived in the comments).
"""

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


def test_strided_conv_forward_and_gradients_match_pytorch():
    torch = pytest.importorskip("torch")
    layer = shipped("conv2d_strided")
    rng = np.random.default_rng(0)
    dims = {"B": 2, "C": 3, "O": 4, "I": 3, "J": 2, "U": 3, "V": 2}
    x, w = rng.standard_normal((2, 3, 7, 4)), rng.standard_normal((4, 3, 3, 2))
    dy = rng.standard_normal((2, 4, 3, 2))
    values, grads = run(layer, {"X": x, "W": w}, dims, {"dY": dy})
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    y = torch.nn.functional.conv2d(tx, tw, stride=2)
    assert np.allclose(values["Y"], y.detach().numpy())
    y.backward(torch.tensor(dy))
    assert np.allclose(grads["dX"], tx.grad.numpy()) and np.allclose(grads["dW"], tw.grad.numpy())
    # The input gradient is the transposed convolution of dY with the same kernel.
    transposed = torch.nn.functional.conv_transpose2d(torch.tensor(dy), torch.tensor(w), stride=2)
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
