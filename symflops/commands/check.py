"""``symflops check FILE CLAIM ...`` and ``symflops check --claims FILE.yaml``:
decide claims (:mod:`symflops.checks.check`) and print the verdicts, as text
or one JSON list.

Exit status: 0 when every claim holds (in a claims file: gets its documented
verdict), 1 otherwise; bad input raises SymflopsError (the CLI exits 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..checks.check import (Convention, Declaration, Request, parse_given, read_rtol,
                            text_report)
from ..checks.check import run as run_requests
from ..checks.decide import DEFAULT_RTOL
from ..core.errors import SymflopsError
from ..count.evaluate import parse_configs
from ..declaration.reader import load
from .options import check_arguments as add_arguments  # noqa: F401 (the parser's, light)


def run(args: argparse.Namespace) -> int:
    """0 when every claim holds, 1 otherwise; SymflopsError on bad input."""
    claims_path = getattr(args, "claims_file", None)
    if claims_path:
        if args.file or args.claims:
            raise SymflopsError("--claims FILE.yaml takes its declarations and claims from the "
                                "file", hint="give either FILE CLAIM... or --claims FILE.yaml")
        from ..checks.claims_file import check_file, text_report as file_report

        claims, results = check_file(claims_path)
        if args.json:
            sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
        else:
            sys.stdout.write(file_report(claims, results))
        return 0 if all(r.as_expected for r in results) else 1
    if not args.file or not args.claims:
        raise SymflopsError("no claim to check",
                            hint="give a declaration and claims: symflops check FILE 'CLAIM' "
                                 "..., or --claims FILE.yaml")
    layer = load(args.file)
    decl = Declaration(layer)
    others = {}
    for item in getattr(args, "with_", None) or []:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier() or not path.strip():
            raise SymflopsError(f"--with takes NAME=PATH, found {item[:60]!r}",
                                hint="e.g. --with full=derivations/ffn.yaml")
        if name in others:
            raise SymflopsError(f"--with {name} is given twice", hint="give each name once")
        others[name] = Declaration(load(path.strip()))
    if args.at and getattr(args, "only_at", None):
        raise SymflopsError("--at and --only-at are given together",
                            hint="--only-at decides claims at its configurations alone; --at "
                                 "evaluates claims that are decided for every value")
    items = getattr(args, "only_at", None) or args.at or []
    configurations = tuple(parse_configs([item]) for item in items)
    given = parse_given(",".join(getattr(args, "given", None) or []),
                        [layer, *(o.layer for o in others.values())])
    rtol = read_rtol(args.rtol) if getattr(args, "rtol", None) else DEFAULT_RTOL
    convention = Convention(getattr(args, "attention", None), getattr(args, "recompute", None),
                            getattr(args, "precision", None), bool(getattr(args, "macs", False)))
    results = run_requests([Request(text, decl, None, convention, rtol, configurations,
                           bool(getattr(args, "only_at", None)), given, others, number=k + 1)
                   for k, text in enumerate(args.claims)])
    if args.json:
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
    else:
        sys.stdout.write(text_report(layer, results))
    return 0 if all(r.holds is True for r in results) else 1

