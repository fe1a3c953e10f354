"""A sheet's exercises and their answers (the records of
:mod:`symflops.count.exercises`, seed 0), worded for the sheet: tensor names
and counts in math, user text escaped.  The answers go to the appendix."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

import sympy

from . import printing as P
from .notation import Math
from .words import Escape, names
from ..count.exercises import Exercise


def _n(v: Any) -> str:
    if isinstance(v, Fraction):
        if v.denominator == 1:
            return _n(v.numerator)
        return rf"\tfrac{{{_n(v.numerator)}}}{{{_n(v.denominator)}}} \approx {float(v):.4g}"
    if isinstance(v, int):
        return f"{v:,}".replace(",", "{,}")
    return f"{v:.6g}"


def _ts(m: Math, ns: Any, esc: Escape, most: int = 8) -> str:
    ns = list(ns)
    text = names([f"${m.t(n)}$" for n in ns[:most]], esc)
    return text + (esc(f" and {len(ns) - most} more") if len(ns) > most else "")


def drills_context(found: tuple[Exercise, ...], m: Math, esc: Escape, unit: str,
                   poly: Callable[[sympy.Expr], str]) -> dict[str, Any] | None:
    if not found:
        return None
    first = found[0]
    config = r",\ ".join(f"{P.symbol_name(k)} = {_n(v)}" for k, v in first.config)
    items = [{"question": _question(e, m, esc, unit), "answer": _answer(e, m, esc, unit, poly)}
             for e in found]
    return {"at": esc(first.config_name) if first.config_name else f"${config}$",
            "questions": items}


def _question(e: Exercise, m: Math, esc: Escape, unit: str) -> str:
    a = e.answer
    if e.kind == "rule_flops":
        return (esc(f"How many matmul-type {unit} does the rule computing ")
                + f"${m.t(e.subject)}$" + esc(" cost, for one copy?"))
    if e.kind == "saved":
        return esc("Which tensors must training keep for the backward pass, for which rules, and "
                   "how many bytes are they?")
    if e.kind == "allreduce":
        return esc("Which gradients do data-parallel replicas all-reduce each step, and how many "
                   "bytes is that?")
    if e.kind == "memory":
        return esc(f"How many bytes does training keep in memory under {e.subject}, and how much "
                   "of it grows with the tokens?")
    if e.kind == "double":
        return (esc("By what factor do the training " + unit + " and the saved activation bytes "
                    "change when ") + f"${P.symbol_name(e.subject)}$" + esc(" doubles (from ")
                + f"${_n(a['value'])}$" + esc(" to ") + f"${_n(2 * a['value'])}$" + esc(")?"))
    if e.kind == "six_n":
        return esc("How far is training from 6N × tokens (N the dense parameters a token reads), "
                   "and which ops make the difference?")
    return esc(f"How many more {unit} does full recomputation run per step, and how many "
               "activation bytes does it keep?")


def _answer(e: Exercise, m: Math, esc: Escape, unit: str,
            poly: Callable[[sympy.Expr], str]) -> str:
    a = e.answer
    if e.kind == "rule_flops":
        return (f"${poly(a['formula'])} = {_n(a['flops'])}$" + esc(f" {unit} (the rule ")
                + f"${m.t(e.subject)}$" + esc(" in the backward table).")
                )
    if e.kind == "saved":
        kept = esc("; ").join(f"${m.t(t)}$" + esc(" (for ") + _ts(m, r, esc, 4) + esc(")")
                              for t, r in a["tensors"][:10])
        more = esc(f"; and {len(a['tensors']) - 10} more") if len(a["tensors"]) > 10 else ""
        return (kept + more + esc(": ") + f"${_n(a['elements'])}$" + esc(" elements, ")
                + f"${_n(a['bytes'])}$" + esc(" bytes."))
    if e.kind == "allreduce":
        return (esc("the gradients of the trained weights (") + _ts(m, ["d" + g for g in a["gradients"]], esc)
                + esc("), since each sums over every token: ") + f"${_n(a['elements'])}$"
                + esc(f" elements at {a['width']} bytes, ") + f"${_n(a['bytes'])}$" + esc(" bytes."))
    if e.kind == "memory":
        return (f"${_n(a['fixed'])}$" + esc(f" bytes for the model ({a['per_param']} per trained "
                                            "parameter) + ") + f"${_n(a['activations'])}$"
                + esc(" bytes of activations = ") + f"${_n(a['total'])}$" + esc(" bytes."))
    if e.kind == "double":
        flops = (esc(f"training {unit} ") + f"${_n(a['flops'])} \\to {_n(a['flops_doubled'])}$"
                 + esc(", × ") + f"${_n(a['flops_ratio'])}$") if a["flops_ratio"] is not None \
            else esc(f"no matmul-type {unit} either way")
        kept = (esc("activation bytes ") + f"${_n(a['bytes'])} \\to {_n(a['bytes_doubled'])}$"
                + esc(", × ") + f"${_n(a['bytes_ratio'])}$") if a["bytes_ratio"] is not None \
            else esc("no activation saved either way")
        return flops + esc("; ") + kept + esc(".")
    if e.kind == "six_n":
        parts = esc("; ").join(
            f"${'-' if v < 0 else '+'}{_n(abs(v))}$" + esc(" from ") + f"${m.t(op)}$"
            + esc(f" ({cause.replace('_', ' ')})") for op, cause, _, _, v in a["parts"])
        return (esc("training ") + f"${_n(a['training'])}$" + esc(" = 6 × ")
                + f"${_n(a['n_active'])}$" + esc(" × ") + f"${_n(a['tokens'])}$" + esc(" (")
                + f"${_n(a['six_n'])}$" + esc(") ") + parts + esc("."))
    return (f"${_n(a['recomputed'])}$" + esc(f" more {unit} (") + f"${_n(a['training'])} \\to "
            f"{_n(a['executed'])}$" + esc("); it keeps ") + _ts(m, a["kept"], esc) + esc(": ")
            + f"${_n(a['bytes'])}$" + esc(" bytes instead of ") + f"${_n(a['bytes_none'])}$"
            + esc("."))
