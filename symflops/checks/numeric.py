"""Numerical evaluation of einsums, forward passes and derived backward rules.

Used by the gradient checks: the derived rules run on random arrays and are
compared with finite differences of the forward pass.  NumPy's einsum cannot
write a repeated output index (a diagonal) nor an output index that no
operand carries (a broadcast), both of which gradients need; :func:`run_einsum`
handles them.  Indicator factors (a where-clause's ``[t <= s]``, a lookup's
``[v = tok[b]]``) are evaluated as 0/1 arrays: a mask, and the one-hot matrix
of the integer index array.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..core.records import Derivation
from ..core.ir import Layer
from ..ops.einsum.numeric import extents_at, run_einsum


def forward(layer: Layer, arrays: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Run every forward op; returns inputs, params and activations by name."""
    values = dict(arrays)
    for op in layer.ops:
        values.update(op.run(values, extents_at(op.index_dims, dims), dims))
    return values


def backward(derivation: Derivation, values: Mapping[str, np.ndarray],
             upstream: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Run the derived rules in order; ``upstream`` gives d<output> for each
    layer output.  Returns every gradient by name, contributions summed."""
    env = dict(values)
    env.update(upstream)
    grads: dict[str, np.ndarray] = {}
    for rule in derivation.rules:
        extents = extents_at(rule.index_dims, dims)
        total = sum(run_einsum(t, env, extents, dims) for t in rule.terms)
        grads[rule.grad] = grads.get(rule.grad, 0) + total
        env[rule.grad] = grads[rule.grad]
    return grads
