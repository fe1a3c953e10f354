"""A view of an axis as two letters, ``Xv[b,i,u] = X[b,U*i+u]`` (a reshape).

Expected values by hand: the view moves each element once, so it costs 0
FLOPs forward, and its gradient ``dX[b,q] = dXv[b,i,u] where q = U*i + u``
puts each element of ``dXv`` in its own place (the blocks do not overlap:
``U*i + u`` for ``u < U`` is a different position for every ``(i, u)``), a
copy, 0 FLOPs.  A stride-2 window ``2*i+u`` with ``u < U`` does overlap for
``U > 2``, so its scatter still adds.
"""

import numpy as np
import pytest
import sympy

import symflops
from symflops.core.errors import SymflopsError
from symflops.count.cost import costs
from symflops.checks.numeric import forward

B, I, U, F, N = sympy.symbols("B I U F N", positive=True, integer=True)


def view(axis="I*U", op="Xv[b,i,u] = X[b,U*i+u]"):
    return symflops.declare("view", dims={"B": "batch", "I": "blocks", "U": "block width",
                                          "F": "out", "N": "positions"},
                            tensors={"X": {"shape": ["B", axis], "role": "input"},
                                     "W": {"shape": ["U", "F"], "role": "param"}},
                            ops=[op, "Y[b,i,f] = Xv[b,i,u] W[u,f]"])


def test_the_view_binds_its_letters_row_major():
    layer = view()
    assert layer.tensor("Xv").shape == (B, I, U)


def test_a_view_and_its_gradient_cost_nothing():
    d = symflops.derive(view())
    c = costs(d)
    assert c.forward[0].flops == 0 and c.forward[0].elementwise == 0
    by = {r.grad: w for r, w in zip(d.rules, c.backward)}
    assert by["dX"].flops == 0 and by["dX"].elementwise == 0
    # the product after it: 2 B I U F forward, twice that backward (dW, dXv)
    assert sympy.expand(c.flops_forward - 2 * B * I * U * F) == 0
    assert sympy.expand(c.flops_backward - 4 * B * I * U * F) == 0
    assert c.elementwise_forward == 0 and c.elementwise_backward == 0


def test_the_view_is_numpys_reshape():
    layer = view()
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 12)), rng.standard_normal((4, 5))
    out = forward(layer, {"X": x, "W": w}, {"B": 2, "I": 3, "U": 4, "F": 5, "N": 1})
    assert np.array_equal(out["Xv"], x.reshape(2, 3, 4))


def test_an_axis_the_block_does_not_divide_is_refused():
    with pytest.raises(SymflopsError, match="views an axis of N positions as blocks of U"):
        view(axis="N")


def test_an_overlapping_window_still_adds_in_its_gradient():
    # The stride-2 convolution's input gradient: each (i, u) adds into dX.
    conv = symflops.declare("conv", dims={"B": "batch", "I": "out", "U": "kernel"},
                            tensors={"X": {"shape": ["B", "2*I + U - 2"], "role": "input"},
                                     "W": {"shape": ["U"], "role": "param"}},
                            ops=["Y[b,i] = X[b,2*i+u] W[u]"])
    d = symflops.derive(conv)
    by = {r.grad: w for r, w in zip(d.rules, costs(d).backward)}
    # dX[b,q] = dY[b,i] W[u] where q = 2*i + u: a multiply and an add per (b, i, u)
    assert sympy.expand(by["dX"].flops + by["dX"].elementwise - 2 * B * I * U) == 0
