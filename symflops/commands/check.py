"""``symflops check FILE CLAIM ...``: decide claims (:mod:`symflops.checks.check`)
and print the verdicts, as text or one JSON list.

Exit status: 0 when every claim holds, 1 when any does not hold or is
undetermined; bad input raises SymflopsError (the CLI exits 2).
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("claims", nargs="+", metavar="CLAIM",
                        help="a comparison over dims and derived quantities, e.g. "
                             "'flops.total == 6*params*B' (quote it for the shell)")
    parser.add_argument("--at", action="append", default=[], metavar="DIM=VALUE,...",
                        help="also evaluate every claim at this configuration, e.g. "
                             "--at B=1048576,D=4096,F=16384 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per claim")


def run(args: argparse.Namespace) -> int:
    """0 when every claim holds, 1 otherwise; SymflopsError on bad input."""
    # imported here, not above: the parser takes add_arguments without SymPy
    from ..checks.check import check, text_report
    from ..count.evaluate import parse_assignments
    from ..declaration.reader import load

    layer = load(args.file)
    configurations = [parse_assignments([item], layer) for item in (args.at or [])]
    results = check(layer, args.claims, configurations,
                    "MACs" if getattr(args, "macs", False) else "FLOPs",
                    getattr(args, "precision", None))
    if args.json:
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
    else:
        sys.stdout.write(text_report(layer, results))
    return 0 if all(r.holds is True for r in results) else 1
