"""The ops added to prove the op-kind protocol (issue 15): softplus, elu, logsumexp_t.

Every expected value here is worked out by hand, not read from symflops:
the derivatives from calculus, the FLOP counts from the counting
conventions stated in :mod:`symflops.ops.functions` (one per operation of the
formula as written) and :mod:`symflops.ops.logsumexp`, and the numbers from
``math``.  ``symflops verify`` then checks each shipped declaration against
finite differences and PyTorch.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.core.ir import Apply
from symflops.count.cost import costs
from symflops.ops import functions as F
import forked

ROOT = Path(__file__).resolve().parent.parent
B, D, FF = sympy.symbols("B D F", positive=True, integer=True)
POINTS = (-2.5, -0.7, 0.0, 0.3, 1.9)


def derived(name):
    d = symflops.derive(symflops.load(ROOT / "derivations" / f"{name}.yaml"))
    return d, costs(d)


def verify_passes(name):
    """``symflops verify`` on a shipped declaration: finite differences,
    autograd, FLOPs against PyTorch's counter, saved tensors."""
    run = forked.run("verify", str(ROOT / "derivations" / f"{name}.yaml"), cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "result: pass" in run.stdout and "torch.autograd" in run.stdout, run.stdout


# ------------------------------------------------------------ softplus --

def test_softplus_derivative_is_the_logistic_sigmoid():
    # d/dx log(1 + e^x) = e^x / (1 + e^x) = 1 / (1 + e^-x).
    f = F.FUNCTIONS["softplus"]
    assert f.saves == "input"
    for x in POINTS:
        assert float(f.derivative.subs(F.X, x)) == pytest.approx(1 / (1 + math.exp(-x)), rel=1e-14)


def test_softplus_numpy_forward_and_derivative():
    x = np.array(POINTS)
    assert F.numpy_function(Apply("softplus"))(x) == pytest.approx([math.log1p(math.exp(v)) for v in POINTS])
    assert F.numpy_function(Apply("softplus", "derivative"))(x) == pytest.approx(
        [1 / (1 + math.exp(-v)) for v in POINTS])


def test_softplus_matches_torch_below_its_threshold():
    torch = pytest.importorskip("torch")
    x = np.array(POINTS)
    ours = F.numpy_function(Apply("softplus"))(x)
    theirs = F.FUNCTIONS["softplus"].torch(torch, torch.tensor(x, dtype=torch.float64)).numpy()
    assert ours == pytest.approx(theirs, rel=1e-14)


def test_softplus_costs_count_its_formula():
    # log(exp(x) + 1): exp, add, log.  exp(x) / (exp(x) + 1): exp twice, add, divide.
    f = F.FUNCTIONS["softplus"]
    assert (f.cost, f.derivative_cost) == (3, 4)


def test_softplus_mlp_verifies():
    verify_passes("softplus_mlp")


# ----------------------------------------------------------------- elu --

def elu_by_hand(x):
    return x if x > 0 else math.expm1(x)


def test_elu_derivative_by_branch():
    # d/dx x = 1 for x > 0; d/dx (e^x - 1) = e^x otherwise (1 at 0: the branches meet).
    f = F.FUNCTIONS["elu"]
    assert f.saves == "input"
    for x in POINTS:
        assert float(f.derivative.subs(F.X, x)) == pytest.approx(1.0 if x > 0 else math.exp(x),
                                                                 rel=1e-14)


def test_elu_numpy_forward_and_derivative_take_the_branch_per_element():
    x = np.array(POINTS)
    assert F.numpy_function(Apply("elu"))(x) == pytest.approx([elu_by_hand(v) for v in POINTS])
    assert F.numpy_function(Apply("elu", "derivative"))(x) == pytest.approx(
        [1.0 if v > 0 else math.exp(v) for v in POINTS])
    # The constant branch of the derivative still has the array's shape.
    assert F.numpy_function(Apply("elu", "derivative"))(np.ones((2, 3))).shape == (2, 3)


def test_elu_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array(POINTS)
    theirs = F.FUNCTIONS["elu"].torch(torch, torch.tensor(x, dtype=torch.float64)).numpy()
    assert F.numpy_function(Apply("elu"))(x) == pytest.approx(theirs, rel=1e-14)


def test_elu_costs_count_the_choice_and_every_branch():
    # elu: choose the branch (1), exp (1), subtract 1 (1).  elu': choose (1), exp (1).
    f = F.FUNCTIONS["elu"]
    assert (f.cost, f.derivative_cost) == (3, 2)


def test_elu_layer_verifies():
    verify_passes("elu_layer")


# ------------------------------------------ the shipped declarations --

#: Hand counts: (declaration, matmul FLOPs, elementwise forward, elementwise
#: backward, the activation's rule, the saved tensors).
COUNTS = [
    # Two D x F matrices: 6 P B in products.  Forward elementwise: bias b_in (B F),
    # softplus (3 B F), bias b_out (B D).  Backward: db_out sums dY (B D),
    # dH = dA softplus'(H) (4 + 1 multiply: 5 B F), db_in (B F).
    ("softplus_mlp", 12 * B * D * FF, B * D + 4 * B * FF, B * D + 6 * B * FF,
     "dH[b,f] = dA[b,f] softplus'(H[b,f])", ("X", "H", "A")),
    # One D x F matrix.  Forward: the bias (B F) and elu (3 B F).  Backward:
    # dH = dY elu'(H) (2 + 1 multiply: 3 B F) and dc summing dH over b (B F).
    ("elu_layer", 6 * B * D * FF, 4 * B * FF, 4 * B * FF,
     "dH[b,f] = dY[b,f] elu'(H[b,f])", ("X", "H")),
]


@pytest.mark.parametrize("name,flops,forward,backward,rule,saved", COUNTS)
def test_declaration_counts(name, flops, forward, backward, rule, saved):
    d, c = derived(name)
    assert c.flops_total == flops
    assert c.elementwise_forward == sympy.expand(forward)
    assert c.elementwise_backward == sympy.expand(backward)
    assert rule in [r.statement for r in d.rules]
    assert d.saved == saved


# ---------------------------------------------------------- logsumexp --

S, T = sympy.symbols("S T", positive=True, integer=True)


def pool(ops=("Y[s] = logsumexp_t(A[s,t])",)):
    return symflops.declare("lse", dims={"S": "rows", "T": "columns"},
                            tensors={"A": {"shape": ["S", "T"], "role": "input"}}, ops=list(ops))


def test_logsumexp_rule_is_the_softmax_times_the_upstream_gradient():
    # d/dA[s,t] log sum_u exp(A[s,u]) = exp(A[s,t]) / sum_u exp(A[s,u]) = P[s,t].
    d = symflops.derive(pool())
    (rule,) = d.rules
    assert rule.statement == "dA[s,t] = P_Y[s,t] dY[s]"
    assert d.saved == ("P_Y",)  # the softmax it saves, not A or Y


def test_logsumexp_derivation_stages_by_hand():
    op = symflops.derive(pool()).layer.ops[0]
    red = op.shown()
    A = sympy.IndexedBase("A", real=True)
    s, t, u = (sympy.Symbol(c, integer=True) for c in "stu")
    s1, t1 = sympy.Symbol("s'", integer=True), sympy.Symbol("t'", integer=True)
    row = sympy.Sum(sympy.exp(A[s, u]), (u, 0, T - 1))
    assert red.stage("forward") == sympy.log(row)
    by_hand = sympy.KroneckerDelta(s, s1) * sympy.exp(A[s, t1]) / row
    assert sympy.simplify(red.stage("derivative") - by_hand) == 0
    P = sympy.IndexedBase("P_Y", positive=True)
    assert sympy.expand(red.stage("substituted") - sympy.KroneckerDelta(s, s1) * P[s, t1]) == 0


def test_logsumexp_costs_follow_softmax():
    _, c = (lambda d: (d, costs(d)))(symflops.derive(pool()))
    # Per element: exp, add into the row sum, divide for P (3); per row: the log (1).
    assert c.flops_total == 0
    assert c.elementwise_forward == 3 * S * T + S
    # dA = P dY: one multiply per element.
    assert c.elementwise_backward == S * T


def test_logsumexp_numpy_forward_is_stable_and_matches_math():
    op = symflops.derive(pool()).layer.ops[0]
    a = np.array([[0.5, -1.0, 2.0], [1000.0, 1001.0, 999.0]])
    got = op.run({"A": a}, {"s": 2, "t": 3})
    row0 = math.log(sum(math.exp(v) for v in a[0]))
    row1 = 1000.0 + math.log(1 + math.e + math.exp(-1))  # shifted by hand: no overflow
    assert got["Y"] == pytest.approx([row0, row1], rel=1e-14)
    assert got["P_Y"][0] == pytest.approx([math.exp(v - row0) for v in a[0]], rel=1e-13)
    assert got["P_Y"].sum(axis=1) == pytest.approx([1.0, 1.0])


def test_logsumexp_output_letters_in_another_order():
    layer = symflops.declare("lse3", dims={"B": "batch", "S": "rows", "T": "columns"},
                             tensors={"A": {"shape": ["B", "T", "S"], "role": "input"}},
                             ops=["Y[s,b] = logsumexp_t(A[b,t,s])"])
    op = layer.ops[0]
    a = np.random.default_rng(1).normal(size=(2, 3, 4))
    y = op.run({"A": a}, {"b": 2, "t": 3, "s": 4})["Y"]
    assert y.shape == (4, 2)
    assert y[3, 1] == pytest.approx(math.log(sum(math.exp(v) for v in a[1, :, 3])))
    torch = pytest.importorskip("torch")
    theirs = op.torch(torch, {"A": torch.tensor(a)})
    assert theirs["Y"].numpy() == pytest.approx(y, rel=1e-14)
    assert symflops.derive(layer).rules[0].statement == "dA[b,t,s] = P_Y[b,t,s] dY[s,b]"


def test_logsumexp_pool_counts():
    d, c = derived("logsumexp_pool")
    Bs, Ss, Ts, Es = sympy.symbols("B S T E", positive=True, integer=True)
    # Q K^T: 2 B S T E forward, twice that backward; the scale 1/sqrt(E) is elementwise.
    assert c.flops_total == 6 * Bs * Ss * Ts * Es
    # Forward: the scale (B S T), logsumexp (3 B S T + B S).
    assert c.elementwise_forward == sympy.expand(4 * Bs * Ss * Ts + Bs * Ss)
    # Backward: dA = P_Y dY (B S T), the scale on dQ (B S E) and on dK (B T E).
    assert c.elementwise_backward == sympy.expand(Bs * Ss * Ts + Bs * Ss * Es + Bs * Ts * Es)
    assert d.saved == ("Q", "K", "P_Y")


def test_logsumexp_pool_verifies():
    verify_passes("logsumexp_pool")


@pytest.mark.parametrize("op,expect,column", [
    # column: of the file line "  - <op>", counted from 1
    ("Y[s] = logsumexp_u(A[s,t])", "logsumexp over 'u', an index A does not have", 12),
    ("Y[s,t] = logsumexp_t(A[s,t])", "the output Y[s,t] keeps the reduced index 't'", 5),
    ("Y[] = logsumexp_t(A[s,t])", "must carry A's letters other than 't': s", 5),
    ("Y[s] = logsumexp_t(A[s,t], A[s,t])", "logsumexp_t takes one tensor", 32),
    ("Y[] = logsumexp_s(A[s,s])", "logsumexp_s of a diagonal is not supported", 11),
    ("Y[s] = 2 logsumexp_t(A[s,t])", "logsumexp_t(...) must be the whole right side", 14),
    ("Y[s] = 2 * Z[s] + logsumexp_t(A[s,t])", "logsumexp_t(...) must be the whole right side", 23),
    ("Y[s] = logsumexp_t(A[s,t]) where t <= s", "a where-clause on logsumexp_t(...)", 38),
    ("Y[] = logsumexp_t(V[t])", "logsumexp_t of a tensor with no other index", 11),
])
def test_logsumexp_bad_statements_point_at_the_mistake(tmp_path, capsys, op, expect, column):
    from symflops import cli

    path = tmp_path / "bad.yaml"
    path.write_text("dims: {S: rows}\ntensors:\n  A: {shape: [S, S], role: input}\n"
                    "  V: {shape: [S], role: input}\n  Z: {shape: [S], role: input}\n"
                    f"ops:\n  - {op}\n")
    assert cli.main(["derive", str(path)]) == 2
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert f"{path}:7:{column}: error: " in first and expect in first and "fix: " in first, first


# ------------------------------------------------------- square and abs --

def test_square_and_abs_derivatives_by_hand():
    """d/dx x^2 = 2x; d/dx |x| = sign(x), 0 at 0 (PyTorch's subgradient there)."""
    sq, ab = F.FUNCTIONS["square"], F.FUNCTIONS["abs"]
    assert sq.saves == ab.saves == "input"
    for x in (*POINTS, 0.0):
        assert float(sq.derivative.subs(F.X, x)) == pytest.approx(2 * x)
        assert float(ab.derivative.subs(F.X, x)) == (x > 0) - (x < 0)
    x = np.array([*POINTS, 0.0])
    assert F.numpy_function(Apply("abs", "derivative"))(x) == pytest.approx(np.sign(x))
    # one operation each, the derivative one more with its multiply by dY (the module's rule)
    assert (sq.cost, ab.cost) == (1, 1)


def test_square_and_abs_match_torch_and_its_autograd():
    torch = pytest.importorskip("torch")
    x = torch.tensor([*POINTS, 0.0], dtype=torch.float64, requires_grad=True)
    for name in ("square", "abs"):
        f = F.FUNCTIONS[name]
        y = f.torch(torch, x)
        (g,) = torch.autograd.grad(y.sum(), x)
        assert F.numpy_function(Apply(name))(x.detach().numpy()) == pytest.approx(y.detach().numpy())
        assert F.numpy_function(Apply(name, "derivative"))(x.detach().numpy()) == pytest.approx(
            g.numpy())


def test_a_layer_with_square_and_abs_passes_verify(tmp_path):
    path = tmp_path / "fn.yaml"
    path.write_text("""name: fn
dims: {B: batch, D: width, F: hidden}
tensors:
  X: {shape: [B, D], role: input}
  W: {shape: [D, F], role: param}
ops:
  - U[b,f] = X[b,d] W[d,f]
  - Y[b,f] = square(U[b,f]) + abs(U[b,f])
""")
    run = forked.run("verify", str(path), cwd=ROOT)
    assert run.returncode == 0 and "result: pass" in run.stdout, run.stdout + run.stderr


def test_an_unknown_function_lists_every_call_kind(tmp_path):
    """The hint names logsumexp_i and cross_entropy_v too (as whole statements)."""
    path = tmp_path / "unk.yaml"
    path.write_text("name: unk\ndims: {B: batch, D: width}\ntensors:\n"
                    "  X: {shape: [B, D], role: input}\nops:\n  - Y[b,d] = lg(X[b,d])\n")
    run = forked.run("derive", str(path), cwd=ROOT)
    assert run.returncode == 2
    for name in ("square", "abs", "softmax_i", "logsumexp_i", "cross_entropy_v"):
        assert name in run.stderr, name
