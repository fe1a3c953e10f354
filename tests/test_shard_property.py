"""Property test: random contractions under random placements on a 2 x 3 mesh.

For each case the engine's plan (:func:`symflops.ops.einsum.split.split_terms`:
the letters its work is split along, the collectives and their sizes) is run
by an independent NumPy simulation of the six devices: each holds the shards
its placements give it, gathers what the plan gathers, multiplies over the
index ranges its split gives it, sums partial results across the devices the
plan reduces over, and gathers or moves the output.  Every device must end
with exactly its block of the true product (so the plan is a correct
algorithm), each collective's array must hold the number of elements the
engine's polynomial says (the simulation counts it from the blocks), and
each device's multiply-adds (counted from its local product) must equal the
engine's per-device FLOPs; summed over the devices they are the unsharded
count plus the stated redundant work (the steps every device of an axis
repeats because nothing splits them along it).
"""

from __future__ import annotations

import itertools

import numpy as np
import sympy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import symflops
from symflops.core.sharding import Layout, Placement, axis_symbol
from symflops.ops.einsum.split import split_terms

LETTERS = "ijkl"
EXTENT = 6
MESH = {"X": 2, "Y": 3}


@st.composite
def cases(draw):
    n = draw(st.integers(1, 2))
    operands = [draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3, unique=True))
                for _ in range(n)]
    union = sorted({i for op in operands for i in op})
    output = draw(st.lists(st.sampled_from(union), unique=True, max_size=min(3, len(union))))
    if n == 1 and sorted(output) == sorted(operands[0]) and len(output) == len(operands[0]):
        output = output[:-1]  # a copy is a move, not a product: keep a sum
    names = [f"T{k}" for k in range(n)] + ["Y"]
    letters = operands + [output]
    placements = {}
    for name, idx in zip(names, letters):
        choice = draw(st.lists(st.sampled_from(["", "X", "Y"]), min_size=len(idx),
                               max_size=len(idx)))
        seen: set[str] = set()
        axes = []
        for c in choice:
            if c and c not in seen:
                seen.add(c)
                axes.append((c,))
            else:
                axes.append(())
        placements[name] = tuple(axes)
    return operands, output, placements


def _block(extent: int, axes: tuple[str, ...], coords: dict[str, int]) -> range:
    if not axes:
        return range(extent)
    (a,) = axes
    size = extent // MESH[a]
    return range(coords[a] * size, (coords[a] + 1) * size)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2**16))
# Y[i] = Σ_{k,l,j} T0[k,l,i] T1[j], i over X, j over Y, the output's i over Y: the partial
# sums over Y cannot be reduce-scattered along i (a block of i_X cut over Y does not nest
# in i_Y); all-reduced (V = I/X = 3 elements), then gathered over X (V = I = 6)
@example(case=([["k", "l", "i"], ["j"]], ["i"],
               {"T0": ((), (), ("X",)), "T1": (("Y",),), "Y": (("Y",),)}), seed=0)
# the same with k kept and split over Y: reduce-scattered over Y first (V = K·I/X = 18), the
# gather over X then moves K/Y · I = 12 elements, not K·I = 36
@example(case=([["k", "l", "i"], ["j"]], ["k", "i"],
               {"T0": ((), (), ("X",)), "T1": (("Y",),), "Y": (("Y",), ())}), seed=0)
