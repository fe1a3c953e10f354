"""The reader's words for what the engine found: what a dim is, how a count
grows, what a tensor's role is, what the layer is called.

Every phrase is built from the declaration (its dims' descriptions) and the
engine's records (:mod:`symflops.count.growth`); prose is escaped with the
format's escape, math printed between ``$``.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from . import printing as P
from ..core.ir import Layer
from ..count.growth import Growth

Escape = Callable[[str], str]

#: How a count grows with a dim, by its degree.
DEGREE = {1: "linearly", 2: "quadratically", 3: "cubically"}


def gloss(description: str) -> str:
    """A dim's description for a parenthesis: its own parentheses become
    commas (``sequence length (the context)`` -> ``sequence length, the
    context``)."""
    text = re.sub(r"\s*\(([^()]*)\)", r", \1", description.strip())
    return text.strip(" ,")


def dim_phrase(layer: Layer, name: str, esc: Escape) -> str:
    """``$S$ (sequence length, the context)``, or ``$S$`` without a description."""
    desc = next((d.description for d in layer.dims if d.name == name), "")
    symbol = f"${P.symbol_name(name)}$"
    return symbol + (esc(f" ({gloss(desc)})") if desc.strip() else "")


def short(description: str) -> str:
    """A dim's description up to its first parenthesis, semicolon or comma
    (``sequence length (the context)`` -> ``sequence length``)."""
    return re.split(r"[(;,]", description, maxsplit=1)[0].strip()


def dim_named(layer: Layer, name: str, esc: Escape) -> str:
    """``the sequence length $S$``: the reader's word, then the symbol."""
    desc = short(next((d.description for d in layer.dims if d.name == name), ""))
    symbol = f"${P.symbol_name(name)}$"
    return (esc(f"the {desc} ") if desc else "") + symbol


def _join(items: Sequence[str], esc: Escape) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + esc(" and ") + items[-1]


def growth_phrase(layer: Layer, growths: Sequence[Growth], esc: Escape) -> str:
    """``linearly with the tokens in the batch $B$, quadratically with the
    sequence length $S$``; empty when the count grows with none of them."""
    by: dict[int, list[str]] = {}
    for g in growths:
        by.setdefault(g.degree, []).append(dim_named(layer, g.dim, esc))
    parts = []
    for k in sorted(by):
        how = DEGREE.get(k, f"as the power {k} of")
        parts.append(esc(f"{how} with ") + _join(by[k], esc))
    return esc(", ").join(parts)


def role_words(role: str, requires_grad: bool) -> str:
    """A declared role in the reader's words."""
    words = {"param": "weight, trained", "frozen": "weight, frozen", "input": "input",
             "index": "indices (integers)", "buffer": "constant table", "mask": "mask",
             "activation": "computed"}.get(role, role)
    if role == "input" and not requires_grad:
        words += ", no gradient"
    if role == "param" and not requires_grad:
        words = "weight, no gradient"
    return words


def noun(layer: Layer) -> str:
    """What the sheet is about: ``the whole model`` when it includes blocks
    (a model of repeated layers), else ``the layer``."""
    return "the whole model" if layer.blocks else "the layer"


def names(spans: Sequence[str], esc: Escape) -> str:
    """``$Q$, $K$ and $V$`` from spans already in math."""
    return _join(list(dict.fromkeys(spans)), esc)
