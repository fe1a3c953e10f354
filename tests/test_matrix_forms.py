"""Matrix forms of batched and multi-head products are exactly their rules.

Every matrix form the engine gives for a shipped declaration (forward terms
and backward rules) is computed twice at small random sizes: from the index
form with ``numpy.einsum``, and from the matrix form alone with reshapes,
``.T`` and ``@`` (each tensor's matrix is its row-major reshape, batched over
the ``per`` letters and summed over the ``sum`` letters), and the two
must agree.  A product with no exact form keeps none.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import sympy

import symflops
from symflops.core.ir import Einsum, Factor, dim_symbol
from symflops.core.records import MatrixProduct, matrix_form
from symflops.sheets import printing as P

from conftest import ROOT

DECLARATIONS = sorted(glob.glob(os.path.join(ROOT, "derivations", "*.yaml")))


def _terms(path):
    d = symflops.derive(symflops.load(path))
    for op in d.layer.ops:
        for t in op.terms:
            yield t, op.dims()
    for r in d.rules:
        if len(r.terms) == 1:
            yield r.terms[0], r.dims()


def _sizes(extents, rng):
    symbols = set().union(*(sympy.sympify(e).free_symbols for e in extents.values()))
    values = {s: int(rng.integers(2, 4)) for s in symbols}
    return values, {x: int(sympy.sympify(e).subs(values)) for x, e in extents.items()}


def _matrix(t: np.ndarray, letters, batch, summed, first_of, transposed):
    """``t`` as a stack of matrices: axes [batch..., summed..., rows, cols],
    where the matrix is the row-major reshape of its remaining letters, split
    after the leading block of letters that ``first_of`` holds; ``.T`` when
    ``transposed``.  A batch letter the tensor lacks is an axis of size 1."""
    rest = [x for x in letters if x not in batch and x not in summed]
    split = next((k for k, x in enumerate(rest) if (x in first_of) != (rest[0] in first_of)),
                 len(rest))
    order = [letters.index(x) for x in (*[b for b in batch if b in letters],
                                         *[s for s in summed if s in letters], *rest)]
    a = np.transpose(t, order)
    lead = [t.shape[letters.index(b)] if b in letters else 1 for b in batch]
    lead += [t.shape[letters.index(s)] for s in summed]
    for k, b in enumerate(batch):  # insert the axes of missing batch letters
        if b not in letters:
            a = np.expand_dims(a, k)
    rows = int(np.prod([t.shape[letters.index(x)] for x in rest[:split]]))
    m = a.reshape(*lead, rows, -1)
    return np.swapaxes(m, -1, -2) if transposed else m


def _by_matrix_form(e: Einsum, m: MatrixProduct, arrays, coefficient, ext):
    (ln, lt), (rn, rt) = m.factors
    left = next(f for f in e.operands if f.tensor == ln)
    right = next(f for f in e.operands if f.tensor == rn)
    out = e.output.indices
    lm = _matrix(arrays[ln], list(left.indices), m.batch, m.summed, set(out), lt)
    rm = _matrix(arrays[rn], list(right.indices), m.batch, m.summed, set(left.indices), rt)
    product = lm @ rm
    for _ in m.summed:  # the summed letters are the axes just after the batch
        product = product.sum(axis=len(m.batch))
    rest = [x for x in out if x not in m.batch]
    product = product.reshape(*[ext[b] for b in m.batch], *[ext[x] for x in rest])
    placed = [*m.batch, *rest]
    return coefficient * np.transpose(product, [placed.index(x) for x in out])


def _check(e: Einsum, extents, rng):
    m = matrix_form(e)
    assert m is not None
    values, ext = _sizes(extents, rng)
    arrays = {f.tensor: rng.standard_normal([ext[x] for x in f.indices]) for f in e.operands}
    coefficient = float(e.coefficient.subs(values))
    chars = {x: chr(ord("a") + k) for k, x in enumerate(dict.fromkeys(e.indices))}
    spec = ",".join("".join(chars[x] for x in f.indices) for f in e.operands)
    spec += "->" + "".join(chars[x] for x in e.output.indices)
    expected = coefficient * np.einsum(spec, *(arrays[f.tensor] for f in e.operands))
    got = _by_matrix_form(e, m, arrays, coefficient, ext)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("path", DECLARATIONS, ids=lambda p: os.path.basename(p))
def test_every_matrix_form_of_a_shipped_declaration_is_its_rule(path):
    rng = np.random.default_rng(16)
    for e, extents in _terms(path):
        if matrix_form(e) is not None:
            _check(e, extents, rng)


def _form(statement_path, grad):
    d = symflops.derive(symflops.load(os.path.join(ROOT, "derivations", statement_path)))
    (r,) = [r for r in d.rules if r.grad == grad and r.matrix_form is not None][:1]
    return r.matrix_form


def test_grouped_query_attention_forms():
    dq = _form("gqa.yaml", "dQ")
    assert str(dq) == "dQ = 1/sqrt(E) dA K per (g, r)"
    assert (dq.batch, dq.summed, dq.groups) == (("g", "r"), (), ()) and not dq.plain
    dv = _form("gqa.yaml", "dV")  # dV[t,g,e] = sum_{r,s} P[g,r,s,t] dO[s,g,r,e]
    assert str(dv) == "dV = sum_{r} P^T dO per (g)"
    poly = P.PolyPrinter(("S", "D", "G", "R", "E"))
    assert P.matrix(dv, poly, frozenset({"P", "O", "V"})) == \
        r"dV = \sum_{r} P^\top\, dO \quad \text{per } g"
    assert P.matrix(dq, poly, frozenset({"A", "K", "Q"})).endswith(
        r"dA\, K \quad \text{per } (g, r)")


def test_tokens_and_heads_as_one_index():
    d = symflops.derive(symflops.load(os.path.join(ROOT, "derivations", "decoder_block.yaml")))
    forms = {r.grad: r.matrix_form for r in d.rules if r.matrix_form is not None}
    # dW_q[d,n,e] = sum_{b,s} Xn[b,s,d] dQ[b,s,n,e]: rows (b, s) of both, columns (n, e)
    w = forms["dW_q"]
    assert w.factors == (("Xn", True), ("dQ", False)) and w.batch == () and w.summed == ()
    assert w.groups == (("b", "s"), ("n", "e"))
    poly = P.PolyPrinter(("B", "S", "D", "N", "E"))
    assert P.matrix_product(w, poly, frozenset({"Xn", "Q"})) == (
        r"\mathit{Xn}^\top\, dQ \quad (b, s), (n, e) \text{ flattened}")


def test_plain_matrix_forms_are_unchanged():
    d = symflops.derive(symflops.load(os.path.join(ROOT, "derivations", "ffn.yaml")))
    forms = [r.matrix_form for r in d.rules]
    assert [str(f) for f in forms] == ["dW_out = H^T dY", "dH = dY W_out^T",
                                       "dW_in = X^T dH", "dX = dH W_in^T"]
    assert all(f.batch == () and f.summed == () and f.groups == () and f.plain for f in forms)
    assert P.matrix_product(forms[0], P.PolyPrinter(("B", "D", "F")),
                            frozenset({"H", "Y"})) == r"H^\top\, dY"


def _e(out, *operands, coefficient=sympy.Integer(1)):
    return Einsum(Factor(out[0], tuple(out[1])),
                  tuple(Factor(n, tuple(i)) if not isinstance(n, Factor) else n
                        for n, i in operands), coefficient)


@pytest.mark.parametrize("e", [
    _e(("Y", "b"), ("X", "bd"), ("w", "d")),                  # matrix-vector: no columns
    _e(("Y", "bf"), ("X", "bd"), ("W", "ef")),                 # d and e each summed on one side
    _e(("Y", "bdf"), ("X", "bd"), ("W", "df")),                # nothing contracted
    _e(("Y", "bf"), ("X", "bb"), ("W", "bf")),                 # a diagonal
    _e(("g", "d"), ("X", "bd"), ("dY", "bd")),                 # a row-wise dot product
    _e(("Y", "bf"), ("X", "bd"), ("W", "de"), ("V", "ef")),    # three tensors
], ids=["matvec", "one-sided", "outer", "diagonal", "rowdot", "three"])
def test_no_matrix_form_where_none_is_exact(e):
    assert matrix_form(e) is None


def test_no_matrix_form_through_a_where_clause():
    d = symflops.derive(symflops.load(os.path.join(ROOT, "derivations",
                                                   "attention_scores_causal.yaml")))
    for r in d.rules:
        if r.terms[0].where():
            assert r.matrix_form is None


def test_reordered_rows_are_batched_exactly():
    # Y[s,b,f] = X[b,s,d] W[d,f]: (b, s) cannot be one row index in both X and Y,
    # so the form is per b; the numeric check confirms it
    e = _e(("Y", "sbf"), ("X", "bsd"), ("W", "df"))
    m = matrix_form(e)
    assert str(m) == "Y = X W per (b)"
    _check(e, {x: dim_symbol(x.upper()) for x in "sbfd"}, np.random.default_rng(3))
