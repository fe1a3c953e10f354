"""Calls over several indices: ``layernorm_{c,p}(X[b,c,p])``.

The grammar: the braced index list is parsed with the column of each letter
(columns counted by hand below), the single-index form is unchanged, and
malformed lists are refused where they go wrong.
"""

import pytest

from symflops.core.errors import SymflopsError
from symflops.lang.statement import Call, Reduced, parse_statement


def lone_call(text: str) -> Call:
    st = parse_statement(text)
    call = st.terms[0].factors[0]
    assert isinstance(call, Call)
    return call


def test_braced_call_carries_its_letters_and_columns():
    #       0         1         2         3
    #       0123456789012345678901234567890123
    text = "N[b,c,p] = layernorm_{c, p}(X[b,c,p]) * g[c]"
    call = lone_call(text)
    assert call.name == "layernorm_{c,p}"
    assert call.column == 11
    assert call.reduced == (Reduced("c", 22), Reduced("p", 25))
    assert call.ref.name == "X" and call.ref.indices == ("b", "c", "p")


def test_single_index_call_is_unchanged():
    call = lone_call("P[s,t] = softmax_t(A[s,t])")
    assert call == Call("softmax_t", 9, call.ref, None)
    assert call.reduced == ()


@pytest.mark.parametrize("text, message, column", [
    ("N[b,c] = softmax_{}(X[b,c])", "softmax_{} names no index", 17),
    ("N[b,c] = softmax_{c,c}(X[b,c])", "the index 'c' is listed twice", 20),
    ("N[b,c] = softmax_{c", "'{' after 'softmax_' is never closed", 17),
    ("N[b,c] = softmax_{c b}(X[b,c])", "expected ',' or '}'", 20),
    ("N[b,c] = softmax_{c,b} X[b,c]", "expected '(' after softmax_{c,b}", 23),
    ("N[b,c] = softmax_{c,b}(2)", "softmax_{c,b}(...) applies to a tensor", 23),
    ("N[b,c] = softmax{c}(X[b,c])", "'{' right after 'softmax'", 16),
    ("N[b,c] = X[b,c] }", "unexpected character '}'", 16),
])
def test_malformed_index_lists_are_refused_where_they_go_wrong(text, message, column):
    from symflops.core.errors import Span

    with pytest.raises(SymflopsError) as err:
        parse_statement(text, Span("f.yaml", 1, 1))
    assert message in str(err.value)
    assert err.value.span.column == 1 + column


# ------------------------------------------------------------ the op --

import sympy  # noqa: E402

import symflops  # noqa: E402
from symflops.checks import verify  # noqa: E402
from symflops.ops.reductions import layernorm_rule, rmsnorm_rule, softmax_rule  # noqa: E402


def dim(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, positive=True, integer=True)


B, C, P = dim("B"), dim("C"), dim("P")


def layer(op: str, shape=("B", "C", "P")):
    return symflops.declare("multi", dims={d: "" for d in shape},
                            tensors={"X": {"shape": list(shape), "role": "input"}}, ops=[op])


def test_two_index_layernorm_rule_by_hand():
    """LayerNorm over n = C*P elements per row b (by hand, the textbook rule
    with the mean over both letters):
    dX = r (dN - mean_{c,p}(dN) - N mean_{c,p}(N dN))."""
    rule = layernorm_rule("N", "X", ("b", "c", "p"), ("c", "p"), (C, P))
    assert rule.statement() == ("dX[b,c,p] = r[b] dN[b,c,p] - 1/(C*P) r[b] dN[b,d,q]"
                                " - 1/(C*P) N[b,c,p] r[b] N[b,d,q] dN[b,d,q]")
    assert [t.summed for t in rule.terms] == [(), ("d", "q"), ("d", "q")]
    assert dict(rule.index_dims) == {"c": C, "d": C, "p": P, "q": P}
    assert rule.aux == (symflops.core.ir.Factor("r", ("b",)),)


def test_two_index_softmax_and_rmsnorm_rules_by_hand():
    # softmax over the joint set: dA = P (dP - sum_{c,p} P dP)
    sm = softmax_rule("P", "A", ("b", "c", "p"), ("c", "p"), (C, P))
    assert sm.statement() == "dA[b,c,p] = P[b,c,p] dP[b,c,p] - P[b,c,p] P[b,d,q] dP[b,d,q]"
    # RMSNorm: dX = r dR - X r^3 sum_{c,p} X dR / (C*P)
    rms = rmsnorm_rule("R", "X", ("b", "c", "p"), ("c", "p"), (C, P))
    assert rms.statement() == ("dX[b,c,p] = r[b] dR[b,c,p]"
                               " - 1/(C*P) X[b,c,p] r[b] r[b] r[b] X[b,d,q] dR[b,d,q]")


