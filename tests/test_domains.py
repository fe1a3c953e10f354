"""Where-clauses between letters over different dims: exact closed forms.

The expected counts are enumerations written here: every index tuple of a
product is visited and kept when it satisfies the where-clause.
"""

from __future__ import annotations

import itertools
import json
import resource
import subprocess
import sys

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symflops
from symflops.count.cost import costs
from symflops.core.domain import Bound, domain_size
from symflops.core.ir import dim_symbol
import forked

S, T, U, E = (dim_symbol(n) for n in "STUE")

CROSS = """
dims: {S: queries, T: keys, E: width}
tensors:
  Q: {shape: [S, E], role: input}
  K: {shape: [T, E], role: input}
ops:
  - A[s,t] = Q[s,e] K[t,e] where s <= t
"""


def _enumerate(extents: dict[str, int], bounds: list[tuple[str, str, bool]]) -> int:
    letters = sorted(extents)
    count = 0
    for t in itertools.product(*(range(extents[x]) for x in letters)):
        v = dict(zip(letters, t))
        if all(v[a] < v[b] if strict else v[a] <= v[b] for a, b, strict in bounds):
            count += 1
    return count


def test_a_condition_between_two_dims_has_a_closed_form():
    c = costs(symflops.derive(symflops.loads(CROSS, "cross.yaml")))
    m = sympy.Min(S, T)
    # pairs s <= t, s < S, t < T: for each s < min(S, T), T - s values of t.
    pairs = m * T - m * (m - 1) / 2
    difference = sympy.expand(c.flops_forward - 2 * E * pairs)
    # equal on each side of S = T (the difference is a multiple of (S - m)(T - m))
    assert sympy.expand(difference.subs(m, S)) == 0 and sympy.expand(difference.subs(m, T)) == 0
    assert not c.flops_forward.has(sympy.Sum)
    for s_, t_ in [(3, 5), (5, 3), (4, 4), (1, 7), (60, 60), (15, 100)]:
        got = c.flops_forward.subs({S: s_, T: t_, E: 2})
        assert got.is_Integer and got == 2 * 2 * _enumerate({"s": s_, "t": t_}, [("s", "t", False)])


