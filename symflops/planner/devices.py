"""A training step on many devices: ``plan --dp --tp --pp --cp --ep --sp
--micro-batches --interleave`` for a declaration (or a Hugging Face config).

Every figure comes out of :mod:`symflops.shard`, evaluated at the plan's
numbers: the declaration's dims, the sequence length ``S``, and ``B`` set to
the micro-batch of every data-parallel replica together (``--micro-batch``
sequences per replica times ``dp``: the placements split it back), so that
each device holds one micro-batch of its own.  A step runs ``m``
micro-batches (``--micro-batches``, or ``--batch`` sequences per step over
``dp`` replicas of ``--micro-batch`` each):

* compute: the busiest stage's FLOPs of one micro-batch (matrix products,
  recomputation included; elementwise work left out, as MFU leaves it out)
  times ``m``, at the useful rate of a device (peak x MFU, or
  ``--sustained``; the peak when neither is given, said so);
* bubble: the pipeline's ``(p - 1)/(v m)`` of that compute;
* communication: every collective of a micro-batch times ``m``, those of a
  step (a weight gradient's reduction after accumulation, ZeRO's gather of
  updated weights) once, and the pipeline's sends (``2 m v`` boundary
  tensors), each at its axis's link (:mod:`symflops.shard.timing`);
* step time without overlap: compute + bubble + communication; with
  overlap: the larger of compute and communication, plus the bubble.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from ..core.errors import SymflopsError
from ..core.hardware import Accelerator
from ..core.sharding import Parallel
from ..count.precision import Precision
from ..shard.report import Report, StageRow, evaluate, report
from ..shard.spec import check_divides
from ..shard.stage import sharding as make_sharding
from .records import Model

#: The command line's strategy options, as ``parallel:`` names them.
OPTIONS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "micro_batches", "interleave", "schedule")


@dataclass(frozen=True)
class Devices:
    degrees: tuple[tuple[str, int], ...]    # dp, tp, pp, cp, ep
    devices: int
    micro_batch: int                        # sequences per micro-batch, per replica
    micro_batches: int                      # per optimizer step
    report: Report                          # evaluated at the plan's numbers
    busiest: StageRow                       # the stage with the most memory
    rate: float | None                      # useful FLOP/s of one device assumed for compute
    rate_note: str
    stages: tuple["StageTime", ...]
    slowest: "StageTime"                    # the stage whose step is longest: the step
    capacity: int | None

    @property
    def batch(self) -> int:
        return dict(self.degrees)["dp"] * self.micro_batch * self.micro_batches

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.busiest.total <= self.capacity


@dataclass(frozen=True)
class StageTime:
    """One stage's step: compute, bubble and communication, in seconds."""

    name: str
    compute: float | None
    bubble: float | None
    comm: tuple[tuple[str, float | None], ...]   # by axis (pp: the sends between stages)

    @property
    def comm_total(self) -> float | None:
        if any(t is None for _, t in self.comm):
            return None
        return sum(t for _, t in self.comm)

    @property
    def step_serial(self) -> float | None:
        if self.compute is None or self.comm_total is None:
            return None
        return self.compute + (self.bubble or 0) + self.comm_total

    @property
    def step_overlap(self) -> float | None:
        if self.compute is None or self.comm_total is None:
            return None
        return max(self.compute, self.comm_total) + (self.bubble or 0)


def _whole(value: Any) -> int:
    return int(value) if value is not None else 1


