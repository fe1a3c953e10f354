"""The intermediate representation: immutable dims, tensors and ops.

Everything downstream of :mod:`symflops.declaration.reader` works on these frozen objects.
Dimensions are SymPy symbols (positive integers); shapes are tuples of SymPy
expressions in them.  Index letters are plain strings local to one op; each op
records which dimension every letter ranges over.

Invariants (established by :mod:`symflops.declaration.reader` or :func:`make_layer`):

* tensor names are unique, and ``"d" + name`` is not the name of another tensor
  (that spelling is reserved for gradients);
* every op's output is a tensor that no other op writes and that is neither an
  input nor a parameter;
* ``Layer.ops`` is in an order where each op comes after the ops producing its
  operands (a topological order), so the backward pass is that order reversed.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Protocol, get_args

import sympy

from .domain import Bound
from .errors import Span
from .polynomial import substitute_max, substituted

#: Roles a declared tensor may have.  ``activation`` is given to tensors that an
#: op produces, ``mask`` to the keep-masks dropout draws; users write neither.
#: ``index`` tensors hold integers that select along an axis of another tensor
#: (token ids: ``E[tok[b], d]``); they never get a gradient.
LeafRole = Literal["input", "param", "frozen", "index"]
Role = Literal[LeafRole, "activation", "mask"]
LEAF_ROLES: tuple[LeafRole, ...] = get_args(LeafRole)
ROLES: tuple[Role, ...] = get_args(Role)


def dim_symbol(name: str) -> sympy.Symbol:
    """The SymPy symbol for a dimension: a positive integer named as declared."""
    return sympy.Symbol(name, positive=True, integer=True)


@dataclass(frozen=True)
class Dim:
    name: str
    description: str
    span: Span | None = None

    @property
    def symbol(self) -> sympy.Symbol:
        return dim_symbol(self.name)


@dataclass(frozen=True)
class Tensor:
    """A named tensor.  ``requires_grad`` says whether its gradient is wanted
    for its own sake (parameters, inputs of a block inside a deeper network);
    intermediates get a gradient when one must flow through them."""

    name: str
    shape: tuple[sympy.Expr, ...]
    role: Role
    requires_grad: bool
    description: str = ""
    span: Span | None = None

    @property
    def elements(self) -> sympy.Expr:
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)

    @property
    def is_param(self) -> bool:
        return self.role in ("param", "frozen")


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
class Factor:
    """One indexed tensor occurrence, e.g. ``X[b,d]``, optionally through a
    pointwise function (``fn``, an :class:`Apply`: ``gelu``, its derivative
    ``gelu'``, or ``sigmoid'@out``, the derivative written in terms of the
    function's output), or an indicator (``fn``, an :data:`Indicator`)."""

    tensor: str
    indices: tuple[str, ...]
    span: Span | None = field(default=None, compare=False)
    fn: Apply | Indicator | None = None

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
    def reads_tensor(self) -> bool:
        """Whether the factor reads a tensor (a lookup reads its index tensor;
        a comparison or a shift reads none)."""
        return not (self.is_comparison or self.is_shift)

    def condition(self) -> str:
        """The indicator's condition as written in a where-clause: ``t <= s``, ``v = tok[b]``."""
        if self.is_select:
            return f"{self.indices[0]} = {self.tensor}[{','.join(self.indices[1:])}]"
        if self.is_shift:
            return f"{self.indices[0]} = {self.indices[1]} + {self.indices[2]}"
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
                               else "+".join(f.indices[1:])) for f in self.operands
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


class Op(Protocol):
    """What the IR itself knows of an op (its kinds, in :mod:`symflops.ops`,
    implement :class:`symflops.ops.base.Op`, which says what every stage may
    ask of them): the tensor it writes and the ones it reads."""

    text: str

    @property
    def output(self) -> str: ...

    @property
    def out(self) -> Factor: ...

    @property
    def inputs(self) -> tuple[str, ...]: ...

    @property
    def terms(self) -> tuple[Einsum, ...]: ...

    @property
    def index_dims(self) -> tuple[tuple[str, sympy.Expr], ...]: ...

    def dims(self) -> dict[str, sympy.Expr]: ...


@dataclass(frozen=True)
class Block:
    """An included declaration inside a larger one (``include:`` in the YAML).

    Its ops and tensors are merged into the including layer under their
    (renamed) names; ``repeat`` says how many times the block runs in
    sequence, each time with its own parameters and activations, the output
    of one repetition feeding the next.  ``tensors`` lists every tensor the
    block brought (not the ones bound to the includer's), ``ops`` the outputs
    of its ops, ``inputs`` the includer's tensors bound to its inputs.
    """

    name: str
    title: str
    source: str
    repeat: sympy.Expr
    ops: tuple[str, ...]
    tensors: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    span: Span | None = field(default=None, compare=False)


#: What the executed FLOPs and activation memory assume is recomputed in the backward pass.
RecomputePolicy = Literal["none", "full", "selective"]
RECOMPUTE_POLICIES: tuple[RecomputePolicy, ...] = get_args(RecomputePolicy)
#: How forward terms of three or more operands are contracted: left to right
#: as written, or in the cheapest order (as backward rules always are).
Order = Literal["written", "cheapest"]
FORWARD_ORDERS: tuple[Order, ...] = get_args(Order)


