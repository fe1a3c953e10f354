"""``symflops check FILE CLAIM ...``: decide claims (:mod:`symflops.checks.check`)
and print the verdicts, as text or one JSON list.

Exit status: 0 when every claim holds, 1 when any does not hold or is
undetermined; bad input raises SymflopsError (the CLI exits 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..checks.check import check, text_report
from ..count.evaluate import parse_assignments
from ..declaration.reader import load
from .options import check_arguments as add_arguments  # noqa: F401 (the parser's, light)


def run(args: argparse.Namespace) -> int:
    """0 when every claim holds, 1 otherwise; SymflopsError on bad input."""
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
