"""The factors and einsum products every op is written in.

A :class:`Factor` is one indexed tensor of a product, ``X[b,d]``, optionally
under a pointwise function (:class:`Apply`: ``gelu(H[b,f])``, its derivative
``gelu'(H[b,f])``) or an indicator (an Iverson bracket such as ``[t <= s]``).
An :class:`Einsum` is ``output = coefficient * prod(operands)``, summed over
every letter not on the output.  Both are frozen and compare by value, which
the rule-merging code relies on.  Re-exported by :mod:`symflops.core.ir`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Literal, get_args

import sympy

from .domain import Bound
from .errors import Span



#: Which form of a pointwise function a factor applies: the function itself,
#: its derivative at the input, or its derivative written in terms of the
#: function's output (for functions whose convention saves the output).
FunctionForm = Literal["value", "derivative", "derivative@out"]
_FORM_SUFFIX: dict[FunctionForm, str] = {"value": "", "derivative": "'", "derivative@out": "'@out"}


@dataclass(frozen=True)
class Apply:
    """A pointwise function applied to a factor: ``name`` is a key of
    :data:`symflops.ops.functions.FUNCTIONS`.  ``str`` gives the code every
    rule, sheet and ``--json`` prints: ``gelu``, ``gelu'``, ``sigmoid'@out``."""

    name: str
    form: FunctionForm = "value"

    def __str__(self) -> str:
        return self.name + _FORM_SUFFIX[self.form]


#: Indicator factors (Iverson brackets), by the relation they state; see
#: :data:`COMPARISONS`, :data:`SELECT` and :data:`SHIFT` below.
ComparisonOp = Literal["<=", "<", ">=", ">"]


Indicator = Literal[ComparisonOp, "=", "=+", "=+c"]


@dataclass(frozen=True)
class Factor:
    """One indexed tensor occurrence, e.g. ``X[b,d]``, optionally through a
    pointwise function (``fn``, an :class:`Apply`: ``gelu``, its derivative
    ``gelu'``, or ``sigmoid'@out``, the derivative written in terms of the
    function's output), or an indicator (``fn``, an :data:`Indicator`)."""

    tensor: str
    indices: tuple[str, ...]
    span: Span | None = field(default=None, compare=False)
    fn: Apply | Indicator | None = None
    #: the constant of an offset indicator ``[t = s + M]`` (:data:`OFFSET`), a
    #: SymPy expression in the dims; zero for every other factor
    offset: sympy.Expr = sympy.Integer(0)

    def __post_init__(self) -> None:
        # A bare string that is no indicator is a function name a producer
        # forgot to wrap in Apply: fail loudly rather than print it as a relation.
        if isinstance(self.fn, str) and self.fn not in INDICATORS:
            raise TypeError(f"Factor.fn {self.fn!r} is neither an Apply nor an indicator")

    def __str__(self) -> str:
        if self.is_indicator:
            return f"[{self.condition()}]"
        core = f"{self.tensor}[{','.join(self.indices)}]"
        return f"{self.fn}({core})" if self.fn else core

    @property
    def is_indicator(self) -> bool:
        """An Iverson bracket, 1 inside a domain and 0 outside (see
        :data:`COMPARISONS` and :data:`SELECT`): never differentiated, never a
        saved tensor, a restriction of the summation domain in the cost model."""
        return self.fn in INDICATORS

    @property
    def function(self) -> Apply | None:
        """The pointwise function the factor applies, if any."""
        return self.fn if isinstance(self.fn, Apply) else None

    @property
    def is_comparison(self) -> bool:
        return self.fn in COMPARISONS

    @property
    def is_select(self) -> bool:
        return self.fn == SELECT

    @property
    def is_shift(self) -> bool:
        return self.fn == SHIFT

    @property
    def is_offset(self) -> bool:
        return self.fn == OFFSET

    @property
    def reads_tensor(self) -> bool:
        """Whether the factor reads a tensor (a lookup reads its index tensor;
        a comparison, a shift or an offset reads none)."""
        return not (self.is_comparison or self.is_shift or self.is_offset)

    def moved(self) -> str:
        """An offset's target written inline, ``M+s`` (``s`` for offset 0)."""
        if self.offset == 0:
            return self.indices[1]
        return sympy.sstr(self.offset).replace(" ", "") + "+" + self.indices[1]

    def condition(self) -> str:
        """The indicator's condition as written in a where-clause: ``t <= s``, ``v = tok[b]``."""
        if self.is_select:
            return f"{self.indices[0]} = {self.tensor}[{','.join(self.indices[1:])}]"
        if self.is_shift:
            return f"{self.indices[0]} = {self.indices[1]} + {self.indices[2]}"
        if self.is_offset:
            return f"{self.indices[0]} = {self.moved().replace('+', ' + ')}"
        return f"{self.indices[0]} {self.fn} {self.indices[1]}"


#: Indicator factors.  ``Factor("", (a, b), fn="<=")`` is ``[a <= b]`` (a causal
#: mask: ``where t <= s``); ``Factor(tok, (v, b), fn="=")`` is ``[v = tok[b]]``,
#: the one-hot selection a lookup ``E[tok[b], d]`` multiplies by (``v`` ranges
#: over the looked-up axis).  Tensors named by indicators are read, not
#: differentiated.
COMPARISONS: tuple[ComparisonOp, ...] = get_args(ComparisonOp)


SELECT: Indicator = "="


#: ``Factor("", (q, p, k), fn="=+")`` is ``[q = p + k]``: a shifted index
#: ``X[b,c,p+k]`` (a convolution) reads ``X[b,c,q]`` with a fresh letter ``q``
#: over X's axis, times this indicator.
SHIFT: Indicator = "=+"


#: ``Factor("", (t, s), fn="=+c", offset=M)`` is ``[t = s + M]``: a part of a
#: concatenation (:mod:`symflops.ops.concat`) written at its place ``M`` along
#: the joined axis, and its gradient, the slice ``dK[b,M+s,e]``.  The offset is
#: a constant (the extents of the parts before it), so ``t`` is determined by
#: ``s`` and a product through it is a copy.
OFFSET: Indicator = "=+c"


INDICATORS: tuple[Indicator, ...] = get_args(Indicator)


def comparison(f: Factor) -> Bound:
    """A comparison indicator as the bound it says: ``[s >= t]`` is ``Bound(t, s, strict=False)``."""
    a, b = f.indices
    return Bound(a, b, f.fn == "<") if f.fn in ("<=", "<") else Bound(b, a, f.fn == ">")


def selections(operands: Iterable[Factor]) -> dict[str, tuple[str, ...]]:
    """Letters a lookup, a shift or an offset determines: ``v -> (b,)`` for
    ``[v = tok[b]]``, ``q -> (p, k)`` for ``[q = p + k]``, ``t -> (s,)`` for
    ``[t = s + M]``."""
    return {f.indices[0]: f.indices[1:] for f in operands
            if f.is_select or f.is_shift or f.is_offset}


@dataclass(frozen=True)
class Einsum:
    """``output = coefficient * prod(operands)``, summed over every index that
    is not on the output.  An output index may be missing from the operands
    (the result broadcasts along it) or repeated (only the diagonal is
    written); both arise in gradients and never in forward ops."""

    output: Factor
    operands: tuple[Factor, ...]
    coefficient: sympy.Expr = sympy.Integer(1)

    @property
    def indices(self) -> tuple[str, ...]:
        """Every distinct index letter, in order of first appearance."""
        seen: dict[str, None] = {}
        for f in (self.output, *self.operands):
            for i in f.indices:
                seen.setdefault(i, None)
        return tuple(seen)

    @property
    def summed(self) -> tuple[str, ...]:
        out = set(self.output.indices)
        return tuple(i for i in self.indices if i not in out)

    @property
    def factors(self) -> tuple[Factor, ...]:
        """The operands that are tensors (indicators left out)."""
        return tuple(f for f in self.operands if not f.is_indicator)

    @property
    def contracted(self) -> tuple[str, ...]:
        """Summed letters that are a real sum: a letter a lookup determines
        (``v`` in ``[v = tok[b]] E[v,d]``) selects one term and adds nothing."""
        chosen = selections(self.operands)
        return tuple(i for i in self.summed if i not in chosen)

    def where(self) -> tuple[str, ...]:
        """Conditions of the where-clause: comparisons, and lookups that cannot
        be written inline (a scatter ``dE[v,d] = dX[b,d] where v = tok[b]``)."""
        inline = self._inline()
        return tuple(f.condition() for f in self.operands
                     if f.is_indicator and not ((f.is_select or f.is_shift or f.is_offset)
                                                and f.indices[0] in inline))

    def _inline(self) -> dict[str, str]:
        """Lookups and shifts written inline, ``E[tok[b],d]``, ``X[b,c,p+k]``:
        letter -> ``tok[b]`` or ``p+k``."""
        out = set(self.output.indices)
        uses = [i for f in self.operands for i in f.indices]
        return {f.indices[0]: (f"{f.tensor}[{','.join(f.indices[1:])}]" if f.is_select
                               else f.moved() if f.is_offset
                               else "+".join(f.indices[1:])) for f in self.operands
                if (f.is_select or f.is_shift or f.is_offset) and f.indices[0] not in out
                and uses.count(f.indices[0]) > 1}

    def statement(self, where: bool = True) -> str:
        """The einsum in the declaration syntax, e.g. ``dW[d,f] = X[b,d] dY[b,f]``,
        ``X[b,d] = E[tok[b],d]``, ``A[s,t] = Q[s,e] K[t,e] where t <= s``."""
        inline = self._inline()
        operands = [Factor(f.tensor, tuple(inline.get(i, i) for i in f.indices), fn=f.fn)
                    for f in self.factors]
        text = f"{self.output} = {product_text(self.coefficient, operands)}"
        clauses = self.where()
        return text + (" where " + ", ".join(clauses) if where and clauses else "")


def product_text(coefficient: sympy.Expr, operands: Iterable["Factor"]) -> str:
    """``2 X[b,d] dY[b]``, ``Q[s,h] K[t,h] / sqrt(H)``, ``-X[b,d]``: a coefficient
    written the way the statement grammar reads it back."""
    body = " ".join(str(f) for f in operands)
    sign = ""
    if coefficient.could_extract_minus_sign():
        sign, coefficient = "-", -coefficient
    num, den = sympy.fraction(sympy.factor_terms(coefficient))
    wrap = (lambda e: f"({sympy.sstr(e)})" if isinstance(e, (sympy.Add, sympy.Mul)) else sympy.sstr(e))
    text = body
    if num != 1 or not body:
        text = f"{wrap(num)} {body}".strip()
    if den != 1:
        text = f"{text} / {wrap(den)}"
    return sign + text
