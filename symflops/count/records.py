"""The summary of a derived layer as a frozen typed tree.

:func:`symflops.count.summary.summary` builds a :class:`Summary`; the
commands, ``check``, ``sweep``, the planner and the sheets read its fields.

Invariants:

* every record is a frozen dataclass whose fields, in order, are the keys of
  ``symflops derive --json`` (the public contract in docs/json.md):
  :func:`to_json` walks the fields, so the printed object cannot drift from
  the tree.  Two field markers shape it: :data:`INLINE` (the record's keys go
  into its parent's object: the whole-model part of a summary) and
  :data:`IF_ANY` (the key is left out when the value is empty: ``orders``).
* the records are generic in their formula leaf ``V``: a summary holds
  :data:`Formula` leaves; :func:`symflops.count.evaluate.evaluate` gives the
  same tree with numbers (``Summary[Number]``).  :func:`map_formulas` is the
  one walk that changes leaves, so a tree has one structure, declared here.
* the formula type stays behind :data:`Formula`, :func:`is_formula` and
  :func:`formula_text`: a leaf that is not a formula (text, a flag, a
  precision's byte width) is left as it is by every walk.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Literal, Mapping, TypeVar

import sympy

from ..core.ir import Order, RecomputePolicy, Role
from ..ops.base import Unit

# ------------------------------------------------------------- formulas --

#: A formula leaf: a polynomial (or ratio, or ``Max``) in the dims.
Formula = sympy.Expr

#: What a formula becomes at given dims: an exact integer, else a float.
Number = int | float

V = TypeVar("V")  # a leaf of the tree: Formula, or Number once evaluated
T = TypeVar("T")


def is_formula(value: Any) -> bool:
    """Whether ``value`` is a formula leaf (what the walks map or print)."""
    return isinstance(value, sympy.Basic)


def formula_text(value: Formula) -> str:
    """A formula as ``--json`` prints it: text ``sympy.parse_expr`` reads back
    (with the dims as symbols)."""
    return sympy.sstr(value)


# ------------------------------------------------------------ the walks --

#: How a field is written, when not as ``"key": value``.
JsonForm = Literal["inline", "if any"]
#: Field marker: the record's keys are written into its parent's JSON object.
INLINE = types.MappingProxyType({"json": "inline"})
#: Field marker: the key is written only when the value is not empty.
IF_ANY = types.MappingProxyType({"json": "if any"})


def frozen(mapping: Mapping[Any, T]) -> Mapping[Any, T]:
    """A read-only copy of ``mapping``, keeping its order."""
    return types.MappingProxyType(dict(mapping))


def map_formulas(value: T, fn: Callable[[Formula], Any]) -> T:
    """The same tree (records, mappings, tuples) with ``fn`` applied to every
    formula leaf; any other leaf is kept."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value)(**{f.name: map_formulas(getattr(value, f.name), fn)
                              for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return frozen({k: map_formulas(v, fn) for k, v in value.items()})  # type: ignore[return-value]
    if isinstance(value, (tuple, list)):
        return tuple(map_formulas(v, fn) for v in value)  # type: ignore[return-value]
    if is_formula(value):
        return fn(value)  # type: ignore[arg-type]
    return value


