"""Where-clauses with offsets: sliding windows, bands, windows between two dims.

Expected counts come from outside the engine: an enumeration written here
(every index tuple visited, kept when it satisfies the conditions), and the
hand-derived closed form of the causal window over S,

    t <= s, s - t < W:   m(m + 1)/2 + (S - m) W pairs,  m = min(S, W)

(query s sees the keys max(0, s - W + 1) .. s: s + 1 of them while s < W,
W after), i.e. W(2S - W + 1)/2 for S >= W and S(S + 1)/2 for S <= W.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.checks.verify import verify
from symflops.core.domain import Bound, Uncountable, domain_size
from symflops.core.ir import Factor, comparison, dim_symbol, relation
from symflops.core.offsets import proved_at_most
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.count.inference import inference
from symflops.count.windows import windows
from symflops.sheets.environment import environment
from symflops.sheets.escape import ESCAPES
from symflops.sheets.notation import Math
from symflops.sheets.printing import PolyPrinter
from symflops.sheets.windows import window_context
from symflops.lang.statement import parse_statement
import forked

ROOT = Path(__file__).resolve().parent.parent
SLIDING = ROOT / "derivations" / "attention_sliding_window.yaml"
S, T, W, E, N, D, H = (dim_symbol(n) for n in "STWENDH")


def enumerate_pairs(sizes: dict[str, int], conditions) -> int:
    """Tuples of the letters (each in 0 .. size - 1) that satisfy every
    condition, a Python predicate of the letters' values."""
    letters = sorted(sizes)
    return sum(all(c(dict(zip(letters, v))) for c in conditions)
               for v in itertools.product(*(range(sizes[x]) for x in letters)))


def window_by_hand(s: int, w: int) -> int:
    m = min(s, w)
    return m * (m + 1) // 2 + (s - m) * w


def scores(where: str, dims: str = "S: queries, W: window, E: width",
           key_dim: str = "S") -> sympy.Expr:
    """FLOPs of the score product A[s,t] = Q[s,e] K[t,e] under ``where``."""
    text = f"""
dims: {{{dims}}}
tensors:
  Q: {{shape: [S, E], role: input}}
  K: {{shape: [{key_dim}, E], role: input}}
ops:
  - A[s,t] = Q[s,e] K[t,e] where {where}
"""
    return costs(symflops.derive(symflops.loads(text, "window.yaml"))).flops_forward


# ------------------------------------------------------------- counting --

CAUSAL_WINDOW = [lambda v: v["t"] <= v["s"], lambda v: v["s"] - v["t"] < v["W"]]


@pytest.mark.parametrize("s,w", [(3, 5), (5, 5), (9, 4), (1, 1), (7, 1)],
                         ids=["S<W", "S=W", "S>W", "one", "W=1"])
def test_the_causal_window_counts_the_hand_closed_form(s, w):
    by_enumeration = enumerate_pairs({"s": s, "t": s}, [
        lambda v: v["t"] <= v["s"], lambda v: v["s"] - v["t"] < w])
    assert by_enumeration == window_by_hand(s, w)
    count = domain_size({"s": S, "t": S}, [Bound("t", "s"), Bound("s", "t", offset=W - 1)])
    assert count.subs({S: s, W: w}) == by_enumeration


def test_the_causal_window_in_closed_form():
    count = domain_size({"s": S, "t": S}, [Bound("t", "s"), Bound("s", "t", offset=W - 1)])
    m = sympy.Min(S, W)
    assert sympy.expand(count - (m * (m + 1) / 2 + (S - m) * W)) == 0
    # and the two pieces the brief states, on each side of S = W
    assert sympy.expand(count.subs(W, S + 3).subs(sympy.Min(S, S + 3), S)
                        - S * (S + 1) / 2) == 0


@pytest.mark.parametrize("where", ["t <= s, s - t < W", "t <= s, t >= s - W + 1",
                                   "t <= s, s - t <= W - 1", "s >= t, s < t + W",
                                   "t <= s, t > s - W"])
def test_every_spelling_of_the_window_counts_alike(where):
    # forward: one multiply-add (2 FLOPs) per (s, t) pair in the window, per e
    flops = scores(where)
    for s, w, e in [(3, 5, 2), (5, 5, 1), (9, 4, 3)]:
        assert flops.subs({S: s, W: w, E: e}) == 2 * e * window_by_hand(s, w)


