"""The figures of a sheet drawn with matplotlib: the computation graph, bars
per component, and FLOPs per token and activation memory against the
sequence length.

Invariants:

* matplotlib is imported inside the functions that draw, never at module
  import (``import symflops.cli`` stays light); figures are drawn on a
  ``Figure`` without pyplot (no global state, no display) in matplotlib's
  default style, whatever the user's matplotlibrc says.
* The bytes are deterministic: the PDF without its creation date and
  producer, the PNG without its software tag; two renders are identical, so
  ``build -j N`` writes the same files as ``-j 1``.
* Every number drawn is a record's polynomial evaluated at the given
  values (the named configuration), with the sequence dim swept; the
  crossing where the part beyond 6N overtakes 6N is solved from the
  polynomials, not read off the samples.
* Axis labels state their units; titles name the configuration.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping, Sequence

import sympy

from .graph import Graph
from .graphplot import draw_graph
from .mathlayouts import shared_math_layouts
from ..core.ir import RECOMPUTE_POLICIES, Layer, dim_symbol, substitute
from ..count.growth import sequence_dim
from ..core.records import Derivation
from ..count.cost import Costs
from ..count.recompute import attention_chains, recompute
from ..count.summary import whole_model

ImageFormat = Literal["png", "pdf", "svg"]
GIB = 2**30
_COLOURS = {"input": "#e5e7eb", "index": "#e5e7eb", "param": "#dbeafe", "frozen": "#d1d5db",
            "activation": "#ffffff",
            "output": "#e5e7eb", "gradient": "#fee2e2", "buffer": "#f3f4f6"}
_SAVED = "#b45309"


@dataclass(frozen=True)
class BarRow:
    """One component's bars: FLOPs forward and backward, and bytes of
    parameters with their gradients and optimizer state (``fixed_bytes``)
    and of saved activations."""

    label: str
    forward: int
    backward: int
    fixed_bytes: int
    activation_bytes: int


@dataclass(frozen=True)
class SequenceAxis:
    """The dim a sheet's curves sweep: ``layer.tokens / layer.sequences`` when
    that is one dim; else ``dim`` is None and ``reason`` says why."""

    dim: str | None
    reason: str | None = None


def sequence_axis(layer: Layer) -> SequenceAxis:
    dim, reason = sequence_dim(layer)
    return SequenceAxis(dim, reason)


def at(layer: Layer, expr: sympy.Expr, values: Mapping[str, int]) -> sympy.Rational:
    """``expr`` (defined dims substituted) at ``values``, exactly."""
    out = substitute(sympy.sympify(expr), layer.substitutions).subs(
        {dim_symbol(k): sympy.Integer(v) for k, v in values.items()})
    if out.free_symbols:
        raise ValueError(f"no value for {sorted(map(str, out.free_symbols))}")
    return sympy.Rational(out)


def _float(x: sympy.Rational) -> float:
    value = float(x)
    if not math.isfinite(value):
        raise ValueError("a value too large to plot")
    return value


# ------------------------------------------------------------- the drawing --

def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _bytes(fig: Any, fmt: ImageFormat) -> bytes:
    buf = io.BytesIO()
    with shared_math_layouts():  # each tick label laid out once, not once a renderer
        if fmt == "svg":  # for the HTML sheet: text as text (small), ids the same each time
            import matplotlib

            with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "symflops"}):
                fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "symflops"})
            return buf.getvalue()
        metadata = ({"CreationDate": None, "Producer": None, "Creator": "symflops"}
                    if fmt == "pdf" else {"Software": None})
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


#: Within :func:`shared_figures`: each figure drawn, by what drew it (None: none kept).
_shared: dict[Any, Any] | None = None


@contextlib.contextmanager
def shared_figures() -> Iterator[None]:
    """Within it, a figure asked for in several formats (a build's PNG for
    the Markdown sheet, PDF for the LaTeX one, SVG for the HTML one) is
    drawn and laid out once: the first format asked is saved as it always
    was, the others from the same figure as laid out (the layout is not
    solved again).  Its sampling of the polynomials, its constrained layout
    and its tick labels' mathtext are then paid once a sheet, not once a format."""
    global _shared
    outer, _shared = _shared, {}
    try:
        yield
    finally:
        _shared = outer


