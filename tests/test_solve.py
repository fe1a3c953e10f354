"""Triangular solves: ``U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m < l``,
``(I + T) U = X`` with T strictly lower triangular (the UT transform of the gated
DeltaNet's chunks, ``torch.linalg.solve_triangular(..., unitriangular=True)``).

Expected counts are derived by hand in each test; values come from NumPy's general
solver (``numpy.linalg.solve``, not a substitution) and PyTorch's autograd through
``torch.linalg.solve_triangular``.
"""

import numpy as np
import pytest
import sympy

import symflops
from symflops import cli
from symflops.checks.numeric import backward, forward
from symflops.checks.verify import verify
from symflops.count.cost import costs

B, L, V = sympy.symbols("B L V", positive=True, integer=True)
DIMS = {"B": "batch", "L": "rows of the system", "V": "columns of the right side"}
SOLVE = "U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m < l"


def layer(op=SOLVE, matrix=("B", "L", "L"), x_grad=True):
    return symflops.declare("solve", dims=DIMS, tensors={
        "X": {"shape": ["B", "L", "V"], "role": "input", "requires_grad": x_grad},
        "T": {"shape": list(matrix), "role": "input"}}, ops=[op])


def test_rules_are_the_back_substitution():
    d = symflops.derive(layer())
    back = "G_U[b,m,v] = dU[b,m,v] - T[b,l,m] G_U[b,l,v] summed over l > m"
    assert [r.statement for r in d.rules] == [
        f"dX[b,l,v] = G_U[b,l,v] where {back}",
        f"dT[b,l,m] = -G_U[b,l,v] U[b,m,v] where m < l, with {back}"]
    assert set(d.saved) == {"T", "U"}


def test_counts_by_hand():
    d = symflops.derive(layer())
    c = costs(d)
    # forward: row l takes l multiply-adds per (b, v): 0 + 1 + ... + (L-1) = L(L-1)/2,
    # 2 FLOPs each, in the matrix-product bucket
    assert sympy.expand(c.flops_forward - B * V * L * (L - 1)) == 0
    assert c.elementwise_forward == 0
    # backward: the back substitution as many (in dX's rule), and dT over the
    # L(L-1)/2 pairs m < l, V multiply-adds each
    assert [sympy.expand(x.flops - B * V * L * (L - 1)) for x in c.backward] == [0, 0]
    # at B = 1, L = 4, V = 3: 6 pairs, 3 columns, 18 multiply-adds, 36 FLOPs each
    assert c.flops_forward.subs({B: 1, L: 4, V: 3}) == 36


def test_without_the_drive_gradient_the_matrix_rule_counts_the_substitution():
    d = symflops.derive(layer(x_grad=False))
    (rule,) = d.rules
    assert rule.wrt == "T"
    # the back substitution (B V L(L-1)) plus dT's products (B V L(L-1))
    assert sympy.expand(costs(d).backward[0].flops - 2 * B * V * L * (L - 1)) == 0


def test_macs_count_one_per_multiply_add():
    c = costs(symflops.derive(layer()), unit="MACs")
    assert sympy.expand(c.flops_forward - B * V * L * (L - 1) / 2) == 0


def _system(rng, b, n, v, sign):
    x = rng.standard_normal((b, n, v))
    t = rng.uniform(-1, 1, (b, n, n))
    a = np.eye(n) - sign * np.tril(t, -1)      # (I - sign T_strict) U = X
    return x, t, a


