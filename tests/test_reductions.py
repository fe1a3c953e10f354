"""Backward rules of reductions (softmax, RMSNorm, LayerNorm, cross-entropy).

Three independent references:

* finite differences: the derived terms, evaluated with ``np.einsum`` on saved
  tensors computed here directly in NumPy, against central differences of the
  forward pass written in NumPy, in float64;
* textbook forms: the final terms against hand-written IndexTerms, compared up
  to the order of factors and the names of summed letters;
* the symbolic forward formula that SymPy differentiated, evaluated at one
  element, against the NumPy forward pass.
"""

from __future__ import annotations

import itertools
import string

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from symflops.core.records import IndexTerm
from symflops.core.ir import Factor
from symflops.ops.reductions import (
    EPS, STAGES, Reduction, cross_entropy_rule, in_range, layernorm_rule, rmsnorm_rule,
    softmax_rule,
)

EPS_VALUE = 0.3  # large, so a rule that forgot eps would fail


def sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True)


def dim(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, positive=True, integer=True)


T, D, B, S, V = (dim(n) for n in "TDBSV")


# ----------------------------------------------------- NumPy forward passes --

def np_softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_rstd(x: np.ndarray, axis: int, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    mu = x.mean(axis=axis, keepdims=True) if centred else np.zeros_like(x.sum(axis=axis, keepdims=True))
    return mu, 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axis, keepdims=True) + EPS_VALUE)


def np_cross_entropy(z: np.ndarray, y: np.ndarray, axis: int, mean: bool) -> float:
    m = z.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(z - m).sum(axis=axis, keepdims=True)) + m
    picked = np.take_along_axis(z, np.expand_dims(y, axis), axis=axis)
    total = float(np.sum(lse - picked))
    return total / y.size if mean else total


def onehot(y: np.ndarray, classes: int, axis: int) -> np.ndarray:
    return np.moveaxis(np.eye(classes)[y], -1, axis)


# ------------------------------------------------------- rule evaluation --

def evaluate(rule: Reduction, arrays: dict[str, np.ndarray], sizes: dict[str, int]) -> np.ndarray:
    """Sum of the rule's terms, each an einsum onto the gradient's letters
    (broadcast along letters no factor carries)."""
    out = rule.lhs.indices
    total = np.zeros([sizes[i] for i in out])
    for t in rule.terms:
        letters = {i: string.ascii_letters[k]
                   for k, i in enumerate(dict.fromkeys([*out, *(i for f in t.factors for i in f.indices)]))}
        present = [i for i in out if any(i in f.indices for f in t.factors)]
        spec = ",".join("".join(letters[i] for i in f.indices) for f in t.factors)
        core = np.einsum(spec + "->" + "".join(letters[i] for i in present),
                         *(arrays[f.tensor] for f in t.factors))
        shape = [sizes[i] if i in present else 1 for i in out]
        coefficient = float(t.coefficient.subs({dim(n.upper()): v for n, v in sizes.items()}))
        total = total + coefficient * core.reshape(shape)
    return total


