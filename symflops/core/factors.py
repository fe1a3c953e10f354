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
from typing import Iterable, Literal, Sequence, get_args

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


Indicator = Literal[ComparisonOp, "=", "=+"]


@dataclass(frozen=True)
class Affine:
    """The relation of an affine index, the ``fn`` of a shift factor over
    ``(q, x_1, ..., x_n)``: ``[q = c_1 x_1 + ... + c_n x_n + c_0]``.

    ``coefficients`` are signed SymPy integers or signed dim symbols (``2``,
    ``-1``, ``P``), one per letter after ``q``; ``offset`` is a SymPy
    integer.  A shift of two letters with coefficients 1 and no offset is
    written with :data:`SHIFT` instead (so that it prints and compares as
    before); :attr:`Factor.affine` gives both forms as an ``Affine``."""

    coefficients: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)

    def value(self, letters: Sequence[sympy.Expr]) -> sympy.Expr:
        """``c_1 x_1 + ... + c_n x_n + c_0`` at ``letters``."""
        total: sympy.Expr = self.offset
        for c, x in zip(self.coefficients, letters):
            total = total + c * x
        return total

    def text(self, letters: Sequence[str], spaced: bool = False) -> str:
        """The expression in the declaration syntax: ``2*p+k``, ``s-1``,
        ``s-t``, ``P*i+u`` (``spaced``: ``2*p + k``, as in a where-clause)."""
        plus, minus = (" + ", " - ") if spaced else ("+", "-")
        parts: list[str] = []
        for c, x in zip(self.coefficients, letters):
            negative = c.could_extract_minus_sign()
            size = -c if negative else c
            term = x if size == 1 else f"{sympy.sstr(size)}*{x}"
            parts.append((minus if negative else plus) if parts else ("-" if negative else ""))
            parts.append(term)
        if self.offset != 0:
            negative = self.offset < 0
            parts += [minus if negative else plus, str(abs(self.offset))]
        return "".join(parts)

    def __str__(self) -> str:
        # A sort key beside the other fns' codes; never printed on its own.
        return "=+(" + ",".join(map(sympy.sstr, (*self.coefficients, self.offset))) + ")"


@dataclass(frozen=True)
class Factor:
    """One indexed tensor occurrence, e.g. ``X[b,d]``, optionally through a
    pointwise function (``fn``, an :class:`Apply`: ``gelu``, its derivative
    ``gelu'``, or ``sigmoid'@out``, the derivative written in terms of the
    function's output), or an indicator (``fn``, an :data:`Indicator`)."""

    tensor: str
    indices: tuple[str, ...]
    span: Span | None = field(default=None, compare=False)
    fn: Apply | Indicator | Affine | None = None

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
        return self.fn in INDICATORS or isinstance(self.fn, Affine)

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
        """An affine index's bracket ``[q = p + k]``, ``[q = 2 p + k]``, ``[q = s - 1]``."""
        return self.fn == SHIFT or isinstance(self.fn, Affine)

    @property
    def affine(self) -> Affine | None:
        """A shift's relation, the plain ``[q = p + k]`` included (coefficients 1)."""
        if isinstance(self.fn, Affine):
            return self.fn
        if self.fn == SHIFT:
            return Affine((sympy.Integer(1),) * (len(self.indices) - 1))
        return None

    @property
    def reads_tensor(self) -> bool:
        """Whether the factor reads a tensor (a lookup reads its index tensor;
        a comparison or a shift reads none)."""
        return not (self.is_comparison or self.is_shift)

    def condition(self) -> str:
        """The indicator's condition as written in a where-clause: ``t <= s``, ``v = tok[b]``."""
        if self.is_select:
            return f"{self.indices[0]} = {self.tensor}[{','.join(self.indices[1:])}]"
        if self.is_shift:
            return f"{self.indices[0]} = {self.affine.text(self.indices[1:], spaced=True)}"
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
#: over X's axis, times this indicator.  Any other affine index
#: (``X[b,c,2*p+k]``) has an :class:`Affine` as its ``fn`` instead.
SHIFT: Indicator = "=+"


INDICATORS: tuple[Indicator, ...] = get_args(Indicator)


def comparison(f: Factor) -> Bound:
    """A comparison indicator as the bound it says: ``[s >= t]`` is ``Bound(t, s, strict=False)``."""
    a, b = f.indices
    return Bound(a, b, f.fn == "<") if f.fn in ("<=", "<") else Bound(b, a, f.fn == ">")


def selections(operands: Iterable[Factor]) -> dict[str, tuple[str, ...]]:
    """Letters a lookup or a shift determines: ``v -> (b,)`` for ``[v = tok[b]]``,
    ``q -> (p, k)`` for ``[q = p + k]``."""
    return {f.indices[0]: f.indices[1:] for f in operands if f.is_select or f.is_shift}


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
                     if f.is_indicator and not ((f.is_select or f.is_shift) and f.indices[0] in inline))

    def _inline(self) -> dict[str, str]:
        """Lookups and shifts written inline, ``E[tok[b],d]``, ``X[b,c,p+k]``:
        letter -> ``tok[b]`` or ``p+k``."""
        out = set(self.output.indices)
        uses = [i for f in self.operands for i in f.indices]
        return {f.indices[0]: (f"{f.tensor}[{','.join(f.indices[1:])}]" if f.is_select
                               else f.affine.text(f.indices[1:])) for f in self.operands
                if (f.is_select or f.is_shift) and f.indices[0] not in out
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
