"""The cross-entropy loss over a named index, where a model's backward pass starts.

``L[] = cross_entropy_v(Z[b,v], y[b])`` sums, over the batch letters, the
negative log-probability that the softmax over ``v`` gives the target class
``y[b]`` (an integer tensor with ``role: index``);
``cross_entropy_mean_v`` averages instead.  Everything this op knows is
here: its forward pass (NumPy, PyTorch), its backward rule (derived by SymPy
in :mod:`symflops.ops.reductions`: ``dZ = dL (P - onehot(y))``), its cost, and the
probabilities ``P_<loss>`` it saves.  The one-hot of the targets is written as
the selection ``[v = y_b]`` (an indicator factor), so the rule reads the
targets (one integer per row), not a dense one-hot matrix.

Cost per element of the logits, counted from the formula: exp, add into the
row sum, divide for the probabilities (3); per row: log of the sum and the
subtraction of the target's logit (2).  Elementwise work, apart from ``flops``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.records import OpCost
from ..core.records import IndexTerm, Rule
from ..core.errors import Span, SymflopsError, closest
from ..core.ir import SELECT, Einsum, Factor, Order
from ..lang.statement import Ref
from .base import Access, Choice, Scope, Unit, accesses
from .derivation import ReductionOp, reduction_rule
from .reductions import Reduction, cross_entropy_rule

PER_ELEMENT, PER_ROW = 3, 2


@dataclass(frozen=True)
class CrossEntropy(ReductionOp):
    """``out[] = cross_entropy_index(logits, target)``, summed (or averaged,
    ``mean``) over the logits' other letters."""

    out: Factor
    logits: Factor
    target: Factor
    index: str
    mean: bool
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "cross_entropy"
    #: a row's log-sum-exp and its target's logit, when the classes are split
    statistics = 2

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.logits.tensor, self.target.tensor)

    @property
    def probs(self) -> str:
        return f"P_{self.out.tensor}"

    @property
    def aux(self) -> tuple[Factor, ...]:
        return (Factor(self.probs, self.logits.indices),)

    aux_description = "probabilities saved by the loss"

    def statement(self) -> str:
        name = "cross_entropy_mean" if self.mean else "cross_entropy"
        return f"{self.out} = {name}_{self.index}({self.logits}, {self.target})"

    def reduction(self) -> Reduction:
        rows = [i for i in self.logits.indices if i != self.index]
        return cross_entropy_rule(self.out.tensor, self.logits.tensor, self.target.tensor,
                                  self.logits.indices, self.index, self.dims()[self.index],
                                  tuple(self.dims()[i] for i in rows), self.mean, self.probs)

    def _select(self, f: Factor) -> Factor:
        """``onehot_y[b,v]`` as the selection ``[v = y_b]`` the rest of symflops reads."""
        if f.tensor != f"onehot_{self.target.tensor}":
            return f
        letter = dict(zip(self.logits.indices, f.indices))  # the rule's letters for the logits'
        return Factor(self.target.tensor,
                      (letter[self.index], *(letter[i] for i in self.target.indices)), fn=SELECT)

    def reads(self) -> tuple[Einsum, ...]:
        """It reads its logits row by row."""
        return (Einsum(self.out, (self.logits,)),)

    def moved(self, rule: Rule | None = None) -> Access:
        """Its logits row by row and each row's target read; the loss and the
        probabilities (``aux``) written."""
        if rule is not None:
            return accesses(self, rule)
        read = Einsum(self.out, (self.logits, self.target))
        return Access((read,), tuple(Einsum(f, read.operands) for f in (self.out, *self.aux)))

    def shown(self) -> Reduction:
        """The derivation as the sheet shows it: the one-hot written as ``[v = y_b]``."""
        red = self.reduction()

        def select(value: Any) -> Any:
            if not isinstance(value, tuple):
                return value
            return tuple(IndexTerm(t.coefficient, tuple(self._select(f) for f in t.factors),
                                   t.deltas, t.summed) for t in value)

        return dataclasses.replace(red, stages=tuple((n, select(v)) for n, v in red.stages),
                                   terms=select(red.terms))

    def rules(self, number: int, targets: Sequence[str] = ()) -> tuple[Rule, ...]:
        """The rule for its one differentiable input (``targets`` is that input)."""
        red = self.reduction()

        def shown(terms: tuple[IndexTerm, ...]) -> tuple[IndexTerm, ...]:
            return tuple(IndexTerm(t.coefficient, tuple(self._select(f) for f in t.factors),
                                   t.deltas, t.summed) for t in terms)

        einsums = tuple(Einsum(red.lhs, tuple(self._select(f) for f in t.factors), t.coefficient)
                        for t in red.terms)
        return (reduction_rule(red, self.logits.tensor, number, einsums, self.dims(), shown),)

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """Per element and per row of the formula (no products to order)."""
        d = self.dims()
        elements = sympy.Mul(*(d[i] for i in self.logits.indices))
        rows = sympy.Mul(*(d[i] for i in self.logits.indices if i != self.index))
        return OpCost(sympy.Integer(0), sympy.expand(PER_ELEMENT * elements + PER_ROW * rows))

    def _scale(self, z: Any) -> float:
        rows = [n for i, n in zip(self.logits.indices, z.shape) if i != self.index]
        return 1.0 / float(np.prod(rows)) if self.mean else 1.0

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        z = values[self.logits.tensor]
        y = np.asarray(values[self.target.tensor]).astype(int)
        axis = self.logits.indices.index(self.index)
        shifted = z - z.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        logp = shifted - lse
        # The target's log-probability, row by row: y holds the rows' letters in
        # the target's order; move them to the logits' order.
        rows = [i for i in self.logits.indices if i != self.index]
        order = [self.target.indices.index(i) for i in rows]
        picked = np.take_along_axis(logp, np.expand_dims(np.transpose(y, order), axis), axis)
        loss = -float(picked.sum()) * self._scale(z)
        return {self.output: np.array(loss), self.probs: np.exp(logp)}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """PyTorch's own cross-entropy, for the verifier."""
        z = values[self.logits.tensor]
        y = values[self.target.tensor]
        axis = self.logits.indices.index(self.index)
        rows = [i for i in self.logits.indices if i != self.index]
        order = [self.target.indices.index(i) for i in rows]
        reduction = "mean" if self.mean else "sum"
        loss = torch.nn.functional.cross_entropy(z.movedim(axis, 1), y.permute(order).long(),
                                                 reduction=reduction)
        return {self.output: loss, self.probs: torch.softmax(z, dim=axis)}

    def latex(self, m: Any) -> str:
        name = r"\operatorname{CE}" + (r"^{\text{mean}}" if self.mean else "")
        return f"{m.ix(self.out)} = {name}_{{{self.index}}}({m.ix(self.logits)},\\ {m.ix(self.target)})"


