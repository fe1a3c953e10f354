"""The hybrid section of a whole model's sheet: the sequence mixers of its
layers that carry a state (a component with a prefix sum or a linear
recurrence, or a loop through a product: a state-space or linear-attention
mixer, Mamba's scan, Mamba-2's chunked SSD, the gated DeltaNet's chunk loop) beside those of its layers without (attention: the component
whose cost per token grows with the length), per token of training, and the
sequence length from which the second costs more than the first.  A loop over
chunks that does not count the first chunk's products with its zero state (the
gated DeltaNet's) costs per token a term in ``1/S`` too: the crossing then solves
the quadratic the difference of the two costs, times ``S``, makes.

Every formula comes from the engine's counts: the matmul-type training FLOPs of
the component's ops (one copy, forward and their backward rules), divided by
the model's tokens, defined dims replaced by their formulas, ``a + b S + c / S``
in the sequence length ``S``; the crossing solves the equality of two such
costs exactly.  Shown only for a model with blocks of both kinds
(templates ``hybrid.*.j2``)."""

from __future__ import annotations

from typing import Any

import sympy

from ..core.ir import dim_symbol, substitute
from ..core.records import Derivation
from ..count.explain import SheetCounts
from ..ops.loop import Loop
from ..ops.prefix import PrefixSum
from ..ops.recurrence import Recurrence
from .notation import Math
from .plots import sequence_axis


def _linear(expr: sympy.Expr, s: sympy.Symbol
            ) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr] | None:
    """``(a, b, c)`` with ``expr = a + b s + c / s``, a, b and c free of ``s``; None
    otherwise."""
    times = sympy.expand(sympy.expand(expr) * s)
    if not times.is_polynomial(s):
        return None
    poly = sympy.Poly(times, s)
    if poly.degree() > 2:
        return None
    c, a, b = (sympy.expand(poly.coeff_monomial(s ** k)) for k in range(3))
    return a, b, c


def _largest_root(coefficients: tuple[sympy.Expr, sympy.Expr, sympy.Expr]) -> sympy.Expr | None:
    """The largest real root of ``q2 S^2 + q1 S + q0`` (numbers), exactly; None without one."""
    q2, q1, q0 = coefficients
    x = sympy.Dummy("x")
    roots = [r for r in sympy.roots(sympy.Poly(q2 * x ** 2 + q1 * x + q0, x)) if r.is_real]
    return max(roots) if roots else None


def _group(value: int) -> str:
    return f"{value:,}".replace(",", "{,}")


