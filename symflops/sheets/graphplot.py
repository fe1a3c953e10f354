"""The computation graph as a PDF of one or more pages, each readable.

The graph (:mod:`.graph`) is drawn top to bottom: forward tensors on the
left in topological levels, each gradient on the right in its tensor's level.
A page is included at a scale that keeps its labels at :data:`MIN_LABEL_PT`
or more (they are drawn at :data:`LABEL_PT`): a graph too wide for that is
drawn as two parts, the forward pass and the backward pass (no edge runs
between them: forward edges join forward tensors, backward edges gradients);
a part too wide even so goes on a landscape page; a part too tall is cut into
bands of levels, each page showing, above its first level and outlined in
dashes, the nodes of earlier bands that its nodes are made from.

:func:`graph_pages` decides the pages from the graph alone (no matplotlib);
:func:`draw_graph` draws them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from .graph import Graph, Node, levels

#: Labels are drawn at this size (pt) ...
LABEL_PT = 9.0
#: ... and a page is never shrunk so far that they fall below this.
MIN_LABEL_PT = 8.0
#: The space a page may take on the sheet (A4, 2 cm margins): inches.
TEXT_WIDTH_IN = 6.69
TEXT_HEIGHT_IN = 8.1      # 0.8 of the text height: room for the caption
LANDSCAPE_WIDTH_IN = 9.6  # a landscape page: the text height, less the caption
LANDSCAPE_HEIGHT_IN = 6.69
#: Inches per level; per node column, enough for the longest label
#: (:func:`column_width`: about 0.075 in per character at 9 pt, and a margin).
SY = 0.62


def column_width(graph: Graph, names: Mapping[str, str] | None = None) -> float:
    """Inches between node columns: the longest label's width and a margin."""
    longest = max((len((names or {}).get(n.name, n.name)) for n in graph.nodes), default=1)
    return max(0.95, round(0.075 * longest + 0.45, 3))

Half = Literal["both", "forward", "backward"]


@dataclass(frozen=True)
class GraphPage:
    """One page: which ``half`` of the graph, the levels ``first`` to
    ``last`` (inclusive), its drawing's size in inches, and the ``scale``
    and ``angle`` (0, or 90 for landscape) it is included at."""

    half: Half
    first: int
    last: int
    width: float
    height: float
    scale: float
    angle: int
    #: the labels' size in the drawing: :data:`LABEL_PT`, or more where the
    #: page is shrunk below ``MIN_LABEL_PT / LABEL_PT`` (a very wide part)
    font: float = LABEL_PT

    @property
    def label_pt(self) -> float:
        return self.font * self.scale


def _columns(graph: Graph, half: Half) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Each node's (column, level), and the forward and backward widths."""
    col = levels(graph)
    pos: dict[str, tuple[int, int]] = {}
    width = {"f": 0, "b": 0}
    parts = (((graph.forward_nodes, "f"),) if half == "forward" else
             ((graph.gradient_nodes, "b"),) if half == "backward" else
             ((graph.forward_nodes, "f"), (graph.gradient_nodes, "b")))
    for part, key in parts:
        taken: dict[int, int] = {}
        for n in sorted(part, key=lambda n: _leaf(graph, n)):
            k = taken.get(col[n.name], 0)
            taken[col[n.name]] = k + 1
            pos[n.name] = (k, col[n.name])
        width[key] = max(taken.values(), default=0)
    return pos, width["f"], width["b"]


def _leaf(graph: Graph, node: Node) -> bool:
    of = graph.node(node.name[1:]) if node.kind == "gradient" else node
    return of.kind in ("param", "input", "index", "buffer")


def _width(half: Half, wf: int, wb: int, sx: float) -> float:
    if half == "both":
        return sx * (wf + 0.6 + max(wb, 1)) + 0.4
    return sx * max(wf if half == "forward" else wb, 1) + 0.4


def _height(levels_: int, ghosts: bool) -> float:
    return SY * (levels_ + (1 if ghosts else 0)) + 0.9


def graph_pages(graph: Graph) -> tuple[GraphPage, ...]:
    """The pages the graph is drawn on (see the module)."""
    rows = 1 + max(levels(graph).values(), default=0)
    least = MIN_LABEL_PT / LABEL_PT
    sx = column_width(graph)
    _, wf, wb = _columns(graph, "both")
    halves: tuple[Half, ...] = ("both",)
    if _width("both", wf, wb, sx) * least > TEXT_WIDTH_IN and graph.gradient_nodes:
        halves = ("forward", "backward")
    pages = []
    for half in halves:
        w = _width(half, wf, wb, sx)
        landscape = w * least > TEXT_WIDTH_IN
        room_w, room_h = ((LANDSCAPE_WIDTH_IN, LANDSCAPE_HEIGHT_IN) if landscape
                          else (TEXT_WIDTH_IN, TEXT_HEIGHT_IN))
        whole = _height(rows, False) * least <= room_h
        per = rows if whole else max(1, int((room_h / least - 0.9) / SY) - 1)
        for first in range(0, rows, per):
            last = min(rows, first + per) - 1
            h = _height(last - first + 1, first > 0)
            scale = round(min(1.25, room_w / w, room_h / h), 3)
            font = max(LABEL_PT, round(MIN_LABEL_PT / scale + 0.05, 2))
            pages.append(GraphPage(half, first, last, round(w, 3), round(h, 3),
                                   scale, 90 if landscape else 0, font))
    return tuple(pages)


