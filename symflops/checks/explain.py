"""What a failing claim's difference is made of, and the nearest claim that holds.

**Named terms.**  The difference ``lhs - rhs`` is matched, exactly, against
sums of parts the engine counts, each traced to the tensors, ops and rules
it comes from:

* FLOPs: the pairs ``t > s`` a causal product counts over the full square
  (its count over the square minus its count over the triangle); the
  diagonal ``t = s`` of a causal triangle (the triangle's ``S(S+1)/2``
  pairs against the ``S²/2`` of half the square); the forward ops a
  recompute policy runs again; the weight gradient a frozen parameter does
  not get (a product's weight gradient costs what its forward costs); the
  expert slots no token fills (capacity padding: the ops over slots, times
  the slots' dead fraction, :func:`symflops.count.params.live_fractions`);
  else any forward product or backward rule;
* memory: the norms' per-row statistics (``rstd``), dropout keep-masks,
  any saved tensor, and the rows of the fixed memory (parameters,
  gradients, optimizer state, master weights).

Parts of one kind are grouped (forward, backward, or both), and the fewest
groups (at most three) whose sum is exactly the difference, or its
negative, are reported; a claim about a per-token quantity is matched per
token.  Nothing is reported when no such sum exists: no sentence is better
than a wrong one.

**Nearest claim.**  The claim is tried again under single substitutions: a
parameter count for another (``params`` -> ``params_active_dense``, ...),
a memory quantity in the other unit (bytes <-> elements), the model FLOPs
for the executed ones, then each other convention (attention exact <->
full-square, each recompute policy, each precision policy, MACs), then
pairs of an attention and a recompute convention.  The first that holds is
said in one line.  **holds when** keeps the single changes to the
declaration that make it hold (an input without gradient, a frozen weight).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import TYPE_CHECKING, Iterable

import sympy

from ..core.errors import SymflopsError
from ..core.ir import RECOMPUTE_POLICIES
from ..count.attention import restricted_products
from ..count.names import find
from ..count.precision import POLICIES
from .claim import Claim, counterpart, parse_claim
from .decide import decide
from .parts import terms as named_terms

if TYPE_CHECKING:  # pragma: no cover
    from .declarations import Convention, Declaration
    from .requests import Request
    from .results import ClaimResult

#: The parameter counts a claim may mean by 'N'.
PARAMS = ("params_active_dense", "params_active", "params_dense", "trainable_params", "params",
          "params_read")
#: Model and executed FLOPs.
EXECUTED = {"flops.total": "flops.executed", "flops.executed": "flops.total",
            "flops_per_token.total": "flops_per_token.executed",
            "flops_per_token.executed": "flops_per_token.total"}


def explain(result: "ClaimResult", request: "Request") -> "ClaimResult":
    from .results import Term

    claim = result.claim
    if result.region is not None:  # it holds where the region says: that is the answer
        terms = tuple(Term(label, sign * value, items, sign)
                      for label, value, items, sign in named_terms(claim, request))
        return dataclasses.replace(result, terms=terms)
    nearest, renamed = _nearest(claim, request)
    # A claim that holds of another quantity names the wrong one: its difference
    # to this one is not made of parts worth naming.
    terms = () if renamed else tuple(Term(label, sign * value, items, sign)
                                     for label, value, items, sign in named_terms(claim, request))
    return dataclasses.replace(result, holds_when=_holds_when(claim, request),
                               nearest=nearest, terms=terms)


# ---------------------------------------------------------- trying again --

def _holds(text: str, request: "Request", names: Iterable[str],
           convention: "Convention | None" = None,
           declaration: "Declaration | None" = None) -> Claim | None:
    """The claim ``text`` when it holds under the changes, else None (a
    change under which the claim is not well formed does not count).
    ``names``: the quantities ``text`` names, the only ones counted."""
    from .requests import names_for, symbols_of

    changed = dataclasses.replace(request, convention=convention or request.convention,
                                  declaration=declaration or request.declaration)
    try:
        changed.declaration.refuse(changed.convention)
        claim = parse_claim(text, names_for(changed, frozenset(names)), request.number,
                            request.span)
    except SymflopsError:
        return None
    verdict = decide(claim, symbols_of(changed), request.at, only_at=request.only_at,
                     rtol=request.rtol)
    return claim if verdict.holds else None


def _holds_when(claim: Claim, request: "Request") -> str | None:
    found = [words for words, decl in request.declaration.variants()
             if _holds(claim.text, request, claim.names, declaration=decl)]
    return "; or ".join(found) if found else None


def _written(name: str, request: "Request") -> str:
    """A quantity's name as a claim writes it (``full:flops.total``)."""
    head, dot, rest = name.partition(".")
    return f"{head}:{rest}" if dot and head in request.others else name


