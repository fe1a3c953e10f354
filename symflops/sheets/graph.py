"""The computation graph of a derived layer, forward and backward, and its
two drawings: Mermaid text for Markdown, a matplotlib figure for LaTeX.

Invariants:

* The graph is read off the records only: the layer's ops (each op's inputs
  and outputs, its auxiliary outputs such as a norm's ``rstd``), the rules
  (the gradient each computes, the op it comes from, the tensors it reads)
  and the saved tensors of the costs.  Nothing is laid out by hand.
* The backward part is the real dependency graph: the rule of op ``k`` for
  ``X`` reads the gradient of ``k``'s output, so ``dX`` gets one backward
  edge from the gradient of every op output that reads ``X`` (LoRA: ``dX``
  from ``dY`` and from ``dU``), never a chain in the order rules run.
* ``reads`` edges go from a forward tensor to each gradient whose rule reads
  it; a tensor is ``saved`` when it is one of the costs' saved activations.
* Node and edge order is deterministic (forward tensors in layer order, then
  gradients in the order rules compute them), and so are both drawings.
* Mermaid ids are ``[A-Za-z0-9_]`` only, and labels are entity-escaped, so no
  tensor name can break out of its node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping

from ..core.records import Derivation, grad_name
from ..count.cost import Costs

NodeKind = Literal["input", "param", "frozen", "index", "buffer", "activation", "gradient",
                   "output"]
EdgeKind = Literal["forward", "backward", "reads"]

_KIND_OF_ROLE: dict[str, NodeKind] = {"input": "input", "mask": "input", "param": "param",
                                      "frozen": "frozen", "index": "index",
                                      "buffer": "buffer", "activation": "activation"}


@dataclass(frozen=True)
class Node:
    """A tensor of the forward pass, or a gradient (``kind`` 'gradient')."""

    #: the tensor's name, or its gradient's (``dX``)
    name: str
    kind: NodeKind
    #: a forward tensor kept for the backward pass
    saved: bool = False


@dataclass(frozen=True)
class Edge:
    """``dst`` is made from ``src`` (forward), needs the gradient ``src``
    (backward), or is a gradient whose rule reads the tensor ``src`` (reads)."""

    src: str
    dst: str
    kind: EdgeKind


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def sources(self, name: str, kind: EdgeKind) -> tuple[str, ...]:
        """The nodes with an edge of ``kind`` into ``name``."""
        return tuple(e.src for e in self.edges if e.dst == name and e.kind == kind)

    @property
    def forward_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind != "gradient")

    @property
    def gradient_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind == "gradient")


def computation_graph(derivation: Derivation, costs: Costs) -> Graph:
    """The forward and backward graph of ``derivation``, saved tensors marked."""
    layer = derivation.layer
    saved = {s.name for s in costs.saved}
    outputs = set(layer.outputs)
    nodes = [Node(t.name, "output" if t.name in outputs else _KIND_OF_ROLE[t.role],
                  t.name in saved) for t in layer.tensors]
    forward = {t.name for t in layer.tensors}
    edges: list[Edge] = []
    for op in layer.ops:
        for made in (op.output, *(f.tensor for f in op.aux)):
            edges += [Edge(src, made, "forward") for src in op.inputs]
    gradients = [grad_name(n) for n in layer.outputs]
    for r in derivation.rules:
        if r.grad not in gradients:
            gradients.append(r.grad)
    nodes += [Node(g, "gradient") for g in gradients]
    for r in derivation.rules:
        # the gradient of the op's output, whether or not a term reads it
        # (a rule may be a constant times it), and any other gradient it reads
        upstream = [grad_name(layer.ops[r.op].output)]
        upstream += [n for n in r.reads if n not in forward and n not in upstream]
        edges += [Edge(g, r.grad, "backward") for g in upstream]
        edges += [Edge(n, r.grad, "reads") for n in r.reads if n in forward]
    return Graph(tuple(nodes), tuple(dict.fromkeys(edges)))


# ----------------------------------------------------------------- Mermaid --

#: Characters a Mermaid label may hold as they are; any other is written as an
#: entity (``#35;``), so quotes, brackets, pipes and markup cannot end the label.
_PLAIN = re.compile(r"[A-Za-z0-9_ .,:=+\-]")


def mermaid_label(text: str) -> str:
    return "".join(ch if _PLAIN.fullmatch(ch) else f"#{ord(ch)};" for ch in text)


def node_ids(graph: Graph) -> dict[str, str]:
    """A Mermaid id for every node: ``t_`` and the name with every character
    outside ``[A-Za-z0-9_]`` replaced by ``_`` (the prefix keeps ids off
    Mermaid's keywords, such as ``end``); a clash gets a counter."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for n in graph.nodes:
        base = "t_" + re.sub(r"[^A-Za-z0-9_]", "_", n.name)
        candidate, k = base, 2
        while candidate in used:
            candidate, k = f"{base}_{k}", k + 1
        used.add(candidate)
        ids[n.name] = candidate
    return ids


_ARROWS: dict[EdgeKind, str] = {"forward": "-->", "backward": "-.->", "reads": "-.-"}
_SHAPES: dict[NodeKind, tuple[str, str]] = {
    "input": ("([", "])"), "param": ("[[", "]]"), "frozen": ("[[", "]]"), "index": ("([", "])"),
    "buffer": ("[(", ")]"),  # a cylinder: stored constants, not a parameter
    "activation": ("[", "]"), "output": ("([", "])"), "gradient": ("[", "]")}


def mermaid(graph: Graph, names: Mapping[str, str] | None = None, reads: bool = True) -> str:
    """The body of a ```` ```mermaid ```` block: a left-to-right flowchart, the
    forward pass and the backward pass in two subgraphs; ``names`` gives a
    node's label (default: its name); backward edges dashed, ``reads`` edges
    (when asked for) dotted without a head; saved tensors in class ``saved``."""
    ids = node_ids(graph)
    labels = names or {}
    lines = ["flowchart LR"]
    for title, key, part in (("forward", "fwd", graph.forward_nodes),
                             ("backward", "bwd", graph.gradient_nodes)):
        if not part:
            continue
        lines.append(f'  subgraph {key}["{title}"]')
        for n in part:
            left, right = _SHAPES[n.kind]
            lines.append(f'    {ids[n.name]}{left}"{mermaid_label(labels.get(n.name, n.name))}"'
                         f"{right}")
        lines.append("  end")
    for e in graph.edges:
        if e.kind != "reads" or reads:
            lines.append(f"  {ids[e.src]} {_ARROWS[e.kind]} {ids[e.dst]}")
    lines.append("  classDef saved fill:#fde68a,stroke:#b45309,stroke-width:2px")
    lines.append("  classDef param fill:#dbeafe,stroke:#1d4ed8")
    lines.append("  classDef gradient fill:#fee2e2,stroke:#b91c1c")
    buffers = [n for n in graph.nodes if n.kind == "buffer"]
    if buffers:  # only where there are any, so the other sheets' graphs are unchanged
        lines.append("  classDef buffer fill:#f3f4f6,stroke:#6b7280,stroke-dasharray:3 3")
    frozen = [n for n in graph.nodes if n.kind == "frozen" and not n.saved]
    if frozen:  # a weight without a gradient: grey, not a trained parameter's blue
        lines.append("  classDef frozen fill:#e5e7eb,stroke:#6b7280")
    for cls, members in (("saved", [n for n in graph.nodes if n.saved]),
                         ("param", [n for n in graph.nodes if n.kind == "param" and not n.saved]),
                         ("buffer", buffers),
                         ("frozen", frozen),
                         ("gradient", list(graph.gradient_nodes))):
        if members:
            lines.append(f"  class {','.join(ids[n.name] for n in members)} {cls}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ layout --

def levels(graph: Graph) -> dict[str, int]:
    """A column for every node.  A forward tensor made by an op sits one
    column right of the latest tensor it is made from; a leaf (input,
    parameter) sits just left of its first consumer; a gradient sits in its
    tensor's column, below it, so that backward edges run right to left."""
    made = {e.dst for e in graph.edges if e.kind == "forward"}
    col: dict[str, int] = {}
    for n in graph.forward_nodes:  # layer order is a topological order
        if n.name in made:
            col[n.name] = 1 + max(col.get(s, 0) for s in graph.sources(n.name, "forward"))
    for n in graph.forward_nodes:
        if n.name not in made:
            users = [col[e.dst] for e in graph.edges
                     if e.kind == "forward" and e.src == n.name]
            col[n.name] = max(min(users, default=1) - 1, 0)
    for n in graph.gradient_nodes:
        col[n.name] = col.get(n.name[1:], 0)
    return col