def _frozen(x: Any) -> Any:
    if isinstance(x, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    return x


def _draw(fmt: ImageFormat, draw: Any, *args: Any) -> bytes:
    """``draw(*args)`` returns a Figure; it is saved in the default style
    (drawn once for every format within :func:`shared_figures`)."""
    import matplotlib.style

    with matplotlib.style.context("default"):
        key: Any = None
        if _shared is not None:
            try:
                key = (draw, _frozen(args))
                hash(key)
            except TypeError:  # an argument that cannot be a key: drawn anew
                key = None
        if key is None:
            return _bytes(draw(*args), fmt)
        fig = _shared.get(key)
        if fig is None:
            fig = _shared[key] = draw(*args)
            return _bytes(fig, fmt)
        fig.set_layout_engine("none")  # laid out by its first save
        return _bytes(fig, fmt)


def _text(s: str) -> str:
    """Plain text for matplotlib: a ``$`` would start mathtext."""
    return s.replace("$", r"\$")


def graph_figure(graph: Graph, names: Mapping[str, str] | None = None,
                 fmt: ImageFormat = "pdf") -> bytes:
    """The computation graph, top to bottom: forward tensors on the left in
    topological levels, each gradient on the right in its tensor's level;
    forward edges solid, backward edges dashed, saved tensors outlined; as
    many pages as keep its labels readable (:mod:`.graphplot`)."""
    if fmt != "pdf":
        raise ValueError("the graph is drawn as PDF (the Markdown sheet draws it in Mermaid)")
    return draw_graph(graph, names or {}, _COLOURS, _SAVED)


def graph_svgs(graph: Graph, names: Mapping[str, str] | None = None) -> list[bytes]:
    """The graph's pages (those of :func:`graph_figure`), each as an SVG image (the HTML sheet)."""
    import matplotlib.style

    from .graphplot import _page, graph_pages

    with matplotlib.style.context("default"):
        return [_bytes(_page(graph, page, names or {}, _COLOURS, _SAVED), "svg")
                for page in graph_pages(graph)]


def bars_figure(rows: Sequence[BarRow], title: str, unit: str = "FLOPs",
                fmt: ImageFormat = "png") -> bytes:
    """Two panels of horizontal stacked bars, one bar per row: FLOPs
    (forward, backward) and memory in GiB (parameters with gradients and
    optimizer state, saved activations)."""
    return _draw(fmt, _bars, tuple(rows), title, unit)


def _bars(rows: tuple[BarRow, ...], title: str, unit: str) -> Any:
    fig = _figure(10, 1.2 + 0.32 * max(len(rows), 3))
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(rows)))[::-1]
    labels = [_text(r.label) for r in rows]
    for ax, parts, xlabel in (
            (left, (("forward", [r.forward for r in rows], "#4C72B0"),
                    ("backward", [r.backward for r in rows], "#DD8452")), f"{unit} (one pass)"),
            (right, (("parameters, gradients, optimizer", [r.fixed_bytes / GIB for r in rows],
                      "#55A868"),
                     ("saved activations", [r.activation_bytes / GIB for r in rows], "#C44E52")),
             "memory (GiB, 2³⁰ bytes)")):
        start = [0.0] * len(rows)
        for label, values, colour in parts:
            ax.barh(ys, values, left=start, color=colour, label=label, height=0.7)
            start = [s + v for s, v in zip(start, values)]
        ax.set_xlabel(xlabel)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8,
                  frameon=False)
        ax.grid(True, axis="x", alpha=0.3)
    left.set_yticks(ys)
    left.set_yticklabels(labels, fontsize=8, family="DejaVu Sans Mono")
    fig.suptitle(_text(title), fontsize=11)
    return fig


def component_rows(derivation: Derivation, costs: Costs, values: Mapping[str, int]
                   ) -> tuple[BarRow, ...]:
    """One row per row of the front page's component table (every copy): its
    FLOPs, its rules' FLOPs, the fixed bytes of the parameters it owns
    (weights, and for a trainable one its gradient and optimizer state) and
    the bytes of the saved tensors it keeps."""
    from ..count.components import component_table

    layer = derivation.layer
    p = costs.precision
    tensors = layer.tensor_map
    rows = []
    for r in component_table(derivation, costs).rows:
        fixed = sum((tensors[n].elements * layer.copies(n) * (
            p.params + (p.grads + p.optimizer_states * p.optimizer + p.master
                        if tensors[n].requires_grad else 0)) for n in r.param_tensors),
            sympy.Integer(0))
        t = r.totals
        rows.append(BarRow(r.name, int(at(layer, t.forward, values)),
                           int(at(layer, t.backward, values)), int(at(layer, fixed, values)),
                           int(at(layer, t.saved_bytes, values))))
    return tuple(rows)


