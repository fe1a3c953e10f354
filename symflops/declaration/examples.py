"""``examples:``, named configurations of real models, read with positions::

    examples:
      Llama-2-7B: {L: 32, V: 32000, B: 1, S: 4096, D: 4096, N: 32, G: 32, E: 128, F: 11008}

Invariants of what :func:`read_examples` returns: each name is a non-empty
string, given once (the YAML reader refuses a key given twice); each example
gives every dim that takes a value exactly once, as a positive integer, and
no dim defined by a formula (that one is computed, and must come out a
positive whole number at the values given); the values are in the layer's
declaration order.  A value is an integer or a number in the forms
``--at`` accepts (``2**12``, ``4e3``), read by the whitelisting number
reader; nothing is evaluated.  Every error is at the offending key or value.
"""

from __future__ import annotations

from typing import Mapping

import sympy

from ..core.errors import Span, SymflopsError, closest
from ..core.ir import Example, Layer, dim_symbol
from ..lang.expr import parse_number
from ..lang.yaml import Node, describe, mapping

EXAMPLE_HINT = "write e.g. 'examples: {Llama-2-7B: {B: 1, S: 4096, D: 4096}}'"


def read_examples(top: Mapping[str, tuple[Span | None, Node]], layer: Layer
                  ) -> tuple[Example, ...]:
    """The ``examples:`` of a declaration whose other keys made ``layer``
    (none without the key)."""
    if "examples" not in top:
        return ()
    items = mapping(top["examples"][1], "'examples'",
                    "name each configuration and give its dims, " + EXAMPLE_HINT)
    return tuple(_example(name, key_span, node, layer)
                 for name, (key_span, node) in items.items())


def _example(name: str, key_span: Span | None, node: Node, layer: Layer) -> Example:
    if not name.strip():
        raise SymflopsError("an example needs a name", key_span,
                            "name the configuration, e.g. 'Llama-2-7B:'")
    free = [d.name for d in layer.free_dims]
    defined = {n for n, _ in layer.definitions}
    fields = mapping(node, f"example {name!r}", "give a value for each dim, " + EXAMPLE_HINT)
    values: dict[str, int] = {}
    for dim, (dim_span, value) in fields.items():
        if dim in defined:
            raise SymflopsError(f"example {name!r} gives {dim!r}, which is defined by a formula "
                                "and computed from the other dims", dim_span,
                                f"remove {dim!r}; give only {', '.join(free)}")
        if dim not in free:
            raise SymflopsError(f"example {name!r} gives {dim!r}, which is not a dimension of "
                                f"{layer.name}", dim_span,
                                "give the dims that take values; " + closest(dim, free))
        values[dim] = _value(name, dim, value)
    missing = [d for d in free if d not in values]
    if missing:
        raise SymflopsError(f"example {name!r} gives no value for {', '.join(missing)}",
                            key_span or node.span,
                            "every dim that takes a value is given once: add "
                            + ", ".join(f"{d}: ..." for d in missing))
    _check_defined(name, values, layer, key_span or node.span)
    return Example(name, tuple((d, values[d]) for d in free), key_span)


def _value(name: str, dim: str, node: Node) -> int:
    """A dim's value: a positive integer, given as one or as a number's text."""
    value = node.value
    if isinstance(value, str):  # '2**12', '4e3': read exactly, never evaluated
        value = parse_number(value, span=node.span)
    whole = (not isinstance(value, bool) and isinstance(value, (int, sympy.Integer)))
    if not whole or int(value) < 1:
        raise SymflopsError(f"{dim} in example {name!r} must be a positive integer, found "
                            f"{describe(node.value)}", node.span,
                            f"write e.g. '{dim}: 4096' (or '{dim}: 2**12')")
    return int(value)


def _check_defined(name: str, values: Mapping[str, int], layer: Layer, span: Span | None) -> None:
    """Each dim defined by a formula (``R: {equals: N / G}``) comes out a
    positive whole number at the example's values."""
    at = {dim_symbol(k): sympy.Integer(v) for k, v in values.items()}
    for dim, formula in layer.substitutions.items():
        result = formula.xreplace(at)
        if not (result.is_Integer and result > 0):
            raise SymflopsError(f"in example {name!r} the defined dimension {dim.name} = "
                                f"{sympy.sstr(formula)} is {result}, not a positive whole number",
                                span, f"give values at which {sympy.sstr(formula)} divides exactly")
