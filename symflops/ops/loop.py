"""A loop over one letter whose state enters through products (issue 31):
the chunk loop of the gated DeltaNet,

    N[h,c,l,p] = U[h,c,l,p] - Wd[h,c,l,e] S[h,c-1,e,p]
    O[h,c,l,p] = Qd[h,c,l,e] S[h,c-1,e,p] + A[h,c,l,m] N[h,c,m,p]
    S[h,c,e,p] = Gd[h,c] S[h,c-1,e,p] + Kd[h,c,l,e] N[h,c,l,p]

A *loop group* is a run of consecutive statements in which some statement
reads a tensor (the *state*, ``S``) one step back along a letter (the *loop
letter*, ``c``) before the group's last statement writes it
(:mod:`.loop_statement` finds and checks the groups).  Each statement is a
sum of signed einsum products, held as a :class:`~.einsum.node.Contraction`
with the state read replaced by an operand of its own, ``S_prev[h,c,e,p] =
S[h,c-1,e,p]`` (zero at the first step).  The one tensor of the group that
no statement of the group reads is the op's output (``O``); the others are
its ``aux`` (``N``, ``S``), saved for the backward pass and read by nothing
after the loop.

Backward, derived by the einsum machinery, never typed in
(:mod:`.loop_rules`): each statement's rules, with the total gradient
``G_T`` of each group tensor ``T`` in place of ``dT``; the totals run as a
reverse loop over the steps.

Counting convention (exact, one multiply-add = 2 FLOPs; per step, each
statement's terms as the einsum cost model counts them, i.e. each term counted
with the loop letter's extent replaced by the number of steps it runs):

* the state before the first step is zero, so a term reading it does not run
  at the first step, nor does any backward product reading ``S_prev`` there,
  nor the gradient of that zero state;
* the state written at the last step is read by nothing, so the state's
  statement does not run at the last step (the loop leaves ``S`` zero there),
  and the gradient it receives there is zero: backward products reading
  ``G_S`` do not run at the last step.

With ``C`` steps, a forward term reading the state runs ``C - 1`` times, the
state's statement's other terms ``C - 1`` times, its own state term
``Max(C - 2, 0)`` times.  The additions joining a statement's terms (and the
contributions to a total gradient) are counted at each step where two or more
of them run.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span
from ..core.ir import Einsum, Factor, Order, rename
from ..core.records import OpCost, PatternTerm, Rule
from .base import Access, Choice, Unit
from .einsum.cost import einsum_elementwise, term_cost
from .einsum.node import Contraction
from .einsum.numeric import run_einsum
from .einsum.orders import bounds_of, size
from .loop_steps import joined, step_einsum, steps_run
from .recurrence import prev_name

#: The statement form, for messages.
EXAMPLE = ("'N[h,c,l,p] = U[h,c,l,p] - W[h,c,l,e] S[h,c-1,e,p]', "
           "'O[h,c,l,p] = Q[h,c,l,e] S[h,c-1,e,p] + A[h,c,l,m] N[h,c,m,p]', "
           "'S[h,c,e,p] = G[h,c] S[h,c-1,e,p] + K[h,c,l,e] N[h,c,l,p]'")


@dataclass(frozen=True)
class Loop:
    """A loop group lowered to one op (see the module doc)."""

    statements: tuple[Contraction, ...]
    state: str
    time: str
    output_name: str
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "loop"
    aux_description = "saved by the loop"

    def renamed(self, names: Mapping[str, str], subs: Mapping[sympy.Symbol, sympy.Expr]
                ) -> "Loop":
        """The loop placed in an includer (:func:`symflops.core.ir.rename`):
        its state and output renamed with its statements, and the previous
        state's operand ``S_prev`` with the state (it is no tensor of the
        block, so ``names`` does not map it)."""
        state = names.get(self.state, self.state)
        mapped = {**names, self.previous_name: prev_name(state)}
        return dataclasses.replace(
            self, statements=rename(self.statements, mapped, subs), state=state,
            output_name=names.get(self.output_name, self.output_name),
            index_dims=rename(self.index_dims, mapped, subs))

    # -- the protocol ----------------------------------------------------------
    @property
    def output(self) -> str:
        return self.output_name

    @property
    def outs(self) -> tuple[Factor, ...]:
        return tuple(s.out for s in self.statements)

    @property
    def out(self) -> Factor:
        return next(f for f in self.outs if f.tensor == self.output_name)

    @property
    def written(self) -> frozenset[str]:
        """The group's tensors, and the previous state."""
        return frozenset({*(f.tensor for f in self.outs), self.previous_name})

    @property
    def previous_name(self) -> str:
        return prev_name(self.state)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tensors it reads from outside, in order of first use."""
        return tuple(dict.fromkeys(f.tensor for s in self.statements for t in s.terms
                                   for f in t.operands
                                   if f.reads_tensor and f.tensor and f.tensor not in self.written))

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """Not a sum of einsums: it runs a loop."""
        return ()

    @property
    def aux(self) -> tuple[Factor, ...]:
        return tuple(f for f in self.outs if f.tensor != self.output_name)

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    @property
    def steps(self) -> sympy.Expr:
        return self.dims()[self.time]

    def shifted(self, text: str) -> str:
        """``text`` with the previous state written back as the state one step back."""
        for s in self.statements:
            for t in s.terms:
                for f in t.operands:
                    if f.tensor == self.previous_name:
                        back = ",".join(f"{i}-1" if i == self.time else i for i in f.indices)
                        text = text.replace(str(f), f"{self.state}[{back}]")
        return text

    def statement(self) -> str:
        """The statements as written, joined by ``; ``."""
        return "; ".join(self.shifted(s.statement()) for s in self.statements)

    def reads_state(self, e: Einsum) -> bool:
        return any(f.tensor == self.previous_name for f in e.operands)

    def is_state(self, s: Contraction) -> bool:
        return s.output == self.state

    def reads(self) -> tuple[Einsum, ...]:
        """The tensors from outside, each term's, over its letters."""
        out = []
        for s in self.statements:
            for t in s.terms:
                ops = tuple(f for f in t.operands if f.tensor not in self.written)
                if any(f.reads_tensor and f.tensor for f in ops):
                    out.append(Einsum(t.output, ops))
        return tuple(out)

    def moved(self, rule: Rule | None = None) -> Access:
        """Forward: what it reads from outside, its output and ``aux`` written.
        A rule: the layer tensors its products and its reverse loop read
        (``S`` for ``S_prev``), its gradient written."""
        if rule is None:
            reads = self.reads()
            return Access(reads, tuple(Einsum(f, ()) for f in (self.out, *self.aux)))
        from .loop_rules import rule_access

        return rule_access(self, rule)

    def formula(self) -> None:
        return None

    def shown(self) -> None:
        return None

    def patterns(self) -> tuple[PatternTerm, ...]:
        return ()

    def split(self, layout: Any, widths: Any, unit: str = "FLOPs", order: str = "written") -> Any:
        """Split along any letter but the loop letter, which is refused."""
        from .split import along

        return along(self, self.time, "runs a loop", layout, widths, unit)

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        from .loop_rules import loop_rules

        return loop_rules(self, number, tuple(targets))

    # -- counts ----------------------------------------------------------------
    def runs(self, s: Contraction, e: Einsum) -> tuple[bool, bool]:
        """Whether a forward term skips the first step and the last."""
        return self.reads_state(e), self.is_state(s)

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """Each term counted over the steps it runs (see the module doc)."""
        dims, total = self.dims(), self.steps
        flops = elementwise = sympy.Integer(0)
        for s in self.statements:
            runs = []
            for k, t in enumerate(s.terms):
                first, last = self.runs(s, t)
                runs.append((first, last))
                extents = {**dims, self.time: steps_run(total, first, last)}
                f, w, _ = term_cost(t, extents, unit, order, sizes, choice, k)
                flops += f
                elementwise += w + einsum_elementwise(t, extents)
            elementwise += joined(runs, total) * _per_step(s.terms, dims, self.time)
        return OpCost(sympy.expand(flops), sympy.expand(elementwise))

    # -- forwards --------------------------------------------------------------
    def _loop(self, values: Mapping[str, Any], count: int, zeros: Any, take: Any, stack: Any,
              evaluate: Any) -> dict[str, Any]:
        """The loop over the steps: ``evaluate(step terms, step values)`` sums
        a statement's step products (None for none), ``zeros(factor)`` is a
        step of a tensor, ``stack(list, axis)`` joins the steps."""
        done: dict[str, list[Any]] = {f.tensor: [] for f in self.outs}
        for c in range(count):
            for s in self.statements:
                if self.is_state(s) and c == count - 1:
                    done[s.output].append(zeros(s.out))  # read by nothing: not run
                    continue
                parts = []
                for t in s.terms:
                    if self.reads_state(t) and c == 0:
                        continue  # the zero state
                    e, source = step_einsum(t, self.time, f"{len(parts)}.")
                    arrays = {}
                    for name, (tensor, axis) in source.items():
                        if tensor == self.previous_name:
                            arrays[name] = done[self.state][c - 1]
                        elif tensor in done:
                            arrays[name] = done[tensor][c]
                        else:
                            arrays[name] = values[tensor] if axis is None \
                                else take(values[tensor], c, axis)
                    parts.append((e, arrays))
                value = evaluate(s, parts)
                done[s.output].append(zeros(s.out) if value is None else value)
        return {f.tensor: stack(done[f.tensor], f.indices.index(self.time)) for f in self.outs}

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The loop in NumPy (float64): the output and ``aux``."""
        ext = {k: v for k, v in extents.items() if k != self.time}

        def zeros(f: Factor) -> Any:
            return np.zeros(tuple(ext[i] for i in f.indices if i != self.time))

        def evaluate(s: Contraction, parts: list) -> Any:
            if not parts:
                return None
            return np.asarray(sum(run_einsum(e, a, ext, dims) for e, a in parts))

        values = {k: np.asarray(v, float) if k in self.inputs else v for k, v in values.items()}
        return self._loop(values, extents[self.time], zeros,
                          lambda a, c, axis: np.take(a, c, axis=axis),
                          lambda xs, axis: np.stack(xs, axis=axis), evaluate)

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The same loop with PyTorch's own kernels (:mod:`.einsum.torch`), for
        the verifier: the zero state's products and the last step's state are
        not run, as counted."""
        from ..core.ir import dim_symbol
        from .einsum.torch import torch_op

        count = None
        for s in self.statements:
            for t in s.terms:
                for f in t.operands:
                    if f.tensor in values and self.time in f.indices:
                        count = values[f.tensor].shape[f.indices.index(self.time)]
        if count is None:  # no operand carries the loop letter: its extent from the dims
            count = int(self.steps.xreplace({dim_symbol(k): v for k, v in (dims or {}).items()}))
        sizes: dict[str, int] = {}
        for s in self.statements:
            for t in s.terms:
                for f in t.operands:
                    if f.tensor in values and f.reads_tensor and f.tensor:
                        sizes.update(zip(f.indices, values[f.tensor].shape))
        device = next(iter(v for v in values.values() if hasattr(v, "device"))).device

        def zeros(f: Factor) -> Any:
            shape = [sizes[i] for i in f.indices if i != self.time]
            return torch.zeros(shape, dtype=torch.float64, device=device)

        def evaluate(s: Contraction, parts: list) -> Any:
            if not parts:
                return None
            letters = dict.fromkeys(i for e, _ in parts for i in e.indices)
            op = Contraction(tuple(e for e, _ in parts),
                             tuple((i, d) for i, d in s.index_dims if i in letters), s.text)
            arrays = {k: v for _, a in parts for k, v in a.items()}
            return torch_op(torch, op, arrays, dims)

        return self._loop(values, count, zeros, lambda a, c, axis: a.select(axis, c),
                          lambda xs, axis: torch.stack(xs, dim=axis), evaluate)

    def latex(self, m: Any) -> str:
        """The statements one per line, aligned at their equals signs, in an
        ``aligned`` block (a sheet shows it where it shows one statement)."""
        lines = []
        for s in self.statements:
            rhs = ""
            for k, t in enumerate(s.terms):
                text = m.einsum_rhs(t)
                sign = re.match(r"^((?:\\sum_\{[^}]*\}\s*)?)-\s*(.*)$", text, re.S)
                if k and sign:  # a minus after the sum sign reads as a difference
                    rhs += " - " + sign.group(1) + sign.group(2)
                else:
                    rhs += (" + " if k else "") + text
            lines.append(f"{m.ix(s.out)} &= {rhs}")
        body = _shifted_latex(self, m, " \\\\ ".join(lines))
        return f"\\begin{{aligned}} {body} \\end{{aligned}}"

    def unrolled(self) -> Contraction:
        """Every statement's terms, the state one step back read as the state
        (what a sheet lists as the products' operands)."""
        def back(f: Factor) -> Factor:
            return dataclasses.replace(f, tensor=self.state) if f.tensor == self.previous_name \
                else f

        return Contraction(tuple(dataclasses.replace(t, operands=tuple(map(back, t.operands)))
                                 for s in self.statements for t in s.terms),
                           self.index_dims, self.text)


def _shifted_latex(op: Loop, m: Any, text: str) -> str:
    """The previous state printed as the state one step back, ``S_{h,c-1,e,p}``."""
    for s in op.statements:
        for t in s.terms:
            for f in t.operands:
                if f.tensor == op.previous_name:
                    letters = ",".join(f"{i}-1" if i == op.time else i for i in f.indices)
                    name = m.t(op.state)
                    name = f"({name})" if "_" in name else name
                    text = text.replace(m.ix(f), f"{name}_{{{letters}}}")
    return text


def _per_step(terms: Sequence[Einsum], dims: Mapping[str, sympy.Expr], time: str) -> sympy.Expr:
    """The elements of a statement's output at one step, inside the bounds
    every term carries (where the terms are joined)."""
    if not terms:
        return sympy.Integer(0)
    common = [b for b in bounds_of(terms[0]) if all(b in bounds_of(t) for t in terms[1:])]
    return size(set(terms[0].output.indices) - {time}, dims, common)
