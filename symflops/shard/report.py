"""The many-devices report: one record tree, symbolic or evaluated.

:func:`report` gathers the stage's results for a derived layer and a
``parallel:``: the mesh, which dims each strategy splits, every collective
(by op, pass and axis: kind, array, bytes ``V``, time), the traffic of each
axis by pass, one device's FLOPs and memory per pipeline stage, the bubble,
and the thresholds solved.  Formulas stay SymPy expressions in the dims and
the mesh's sizes (times in the axes' rates ``W_axis`` unless an accelerator
gives them); :func:`evaluate` replaces them by numbers at given values.
:func:`to_json` writes either as ``--json`` prints it (formulas as text
SymPy reads back, numbers as numbers).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.hardware import Accelerator
from ..core.ir import dim_symbol
from ..core.records import Derivation
from ..core.sharding import Parallel
from ..count.cost import Costs
from ..count.precision import Precision
from .analysis import Analysis, analyse
from .memory import counts
from .pipeline import bubble, share, stages
from .stage import sharding as make_sharding
from .thresholds import C, conditions, optimum, value
from .timing import CONVENTION, FACTOR, FORMS, links, need_bytes, need_time


@dataclass(frozen=True)
class Row:
    """One collective."""

    phase: str
    op: str
    kind: str
    axes: tuple[str, ...]
    array: str
    elements: Any
    bytes: Any
    time: Any
    form: str
    per: str
    copies: Any
    reason: str
    serves: tuple[str, ...]


@dataclass(frozen=True)
class AxisRow:
    stage: str
    axis: str
    size: Any
    what: str
    link: str | None
    rate: Any
    forward: Any          # bytes moved over the axis per micro-batch, one device (Σ copies × V)
    backward: Any
    step: Any             # once per optimizer step
    time_forward: Any
    time_backward: Any
    time_step: Any


@dataclass(frozen=True)
class StageRow:
    name: str
    layers: tuple[tuple[str, Any], ...]
    in_flight: Any
    flops_forward: Any
    flops_backward: Any
    flops_recompute: Any
    flops_elementwise: Any
    weights: Any
    grads: Any
    optimizer: Any
    master: Any
    activations: Any
    buffers: Any
    total: Any


@dataclass(frozen=True)
class Bubble:
    stages: Any
    micro_batches: Any
    interleave: Any
    schedule: str
    of_ideal: Any        # bubble time / ideal compute time: (p-1)/(v m)
    of_step: Any         # bubble time / step time: (p-1)/(v m + p - 1)
    send: Any            # elements a stage boundary sends per micro-batch, forward (and back)
    send_bytes: Any


@dataclass(frozen=True)
class Threshold:
    phase: str
    axis: str
    ratio: Any
    inequality: Any          # ratio > C / W_axis
    solved: Any              # the same solved for its first dim, or None
    values: tuple[tuple[str, Any], ...]   # (accelerator, C/W)


@dataclass(frozen=True)
class Report:
    name: str
    strategies: tuple[str, ...]
    axes: tuple[tuple[str, Any, str], ...]
    precision: str
    recompute: str
    accelerator: str | None
    stages: tuple[StageRow, ...]
    collectives: tuple[Row, ...]
    by_axis: tuple[AxisRow, ...]
    pipeline: Bubble | None
    thresholds: tuple[Threshold, ...]
    optimum: tuple[tuple[str, Any], ...]
    placements: tuple[tuple[str, str], ...]
    conventions: str


def _sum(values) -> sympy.Expr:
    return sympy.expand(sum(values, sympy.Integer(0)))


def _placement_text(name: str, shape: tuple, placement) -> str:
    if placement is None or placement.whole:
        return f"{name}[{', '.join(str(s) for s in shape)}]"
    parts = []
    for ax, group in zip(shape, placement.axes):
        parts.append(f"{ax}_{{{','.join(group)}}}" if group else str(ax))
    flat = f" (flat over {', '.join(placement.flat)})" if placement.flat else ""
    return f"{name}[{', '.join(parts)}]{flat}"


def report(derivation: Derivation, costs: Costs, parallel: Parallel, precision: Precision,
           recompute: str = "none", accelerator: Accelerator | None = None,
           compare: tuple[Accelerator, ...] = (), values: Mapping[str, Any] | None = None
           ) -> Report:
    """The report, symbolic; with ``values`` (dims and sizes by name) the pipeline's
    layers are laid out at them (whole layers per stage, the first stages one more)."""
    layer = derivation.layer
    at = {dim_symbol(k): sympy.sympify(v) for k, v in (values or {}).items()}
    sharding = make_sharding(layer, parallel)
    analysis: Analysis = analyse(derivation, sharding, recompute)
    pp = sharding.pipeline.stages if sharding.pipeline is not None else None
    found = links(tuple((a, s) for a, s, _ in sharding.axes), accelerator, pp)
    rates = {a: link.rate for a, link in found.items()}
    rows = []
    for m in analysis.moved:
        rows.append(Row(m.phase, m.op, m.need.kind, m.need.axes, m.need.array, m.need.elements,
                        need_bytes(m.need, precision), need_time(m.need, precision, rates),
                        FORMS[m.need.kind], m.per, m.copies, m.need.reason, m.serves))
    by_axis = []
    held = stages(layer, sharding.pipeline, at)
    for stage, (name, size, what) in ((st, ax) for st in held for ax in sharding.axes):
        link = found.get(name)
        shares = [share(layer, stage, "", m.where, m.block) for m in analysis.moved]

        def total(phases, per=None, timed=False, name=name, shares=shares):
            return _sum((r.time if timed else r.bytes * FACTOR[r.kind]) * r.copies * sh
                        for r, sh in zip(rows, shares) if name in r.axes and r.phase in phases
                        and (per is None or r.per == per))
        by_axis.append(AxisRow(
            stage.name, name, size, what, link.name if link else None,
            link.rate if link else None,
            total(("forward",), "micro-batch"), total(("backward", "recompute"), "micro-batch"),
            total(("backward", "step"), "step"),
            total(("forward",), "micro-batch", True),
            total(("backward", "recompute"), "micro-batch", True),
            total(("backward", "step"), "step", True)))
    stage_rows = []
    for s in counts(derivation, costs, analysis, precision, at):
        stage_rows.append(StageRow(s.stage.name, s.stage.layers, s.stage.in_flight,
                                   s.flops_forward, s.flops_backward, s.flops_recompute,
                                   s.elementwise, s.weights, s.grads, s.optimizer, s.master,
                                   s.activations, s.buffers, s.total))
    pipe = None
    if sharding.pipeline is not None:
        p = sharding.pipeline
        ideal, step = bubble(p)
        send = _boundary(layer, sharding)
        pipe = Bubble(p.stages, p.micro_batches, p.interleave, p.schedule, ideal, step, send,
                      sympy.expand(send * precision.activations))
    dims = [d.symbol for d in layer.dims]
    thresholds = []
    for c in conditions(analysis, precision, dims):
        named = tuple((acc.name, value(c, acc, _rates(acc, sharding, pp))) for acc in
                      ((accelerator,) if accelerator else ()) + tuple(compare))
        thresholds.append(Threshold(c.phase, c.axis, c.ratio, c.inequality, c.solved,
                                    tuple((n, _number(v, {})) for n, v in named
                                          if v is not None)))
    best = optimum(analysis, precision, dims)
    opt: tuple[tuple[str, Any], ...] = ()
    if best is not None:
        opt = (("axis", best.axis), ("other", best.other), ("devices", str(best.total)),
               ("best", best.best), ("condition", best.condition))
    placements = tuple((t.name, _placement_text(t.name, t.shape,
                                                sharding.layout.placement(t.name)))
                       for t in layer.tensors if sharding.layout.placement(t.name) is not None
                       and not sharding.layout.placement(t.name).whole)
    out = Report(layer.name, sharding.summary, sharding.axes, precision.name, recompute,
                 accelerator.name if accelerator else None, tuple(stage_rows), tuple(rows),
                 tuple(by_axis), pipe, tuple(thresholds), opt, placements, CONVENTION)
    subs = layer.substitutions  # defined dims by their formulas, as every count reports them
    return _map(out, lambda e: sympy.expand(e.xreplace(subs)) if subs else e)


def _map(tree: Any, fn) -> Any:
    if isinstance(tree, sympy.Basic):
        return fn(tree)
    if isinstance(tree, tuple):
        return tuple(_map(i, fn) for i in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return dataclasses.replace(tree, **{f.name: _map(getattr(tree, f.name), fn)
                                            for f in dataclasses.fields(tree)})
    return tree


def _rates(acc: Accelerator, sharding, pp) -> dict[str, sympy.Expr]:
    return {a: link.rate for a, link in links(tuple((a, s) for a, s, _ in sharding.axes),
                                               acc, pp).items()}


def _boundary(layer, sharding) -> sympy.Expr:
    """Elements one device sends across a stage boundary per micro-batch: one
    copy of the repeated block's output (its gradient on the way back)."""
    for b in layer.blocks:
        if b.repeat != 1 and b.outputs:
            t = layer.tensor(b.outputs[0])
            p = sharding.layout.placement(t.name)
            div = p.divisor(sharding.layout.size_map) if p is not None else sympy.Integer(1)
            return sympy.expand(t.elements / div)
    return sympy.Integer(0)


