"""The commands that derive one layer, or every shipped one: ``derive``, ``eval``,
``render``, ``build`` and ``sweep`` (wired declaration -> derive -> cost ->
evaluate -> output).  :mod:`symflops.cli` imports this module only when one of
them runs: it needs SymPy; Jinja2 and the sheets are imported for render and
build alone, NumPy for sweep alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..core.errors import SymflopsError, printable
from ..count.cost import costs
from ..count.evaluate import (evaluate, example_config, find_example, parse_assignments,
                              parse_config)
from ..count.summary import summary
from ..declaration.reader import load
from ..derive.backward import derive
from .output import STDOUT, write_file
from .text import text_report


def run(args: argparse.Namespace) -> int:
    """Run ``args.command``, one of derive, eval, render, build and sweep."""
    if args.command in ("build", "render"):
        return _run_sheet(args)
    if args.command == "sweep":
        return _run_sweep(args)
    if args.command == "exercises":
        return _run_exercises(args)
    layer, s = _derive_structure(args, "declared" if args.command == "derive" else "minimum")
    if args.command == "derive":
        out = json.dumps(s.to_json(), indent=2) + "\n" if args.json else text_report(s)
    else:  # eval
        if args.example is not None:
            if args.values:
                raise SymflopsError(f"--example {args.example!r} and dim values are both given",
                                    hint="give either --example NAME or every dim's value")
            values = example_config(find_example(layer, args.example))
        else:
            values = parse_assignments(args.values, layer)
        numbers = evaluate(s, values)
        at = {k: int(v) if v.is_Integer else float(v) for k, v in values.items()}
        if args.json:
            out = json.dumps({**numbers.to_json(), "at": at}, indent=2) + "\n"
        else:
            out = text_report(numbers, at)
    sys.stdout.write(out)
    return 0


def _reference() -> str | None:
    """symflops's own reference, ``docs/`` beside the shipped declarations (in a
    checkout, or the installed copy inside the package); never the working
    directory's ``docs/``, which may be anything of the user's."""
    from ..planner.model import declarations_dir

    path = os.path.join(os.path.dirname(declarations_dir()), "docs")
    return path if os.path.isfile(os.path.join(path, "index.md")) else None


def _run_sheet(args: argparse.Namespace) -> int:
    # the sheets (Jinja2, the figures) are imported for render and build alone
    from ..sheets.escape import check_tex
    from .build import SHEET_FORMATS, build, render_layer

    configs = [parse_config(text) for text in args.at]
    unit = "MACs" if args.macs else "FLOPs"
    if args.templates and not os.path.isdir(args.templates):
        raise SymflopsError(f"{args.templates}: no such template directory",
                            hint="give a directory holding sheet.md.j2 and/or sheet.tex.j2")
    if args.command == "build":
        if args.jobs < 0:
            raise SymflopsError(f"--jobs must be 0 or more, got {args.jobs}",
                                hint="give -j 0 for one worker per core, or a count")
        if args.docs is not None and not os.path.isdir(args.docs):
            raise SymflopsError(f"--docs {args.docs}: no such directory",
                                hint="give the directory of the reference's Markdown pages "
                                     "(docs in a checkout)")
        docs = args.docs if args.docs is not None else _reference()
        result = build(args.src, args.out, pdf=args.pdf, configs=configs, jobs=args.jobs,
                       templates=args.templates, unit=unit, precision=args.precision,
                       examples=args.example,
                       formats=tuple(dict.fromkeys(args.formats)) if args.formats else SHEET_FORMATS,
                       docs=docs)
        print(result.summary(), file=sys.stderr if result.failed else sys.stdout)
        return 70 if result.internal else 2 if result.failed else 0
    if (args.file is None) == (args.hf_config is None):
        raise SymflopsError("give a declaration FILE or --hf-config PATH (one of them)",
                            hint="e.g. symflops render derivations/ffn.yaml, or symflops render "
                                 "--hf-config config.json")
    for option, given in (("--attention", args.attention != "exact"),
                          ("--experts", args.experts != "model")):
        if args.hf_config is None and given:
            raise SymflopsError(f"{option} applies to --hf-config only",
                                hint="a declaration counts what it declares")
    if args.hf_config is not None:
        from ..hf.importer import import_config
        from ..planner.model import imported_layer

        layer = imported_layer(import_config(args.hf_config, args.attention,
                                             args.experts))
    else:
        layer = load(args.file)
    for config in configs:
        parse_assignments([",".join(f"{k}={v}" for k, v in config.items())], layer)
    for name in args.example:
        find_example(layer, name)
    if args.format == "tex":
        check_tex(layer)
    text = render_layer(layer, args.format, configs, args.templates, unit, args.precision,
                        args.example or None)
    if args.output is not None and args.output != STDOUT:
        write_file(args.output, text, "-o")
        print(f"wrote {printable(args.output)}")
    else:
        sys.stdout.write(text)
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
    from . import sweep as sweep_command  # NumPy: imported for sweep alone

    layer, s = _derive_structure(args, "minimum")
    result = sweep_command.sweep(layer, s, args.values, args.csv)
    print(sweep_command.summary_line(layer, result, args.csv),
          file=sys.stderr if args.csv == "-" else sys.stdout)
    return 0


def _derive_structure(args: argparse.Namespace, choice: str = "declared"):
    """The layer and its summary; ``choice`` as in :data:`symflops.count.cost.Choice`
    (the commands that evaluate at given sizes take each size's cheapest order)."""
    layer = load(args.file)
    derivation = derive(layer)
    c = costs(derivation, "MACs" if args.macs else "FLOPs", args.precision, choice)
    return layer, summary(derivation, c)


def _run_exercises(args: argparse.Namespace) -> int:
    """``symflops exercises FILE [--seed N]``: the questions, then the answers."""
    from ..count.exercises import exercises, plain_text, to_json

    derivation = derive(load(args.file))
    c = costs(derivation, "MACs" if args.macs else "FLOPs", args.precision, "minimum")
    found = exercises(derivation, c, args.seed)
    out = (json.dumps(to_json(found, c.unit), indent=2) + "\n" if args.json
           else plain_text(derivation, c, found))
    sys.stdout.write(out)
    return 0
