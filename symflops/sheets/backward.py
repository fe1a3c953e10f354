"""The backward-pass section of a sheet: one row per backward product, and
for a gradient that several ops contribute to, the sum that makes it.

A rule computes one *contribution* to a gradient.  When ``dX`` has one
contribution, its row reads ``dX = …``; when it has ``n > 1`` (X read by
several ops: LoRA's ``X``, attention's normalised input), each row reads
``dX^{(k)} = …`` and a further row ``dX = dX^{(1)} + … + dX^{(n)}`` states the
sum, with its ``n - 1`` additions per element as elementwise work, so that no
row prints a part of a gradient as if it were the whole of it.

The flow of gradients is printed as a chain ``dY → dH → dX`` only when it is
one: when each gradient needs exactly the one before it.  Otherwise each
gradient is listed with the gradients it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import sympy

from . import printing as P
from .notation import Math
from ..count.cost import Costs
from ..core.records import Derivation, IndexTerm, Rule


@dataclass(frozen=True)
class Contributions:
    """How many rules add into each gradient, and the position of each rule among them."""

    count: dict[str, int]
    position: tuple[int, ...]  # 1-based, per rule of the derivation

    @staticmethod
    def of(derivation: Derivation) -> "Contributions":
        count: dict[str, int] = {}
        position = []
        for r in derivation.rules:
            count[r.grad] = count.get(r.grad, 0) + 1
            position.append(count[r.grad])
        return Contributions(count, tuple(position))


def contribution_name(grad_latex: str, k: int, n: int) -> str:
    """``dX`` for the only contribution, ``dX^{(k)}`` for the k-th of several."""
    return grad_latex if n == 1 else rf"{{{grad_latex}}}^{{({k})}}"


def _lhs(r: Rule, k: int, n: int, m: Math) -> str:
    out = r.terms[0].output
    if n == 1:
        return m.ix(out)
    return contribution_name(m.t(r.grad), k, n) + f"_{{{P.index_list(out.indices)}}}"


def _matrix(r: Rule, k: int, n: int, m: Math) -> str | None:
    text = m.matrix(r.matrix_form)
    if text is None or n == 1:
        return text
    head = m.t(r.matrix_form.output) + " = "
    assert text.startswith(head), text
    return contribution_name(m.t(r.grad), k, n) + " = " + text[len(head):]


def _lines(lhs: str, pieces: list[str]) -> list[str]:
    return [f"{lhs} &= {pieces[0]}"] + [
        (r"&\quad - " + p[1:]) if p.startswith("-") else (r"&\quad + " + p) for p in pieces[1:]]


def backward_rows(derivation: Derivation, costs: Costs, m: Math,
                  poly: Callable[[sympy.Expr], str]) -> list[dict[str, Any]]:
    """The rows of the backward table, in the order the rules run; a
    gradient's sum row follows its last contribution."""
    layer = derivation.layer
    tensors = layer.tensor_map
    parts = Contributions.of(derivation)
    seen: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    for i, (r, c) in enumerate(zip(derivation.rules, costs.backward)):
        n, k = parts.count[r.grad], parts.position[i]
        terms = [IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms]
        lhs = _lhs(r, k, n, m)
        pieces = [m.terms([t]) for t in terms]
        rows.append({
            "grad": contribution_name(m.t(r.grad), k, n),
            "index": f"{lhs} = " + m.terms(terms),
            "index_lines": _lines(lhs, pieces),
            "matrix": _matrix(r, k, n, m),
            "flops": poly(c.flops),
            "elementwise": poly(c.elementwise),
            "op": m.t(layer.ops[r.op].output),
            "rule": i,
            "sum": False,
        })
        seen.setdefault(r.grad, []).append(i)
        if n > 1 and k == n:
            rows.append({**_sum_row(derivation, seen[r.grad], tensors[r.wrt].elements, m, poly),
                         "last": i})
    return rows


def _sum_row(derivation: Derivation, rules: list[int], elements: sympy.Expr, m: Math,
             poly: Callable[[sympy.Expr], str]) -> dict[str, Any]:
    """``dX = dX^{(1)} + … + dX^{(n)}``, in index and (when every part has one)
    matrix form; ``n - 1`` additions per element of X."""
    rs = [derivation.rules[i] for i in rules]
    n = len(rs)
    grad = m.t(rs[0].grad)
    out = rs[0].terms[0].output
    idx = P.index_list(out.indices)
    names = [contribution_name(grad, k, n) for k in range(1, n + 1)]
    matrices = [m.matrix(r.matrix_form) for r in rs]
    if all(x is not None for x in matrices):
        heads = [m.t(r.matrix_form.output) + " = " for r in rs]
        matrix = (f"{grad} = " + " + ".join(names) + " = "
                  + " + ".join(x[len(h):] for x, h in zip(matrices, heads)))
    else:
        matrix = f"{grad} = " + " + ".join(names)
    every = [IndexTerm(t.coefficient, t.operands, (), t.summed) for r in rs for t in r.terms]
    lhs = m.ix(out)
    return {
        "grad": grad,
        "index": f"{lhs} = " + " + ".join(f"{x}_{{{idx}}}" for x in names),
        "index_lines": _lines(lhs, [m.terms([t]) for t in every]),
        "matrix": matrix,
        "flops": poly(sympy.Integer(0)),
        "elementwise": poly(sympy.expand((n - 1) * elements)),
        "op": None,
        "rule": None,
        "sum": True,
    }


def gradient_flow(derivation: Derivation, m: Math) -> tuple[str | None, list[str]]:
    """``(chain, needs)``: the chain ``dY → dH → dX`` when the gradients of the
    activations and inputs form one, else ``None`` and, for each gradient that
    needs more than one, the gradients it needs (``dX \\leftarrow dY, dU``);
    every other gradient needs the one gradient of the op that reads it."""
    layer = derivation.layer
    tensors = layer.tensor_map
    order = ["d" + n for n in layer.outputs]
    needs: dict[str, list[str]] = {}
    for r in derivation.rules:
        if tensors[r.wrt].is_param:
            continue
        upstream = "d" + layer.ops[r.op].output
        needs.setdefault(r.grad, [])
        if upstream not in needs[r.grad]:
            needs[r.grad].append(upstream)
        if r.grad not in order:
            order.append(r.grad)
    if len(order) < 2:
        return None, []
    is_chain = len(layer.outputs) == 1 and all(needs.get(g) == [order[k]]
                                               for k, g in enumerate(order[1:]))
    if is_chain:
        return r" \;\longrightarrow\; ".join(m.t(g) for g in order), []
    return None, [f"{m.t(g)} \\leftarrow {m.ts(needs[g])}" for g in order
                  if len(needs.get(g, ())) > 1]
