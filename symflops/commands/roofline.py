"""``symflops roofline``: declaration -> derivation -> bytes moved and FLOPs per
op -> intensity, thresholds and time bounds on the named accelerators ->
text or JSON.  The arithmetic is :mod:`symflops.count.roofline_analysis`;
this module only wires and prints.  Light to import (the parser reads its
options): SymPy is imported when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from typing import Any

from ..core.hardware import PRESETS

COMPUTES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
DTYPE_NAMES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")

DESCRIPTION = """\
Bytes moved per op (each operand read from memory, each output written),
arithmetic intensity (FLOPs per byte, both buckets) per op and for the
layer as rational functions of the dims, the condition under which each is
compute-bound solved for one dim (I_acc = peak / bandwidth), and, with every
dim given, each op's time bound max(FLOPs / peak, bytes / bandwidth) with the
side that binds, summed over the layer.
"""

EPILOG = """\
phases: forward (one inference pass; for a causal model the prefill; no loss),
decode (one decoding step of B sequences at context S: the weights read once,
the key/value cache whole, one position of everything else), training (forward
and every backward rule).
conventions: naive (every op round-trips memory), fused (a tensor only
elementwise ops read stays on chip). See docs/roofline.md.

examples:
  symflops roofline derivations/ffn.yaml --accelerator tpu-v5e --accelerator h100
  symflops roofline derivations/ffn.yaml --accelerator h100 D=4096 F=16384
  symflops roofline derivations/ffn.yaml --accelerator v5e --weights int8
  symflops roofline derivations/llama_block.yaml --accelerator h100 --phase decode \\
      --example 'Llama-2-7B block' --json

