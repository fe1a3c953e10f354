"""The intermediate representation: immutable dims, tensors and ops.

The factors and einsum products ops are written in are in
:mod:`symflops.core.factors`, and importable from here.

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

from .errors import Span
from .factors import (COMPARISONS, INDICATORS, SELECT, SHIFT, Affine, Apply, ComparisonOp,  # noqa: F401
                      Einsum, Factor, FunctionForm, Indicator, Offset, Slot, comparison,
                      product_text, relation, selections)
from .polynomial import substitute_max, substituted

#: Roles a declared tensor may have.  ``activation`` is given to tensors that an
#: op produces, ``mask`` to the keep-masks dropout draws; users write neither.
#: ``index`` tensors hold integers that select along an axis of another tensor
#: (token ids: ``E[tok[b], d]``); they never get a gradient.  ``buffer``
#: tensors are constants the layer reads (rotary cos/sin tables, ALiBi slopes,
#: fixed masks): never a gradient, not a parameter (no gradient, optimizer
#: state or 6N share), not an activation (never saved); their memory is
#: counted apart (:attr:`Tensor.is_buffer`).
LeafRole = Literal["input", "param", "frozen", "index", "buffer"]
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
    #: Zeros around each axis that affine indices may read, ``(before, after)``
    #: per axis (empty: none); see :mod:`symflops.declaration.padding`.
    pad: tuple[tuple[sympy.Expr, sympy.Expr], ...] = ()

    def padding(self, axis: int) -> tuple[sympy.Expr, sympy.Expr]:
        """The zeros before and after ``axis`` (0 and 0 without a pad)."""
        return self.pad[axis] if self.pad else (sympy.Integer(0), sympy.Integer(0))

    @property
    def elements(self) -> sympy.Expr:
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)

    @property
    def is_param(self) -> bool:
        return self.role in ("param", "frozen")

    @property
    def is_buffer(self) -> bool:
        return self.role == "buffer"


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
    ``shared`` names the block's parameters that are one tensor for all its
    copies (``shared:`` in the YAML: ALBERT's tied layers): they exist once,
    and each copy's gradient of them is added into that one gradient.
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
    shared: tuple[str, ...] = ()


@dataclass(frozen=True)
class Example:
    """A named configuration of a real model (``examples:`` in the YAML): a
    positive integer for every dim that takes a value, in declaration order
    (dims defined by a formula take their formula's value).  The declaration
    reader checks it; sheets and ``symflops eval --example`` show numbers at it."""

    name: str
    values: tuple[tuple[str, int], ...]
    span: Span | None = field(default=None, compare=False)

    @property
    def config(self) -> dict[str, int]:
        return dict(self.values)


@dataclass(frozen=True)
class Component:
    """A named group of ops (``components:`` in the YAML), one row of a
    sheet's front table: ``ops`` are the outputs of the ops it holds, as the
    declaration lists them (the ops a statement lowers to besides its output,
    such as a norm's ``Xn_hat``, go with it when the table is counted).  A
    block's components carry into its includer renamed; their copies are
    those of their ops (the repeats of the block)."""

    name: str
    ops: tuple[str, ...]
    span: Span | None = field(default=None, compare=False)


#: What the executed FLOPs and activation memory assume is recomputed in the backward pass.
RecomputePolicy = Literal["none", "full", "selective", "fused_attention"]
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
    #: named configurations of real models (an included block's are not carried over)
    examples: tuple[Example, ...] = ()
    #: named groups of ops, the rows of the front table (an included block's, renamed, first)
    components: tuple[Component, ...] = ()
    #: what dims are to the parallelism presets (``roles:``): ``(role, dims)``, such as
    #: ``("heads", ("N",))``; an included block's carried over (see :mod:`symflops.shard`)
    roles: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the strategies or placements the declaration names (``parallel:``), a
    #: :class:`symflops.core.sharding.Parallel`, or None
    parallel: Any = None

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
    def buffers(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.is_buffer)

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
        unrolled network: the product of the repeats of its blocks, but those
        that share it (a shared parameter is one tensor for all their copies)."""
        return sympy.Mul(*(b.repeat for b in self.blocks_of(name) if name not in b.shared))

    def sharing(self, name: str) -> tuple[Block, ...]:
        """The repeated blocks whose copies all use the one tensor ``name``
        (``shared:``; a block run once that shares the includer's tensor is
        an ordinary reader of it)."""
        return tuple(b for b in self.blocks_of(name) if name in b.shared and b.repeat != 1)

    def uses(self, name: str) -> sympy.Expr:
        """How many copies of the blocks read the tensor: its copies times the
        repeats of the blocks that share it (each copy contributes a gradient)."""
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
        # an affine index's coefficients (P in P*i) are dims too
        fn = rename(obj.fn, names, subs) if isinstance(obj.fn, Affine) else obj.fn
        return dataclasses.replace(obj, tensor=names.get(obj.tensor, obj.tensor), fn=fn)
    if isinstance(obj, Tensor):
        return dataclasses.replace(obj, name=names.get(obj.name, obj.name),
                             shape=tuple(a.subs(subs) for a in obj.shape),
                             pad=tuple((a.subs(subs), b.subs(subs)) for a, b in obj.pad))
    if isinstance(obj, sympy.Basic):
        return obj.subs(subs) if subs else obj
    if isinstance(obj, tuple):
        return tuple(rename(x, names, subs) for x in obj)
    renamed = getattr(obj, "renamed", None)
    if callable(renamed) and not isinstance(obj, type):
        # an op that keeps tensor names outside its factors (a loop's state)
        # renames them itself, with its factors through this function
        return renamed(names, subs)
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
