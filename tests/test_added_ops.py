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


def test_softplus_mlp_counts():
    d, c = derived("softplus_mlp")
    # Two D x F matrices, 6 P B in products; the biases and softplus are elementwise.
    assert c.flops_total == 12 * B * D * FF
    # Forward: bias b_in (B F), softplus (3 B F), bias b_out (B D).
    assert c.elementwise_forward == sympy.expand(B * D + 4 * B * FF)
    # Backward: db_out sums dY (B D), dH = dA softplus'(H) (4 + 1 multiply: 5 B F), db_in (B F).
    assert c.elementwise_backward == sympy.expand(B * D + 6 * B * FF)
    (rule,) = [r for r in d.rules if r.grad == "dH"]
    assert rule.statement == "dH[b,f] = dA[b,f] softplus'(H[b,f])"
    assert d.saved == ("X", "H", "A")


def test_softplus_mlp_verifies():
    verify_passes("softplus_mlp")