presets: """ + ", ".join(PRESETS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    p.add_argument("values", nargs="*", metavar="DIM=VALUE",
                   help="values of some or all dims: thresholds are evaluated where every "
                        "other dim is given, time bounds need every dim")
    p.add_argument("--example", metavar="NAME",
                   help="take every dim's value from the declaration's example NAME")
    p.add_argument("--accelerator", action="append", required=True, metavar="PRESET",
                   help="an accelerator preset (repeatable): " + ", ".join(PRESETS))
    p.add_argument("--compute", choices=COMPUTES, default="bf16",
                   help="the precision the tensor cores multiply in: whose peak the compute "
                        "side uses (default bf16)")
    p.add_argument("--peak", metavar="FLOP/S", help="peak FLOP/s instead of the preset's "
                                                     "(one --accelerator only)")
    p.add_argument("--bandwidth", metavar="B/S", help="memory bandwidth instead of the "
                                                      "preset's (one --accelerator only)")
    p.add_argument("--phase", choices=("forward", "decode", "training"), default="forward",
                   help="what runs (default forward)")
    p.add_argument("--convention", choices=("naive", "fused"), default="naive",
                   help="what stays on chip between ops (default naive: nothing)")
    p.add_argument("--weights", choices=DTYPE_NAMES, metavar="FORMAT",
                   help="bytes of a weight element by its format (int8: 1), instead of the "
                        "precision policy's; one of " + ", ".join(DTYPE_NAMES))
    p.add_argument("--activations", choices=DTYPE_NAMES, metavar="FORMAT",
                   help="bytes of an activation element by its format, instead of the "
                        "policy's")
    p.add_argument("--solve-for", metavar="DIM",
                   help="the dim the compute-bound conditions are solved for (default: the "
                        "first dim of 'tokens:', else the first dim)")
    p.add_argument("--precision", default=None, metavar="POLICY",
                   help="bytes per element policy (default: the declaration's, else bf16-adam)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    import sympy

    from ..core.errors import SymflopsError
    from ..core.numbers import read_number
    from ..count.cost import costs
    from ..count.evaluate import (check_definitions, check_dim_name, example_config,
                                  find_example, parse_configs)
    from ..count.precision import POLICIES
    from ..count.roofline import roof
    from ..count.roofline_analysis import analyse, default_dim
    from ..count.traffic import widths
    from ..declaration.reader import load
    from ..derive.backward import derive

    if args.precision is not None and args.precision not in POLICIES:
        raise SymflopsError(f"unknown precision policy {args.precision!r}",
                            hint=f"use one of {', '.join(sorted(POLICIES))}")
    if (args.peak or args.bandwidth) and len(args.accelerator) != 1:
        raise SymflopsError("--peak and --bandwidth override one accelerator's figures",
                            hint="name one --accelerator with them")
    figures = {}
    for option, text in (("peak", args.peak), ("bandwidth", args.bandwidth)):
        if text is not None:
            value = read_number(text)
            if value <= 0:
                raise SymflopsError(f"--{option} must be positive, got {text!r}",
                                    hint=f"give e.g. --{option} 1e15")
            figures[option] = Fraction(value)
    roofs = tuple(roof(name, args.compute, **figures) for name in args.accelerator)
    layer = load(args.file)
    if args.example is not None:
        if args.values:
            raise SymflopsError(f"--example {args.example!r} and dim values are both given",
                                hint="give either --example NAME or dim values")
        values = example_config(find_example(layer, args.example))
    else:
        values = parse_configs(args.values)
        for name in values:
            check_dim_name(layer, name)
        check_definitions(layer, values)
    dim = args.solve_for
    if dim is not None:
        check_dim_name(layer, dim)
    else:
        dim = default_dim(layer)
    d = derive(layer)
    c = costs(d, "FLOPs", args.precision, "minimum")
    w = widths(c.precision, args.weights, args.activations)
    analysis = analyse(d, c, args.phase, args.convention, w, roofs,
                       {k: int(v) for k, v in values.items()}, dim)
    if args.json:
        sys.stdout.write(json.dumps(analysis.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(text_report(analysis, sympy))
    return 0


# ------------------------------------------------------------------ text --

def _g(v: Any) -> str:
    v = Fraction(v)
    if v.denominator == 1 and abs(v) < 10**7:
        return f"{int(v):,}"
    return f"{float(v):.4g}"


def _seconds(v: Fraction) -> str:
    x = float(v)
    if x == 0:
        return "0 s"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if x >= scale or unit == "ns":
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g} s"


def text_report(a: Any, sympy: Any) -> str:
    from ..core.text import table
    from ..sheets.printing import readable

    def f(e: Any) -> str:
        return "-" if e is None else sympy.sstr(readable(e)) if getattr(e, "free_symbols", None) \
            else sympy.sstr(e)

    t = a.traffic
    phase = {"forward": "one forward pass (inference; the prefill of a causal model; no loss)",
             "decode": f"one decoding step of each sequence at context {t.seq}",
             "training": "one training step: forward and backward"}[t.phase]
    lines = [f"{a.name}: {a.title}", f"phase: {phase}",
             f"convention: {t.convention}" + (" (on chip: " + ", ".join(t.resident) + ")"
                                               if t.resident else ""),
             f"bytes per element: {t.widths.text}"]
    for r in a.roofs:
        lines.append(f"{r.name}: {_g(r.peak / 10**12)} TFLOP/s dense {r.compute}, "
                     f"{_g(r.bandwidth / 10**9)} GB/s; ridge {a.ridge} = peak / bandwidth = "
                     f"{float(r.ridge):.4g} FLOPs/byte")
    lines += ["", "per op (FLOPs: both buckets, one run; bytes: read + written; runs: copies)"]
    rows = [("op", "runs", "FLOPs", "bytes", "intensity")]
    for e, i in zip(a.entries, a.intensities()):
        rows.append(((e.label if e.pass_ == "forward" else "bwd " + e.label), f(e.copies),
                     f(e.work), f(e.bytes), f(i)))
    rows.append(("whole layer", "", f(t.total("work")), f(t.total("bytes")),
                 f(a.layer_intensity)))
    lines += table(rows)
    if a.thresholds:
        given = ", ".join(f"{k}={v:,}" for k, v in a.values if k != a.dim)
        lines += ["", f"compute-bound when (FLOPs - {a.ridge} * bytes > 0, solved for {a.dim})"]
        groups: dict[tuple[Any, ...], list[str]] = {}
        for th in a.thresholds:   # ops whose conditions read alike share a line
            key = (th.solved or f"{sympy.sstr(th.condition)} > 0", th.at, th.limit, th.others,
                   th.limit_at)
            groups.setdefault(key, []).append(th.label)
        for (solved, at, lim, others, limit_at), labels in groups.items():
            lines.append(f"  {', '.join(labels)}: {solved}")
            if at:
                lines.append(f"      at {given or 'these values'}: " +
                             "; ".join(f"{n}: {s.text}" for n, s in at))
            if lim is not None and limit_at:
                grow = "grow together" if len(others) > 1 else "grows"
                lines.append(f"      as {', '.join(others)} {grow}: intensity -> "
                             f"{f(lim)}, so " + "; ".join(f"{n}: {s.text}" for n, s in limit_at))
    for b in a.bounds:
        at = ", ".join(f"{k}={v:,}" for k, v in a.values)
        lines += ["", f"time bound on {b.roof.name} at {at}: max(FLOPs / peak, bytes / "
                      "bandwidth) per op, times its runs"]
        rows = [("op", "runs", "FLOPs", "bytes", "FLOPs/byte", "bound", "time")]
        for o in b.ops:
            rows.append(((o.entry.label if o.entry.pass_ == "forward" else
                          "bwd " + o.entry.label), _g(o.copies), _g(o.work), _g(o.bytes),
                         "-" if o.intensity is None else _g(o.intensity), o.bound,
                         _seconds(o.seconds)))
        lines += table(rows)
        split = b.bound_seconds
        rate = "" if b.tokens_per_s is None else f"; {_g(b.tokens_per_s)} tokens/s"
        lines.append(f"  total {_seconds(b.seconds)} (compute-bound ops "
                     f"{_seconds(split['compute'])}, memory-bound ops "
                     f"{_seconds(split['memory'])}){rate}")
    return "\n".join(lines) + "\n"