# ---------------------------------------------------- against the sequence --

def lengths(value: int, crossing: int | None) -> list[int]:
    """Sequence lengths on a log grid (four a doubling) from 128 (or less,
    to include ``value``) past ``value`` and the crossing."""
    lo = min(128, value)
    hi = max(2**17, 4 * value, 2 * crossing if crossing and crossing <= 2**40 else 0)
    out, t = [], float(lo)
    while t < hi:
        if not out or int(t) > out[-1]:
            out.append(int(t))
        t *= 2**0.25
    return sorted(set(out + [hi, value]))


@dataclass(frozen=True)
class Crossing:
    """Where the training FLOPs per token beyond 6N overtake 6N along the
    sequence dim: ``length`` is the shortest length from which they are at
    least 6N at every longer length (None when no such length exists);
    ``below`` says they are below 6N at every length (so None means never)."""

    length: int | None
    below: bool


def overtakes(derivation: Derivation, costs: Costs, values: Mapping[str, int],
              dim: str) -> Crossing:
    """The :class:`Crossing` at ``values`` for the other dims, solved from the
    per-token polynomials (the real roots of beyond - 6N)."""
    layer = derivation.layer
    per = whole_model(derivation, costs).per_token
    if per is None:
        raise ValueError(f"{layer.name} declares no tokens: no per-token counts")
    s = dim_symbol(dim)
    others = {dim_symbol(k): v for k, v in values.items() if k != dim}
    g = sympy.expand(substitute(per.beyond_six_n - per.six_n, layer.substitutions).subs(others))
    if g.has(sympy.Min, sympy.Max) or not g.is_polynomial(s):
        return _piecewise_crossing(g, s)  # a window: min(S, W) pairs per query
    f = sympy.Poly(g, s)
    roots = [r for r in sympy.real_roots(f) if r >= 1] if f.degree() > 0 else []
    below = not roots and f.eval(1) < 0
    if f.LC() < 0 or (f.degree() < 1 and f.eval(1) < 0):
        return Crossing(None, below)
    t = int(max(1, math.ceil(max(roots)))) if roots else 1
    while t > 1 and f.eval(t - 1) >= 0:  # the root's ceiling may be one past it
        t -= 1
    while f.eval(t) < 0:
        t += 1
    return Crossing(t, False)


