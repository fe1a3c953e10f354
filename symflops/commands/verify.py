"""``symflops verify FILE``: check the derived rules numerically and against
PyTorch (:mod:`symflops.checks.verify`) and print the report, as text or JSON.

Exit status: 0 when every check passes, 1 when any fails.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..checks.verify import json_ready, text_report, verify
from ..count.evaluate import parse_assignments
from ..derive.backward import derive
from ..declaration.reader import load
from .options import verify_arguments as add_arguments  # noqa: F401 (the parser's, light)


def run(args: argparse.Namespace) -> int:
    """0 when every check passes, 1 when any fails."""
    layer = load(args.file)
    small = None
    if getattr(args, "at", None):
        small = {k: int(v) for k, v in parse_assignments([args.at], layer).items()}
    derivation = derive(layer)
    report = verify(derivation, seed=args.seed, use_torch=not getattr(args, "no_torch", False),
                    small=small)
    if args.json:
        sys.stdout.write(json.dumps(json_ready(report), indent=2) + "\n")
    else:
        sys.stdout.write(text_report(report))
    return 0 if report.passed else 1