def devices(model: Model, precision: Precision, options: dict[str, Any], seq_len: int | None,
            micro_batch: int, accelerators: int | None, batch: int | None,
            accelerator: Accelerator | None, rate: Fraction | None, rate_note: str) -> Devices:
    if model.engine is None:
        raise SymflopsError("--tp, --pp, --cp, --ep, --sp, --micro-batches and --interleave need "
                            "a declaration (or --hf-config): a bare parameter count has no "
                            "tensors to split", hint="give the model as a declaration or a config")
    layer, derivation, costs, fixed = model.engine
    if seq_len is None:
        raise SymflopsError("the many-devices plan needs a sequence length",
                            hint="give --seq T (or --phase TOKENS@T)")
    deg = {k: _whole(options.get(k)) for k in ("dp", "tp", "pp", "cp", "ep")}
    others = deg["tp"] * deg["pp"] * deg["cp"]
    if options.get("dp") is None:
        if accelerators is None:
            deg["dp"] = max(deg["ep"], 1)
        elif accelerators % others:
            raise SymflopsError(f"-n {accelerators} is not a multiple of tp x pp x cp = {others}",
                                hint="give -n a multiple of the model-parallel degrees")
        else:
            deg["dp"] = accelerators // others
    n = deg["dp"] * others
    if accelerators is not None and accelerators != n:
        raise SymflopsError(f"-n {accelerators} is not dp x tp x pp x cp = {deg['dp']} x "
                            f"{deg['tp']} x {deg['pp']} x {deg['cp']} = {n}",
                            hint="give -n as the product of the degrees, or leave it out")
    m = options.get("micro_batches")
    if m is None and batch is not None:
        if batch % (deg["dp"] * micro_batch):
            raise SymflopsError(f"--batch {batch} sequences is not a whole number of micro-batches "
                                f"of {micro_batch} on each of {deg['dp']} data-parallel replicas",
                                hint="give --batch a multiple of dp x --micro-batch, or "
                                     "--micro-batches")
        m = batch // (deg["dp"] * micro_batch)
    m = _whole(m)
    strategies = [(k, sympy.Integer(v)) for k, v in deg.items() if v != 1 or k == "dp"]
    strategies = [(k, v) for k, v in strategies if not (k == "dp" and v == 1)]
    if options.get("sp"):
        strategies.append(("sp", True))
    if options.get("zero"):
        strategies.append(("zero", int(options["zero"])))
    if m != 1:
        strategies.append(("micro_batches", sympy.Integer(m)))
    if options.get("interleave") is not None and int(options["interleave"]) != 1:
        strategies.append(("interleave", sympy.Integer(int(options["interleave"]))))
    if options.get("schedule"):
        strategies.append(("schedule", options["schedule"]))
    parallel = Parallel(tuple(strategies), origin="the command line")
    values = {**{k: sympy.Rational(v) for k, v in fixed.items()},
              "S": sympy.Integer(seq_len), "B": sympy.Integer(micro_batch * deg["dp"])}
    rep = report(derivation, costs, parallel, precision, model.recompute, accelerator, (),
                 values)
    check_divides(layer, make_sharding(layer, parallel), values)
    ev: Report = evaluate(rep, values)
    busiest = max(ev.stages, key=lambda s: s.total)
    per_device = None if rate is None else float(rate)
    link = _pp_rate(accelerator, ev, deg) if ev.pipeline is not None and deg["pp"] > 1 else None
    timed = []
    for st in ev.stages:
        flops = st.flops_forward + st.flops_backward + st.flops_recompute
        compute = None if per_device is None else m * flops / per_device
        bubble = None
        if ev.pipeline is not None and compute is not None:
            bubble = float(ev.pipeline.of_ideal) * compute
        comm: list[tuple[str, float | None]] = []
        for a in ev.by_axis:
            if a.stage != st.name:
                continue
            times = (a.time_forward, a.time_backward, a.time_step)
            if any(isinstance(t, sympy.Basic) for t in times):
                comm.append((a.axis, None))
            else:
                comm.append((a.axis, m * (a.time_forward + a.time_backward) + a.time_step))
        if ev.pipeline is not None and deg["pp"] > 1:
            sends = 2 * m * int(ev.pipeline.interleave) * ev.pipeline.send_bytes
            comm.append(("pp", None if link is None else sends / link))
        timed.append(StageTime(st.name, compute, bubble, tuple(comm)))
    slowest = max(timed, key=lambda t: t.step_serial if t.step_serial is not None else 0)
    capacity = accelerator.memory_bytes if accelerator is not None else None
    return Devices(tuple(deg.items()), n, micro_batch, m, ev, busiest, per_device, rate_note,
                   tuple(timed), slowest, capacity)


def _pp_rate(accelerator: Accelerator | None, ev: Report, deg: dict[str, int]) -> float | None:
    from ..shard.timing import links

    found = links(tuple((a, sympy.Integer(s)) for a, s, _ in ev.axes), accelerator,
                  sympy.Integer(deg["pp"]))
    link = found.get("pp")
    return None if link is None else float(link.rate)


