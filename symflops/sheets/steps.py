"""The backward pass told op by op, each rule with its sentences of why.

For each rule the engine's facts (:mod:`symflops.count.rulefacts`,
:mod:`symflops.count.facts`) give what a sheet may say of it:

* *shape*: the gradient has its tensor's shape, and of the two tensors the
  rule multiplies, the product with that shape contracts their common
  letters ("match the shapes");
* *tokens*: a weight's gradient that sums over the letters of the declared
  tokens gets a contribution from every token, which is why data-parallel
  replicas all-reduce it;
* *saving*: a rule that reads a forward tensor makes the forward pass keep
  it until the backward pass gets here; recomputing it instead costs the
  forward op that writes it (said at its first reader, in the order the
  rules run).

A layer of at most a few ops (:data:`~symflops.sheets.context.COMPACT_OPS`)
tells its backward pass this way, a group of rows per op; a longer one keeps
one table, each row named by its component.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy

from . import printing as P
from .notation import Math
from .words import Escape, names
from ..count.facts import TokenSum
from ..count.rulefacts import SavedFact, ShapeFact
from ..core.ir import Layer


def _shape(m: Math, poly: Any, shape: Sequence[sympy.Expr]) -> str:
    return P.shape(shape, poly.poly if hasattr(poly, "poly") else poly)


def shape_sentence(f: ShapeFact, matrix: str | None, layer: Layer, m: Math, esc: Escape,
                   shape_poly: Any) -> str:
    """``dW_in has W_in's shape [D, F]; X is [B, D] and dH is [B, F]: the
    product with that shape sums over b, Xᵀ dH.``"""
    (a, sa), (b, sb) = f.operands
    head = (f"${m.t(f.grad)}$" + esc(" has ") + f"${m.t(f.wrt)}$" + esc("'s shape ")
            + f"${P.shape(f.shape, shape_poly)}$" + esc("; ") + f"${m.t(a)}$" + esc(" is ")
            + f"${P.shape(sa, shape_poly)}$" + esc(" and ") + f"${m.t(b)}$" + esc(" is ")
            + f"${P.shape(sb, shape_poly)}$")
    if not f.summed:
        return head + esc(": their product of that shape sums over nothing.")
    letters = ", ".join(f"${P.index_list([x])}$" for x in f.summed)
    tail = esc(": the product with that shape sums over ") + letters
    if matrix:
        tail += esc(", ") + f"${matrix.split(' = ', 1)[1]}$"
    return head + tail + esc(".")


def token_sentence(s: TokenSum, layer: Layer, m: Math, esc: Escape) -> str:
    letters = ", ".join(f"${P.index_list([x])}$" for x in s.letters)
    if s.every_token:
        return (esc("It sums over ") + letters + esc(", which run over all ")
                + f"${m.poly(layer.tokens)}$" + esc(" tokens: every token contributes, which is "
                                                     "why data-parallel replicas, each with part "
                                                     "of the tokens, all-reduce it once per step."))
    return (esc("It sums over ") + letters + esc(", tokens' letters, but not over all ")
            + f"${m.poly(layer.tokens)}$" + esc(" tokens."))


def saved_sentence(f: SavedFact, layer: Layer, m: Math, esc: Escape, unit: str,
                   poly: Callable[[sympy.Expr], str]) -> str:
    """``It reads H, so H is kept from the forward pass until here; recomputing
    it instead costs its forward op, 2BDF FLOPs.``"""
    t = f"${m.t(f.tensor)}$"
    head = esc("It reads ") + t + esc(", so ") + t + esc(" is kept from the forward pass until "
                                                         "here")
    if f.producer is None:
        role = layer.tensor(f.tensor).role
        what = {"index": "an index the layer is given", "mask": "a mask the layer is given"}.get(
            role, "the layer's input")
        return head + esc(f" ({what}: nothing here computes it again).")
    op = layer.ops[f.producer]
    cost = []
    if f.flops != 0:
        cost.append(f"${poly(f.flops)}$" + esc(f" {unit}"))
    if f.elementwise != 0:
        cost.append(f"${poly(f.elementwise)}$" + esc(" elementwise FLOPs"))
    return (head + esc("; recomputing it instead runs the op that writes it, ")
            + f"${m.t(op.output)}$" + esc(", again: ")
            + (esc(" and ").join(cost) if cost else esc("no FLOPs")) + esc("."))


def rule_sentences(derivation: Any, shapes: Sequence[ShapeFact], sums: Sequence[TokenSum],
                   saved: Sequence[SavedFact], m: Math, esc: Escape, unit: str,
                   poly: Callable[[sympy.Expr], str], shape_poly: Any) -> dict[int, list[str]]:
    """Per rule (its position), its sentences of why."""
    layer = derivation.layer
    out: dict[int, list[str]] = {i: [] for i in range(len(derivation.rules))}
    for f in shapes:
        r = derivation.rules[f.rule]
        matrix = m.matrix(r.matrix_form)
        out[f.rule].append(shape_sentence(f, matrix, layer, m, esc, shape_poly))
    first = True
    for s in sums:
        if first or not s.every_token:
            out[s.rule].append(token_sentence(s, layer, m, esc))
            first = first and not s.every_token
        else:  # said in full once: the same reason again
            letters = ", ".join(f"${P.index_list([x])}$" for x in s.letters)
            out[s.rule].append(esc("It sums over ") + letters
                               + esc(" too: all-reduced the same way."))
    said: set[str] = set()
    by_name = {f.tensor: f for f in saved}
    for i, r in enumerate(derivation.rules):
        for name in r.reads:
            if name in by_name and name not in said:
                said.add(name)
                out[i].append(saved_sentence(by_name[name], layer, m, esc, unit, poly))
    return out


def op_groups(derivation: Any, rows: Sequence[dict[str, Any]], m: Math,
              esc: Escape) -> list[dict[str, Any]]:
    """The backward rows in the order they run, grouped by the forward op
    they differentiate (a gradient's sum row goes with its last part's op):
    each group's ``op`` (its forward index form), ``number``, ``component``
    (its declared component's name, escaped, or None) and ``rows``."""
    from ..count.components import op_rows

    layer = derivation.layer
    named = {k: name for name, kind, ks in op_rows(layer) for k in ks if kind == "component"}
    groups: list[dict[str, Any]] = []
    for row in rows:
        k = derivation.rules[row["rule"] if row["rule"] is not None else row["last"]].op
        if not groups or groups[-1]["k"] != k:
            op = layer.ops[k]
            groups.append({"k": k, "number": k + 1, "op": op.latex(m),
                           "grad": m.t("d" + op.output), "rows": [],
                           "component": esc(named[k]) if k in named else None})
        groups[-1]["rows"].append(row)
    return groups
