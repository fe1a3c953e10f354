"""The backward rules of a :class:`~.loop.Loop`, derived by the einsum machinery.

Each statement of the loop is a :class:`~.einsum.node.Contraction` with the
state one step back as an operand of its own, ``S_prev``; the machinery
(:func:`~.einsum.rules.contraction_rules`) gives the rule of each of its
operands.  The *total* gradient ``G_T`` of a tensor ``T`` of the loop at step
``c`` is the sum of the rules that read ``T`` at the same step, with the
totals of their statements' outputs in place of the outputs' gradients; for
the state, the ``S_prev`` rules of step ``c + 1``.  Computed from the last
step back (the output's total is its upstream gradient ``dO``), they are the
*reverse loop*; an input's gradient is then the machinery's rule with the
totals in place of the gradients and ``S_prev`` the state shifted one step.

Each rule is a :class:`LoopRule`, which evaluates itself (the reverse loop,
then its products) and counts itself (the reverse loop in the op's first rule
only, as :class:`~.recurrence.ScanRule` does; its products over the steps they
run, :mod:`.loop`'s convention).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.lazy import numpy as np
import sympy

from ..core.ir import Einsum, Factor
from ..core.records import OpCost, Rule, Step, grad_name
from .base import Access, Unit
from .einsum.cost import _joins, einsum_elementwise, term_cost
from .einsum.numeric import extents_at, run_einsum
from .einsum.rules import contraction_rules
from .loop_steps import LoopOp, joined, step_einsum, step_values, steps_run
from .recurrence import total_name


@dataclass(frozen=True)
class Contribution:
    """One product of the reverse loop: statement ``statement``'s rule for
    ``target`` (a tensor of the loop, or the previous state), over the totals."""

    target: str
    statement: int
    term: Einsum
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    first: bool
    last: bool


def _renamed(op: LoopOp, e: Einsum) -> Einsum:
    """``e`` with each loop tensor's gradient replaced by its total ``G_T`` (the
    output's total is its gradient)."""
    names = {grad_name(f.tensor): total_name(f.tensor) for f in op.outs
             if f.tensor != op.output}
    return dataclasses.replace(e, operands=tuple(
        dataclasses.replace(f, tensor=names.get(f.tensor, f.tensor)) for f in e.operands))


def _totals(op: LoopOp) -> frozenset[str]:
    """The names of the totals, ``G_N``, ``G_S``."""
    return frozenset(total_name(f.tensor) for f in op.outs if f.tensor != op.output)


def _skips(op: LoopOp, e: Einsum, target: str) -> tuple[bool, bool]:
    """A backward product skips the first step when it reads the zero state
    or is its gradient, and the last when it reads the state's total there."""
    reads = {f.tensor for f in e.operands}
    return (op.previous_name in reads or target == op.previous_name,
            total_name(op.state) in reads)


@functools.lru_cache(maxsize=256)
def contributions(op: LoopOp) -> tuple[Contribution, ...]:
    """The reverse loop's products, statement by statement."""
    out = []
    for k, s in enumerate(op.statements):
        targets = dict.fromkeys(f.tensor for t in s.terms for f in t.operands
                                if f.tensor in op.written)
        for target in targets:
            for r in contraction_rules(s, 0, target):
                for t in r.terms:
                    if op.time not in t.output.indices:
                        raise AssertionError(f"the rule {r.statement} lost the loop letter")
                    t = _renamed(op, t)
                    out.append(Contribution(target, k, t, r.index_dims, *_skips(op, t, target)))
    return tuple(out)