def test_eval_across_dims_is_exact_and_fast(tmp_path):
    path = tmp_path / "cross.yaml"
    path.write_text(CROSS)
    for values in (["S=300", "T=300", "E=2"], ["S=150", "T=1000", "E=2"], ["S=3", "T=5", "E=2"]):
        # the command's own CPU seconds (its process and children), not the wall
        # clock: a loaded machine makes it slower, never more work
        start = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-m", "symflops", "eval", str(path), *values, "--json"],
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert (end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime) < 60
        forward = json.loads(out.stdout)["flops"]["forward"]
        s_, t_ = (int(v.split("=")[1]) for v in values[:2])
        m = min(s_, t_)
        assert isinstance(forward, int) and forward == 2 * 2 * (m * t_ - m * (m - 1) // 2)


BOUNDS = st.lists(st.tuples(st.sampled_from("stu"), st.sampled_from("stu"), st.booleans())
                  .filter(lambda b: b[0] != b[1]), min_size=1, max_size=3, unique_by=lambda b: b[:2])


def _acyclic(bounds) -> bool:
    edges = {(a, b) for a, b, _ in bounds}
    return not any((b, a) in edges for a, b in edges) and not (
        len(edges) == 3 and len({x for e in edges for x in e}) == 3
        and any({(x, y), (y, z), (z, x)} <= edges for x, y, z in itertools.permutations("stu")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BOUNDS.filter(_acyclic), st.tuples(*(st.sampled_from("STU") for _ in range(3))),
       st.tuples(*(st.integers(1, 6) for _ in range(3))))
def test_closed_forms_match_enumeration(bounds, dims, values):
    extents = {x: dim_symbol(d) for x, d in zip("stu", dims)}
    count = domain_size(extents, [Bound(a, b, strict) for a, b, strict in bounds])
    assert not count.has(sympy.Sum)
    at = {dim_symbol(d): v for d, v in zip("STU", values)}
    sizes = {x: int(e.xreplace(at)) for x, e in extents.items()}
    assert count.xreplace(at) == _enumerate(sizes, list(bounds))


def test_a_causal_softmax_rule_joins_its_terms_inside_the_triangle():
    """``dA[s,t] = P[s,t] dP[s,t] - P[s,t] sum_u P[s,u] dP[s,u]`` (t, u <= s).
    By hand, over the S(S+1)/2 pairs of the triangle: the first term is one
    multiply per pair; the row sum a multiply-add per pair (u, s); the second
    term one multiply per pair; joining the two terms one subtract per pair,
    since outside the triangle both terms, and dA, are zero:
    3 S(S+1)/2 + S(S+1) = 5 S(S+1)/2.  (Joined over the full square, the
    subtracts would be S² and the total 3S² + 2S.)"""
    derived = symflops.derive(symflops.load("derivations/attention_causal.yaml"))
    c = costs(derived)
    [softmax_rule] = [w for r, w in zip(derived.rules, c.backward) if r.grad == "dA"]
    assert softmax_rule.flops == 0
    assert sympy.expand(softmax_rule.elementwise - sympy.Rational(5, 2) * S * (S + 1)) == 0


# -------------------------------------------- diagonals and empty domains --

def _scores(where: str, key: str = "S"):
    """The score product A[s,t] = Q[s,e] K[t,e] under ``where``, s over S and
    t over ``key``, loaded from the text (a refusal is a SymflopsError)."""
    text = f"""dims: {{S: queries, T: keys, W: offset, E: width}}
tensors:
  Q: {{shape: [S, E], role: input}}
  K: {{shape: [{key}, E], role: input}}
ops:
  - A[s,t] = Q[s,e] K[t,e] where {where}
"""
    return costs(symflops.derive(symflops.loads(text, "where.yaml"))).flops_forward


def _pairs(S_, T_, condition) -> int:
    return sum(bool(condition(s, t)) for s in range(S_) for t in range(T_))


SIZES = [(1, 1, 1), (1, 4, 2), (4, 1, 2), (5, 5, 2), (6, 3, 1), (3, 6, 4), (7, 7, 7), (9, 4, 3)]


@pytest.mark.parametrize("where,key,by_hand,condition", [
    # t = s: one key per query; over T keys, the queries s < min(S, T)
    ("t < s + 1, t > s - 1", "S", lambda S_, T_, W_: S_, lambda s, t, W_: t == s),
    ("t < s + 1, t > s - 1", "T", lambda S_, T_, W_: min(S_, T_), lambda s, t, W_: t == s),
    ("t <= s, t >= s", "S", lambda S_, T_, W_: S_, lambda s, t, W_: t == s),
    ("t <= s, s <= t", "T", lambda S_, T_, W_: min(S_, T_), lambda s, t, W_: t == s),
    # t = s - W: the queries s = W .. S - 1, S - W of them for S > W, none else
    ("t <= s - W, t >= s - W", "S", lambda S_, T_, W_: max(S_ - W_, 0),
     lambda s, t, W_: t == s - W_),
    # over T keys also s - W <= T - 1: s = W .. min(S, T + W) - 1
    ("t <= s - W, t >= s - W", "T", lambda S_, T_, W_: max(min(S_, T_ + W_) - W_, 0),
     lambda s, t, W_: t == s - W_),
    ("s - t <= W, s - t >= W", "S", lambda S_, T_, W_: max(S_ - W_, 0),
     lambda s, t, W_: t == s - W_),
])
def test_a_diagonal_domain_is_counted_exactly(where, key, by_hand, condition):
    """A diagonal (the two conditions tie t to s) was exit 70: 'min() arg is
    an empty sequence' for t = s, a PolynomialError for t = s - W."""
    flops = _scores(where, key)
    for S_, T_, W_ in SIZES:
        n_t = T_ if key == "T" else S_
        count = _pairs(S_, n_t, lambda s, t: condition(s, t, W_))
        assert count == by_hand(S_, T_, W_)
        assert flops.xreplace({S: S_, T: T_, dim_symbol("W"): W_, E: 3}) == 2 * 3 * count


def test_the_diagonals_closed_forms_are_the_hand_ones():
    W = dim_symbol("W")
    assert sympy.expand(_scores("t < s + 1, t > s - 1") - 2 * E * S) == 0
    assert sympy.expand(_scores("t <= s - W, t >= s - W") - 2 * E * (S - sympy.Min(S, W))) == 0


@pytest.mark.parametrize("where", ["t <= s, s - t < 0", "t <= s, s - t < W - W", "t < s, t > s",
                                   "t < s, s < t + 1", "t <= s - W, t >= s + 1"])
def test_an_empty_domain_is_refused_at_the_where_clause(where):
    with pytest.raises(symflops.SymflopsError) as info:
        _scores(where)
    message = str(info.value)
    assert message.startswith("where.yaml:6:34:"), message  # the where-clause's first condition
    assert "leave no pair (t, s) for any dims" in message


def test_an_empty_domain_exits_2_from_the_command_line(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("dims: {S: queries, E: width}\ntensors:\n  Q: {shape: [S, E], role: input}\n"
                    "  K: {shape: [S, E], role: input}\n"
                    "ops:\n  - A[s,t] = Q[s,e] K[t,e] where t <= s, s - t < 0\n")
    out = forked.run("derive", str(path), timeout=300)
    assert out.returncode == 2, out.stderr
    assert f"{path}:6:34: error: the where-clause's conditions leave no pair" in out.stderr
    assert "Traceback" not in out.stderr


def test_plain_bounds_that_go_round_count_like_enumeration():
    """Plain bounds with a cycle (t <= s <= u <= t: all equal) go to the
    elimination of windows; strict ones leave nothing."""
    for bounds, dims in [([("t", "s", False), ("s", "t", False)], "SS"),
                         ([("t", "s", False), ("s", "u", False), ("u", "t", False)], "STU"),
                         ([("t", "s", False), ("s", "u", False), ("u", "t", True)], "SSS"),
                         ([("t", "s", False), ("s", "u", False), ("u", "t", False)], "SSU")]:
        extents = {x: dim_symbol(d) for x, d in zip("stu", dims)}
        named = {x for b in bounds for x in b[:2]}
        count = domain_size({x: e for x, e in extents.items() if x in named},
                            [Bound(a, b, strict) for a, b, strict in bounds])
        for values in itertools.product(range(1, 5), repeat=3):
            at = {dim_symbol(d): v for d, v in zip("STU", values)}
            sizes = {x: int(e.xreplace(at)) for x, e in extents.items() if x in named}
            assert count.xreplace(at) == _enumerate(sizes, bounds)


# A small seeded fuzz of where-clauses: two letters, offsets by dims and whole
# numbers, < <= > >=, one to three conditions; each is refused at the clause's
# position (exit 2) or counted exactly, equal to an enumeration at small sizes.
_RELATIONS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
              ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _random_condition(rng, mirror=None):
    """A condition and its predicate; ``mirror`` (the letters and offset of
    another) gives the opposite one, ``y op x - c``, which may tie the two
    letters (a diagonal) or leave nothing."""
    if mirror is None:
        x, y = rng.sample(["s", "t"], 2)
        terms = [(rng.choice("+-"), rng.choice(["W", "U", "0", "1", "2"]))
                 for _ in range(rng.choice([0, 1, 1, 2]))]
    else:
        y, x, opposite = mirror
        terms = [("-" if sign == "+" else "+", v) for sign, v in opposite]
    op = rng.choice(sorted(_RELATIONS))

    def offset(env):
        return sum((1 if sign == "+" else -1) * (env[v] if v.isalpha() else int(v))
                   for sign, v in terms)

    added = "".join(f" {sign} {v}" for sign, v in terms)
    if terms and rng.random() < 0.5:  # x - y op c, c written as 0 + ... or 0 - ...
        text, test = f"{x} - {y} {op} 0{added}", lambda e: _RELATIONS[op](e[x] - e[y], offset(e))
    else:
        text, test = f"{x} {op} {y}{added}", lambda e: _RELATIONS[op](e[x], e[y] + offset(e))
    return text, test, (x, y, terms)


@pytest.mark.parametrize("seed", range(24))
def test_random_where_clauses_are_counted_exactly_or_refused_at_the_clause(seed):
    import random
    rng = random.Random(seed)
    conditions = [_random_condition(rng) for _ in range(rng.choice([1, 2, 3]))]
    if len(conditions) > 1 and rng.random() < 0.5:  # the second opposes the first
        conditions[1] = _random_condition(rng, conditions[0][2])
    key = rng.choice("ST")
    where = ", ".join(text for text, _, _ in conditions)
    text = f"""dims: {{S: queries, T: keys, W: a, U: b, E: width}}
tensors:
  Q: {{shape: [S, E], role: input}}
  K: {{shape: [{key}, E], role: input}}
ops:
  - A[s,t] = Q[s,e] K[t,e] where {where}
"""
    try:
        flops = costs(symflops.derive(symflops.loads(text, "fuzz.yaml"))).flops_forward
    except symflops.SymflopsError as exc:  # anything else is an internal error (exit 70)
        assert str(exc).startswith("fuzz.yaml:6:34:"), (where, str(exc))
        return
    for S_, T_, W_, U_ in itertools.product((1, 2, 5), (1, 3, 6), (1, 2, 4), (1, 3)):
        env = {"S": S_, "T": T_, "W": W_, "U": U_}
        n_t = T_ if key == "T" else S_
        count = sum(all(c({**env, "s": s, "t": t}) for _, c, _ in conditions)
                    for s in range(S_) for t in range(n_t))
        at = {dim_symbol(k): v for k, v in env.items()}
        assert flops.xreplace({**at, E: 1}) == 2 * count, (where, key, env)
