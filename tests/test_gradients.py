"""Every derived backward rule against central finite differences (float64).

A table of contractions, grouped by the einsum feature they exercise.  The
reference gradient comes from differencing the forward pass only, so it is
independent of the derivation under test.
"""

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from gradcheck import gradient_errors

CASES = [
    # matmul-like
    ("matmul", {"M": "", "K": "", "N": ""},
     {"A": (["M", "K"], "input"), "W": (["K", "N"], "param")},
     ["C[m,n] = A[m,k] W[k,n]"]),
    ("batched matmul", {"B": "", "M": "", "K": "", "N": ""},
     {"A": (["B", "M", "K"], "input"), "W": (["B", "K", "N"], "param")},
     ["C[b,m,n] = A[b,m,k] W[b,k,n]"]),
    ("two contracted indices", {"B": "", "H": "", "E": "", "D": ""},
     {"X": (["B", "H", "E"], "input"), "W": (["H", "E", "D"], "param")},
     ["Y[b,d] = X[b,h,e] W[h,e,d]"]),
    ("attention scores, s and t over one dim", {"S": "", "H": ""},
     {"Q": (["S", "H"], "input"), "K": (["S", "H"], "input")},
     ["A[s,t] = Q[s,h] K[t,h]"]),
    # more than two operands
    ("three operands", {"I": "", "J": "", "K": "", "L": ""},
     {"A": (["I", "J"], "input"), "B": (["J", "K"], "param"), "C": (["K", "L"], "param")},
     ["Y[i,l] = A[i,j] B[j,k] C[k,l]"]),
    ("bilinear form", {"B": "", "I": "", "J": ""},
     {"x": (["B", "I"], "input"), "W": (["I", "J"], "param"), "y": (["B", "J"], "input")},
     ["s[b] = x[b,i] W[i,j] y[b,j]"]),
    # no summation
    ("outer product", {"I": "", "J": ""},
     {"a": (["I"], "input"), "b": (["J"], "param")}, ["Z[i,j] = a[i] b[j]"]),
    ("elementwise product", {"B": "", "D": ""},
     {"x": (["B", "D"], "input"), "g": (["D"], "param")}, ["y[b,d] = x[b,d] g[d]"]),
    # an index only on the differentiated operand: its gradient broadcasts
    ("row sum", {"I": "", "J": ""}, {"A": (["I", "J"], "param")}, ["y[i] = A[i,j]"]),
    ("broadcast in a product", {"I": "", "J": "", "K": ""},
     {"A": (["I", "J", "K"], "param"), "B": (["I", "J"], "param")}, ["y[i] = A[i,j,k] B[i,j]"]),
    # repeated index: a diagonal
    ("trace", {"N": ""}, {"A": (["N", "N"], "param")}, ["t[] = A[i,i]"]),
    ("diagonal times matrix", {"N": "", "M": ""},
     {"A": (["N", "N"], "param"), "v": (["N", "M"], "input")}, ["y[i,m] = A[i,i] v[i,m]"]),
    # a tensor used twice
    ("Gram matrix", {"B": "", "D": ""}, {"X": (["B", "D"], "param")}, ["G[i,j] = X[b,i] X[b,j]"]),
    ("sum of squares", {"B": "", "D": ""}, {"X": (["B", "D"], "param")}, ["y[b] = X[b,d] X[b,d]"]),
    ("diagonal and off-diagonal use", {"N": ""}, {"A": (["N", "N"], "param")},
     ["y[j] = A[i,i] A[i,j]"]),
    ("weight shared by two ops", {"B": "", "D": ""},
     {"X": (["B", "D"], "input"), "W": (["D", "D"], "param")},
     ["H[b,e] = X[b,d] W[d,e]", "Y[b,e] = H[b,f] W[f,e]"]),
    ("input read by two ops", {"B": "", "D": ""},
     {"X": (["B", "D"], "input"), "W": (["D", "D"], "param")},
     ["H[b,e] = X[b,d] W[d,e]", "Y[b,e] = H[b,e] X[b,e]"]),
    # whole layers
    ("feed-forward block", {"B": "", "D": "", "F": ""},
     {"X": (["B", "D"], "input"), "W_in": (["D", "F"], "param"), "W_out": (["F", "D"], "param")},
     ["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"]),
    ("frozen weight between trained ones", {"B": "", "D": ""},
     {"X": (["B", "D"], "input"), "W1": (["D", "D"], "param"), "W2": (["D", "D"], "frozen"),
      "W3": (["D", "D"], "param")},
     ["H[b,e] = X[b,d] W1[d,e]", "G[b,f] = H[b,e] W2[e,f]", "Y[b,g] = G[b,f] W3[f,g]"]),
    ("scaled product", {"S": "", "H": ""},
     {"Q": (["S", "H"], "input"), "K": (["S", "H"], "param")}, ["A[s,t] = 0.125 Q[s,h] K[t,h]"]),
]


def _declare(name, dims, tensors, ops):
    return symflops.declare(
        name.replace(" ", "_"), dims=dims,
        tensors={t: {"shape": shape, "role": role} for t, (shape, role) in tensors.items()},
        ops=ops)


@pytest.mark.parametrize("name,dims,tensors,ops", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_derived_rules_match_finite_differences(name, dims, tensors, ops, seed):
    layer = _declare(name, dims, tensors, ops)
    errors = gradient_errors(layer, seed=seed)
    assert errors, "no gradient was checked"
    assert max(errors.values()) < 1e-6, errors


def test_every_wanted_gradient_has_a_rule():
    for name, dims, tensors, ops in CASES:
        layer = _declare(name, dims, tensors, ops)
        grads = {r.wrt for r in symflops.derive(layer).rules}
        wanted = {t for t, (_, role) in tensors.items() if role != "frozen"}
        assert wanted <= grads, name


def test_batched_matmul_counts_by_hand():
    B, M, K, N = sympy.symbols("B M K N", positive=True, integer=True)
    layer = _declare(*CASES[1])
    c = costs(symflops.derive(layer))
    assert c.flops_forward == 2 * B * M * K * N
    assert c.flops_backward == 4 * B * M * K * N


def test_outer_and_elementwise_products_count_one_flop_per_term():
    I, J = sympy.symbols("I J", positive=True, integer=True)
    c = costs(symflops.derive(_declare(*CASES[6])))
    # The outer product sums over no index: elementwise work, one multiply per product.
    assert c.flops_forward == 0 and c.elementwise_forward == I * J
    # Its gradients are matrix-vector products, matmul-type work like any other
    # (the bucket follows each product, not the op it comes from):
    # da[i] = dZ[i,j] b[j] and db[j] = a[i] dZ[i,j] each sum over one index: 2IJ each.
    assert c.flops_backward == 4 * I * J and c.elementwise_backward == 0


def test_three_operand_forward_uses_declared_pairwise_order():
    I, J, K, L = sympy.symbols("I J K L", positive=True, integer=True)
    c = costs(symflops.derive(_declare(*CASES[4])))
    # (A B) first: 2IJK, then (AB) C: 2IKL.
    assert c.flops_forward == 2 * I * J * K + 2 * I * K * L


def test_sum_of_squares_gradient_is_two_dY_X():
    d = symflops.derive(_declare(*CASES[13]))
    assert [r.statement for r in d.rules] == ["dX[b,d] = 2 dy[b] X[b,d]"]
