"""Which bucket a convolution's products land in, against PyTorch's counter.

A scatter through an affine index (a shift or a stride: a convolution's input
gradient ``dX[b,c,q] = dY[b,c,p] W[c,k] where q = p + k``, a transposed
convolution's forward ``Y[b,c,2*i+u] = X[b,c,i] W[c,u]``) is a convolution's
sum, counted in ``flops`` like every convolution and transposed convolution
PyTorch's ``FlopCounterMode`` counts; a scatter through a lookup (an index
tensor) stays elementwise.  Before the fix, a depthwise convolution's input
gradient (no channel sum) was booked in ``flops_elementwise``.

The oracle: random convolutions (1-D and 2-D; depthwise, grouped, dilated,
strided, transposed; random small sizes) written as symflops declarations and
run as ``torch.nn.functional.conv1d/conv2d/conv_transpose1d/conv_transpose2d``
under FlopCounterMode, forward and backward.  Every one of their products is a
convolution, so symflops' ``flops`` must equal PyTorch's total and
``flops_elementwise`` must be 0.  The one exception is PyTorch's own: in
torch 2.13 ``conv_backward_flop`` counts a grouped convolution's weight
gradient as if it were ungrouped (its ``conv_flop_count(t(x), t(grad_out),
...)`` multiplies both whole channel counts); there the test asserts
symflops' grouped count and that PyTorch's exceeds it by exactly the
ungrouped-minus-grouped amount, derived by hand below.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.numeric import forward
from symflops.core.ir import dim_symbol
from symflops.count.cost import costs

torch = pytest.importorskip("torch")
F = torch.nn.functional
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

SPATIAL = (("p", "k", "i", "u"), ("q", "l", "j", "v"))  # letters of axis 1 and axis 2


@functools.lru_cache(maxsize=None)
def declared(rank: int, transposed: bool, letters: str):
    """The convolution as a declaration, strides and dilations as dims (so one
    derivation serves every size), derived and counted.  ``letters`` holds the
    channel letters present: ``b`` batch, ``g`` groups, ``c`` input and ``o``
    output channels of a group (an absent one has extent 1 in PyTorch)."""
    dims = {"B": "batch", "G": "groups", "C": "in per group", "O": "out per group"}
    have = [x for x in "bgco" if x in letters]
    x_lead = [x for x in have if x in "bgc"]
    y_lead = [x for x in have if x in "bgo"]
    # PyTorch's weight: [G*O, C, ...] for a convolution, [G*C, O, ...] transposed
    w_lead = [x for x in ("gco" if transposed else "goc") if x in have]
    x_shape = [x.upper() for x in x_lead]
    w_shape = [x.upper() for x in w_lead]
    x_idx, y_idx, w_idx = list(x_lead), list(y_lead), list(w_lead)
    for a in range(rank):
        out, k, inp, u = SPATIAL[a]
        P, K, S, D = (f"{n}{a + 1}" for n in "PKSD")
        dims.update({P: "positions", K: "kernel", S: "stride", D: "dilation"})
        if transposed:  # P counts the input's positions; the output has S(P-1) + D(K-1) + 1
            x_idx.append(inp)
            x_shape.append(P)
            y_idx.append(f"{S}*{inp}+{D}*{u}")
            w_idx.append(u)
        else:
            x_idx.append(f"{S}*{out}+{D}*{k}")
            x_shape.append(f"{S}*{P} - {S} + {D}*{K} - {D} + 1")
            y_idx.append(out)
            w_idx.append(k)
        w_shape.append(K)
    op = f"Y[{','.join(y_idx)}] = X[{','.join(x_idx)}] W[{','.join(w_idx)}]"
    layer = symflops.declare("conv", dims=dims, tensors={
        "X": {"shape": x_shape, "role": "input"}, "W": {"shape": w_shape, "role": "param"}},
        ops=[op])
    return layer, costs(symflops.derive(layer)), op


def _torch_counts(case: dict) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's forward and backward totals, and X, W, Y as arrays."""
    rank, transposed = case["rank"], case["transposed"]
    B, G, C, O = (case[n] for n in "BGCO")
    P = [case[f"P{a + 1}"] for a in range(rank)]
    K = [case[f"K{a + 1}"] for a in range(rank)]
    S = [case[f"S{a + 1}"] for a in range(rank)]
    D = [case[f"D{a + 1}"] for a in range(rank)]
    gen = torch.Generator().manual_seed(0)
    if transposed:
        x = torch.randn(B, G * C, *P, generator=gen, dtype=torch.float64, requires_grad=True)
        w = torch.randn(G * C, O, *K, generator=gen, dtype=torch.float64, requires_grad=True)
        fn = F.conv_transpose1d if rank == 1 else F.conv_transpose2d
    else:
        length = [s * (p - 1) + d * (k - 1) + 1 for p, k, s, d in zip(P, K, S, D)]
        x = torch.randn(B, G * C, *length, generator=gen, dtype=torch.float64, requires_grad=True)
        w = torch.randn(G * O, C, *K, generator=gen, dtype=torch.float64, requires_grad=True)
        fn = F.conv1d if rank == 1 else F.conv2d
    with FlopCounterMode(display=False) as counter:
        y = fn(x, w, stride=S, dilation=D, groups=G)
    forward_flops = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(y, [x, w], torch.ones_like(y))
    return (forward_flops, counter.get_total_flops(), x.detach().numpy(), w.detach().numpy(),
            y.detach().numpy())


