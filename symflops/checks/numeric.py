"""Numerical evaluation of einsums, forward passes and derived backward rules.

Used by the gradient checks: the derived rules run on random arrays and are
compared with finite differences of the forward pass.  NumPy's einsum cannot
write a repeated output index (a diagonal) nor an output index that no
operand carries (a broadcast), both of which gradients need; :func:`run_einsum`
handles them.  Indicator factors (a where-clause's ``[t <= s]``, a lookup's
``[v = tok[b]]``) are evaluated as 0/1 arrays: a mask, and the one-hot matrix
of the integer index array.

Also the finite differences and errors the checks compare with: a central
difference along a random direction, exact up to rounding for the polynomials
of degree <= 2 along a line that einsums are, against the derived gradient
along the same direction, relative to ``max(1, |difference|)``; and errors of
arrays relative to ``max(1, max |reference|)`` (against autograd).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.errors import SymflopsError
from ..core.records import Derivation, Rule
from ..core.ir import Layer
from ..ops.einsum.numeric import extents_at, run_einsum
from ..ops.functions import FUNCTIONS

#: The step of the central differences.  Its rounding error (about
#: epsilon |f| / step) can exceed the tolerance through a whole chain
#: (Mamba-2's SSD: dYd 1.1e-6 off, where autograd agreed to 1e-16): the
#: chained check then measures it (:func:`symflops.checks.verify.check_chain`).
#: A larger step trades it for truncation: at 1e-5, sqrt near 0 missed by 4e-6.
EPS = 1e-6


def forward(layer: Layer, arrays: Mapping[str, np.ndarray], dims: Mapping[str, int],
            override: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run every forward op; returns inputs, params and activations by name.
    The activations in ``override`` are taken as given instead of computed (so
    that a gradient with respect to an intermediate can be differenced)."""
    override = override or {}
    values = dict(arrays)
    for op in layer.ops:
        if op.output in override:
            values[op.output] = np.asarray(override[op.output])
        else:
            # NumPy turns a 0-d result into a numpy scalar (np.exp(array(1.0)) is a
            # float64), which has no elements to assign: every value stays an array.
            values.update({name: np.asarray(value) for name, value
                           in op.run(values, extents_at(op.index_dims, dims), dims).items()})
    return values


def check_domains(layer: Layer, values: Mapping[str, np.ndarray], where: str, hint: str) -> None:
    """Refuse, naming the op, a function evaluated outside its domain
    (``log`` of a tensor with an element <= 0) in the forward pass ``values``:
    its rules would be compared as NaN, which says nothing of where.  ``where``
    says whose values these are (``at the drawn values``)."""
    for k, op in enumerate(layer.ops):
        for t in op.terms:
            for f in t.factors:
                function = FUNCTIONS[f.function.name] if f.function is not None else None
                if function is None or function.domain == "real" or f.tensor not in values:
                    continue
                array = np.asarray(values[f.tensor], dtype=float)
                bad = int(np.count_nonzero(~function.defined_at(array)))
                if bad:
                    raise SymflopsError(
                        f"op {k + 1}, {op.statement()!r}, evaluates {f.function.name} outside "
                        f"its domain x > 0: {bad} of the {array.size} elements of {f.tensor} "
                        f"are not positive {where}", getattr(op, "span", None), hint)


