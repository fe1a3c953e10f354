"""The sheet's section "On many devices", for a declaration that names
strategies (``parallel:``): the report of :mod:`symflops.shard`, formatted as
LaTeX math and escaped text for ``templates/devices.*.j2``.  Nothing is
derived here: which dims each strategy splits, every collective with its
array, bytes and time, one device's memory and FLOPs, the thresholds solved
(with ``C / W`` on the accelerators of :data:`COMPARE`, from the hardware
table) and the reasons the engine gives for each collective (why data
parallelism all-reduces the weight gradients, why FSDP gathers the weights
before each use) all come out of the report."""

from __future__ import annotations

from typing import Any

import sympy

from ..core.hardware import preset
from ..core.memo import per_records
from ..core.records import Derivation
from ..count.explain import SheetCounts
from ..shard.report import report
from ..shard.stage import sharding
from .notation import Math

#: The accelerators whose ``C / W`` the thresholds are given at (the hardware table's
#: presets: a GPU's NVLink domain and a TPU's ICI).
COMPARE = ("h100", "tpu-v5p")
PHASES = {"forward": "forward", "backward": "backward", "recompute": "recomputed",
          "step": "after the step"}


def _math(m: Math, x: Any) -> str:
    """A formula of the report; a ratio whose denominator is a sum (a threshold's
    FLOPs over bytes) as one fraction of two polynomials."""
    x = x if isinstance(x, sympy.Basic) else sympy.sympify(x)
    num, den = sympy.fraction(sympy.cancel(sympy.together(x)))
    if isinstance(sympy.expand(den), sympy.Add):
        return rf"\frac{{{m.poly(num)}}}{{{m.poly(den)}}}"
    return m.poly(x)


def _relation(m: Math, rel: Any) -> str:
    """``lhs > rhs`` in the sheet's notation (each side a formula of the engine)."""
    return f"{_math(m, rel.lhs)} > {_math(m, rel.rhs)}"


def _root(m: Math, x: sympy.Expr) -> str:
    """A square root printed as one: ``\\sqrt{F N W_X / (B W_Y)}``, not a
    quotient of roots."""
    square = sympy.factor(sympy.simplify(x ** 2))
    halves = any(p.exp == sympy.Rational(1, 2) for p in x.atoms(sympy.Pow))
    if halves and sympy.simplify(x - sympy.sqrt(square)) == 0:
        return rf"\sqrt{{{_math(m, square)}}}"
    return _math(m, x)


def _value(v: Any) -> str:
    x = float(v)
    return f"{int(x):,}".replace(",", "{,}") if x.is_integer() else f"{x:.5g}"


def _placements(layer: Any, m: Math) -> list[str]:
    """``W_{in}[D, {F}_{tp}]``: each tensor a strategy splits, its dims subscripted
    by the mesh axes they are split over (flat ZeRO shards said after)."""
    layout = sharding(layer, layer.parallel).layout
    out = []

    def axes(names: Any) -> str:
        return ",".join(a.replace("_", r"\_") for a in names)

    for t in layer.tensors:
        p = layout.placement(t.name)
        if p is None or p.whole:
            continue
        dims = ", ".join("{" + _math(m, d) + "}" + (rf"_{{\mathrm{{{axes(g)}}}}}" if g else "")
                         for d, g in zip(t.shape, p.axes))
        flat = rf"\ \text{{(flat over {axes(p.flat)})}}" if p.flat else ""
        out.append(f"{m.t(t.name)}[{dims}]{flat}")
    return out


@per_records()
def _report(derivation: Derivation, costs: Any) -> Any:
    """The many-devices report of a sheet, made once for its formats."""
    layer = derivation.layer
    return report(derivation, costs, layer.parallel, costs.precision, layer.recompute,
                  compare=tuple(preset(n) for n in COMPARE))


def devices_context(derivation: Derivation, counts: SheetCounts, m: Math, esc: Any,
                    code: Any) -> dict[str, Any] | None:
    """``None`` without ``parallel:``; else ``strategies`` (escaped lines),
    ``axes`` (``name``, ``size`` math, ``what``), ``placements`` (math),
    ``collectives`` (``phase``, ``kind``, ``axes``, ``array`` math, ``bytes``
    and ``time`` math, ``form``, ``per``, ``copies`` math or None), ``stages``
    (``name``, ``rows`` of label and math), ``thresholds`` (``phase``,
    ``axis``, ``inequality`` and ``solved`` math, ``on``: accelerator
    and ``C/W``), ``optimum`` (math, or None), ``why`` (``what`` collective,
    ``op`` the statement as code, ``reason`` the engine's, escaped; once each), ``pipeline`` (math, or None) and ``conventions``."""
    layer = derivation.layer
    if layer.parallel is None:
        return None
    r = _report(derivation, counts.costs)
    rows = []
    why: dict[tuple[str, str, str], None] = {}
    for c in r.collectives:
        name = c.array if c.array.replace("_", "").isalnum() else None
        rows.append({"phase": PHASES[c.phase], "kind": c.kind, "axes": esc(", ".join(c.axes)),
                     "array": m.t(name) if name else esc(c.array), "bytes": _math(m, c.bytes),
                     "time": _math(m, c.time), "form": c.form, "per": esc(c.per),
                     "copies": None if c.copies == 1 else _math(m, c.copies)})
        why.setdefault((esc(f"{c.kind} over {', '.join(c.axes)}"), code(c.op), esc(c.reason + ".")),
                       None)
    stages = []
    for s in r.stages:
        stages.append({"name": esc(s.name), "rows": [
            (label, _math(m, value)) for label, value in (
                ("FLOPs forward", s.flops_forward), ("FLOPs backward", s.flops_backward),
                ("weights (bytes)", s.weights), ("gradients (bytes)", s.grads),
                ("optimizer state (bytes)", s.optimizer), ("master weights (bytes)", s.master),
                ("saved activations (bytes)", s.activations), ("total (bytes)", s.total))
            if not (label.startswith("master") and value == 0)]})
    thresholds = [{"phase": t.phase, "axis": esc(t.axis),
                   "inequality": _relation(m, t.inequality),
                   "solved": _relation(m, t.solved) if t.solved is not None else None,
                   "on": [(esc(n), _value(v)) for n, v in t.values]}
                  for t in r.thresholds]
    optimum = None
    if r.optimum:
        o = dict(r.optimum)
        size = {a: n for a, n, _ in r.axes}
        optimum = {"axis": esc(o["axis"]), "other": esc(o["other"]),
                   "devices": _math(m, sympy.Symbol(o["devices"], positive=True)),
                   "size": _math(m, size[o["axis"]]),
                   "product": _math(m, size[o["axis"]] * size[o["other"]]),
                   "best": _root(m, o["best"]),
                   "condition": _relation(m, o["condition"]) if o["condition"] is not None
                   else None}
    pipeline = None
    if r.pipeline is not None:
        p = r.pipeline
        pipeline = {"ideal": _math(m, p.of_ideal), "step": _math(m, p.of_step),
                    "schedule": esc(p.schedule), "send": _math(m, p.send_bytes)}
    return {"strategies": [esc(s) for s in r.strategies],
            "axes": [{"name": esc(a), "size": _math(m, size), "what": esc(w)}
                     for a, size, w in r.axes],
            "placements": _placements(layer, m),
            "collectives": rows, "stages": stages, "thresholds": thresholds,
            "optimum": optimum,
            "why": [{"what": w, "op": o, "reason": r} for w, o, r in why], "pipeline": pipeline,
            "conventions": esc(r.conventions), "precision": esc(r.precision)}
