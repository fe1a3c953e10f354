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

from typing import Any, Mapping, Protocol, Sequence

import sympy

from ..core import ir
from ..core.errors import Span
from ..core.ir import Einsum, Factor
from ..core.records import OpCost, Rule


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

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        """The gradient it sends to each of ``targets`` (its inputs that need
        one, parameters first), as rules of op ``number`` of the layer, each
        with the derivation steps that justify it."""

    def cost(self, unit: str, order: str = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: str = "declared") -> OpCost:
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


class CallKind(Protocol):
    """How statements whose right side is a call of this kind are recognised
    and lowered: ``softmax_t(A[s,t])`` as a whole op, or inside a product
    (``layernorm_d(X[b,d]) * g[d]``) through a fresh intermediate tensor."""

    #: the call names it claims, as the part before the reduced letters
    #: (``softmax`` for ``softmax_t``)
    names: tuple[str, ...]

    def whole(self, call: Any, out: Factor, context: Any) -> Op:
        """The op ``out = call`` (the whole right side), checked; SymflopsError
        with the call's position when it does not fit."""

    def inline(self, call: Any, out: Factor, context: Any) -> Op:
        """The op computing ``out``, a fresh intermediate that the product the
        call stands in reads instead."""
