"""The front page's per-component table, formatted for a sheet.

:func:`front_context` turns :func:`symflops.count.components.component_table`
(and its :func:`~symflops.count.components.shares` at a named configuration)
into the variables of ``templates/front.md.j2`` and ``front.tex.j2``: cells
already printed (LaTeX math between ``$``, user names escaped for the
format), so the partials only place them.

Invariants: every formula comes from the count record; each headline is
an :class:`~symflops.sheets.equations.Equation`, the 6N split printed only
when it holds, and every one kept for the equation test; a header names its
unit and a cell holds one quantity in that unit.
"""

from __future__ import annotations

import dataclasses

from typing import Any, Callable, Mapping, Sequence, TypedDict

import sympy

from . import printing as P
from .counts import _group, fresh_name
from .equations import Equation, Factor as EqFactor, Named, Part, Side, chain, side
from .notation import Math
from ..count.components import ComponentRow, ComponentTable, component_table, percent, shares
from ..count.cost import Costs
from ..count.records import WholeModel
from ..core.ir import substitute
from ..core.records import Derivation

class Headline(TypedDict):
    label: str   # escaped text
    math: str    # LaTeX, no delimiters


class FrontRow(TypedDict):
    cells: list[str]    # one per entry of ``header``
    shares: list[str]   # one per entry of ``share_header`` (empty without a configuration)


class FrontContext(TypedDict):
    """The variables the front partials use (``front`` in the sheet context)."""

    header: list[str]
    rows: list[FrontRow]
    total: FrontRow
    share_header: list[str]
    config: str | None          # the configuration's name, escaped
    config_values: str | None   # its dim values, LaTeX
    headlines: list[Headline]
    notes: list[str]


def _by_repeat(rows: Sequence[ComponentRow], total: sympy.Expr, field: str) -> Side | None:
    """``total`` as repeats times one copy of ``field`` (summed over the rows
    of each repeat) plus what runs once; None when nothing repeats (the
    split would say nothing).  The parts add up to ``total`` by construction,
    and the equation test proves it again."""
    groups: dict[sympy.Expr, sympy.Expr] = {}
    for r in rows:
        if r.repeat != 1:
            # parameters the copies share exist once: they go with what runs once
            one = getattr(r, field) - (r.tied_params if field == "params" else 0)
            groups[r.repeat] = sympy.expand(groups.get(r.repeat, 0) + one)
    parts = [Part((one,), (EqFactor(n),)) for n, one in groups.items() if one != 0]
    if not parts:
        return None
    rest = sympy.expand(total - sum((n * one for n, one in groups.items()), sympy.Integer(0)))
    return tuple(parts) + ((Part((rest,)),) if rest != 0 else ())


def _headlines(table: ComponentTable, model: WholeModel | None, unit: str,
               show: Callable[[Equation], str], n_param: Named, taken: set[str],
               esc: Callable[[str], str], buffers: sympy.Expr = sympy.Integer(0)
               ) -> list[Headline]:
    """The front page's formulas, each printed from an :class:`Equation`
    (kept by ``show`` for the equation test)."""
    total = table.total
    out: list[Headline] = []
    split = _by_repeat(table.rows, total.params, "params")
    out.append(Headline(label=esc("Parameters (elements)"), math=show(
        chain(side(total.params), *([split] if split else []), name=n_param))))
    if buffers != 0:  # constant tables: apart from the parameters, never in them
        out.append(Headline(label=esc("Buffers, constants that are not parameters (elements)"),
                            math=show(chain(side(buffers)))))
    per = model.per_token if model is not None else None
    tokens = model.tokens if model is not None else None
    label = esc(f"Training {unit} (matrix products, forward and backward)")
    six = None
    if per is not None and tokens is not None and unit == "FLOPs":
        active = Named.of(fresh_name(r"N_{\text{active}}", taken), model.parameters.active_dense)
        beyond = sympy.expand(tokens * per.beyond_six_n)
        six = (Part(factors=(EqFactor(6 * tokens),), named=active),) + (
            (Part((beyond,)),) if beyond != 0 else ())
        eq = chain(side(total.training), six)
        if eq.holds():  # the 6N split, printed only when it is the training count exactly
            out.append(Headline(label=label, math=show(eq)))
            out.append(Headline(label=esc("Dense parameters a token's products read (the N of "
                                          "6N)"), math=show(chain(side(active.value), name=active))))
        else:
            six = None
    if six is None:
        out.append(Headline(label=label, math=show(chain(side(total.training)))))
    split = _by_repeat(table.rows, total.saved_bytes, "saved_bytes")
    out.append(Headline(label=esc("Saved activations (bytes)"), math=show(
        chain(side(total.saved_bytes), *([split] if split else [])))))
    return out


def _tied_note(n: int) -> tuple[str, str]:
    """The note on a row's shared parameters, around its copies, for ``n`` of them."""
    it, its, are = ("them", "their", "are") if n > 1 else ("it", "its", "is")
    return (f" (shared:) {are} one tensor for all ",
            f" copies: one copy's parameters count {it}, the whole model counts {it} once, and "
            f"each copy's gradient is added into {its} one gradient.")