# -- output ------------------------------------------------------------------------

def _bytes(x: float | int) -> str:
    return f"{x / 1e9:.4g} GB"


def _seconds(x: float | None) -> str:
    if x is None:
        return "unknown (no link or rate)"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if x >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.3g} s"


def lines(d: Devices) -> list[str]:
    """The text report's lines of the many-devices plan."""
    deg = dict(d.degrees)
    out = ["", "on many devices: " + " x ".join(f"{k} {v}" for k, v in d.degrees
                                                if v != 1 or k in ("dp", "tp", "pp"))
           + f" = {d.devices:,} devices"]
    out += [f"  {s}" for s in d.report.strategies]
    out.append(f"  step: {d.micro_batches} micro-batch(es) of {d.micro_batch} sequence(s) on each "
               f"of {deg['dp']} data-parallel replicas = {d.batch:,} sequences")
    b = d.busiest
    out.append(f"  memory per device ({b.name}): weights {_bytes(b.weights)}, gradients "
               f"{_bytes(b.grads)}, optimizer {_bytes(b.optimizer)}, master {_bytes(b.master)}, "
               f"activations {_bytes(b.activations)}, buffers {_bytes(b.buffers)}; total "
               f"{_bytes(b.total)}" + ("" if d.capacity is None else
                                       f" of {_bytes(d.capacity)} ({'fits' if d.fits else 'does NOT fit'})"))
    for s in d.report.stages:
        out.append(f"  FLOPs per device per micro-batch ({s.name}): forward "
                   f"{float(s.flops_forward):.4g}, backward {float(s.flops_backward):.4g}, "
                   f"recomputed {float(s.flops_recompute):.4g}")
    for a in d.report.by_axis:
        link = f" over {a.link}" if a.link else ""
        stage = f"{a.stage}, " if len(d.report.stages) > 1 else ""
        out.append(f"  {stage}{a.axis}{link}: {_bytes(a.forward)} forward + {_bytes(a.backward)} backward "
                   f"per micro-batch, {_bytes(a.step)} per step (Σ k·V per device)")
    if d.report.pipeline is not None:
        p = d.report.pipeline
        out.append(f"  pipeline {p.schedule}: bubble {float(p.of_ideal):.6g} of the compute "
                   f"((p-1)/(v m)), {float(p.of_step):.4g} of the step ((p-1)/(v m + p - 1)); "
                   f"{_bytes(p.send_bytes)} per boundary and micro-batch")
    for t in d.stages:
        out.append(f"  {t.name}: compute per step {_seconds(t.compute)} ({d.rate_note}); bubble "
                   f"{_seconds(t.bubble) if t.bubble is not None else '0'}; communication "
                   + ", ".join(f"{axis} {_seconds(x)}" for axis, x in t.comm))
    t = d.slowest
    out.append(f"  step time ({t.name}): {_seconds(t.step_serial)} without overlap, "
               f"{_seconds(t.step_overlap)} with every collective hidden behind compute")
    return out


def to_json(d: Devices) -> dict[str, Any]:
    from ..shard.report import to_json as report_json

    return {"degrees": dict(d.degrees), "devices": d.devices, "micro_batch": d.micro_batch,
            "micro_batches": d.micro_batches, "batch": d.batch,
            "memory": {"stage": d.busiest.name, "weights": d.busiest.weights,
                       "grads": d.busiest.grads, "optimizer": d.busiest.optimizer,
                       "master": d.busiest.master, "activations": d.busiest.activations,
                       "buffers": d.busiest.buffers, "total": d.busiest.total,
                       "capacity": d.capacity, "fits": d.fits},
            "time": {"rate": d.rate, "rate_note": d.rate_note,
                     "stages": [{"stage": t.name, "compute": t.compute, "bubble": t.bubble,
                                 "communication": dict(t.comm),
                                 "communication_total": t.comm_total,
                                 "step_serial": t.step_serial, "step_overlap": t.step_overlap}
                                for t in d.stages],
                     "step_serial": d.slowest.step_serial,
                     "step_overlap": d.slowest.step_overlap},
            "report": report_json(d.report)}
