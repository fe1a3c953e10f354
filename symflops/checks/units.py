"""Units of a claim: what each side measures, and the unit words a claim may end in.

Every named quantity has a kind (:mod:`symflops.count.names`): work
(``FLOPs``, or ``MACs`` with ``--macs``), ``bytes`` or ``elements``; a
``count`` (parameters, tokens), a dim and a number carry no unit.  A
product's unit is the product of its factors' (``memory.fixed_bytes /
params`` is bytes per parameter, ``6*params*tokens`` has none), so:

* a sum of two units is refused (``memory.params + memory.activation_bytes``
  adds elements to bytes); a term without a unit takes the sum's
  (``flops.total + 2*B*D`` is FLOPs);
* the two sides of a comparison must have one unit, a side without one
  taking the other's (``flops.total == 6*params*B``: the 6 is FLOPs per
  parameter and token; ``memory.fixed_bytes == 16*params``: 16 bytes per
  parameter); ``memory.activation_bytes == 2*activations`` compares bytes
  with elements and is refused (its ratio, ``memory.activation_bytes /
  activations == 2``, states the same without mixing);
* a side may end in a unit word (``<= 80 GB``, ``== 8.4e22 FLOPs``): that
  side is then a number or a formula of dims and counts, in that unit, and
  the other side must measure the same kind; the word's scale converts it
  (``GB`` = 10^9 bytes, ``GiB`` = 2^30, ``MACs`` = 2 FLOPs).

A unit is a mapping kind -> exponent (``{}``: none), the kinds being
``FLOPs``, ``bytes`` and ``elements``; MACs are FLOPs at half the count,
so a claim's unit word converts between them and never mixes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import sympy

Unit = tuple[tuple[str, int], ...]  # sorted (kind, exponent), exponents non-zero
NONE: Unit = ()


@dataclass(frozen=True)
class Word:
    """A unit word: its kind and how many base units (FLOPs, bytes, elements) it is."""

    word: str
    kind: str
    factor: sympy.Rational


def _words() -> dict[str, Word]:
    out: dict[str, Word] = {}
    for w in ("FLOPs", "FLOP"):
        out[w] = Word(w, "FLOPs", sympy.Integer(1))
    for w in ("MACs", "MAC"):
        out[w] = Word(w, "FLOPs", sympy.Integer(2))
    for prefix, power in (("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)):
        out[f"{prefix}FLOPs"] = Word(f"{prefix}FLOPs", "FLOPs", sympy.Integer(10)**power)
        out[f"{prefix}B"] = Word(f"{prefix}B", "bytes", sympy.Integer(10)**power)
    for prefix, power in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50)):
        out[f"{prefix}B"] = Word(f"{prefix}B", "bytes", sympy.Integer(2)**power)
    for w in ("bytes", "byte"):
        out[w] = Word(w, "bytes", sympy.Integer(1))
    for w in ("elements", "element"):
        out[w] = Word(w, "elements", sympy.Integer(1))
    return out


#: Every unit word a claim's side may end in.
WORDS: Mapping[str, Word] = _words()

#: A side's trailing unit word: after an operand (a digit, a letter, ')'),
#: separated by white space; elsewhere a word would be implicit multiplication.
_TRAILING = re.compile(r"(?<=[A-Za-z0-9_).])(\s+)([A-Za-z]+)\s*\Z")


def trailing_word(text: str) -> tuple[str, Word | None, int]:
    """``text`` without its trailing unit word (blanked, so columns are kept),
    the word, and the word's 0-based offset in ``text`` (-1 without one)."""
    m = _TRAILING.search(text)
    if m is None or m.group(2) not in WORDS:
        return text, None, -1
    start = m.start(2)
    return text[:start] + " " * (len(text) - start), WORDS[m.group(2)], start


def kind_unit(kind: str) -> Unit:
    if kind == "FLOPs per byte":   # an arithmetic intensity
        return (("FLOPs", 1), ("bytes", -1))
    return NONE if kind == "count" else ((kind, 1),)


def text(unit: Unit, work: str = "FLOPs") -> str:
    """``bytes``, ``FLOPs``, ``bytes/elements``, ``bytes*elements``; ``no unit`` for none."""
    if not unit:
        return "no unit"
    name = (lambda k: work if k == "FLOPs" else k)
    top = [name(k) + (f"^{e}" if e > 1 else "") for k, e in unit if e > 0]
    bottom = [name(k) + (f"^{-e}" if e < -1 else "") for k, e in unit if e < 0]
    return ("*".join(top) or "1") + ("/" + "*".join(bottom) if bottom else "")


def _mul(a: Unit, b: Unit, times: sympy.Rational = sympy.Integer(1)) -> Unit:
    out = dict(a)
    for k, e in b:
        out[k] = out.get(k, 0) + e * times
    return tuple(sorted((k, e) for k, e in out.items() if e != 0))


class Mixed(Exception):
    """Terms of different units added, compared or taken a function of."""

    def __init__(self, groups: list[tuple[Unit, sympy.Expr]], how: str):
        super().__init__(how)
        self.groups = groups  # each unit with the sum of its terms
        self.how = how        # "adds" or "takes"


def unit_of(expr: sympy.Expr, kinds: Mapping[sympy.Symbol, str]) -> Unit:
    """The unit of ``expr``, whose symbols in ``kinds`` are named quantities
    (any other symbol, a dim, has none).  :class:`Mixed` when a sum (or a
    ``max``/``min``) joins two units, or a function other than those takes
    an argument with a unit."""
    if not (expr.free_symbols & set(kinds)):
        return NONE
    if expr.is_Symbol:
        return kind_unit(kinds[expr])
    if expr.is_Add or isinstance(expr, (sympy.Max, sympy.Min)):
        units: dict[Unit, list[sympy.Expr]] = {}
        for a in expr.args:
            units.setdefault(unit_of(a, kinds), []).append(a)
        known = [u for u in units if u]
        if len(known) > 1:
            raise Mixed([(u, sympy.Add(*units[u])) for u in known], "adds")
        return known[0] if known else NONE
    if expr.is_Mul:
        out: Unit = NONE
        for a in expr.args:
            out = _mul(out, unit_of(a, kinds))
        return out
    if expr.is_Pow:
        base = unit_of(expr.base, kinds)
        if not base:
            if unit_of(expr.exp, kinds):
                raise Mixed([(unit_of(expr.exp, kinds), expr.exp)], "takes")
            return NONE
        if not expr.exp.is_Rational:
            raise Mixed([(base, expr.base)], "takes")
        return _mul(NONE, base, expr.exp)
    if isinstance(expr, (sympy.floor, sympy.ceiling, sympy.Abs)):
        return unit_of(expr.args[0], kinds)
    found = [(unit_of(a, kinds), a) for a in expr.args]
    bad = [(u, a) for u, a in found if u]
    if bad:  # log or exp of a quantity with a unit
        raise Mixed(bad, "takes")
    return NONE
