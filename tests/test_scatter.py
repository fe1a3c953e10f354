"""A forward scatter, ``Agg[dst[e], d] += M[e,d]`` (issue 25, item 17): the
adjoint of a lookup, message passing aggregated by destination node.

Expected values come from outside the code under test: counts made by hand
(written out below), PyTorch's ``index_add_`` and autograd for the forward
pass and the gradients, FlopCounterMode for GraphSAGE's products, and the
count of the lookup it is the adjoint of (the README's Conventions).
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.numeric import backward, forward
from symflops.core.errors import SymflopsError
from symflops.count.cost import costs
from symflops.lang.statement import parse_statement
import forked

ROOT = Path(__file__).resolve().parent.parent
GRAPHSAGE = ROOT / "derivations" / "graphsage.yaml"
N, E, D, F = sympy.symbols("N E D F", positive=True, integer=True)

SCATTER = """\
name: scatter
dims: {N: nodes, E: edges, D: width}
tensors:
  M: {shape: [E, D], role: input}
  w: {shape: [E], role: input}
  dst: {shape: [E], role: index}
  Agg: {shape: [N, D], role: activation}
ops:
  - Agg[dst[e], d] += M[e,d] w[e]
"""


def load_text(tmp_path, text):
    path = tmp_path / "decl.yaml"
    path.write_text(text)
    return symflops.load(path)


def refusal(tmp_path, text):
    with pytest.raises(SymflopsError) as info:
        symflops.derive(load_text(tmp_path, text))
    return info.value


def test_plain_scatter_counts_by_hand(tmp_path):
    d = symflops.derive(load_text(tmp_path, SCATTER.replace(" w[e]", "")))
    c = costs(d)
    # Each of the E*D elements of M is added into one element of Agg: E D adds,
    # elementwise (as the scatter-add of a lookup's gradient); no product.
    assert c.flops_forward == 0 and sympy.expand(c.elementwise_forward - E * D) == 0
    # Its backward dM[e,d] = dAgg[dst[e],d] is a gather: a copy, 0 FLOPs.
    (rule,) = d.rules
    assert rule.statement == "dM[e,d] = dAgg[dst[e],d]"
    assert c.flops_backward == 0 and c.elementwise_backward == 0
    # The gather reads dst: dst is saved (E elements), as a lookup's index is.
    assert d.saved == ("dst",)
    assert d.layer.ops[0].statement() == "Agg[dst[e],d] += M[e,d]"


def test_weighted_scatter_counts_by_hand(tmp_path):
    d = symflops.derive(load_text(tmp_path, SCATTER))
    c = costs(d)
    # M[e,d] w[e]: E D multiplies, then E D adds into Agg: 2 E D, elementwise.
    assert c.flops_forward == 0 and sympy.expand(c.elementwise_forward - 2 * E * D) == 0
    # dM[e,d] = dAgg[dst[e],d] w[e]: E D multiplies; dw[e] = sum_d dAgg[dst[e],d] M[e,d]:
    # a row-wise dot product, 2 E D, elementwise by the bucket rule.
    assert sympy.expand(c.elementwise_backward - 3 * E * D) == 0
    assert {r.statement for r in d.rules} == {"dM[e,d] = dAgg[dst[e],d] w[e]",
                                               "dw[e] = M[e,d] dAgg[dst[e],d]"}


def test_the_statement_reparses():
    st = parse_statement("Agg[dst[e],d] += M[e,d] w[e]")
    assert st.accumulate and st.lhs.gathers[0].ref.name == "dst"


def test_scatter_matches_index_add_and_autograd(tmp_path):
    torch = pytest.importorskip("torch")
    d = symflops.derive(load_text(tmp_path, SCATTER))
    rng = np.random.default_rng(3)
    n, e, w = 4, 9, 3
    leaves = {"M": rng.standard_normal((e, w)), "w": rng.standard_normal(e),
              "dst": rng.integers(0, n, e)}
    dims = {"N": n, "E": e, "D": w}
    values = forward(d.layer, leaves, dims)
    tm = torch.tensor(leaves["M"], requires_grad=True)
    tw = torch.tensor(leaves["w"], requires_grad=True)
    ref = torch.zeros(n, w, dtype=torch.float64).index_add_(0, torch.tensor(leaves["dst"]),
                                                            tm * tw[:, None])
    assert np.allclose(values["Agg"], ref.detach().numpy())
    # symflops's own PyTorch forward (verify's oracle) gives the same
    tleaves = {"M": torch.tensor(leaves["M"]), "w": torch.tensor(leaves["w"]),
               "dst": torch.tensor(leaves["dst"])}
    mine = d.layer.ops[0].torch(torch, tleaves, dims)["Agg"]
    assert np.allclose(mine.numpy(), ref.detach().numpy())
    g = rng.standard_normal((n, w))
    (ref * torch.tensor(g)).sum().backward()
    grads = backward(d, values, {"dAgg": g}, dims)
    assert np.allclose(grads["dM"], tm.grad.numpy())
    assert np.allclose(grads["dw"], tw.grad.numpy())


def test_scatter_through_two_index_tensors_matches_torch(tmp_path):
    """Expert choice's combine: Y[tb[x,q], ts[x,q], d] += G[x,q] Ye[x,q,d]."""
    torch = pytest.importorskip("torch")
    text = """\
name: combine
dims: {B: batch, S: seq, M: experts, C: slots, D: width}
tensors:
  G: {shape: [M, C], role: input}
  Ye: {shape: [M, C, D], role: input}
  tb: {shape: [M, C], role: index}
  ts: {shape: [M, C], role: index}
  Y: {shape: [B, S, D], role: activation}
ops:
  - Y[tb[x,q], ts[x,q], d] += G[x,q] Ye[x,q,d]
"""
    d = symflops.derive(load_text(tmp_path, text))
    rng = np.random.default_rng(5)
    dims = {"B": 2, "S": 3, "M": 4, "C": 5, "D": 2}
    leaves = {"G": rng.standard_normal((4, 5)), "Ye": rng.standard_normal((4, 5, 2)),
              "tb": rng.integers(0, 2, (4, 5)), "ts": rng.integers(0, 3, (4, 5))}
    expected = np.zeros((2, 3, 2))
    np.add.at(expected, (leaves["tb"], leaves["ts"]), leaves["G"][..., None] * leaves["Ye"])
    assert np.allclose(forward(d.layer, leaves, dims)["Y"], expected)
    tleaves = {k: torch.tensor(v) for k, v in leaves.items()}
    assert np.allclose(d.layer.ops[0].torch(torch, tleaves, dims)["Y"].numpy(), expected)
    # M C D multiplies and M C D adds, at the slots (a masked gather of every
    # slot at every token would be 2 B S M C D)
    M, C = sympy.symbols("M C", positive=True, integer=True)
    assert sympy.expand(costs(d).elementwise_forward - 2 * M * C * D) == 0


