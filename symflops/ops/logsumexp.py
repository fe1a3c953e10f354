"""The log-sum-exp over one named index: ``Y[s] = logsumexp_t(A[s,t])``.

``Y[s] = log sum_t exp(A[s,t])``, the log-partition of a row of scores (a
smooth maximum, a log-likelihood's normaliser, a pooling).  The reduced index
leaves the output, which has the input's other letters in any order.  This
module keeps everything the op knows: its statement form, checked with
positions and fixes; its forward pass (NumPy, stable, and PyTorch's
``torch.logsumexp``); its backward rule, derived by SymPy with the machinery
of :mod:`symflops.ops.reductions` (the steps of softmax: forward formula,
derivative, the saved tensor named in it), never typed in; its cost; and
how it prints.

Saving convention: the op saves the softmax of its input over the reduced
index, ``P_Y[s,t] = exp(A[s,t]) / sum_u exp(A[s,u]) = exp(A[s,t] - Y[s])``, an
auxiliary tensor its forward pass produces, and the derived rule is
``dA[s,t] = P_Y[s,t] dY[s]``.  Why not PyTorch's ``dY exp(A - Y)``, reading
the input and the output: a rule is a sum of products of factors, each a
function of one tensor's element, and ``exp(A[s,t] - Y[s])`` is a function of
two; split as ``exp(A) exp(-Y)`` it overflows for large scores, which is what
log-sum-exp exists to avoid.  ``P_Y`` is what the stable forward pass computes
anyway (``exp(A - Y)``), and it is the cross-entropy loss's convention (its
``P_L``).  Memory: ``P_Y`` has the input's size, where ``A`` and ``Y`` would
need that plus one element per row.

Cost, per the convention of softmax (formula as written, all of it
elementwise work, no matmul-type ``flops``): per element of the input 3 (exp,
add into the row sum, divide for ``P_Y``), per row 1 (the log).  The backward
cost is counted from the derived rule like any einsum: one multiply per
element.

The derivation is the same code as softmax's: :mod:`symflops.ops.derivation`'s
pipeline (``DerivedOp``, ``derive_reduction``) with softmax's substitution
from :mod:`symflops.ops.reductions` (``substitute_softmax``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Einsum, Factor, Order
from ..core.records import OpCost, Rule
from .base import Choice, Scope, Unit
from .derivation import (DerivedOp, ReductionOp, derive_reduction, fresh_letters, index_symbol,
                         reduction_rule)
from .reductions import Reduction, check_arguments, default_dim, substitute_softmax, unused_name

PER_ELEMENT, PER_ROW = 3, 1


@functools.lru_cache(maxsize=None)
def logsumexp_rule(out: str = "Y", inp: str = "A", inp_indices: tuple[str, ...] = ("s", "t"),
                   index: str = "t", dim: sympy.Expr | None = None, probs: str = "P",
                   out_indices: tuple[str, ...] | None = None) -> Reduction:
    """``out[..] = log sum_u exp(inp[..u..])`` over ``index`` (extent ``dim``,
    default the upper-cased letter); ``out_indices`` are the input's other
    letters (default in the input's order).  Saves the auxiliary ``probs``,
    the softmax of ``inp`` over ``index``."""
    ks = check_arguments(inp_indices, (index,), (out, inp, probs))
    k = ks[0]
    if len(inp_indices) < 2:
        raise ValueError("logsumexp needs a row letter besides the reduced index")
    rows = inp_indices[:k] + inp_indices[k + 1:]
    out_indices = rows if out_indices is None else out_indices
    if sorted(out_indices) != sorted(rows):
        raise ValueError(f"the output's letters {out_indices} must be the input's other letters {rows}")
    dim = default_dim(dim, index)
    A, P = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(probs, positive=True)
    norm = sympy.IndexedBase(unused_name("Z", (out, inp, probs)), positive=True)
    idx = tuple(index_symbol(i) for i in inp_indices)
    u = index_symbol(fresh_letters(index, set(inp_indices))[0])
    row_sum = sympy.Sum(sympy.exp(A[idx[:k] + (u,) + idx[k + 1:]]), (u, 0, dim - 1))
    p_aux = Factor(probs, inp_indices)
    return derive_reduction(DerivedOp(
        name="logsumexp", output=Factor(out, out_indices), forward=sympy.log(row_sum),
        inp=Factor(inp, inp_indices), base=A, index=(index,), extents=((index, dim),),
        # sum_u exp(A[..u..]) -> Z[..], exp(A[..t..]) -> P[..t..] Z[..]: Z cancels.
        substitute=lambda e: substitute_softmax(e, A, P, ks, (dim,), norm),
        saved=(p_aux,), aux=(p_aux,), definitions=((p_aux, sympy.exp(A[idx]) / row_sum),),
        dims=frozenset(dim.free_symbols),
    ))


@dataclass(frozen=True)
class LogSumExp(ReductionOp):
    """``out = logsumexp_index(inp)``: ``out`` has ``inp``'s letters but ``index``;
    ``aux`` is the softmax ``P_<out>`` it saves."""

    out: Factor
    inp: Factor
    index: str
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "logsumexp"

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.inp.tensor,)

    @property
    def probs(self) -> str:
        """The name of the softmax it saves."""
        return f"P_{self.out.tensor}"

    @property
    def aux(self) -> tuple[Factor, ...]:
        return (Factor(self.probs, self.inp.indices),)

    @property
    def aux_description(self) -> str:
        return (f"softmax of {self.inp.tensor} over {self.index} saved by logsumexp: "
                f"exp({self.inp} - {self.out})")

    def statement(self) -> str:
        return f"{self.out} = logsumexp_{self.index}({self.inp})"

    def reduction(self) -> Reduction:
        """The SymPy derivation of the backward rule, in this op's names."""
        return logsumexp_rule(self.out.tensor, self.inp.tensor, self.inp.indices, self.index,
                              self.dims()[self.index], self.probs, self.out.indices)

    def reads(self) -> tuple[Einsum, ...]:
        """It reads its input row by row."""
        return (Einsum(self.out, (self.inp,)),)

    def rules(self, number: int, targets: Sequence[str] = ()) -> tuple[Rule, ...]:
        """The rule for its one input, with the derivation's stages as steps."""
        red = self.reduction()
        return (reduction_rule(red, self.inp.tensor, number, red.einsums(), self.dims()),)

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """Per element of the input and per row (no products to order)."""
        d = self.dims()
        elements = sympy.Mul(*(d[i] for i in self.inp.indices))
        rows = sympy.Mul(*(d[i] for i in self.out.indices))
        return OpCost(sympy.Integer(0), sympy.expand(PER_ELEMENT * elements + PER_ROW * rows))

    def _axes(self) -> tuple[int, list[int]]:
        """The reduced axis of the input, and the order taking the input's
        other axes to the output's letters."""
        rows = [i for i in self.inp.indices if i != self.index]
        return self.inp.indices.index(self.index), [rows.index(i) for i in self.out.indices]

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        """Stable in NumPy: ``m + log sum exp(A - m)`` with the row maximum ``m``."""
        a = values[self.inp.tensor]
        axis, order = self._axes()
        top = a.max(axis=axis, keepdims=True)
        y = top + np.log(np.exp(a - top).sum(axis=axis, keepdims=True))
        return {self.output: np.transpose(np.squeeze(y, axis=axis), order),
                self.probs: np.exp(a - y)}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """PyTorch's own ``torch.logsumexp`` and ``torch.softmax``, for the verifier."""
        a = values[self.inp.tensor]
        axis, order = self._axes()
        return {self.output: torch.logsumexp(a, dim=axis).permute(order),
                self.probs: torch.softmax(a, dim=axis)}

    def latex(self, m: Any) -> str:
        """``Y_{s} = \\operatorname{logsumexp}_t(A_{st})``."""
        return rf"{m.ix(self.out)} = \operatorname{{logsumexp}}_{{{self.index}}}({m.ix(self.inp)})"


_NAME = re.compile(r"logsumexp_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


class LogSumExpCall:
    """The statement form ``Y[s] = logsumexp_t(A[s,t])``, checked: the whole
    right side, one tensor, ``t`` one of its letters and each of its letters
    once, the output its other letters."""

    usage = "logsumexp_i as a whole statement (its result has fewer letters)"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> LogSumExp:
        at = scope.at
        if len(call.reduced) > 1:
            raise SymflopsError(f"{call.name}(...) over {len(call.reduced)} indices is not supported",
                                at(call.column),
                                "log-sum-exp reduces one index, e.g. "
                                "'Y[s] = logsumexp_t(A[s,t])'; reduce one index at a time")
        if len(statement.terms) != 1 or statement.terms[0].negative:
            self.inline(call, out, scope)
        if statement.where:
            raise SymflopsError(f"a where-clause on {call.name}(...) is not supported",
                                at(statement.where[0].column),
                                "remove it; only softmax takes a domain (a causal mask)")
        m = _NAME.match(call.name)
        assert m is not None
        index, ref = call.reduced[0].letter if call.reduced else m.group(1), call.ref
        if call.argument is not None:
            raise SymflopsError(f"{call.name} takes one tensor", at(call.argument.column),
                                f"write {call.name}({ref.name}[...])")
        if index not in ref.indices:
            raise SymflopsError(
                f"logsumexp over {index!r}, an index {ref.name} does not have", at(call.column),
                f"reduce over one of {ref.name}'s indices: "
                + ", ".join(f"logsumexp_{i}" for i in dict.fromkeys(ref.indices)))
        if len(set(ref.indices)) != len(ref.indices):
            raise SymflopsError(f"{call.name} of a diagonal is not supported", at(call.column),
                                "give each axis its own letter")
        rows = tuple(i for i in ref.indices if i != index)
        if not rows:
            raise SymflopsError(f"{call.name} of a tensor with no other index is not supported",
                                at(call.column), f"give {ref.name} a row letter, e.g. "
                                f"'Y[s] = {call.name}({ref.name}[s,{index}])' with s of extent 1")
        if sorted(out.indices) != sorted(rows):
            written = f"{out.tensor}[{','.join(out.indices)}]"
            problem = (f"keeps the reduced index {index!r}" if index in out.indices
                       else f"must carry {ref.name}'s letters other than {index!r}: {','.join(rows)}")
            raise SymflopsError(f"the output {written} {problem}", out.span,
                                f"write '{out.tensor}[{','.join(rows)}] = {call.name}("
                                f"{ref.name}[{','.join(ref.indices)}])': the reduced index "
                                "leaves the output")
        return LogSumExp(out, Factor(ref.name, ref.indices, at(ref.column)), index,
                         tuple((i, scope.extents[i]) for i in ref.indices), scope.text, scope.span)

    def inline(self, call: Any, out: Factor, scope: Scope) -> LogSumExp:
        raise SymflopsError(f"{call.name}(...) must be the whole right side", scope.at(call.column),
                            f"write it as an op of its own, e.g. 'Y[s] = {call.name}(A[s,t])', "
                            "and use Y in the next op")


LOGSUMEXP = LogSumExpCall()