def reverse_loop(op: LoopOp, env: Mapping[str, Any], dims: Mapping[str, int] | None
                 ) -> dict[str, np.ndarray]:
    """Every total ``G_T`` over all steps, and ``S_prev``, from ``env``'s
    forward values and the output's gradient."""
    state = next(s.out for s in op.statements if s.output == op.state)
    axis = state.indices.index(op.time)
    s_full = np.asarray(env[op.state], float)
    prev = np.moveaxis(s_full, axis, 0)
    prev = np.moveaxis(np.concatenate([np.zeros_like(prev[:1]), prev[:-1]]), 0, axis)
    values: dict[str, Any] = {**env, op.previous_name: prev}
    totals = {total_name(f.tensor): np.zeros(np.shape(env[f.tensor])) for f in op.outs
              if f.tensor != op.output}
    values.update(totals)
    values[grad_name(op.output)] = np.asarray(env[grad_name(op.output)], float)
    count = s_full.shape[axis]
    by_statement: dict[int, list[Contribution]] = {}
    for b in contributions(op):
        by_statement.setdefault(b.statement, []).append(b)
    carry = None
    for c in range(count - 1, -1, -1):
        if carry is not None:
            np.moveaxis(totals[total_name(op.state)], axis, 0)[c] += carry
        carry = None
        for k in range(len(op.statements) - 1, -1, -1):
            if op.statements[k].output == op.state and c == count - 1:
                continue
            for b in by_statement.get(k, ()):
                if b.first and c == 0:
                    continue
                e, source = step_einsum(b.term, op.time)
                ext = {i: v for i, v in extents_at(b.index_dims, dims or {}).items() if i != op.time}
                arrays = step_values(source, values, c, lambda a, j, ax: np.take(a, j, axis=ax))
                part = run_einsum(e, arrays, ext, dims)
                if b.target == op.previous_name:
                    carry = part if carry is None else carry + part
                else:
                    target = next(f for f in op.outs if f.tensor == b.target)
                    at = target.indices.index(op.time)
                    np.moveaxis(totals[total_name(b.target)], at, 0)[c] += part
    values.update(totals)
    return values


def reverse_cost(op: LoopOp, unit: Unit) -> OpCost:
    """The reverse loop: each product over the steps it runs, and the
    additions joining the contributions to each total."""
    dims, total = op.dims(), op.steps
    flops = elementwise = sympy.Integer(0)
    runs: dict[str, list[tuple[bool, bool]]] = {}
    for b in contributions(op):
        extents = {**dict(b.index_dims), op.time: steps_run(total, b.first, b.last)}
        f, w, _ = term_cost(b.term, extents, unit, "cheapest", (), "minimum")
        flops += f
        elementwise += w + einsum_elementwise(b.term, extents)
        target = op.state if b.target == op.previous_name else b.target
        runs.setdefault(target, []).append((b.first, b.last))
    for target, r in runs.items():
        f = next(x for x in op.outs if x.tensor == target)
        per = sympy.Mul(*(dims[i] for i in f.indices if i != op.time))
        elementwise += joined(r, total) * per
    return OpCost(sympy.expand(flops), sympy.expand(elementwise))


