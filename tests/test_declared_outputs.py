"""An op's output declared under ``tensors:`` (``role: activation``) to give its
shape and its ``pad:`` (issue 25, item 16): a convolution over an intermediate,
as a U-Net up-block runs one (transposed convolution, concatenation with the
skip connection, two 3x3 convolutions with padding 1).

Expected values come from outside the code under test: counts made by hand
(written out below), PyTorch's FlopCounterMode on the same block written
with torch.nn.functional (conv_transpose2d, cat, conv2d with padding=1), and
an enumeration of the products that read inside the padded axes.
"""

import itertools
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.core.errors import SymflopsError
from symflops.core.ir import substitute
from symflops.count.cost import costs
import forked

ROOT = Path(__file__).resolve().parent.parent
UNET = ROOT / "derivations" / "unet_up_block.yaml"
B, F, I = sympy.symbols("B F I", positive=True, integer=True)

# A convolution over an op's output: H = relu(X), then a valid convolution
# over H; H's time axis padded with K - 1 zeros after it ('p+k' then runs over
# all P positions, the form 'pad:' gives an input today).
PADDED = """\
name: padded
dims: {B: batch, C: channels, O: out, P: positions, K: taps}
tensors:
  X: {shape: [B, C, P], role: input}
  W: {shape: [O, C, K], role: param}
  H: {shape: [B, C, P], role: activation, pad: [0, 0, [0, K - 1]]}
ops:
  - H[b,c,p] = relu(X[b,c,p])
  - Y[b,o,p] = H[b,c,p+k] W[o,c,k]
"""


def load_text(tmp_path, text):
    path = tmp_path / "decl.yaml"
    path.write_text(text)
    return symflops.load(path)


def refusal(tmp_path, text):
    with pytest.raises(SymflopsError) as info:
        symflops.derive(load_text(tmp_path, text))
    return info.value


def test_unet_counts_by_hand():
    c = costs(symflops.derive(symflops.load(UNET)))
    # Up-convolution, 2F -> F channels, kernel 2x2 at each of the I*I input
    # pixels: 2 * B * F * 2F * I * I * 2 * 2 = 16 B F^2 I^2.
    # First 3x3 convolution, 2F -> F channels at each of the 2I*2I output
    # pixels (padding 1): 2 * B * F * 2F * 4 I^2 * 9 = 144 B F^2 I^2.
    # Second, F -> F: 2 * B * F * F * 4 I^2 * 9 = 72 B F^2 I^2.
    forward = 16 * B * F**2 * I**2 + 144 * B * F**2 * I**2 + 72 * B * F**2 * I**2
    assert sympy.expand(c.flops_forward - forward) == 0
    # Each convolution's backward: the weight gradient and the input gradient,
    # each as many products as its forward.
    assert sympy.expand(c.flops_backward - 2 * forward) == 0
    # W_up 2F*F*2*2 = 8F^2, W1 F*2F*9 = 18F^2, W2 F*F*9 = 9F^2, three biases of F.
    assert sympy.expand(c.params - (8 * F**2 + 18 * F**2 + 9 * F**2 + 3 * F)) == 0


