"""An einsum evaluated with NumPy, for finite differences and ``symflops grads``.

NumPy's einsum cannot write a repeated output index (a diagonal) nor an
output index that no operand carries (a broadcast), both of which gradients
need; :func:`run_einsum` handles them.  Indicator factors (a where-clause's
``[t <= s]``, a lookup's ``[v = tok[b]]``, a shift's ``[q = p + k]``) are
evaluated as 0/1 arrays: a mask, the one-hot matrix of the integer index
array, the shift's 0/1 tensor.
"""

from __future__ import annotations

import functools
import string
from typing import Any, Mapping, Sequence

from ...core.lazy import numpy as np
import sympy

from ...core.ir import Einsum, Factor, Op, dim_symbol
from ..functions import numpy_function



#: NumPy's comparison of each relation, by name.
_COMPARE = {"<=": "less_equal", "<": "less", ">=": "greater_equal", ">": "greater"}


def indicator(f: Factor, arrays: Mapping[str, np.ndarray], extents: Mapping[str, int],
              dims: Mapping[str, int] | None = None) -> np.ndarray:
    """The 0/1 array of an indicator factor over its letters: ``[t <= s]`` is
    ``mask[t, s]``, ``[s < t + W]`` is ``mask[s, t] = (s < t + W)`` at the dims'
    values ``dims``; ``[v = tok[b]]`` is ``onehot[v, b] = (tok[b] == v)``;
    ``[q = p + k]`` is ``shift[q, p, k] = (q == p + k)``, and any affine
    index alike (``dims`` gives the values of coefficients such as ``P``); a
    concatenated part's place ``[t = s + M]`` is ``slot[t, s] = (t == s + M)``."""
    if f.is_offset:
        t, s = (np.arange(extents[i]) for i in f.indices)
        return (t[:, None] == s[None, :] + offset_at(f, dims)).astype(float)
    if f.is_select:
        tok = np.asarray(arrays[f.tensor])
        values = np.arange(extents[f.indices[0]]).reshape((-1,) + (1,) * tok.ndim)
        return (tok[np.newaxis] == values).astype(float)
    if f.is_shift:  # [q = c_1 x_1 + ... + c_0] over (q, x_1, ...)
        return (shift_grid(np, f, extents, dims) == 0).astype(float)
    a, b = f.indices
    offset = offset_at(f, dims)
    return getattr(np, _COMPARE[f.relation]).outer(np.arange(extents[a]),
                                      np.arange(extents[b]) + offset).astype(float)


def offset_at(f: Factor, dims: Mapping[str, int] | None) -> int:
    """A comparison's offset at the dims' values (0 for a plain ``[t <= s]``)."""
    if f.offset == 0:
        return 0
    return int(f.offset.xreplace({dim_symbol(k): v for k, v in (dims or {}).items()}))


def shift_grid(xp: Any, f: Factor, extents: Mapping[str, int],
               dims: Mapping[str, int] | None = None, device: Any = None) -> Any:
    """``q - (c_1 x_1 + ... + c_n x_n + c_0)`` over the letters ``(q, x_1, ...)``
    of a shift factor, with NumPy or PyTorch (``xp``): zero where the bracket holds."""
    relation = f.affine
    values = {dim_symbol(k): v for k, v in (dims or {}).items()}  # a dim in a coefficient or the offset
    n = len(f.indices)
    grid = 0
    for axis, (letter, c) in enumerate(zip(f.indices, (-1, *relation.coefficients))):
        c = int(c) if isinstance(c, int) or c.is_Integer else int(sympy.sympify(c).subs(values))
        shape = [1] * n
        shape[axis] = extents[letter]
        arange = (xp.arange(extents[letter], device=device) if device is not None
                  else xp.arange(extents[letter]))
        grid = grid + c * arange.reshape(shape)
    return -(grid + int(sympy.sympify(relation.offset).subs(values)))


