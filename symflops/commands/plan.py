"""``symflops plan``: options -> :mod:`symflops.planner.plan` -> table, Markdown, JSON, plot.

Every number on the command line goes through the whitelisting reader
(:func:`symflops.core.numbers.read_number`, the grammar of
:func:`symflops.lang.expr.parse_number` without SymPy): ``2e12``, ``2**20``,
``0.4``; an MFU may also be written ``40%``.

Start-up stays light: ``plan --params`` and ``plan --hf-config`` (up to the
derivation of the shipped declaration) import neither SymPy nor Jinja2; a
declaration's dims are read by :mod:`symflops.count.evaluate` only when one is
given, and matplotlib only for ``--plot``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from fractions import Fraction

from ..core.errors import SymflopsError, printable
from ..core.numbers import read_number
from ..core.hardware import PRESETS, preset
from ..planner.compute import rate, run_from_phases, run_from_steps, run_from_tokens
from ..planner.plan import (Plan, make_plan, model_from_declaration, model_from_import,
                            model_from_params)
from ..planner.plot import render_png
from ..planner.records import RECOMPUTE
from ..planner.rows import json_number, show
from ..planner.report import check_finite, markdown_report, text_report, to_json
from ..count.precision import DEFAULT_POLICY, POLICIES
from .output import STDOUT, target, write_file

DESCRIPTION = """\
Plan a training run: FLOPs (model and executed), time on a number of
accelerators, memory per accelerator (weights, gradients, optimizer state,
master weights, activations) under a precision policy and a ZeRO stage, and
bandwidth-bound decoding. Every figure is printed with the formula that
produced it.

Conventions: MFU counts model FLOPs, so time = C_model / (n x peak x MFU); a
--sustained rate per accelerator counts useful work too: time = C_model /
(n x sustained). ZeRO-1 shards optimizer state and master weights over the
data-parallel degree, ZeRO-2 also gradients, ZeRO-3 also weights.
"""

EPILOG = """\
examples:
  symflops plan --params 7e9 --tokens 2e12 -n 1024 --sustained 4e14 --precision mixed-adam
  symflops plan --params 70.6e9 --tokens 15e12 -n 16384 --accelerator h100-sxm --mfu 0.4
  symflops plan --params 7e9 --phase 1.2e13@4096 --phase 3e11@131072 --accelerator h100 --mfu 40%
  symflops plan --params 7.5e9 --precision mixed-adam --zero 1 -n 64 --accelerator a100 --json
  symflops plan --params 7e9 --accelerator h100 --decode-batch 8 --context 4096 --plot plan.png