def hybrid_context(derivation: Derivation, counts: SheetCounts, m: Math, esc: Any
                   ) -> dict[str, Any] | None:
    """None unless the model has blocks of both kinds; else ``length`` (the
    sequence dim, math), ``stateful`` and ``attending``: each distinct mixer's
    blocks' ``name`` (their titles, escaped), its component's name ``mixer``, ``per_token`` (its
    training FLOPs per token, math), ``slope`` (the coefficient of the length, math),
    ``inverse`` (that of its inverse, math, or None); ``inverse`` (whether any has one);
    and ``crossings``: for each pair, the blocks' names and their mixers' (``attending``,
    ``stateful``, ``attending_mixer``, ``stateful_mixer``), ``length`` (None when the second never costs more), the crossing
    length as ``num`` / ``den`` (the difference of the constant terms over that of the
    coefficients of the length, math) or, when a cost has a term in the inverse length, as
    the largest root of ``den S^2 + linear S + inverse`` (the difference of the costs times
    the length; ``inverse`` None otherwise), ``value`` (it at the worked configuration, math, or None) and
    ``first`` (the least whole length beyond it, math, or None)."""
    layer = derivation.layer
    axis = sequence_axis(layer)
    if counts.model is None or layer.tokens is None or axis.dim is None:
        return None
    s = dim_symbol(axis.dim)
    subs = dict(layer.substitutions)
    kinds = {op.output: isinstance(op, (PrefixSum, Recurrence, Loop)) for op in layer.ops}
    costs = counts.costs

    def per_token(outputs: set[str]) -> sympy.Expr:
        """The training FLOPs per token of the ops writing ``outputs`` (one copy)."""
        total = sum((c.flops for op, c in zip(layer.ops, costs.forward) if op.output in outputs),
                    sympy.Integer(0)) + sum(
            (c.flops for r, c in zip(derivation.rules, costs.backward)
             if layer.ops[r.op].output in outputs), sympy.Integer(0))
        return sympy.expand(substitute(total / layer.tokens, subs))

    stateful, attending = [], []
    for block in layer.blocks:
        ops = set(block.ops)
        state = any(kinds.get(o, False) for o in ops)
        # the block's sequence mixer: the component holding its prefix sums or recurrence,
        # else the one whose cost per token grows with the length (attention)
        mixer = None
        for comp in layer.components:
            if not set(comp.ops) <= ops:
                continue
            cost = per_token(set(comp.ops))
            line = _linear(cost, s)
            if line is None:
                return None
            if (any(kinds.get(o, False) for o in comp.ops) if state else line[1] != 0):
                mixer = (comp.name.split(" (")[0], cost, line)   # without its blocks' label
                break
        if mixer is None:
            return None
        # the block in the reader's words: its title (its name when it has none)
        entry = {"name": esc(block.title or block.name), "mixer": esc(mixer[0]),
                 "per_token": m.poly(mixer[1]), "line": mixer[2], "slope": m.poly(mixer[2][1]),
                 "inverse": None if mixer[2][2] == 0 else m.poly(mixer[2][2])}
        same = [e for e in (stateful if state else attending) if e["line"] == entry["line"]]
        if same:            # another block with the same mixer (Jamba's MLP and MoE layers)
            same[0]["name"] += esc(" and ") + entry["name"]
            continue
        (stateful if state else attending).append(entry)
    if not stateful or not attending:
        return None
    worked = counts.worked
    at = {} if worked is None else {dim_symbol(k): v for k, v in worked.config}
    crossings = []
    for a in attending:
        for st in stateful:
            (a0, a1, ac), (s0, s1, sc) = a["line"], st["line"]
            gap = sympy.expand(a1 - s1)
            inverse = sympy.expand(ac - sc)
            length = None if gap == 0 else sympy.cancel((s0 - a0) / gap)
            value = first = None
            if length is not None and at:
                gap_at = substitute(gap, subs).xreplace(at)
                if inverse == 0:
                    v = substitute(length, subs).xreplace(at)
                else:   # the positive root of gap S^2 + (a0 - s0) S + (ac - sc) = 0
                    q = tuple(substitute(x, subs).xreplace(at)
                              for x in (gap, sympy.expand(a0 - s0), inverse))
                    v = _largest_root(q) if all(x.is_number for x in q) else None
                if v is not None and v.is_number and gap_at.is_number:
                    if gap_at <= 0:
                        length = None          # the second never overtakes at these sizes
                    else:
                        value = (_group(int(v)) if v.is_integer else
                                 f"{float(v):,.6g}".replace(",", "{,}"))
                        first = _group(int(sympy.floor(v)) + 1)
            crossings.append({"attending": a["name"], "stateful": st["name"],
                              "attending_mixer": a["mixer"], "stateful_mixer": st["mixer"],
                              "length": None if length is None else True,
                              "num": m.poly(sympy.expand(s0 - a0)), "den": m.poly(gap),
                              "inverse": None if inverse == 0 else m.poly(inverse),
                              "linear": None if inverse == 0 else m.poly(sympy.expand(a0 - s0)),
                              "value": value, "first": first})
    for e in stateful + attending:
        del e["line"]
    return {"length": m.poly(s), "stateful": stateful, "attending": attending,
            "inverse": any(e["inverse"] is not None for e in stateful + attending),
            "crossings": crossings,
            "at": None if worked is None or worked.name is None else esc(worked.name)}