def backward(derivation: Derivation, values: Mapping[str, np.ndarray],
             upstream: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Run the derived rules in order; ``upstream`` gives d<output> for each
    layer output.  Returns every gradient by name, contributions summed."""
    env = dict(values)
    env.update(upstream)
    grads: dict[str, np.ndarray] = {}
    for rule in derivation.rules:
        total = rule_value(rule, env, dims)
        grads[rule.grad] = np.asarray(grads.get(rule.grad, 0) + total)
        env[rule.grad] = grads[rule.grad]
    return grads


def rule_value(rule: Rule, env: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> np.ndarray:
    """One rule's value: the sum of its einsums, or, for a rule that runs a
    recurrence (:class:`symflops.ops.recurrence.ScanRule`), its own evaluation."""
    extents = extents_at(rule.index_dims, dims)
    own = getattr(rule, "evaluate", None)
    if own is not None:
        return np.asarray(own(env, extents, dims))
    return np.asarray(sum(run_einsum(t, env, extents, dims) for t in rule.terms))


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    """``max |value - reference| / max(1, max |reference|)``; inf on a shape mismatch."""
    value, reference = np.asarray(value, dtype=float), np.asarray(reference, dtype=float)
    if value.shape != reference.shape:
        return float("inf")
    if reference.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(reference))))
    return float(np.max(np.abs(value - reference))) / scale


def directional_difference(scalar: Callable[[np.ndarray], float], at: np.ndarray,
                           direction: np.ndarray, eps: float = EPS) -> float:
    """The derivative of ``scalar`` at ``at`` along ``direction``, by one
    central difference: two evaluations, whatever the size of ``at``.  Along a
    line an einsum (a tensor read at most twice) is a polynomial of degree <= 2,
    so this is exact up to rounding; O(eps**2) beyond.  Compared with
    ``sum(gradient * direction)``: for a ``direction`` drawn at random
    (Gaussian), a gradient wrong in any element changes that sum, except with
    probability zero, so one difference checks the whole tensor, where
    differences one element at a time took two whole-layer forwards per element."""
    at = np.array(at, dtype=float)  # a copy, and an array even for a numpy scalar
    return (scalar(at + eps * direction) - scalar(at - eps * direction)) / (2 * eps)


def directional_error(derived: np.ndarray, numeric: float, direction: np.ndarray) -> float:
    """``|sum(derived * direction) - numeric| / max(1, |numeric|)``: the error of
    a gradient along ``direction`` against :func:`directional_difference`; inf
    when ``derived`` has not the direction's shape."""
    derived = np.asarray(derived, dtype=float)
    if derived.shape != direction.shape:
        return float("inf")
    along = float(np.sum(derived * direction))
    return abs(along - numeric) / max(1.0, abs(numeric))


def apply_rules(rules: Sequence[Rule], env: Mapping[str, np.ndarray],
                dims: Mapping[str, int]) -> np.ndarray:
    total: Any = 0
    for rule in rules:
        extents = extents_at(rule.index_dims, dims)
        if hasattr(rule, "evaluate"):
            total = total + rule_value(rule, env, dims)
            continue
        for term in rule.terms:
            for f in term.operands:
                if not f.reads_tensor:
                    continue
                # Said here in the rule's own letters; NumPy would name its internal ones.
                want = tuple(extents[i] for i in (f.indices[1:] if f.is_select else f.indices))
                if env[f.tensor].shape != want:
                    raise ValueError(f"{f} needs shape {want}, but {f.tensor} has shape "
                                     f"{env[f.tensor].shape}")
            total = total + run_einsum(term, env, extents, dims)
    return np.asarray(total, dtype=float)


@dataclass(frozen=True)
class Chain:
    """The gradients the chained rules computed, and those they could not
    (gradient name -> why)."""

    grads: Mapping[str, np.ndarray]
    broken: Mapping[str, str]


def chained(derivation: Derivation, values: Mapping[str, np.ndarray],
            upstream: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> Chain:
    """:func:`symflops.checks.numeric.backward`, except that a rule that cannot be
    evaluated marks its gradient, and every gradient computed from it, as
    broken (gradient name -> why) instead of stopping the whole check."""
    env: dict[str, np.ndarray] = {**values, **upstream}
    grads: dict[str, np.ndarray] = {}
    broken: dict[str, str] = {}
    for rule in derivation.rules:
        bad = [g for g in rule.reads if g in broken]
        if bad:
            broken.setdefault(rule.grad, f"reads {bad[0]}, which cannot be evaluated")
            continue
        try:
            part = apply_rules([rule], env, dims)
            total = grads[rule.grad] + part if rule.grad in grads else part
        except (ValueError, IndexError, KeyError) as exc:
            broken.setdefault(rule.grad, f"cannot evaluate {rule.statement}: {exc}")
            continue
        grads[rule.grad] = env[rule.grad] = np.asarray(total)
    return Chain(grads, broken)
