"""The op-kind protocol: what every stage may ask of an op, and nothing else.

An op kind is one module (or, for the einsum, one package) of :mod:`symflops.ops`
that knows everything about its ops: how a statement is recognised and
validated (:class:`CallKind`, for the ops written as a call such as
``softmax_t(A[s,t])``), its IR node (a frozen dataclass implementing
:class:`Op`), its backward rules and the derivation steps a sheet shows, its
FLOP cost in both buckets, what it produces besides its output, its NumPy and
PyTorch forwards, and how it prints.  The stages call these members; none of
them asks which class an op is.

Adding an op kind: write its node and call kind in one module of this
package and list the call kind in :data:`symflops.ops.registry.CALLS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Protocol, Sequence

import sympy

from ..core import ir
from ..core.errors import Span
from ..core.ir import Einsum, Factor, Order, Tensor
from ..core.records import OpCost, PatternTerm, Rule
from ..core.sharding import Layout, OpSplit, Width

#: What a count counts: a multiply-add is 2 FLOPs or 1 MAC.
Unit = Literal["FLOPs", "MACs"]
#: How a count is chosen where a term's cheapest orders cross (their costs
#: compare differently at different sizes): ``declared`` takes the order
#: cheapest at the declaration's ``sizes:`` (their minimum where none are
#: declared); ``minimum`` is always the minimum, which the commands that
#: evaluate at given sizes use, so that each size gets its cheapest order.
Choice = Literal["declared", "minimum"]


class Op(ir.Op, Protocol):
    """A forward op of a layer (an IR node)."""

    #: the statement as written (for messages) and where
    text: str
    span: Span | None

    @property
    def output(self) -> str:
        """The tensor the op writes."""

    @property
    def out(self) -> Factor:
        """The output with its letters, ``Y[b,d]``."""

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tensors it reads, in order of first use (index tensors included)."""

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """Its einsum products, when it is a sum of them; empty for an op such
        as softmax, which is not."""

    @property
    def aux(self) -> tuple[Factor, ...]:
        """Tensors it produces besides its output (a norm's per-row ``rstd``,
        a loss's probabilities), saved for the backward pass."""

    #: what those tensors are, in words (the declared tensors' descriptions)
    aux_description: str

    #: a short name of the kind: "contraction", "softmax", "layernorm", ...
    kind: str

    @property
    def index_dims(self) -> tuple[tuple[str, sympy.Expr], ...]:
        """The extent of each of its letters."""

    def dims(self) -> dict[str, sympy.Expr]:
        """``index_dims`` as a mapping."""

    def statement(self) -> str:
        """The op in the declaration syntax (``P[s,t] = softmax_t(A[s,t])``)."""

    def reads(self) -> tuple[Einsum, ...]:
        """Which elements of its operands it reads, as products over its
        letters: its terms for an einsum; for a row-wise op, one product of
        its input (and where-clause) writing its output."""

    # -- many devices (symflops/shard) ---------------------------------------------------
    def split(self, layout: Layout, widths: Mapping[str, Width], unit: Unit = "FLOPs",
              order: Order = "written") -> OpSplit:
        """What it needs when its letters are split over a mesh (``layout``:
        the mesh and every tensor's placement; ``widths``: which bytes per
        element each tensor takes): one device's share of its FLOPs in the
        two buckets, and the collectives its shards need, each with the
        elements of the array it moves (:mod:`symflops.core.sharding`).  A
        contraction follows the four sharded-matmul cases step by step
        (:mod:`symflops.ops.einsum.split`); a reduction over a split letter
        sums its row statistics across devices; a lookup gathers rows or
        moves them; an op that runs along a split letter (a recurrence) is
        :class:`~symflops.core.sharding.NotSplittable`
        (:mod:`symflops.ops.split`)."""

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        """The gradient it sends to each of ``targets`` (its inputs that need
        one, parameters first), as rules of op ``number`` of the layer, each
        with the derivation steps that justify it."""

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """Its forward FLOPs in the two buckets; ``order``, ``sizes`` and
        ``choice`` say how an einsum's products are ordered (see
        :mod:`symflops.ops.einsum.cost`)."""

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The forward pass in NumPy (float64): its output and ``aux``, from
        ``values`` by name, with each letter's extent in ``extents``."""

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The same with PyTorch's own kernels: the oracle of ``verify``."""

    def latex(self, m: Any) -> str:
        """The op in index form as LaTeX; ``m`` prints indexed names and
        einsum terms in the sheet's style (``P_{st} = \\operatorname{softmax}_t(A_{st})``)."""

    def formula(self) -> sympy.Expr | None:
        """Its output element as a SymPy expression of input elements, for an
        op that is not a sum of einsums (softmax's ``exp(A[s,t]) / sum_u ...``),
        else None."""

    def shown(self) -> Any:
        """The derivation of its backward rule as a sheet shows it, for an op
        that derives it itself (:class:`symflops.ops.reductions.Reduction`), else None."""

    def patterns(self) -> tuple[PatternTerm, ...]:
        """Its einsum terms in textbook form, whose derivations a sheet shows
        (:mod:`symflops.ops.einsum.pattern`); empty for an op that is not a
        sum of einsums (its derivation is :meth:`shown`)."""

    # -- bytes moved (the roofline; see the block "Bytes moved" below) --------

    def moved(self, rule: Rule | None = None) -> Access:
        """The elements its forward pass (``rule`` None) or one of its
        backward ``rules`` reads and writes (see :class:`Access`; most kinds
        return :func:`accesses`)."""