def test_a_band_without_causality_counts_both_sides():
    # |s - t| < W: query s sees keys max(0, s - W + 1) .. min(S - 1, s + W - 1)
    flops = scores("s - t < W, t - s < W")
    for s, w in [(3, 5), (5, 5), (9, 4), (6, 2)]:
        pairs = enumerate_pairs({"s": s, "t": s}, [lambda v: abs(v["s"] - v["t"]) < w])
        assert flops.subs({S: s, W: w, E: 1}) == 2 * pairs


def test_a_window_between_two_dims_counts_exactly():
    # queries over S, keys over T: t <= s, s - t < W
    flops = scores("t <= s, s - t < W", "S: queries, T: keys, W: window, E: width", "T")
    for s, t, w in itertools.product([1, 3, 6], [1, 4, 7], [1, 2, 5]):
        pairs = enumerate_pairs({"s": s, "t": t}, [
            lambda v: v["t"] <= v["s"], lambda v: v["s"] - v["t"] < w])
        assert flops.subs({S: s, T: t, W: w, E: 1}) == 2 * pairs, (s, t, w)


def test_keys_at_least_w_back_count_exactly():
    # t <= s - W (the complement of the window among t <= s)
    flops = scores("t <= s - W")
    for s, w in [(3, 5), (5, 5), (9, 4)]:
        pairs = enumerate_pairs({"s": s, "t": s}, [lambda v: v["t"] <= v["s"] - w])
        assert flops.subs({S: s, W: w, E: 1}) == 2 * pairs


def test_a_count_that_depends_on_how_two_dims_compare_is_refused():
    U = dim_symbol("U")
    with pytest.raises(Uncountable):
        domain_size({"s": S, "t": S}, [Bound("t", "s", offset=-W), Bound("s", "t", offset=U)])


def test_the_proofs_that_choose_an_order_hold_and_refuse_what_does_not():
    # a proof picks a cheapest contraction order; each is checked here by numbers too
    m = sympy.Min(S, W)
    claims = [(m, S, True), (S, m, False), (m**2, S * W, True), (S * W, m**2, False),
              (S + W - m, S, False), (m * (m + 1) / 2, S * W, True), (S * W, m * S, False)]
    for a, b, proved in claims:
        assert proved_at_most(a, b) == proved, (a, b)
        if proved:
            assert all(a.subs({S: x, W: y}) <= b.subs({S: x, W: y})
                       for x, y in itertools.product(range(1, 9), repeat=2))


# ------------------------------------------------------ representation --

def test_a_plain_condition_is_unchanged():
    st = parse_statement("A[s,t] = Q[s,e] K[t,e] where t <= s")
    (c,) = st.where
    assert (c.left, c.op, c.right, c.offset) == ("t", "<=", "s", ())
    assert relation("<=", sympy.Integer(0)) == "<="
    f = Factor("", ("t", "s"), fn=relation("<="))
    assert str(f) == "[t <= s]" and comparison(f) == Bound("t", "s")


def test_an_offset_is_read_as_written_and_compares_by_value():
    st = parse_statement("A[s,t] = Q[s,e] K[t,e] where t >= s - W + 1, s - t < W")
    first, second = st.where
    assert (first.left, first.op, first.right) == ("t", ">=", "s")
    assert [(x.negative, x.text) for x in first.offset] == [(True, "W"), (False, "1")]
    assert (second.left, second.op, second.right) == ("s", "<", "t")
    a = Factor("", ("t", "s"), fn=relation(">=", 1 - W))
    assert a == Factor("", ("t", "s"), fn=relation(">=", -W + 1))
    assert a.condition() == "t >= s - W + 1"
    # t >= s - W + 1 is s <= t + W - 1, and so is s < t + W
    assert comparison(a) == Bound("s", "t", offset=W - 1)
    assert comparison(Factor("", ("s", "t"), fn=relation("<", W))) == Bound("s", "t", offset=W - 1)


# ----------------------------------------------------- the declaration --

def test_sliding_window_attention_against_a_hand_count():
    c = costs(symflops.derive(symflops.load(SLIDING)))
    m = sympy.Min(S, W)
    pairs = m * (m + 1) / 2 + (S - m) * W
    # params: W_q, W_k, W_v (D x H each) and W_o (H x D)
    assert sympy.expand(c.params - 4 * D * H) == 0
    # forward: four projections 2·S·D·H each; scores and mixing 2·H per pair each
    assert sympy.expand(c.flops_forward - (8 * S * D * H + 4 * H * pairs)) == 0
    # backward: dW and dX of the four projections, 2·S·D·H each; dP, dV, dQ, dK
    # 2·H per pair each (the rules keep the window)
    assert sympy.expand(c.flops_backward - (16 * S * D * H + 8 * H * pairs)) == 0