@pytest.mark.parametrize("sign", [-1, 1], ids=["minus", "plus"])
def test_forward_and_gradients_against_numpy_and_autograd(sign):
    torch = pytest.importorskip("torch")
    op = SOLVE if sign < 0 else SOLVE.replace(" - T", " + T")
    lay = layer(op)
    rng = np.random.default_rng(2)
    dims = {"B": 2, "L": 5, "V": 3}
    x, t, a = _system(rng, 2, 5, 3, sign)
    values = forward(lay, {"X": x, "T": t}, dims)
    assert np.allclose(values["U"], np.linalg.solve(a, x), rtol=0, atol=1e-12)
    tx = torch.tensor(x, requires_grad=True)
    tt = torch.tensor(t, requires_grad=True)
    ta = torch.eye(5, dtype=torch.float64) - sign * torch.tril(tt, diagonal=-1)
    u = torch.linalg.solve_triangular(ta, tx, upper=False, unitriangular=True)
    du = rng.standard_normal((2, 5, 3))
    grads = backward(symflops.derive(lay), values, {"dU": du}, dims)
    ref = torch.autograd.grad(u, [tx, tt], torch.tensor(du))
    assert np.allclose(grads["dX"], ref[0].numpy(), rtol=0, atol=1e-12)
    # autograd's dT is its gradient of the strictly lower part (tril(-1)); the upper
    # part and the diagonal are read by no product of the statement either
    assert np.allclose(grads["dT"], ref[1].numpy(), rtol=0, atol=1e-12)


def test_a_matrix_shared_by_the_batch_and_verify():
    # T[l,m] shared by every b: its gradient sums over b as well
    lay = layer("U[b,l,v] = X[b,l,v] - T[l,m] U[b,m,v] where m < l", ("L", "L"))
    c = costs(symflops.derive(lay))
    assert sympy.expand(c.flops_forward - B * V * L * (L - 1)) == 0
    assert verify(symflops.derive(lay), seed=4).passed


def test_verify_passes():
    assert verify(symflops.derive(layer()), seed=3).passed


BAD = [
    ("U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m <= l",
     "the earlier rows of U must be bounded by 'm < l' alone", 46),
    ("U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m < l, m < v",
     "the earlier rows of U must be bounded by 'm < l' alone", 53),
    ("U[b,l,v] = X[b,l,v] - T[b,l,m] T[b,l,m] U[b,m,v] where m < l",
     "the earlier rows must be multiplied by one tensor, the matrix", 22),
    ("U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] - X[b,l,v] where m < l",
     "a triangular solve is 'drive -/+ matrix * earlier rows'", 11),
    ("U[b,l,v] = -X[b,l,v] - T[b,l,m] U[b,m,v] where m < l",
     "the drive of a triangular solve is added", 12),
]


@pytest.mark.parametrize("op,message,column", BAD, ids=[m for _, m, _ in BAD])
def test_refused_by_name_at_the_column(tmp_path, capsys, op, message, column):
    path = tmp_path / "bad.yaml"
    path.write_text("dims: {B: batch, L: rows, V: columns}\n"
                    "tensors:\n"
                    "  X: {shape: [B, L, V], role: input}\n"
                    "  T: {shape: [B, L, L], role: input}\n"
                    f"ops:\n  - {op}\n")
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    # the statement starts at column 5 of line 6 ("  - "); ``column`` is 0-based in it
    assert f"{path}:6:{5 + column}: error: " in first, first
    assert message in first and "fix: " in first


def test_the_sheet_derives_the_back_substitution(tmp_path):
    path = tmp_path / "solve.yaml"
    path.write_text("name: solve\ntitle: A triangular solve\n"
                    "dims: {B: batch, L: rows, V: columns}\n"
                    "tensors:\n"
                    "  X: {shape: [B, L, V], role: input}\n"
                    "  T: {shape: [B, L, L], role: input}\n"
                    f"ops:\n  - {SOLVE}\n")
    out = tmp_path / "solve.md"
    assert cli.main(["render", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert ("is the back substitution $(G_{\\text{U}})_{bmv} = dU_{bmv} - \\sum_{l > m} "
            "T_{blm}\\, (G_{\\text{U}})_{blv}$") in text
    assert "\\Rightarrow\\quad (\\mathit{dU}_{\\text{prev}})_{bmv} &= -\\sum_{l} T_{blm}\\, " \
        "dU_{blv}\\, [m < l]" in text
    # forward B L V (L - 1): the sheet's own count, and the one derived above
    assert "forward $BLV(L - 1)$ FLOPs, row $l$ taking one multiply-add" in text
