"""The figures of one sheet: which files there are, their captions, and the
context the partials ``figures.md.j2`` and ``figures.tex.j2`` place.

Invariants:

* :func:`sheet_figures` decides, from the records alone, which figures a
  sheet has and why one is absent (a note); it draws nothing and imports no
  matplotlib.  :func:`draw` renders the files' bytes; only ``symflops build``
  writes them, beside the sheet.
* File names are ``STEM.KIND.EXT``: ``STEM`` is the sheet's file name with
  any character outside ``[A-Za-z0-9_.-]`` replaced by ``_`` (so that a
  Markdown link and ``\\includegraphics`` take it as it is), ``KIND`` one of
  ``graph``, ``components``, ``flops``, ``memory``, ``EXT`` ``png`` for the
  Markdown sheet and ``pdf`` for the LaTeX one.  The graph is Mermaid text in
  Markdown, so ``STEM.graph.pdf`` has no PNG twin.
* A sentence of a caption that states a fact about the layer (that a
  gradient sums several contributions, where the part beyond 6N overtakes
  6N) is written only when the graph or the polynomials make it true.
* The context's text is escaped for its format; the Mermaid text is
  entity-escaped by :func:`~symflops.sheets.graph.mermaid`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, TypedDict

from .environment import Format
from .escape import ESCAPES, plain
from .graph import Graph, computation_graph, mermaid
from .graphplot import graph_pages
from .plots import (ImageFormat, bars_figure, component_rows, flops_figure, graph_figure,
                    memory_figure, overtakes, policies, sequence_axis)
from .roofline import caption as roofline_caption, figure_roofline, roofline_figure
from ..core.records import Derivation
from ..count.cost import Costs
from ..count.explain import SheetCounts

FigureKind = Literal["graph", "components", "flops", "memory", "roofline"]
#: Beyond this value of a dim the plots are left out: their numbers would
#: pass float64's exact range long before matplotlib's.
MAX_PLOTTED = 10**15
IMAGE_FORMAT: dict[Format, ImageFormat] = {"md": "png", "tex": "pdf"}


@dataclass(frozen=True)
class FigureFile:
    kind: FigureKind
    fmt: ImageFormat
    filename: str
    #: plain text (escaped by :func:`figures_context`)
    caption: str


@dataclass(frozen=True)
class SheetFigures:
    """A sheet's figures: its graph (with its Mermaid text), the files to
    draw, the configuration the plots are drawn at, and a note for each plot
    left out saying why."""

    stem: str
    graph: Graph
    mermaid: str
    values: tuple[tuple[str, int], ...]
    configuration: str | None
    files: tuple[FigureFile, ...]
    notes: tuple[str, ...]

    def of(self, fmt: Format) -> tuple[FigureFile, ...]:
        return tuple(f for f in self.files if f.fmt == IMAGE_FORMAT[fmt])


def figure_stem(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "_"


#: every figure file a sheet may have, by kind: the graph as a PDF only
FIGURE_FILES: tuple[tuple[FigureKind, tuple[ImageFormat, ...]], ...] = (
    ("graph", ("pdf",)), ("components", ("png", "pdf")), ("flops", ("png", "pdf")),
    ("memory", ("png", "pdf")), ("roofline", ("png", "pdf")))


def figure_names(stem: str) -> tuple[str, ...]:
    """The names of every figure file the sheet written as ``STEM.md`` /
    ``STEM.tex`` may have (which it has depends on the configuration): what
    ``symflops build`` checks no two declarations share."""
    name = figure_stem(stem)
    return tuple(f"{name}.{kind}.{ext}" for kind, exts in FIGURE_FILES for ext in exts)


def _sums(graph: Graph) -> str:
    """The gradients with several contributions, as a sentence (or '')."""
    parts = []
    for n in graph.gradient_nodes:
        sources = graph.sources(n.name, "backward")
        if len(sources) > 1:
            parts.append(f"{n.name} sums the contributions through {', '.join(sources[:-1])} "
                         f"and {sources[-1]}")
    return (" " + "; ".join(parts) + ".") if parts else ""


def sheet_figures(derivation: Derivation, costs: Costs, stem: str,
                  values: Mapping[str, int] | None = None,
                  configuration: str | None = None) -> SheetFigures:
    """The figures of the sheet written as ``STEM.md`` / ``STEM.tex``: the
    graph always; the plots when ``values`` (every free dim, a named
    configuration called ``configuration``, by default its values) are given."""
    layer = derivation.layer
    graph = computation_graph(derivation, costs)
    name = figure_stem(stem)
    saved = [n.name for n in graph.nodes if n.saved]
    kept = (f" The tensors kept for the backward pass ({', '.join(saved)}) are outlined."
            if saved else " No tensor is kept for the backward pass.")
    files = [FigureFile("graph", "pdf", f"{name}.graph.pdf",
                        f"Computation graph of {layer.name}. Forward (solid arrows): each tensor "
                        "is made from the tensors pointing at it. Backward (dashed arrows): each "
                        "gradient is computed from the gradients pointing at it."
                        + _sums(graph) + kept + "".join(
                            f" The block {b.name} is drawn once; it runs {b.repeat} times."
                            for b in layer.blocks if b.repeat != 1))]
    notes: list[str] = []
    given = dict(values or {})
    free = {d.name for d in layer.free_dims}
    if values is not None and set(given) != free:
        raise ValueError(f"values for {sorted(given)}, but the free dims are {sorted(free)}")
    if values is None:
        notes.append("The plots need a configuration (a value for every dim); none was given.")
    elif any(v > MAX_PLOTTED for v in given.values()):
        notes.append(f"The plots are left out: a dim's value exceeds {MAX_PLOTTED:.0e}.")
        given = {}
    if given:
        configuration = configuration or ", ".join(f"{k} = {v:,}" for k, v in given.items())
        for ext in ("png", "pdf"):
            files.append(FigureFile("components", ext, f"{name}.components.{ext}",
                                    f"FLOPs and memory of each component of {layer.name} "
                                    f"(the rows of its component table, or its ops where it "
                                    f"declares no components; every copy) at "
                                    f"{configuration}: a component's backward bar counts the "
                                    "rules of its ops, its memory the parameters it owns "
                                    "(with their gradients and optimizer state when trained) "
                                    "and the saved tensors it keeps."))
        rooflined = figure_roofline(derivation, costs, given, configuration)
        if rooflined is not None:   # its section is in symflops/sheets/roofline.py
            files += [FigureFile("roofline", ext, f"{name}.roofline.{ext}",
                                 roofline_caption(layer.name, configuration,
                                                  rooflined.decode is not None))
                      for ext in ("png", "pdf")]
        axis = sequence_axis(layer)
        # without a sequence length there is nothing to plot against it: derive's
        # notes say so (a tool's remark, not the sheet's); in MACs there is no 6N
        if axis.dim is not None and costs.unit == "FLOPs":
            dim = axis.dim
            crossing = overtakes(derivation, costs, given, dim)
            where = (f" The part beyond 6N is at least 6N from {dim} = {crossing.length:,} on."
                     if crossing.length is not None else
                     " The part beyond 6N stays below 6N at every length." if crossing.below
                     else "")
            for ext in ("png", "pdf"):
                files.append(FigureFile(
                    "flops", ext, f"{name}.flops.{ext}",
                    f"Training {costs.unit} per token of {layer.name} against the sequence "
                    f"length {dim}, from {configuration} (marked) with {dim} varied: the "
                    "total, 6N "
                    "(N the dense parameters) and the part beyond 6N." + where))
                files.append(FigureFile(
                    "memory", ext, f"{name}.memory.{ext}",
                    f"Saved activations of {layer.name} (bytes, {costs.precision.name}) against "
                    f"the sequence length {dim} under each recomputation policy "
                    f"({', '.join(policies(derivation, costs))}), from {configuration} (marked) with "
                    f"{dim} varied."))
    return SheetFigures(name, graph, mermaid(graph), tuple(given.items()),
                        configuration if given else None, tuple(files), tuple(notes))


def figures_of(derivation: Derivation, counts: SheetCounts) -> SheetFigures:
    """The figures of the sheet of ``derivation`` as ``symflops build`` and
    ``symflops render`` both make it: named after the declaration's file,
    the plots at the first configuration of the sheet's numbers (if any)."""
    stem = os.path.splitext(os.path.basename(derivation.layer.source))[0]
    first = counts.worked
    values = dict(first.config) if first else None
    return sheet_figures(derivation, counts.costs, stem, values,
                         first.name if first is not None and first.name else None)