def _piecewise_crossing(g: sympy.Expr, s: sympy.Symbol) -> Crossing:
    """:func:`overtakes` for a ``g`` (beyond - 6N) piecewise rational in ``s``
    (Min and Max of linear forms, a division by ``s``).  Its sign is constant
    between consecutive candidate points (where two arguments of a Min or Max
    meet, and the real roots of each piece's numerator), so it is exact to
    evaluate ``g`` at the integers around each candidate and at one integer in
    each gap."""
    atoms = [a for a in g.atoms(sympy.Min, sympy.Max) if a.has(s)]
    points: set[sympy.Expr] = {sympy.Integer(1)}
    for a in atoms:
        for i, x in enumerate(a.args):
            for y in a.args[i + 1:]:
                points.update(r for r in sympy.solve(sympy.Eq(x, y), s) if r.is_real)

    def piece(at: sympy.Expr) -> sympy.Expr:
        """``g`` with each Min/Max replaced by its argument at ``s = at``."""
        return g.xreplace({a: next(x for x in a.args if x.subs(s, at) == a.subs(s, at))
                           for a in atoms})

    breaks = sorted(p for p in points if p >= 1)
    probes = [*breaks, breaks[-1] + 1] + [(x + y) / 2 for x, y in zip(breaks, breaks[1:])]
    for at in probes:
        numerator = sympy.numer(sympy.together(piece(at)))
        if numerator.has(s):
            points.update(r for r in sympy.real_roots(sympy.Poly(numerator, s)) if r >= 1)
    marks = sorted({max(1, int(math.floor(p))) for p in points if p >= 1})
    integers = sorted({t for m in marks for t in (m, m + 1)}
                      | {(x + y) // 2 for x, y in zip(marks, marks[1:])})
    value = sympy.lambdify(s, g, modules=[{"Min": min, "Max": max}, "sympy"])
    negative = [t for t in integers if value(sympy.Integer(t)) < 0]
    last = integers[-1]
    if value(sympy.Integer(last)) < 0:  # beyond the last candidate: negative for ever
        return Crossing(None, len(negative) == len(integers))
    if not negative:
        return Crossing(1, False)
    return Crossing(max(negative) + 1, False)


def flops_figure(derivation: Derivation, costs: Costs, values: Mapping[str, int], dim: str,
                 title: str, fmt: ImageFormat = "png") -> bytes:
    """Training FLOPs per token against the sequence dim ``dim``: the total,
    the 6N line and the part beyond it, with the crossing marked."""
    return _draw(fmt, _flops, derivation, costs, values, dim, title)


def _flops(derivation: Derivation, costs: Costs, values: Mapping[str, int], dim: str,
           title: str) -> Any:
    layer = derivation.layer
    per = whole_model(derivation, costs).per_token
    crossing = overtakes(derivation, costs, values, dim)
    cross = crossing.length
    ts = lengths(values[dim], cross)
    point = [{**values, dim: t} for t in ts]
    total = [_float(at(layer, per.flops.total, v)) for v in point]
    six = [_float(at(layer, per.six_n, v)) for v in point]
    beyond = [_float(at(layer, per.beyond_six_n, v)) for v in point]
    fig = _figure(7.5, 4.5)
    ax = fig.add_subplot()
    ax.plot(ts, total, color="black", linewidth=2, label="training FLOPs per token")
    ax.plot(ts, six, color="#4C72B0", linestyle="--", label="6N (N: dense parameters)")
    ax.plot(ts, beyond, color="#C44E52", linestyle="-.", label="beyond 6N")
    if cross is not None:
        ax.axvline(cross, color="#C44E52", linestyle=":", linewidth=1.2,
                   label=f"beyond 6N overtakes 6N at {dim} = {cross:,}")
    elif crossing.below:
        ax.plot([], [], " ", label=f"beyond 6N stays below 6N at every {dim}")
    ax.axvline(values[dim], color="#6b7280", linewidth=0.8)
    ax.plot([values[dim]], [_float(at(layer, per.flops.total, values))], "o", color="black",
            label=f"{dim} = {values[dim]:,} (this configuration)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_text(f"sequence length {dim} (tokens, log scale)"))
    ax.set_ylabel(f"training {costs.unit} per token (log scale)")
    ax.set_title(_text(title), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def memory_figure(derivation: Derivation, costs: Costs, values: Mapping[str, int], dim: str,
                  title: str, fmt: ImageFormat = "png") -> bytes:
    """Bytes of kept activations against the sequence dim under each
    recomputation policy the layer has, in GiB."""
    return _draw(fmt, _memory, derivation, costs, values, dim, title)


def policies(derivation: Derivation, costs: Costs) -> tuple[str, ...]:
    """The recomputation policies that apply: ``selective`` only when
    declared, ``fused_attention`` only with an attention core to fuse."""
    return tuple(p for p in RECOMPUTE_POLICIES
                 if (p != "selective" or derivation.layer.selective)
                 and (p != "fused_attention" or attention_chains(derivation, costs)))


def _memory(derivation: Derivation, costs: Costs, values: Mapping[str, int], dim: str,
            title: str) -> Any:
    layer = derivation.layer
    ts = lengths(values[dim], None)
    fig = _figure(7.5, 4.5)
    ax = fig.add_subplot()
    styles = {"none": ("black", "-"), "selective": ("#DD8452", "--"), "full": ("#4C72B0", "-."),
              "fused_attention": ("#55A868", ":")}
    for name in policies(derivation, costs):
        kept = recompute(derivation, costs, name).activation_bytes(costs)
        colour, line = styles[name]
        ax.plot(ts, [_float(at(layer, kept, {**values, dim: t})) / GIB for t in ts],
                color=colour, linestyle=line, label=f"recompute {name}")
    ax.axvline(values[dim], color="#6b7280", linewidth=0.8,
               label=f"{dim} = {values[dim]:,} (this configuration)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_text(f"sequence length {dim} (tokens, log scale)"))
    ax.set_ylabel("saved activations (GiB, 2³⁰ bytes, log scale)")
    ax.set_title(_text(title), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig
