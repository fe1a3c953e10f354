"""One step of a loop (:mod:`.loop`): how many of its steps a product runs,
the additions joining contributions that run at different steps, and an
einsum taken at one step (the loop letter left out), with the arrays it
reads there.  Shared by the op (:mod:`.loop`) and its rules
(:mod:`.loop_rules`), which import this module and not each other's."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, Sequence

import sympy

from ..core.ir import Einsum, Factor


class LoopOp(Protocol):
    """What the rules (:mod:`.loop_rules`) read of a :class:`~.loop.Loop`:
    its statements and their outputs, its state, output and loop letter."""

    statements: tuple[Any, ...]       # Contraction, one per statement
    state: str
    time: str

    @property
    def output(self) -> str: ...
    @property
    def outs(self) -> tuple[Factor, ...]: ...
    @property
    def written(self) -> frozenset[str]: ...
    @property
    def previous_name(self) -> str: ...
    @property
    def steps(self) -> sympy.Expr: ...
    def dims(self) -> dict[str, sympy.Expr]: ...
    def shifted(self, text: str) -> str: ...


def steps_run(total: sympy.Expr, first: bool, last: bool) -> sympy.Expr:
    """How many of ``total`` steps a product runs at when it skips the first
    step (``first``), the last (``last``), or both (never negative)."""
    if first and last:
        return sympy.Max(total - 2, 0)
    return total - 1 if first or last else total


def joined(runs: Sequence[tuple[bool, bool]], total: sympy.Expr) -> sympy.Expr:
    """The additions per element joining contributions that each run at every
    step but the first and/or the last (``runs``): the sum of their steps less
    the steps where one runs at least (at each step, one fewer than run)."""
    if len(runs) < 2:
        return sympy.Integer(0)
    every = sum((steps_run(total, a, b) for a, b in runs), sympy.Integer(0))
    return every - steps_run(total, all(a for a, _ in runs), all(b for _, b in runs))


def at_step(f: Factor, time: str) -> Factor:
    """A factor with the loop letter left out (one step of it)."""
    return dataclasses.replace(f, indices=tuple(i for i in f.indices if i != time))


def step_einsum(e: Einsum, time: str, tag: str = ""
                ) -> tuple[Einsum, dict[str, tuple[str, int | None]]]:
    """``e`` at one step: each factor renamed (``\\0`` ``tag`` ``k``) and without the loop
    letter, with where its array comes from (the tensor and the axis of the
    loop letter, None for a tensor without it)."""
    source: dict[str, tuple[str, int | None]] = {}
    operands = []
    for k, f in enumerate(e.operands):
        if f.is_indicator:  # a where-clause on letters of one step
            operands.append(f)
            continue
        name = f"\0{tag}{k}"
        source[name] = (f.tensor, f.indices.index(time) if time in f.indices else None)
        operands.append(dataclasses.replace(at_step(f, time), tensor=name))
    return Einsum(at_step(e.output, time), tuple(operands), e.coefficient), source


def step_values(source: Mapping[str, tuple[str, int | None]], values: Mapping[str, Any],
                c: int, take: Any) -> dict[str, Any]:
    """The arrays of a step einsum's factors at step ``c`` (``take(array, c, axis)``)."""
    return {name: values[t] if axis is None else take(values[t], c, axis)
            for name, (t, axis) in source.items()}
