"""A diagonal linear recurrence over one index: ``H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]``.

The statement reads its own output one step back along one letter (the
*time* letter ``s``), with ``H[b,-1,d] = 0``: a diagonal state-space layer
with a time-invariant ``A`` (S4D, LRU), or, with a gate that carries the time
letter (``G[b,s,d] H[b,s-1,d]``), a gated recurrence (Mamba, RG-LRU); an RNN
without its nonlinearity.

Invariants of a :class:`Recurrence`: the drive ``X`` carries exactly the
output's letters in the output's order; the gate's letters are distinct and
all on the output; the offset is ``-1`` along one letter.  Anything else is
refused by name where it is written (:mod:`.recurrence_statement`).

Backward, derived by the einsum machinery (:mod:`symflops.ops.einsum.rules`),
never typed in: the statement is the sum ``A[d] H_prev[b,s,d] + X[b,s,d]`` with
the previous state ``H_prev[b,s,d] = H[b,s-1,d]`` as an operand of its own; its
rules are ``dH_prev[b,s,d] = A[d] dH[b,s,d]``, ``dA[d] = dH[b,s,d] H_prev[b,s,d]``
and ``dX[b,s,d] = dH[b,s,d]``.  The shift sends ``dH_prev[b,s+1,d]`` to
``H[b,s,d]``, so the *total* gradient of ``H`` (its upstream ``dH`` plus what
flows back through the later steps) is the reverse-time recurrence
``G_H[b,s,d] = dH[b,s,d] + A[d] G_H[b,s+1,d]`` (``G_H[b,S,d] = 0``), and it
replaces ``dH`` in the other rules: ``dX = G_H``, ``dA[d] = G_H[b,s,d] H[b,s-1,d]``.
Each rule is a :class:`ScanRule`, which evaluates and counts itself.

Counting convention (exact, one multiply-add = 2 FLOPs, elementwise bucket:
no product here sums over a letter while keeping one only one operand has):

* forward: per row (every letter but time) ``S - 1`` multiply-adds; the step
  ``s = 0`` reads the zero state and is a copy;
* backward: the reverse recurrence, ``S - 1`` multiply-adds per row, counted
  once (in the rule for ``X``, or in the gate's rule when ``X`` needs no
  gradient); the gate's gradient ``S - 1`` products per row (a multiply-add
  where the gate lacks a letter of the output and the products are summed);
* saved: ``H`` for the gate's gradient, and the gate when it is an activation.

The same layer as a parallel (Brent-Kung / Blelloch) scan is stated beside it,
never mixed into the counts: :func:`parallel_scan`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span
from ..core.ir import Einsum, Factor, Order
from ..core.records import OpCost, PatternTerm, Rule, Step, grad_name
from .base import Access, Choice, Unit, accesses
from .einsum.node import Contraction
from .einsum.numeric import run_einsum
from .einsum.rules import contraction_rules

#: The statement form, for messages.
EXAMPLE = "'H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]'"
#: The one offset supported: the previous step.
OFFSET = -1
#: Which direction a scan runs: the forward pass over increasing time, the
#: backward pass over decreasing time.
Direction = Literal["forward", "reverse"]


def prev_name(state: str) -> str:
    """The previous state as an operand of its own in the derivation: ``H_prev``."""
    return f"{state}_prev"


def total_name(state: str) -> str:
    """The total gradient of the state (upstream plus through later steps): ``G_H``."""
    return f"G_{state}"


def at_time(f: Factor, time: str, at: str) -> str:
    """``f`` written with ``at`` in place of its time letter: ``H[b,s-1,d]``."""
    return f"{f.tensor}[{','.join(at if i == time else i for i in f.indices)}]"


def _rows(dims: Mapping[str, sympy.Expr], letters: Sequence[str], time: str) -> sympy.Expr:
    """The product of the extents of ``letters`` with time counted ``S - 1``
    times: the steps that read a state other than the zero one."""
    return sympy.Mul(*((dims[i] - 1) if i == time else dims[i] for i in letters))


@dataclass(frozen=True)
class Recurrence:
    """``out = gate * out[time - 1] + drive``, with the state before the first
    step zero."""

    out: Factor
    gate: Factor
    drive: Factor
    time: str
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "recurrence"
    aux_description = ""

    @property
    def output(self) -> str:
        return self.out.tensor

    @property
    def inputs(self) -> tuple[str, ...]:
        """The gate and the drive; the state it reads is its own output."""
        return tuple(dict.fromkeys((self.gate.tensor, self.drive.tensor)))

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """Not a sum of einsums: it reads its own output."""
        return ()

    @property
    def aux(self) -> tuple[Factor, ...]:
        return ()

    @property
    def previous(self) -> Factor:
        """The state one step back, ``H_prev[b,s,d] = H[b,s-1,d]``, an operand of the derivation."""
        return Factor(prev_name(self.output), self.out.indices)

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    def statement(self) -> str:
        previous = at_time(self.out, self.time, self.time + "-1")
        return f"{self.out} = {self.gate} {previous} + {self.drive}"

    def unrolled(self) -> Contraction:
        """The statement with the previous state as an operand of its own,
        ``H = A H_prev + X``: the sum of einsums the rules are derived from."""
        return Contraction((Einsum(self.out, (self.gate, self.previous)),
                            Einsum(self.out, (self.drive,))), self.index_dims, self.text)

    def previous_rule(self, number: int) -> Rule:
        """The einsum machinery's rule for the previous state, ``dH_prev = A dH``,
        with its derivation steps: the step the reverse-time recurrence repeats."""
        (rule,) = contraction_rules(self.unrolled(), number, self.previous.tensor)
        return rule

    def reads(self) -> tuple[Einsum, ...]:
        """Each element of the gate and of the drive once per output element."""
        return (Einsum(self.out, (self.gate,)), Einsum(self.out, (self.drive,)))

    def moved(self, rule: Rule | None = None) -> Access:
        """Forward: the gate and the drive read, the states written (the state
        a step reads is the one the step before wrote: it stays on chip).  A
        rule that runs the reverse recurrence reads the gate and the output's
        gradient ``dH``; one whose product reads the previous state reads the
        states; a product over the recurrence's total ``G_H`` that another
        rule computed reads it back (under that name)."""
        if not isinstance(rule, ScanRule) or rule.scan is None:
            return accesses(self, rule)  # type: ignore[arg-type]
        s = rule.scan
        read: list[Factor] = []
        if s.counted:
            read += [s.gate, Factor(grad_name(s.state.tensor), s.state.indices)]
        if s.product is not None:
            read += [Factor(s.state.tensor, f.indices) if f.tensor == prev_name(s.state.tensor)
                     else f for f in s.product.operands
                     if not (s.counted and f.tensor == total_name(s.state.tensor))]
        out = rule.terms[0].output
        term = Einsum(out, tuple(dict.fromkeys(read)))
        return Access((term,), (Einsum(out, term.operands),))

    def formula(self) -> None:
        return None

    def shown(self) -> None:
        return None

    def split(self, layout: Any, widths: Any, unit: str = "FLOPs", order: str = "written") -> Any:
        """Rows split along any letter but its time letter, which is refused."""
        from .split import along

        return along(self, self.time, "runs", layout, widths, unit)

    def patterns(self) -> tuple[PatternTerm, ...]:
        return ()

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        return recurrence_rules(self, number, tuple(targets))

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """``S - 1`` multiply-adds per row, elementwise (see the module doc)."""
        per = 1 if unit == "MACs" else 2
        return OpCost(sympy.Integer(0),
                      sympy.expand(per * _rows(self.dims(), self.out.indices, self.time)))

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """A loop over time in NumPy (float64)."""
        axis = self.out.indices.index(self.time)
        gate = _broadcast_numpy(np.asarray(values[self.gate.tensor]), self.gate, self.out, extents)
        drive = np.asarray(values[self.drive.tensor], dtype=float)
        return {self.output: scan_numpy(gate, drive, axis, "forward")}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """A loop over time with PyTorch's own multiply and add, for the verifier."""
        axis = self.out.indices.index(self.time)
        drive = values[self.drive.tensor]
        gate = values[self.gate.tensor]
        letters = [i for i in self.out.indices if i in self.gate.indices]
        gate = gate.permute([self.gate.indices.index(i) for i in letters])
        gate = gate.reshape([drive.shape[k] if i in self.gate.indices else 1
                             for k, i in enumerate(self.out.indices)])
        state = torch.zeros_like(drive.select(axis, 0))
        steps = []
        for s in range(drive.shape[axis]):
            g = gate.select(axis, s) if self.time in self.gate.indices else gate.select(axis, 0)
            state = g * state + drive.select(axis, s)
            steps.append(state)
        return {self.output: torch.stack(steps, dim=axis)}

    def latex(self, m: Any) -> str:
        """``H_{bsd} = A_{d} H_{b,s-1,d} + X_{bsd}``."""
        shifted = ",".join(f"{i}-1" if i == self.time else i for i in self.out.indices)
        name = m.t(self.output)
        name = f"({name})" if "_" in name else name  # a name with its own subscript
        return (f"{m.ix(self.out)} = {m.ix(self.gate)}\\, {name}_{{{shifted}}} + "
                f"{m.ix(self.drive)}")


def _broadcast_numpy(gate: np.ndarray, factor: Factor, out: Factor,
                     extents: Mapping[str, int]) -> np.ndarray:
    """The gate over the output's letters (broadcast along the ones it lacks)."""
    return run_einsum(Einsum(out, (factor,)), {factor.tensor: gate}, extents)


def scan_numpy(gate: np.ndarray, drive: np.ndarray, axis: int, direction: Direction) -> np.ndarray:
    """``h[s] = gate[s] h[s-1] + drive[s]`` along ``axis`` (``h[-1] = 0``); in
    reverse, ``g[s] = drive[s] + gate[s+1] g[s+1]`` (``g[S] = 0``): the
    backward pass multiplies by the gate of the step it came from."""
    gate, drive = np.moveaxis(np.asarray(gate, float), axis, 0), np.moveaxis(drive, axis, 0)
    out = np.zeros_like(drive)
    steps = range(len(drive)) if direction == "forward" else range(len(drive) - 1, -1, -1)
    state = np.zeros_like(drive[0])
    for s in steps:
        if direction == "forward":
            state = gate[s] * state + drive[s]
        else:
            state = drive[s] + (gate[s + 1] * state if s + 1 < len(drive) else 0)
        out[s] = state
    return np.moveaxis(out, 0, axis)


