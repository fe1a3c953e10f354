"""Bytes per element of an index tensor: its range decides them.

An index tensor (``role: index``: token ids, targets, expert choices) holds
integers in ``[0, size)``, where ``size`` is the extent of the axis it
selects along (:func:`symflops.core.ir.index_ranges`: the vocabulary ``V``
for ``E[tok[b,s], d]``, the classes of a loss's targets).  Its width is the
smallest of 1, 2, 4 and 8 bytes whose signed integer (int8, int16, int32,
int64, as frameworks store indices) holds ``size - 1``: token ids over
Llama-2's 32,000 words fit int16 (at most 32,767), Llama-3's 128,256 need
int32.

The memory polynomials carry one width per tensor, so where ``size`` is a
symbol the width is chosen from the values the declaration gives it: the
widest needed at any of its ``examples:`` and its ``sizes:``; with no value
anywhere, 8 bytes (int64, PyTorch's index type, which holds any range a
count can have).  Evaluating at a value beyond the chosen width is refused
(:func:`check_index_widths`), never counted at too few bytes.
"""

from __future__ import annotations

from typing import Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, dim_symbol, index_ranges, substitute
from ..core.widths import fewest_bytes

#: With no value for its range anywhere in the declaration: int64.
UNKNOWN_RANGE = 8


def width_for(size: int) -> int:
    """The fewest bytes of a signed integer that holds ``0 .. size - 1``."""
    w = fewest_bytes(size)
    if w is not None:
        return w
    raise SymflopsError(f"an index range of {size} values does not fit 8 bytes (int64)",
                        hint="give a range below 2**63")


def _configs(layer: Layer) -> list[dict[sympy.Symbol, sympy.Expr]]:
    out = [{dim_symbol(k): sympy.Integer(v) for k, v in e.values} for e in layer.examples]
    if layer.sizes:
        out.append({dim_symbol(k): sympy.Integer(v) for k, v in layer.sizes})
    return out


def index_widths(layer: Layer) -> dict[str, int]:
    """Bytes per element of each index tensor of ``layer`` (see the module)."""
    ranges = index_ranges(layer)
    subs = layer.substitutions
    out: dict[str, int] = {}
    for t in layer.tensors:
        if t.role != "index":
            continue
        if t.name not in ranges:
            out[t.name] = UNKNOWN_RANGE
            continue
        size = sympy.expand(substitute(ranges[t.name], subs))
        if size.is_Integer:
            out[t.name] = width_for(int(size))
            continue
        known = [size.xreplace(c) for c in _configs(layer)]
        known = [int(v) for v in known if v.is_Integer]
        out[t.name] = max((width_for(v) for v in known), default=UNKNOWN_RANGE)
    return out


def index_range_text(layer: Layer, name: str) -> sympy.Expr | None:
    """The size of ``name``'s range (defined dims substituted), None when no
    lookup or loss reads it."""
    ranges = index_ranges(layer)
    return substitute(ranges[name], layer.substitutions) if name in ranges else None


def check_index_widths(layer: Layer, values: Mapping[str, sympy.Expr]) -> None:
    """At ``values``, every index tensor's range fits the width its bytes
    are counted at; else a SymflopsError naming the tensor."""
    widths = index_widths(layer)
    at = {dim_symbol(k): sympy.Integer(int(v)) for k, v in values.items()}
    for name, size in index_ranges(layer).items():
        value = sympy.expand(substitute(size, layer.substitutions)).xreplace(at)
        if not value.is_Integer or name not in widths:
            continue
        need = width_for(int(value))
        if need > widths[name]:
            raise SymflopsError(
                f"index tensor {name!r} holds values up to {int(value) - 1:,} here, which its "
                f"{widths[name]}-byte integers (chosen from the declaration's examples and sizes) "
                f"cannot hold: it needs {need} bytes",
                hint=f"add an example with this range to the declaration's 'examples:', so that "
                     f"{name}'s width is chosen for it")
