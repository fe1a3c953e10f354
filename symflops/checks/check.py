"""``symflops check``: decide claims about a layer's derived quantities.

A claim is one comparison, ``LHS OP RHS`` with OP in ``== != < <= > >= ≈``
(``~=`` for ``≈``), over the layer's dims and the quantities
:mod:`symflops.count.names` registers (the ``quantities`` of ``symflops
derive --json``), each side optionally ending in a unit word::

    flops.total == 6*params*B
    memory.total_bytes <= 80 GB
    flops_per_token.total ≈ 6*params_active_dense
    flops.total ≈ 2/3*full:flops.total        (with --with full=PATH)

The pieces: :mod:`.claim` (the grammar, units in :mod:`.units`),
:mod:`.declarations` (the quantities of a declaration under a
:class:`Convention`), :mod:`.requests` (what a claim is checked under),
:mod:`.decide` (verdicts and regions), :mod:`.explain` and :mod:`.parts`
(what a failing claim's difference is made of, and the nearest claim that
holds), :mod:`.results` (verdicts and their report), :mod:`.claims_file` (a
file of claims, each with its source and expected verdict).  This module
runs each claim through them.

Invariants and conventions:

* claim text goes through the whitelisting parser :mod:`symflops.lang.expr`
  only; nothing here hands user text to ``eval``, ``exec`` or ``sympify``.
* dims are positive integers, so a claim *holds* when it is true for every
  positive integer value of every dim (or, with ``--only-at``, at the
  configurations given); a dim defined by a formula (``equals:``) and a dim
  given by ``--given`` stand for their formulas.
* a convention names the count a quantity means: ``attention`` (the
  products restricted by a where-clause, exact or over the full square),
  ``recompute`` (the policy ``flops.executed`` and the activation memory
  assume), ``precision`` (bytes per element), ``macs``.  A convention that
  changes nothing for the declaration is refused.
* :func:`check` returns one :class:`ClaimResult` per claim;
  :func:`text_report` or :meth:`ClaimResult.as_dict` formats them; ``symflops
  check`` (:mod:`symflops.commands.check`) prints them and exits 0 when every
  claim holds (or, in a claims file, gets its documented verdict), 1 otherwise;
  bad input raises SymflopsError (the CLI exits 2).
"""


import dataclasses
import re
from typing import Mapping, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer
from ..core.sizes import NEGATIVE, NONNEGATIVE, NONPOSITIVE, POSITIVE, UNKNOWN, ZERO, sign  # noqa: F401
from .claim import (OPERATORS, Claim, Names, difference_label, known_names,  # noqa: F401
                    parse_claim as _parse_claim)
from .decide import DEFAULT_RTOL, AtValue, Verdict, decide, describe, percent, \
    simplify_difference  # noqa: F401
from .declarations import Convention, Declaration, claim_symbols, dims_of  # noqa: F401
from .requests import (Request, configurations, names_for, parse_given,  # noqa: F401
                       read_rtol, resolve_given, symbols_of)
from .results import ClaimResult, Term, claim_lines, text_report  # noqa: F401

# -------------------------------------------------------------- the check --

def run(requests: Sequence[Request], refuse: bool = True) -> tuple[ClaimResult, ...]:
    """Decide every request.  Every claim is parsed before any is decided,
    so bad input fails fast and whole; with ``refuse`` False (a claims file
    whose claim expects to be refused) a bad claim becomes a 'refused'
    result instead."""
    from .explain import explain

    parsed: list[tuple[Request, Claim | None, str | None]] = []
    for r in requests:
        try:
            r.declaration.refuse(r.convention, r.convention_span or r.span)
            for other in r.others.values():
                if r.convention.precision or r.convention.recompute == "full":
                    other.refuse(dataclasses.replace(r.convention, attention=None))
            claim = _parsed(r)
            configs = configurations(r)
            parsed.append((dataclasses.replace(r, at=configs), claim, None))
        except SymflopsError as exc:
            if refuse or r.expect != "refused":
                raise
            parsed.append((r, None, str(exc)))
    out = []
    for r, claim, error in parsed:
        if claim is None:
            out.append(_refused(r, error or ""))
            continue
        verdict = decide(claim, symbols_of(r), r.at, only_at=r.only_at, rtol=r.rtol)
        result = ClaimResult(claim, verdict.holds, verdict.difference, verdict.reason, verdict.at,
                             verdict_=verdict.verdict, region=verdict.region, rtol=r.rtol,
                             convention=r.convention, declaration=r.declaration.label,
                             work=r.convention.unit, only_at=r.only_at, source=r.source,
                             expect=r.expect)
        if verdict.holds is not True and r.explain:
            result = explain(result, r)
        out.append(result)
    return tuple(out)


#: A word of a claim that may be a name: ``flops.total``, ``full:params``.
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*")


def _parsed(r: Request) -> Claim:
    """The request's claim, parsed with the quantities its words name counted
    alone (a layer's bytes moved are not counted for a claim about FLOPs).
    A claim that does not parse so is parsed again with every name, which
    gives its error as it has always been (with the known names listed)."""
    only = frozenset(w.replace(":", ".") for w in _WORD.findall(r.text))
    try:
        return _parse_claim(r.text, names_for(r, only), r.number, r.span)
    except SymflopsError:
        return _parse_claim(r.text, names_for(r), r.number, r.span)


def _refused(r: Request, error: str) -> ClaimResult:
    text = r.text.strip()
    claim = Claim(text, text, "", "", sympy.Integer(0), sympy.Integer(0), span=r.span)
    where, _, message = error.partition(": error: ")
    return ClaimResult(claim, None, sympy.Integer(0), message or error,
                       declaration=r.declaration.label,
                       convention=r.convention, source=r.source, expect=r.expect,
                       refused=message or error, position=where if message else None)


def check(layer: Layer, claims: Sequence[str],
          configurations: Sequence[Mapping[str, sympy.Expr]] = (),
          unit: str = "FLOPs", precision: str | None = None, *,
          convention: Convention | None = None, only_at: bool = False,
          rtol: sympy.Rational = DEFAULT_RTOL, given: Mapping[str, sympy.Expr] | None = None,
          others: Mapping[str, Layer] | None = None) -> tuple[ClaimResult, ...]:
    """Decide every claim about ``layer`` (see the module)."""
    convention = convention or Convention(precision=precision, macs=unit == "MACs")
    decl = Declaration(layer)
    with_ = {k: Declaration(v) for k, v in (others or {}).items()}
    return run([Request(text, decl, convention=convention, rtol=rtol,
                        at=tuple(configurations), only_at=only_at, given=dict(given or {}),
                        others=with_, number=k + 1) for k, text in enumerate(claims)])


def parse_claim(text: str, symbols: Mapping[str, sympy.Expr], number_: int = 1) -> Claim:
    """One claim over ``symbols`` (every name without a unit)."""
    return _parse_claim(text, symbols, number_)