def _phantom(case: dict) -> int:
    """What torch 2.13 adds to a grouped convolution's backward (derived by hand).

    The weight gradient sums, for each of the G*C*O weights of one kernel
    tap, over the batch and the positions the tap is used at (the output's
    positions, or the input's for a transposed convolution): 2*B*G*C*O*K*P
    FLOPs, K and P the products of the kernel's and those positions' extents.
    conv_backward_flop counts it as conv(t(x), t(grad_out)), whose 'batch' is
    one whole channel count and whose 'c_out x c_in' the other with the batch:
    2*B*(G*C)*(G*O)*K*P, the ungrouped count.  The excess:
    2*B*C*O*K*P*(G*G - G), 0 for G = 1."""
    rank = case["rank"]
    K = np.prod([case[f"K{a + 1}"] for a in range(rank)])
    P = np.prod([case[f"P{a + 1}"] for a in range(rank)])
    B, G, C, O = (case[n] for n in "BGCO")
    return int(2 * B * C * O * K * P * (G * G - G))


def _cases() -> list[dict]:
    """Named cases of each kind, then a seeded random table."""
    named = [
        # depthwise 1-D (groups = channels, no channel sum): the issue's dX
        dict(rank=1, transposed=False, letters="bg", B=2, G=3, P1=4, K1=3, S1=1, D1=1),
        # depthwise, no batch letter: dX keeps only g, on both operands, and q
        dict(rank=1, transposed=False, letters="g", B=1, G=4, P1=3, K1=2, S1=1, D1=1),
        # depthwise 2-D, strided and dilated
        dict(rank=2, transposed=False, letters="bg", B=2, G=2, P1=3, K1=2, S1=2, D1=1,
             P2=2, K2=3, S2=1, D2=2),
        # a stride whose windows do not overlap (patchify, each position read once)
        dict(rank=1, transposed=False, letters="bg", B=2, G=3, P1=3, K1=2, S1=3, D1=1),
        # grouped (2 groups of 2 in, 3 out)
        dict(rank=1, transposed=False, letters="bgco", B=2, G=2, C=2, O=3, P1=4, K1=2, S1=1, D1=1),
        # a depthwise transposed convolution (its forward is the scatter)
        dict(rank=1, transposed=True, letters="bg", B=2, G=3, P1=3, K1=3, S1=2, D1=1),
        dict(rank=2, transposed=True, letters="bg", B=1, G=2, P1=2, K1=2, S1=2, D1=1,
             P2=3, K2=2, S2=1, D2=2),
        # ungrouped: a real channel sum, always a contraction
        dict(rank=2, transposed=False, letters="bco", B=2, C=2, O=3, P1=2, K1=2, S1=1, D1=1,
             P2=2, K2=2, S2=2, D2=1),
    ]
    rng = random.Random(25)
    table = []
    for _ in range(24):
        rank = rng.choice((1, 2))
        letters = "".join(x for x in "bgco" if rng.random() < (0.8 if x in "bg" else 0.4))
        case = dict(rank=rank, transposed=rng.random() < 0.4, letters=letters)
        for x in "bgco":
            case[x.upper()] = rng.randint(2, 3) if x in letters else 1
        for a in range(1, rank + 1):
            case.update({f"P{a}": rng.randint(1, 4), f"K{a}": rng.randint(1, 3),
                         f"S{a}": rng.randint(1, 3), f"D{a}": rng.randint(1, 2)})
        table.append(case)
    for case in named:
        for x in "BGCO":
            case.setdefault(x, 1)
    return named + table


