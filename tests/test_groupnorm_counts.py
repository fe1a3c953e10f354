"""GroupNorm (``derivations/groupnorm.yaml``), counted by hand.

``N[b,g,c,p] = layernorm_{c,p}(X[b,g,c,p]) * g[g,c] + beta[g,c]``: every
(b, g) row normalises its C*P elements jointly.  Write n = B*G*C*P for the
elements and r = B*G for the rows.  The README's conventions give, with no
matrix products anywhere (so every FLOP is elementwise):

* forward: LayerNorm 5 per element and 2 per row (add eps, reciprocal square
  root), then the gain (a multiply) and the bias (an add): 7n + 2r;
* backward: ``dg = sum_{b,p} N_hat dN``, a multiply-add per element, 2n;
  ``dbeta = sum_{b,p} dN``, n adds; ``dN_hat = dN g``, n multiplies; and the
  derived LayerNorm rule
  ``dX = r dN_hat - r sum_{d,q} dN_hat / (CP) - N_hat r sum_{d,q}(N_hat dN_hat) / (CP)``:
  n for the first term; 2n for the row sum of ``rstd * dN_hat`` and r for its
  coefficient; 2n for the row sum of ``N_hat dN_hat``, r for the multiply by
  ``rstd``, n for the multiply by ``N_hat`` and n for the coefficient (it
  multiplies the whole output); 2n to add the three terms: 9n + 2r.
  Backward total 13n + 2r.

Parameters: a gain and a bias per channel, 2*G*C.  These match PyTorch:
``torch.nn.GroupNorm(G, G*C)`` has ``2*G*C`` parameters.
"""

from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs

ROOT = Path(__file__).resolve().parent.parent
B, G, C, P = sympy.symbols("B G C P", positive=True, integer=True)
n, r = B * G * C * P, B * G


def derived():
    return symflops.derive(symflops.load(ROOT / "derivations" / "groupnorm.yaml"))


def test_groupnorm_flops_by_hand():
    c = costs(derived())
    assert c.accumulate == 0
    assert c.flops_forward == 0 and c.flops_backward == 0
    assert sympy.expand(c.elementwise_forward - (7 * n + 2 * r)) == 0
    assert sympy.expand(c.elementwise_backward - (13 * n + 2 * r)) == 0
    d = derived()
    by_grad = {rule.grad: cost.elementwise for rule, cost in zip(d.rules, c.backward)}
    assert sympy.expand(by_grad["dX"] - (9 * n + 2 * r)) == 0
    assert sympy.expand(by_grad["dg"] - 2 * n) == 0


def test_groupnorm_parameters_are_torchs():
    assert sympy.expand(costs(derived()).params - 2 * G * C) == 0
    torch = pytest.importorskip("torch")
    ours = costs(derived()).params.subs({G: 4, C: 3})
    assert sum(p.numel() for p in torch.nn.GroupNorm(4, 4 * 3).parameters()) == ours == 24
