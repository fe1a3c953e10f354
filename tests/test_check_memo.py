"""The quantities ``check`` counts are shared, in one process, by every
Declaration of an equal layer (symflops.checks.declarations._QUANTITIES):
an equal layer gets the very same quantities, a layer that differs in
anything (a tensor's role, a shape, its name) never gets another's, and what
is shared equals a count made afresh with the memo empty."""

from __future__ import annotations

import sympy

from symflops.checks import declarations as D
from symflops.checks.declarations import Convention, Declaration
from symflops.declaration.reader import loads

FFN = """name: ffn
dims: {B: tokens, D: width, F: hidden}
tensors:
  X: {shape: [B, D], role: input}
  W_in: {shape: [D, F], role: %s}
  W_out: {shape: [F, D], role: param}
ops:
  - H[b,f] = X[b,d] W_in[d,f]
  - Y[b,e] = H[b,f] W_out[f,e]
"""
B, Dm, F = sympy.symbols("B D F", positive=True, integer=True)


def fresh(layer, convention):
    """The quantities with the memo empty (so counted here, not shared)."""
    saved = dict(D._QUANTITIES)
    D._QUANTITIES.clear()
    try:
        return dict(Declaration(layer).quantities(convention))
    finally:
        D._QUANTITIES.clear()
        D._QUANTITIES.update(saved)


def test_an_equal_layer_shares_and_a_different_one_never_does():
    convention = Convention()
    trained = loads(FFN % "param")
    again = loads(FFN % "param")                   # the same text, read again
    frozen = loads(FFN % "frozen")
    renamed = loads((FFN % "param").replace("name: ffn", "name: ffn2"))
    assert again == trained and frozen != trained and renamed != trained

    first = Declaration(trained).quantities(convention)
    assert Declaration(again).quantities(convention) is first      # shared
    for other in (frozen, renamed):
        got = Declaration(other).quantities(convention)
        assert got is not first and got == fresh(other, convention)
    assert first == fresh(trained, convention)
    # the one that differs counts differently: by hand, W_in frozen has no weight
    # gradient, 2*B*D*F FLOPs less in the backward pass (one B x D x F product)
    name = "flops.backward"
    assert first[name] - Declaration(frozen).quantities(convention)[name] == 2 * B * Dm * F


def test_another_convention_is_counted_apart():
    layer = loads(FFN % "param")
    flops = Declaration(layer).quantities(Convention())
    macs = Declaration(layer).quantities(Convention(macs=True))
    assert macs is not flops
    # by hand: forward is two B x D x F products, 2*B*D*F multiply-adds, 4*B*D*F FLOPs
    assert flops["flops.forward"] == 4 * B * Dm * F and macs["flops.forward"] == 2 * B * Dm * F