# ---------------------------------------------------------------- rules --

@dataclass(frozen=True)
class Scan:
    """How a :class:`ScanRule` uses the reverse recurrence
    ``G_H[..s..] = dH[..s..] + gate[..s+1..] G_H[..s+1..]``: ``product`` is the
    rule's einsum over ``G_H`` and ``H_prev`` (None: the rule is ``G_H``
    itself), ``counted`` whether this rule's cost includes the recurrence
    (it is counted once per op)."""

    state: Factor
    gate: Factor
    time: str
    product: Einsum | None
    counted: bool


@dataclass(frozen=True)
class ScanRule(Rule):
    """A rule that runs the reverse recurrence first: it evaluates itself
    (:meth:`evaluate`) and counts itself (:meth:`own_cost`), which the
    evaluators and the cost model ask of a rule that has these methods.
    ``terms`` are its einsum over ``G_H`` and the previous state, as a sheet
    prints them."""

    scan: Scan | None = None

    @property
    def reads(self) -> tuple[str, ...]:
        """The gate (for the recurrence), and the state when the product reads it."""
        assert self.scan is not None
        names = [self.scan.gate.tensor]
        if self.scan.product is not None:
            names.append(self.scan.state.tensor)
        return tuple(dict.fromkeys(names))

    @property
    def statement(self) -> str:
        assert self.scan is not None
        s, state = self.scan, self.scan.state.tensor
        out = self.terms[0].output
        where = f" where {scan_text(s.state, s.gate, s.time)}"
        if s.product is None:
            return f"{out} = {Factor(total_name(state), s.state.indices)}{where}"
        rhs = Rule.statement.fget(self).split(" = ", 1)[1]  # type: ignore[attr-defined]
        prev = Factor(prev_name(state), s.state.indices)
        rhs = rhs.replace(str(prev), at_time(s.state, s.time, s.time + "-1"))
        return f"{out} = {rhs}{where}"

    def evaluate(self, env: Mapping[str, np.ndarray], extents: Mapping[str, int],
                 dims: Mapping[str, int] | None = None) -> np.ndarray:
        """The reverse recurrence over ``env``'s upstream gradient, then the product."""
        s = self.scan
        assert s is not None
        state = s.state
        axis = state.indices.index(s.time)
        gate = _broadcast_numpy(np.asarray(env[s.gate.tensor]), s.gate, state, extents)
        total = scan_numpy(gate, np.asarray(env[grad_name(state.tensor)], float), axis, "reverse")
        if s.product is None:
            return total
        h = np.moveaxis(np.asarray(env[state.tensor], float), axis, 0)
        prev = np.moveaxis(np.concatenate([np.zeros_like(h[:1]), h[:-1]]), 0, axis)
        values = {total_name(state.tensor): total, prev_name(state.tensor): prev}
        return run_einsum(s.product, values, extents, dims)

    def own_cost(self, unit: Unit) -> OpCost:
        """The recurrence when this rule counts it, plus the product over
        ``S - 1`` steps (the first reads the zero state)."""
        s = self.scan
        assert s is not None
        dims = self.dims()
        per = 1 if unit == "MACs" else 2
        work = per * _rows(dims, s.state.indices, s.time) if s.counted else sympy.Integer(0)
        if s.product is not None:
            letters = s.product.indices
            summed = bool(s.product.summed)
            work += (per if summed else 1) * _rows(dims, letters, s.time)
        return OpCost(sympy.Integer(0), sympy.expand(work))


