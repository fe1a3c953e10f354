"""The verdict on one claim (:class:`ClaimResult`), the named parts of a
failing claim's difference (:class:`Term`), and the text report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import sympy

from ..core.ir import Layer
from ..core.text import table
from . import units
from .claim import Claim, difference_label
from .decide import DEFAULT_RTOL, AtValue, describe, percent
from .declarations import Convention

@dataclass(frozen=True)
class Term:
    """One named part of a failing claim's difference (:mod:`.explain`)."""

    label: str      # what it is: 'attention products over the full square'
    value: sympy.Expr       # its share of lhs - rhs (negative: the claim counts it, not lhs)
    items: tuple[str, ...]  # the tensors, ops and rules it comes from
    sign: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "value": sympy.sstr(self.value), "from": list(self.items)}


@dataclass(frozen=True)
class ClaimResult:
    """The verdict on one claim.  ``holds`` is True (for all dims, or at every
    ``--only-at`` configuration), False, or None (undetermined, or holding
    only where ``region`` says); ``reason`` says why in one line."""

    claim: Claim
    holds: bool | None
    difference: sympy.Expr
    reason: str
    at: tuple[AtValue, ...] = ()
    holds_when: str | None = None
    verdict_: str | None = None
    region: str | None = None
    rtol: sympy.Rational | None = None
    convention: Convention = Convention()
    declaration: str = ""
    work: str = "FLOPs"
    nearest: str | None = None
    terms: tuple[Term, ...] = ()
    only_at: bool = False
    # in a claims file
    source: str | None = None
    expect: str | None = None
    refused: str | None = None
    position: str | None = None

    @property
    def verdict(self) -> str:
        if self.refused is not None:
            return "refused"
        if self.verdict_ is not None:
            return self.verdict_
        return {True: "holds", False: "does not hold", None: "undetermined"}[self.holds]

    @property
    def as_expected(self) -> bool:
        return self.verdict == (self.expect or "holds")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "claim": self.claim.text, "holds": self.holds, "verdict": self.verdict,
            "difference": sympy.sstr(self.difference), "reason": self.reason,
            "at": [a.as_dict() for a in self.at], "holds_when": self.holds_when,
            "region": self.region, "approximate": self.claim.approx,
            "rtol": float(self.rtol) if self.rtol is not None and self.claim.approx else None,
            "only_at": self.only_at,
            "unit": units.text(self.claim.unit, self.work) if self.claim.unit else None,
            "conventions": self.convention.flags(),
            "nearest": self.nearest, "terms": [t.as_dict() for t in self.terms],
            "declaration": self.declaration,
        }
        if self.expect is not None or self.source is not None or self.refused is not None:
            out.update({"source": self.source, "expected": self.expect or "holds",
                        "as_expected": self.as_expected, "position": self.position})
        return out


def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.6g}"


def _percent(rel: float | None) -> str:
    return "n/a (lhs is 0)" if rel is None else f"{rel * 100:+.4g}%"


def text_report(layer: Layer | str, results: Sequence[ClaimResult]) -> str:
    name = layer if isinstance(layer, str) else layer.name
    counts = {v: sum(r.verdict == v for r in results)
              for v in ("holds", "holds where", "does not hold", "undetermined", "refused")}
    tally = ", ".join(f"{v}: {n}" for v, n in counts.items() if n)
    lines = [f"{name}: {len(results)} claim{'s' if len(results) != 1 else ''}; {tally}", ""]
    for k, r in enumerate(results, 1):
        lines += claim_lines(k, r)
    return "\n".join(lines)


def claim_lines(k: int, r: ClaimResult) -> list[str]:
    indent = " " * (len(str(k)) + 2)
    lines = [f"{k}. {r.claim.text}"]
    if r.refused is not None:
        return lines + [f"{indent}refused: {r.refused}", ""]
    notes = []
    if r.convention.flags():
        notes.append(r.convention.flags())
    if r.claim.approx:
        notes.append(f"within {percent(r.rtol or DEFAULT_RTOL)} of the left-hand side")
    if r.claim.unit and any(r.claim.words):
        notes.append(f"in {units.text(r.claim.unit, r.work)}")
    if notes:
        lines.append(f"{indent}({'; '.join(notes)})")
    lines.append(f"{indent}{r.verdict}: {r.reason}")
    lines.append(f"{indent}{difference_label(r.claim)} = {sympy.sstr(r.difference)}")
    if r.at:
        rows = [("at", "lhs", "rhs", "(rhs - lhs) / |lhs|")]
        rows += [(describe(dict(a.dims)), _number(a.lhs), _number(a.rhs),
                  _percent(a.relative_error)) for a in r.at]
        lines += table(rows, indent)
    if r.holds is not True:
        lines += _explanation_lines(r, indent)
    lines.append("")
    return lines


def _explanation_lines(r: ClaimResult, indent: str) -> list[str]:
    lines = []
    if r.terms:
        lines.append(f"{indent}the difference is made of:")
        values = []
        for t in r.terms:
            size = sympy.expand(t.sign * t.value)
            text = sympy.sstr(size)
            values.append(("- " if t.sign < 0 else "+ ")
                          + (f"({text})" if isinstance(size, sympy.Add) else text))
        width = max(map(len, values))
        for v, t in zip(values, r.terms):
            lines.append(f"{indent}  {v.ljust(width)}  {t.label} ({', '.join(t.items)})")
    if r.holds_when:
        lines.append(f"{indent}holds when: {r.holds_when}")
    if r.nearest:
        lines.append(f"{indent}nearest claim that holds: {r.nearest}")
    if not (r.holds_when or r.nearest or r.region or r.terms):
        lines.append(f"{indent}no single change makes it hold (tried: a frozen parameter, a "
                     "gradient-free input, the parameter counts, bytes and elements, and the "
                     "attention, recompute and precision conventions)")
    return lines
