"""The sheet's section "Compute or memory bound?" and its roofline figure,
both from one :class:`SheetRoofline`: the analyses of
:mod:`symflops.count.roofline_analysis` at the sheet's worked configuration
(its first example), for one forward pass and, where the layer decodes, one
decoding step, on the accelerators of :data:`SHEET_ACCELERATORS`.

Invariants:

* Nothing here counts: every number is an analysis's (bytes of
  :mod:`symflops.count.traffic`, FLOPs of the costs, the roofs of
  :mod:`symflops.core.hardware`); the thresholds are the ones the engine
  solved, printed.
* The compute side is FLOPs against peak FLOP/s: a sheet counted in MACs
  has its section counted again in FLOPs.
* The context's text is escaped for its format; a dim is printed as the
  sheet prints it.  The partials ``roofline.md.j2`` and ``roofline.tex.j2``
  place it; nothing shows without a configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import sympy

from .environment import Format
from .escape import ESCAPES
from .plots import ImageFormat, _draw, _figure, _text
from .printing import PolyPrinter, symbol_name, tensor_name
from ..core.errors import SymflopsError
from ..core.memo import per_records
from ..core.records import Derivation
from ..count.cost import Costs, costs as count_costs
from ..count.explain import SheetCounts
from ..count.roofline import Solved, roof
from ..count.roofline_analysis import LAYER, Analysis, analyse, default_dim
from ..count.traffic import widths
from ..core import factoring

#: The roofs a sheet is drawn against: the two accelerators of the scaling
#: book's roofline chapter (its B > 240 and B > 295).
SHEET_ACCELERATORS = ("h100-sxm", "tpu-v5e")


@dataclass(frozen=True)
class SheetRoofline:
    configuration: str
    forward: Analysis
    decode: Analysis | None
    #: why there is no decoding step (None: there is one)
    no_decode: str | None
    dims: tuple[str, ...]          # the layer's, in declaration order (for printing)
    tensors: frozenset[str]


def sheet_roofline(derivation: Derivation, c: Costs, values: Mapping[str, int] | None,
                   configuration: str | None = None, thresholds: bool = True
                   ) -> SheetRoofline | None:
    """The analyses at ``values`` (every free dim; None: no section);
    ``thresholds``: solve the forward ops' conditions (the costly part).
    Made once for the same records (the same objects) and arguments: a
    sheet's Markdown, LaTeX, HTML and figure read one analysis."""
    if values is None:
        return None
    return _sheet_roofline(derivation, c, values=tuple((k, int(v)) for k, v in values.items()),
                           configuration=configuration, thresholds=thresholds)


@per_records()
def _sheet_roofline(derivation: Derivation, c: Costs, *, values: tuple[tuple[str, int], ...],
                    configuration: str | None, thresholds: bool) -> SheetRoofline | None:
    if c.unit != "FLOPs":
        c = count_costs(derivation, "FLOPs", c.precision)
    layer = derivation.layer
    roofs = tuple(roof(name) for name in SHEET_ACCELERATORS)
    w = widths(c.precision)
    given = dict(values)
    dim = default_dim(layer) if thresholds else None
    configuration = configuration or ", ".join(f"{k} = {v:,}" for k, v in given.items())
    forward = analyse(derivation, c, "forward", "naive", w, roofs, given, dim)
    try:
        decode, why = analyse(derivation, c, "decode", "naive", w, roofs, given, None), None
    except SymflopsError as e:
        decode, why = None, e.message
    if not forward.bounds:
        return None
    return SheetRoofline(configuration, forward, decode, why, tuple(d.name for d in layer.dims),
                         frozenset(t.name for t in layer.tensors))


def roofline_of(derivation: Derivation, counts: SheetCounts) -> SheetRoofline | str | None:
    """The section of the sheet of ``derivation``, at the configuration its
    numbers and plots are at (:attr:`SheetCounts.worked`); a string says
    why the layer's bytes cannot be counted."""
    first = counts.worked
    if first is None:
        return None
    try:
        return sheet_roofline(derivation, counts.costs, dict(first.config), first.name)
    except SymflopsError as e:   # said in the section, not a failed sheet
        return e.message


# ------------------------------------------------------------------ context --

def _number(v: Fraction | int) -> str:
    """Math: four significant digits, ``1.234 \\times 10^{9}`` beyond 10^5."""
    x = float(v)
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    mantissa, exp = f"{x:.3e}".split("e")
    return rf"{float(mantissa):.4g} \times 10^{{{int(exp)}}}"


