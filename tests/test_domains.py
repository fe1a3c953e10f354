"""Where-clauses between letters over different dims: exact closed forms.

The expected counts are enumerations written here: every index tuple of a
product is visited and kept when it satisfies the where-clause.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symflops
from symflops.count.cost import costs
from symflops.core.domain import Bound, domain_size
from symflops.core.ir import dim_symbol

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
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "symflops", "eval", str(path), *values, "--json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert time.monotonic() - start < 60
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
