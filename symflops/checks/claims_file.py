"""A claims file: a paper's or a textbook's formulas as claims, each with its
source, unit, tolerance, convention and the verdict it is documented to get,
checked in one run (``symflops check --claims FILE.yaml``)::

    title: The feed-forward cheatsheet
    declarations:                  # name: path, relative to this file
      ffn: ../derivations/ffn.yaml
    claims:
      - claim: flops.forward == 4*B*D*F
        declaration: ffn           # optional when there is one declaration
        source: "seed 000, section 2: forward = 4BDF"
        unit: FLOPs                # optional: what the claim measures, checked
        expect: holds              # holds (default), holds where, does not hold,
                                   # undetermined, refused
      - claim: memory.fixed_bytes == 112 GB
        precision: mixed-adam      # conventions: attention, recompute, precision, macs
        at: {D: 50000, F: 70000}   # decided at this configuration alone (a list: each)
        show_at: {B: 8}            # evaluated there too, not deciding (a list: each)
        rtol: 5e-4                 # for '≈'
        given: {F: 4*D}            # dims standing for formulas of other dims
        with: [lora]               # other declarations the claim names (lora:flops.total)

A claim documented as ``refused`` is one a careful reviewer must refuse
(a formula that adds elements to bytes): its verdict is the refusal and
its message.  Any other refusal is bad input, reported at its line and
column in this file (exit 2).  Paths may lead anywhere, as on the command
line; each file is read as a declaration (regular files, at most 1 MiB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import sympy

from ..core.errors import Span, SymflopsError, read_text
from ..count.evaluate import dim_value
from ..declaration.reader import load
from ..lang.yaml import Node, describe, mapping, parse_yaml, text_of
from . import units
from .check import run
from .declarations import Convention, Declaration
from .requests import Request, parse_given, read_rtol, resolve_given
from .results import ClaimResult, claim_lines
from .decide import DEFAULT_RTOL
from ..core.ir import RECOMPUTE_POLICIES
from ..core.text import table

VERDICTS = ("holds", "holds where", "does not hold", "undetermined", "refused")
_KEYS = ("claim", "declaration", "source", "unit", "expect", "rtol", "attention", "recompute",
         "precision", "macs", "at", "show_at", "given", "with", "note")
_UNITS = ("FLOPs", "MACs", "bytes", "elements", "none")


@dataclass(frozen=True)
class ClaimsFile:
    path: str
    title: str
    requests: tuple[Request, ...]
    units: tuple[tuple[str | None, Span | None], ...]  # each claim's stated unit


def _text(node: Node, what: str) -> str:
    return text_of(node, what).strip()


def _claim_span(node: Node) -> Span | None:
    """Where the claim's text starts (inside its quotes: the reader moves a
    quoted scalar's place past the quote)."""
    return node.span


def _configs(node: Node, what: str) -> tuple[dict[str, sympy.Expr], ...]:
    items = node.value if isinstance(node.value, list) else [node]
    out = []
    for item in items:
        values = {}
        for name, (span, v) in mapping(item, what, "write {DIM: value, ...}").items():
            try:
                values[name] = dim_value(name, str(v.value))
            except SymflopsError as exc:
                raise SymflopsError(exc.message, v.span or span, exc.hint) from None
        out.append(values)
    return tuple(out)


def read(path: str) -> ClaimsFile:
    """Read a claims file (see the module) into requests; SymflopsError at the
    place of anything wrong in it."""
    text = read_text(path, "check the path of the claims file")
    top = mapping(parse_yaml(text, path), "a claims file", "write a mapping with "
                  "'declarations' and 'claims'")
    for key, (span, _) in top.items():
        if key not in ("title", "source", "declarations", "claims"):
            raise SymflopsError(f"unknown key {key!r} in a claims file", span,
                                "use title, source, declarations and claims")
    title = _text(top["title"][1], "title") if "title" in top else os.path.basename(path)
    base = os.path.dirname(os.path.abspath(path))
    declarations: dict[str, Declaration] = {}
    if "declarations" not in top:
        raise SymflopsError("a claims file names its declarations", Span(path, 1, 1),
                            "add 'declarations: {ffn: ../derivations/ffn.yaml}'")
    for name, (span, node) in mapping(top["declarations"][1], "declarations",
                                      "write {name: path, ...}").items():
        where = os.path.join(base, _text(node, f"the path of {name}"))
        try:
            declarations[name] = Declaration(load(where), name)
        except SymflopsError as exc:
            if exc.span is not None and exc.span.file == where:
                raise
            raise SymflopsError(f"declaration {name!r}: {exc.message}", node.span or span,
                                exc.hint) from None
    if "claims" not in top or not isinstance(top["claims"][1].value, list):
        raise SymflopsError("a claims file has a list of claims",
                            top["claims"][1].span if "claims" in top else Span(path, 1, 1),
                            "write 'claims:' followed by items '- claim: ...'")
    requests, stated = [], []
    for k, item in enumerate(top["claims"][1].value, 1):
        request, unit = _request(item, k, declarations)
        requests.append(request)
        stated.append(unit)
    return ClaimsFile(path, title, tuple(requests), tuple(stated))


