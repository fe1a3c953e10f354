"""The bound of the order search is an answer, not an internal error.

A five-factor CP-factorised linear layer ``Y[b,m,n] = X[b,i,j] A[i,r]
Bf[j,r] C[m,r] Df[n,r]`` has, for each gradient, more than 32 orders that are
each the cheapest at some sizes; ``derive`` exited 70 (TooManyOrders).  Now
each such term is counted in the one order cheapest at the declared sizes,
exactly, and ``derive``, ``--json`` and the sheet say the search was bounded.

Expected values: the counted polynomial against a hand count of the chosen
order (below), and the chosen order against a brute-force enumeration of
every pairwise order at the declared sizes (the cost of each order computed
here, independently of symflops).
"""

from __future__ import annotations

import itertools
import json
import math

import sympy

import symflops
from symflops.cli import main
from symflops.core.ir import dim_symbol
from symflops.count.cost import costs

CP = """
name: cp
dims: {B: batch, I: in rows, J: in cols, M: out rows, N: out cols, R: rank}
tensors:
  X: {shape: [B, I, J], role: input}
  A: {shape: [I, R], role: param}
  Bf: {shape: [J, R], role: param}
  C: {shape: [M, R], role: param}
  Df: {shape: [N, R], role: param}
ops:
  - Y[b,m,n] = X[b,i,j] A[i,r] Bf[j,r] C[m,r] Df[n,r]
"""
SIZES = {"B": 64, "I": 32, "J": 32, "M": 16, "N": 48, "R": 8}
DECLARED = CP + "sizes: {" + ", ".join(f"{k}: {v}" for k, v in SIZES.items()) + "}\n"


def _trees(items: tuple[int, ...]):
    """Every full binary tree over ``items`` (each split once)."""
    if len(items) == 1:
        yield items[0]
        return
    first, rest = items[0], items[1:]
    for r in range(len(rest)):
        for chosen in itertools.combinations(rest, r):
            left = (first, *chosen)
            right = tuple(x for x in rest if x not in chosen)
            for a in _trees(left):
                for b in _trees(right):
                    yield (a, b)


def _members(t) -> frozenset[int]:
    return frozenset((t,)) if isinstance(t, int) else _members(t[0]) | _members(t[1])


def _linked(nodes: frozenset[int], leaves) -> bool:
    seen, todo = {min(nodes)}, [min(nodes)]
    while todo:
        i = todo.pop()
        for j in nodes - seen:
            if leaves[i] & leaves[j]:
                seen.add(j)
                todo.append(j)
    return seen == set(nodes)


def _allowed(tree, leaves) -> bool:
    """The convention's orders: no outer product inside operands that are linked."""
    if isinstance(tree, int):
        return True
    if _linked(_members(tree), leaves) and not (_linked(_members(tree[0]), leaves)
                                                and _linked(_members(tree[1]), leaves)):
        return False
    return _allowed(tree[0], leaves) and _allowed(tree[1], leaves)


def _cost(tree, leaves, out, size) -> tuple[int, int]:
    """(flops, elementwise) of ``tree`` by the README's conventions, counted
    here: each join ranges over the union of its sides' letters, keeps the
    letters on the output or outside it, costs 2 per tuple if it sums a letter
    (else 1), and is a matrix product (flops) when it sums and keeps a letter
    only one side has."""
    everything = frozenset(range(len(leaves)))

    def walk(t):
        if isinstance(t, int):
            return frozenset((t,)), leaves[t], 0, 0
        a, la, fa, ea = walk(t[0])
        b, lb, fb, eb = walk(t[1])
        mine = a | b
        outside = frozenset().union(*(leaves[i] for i in everything - mine))
        union = la | lb
        keep = frozenset(x for x in union if x in out or x in outside)
        n = math.prod(size[x] for x in union)
        sums = bool(union - keep)
        matrix = sums and any(not (x in la and x in lb) for x in keep)
        step = (2 if sums else 1) * n
        return mine, keep, fa + fb + (step if matrix else 0), ea + eb + (0 if matrix else step)

    _, _, f, w = walk(tree)
    return f, w