@dataclass(frozen=True)
class Scope:
    """What an op kind may read while it lowers one statement: the statement's
    text and place, the tensors declared or produced so far, each letter's
    extent, and the dims (for constants such as ``1/sqrt(E)``)."""

    text: str
    span: Span | None
    known: Mapping[str, Tensor]
    extents: Mapping[str, sympy.Expr]
    dims: Mapping[str, sympy.Symbol]

    def at(self, column: int) -> Span | None:
        """The place of a column of the statement."""
        return self.span.shifted(column) if self.span else None


@dataclass(frozen=True)
class Lowered:
    """What lowering one statement gives: its ops (an op a call inside a
    product needs first, such as ``layernorm_d(X[b,d])``, then the op itself)
    and the tensors the kind made besides the ops' outputs and ``aux``
    (dropout's keep-mask, a normalised tensor ``X_hat``)."""

    ops: tuple[Op, ...]
    tensors: tuple[Tensor, ...] = ()


class CallKind(Protocol):
    """How statements with a call of this kind are recognised and lowered:
    ``P[s,t] = softmax_t(A[s,t])`` as a whole op, or inside a product
    (``layernorm_d(X[b,d]) * g[d]``) through a fresh intermediate tensor."""

    #: A kind whose call takes several tensors and defines a letter itself
    #: (a concatenation: :mod:`symflops.ops.concat`) also has
    #: ``binding(call, statement, known, at) -> (further operand refs,
    #: {letter: extent})``, asked before the statement's letters are bound.

    #: what the message for an unknown function lists for this kind, e.g.
    #: ``softmax_i ... over an index i``; empty for a kind that never stands
    #: inside a product
    usage: str

    def claims(self, name: str) -> bool:
        """Whether a call of this name is this kind's (``softmax_t`` for softmax)."""

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> Op | None:
        """The op ``out = call`` when the call is the whole right side in a
        form this kind takes as a whole op; None when it is to be lowered
        inside a product instead; SymflopsError with the call's position when
        it does not fit."""

    def inline(self, call: Any, out: Factor, scope: Scope) -> Op:
        """The op computing ``out``, a fresh intermediate that the product the
        call stands in reads instead; SymflopsError when the kind cannot stand
        inside a product."""


def claim(calls: Sequence[CallKind], name: str) -> CallKind | None:
    """The kind among ``calls`` whose call ``name`` is, or None."""
    for kind in calls:
        if kind.claims(name):
            return kind
    return None


def usages(calls: Sequence[CallKind]) -> str:
    """What a message lists for the call kinds: ``softmax_i, layernorm_i, ...``."""
    return ", ".join(k.usage for k in calls if k.usage)


# ------------------------------------------------------------------------------
# Bytes moved (the roofline, issue 29).  What an op or a rule reads from memory
# and writes to it, element by element; :mod:`symflops.count.traffic` counts
# the distinct elements of each tensor and prices them in bytes.  Kept in a
# block of its own, apart from the protocol's other members.

@dataclass(frozen=True)
class Access:
    """What one run of an op (or of one backward rule) reads and writes.

    ``reads``: products over the op's letters; every tensor factor of each
    (the operands, an index tensor a lookup reads) is read at the tuples of
    its letters that the product ranges over, inside its where-clause.
    ``writes``: products whose *output* factor is written at the tuples the
    product ranges over (an op's output, each of its ``aux``; a rule's
    gradient).  A tensor several factors touch is one set of elements: an
    op reads (or writes) each of its elements once."""

    reads: tuple[Einsum, ...]
    writes: tuple[Einsum, ...]


def accesses(op: Op, rule: Rule | None = None) -> Access:
    """The access of an op whose :meth:`Op.reads` says what it reads: its
    output and ``aux`` written over the same products; a rule reads its
    terms' factors and writes its gradient over them."""
    if rule is not None:
        return Access(rule.terms, tuple(Einsum(t.output, t.operands) for t in rule.terms))
    reads = op.reads()
    return Access(reads, tuple(Einsum(f, t.operands) for f in (op.out, *op.aux) for t in reads))
