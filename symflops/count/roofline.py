"""The roofline: arithmetic intensity, the compute-bound thresholds solved
symbolically, and time bounds per op, from the bytes of
:mod:`symflops.count.traffic` and the accelerators of
:mod:`symflops.core.hardware`.

* **Intensity** of an op (or a layer): its FLOPs, both buckets (matrix
  products and elementwise work), over the bytes it moves; a rational function
  of the dims.  The compute side is priced at the tensor cores' dense peak
  for ``compute`` (bf16 by default): the vector units' lower peak is not in
  the hardware table, and elementwise ops are memory-bound by far under either.
* **Ridge**: an accelerator's peak FLOP/s over its memory bandwidth (bytes/s),
  ``I_acc``.  An op is compute-bound when its intensity exceeds it, that is
  when ``FLOPs - I_acc · bytes > 0`` (bytes are positive).  :func:`threshold`
  solves this for one dim with SymPy, symbolically (for a condition linear in
  that dim: ``B > D·F·I_acc / (D·F - I_acc·(D + F))`` for a bf16 matmul,
  where its denominator is positive) and at given values of the other dims
  and of ``I_acc``; and takes the intensity's limit as every other dim of
  the op grows without bound together (``2BDF / (2BD + 2DF + 2BF) -> B``),
  solved the same way (``B > I_acc``: the "B > 240" of TPU v5e).
* **Time bound** of one run of an op: ``max(FLOPs / peak, bytes / bandwidth)``,
  the side that is larger binds; a layer's is the sum over its ops and their
  runs (each op waits for its own bytes; no overlap between ops is assumed).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.hardware import Compute, preset
from ..core.ir import dim_symbol
from .evaluate import number
from .traffic import Moved, Traffic
from ..core import factoring

Bound = Literal["compute", "memory"]


@dataclass(frozen=True)
class Roof:
    """An accelerator's roof: its dense peak for one precision and its
    memory bandwidth, each with the figure's source."""

    name: str
    compute: Compute
    peak: Fraction          # FLOP/s
    bandwidth: Fraction     # bytes/s
    source: str

    @property
    def ridge(self) -> Fraction:
        """FLOPs per byte at which the two sides of the roof meet."""
        return self.peak / self.bandwidth


def roof(name: str, compute: Compute = "bf16", peak: Fraction | None = None,
         bandwidth: Fraction | None = None) -> Roof:
    """The preset ``name``'s roof (``peak``, ``bandwidth``: given figures instead)."""
    a = preset(name)
    return Roof(a.name, compute, a.peak(compute) if peak is None else Fraction(peak),
                a.bandwidth if bandwidth is None else Fraction(bandwidth), a.source)


def ridge_symbol(dims: set[str]) -> sympy.Symbol:
    """``I_acc``, the ridge as a symbol, primed when a dim takes that name."""
    name = "I_acc"
    while name in dims:
        name += "'"
    return sympy.Symbol(name, positive=True)


# The solvers below (intensity, symbolic, numeric, limit) are pure functions
# of SymPy expressions, which are immutable and hashable: each is kept per
# process (at most 4,096 answers each), so that a layer's thresholds are
# solved once when its sheet is rendered again (each format of a sheet in a
# notebook, a test suite) and once for the ops of equal shape in several
# layers.  Factoring the conditions was half of a sheet's rendering.
@functools.lru_cache(maxsize=4096)
def intensity(work: sympy.Expr, moved: sympy.Expr) -> sympy.Expr | None:
    """FLOPs per byte, as a rational function in lowest terms (None: no bytes)."""
    if sympy.expand(moved) == 0:
        return None
    return factoring.factor_ratio(sympy.expand(work) / sympy.expand(moved))


# ------------------------------------------------------------- thresholds --

@dataclass(frozen=True)
class Solved:
    """Where ``condition > 0`` holds for ``dim > 0``: a union of open
    intervals ``(low, high)`` (``high`` None: unbounded), exact where the
    condition is linear in the dim."""

    text: str                  # "B > 240.5", "every B", "no B", "0 < B < 2 or B > 3"
    intervals: tuple[tuple[Fraction, Fraction | None], ...]

    @property
    def least(self) -> Fraction | None:
        """The bound of "dim > least", when the region is that."""
        if len(self.intervals) == 1 and self.intervals[0][1] is None and self.intervals[0][0]:
            return self.intervals[0][0]
        return None

    def holds(self, value: Fraction) -> bool:
        return any(low < value and (high is None or value < high) for low, high in self.intervals)