_NAME = re.compile(r"cross_entropy(_mean)?_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


class CrossEntropyCall:
    """The statement form of the loss, ``L[] = cross_entropy_v(Z[b,v], y[b])``,
    checked: the whole right side, a scalar output, ``v`` one of the logits'
    letters, integer targets indexed by the logits' other letters."""

    usage = "cross_entropy_v(Z[..], y[..]) as a whole statement"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> CrossEntropy:
        at = scope.at
        if len(call.reduced) > 1:
            stem = call.name[:call.name.index("{")]
            raise SymflopsError(f"{call.name}(...) takes one class index, not "
                                f"{len(call.reduced)}", at(call.column),
                                f"cross-entropy is over the class index alone, e.g. "
                                f"'L[] = {stem}v(Z[b,v], y[b])'; the other letters are rows")
        if len(statement.terms) != 1 or statement.terms[0].negative or statement.where:
            self.inline(call, out, scope)
        m = _NAME.match(call.name)
        assert m is not None
        mean, index = bool(m.group(1)), call.reduced[0].letter if call.reduced else m.group(2)
        logits = call.ref
        if out.indices:
            raise SymflopsError(f"the loss {out.tensor} must be a scalar, written {out.tensor}[]",
                                out.span, f"write '{out.tensor}[] = {call.name}(...)'")
        if index not in logits.indices:
            raise SymflopsError(f"cross entropy over {index!r}, an index {logits.name} does not have",
                                at(call.column), "take it over the class index, one of "
                                + ", ".join(logits.indices))
        target = call.argument
        rows = tuple(i for i in logits.indices if i != index)
        known = scope.known
        if not isinstance(target, Ref):
            raise SymflopsError(f"{call.name} needs the target classes", at(call.column),
                                f"write {call.name}({logits.name}[...], y[{','.join(rows)}]) with y "
                                "declared as role: index")
        if target.name not in known:
            raise SymflopsError(f"unknown tensor {target.name!r}", at(target.column),
                                f"declare the targets under 'tensors:' as integer class labels, "
                                f"e.g. {target.name}: {{shape: [...], role: index}}; "
                                f"{closest(target.name, sorted(known))}")
        if known[target.name].role != "index":
            raise SymflopsError(f"the targets {target.name!r} must be integer class labels",
                                at(target.column), f"declare {target.name} with role: index")
        if sorted(target.indices) != sorted(rows):
            raise SymflopsError(f"the targets are indexed by [{','.join(target.indices)}] but the "
                                f"logits' rows by [{','.join(rows)}]", at(target.column),
                                f"index the targets by the logits' letters other than {index!r}")
        # the targets are no operand of the statement's product: their axes are checked here
        for letter, column, extent in zip(target.indices, target.index_columns,
                                          known[target.name].shape):
            if sympy.simplify(scope.extents[letter] - extent) != 0:
                raise SymflopsError(
                    f"index {letter!r} ranges over {scope.extents[letter]} in {logits.name} but "
                    f"over {extent} in {target.name}", at(column),
                    f"give {target.name} one class label per row of {logits.name}")
        return CrossEntropy(out, Factor(logits.name, logits.indices, at(logits.column)),
                            Factor(target.name, target.indices, at(target.column)), index, mean,
                            tuple((i, scope.extents[i]) for i in logits.indices), scope.text,
                            scope.span)

    def inline(self, call: Any, out: Factor, scope: Scope) -> CrossEntropy:
        raise SymflopsError(f"{call.name}(...) must be the whole right side",
                            scope.at(call.column), f"write e.g. 'L[] = {call.name}(Z[b,v], y[b])'")


CROSS_ENTROPY = CrossEntropyCall()
