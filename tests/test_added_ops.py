"""The ops added to prove the op-kind protocol (issue 15): softplus, elu, logsumexp_t.

Every expected value here is worked out by hand, not read from symflops:
the derivatives from calculus, the FLOP counts from the counting
conventions stated in :mod:`symflops.ops.functions` (one per operation of the
formula as written) and :mod:`symflops.ops.logsumexp`, and the numbers from
``math``.  ``symflops verify`` then checks each shipped declaration against
finite differences and PyTorch.
"""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.ops import functions as F

ROOT = Path(__file__).resolve().parent.parent
B, D, FF = sympy.symbols("B D F", positive=True, integer=True)
POINTS = (-2.5, -0.7, 0.0, 0.3, 1.9)


def derived(name):
    d = symflops.derive(symflops.load(ROOT / "derivations" / f"{name}.yaml"))
    return d, costs(d)


def verify_passes(name):
    """``symflops verify`` on a shipped declaration: finite differences,
    autograd, FLOPs against PyTorch's counter, saved tensors."""
    run = subprocess.run([sys.executable, "-m", "symflops", "verify",
                          str(ROOT / "derivations" / f"{name}.yaml")],
                         capture_output=True, text=True, cwd=ROOT)
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
    assert F.numpy_function("softplus")(x) == pytest.approx([math.log1p(math.exp(v)) for v in POINTS])
    assert F.numpy_function("softplus'")(x) == pytest.approx([1 / (1 + math.exp(-v)) for v in POINTS])


def test_softplus_matches_torch_below_its_threshold():
    torch = pytest.importorskip("torch")
    x = np.array(POINTS)
    ours = F.numpy_function("softplus")(x)
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
    assert F.numpy_function("elu")(x) == pytest.approx([elu_by_hand(v) for v in POINTS])
    assert F.numpy_function("elu'")(x) == pytest.approx([1.0 if v > 0 else math.exp(v)
                                                         for v in POINTS])
    # The constant branch of the derivative still has the array's shape.
    assert F.numpy_function("elu'")(np.ones((2, 3))).shape == (2, 3)


def test_elu_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array(POINTS)
    theirs = F.FUNCTIONS["elu"].torch(torch, torch.tensor(x, dtype=torch.float64)).numpy()
    assert F.numpy_function("elu")(x) == pytest.approx(theirs, rel=1e-14)


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
