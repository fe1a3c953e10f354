"""Finite-difference gradient check of a layer's derived backward rules.

The reference is independent of the derivation: it perturbs every element of
every leaf tensor that needs a gradient and differences the scalar
``sum over outputs of dY * Y`` computed by the forward pass alone.  Index
tensors (token ids) get random integers in range and are never perturbed.
"""

from __future__ import annotations

import numpy as np
import sympy

from symflops.derive.backward import derive
from symflops.core.ir import Layer, index_ranges
from symflops.checks.numeric import backward, forward


def random_dims(layer: Layer, rng: np.random.Generator, low: int = 2, high: int = 4) -> dict[str, int]:
    """A size in [low, high] for every dim."""
    return {d.name: int(rng.integers(low, high + 1)) for d in layer.dims}


def _extent(expr, dims):
    return int(sympy.sympify(expr).subs({sym: dims[str(sym)] for sym in sympy.sympify(expr).free_symbols}))


def _shape(tensor, dims):
    return tuple(_extent(s, dims) for s in tensor.shape)


def gradient_errors(layer: Layer, seed: int = 0, eps: float = 1e-6,
                    sizes: tuple[int, int] = (2, 4)) -> dict[str, float]:
    """Largest relative error of each derived leaf gradient against central
    differences, in float64 at small random sizes (each dim in ``sizes``)."""
    rng = np.random.default_rng(seed)
    dims = random_dims(layer, rng, *sizes)
    derivation = derive(layer)
    ranges = index_ranges(layer)
    leaves = {t.name: (rng.integers(0, _extent(ranges.get(t.name, 1), dims), _shape(t, dims))
                       if t.role == "index" else rng.standard_normal(_shape(t, dims)))
              for t in layer.tensors if t.role != "activation"}
    values = forward(layer, leaves, dims)
    upstream = {"d" + name: rng.standard_normal(values[name].shape) for name in layer.outputs}

    def scalar(arrays):
        v = forward(layer, arrays, dims)
        return sum(float(np.sum(upstream["d" + n] * v[n])) for n in layer.outputs)

    grads = backward(derivation, values, upstream, dims)
    errors = {}
    for name in sorted(derivation.needs_grad):
        if name not in leaves:
            continue
        numeric = np.zeros_like(leaves[name])
        for idx in np.ndindex(numeric.shape):
            plus = {k: v.copy() for k, v in leaves.items()}
            minus = {k: v.copy() for k, v in leaves.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric[idx] = (scalar(plus) - scalar(minus)) / (2 * eps)
        derived = grads.get("d" + name, np.zeros_like(numeric))
        scale = max(1.0, float(np.max(np.abs(numeric))))
        errors[name] = float(np.max(np.abs(derived - numeric))) / scale
    return errors