@dataclass(frozen=True)
class Threshold:
    """When an op (or a layer) is compute-bound, as a condition on ``dim``."""

    label: str
    dim: str
    ridge: sympy.Symbol
    condition: sympy.Expr                 # compute-bound iff condition > 0
    solved: str | None                    # the condition solved symbolically (linear in dim)
    edge: sympy.Expr | None               # that solution's bound: dim > edge where slope > 0
    slope: sympy.Expr | None              # the condition's coefficient of dim
    limit: sympy.Expr | None              # the intensity as every other dim grows together
    others: tuple[str, ...]               # those dims
    at: tuple[tuple[str, Solved], ...]    # per roof: the condition at the given values
    limit_at: tuple[tuple[str, Solved], ...]  # per roof: limit > ridge, solved


def _poly(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Poly | None:
    try:
        return sympy.Poly(sympy.expand(expr), x)
    except sympy.PolynomialError:
        return None


@functools.lru_cache(maxsize=4096)
def symbolic(condition: sympy.Expr, x: sympy.Symbol
             ) -> tuple[str | None, sympy.Expr | None, sympy.Expr | None]:
    """``condition > 0`` solved for ``x`` when it is linear in ``x`` (or does
    not depend on it): the text (``B > D*F*I_acc/(D*F - I_acc*(D + F)) when
    D*F > I_acc*(D + F) (else never)``), the bound and the slope."""
    p = _poly(_drop_positive(condition), x)   # the same sign, positive factors (x) out
    if p is None or p.degree() > 1:
        return None, None, None
    if p.degree() < 1:
        return f"for every {x} when {_positive(condition)}, for none otherwise", None, None
    c1, c0 = (sympy.expand(c) for c in p.all_coeffs())
    if c0 == 0:   # c1 * x > 0 with x > 0
        return f"for every {x} when {_positive(c1)}, for none otherwise", sympy.Integer(0), c1
    edge = factoring.factor_ratio(-c0 / c1)
    top, bottom = sympy.fraction(edge)
    if top.could_extract_minus_sign():
        top, bottom = -top, -bottom
    text = f"{_wrapped(top)}/({_split(bottom)})" if bottom != 1 else sympy.sstr(top)
    if c1.is_positive:
        return f"{x} > {text}", edge, c1
    if c1.is_negative:
        return f"{x} < {text}", edge, c1
    return f"{x} > {text} when {_positive(c1)} (else never)", edge, c1


def _wrapped(e: sympy.Expr) -> str:
    text = sympy.sstr(e)
    return f"({text})" if isinstance(e, sympy.Add) else text


def _drop_positive(e: sympy.Expr) -> sympy.Expr:
    """``e`` without its positive factors (dims, numbers, sums of them): the
    sign is the same."""
    factored = factoring.factor(sympy.expand(e))
    kept = [f for f in sympy.Mul.make_args(factored) if not f.is_positive]
    return sympy.expand(sympy.Mul(*kept))


def _split(e: sympy.Expr, ridge: str = "I_acc") -> str:
    """``e`` as its terms without the ridge, minus (or plus) the ridge times
    the rest: ``D*F - I_acc*(D + F)``."""
    e = sympy.expand(e)
    ridges = [s for s in e.free_symbols if s.name.startswith(ridge)]
    if len(ridges) != 1 or sympy.degree(e, ridges[0]) != 1:
        return sympy.sstr(factoring.factor(e))
    r = ridges[0]
    k = e.coeff(r)
    rest = sympy.expand(e - k * r)
    sign, k = ("-", -k) if k.could_extract_minus_sign() else ("+", k)
    times = sympy.sstr(r * factoring.factor(k))
    if rest == 0:
        return times if sign == "+" else f"-{times}"
    if rest.is_number:
        return f"{'' if sign == '+' else '-'}{times} {'+' if rest > 0 else '-'} {abs(rest)}"
    return f"{sympy.sstr(factoring.factor(rest))} {sign} {times}"


def _positive(c: sympy.Expr) -> str:
    """``c > 0`` written as its positive terms against its negative ones,
    positive factors dropped: ``D*F > I_acc*(D + F)``, ``1 > 4*I_acc``."""
    _, c = _drop_positive(c).as_content_primitive()
    terms = sympy.Add.make_args(c)
    plus = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
    minus = -sympy.Add(*(t for t in terms if t.could_extract_minus_sign()))
    return f"{sympy.sstr(factoring.factor(plus))} > {sympy.sstr(factoring.factor(minus))}"


@functools.lru_cache(maxsize=4096)
def numeric(condition: sympy.Expr, x: sympy.Symbol) -> Solved:
    """``condition > 0`` (a polynomial in ``x`` alone) for ``x > 0``."""
    free = condition.free_symbols - {x}
    if free:
        raise ValueError(f"unbound symbols {free}")
    real = sympy.Symbol(x.name, positive=True)
    cond = _drop_positive(condition.xreplace({x: real}))
    zero = Fraction(0)
    if real not in cond.free_symbols:
        return _region(x, ((zero, None),) if cond > 0 else ())
    p = sympy.Poly(cond, real)
    if p.degree() == 1:   # c1 x + c0 > 0, exactly
        c1, c0 = (Fraction(int(c.p), int(c.q)) for c in p.all_coeffs())
        edge = -c0 / c1
        if c1 > 0:
            return _region(x, ((max(edge, zero), None),))
        return _region(x, ((zero, edge),) if edge > 0 else ())
    # the positive real roots, exactly (a rational root as itself, another as
    # CRootOf), then the sign between each two: sympy's inequality solver
    # gives up on some cubics (29x^3 - 494x^2 - 2557x - 1046 > 0)
    roots = sorted({r for r in p.real_roots() if r.is_positive}, key=_fraction_of)
    edges: list[Fraction] = [zero, *(_fraction_of(r) for r in roots)]
    intervals = []
    for k, low in enumerate(edges):
        high = edges[k + 1] if k + 1 < len(edges) else None
        inside = low + 1 if high is None else (low + high) / 2
        if p.eval(sympy.Rational(inside.numerator, inside.denominator)) > 0:
            intervals.append((low, high))   # open: a root itself never holds
    return _region(x, tuple(intervals))


def _fraction_of(v: sympy.Expr) -> Fraction:
    """A root as a fraction: exactly when rational, else to 60 digits (the
    integers a region is read at are never that close to an irrational root)."""
    if v.is_Rational:
        return Fraction(int(v.p), int(v.q))
    return Fraction(str(sympy.N(v, 60)))


def _region(x: sympy.Symbol, intervals: tuple[tuple[Fraction, Fraction | None], ...]) -> Solved:
    if not intervals:
        return Solved(f"no {x}", ())
    if intervals == ((Fraction(0), None),):
        return Solved(f"every {x}", intervals)
    text = " or ".join(f"{x} > {_show(low)}" if high is None else
                       ("" if low == 0 else f"{_show(low)} < ") + f"{x} < {_show(high)}"
                       for low, high in intervals)
    return Solved(text, intervals)


def _show(v: Fraction) -> str:
    return f"{int(v)}" if v.denominator == 1 else f"{float(v):.6g}"


def _rational(e: sympy.Expr) -> bool:
    """A ratio of polynomials in its symbols: no ``Min`` (a window's count
    before it fills), no ``Piecewise``; what the solvers here take."""
    return bool(sympy.sympify(e).is_rational_function(*sympy.sympify(e).free_symbols))


@functools.lru_cache(maxsize=4096)
def limit(value: sympy.Expr, x: sympy.Symbol) -> tuple[sympy.Expr | None, tuple[str, ...]]:
    """``value``'s limit as every dim but ``x`` grows without bound together
    (None where ``value`` is not a rational function: not taken)."""
    others = sorted(value.free_symbols - {x}, key=lambda s: s.name)
    names = tuple(o.name for o in others)
    if not others or not _rational(value):
        return None, names
    # every other dim as one t: a ratio of polynomials in t, whose limit as t
    # grows is the ratio of their leading coefficients when the degrees are
    # equal, 0 when the numerator's is lower, unbounded (not taken) when higher
    t = sympy.Dummy("t", positive=True)
    top, bottom = (sympy.Poly(e, t) for e in
                   sympy.fraction(sympy.together(value.xreplace({o: t for o in others}))))
    if top.is_zero or top.degree() < bottom.degree():
        return sympy.Integer(0), names
    if top.degree() > bottom.degree():
        return None, names
    return factoring.factor(top.LC() / bottom.LC()), names


def threshold(label: str, work: sympy.Expr, moved: sympy.Expr, dim: str,
              roofs: tuple[Roof, ...], values: Mapping[str, Any], ridge: sympy.Symbol
              ) -> Threshold | None:
    """When ``work`` FLOPs over ``moved`` bytes is compute-bound, solved for
    ``dim`` (None when neither side depends on it)."""
    x = dim_symbol(dim)
    if x not in (sympy.sympify(work).free_symbols | sympy.sympify(moved).free_symbols):
        return None
    condition = sympy.expand(work - ridge * moved)
    given = {dim_symbol(k): sympy.Integer(int(v)) for k, v in values.items() if k != dim}
    at, limit_at = [], []
    value = intensity(work, moved)
    lim, others = limit(value, x) if value is not None else (None, ())
    for r in roofs:
        rr = sympy.Rational(r.ridge.numerator, r.ridge.denominator)
        c = condition.xreplace({**given, ridge: rr})
        if not (c.free_symbols - {x}) and _rational(c):
            at.append((r.name, numeric(c, x)))
        if lim is not None and x in lim.free_symbols:
            limit_at.append((r.name, numeric(sympy.expand(sympy.numer(sympy.together(lim - rr))
                                                          * sympy.denom(sympy.together(lim - rr))),
                                             x)))
    text, edge, slope = symbolic(condition, x) if _rational(condition) else (None, None, None)
    return Threshold(label, dim, ridge, condition, text, edge, slope, lim, others,
                     tuple(at), tuple(limit_at))


# ---------------------------------------------------------------- time bounds --

@dataclass(frozen=True)
class OpBound:
    """One op (or rule) on one roof, at numbers: one run, and its runs."""

    entry: Moved
    work: Fraction            # FLOPs, both buckets
    bytes: Fraction
    copies: int
    compute_s: Fraction       # one run
    memory_s: Fraction

    @property
    def intensity(self) -> Fraction | None:
        return None if self.bytes == 0 else self.work / self.bytes

    @property
    def bound(self) -> Bound:
        return "compute" if self.compute_s >= self.memory_s and self.work else "memory"

    @property
    def seconds(self) -> Fraction:
        return max(self.compute_s, self.memory_s) * self.copies


@dataclass(frozen=True)
class Bounded:
    """A phase on one roof: every op's bound and their sum."""

    roof: Roof
    ops: tuple[OpBound, ...]
    tokens: Fraction | None       # tokens one run of the phase processes (decode: sequences)

    @property
    def seconds(self) -> Fraction:
        return sum((o.seconds for o in self.ops), Fraction(0))

    def total(self, what: str) -> Fraction:
        return sum((getattr(o, what) * o.copies for o in self.ops), Fraction(0))

    @property
    def bound_seconds(self) -> dict[Bound, Fraction]:
        out: dict[Bound, Fraction] = {"compute": Fraction(0), "memory": Fraction(0)}
        for o in self.ops:
            out[o.bound] += o.seconds
        return out

    @property
    def tokens_per_s(self) -> Fraction | None:
        return None if self.tokens is None or not self.seconds else self.tokens / self.seconds


def _fraction(v: Any) -> Fraction:
    return Fraction(v) if isinstance(v, int) else Fraction(str(v)) if isinstance(v, float) \
        else Fraction(int(v.p), int(v.q))


def _exact(expr: sympy.Expr, values: Mapping[str, Any]) -> Fraction:
    result = sympy.sympify(expr).xreplace({dim_symbol(k): sympy.Integer(int(v))
                                           for k, v in values.items()})
    if not result.is_Rational:
        return _fraction(number(expr, values))
    return Fraction(int(result.p), int(result.q))


def bounded(traffic: Traffic, r: Roof, values: Mapping[str, Any],
            tokens: sympy.Expr | None = None) -> Bounded:
    """``traffic`` at ``values`` on roof ``r``."""
    ops = []
    for e in traffic.entries:
        work, moved = _exact(e.work, values), _exact(e.bytes, values)
        copies = _exact(e.copies, values)
        if copies.denominator != 1 or work < 0 or moved < 0:
            raise SymflopsError(f"{e.label}: a count is not a whole non-negative number here",
                                hint="give values at which the declaration's sizes are whole")
        ops.append(OpBound(e, work, moved, int(copies), work / r.peak, moved / r.bandwidth))
    return Bounded(r, tuple(ops), None if tokens is None else _exact(tokens, values))
