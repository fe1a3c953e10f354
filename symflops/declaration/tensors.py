"""The ``dims:`` and ``tensors:`` sections of a declaration: the dims, the
formulas of defined ones (``R: {equals: N / G}``), and the tensors with their
shapes, roles and gradients (part of :mod:`symflops.declaration.reader`).

Axes and formulas are parsed by the whitelisting :mod:`symflops.lang.expr`
and checked as sizes (:func:`~symflops.core.sizes.check_size`): an axis is a
positive whole number for every value of the dims, a defined dim may also be a
ratio that divides exactly at the values given.  Nothing is evaluated.
"""

from __future__ import annotations

from typing import Mapping

import sympy

from ..core.errors import SymflopsError, closest
from ..core.ir import LEAF_ROLES, Dim, Tensor
from ..core.sizes import check_size
from ..lang.expr import parse_expression
from ..lang.yaml import Node, check_identifier, describe, mapping, text_of
from .outputs import ACTIVATION
from .padding import NO_PAD, read_pad

TENSOR_KEYS = ("shape", "role", "requires_grad", "description", "pad")
#: The roles that never have a gradient: what asking for one is, and the fix.
NO_GRADIENT = {
    "frozen": ("is frozen but asks for a gradient", "use role: param for a trained weight"),
    "index": ("holds indices, which have no gradient",
              "remove requires_grad; an index tensor only selects"),
    "buffer": ("is a buffer (a constant the layer reads) but asks for a gradient",
               "remove requires_grad, or use role: param for a trained weight (it then counts "
               "as a parameter)"),
    ACTIVATION: ("is an op's output, whose gradient is derived where one flows through it",
                 "remove requires_grad"),
}


DIM_KEYS = ("description", "equals")


def _dims(node: Node) -> tuple[tuple[Dim, ...], dict[str, Node]]:
    """The declared dims, and the ``equals:`` formulas of defined ones (read
    once every dim is known)."""
    items = mapping(node, "'dims'", "list each dimension as 'NAME: what it means'")
    dims = []
    formulas: dict[str, Node] = {}
    for name, (key_span, value) in items.items():
        check_identifier(name, key_span, "dimension")
        if isinstance(value.value, dict):
            fields = value.value
            for key, (kspan, _) in fields.items():
                if key not in DIM_KEYS:
                    raise SymflopsError(f"unknown key {key!r} in dimension {name!r}", kspan,
                                        closest(key, list(DIM_KEYS)))
            description = (text_of(fields["description"][1], f"the description of {name!r}")
                           if "description" in fields else "")
            if "equals" in fields:
                formulas[name] = fields["equals"][1]
        else:
            description = text_of(value, f"the description of dimension {name!r}")
        dims.append(Dim(name, description, key_span))
    return tuple(dims), formulas


def _definitions(formulas: Mapping[str, Node], symbols: dict[str, sympy.Symbol]
                 ) -> tuple[tuple[str, sympy.Expr], ...]:
    """``C: {equals: c_f * k * T / E}``: the formula in terms of other dims,
    with no dim defined through itself."""
    out = {}
    for name, node in formulas.items():
        text = text_of(node, f"the formula of {name!r}")
        out[name] = parse_expression(text, symbols, span=node.span)
        check_size(out[name], f"dimension {name!r} equals", node.span,
                   "a defined dim is a positive whole number for every value of the dims: a "
                   "polynomial in them (4*D, P + K - 1), or one ratio of products of dims "
                   "that divides exactly at the values given (N / G, c*k*B*S/M)", quotient=True)
    for name, node in formulas.items():
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            for sym in out.get(n, sympy.Integer(0)).free_symbols:
                if sym.name == name:
                    raise SymflopsError(f"dimension {name!r} is defined through itself", node.span,
                                        "define it from dims that do not depend on it")
                if sym.name not in seen:
                    seen.add(sym.name)
                    todo.append(sym.name)
    return tuple(out.items())


AXIS_HINT = ("an axis has a positive whole size for every value of the dims: write a "
             "polynomial in them such as B, 4*D or P + K - 1 (a ratio such as N / G goes into "
             "a defined dim, 'R: {equals: N / G}'; for S - 1 declare a dim of its own)")


def _shape(node: Node, symbols: dict[str, sympy.Symbol], tensor: str) -> tuple[sympy.Expr, ...]:
    if not isinstance(node.value, list):
        raise SymflopsError(f"the shape of {tensor!r} must be a list, found {describe(node.value)}",
                            node.span, "write the shape as a list of dims, e.g. [B, D]")
    shape = []
    for axis in node.value:
        if isinstance(axis.value, bool) or not isinstance(axis.value, (str, int)):
            raise SymflopsError(f"an axis of {tensor!r} must be a dimension or an expression "
                                f"of dimensions, found {describe(axis.value)}", axis.span,
                                "write dims by name, e.g. [B, D] or [B, P + K - 1]")
        if isinstance(axis.value, int):
            extent: sympy.Expr = sympy.Integer(axis.value)
        else:
            extent = parse_expression(axis.value, symbols, span=axis.span)
        check_size(extent, f"an axis of {tensor!r} has size", axis.span, AXIS_HINT)
        shape.append(extent)
    return tuple(shape)


def _tensors(node: Node, symbols: dict[str, sympy.Symbol]) -> dict[str, Tensor]:
    items = mapping(node, "'tensors'",
                     "list each tensor as 'NAME: {shape: [B, D], role: input}'")
    tensors: dict[str, Tensor] = {}
    for name, (key_span, value) in items.items():
        check_identifier(name, key_span, "tensor")
        fields = mapping(value, f"tensor {name!r}",
                          "write it as {shape: [B, D], role: input|param|frozen}")
        for key, (kspan, _) in fields.items():
            if key not in TENSOR_KEYS:
                raise SymflopsError(f"unknown key {key!r} in tensor {name!r}", kspan,
                                    closest(key, list(TENSOR_KEYS)))
        if "shape" not in fields:
            raise SymflopsError(f"tensor {name!r} has no shape", value.span or key_span,
                                "add 'shape: [DIM, ...]'")
        shape = _shape(fields["shape"][1], symbols, name)
        role_node = fields.get("role", (None, Node("input", value.span)))[1]
        role = text_of(role_node, f"the role of {name!r}")
        if role not in (*LEAF_ROLES, ACTIVATION):
            raise SymflopsError(f"unknown role {role!r} for tensor {name!r}", role_node.span,
                                f"use one of {', '.join(LEAF_ROLES)}, or {ACTIVATION} for an "
                                "op's output whose shape or padding you declare (an op's "
                                "output needs no declaration otherwise)")
        requires_grad = role not in NO_GRADIENT
        if "requires_grad" in fields:
            rg = fields["requires_grad"][1]
            if not isinstance(rg.value, bool):
                raise SymflopsError(f"requires_grad of {name!r} must be true or false", rg.span,
                                    "write requires_grad: false (or true)")
            if rg.value and role in NO_GRADIENT:
                what, fix = NO_GRADIENT[role]
                raise SymflopsError(f"tensor {name!r} {what}", rg.span, fix)
            requires_grad = rg.value
        description = text_of(fields["description"][1], "a description") if "description" in fields else ""
        pad = read_pad(fields["pad"][1], symbols, name, len(shape)) if "pad" in fields else NO_PAD
        tensors[name] = Tensor(name, shape, role, requires_grad, description, key_span, pad)
    return tensors
