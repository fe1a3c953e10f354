"""Bytes and times of the collectives, on an accelerator's links.

**Bytes.** A collective's array holds ``V`` elements on one device once its
split over the collective's axes is undone (an AllGather's result, a
reduction's input); times the precision policy's bytes per element of what
it moves (activations, weights, gradients, masks), that is its ``V`` in
bytes, a polynomial in the dims and the mesh's sizes.

**Time**, bandwidth-bound, with ``W`` the rate one device sends at in a ring
along the axis (:attr:`symflops.core.hardware.Link.ring`), in the forms of
"How to Scale Your Model" (jax-ml/scaling-book at 0819a7d, ch. 3):
AllGather and ReduceScatter ``V / W``, AllReduce ``2 V / W`` (a
ReduceScatter then an AllGather), AllToAll ``V / (4 W)`` (a bidirectional
ring; the book: "AllGather / 4").  An exact ring sends ``(n - 1)/n`` of this
over an axis of ``n`` devices; the factor is left out, as the book leaves it
out in the bandwidth-bound limit (it overstates by ``n/(n-1)``: 14% at
``n = 8``, twice at ``n = 2``), and so is the latency of each hop (about a
microsecond: what bounds small collectives).  A collective over several axes
at once goes at the slowest of their links.  A pipeline's sends between
stages are point to point: ``V / W`` each.

**Links.** The mesh's axes are laid out innermost first: an axis whose
devices, with those of the axes inside it, fit in one scale-up domain
(:attr:`~symflops.core.hardware.Link.domain`: 8 GPUs behind an NVLink switch,
a TPU pod) runs over the scale-up link, any other over the scale-out network
(one NIC per GPU).  With symbolic sizes every axis is taken to fit.

**Step time.** Without overlap, a step is its compute, its bubble and every
collective one after another; with overlap, every collective hides behind the
compute (the step is the larger of the two, plus the bubble): an upper bound
on what overlapping buys, since a tensor-parallel collective sits on the
critical path between two products.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.hardware import Accelerator
from ..core.sharding import Collective, Need
from ..count.precision import Precision

#: Time of each collective, in units of V / W.
FACTOR: dict[Collective, sympy.Rational] = {
    "AllGather": sympy.Integer(1), "ReduceScatter": sympy.Integer(1),
    "AllReduce": sympy.Integer(2), "AllToAll": sympy.Rational(1, 4)}
FORMS = {"AllGather": "V/W", "ReduceScatter": "V/W", "AllReduce": "2V/W", "AllToAll": "V/(4W)",
         "SendRecv": "V/W"}
CONVENTION = ("bandwidth-bound ring times (How to Scale Your Model, ch. 3): AllGather and "
              "ReduceScatter V/W, AllReduce 2V/W, AllToAll V/(4W), V the bytes of the whole "
              "array on one device, W the rate one device sends at along the axis; the exact "
              "ring's (n-1)/n and each hop's latency left out")


def width(need: Need, precision: Precision) -> int:
    return {"activations": precision.activations, "params": precision.params,
            "grads": precision.grads, "masks": precision.masks}[need.width]


def need_bytes(need: Need, precision: Precision) -> sympy.Expr:
    return sympy.expand(need.elements * width(need, precision))


def bandwidth_symbol(axis: str) -> sympy.Symbol:
    return sympy.Symbol(f"W_{axis}", positive=True)


@dataclass(frozen=True)
class AxisLink:
    """The link an axis runs over on an accelerator."""

    axis: str
    name: str          # "NVLink 4 (NVSwitch)", ...
    rate: sympy.Expr   # bytes/s one device sends in a ring along it
    scale: str         # "scale-up" or "scale-out"
    note: str = ""


def links(axes: tuple[tuple[str, sympy.Expr], ...], accelerator: Accelerator | None,
          pp: sympy.Expr | None = None) -> dict[str, AxisLink]:
    """Each axis's link on ``accelerator`` (innermost first; the pipeline's
    axis ``pp`` outermost); an axis with no link known is left out."""
    out: dict[str, AxisLink] = {}
    if accelerator is None:
        return out
    inner = sympy.Integer(1)
    order = list(axes) + ([("pp", pp)] if pp is not None and pp != 1 else [])
    for name, size in order:
        inner = inner * size
        up, down = accelerator.scale_up, accelerator.scale_out
        fits = up is not None and (up.domain is None or not inner.is_number
                                   or inner <= up.domain)
        note = "" if inner.is_number else "taken to fit in one scale-up domain"
        if fits:
            out[name] = AxisLink(name, up.name, sympy.Rational(up.ring), "scale-up", note)
        elif down is not None:
            out[name] = AxisLink(name, down.name, sympy.Rational(down.ring), "scale-out")
    return out


def need_time(need: Need, precision: Precision, rates: dict[str, sympy.Expr]) -> sympy.Expr:
    """Its time in seconds at ``rates`` (bytes/s per axis; symbols when unknown)."""
    rate = None
    for a in need.axes:
        w = rates.get(a, bandwidth_symbol(a))
        rate = w if rate is None else sympy.Min(rate, w)
    return FACTOR[need.kind] * need_bytes(need, precision) / rate
