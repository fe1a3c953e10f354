"""The einsum op: a sum of einsum products, ``out = sum of terms``, as written
in a declaration (``H[b,f] = X[b,d] W_in[d,f] + b_in[f]``).

The node is the IR record; its methods give every stage what it needs from
this op kind (see :class:`symflops.ops.base.Op`), each implemented in this
package: the backward rules (:mod:`.rules`), the counts (:mod:`.cost`), the
NumPy and PyTorch forwards (:mod:`.numeric`, :mod:`.torch`) and the sheet's
index form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import sympy

from ...core.errors import Span
from ...core.ir import Einsum, Factor, Order
from ...core.records import OpCost, PatternTerm, Rule
from ...core.sharding import Layout, OpSplit, Width
from ..base import Access, Choice, Unit, accesses
from .cost import op_cost
from .numeric import run_op
from .pattern import pattern_terms
from .rules import contraction_rules
from .split import split_terms, term_trees
from .torch import torch_op


@dataclass(frozen=True)
class Contraction:
    """A forward op that is a sum of einsum products: ``out = sum of terms``.

    One term covers every contraction (matmuls, batched and multi-operand
    products, outer and elementwise products, scaling by a constant, a
    pointwise function of a tensor, a dropout mask); several terms add
    (residuals, biases).  All terms write the same output factor."""

    terms: tuple[Einsum, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)

    kind = "contraction"

    @property
    def einsum(self) -> Einsum:
        """The single term of a one-term op."""
        if len(self.terms) != 1:
            raise ValueError(f"{self.text!r} has {len(self.terms)} terms")
        return self.terms[0]

    @property
    def output(self) -> str:
        return self.terms[0].output.tensor

    @property
    def out(self) -> Factor:
        return self.terms[0].output

    @property
    def inputs(self) -> tuple[str, ...]:
        """Distinct operand tensors in order of first use."""
        return tuple(dict.fromkeys(f.tensor for t in self.terms for f in t.operands
                                   if f.reads_tensor))

    def statement(self) -> str:
        parts = []
        for k, t in enumerate(self.terms):
            rhs = t.statement(where=False).split(" = ", 1)[1]
            if k and rhs.startswith("-"):
                parts.append("- " + rhs[1:].lstrip())
            else:
                parts.append(("+ " if k else "") + rhs)
        # An affine output index (a transposed convolution) prints as written,
        # Y[b,o,2*i+u], its bracket (on every term) left out of the where-clause.
        # A scatter, Agg[dst[e],d] += M[e,d], likewise, with its '+='.
        written = {f.indices[0]: f for f in self.terms[0].operands
                   if (f.is_shift or f.is_select) and f.indices[0] in self.out.indices
                   and all(f in t.operands for t in self.terms)}
        out = Factor(self.out.tensor, tuple(
            (f"{written[i].tensor}[{','.join(written[i].indices[1:])}]" if written[i].is_select
             else written[i].affine.text(written[i].indices[1:])) if i in written else i
            for i in self.out.indices))
        inline = {f.condition() for f in written.values()}
        clauses = tuple(dict.fromkeys(c for t in self.terms for c in t.where() if c not in inline))
        assign = " += " if any(f.is_select for f in written.values()) else " = "
        return f"{out}{assign}" + " ".join(parts) + (" where " + ", ".join(clauses) if clauses else "")

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    #: an einsum produces nothing besides its output
    aux: ClassVar[tuple[Factor, ...]] = ()

    def reads(self) -> tuple[Einsum, ...]:
        return self.terms

    def moved(self, rule: Rule | None = None) -> Access:
        """Its terms' operands read, its output written (over every term)."""
        return accesses(self, rule)

    def formula(self) -> None:
        """An einsum is its index form; it has no other formula."""
        return None

    def shown(self) -> None:
        """Its rules' derivation is that of its terms' patterns (the sheet's
        generic derivations), not one of its own."""
        return None

    def patterns(self) -> tuple[PatternTerm, ...]:
        """Each of its terms in textbook form (:mod:`.pattern`): the patterns
        whose derivations the sheet shows for it."""
        return pattern_terms(self)

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        """Every gradient contribution this op sends to each of ``targets``."""
        return tuple(r for name in targets for r in contraction_rules(self, number, name))

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        return op_cost(self, unit, order, sizes, choice)

    def split(self, layout: Layout, widths: Mapping[str, Width], unit: Unit = "FLOPs",
              order: Order = "written") -> OpSplit:
        """The four sharded-matmul cases, step by step (:mod:`.split`)."""
        extents = self.dims()
        return split_terms(self.terms, extents, layout, widths, unit,
                           term_trees(self.terms, extents, unit, order))

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The forward pass with NumPy: the output."""
        return {self.output: run_op(self, values, extents, dims)}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The forward pass with ``torch.einsum``, as a PyTorch model writes it."""
        return {self.output: torch_op(torch, self, values, dims)}

    def latex(self, m: Any) -> str:
        """All terms in index form, ``Y_{bd} = X_{bd} + F_{bd}`` (``m`` prints
        indexed names and einsum terms: :class:`symflops.sheets.notation.Math`)."""
        rhs = ""
        for k, t in enumerate(self.terms):
            text = m.einsum_rhs(t)
            if k and text.startswith("-"):
                rhs += " - " + text[1:]
            else:
                rhs += (" + " if k else "") + text
        return f"{m.ix(self.out)} = {rhs}"


def pattern_rules(pattern: PatternTerm, wrt: str) -> tuple[Rule, ...]:
    """The rules of a generic term (:mod:`.pattern`) for ``wrt``, with their steps."""
    g = Contraction((pattern.term,), pattern.index_dims, pattern.term.statement())
    return contraction_rules(g, 0, wrt, output_form=pattern.alone)