presets: """ + ", ".join(PRESETS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("declaration", nargs="*", metavar="FILE [DIM=V ...]",
                   help="a whole-model declaration and the value of each of its dims "
                        "but the batch and sequence dims, e.g. derivations/llama.yaml "
                        "L=32 V=32000 D=4096 N=32 G=32 E=128 F=11008")
    m = p.add_argument_group("model (give one)")
    m.add_argument("--params", metavar="N", help="a dense model of N parameters: 6N FLOPs per "
                                                 "token, attention not counted")
    m.add_argument("--hf-config", metavar="PATH",
                   help="a Hugging Face config.json, through the declaration 'symflops "
                        "import-hf PATH' writes for it (the families are listed in "
                        "'symflops import-hf --help'); its model is kept in the user's cache "
                        "(SYMFLOPS_CACHE_DIR; empty: off), and for the shapes of the "
                        "published configs symflops ships it prepared (docs/planning.md)")
    m.add_argument("--attention", choices=("exact", "full-square"), default="exact",
                   help="with --hf-config: count the causal attention products over the "
                        "S(S+1)/2 pairs a query sees (exact, the default) or over the full S x S "
                        "square as eager PyTorch runs them (full-square: the figure of "
                        "FLOP counters and of most other tools)")
    m.add_argument("--experts", choices=("model", "executed"), default="model",
                   help="with --hf-config: routed experts as the model defines them (each "
                        "token's k experts, the default) or as transformers 5.24 runs them in "
                        "eager mode where that differs (executed: Llama 4 runs every expert on "
                        "every token); a model whose two figures differ reports the other "
                        "beside the plan")
    m.add_argument("--show-declaration", action="store_true",
                   help="with --hf-config: print the declaration the figures come from after "
                        "the report (in --json: its text under declaration.text)")
    r = p.add_argument_group("run")
    r.add_argument("--tokens", metavar="D", help="training tokens, e.g. 2e12")
    r.add_argument("--steps", metavar="S", help="optimizer steps (with --batch and --seq: "
                                                "D = S B T)")
    r.add_argument("--batch", metavar="B", help="sequences per optimizer step")
    r.add_argument("--seq", metavar="T", help="sequence length in tokens")
    r.add_argument("--phase", action="append", default=[], metavar="D@T",
                   help="a phase of D tokens at sequence length T (repeatable), e.g. "
                        "--phase 1.2e13@4096 --phase 3e11@131072")
    a = p.add_argument_group("accelerators")
    a.add_argument("-n", "--accelerators", default=None, metavar="N",
                   help="number of accelerators (default 1; with the strategies below, the "
                        "product of their degrees)")
    a.add_argument("--accelerator", metavar="PRESET",
                   help=f"peak, memory and bandwidth of one of: {', '.join(PRESETS)}")
    a.add_argument("--peak", metavar="FLOP/S", help="peak dense FLOP/s per accelerator "
                                                     "(overrides the preset's)")
    a.add_argument("--mfu", metavar="FRACTION", help="model FLOPs utilisation in (0, 1], e.g. "
                                                     "0.4 or 40%%")
    a.add_argument("--sustained", metavar="FLOP/S", help="useful (model) FLOP/s each "
                                                         "accelerator sustains, instead of "
                                                         "--mfu")
    t = p.add_argument_group("memory")
    t.add_argument("--precision", choices=sorted(POLICIES), default=DEFAULT_POLICY,
                   help=f"bytes per element policy (default {DEFAULT_POLICY}; mixed-adam is "
                        f"16 bytes per parameter)")
    t.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage: 1 shards optimizer state and master weights, 2 also "
                        "gradients, 3 (FSDP) also weights (default 0)")
    t.add_argument("--dp", metavar="D", help="data-parallel degree (default: the accelerator "
                                             "count)")
    t.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation (default none; full: the forward runs "
                        "twice, 8N executed per token)")
    t.add_argument("--micro-batch", default="1", metavar="B",
                   help="sequences per micro-batch, for activations (default 1)")
    g = p.add_argument_group("many devices (a declaration or --hf-config; see 'symflops shard')")
    for key, what in (("tp", "tensor-parallel degree (Megatron: heads, MLP hidden, vocabulary)"),
                      ("pp", "pipeline stages (a repeated block's copies split into stages)"),
                      ("cp", "context-parallel degree (the sequence)"),
                      ("ep", "expert-parallel degree, inside the data-parallel one (--dp counts "
                             "every replica; ep of them hold different experts)"),
                      ("micro-batches", "micro-batches per optimizer step (default: --batch "
                                        "over dp x --micro-batch, else 1)"),
                      ("interleave", "model chunks per device: interleaved 1F1B")):
        g.add_argument("--" + key, metavar="N", help=what)
    g.add_argument("--sp", action="store_true", help="sequence parallelism over the tp axis "
                                                     "(norms, dropout, residuals)")
    g.add_argument("--schedule", choices=("1f1b", "gpipe"), default=None,
                   help="pipeline schedule (default 1f1b)")
    i = p.add_argument_group("inference (decoding)")
    i.add_argument("--bandwidth", metavar="B/S", help="memory bandwidth, bytes/s (overrides "
                                                       "the preset's)")
    i.add_argument("--decode-batch", metavar="B", help="sequences decoded together (default 1)")
    i.add_argument("--context", metavar="T", help="tokens of context held in the KV cache "
                                                  "(default: --seq)")
    o = p.add_argument_group("output")
    fmt = o.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object, numbers unscaled")
    fmt.add_argument("--markdown", action="store_true", help="a Markdown table")
    o.add_argument("--plot", metavar="FILE.png", help="also draw memory and FLOPs per token "
                                                      "(needs matplotlib: pip install "
                                                      "'symflops[plot]'); '-' writes the PNG "
                                                      "to standard output and the report to "
                                                      "standard error")


#: Every number of a plan lies within 10**±30 of 1 (or is 0): far beyond any
#: real run, and the figures computed from a few of them stay within a
#: float's range (about 1.8e308), in which they are printed.
MAX_PLAN_NUMBER = 10**30


def _number(text: str | None, option: str) -> Fraction | None:
    if text is None:
        return None
    if "%" in text:
        raise SymflopsError(f"{option}: {text.strip()!r} is not a number",
                            hint="give a number; only --mfu also takes a percentage (40%)")
    try:
        value = read_number(text.strip())
    except SymflopsError as exc:
        raise SymflopsError(f"{option}: {exc.message}", hint=exc.hint) from None
    if value and not Fraction(1, MAX_PLAN_NUMBER) <= abs(value) <= MAX_PLAN_NUMBER:
        raise SymflopsError(f"{option} {text.strip()} is outside the range the planner "
                            f"takes, 1e-30 to 1e30", hint=f"give {option} in sensible units")
    return value


def _whole(text: str | None, option: str, example: str) -> int | None:
    value = _number(text, option)
    if value is None:
        return None
    if value.denominator != 1 or value < 1:
        raise SymflopsError(f"{option} must be a positive whole number, got {text.strip()!r}",
                            hint=f"give e.g. {option} {example}")
    return int(value)


def _fraction(text: str | None, option: str) -> Fraction | None:
    """A fraction, ``0.4`` or ``40%``."""
    if text is not None and text.strip().endswith("%"):
        if text.count("%") > 1:
            raise SymflopsError(f"{option} {text.strip()!r}: a percentage has one '%'",
                                hint=f"write e.g. {option} 40% or {option} 0.4")
        value = _number(text.strip()[:-1], option)
        return value / 100
    return _number(text, option)


def _phase(text: str) -> tuple[Fraction, Fraction]:
    tokens, sep, seq = text.partition("@")
    if not sep:
        raise SymflopsError(f"--phase {text!r}: expected TOKENS@SEQ",
                            hint="give e.g. --phase 1.2e13@4096")
    return _number(tokens, "--phase"), _number(seq, "--phase")


def _strategies(args: argparse.Namespace) -> bool:
    """Whether the plan is over many devices (any parallelism option given)."""
    return any(getattr(args, k) not in (None, False) for k in
               ("tp", "pp", "cp", "ep", "micro_batches", "interleave", "sp", "schedule"))


def _model(args: argparse.Namespace, precision):
    given = [name for name, present in (("--params", args.params is not None),
                                        ("--hf-config", args.hf_config is not None),
                                        ("a declaration", bool(args.declaration))) if present]
    if not given:
        raise SymflopsError("no model given",
                            hint="give --params N (e.g. --params 7e9), --hf-config PATH, or a "
                                 "declaration FILE with its dims")
    if len(given) > 1:
        raise SymflopsError(f"several models given ({', '.join(given)})",
                            hint="give one of --params, --hf-config, a declaration")
    if args.params is not None:
        return model_from_params(_whole(args.params, "--params", "7e9"), args.recompute)
    if args.hf_config is not None:
        from ..hf.importer import import_config

        return model_from_import(import_config(args.hf_config, args.attention, args.experts),
                                 args.recompute, precision, cached=not _strategies(args))
    from ..count.evaluate import parse_configs  # SymPy: only for a declaration

    path, *dims = args.declaration
    values = {k: Fraction(int(v.p), int(v.q)) for k, v in parse_configs(dims).items()}
    return model_from_declaration(path, values, args.recompute, precision)


def _default_seq(args: argparse.Namespace, model) -> tuple[int, str] | None:
    """A Hugging Face config's context length (``max_position_embeddings``) and
    its key, taken as the sequence length when the run gives none (no --seq,
    no --phase, no --steps/--batch, which need --seq); None otherwise."""
    imported = model.declaration
    if (imported is None or args.seq is not None or args.phase or args.steps is not None
            or args.batch is not None):
        return None
    return imported.context


def _default_seq_line(default: tuple[int, str]) -> str:
    seq, key = default
    return (f"sequence length: no --seq given, so T = {seq:,} tokens, the config's context "
            f"length ({printable(key)}); give --seq T for another")


def _run(args: argparse.Namespace, default_seq: int | None = None):
    if args.phase:
        clash = [o for o, v in (("--tokens", args.tokens), ("--steps", args.steps),
                                ("--batch", args.batch), ("--seq", args.seq)) if v is not None]
        if clash:
            raise SymflopsError(f"--phase and {', '.join(clash)} both given",
                                hint="each phase carries its own tokens and sequence length")
        return run_from_phases([_phase(text) for text in args.phase])
    if args.steps is not None or args.batch is not None:
        if args.tokens is not None:
            raise SymflopsError("--tokens and --steps/--batch both given",
                                hint="give either --tokens D or --steps S --batch B --seq T")
        missing = [o for o, v in (("--steps", args.steps), ("--batch", args.batch),
                                  ("--seq", args.seq)) if v is None]
        if missing:
            raise SymflopsError(f"{', '.join(missing)} missing",
                                hint="D = S B T needs --steps S --batch B --seq T")
        return run_from_steps(_number(args.steps, "--steps"), _number(args.batch, "--batch"),
                              _number(args.seq, "--seq"))
    if args.tokens is not None:
        seq = _number(args.seq, "--seq") if args.seq is not None else default_seq
        return run_from_tokens(_number(args.tokens, "--tokens"), seq)
    return None


def run(args: argparse.Namespace) -> int:
    precision = POLICIES[args.precision]
    accelerator = preset(args.accelerator) if args.accelerator is not None else None
    strategies = _strategies(args)
    given_n = _whole(args.accelerators, "--accelerators", "1024")
    accelerators = given_n or 1
    peak = _number(args.peak, "--peak")
    mfu = _fraction(args.mfu, "--mfu")
    sustained = _number(args.sustained, "--sustained")
    if peak is not None and mfu is None and sustained is None:
        raise SymflopsError("--peak given without --mfu",
                            hint="give --mfu (e.g. 0.4) to turn the peak into a time, or "
                                 "--sustained instead")
    if peak is None and accelerator is not None:
        peak = accelerator.peak_flops
    throughput = rate(accelerators, peak, mfu, sustained)
    if args.hf_config is None:
        for option, given in (("--attention", args.attention != "exact"),
                              ("--experts", args.experts != "model"),
                              ("--show-declaration", args.show_declaration)):
            if given:
                raise SymflopsError(f"{option} applies to --hf-config only",
                                    hint="a declaration counts what it declares; --params has "
                                         "no attention term")
    model = _model(args, precision)
    default = _default_seq(args, model)
    the_run = _run(args, default[0] if default else None)
    seq = _whole(args.seq, "--seq", "4096") if the_run is None else None
    if the_run is None and seq is None and default is not None:
        seq = default[0]
    many = None
    if strategies:
        many = _devices(args, model, precision, the_run, seq, given_n, accelerator, throughput,
                        peak)
        accelerators = many.devices
        throughput = rate(accelerators, peak, mfu, sustained)
    decode = any(v is not None for v in (args.decode_batch, args.context, args.bandwidth))
    plan = make_plan(
        model, precision, run=the_run, seq_len=seq, throughput=throughput,
        accelerator=accelerator, zero=args.zero,
        dp=dict(many.degrees)["dp"] if many is not None else _whole(args.dp, "--dp", "64"),
        micro_batch=_whole(args.micro_batch, "--micro-batch", "1"), decode=decode,
        context=_whole(args.context, "--context", "4096"),
        decode_batch=_whole(args.decode_batch, "--decode-batch", "8") or 1,
        bandwidth=_number(args.bandwidth, "--bandwidth"))
    if many is not None:  # one device's memory as the placements give it
        b = many.busiest
        plan = dataclasses.replace(plan, memory=dataclasses.replace(
            plan.memory, weights=b.weights, grads=b.grads, optimizer=b.optimizer,
            master=b.master, activations=b.activations, buffers=b.buffers or None,
            devices=" x ".join(f"{k} {v}" for k, v in many.degrees if v != 1 or k == "dp")
            + f", {b.name}"))
    plot_to_stdout = args.plot == "-"
    if args.plot is not None:
        write_plot(plan, args.plot)
    imported = model.declaration
    other = _other_experts(args, imported, plan.seq_len, precision)
    if args.json:
        data = to_json(plan)
        check_finite(data)
        if imported is not None:
            data["declaration"] = {"config": imported.file, "model_type": imported.model_type,
                                   "attention": imported.attention, "command": imported.command,
                                   "experts": imported.experts,
                                   **({"other_experts": {
                                       "experts": other[0], "seq_len": other[1],
                                       "training_flops_per_token": json_number(other[2])}}
                                      if other else {}),
                                   **({"default_seq_len": {"seq_len": default[0],
                                                           "key": default[1]}}
                                      if default else {}),
                                   **({"text": imported.text} if args.show_declaration else {})}
        if many is not None:
            from ..planner.devices import to_json as devices_json

            data["devices"] = devices_json(many)
        out = json.dumps(data, indent=2) + "\n"
    elif args.markdown:
        out = markdown_report(plan) + (f"\n{_other_line(other)}\n" if other else "")
        if default:
            out = out.rstrip("\n") + f"\n\n{_default_seq_line(default)}\n"
        if imported is not None and args.show_declaration:
            out = out.rstrip("\n") + "\n\n```yaml\n" + imported.text + "```\n"
    else:
        out = text_report(plan) + (f"\n{_other_line(other)}\n" if other else "")
        if many is not None:
            from ..planner.devices import lines as devices_lines

            out = out.rstrip("\n") + "\n" + "\n".join(devices_lines(many)) + "\n"
        if default:
            out = out.rstrip("\n") + f"\n\n{_default_seq_line(default)}\n"
        if imported is not None and args.show_declaration:
            out = out.rstrip("\n") + "\n\n" + imported.text
    report = sys.stderr if plot_to_stdout else sys.stdout  # standard output holds the PNG
    report.write(out if out.endswith("\n") else out + "\n")
    if args.plot is not None and not plot_to_stdout:
        print(f"wrote {printable(args.plot)}", file=sys.stderr)
    return 0


def _devices(args: argparse.Namespace, model, precision, the_run, seq, given_n, accelerator,
             throughput, peak):
    """The many-devices plan (:mod:`symflops.planner.devices`); SymPy, hence imported here."""
    from ..planner.devices import devices

    options = {"dp": _whole(args.dp, "--dp", "64"), "tp": _whole(args.tp, "--tp", "8"),
               "pp": _whole(args.pp, "--pp", "4"), "cp": _whole(args.cp, "--cp", "2"),
               "ep": _whole(args.ep, "--ep", "8"), "sp": args.sp, "zero": args.zero,
               "micro_batches": _whole(args.micro_batches, "--micro-batches", "8"),
               "interleave": _whole(args.interleave, "--interleave", "2"),
               "schedule": args.schedule}
    length = the_run.longest if the_run is not None else seq
    batch = _whole(args.batch, "--batch", "1024")
    if throughput.per_accelerator is not None:
        rate_, note = throughput.per_accelerator, ("--sustained" if throughput.sustained
                                                  else "peak x MFU")
    elif peak is not None:
        rate_, note = peak, "at peak FLOP/s (no --mfu or --sustained given)"
    else:
        rate_, note = None, "no rate: give --accelerator or --peak with --mfu"
    return devices(model, precision, options, length,
                   _whole(args.micro_batch, "--micro-batch", "1"), given_n, batch, accelerator,
                   rate_, note)


def _other_experts(args: argparse.Namespace, imported, seq: int | None, precision):
    """A model whose experts transformers runs otherwise than it defines them
    (Llama 4): the other count's training FLOPs per token at ``seq``, as
    ``(experts, seq, flops)``; None for any other model."""
    if imported is None or not imported.executed_differs or seq is None:
        return None
    from ..hf.importer import import_config

    other = "executed" if imported.experts == "model" else "model"
    model = model_from_import(import_config(args.hf_config, args.attention, other),
                              args.recompute, precision, cached=True)
    return other, seq, model.flops_per_token(seq).model


def _other_line(other) -> str:
    kind, seq, flops = other
    if kind == "executed":
        return (f"experts: the figures above count each token's k experts, as the model "
                f"defines them; transformers 5.24 in eager mode runs every expert on every "
                f"token: {show(flops)} training FLOPs per token at {seq:,} tokens "
                f"(--experts executed)")
    return (f"experts: the figures above count every expert on every token, as transformers "
            f"5.24 runs them in eager mode; the model's k experts per token: {show(flops)} "
            f"training FLOPs per token at {seq:,} tokens (--experts model)")


def write_plot(plan: Plan, path: str) -> None:
    """Draw the plan (:func:`symflops.planner.plot.render_png`) and write it to
    ``path`` (a .png, or '-' for standard output), atomically."""
    path = os.fspath(path)
    if path != STDOUT:
        target(path, "--plot")  # a bad path is refused before the plot is drawn
    if path != STDOUT and not path.lower().endswith(".png"):
        raise SymflopsError(f"--plot {path}: the plot is a PNG image",
                            hint="name the file FILE.png, or give '-' for standard output")
    write_file(path, render_png(plan), "--plot")