def scan_text(state: Factor, gate: Factor, time: str) -> str:
    """The reverse-time recurrence: ``G_H[b,s,d] = dH[b,s,d] + A[d] G_H[b,s+1,d]``."""
    g = Factor(total_name(state.tensor), state.indices)
    later = time + "+1"
    return (f"{g} = {Factor(grad_name(state.tensor), state.indices)} + "
            f"{at_time(gate, time, later)} {at_time(g, time, later)}")


def _scan_steps(op: Recurrence) -> tuple[Step, ...]:
    """The two steps the shift adds to the einsum derivation, as records."""
    out, time, prev = op.out, op.time, op.previous
    g = total_name(op.output)
    end = at_time(Factor(g, out.indices), time, str(op.dims()[time]))
    return (
        Step("shift", Factor(g, out.indices), (), (
            f"{prev} = {at_time(out, time, time + '-1')} and {at_time(out, time, '-1')} = 0: "
            f"d{at_time(prev, time, time + '+1')} flows to {out}, so the total gradient of "
            f"{op.output} is the reverse-time recurrence {scan_text(out, op.gate, time)}, "
            f"{end} = 0")),
        Step("substitute", Factor(g, out.indices), (),
             f"{g} replaces d{op.output} in the rules of the other operands"),
    )


def recurrence_rules(op: Recurrence, number: int, targets: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules of ``targets``: each the einsum machinery's rule of the
    unrolled statement with ``G_H`` for ``dH`` and ``H_prev`` for the shifted
    state, run after the reverse recurrence (counted in the first rule only)."""
    unrolled = op.unrolled()
    previous = op.previous.tensor
    # The machinery's rule for the previous state, dH_prev = gate dH: the
    # recurrence's step, checked here so that a change in the machinery cannot
    # silently change the recurrence the evaluator runs.
    step = op.previous_rule(number)
    want = Einsum(Factor(grad_name(previous), op.out.indices),
                  (op.gate, Factor(grad_name(op.output), op.out.indices)))
    if len(step.terms) != 1 or sorted(map(str, step.terms[0].operands)) != \
            sorted(map(str, want.operands)):
        raise AssertionError(f"unexpected rule for the previous state: {step.statement}")
    g = Factor(total_name(op.output), op.out.indices)
    rename = {grad_name(op.output): g.tensor}
    rules: list[Rule] = []
    # The drive first: its rule is the recurrence itself; the gate's reads it.
    order = sorted(targets, key=lambda n: n != op.drive.tensor)
    for name in order:
        for r in contraction_rules(unrolled, number, name):
            (term,) = r.terms
            operands = tuple(dataclasses.replace(f, tensor=rename.get(f.tensor, f.tensor))
                             for f in term.operands)
            product = dataclasses.replace(term, operands=operands)
            plain = product.operands == (g,) and product.coefficient == 1 \
                and product.output.indices == g.indices
            scan = Scan(op.out, op.gate, op.time, None if plain else product, not rules)
            rules.append(ScanRule(r.wrt, number, (product,), r.index_dims,
                                  (*r.steps, *_scan_steps(op)), False, scan))
    return tuple(rules)


# ------------------------------------------------------------ parallel scan --

@dataclass(frozen=True)
class ParallelScan:
    """The same recurrence as a work-efficient parallel scan (Brent-Kung, the
    up- and down-sweep of Blelloch's scan), for ``S`` a power of two: the
    pairs ``(a, x)`` are combined by ``(a1, x1) o (a2, x2) = (a1 a2, a2 x1 + x2)``,
    one multiply of gates and one multiply-add of states, 3 FLOPs.  ``combines``
    per row, ``flops`` for the whole layer, ``depth`` in combine steps."""

    combines: sympy.Expr
    flops: sympy.Expr
    depth: sympy.Expr


def parallel_scan(op: Recurrence, unit: Unit = "FLOPs") -> ParallelScan:
    """The parallel-scan convention, stated beside the sequential count:
    ``2S - 2 - log2 S`` combines per row (``S - 1`` up, ``S - 1 - log2 S``
    down), depth ``2 log2 S - 1``."""
    dims = op.dims()
    S = dims[op.time]
    log = sympy.log(S, 2)
    combines = 2 * S - 2 - log
    per = 2 if unit == "MACs" else 3  # a multiply of gates, and a multiply-add
    rows = sympy.Mul(*(dims[i] for i in op.out.indices if i != op.time))
    return ParallelScan(combines, sympy.expand(per * combines * rows), 2 * log - 1)