def _seconds(v: Fraction) -> str:
    x = float(v)
    if x == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), (r"\mu s", 1e-6)):
        if x >= scale:
            return rf"{x / scale:.4g}\ \mathrm{{{unit}}}"
    return rf"{x / 1e-9:.4g}\ \mathrm{{ns}}"


def _region(s: Solved, dim: str) -> str:
    """``B > 295.2`` as math, or words for no value or every value."""
    d = symbol_name(dim)
    if not s.intervals:
        return rf"\text{{no }} {d}"
    if s.intervals == ((Fraction(0), None),):
        return rf"\text{{every }} {d}"
    parts = []
    for low, high in s.intervals:
        if high is None:
            parts.append(f"{d} > {_number(low)}")
        elif low == 0:
            parts.append(f"{d} < {_number(high)}")
        else:
            parts.append(f"{_number(low)} < {d} < {_number(high)}")
    return r" \text{ or } ".join(parts)


def _label(name: str, r: SheetRoofline, esc: Any) -> str:
    """An op's output as the sheet prints a tensor (math), or escaped text."""
    if name == LAYER:
        return r"\text{the whole layer}"
    return tensor_name(name, r.tensors) if name.isidentifier() else esc(name)


def _ops(a: Analysis, r: SheetRoofline, esc: Any) -> list[dict[str, Any]]:
    """One row per op of the first roof's bounds, with the side that binds on each roof."""
    first = a.bounds[0]
    rows = []
    for k, o in enumerate(first.ops):
        rows.append({"op": _label(o.entry.label, r, esc),
                     "runs": _number(o.copies), "flops": _number(o.work),
                     "bytes": _number(o.bytes),
                     "intensity": "—" if o.intensity is None else _number(o.intensity),
                     "bounds": [b.ops[k].bound for b in a.bounds]})
    return rows


def _totals(a: Analysis) -> list[dict[str, Any]]:
    out = []
    for b in a.bounds:
        split = b.bound_seconds
        out.append({"accelerator": b.roof.name, "seconds": _seconds(b.seconds),
                    "compute": _seconds(split["compute"]), "memory": _seconds(split["memory"]),
                    "tokens_per_s": None if b.tokens_per_s is None else _number(b.tokens_per_s),
                    "binding": sorted({o.entry.label for o in b.ops if o.bound == "compute"})})
    return out


def _thresholds(a: Analysis, r: SheetRoofline, esc: Any) -> list[dict[str, Any]]:
    """Where each op is compute-bound in ``a.dim``: at the configuration's
    other dims, and, when the intensity has a limit in ``a.dim`` as every
    other dim grows (a product), on that limit; ops that read alike share
    a line."""
    poly = PolyPrinter(r.dims)

    def show(e: sympy.Expr) -> str:
        top, bottom = sympy.fraction(factoring.factor(e))
        return poly(top) if bottom == 1 else rf"\frac{{{poly(top)}}}{{{poly(bottom)}}}"

    groups: dict[tuple[Any, ...], list[str]] = {}
    for th in a.thresholds:
        if not th.limit_at and th.at and all(not s.intervals for _, s in th.at):
            continue   # never compute-bound here: listed once (:func:`_never`)
        if not th.at and not th.limit_at:
            continue
        key = (None if th.limit is None or not th.limit_at else show(th.limit), th.others,
               th.limit_at, th.at)
        groups.setdefault(key, []).append(th.label)
    out = []
    for (limit, others, limit_at, at), labels in groups.items():
        out.append({"ops": ", ".join(_label(x, r, esc) for x in labels),
                    "others": ", ".join(symbol_name(x) for x in others),
                    "limit": limit,
                    "large": [{"accelerator": esc(n), "region": _region(s, a.dim or "")}
                              for n, s in limit_at],
                    "here": [{"accelerator": esc(n), "region": _region(s, a.dim or "")}
                             for n, s in at]})
    return out


def _never(a: Analysis, r: SheetRoofline, esc: Any) -> str | None:
    """The ops compute-bound at no value of ``a.dim`` on any roof, at the
    configuration's other dims (the elementwise ops, attention at decode)."""
    found = [th.label for th in a.thresholds
             if not th.limit_at and th.at and all(not s.intervals for _, s in th.at)]
    return ", ".join(_label(x, r, esc) for x in found) or None


