"""Constrained index domains (``where t <= s``) and lookups (``E[tok[b], d]``).

Expected counts are derived by hand in each test (the sums are written out in
the comments, and checked once more by enumerating the domain at small
sizes); none is read off the code under test.
"""

import itertools
from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.core.errors import SymflopsError
from symflops.checks.grads import compute
from symflops.checks.numeric import forward
from gradcheck import gradient_errors

ROOT = Path(__file__).resolve().parent.parent
S, E, B, V, D = sympy.symbols("S E B V D", positive=True, integer=True)

QK = {"Q": {"shape": ["S", "E"], "role": "input"}, "K": {"shape": ["S", "E"], "role": "input"}}
PV = {"P": {"shape": ["S", "S"], "role": "input"}, "V": {"shape": ["S", "E"], "role": "input"}}
SEQ = {"S": "sequence", "E": "head width"}


def scores(where=""):
    return symflops.declare("scores", dims=SEQ, tensors=QK,
                            ops=["A[s,t] = Q[s,e] K[t,e] / sqrt(E)" + where])


def values(where=""):
    return symflops.declare("values", dims=SEQ, tensors=PV, ops=["O[s,e] = P[s,t] V[t,e]" + where])


def embedding(tied=True):
    ops = ["X[b,d] = E[tok[b], d]"] + (["logits[b,v] = X[b,d] E[v,d]"] if tied else [])
    return symflops.declare("embedding", dims={"B": "tokens", "V": "vocabulary", "D": "width"},
                            tensors={"tok": {"shape": ["B"], "role": "index"},
                                     "E": {"shape": ["V", "D"], "role": "param"}}, ops=ops)


def count_pairs(n, keep):
    """How many (s, t) in range(n)^2 satisfy keep(s, t): the domain, enumerated."""
    return sum(1 for s, t in itertools.product(range(n), repeat=2) if keep(s, t))


# ------------------------------------------------------------ causal FLOPs --

def test_causal_score_product_counts_the_triangle():
    # A[s,t] = sum_e Q[s,e] K[t,e] for t <= s: for each s there are s values of
    # t (1-based), so sum_s s = S(S+1)/2 pairs, E multiply-adds each, 2 FLOPs
    # per multiply-add: 2 E S(S+1)/2 = E S (S+1).
    c = costs(symflops.derive(scores(" where t <= s")))
    assert c.forward[0].flops == sympy.expand(E * S * (S + 1))
    # The full square: S^2 pairs, 2 E S^2.
    assert costs(symflops.derive(scores())).forward[0].flops == 2 * E * S**2


def test_causal_value_product_counts_the_triangle():
    # O[s,e] = sum_{t <= s} P[s,t] V[t,e]: E outputs per s, s terms each.
    c = costs(symflops.derive(values(" where t <= s")))
    assert c.forward[0].flops == sympy.expand(E * S * (S + 1))
    assert costs(symflops.derive(values())).forward[0].flops == 2 * E * S**2


@pytest.mark.parametrize("where,keep", [
    (" where t <= s", lambda s, t: t <= s),
    (" where t < s", lambda s, t: t < s),
    (" where s >= t", lambda s, t: s >= t),
    (" where t > s", lambda s, t: t > s),
])
def test_domain_count_matches_enumeration(where, keep):
    c = costs(symflops.derive(scores(where)))
    # t <= s and s >= t: S(S+1)/2 pairs; t < s and t > s: S(S-1)/2 pairs.
    inclusive = "=" in where
    by_hand = S * (S + 1) / 2 if inclusive else S * (S - 1) / 2
    assert c.forward[0].flops == sympy.expand(2 * E * by_hand)
    for n in (1, 2, 5, 9):
        assert by_hand.subs(S, n) == count_pairs(n, keep)


def test_backward_of_the_causal_score_product_counts_the_same_triangle():
    d = symflops.derive(scores(" where t <= s"))
    rules = {r.grad: r for r in d.rules}
    # dQ[s,e] = sum_{t <= s} dA[s,t] K[t,e] / sqrt(E): the restriction is inherited.
    assert rules["dQ"].statement == "dQ[s,e] = dA[s,t] K[t,e] / sqrt(E) where t <= s"
    assert rules["dK"].statement == "dK[t,e] = Q[s,e] dA[s,t] / sqrt(E) where t <= s"
    c = costs(d)
    # dQ: for each (s, e), s terms: E * sum_s s = E S(S+1)/2 multiply-adds.
    # dK: for each (t, e), the s >= t: S - t + 1 terms: E * sum_t (S - t + 1) = E S(S+1)/2.
    by_rule = {r.grad: cost.flops for r, cost in zip(d.rules, c.backward)}
    assert by_rule["dQ"] == sympy.expand(E * S * (S + 1))
    assert by_rule["dK"] == sympy.expand(E * S * (S + 1))
    assert c.flops_backward == sympy.expand(2 * E * S * (S + 1))
    # Scaling by 1/sqrt(E): the S(S+1)/2 kept scores forward, the S E elements of dQ and dK back.
    assert c.elementwise_forward == sympy.expand(S * (S + 1) / 2)
    assert c.elementwise_backward == 2 * S * E


