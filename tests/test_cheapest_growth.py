"""A product of three tensors whose cheapest backward order depends on the
sizes, declared without ``sizes:``: its count is the cost of whichever order
is cheapest (``Cheapest``, a Piecewise), and a sheet must still say how the
counts grow.  Before, the sheet stopped with an internal error (exit 70)."""

from __future__ import annotations

import contextlib
import io

from pathlib import Path

import pytest
import sympy

from symflops.core.errors import SymflopsError
from symflops.core.ir import dim_symbol
from symflops.core.polynomial import Cheapest
from symflops.count.growth import degree

BILINEAR = """\
name: bilinear
title: Bilinear pooling with a low-rank gate
dims: {B: tokens in the batch, I: first width, J: second width, O: output width, R: gate rank}
tokens: B
tensors:
  X: {shape: [B, I], role: input}
  Z: {shape: [B, J], role: input}
  W: {shape: [I, J, O], role: param}
  U: {shape: [O, R], role: param}
  V: {shape: [R, O], role: param}
ops:
  - Y[b,o] = X[b,i] W[i,j,o] Z[b,j]
  - G[b,r] = Y[b,o] U[o,r]
  - H[b,p] = G[b,r] V[r,p]
examples:
  small: {B: 512, I: 64, J: 48, O: 256, R: 16}
"""


def run(*args):
    from symflops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(map(str, args)))
    return code, out.getvalue(), err.getvalue()


def test_the_sheet_of_a_product_whose_cheapest_order_is_not_settled_says_how_it_grows(tmp_path):
    path = tmp_path / "bilinear.yaml"
    path.write_text(BILINEAR)
    code, out, err = run("derive", path)
    assert code == 0 and "Piecewise(" in out, err   # dX and dZ: three orders each, unsettled
    code, _, err = run("render", path, "-o", tmp_path / "b.md")
    assert code == 0, err
    md = (tmp_path / "b.md").read_text()
    # by hand: every term of the training FLOPs, forward 2BO(IJ + J + 2R) and each
    # rule's order, has B to the first power; the weights have no B
    assert "| $B$ (tokens in the batch) | linearly | linearly | not at all |" in md


def test_its_live_numbers_are_refused_with_what_settles_it(tmp_path):
    """The page's script evaluates no Cheapest: refused (exit 2 from a
    command), saying that declaring sizes: settles it, at the product whose
    gradient is unsettled (the first op, line 12 column 5 of the text above;
    dX is the first rule with three orders and no one cheapest everywhere:
    dW's three orders cost the same)."""
    from symflops.declaration.reader import load
    from symflops.sheets.live import live_data

    path = tmp_path / "bilinear.yaml"
    path.write_text(BILINEAR)
    with pytest.raises(SymflopsError) as refused:
        live_data(load(path))
    assert "sizes:" in str(refused.value) and "cheapest order" in str(refused.value)
    span = refused.value.span
    assert (Path(span.file).name, span.line, span.column) == ("bilinear.yaml", 12, 5)
    assert "the gradient dX[b,i] = dY[b,o] W[i,j,o] Z[b,j] of the product Y[b,o]" in str(
        refused.value)
    code, _, err = run("render", path, "--format", "html", "-o", tmp_path / "b.html")
    assert code == 2 and f"{path}:12:5: error: the live numbers" in err, err
    assert not (tmp_path / "b.html").exists()


S, E, F = (dim_symbol(n) for n in "SEF")


def _cheapest(first, second):
    """Two orders, (flops, elementwise) each: the first's count where its total is the least."""
    (a, x), (b, y) = first, second
    return Cheapest((a, sympy.Le(a + x, b + y, evaluate=False)), (b, True))


def test_as_a_dim_grows_the_order_of_least_degree_is_the_count():
    # linear attention's dK: (dY V) Q costs 2S^2(E+F), (dY Q) V costs 4SEF (each with
    # one elementwise pass of S*E); for a long S the second is cheaper, so the
    # count grows linearly with S, though the first order's is quadratic
    c = _cheapest((2 * S**2 * (E + F), S * E), (4 * S * E * F, S * E))
    assert degree(c, S) == 1
    assert degree(3 * S * E + c, S) == 1
    assert degree(c, E) == 1        # both orders' totals are linear in E, and so are both counts


def test_a_tie_whose_counts_grow_differently_is_refused_naming_sizes():
    # the totals tie in degree in E (both linear) but the counts do not
    # (E^1 against E^0): which is counted depends on S and F, so no degree is said
    c = _cheapest((2 * S * E, S * F), (2 * S * F, S * E))
    with pytest.raises(SymflopsError, match="sizes:"):
        degree(c, E)