def run_einsum(e: Einsum, arrays: Mapping[str, np.ndarray], extents: Mapping[str, int],
               dims: Mapping[str, int] | None = None) -> np.ndarray:
    """Evaluate ``e`` with NumPy; ``extents`` sizes every index letter and
    ``dims`` gives the dims a coefficient may contain (``1/sqrt(H)``)."""
    letters = {i: string.ascii_letters[k] for k, i in enumerate(e.indices)}
    present = [i for i in dict.fromkeys(e.output.indices)
               if any(i in f.indices for f in e.operands)]
    values = [None if f.is_shift else indicator(f, arrays, extents, dims) if f.is_indicator
              else numpy_function(f.function)(arrays[f.tensor]) if f.function else arrays[f.tensor]
              for f in e.operands]
    axes = [f.indices for f in e.operands]
    for k, f in reversed(list(enumerate(e.operands))):  # a shift read into its operand, or 0/1
        if f.is_shift and _gather(f, e.output.indices, axes, values, extents, dims):
            del axes[k], values[k]
        elif f.is_shift:
            values[k] = indicator(f, arrays, extents, dims)
    dtype = np.result_type(*values) if values else float
    if e.operands:
        spec = ",".join("".join(letters[i] for i in f) for f in axes)
        core = np.einsum(spec + "->" + "".join(letters[i] for i in present), *values,
                         optimize=True)
    else:
        core = np.ones((), dtype=dtype)
    core = core * _value(e.coefficient, tuple(sorted((dims or {}).items())))
    unique = list(dict.fromkeys(e.output.indices))
    # Broadcast along output indices that no operand carries.
    full = np.broadcast_to(
        core.reshape([extents[i] if i in present else 1 for i in unique]),
        [extents[i] for i in unique],
    )
    if len(unique) == len(e.output.indices):
        return np.array(full)
    # A repeated output index: write onto the diagonal, zero elsewhere.
    out = np.zeros([extents[i] for i in e.output.indices], dtype=full.dtype)
    grids = np.indices(full.shape)
    where = tuple(grids[unique.index(i)] for i in e.output.indices)
    out[where] = full
    return out


def _gather(f: Factor, out: Sequence[str], axes: list[tuple[str, ...]], values: list[Any],
            extents: Mapping[str, int], dims: Mapping[str, int] | None) -> bool:
    """Read a shift's bracket ``[q = 2 p + k]`` into the one operand that
    carries ``q`` (in place): ``X[b,c,q]`` becomes ``X[b,c,2p+k]`` over
    ``(b, c, p, k)``, 0 where the index leaves the axis (its padding).  The
    same sum as the 0/1 tensor's, without the dense product; False (nothing
    changed) unless exactly one operand carries ``q``, once, and none of the
    shift's other letters, and ``q`` is not on the output."""
    q, moved = f.indices[0], f.indices[1:]
    holders = [k for k, letters in enumerate(axes) if q in letters and letters != f.indices]
    if q in out or len(holders) != 1 or len(set(moved)) != len(moved):
        return False
    k = holders[0]
    letters = axes[k]
    if values[k] is None or letters.count(q) != 1 or any(x in letters for x in moved):
        return False
    position = -shift_grid(np, Factor("", ("",) + moved, fn=f.fn), {"": 1, **extents}, dims)[0]
    axis, n = letters.index(q), extents[q]
    inside = (position >= 0) & (position < n)
    array = np.asarray(values[k])
    taken = np.take(array, np.clip(position, 0, n - 1), axis=axis)
    mask = inside.reshape((1,) * axis + inside.shape + (1,) * (array.ndim - axis - 1))
    values[k] = taken * mask
    axes[k] = letters[:axis] + moved + letters[axis + 1:]
    return True


def run_op(op: Op, values: Mapping[str, np.ndarray], extents: Mapping[str, int],
           dims: Mapping[str, int] | None = None) -> np.ndarray:
    """One forward op: the sum of its terms, an array (0-d for a scalar output,
    where Python's sum of 0-d arrays would give a numpy scalar)."""
    return np.asarray(sum(run_einsum(t, values, extents, dims) for t in op.terms))


def extents_at(index_dims: Sequence[tuple[str, sympy.Expr]], dims: Mapping[str, int]) -> dict[str, int]:
    """Each letter's extent at the dim values ``dims`` (remembered: finite
    differences run the same ops at the same dims thousands of times)."""
    return dict(_extents_at(tuple(index_dims), tuple(sorted(dims.items()))))


@functools.lru_cache(maxsize=4096)
def _value(expr: sympy.Expr, dims: tuple[tuple[str, int], ...]) -> float:
    """A coefficient (``1/sqrt(H)``) at the dims' values, as a float."""
    if expr.free_symbols:
        expr = expr.subs({dim_symbol(k): v for k, v in dims})
    return float(expr)


@functools.lru_cache(maxsize=4096)
def _extents_at(index_dims: tuple[tuple[str, sympy.Expr], ...], dims: tuple[tuple[str, int], ...]
                ) -> tuple[tuple[str, int], ...]:
    values = dict(dims)
    return tuple((i, int(e.subs({s: values[str(s)] for s in e.free_symbols}))) for i, e in index_dims)