def roofline_context(r: SheetRoofline | str | None, fmt: Format) -> dict[str, Any] | None:
    """What the partials place (None: no configuration, no section;
    ``unavailable``: why the bytes could not be counted)."""
    if r is None:
        return None
    esc = ESCAPES[fmt]
    if isinstance(r, str):
        return {"unavailable": esc(r)}
    f = r.forward
    return {
        "unavailable": None,
        "configuration": esc(r.configuration),
        "widths": esc(f.traffic.widths.text),
        "dim": symbol_name(f.dim) if f.dim else None,
        "roofs": [{"name": esc(x.name), "peak": _number(x.peak / 10**12),
                   "bandwidth": _number(x.bandwidth / 10**9), "ridge": _number(x.ridge),
                   "source": esc(x.source)} for x in f.roofs],
        "accelerators": [esc(x.name) for x in f.roofs],
        "forward": {"ops": _ops(f, r, esc), "totals": _totals(f),
                    "intensity": _number(f.bounds[0].total("work") / f.bounds[0].total("bytes"))},
        "thresholds": _thresholds(f, r, esc),
        "never": _never(f, r, esc),
        "decode": None if r.decode is None else {
            "seq": symbol_name(r.decode.traffic.seq or ""),
            "bytes": _number(r.decode.bounds[0].total("bytes")),
            "flops": _number(r.decode.bounds[0].total("work")),
            "totals": _totals(r.decode)},
        "no_decode": None if r.no_decode is None else esc(r.no_decode),
    }


# ------------------------------------------------------------------- figure --

def figure_roofline(derivation: Derivation, c: Costs, values: Mapping[str, int],
                    configuration: str) -> SheetRoofline | None:
    """The analyses the figure draws (no thresholds: they are not drawn),
    None when the forward pass cannot be counted at ``values``."""
    try:
        return sheet_roofline(derivation, c, values, configuration, thresholds=False)
    except SymflopsError:
        return None


def caption(layer: str, configuration: str, decode: bool) -> str:
    return (f"Roofline of {layer} at {configuration}, log-log: the FLOP/s an op can reach "
            "against its intensity (FLOPs per byte moved, each op a round trip to memory), "
            "under the roofs of " + " and ".join(SHEET_ACCELERATORS) + " (dense bf16 peak; "
            "the slope is the memory bandwidth, the ridge where the two meet). Each op of the "
            "forward pass (circles)" + (" and of one decoding step (crosses)" if decode else "")
            + f" sits on the {SHEET_ACCELERATORS[0]} roof at its intensity, the whole "
            "layer as a star; ops with no FLOPs (lookups, copies) have no point.")


def roofline_figure(r: SheetRoofline, title: str, fmt: ImageFormat) -> bytes:
    return _draw(fmt, _roofline, r, title)


def _roofline(r: SheetRoofline, title: str) -> Any:
    import math

    fig = _figure(8, 5)
    ax = fig.subplots()
    phases = [("forward pass", r.forward, "o", "#4C72B0")]
    if r.decode is not None:
        phases.append(("decoding step", r.decode, "x", "#C44E52"))
    points = [float(o.intensity) for _, a, _, _ in phases for o in a.bounds[0].ops
              if o.intensity and o.work] + [float(x.ridge) for x in r.forward.roofs]
    low = 10 ** math.floor(math.log10(min(points)) - 0.5)
    high = 10 ** math.ceil(math.log10(max(points)) + 0.5)
    xs = [low * (high / low) ** (k / 200) for k in range(201)]
    first = r.forward.roofs[0]
    for x, style in zip(r.forward.roofs, ("-", "--", ":", "-.")):
        peak, bw = float(x.peak), float(x.bandwidth)
        ax.plot(xs, [min(peak, v * bw) / 1e12 for v in xs], style, color="#333333",
                label=_text(f"{x.name}: ridge {float(x.ridge):.4g} FLOPs/byte"))
    peak, bw = float(first.peak), float(first.bandwidth)
    for label, a, marker, colour in phases:
        ops = [o for o in a.bounds[0].ops if o.intensity and o.work]
        ax.scatter([float(o.intensity) for o in ops],
                   [min(peak, float(o.intensity) * bw) / 1e12 for o in ops],
                   marker=marker, color=colour, label=_text(f"ops, {label}"), zorder=3)
        for o in ops:
            ax.annotate(_text(o.entry.label), (float(o.intensity),
                                               min(peak, float(o.intensity) * bw) / 1e12),
                        textcoords="offset points", xytext=(3, -9), fontsize=6, color=colour)
        b = a.bounds[0]
        if b.total("bytes"):
            whole = float(b.total("work") / b.total("bytes"))
            ax.scatter([whole], [min(peak, whole * bw) / 1e12], marker="*", s=150,
                       color=colour, edgecolor="black", label=_text(f"whole layer, {label}"),
                       zorder=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("intensity (FLOPs per byte moved)")
    ax.set_ylabel("attainable TFLOP/s (10¹² FLOP/s)")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(_text(title), fontsize=10)
    return fig