def _name(row: ComponentRow, m: Math, esc: Callable[[str], str]) -> str:
    if row.kind == "component":
        return esc(row.name)
    if row.kind == "parameter":
        return f"${m.t(row.name)}$" + esc(" (read by no op)")
    return f"${m.t(row.name)}$"


def front_context(derivation: Derivation, costs: Costs, model: WholeModel | None,
                  poly: Callable[[sympy.Expr], str], m: Math, esc: Callable[[str], str],
                  show: Callable[[Equation], str], n_param: Named, taken: set[str],
                  values: Mapping[str, int] | None = None,
                  config: str | None = None, headlines: bool = True) -> FrontContext:
    """The front table of ``derivation``: ``poly`` and ``m`` are the sheet's
    printers (defined dims substituted), ``esc`` its escape for the format,
    ``model`` the whole-model record (:attr:`SheetCounts.model`, for the 6N
    split); with ``values`` (dim name -> value) the rows' shares at that
    configuration, named ``config`` (user text, escaped here).  ``show``
    prints and keeps each equation; ``n_param`` is the sheet's parameter
    count and ``taken`` the names a derived quantity must not take."""
    table = component_table(derivation, costs)
    unit = costs.unit
    header = [esc(h) for h in (
        "Component", "Copies", "Parameters (elements, one copy)", f"Forward {unit} (one copy)",
        f"Backward {unit} (one copy)", "Elementwise FLOPs, forward + backward (one copy)",
        "Saved activations (bytes, one copy)")]

    def cells(name: str, copies: str, c: Any) -> list[str]:
        return [name, copies, *(f"${poly(e)}$" for e in (
            c.params, c.forward, c.backward,
            sympy.expand(c.elementwise_forward + c.elementwise_backward), c.saved_bytes))]

    at = shares(table, values) if values else None
    where = f" at {config}" if config else ""
    share_header = [] if at is None else [esc(h + where) for h in (
        f"Share of training {unit} (%)", "Share of parameters (%)",
        "Share of activation bytes (%)")]

    def pct(q: sympy.Rational | None) -> str:
        return esc("–") if q is None else esc(percent(q))

    rows = [FrontRow(cells=cells(_name(r, m, esc), rf"$\times {poly(r.repeat)}$", r.per_copy),
                     shares=[] if at is None else [pct(s.training_share), pct(s.params_share),
                                                   pct(s.activation_share)])
            for r, s in zip(table.rows, at or [None] * len(table.rows))]
    whole = [table.total.training, table.total.params, table.total.saved_bytes]
    whole_label = "Whole model (every copy)" if derivation.layer.blocks else "Whole layer"
    total = FrontRow(cells=cells(esc(whole_label), "", table.total),
                     shares=[] if at is None else [pct(None if w == 0 else sympy.Integer(1))
                                                   for w in whole])

    notes = []
    for r in table.rows:
        for s in r.shared:
            notes.append(f"${m.t(s.tensor)}$" + esc(f" is counted in {s.counted_in}; the ops of "
                                                    f"{', '.join(s.also_read_by)} read it too."))
        if r.tied:
            notes.append(_name(r, m, esc) + esc(": ") + f"${m.ts(list(r.tied))}$"
                         + esc(_tied_note(len(r.tied))[0]) + f"${poly(r.repeat)}$"
                         + esc(_tied_note(len(r.tied))[1]))
        edge = r.edge()
        edge = dataclasses.replace(edge, params=sympy.expand(
            edge.params + (r.repeat - 1) * r.tied_params))
        parts = [(label, e) for label, e in (
            (f"forward {unit}", edge.forward), (f"backward {unit}", edge.backward),
            ("elementwise FLOPs", sympy.expand(edge.elementwise_forward
                                               + edge.elementwise_backward)),
            ("saved bytes", edge.saved_bytes), ("parameter elements", edge.params)) if e != 0]
        if parts:
            notes.append(_name(r, m, esc) + esc(": its copies together differ from ")
                         + f"${poly(r.repeat)}$" + esc(" whole copies by ")
                         + ", ".join(f"${poly(e)}$ " + esc(label) for label, e in parts)
                         + esc(" (an end copy of the repeated block does a different amount); "
                               "the total row counts every copy."))
    if any(r.kind == "op" for r in table.rows):
        notes.append(esc("A row named by a tensor is an op that no component names "
                         "(declare components: to group them)."))
    config_values = (None if not values else r",\ ".join(
        f"{P.symbol_name(k)} = {_group(int(v))}" for k, v in values.items()))
    return FrontContext(header=header, rows=rows, total=total, share_header=share_header,
                        config=esc(config) if config else None, config_values=config_values,
                        # the sheet's card states these itself (symflops/sheets/card.py)
                        headlines=_headlines(table, model, unit, show, n_param, taken, esc,
                                             substitute(costs.buffers,
                                                        derivation.layer.substitutions))
                        if headlines else [],
                        notes=notes)