def _text(tree, names) -> str:
    def go(t, top):
        if isinstance(t, int):
            return names[t]
        inner = f"{go(t[0], False)} {go(t[1], False)}"
        return inner if top else f"({inner})"
    return go(tree, True)


def test_the_cp_layer_derives_with_a_note(capsys, tmp_path):
    path = tmp_path / "cp.yaml"
    path.write_text(CP)
    status = main(["derive", str(path)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out.count("the order search was bounded (more than 32 orders are each the "
                     "cheapest at some sizes)") == 5
    # no sizes declared: every dim at 1024
    assert "the cheapest at B = 1024, I = 1024, J = 1024, M = 1024, N = 1024, R = 1024" in out
    status = main(["derive", str(path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    for entry in data["backward"]:
        [orders] = entry["orders"]
        assert orders["bounded"] == "more than 32 orders are each the cheapest at some sizes"
        assert orders["sizes"] == {k: 1024 for k in SIZES}
        [only] = orders["candidates"]
        assert only["order"] == orders["counted"]
        assert (only["flops"], only["flops_elementwise"]) == (entry["flops"],
                                                              entry["flops_elementwise"])
    # the sheet says it too, once per gradient
    assert main(["render", str(path), "--format", "md"]) == 0
    sheet = capsys.readouterr().out
    assert sheet.count("was bounded: more than 32 orders are each the cheapest at some "
                       "sizes. Counted here:") == 5


def test_the_counted_order_by_hand_and_by_brute_force():
    layer = symflops.loads(DECLARED, "cp.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    B, I, J, M, N, R = (dim_symbol(n) for n in "BIJMNR")
    by = {r.grad: (r, oc) for r, oc in zip(d.rules, c.backward)}

    # dX[b,i,j] = dY[b,m,n] A[i,r] Bf[j,r] C[m,r] Df[n,r], counted in
    # (dY (C Df)) (A Bf):
    #   C[m,r] Df[n,r] -> [m,n,r]          sums nothing: M N R, elementwise
    #   dY[b,m,n] (CDf)[m,n,r] -> [b,r]    sums m, n, keeps b and r (one side each): 2 B M N R
    #   A[i,r] Bf[j,r] -> [i,j,r]          sums nothing: I J R, elementwise
    #   [b,r] [i,j,r] -> [b,i,j]           sums r, keeps b and i, j: 2 B I J R
    rule, oc = by["dX"]
    [o] = oc.orders
    assert o.texts == ("(dY[b,m,n] (C[m,r] Df[n,r])) (A[i,r] Bf[j,r])",)
    assert o.bounded and o.sizes == tuple(SIZES.items())
    assert sympy.expand(oc.flops - (2 * B * M * N * R + 2 * B * I * J * R)) == 0
    assert sympy.expand(oc.elementwise - (M * N * R + I * J * R)) == 0
    # dC[m,r] = X[b,i,j] A[i,r] Bf[j,r] dY[b,m,n] Df[n,r], counted in
    # ((X (A Bf)) dY) Df:
    #   A[i,r] Bf[j,r] -> [i,j,r]                 I J R, elementwise
    #   X[b,i,j] (ABf)[i,j,r] -> [b,r]            sums i, j: 2 B I J R
    #   [b,r] dY[b,m,n] -> [m,n,r]                sums b, keeps r (left) and m, n (right): 2 B M N R
    #   [m,n,r] Df[n,r] -> [m,r]                  sums n, keeps m (left only): 2 M N R
    rule, oc = by["dC"]
    [o] = oc.orders
    assert o.texts == ("((X[b,i,j] (A[i,r] Bf[j,r])) dY[b,m,n]) Df[n,r]",)
    assert sympy.expand(oc.flops - (2 * B * I * J * R + 2 * B * M * N * R + 2 * M * N * R)) == 0
    assert sympy.expand(oc.elementwise - I * J * R) == 0

    # Every gradient: the chosen order is the cheapest of the convention's
    # orders at the declared sizes, and its count is exact for that order at
    # other sizes too.
    others = [SIZES, {"B": 3, "I": 5, "J": 2, "M": 7, "N": 4, "R": 6},
              {"B": 1, "I": 9, "J": 8, "M": 2, "N": 3, "R": 11}]
    for grad, (rule, oc) in by.items():
        [term] = rule.terms
        leaves = [frozenset(f.indices) for f in term.factors]
        out = frozenset(term.output.indices)
        [o] = oc.orders
        chosen = o.candidates[0].tree
        letter_dim = {i: str(e) for i, e in rule.dims().items()}
        for k, at in enumerate(others):
            size = {i: at[letter_dim[i]] for i in term.indices}
            values = {dim_symbol(n): v for n, v in at.items()}
            mine = _cost(chosen, leaves, out, size)
            assert (oc.flops.xreplace(values), oc.elementwise.xreplace(values)) == mine, grad
            if k == 0:
                allowed = [t for t in _trees(tuple(range(len(leaves)))) if _allowed(t, leaves)]
                least = min(sum(_cost(t, leaves, out, size)) for t in allowed)
                assert sum(mine) == least, (grad, _text(chosen, [str(f) for f in term.factors]))


def test_a_product_of_eight_tensors_answers_within_the_work_bound():
    """A chain of 8 matrices of distinct sizes: each gradient is a product of 8
    tensors.  The search stops at its work bound and counts the order
    cheapest at the declared sizes; checked against every order of the chain
    that multiplies only linked intermediates (a chain's: its bracketings)."""
    sizes = {"A": 3, "B": 50, "C": 7, "D": 40, "E": 2, "F": 60, "G": 5, "H": 30, "I": 9}
    names = "ABCDEFGHI"
    text = ("dims: {" + ", ".join(f"{n}: {n}" for n in names) + "}\ntensors:\n"
            + "".join(f"  X{k + 1}: {{shape: [{names[k]}, {names[k + 1]}], "
                      f"role: {'input' if k == 0 else 'param'}}}\n" for k in range(8))
            + "ops:\n  - Y[a,i] = " + " ".join(f"X{k + 1}[{names[k].lower()},"
                                                 f"{names[k + 1].lower()}]" for k in range(8))
            + "\nsizes: {" + ", ".join(f"{k}: {v}" for k, v in sizes.items()) + "}\n")
    layer = symflops.loads(text, "chain8.yaml")
    d = symflops.derive(layer)
    c = costs(d)
    assert len(d.rules) == 8
    rule, oc = d.rules[3], c.backward[3]
    [o] = oc.orders
    assert o.bounded == "the search passed 10,000 pairs of candidate orders"
    [term] = rule.terms
    leaves = [frozenset(f.indices) for f in term.factors]
    out = frozenset(term.output.indices)
    size = {i: sizes[str(e)] for i, e in rule.dims().items() if i in term.indices}

    def linked_trees(items: frozenset[int]):
        if len(items) == 1:
            yield next(iter(items))
            return
        first = min(items)
        rest = sorted(items - {first})
        for r in range(len(rest)):
            for chosen in itertools.combinations(rest, r):
                left = frozenset((first, *chosen))
                right = items - left
                if _linked(left, leaves) and _linked(right, leaves):
                    for a in linked_trees(left):
                        for b in linked_trees(right):
                            yield (a, b)

    least = min(sum(_cost(t, leaves, out, size))
                for t in linked_trees(frozenset(range(len(leaves)))))
    values = {dim_symbol(n): v for n, v in sizes.items()}
    assert (oc.flops + oc.elementwise).xreplace(values) == least
    assert sum(_cost(o.candidates[0].tree, leaves, out, size)) == least
