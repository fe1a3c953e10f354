"""The command line's form of ``parallel:``: strategies with their degrees, or
a mesh and placements, read into the same :class:`~symflops.core.sharding.Parallel`.

* ``--dp 8 --tp t --sp --zero 1 --pp 4 --micro-batches 8 --interleave 2``:
  a degree is a positive whole number, or (``symflops shard``) a name, a
  symbol the report keeps;
* ``--mesh X=4,Y=Y`` (or ``--mesh X,Y``: sizes named like the axes) with
  ``--place B=X`` (every tensor's first axis over the dim ``B`` split over
  ``X``; ``B=X+Y`` over both) and ``--place 'W_in[X,Y]'`` (a tensor, one entry
  per axis: an axis, axes joined by ``+``, or ``-`` for whole).

Every error names the option and what it should look like (exit 2).  The
checks against the declaration are those of ``parallel:`` in a file
(:mod:`symflops.declaration.parallel`), through the same reader.
"""

from __future__ import annotations

import re
from typing import Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer
from ..core.sharding import Parallel
from ..declaration.parallel import read_parallel
from ..lang.yaml import Node

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _value(text: str, option: str, symbolic: bool) -> object:
    text = text.strip()
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    if symbolic and NAME.match(text):
        return text
    raise SymflopsError(f"{option}: {text!r} is not a positive whole number"
                        + (" or a name" if symbolic else ""),
                        hint=f"give e.g. {option} 8" + (" or a name such as t" if symbolic
                                                         else ""))


def _node(value: object, option: str) -> Node:
    return Node(value, None)


def parallel_from_options(layer: Layer, options: Mapping[str, object], symbolic: bool,
                          mesh: str | None = None, places: tuple[str, ...] = ()) -> Parallel | None:
    """A ``parallel:`` from command-line options (``options``: strategy ->
    text, None when not given; ``sp`` a bool); None when none is given."""
    fields: dict[str, tuple[None, Node]] = {}
    for key, text in options.items():
        if text is None or text is False:
            continue
        option = "--" + key.replace("_", "-")
        if key == "sp":
            fields[key] = (None, Node(True, None))
        elif key == "zero":
            fields[key] = (None, Node(int(text), None))  # type: ignore[arg-type]
        elif key == "schedule":
            fields[key] = (None, Node(str(text), None))
        else:
            fields[key] = (None, Node(_value(str(text), option, symbolic), None))
    if mesh is not None:
        axes: dict[str, tuple[None, Node]] = {}
        for part in mesh.split(","):
            name, sep, size = part.partition("=")
            name = name.strip()
            if not NAME.match(name):
                raise SymflopsError(f"--mesh: {part.strip()!r} is not AXIS or AXIS=SIZE",
                                    hint="give e.g. --mesh X=4,Y=2 or --mesh X,Y")
            if name in axes:
                raise SymflopsError(f"--mesh names the axis {name} twice",
                                    hint="name each axis once")
            axes[name] = (None, Node(_value(size, "--mesh", symbolic) if sep else name, None))
        fields["mesh"] = (None, Node(axes, None))
    dims: dict[str, tuple[None, Node]] = {}
    tensors: dict[str, tuple[None, Node]] = {}
    for text in places:
        m = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(.+?)|\[(.*)\])\s*", text)
        if m is None:
            raise SymflopsError(f"--place: {text!r} is neither DIM=AXES nor TENSOR[AXES,...]",
                                hint="give e.g. --place B=X or --place 'W_in[X,Y]'")
        name, axes_text, entries = m.groups()
        if axes_text is not None:
            if name in dims:
                raise SymflopsError(f"--place splits the dim {name} twice",
                                    hint=f"give {name} one placement, e.g. {name}=X+Y")
            dims[name] = (None, Node([Node(a.strip(), None) for a in axes_text.split("+")], None))
        else:
            if name in tensors:
                raise SymflopsError(f"--place places the tensor {name} twice",
                                    hint="give each tensor one placement")
            items = []
            for entry in entries.split(","):
                entry = entry.strip()
                items.append(Node(None if entry in ("-", "") else
                                  [Node(a.strip(), None) for a in entry.split("+")], None))
            tensors[name] = (None, Node(items, None))
    if (dims or tensors) and mesh is None:
        raise SymflopsError("--place needs --mesh", hint="give the mesh, e.g. --mesh X=4,Y=2")
    if dims:
        fields["dims"] = (None, Node(dims, None))
    if tensors:
        fields["tensors"] = (None, Node(tensors, None))
    if not fields:
        return None
    found = read_parallel({"parallel": (None, Node(fields, None))}, layer)
    return None if found is None else Parallel(found.strategies, found.mesh, found.dims,
                                                found.tensors, found.where, "the command line")


def check_divides(layer: Layer, sharding, values: Mapping[str, object]) -> None:
    """Refuse values at which a split axis's extent is no whole multiple of
    the devices it is split over (a tensor's flat ZeRO shards are padded, as
    ZeRO pads them, and need not divide)."""
    at = {sympy.Symbol(k, positive=True, integer=True): sympy.sympify(v) for k, v in values.items()}
    subs = layer.substitutions
    sizes = {a: sympy.sympify(s).xreplace(at) for a, s in sharding.layout.sizes}
    parallel = sharding.parallel
    for t in layer.tensors:
        p = sharding.layout.placement(t.name)
        if p is None:
            continue
        for k, (axis, group) in enumerate(zip(t.shape, p.axes)):
            if not group:
                continue
            extent = sympy.sympify(axis).xreplace(subs).xreplace(at)
            devices = sympy.Mul(*(sizes[a] for a in group))
            if not (extent.is_Integer and devices.is_Integer) or extent % devices == 0:
                continue
            key = next((f"tensors.{t.name}" for n, _ in parallel.tensors if n == t.name), None) \
                if parallel is not None else None
            if key is None and parallel is not None:
                key = next((f"dims.{d}" for d, _ in parallel.dims if sympy.Symbol(d, positive=True,
                            integer=True) == axis), None) or next((a for a in group
                                                                   if parallel.at(a)), None)
            span = parallel.at(key) if parallel is not None and key else None
            option = "" if span is not None else f" ({', '.join('--' + a for a in group)})" \
                if parallel is not None and not parallel.explicit else " (--place)"
            raise SymflopsError(
                f"{t.name}'s axis {k + 1} ({sympy.sstr(axis)} = {extent}) is split over "
                f"{' x '.join(f'{a} = {sizes[a]}' for a in group)}{option}, which does not "
                f"divide it", span,
                "give degrees (or a mesh) that divide the dims they split, or other dims")


__all__ = ["parallel_from_options", "check_divides"]
