"""The memory section of a sheet: the table of what training keeps, each row
in elements, bytes per element and bytes, with what it grows with in words;
the saved tensors with the rules that read them and what recomputing each
costs; the bytes of index tensors and their rule.

Everything is formatted from the count records (:class:`~symflops.count.cost.Costs`,
:mod:`symflops.count.rulefacts`, :mod:`symflops.count.growth`,
:mod:`symflops.count.indices`); nothing is counted here.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy

from .notation import Math
from .words import Escape, growth_phrase, names, noun
from ..count.cost import Costs
from ..count.growth import growth
from ..count.indices import index_range_text
from ..count.precision import dtype_name
from ..count.rulefacts import SavedFact
from ..core.ir import Layer, Tensor, substitute

_INT = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def memory_rows(layer: Layer, c: Costs, tensors: Sequence[Tensor], m: Math, esc: Escape,
                poly: Callable[[sympy.Expr], str], n_param: str | None = None
                ) -> list[dict[str, list[str]]]:
    """The rows: item, elements, bytes per element, bytes, what it grows with.
    A row of ``N_param`` elements (``n_param``: its LaTeX) says so by name
    when the layer has more than a few ops (its polynomial is long)."""
    prec, mem = c.precision, c.memory()
    params = [t.name for t in tensors]
    trainable = [t.name for t in tensors if t.requires_grad]
    model = esc("the model only")

    def listing(ns: Sequence[str]) -> str:
        most = 8 if len(ns) <= 8 else 4
        shown = names([f"${m.t(n)}$" for n in ns[:most]], esc)
        return shown + (esc(f" and {len(ns) - most} more") if len(ns) > most else "")

    def row(item: str, elements: sympy.Expr, width: str, nbytes: sympy.Expr, grows: str
            ) -> dict[str, list[str]]:
        if n_param is not None and sympy.expand(elements - c.params) == 0 and c.params != 0:
            k = sympy.cancel(nbytes / elements)
            return {"cells": [item, f"${n_param}$", width,
                              f"${poly(k)} \\, {n_param}$" if k != 1 else f"${n_param}$", grows]}
        return {"cells": [item, f"${poly(elements)}$", width, f"${poly(nbytes)}$", grows]}

    rows = [row(esc("Parameters") + (" " + listing(params) if params else ""), c.params,
                esc(f"{prec.params} ({dtype_name(prec.params)})"), mem["params_bytes"], model)]
    if c.trainable != 0:
        rows.append(row(esc("Gradients") + " " + listing(["d" + n for n in trainable]),
                        c.trainable, esc(f"{prec.grads} ({dtype_name(prec.grads)})"),
                        mem["grads_bytes"], model))
        for state in prec.state_names:
            rows.append(row(esc(state), c.trainable,
                            esc(f"{prec.optimizer} ({dtype_name(prec.optimizer)})"),
                            c.trainable * prec.optimizer, model))
        if prec.master:
            rows.append(row(esc("Master weights"), c.trainable,
                            esc(f"{prec.master} ({dtype_name(prec.master)})"),
                            mem["master_bytes"], model))
    groups: dict[tuple[str, int], list[Any]] = {}
    for s in c.saved:
        kind = "Index tensors" if s.width is not None else "Keep-masks" if s.mask \
            else "Activations"
        groups.setdefault((kind, s.element_bytes(prec)), []).append(s)
    for (kind, width), saved in groups.items():
        elements = sympy.expand(sum((s.total for s in saved), sympy.Integer(0)))
        grows = growth_phrase(layer, growth(layer, substitute(elements, layer.substitutions)),
                              esc)
        dtype = _INT[width] if kind == "Index tensors" else "8-bit" if kind == "Keep-masks" \
            else dtype_name(width)
        rows.append(row(esc(kind) + " " + listing([s.name for s in saved]), elements,
                        esc(f"{width} ({dtype})"), sympy.expand(elements * width),
                        grows or esc("a fixed size")))
    if layer.buffers:
        rows.append(row(esc("Buffers ") + listing([t.name for t in layer.buffers])
                        + esc(" (constants: no gradient, not parameters)"), c.buffers,
                        esc(f"{prec.params} ({dtype_name(prec.params)})"),
                        mem["buffers_bytes"],
                        growth_phrase(layer, growth(layer, substitute(c.buffers, layer.substitutions)),
                                      esc) or model))
    return rows


def saved_rows(layer: Layer, c: Costs, facts: Sequence[SavedFact], m: Math, esc: Escape,
               poly: Callable[[sympy.Expr], str], unit: str) -> list[dict[str, list[str]]]:
    """Each saved tensor: elements (every copy), the gradients whose rules
    read it, and what recomputing it costs (the forward op that writes it)."""
    by = {s.name: s for s in c.saved}
    out = []
    for f in facts:
        s = by[f.tensor]
        elements = poly(s.elements) if s.copies == 1 else \
            rf"{poly(s.copies)} \times {poly(s.elements)}"
        if f.producer is None:
            again = esc(f"given to {noun(layer)}")
        else:
            parts = ([f"${poly(f.flops)}$"] if f.flops != 0 else []) + (
                [f"${poly(f.elementwise)}$" + esc(" elementwise")] if f.elementwise != 0 else [])
            again = (f"${m.t(layer.ops[f.producer].output)}$" + esc(": ")
                     + (esc(" + ").join(parts) if parts else esc("0")))
        out.append({"cells": [f"${m.t(f.tensor)}$", f"${elements}$",
                              names([f"${m.t(g)}$" for g in f.readers], esc), again]})
    return out


def index_note(layer: Layer, c: Costs, m: Math, esc: Escape,
               poly: Callable[[sympy.Expr], str]) -> str | None:
    """The rule that gave each saved index tensor its bytes."""
    items = []
    for s in c.saved:
        if s.width is None:
            continue
        size = index_range_text(layer, s.name)
        where = (esc(" (indices into ") + f"${poly(size)}$" + esc(")")) if size is not None \
            else esc(" (its range is not known from the ops)")
        items.append(f"${m.t(s.name)}$" + where + esc(f": {s.width} bytes"))
    if not items:
        return None
    return (esc("Index tensors take the smallest signed integer (1, 2, 4 or 8 bytes) that holds "
                "their range at every example and size of the declaration (8 without one): ")
            + esc("; ").join(items) + esc("."))
