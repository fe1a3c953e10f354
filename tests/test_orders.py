"""Contraction orders and the two FLOP buckets, against counts made here.

Every expected value is computed in this file, independently of
symflops.ops.einsum.orders: by hand for the named layers, and for random products
by a brute-force count written below (each pairwise product costs 2 FLOPs per
index tuple when it sums over a letter, 1 when it sums over none), taking the
written order for forward terms and the minimum over every pairwise order
(without an avoidable outer product, the stated convention) for backward rules.
"""

from __future__ import annotations

import itertools
import json

import pytest
import sympy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import symflops
from symflops.cli import main
from symflops.count.cost import costs
from symflops.ops.einsum.cost import einsum_flops
from symflops.ops.einsum.search import cheapest
from symflops.core.ir import dim_symbol
from symflops.declaration.reader import loads
from symflops.count.summary import summary

B, I, J, K, O, S, E, F = (dim_symbol(n) for n in "BIJKOSEF")

CHAIN4 = """
dims: {B: batch, I: i, J: j, K: k, O: o}
tensors:
  X: {shape: [B, I], role: input}
  W1: {shape: [I, J], role: param}
  W2: {shape: [J, K], role: param}
  W3: {shape: [K, O], role: param}
ops:
  - Y[b,o] = X[b,i] W1[i,j] W2[j,k] W3[k,o]
"""

LINEAR_ATTENTION = """
dims: {S: sequence, E: key width, F: value width}
tensors:
  Q: {shape: [S, E], role: input}
  K: {shape: [S, E], role: input}
  V: {shape: [S, F], role: input}
ops:
  - Y[s,f] = K[t,e] V[t,f] Q[s,e]
"""


def test_four_operands_are_counted_in_the_written_order():
    c = costs(symflops.derive(loads(CHAIN4, "chain4.yaml")))
    # ((X W1) W2) W3: [B,I]x[I,J] 2BIJ, then [B,J]x[J,K] 2BJK, then [B,K]x[K,O] 2BKO.
    assert c.flops_forward == 2 * B * I * J + 2 * B * J * K + 2 * B * K * O
    at = {B: 1, I: 4096, J: 4096, K: 4096, O: 4096}
    assert c.flops_forward.subs(at) == 3 * 2 * 4096**2  # was 2J(BI + BO + KO): 1,366x more


