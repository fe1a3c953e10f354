"""``symflops verify FILE``: check the derived rules numerically and against
PyTorch (:mod:`symflops.checks.verify`) and print the report, as text or JSON.

Exit status: 0 when every check passes, 1 when any fails.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed for the random sizes and values (default 0)")
    parser.add_argument("--no-torch", dest="no_torch", action="store_true",
                        help="finite differences only, even when PyTorch is installed")


def run(args: argparse.Namespace) -> int:
    """0 when every check passes, 1 when any fails."""
    # imported here, not above: the parser takes add_arguments without SymPy
    from ..checks.verify import json_ready, text_report, verify
    from ..declaration.reader import load
    from ..derive.backward import derive

    derivation = derive(load(args.file))
    report = verify(derivation, seed=args.seed, use_torch=not getattr(args, "no_torch", False))
    if args.json:
        sys.stdout.write(json.dumps(json_ready(report), indent=2) + "\n")
    else:
        sys.stdout.write(text_report(report))
    return 0 if report.passed else 1
