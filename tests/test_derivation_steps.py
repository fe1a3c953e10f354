"""Every step a sheet shows in a derivation is an equality, checked numerically.

The appendix of a sheet derives each backward rule in lines: the chain rule,
the derivative with its Kronecker deltas, the deltas contracted, the rule.
Here each line of every derivation of every shipped sheet is evaluated with
NumPy at small random sizes and random tensors (a delta is the identity
matrix, a bracket its 0/1 array) and compared with the next: the
differentiated line with the contracted one, the contracted one with the
rule, whose letters are renamed.  The rule itself is checked against finite
differences by ``symflops verify`` (tests/test_verify.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

import symflops
from symflops.checks.numeric import forward
from symflops.checks.sizes import random_leaves, small_sizes
from symflops.core.ir import Einsum, Factor
from symflops.core.records import IndexTerm
from symflops.derive.patterns import with_patterns
from symflops.ops.einsum.numeric import extents_at, run_einsum

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(p.name for p in (ROOT / "derivations").glob("*.yaml"))


def _value(terms: tuple[IndexTerm, ...], out: tuple[str, ...], arrays: Mapping[str, np.ndarray],
           extents: Mapping[str, int], dims: Mapping[str, int]) -> np.ndarray:
    """The sum of index terms at the output letters ``out``, each delta
    ``δ_{ab}`` an ``[a = b]`` bracket (every other letter is summed)."""
    total = np.zeros([extents[i] for i in out])
    arrays = dict(arrays)
    for t in terms:
        deltas = []
        for a, b in t.deltas:  # the identity matrix over the two letters
            name = f"delta[{a},{b}]"
            arrays[name] = np.eye(extents[a], extents[b])
            deltas.append(Factor(name, (a, b)))
        total = total + run_einsum(Einsum(Factor("out", out), (*t.factors, *deltas), t.coefficient),
                                   arrays, extents, dims)
    return total


def _derivations(name: str):
    d = with_patterns(symflops.derive(symflops.load(str(ROOT / "derivations" / name))))
    rng = np.random.default_rng(1)
    dims = small_sizes(d.layer, rng)
    values = forward(d.layer, random_leaves(d.layer, dims, rng), dims)
    ops = {op.output: op for op in d.layer.ops}
    for pattern in d.patterns:
        op = ops[pattern.applies_to[0]]
        extents = extents_at(op.index_dims, dims)
        extents.update({i + "'": n for i, n in list(extents.items())})
        arrays = dict(values)
        arrays["d" + op.output] = rng.standard_normal(values[op.output].shape)
        for group in pattern.rules:
            yield f"{name}:{op.output}:{group.wrt}", group.rules, arrays, extents, dims


def _check_lines(case: str, rules, arrays, extents, dims) -> None:
    steps = {s.kind: s for s in rules[0].steps}
    primed = steps["differentiate"].lhs.indices
    differentiated = _value(steps["differentiate"].terms, primed, arrays, extents, dims)
    contracted = _value(steps["contract"].terms, primed, arrays, extents, dims)
    assert np.allclose(differentiated, contracted), \
        f"{case}: contracting the deltas changed the value"
    # the rule (its contributions summed) is the contracted line renamed: both
    # index the tensor's axes in order, so they compare position by position
    rule = sum(_value(tuple(IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms),
                      r.terms[0].output.indices, arrays, extents, dims) for r in rules)
    assert np.allclose(contracted, rule), f"{case}: the rule is not the contracted line renamed"


def test_a_wrong_step_is_caught() -> None:
    """Not vacuous: dropping a delta (summing where it should not) changes the value."""
    _, rules, arrays, extents, dims = next(c for c in _derivations("ffn.yaml")
                                           if c[0] == "ffn.yaml:H:X")
    steps = {s.kind: s for s in rules[0].steps}
    primed = steps["differentiate"].lhs.indices
    wrong = tuple(IndexTerm(t.coefficient, t.factors, t.deltas[1:], t.summed)
                  for t in steps["differentiate"].terms)
    assert not np.allclose(_value(wrong, primed, arrays, extents, dims),
                           _value(steps["contract"].terms, primed, arrays, extents, dims))


def _reduction_cases(name: str):
    """The index-term stages of each softmax, norm, log-sum-exp and loss rule."""
    d = symflops.derive(symflops.load(str(ROOT / "derivations" / name)))
    rng = np.random.default_rng(2)
    dims = small_sizes(d.layer, rng)
    values = forward(d.layer, random_leaves(d.layer, dims, rng), dims)
    for k, op in enumerate(d.layer.ops):
        if op.shown() is None or op.output not in d.needs_grad:
            continue
        for r in (r for r in d.rules if r.op == k):
            stages = {s.kind: s for s in r.steps if s.terms}
            if not {"scalar", "contracted", "rule"} <= set(stages):
                continue
            extents = extents_at(r.index_dims, dims)
            extents.update(extents_at(op.index_dims, dims))
            extents.update({i + "'": n for i, n in list(extents.items())})
            arrays = dict(values)
            arrays["d" + op.output] = rng.standard_normal(np.shape(values[op.output]))
            yield f"{name}:{op.output}:{r.wrt}", stages, arrays, extents, dims


def _check_stages(case: str, stages, arrays, extents, dims) -> None:
    # the scalar and contracted stages are at the primed element dX[b', d']
    primed = tuple(i + "'" for i in stages["scalar"].lhs.indices)
    scalar = _value(stages["scalar"].terms, primed, arrays, extents, dims)
    contracted = _value(stages["contracted"].terms, primed, arrays, extents, dims)
    rule = _value(stages["rule"].terms, stages["rule"].lhs.indices, arrays, extents, dims)
    assert np.allclose(scalar, contracted) and np.allclose(contracted, rule), \
        f"{case}: an index stage of the normalisation's rule differs from the next"


# One test per sheet: the cases are made when it runs, not when the tests are
# collected (every worker collects every test: cases made then were derived
# once per worker, before any test could start).
@pytest.mark.parametrize("name", SHEETS)
def test_each_line_and_index_stage_of_a_sheet_equals_the_next(name: str) -> None:
    """Each contraction's derivation (differentiated, contracted, rule) and
    each softmax, norm, log-sum-exp and loss rule's index stages (scalar,
    contracted, rule) of the sheet."""
    lines, stages = list(_derivations(name)), list(_reduction_cases(name))
    if not lines and not stages:
        pytest.skip(f"{name} shows no derivation in lines or index stages")
    for case in lines:
        _check_lines(*case)
    for case in stages:
        _check_stages(*case)