def draw(figures: SheetFigures, derivation: Derivation, costs: Costs,
         fmt: Format | None = None) -> dict[str, bytes]:
    """The bytes of each figure file (of one sheet format, or of both), by file name."""
    values = dict(figures.values)
    title = plain(f"{derivation.layer.name} at {figures.configuration}")
    dim = sequence_axis(derivation.layer).dim
    out = {}
    for f in figures.of(fmt) if fmt else figures.files:
        if f.kind == "graph":
            out[f.filename] = graph_figure(figures.graph, fmt=f.fmt)
        elif f.kind == "components":
            out[f.filename] = bars_figure(component_rows(derivation, costs, values), title,
                                          costs.unit, f.fmt)
        elif f.kind == "roofline":
            found = figure_roofline(derivation, costs, values, figures.configuration or "")
            assert found is not None   # sheet_figures listed the file
            out[f.filename] = roofline_figure(found, title, f.fmt)
        elif f.kind == "flops":
            out[f.filename] = flops_figure(derivation, costs, values, dim, title, f.fmt)
        else:
            out[f.filename] = memory_figure(derivation, costs, values, dim, title, f.fmt)
    return out


class FigurePage(TypedDict):
    """A page of the graph's PDF and how it is included (see :mod:`.graphplot`)."""

    page: int
    scale: str
    angle: int
    #: what the page shows, for its caption (escaped)
    part: str