CASES = _cases()


def _name(case: dict) -> str:
    kind = ("convT" if case["transposed"] else "conv") + f"{case['rank']}d"
    return (f"{kind}-{case['letters'] or 'none'}-G{case['G']}-"
            + "-".join(f"{n}={case[n]}" for n in sorted(case) if n[-1].isdigit()))


@pytest.mark.parametrize("case", CASES, ids=[_name(c) for c in CASES])
def test_a_convolution_counts_as_pytorch_counts_it(case):
    layer, c, op = declared(case["rank"], case["transposed"], case["letters"])
    at = {dim_symbol(n): v for n, v in case.items() if n[0].isupper()}

    def num(expr) -> int:
        return int(sympy.sympify(expr).xreplace(at))

    fwd, bwd, x, w, y = _torch_counts(case)
    # The declaration is the same convolution as PyTorch's call: the same values.
    # PyTorch's channel axis is (g, c) or (g, o) row-major; an absent letter has extent 1.
    dims = {n: v for n, v in case.items() if n[0].isupper()}

    def ours(a: np.ndarray, names: str) -> np.ndarray:
        spatial = a.shape[a.ndim - case["rank"]:]
        return a.reshape([dims[n.upper()] for n in names if n in case["letters"]] + list(spatial))

    mine = forward(layer, {"X": ours(x, "bgc"), "W": ours(w, "gco" if case["transposed"] else "goc")},
                   dims)["Y"]
    assert np.allclose(mine, ours(y, "bgo"), rtol=1e-12, atol=1e-12), op
    # Every product is a convolution: all of it in flops, none elementwise.
    assert num(c.elementwise_forward) == 0 and num(c.elementwise_backward) == 0, op
    assert num(c.flops_forward) == fwd, op
    assert num(c.flops_backward) == bwd - _phantom(case), op
    # By hand: forward, dX and dW each 2 x batch x G x C x O x kernel x positions
    # (the output's positions; the input's for a transposed convolution).
    K = np.prod([case[f"K{a + 1}"] for a in range(case["rank"])])
    P = np.prod([case[f"P{a + 1}"] for a in range(case["rank"])])
    one = 2 * case["B"] * case["G"] * case["C"] * case["O"] * int(K) * int(P)
    assert fwd == one and num(c.flops_backward) == 2 * one