def _swap(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![A-Za-z0-9_.:]){re.escape(old)}(?![A-Za-z0-9_.])", new, text)


def _alternatives(name: str) -> Iterable[tuple[str, str]]:
    """(another name, why) for one quantity a claim names."""
    head, dot, rest = name.partition(".")
    prefix, base = (head + ".", rest) if dot and find(name) is None else ("", name)
    if base in PARAMS:
        for other in PARAMS:
            if other != base:
                yield prefix + other, ""
    other = counterpart(base)
    if other is not None:
        yield prefix + other, "units"
    if base in EXECUTED:
        yield prefix + EXECUTED[base], ""


def _nearest(claim: Claim, request: "Request") -> tuple[str | None, bool]:
    """The nearest claim that holds, and whether it names another quantity."""
    for name in claim.names:
        for other, why in _alternatives(name):
            written = _written(name, request)
            text = _swap(claim.text, written, _written(other, request))
            named = (set(claim.names) - {name}) | {other}
            if text == claim.text or _holds(text, request, named) is None:
                continue
            note = ""
            if why == "units":
                note = _units_note(name, other, request)
            return text + note, True
    for convention in _conventions(request):
        if _holds(claim.text, request, claim.names, convention) is not None:
            return f"the same claim with {_changed(request.convention, convention)}", False
    return None, False


def _units_note(name: str, other: str, request: "Request") -> str:
    """``(memory.fixed counts elements; in bytes under bf16-adam, memory.fixed_bytes = 24*D*F)``."""
    decl = request.declaration
    values = decl.quantities(request.convention)
    kind = find(other.split(".", 1)[1] if find(other) is None else other)
    if kind is None or name not in values:
        return ""
    s, _, _ = decl.summary(request.convention)
    return (f" ({other} counts {kind.kind}; in {'bytes' if kind.kind == 'elements' else 'elements'}"
            f"{' under ' + s.precision.name if kind.kind == 'elements' else ''}, {name} = "
            f"{sympy.sstr(values[name])})")


def _changed(old: "Convention", new: "Convention") -> str:
    parts = []
    for attr, flag in (("attention", "--attention"), ("recompute", "--recompute"),
                       ("precision", "--precision")):
        if getattr(old, attr) != getattr(new, attr):
            parts.append(f"{flag} {getattr(new, attr)}")
    if old.macs != new.macs:
        parts.append("--macs" if new.macs else "FLOPs (not --macs)")
    return " ".join(parts)


def _conventions(request: "Request") -> Iterable["Convention"]:
    c = request.convention
    layer = request.declaration.layer
    attention = [a for a in ("exact", "full-square") if a != (c.attention or "exact")
                 and (a == "exact" or restricted_products(layer))]
    offered = request.declaration.summary(c)[0].model.recompute.policies
    policies = [p for p in RECOMPUTE_POLICIES if p != c.recompute and p in offered]
    precisions = [p for p in POLICIES if p != (c.precision or layer.precision or "bf16-adam")]
    for a in attention:
        yield dataclasses.replace(c, attention=a)  # type: ignore[arg-type]
    for p in policies:
        yield dataclasses.replace(c, recompute=p)
    for p in precisions:
        yield dataclasses.replace(c, precision=p)
    yield dataclasses.replace(c, macs=not c.macs)
    for a, p in itertools.product(attention, policies):
        yield dataclasses.replace(c, attention=a, recompute=p)  # type: ignore[arg-type]