def finite_differences(scalar, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for pos in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[pos] += h
        minus[pos] -= h
        grad[pos] = (scalar(plus) - scalar(minus)) / (2 * h)
    return grad


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def random_sizes(letters: tuple[str, ...], rng: np.random.Generator) -> dict[str, int]:
    return {i: int(rng.integers(2, 5)) for i in letters}


def sizes_with_fresh(rule: Reduction, sizes: dict[str, int]) -> dict[str, int]:
    """Extents of the rule's fresh summed letters, from its index_dims."""
    values = {dim(i.upper()): n for i, n in sizes.items()}
    return {**sizes, **{i: int(e.subs(values)) for i, e in rule.index_dims}}


NORM_CASES = [
    (("b", "d"), "d"),
    (("b", "s", "d"), "d"),   # two batch letters
    (("d", "b"), "d"),        # reduced letter first
]


# ------------------------------------------------------ finite differences --

@pytest.mark.parametrize("indices,index", [
    (("s", "t"), "t"),
    (("b", "t", "s"), "t"),          # a middle index
    (("b", "h", "s", "t"), "t"),     # attention scores
    (("t", "s"), "t"),
])
def test_softmax_matches_finite_differences(indices, index):
    rng = np.random.default_rng(1)
    rule = softmax_rule(out="P", inp="A", out_indices=indices, index=index)
    sizes = random_sizes(indices, rng)
    k = indices.index(index)
    a = rng.standard_normal([sizes[i] for i in indices])
    dp = rng.standard_normal(a.shape)
    got = evaluate(rule, {"P": np_softmax(a, k), "dP": dp}, sizes_with_fresh(rule, sizes))
    want = finite_differences(lambda x: float(np.sum(dp * np_softmax(x, k))), a)
    assert relative_error(got, want) < 1e-6


@pytest.mark.parametrize("saves", ["input", "output"])
@pytest.mark.parametrize("indices,index", NORM_CASES)
def test_rmsnorm_matches_finite_differences(indices, index, saves):
    rng = np.random.default_rng(2)
    rule = rmsnorm_rule(out="R", inp="X", out_indices=indices, index=index, saves=saves)
    sizes = random_sizes(indices, rng)
    k = indices.index(index)
    x = rng.standard_normal([sizes[i] for i in indices])
    dr = rng.standard_normal(x.shape)
    _, r = np_rstd(x, k, centred=False)
    arrays = {"X": x, "R": x * r, "r": np.squeeze(r, k), "dR": dr}
    got = evaluate(rule, arrays, sizes_with_fresh(rule, sizes))
    want = finite_differences(lambda v: float(np.sum(dr * v * np_rstd(v, k, False)[1])), x)
    assert relative_error(got, want) < 1e-6


@pytest.mark.parametrize("saves", ["output", "input"])
@pytest.mark.parametrize("indices,index", NORM_CASES)
def test_layernorm_matches_finite_differences(indices, index, saves):
    rng = np.random.default_rng(3)
    rule = layernorm_rule(out="N", inp="X", out_indices=indices, index=index, saves=saves)
    sizes = random_sizes(indices, rng)
    k = indices.index(index)
    x = rng.standard_normal([sizes[i] for i in indices])
    dn = rng.standard_normal(x.shape)
    mu, r = np_rstd(x, k, centred=True)
    arrays = {"X": x, "N": (x - mu) * r, "mu": np.squeeze(mu, k), "r": np.squeeze(r, k), "dN": dn}
    got = evaluate(rule, arrays, sizes_with_fresh(rule, sizes))

    def scalar(v: np.ndarray) -> float:
        m, s = np_rstd(v, k, centred=True)
        return float(np.sum(dn * (v - m) * s))

    assert relative_error(got, finite_differences(scalar, x)) < 1e-6


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("indices,index", [(("b", "v"), "v"), (("b", "s", "v"), "v"), (("b", "v", "s"), "v")])
def test_cross_entropy_matches_finite_differences(indices, index, mean):
    rng = np.random.default_rng(4)
    rule = cross_entropy_rule(loss="L", logits="Z", target="y", logit_indices=indices,
                              index=index, mean=mean)
    sizes = random_sizes(indices, rng)
    k = indices.index(index)
    z = rng.standard_normal([sizes[i] for i in indices])
    y = rng.integers(0, sizes[index], [sizes[i] for i in indices if i != index])
    dl = np.array(rng.standard_normal())
    arrays = {"P": np_softmax(z, k), "onehot_y": onehot(y, sizes[index], k), "dL": dl}
    got = evaluate(rule, arrays, sizes_with_fresh(rule, sizes))
    want = finite_differences(lambda v: float(dl) * np_cross_entropy(v, y, k, mean), z)
    assert relative_error(got, want) < 1e-6


# ------------------------------------------------------- textbook forms --

def canonical(terms: tuple[IndexTerm, ...]) -> dict[tuple, sympy.Expr]:
    """Terms as {product: coefficient}, a product being the sorted factors
    with summed letters renamed canonically (the smallest over all namings)."""
    out: dict[tuple, sympy.Expr] = {}
    for t in terms:
        assert not t.deltas
        placeholders = [f"#{n}" for n in range(len(t.summed))]
        key = min(
            tuple(sorted((f.tensor, tuple(dict(zip(t.summed, perm)).get(i, i) for i in f.indices))
                         for f in t.factors))
            for perm in itertools.permutations(placeholders)
        )
        out[key] = sympy.simplify(out.get(key, 0) + t.coefficient)
    return {k: v for k, v in out.items() if v != 0}


def term(coefficient, *factors: str, summed: str = "") -> IndexTerm:
    """``term(-1, "P[s,t]", "P[s,u]", "dP[s,u]", summed="u")``."""
    parsed = []
    for text in factors:
        name, _, rest = text.partition("[")
        parsed.append(Factor(name, tuple(i for i in rest.rstrip("]").split(",") if i)))
    return IndexTerm(sympy.sympify(coefficient), tuple(parsed), (), tuple(summed))


def assert_same_rule(got: Reduction, expected: list[IndexTerm]) -> None:
    assert canonical(got.terms) == canonical(tuple(expected)), got.statement()


def test_softmax_textbook_form():
    rule = softmax_rule()
    assert rule.lhs == Factor("dA", ("s", "t"))
    assert_same_rule(rule, [term(1, "P[s,t]", "dP[s,t]"),
                            term(-1, "P[s,t]", "P[s,u]", "dP[s,u]", summed="u")])
    assert rule.saved == (Factor("P", ("s", "t")),) and rule.aux == ()
    assert rule.statement() == "dA[s,t] = P[s,t] dP[s,t] - P[s,t] P[s,u] dP[s,u]"


def test_softmax_over_a_middle_index():
    rule = softmax_rule(out="W", inp="S", out_indices=("b", "t", "s"), index="t", dim=dim("K"))
    assert_same_rule(rule, [term(1, "W[b,t,s]", "dW[b,t,s]"),
                            term(-1, "W[b,t,s]", "W[b,u,s]", "dW[b,u,s]", summed="u")])
    assert dict(rule.index_dims) == {"t": dim("K"), "u": dim("K")}


@pytest.mark.parametrize("indices", [("b", "d"), ("b", "s", "d")])
def test_rmsnorm_textbook_form(indices):
    rule = rmsnorm_rule(out_indices=indices)
    o = ",".join(indices)
    row = ",".join(i for i in indices if i != "d")
    e = ",".join("e" if i == "d" else i for i in indices)
    assert_same_rule(rule, [
        term(1, f"r[{row}]", f"dR[{o}]"),
        term(-1 / D, f"r[{row}]", f"r[{row}]", f"r[{row}]", f"X[{o}]", f"X[{e}]", f"dR[{e}]", summed="e"),
    ])
    assert rule.saved == (Factor("X", indices), Factor("r", tuple(i for i in indices if i != "d")))
    assert rule.aux == (Factor("r", tuple(i for i in indices if i != "d")),)


def test_rmsnorm_in_terms_of_its_output():
    rule = rmsnorm_rule(saves="output")
    assert_same_rule(rule, [term(1, "r[b]", "dR[b,d]"),
                            term(-1 / D, "r[b]", "R[b,d]", "R[b,e]", "dR[b,e]", summed="e")])
    assert [f.tensor for f in rule.saved] == ["R", "r"]


@pytest.mark.parametrize("indices", [("b", "d"), ("b", "s", "d")])
def test_layernorm_textbook_form(indices):
    rule = layernorm_rule(out_indices=indices)
    o = ",".join(indices)
    row = ",".join(i for i in indices if i != "d")
    e = ",".join("e" if i == "d" else i for i in indices)
    assert_same_rule(rule, [
        term(1, f"r[{row}]", f"dN[{o}]"),
        term(-1 / D, f"r[{row}]", f"dN[{e}]", summed="e"),
        term(-1 / D, f"r[{row}]", f"N[{o}]", f"N[{e}]", f"dN[{e}]", summed="e"),
    ])
    assert [f.tensor for f in rule.saved] == ["N", "r"] and [f.tensor for f in rule.aux] == ["r"]


def test_layernorm_in_terms_of_its_input():
    # r dN - r mean(dN) - r**3 (X - mu)[d] mean(dN (X - mu)), the product expanded.
    rule = layernorm_rule(saves="input")
    r3 = ("r[b]",) * 3
    assert_same_rule(rule, [
        term(1, "r[b]", "dN[b,d]"),
        term(-1 / D, "r[b]", "dN[b,e]", summed="e"),
        term(-1 / D, *r3, "X[b,d]", "X[b,e]", "dN[b,e]", summed="e"),
        term(1 / D, *r3, "X[b,d]", "mu[b]", "dN[b,e]", summed="e"),
        term(1 / D, *r3, "mu[b]", "X[b,e]", "dN[b,e]", summed="e"),
        term(-1 / D, *r3, "mu[b]", "mu[b]", "dN[b,e]", summed="e"),
    ])
    assert [f.tensor for f in rule.saved] == ["X", "mu", "r"]


@pytest.mark.parametrize("mean,coefficient", [(False, 1), (True, 1 / B)])
def test_cross_entropy_textbook_form(mean, coefficient):
    rule = cross_entropy_rule(mean=mean)
    assert_same_rule(rule, [term(coefficient, "dL[]", "P[b,v]"),
                            term(-coefficient, "dL[]", "onehot_y[b,v]")])
    assert rule.aux == (Factor("P", ("b", "v")),)
    assert rule.saved == (Factor("P", ("b", "v")), Factor("onehot_y", ("b", "v")))
    assert rule.definitions[1] == (Factor("onehot_y", ("b", "v")),
                                   sympy.KroneckerDelta(sympy.IndexedBase("y", integer=True)[sym("b")], sym("v")))


def test_cross_entropy_mean_over_two_batch_letters():
    rule = cross_entropy_rule(logit_indices=("b", "s", "v"), mean=True)
    assert_same_rule(rule, [term(1 / (B * S), "dL[]", "P[b,s,v]"),
                            term(-1 / (B * S), "dL[]", "onehot_y[b,s,v]")])


def test_summed_letters_are_fresh():
    for rule in (softmax_rule(out_indices=("u", "t")), layernorm_rule(out_indices=("e", "d"))):
        for t in rule.terms:
            assert set(t.summed).isdisjoint(rule.lhs.indices)
        assert any(t.summed for t in rule.terms)


# -------------------------------------------------- the recorded stages --

ALL_RULES = [softmax_rule, rmsnorm_rule, layernorm_rule, cross_entropy_rule]


@pytest.mark.parametrize("make", ALL_RULES)
def test_stages_are_recorded_in_order(make):
    rule = make()
    assert tuple(name for name, _ in rule.stages) == STAGES
    forward, derivative, substituted = (rule.stage(n) for n in STAGES[:3])
    assert forward.has(sympy.Sum)
    assert not derivative.has(sympy.Piecewise)
    assert not substituted.has(sympy.Sum) and not substituted.has(sympy.exp)
    scalar, contracted, final = (rule.stage(n) for n in STAGES[3:])
    assert all(t.summed == rule.output.indices for t in scalar)
    assert all(t.factors[0] == Factor("d" + rule.output.tensor, rule.output.indices) for t in scalar)
    assert all(not t.deltas for t in contracted)
    assert final == rule.terms
    assert all(i.endswith("'") for i in rule.element.indices)
    assert set(rule.reads) <= {f.tensor for f in rule.saved} | {"d" + rule.output.tensor}


def test_rules_are_cached():
    assert softmax_rule() is softmax_rule()


@pytest.mark.parametrize("call", [
    lambda: softmax_rule(out_indices=("s", "t"), index="x"),
    lambda: softmax_rule(out_indices=("s", "s"), index="s"),
    lambda: softmax_rule(out="A", inp="A"),
    lambda: softmax_rule(out="dA", inp="A"),
    lambda: rmsnorm_rule(saves="both"),
    lambda: cross_entropy_rule(logit_indices=("v",), index="v"),
    lambda: cross_entropy_rule(batch_dims=(B, S)),
])
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


# -------------------------------- the symbolic forward is the NumPy one --

def _at(expr: sympy.Expr, arrays: dict[str, np.ndarray], letters: dict[str, int],
        dims: dict[sympy.Symbol, int], target: np.ndarray | None = None) -> float:
    """``expr`` at one element: dims and letters substituted, sums unrolled,
    tensor elements looked up (the target ``y`` first, for ``Z[b, y[b]]``)."""
    expr = expr.subs({**dims, EPS: EPS_VALUE}).doit()
    expr = expr.subs({sym(i): v for i, v in letters.items()})
    if target is not None:
        expr = expr.replace(lambda e: isinstance(e, sympy.Indexed) and str(e.base) == "y",
                            lambda e: sympy.Integer(int(target[tuple(int(i) for i in e.indices)])))
    expr = expr.replace(lambda e: isinstance(e, sympy.Indexed),
                        lambda e: sympy.Float(arrays[str(e.base)][tuple(int(i) for i in e.indices)]))
    return float(expr)


def test_symbolic_forward_formulas_are_the_numpy_ones():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3))
    at = {"b": 1, "d": 2}
    mu, r = np_rstd(x, 1, centred=True)
    assert _at(layernorm_rule().stage("forward"), {"X": x}, at, {D: 3}) == pytest.approx(((x - mu) * r)[1, 2])
    _, r = np_rstd(x, 1, centred=False)
    assert _at(rmsnorm_rule().stage("forward"), {"X": x}, at, {D: 3}) == pytest.approx((x * r)[1, 2])
    rms_def = dict(rmsnorm_rule().definitions)[Factor("r", ("b",))]
    assert _at(rms_def, {"X": x}, at, {D: 3}) == pytest.approx(r[1, 0])
    assert _at(softmax_rule().stage("forward"), {"A": x}, {"s": 1, "t": 2}, {T: 3}) == \
        pytest.approx(np_softmax(x, 1)[1, 2])
    y = np.array([2, 0])
    for mean in (False, True):
        assert _at(cross_entropy_rule(mean=mean).stage("forward"), {"Z": x}, {}, {B: 2, V: 3}, y) == \
            pytest.approx(np_cross_entropy(x, y, 1, mean))