def test_eval_at_mistral_sizes_prints_exact_integers():
    result = forked.run("eval", str(SLIDING), "--example", "Mistral-7B, one head, 32k context", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    s, d, h, w = 32768, 4096, 128, 4096
    pairs = window_by_hand(s, w)
    assert pairs == 125_831_168  # 4096·4097/2 + (32768 - 4096)·4096
    forward = 8 * s * d * h + 4 * h * pairs
    assert f"{forward:,}" in result.stdout or str(forward) in result.stdout, result.stdout


def test_the_cache_keeps_the_last_w_keys():
    d = symflops.derive(symflops.load(SLIDING))
    inf = inference(d, costs(d), None)
    # K and V, H elements per position, min(S, W) positions
    assert [name for name, _ in inf.cache] == ["K", "V"]
    assert sympy.expand(inf.cache_elements - 2 * H * sympy.Min(S, W)) == 0


def test_sliding_window_attention_verifies():
    report = verify(symflops.derive(symflops.load(SLIDING)))
    assert report.passed, report.failures


# ------------------------------------------------ conventions beside it --

def test_the_conventions_are_labelled_polynomials_of_the_window():
    d = symflops.derive(symflops.load(SLIDING))
    (w,) = windows(d, costs(d))
    assert (w.ops, w.query, w.key, w.width) == (("A", "P", "O"), "s", "t", W)
    m = sympy.Min(S, W)
    expected = {"exact": m * (m + 1) / 2 + (S - m) * W, "dense": S**2,
                "per-query": S * sympy.Min(S, W), "half-square": S**2 / 2,
                "half-window": S * W / 2}
    assert [c.name for c in w.conventions] == list(expected)
    for c in w.conventions:
        assert sympy.expand(c.pairs - expected[c.name]) == 0, c.name
        # A and O: 2·H per pair each; the softmax counts no matmul-type FLOPs
        assert sympy.expand(c.flops - 4 * H * expected[c.name]) == 0, c.name
    # the causal declaration has no window
    causal = symflops.derive(symflops.load(ROOT / "derivations" / "attention_causal.yaml"))
    assert windows(causal, costs(causal)) == ()


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_the_window_partial_states_every_convention_at_the_example(fmt):
    d = symflops.derive(symflops.load(SLIDING))
    counts = explain(d, costs(d), examples=["Mistral-7B, one head, 32k context"])
    layer = d.layer
    printer = Math(PolyPrinter(tuple(x.name for x in layer.dims)),
                   frozenset(t.name for t in layer.tensors))
    context = window_context(d, counts, printer, ESCAPES[fmt])
    text = environment(fmt).get_template(f"windows.{fmt}.j2").render(windows=context,
                                                                      unit="FLOPs")
    # 32768·4096 keys per query bound, 32768² the square, exact 125,831,168
    for figure in ["125{,}831{,}168", "134{,}217{,}728", "1{,}073{,}741{,}824",
                   "536{,}870{,}912", "67{,}108{,}864"]:
        assert figure in text, figure
    assert "8.533" in text  # the square over the exact count: 1073741824 / 125831168
    for c in window_context(d, counts, printer, ESCAPES[fmt])[0]["rows"]:
        assert c["label"] in text


# ------------------------------------------- chunks, and two dims masked --

CHUNKED = ROOT / "derivations" / "attention_chunked.yaml"
#: Wait-k cross-attention (simultaneous translation; Ma et al. 2019): a mask
#: between two dims.  Not shipped: its counts, polynomials in min(K, T) and
#: min(T - 1, S + K - 2), do not fit the sheet's front table.
WAITK = """
name: attention_cross_waitk
title: Wait-k cross-attention (simultaneous translation), a mask between two dims
dims:
  S: target positions (the decoder's queries)
  T: source positions (the encoder's memory, the keys)
  D: model width (d_model)
  H: attention heads
  E: head width; the total query width is H E
  K: the wait, source tokens read before the first target token
tensors:
  X: {shape: [S, D], role: input, description: the decoder's target-side vectors}
  M: {shape: [T, D], role: input, description: the encoder's source-side memory}
  W_q: {shape: [D, H, E], role: param, description: "query projection, all heads"}
  W_k: {shape: [D, H, E], role: param, description: "key projection, all heads"}
  W_v: {shape: [D, H, E], role: param, description: "value projection, all heads"}
  W_o: {shape: [H, E, D], role: param, description: output projection}
# Where the cheapest order of a backward product depends on the sizes (dA's
# row sums), it is counted at these.
sizes: {S: 64, T: 64, K: 3, E: 64}
components:
  attention projections: [Q, K_m, V_m, Y]
  attention scores and mixing: [A, P, O]
ops:
  # Target position s has read the source prefix t < s + K (the wait-k policy):
  # it attends to min(T, s + K) source positions.
  - Q[s,h,e] = X[s,d] W_q[d,h,e]
  - K_m[t,h,e] = M[t,d] W_k[d,h,e]
  - V_m[t,h,e] = M[t,d] W_v[d,h,e]
  - A[h,s,t] = Q[s,h,e] K_m[t,h,e] / sqrt(E) where t < s + K
  - P[h,s,t] = softmax_t(A[h,s,t]) where t < s + K
  - O[s,h,e] = P[h,s,t] V_m[t,h,e] where t < s + K
  - Y[s,f] = O[s,h,e] W_o[h,e,f]
"""


def test_chunked_attention_against_a_hand_count():
    C = dim_symbol("C")
    c = costs(symflops.derive(symflops.load(CHUNKED)))
    # causal inside each of the N chunks: C(C + 1)/2 pairs (n, c, u) per chunk
    pairs = N * C * (C + 1) / 2
    assert enumerate_pairs({"n": 3, "c": 4, "u": 4}, [lambda v: v["u"] <= v["c"]]) == 3 * 10
    assert sympy.expand(c.params - 4 * D * H * E) == 0
    # forward: four projections over the N·C tokens, 2·N·C·D·H·E each; scores and mixing
    # 2·H·E per pair each
    assert sympy.expand(c.flops_forward - (8 * N * C * D * H * E + 4 * H * E * pairs)) == 0
    # backward: eight projection rules (dW and dX of each) and dP, dV, dQ, dK per pair
    assert sympy.expand(c.flops_backward - (16 * N * C * D * H * E + 8 * H * E * pairs)) == 0


def test_chunked_attention_counts_no_cache_of_every_chunk():
    """A token of a chunked layer attends to its own chunk only, so decoding keeps
    at most C positions of keys and values, not the N C of the whole sequence:
    the sheet taught 4NCHE bytes (K and V of every chunk, bf16).  The layer
    declares one sequence of N C tokens; it reads K at an earlier offset u of a
    chunk, which the cache rule cannot count, and the sheet says so."""
    from symflops.count.inference import uncached
    from committed import committed_sheet

    assert "N chunks of C" in uncached(symflops.load(CHUNKED)).text()
    sheet = committed_sheet("attention_chunked", "md")
    assert "Decoding keeps" not in sheet and "(the key/value cache): $4NCHE$" not in sheet
    assert "The key/value cache is not counted: the layer splits a sequence's positions" in sheet


@pytest.mark.parametrize("s,t,k", [(5, 7, 3), (7, 5, 3), (4, 4, 9), (6, 3, 1)])
def test_wait_k_cross_attention_against_an_enumeration(s, t, k):
    T_, K = dim_symbol("T"), dim_symbol("K")
    c = costs(symflops.derive(symflops.loads(WAITK, "attention_cross_waitk.yaml")))
    # target s reads the source prefix t < s + k: min(T, s + k) keys
    pairs = enumerate_pairs({"s": s, "t": t}, [lambda v: v["t"] < v["s"] + k])
    assert pairs == sum(min(t, q + k) for q in range(s))
    at = {S: s, T_: t, K: k, D: 4, H: 2, E: 3}
    # forward: Q and Y over S, K_m and V_m over T, 2·D·H·E per row each; A and O
    # 2·H·E per pair each
    assert c.flops_forward.subs(at) == (4 * s + 4 * t) * 4 * 2 * 3 + 4 * 2 * 3 * pairs
    # backward: dW and the input gradient of the four projections; dP, dV, dQ, dK
    assert c.flops_backward.subs(at) == (8 * s + 8 * t) * 4 * 2 * 3 + 8 * 2 * 3 * pairs


@pytest.mark.parametrize("layer", [lambda: symflops.load(CHUNKED),
                                   lambda: symflops.loads(WAITK, "attention_cross_waitk.yaml")],
                         ids=["chunked", "wait-k"])
def test_the_other_masks_verify(layer):
    report = verify(symflops.derive(layer()))
    assert report.passed, report.failures


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_the_sheet_has_the_window_section(fmt):
    result = forked.run("render", str(SLIDING), "--format", fmt, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "Sliding window of" in result.stdout
    assert "125{,}831{,}168" in result.stdout  # the exact pairs at the 32k example