def to_json(value: Any) -> Any:
    """The tree as JSON-ready dicts and lists: records by their fields in
    order, formulas as :func:`formula_text`, numbers and text as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            how: JsonForm | None = f.metadata.get("json")
            if how == "inline":
                out.update(to_json(item))
            elif how != "if any" or item:
                out[f.name] = to_json(item)
        return out
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    return formula_text(value) if is_formula(value) else value


def lookup(record: Any, path: str) -> Any:
    """The field at a dotted path: ``lookup(s, "memory.total_bytes")``."""
    for name in path.split("."):
        record = getattr(record, name)
    return record


def leaves(record: Any, prefix: str) -> dict[str, Any]:
    """``{"prefix.field": value}`` for each field of ``record``, in order."""
    return {f"{prefix}.{f.name}": getattr(record, f.name) for f in dataclasses.fields(record)}


class Record:
    """What every record of the tree can do."""

    def to_json(self) -> Any:
        """This record as ``--json`` prints it (see :func:`to_json`)."""
        return to_json(self)


# ----------------------------------------------------------- the records --

ParamClass = Literal["dense", "lookup", "elementwise"]


@dataclass(frozen=True)
class FlopTotals(Record, Generic[V]):
    """Forward, backward and their sum."""

    forward: V
    backward: V
    total: V


@dataclass(frozen=True)
class ForwardBackward(Record, Generic[V]):
    """Forward and backward, apart."""

    forward: V
    backward: V


@dataclass(frozen=True)
class TensorInfo(Record, Generic[V]):
    """A declared or computed tensor."""

    shape: tuple[V, ...]
    role: Role  # the declaration's
    requires_grad: bool
    elements: V


@dataclass(frozen=True)
class OrderCandidate(Record, Generic[V]):
    """One order of a term whose cheapest orders cross, and when it is the cheapest."""

    order: str
    flops: V
    flops_elementwise: V
    cheaper_when: str | None  # None beyond MAX_CONDITIONS candidates


@dataclass(frozen=True)
class CrossingOrders(Record, Generic[V]):
    """A term whose cheapest orders cross: the candidates and the one counted;
    or a term whose search met its bound: the one order counted, ``bounded``
    saying why, ``sizes`` the sizes that chose it (every dim of the term)."""

    term: int
    counted: str
    sizes: Mapping[str, int] | None  # the declared sizes that chose it
    candidates: tuple[OrderCandidate[V], ...]
    bounded: str = field(default="", metadata=IF_ANY)


@dataclass(frozen=True)
class ForwardEntry(Record, Generic[V]):
    """One forward op and what one copy of it costs."""

    op: str
    output: str
    copies: V
    flops: V  # one copy
    flops_elementwise: V
    matrix_form: str | None
    orders: tuple[CrossingOrders[V], ...] = field(default=(), metadata=IF_ANY)


@dataclass(frozen=True)
class BackwardEntry(Record, Generic[V]):
    """One backward rule, in the order computed, and what one copy of it costs."""

    grad: str
    wrt: str
    rule: str
    copies: V
    flops: V  # one copy
    flops_elementwise: V
    matrix_form: str | None
    reads: tuple[str, ...]
    from_op: str
    orders: tuple[CrossingOrders[V], ...] = field(default=(), metadata=IF_ANY)


@dataclass(frozen=True)
class SavedDetail(Record, Generic[V]):
    """A forward tensor kept for backward: every copy keeps one."""

    tensor: str
    elements: V  # one copy
    copies: V
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class Memory(Record, Generic[V]):
    """Element counts, then bytes (the keys of :meth:`symflops.count.cost.Costs.memory`)."""

    params: V
    grads: V
    optimizer: V
    activations: V
    inference_peak: V
    params_bytes: V
    grads_bytes: V
    optimizer_bytes: V
    master_bytes: V
    fixed_bytes: V
    activation_bytes: V
    total_bytes: V  # fixed, activations and buffers
    # Constant tables (role: buffer), apart from parameters and activations:
    # elements, and bytes at the policy's parameter width; left out when zero.
    buffers: V = field(default=sympy.Integer(0), metadata=IF_ANY)
    buffers_bytes: V = field(default=sympy.Integer(0), metadata=IF_ANY)


@dataclass(frozen=True)
class PrecisionInfo(Record):
    """The precision policy: bytes per element of each kind."""

    name: str
    description: str
    params: int
    grads: int
    optimizer_states: int
    optimizer: int
    master: int
    activations: int


@dataclass(frozen=True)
class Parameters(Record, Generic[V]):
    """Parameter elements by class, and those a token uses or reads."""

    total: V
    trainable: V
    active: V
    active_dense: V  # the N of 6N
    read_per_token: V | None  # None without tokens
    dense: V
    lookup: V
    elementwise: V
    classes: Mapping[str, ParamClass]


@dataclass(frozen=True)
class PerToken(Record, Generic[V]):
    """Whole-model counts divided by the tokens, against 6N."""

    flops: FlopTotals[V]
    flops_executed: V
    flops_elementwise: V
    six_n: V
    beyond_six_n: V
    inference_forward: V


@dataclass(frozen=True)
class PolicyCost(Record, Generic[V]):
    """What one recomputation policy costs and keeps."""

    ops: tuple[str, ...]
    flops_recomputed: V
    flops_elementwise_recomputed: V
    flops_executed: V
    kept: tuple[str, ...]
    activations: V
    activation_bytes: V
    working: V


@dataclass(frozen=True)
class Recompute(Record, Generic[V]):
    """The declared recomputation policy and what each policy costs."""

    policy: RecomputePolicy  # the declared one
    selective: tuple[str, ...]
    policies: Mapping[RecomputePolicy, PolicyCost[V]]


@dataclass(frozen=True)
class InferenceInfo(Record, Generic[V]):
    """The key/value cache and the bytes one decoded token reads."""

    cache: tuple[str, ...]
    cache_elements: V
    cache_bytes: V
    cache_elements_per_sequence: V | None
    cache_bytes_per_sequence: V | None
    weights_bytes: V
    weights_bytes_read: V | None
    bytes_per_decoded_token: V | None


@dataclass(frozen=True)
class BlockSummary(Record, Generic[V]):
    """One copy of an included block."""

    name: str
    title: str
    source: str
    repeat: V
    copies: V
    params: V
    flops: FlopTotals[V]
    flops_elementwise: ForwardBackward[V]
    saved: tuple[BlockSaved[V], ...]
    activations: V
    activation_bytes: V


@dataclass(frozen=True)
class BlockSaved(Record, Generic[V]):
    """A tensor one copy of a block keeps for backward, and its bytes."""

    tensor: str
    elements: V
    mask: bool
    bytes: V
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class WholeModel(Record, Generic[V]):
    """Parameter classes, per-token counts, the 6N rule, recomputation, the
    key/value cache and the blocks."""

    tokens: V | None
    sequences: V | None
    definitions: Mapping[str, V]
    parameters: Parameters[V]
    per_token: PerToken[V] | None  # None without tokens
    flops_executed: V  # under the declared recompute policy
    recompute: Recompute[V]
    inference: InferenceInfo[V] | None  # None without a causal op
    blocks: tuple[BlockSummary[V], ...]


@dataclass(frozen=True)
class Summary(Record, Generic[V]):
    """Everything ``symflops derive`` reports: the keys of its ``--json``
    object, in order (the table of docs/json.md)."""

    name: str
    title: str
    unit: Unit
    conventions: str
    forward_order: Order
    sizes: Mapping[str, int] | None  # None when none are declared
    dims: Mapping[str, str]  # name: description
    tensors: Mapping[str, TensorInfo[V]]
    params: V
    trainable_params: V
    flops: FlopTotals[V]  # contractions only
    flops_per_param: FlopTotals[V] | None  # None unless a polynomial
    flops_elementwise: FlopTotals[V]
    forward: tuple[ForwardEntry[V], ...]
    backward: tuple[BackwardEntry[V], ...]
    saved: tuple[str, ...]
    saved_detail: tuple[SavedDetail[V], ...]
    memory: Memory[V]
    precision: PrecisionInfo
    model: WholeModel[V] = field(metadata=INLINE)
    #: every named quantity (:mod:`symflops.count.names`): the names ``check`` takes
    quantities: Mapping[str, V] = field(default_factory=dict)
    #: what the declaration could add for its sheet (plain sentences; left
    #: out of ``--json`` when there are none)
    notes: tuple[str, ...] = field(default=(), metadata=IF_ANY)