def _request(item: Node, number: int, declarations: dict[str, Declaration]
             ) -> tuple[Request, tuple[str | None, Span | None]]:
    fields = mapping(item, f"claim {number}", "write '- claim: ...' with its keys")
    for key, (span, _) in fields.items():
        if key not in _KEYS:
            raise SymflopsError(f"unknown key {key!r} in claim {number}", span,
                                f"use {', '.join(_KEYS)}")
    if "claim" not in fields:
        raise SymflopsError(f"claim {number} has no 'claim:'", item.span,
                            "write the claim as 'claim: flops.total == 6*params*B'")
    node = fields["claim"][1]
    text = text_of(node, "a claim")

    def get(key: str) -> Node | None:
        return fields[key][1] if key in fields else None

    def choice(key: str, allowed: Sequence[str]) -> str | None:
        n = get(key)
        if n is None:
            return None
        value = _text(n, key)
        if value not in allowed:
            raise SymflopsError(f"{key} {value!r} is not one of {', '.join(allowed)}", n.span,
                                f"use one of {', '.join(allowed)}")
        return value

    decl_name = choice("declaration", list(declarations))
    if decl_name is None:
        if len(declarations) != 1:
            raise SymflopsError(f"claim {number} names no declaration", item.span,
                                f"add 'declaration:' with one of {', '.join(declarations)}")
        decl_name = next(iter(declarations))
    macs = get("macs")
    if macs is not None and not isinstance(macs.value, bool):
        raise SymflopsError(f"macs must be true or false, found {describe(macs.value)}",
                            macs.span, "write macs: true")
    from ..count.precision import POLICIES

    convention = Convention(choice("attention", ("exact", "full-square")),  # type: ignore[arg-type]
                            choice("recompute", RECOMPUTE_POLICIES),
                            choice("precision", sorted(POLICIES)),
                            bool(macs.value) if macs is not None else False)
    rtol = DEFAULT_RTOL
    if (n := get("rtol")) is not None:
        rtol = read_rtol(str(n.value), n.span)
    at, shown = (), ()
    if (n := get("at")) is not None:
        at = _configs(n, "at")
    if (n := get("show_at")) is not None:
        if at:
            raise SymflopsError("a claim has either 'at' (decided there) or 'show_at' "
                                "(evaluated there)", n.span, "keep one of them")
        shown = _configs(n, "show_at")
    given = {}
    if (n := get("given")) is not None:

        layers = [declarations[decl_name].layer]
        for name, (span, v) in mapping(n, "given", "write {DIM: formula}").items():
            given.update(parse_given(f"{name}={v.value}", layers, v.span or span))
        given = resolve_given(given, n.span)
    others = {}
    if (n := get("with")) is not None:
        names = n.value if isinstance(n.value, list) else [n]
        for m in names:
            alias = _text(m, "with")
            if alias not in declarations:
                raise SymflopsError(f"no declaration {alias!r} in this file", m.span,
                                    f"use one of {', '.join(declarations)}")
            others[alias] = declarations[alias]
    unit = get("unit")
    stated = (choice("unit", _UNITS), unit.span if unit is not None else None)
    expect = choice("expect", VERDICTS) or "holds"
    source = _text(get("source"), "source") if get("source") is not None else None
    where = next((fields[k][0] for k in ("attention", "recompute", "precision", "macs")
                  if k in fields), None)
    return Request(text, declarations[decl_name], _claim_span(node), convention, rtol,
                   at or shown, bool(at), given, others, source, expect, number,
                   convention_span=where), stated


def check_file(path: str) -> tuple[ClaimsFile, tuple[ClaimResult, ...]]:
    """Read and check a claims file: each claim's verdict, its stated unit
    checked (a claim whose unit is not the one stated is bad input)."""
    claims = read(path)
    results = run(claims.requests, refuse=False)
    for r, (stated, span) in zip(results, claims.units):
        if stated is None or r.refused is not None:
            continue
        found = units.text(r.claim.unit, r.work) if r.claim.unit else "none"
        if found != stated:
            raise SymflopsError(f"the claim {r.claim.text[:60]!r} is in {found}, not {stated}",
                                span, f"write unit: {found}, or change the claim")
    return claims, results


def text_report(claims: ClaimsFile, results: Sequence[ClaimResult]) -> str:
    good = sum(r.as_expected for r in results)
    lines = [f"{claims.title}: {len(results)} claim{'s' if len(results) != 1 else ''}; "
             f"{good} as documented" + (f", {len(results) - good} not" if good < len(results)
                                        else ""), ""]
    rows = [("#", "declaration", "claim", "conventions", "verdict", "documented", "")]
    for k, r in enumerate(results, 1):
        text = r.claim.text if len(r.claim.text) <= 48 else r.claim.text[:45] + "..."
        rows.append((str(k), r.declaration, text, r.convention.flags() or "-", r.verdict,
                     r.expect or "holds", "ok" if r.as_expected else "DIFFERS"))
    lines += table(rows, "")
    lines.append("")
    for k, r in enumerate(results, 1):
        if r.verdict == "holds" and r.as_expected and not r.at:
            continue
        block = claim_lines(k, r)
        indent = " " * (len(str(k)) + 2)
        if r.source:
            block.insert(1, f"{indent}source: {r.source}")
        if not r.as_expected:
            block.insert(1, f"{indent}DIFFERS from the documented verdict: {r.expect}")
        lines += block
    return "\n".join(lines)