def test_scatter_passes_verify(tmp_path):
    load_text(tmp_path, SCATTER)
    run = forked.run("verify", str(tmp_path / "decl.yaml"), cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "result: pass" in run.stdout


def test_graphsage_counts_by_hand():
    d = symflops.derive(symflops.load(GRAPHSAGE))
    c = costs(d)
    # Y = H W_self + Mean W_neigh + b: two N x D x F products, 2 N D F each.
    assert sympy.expand(c.flops_forward - 4 * N * D * F) == 0
    # dW_self, dW_neigh, dH (through W_self), dMean: 2 N D F each.
    assert sympy.expand(c.flops_backward - 8 * N * D * F) == 0
    # W_self, W_neigh: D F each; b: F.
    assert sympy.expand(c.params - (2 * D * F + F)) == 0
    # Elementwise, forward: the scatter E D, the mean's divide N D, the add of
    # the two products N F and of the bias N F, the relu N F.  Backward: the
    # relu's derivative, Heaviside(x) (as many operations per element as
    # sympy.count_ops gives it, the README's convention), and its multiply by
    # dZ, per element of Y; the bias gradient N F (one add per element read);
    # the divide N D; the gather 0; the scatter of dMsg into dH E D; and the
    # sum of dH's two contributions N D.
    x = sympy.Symbol("x")
    relu_derivative = sympy.count_ops(sympy.Max(0, x).diff(x)) + 1
    forward_elementwise = E * D + N * D + 2 * N * F + N * F
    backward_elementwise = relu_derivative * N * F + N * F + N * D + E * D + N * D
    assert sympy.expand(c.elementwise_forward - forward_elementwise) == 0
    assert sympy.expand(c.elementwise_backward - backward_elementwise) == 0
    assert "dst" in d.saved and "src" in d.saved


def test_graphsage_matches_pytorch():
    """The layer written with index_select, index_add_ and matmuls: the forward,
    autograd's gradients and FlopCounterMode's counts."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    d = symflops.derive(symflops.load(GRAPHSAGE))
    rng = np.random.default_rng(7)
    n, e, w, f = 5, 12, 3, 4
    leaves = {"H": rng.standard_normal((n, w)), "src": rng.integers(0, n, e),
              "dst": rng.integers(0, n, e), "deg": rng.uniform(1, 3, n),
              "W_self": rng.standard_normal((w, f)), "W_neigh": rng.standard_normal((w, f)),
              "b": rng.standard_normal(f)}
    dims = {"N": n, "E": e, "D": w, "F": f}
    t = {k: torch.tensor(v, requires_grad=k in ("H", "W_self", "W_neigh", "b"))
         for k, v in leaves.items()}
    with FlopCounterMode(display=False) as fwd:
        msg = t["H"].index_select(0, t["src"])
        agg = torch.zeros(n, w, dtype=torch.float64).index_add_(0, t["dst"], msg)
        mean = agg / t["deg"][:, None]
        z = torch.relu(t["H"] @ t["W_self"] + mean @ t["W_neigh"] + t["b"])
    g = rng.standard_normal((n, f))
    with FlopCounterMode(display=False) as bwd:
        (z * torch.tensor(g)).sum().backward()
    values = forward(d.layer, leaves, dims)
    assert np.allclose(values["Z"], z.detach().numpy())
    grads = backward(d, values, {"dZ": g}, dims)
    for name in ("H", "W_self", "W_neigh", "b"):
        assert np.allclose(grads["d" + name], t[name].grad.numpy()), name
    c = costs(d)
    at = {N: n, E: e, D: w, F: f}
    assert int(c.flops_forward.subs(at)) == fwd.get_total_flops()
    assert int(c.flops_backward.subs(at)) == bwd.get_total_flops()


# ------------------------------------------------------------- refusals --

def test_plus_equals_without_a_lookup_is_refused(tmp_path):
    err = refusal(tmp_path, SCATTER.replace("Agg[dst[e], d] +=", "Agg[e, d] +="))
    assert "'+=' with the output Agg[e,d], which looks nothing up" in err.message
    assert "Agg[dst[e], d] += M[e,d]" in err.hint


def test_a_scatter_written_with_equals_is_refused(tmp_path):
    err = refusal(tmp_path, SCATTER.replace("+=", "="))
    assert "a lookup on the output Agg with '='" in err.message and "'+='" in err.hint


def test_a_scatter_needs_its_output_declared(tmp_path):
    err = refusal(tmp_path, SCATTER.replace("  Agg: {shape: [N, D], role: activation}\n", ""))
    assert "does not say how many positions dst selects from" in err.message
    assert "'Agg: {shape: [N, ...], role: activation}'" in err.hint


def test_a_scatter_through_a_tensor_that_is_no_index_is_refused(tmp_path):
    err = refusal(tmp_path, SCATTER.replace("dst: {shape: [E], role: index}",
                                            "dst: {shape: [E], role: input}"))
    assert "dst is used as an index tensor but is declared as input" in err.message


def test_a_scatter_term_without_the_index_letters_is_refused(tmp_path):
    err = refusal(tmp_path, SCATTER.replace("M[e,d] w[e]", "M[e,d] + w[d]").replace(
        "w: {shape: [E]", "w: {shape: [D]"))
    assert "does not carry 'e' of the output index dst[e]" in err.message


def test_a_scatter_declared_with_another_width_is_refused(tmp_path):
    text = SCATTER.replace("Agg: {shape: [N, D]", "Agg: {shape: [N, E]")
    err = refusal(tmp_path, text)
    assert "index 'd' ranges over" in err.message


def test_one_index_tensor_selects_along_one_size(tmp_path):
    text = SCATTER.replace("  - Agg", "  - G[e,d] = T[dst[e], d]\n  - Agg").replace(
        "  dst:", "  T: {shape: [D, D], role: input}\n  dst:")
    err = refusal(tmp_path, text)
    assert "dst selects along an axis of size" in err.message


def test_a_call_in_a_scatter_is_an_op_of_its_own(tmp_path):
    """Before, a call kind took the whole statement and lost the scatter (its
    advice wrote the output without its lookup); a call that computes a tensor
    inline is scattered, one that must be a whole statement is refused."""
    text = SCATTER.replace("M[e,d] w[e]", "softmax_d(M[e,d])")
    d = symflops.derive(load_text(tmp_path, text))
    assert [op.statement() for op in d.layer.ops][-1] == "Agg[dst[e],d] += Agg_hat[e,d]"
    err = refusal(tmp_path, SCATTER.replace("M[e,d] w[e]", "max_d(M[e,d])").replace(
        "Agg: {shape: [N, D]", "Agg: {shape: [N]").replace("Agg[dst[e], d]", "Agg[dst[e]]"))
    assert "max_d(...) must be the whole right side" in err.message