def test_backward_of_the_causal_value_product_counts_the_same_triangle():
    d = symflops.derive(values(" where t <= s"))
    rules = {r.grad: r for r in d.rules}
    # dP[s,t] = sum_e dO[s,e] V[t,e], written for t <= s only (zero above the diagonal);
    # dV[t,e] = sum_{s >= t} P[s,t] dO[s,e].
    assert rules["dP"].statement == "dP[s,t] = dO[s,e] V[t,e] where t <= s"
    assert rules["dV"].statement == "dV[t,e] = P[s,t] dO[s,e] where t <= s"
    c = costs(d)
    # dP: S(S+1)/2 kept (s,t), E terms each; dV: E S(S+1)/2 as for dK above.
    assert [x.flops for x in c.backward] == [sympy.expand(E * S * (S + 1))] * 2
    assert c.flops_total == sympy.expand(3 * E * S * (S + 1))


def test_macs_count_one_per_kept_term():
    c = costs(symflops.derive(scores(" where t <= s")), unit="MACs")
    assert c.forward[0].flops == sympy.expand(E * S * (S + 1) / 2)


def test_shipped_full_and_causal_declarations_are_labelled():
    full = symflops.load(ROOT / "derivations" / "attention_scores.yaml")
    causal = symflops.load(ROOT / "derivations" / "attention_scores_causal.yaml")
    assert "full square" in full.title and "causal" in causal.title
    cf, cc = costs(symflops.derive(full)), costs(symflops.derive(causal))
    # Two products, each 2ES^2 over the square, E S(S+1) over the triangle; backward twice that.
    assert cf.flops_forward == 4 * E * S**2 and cf.flops_backward == 8 * E * S**2
    assert cc.flops_forward == sympy.expand(2 * E * S * (S + 1))
    assert cc.flops_backward == sympy.expand(4 * E * S * (S + 1))


# -------------------------------------------------------- causal numerics --

@pytest.mark.parametrize("where", [" where t <= s", " where t < s", " where s <= t"])
@pytest.mark.parametrize("build", [scores, values], ids=["scores", "values"])
@pytest.mark.parametrize("seed", [0, 1])
def test_causal_gradients_match_finite_differences(build, where, seed):
    errors = gradient_errors(build(where), seed=seed)
    assert errors and max(errors.values()) < 1e-6, errors


def test_causal_forward_is_zero_outside_the_domain():
    rng = np.random.default_rng(0)
    Q, K = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    A = forward(scores(" where t <= s"), {"Q": Q, "K": K}, {"S": 4, "E": 3})["A"]
    expected = np.tril(Q @ K.T) / np.sqrt(3)  # t <= s: the lower triangle, diagonal included
    assert np.allclose(A, expected)


def test_two_conditions_and_terms_without_both_letters():
    # The condition restricts only the term that carries both letters.
    layer = symflops.declare("two", dims=SEQ, tensors={**PV, "R": {"shape": ["S", "E"], "role": "input"}},
                             ops=["O[s,e] = P[s,t] V[t,e] + R[s,e] where t <= s"])
    assert layer.ops[0].statement() == "O[s,e] = P[s,t] V[t,e] + R[s,e] where t <= s"
    assert [len(t.operands) for t in layer.ops[0].terms] == [3, 1]
    errors = gradient_errors(layer, seed=3)
    assert max(errors.values()) < 1e-6, errors
    # Two conditions: u < t <= s, a chain; sum_s sum_{t <= s} (t - 1) = (S^3 - S)/6 triples.
    three = symflops.declare("three", dims={"S": "sequence"},
                             tensors={"a": {"shape": ["S", "S"], "role": "input"},
                                      "b": {"shape": ["S"], "role": "input"}},
                             ops=["y[s] = a[s,t] b[u] where t <= s, u < t"])
    layer_cost = costs(symflops.derive(three)).forward[0].flops
    n = 6
    triples = sum(1 for s, t, u in itertools.product(range(n), repeat=3) if t <= s and u < t)
    assert layer_cost == sympy.expand(2 * (S**3 - S) / 6)
    assert layer_cost.subs(S, n) == 2 * triples
    assert max(gradient_errors(three, seed=0).values()) < 1e-6


# ------------------------------------------------------------------ gathers --