class FigureItem(TypedDict):
    #: the file name as it is (for a link or ``\\includegraphics``)
    file: str
    #: the file name escaped as text
    name: str
    caption: str
    kind: str
    #: the graph's pages (empty for a plot)
    pages: list[FigurePage]


class FiguresContext(TypedDict):
    """What the figure partials place: ``mermaid`` (the graph for Markdown,
    to go in a ```` ```mermaid ```` block) and ``graph_caption`` (its
    caption), ``images`` (the files of the format, the graph's PDF first in
    LaTeX, captions escaped) and ``notes`` (why plots are left out)."""

    mermaid: str
    graph_caption: str
    images: list[FigureItem]
    notes: list[str]


def figures_context(figures: SheetFigures, fmt: Format) -> FiguresContext:
    esc = ESCAPES[fmt]
    caption = figures.files[0].caption + (
        " Dotted lines without a head join each gradient to the forward tensors its rule "
        "reads." if fmt == "md" and any(e.kind == "reads" for e in figures.graph.edges) else "")
    return FiguresContext(
        mermaid=figures.mermaid,
        graph_caption=esc(caption),
        images=[FigureItem(file=f.filename, name=esc(f.filename), caption=esc(f.caption),
                           kind=f.kind, pages=_pages(figures, esc) if f.kind == "graph" else [])
                for f in figures.of(fmt)],
        notes=[esc(n) for n in figures.notes])


def _pages(figures: SheetFigures, esc: Any) -> list[FigurePage]:
    pages = graph_pages(figures.graph)
    out = []
    for k, p in enumerate(pages, 1):
        what = {"both": "", "forward": "the forward pass", "backward": "the backward pass"}[p.half]
        levels = (f"levels {p.first + 1} to {p.last + 1}" if len(pages) > 1 and
                  sum(q.half == p.half for q in pages) > 1 else "")
        part = ", ".join(x for x in (what, levels) if x)
        out.append(FigurePage(page=k, scale=f"{p.scale:.3f}", angle=p.angle,
                              part=esc(f" (part {k} of {len(pages)}: {part})") if len(pages) > 1
                              else ""))
    return out
