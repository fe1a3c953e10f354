"""``symflops shard``: a declaration split over many devices (:mod:`symflops.shard`).

Wires declaration -> derive -> costs -> shard report -> text or JSON.  The
strategies come from the command line when it gives any, else from the
declaration's ``parallel:``.  Without values the figures are polynomials in
the dims and the mesh's sizes; with every dim (and every size given by name)
they are numbers.
"""

from __future__ import annotations

import argparse
import json
import sys

import sympy

from ..core.errors import SymflopsError, closest
from ..core.hardware import preset
from ..count.cost import costs
from ..count.evaluate import example_config, find_example, parse_configs
from ..count.precision import DEFAULT_POLICY, POLICIES
from ..declaration.reader import load
from ..derive.backward import derive
from ..shard.report import Report, evaluate, report, to_json
from ..shard.spec import check_divides, parallel_from_options
from ..shard.stage import sharding as make_sharding
from .shardargs import STRATEGIES

def _options(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {k: getattr(args, k) for k in STRATEGIES}
    out.update(sp=args.sp, zero=args.zero, schedule=args.schedule)
    return out


def _values(args: argparse.Namespace, layer, symbols: set[str]) -> dict[str, sympy.Expr]:
    if args.example is not None:
        if args.values:
            raise SymflopsError(f"--example {args.example!r} and values are both given",
                                hint="give either --example NAME (with degree names if any) "
                                     "or every value")
        values = dict(example_config(find_example(layer, args.example)))
        return values
    values = parse_configs(args.values)
    dims = {d.name for d in layer.free_dims}
    for name in values:
        if name not in dims and name not in symbols:
            raise SymflopsError(f"{name} is neither a dim of {layer.name} nor a size of the mesh",
                                hint=closest(name, sorted(dims | symbols)))
    return values


def run(args: argparse.Namespace) -> int:
    layer = load(args.file)
    parallel = parallel_from_options(layer, _options(args), True, args.mesh, tuple(args.place))
    if parallel is None:
        parallel = layer.parallel
    if parallel is None:
        raise SymflopsError(f"{args.file}: no strategies given, and the declaration names none",
                            hint="give e.g. --dp 8 --tp 4, or --mesh X --place B=X, or add "
                                 "'parallel: {...}' to the declaration")
    accelerator = preset(args.accelerator) if args.accelerator else None
    compare = tuple(preset(n) for n in args.compare)
    precision = POLICIES[args.precision or layer.precision or DEFAULT_POLICY]
    recompute = args.recompute or layer.recompute
    d = derive(layer)
    c = costs(d, precision=precision, choice="minimum")
    plan = make_sharding(layer, parallel)
    symbols = {str(s) for _, size, _ in plan.axes for s in sympy.sympify(size).free_symbols}
    if plan.pipeline is not None:
        p = plan.pipeline
        symbols |= {str(s) for x in (p.stages, p.micro_batches, p.interleave)
                    for s in sympy.sympify(x).free_symbols}
    values = _values(args, layer, symbols) if (args.values or args.example) else {}
    r = report(d, c, parallel, precision, recompute, accelerator, compare, values)
    at = None
    if values:
        missing = [d.name for d in layer.free_dims if d.name not in values] + \
            sorted(s for s in symbols if s not in values)
        if missing and not args.example:
            raise SymflopsError(f"no value for {', '.join(missing)}",
                                hint="give every dim (and each degree given by name) a value, "
                                     "or none for polynomials")
        check_divides(layer, plan, values)
        r = evaluate(r, values)
        at = {k: int(v) if getattr(v, "is_Integer", False) else v for k, v in values.items()}
    if args.json:
        data = to_json(r)
        if at is not None:
            data["at"] = {k: int(v) for k, v in at.items()}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(text(r))
    return 0


def _show(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, int):
        return f"{x:,}"
    return sympy.sstr(x) if isinstance(x, sympy.Basic) else str(x)


def _time(x: object) -> str:
    if isinstance(x, (int, float)):
        if x == 0:
            return "0 s"
        for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
            if abs(x) >= scale:
                return f"{x / scale:.4g} {unit}"
        return f"{x:.3g} s"
    return _show(x) + " s"


def text(r: Report) -> str:
    lines = [f"{r.name} on many devices (precision {r.precision}, recompute {r.recompute})"]
    lines.append("mesh: " + ", ".join(f"{a} = {_show(s)} ({w})" for a, s, w in r.axes))
    for s in r.strategies:
        lines.append(f"  {s}")
    if r.placements:
        lines.append("placements: " + "; ".join(t for _, t in r.placements))
    for s in r.stages:
        lines.append("")
        held = ", ".join(f"{_show(n)} of {b}" for b, n in s.layers)
        lines.append(f"per device, {s.name}" + (f" ({held})" if held else "")
                     + f"; one micro-batch")
        for label, value in (("FLOPs forward", s.flops_forward),
                             ("FLOPs backward", s.flops_backward),
                             ("FLOPs recomputed", s.flops_recompute),
                             ("FLOPs elementwise", s.flops_elementwise),
                             ("weights (bytes)", s.weights), ("gradients (bytes)", s.grads),
                             ("optimizer (bytes)", s.optimizer), ("master (bytes)", s.master),
                             ("activations (bytes)", s.activations),
                             ("buffers (bytes)", s.buffers), ("total (bytes)", s.total)):
            lines.append(f"  {label:<22}{_show(value)}")
        if s.in_flight != 1:
            lines.append(f"  {'micro-batches kept':<22}{_show(s.in_flight)}")
    for phase in ("forward", "backward", "recompute", "step"):
        rows = [x for x in r.collectives if x.phase == phase]
        if not rows:
            continue
        lines.append("")
        lines.append(f"collectives, {phase}" + (" (once per optimizer step)"
                                                if phase == "step" else ""))
        for x in rows:
            times = f"x{_show(x.copies)} " if x.copies != 1 else ""
            per = " per step" if x.per == "step" and phase != "step" else ""
            serves = f" (also for {len(x.serves)} more)" if x.serves else ""
            lines.append(f"  {x.kind} over {'+'.join(x.axes)} of {x.array}: V = {_show(x.bytes)} "
                         f"bytes, {x.form} = {_time(x.time)} {times}{per}{serves}")
            lines.append(f"      {x.op}: {x.reason}")
    if r.by_axis:
        lines.append("")
        lines.append("traffic by axis, one device (Σ k·V: k = 1 AllGather/ReduceScatter, 2 "
                     "AllReduce, 1/4 AllToAll)")
        for a in r.by_axis:
            link = f" over {a.link} ({_show(a.rate)} B/s)" if a.link else ""
            stage = f"{a.stage}, " if len(r.stages) > 1 else ""
            lines.append(f"  {stage}{a.axis}{link}: forward {_show(a.forward)} B ({_time(a.time_forward)})"
                         f", backward {_show(a.backward)} B ({_time(a.time_backward)}) per "
                         f"micro-batch; {_show(a.step)} B ({_time(a.time_step)}) per step")
    if r.pipeline is not None:
        p = r.pipeline
        lines.append("")
        lines.append(f"pipeline: p = {_show(p.stages)} stages, m = {_show(p.micro_batches)} "
                     f"micro-batches, v = {_show(p.interleave)}, {p.schedule}")
        lines.append(f"  bubble: {_show(p.of_ideal)} of the ideal compute time ((p-1)/(v m)), "
                     f"{_show(p.of_step)} of the step ((p-1)/(v m + p - 1))")
        lines.append(f"  each boundary sends {_show(p.send_bytes)} bytes per micro-batch forward,"
                     " and as many back")
    if r.thresholds:
        lines.append("")
        lines.append("compute-bound when (C: FLOP/s of a device, W_axis: its ring rate)")
        for t in r.thresholds:
            solved = f"; {t.solved}" if t.solved is not None else ""
            vals = "; ".join(f"C/W = {_show(v)} on {n}" for n, v in t.values)
            lines.append(f"  {t.phase} over {t.axis}: {t.inequality}{solved}"
                         + (f" ({vals})" if vals else ""))
    if r.optimum:
        o = dict(r.optimum)
        lines.append(f"  best split of {o['devices']} = {o['axis']} {o['other']} devices (forward):"
                     f" {o['axis']} = {_show(o['best'])}"
                     + (f"; compute-bound there when {o['condition']}" if o["condition"] is not None else ""))
    lines.append("")
    lines.append(f"conventions: {r.conventions}")
    return "\n".join(lines) + "\n"