def test_two_index_layernorm_cost_and_saved_tensors():
    """Forward, counted by hand: per element 5 (add into the mean, subtract,
    square, add into the variance, multiply by rstd), per row 2 (add eps,
    reciprocal square root); rows are the B values of b, C*P elements each."""
    d = symflops.derive(layer("N[b,c,p] = layernorm_{c,p}(X[b,c,p])"))
    [op] = d.layer.ops
    assert op.statement() == "N[b,c,p] = layernorm_{c,p}(X[b,c,p])"
    assert [(f.tensor, f.indices) for f in op.aux] == [("rstd_N", ("b",))]
    cost = symflops.costs(d).forward[0]
    assert cost.flops == 0
    assert sympy.expand(cost.elementwise - (5 * B * C * P + 2 * B)) == 0


def test_single_index_form_in_braces_is_the_same_op():
    one = symflops.derive(layer("N[b,c,p] = layernorm_{p}(X[b,c,p])"))
    plain = symflops.derive(layer("N[b,c,p] = layernorm_p(X[b,c,p])"))
    assert [op.statement() for op in one.layer.ops] == ["N[b,c,p] = layernorm_p(X[b,c,p])"]
    assert [op.index for op in one.layer.ops] == [op.index for op in plain.layer.ops] == [("p",)]
    assert one.rules == plain.rules


@pytest.mark.parametrize("op", [
    "Y[b,c,p] = softmax_{c,p}(X[b,c,p])",
    "Y[b,c,p] = layernorm_{c,p}(X[b,c,p])",
    "Y[b,c,p] = rmsnorm_{c,p}(X[b,c,p])",
    "Y[b,c,p] = layernorm_{b,p}(X[b,c,p])",      # a 2-D BatchNorm: statistics per channel
    "Y[p,c,b] = rmsnorm_{p,b}(X[b,c,p])",        # letters in another order
])
def test_verify_passes_over_two_indices(op):
    """Finite differences and PyTorch (F.layer_norm, softmax over the
    flattened letters) agree with the derived rules and the NumPy forward."""
    pytest.importorskip("torch")
    report = verify.verify(symflops.derive(layer(op)))
    assert report.passed, verify.text_report(report)


def test_where_clause_on_a_softmax_over_several_indices_is_refused():
    with pytest.raises(SymflopsError, match="over several indices is not supported"):
        symflops.derive(symflops.declare(
            "m", dims={"S": ""}, tensors={"A": {"shape": ["S", "S"], "role": "input"}},
            ops=["P[s,t] = softmax_{s,t}(A[s,t]) where t <= s"]))


def test_a_reduced_letter_the_tensor_lacks_points_at_the_letter():
    with pytest.raises(SymflopsError) as err:
        symflops.derive(layer("N[b,c,p] = layernorm_{c,q}(X[b,c,p])"))
    assert "layernorm over 'q', an index X does not have" in str(err.value)
    assert "or several, e.g. layernorm_{c,p}" in str(err.value)


@pytest.mark.parametrize("op, shape, reference", [
    # GroupNorm: torch normalises per group over (C/G, H, W); here X[b,g,c,p].
    ("N[b,g,c,p] = layernorm_{c,p}(X[b,g,c,p])", ("B", "G", "C", "P"),
     lambda F, x: F.group_norm(x.reshape(x.shape[0], -1, x.shape[3]), x.shape[1], eps=1e-5
                               ).reshape(x.shape)),
    ("N[b,c,p] = layernorm_p(X[b,c,p])", ("B", "C", "P"),
     lambda F, x: F.instance_norm(x, eps=1e-5)),
    ("N[b,c,p] = layernorm_{b,p}(X[b,c,p])", ("B", "C", "P"),
     lambda F, x: F.batch_norm(x, None, None, training=True, eps=1e-5)),
])
def test_the_declared_norms_are_the_torch_layers(op, shape, reference):
    """The NumPy forward of each declaration's norm equals PyTorch's
    GroupNorm / InstanceNorm / BatchNorm (training mode) without affine."""
    torch = pytest.importorskip("torch")
    import numpy as np

    [norm] = symflops.derive(layer(op, shape)).layer.ops
    sizes = dict(zip(shape, (3, 2, 4, 5)))
    x = np.random.default_rng(0).standard_normal([sizes[d] for d in shape])
    got = norm.run({"X": x}, {d.lower(): n for d, n in sizes.items()})["N"]
    want = reference(torch.nn.functional, torch.tensor(x)).numpy()
    assert np.allclose(got, want, atol=1e-10)
