"""The worked example of a sheet, walked in numbers the way the third seed
walks its toy layer (``2 × 10 × 4 × 3 = 240``, ``240 + 240 + 240 = 720 =
6 × 12 × 10``): each product's count as the product of the dims' values,
the totals, the 6N rule, and the memory in bytes.

Every line is an :class:`~symflops.sheets.equations.Equation` of whole
numbers (printed with grouped digits), kept by ``show`` so that the
equation test proves it; the numbers come from
:func:`symflops.count.worked.worked_example`.
"""

from __future__ import annotations

from typing import Any, Callable

import sympy

from . import printing as P
from .equations import Equation, Factor as EqFactor, Part, chain, side
from .notation import Math
from .words import Escape
from ..count.worked import WorkedExample


def _n(v: int) -> str:
    return f"{v:,}".replace(",", "{,}")


def _ints(*values: int) -> tuple[sympy.Integer, ...]:
    return tuple(sympy.Integer(v) for v in values)


def example_context(w: WorkedExample, m: Math, esc: Escape, unit: str,
                    show: Callable[[Equation], str], precision: Any,
                    rows: dict[str, str] | None = None) -> dict[str, Any]:
    """The lines of the walk (escaped text with math spans)."""
    def eq(*sides: Any) -> str:
        return show(chain(*sides, numbers=True))

    config = r",\ ".join(f"{P.symbol_name(k)} = {_n(v)}" for k, v in w.config)
    steps = []
    for s in w.steps:
        if s.kind == "component":
            fwd = s.value
            parts = [(esc(f"forward "), fwd), (esc("backward "), s.backward)]
            text = (esc(s.label) + esc(f" (one copy, × {s.copies:,}): ")
                    + esc(", ").join(f"{label}${_n(v)}$" for label, v in parts))
            steps.append(text)
            continue
        key = (s.factors, s.value, s.copies)
        if steps and isinstance(steps[-1], dict) and steps[-1]["key"] == key:
            steps[-1]["names"].append((s.kind, f"${m.t(s.label)}$"))
            continue
        steps.append({"key": key, "names": [(s.kind, f"${m.t(s.label)}$")], "step": s})
    groups = [x for x in steps if not isinstance(x, str)]
    steps = [x if isinstance(x, str) else _step_line(x, eq, esc, unit) for x in steps]
    # forward and backward totals from the steps, with their copies
    def total(kind: str, value: int) -> str | None:
        if w.steps and w.steps[0].kind == "component":
            vals = [(s.value if kind == "forward" else s.backward, s.copies) for s in w.steps]
        else:
            vals = [(s.value, s.copies) for s in w.steps if s.kind == kind]
        vals = [(v, n) for v, n in vals if v != 0]
        if not vals:
            return None
        parts = tuple(Part(terms=_ints(v), factors=(EqFactor(sympy.Integer(n)),) if n != 1 else ())
                      for v, n in vals)
        if len(parts) == 1 and not parts[0].factors:
            return None
        return eq(parts, side(sympy.Integer(value)))
    lines = []
    by_component = bool(w.steps) and w.steps[0].kind == "component"
    if by_component:  # the components' forward and backward, every copy, add up to training
        by_copies: dict[int, list[int]] = {}
        for s in w.steps:
            by_copies.setdefault(s.copies, []).extend(v for v in (s.value, s.backward) if v)
        training = [tuple(Part(terms=_ints(*vals),
                               factors=(EqFactor(sympy.Integer(n)),) if n != 1 else ())
                          for n, vals in by_copies.items()), side(sympy.Integer(w.training))]
    elif len(steps) == 1 and len(groups[0]["names"]) > 1 and sum(
            1 for s in w.steps) * w.steps[0].value * w.steps[0].copies == w.training:
        # every product costs the same: training is their number times one of them
        n = len(groups[0]["names"])
        training = [(Part(factors=_factors(n, w.steps[0].value)),),
                    side(sympy.Integer(w.training))]
    else:
        for kind, value in (("forward", w.forward), ("backward", w.backward)):
            t = total(kind, value)
            if t is not None:
                lines.append(esc(f"{kind.capitalize()}: ") + f"${t}$" + esc(f" {unit}."))
        training = [side(sympy.Integer(w.forward), sympy.Integer(w.backward)),
                    side(sympy.Integer(w.training))]
    rule = ""
    if w.six_n == 0 and w.beyond:
        rule = esc(" (no parameter is read by a product, so 6ND is 0: every FLOP is beyond 6N).")
    elif w.six_n is not None and w.tokens is not None and w.six_n % (6 * w.tokens) == 0:
        n_active = w.six_n // (6 * w.tokens)
        beyond = sum(v for _, v in w.beyond)
        split = (Part(factors=(EqFactor(sympy.Integer(6)), EqFactor(sympy.Integer(n_active)),
                               EqFactor(sympy.Integer(w.tokens)))),)
        if beyond:
            split += (Part(terms=_ints(beyond)),)
        training.append(split)
        rule = esc(" (6 × the dense parameters a token reads × the tokens"
                   + (", plus the parts beyond 6N)." if beyond else ": the 6ND rule).")
                   ) if n_active != w.params else esc(" (6 × parameters × tokens: the 6ND rule).")
    elif w.per_param is not None and w.per_param[0] == 6:
        training.append((Part(factors=(EqFactor(sympy.Integer(6)), EqFactor(sympy.Integer(w.params)),
                                       EqFactor(sympy.Integer(w.per_param[1])))),))
        rule = esc(" (6 × parameters × tokens: the 6ND rule).")
    lines.append(esc("Training: ") + f"${eq(*training)}$" + esc(f" {unit}") + (rule or esc(".")))
    frozen = w.params - w.trainable
    parts = (Part(factors=_factors(w.trainable, w.bytes_per_param)),) + (
        (Part(factors=_factors(frozen, precision.params)),) if frozen else ()) + tuple(
        Part(factors=_factors(n, width)) for width, n in w.activation_groups) + (
        (Part(terms=_ints(w.buffer_bytes)),) if w.buffer_bytes else ())
    whole = [sympy.Integer(w.fixed_bytes), sympy.Integer(w.activation_bytes)] + (
        [sympy.Integer(w.buffer_bytes)] if w.buffer_bytes else [])
    memory = [esc("Memory: ") + f"${eq(parts, side(*whole), side(sympy.Integer(w.total_bytes)))}$"
              + esc(f" bytes ({w.total_bytes / 1e9:.4g} GB).")]
    return {"name": esc(w.name) if w.name else None, "config": config, "steps": steps,
            "lines": lines, "memory": memory}


def _factors(*values: int) -> tuple[EqFactor, ...]:
    return tuple(EqFactor(sympy.Integer(v)) for v in values)


def _step_line(group: dict[str, Any], eq: Callable[..., str], esc: Escape, unit: str) -> str:
    """``forward H, Y; backward dW_out, dH: each 2 × 1,024 × 768 × 3,072 = …``."""
    s = group["step"]
    by: dict[str, list[str]] = {}
    for kind, name in group["names"]:
        by.setdefault(kind, []).append(name)
    who = esc("; ").join(esc(f"{kind} ") + ", ".join(names) for kind, names in by.items())
    if s.factors is not None and len(s.factors) > 1:
        factors = tuple(EqFactor(sympy.Integer(f)) for f in s.factors)
        math = eq((Part(factors=factors),), side(sympy.Integer(s.value)))
    else:
        math = _n(s.value)
    each = esc(" each") if len(group["names"]) > 1 else ""
    return (who + esc(":") + each + " " + f"${math}$" + esc(f" {unit}")
            + (esc(f" (one copy; × {s.copies:,})") if s.copies != 1 else ""))