_COLOURS = {"input": "#fde68a", "index": "#fde68a", "param": "#bfdbfe", "frozen": "#e5e7eb",
            "buffer": "#f3f4f6", "activation": "#ffffff", "gradient": "#fee2e2"}
_SAVED = "#b45309"


def draw_graph(graph: Graph, names: Mapping[str, str], colours: Mapping[str, str],
               saved_colour: str) -> bytes:
    """The graph's pages as one PDF (deterministic bytes: no dates)."""
    import matplotlib.style
    from matplotlib.backends.backend_pdf import PdfPages

    buf = io.BytesIO()
    with matplotlib.style.context("default"):
        with PdfPages(buf, metadata={"CreationDate": None, "Producer": None,
                                     "Creator": "symflops"}) as pdf:
            for page in graph_pages(graph):
                pdf.savefig(_page(graph, page, names, colours, saved_colour))
    return buf.getvalue()


def _page(graph: Graph, page: GraphPage, names: Mapping[str, str], colours: Mapping[str, str],
          saved_colour: str) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch

    SX = column_width(graph)
    pos, wf, wb = _columns(graph, page.half)
    gap = (wf + 0.6) if page.half == "both" else 0
    if page.half == "both":
        pos.update({n.name: (pos[n.name][0] + gap, pos[n.name][1]) for n in graph.gradient_nodes})
    inside = {n for n, (_, y) in pos.items() if page.first <= y <= page.last}
    kinds = {"forward"} if page.half == "forward" else {"backward"} if page.half == "backward" \
        else {"forward", "backward"}
    edges = [e for e in graph.edges if e.kind in kinds and e.dst in inside and e.src in pos]
    # in the columns' order, then the levels' (two may share a column, and take
    # its slot in turn): a set's order changes with Python's hash seed, and with
    # it where the nodes are drawn in the SVG and PDF
    ghosts = sorted({e.src for e in edges if e.src not in inside}, key=lambda n: pos[n])
    top = page.first - (1 if ghosts else 0)
    at = {n: (SX * pos[n][0], -(pos[n][1] - top)) for n in pos if n in inside}
    used: set[float] = set()
    for n in ghosts:  # the earlier bands' nodes, one row above this band
        x = SX * pos[n][0]
        while x in used:
            x += SX
        used.add(x)
        at[n] = (x, 0.0)
    fig = Figure(figsize=(page.width, page.height), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    for name, (x, y) in at.items():
        node = graph.node(name)
        ghost = name not in inside
        ax.text(x, y, names.get(name, name).replace("$", r"\$"), ha="center", va="center",
                fontsize=page.font, family="DejaVu Sans Mono", zorder=3,
                bbox={"boxstyle": "round,pad=0.3",
                      "facecolor": "#ffffff" if ghost else colours[node.kind],
                      "edgecolor": "#9ca3af" if ghost else (saved_colour if node.saved
                                                            else "#374151"),
                      "linestyle": (0, (3, 2)) if ghost else "-",
                      "linewidth": 2.2 if node.saved and not ghost else 0.8})
    for e in edges:
        (x1, y1), (x2, y2) = at[e.src], at[e.dst]
        ax.add_patch(FancyArrowPatch(
            (x1, y1), (x2, y2), arrowstyle="-|>", mutation_scale=9, shrinkA=11, shrinkB=11,
            linewidth=0.8, zorder=2, linestyle="-" if e.kind == "forward" else (0, (4, 2)),
            color="#374151" if e.kind == "forward" else "#b91c1c",
            connectionstyle="arc3,rad=0.25" if y1 == y2 or (x1 == x2 and abs(y1 - y2) > 1)
            else "arc3,rad=0.0"))
    width = max((x for x, _ in at.values()), default=0.0)
    rows = page.last - top + 1
    ax.set_xlim(-0.8, width + 0.8)
    ax.set_ylim(-rows + 0.4, 0.9)
    handles = [Patch(facecolor="white", edgecolor=saved_colour, linewidth=2.2,
                     label="saved for the backward pass"),
               Patch(facecolor=colours["param"], edgecolor="#374151", label="parameter")]
    if any(graph.node(n).kind == "frozen" for n in inside):
        handles.append(Patch(facecolor=colours["frozen"], edgecolor="#374151",
                             label="frozen (no gradient)"))
    if any(graph.node(n).kind == "buffer" for n in inside):
        handles.append(Patch(facecolor=colours["buffer"], edgecolor="#374151",
                             label="buffer (constant)"))
    if ghosts:
        handles.append(Patch(facecolor="white", edgecolor="#9ca3af", linestyle=(0, (3, 2)),
                             label="from the page before"))
    if "forward" in kinds:
        handles.append(Line2D([], [], color="#374151", label="forward: made from"))
    if "backward" in kinds:
        handles.append(Line2D([], [], color="#b91c1c", linestyle=(0, (4, 2)),
                              label="backward: needs"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=max(1, min(4, len(handles), int(page.width / 2.2))), fontsize=MIN_LABEL_PT / page.scale
              if page.scale < 1 else MIN_LABEL_PT, frameon=False)
    if page.half in ("both", "forward") and page.first == 0:
        ax.text(0, 0.75, "forward", fontsize=10, weight="bold", ha="left")
    if page.half in ("both", "backward") and page.first == 0 and graph.gradient_nodes:
        ax.text(SX * gap, 0.75, "backward", fontsize=10, weight="bold", ha="left")
    return fig