# -- numbers ------------------------------------------------------------------------

def _number(expr: Any, at: Mapping[sympy.Symbol, sympy.Expr]) -> Any:
    if not isinstance(expr, sympy.Basic):
        return expr
    result = expr.xreplace(at)
    if result.free_symbols:
        return result
    if result.is_Integer or (result.is_Rational and result.q == 1):
        return int(result)
    value = float(result)
    if not math.isfinite(value):
        raise SymflopsError(f"a figure of the many-devices report is {sympy.sstr(result)[:40]}",
                            hint="give other dims or degrees")
    return value


def evaluate(tree: Any, values: Mapping[str, Any]) -> Any:
    """The report with every formula at ``values`` (dims and mesh sizes by name)."""
    at = {dim_symbol(k): sympy.sympify(v) for k, v in values.items()}
    return _map(tree, lambda e: _number(e, at))


def to_json(tree: Any) -> Any:
    """Formulas as text, numbers as numbers, records as objects."""
    if isinstance(tree, sympy.Basic):
        return sympy.sstr(tree)
    if isinstance(tree, float) and tree.is_integer() and abs(tree) < 2**53:
        return tree
    if isinstance(tree, tuple):
        if tree and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str)
                        for i in tree):
            return {k: to_json(v) for k, v in tree}
        return [to_json(i) for i in tree]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return {f.name: to_json(getattr(tree, f.name)) for f in dataclasses.fields(tree)}
    return tree


__all__ = ["Report", "report", "evaluate", "to_json", "C"]
