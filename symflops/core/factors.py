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


Indicator = Literal[ComparisonOp, "=", "=+", "=+c"]


@dataclass(frozen=True)
class Offset:
    """The relation of a comparison with a constant, ``[a OP b + offset]``
    (a sliding window: ``s - t < W`` is ``[s < t + W]``); ``offset`` is a
    non-zero integer-valued expression in the dims.  A plain comparison
    (``[t <= s]``) keeps the bare relation as its ``fn``: build both with
    :func:`relation`, so equal conditions compare equal."""

    op: ComparisonOp
    offset: sympy.Expr

    def __str__(self) -> str:
        return self.op


@dataclass(frozen=True)
class Slot:
    """The place of a concatenation's part on the joined axis, ``[t = s + offset]``
    (:data:`OFFSET`): ``offset``, an integer-valued expression in the dims (the
    extents of the parts before it, 0 for the first), is carried here as a
    window's constant is in :class:`Offset`, so the factor stays frozen and
    compares by value."""

    offset: sympy.Expr

    def __str__(self) -> str:
        return OFFSET


def relation(op: ComparisonOp, offset: sympy.Expr = sympy.Integer(0)) -> "ComparisonOp | Offset":
    """The ``fn`` of the comparison ``a OP b + offset``: the bare relation when the offset is 0."""
    offset = sympy.expand(offset)
    return op if offset == 0 else Offset(op, offset)


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
        for sign_, c, x in offset_terms(self.offset):  # dims in name order, then the number
            parts += [minus if sign_ == "-" else plus,
                      str(c) if x == 1 else ("" if c == 1 else f"{c}*") + sympy.sstr(x)]
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
    fn: Apply | Indicator | Offset | Slot | Affine | None = None

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
        return self.fn in INDICATORS or isinstance(self.fn, (Offset, Slot, Affine))

    @property
    def function(self) -> Apply | None:
        """The pointwise function the factor applies, if any."""
        return self.fn if isinstance(self.fn, Apply) else None

    @property
    def is_comparison(self) -> bool:
        return self.fn in COMPARISONS or isinstance(self.fn, Offset)

    @property
    def relation(self) -> ComparisonOp:
        """A comparison's relation, ``<=`` in ``[s <= t + W]``."""
        return self.fn.op if isinstance(self.fn, Offset) else self.fn  # type: ignore[return-value]

    @property
    def offset(self) -> sympy.Expr:
        """A comparison's constant, ``W`` in ``[s <= t + W]`` (0 in ``[t <= s]``), or a
        concatenated part's place, ``M`` in ``[t = s + M]``; 0 for every other factor."""
        return self.fn.offset if isinstance(self.fn, (Offset, Slot)) else sympy.Integer(0)

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
    def is_offset(self) -> bool:
        return isinstance(self.fn, Slot)

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
            return f"{self.indices[0]} = {self.affine.text(self.indices[1:], spaced=True)}"
        if self.is_offset:
            return f"{self.indices[0]} = {self.moved().replace('+', ' + ')}"
        return f"{self.indices[0]} {self.fn} {plus(self.indices[1], self.offset)}"


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


#: ``Factor("", (t, s), fn=Slot(M))`` (printed ``=+c``) is ``[t = s + M]``: a part of a
#: concatenation (:mod:`symflops.ops.concat`) written at its place ``M`` along
#: the joined axis, and its gradient, the slice ``dK[b,M+s,e]``.  The offset is
#: a constant (the extents of the parts before it), so ``t`` is determined by
#: ``s`` and a product through it is a copy.
OFFSET: Indicator = "=+c"


INDICATORS: tuple[Indicator, ...] = get_args(Indicator)


#: The pointwise function a division by a tensor lowers to: ``N[s,f] / Z[s]``
#: is ``N[s,f] reciprocal(Z[s])``.  A factor under it prints as a divisor, and
#: one under its derivative ``reciprocal'(Z) = -1/Z**2`` as the divisor squared
#: with the sign moved to the coefficient (:func:`quotient`).
RECIPROCAL = "reciprocal"


def quotient(coefficient: sympy.Expr, operands: Iterable[Factor]
             ) -> tuple[sympy.Expr, tuple[Factor, ...], tuple[tuple[Factor, int], ...]]:
    """A product as a quotient for printing: ``(coefficient, numerator
    factors, divisors with their powers)``.  ``reciprocal(Z[s])`` becomes the
    divisor ``Z[s]``, ``reciprocal'(Z[s])`` the divisor ``Z[s]`` squared and a
    sign; the value is unchanged."""
    numerator: list[Factor] = []
    divisors: dict[Factor, int] = {}
    for f in operands:
        fn = f.function
        if fn is None or fn.name != RECIPROCAL or fn.form == "derivative@out":
            numerator.append(f)
            continue
        plain = Factor(f.tensor, f.indices)
        power = 1 if fn.form == "value" else 2
        coefficient = coefficient if fn.form == "value" else -coefficient
        divisors[plain] = divisors.get(plain, 0) + power
    return coefficient, tuple(numerator), tuple(divisors.items())


def offset_terms(offset: sympy.Expr) -> list[tuple[str, sympy.Expr, sympy.Expr]]:
    """The terms of a constant in dims, ``-W + 1`` as ``[("-", 1, W), ("+", 1, 1)]``:
    (sign, magnitude, dim or 1 for the number), dims in name order, then the
    number; the one order both the condition text and the sheets print."""
    parts = sympy.expand(offset).as_coefficients_dict()
    return [("-" if parts[x] < 0 else "+", abs(parts[x]), x)
            for x in [*sorted((x for x in parts if x != 1), key=str), sympy.Integer(1)]
            if parts.get(x, 0) != 0]


def plus(letter: str, offset: sympy.Expr) -> str:
    """``t + W``, ``s - W + 1``, ``t + 2*W``: a letter plus a constant (dims in
    name order, then the number), as a condition writes it."""
    return letter + "".join(
        f" {sign} " + (str(c) if x == 1 else ("" if c == 1 else f"{c}*") + str(x))
        for sign, c, x in offset_terms(offset))


def comparison(f: Factor) -> Bound:
    """A comparison indicator as the bound it says: ``[s >= t]`` is ``Bound(t, s, strict=False)``;
    with an offset, ``[s < t + W]`` is ``Bound(s, t, offset=W - 1)`` (a strict bound
    with an offset is stated non-strict: the letters are integers)."""
    a, b = f.indices
    op, c = f.relation, f.offset
    if c == 0:
        return Bound(a, b, op == "<") if op in ("<=", "<") else Bound(b, a, op == ">")
    # a <= b + c;  a < b + c: a <= b + c - 1;  a >= b + c: b <= a - c;  a > b + c: b <= a - c - 1
    if op in ("<=", "<"):
        return Bound(a, b, offset=c - (1 if op == "<" else 0))
    return Bound(b, a, offset=-c - (1 if op == ">" else 0))


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
                               else f.affine.text(f.indices[1:])) for f in self.operands
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
    written the way the statement grammar reads it back; a reciprocal as a
    divisor, ``N[s,f] / Z[s]`` (a squared one, ``/ Z[s]**2``, only in rules,
    which are not read back)."""
    coefficient, numerator, divisors = quotient(coefficient, operands)
    text = _product_text(coefficient, numerator)
    for f, power in divisors:
        text += f" / {f}" + (f"**{power}" if power > 1 else "")  # text is never empty
    return text


def _product_text(coefficient: sympy.Expr, operands: Iterable["Factor"]) -> str:
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