@dataclass(frozen=True)
class Layer:
    name: str
    title: str
    dims: tuple[Dim, ...]
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    source: str = "<python>"
    precision: str | None = None
    blocks: tuple[Block, ...] = ()
    #: tokens processed by one pass over the declared shapes (per-token figures divide by it)
    tokens: sympy.Expr | None = None
    #: sequences in one pass (per-sequence figures such as the key/value cache divide by it)
    sequences: sympy.Expr | None = None
    #: outputs of the ops the selective recomputation policy recomputes
    selective: tuple[str, ...] = ()
    #: the recomputation policy 'executed' FLOPs and activation memory assume
    recompute: RecomputePolicy = "none"
    #: dims defined by a formula of other dims (``C = c_f k T / E``), substituted in every count
    definitions: tuple[tuple[str, sympy.Expr], ...] = ()
    #: the pairwise order forward terms are counted in (backward rules: always the cheapest)
    forward_order: Order = "written"
    #: typical sizes of some dims: where a term's cheapest orders cross, the count
    #: takes the order cheapest at these sizes
    sizes: tuple[tuple[str, int], ...] = ()

    @property
    def free_dims(self) -> tuple[Dim, ...]:
        """The dims a user gives values to: all but those defined by a formula."""
        defined = {n for n, _ in self.definitions}
        return tuple(d for d in self.dims if d.name not in defined)

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def tensor_map(self) -> Mapping[str, Tensor]:
        return {t.name: t for t in self.tensors}

    @property
    def dim_symbols(self) -> dict[str, sympy.Symbol]:
        return {d.name: d.symbol for d in self.dims}

    @property
    def params(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.is_param)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Tensors an op produces and no op consumes: where the upstream gradient enters."""
        used = {name for op in self.ops for name in op.inputs}
        return tuple(op.output for op in self.ops if op.output not in used)

    def producer(self, name: str) -> Op | None:
        for op in self.ops:
            if op.output == name:
                return op
        return None

    def blocks_of(self, name: str) -> tuple[Block, ...]:
        """The blocks a tensor (or the op writing it) belongs to, outermost first."""
        return tuple(b for b in self.blocks if name in b.tensors)

    def copies(self, name: str) -> sympy.Expr:
        """How many times the tensor (or the op writing it) exists in the
        unrolled network: the product of the repeats of its blocks."""
        return sympy.Mul(*(b.repeat for b in self.blocks_of(name)))

    @property
    def substitutions(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Defined dims, each replaced by its formula (applied repeatedly, so a
        definition may use another defined dim)."""
        subs = {dim_symbol(n): e for n, e in self.definitions}
        for _ in range(len(subs)):
            subs = {k: v.subs(subs) for k, v in subs.items()}
        return subs


@functools.lru_cache(maxsize=16384)
def _substituted(expr: sympy.Expr, subs: tuple[tuple[sympy.Symbol, sympy.Expr], ...]) -> sympy.Expr:
    mapping = dict(subs)
    return substitute_max(expr, lambda e: substituted(e, mapping))


def substitute(expr: sympy.Expr, subs: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr`` with defined dims replaced by their formulas, expanded
    (remembered: sheets and summaries substitute the same counts many times)."""
    return _substituted(expr, tuple(subs.items())) if subs else expr


def rename(obj: Any, names: Mapping[str, str], subs: Mapping[sympy.Symbol, sympy.Expr]) -> Any:
    """``obj`` (a tensor, an op, or anything built of factors, tuples and
    SymPy expressions) with tensor names mapped through ``names`` and dims
    substituted by ``subs``.  Used to place an included block in its includer."""
    if isinstance(obj, Factor):
        return dataclasses.replace(obj, tensor=names.get(obj.tensor, obj.tensor))
    if isinstance(obj, Tensor):
        return dataclasses.replace(obj, name=names.get(obj.name, obj.name),
                             shape=tuple(a.subs(subs) for a in obj.shape))
    if isinstance(obj, sympy.Basic):
        return obj.subs(subs) if subs else obj
    if isinstance(obj, tuple):
        return tuple(rename(x, names, subs) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: rename(getattr(obj, f.name), names, subs)
                   for f in dataclasses.fields(obj) if f.name not in ("span", "text")}
        return dataclasses.replace(obj, **changes)
    return obj


def consumers(layer: Layer, name: str) -> Iterable[Op]:
    return (op for op in layer.ops if name in op.inputs)


def index_ranges(layer: Layer) -> dict[str, sympy.Expr]:
    """For each index tensor a lookup reads, the size of the axis it selects
    along: its values are integers in ``[0, size)``."""
    ranges: dict[str, sympy.Expr] = {}
    for op in layer.ops:
        extents = op.dims()
        target = getattr(op, "target", None)  # a loss's class labels range over its index
        if target is not None:
            ranges.setdefault(target.tensor, extents[op.index])
        for t in op.terms:
            for f in t.operands:
                if f.is_select:
                    ranges.setdefault(f.tensor, extents[f.indices[0]])
    return ranges


def fresh_letter(used: set[str], preferred: Iterable[str] = (), pool: str = "ijklmnpqrstuvwxyzabcdefgh",
                 prefix: str = "i") -> str:
    """The first of ``preferred`` then ``pool`` that is not in ``used``, else
    ``prefix`` with a number; it is added to ``used``."""
    for cand in (*preferred, *pool):
        if cand not in used:
            used.add(cand)
            return cand
    k = 1
    while f"{prefix}{k}" in used:
        k += 1
    used.add(f"{prefix}{k}")
    return f"{prefix}{k}"