def test_lookup_costs_nothing_and_its_backward_is_a_scatter_add():
    layer = embedding(tied=False)
    d = symflops.derive(layer)
    assert layer.ops[0].statement() == "X[b,d] = E[tok[b],d]"
    assert [r.statement for r in d.rules] == ["dE[v,d] = dX[b,d] where v = tok[b]"]
    assert "tok" not in d.needs_grad and all(r.wrt != "tok" for r in d.rules)
    c = costs(d)
    # Forward: a copy of B*D elements, no multiply-add.
    assert c.forward[0].flops == 0 and c.forward[0].elementwise == 0
    # Backward: each dX[b,d] is added once into dE[tok[b], d]: B*D adds, elementwise.
    assert c.backward[0].flops == 0 and c.backward[0].elementwise == B * D
    # The table is a parameter: V*D elements, trained.
    assert c.params == V * D and c.trainable == V * D
    # The scatter reads tok: it is saved (B elements), and nothing else is.
    assert [s.name for s in c.saved] == ["tok"] and c.saved[0].elements == B


def test_tied_unembedding_is_a_dense_product():
    c = costs(symflops.derive(symflops.load(ROOT / "derivations" / "embedding.yaml")))
    # logits[b,v] = sum_d X[b,d] E[v,d]: B*V outputs, D multiply-adds each.
    assert c.forward[1].flops == 2 * B * D * V
    assert c.flops_forward == 2 * B * D * V
    # dE (from logits) and dX: 2BDV each; the scatter adds B*D, and the two
    # contributions to dE are summed: V*D adds.
    assert c.flops_backward == 4 * B * D * V
    assert c.elementwise_backward == B * D + V * D
    assert c.params == V * D


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tied", [False, True])
def test_lookup_gradients_match_finite_differences(tied, seed):
    errors = gradient_errors(embedding(tied), seed=seed)
    assert set(errors) == {"E"} and errors["E"] < 1e-6, errors


def test_grads_with_integer_tokens_by_hand():
    layer = embedding(tied=False)
    table = np.arange(12.0).reshape(3, 4)
    dX = np.arange(16.0).reshape(4, 4)
    grads = compute(symflops.derive(layer), {"tok": np.array([0, 2, 1, 2]), "E": table, "dX": dX})
    # Row v of dE is the sum of the rows b of dX with tok[b] == v.
    expected = np.stack([dX[0], dX[2], dX[1] + dX[3]])
    assert np.array_equal(grads["dE"], expected)
    assert set(grads) == {"dE"}


@pytest.mark.parametrize("tok,fragment", [
    (np.array([0, 3, 1, 2]), "holds 3, outside 0..2"),
    (np.array([0.0, 2.0, 1.0, 2.0]), "is an index tensor"),
])
def test_grads_rejects_bad_tokens(tok, fragment):
    layer = embedding(tied=False)
    with pytest.raises(SymflopsError, match=fragment):
        compute(symflops.derive(layer), {"tok": tok, "E": np.zeros((3, 4))})


def test_lookup_table_sizes_must_agree():
    with pytest.raises(SymflopsError, match="selects along an axis of size"):
        symflops.declare("two", dims={"B": "", "V": "", "W": "", "D": ""},
                         tensors={"tok": {"shape": ["B"], "role": "index"},
                                  "E": {"shape": ["V", "D"], "role": "param"},
                                  "F": {"shape": ["W", "D"], "role": "param"}},
                         ops=["X[b,d] = E[tok[b], d] F[tok[b], d]"])


# ------------------------------------------------------------------- sheets --

def _sheet(name, fmt="md"):
    from committed import committed_sheet

    return committed_sheet(name, fmt)


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_embedding_sheet_says_a_lookup_is_no_dense_product(fmt):
    text = _sheet("embedding", fmt)
    assert r"X_{bd} = E_{\mathit{tok}_{b},d}" in text
    assert "A lookup, not a multiplication" in text
    assert "$2BVD$" in text            # what a dense one-hot product would cost
    assert "scatter" in text and "$BD$" in text
    # the scatter-add, derived from the one-hot form (in the op's own letters)
    assert r"[v = \mathit{tok}_{b}]" in text


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_causal_sheet_shows_the_domain(fmt):
    text = _sheet("attention_scores_causal", fmt)
    assert r"[t \le s]" in text
    assert r"\tfrac{1}{2}S(S + 1)" in text and "$2S^{2}E$" in text
    assert "Summed over the domain" not in _sheet("attention_scores", fmt)


def test_verify_notes_the_masked_products():
    from symflops.checks import verify
    report = verify.verify(symflops.derive(scores(" where t <= s")))
    assert report.passed
    if report.flops:  # with PyTorch: it multiplies the full square by a mask
        assert any("restricted to t <= s" in f.note for f in report.flops)