# two reductions of one block (i over X, k over Y summed; j kept over X): each on the
# whole partial block J = 6, the AllReduce over Y before the ReduceScatter over X
@example(case=([["i", "k", "j"]], ["j"], {"T0": (("X",), ("Y",), ()), "Y": (("X",),)}), seed=0)
def test_sharded_products_match_a_simulation_of_the_mesh(case, seed):
    operands, output, placements = case
    dims = {x.upper(): "" for x in LETTERS}
    tensors = {f"T{k}": {"shape": [x.upper() for x in idx], "role": "input"}
               for k, idx in enumerate(operands)}
    refs = " ".join(f"T{k}[{','.join(idx)}]" for k, idx in enumerate(operands))
    statement = f"Y[{','.join(output)}] = {refs}"
    layer = symflops.declare("case", dims=dims, tensors=tensors, ops=[statement])
    op = layer.ops[0]
    sizes = {a: axis_symbol(a) for a in MESH}
    layout = Layout(tuple(sizes.items()), tuple((n, Placement(p)) for n, p in placements.items()))
    plan = split_terms(op.terms, op.dims(), layout)
    at = {sympy.Symbol(x.upper(), positive=True, integer=True): EXTENT for x in LETTERS}
    at.update({axis_symbol(a): v for a, v in MESH.items()})

    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal([EXTENT] * len(idx)) for idx in operands]
    spec = ",".join("".join(idx) for idx in operands) + "->" + "".join(output)
    truth = np.einsum(spec, *arrays)
    split = dict(plan.split)
    gathered = {n.array: n.axes for n in plan.needs if n.kind == "AllGather"
                and n.array.startswith("T")}
    reduced = [n for n in plan.needs if n.kind in ("AllReduce", "ReduceScatter")]
    moved = [n for n in plan.needs if n.kind in ("AllGather", "AllToAll") and n.array == "Y"]
    reduced.sort(key=lambda n: n.kind != "AllReduce")  # AllReduces first, then ReduceScatters
    for n in plan.needs:
        assert n.array in {"Y"} | set(tensors), n  # one step: operands or the output

    devices = [dict(zip(MESH, c)) for c in itertools.product(*(range(v) for v in MESH.values()))]
    local: dict[tuple, tuple[dict[str, range], np.ndarray]] = {}
    work = 0
    for coords in devices:
        ranges = {x: _block(EXTENT, split.get(x, ()), coords) for x in LETTERS}
        blocks = []
        for k, idx in enumerate(operands):
            name = f"T{k}"
            held = [tuple(a for a in axes if a not in gathered.get(name, ()))
                    for axes in placements[name]]
            view = [_block(EXTENT, axes, coords) for axes in held]
            for x, r in zip(idx, view):  # what it holds covers what it multiplies
                assert set(ranges[x]) <= set(r), (statement, placements, plan, coords)
            if name in gathered:  # the gathered array's elements, as the engine counts them
                need = next(n for n in plan.needs if n.array == name)
                assert int(need.elements.xreplace(at)) == int(np.prod([len(r) for r in view]))
            blocks.append(arrays[k][np.ix_(*[list(ranges[x]) for x in idx])])
        out = np.einsum(spec, *blocks)
        local[tuple(coords.values())] = ({x: ranges[x] for x in output}, out)
        span = set().union(*map(set, operands))
        summed = span - set(output)
        tuples = int(np.prod([len(ranges[x]) for x in span]))
        # a pairwise product: a multiply-add (2) per tuple when it sums, a multiply (1) when
        # not; a lone reduction: one add per element read
        count = tuples * (1 if len(operands) == 1 else 2 if summed else 1)
        engine = plan.flops + plan.elementwise
        assert int(engine.xreplace(at)) == count, (statement, placements, plan, count)
        work += count

    post = {}
    for coords in devices:  # partial sums reduced across the plan's axes
        key = tuple(coords.values())
        ranges, out = local[key]
        done: set[str] = set()
        for need in reduced:
            assert int(need.elements.xreplace(at)) == out.size
            done |= set(need.axes)
        peers = [d for d in devices if all(d[a] == coords[a] for a in MESH if a not in done)]
        for p in peers:
            assert local[tuple(p.values())][0] == ranges  # the same block, partial sums
        out = sum(local[tuple(p.values())][1] for p in peers)
        for need in reduced:
            if need.kind == "ReduceScatter":  # summed, then each device keeps its block
                for a in need.axes:  # along the letter the output is split on there
                    (x,) = [x for x, axes in zip(output, placements["Y"]) if a in axes]
                    r = _block(EXTENT, (a,), coords)
                    keep = [list(ranges[x]).index(i) for i in r if i in ranges[x]]
                    out = np.take(out, keep, axis=output.index(x))
                    ranges = {**ranges, x: range(r.start, r.stop)}
        post[key] = (ranges, out)

    def assemble(coords, axes):
        peers = [d for d in devices if all(d[a] == coords[a] for a in MESH if a not in axes)]
        full = {x: sorted(set().union(*(post[tuple(p.values())][0][x] for p in peers)))
                for x in output}
        block = np.full([len(full[x]) for x in output], np.nan)
        for p in peers:
            r, b = post[tuple(p.values())]
            block[np.ix_(*[[full[x].index(i) for i in r[x]] for x in output])] = b
        assert not np.isnan(block).any()
        return {x: range(full[x][0], full[x][-1] + 1) for x in output}, block

    for coords in devices:  # the output gathered (or moved), then this device's block checked
        ranges, out = post[tuple(coords.values())]
        for need in moved:
            assert int(need.elements.xreplace(at)) == assemble(coords, set(need.axes))[1].size
        if moved:
            ranges, out = assemble(coords, {a for n in moved for a in n.axes})
        for need in moved:
            if need.kind == "AllToAll":  # moved: each device keeps its block along the new letter
                for a in need.axes:
                    (x,) = [x for x, axes in zip(output, placements["Y"]) if a in axes]
                    r = _block(EXTENT, (a,), coords)
                    out = np.take(out, [list(ranges[x]).index(i) for i in r],
                                  axis=output.index(x))
                    ranges = {**ranges, x: r}
        target = [_block(EXTENT, axes, coords) for axes in placements["Y"]]
        mine = truth[np.ix_(*[list(r) for r in target])] if output else truth
        for x, r in zip(output, target):
            assert set(r) <= set(ranges[x]), (statement, placements, plan)
        have = out[np.ix_(*[[list(ranges[x]).index(i) for i in r]
                            for x, r in zip(output, target)])] if output else out
        assert np.allclose(have, mine), (statement, placements, plan)
    # summed over the devices: the unsharded count, repeated along every axis that does
    # not split the product (the stated redundant work: each device of such an axis
    # computes the same block)
    unsharded = op.cost("FLOPs")
    full_count = int((unsharded.flops + unsharded.elementwise).xreplace(at))
    splitting = {a for axes in split.values() for a in axes}
    repeat = int(np.prod([v for a, v in MESH.items() if a not in splitting]))
    assert work == full_count * repeat, (statement, placements, work, full_count, repeat)
