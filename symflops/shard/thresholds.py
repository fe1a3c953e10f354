"""When the collectives hide behind the compute: inequalities the engine solves.

For each pass (forward, backward) and each mesh axis, a device's matrix
FLOPs of the pass take ``F / C`` seconds at ``C`` FLOP/s, and the pass's
collectives over the axis ``T = Σ k·V / W`` (:mod:`.timing`'s forms, ``W``
the axis's rate); they hide when ``F / C > T``, that is when the *ratio*
``F / (Σ k·V)``, a function of the dims and the mesh's sizes only, exceeds
``C / W``, the accelerator's FLOPs per byte its link moves.  Where the
ratio is one term (``B/X``: data parallelism, "How to Scale Your Model"
ch. 5; ``F/Y``: tensor parallelism), it is solved for its first dim
(``B > X·C/W_X``) and printed beside its value for named accelerators
(TPU v5p: ``C/W = 4.59e14 / 1.8e11 = 2550``; H100 within a node:
``989e12 / 450e9 = 2197.8``, the book's 2200 taken from 990e12).  Elementwise
work is left out of ``F`` (it runs on the vector units, not at ``C``).

For a mesh of two symbolic axes ``X`` and ``Y`` (``N = X Y`` devices), the
forward pass's collectives over both, one after the other (the book's
assumption), take ``T(X)`` with ``Y = N / X``; the engine solves
``dT/dX = 0`` for the best ``X`` (the book's ``X_opt = sqrt(B/F · M_X/M_Y ·
N)``, with ``M_X/M_Y`` the ratio of the axes' rates ``W_X/W_Y``) and the
condition under which the step is compute-bound there.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.hardware import Accelerator
from ..count.precision import Precision
from .analysis import Analysis
from .timing import FACTOR, bandwidth_symbol, need_bytes
from ..core import factoring

C = sympy.Symbol("C", positive=True)


@dataclass(frozen=True)
class Condition:
    """``ratio > C / W_axis`` for one pass and axis, solved where it is one term."""

    phase: str
    axis: str
    compute: sympy.Expr       # the pass's matrix FLOPs on one device
    moved: sympy.Expr         # Σ k·V over the axis, bytes (k: 1, 2 or 1/4 by collective)
    ratio: sympy.Expr         # compute / moved
    solved: sympy.Basic | None  # the inequality solved for its first dim, when it is one term

    @property
    def inequality(self) -> sympy.Basic:
        return sympy.StrictGreaterThan(self.ratio, C / bandwidth_symbol(self.axis),
                                       evaluate=False)


@dataclass(frozen=True)
class Optimum:
    """The best split of ``N = X·Y`` devices between two axes (forward pass)."""

    axis: str
    other: str
    total: sympy.Symbol
    best: sympy.Expr
    condition: sympy.Basic | None


def _monomial(e: sympy.Expr) -> bool:
    num, den = sympy.fraction(factoring.factor(e))
    return all(isinstance(x, (sympy.Mul, sympy.Pow, sympy.Symbol, sympy.Integer, sympy.Rational))
               and not isinstance(x, sympy.Add) and not x.has(sympy.Add) for x in (num, den))


def _solve(ratio: sympy.Expr, bound: sympy.Expr, dims: list[sympy.Symbol]) -> sympy.Basic | None:
    """``ratio > bound`` solved for the first dim with a positive power, when
    ``ratio`` is one term (a monomial over a monomial)."""
    ratio = factoring.factor(ratio)
    if not _monomial(ratio):
        return None
    powers = ratio.as_powers_dict()
    for d in dims:
        k = powers.get(d, 0)
        if k and k > 0:
            rest = sympy.simplify(ratio / d**k)
            return sympy.StrictGreaterThan(d, sympy.simplify((bound / rest) ** (1 / sympy.sympify(k))),
                                           evaluate=False)
    return None


def conditions(analysis: Analysis, precision: Precision, dims: list[sympy.Symbol]
               ) -> tuple[Condition, ...]:
    out = []
    axes = [a for a, _, _ in analysis.sharding.axes]
    for phase in ("forward", "backward"):
        compute = analysis.flops(phase)
        if compute == 0:
            continue
        for axis in axes:
            moved = sympy.expand(sum((FACTOR[m.need.kind] * need_bytes(m.need, precision)
                                      * m.copies for m in analysis.moved
                                      if m.phase == phase and axis in m.need.axes),
                                     sympy.Integer(0)))
            if moved == 0:
                continue
            ratio = factoring.factor_ratio(compute / moved)
            out.append(Condition(phase, axis, compute, moved, ratio,
                                 _solve(ratio, C / bandwidth_symbol(axis), dims)))
    return tuple(out)


def optimum(analysis: Analysis, precision: Precision, dims: list[sympy.Symbol]) -> Optimum | None:
    """The book's mixed FSDP + tensor parallelism optimum, for a mesh of
    exactly two symbolic axes that the forward pass moves data over."""
    axes = analysis.sharding.axes
    if len(axes) != 2 or not all(isinstance(size, sympy.Symbol) for _, size, _ in axes):
        return None
    (x_name, x, _), (y_name, y, _) = axes
    time = sympy.Integer(0)
    for m in analysis.moved:
        if m.phase != "forward":
            continue
        rate = bandwidth_symbol(m.need.axes[0])
        time += FACTOR[m.need.kind] * need_bytes(m.need, precision) * m.copies / rate
    if not all(time.has(bandwidth_symbol(a)) for a in (x_name, y_name)):
        return None
    taken = {str(d) for d in dims} | {str(s) for _, size, _ in axes for s in size.free_symbols}
    # the devices' count, named apart from every dim (a transformer's heads are often N)
    n = sympy.Symbol(next(c for c in ("N", "N_mesh", "N_devices", "N_all") if c not in taken),
                     positive=True)
    of_x = sympy.simplify(time.subs(y, n / x))
    found = [s for s in sympy.solve(sympy.diff(of_x, x), x) if s.is_positive is not False]
    if len(found) != 1:
        return None
    best = sympy.simplify(found[0])
    compute = analysis.flops("forward").subs(y, n / x)
    at = sympy.simplify((compute / C) / of_x.subs(x, best))
    cond = _solve(sympy.simplify(at * C), C, dims) if _monomial(sympy.simplify(at * C)) else None
    return Optimum(x_name, y_name, n, best, cond)


def value(condition: Condition, accelerator: Accelerator, rates: dict[str, sympy.Expr],
          compute: str = "bf16") -> sympy.Expr | None:
    """``C / W`` of the condition's axis on ``accelerator`` (None: no link known)."""
    rate = rates.get(condition.axis)
    if rate is None:
        return None
    return sympy.Rational(accelerator.peak(compute)) / rate