def test_crossing_orders_are_reported_and_evaluated_at_each_size(tmp_path, capsys):
    path = tmp_path / "linear.yaml"
    path.write_text(LINEAR_ATTENTION)
    d = symflops.derive(loads(LINEAR_ATTENTION, str(path)))
    c = costs(d)
    # dK[t,e] = dY[s,f] V[t,f] Q[s,e]: (dY V) Q sums f then s, 2S^2F + 2S^2E;
    # (dY Q) V sums s then f, 2SEF + 2SEF.  Neither is cheaper at every size.
    quadratic, linear = 2 * S**2 * (E + F), 4 * S * E * F
    k = [r.wrt for r in d.rules].index("K")
    assert c.backward[k].flops.subs({S: 4096, E: 128, F: 128}) == linear.subs({S: 4096, E: 128, F: 128})
    assert c.backward[k].flops.subs({S: 64, E: 128, F: 128}) == quadratic.subs({S: 64, E: 128, F: 128})
    assert main(["derive", str(path), "--json"]) == 0
    rule = next(r for r in json.loads(capsys.readouterr().out)["backward"] if r["grad"] == "dK")
    cands = {sympy.parse_expr(x["flops"], local_dict={"S": S, "E": E, "F": F}): x["cheaper_when"]
             for x in rule["orders"][0]["candidates"]}
    assert set(cands) == {sympy.expand(quadratic), linear}
    # the linear order wins when 4SEF < 2S^2(E + F), that is S > 2EF/(E + F)
    assert cands[linear] == "S > 2*E*F/(E + F)"
    assert rule["orders"][0]["counted"] == "the least of the candidates"
    # eval counts the cheapest order at the sizes it is given
    assert main(["eval", str(path), "S=64", "E=128", "F=128", "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert next(r["flops"] for r in numbers["backward"] if r["grad"] == "dK") == 2 * 64**2 * 256


def test_declared_sizes_choose_one_order(tmp_path, capsys):
    path = tmp_path / "linear.yaml"
    path.write_text("sizes: {S: 4096, E: 128, F: 128}\n" + LINEAR_ATTENTION)
    c = costs(symflops.derive(symflops.load(path)))
    assert c.flops_backward == 3 * 4 * S * E * F  # each rule in the linear order
    assert main(["derive", str(path), "--json"]) == 0
    rule = json.loads(capsys.readouterr().out)["backward"][0]
    assert rule["orders"][0]["counted"] == "(dY[s,f] Q[s,e]) V[t,f]"
    assert rule["orders"][0]["sizes"] == {"S": 4096, "E": 128, "F": 128}
    # at other sizes eval still takes the cheapest order there
    assert main(["eval", str(path), "S=64", "E=128", "F=128", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flops"]["backward"] == 3 * 2 * 64**2 * 256


def test_forward_order_cheapest(tmp_path):
    text = "forward_order: cheapest\nsizes: {S: 4096, E: 64, F: 64}\n" + LINEAR_ATTENTION.replace(
        "K[t,e] V[t,f] Q[s,e]", "Q[s,e] K[t,e] V[t,f]")
    c = costs(symflops.derive(loads(text, "x.yaml")))
    assert c.flops_forward == 4 * S * E * F  # (K V) first, though Q K is written first
    written = costs(symflops.derive(loads(text.replace("forward_order: cheapest\n", ""), "x.yaml")))
    assert written.flops_forward == 2 * S**2 * E + 2 * S**2 * F  # (Q K) V as written


# ------------------------------------------------------------- buckets --

def _declare(ops: list[str], tensors: dict, dims: str = "BCPD") -> symflops.core.ir.Layer:
    return symflops.declare("t", dims={d: d for d in dims}, tensors=tensors, ops=ops)


def test_a_lone_reduction_is_elementwise_forward_and_backward():
    layer = _declare(["Z[b,c] = X[b,c,p]", "Y[b,d] = Z[b,c] W[c,d]"],
                     {"X": {"shape": ["B", "C", "P"], "role": "input"},
                      "W": {"shape": ["C", "D"], "role": "param"}})
    c = costs(symflops.derive(layer))
    B_, C_, P_, D_ = (dim_symbol(n) for n in "BCPD")
    # the pooling sum: one add per element read, B C P, elementwise like any reduction
    assert c.forward[0].flops == 0 and c.forward[0].elementwise == B_ * C_ * P_
    assert c.forward[1].flops == 2 * B_ * C_ * D_


def test_a_bias_gradient_and_a_gain_gradient_are_elementwise():
    layer = _declare(["H[b,d] = X[b,c] W[c,d] + g[d] X2[b,d]"],
                     {"X": {"shape": ["B", "C"], "role": "input"},
                      "X2": {"shape": ["B", "D"], "role": "input"},
                      "W": {"shape": ["C", "D"], "role": "param"},
                      "g": {"shape": ["D"], "role": "param"}})
    d = symflops.derive(layer)
    c = costs(d)
    B_, C_, D_ = (dim_symbol(n) for n in "BCD")
    by = {r.grad: oc for r, oc in zip(d.rules, c.backward)}
    # dg[d] = sum_b X2[b,d] dH[b,d]: a row-wise dot product, every kept letter on both
    assert by["dg"].flops == 0 and by["dg"].elementwise == 2 * B_ * D_
    # dW[c,d] = sum_b X[b,c] dH[b,d]: a matrix product
    assert by["dW"].flops == 2 * B_ * C_ * D_ and by["dW"].elementwise == 0


def test_moe_combine_scatter_is_elementwise_and_totals_keep():
    d = symflops.derive(symflops.load("derivations/moe_block.yaml"))
    c = costs(d)
    k = next(j for j, r in enumerate(d.rules) if r.grad == "dYe")
    Bb, Sb, Db, kb = (dim_symbol(n) for n in "BSDk")
    # dYe[x,q,d] = Gt[b,s,j] dY[b,s,d] where x = ex[b,s,j], q = sl[b,s,j]: each product
    # is added into the slot its token was routed to: a multiply and an add per term.
    assert c.backward[k].flops == 0
    assert c.backward[k].elementwise == 2 * Bb * Sb * Db * kb


# ----------------------------------------------------- random products --

LETTERS = "abcdef"


def _brute_cost(tree, leaves: list[frozenset], out: frozenset, size: dict) -> int:
    """The cost of ``tree`` counted here: each join of two intermediates
    ranges over the union of their letters; it keeps the letters on the
    output or on an operand outside it; 2 per tuple if it sums any, else 1."""
    everything = set(range(len(leaves)))

    def walk(t):
        if isinstance(t, int):
            return {t}, leaves[t], 0
        a, la, ca = walk(t[0])
        b, lb, cb = walk(t[1])
        mine = a | b
        outside = set().union(*(leaves[i] for i in everything - mine))
        union = la | lb
        keep = frozenset(x for x in union if x in out or x in outside)
        n = 1
        for x in union:
            n *= size[x]
        return mine, keep, ca + cb + (2 if union - keep else 1) * n

    return walk(tree)[2]


def _trees(items: tuple[int, ...]):
    """Every full binary tree over ``items`` (each split counted once)."""
    if len(items) == 1:
        yield items[0]
        return
    first, rest = items[0], items[1:]
    for r in range(0, len(rest)):
        for chosen in itertools.combinations(rest, r):
            left = (first, *chosen)
            right = tuple(x for x in rest if x not in chosen)
            for a in _trees(left):
                for b in _trees(right):
                    yield (a, b)


def _linked(nodes: set, leaves: list[frozenset]) -> bool:
    nodes = set(nodes)
    seen, todo = {min(nodes)}, [min(nodes)]
    while todo:
        i = todo.pop()
        for j in nodes - seen:
            if leaves[i] & leaves[j]:
                seen.add(j)
                todo.append(j)
    return seen == nodes


def _allowed(tree, leaves) -> bool:
    """No avoidable outer product: inside a linked set of operands, both sides linked."""
    def members(t):
        return {t} if isinstance(t, int) else members(t[0]) | members(t[1])

    if isinstance(tree, int):
        return True
    mine = members(tree)
    if _linked(mine, leaves) and not (_linked(members(tree[0]), leaves)
                                      and _linked(members(tree[1]), leaves)):
        return False
    return _allowed(tree[0], leaves) and _allowed(tree[1], leaves)


@st.composite
def products(draw):
    n = draw(st.integers(3, 5))
    operands = [draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3, unique=True))
                for _ in range(n)]
    used = sorted({x for f in operands for x in f})
    out = draw(st.lists(st.sampled_from(used), unique=True, max_size=min(3, len(used))))
    dim_of = {x: draw(st.sampled_from("STU")) for x in used}
    sizes = {d: draw(st.integers(1, 7)) for d in "STU"}
    return operands, out, dim_of, sizes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(products())
# a gradient whose search meets its bound: more than 32 orders are each the cheapest
# at some sizes, and it is counted in the one cheapest at S = T = U = 1024
@example(([["d", "e", "f"], ["d", "a"], ["a", "e", "c"], ["c"], ["e"]], ["f", "c"],
          {"a": "T", "c": "S", "d": "S", "e": "S", "f": "U"}, {"S": 3, "T": 1, "U": 1}))
def test_random_products_against_brute_force(case):
    operands, out, dim_of, sizes = case
    names = [f"T{k}" for k in range(len(operands))]
    tensors = {n: {"shape": [dim_of[x] for x in f], "role": "param"}
               for n, f in zip(names, operands)}
    statement = (f"Y[{','.join(out)}] = "
                 + " ".join(f"{n}[{','.join(f)}]" for n, f in zip(names, operands)))
    layer = symflops.declare("p", dims={"S": "s", "T": "t", "U": "u"}, tensors=tensors,
                             ops=[statement])
    d = symflops.derive(layer)
    c = costs(d)
    at = {dim_symbol(k): v for k, v in sizes.items()}
    size = {x: sizes[dim_of[x]] for x in dim_of}
    leaves = [frozenset(f) for f in operands]
    written = 0
    for k in range(1, len(leaves)):
        written = (written, k)
    # forward: the written order, both buckets together
    total = sympy.expand(c.forward[0].flops + c.forward[0].elementwise)
    assert total.xreplace(at) == _brute_cost(written, leaves, frozenset(out), size), statement
    # backward: each rule's terms at least as cheap as every allowed order, and
    # as one of them; a term whose search met its bound (docs/conventions.md,
    # *Contraction orders*) is counted in one order, exactly, and that order
    # is the cheapest at the sizes the search names
    for r, rc in zip(d.rules, c.backward):
        for t in r.terms:
            chosen = sympy.sympify(einsum_flops(t, r.dims(), "FLOPs", "cheapest")).xreplace(at)
            term_leaves = [frozenset(f.indices) for f in t.factors]
            out_letters = frozenset(t.output.indices)
            allowed = [tree for tree in _trees(tuple(range(len(term_leaves))))
                       if _allowed(tree, term_leaves)]

            def brute(tree, values):
                sizes_at = {dim_symbol(k): v for k, v in values.items()}
                term_size = {i: int(e.xreplace(sizes_at)) for i, e in r.dims().items()
                             if i in t.indices}
                return _brute_cost(tree, term_leaves, out_letters, term_size)

            found, bounded = cheapest(t, r.dims(), "FLOPs")
            if bounded is None:
                assert chosen == min(brute(tree, sizes) for tree in allowed), \
                    (statement, t.statement())
                continue
            (counted,) = found
            assert chosen == brute(counted.tree, sizes), (statement, t.statement())
            named = dict(bounded.sizes)
            assert brute(counted.tree, named) == min(brute(tree, named) for tree in allowed), \
                (statement, t.statement(), bounded)


def test_the_outer_product_convention_is_the_stated_one():
    """W[k] = X[i] Y[j] Z[i,j,k] with i, j over I: joining X and Y first (an
    outer product) costs I^2 + 2I^2K; the linked orders, (Z X) Y or (Z Y) X,
    cost 2I^2K + 2IK.  At I < 2K the outer product is cheaper, and symflops,
    as documented, searches the linked orders only."""
    layer = loads("""
dims: {I: i, K: k}
forward_order: cheapest
tensors:
  X: {shape: [I], role: param}
  Y: {shape: [I], role: param}
  Z: {shape: [I, I, K], role: param}
ops:
  - W[k] = X[i] Y[j] Z[i,j,k]
""", "outer.yaml")
    c = costs(symflops.derive(layer))
    assert c.forward[0].flops + c.forward[0].elementwise == 2 * I**2 * K + 2 * I * K


def test_a_letter_only_a_lookup_carries_is_summed_and_scattered():
    """Y1[t,e] = sum_j Ye[ex[t,j], sl[t,j], e] (an MoE combine without gates): the
    forward reads T K E elements, one add each; its gradient adds each of the T E
    elements of dY1 into the K slots its token went to: T K E adds.  (This raised
    KeyError 'j' before.)"""
    layer = loads("""
dims: {T: tokens, K: chosen, X: experts, C: slots, E: width}
tensors:
  Ye: {shape: [X, C, E], role: input}
  ex: {shape: [T, K], role: index}
  sl: {shape: [T, K], role: index}
ops:
  - Y1[t,e] = Ye[ex[t,j], sl[t,j], e]
""", "combine.yaml")
    c = costs(symflops.derive(layer))
    T_, K_, E_ = (dim_symbol(n) for n in "TKE")
    assert (c.flops_forward, c.elementwise_forward) == (0, T_ * K_ * E_)
    assert (c.flops_backward, c.elementwise_backward) == (0, T_ * K_ * E_)
