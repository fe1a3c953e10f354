"""Verdicts on claims: for every positive integer value of the dims, at given
configurations only, or, for an approximate claim, the region where it holds.

* An equality holds when the difference ``lhs - rhs`` simplifies to 0.  An
  inequality holds when it is proved: the difference, in ``u = dim - 1 >=
  0``, has coefficients of one sign (:func:`symflops.core.sizes.sign`).  A
  claim false at a concrete point (all dims 1, or a ``--at`` configuration)
  does not hold.
* ``lhs ≈ rhs`` holds where ``|lhs - rhs| <= rtol·|lhs|``: relative to the
  left-hand side, the derived quantity as claims are usually written.  When
  that is not proved or refuted for every value of the dims, the region where
  it holds is solved for one dim where the engine can: each of the two
  conditions ``rtol·lhs ∓ (lhs - rhs) >= 0`` that is not proved, when it is
  linear in a dim whose coefficient has a proved sign, is a bound on that dim
  (``S <= 19*N/(L*E)``), the dims of the difference tried first.  Inequalities
  undetermined for all dims get their region the same way.
* With ``only_at`` a claim is about the configurations given and nothing
  else: it holds when it is true at each (within rtol for ``≈``).
* ``relative_error`` at a configuration is ``(rhs - lhs) / |lhs|``; None when
  lhs is 0 and rhs is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import dim_symbol
from ..core.sizes import NEGATIVE, NONNEGATIVE, NONPOSITIVE, POSITIVE, UNKNOWN, ZERO, sign  # noqa: F401
from ..count.evaluate import number
from .claim import Claim
from ..core import factoring

#: The relative tolerance of '≈' when none is given (--rtol, or 'rtol:' in a claims file).
DEFAULT_RTOL = sympy.Rational(1, 20)

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
_AT_LEAST_ZERO = {POSITIVE, NONNEGATIVE, ZERO}


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
class Verdict:
    """``holds``: True (for every value of the dims, or at every configuration
    of ``only_at``), False, or None (undetermined, or only where ``region``
    says); ``verdict`` in words; ``reason`` in one line."""

    holds: bool | None
    verdict: str
    difference: sympy.Expr
    reason: str
    at: tuple[AtValue, ...] = ()
    region: str | None = None


def describe(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _exact(expr: sympy.Expr, values: Mapping[str, sympy.Expr]) -> sympy.Expr:
    return expr.subs({dim_symbol(k): v for k, v in values.items()})


def at_value(claim: Claim, values: Mapping[str, sympy.Expr],
             rtol: sympy.Rational = DEFAULT_RTOL) -> AtValue:
    """Both sides of ``claim`` at ``values`` (exact where SymPy can be)."""
    lhs, rhs = _exact(claim.lhs, values), _exact(claim.rhs, values)
    if lhs.free_symbols or rhs.free_symbols:
        missing = sorted(str(s) for s in (lhs.free_symbols | rhs.free_symbols))
        raise SymflopsError(f"no value for dimension(s) {', '.join(missing)} at "
                            f"{describe(values) or 'the configuration'}",
                            hint="give every dim the claim uses, e.g. "
                            + ",".join(f"{n}=..." for n in missing))
    if lhs == 0:
        rel: float | None = 0.0 if rhs == 0 else None
    else:
        rel = float((rhs - lhs) / abs(lhs))
    gap = lhs - rhs
    if claim.approx:
        bound = rtol * abs(lhs)
        true = bool(abs(gap) <= bound) if (gap.is_comparable and bound.is_comparable) else False
    else:
        # Exact for rationals; SymPy compares other real numbers numerically.
        true = bool(_TRUTH[claim.op](gap, 0)) if gap.is_comparable else False
    dims = tuple((k, int(v) if v.is_Integer else float(v)) for k, v in values.items())
    return AtValue(dims, number(claim.lhs, values), number(claim.rhs, values), rel, true)


def _word(s: str) -> str:
    return {POSITIVE: "positive", NEGATIVE: "negative", NONNEGATIVE: "non-negative",
            NONPOSITIVE: "non-positive"}[s]


def _proof(op: str, s: str) -> str:
    if s == ZERO:
        return "the difference is identically zero" if op == "==" else \
            "both sides are identically equal"
    return f"the difference is {_word(s)} for all positive dims"


def _refutation(op: str, s: str) -> str:
    if s == ZERO:
        return "both sides are identically equal"
    if op == "==":
        return "the difference is not identically zero"
    if s in (NONNEGATIVE, NONPOSITIVE):
        return "the two sides are equal when every dim is 1"
    return f"the difference is {_word(s)} for all positive dims"


def percent(r: sympy.Rational) -> str:
    return f"{float(r) * 100:.4g} %"


def decide(claim: Claim, dims: Sequence[sympy.Symbol],
           configurations: Sequence[Mapping[str, sympy.Expr]] = (), *,
           only_at: bool = False, rtol: sympy.Rational = DEFAULT_RTOL,
           prefer: Sequence[sympy.Symbol] = ()) -> Verdict:
    """Decide ``claim`` (see the module); ``dims`` are the symbols its sides
    may hold, ``prefer`` the dims a region is first solved for."""
    difference = simplify_difference(claim.lhs - claim.rhs)
    prefer = list(prefer) or [x for x in dims if x in difference.free_symbols]
    at = tuple(at_value(claim, c, rtol) for c in configurations)
    if only_at:
        return _only_at(claim, difference, at, rtol)
    if claim.approx:
        return _approx(claim, difference, dims, at, rtol, prefer)
    s = sign(difference, dims)
    if s in _PROVES[claim.op]:
        return Verdict(True, "holds", difference, _proof(claim.op, s), at)
    if s in _REFUTES[claim.op]:
        return Verdict(False, "does not hold", difference, _refutation(claim.op, s), at)
    # Not decided by the sign: look for a counterexample at concrete points.
    used = claim.lhs.free_symbols | claim.rhs.free_symbols
    probe = {str(d): sympy.Integer(1) for d in dims if d in used}
    for values, point in ((probe, None), *zip(configurations, at)):
        point = point or at_value(claim, values, rtol)
        if not point.true:
            return Verdict(False, "does not hold", difference,
                           f"false at {describe(dict(point.dims)) or 'every value'}"
                           + _configuration_hint(claim, configurations), at)
    if claim.op == "==" and sympy.fraction(sympy.together(difference))[0].is_polynomial(*dims):
        # A non-zero polynomial is not zero at every positive integer point.
        return Verdict(False, "does not hold", difference, "the difference is not identically zero"
                       + _configuration_hint(claim, configurations), at)
    if claim.op in ("<", "<=", ">", ">="):
        gap = -difference if claim.op in ("<", "<=") else difference
        found = region(gap, dims, prefer, strict=claim.op in ("<", ">"))
        if found is not None:
            return Verdict(None, "holds where", difference, f"true where {found}", at, found)
    checked = "all dims 1" + (" and at every --at configuration" if configurations else "")
    return Verdict(None, "undetermined", difference,
                   f"the sign of the difference is not provable; true at {checked}", at)


def _configuration_hint(claim: Claim, configurations: Sequence[Mapping[str, Any]]) -> str:
    """A claim whose one side is a number, checked at configurations, is
    likely about them alone: say how to decide it there."""
    constant = not claim.rhs.free_symbols or not claim.lhs.free_symbols
    if constant and configurations:
        return " (a claim about one configuration is decided there alone with --only-at)"
    return ""


def _only_at(claim: Claim, difference: sympy.Expr, at: tuple[AtValue, ...],
             rtol: sympy.Rational) -> Verdict:
    within = f" within {percent(rtol)}" if claim.approx else ""
    false = [a for a in at if not a.true]
    if false:
        return Verdict(False, "does not hold", difference,
                       f"false{within} at {describe(dict(false[0].dims))}", at)
    where = "the configuration" if len(at) == 1 else f"each of the {len(at)} configurations"
    return Verdict(True, "holds", difference, f"true{within} at {where} given (--only-at)", at)


def _approx(claim: Claim, difference: sympy.Expr, dims: Sequence[sympy.Symbol],
            at: tuple[AtValue, ...], rtol: sympy.Rational,
            prefer: Sequence[sympy.Symbol]) -> Verdict:
    within = f"within {percent(rtol)}"
    if difference == 0:
        return Verdict(True, "holds", difference, "the difference is identically zero", at)
    lhs = simplify_difference(claim.lhs)
    s = sign(lhs, dims)
    if s not in (POSITIVE, NEGATIVE):
        return Verdict(None, "undetermined", difference,
                       f"the sign of the left-hand side is not provable, so its tolerance is "
                       "not either; see the relative error at each --at", at)
    size = lhs if s == POSITIVE else -lhs
    conditions = []
    for gap in (simplify_difference(rtol * size - difference),
                simplify_difference(rtol * size + difference)):
        g = sign(gap, dims)
        if g in _AT_LEAST_ZERO:
            continue
        if g == NEGATIVE:
            return Verdict(False, "does not hold", difference,
                           f"the two sides differ by more than {percent(rtol)} of the left-hand "
                           "side for all positive dims", at)
        found = region(gap, dims, prefer, strict=False)
        if found is None:
            return Verdict(None, "undetermined", difference,
                           f"where it holds {within} is not solved here; see the relative error "
                           "at each --at", at)
        conditions.append(found)
    if not conditions:
        return Verdict(True, "holds", difference,
                       f"the relative difference is at most {percent(rtol)} for all positive dims",
                       at)
    where = " and ".join(conditions)
    return Verdict(None, "holds where", difference, f"{within} of the left-hand side where {where}",
                   at, where)


def region(gap: sympy.Expr, dims: Sequence[sympy.Symbol], prefer: Sequence[sympy.Symbol] = (),
           strict: bool = False) -> str | None:
    """Where ``gap >= 0`` (``> 0`` when ``strict``), as a bound on one dim:
    ``S <= 19*N``; None when ``gap`` is not linear in any dim whose
    coefficient has a proved sign (over a denominator of proved sign)."""
    num, den = sympy.fraction(sympy.cancel(sympy.together(gap)))
    d = sign(den, dims)
    if d not in (POSITIVE, NEGATIVE):
        return None
    if d == NEGATIVE:
        num = -num
    num = sympy.expand(num)
    order = [x for x in prefer if x in num.free_symbols]
    order += [x for x in dims if x in num.free_symbols and x not in order]
    for x in order:
        if not num.is_polynomial(x) or sympy.degree(num, x) != 1:
            continue
        a, b = num.coeff(x, 1), num.coeff(x, 0)
        sa = sign(a, dims)
        if sa == POSITIVE:    # a x + b >= 0  <=>  x >= -b/a
            bound, rel = factoring.factor_ratio(-b / a), ">" if strict else ">="
        elif sa == NEGATIVE:  # x <= b/(-a)
            bound, rel = factoring.factor_ratio(b / -a), "<" if strict else "<="
        else:
            continue
        return f"{x} {rel} {sympy.sstr(bound)}"
    return None
