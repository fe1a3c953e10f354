"""Every op and rule of a derived layer on the mesh: its share of the work and
the collectives it needs, gathered by pass.

The forward ops answer :meth:`symflops.ops.base.Op.split`; the backward rules
are sums of einsum products like any contraction's, so the same four cases
decide their collectives (:func:`symflops.ops.einsum.split.split_terms`),
each gradient placed as its tensor is (a parameter's as the reduction leaves
it: its optimizer's shards under ZeRO).  The adjoints come out of that: a
forward AllGather of an operand gives partial sums in the rule that sends its
gradient back, reduced by a ReduceScatter; a weight's gradient sums over the
batch letters, split over the data axes: an AllReduce (a ReduceScatter under
ZeRO).

Within one pass, a tensor gathered over the same axes by several ops is
gathered once (kept until its last use), and the partial sums several rules
add into one gradient are reduced once.  A parameter's gradient is reduced
once per optimizer step after the micro-batches' gradients are added (per
micro-batch under ZeRO-2 and 3, whose gradients live in shards); ZeRO-1 and
2 gather the updated parameters after the step.  Ops a recomputation policy
runs again repeat their forward collectives in the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy

from ..core.records import Derivation
from ..core.sharding import Need, NotSplittable, OpSplit, Width
from ..core.errors import SymflopsError
from ..count.cost import rule_copies
from ..count.recompute import recomputed_ops
from ..ops.einsum.split import split_terms, term_trees
from .presets import Sharding

Phase = Literal["forward", "backward", "recompute", "step"]
Per = Literal["micro-batch", "step"]
Where = Literal["first", "blocks", "last"]


@dataclass(frozen=True)
class Item:
    """One op or rule on one device."""

    phase: Phase
    text: str
    output: str
    copies: sympy.Expr     # runs per micro-batch (the copies of its blocks)
    where: Where           # before the repeated blocks, in them, or after (pipeline stages)
    block: str             # the outermost block it lies in ('' for none)
    split: OpSplit


@dataclass(frozen=True)
class Moved:
    """One collective as a step runs it."""

    phase: Phase
    op: str                # the statement of the op or rule that needs it
    need: Need
    copies: sympy.Expr
    per: Per
    where: Where
    block: str
    serves: tuple[str, ...] = ()   # the other ops it also serves (gathered or reduced once)


@dataclass(frozen=True)
class Analysis:
    sharding: Sharding
    items: tuple[Item, ...]
    moved: tuple[Moved, ...]
    recompute: str

    def flops(self, phase: Phase, bucket: str = "flops") -> sympy.Expr:
        return sympy.expand(sum((getattr(i.split, bucket) * i.copies for i in self.items
                                 if i.phase == phase), sympy.Integer(0)))


def widths(derivation: Derivation) -> dict[str, Width]:
    out: dict[str, Width] = {}
    for t in derivation.layer.tensors:
        if t.is_param:
            out[t.name] = "params"
            out["d" + t.name] = "grads"
        elif t.role == "mask":
            out[t.name] = "masks"
    return out


def _where(layer, name: str) -> tuple[Where, str]:
    """Whether a tensor (or the op writing it) lies in a repeated block, before
    the first block's ops or after them: the pipeline stage that holds it."""
    blocks = layer.blocks_of(name)
    if blocks:
        return "blocks", blocks[0].name
    first = next((k for k, op in enumerate(layer.ops) if layer.blocks_of(op.output)), None)
    index = next((k for k, op in enumerate(layer.ops)
                  if op.output == name or name in op.inputs), 0)
    return ("first" if first is not None and index < first else "last"), ""


def _split(op_or_rule, fn) -> OpSplit:
    try:
        return fn()
    except NotSplittable as exc:
        raise SymflopsError(str(exc), getattr(op_or_rule, "span", None),
                            "split other letters (a different strategy or placement)") from None


def analyse(derivation: Derivation, sharding: Sharding, recompute: str = "none",
            unit: str = "FLOPs") -> Analysis:
    layer = derivation.layer
    layout = sharding.layout
    w = widths(derivation)
    items: list[Item] = []
    for op in layer.ops:
        s = _split(op, lambda op=op: op.split(layout, w, unit, layer.forward_order))
        where, block = _where(layer, op.output)
        items.append(Item("forward", op.statement(), op.output, layer.copies(op.output), where,
                          block, s))
    runs = rule_copies(layer, derivation)
    for r, n in zip(derivation.rules, runs):
        op = layer.ops[r.op]
        extents = r.dims()

        def run(r=r, extents=extents) -> OpSplit:
            s = split_terms(r.terms, extents, layout, w, unit,
                            term_trees(r.terms, extents, unit, "cheapest"))
            own = getattr(r, "own_cost", None)
            if own is not None:  # a reverse-time scan counts itself
                p = layout.placement(r.grad)
                div = p.divisor(layout.size_map) if p is not None else sympy.Integer(1)
                cost = own(unit)
                s = OpSplit(sympy.expand(cost.flops / div), sympy.expand(cost.elementwise / div),
                            s.needs, s.split)
            return s
        s = _split(op, run)
        where, block = _where(layer, op.output)
        items.append(Item("backward", r.statement, r.grad, n, where, block, s))
    again = set(recomputed_ops(derivation, recompute))
    for item, op in zip(list(items[:len(layer.ops)]), layer.ops):
        if op.output in again:
            items.append(Item("recompute", item.text, item.output, item.copies, item.where,
                              item.block, item.split))
    return Analysis(sharding, tuple(items), _gather(layer, sharding, items), recompute)


def _gather(layer, sharding: Sharding, items: list[Item]) -> tuple[Moved, ...]:
    params = {t.name for t in layer.params}
    grads = {"d" + p for p in params}
    out: list[Moved] = []
    seen: dict[tuple, int] = {}
    names = {t.name for t in layer.tensors} | {"d" + t.name for t in layer.tensors}
    for item in items:
        for need in item.split.needs:
            per: Per = "micro-batch"
            if need.target in grads and sharding.zero <= 1:
                per = "step"
            key = None
            if need.kind == "AllGather" and need.array in names:
                key = (item.phase, "gather", need.array, need.axes, item.copies)
            elif need.kind in ("AllReduce", "ReduceScatter") and need.target in names \
                    and need.array == need.target:
                key = (item.phase, need.kind, need.target, need.axes, item.copies)
            if key is not None and key in seen:
                k = seen[key]
                m = out[k]
                out[k] = Moved(m.phase, m.op, m.need, m.copies, m.per, m.where, m.block,
                               m.serves + (item.text,))
                continue
            if key is not None:
                seen[key] = len(out)
            out.append(Moved(item.phase, item.text, need, item.copies, per, item.where,
                             item.block))
    for name, state in sharding.states:
        p = sharding.layout.placement(name)
        extra = tuple(a for a in state.flat if p is None or a not in p.used)
        if sharding.zero in (1, 2) and extra:
            t = layer.tensor(name)
            if not t.requires_grad:
                continue
            sizes = sharding.layout.size_map
            div = p.divisor(sizes) if p is not None else sympy.Integer(1)
            where, block = _where(layer, name)
            need = Need("AllGather", extra, name, (), sympy.expand(t.elements / div),
                        f"ZeRO-{sharding.zero}: each device updates its shard of {name}; the "
                        f"updated {name} is gathered whole", "params", name)
            out.append(Moved("step", f"optimizer step of {name}", need, layer.copies(name),
                             "step", where, block))
    return tuple(out)
