"""The parts a failing claim's difference is made of (see
:mod:`symflops.checks.explain`): the pieces the engine counts, each named and
traced to the tensors, ops and rules it comes from, grouped, and the fewest
groups whose sum is exactly the difference."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy

from ..core.ir import dim_symbol, substitute
from ..core.polynomial import exact_quotient
from ..count.attention import attention as attention_terms
from ..count.facts import backward_facts
from ..count.names import find
from ..count.params import live_fractions
from ..count.recompute import recompute
from .claim import Claim

if TYPE_CHECKING:  # pragma: no cover
    from .requests import Request

NORMS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}


@dataclass(frozen=True)
class Piece:
    """A part the engine counts: what it is, the tensor or op it comes from,
    forward or backward (or memory), and its value."""

    label: str
    item: str
    phase: str
    value: sympy.Expr


def _kind(claim: Claim, request: "Request") -> str | None:
    """What the claim is about: FLOPs, bytes or elements (None: mixed or none)."""
    kinds = {k for k, _ in claim.unit}
    if len(kinds) == 1:
        return next(iter(kinds))
    return None


def _per(claim: Claim) -> str:
    pers = set()
    for name in claim.names:
        q = find(name) or find(name.split(".", 1)[-1])
        if q is not None:
            pers.add(q.per)
    return "token" if "token" in pers else "sequence" if "sequence" in pers else "pass"


def _flop_pieces(request: "Request") -> list[Piece]:
    decl, c = request.declaration, request.convention
    exact = dataclasses.replace(c, attention=None)
    s, _, costs = decl.summary(exact)
    d = decl.derivation(None)
    layer = d.layer
    pieces: list[Piece] = []
    att = attention_terms(d, costs.unit, costs.forward_copies, costs.backward_copies)
    for t in att.terms:
        if t.full is None:
            continue
        phase = "forward" if t.rule is None else "backward"
        item = layer.ops[t.op].output if t.rule is None else d.rules[t.rule].grad
        pieces.append(Piece("the pairs t > s counted over the full square", item, phase,
                            sympy.expand((t.full - t.flops) * t.copies)))
        pieces.append(Piece("the diagonal t = s of the causal triangle (S(S+1)/2 pairs, not "
                            "S²/2)", item, phase, sympy.expand((t.flops - t.full / 2) * t.copies)))
    for policy in ("full", "selective"):
        if policy == "selective" and not layer.selective:
            continue
        r = recompute(d, costs, policy)
        for k, op in enumerate(layer.ops):
            if op.output in r.ops and costs.forward[k].flops != 0:
                pieces.append(Piece(f"the forward ops run again (--recompute {policy})", op.output,
                                    "recompute", sympy.expand(costs.forward[k].flops
                                                              * costs.forward_copies[k])))
        for t in att.terms:  # a recomputed causal product over the full square
            if t.full is not None and t.rule is None and layer.ops[t.op].output in r.ops:
                pieces.append(Piece("the pairs t > s counted over the full square",
                                    layer.ops[t.op].output, f"recompute {policy}",
                                    sympy.expand((t.full - t.flops) * t.copies)))
    for p in backward_facts(d, costs).products:
        for m in p.missing:
            if m.reason == "frozen":
                pieces.append(Piece("the weight gradients frozen parameters do not get",
                                    m.tensor, "backward", sympy.expand(p.forward * p.copies)))
    live = live_fractions(layer)
    for k, op in enumerate(layer.ops):
        phi = live.get(op.output, 1)
        if phi == 1:
            continue
        dead = sympy.expand((1 - phi) * costs.forward[k].flops * costs.forward_copies[k])
        if dead != 0:
            pieces.append(Piece("the expert slots no token fills (capacity padding)", op.output,
                                "forward", dead))
        for i, r_ in enumerate(d.rules):
            if r_.op == k and costs.backward[i].flops != 0:
                pieces.append(Piece("the expert slots no token fills (capacity padding)",
                                    r_.grad, "backward", sympy.expand(
                                        (1 - phi) * costs.backward[i].flops
                                        * costs.backward_copies[i])))
    _, counted, _ = decl.summary(c)  # the attention products as the convention counts them
    for t in counted.terms:
        item = layer.ops[t.op].output if t.rule is None else d.rules[t.rule].grad
        pieces.append(Piece("the attention products (over two sequence letters)", item,
                            "forward" if t.rule is None else "backward", t.total))
    for k, op in enumerate(layer.ops):
        if costs.forward[k].flops != 0:
            pieces.append(Piece(f"the products of {op.output}", op.output, "forward",
                                sympy.expand(costs.forward[k].flops * costs.forward_copies[k])))
    for i, r_ in enumerate(d.rules):
        if costs.backward[i].flops != 0:
            pieces.append(Piece(f"the products of {layer.ops[r_.op].output}", r_.grad, "backward",
                                sympy.expand(costs.backward[i].flops * costs.backward_copies[i])))
    return pieces


def _memory_pieces(request: "Request", kind: str) -> list[Piece]:
    decl, c = request.declaration, request.convention
    s, _, costs = decl.summary(c)
    d = decl.derivation(c.attention)
    layer = d.layer
    p = costs.precision
    saved = costs.saved
    if c.recompute is not None:
        saved = recompute(d, costs, c.recompute).kept
    aux = {f.tensor: op.kind for op in layer.ops for f in getattr(op, "aux", ())
           if getattr(op, "kind", "") in ("layernorm", "rmsnorm")}
    pieces: list[Piece] = []
    for t in saved:
        value = _size(t, p, kind)
        if t.name in aux:
            label = (f"the {NORMS.get(aux[t.name], aux[t.name])}s' per-row statistics, one "
                     "1/std per row")
        elif t.mask:
            label = "the dropout keep-masks"
        else:
            label = f"the saved tensor {t.name}"
        pieces.append(Piece(label, t.name, "memory", value))
    if c.recompute is None:
        none_bytes = {t.name: t for t in saved}
        for policy in ("full", "selective"):
            if policy == "selective" and not layer.selective:
                continue
            kept = {t.name for t in recompute(d, costs, policy).kept}
            dropped = [t for n, t in none_bytes.items() if n not in kept]
            added = [t for t in recompute(d, costs, policy).kept if t.name not in none_bytes]
            value = sympy.expand(
                sum((_size(t, p, kind) for t in dropped), sympy.Integer(0))
                - sum((_size(t, p, kind) for t in added), sympy.Integer(0)))
            if value != 0:
                for t in dropped:
                    pieces.append(Piece(f"the tensors --recompute {policy} does not keep", t.name,
                                        "memory", _size(t, p, kind)))
                for t in added:
                    pieces.append(Piece(f"the tensors --recompute {policy} does not keep", t.name,
                                        "memory", -_size(t, p, kind)))
    m = s.memory
    rows = (("parameters", m.params, p.params), ("gradients", m.grads, p.grads),
            ("optimizer state", m.optimizer, p.optimizer),
            ("master weights", s.trainable_params if p.master else sympy.Integer(0), p.master))
    for label, elements, width in rows:
        value = sympy.expand(elements * (width if kind == "bytes" else 1))
        if value != 0:
            pieces.append(Piece(f"the {label}", label, "memory", value))
    return pieces


def _size(t: Any, p: Any, kind: str) -> sympy.Expr:
    """A saved tensor's elements, or bytes at the policy's width, every copy."""
    return sympy.expand(t.total * ((p.masks if t.mask else p.activations) if kind == "bytes" else 1))


def _groups(pieces: list[Piece]) -> list[tuple[str, sympy.Expr, tuple[str, ...]]]:
    """Pieces of one label summed: forward ones, backward ones, and all."""
    by: dict[str, list[Piece]] = {}
    for piece in pieces:
        by.setdefault(piece.label, []).append(piece)
    out = []
    seen: set[tuple[str, sympy.Expr]] = set()
    for label, items in by.items():
        phases = sorted({i.phase for i in items})
        subsets = [[i for i in items if i.phase in chosen]
                   for n in range(1, len(phases) + 1)
                   for chosen in itertools.combinations(phases, n)]
        for subset in subsets:
            value = sympy.expand(sum((i.value for i in subset), sympy.Integer(0)))
            names = tuple(dict.fromkeys(i.item for i in subset))
            if value != 0 and (label, value) not in seen:
                seen.add((label, value))
                out.append((label, value, names))
    return out


def _coefficients(expr: sympy.Expr) -> dict[Any, sympy.Expr] | None:
    expanded = sympy.expand(expr)
    if not expanded.is_polynomial():
        return None
    return dict(expanded.as_coefficients_dict())


def _fits(part: dict[Any, sympy.Expr], target: dict[Any, sympy.Expr]) -> bool:
    """Whether every monomial of a part is one of the target's."""
    return all(m in target for m in part)


