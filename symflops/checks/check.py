"""``symflops check``: decide claims about a layer's derived quantities.

A claim is one comparison, ``LHS OP RHS`` with OP in ``== != < <= > >=``, over
the layer's dims and the quantities ``symflops derive`` reports::

    flops.total == 6*params*B
    memory.activations <= 2*B*D
    flops.backward == 2*flops.forward

Names a claim may use (:func:`claim_symbols`): every dim; ``params``,
``trainable_params``; ``flops.forward|backward|total``;
``flops_elementwise.forward|backward|total``; ``memory.<key>`` for every field
of ``summary().memory``; and ``activations``, short for ``memory.activations``.

Invariants and conventions:

* claim text goes through the whitelisting parser :mod:`symflops.lang.expr` only;
  nothing here hands user text to ``eval``, ``exec`` or ``sympify``.
* dims are positive integers, so a claim *holds* when it is true for every
  positive integer value of every dim.  Equalities are decided exactly
  (the difference simplifies to 0).  An inequality holds only when it is
  proved: the difference, written in ``u = dim - 1 >= 0``, is a polynomial
  (or a ratio of them) whose coefficients all have one sign.  A claim that
  is false at a concrete point (all dims 1, or a ``--at`` configuration) does
  not hold.  Anything else is *undetermined* (``holds`` is None).
* ``relative_error`` at a configuration is ``(rhs - lhs) / |lhs|``: by how
  much the right-hand side (usually the formula being claimed) misses the
  left-hand side (usually the derived quantity); None when lhs is 0 and rhs
  is not.
* ``holds_when`` names the single changes to the declaration, tried one at a
  time, under which a claim that does not hold would hold: an input that
  needs no gradient (``requires_grad: false``) or a frozen parameter.
* :func:`check` returns one :class:`ClaimResult` per claim, and
  :func:`text_report` (or :meth:`ClaimResult.as_dict`) formats them;
  ``symflops check`` (:mod:`symflops.commands.check`) prints them and exits
  0 when every claim holds, 1 when any does not hold or is undetermined; bad
  input raises SymflopsError (the CLI exits 2).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import sympy

from ..core.sizes import NEGATIVE, NONNEGATIVE, NONPOSITIVE, POSITIVE, UNKNOWN, ZERO, sign  # noqa: F401
from ..count.cost import costs
from ..derive.backward import derive
from ..core.records import Derivation
from ..core.errors import Span, SymflopsError
from ..count.evaluate import number
from ..lang.expr import Comparison, parse_expression
from ..core.ir import Layer, dim_symbol
from ..count.records import Formula, Summary, leaves
from ..core.text import table
from ..count.summary import summary

#: Claim operators and the sign of ``lhs - rhs`` each one asserts.
OPERATORS = ("==", "!=", "<", "<=", ">", ">=")


# ------------------------------------------------------------------ names --

def claim_symbols(layer: Layer, s: Summary[Formula]) -> dict[str, sympy.Expr]:
    """Every name a claim may use, mapped to its SymPy expression.

    ``s`` is :func:`symflops.count.summary.summary` of the layer's derivation;
    the dotted names are its fields (``flops.forward``, ``memory.total_bytes``).
    """
    symbols: dict[str, sympy.Expr] = {}
    quantities: dict[str, sympy.Expr] = {
        "params": s.params,
        "trainable_params": s.trainable_params,
        "activations": s.memory.activations,
        **leaves(s.flops, "flops"),
        **leaves(s.flops_elementwise, "flops_elementwise"),
        **_present(s.memory, "memory"),
    }
    for d in layer.dims:
        if d.name in quantities:
            # A dim called 'params' would make 'params' in a claim ambiguous.
            raise SymflopsError(f"dimension {d.name!r} has the name of a derived quantity",
                                d.span, f"rename the dimension; {d.name!r} is reserved in claims")
        symbols[d.name] = d.symbol
    symbols.update(quantities)
    return symbols


def _present(record: Any, prefix: str) -> dict[str, sympy.Expr]:
    """:func:`leaves` of ``record`` less the fields ``--json`` leaves out when
    empty (``memory.buffers`` of a layer without buffers): a claim may name
    what ``derive --json`` prints."""
    shown = {f.name for f in dataclasses.fields(record)
             if f.metadata.get("json") != "if any" or getattr(record, f.name)}
    return {k: v for k, v in leaves(record, prefix).items() if k[len(prefix) + 1:] in shown}


def known_names(symbols: Mapping[str, sympy.Expr]) -> str:
    """All names, grouped compactly: ``B, D, F, params, flops.forward|backward|total, ...``."""
    groups: dict[str, list[str]] = {}
    for name in symbols:
        head, dot, tail = name.partition(".")
        groups.setdefault(head if dot else name, []).append(tail)
    return ", ".join(head + ("." + "|".join(tails) if tails != [""] else "")
                     for head, tails in groups.items())


# ---------------------------------------------------------------- parsing --

_CMP = re.compile(r"==|!=|<=|>=|<|>")


@dataclass(frozen=True)
class Claim:
    """A parsed claim: the text as written, split at its operator."""

    text: str
    lhs_text: str
    op: str
    rhs_text: str
    lhs: sympy.Expr
    rhs: sympy.Expr


def parse_claim(text: str, symbols: Mapping[str, sympy.Expr], number_: int = 1) -> Claim:
    """Parse one claim; SymflopsError (pointing into the claim) when it is not
    a single comparison of whitelisted arithmetic over known names."""
    span = Span(f"<claim {number_}>", 1, 1, text)
    try:
        parsed = parse_expression(text, symbols, span=span, comparisons=True)
    except SymflopsError as exc:
        if not exc.message.startswith("unknown name"):
            raise
        # The parser lists only the first names; a claim's author needs them all.
        guess = (exc.hint or "").split("known names:")[0]
        raise SymflopsError(exc.message, exc.span, f"{guess}known names: {known_names(symbols)}") \
            from None
    assert isinstance(parsed, Comparison)
    # The grammar has no strings, so the one comparison token is the first
    # match of the operator pattern: it splits the source text for messages.
    m = _CMP.search(text)
    assert m is not None and m.group() == parsed.op
    return Claim(text.strip(), text[:m.start()].strip(), parsed.op, text[m.end():].strip(),
                 parsed.lhs, parsed.rhs)


def difference_label(claim: Claim) -> str:
    """``lhs - rhs`` in the claim's own words, e.g. ``flops.total - 4*params*B``."""
    rhs = claim.rhs_text
    if re.search(r"[-+]", rhs.lstrip("+-")):  # a sum needs parentheses after '-'
        rhs = f"({rhs})"
    return f"{claim.lhs_text} - {rhs}"