# ------------------------------------------------- Piecewise clean-up --

t1, u = sym("t'"), sym("u")
X = sympy.IndexedBase("X")


def test_in_range_takes_the_branch_delta_summation_guards():
    from sympy.concrete.delta import deltasummation

    raw = deltasummation(sympy.KroneckerDelta(t1, u) * X[u], (u, 0, T - 1))
    assert raw.has(sympy.Piecewise)
    assert in_range(raw, {t1: T}) == X[t1]


def test_in_range_forms():
    inside = (t1 >= 0) & (t1 <= T - 1)
    assert in_range(sympy.Piecewise((X[t1], inside), (0, True)), {t1: T}) == X[t1]
    assert in_range(sympy.Piecewise((X[t1], t1 < T), (0, True)), {t1: T}) == X[t1]
    # Inside a larger expression, and nested.
    expr = 1 + 2 * sympy.Piecewise((X[t1] * sympy.Piecewise((3, t1 >= 0), (0, True)), inside), (0, True))
    assert in_range(expr, {t1: T}) == 1 + 6 * X[t1]
    # A branch false in range is skipped; an Or of out-of-range tests is false.
    assert in_range(sympy.Piecewise((0, t1 < 0), (X[t1], True)), {t1: T}) == X[t1]
    assert in_range(sympy.Piecewise((0, (t1 < 0) | (t1 > T - 1)), (X[t1], True)), {t1: T}) == X[t1]
    # Several indices, the way a sum over the batch guards its answer.
    b1, v1 = sym("b'"), sym("v'")
    cross = sympy.Piecewise((X[v1], (b1 >= 0) & (v1 >= 0) & (b1 <= B - 1) & (v1 <= V - 1)),
                            (-X[b1], (b1 >= 0) & (b1 <= B - 1)), (0, True))
    assert in_range(cross, {b1: B, v1: V}) == X[v1]
    assert in_range(X[t1] + 1, {t1: T}) == X[t1] + 1


@pytest.mark.parametrize("cond", [
    t1 <= 2,                 # holds for some t' only
    t1 >= 1,
    sym("s'") >= 0,          # an index of unknown range
    sympy.Eq(t1, 0),
])
def test_in_range_refuses_to_guess(cond):
    with pytest.raises(ValueError):
        in_range(sympy.Piecewise((X[t1], cond), (0, True)), {t1: T})


RELATIONS = [sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(RELATIONS), st.integers(-3, 3), st.integers(0, 1), st.integers(-3, 3),
       st.booleans())
def test_in_range_decisions_are_sound(relation, shift, slope, offset, flip):
    """Whatever in_range decides about ``t' + shift  REL  slope*T + offset``
    holds for every T in 1..8 and every t' in 0..T-1."""
    lhs, rhs = t1 + shift, slope * T + offset
    cond = relation(rhs, lhs) if flip else relation(lhs, rhs)
    if cond in (sympy.true, sympy.false):
        return
    try:
        picked = in_range(sympy.Piecewise((X[1], cond), (X[2], True)), {t1: T})
    except ValueError:
        return
    holds = picked == X[1]
    for size in range(1, 9):
        for value in range(size):
            assert bool(cond.subs({T: size, t1: value})) == holds, (cond, size, value)