#: The most groups a difference is matched with.
MAX_TERMS = 3


def terms(claim: Claim, request: "Request"
           ) -> list[tuple[str, sympy.Expr, tuple[str, ...], int]]:
    """(label, value, items, sign): groups whose sum, times the sign, is the difference."""
    difference = sympy.expand(claim.lhs - claim.rhs)
    if difference == 0 or request.others:
        return []
    kind = _kind(claim, request)
    if kind == "FLOPs":
        pieces = _flop_pieces(request)
    elif kind in ("bytes", "elements"):
        pieces = _memory_pieces(request, kind)
    else:
        return []
    layer = request.declaration.layer
    subs = layer.substitutions  # the costs are in the declared dims
    if subs:
        pieces = [dataclasses.replace(p, value=substitute(p.value, subs)) for p in pieces]
    per = _per(claim)
    if per != "pass":
        by = layer.tokens if per == "token" else layer.sequences
        by = substitute(by, subs) if (by is not None and subs) else by
        if by is None:
            return []
        scaled = []
        for piece in pieces:
            q = exact_quotient(piece.value, by)
            if q is not None:
                scaled.append(dataclasses.replace(piece, value=q))
        pieces = scaled
    if request.given:
        given = {dim_symbol(k): v for k, v in request.given.items()}
        pieces = [dataclasses.replace(p, value=sympy.expand(p.value.xreplace(given)))
                  for p in pieces]
    phase = _phase(claim)
    if phase is not None:
        pieces = [p for p in pieces if p.phase in (phase, "memory")]
    groups = _groups(pieces)
    for sign in (1, -1):
        target = _coefficients(sign * difference)
        if target is None:
            return []
        usable = [(label, value, items, c) for label, value, items in groups
                  if (c := _coefficients(value)) is not None and _fits(c, target)]
        for n in range(1, MAX_TERMS + 1):
            found = []
            for combo in itertools.combinations(usable, n):
                if len({g[0] for g in combo}) != n:
                    continue
                total: dict[Any, sympy.Expr] = {}
                for g in combo:
                    for m, c in g[3].items():
                        total[m] = total.get(m, 0) + c
                if {m: c for m, c in total.items() if c != 0} == target:
                    found.append(combo)
                    if len(found) > 1:
                        return []  # two readings: say neither
            if found:
                return [(label, value, items, sign) for label, value, items, _ in found[0]]
    return []


def _phase(claim: Claim) -> str | None:
    """forward or backward when every FLOPs quantity the claim names is one
    of them; None when it names training or executed totals."""
    phases = set()
    for name in claim.names:
        tail = name.rsplit(".", 1)[-1]
        phases.add("forward" if tail in ("forward", "inference") else
                   "backward" if tail == "backward" else None)
    return phases.pop() if len(phases) == 1 else None
