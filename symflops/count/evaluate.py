"""Numbers from polynomials: substitute dim values, exactly.

Integer dims give exact Python integers (FLOPs of a large run do not fit a
float's 53-bit mantissa exactly, and the seeds' figures are exact).

Invariants: a dim's value is a positive integer (``4096``, ``2**20``, ``4e3``;
never ``1.5``, ``1/3``, ``0`` or ``-2``), given once; every defined dim
(``R = N / G``) is a positive integer at the values given
(:func:`check_definitions`); an exact result has at most
:data:`MAX_RESULT_DIGITS` digits, so that it prints exactly.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Iterable, Mapping, TypeVar

import sympy

from ..core.errors import SymflopsError
from ..core.numbers import MAX_RESULT_DIGITS, whole_digits
from ..lang.expr import parse_number
from ..core.ir import Example, Layer, dim_symbol
from .records import map_formulas

T = TypeVar("T")

def dim_value(name: str, text: str) -> sympy.Integer:
    """The value of dimension ``name``, a positive integer, read exactly."""
    value = parse_number(text)
    if not (value.is_Integer and value > 0):
        raise SymflopsError(f"dimension {name} must be a positive integer, got {text!r}",
                            hint=f"a dim is a positive integer: give e.g. {name}=4096, "
                                 f"{name}=2**12 or {name}=4e3")
    return value


def parse_configs(items: Iterable[str]) -> dict[str, sympy.Expr]:
    """``["B=1048576,D=4096", "F=16384"]`` -> ``{"B": 1048576, "D": 4096, "F": 16384}``
    (values through the whitelisting number reader; nothing is evaluated); a
    dim given twice is an error."""
    values: dict[str, sympy.Expr] = {}
    for text in items:
        for part in text.split(","):
            if not part.strip():
                continue
            name, sep, value_text = part.partition("=")
            name = name.strip()
            if not sep or not name:
                raise SymflopsError(f"expected NAME=VALUE, found {part.strip()!r}",
                                    hint="give each dim as e.g. B=1048576")
            if name in values:
                raise SymflopsError(f"dimension {name} is given twice",
                                    hint=f"give {name} one value (keep one of the two {name}=...)")
            values[name] = dim_value(name, value_text.strip())
    return values


def parse_config(text: str) -> dict[str, sympy.Expr]:
    """``"B=1048576,D=4096"`` -> ``{"B": 1048576, "D": 4096}``: one configuration."""
    return parse_configs([text])


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
    """``["B=1048576", "D=4096"]`` -> ``{"B": 1048576, ...}``, checked against
    the layer: every dim that takes a value has one, and the defined dims are
    positive integers there."""
    values = parse_configs(items)
    for name in values:
        check_dim_name(layer, name)
    check_all_given(layer, values)
    check_definitions(layer, values)
    return values


def find_example(layer: Layer, name: str) -> Example:
    """The example of ``layer`` named ``name`` (``examples:`` in its declaration)."""
    for example in layer.examples:
        if example.name == name:
            return example
    names = [e.name for e in layer.examples]
    raise SymflopsError(f"{layer.name} has no example {name!r}",
                        hint=(f"its examples are {', '.join(names)}" if names else
                              "it declares none: add an 'examples:' block to its declaration "
                              "(see docs/declarations.md, examples:), or give the dims' values"))


def example_config(example: Example) -> dict[str, sympy.Expr]:
    """An example's dims' values, as :func:`parse_assignments` gives them (the
    reader checked them when the declaration was loaded)."""
    return {k: sympy.Integer(v) for k, v in example.values}


def _describe(values: Mapping[str, Any]) -> str:
    """``B=4096, D≈1.000e+999``: a value of over 20 digits is shortened."""
    return ", ".join(f"{k}={v}" if len(str(v)) <= 20 else f"{k}≈{Decimal(int(v)):.3e}"
                     for k, v in values.items())


def check_definitions(layer: Layer, values: Mapping[str, Any]) -> None:
    """Every defined dim (``R: {equals: N / G}``) is a positive integer at
    ``values`` (a value for every dim it depends on): a ratio the declaration
    promises divides exactly, checked where the numbers are known; and every
    index tensor's range fits the bytes it is counted at (:mod:`.indices`)."""
    from .indices import check_index_widths  # light: imports the IR only

    subs = layer.substitutions
    at = {dim_symbol(k): sympy.Integer(int(v)) for k, v in values.items()}
    check_index_widths(layer, values)
    for name, formula in layer.definitions:
        value = subs[dim_symbol(name)].xreplace(at)
        if value.free_symbols:
            continue  # not all of its dims are given here
        if not (value.is_Integer and value > 0):
            used = {k: v for k, v in values.items()
                    if dim_symbol(k) in subs[dim_symbol(name)].free_symbols}
            shown = f"{value} = {float(value):.6g}" if value.is_Rational else str(value)
            raise SymflopsError(f"at {_describe(used)} the defined dimension {name} = "
                                f"{sympy.sstr(formula)} is {shown}, not a positive whole number",
                                hint=f"give values at which {sympy.sstr(formula)} divides exactly")


def number(expr: sympy.Expr, values: Mapping[str, sympy.Expr]) -> int | float:
    """``expr`` at ``values``: an int when the result is an integer."""
    # every symbol replaced at once by its number, each node rebuilt and so
    # evaluated: the value subs gives (over all 15,203 formulas of the shipped
    # sheets at their examples), 37 times faster, where subs re-simplified
    # half-substituted maxima (``Max._find_localzeros``) at every step
    result = expr.xreplace(
        {dim_symbol(k): sympy.sympify(v, strict=True) for k, v in values.items()})
    if result.free_symbols:
        raise ValueError(f"unbound symbols {result.free_symbols} in {expr}")
    if result.is_Rational and max(whole_digits(result.p), whole_digits(result.q)) > MAX_RESULT_DIGITS:
        raise SymflopsError(f"a result at {_describe(values)} has more than {MAX_RESULT_DIGITS:,} "
                            "digits", hint="give smaller dims")
    if result.is_Integer:
        return int(result)
    if result.is_Rational and result == int(result):
        return int(result)
    try:
        approximate = float(result)
    except (TypeError, ValueError, OverflowError):
        approximate = math.nan
    if result.is_Rational and not math.isfinite(approximate):
        # a ratio beyond a float's range (1.8e308), such as an arithmetic
        # intensity at dims of 10**999: the nearest whole number, closer to
        # the exact value than any float could be (docs/json.md says so)
        return int(result.round())
    if not math.isfinite(approximate):
        raise SymflopsError(f"a result at {_describe(values)} is {sympy.sstr(result)[:60]}, which "
                            "is not a finite number", hint="give smaller dims")
    return approximate


def evaluate(tree: T, values: Mapping[str, sympy.Expr]) -> T:
    """The same tree (a :class:`~symflops.count.records.Summary`, any record of
    it, or one formula) with every formula replaced by its number at ``values``."""
    return map_formulas(tree, lambda e: number(e, values))
