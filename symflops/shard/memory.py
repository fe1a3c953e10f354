"""One device's FLOPs and memory, as polynomials in the dims and the mesh's sizes.

Nothing is divided by hand: each tensor's elements are divided by the sizes
of the mesh axes its placement splits it over (a norm's gain that no
strategy splits stays whole on every device), then multiplied by the
precision policy's bytes per element:

* weights by their placement (ZeRO-3: flat shards over the data axes);
* gradients by their storage (ZeRO-2 and 3: the optimizer's shards);
* optimizer states and master weights by the optimizer's shards (ZeRO-1 on);
* saved activations (those the recomputation policy keeps) by their
  placement, times the micro-batches in flight on the stage (:mod:`.pipeline`);
* buffers whole on every device.

With pipeline stages, a block's tensors count on a stage for the part of
the block's copies the stage holds, the other ops' on the first or the last
stage (a parameter on every stage an op reading it runs on: a tied
embedding on both).  Work and memory are given for the first and the last
stage; the other stages hold no more layers than the first.  FLOPs are one
micro-batch's, forward, backward and recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.records import Derivation
from ..count.cost import Costs
from ..count.precision import Precision
from ..count.recompute import recompute as recompute_policy
from .analysis import Analysis, _where
from .pipeline import Stage, share as _share, stages


@dataclass(frozen=True)
class StageCounts:
    """One device of a stage: FLOPs per micro-batch and memory in bytes."""

    stage: Stage
    flops_forward: sympy.Expr
    flops_backward: sympy.Expr
    flops_recompute: sympy.Expr
    elementwise: sympy.Expr            # forward, backward and recomputed elementwise FLOPs
    weights: sympy.Expr
    grads: sympy.Expr
    optimizer: sympy.Expr
    master: sympy.Expr
    activations: sympy.Expr            # kept activations of the micro-batches in flight
    buffers: sympy.Expr

    @property
    def flops(self) -> sympy.Expr:
        return sympy.expand(self.flops_forward + self.flops_backward + self.flops_recompute)

    @property
    def states(self) -> sympy.Expr:
        return sympy.expand(self.weights + self.grads + self.optimizer + self.master)

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.states + self.activations + self.buffers)


def counts(derivation: Derivation, costs: Costs, analysis: Analysis,
           precision: Precision, values=None) -> tuple[StageCounts, ...]:
    layer = derivation.layer
    sharding = analysis.sharding
    sizes = sharding.layout.size_map
    out = []
    kept = recompute_policy(derivation, costs, analysis.recompute).kept
    readers: dict[str, set[tuple[str, str]]] = {}
    for op in layer.ops:
        where, block = _where(layer, op.output)
        for name in op.inputs:
            readers.setdefault(name, set()).add((where, block))
    for stage in stages(layer, sharding.pipeline, values):
        flops = {"forward": sympy.Integer(0), "backward": sympy.Integer(0),
                 "recompute": sympy.Integer(0)}
        elementwise = sympy.Integer(0)
        for item in analysis.items:
            share = _share(layer, stage, item.output, item.where, item.block)
            if share == 0:
                continue
            flops[item.phase] += item.split.flops * item.copies * share
            elementwise += item.split.elementwise * item.copies * share
        weights = grads = optimizer = master = buffers = sympy.Integer(0)
        for t in layer.params + layer.buffers:
            spots = readers.get(t.name, set())
            held = [s for s in (_share(layer, stage, t.name, w, b) for w, b in spots) if s != 0]
            if not held:
                continue
            where, block = _where(layer, t.name)
            shared = bool(layer.sharing(t.name))
            share = sympy.Integer(1) if shared or where != "blocks" else \
                _share(layer, stage, t.name, where, block)
            n = t.elements * layer.copies(t.name) * share
            if t.is_buffer:
                buffers += n * precision.params
                continue
            p = sharding.layout.placement(t.name)
            weights += n / p.divisor(sizes) * precision.params
            if t.requires_grad:
                g, s = sharding.grad(t.name), sharding.state(t.name)
                grads += n / g.divisor(sizes) * precision.grads
                optimizer += (n / s.divisor(sizes) * precision.optimizer_states
                              * precision.optimizer)
                master += n / s.divisor(sizes) * precision.master
        activations = sympy.Integer(0)
        for saved in kept:
            where, block = _where(layer, saved.name)
            share = _share(layer, stage, saved.name, where, block)
            if share == 0:
                continue
            p = sharding.layout.placement(saved.name)
            div = p.divisor(sizes) if p is not None else sympy.Integer(1)
            width = precision.masks if saved.mask else precision.activations
            activations += saved.elements * saved.copies * share / div * width
        out.append(StageCounts(stage, sympy.expand(flops["forward"]),
                               sympy.expand(flops["backward"]), sympy.expand(flops["recompute"]),
                               sympy.expand(elementwise), sympy.expand(weights),
                               sympy.expand(grads), sympy.expand(optimizer),
                               sympy.expand(master),
                               sympy.expand(activations * stage.in_flight),
                               sympy.expand(buffers)))
    return tuple(out)