@dataclass(frozen=True)
class LoopRule(Rule):
    """A rule of a loop's input: the reverse loop, then its products (see the
    module doc); it evaluates (:meth:`evaluate`) and counts (:meth:`own_cost`)
    itself, which the evaluators and the cost model ask of a rule."""

    loop: LoopOp | None = None
    counted: bool = False

    @property
    def reads(self) -> tuple[str, ...]:
        """The layer tensors its products and the reverse loop read (the state
        for ``S_prev``), and the output's gradient."""
        assert self.loop is not None
        op = self.loop
        terms = [*self.terms, *(b.term for b in contributions(op))]
        totals = _totals(op)
        names = [op.state if f.tensor == op.previous_name else f.tensor
                 for t in terms for f in t.operands if f.reads_tensor and f.tensor
                 and f.tensor not in totals]
        return tuple(dict.fromkeys(names))

    @property
    def statement(self) -> str:
        assert self.loop is not None
        text = self.loop.shifted(Rule.statement.fget(self))  # type: ignore[attr-defined]
        totals = ", ".join(total_name(f.tensor) for f in self.loop.outs
                           if f.tensor != self.loop.output)
        return f"{text}, with {totals} from the reverse loop over {self.loop.time}"

    def evaluate(self, env: Mapping[str, np.ndarray], extents: Mapping[str, int],
                 dims: Mapping[str, int] | None = None) -> np.ndarray:
        assert self.loop is not None
        values = reverse_loop(self.loop, env, dims)
        return np.asarray(sum(run_einsum(t, values, extents, dims) for t in self.terms))

    def own_cost(self, unit: Unit) -> OpCost:
        """The reverse loop when this rule counts it, plus its products over
        the steps each runs."""
        op = self.loop
        assert op is not None
        base = reverse_cost(op, unit) if self.counted else OpCost(sympy.Integer(0),
                                                                  sympy.Integer(0))
        flops, elementwise = base.flops, base.elementwise
        dims, total = self.dims(), op.steps
        runs = []
        for t in self.terms:
            first, last = _skips(op, t, self.wrt)
            runs.append((first, last))
            extents = {**dims, op.time: steps_run(total, first, last)} if op.time in dims else dims
            f, w, _ = term_cost(t, extents, unit, "cheapest", (), "minimum")
            flops += f
            elementwise += w + einsum_elementwise(t, extents)
        out = self.terms[0].output
        if op.time in out.indices:
            per = sympy.Mul(*(dims[i] for i in out.indices if i != op.time))
            elementwise += joined(runs, total) * per
        else:
            elementwise += _joins(self.terms, dims)
        return OpCost(sympy.expand(flops), sympy.expand(elementwise))


def rule_access(op: LoopOp, rule: Rule) -> Access:
    """What a rule reads (its products' layer tensors, the state for
    ``S_prev``; the counted rule also what the reverse loop reads, its totals
    staying on chip; the others read the totals back) and writes."""
    totals = _totals(op)

    def mapped(t: Einsum, keep_totals: bool) -> Einsum:
        ops = tuple(Factor(op.state, f.indices) if f.tensor == op.previous_name else f
                    for f in t.operands if keep_totals or f.tensor not in totals)
        return Einsum(t.output, ops)

    counted = getattr(rule, "counted", False)
    reads = [mapped(t, not counted) for t in rule.terms]
    writes = [Einsum(t.output, t.operands) for t in reads]
    return Access(tuple(reads), tuple(writes))


def _steps(op: LoopOp) -> tuple[Step, ...]:
    """The shift and the substitution, as :func:`.recurrence._scan_steps` records them."""
    prev = Factor(op.previous_name, next(s.out for s in op.statements
                                         if s.output == op.state).indices)
    g = Factor(total_name(op.state), prev.indices)
    back = ",".join(f"{i}-1" if i == op.time else i for i in prev.indices)
    return (
        Step("shift", g, (), (
            f"{prev} = {op.state}[{back}], zero at the first step: d{op.previous_name} at "
            f"step {op.time}+1 flows to {op.state} at step {op.time}, so the total gradient of "
            f"each tensor of the loop is the sum of the rules that read it at its step (for "
            f"{op.state}, the {op.previous_name} rules of the next step), run backward from "
            "the last step")),
        Step("substitute", g, (),
             "the totals " + ", ".join(total_name(f.tensor) for f in op.outs
                                       if f.tensor != op.output)
             + f" replace the gradients of the loop's tensors in the rules of its inputs"),
    )


def loop_rules(op: LoopOp, number: int, targets: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules of ``targets`` (inputs of the loop), each the machinery's
    rule of a statement reading it, over the totals; the first counts the
    reverse loop."""
    rules: list[Rule] = []
    for name in targets:
        for s in op.statements:
            for r in contraction_rules(s, number, name):
                terms = tuple(_renamed(op, t) for t in r.terms)
                rules.append(LoopRule(r.wrt, number, terms, r.index_dims,
                                      (*r.steps, *_steps(op)), r.matmul, op, not rules))
    return tuple(rules)
