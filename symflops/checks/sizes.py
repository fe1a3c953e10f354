"""The dims and the random arrays ``symflops verify`` checks a layer at.

Invariants: dims are drawn distinct where there are enough values (a rule with
two axes swapped then fails on shape or value); every declared axis is at least
1; no tensor, and no op's letters, exceed the limits (elements), so that finite
differences stay fast and meta-device counts stay inside int64; a tensor a
function defined on x > 0 reads directly is drawn positive.  Everything is
drawn from the generator passed in: one seed, one set of sizes and arrays.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, Tensor, dim_symbol, index_ranges
from ..ops.functions import FUNCTIONS

MEDIUM = (8, 64)         # range of the medium dim sizes for FLOP counts


# ------------------------------------------------------------------ sizes --

def extent(expr: sympy.Expr, dims: Mapping[str, int]) -> int:
    return int(expr.subs({s: dims[str(s)] for s in expr.free_symbols}))


#: Elements a tensor may hold, and an op's letters may span, at the small sizes
#: (real float64 arrays, differenced one element at a time: time grows with
#: the square of a tensor's size) and at the medium sizes (the meta device:
#: shapes only, but counts must stay far inside int64).  The shipped models
#: hold at most about 5 * 10**4 elements per tensor at the small sizes.
SMALL_LIMITS = (10**5, 10**7)
MEDIUM_LIMITS = (10**15, 10**15)


def _all_extents_positive(layer: Layer, dims: Mapping[str, int]) -> bool:
    return all(extent(e, dims) >= 1 for t in layer.tensors for e in t.shape)


def _too_large(layer: Layer, dims: Mapping[str, int], limits: tuple[int, int]
               ) -> tuple[str, Any] | None:
    """What holds or spans more elements than ``limits`` (per tensor, per op)
    at ``dims``, in words, and where it is declared; None when nothing does."""
    for t in layer.tensors:
        sizes = [extent(e, dims) for e in t.shape]
        if math.prod(sizes) > limits[0]:
            axis = max(range(len(sizes)), key=sizes.__getitem__)
            return (f"{t.name} [{', '.join(map(sympy.sstr, t.shape))}] holds "
                    f"{math.prod(sizes):,} elements (its axis {sympy.sstr(t.shape[axis])} is "
                    f"{sizes[axis]:,}), more than {limits[0]:,}", t.span)
    for op in layer.ops:
        span = math.prod(extent(e, dims) for e in op.dims().values())
        if span > limits[1]:
            return (f"the letters of {op.statement()!r} span {span:,} elements, more than "
                    f"{limits[1]:,}", getattr(op, "span", None))
    return None


#: Draws of dim sizes before giving up.
ATTEMPTS = 1000


def choose_sizes(layer: Layer, rng: np.random.Generator, low: int, high: int,
                 limits: tuple[int, int] = SMALL_LIMITS) -> dict[str, int]:
    """Distinct dim values in ``[low, high]`` where there are enough (a rule
    with two axes swapped then fails on shape or value), such that every
    declared axis (``P - K + 1`` too) is at least 1 and nothing exceeds
    ``limits`` (elements per tensor, per op)."""
    subs = layer.substitutions  # a defined dim takes its formula's value, never one drawn
    free = [d.name for d in layer.dims if dim_symbol(d.name) not in subs]
    n = len(free)
    # Sizes are proved polynomials with non-negative coefficients in dim - 1:
    # the smallest are at the lowest dims, so too large there means too large anywhere.
    lowest = _defined({name: low for name in free}, subs)
    problem = _too_large(layer, lowest, limits) if lowest is not None else None
    if problem is not None:
        raise SymflopsError(f"verify needs small sizes, but with every dim {low} {problem[0]}",
                            problem[1],
                            "verify checks a layer at dims of a few units: give the axes sizes "
                            "of low degree (B, 4*D, P + K - 1 rather than B**40)")
    for attempt in range(ATTEMPTS):
        # After the first 100 draws (distinct values where there are enough),
        # values may repeat and come from a range narrowed towards ``low``: a
        # ratio that must divide (R = N / G, C = c k B S / M) and the tensors it
        # sizes staying small may need small, equal values.
        top = high if attempt < 100 else max(low + 1, high - (attempt - 100) * (high - low) // 800)
        if attempt < 100 and high - low + 1 >= n:
            values = rng.choice(np.arange(low, high + 1), size=n, replace=False)
        else:
            values = rng.integers(low, top + 1, size=n)
        dims = _defined({name: int(v) for name, v in zip(free, values)}, subs)
        if dims is not None and _all_extents_positive(layer, dims) \
                and _too_large(layer, dims, limits) is None:
            return {d.name: dims[d.name] for d in layer.dims}
    raise SymflopsError(f"cannot find dim sizes in {low}..{high} that make every axis of "
                        f"{layer.name} positive and every tensor small", hint="check the shape "
                        "expressions")


def _defined(free: dict[str, int], subs: Mapping[sympy.Symbol, sympy.Expr]
             ) -> dict[str, int] | None:
    """``free`` with every defined dim's value (``T = M + S``, ``C = c*k*B*S/M``),
    or None when one is not a positive whole number there (a ratio that
    does not divide)."""
    out = dict(free)
    for symbol, formula in subs.items():
        value = formula.subs({dim_symbol(k): v for k, v in free.items()})
        if not (value.is_Integer and value >= 1):
            return None
        out[symbol.name] = int(value)
    return out


#: The range positive leaves are drawn from: away from 0, where log, sqrt and
#: reciprocal are steep and central differences would lose their accuracy.
POSITIVE = (0.5, 2.0)


def random_leaves(layer: Layer, dims: Mapping[str, int],
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard normal inputs and parameters, except that a tensor a function
    defined on x > 0 reads directly (``log(Z[s])``, ``N[s,f] / Z[s]``) is
    drawn uniformly in :data:`POSITIVE`; index tensors get integers in the
    range of the axis they select along (``[0, V)`` for ``E[tok[b], d]``)."""
    ranges = index_ranges(layer)
    positive = positive_arguments(layer)

    def draw(t: Tensor) -> np.ndarray:
        shape = shape_at(layer, t.name, dims)
        if t.role == "index":
            return rng.integers(0, extent(ranges.get(t.name, sympy.Integer(1)), dims), shape)
        return rng.uniform(*POSITIVE, shape) if t.name in positive else rng.standard_normal(shape)

    return {t.name: draw(t) for t in layer.tensors if t.role != "activation"}


