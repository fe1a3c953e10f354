"""The ``roles:`` and ``parallel:`` keys of a declaration (see :mod:`symflops.shard`)::

    roles: {heads: N, hidden: F, vocab: V}      # what dims are to the presets
    parallel: {dp: 8, tp: t, sp: true, zero: 1} # strategies, each with its degree
    parallel:                                   # or a mesh and placements
      mesh: {X: 4, Y: Y}
      dims: {B: X}
      tensors: {W_in: [X, Y], W_out: [Y, X]}

``roles:`` names, for each role, the dim (or the list of dims) that plays
it; ``batch`` and ``sequence`` default to the dims of ``sequences:`` and of
``tokens:`` over ``sequences:``.  An included block's roles carry into its
includer.  ``parallel:`` is read here and checked against the layer (every
name known, each mesh axis at most once in a tensor); the presets turn it
into placements in :mod:`symflops.shard.presets`.  Every error names the key's
``file:line:column``.
"""

from __future__ import annotations

from typing import Any, Mapping

import sympy

from ..core.errors import Span, SymflopsError, closest, quote
from ..core.ir import Layer
from ..core.sharding import (EXPLICIT_KEYS, ROLES, SCHEDULES, STRATEGY_KEYS, Axes, Parallel,
                             axis_symbol)
from ..lang.yaml import IDENT, Node, describe, mapping, text_of

ROLES_HINT = ("write e.g. 'roles: {heads: N, hidden: F, vocab: V}': each role names the dim "
              f"(or a list of dims) that plays it; the roles are {', '.join(ROLES)}")
PARALLEL_HINT = ("write e.g. 'parallel: {dp: 8, tp: 4, sp: true}' (strategies with their "
                 "degrees), or 'parallel: {mesh: {X: 4}, dims: {B: X}}' (a mesh and placements)")


