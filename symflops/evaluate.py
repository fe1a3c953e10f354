"""Numbers from polynomials: substitute dim values, exactly.

Integer dims give exact Python integers (FLOPs of a large run do not fit a
float's 53-bit mantissa exactly, and the seeds' figures are exact).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import sympy

from .errors import SymflopsError
from .expr import parse_number
from .ir import Layer, dim_symbol


def parse_config(text: str) -> dict[str, sympy.Expr]:
    """``"B=1048576,D=4096"`` -> ``{"B": 1048576, "D": 4096}`` (values through
    the whitelisting number reader; nothing is evaluated)."""
    values: dict[str, sympy.Expr] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value_text = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SymflopsError(f"expected NAME=VALUE, found {part.strip()!r}",
                                hint="give each dim as e.g. B=1048576")
        value = parse_number(value_text.strip())
        if not (value.is_positive and value.is_finite):
            raise SymflopsError(f"dimension {name} must be positive, got {value_text.strip()!r}",
                                hint="give a positive size, e.g. B=1048576")
        values[name] = value
    return values


def check_dim_name(layer: Layer, name: str) -> None:
    """``name`` is a dimension of ``layer`` that takes a value (not one defined by a formula)."""
    if name in {n for n, _ in layer.definitions}:
        raise SymflopsError(f"dimension {name!r} is defined by a formula",
                            hint="give the dims its formula uses instead")
    known = [d.name for d in layer.free_dims]
    if name not in known:
        raise SymflopsError(f"{layer.name} has no dimension {name!r}",
                            hint=f"its dimensions are {', '.join(known)}")


def check_all_given(layer: Layer, given: Iterable[str], exempt: Iterable[str] = ()) -> None:
    """Every dimension of ``layer`` that takes a value, but those ``exempt``, is in ``given``."""
    have, skip = set(given), set(exempt)
    missing = [d.name for d in layer.free_dims if d.name not in have and d.name not in skip]
    if missing:
        raise SymflopsError(f"no value for dimension(s) {', '.join(missing)}",
                            hint="give every dimension" + (f" but {', '.join(sorted(skip))}"
                                                           if skip else "") + ", e.g. " +
                                 " ".join(f"{n}=..." for n in missing))


def parse_assignments(items: list[str], layer: Layer) -> dict[str, sympy.Expr]:
    """``["B=1048576", "D=4096"]`` -> ``{"B": 1048576, ...}``, checked against the layer."""
    values: dict[str, sympy.Expr] = {}
    for item in items:
        for name, value in parse_config(item).items():
            check_dim_name(layer, name)
            values[name] = value
    check_all_given(layer, values)
    return values


def number(expr: sympy.Expr, values: Mapping[str, sympy.Expr]) -> int | float:
    """``expr`` at ``values``: an int when the result is an integer."""
    result = expr.subs({dim_symbol(k): v for k, v in values.items()})
    if result.free_symbols:
        raise ValueError(f"unbound symbols {result.free_symbols} in {expr}")
    if result.is_Integer:
        return int(result)
    if result.is_Rational and result == int(result):
        return int(result)
    return float(result)


def evaluate(structure: Any, values: Mapping[str, sympy.Expr]) -> Any:
    """The same structure with every formula replaced by its number."""
    if isinstance(structure, dict):
        return {k: evaluate(v, values) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return [evaluate(v, values) for v in structure]
    if isinstance(structure, sympy.Basic):
        return number(structure, values)
    return structure
