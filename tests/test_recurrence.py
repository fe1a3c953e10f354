"""Linear recurrences: ``H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]``, ``H[b,-1,d] = 0``.

Expected counts are derived by hand in each test; values come from a PyTorch
loop written here (not the op's own forward) and its autograd.
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops import cli
from symflops.checks.numeric import backward, forward
from symflops.checks.verify import verify
from symflops.count.cost import costs
from symflops.ops.recurrence import parallel_scan

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "derivations" / "linear_recurrence.yaml"
B, S, D, N = sympy.symbols("B S D N", positive=True, integer=True)
DIMS = {"B": "batch", "S": "steps", "D": "width"}


def layer(op="H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]", gate=("D",), name="A", x_grad=True):
    return symflops.declare("rec", dims=DIMS, tensors={
        "X": {"shape": ["B", "S", "D"], "role": "input", "requires_grad": x_grad},
        name: {"shape": list(gate), "role": "param"}}, ops=[op])


def test_shipped_rules_are_the_reverse_recurrence():
    d = symflops.derive(symflops.load(SHIPPED))
    rec = [r.statement for r in d.rules if r.op == 1]
    scan = "G_H[b,s,n] = dH[b,s,n] + A[n] G_H[b,s+1,n]"
    assert rec == [f"dU[b,s,n] = G_H[b,s,n] where {scan}",
                   f"dA[n] = G_H[b,s,n] H[b,s-1,n] where {scan}"]
    # H for dA (and for dW_out); X for dW_in; A is a parameter.
    assert d.saved == ("X", "H")


def test_shipped_counts_by_hand():
    c = costs(symflops.derive(symflops.load(SHIPPED)))
    # Two projections, each 2*B*S*D*N (B*S rows, D*N multiply-adds each); the
    # recurrence does no matrix product.
    assert c.flops_forward == 4 * B * S * D * N
    # Each projection's two backward products, 2*B*S*D*N each.
    assert c.flops_backward == 8 * B * S * D * N
    # Recurrence forward: per (b, n), S - 1 multiply-adds (s = 0 reads the zero
    # state: a copy), 2 FLOPs each.
    assert c.forward[1].flops == 0
    assert sympy.expand(c.forward[1].elementwise - 2 * B * N * (S - 1)) == 0
    # Backward: the reverse recurrence, S - 1 multiply-adds per (b, n), once;
    # dA[n] sums B*(S - 1) products per n (s = 0 reads H[-1] = 0): a
    # multiply-add each.
    rec = [cost for r, cost in zip(symflops.derive(symflops.load(SHIPPED)).rules, c.backward)
           if r.op == 1]
    assert [sympy.expand(x.elementwise - 2 * B * N * (S - 1)) for x in rec] == [0, 0]
    assert all(x.flops == 0 for x in rec)
    assert c.params == 2 * D * N + N


def test_shipped_example_numbers():
    c = costs(symflops.derive(symflops.load(SHIPPED)))
    at = {B: 1, S: 2048, D: 768, N: 1536}
    # 2 * 2047 * 1536 FLOPs: the forward recurrence at Mamba-130M's d_inner.
    assert c.forward[1].elementwise.subs(at) == 6_288_384
    # forward: 4 * 2048 * 768 * 1536
    assert c.flops_forward.subs(at) == 9_663_676_416


def test_macs_count_one_per_multiply_add():
    c = costs(symflops.derive(layer()), unit="MACs")
    # forward S - 1 per (b, d); backward: the scan S - 1 per (b, d), dA B(S-1) per d
    assert sympy.expand(c.elementwise_forward - B * D * (S - 1)) == 0
    assert sympy.expand(c.elementwise_backward - 2 * B * D * (S - 1)) == 0


def test_without_the_drive_gradient_the_gate_rule_counts_the_scan():
    d = symflops.derive(layer(x_grad=False))
    (rule,) = d.rules  # X needs no gradient: dA alone
    assert rule.wrt == "A"
    c = costs(d)
    # the reverse recurrence (2B D (S-1)) plus dA's sum (2B D (S-1))
    assert sympy.expand(c.backward[0].elementwise - 4 * B * D * (S - 1)) == 0


def torch_loop(torch, gate, x, varying):
    """h[s] = g h[s-1] + x[s], h[-1] = 0, over axis 1, with torch ops."""
    h = torch.zeros_like(x[:, 0])
    out = []
    for s in range(x.shape[1]):
        h = (gate[:, s] if varying else gate) * h + x[:, s]
        out.append(h)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("varying", [False, True])
def test_forward_and_gradients_against_a_pytorch_loop(varying):
    torch = pytest.importorskip("torch")
    if varying:
        lay = layer("H[b,s,d] = G[b,s,d] H[b,s-1,d] + X[b,s,d]", ("B", "S", "D"), "G")
    else:
        lay = layer()
    name = "G" if varying else "A"
    rng = np.random.default_rng(1)
    dims = {"B": 2, "S": 6, "D": 3}
    leaves = {"X": rng.standard_normal((2, 6, 3)),
              name: rng.uniform(-1, 1, (2, 6, 3) if varying else (3,))}
    values = forward(lay, leaves, dims)
    tl = {k: torch.tensor(v, requires_grad=True) for k, v in leaves.items()}
    h = torch_loop(torch, tl[name], tl["X"], varying)
    assert np.allclose(values["H"], h.detach().numpy(), rtol=0, atol=1e-12)
    dH = rng.standard_normal((2, 6, 3))
    grads = backward(symflops.derive(lay), values, {"dH": dH}, dims)
    ref = torch.autograd.grad(h, [tl["X"], tl[name]], torch.tensor(dH))
    assert np.allclose(grads["dX"], ref[0].numpy(), rtol=0, atol=1e-12)
    assert np.allclose(grads["d" + name], ref[1].numpy(), rtol=0, atol=1e-12)


def test_gated_counts_by_hand():
    lay = layer("H[b,s,d] = G[b,s,d] H[b,s-1,d] + X[b,s,d]", ("B", "S", "D"), "G")
    c = costs(symflops.derive(lay))
    # forward 2 per (b, s >= 1, d); backward: the scan, 2 per (b, s < S-1, d),
    # and dG[b,s,d] = G_H[b,s,d] H[b,s-1,d], one multiply per (b, s >= 1, d).
    assert sympy.expand(c.elementwise_forward - 2 * B * D * (S - 1)) == 0
    assert sympy.expand(c.elementwise_backward - 3 * B * D * (S - 1)) == 0


def test_verify_passes_on_the_shipped_declaration():
    report = verify(symflops.derive(symflops.load(SHIPPED)), seed=3)
    assert report.passed


def brent_kung_combines(n):
    """Count the combines of a Brent-Kung inclusive scan over n = 2**k
    elements by running it on (a, x) pairs, and check its result."""
    rng = np.random.default_rng(n)
    a, x = rng.uniform(-1, 1, n), rng.standard_normal(n)
    pairs = [(a[i], x[i]) for i in range(n)]
    count = 0

    def combine(p, q):  # p earlier, q later: (a_p a_q, a_q x_p + x_q)
        nonlocal count
        count += 1
        return (p[0] * q[0], q[0] * p[1] + q[1])

    step = 1
    while step < n:  # up-sweep
        for i in range(2 * step - 1, n, 2 * step):
            pairs[i] = combine(pairs[i - step], pairs[i])
        step *= 2
    step = n // 4
    while step >= 1:  # down-sweep
        for i in range(3 * step - 1, n, 2 * step):
            pairs[i] = combine(pairs[i - step], pairs[i])
        step //= 2
    h, seq = 0.0, []
    for i in range(n):
        h = a[i] * h + x[i]
        seq.append(h)
    assert np.allclose([p[1] for p in pairs], seq)
    return count


def test_parallel_scan_count_by_enumeration():
    op = symflops.load(SHIPPED).ops[1]
    scan = parallel_scan(op)
    for k in range(1, 8):
        n = 2 ** k
        at = {S: n, B: 2, N: 5}
        assert sympy.simplify(scan.combines.subs(at)) == brent_kung_combines(n)
        # 3 FLOPs a combine (a multiply of gates, a multiply-add), per (b, n)
        assert sympy.simplify(scan.flops.subs(at)) == 3 * brent_kung_combines(n) * 2 * 5
        assert sympy.simplify(scan.depth.subs(at)) == 2 * k - 1
    # beside the sequential S - 1 multiply-adds: about 3x the FLOPs
    assert sympy.limit(scan.flops / op.cost("FLOPs").elementwise, S, sympy.oo) == 3


BAD = [
    ("H[b,s,d] = A[d] H[b,s-2,d] + X[b,s,d]", "read at an offset of -2 along 's'", 20),
    ("H[b,s,d] = A[d] H[b,s+1,d] + X[b,s,d]", "read at an offset of +1 along 's'", 20),
    ("H[b,s,d] = A[d] H[b-1,s-1,d] + X[b,s,d]", "one step back along one letter, here along 2",
     16),
    ("H[b,s,d] = A[d] H[b,s,d] + X[b,s,d]", "one step back along one letter, here along 0", 16),
    ("H[b,s,d] = A[d] relu(H[b,s-1,d]) + X[b,s,d]", "the output H read under relu(...)", 16),
    ("H[b,s,d] = A[d] H[b,s-1,d] H[b,s-1,d] + X[b,s,d]", "the output H is read 2 times", 27),
    ("H[b,s,d] = A[d] H[b,s-t,d] + X[b,s,d]", "a shift by another letter", 20),
    ("H[b,s,d] = H[b,s-1,d]", "H is computed from itself alone", 11),
    ("H[b,s,d] = A[d] H[b,s-1,d] - X[b,s,d]", "'gate * previous state + drive'", 11),
    ("H[b,s,d] = A[d] H[b,s-1,d] + A[d] X[b,s,d]", "the drive must be one tensor", 29),
    ("H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d] + H_prev[d]", "'gate * previous state + drive'",
     11),
    ("Z[b,s,d] = A[d] Z[b,s-1,d] + X[b,s,d] + 0 * H_prev[d]", "'gate * previous state", 11),
]


def test_a_taken_name_is_refused(tmp_path, capsys):
    path = bad_file(tmp_path, "H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]")
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert f"{path}:7:21: error: the name 'H_prev' is taken" in first


def bad_file(tmp_path, op):
    path = tmp_path / "bad.yaml"
    path.write_text("dims: {B: batch, S: steps, D: width, T: lags}\n"
                    "tensors:\n"
                    "  X: {shape: [B, S, D], role: input}\n"
                    "  A: {shape: [D], role: param}\n"
                    "  H_prev: {shape: [D], role: param}\n"
                    f"ops:\n  - {op}\n")
    return path


@pytest.mark.parametrize("op,message,column", BAD, ids=[m for _, m, _ in BAD])
def test_refused_by_name_at_the_column(tmp_path, capsys, op, message, column):
    path = bad_file(tmp_path, op)
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    # the statement starts at column 5 of line 7 ("  - "); ``column`` is 0-based in it
    assert f"{path}:7:{5 + column}: error: " in first, first
    assert message in first and "fix: " in first


def test_refusal_names_the_fix(tmp_path, capsys):
    path = bad_file(tmp_path, "H[b,s,d] = A[d] H[b,s-2,d] + X[b,s,d]")
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert f"{path}:7:25: error: H[...] read at an offset of -2 along 's'" in first
    assert "fix: only the previous step, s-1, is supported" in first


def test_verify_passes_on_a_gate_computed_by_the_layer():
    # A time-varying gate made by the layer (an activation, so it is saved):
    # G = sigmoid(X W_a), H = G H_prev + X W_in.
    lay = symflops.declare("gated", dims={"B": "batch", "S": "steps", "D": "width"}, tensors={
        "X": {"shape": ["B", "S", "D"], "role": "input"},
        "W_a": {"shape": ["D", "D"], "role": "param"},
        "W_in": {"shape": ["D", "D"], "role": "param"}}, ops=[
        "R[b,s,e] = X[b,s,d] W_a[d,e]",
        "G[b,s,e] = sigmoid(R[b,s,e])",
        "U[b,s,e] = X[b,s,d] W_in[d,e]",
        "H[b,s,e] = G[b,s,e] H[b,s-1,e] + U[b,s,e]"])
    d = symflops.derive(lay)
    assert "G" in d.saved and "H" in d.saved
    assert verify(d, seed=5).passed
