"""Pipeline parallelism: a repeated block's copies split into ``p`` stages.

**Stages.** The layers (the copies of the repeated blocks, in the order the
declaration includes them) are laid out one after another; with ``L``
layers, the first ``L mod p`` stages hold one more than the others
(``L // p``).  The ops before the first block (the embedding) run on the
first stage, the others (the final norm, the head, the loss) on the last.
With symbolic sizes each stage holds ``L / p`` layers of each block.  More
stages than layers is refused.

**Bubbles** (each stage idle while the pipeline fills and drains), as a
fraction of the ideal compute time of a step of ``m`` micro-batches:
``(p - 1) / m`` for GPipe and 1F1B alike, ``(p - 1) / (v m)`` for the
interleaved 1F1B schedule with ``v`` chunks per device (the Ultra-Scale
Playbook's r_bubble); as a fraction of the whole step, ``(p - 1) / (m + p - 1)``
and ``(p - 1) / (v m + p - 1)`` (GPipe's form).

**Micro-batches in flight** (whose activations a stage keeps): GPipe keeps
all ``m``; 1F1B keeps ``min(p - s, m)`` on stage ``s`` (Megatron-LM's
schedules.py warms up ``p - s - 1`` micro-batches, then holds one more), ``p``
on the first; the interleaved schedule warms up ``2(p - s - 1) + (v - 1) p``
chunks of ``L/(p v)`` layers and holds one more, so the first stage keeps
``p + (p - 1)/v`` micro-batches' worth of its layers: ``L (1 + (p - 1)/(p v))``
layers in all, Korthikanti et al.'s (2022) interleaved factor; the last stage
keeps ``((v - 1) p + 1) / v``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer
from .presets import Pipeline


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: the layers of each block it holds, whether it runs
    the ops before the blocks (``first``) and after them (``last``), and the
    micro-batches whose activations it keeps."""

    name: str
    layers: tuple[tuple[str, sympy.Expr], ...]
    first: bool
    last: bool
    in_flight: sympy.Expr

    def share(self, block: str, repeat: sympy.Expr) -> sympy.Expr:
        """The part of a block's copies this stage holds."""
        for name, n in self.layers:
            if name == block:
                return n / repeat
        return sympy.Integer(0)


def bubble(p: Pipeline) -> tuple[sympy.Expr, sympy.Expr]:
    """``(of the ideal compute time, of the step)``."""
    ideal = (p.stages - 1) / (p.interleave * p.micro_batches)
    step = (p.stages - 1) / (p.interleave * p.micro_batches + p.stages - 1)
    return sympy.simplify(ideal), sympy.simplify(step)


def repeated(layer: Layer) -> tuple[tuple[str, sympy.Expr], ...]:
    """The outermost repeated blocks, in the order their ops come, with their repeats."""
    out: dict[str, sympy.Expr] = {}
    for op in layer.ops:
        blocks = layer.blocks_of(op.output)
        if blocks and blocks[0].repeat != 1:
            out.setdefault(blocks[0].name, blocks[0].repeat)
    return tuple(out.items())


def in_flight(p: Pipeline, stage: int | str) -> sympy.Expr:
    """Micro-batches' worth of the stage's layers whose activations it keeps
    (``stage`` 0 is the first, ``"last"`` the last)."""
    s = p.stages - 1 if stage == "last" else sympy.Integer(stage)
    if p.schedule == "gpipe":
        return p.micro_batches
    if p.interleave != 1:
        chunks = 2 * (p.stages - s - 1) + (p.interleave - 1) * p.stages + 1
        return sympy.simplify(chunks / p.interleave)
    return sympy.Min(p.stages - s, p.micro_batches)


def stages(layer: Layer, p: Pipeline | None,
           values: dict[sympy.Symbol, sympy.Expr] | None = None) -> tuple[Stage, ...]:
    """The first and the last stage (one stage without a pipeline); at
    ``values`` (dims by symbol) the layers are laid out as whole numbers."""
    blocks = repeated(layer)
    if values:
        subs = layer.substitutions
        blocks = tuple((name, sympy.sympify(n).xreplace(subs).xreplace(values))
                       for name, n in blocks)
        if p is not None:
            p = Pipeline(*(sympy.sympify(x).xreplace(values) for x in
                           (p.stages, p.micro_batches, p.interleave)), p.schedule)
    if p is None or p.stages == 1:
        return (Stage("every device", blocks, True, True, sympy.Integer(1)),)
    if not blocks:
        raise SymflopsError(f"{layer.source}: pipeline parallelism splits a repeated block's "
                            "copies into stages, and the declaration repeats no block",
                            hint="include a block with 'repeat: L', or leave pp at 1")
    total = sympy.Add(*(n for _, n in blocks))
    numeric = all(n.is_Integer for _, n in blocks) and p.stages.is_Integer
    if not numeric:
        share = tuple((name, n / p.stages) for name, n in blocks)
        return (Stage("first stage", share, True, False, in_flight(p, 0)),
                Stage("last stage", share, False, True, in_flight(p, "last")))
    count, stages_ = int(total), int(p.stages)
    if stages_ > count:
        raise SymflopsError(f"{layer.source}: {stages_} pipeline stages for {count} layers",
                            hint=f"give at most {count} stages (--pp)")
    sizes = [count // stages_ + (1 if s < count % stages_ else 0) for s in range(stages_)]

    def held(s: int) -> tuple[tuple[str, sympy.Expr], ...]:
        start = sum(sizes[:s])
        stop = start + sizes[s]
        out, at = [], 0
        for name, n in blocks:
            lo, hi = max(start, at), min(stop, at + int(n))
            if hi > lo:
                out.append((name, sympy.Integer(hi - lo)))
            at += int(n)
        return tuple(out)

    return (Stage("first stage", held(0), True, False, in_flight(p, 0)),
            Stage("last stage", held(stages_ - 1), False, True, in_flight(p, "last")))


def share(layer: Layer, stage: Stage, name: str, where: str, block: str) -> sympy.Expr:
    """The part of a tensor's copies (or of an op's runs) that ``stage`` holds:
    a block's by the stage's layers of it, the other ops' on the first or the
    last stage (``where``: "blocks", "first" or "last")."""
    if where == "blocks":
        repeats = dict(repeated(layer))
        return stage.share(block, repeats[block]) if block in repeats else sympy.Integer(1)
    return sympy.Integer(1 if (stage.first if where == "first" else stage.last) else 0)