# ------------------------------------------------------------------ signs --

# The sign of lhs - rhs, as far as it is proved for all positive integer dims,
# comes from symflops.core.sizes (which proves sizes positive the same way).


def simplify_difference(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` expanded when it is a polynomial, as one cancelled fraction when
    it is a ratio of polynomials, else SymPy's ``simplify``."""
    expanded = sympy.expand(expr)
    if expanded.is_polynomial():
        return expanded
    together = sympy.cancel(sympy.together(expanded))
    num, den = sympy.fraction(together)
    if num.is_polynomial() and den.is_polynomial():
        return sympy.expand(num) / sympy.expand(den) if not den.is_number else sympy.expand(together)
    return sympy.simplify(expanded)


# For each operator: the signs of lhs - rhs that prove it, and those that refute it.
_PROVES = {
    "==": {ZERO}, "!=": {POSITIVE, NEGATIVE},
    "<": {NEGATIVE}, "<=": {NEGATIVE, NONPOSITIVE, ZERO},
    ">": {POSITIVE}, ">=": {POSITIVE, NONNEGATIVE, ZERO},
}
_REFUTES = {
    "==": {POSITIVE, NEGATIVE}, "!=": {ZERO},
    "<": {POSITIVE, NONNEGATIVE, ZERO}, "<=": {POSITIVE},
    ">": {NEGATIVE, NONPOSITIVE, ZERO}, ">=": {NEGATIVE},
}
_TRUTH: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


# ---------------------------------------------------------------- results --

@dataclass(frozen=True)
class AtValue:
    """Both sides of a claim at one configuration of the dims."""

    dims: tuple[tuple[str, int | float], ...]
    lhs: int | float
    rhs: int | float
    relative_error: float | None
    true: bool

    def as_dict(self) -> dict[str, Any]:
        return {"dims": dict(self.dims), "lhs": self.lhs, "rhs": self.rhs,
                "relative_error": self.relative_error}


@dataclass(frozen=True)
class ClaimResult:
    """The verdict on one claim.  ``holds`` is True (for all dims), False, or
    None (undetermined); ``reason`` says why in one line."""

    claim: Claim
    holds: bool | None
    difference: sympy.Expr
    reason: str
    at: tuple[AtValue, ...] = ()
    holds_when: str | None = None

    @property
    def verdict(self) -> str:
        return {True: "holds", False: "does not hold", None: "undetermined"}[self.holds]

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim.text, "holds": self.holds, "verdict": self.verdict,
                "difference": sympy.sstr(self.difference), "reason": self.reason,
                "at": [a.as_dict() for a in self.at], "holds_when": self.holds_when}


# --------------------------------------------------------------- deciding --

def _exact(expr: sympy.Expr, values: Mapping[str, sympy.Expr]) -> sympy.Expr:
    return expr.subs({dim_symbol(k): v for k, v in values.items()})


def at_value(claim: Claim, values: Mapping[str, sympy.Expr]) -> AtValue:
    """Both sides of ``claim`` at ``values`` (exact where SymPy can be)."""
    lhs, rhs = _exact(claim.lhs, values), _exact(claim.rhs, values)
    if lhs == 0:
        rel: float | None = 0.0 if rhs == 0 else None
    else:
        rel = float((rhs - lhs) / abs(lhs))
    gap = lhs - rhs
    # Exact for rationals; SymPy compares other real numbers numerically.
    true = bool(_TRUTH[claim.op](gap, 0)) if gap.is_comparable else False
    dims = tuple((k, int(v) if v.is_Integer else float(v)) for k, v in values.items())
    return AtValue(dims, number(claim.lhs, values), number(claim.rhs, values), rel, true)


def _probe(layer: Layer) -> dict[str, sympy.Expr]:
    """All dims 1: the smallest configuration, where a difference proved only
    non-negative is often exactly zero."""
    return {d.name: sympy.Integer(1) for d in layer.dims}


def _describe(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def decide(claim: Claim, layer: Layer,
           configurations: Sequence[Mapping[str, sympy.Expr]] = ()) -> ClaimResult:
    """Decide ``claim`` for all positive integer dims; evaluate it at each of
    ``configurations`` (no alternative derivations are tried here)."""
    dims = [d.symbol for d in layer.dims]
    difference = simplify_difference(claim.lhs - claim.rhs)
    s = sign(difference, dims)
    at = tuple(at_value(claim, c) for c in configurations)
    if s in _PROVES[claim.op]:
        return ClaimResult(claim, True, difference, _proof(claim.op, s), at)
    if s in _REFUTES[claim.op]:
        return ClaimResult(claim, False, difference, _refutation(claim.op, s), at)
    # Not decided by the sign: look for a counterexample at concrete points.
    for values in (_probe(layer), *configurations):
        point = at_value(claim, values)
        if not point.true:
            return ClaimResult(claim, False, difference,
                               f"false at {_describe(dict(point.dims))}", at)
    if claim.op == "==" and sympy.fraction(sympy.together(difference))[0].is_polynomial(*dims):
        # A non-zero polynomial is not zero at every positive integer point.
        return ClaimResult(claim, False, difference, "the difference is not identically zero", at)
    checked = "all dims 1" + (" and at every --at configuration" if configurations else "")
    return ClaimResult(claim, None, difference,
                       f"the sign of the difference is not provable; true at {checked}", at)


def _proof(op: str, s: str) -> str:
    if s == ZERO:
        return "the difference is identically zero" if op == "==" else \
            "both sides are identically equal"
    word = {POSITIVE: "positive", NEGATIVE: "negative", NONNEGATIVE: "non-negative",
            NONPOSITIVE: "non-positive"}[s]
    return f"the difference is {word} for all positive dims"


def _refutation(op: str, s: str) -> str:
    if s == ZERO:
        return "both sides are identically equal"
    if op == "==":
        return "the difference is not identically zero"
    if s in (NONNEGATIVE, NONPOSITIVE):
        return "the two sides are equal when every dim is 1"
    word = {POSITIVE: "positive", NEGATIVE: "negative"}[s]
    return f"the difference is {word} for all positive dims"


# ------------------------------------------------------------ assumptions --

@dataclass(frozen=True)
class Variant:
    """The layer with one single change, and what the change is, in words."""

    description: str
    derivation: Derivation


def variants(layer: Layer) -> tuple[Variant, ...]:
    """The layer with one input made gradient-free, or one parameter frozen,
    one at a time (only tensors that currently want a gradient)."""
    out = []
    for t in layer.tensors:
        if not t.requires_grad or t.role not in ("input", "param"):
            continue
        if t.role == "input":
            changed = dataclasses.replace(t, requires_grad=False)
            words = f"{t.name} needs no gradient (requires_grad: false)"
        else:
            changed = dataclasses.replace(t, role="frozen", requires_grad=False)
            words = f"{t.name} is frozen (role: frozen)"
        tensors = tuple(changed if u.name == t.name else u for u in layer.tensors)
        out.append(Variant(words, derive(dataclasses.replace(layer, tensors=tensors))))
    return tuple(out)


def holds_when(claim: Claim, alternatives: Sequence[tuple[str, Mapping[str, sympy.Expr]]],
               layer: Layer) -> str | None:
    """The changes (``alternatives``: description and claim symbols of the
    changed layer) under which ``claim`` holds, joined by '; or '."""
    found = []
    for description, symbols in alternatives:
        changed = parse_claim(claim.text, symbols)
        if decide(changed, layer).holds:
            found.append(description)
    return "; or ".join(found) if found else None


# -------------------------------------------------------------- the check --

def check(layer: Layer, claims: Sequence[str],
          configurations: Sequence[Mapping[str, sympy.Expr]] = (),
          unit: str = "FLOPs", precision: str | None = None) -> tuple[ClaimResult, ...]:
    """Decide every claim about ``layer``.  Every claim is parsed before any is
    decided, so bad input fails fast and whole."""
    derivation = derive(layer)
    symbols = claim_symbols(layer, summary(derivation, costs(derivation, unit, precision)))
    parsed = [parse_claim(text, symbols, k + 1) for k, text in enumerate(claims)]
    results = [decide(c, layer, configurations) for c in parsed]
    alternatives: list[tuple[str, Mapping[str, sympy.Expr]]] | None = None
    final = []
    for r in results:
        if r.holds is not True:
            if alternatives is None:  # derived lazily: only failing claims need them
                alternatives = [(v.description, claim_symbols(
                    v.derivation.layer, summary(v.derivation, costs(v.derivation, unit, precision))))
                    for v in variants(layer)]
            r = dataclasses.replace(r, holds_when=holds_when(r.claim, alternatives, layer))
        final.append(r)
    return tuple(final)


# ----------------------------------------------------------------- output --

def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.6g}"


def _percent(rel: float | None) -> str:
    return "n/a (lhs is 0)" if rel is None else f"{rel * 100:+.4g}%"




def text_report(layer: Layer, results: Sequence[ClaimResult]) -> str:
    counts = {v: sum(r.verdict == v for r in results)
              for v in ("holds", "does not hold", "undetermined")}
    tally = ", ".join(f"{v}: {n}" for v, n in counts.items() if n)
    lines = [f"{layer.name}: {len(results)} claim{'s' if len(results) != 1 else ''}; {tally}", ""]
    for k, r in enumerate(results, 1):
        lines.append(f"{k}. {r.claim.text}")
        indent = " " * (len(str(k)) + 2)
        lines.append(f"{indent}{r.verdict}: {r.reason}")
        lines.append(f"{indent}{difference_label(r.claim)} = {sympy.sstr(r.difference)}")
        if r.at:
            rows = [("at", "lhs", "rhs", "(rhs - lhs) / |lhs|")]
            rows += [(_describe(dict(a.dims)), _number(a.lhs), _number(a.rhs),
                      _percent(a.relative_error)) for a in r.at]
            lines += table(rows, indent)
        if r.holds is not True:
            lines.append(f"{indent}holds when: {r.holds_when}" if r.holds_when else
                         f"{indent}no single frozen parameter or gradient-free input makes it hold")
        lines.append("")
    return "\n".join(lines)