def positive_arguments(layer: Layer) -> frozenset[str]:
    """Tensors that a function defined on x > 0 only reads directly."""
    return frozenset(f.tensor for op in layer.ops for t in op.terms for f in t.factors
                     if f.function is not None and FUNCTIONS[f.function.name].domain == "positive")


def small_sizes(layer: Layer, rng: np.random.Generator) -> dict[str, int]:
    return choose_sizes(layer, rng, 2, max(5, len(layer.dims) + 1))


def given_sizes(layer: Layer, dims: Mapping[str, int]) -> dict[str, int]:
    """The small sizes a user gives (``verify --at``), checked as drawn ones
    are: every declared axis at least 1, nothing beyond :data:`SMALL_LIMITS`."""
    dims = {d.name: int(dims[d.name]) for d in layer.dims}
    if not _all_extents_positive(layer, dims):
        raise SymflopsError("with these sizes an axis of the layer has no position",
                            hint="give sizes at which every declared axis is at least 1")
    problem = _too_large(layer, dims, SMALL_LIMITS)
    if problem is not None:
        raise SymflopsError(f"verify needs small sizes: {problem[0]}", problem[1],
                            "give sizes of a few units each")
    return dims


def shape_at(layer: Layer, name: str, dims: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(extent(e, dims) for e in layer.tensor(name).shape)