def test_unet_matches_pytorch_flop_counter():
    """The same block written with torch.nn.functional, counted by
    FlopCounterMode (convolutions, border terms included), forward and
    backward, at the first up-step of a 512x512 tile scaled down."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    b, f, i = 2, 8, 5
    x = torch.randn(b, 2 * f, i, i, dtype=torch.float64, requires_grad=True)
    skip = torch.randn(b, f, 2 * i, 2 * i, dtype=torch.float64, requires_grad=True)
    w_up = torch.randn(2 * f, f, 2, 2, dtype=torch.float64, requires_grad=True)
    w1 = torch.randn(f, 2 * f, 3, 3, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(f, f, 3, 3, dtype=torch.float64, requires_grad=True)
    b_up, b1, b2 = (torch.randn(f, dtype=torch.float64, requires_grad=True) for _ in range(3))
    F_ = torch.nn.functional
    with FlopCounterMode(display=False) as fwd:
        up = F_.conv_transpose2d(x, w_up, b_up, stride=2)
        cat = torch.cat([skip, up], dim=1)
        a1 = F_.relu(F_.conv2d(cat, w1, b1, padding=1))
        y = F_.relu(F_.conv2d(a1, w2, b2, padding=1))
    assert up.shape == (b, f, 2 * i, 2 * i) and y.shape == (b, f, 2 * i, 2 * i)
    with FlopCounterMode(display=False) as bwd:
        y.sum().backward()
    c = costs(symflops.derive(symflops.load(UNET)))
    at = {B: b, F: f, I: i}
    assert int(c.flops_forward.subs(at)) == fwd.get_total_flops()
    assert int(c.flops_backward.subs(at)) == bwd.get_total_flops()


def test_unet_sheet_states_the_products_inside_the_padding():
    """Of the first convolution's 72 B F^2 I^2 tuples, those whose two indices
    i+u-1, j+v-1 both land inside 0 .. 2I - 1, enumerated."""
    from symflops.count.explain import ShiftNote, explain

    d = symflops.derive(symflops.load(UNET))
    notes = [n for n in explain(d, costs(d)).forward[3].domain if isinstance(n, ShiftNote)]
    (note,) = notes
    assert note.padded.tensors == ("Cat",)
    for i in (1, 2, 3):
        n = 2 * i
        per_axis = sum(1 for p, u in itertools.product(range(n), range(3)) if 0 <= p + u - 1 < n)
        b, f = 2, 3
        inside = b * f * (2 * f) * per_axis**2  # b, g, t, and (i, u), (j, v)
        assert note.padded.inside.subs({B: b, F: f, I: i}) == inside


def test_padded_intermediate_is_counted_and_verified(tmp_path):
    c = costs(symflops.derive(load_text(tmp_path, PADDED)))
    Bs, C, O, P, K = sympy.symbols("B C O P K", positive=True, integer=True)
    # every (p, k), the K - 1 border taps included: 2 B O C P K, and each gradient too
    assert sympy.expand(c.flops_forward - 2 * Bs * O * C * P * K) == 0
    assert sympy.expand(c.flops_backward - 4 * Bs * O * C * P * K) == 0
    run = forked.run("verify", str(tmp_path / "decl.yaml"), cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "result: pass" in run.stdout


def test_a_valid_convolution_over_an_intermediate_is_advised_to_pad_it(tmp_path):
    """Before: 'declare it as N + K - 1 with a new dim N', which an op's output
    cannot do. Now the advice is the declaration that works."""
    err = refusal(tmp_path, PADDED.replace("  H: {shape: [B, C, P], role: activation, "
                                           "pad: [0, 0, [0, K - 1]]}\n", ""))
    assert "with a new dim" not in err.hint
    assert "H: {shape: [B, C, P], role: activation, pad: [0, 0, [0, K - 1]]}" in err.hint
    # ... and the advice, taken, is accepted (the declaration above).
    symflops.derive(load_text(tmp_path, PADDED))


def test_a_centred_read_of_an_intermediate_is_advised_to_pad_it_in_front(tmp_path):
    text = PADDED.replace("role: activation, pad: [0, 0, [0, K - 1]]}", "role: activation}")
    err = refusal(tmp_path, text.replace("H[b,c,p+k]", "H[b,c,p-k]"))
    assert "reads before the start of H's axis 3" in err.message
    assert "'H: {shape: [B, C, P], role: activation, pad: [0, 0, [K - 1, 0]]}'" in err.hint


def test_a_declared_shape_other_than_the_ops_is_refused_at_the_declaration(tmp_path):
    text = PADDED.replace("H: {shape: [B, C, P], role", "H: {shape: [B, C, P + 1], role")
    err = refusal(tmp_path, text)
    assert "H is declared [B, C, P + 1]" in err.message
    assert "axis 3 P positions, not P + 1" in err.message
    assert (err.span.line, err.span.column) == (6, 3)  # the tensor's declaration
    err = refusal(tmp_path, PADDED.replace("H: {shape: [B, C, P], role",
                                           "H: {shape: [B, P], role").replace(
                                               "pad: [0, 0, [0, K - 1]]", "pad: [0, [0, K - 1]]"))
    assert "declared with 2 axes" in err.message


def test_a_declared_shape_may_name_a_defined_dim(tmp_path):
    text = PADDED.replace("K: taps}", "K: taps, Q: {description: same, equals: P}}").replace(
        "H: {shape: [B, C, P]", "H: {shape: [B, C, Q]")
    layer = load_text(tmp_path, text)
    c = costs(symflops.derive(layer))
    Bs, C, O, P, K = sympy.symbols("B C O P K", positive=True, integer=True)
    assert sympy.expand(substitute(c.flops_forward, layer.substitutions)
                        - 2 * Bs * O * C * P * K) == 0


def test_a_declared_activation_no_op_writes_is_refused(tmp_path):
    err = refusal(tmp_path, PADDED.replace("  - H[b,c,p] = relu(X[b,c,p])", "  - G[b,c,p] = "
                                           "relu(X[b,c,p])"))
    assert "tensor 'H' is declared with role: activation, but no op statement" in err.message
    assert (err.span.line, err.span.column) == (6, 3)


def test_a_declared_activation_asking_for_a_gradient_is_refused(tmp_path):
    err = refusal(tmp_path, PADDED.replace("role: activation,", "role: activation, "
                                           "requires_grad: true,"))
    assert "is an op's output" in err.message and err.hint == "remove requires_grad"


def test_unknown_role_names_activation(tmp_path):
    err = refusal(tmp_path, PADDED.replace("role: activation", "role: computed"))
    assert "unknown role 'computed'" in err.message and "activation" in err.hint