def test_pytorchs_grouped_backward_is_the_phantom_of_issue_31():
    """The oracle's defect measured: issue 31's conv1d with groups=64 and 52,736
    forward FLOPs (B=1, 64 channels, K=4, P=103: 2*64*4*103 = 52,736) gets
    3,427,840 backward FLOPs, of which 52,736 are the input gradient and
    64 x 52,736 = 3,375,104 the weight gradient counted as ungrouped."""
    x = torch.randn(1, 64, 106, dtype=torch.float64, requires_grad=True)
    w = torch.randn(64, 1, 4, dtype=torch.float64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = F.conv1d(x, w, groups=64)
    assert counter.get_total_flops() == 52_736
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(y, [x, w], torch.ones_like(y))
    case = dict(rank=1, B=1, G=64, C=1, O=1, K1=4, P1=103)
    assert counter.get_total_flops() == 3_427_840 == 2 * 52_736 + _phantom(case)


def test_depthwise_input_gradient_is_a_contraction():
    """The issue's depthwise convolution: dX was booked elementwise (0 in flops)."""
    layer = symflops.loads("""
name: dw
dims: {B: batch, C: channels, P: positions, K: kernel}
tensors:
  X: {shape: [B, C, P + K - 1], role: input}
  W: {shape: [C, K], role: param}
ops:
  - Y[b,c,p] = X[b,c,p+k] W[c,k]
""", "dw.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    B, C, P, K = (dim_symbol(n) for n in "BCPK")
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    # dX[b,c,q] = sum over p + k = q of dY[b,c,p] W[c,k]: B C P K multiply-adds
    assert (by["dX"].flops, by["dX"].elementwise) == (2 * B * C * P * K, 0)
    assert (by["dW"].flops, by["dW"].elementwise) == (2 * B * C * P * K, 0)
    assert c.flops_forward == 2 * B * C * P * K


def test_band_attention_key_and_value_gradients_are_contractions():
    """A band (sliding) attention reads keys and values at s + w.  PyTorch runs
    each as an unfold and a bmm: the scores 2*S*W*E and the mixing 2*S*W*F
    forward; backward two bmm for each (the other operand's gradient and the
    unfolded keys' or values'), then unfold's backward, which it does not
    count.  symflops: dKp[q,e] = dA[s,w] Q[s,e] where q = s + w and dVp[q,f] =
    A[s,w] dO[s,f] where q = s + w, a convolution's sum each, now in flops
    (they were elementwise)."""
    layer = symflops.loads("""
dims: {S: queries, W: window, E: head width, F: value width}
tensors:
  Q: {shape: [S, E], role: input}
  Kp: {shape: [S + W - 1, E], role: input}
  Vp: {shape: [S + W - 1, F], role: input}
ops:
  - A[s,w] = Q[s,e] Kp[s+w,e]
  - O[s,f] = A[s,w] Vp[s+w,f]
""", "band.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    S, W, E, F_ = 5, 3, 4, 6
    at = {dim_symbol("S"): S, dim_symbol("W"): W, dim_symbol("E"): E, dim_symbol("F"): F_}
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    assert by["dKp"].elementwise == by["dVp"].elementwise == 0
    q = torch.randn(S, E, dtype=torch.float64, requires_grad=True)
    kp = torch.randn(S + W - 1, E, dtype=torch.float64, requires_grad=True)
    vp = torch.randn(S + W - 1, F_, dtype=torch.float64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        a = torch.einsum("se,sew->sw", q, kp.unfold(0, W, 1))
        o = torch.einsum("sw,sfw->sf", a, vp.unfold(0, W, 1))
    forward_flops = 2 * S * W * E + 2 * S * W * F_
    assert counter.get_total_flops() == forward_flops == c.flops_forward.xreplace(at)
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(o, [q, kp, vp], torch.ones_like(o))
    assert counter.get_total_flops() == 2 * forward_flops == c.flops_backward.xreplace(at)
    assert c.elementwise_forward == c.elementwise_backward == 0


def test_a_view_as_windows_is_a_copy():
    """The copies: a view of an axis as windows that do not overlap,
    ``Xv[b,i,u] = X[b,U*i+u]`` (PyTorch: ``unfold`` with
    step = size, a reshape).  Its gradient has one operand and each element
    lands in its own place: a copy, 0 FLOPs in both buckets; PyTorch counts
    unfold's backward 0, and the bmm after it as symflops' flops.  (A window
    of one tensor that overlaps cannot be declared: its letters need an
    operand that binds them, which makes it a convolution.)"""
    B, I, U, F_ = 2, 4, 3, 5
    layer = symflops.declare("unfold", dims={"B": "batch", "I": "windows", "U": "width",
                                             "F": "out"},
                             tensors={"X": {"shape": ["B", "U*I"], "role": "input"},
                                      "W": {"shape": ["U", "F"], "role": "param"}},
                             ops=["Xv[b,i,u] = X[b,U*i+u]", "Y[b,i,f] = Xv[b,i,u] W[u,f]"])
    d = symflops.derive(layer)
    c = costs(d)
    at = {dim_symbol("B"): B, dim_symbol("I"): I, dim_symbol("U"): U, dim_symbol("F"): F_}
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    assert (by["dX"].flops, by["dX"].elementwise) == (0, 0)
    x = torch.randn(B, 3 * I, dtype=torch.float64, requires_grad=True)
    w = torch.randn(U, F_, dtype=torch.float64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = torch.einsum("biu,uf->bif", x.unfold(1, U, U), w)
    assert counter.get_total_flops() == 2 * B * I * U * F_ == c.flops_forward.xreplace(at)
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(y, [x, w], torch.ones_like(y))
    assert counter.get_total_flops() == 4 * B * I * U * F_ == c.flops_backward.xreplace(at)
    assert c.elementwise_forward == c.elementwise_backward == 0


def test_a_lookup_scatter_stays_elementwise():
    """The gradient of an embedding lookup, dE[v,d] = dX[b,d] where v = tok[b],
    adds rows into place: elementwise, as PyTorch's index_add (not counted)."""
    layer = symflops.loads("""
dims: {B: tokens, V: vocabulary, D: width}
tensors:
  tok: {shape: [B], role: index}
  E: {shape: [V, D], role: param}
  g: {shape: [D], role: param}
ops:
  - X[b,d] = E[tok[b],d] g[d]
""", "lookup.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    B, D = dim_symbol("B"), dim_symbol("D")
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    # dE[v,d] = dX[b,d] g[d] where v = tok[b]: a multiply and an add per (b, d)
    assert (by["dE"].flops, by["dE"].elementwise) == (0, 2 * B * D)


@pytest.mark.parametrize("axis,index,torch_view", [
    ("U*I", "U*i+u", lambda x, U: x.view(x.shape[0], -1, U)),        # a reshape
    ("2*I + U - 2", "2*i+u", lambda x, U: x.unfold(1, U, 2)),         # windows that meet
])
def test_a_gain_on_a_windowed_view_is_elementwise(axis, index, torch_view):
    """``Y[b,i,u] = X[b,U*i+u] g[u]``: a gain on each window's elements.  Its
    gradient ``dX[b,q] = dY[b,i,u] g[u] where q = U*i + u`` is a scatter
    through a window, but g's letter is on dY too: each product uses one
    element of dY, placed (or, where windows meet, added) into position, as
    PyTorch runs it: a multiply and the view's or unfold's backward, none
    counted.  Elementwise: a multiply and an add per element of dY, 2*B*I*U."""
    B, I, U = 2, 4, 3
    layer = symflops.declare("gain", dims={"B": "batch", "I": "windows", "U": "width"},
                             tensors={"X": {"shape": ["B", axis], "role": "input"},
                                      "g": {"shape": ["U"], "role": "param"}},
                             ops=[f"Y[b,i,u] = X[b,{index}] g[u]"])
    d = symflops.derive(layer)
    c = costs(d)
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    Bs, Is, Us = (dim_symbol(n) for n in "BIU")
    assert (by["dX"].flops, by["dX"].elementwise) == (0, 2 * Bs * Is * Us)
    at = {Bs: B, Is: I, Us: U}
    length = int(sympy.sympify(axis.replace("I", str(I)).replace("U", str(U))))
    x = torch.randn(B, length, dtype=torch.float64, requires_grad=True)
    g = torch.randn(U, dtype=torch.float64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = torch_view(x, U) * g
    assert counter.get_total_flops() == 0 == c.flops_forward.xreplace(at)
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(y, [x, g], torch.ones_like(y))
    assert counter.get_total_flops() == 0 == c.flops_backward.xreplace(at)


def test_a_shift_by_a_constant_sums_nothing():
    """``Y[b,s,d] = H[b,s+1,d] g[d]``: dH[b,q,d] = dY[b,s,d] g[d] where q = s + 1
    moves each product one place: elementwise, as PyTorch's ``h[:, 1:] * g``
    (a multiply, not counted)."""
    layer = symflops.loads("""
dims: {B: batch, S: positions, D: width}
tensors:
  H: {shape: [B, S + 1, D], role: input}
  g: {shape: [D], role: param}
ops:
  - Y[b,s,d] = H[b,s+1,d] g[d]
""", "shift.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    B, S, D = (dim_symbol(n) for n in "BSD")
    assert (by["dH"].flops, by["dH"].elementwise) == (0, 2 * B * S * D)
    h = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, dtype=torch.float64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = h[:, 1:] * g
        torch.autograd.grad(y, [h, g], torch.ones_like(y))
    assert counter.get_total_flops() == 0
    assert c.flops_forward == c.flops_backward == 0
