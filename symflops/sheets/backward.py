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

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy

from . import printing as P
from .notation import Math
from ..count.cost import Costs
from ..core.ir import Einsum, Factor
from ..core.records import Derivation, IndexTerm, MatrixProduct, Rule, matrix_form


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


def relabel(e: Einsum, target: Sequence[str]) -> Einsum:
    """``e`` with its output letters renamed to ``target`` (position by
    position) and each summed letter that would collide renamed to a fresh
    one, so that the contributions to one gradient are written in one set of
    letters (``dX_{td} = Σ_h dV_{th} W_{dh} + Σ_h dQ_{th} W_{dh}``, never a
    ``dQ_{sh}`` whose ``s`` is on no left side).  ``e`` unchanged when its
    output's letters do not map one to one onto ``target``."""
    old = e.output.indices
    mapping: dict[str, str] = {}
    for a, b in zip(old, target):
        if mapping.setdefault(a, b) != b:
            return e
    if len(old) != len(target) or len(set(mapping.values())) != len(mapping):
        return e
    taken = set(target)
    for x in e.summed:
        if x in mapping:
            continue
        fresh = x
        while fresh in taken or fresh in old:
            fresh += "'"
        mapping[x] = fresh
        taken.add(fresh)

    def moved(f: Factor) -> Factor:
        return dataclasses.replace(f, indices=tuple(mapping.get(i, i) for i in f.indices))

    return Einsum(moved(e.output), tuple(moved(f) for f in e.operands), e.coefficient)


def _letters_of(derivation: Derivation) -> dict[str, tuple[str, ...]]:
    """Each gradient's output letters: those of its first contribution."""
    first: dict[str, tuple[str, ...]] = {}
    for r in derivation.rules:
        first.setdefault(r.grad, r.terms[0].output.indices)
    return first


def _terms_in(r: Rule, letters: Sequence[str]) -> tuple[Einsum, ...]:
    return tuple(relabel(t, letters) for t in r.terms)


def _lhs(r: Rule, k: int, n: int, m: Math, terms: Sequence[Einsum] | None = None) -> str:
    out = (terms or r.terms)[0].output
    if n == 1:
        return m.ix(out)
    return contribution_name(m.t(r.grad), k, n) + f"_{{{P.index_list(out.indices)}}}"


def _form(r: Rule, terms: Sequence[Einsum]) -> MatrixProduct | None:
    """The rule's matrix form, in the letters ``terms`` write it in."""
    return matrix_form(terms[0]) if len(terms) == 1 else None


def _matrix(r: Rule, k: int, n: int, m: Math, terms: Sequence[Einsum]) -> str | None:
    form = _form(r, terms)
    text = m.matrix(form)
    if text is None or n == 1:
        return text
    head = m.t(form.output) + " = "
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
    letters = _letters_of(derivation)
    seen: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    for i, (r, c) in enumerate(zip(derivation.rules, costs.backward)):
        n, k = parts.count[r.grad], parts.position[i]
        einsums = _terms_in(r, letters[r.grad]) if n > 1 else r.terms
        terms = [IndexTerm(t.coefficient, t.operands, (), t.summed) for t in einsums]
        lhs = _lhs(r, k, n, m, einsums)
        pieces = [m.terms([t]) for t in terms]
        rows.append({
            "grad": contribution_name(m.t(r.grad), k, n),
            "index": f"{lhs} = " + m.terms(terms),
            "index_lines": _lines(lhs, pieces),
            "matrix": _matrix(r, k, n, m, einsums),
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
    forms = [_form(r, _terms_in(r, out.indices)) for r in rs]
    notes = {P.matrix_note(f) for f in forms if f is not None}
    if all(f is not None for f in forms) and len(notes) == 1:
        # each part's product without its note, the note (what is flattened,
        # what the product is taken per) once after the sum, never inside it
        note = notes.pop()
        bodies = [P.matrix_product(f, m.poly, m.names) for f in forms]
        matrix = (f"{grad} = " + " + ".join(names) + " = "
                  + " + ".join(b[:len(b) - len(note)] if note else b for b in bodies) + note)
    else:
        matrix = f"{grad} = " + " + ".join(names)
    letters = out.indices
    every = [IndexTerm(t.coefficient, t.operands, (), t.summed)
             for r in rs for t in _terms_in(r, letters)]
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