def read_roles(top: Mapping[str, tuple[Span | None, Node]], layer: Layer,
               carried: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``roles:`` with the roles the included blocks carry (the declaration's own win)."""
    merged: dict[str, tuple[str, ...]] = {}
    for role, dims in carried:
        merged[role] = tuple(dict.fromkeys((*merged.get(role, ()), *dims)))
    if "roles" not in top:
        return tuple(merged.items())
    fields = mapping(top["roles"][1], "'roles'", ROLES_HINT)
    known = [d.name for d in layer.dims]
    owner: dict[str, str] = {}
    own: dict[str, tuple[str, ...]] = {}
    for role, (kspan, node) in fields.items():
        if role not in ROLES:
            raise SymflopsError(f"unknown role {quote(role)}", kspan, closest(role, list(ROLES)))
        items = node.value if isinstance(node.value, list) else [node]
        if not items:
            raise SymflopsError(f"the role {role!r} names no dim", node.span or kspan, ROLES_HINT)
        dims = []
        for item in items:
            name = text_of(item, f"a dim of the role {role!r}")
            if name not in known:
                raise SymflopsError(f"the role {role!r} names {quote(name)}, which is not a dim",
                                    item.span or kspan, closest(name, known))
            if name in owner and owner[name] != role:
                raise SymflopsError(f"the dim {name} is given two roles, {owner[name]} and {role}",
                                    item.span or kspan, "give each dim one role")
            owner[name] = role
            dims.append(name)
        own[role] = tuple(dict.fromkeys(dims))
    merged.update(own)
    return tuple(merged.items())


def _degree(node: Node, key: str, dims: set[str]) -> sympy.Expr:
    """A degree or an axis size: a positive whole number, or a name (a symbol)."""
    value = node.value
    if isinstance(value, bool) or value is None:
        raise SymflopsError(f"{key} must be a positive whole number or a name, found "
                            f"{describe(value)}", node.span, "write e.g. 8, or a name such as t")
    if isinstance(value, int):
        if value < 1:
            raise SymflopsError(f"{key} must be at least 1, got {value}", node.span,
                                "a degree counts devices: 1, 2, 4, ...")
        if value > 10**9:
            raise SymflopsError(f"{key} {quote(value)} is beyond the 10^9 devices symflops "
                                "takes", node.span, "give a realistic device count")
        return sympy.Integer(value)
    text = text_of(node, key).strip()
    if not IDENT.match(text):
        raise SymflopsError(f"{key} must be a positive whole number or a name, got {quote(text)}",
                            node.span, "write e.g. 8, or a name such as t")
    if text in dims:
        raise SymflopsError(f"the size name {text} of {key} is a dim of the declaration",
                            node.span, "name the size apart from the dims (e.g. t for tp)")
    return axis_symbol(text)


def _axes(node: Node, what: str, mesh: set[str], allow_none: bool = True) -> Axes:
    """An axis, a list of axes, or (when allowed) null: whole."""
    if node.value is None:
        if allow_none:
            return ()
        raise SymflopsError(f"{what} names no axis", node.span, f"give an axis of {sorted(mesh)}")
    items = node.value if isinstance(node.value, list) else [node]
    out = []
    for item in items:
        name = text_of(item, what).strip()
        if name not in mesh:
            raise SymflopsError(f"{what} names {quote(name)}, which is not an axis of the mesh",
                                item.span or node.span, closest(name, sorted(mesh)))
        if name in out:
            raise SymflopsError(f"{what} names the axis {name} twice", item.span or node.span,
                                "a tensor uses each mesh axis at most once")
        out.append(name)
    return tuple(out)


def read_parallel(top: Mapping[str, tuple[Span | None, Node]], layer: Layer) -> Parallel | None:
    if "parallel" not in top:
        return None
    kspan, node = top["parallel"]
    fields = mapping(node, "'parallel'", PARALLEL_HINT)
    dims = {d.name for d in layer.dims}
    where: dict[str, Any] = {"parallel": kspan}
    strategies: list[tuple[str, object]] = []
    for key, (span, value) in fields.items():
        if key not in STRATEGY_KEYS + EXPLICIT_KEYS:
            raise SymflopsError(f"unknown key {quote(key)} in 'parallel'", span,
                                closest(key, list(STRATEGY_KEYS + EXPLICIT_KEYS)))
        where[key] = span
        if key in EXPLICIT_KEYS:
            continue
        if key == "sp":
            if not isinstance(value.value, bool):
                raise SymflopsError(f"'sp' must be true or false, found {describe(value.value)}",
                                    value.span, "write sp: true for sequence parallelism")
            strategies.append((key, value.value))
        elif key == "zero":
            if isinstance(value.value, bool) or value.value not in (0, 1, 2, 3):
                raise SymflopsError(f"'zero' must be a ZeRO stage 0, 1, 2 or 3, found "
                                    f"{describe(value.value)}", value.span,
                                    "write e.g. zero: 1")
            strategies.append((key, value.value))
        elif key == "schedule":
            text = text_of(value, "'schedule'").strip().lower()
            if text not in SCHEDULES:
                raise SymflopsError(f"unknown pipeline schedule {quote(text)}", value.span,
                                    closest(text, list(SCHEDULES)))
            strategies.append((key, text))
        else:
            strategies.append((key, _degree(value, f"'{key}'", dims)))
    mesh: list[tuple[str, sympy.Expr]] = []
    placements_dims: list[tuple[str, Axes]] = []
    tensors: list[tuple[str, tuple[Axes, ...]]] = []
    if "mesh" in fields:
        mixed = [k for k in ("dp", "tp", "cp", "ep", "sp") if k in fields]
        if mixed:
            raise SymflopsError(f"'parallel' gives both a mesh and the strategies "
                                f"{', '.join(mixed)}", fields[mixed[0]][0],
                                "give either strategies (dp, tp, ...) or a mesh with placements")
        for name, (span, value) in mapping(fields["mesh"][1], "'mesh'",
                                           "write e.g. mesh: {X: 4, Y: Y}").items():
            if not IDENT.match(name):
                raise SymflopsError(f"the mesh axis {quote(name)} is not a valid name", span,
                                    "use letters, digits and underscores")
            if name in dims:
                raise SymflopsError(f"the mesh axis {name} has the name of a dim", span,
                                    "name the mesh's axes apart from the dims (X, Y, data, model)")
            mesh.append((name, _degree(value, f"the size of the mesh axis {name}", dims)))
            where[f"mesh.{name}"] = span
    elif "dims" in fields or "tensors" in fields:
        key = "dims" if "dims" in fields else "tensors"
        raise SymflopsError(f"'parallel' places {key} but declares no mesh", fields[key][0],
                            "add e.g. mesh: {X: 4} with the axes the placements name")
    axes = {a for a, _ in mesh}
    if "dims" in fields:
        for name, (span, value) in mapping(fields["dims"][1], "'dims'",
                                           "write e.g. dims: {B: X}").items():
            if name not in dims:
                raise SymflopsError(f"'dims' places {quote(name)}, which is not a dim", span,
                                    closest(name, sorted(dims)))
            placements_dims.append((name, _axes(value, f"the dim {name}", axes, False)))
            where[f"dims.{name}"] = span
    if "tensors" in fields:
        known = layer.tensor_map
        for name, (span, value) in mapping(fields["tensors"][1], "'tensors'",
                                           "write e.g. tensors: {W_in: [X, null]}").items():
            if name not in known:
                raise SymflopsError(f"'tensors' places {quote(name)}, which is not a tensor of "
                                    "the declaration", span, closest(name, sorted(known)))
            entries = value.value if isinstance(value.value, list) else None
            rank = len(known[name].shape)
            if entries is None or len(entries) != rank:
                raise SymflopsError(f"the placement of {name} must list one entry per axis "
                                    f"({rank}), an axis, a list of axes or null",
                                    value.span or span, f"write e.g. {name}: "
                                    f"[{', '.join(['null'] * rank)}]")
            placed = tuple(_axes(e, f"the placement of {name}", axes) for e in entries)
            used = [a for group in placed for a in group]
            for a in used:
                if used.count(a) > 1:
                    raise SymflopsError(f"the placement of {name} uses the mesh axis {a} twice",
                                        value.span or span,
                                        "a tensor is split over each mesh axis at most once")
            tensors.append((name, placed))
            where[f"tensors.{name}"] = span
    return Parallel(tuple(strategies), tuple(mesh), tuple(placements_dims), tuple(tensors),
                    tuple(where.items()), layer.source)
