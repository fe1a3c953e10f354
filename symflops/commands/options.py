"""The options of the commands whose engines are heavy, and the values the help
text names, kept apart from the modules that run the commands, so that
building the parser (:mod:`symflops.commands.cli`) imports neither SymPy nor
NumPy: ``check``, ``verify`` and ``grads``'s options (each module takes its
own as ``add_arguments``), and the columns and grid limit of ``symflops
sweep`` (:mod:`symflops.commands.sweep`)."""

from __future__ import annotations

import argparse

#: The quantities in the CSV, as paths of fields of :func:`symflops.count.summary.summary`.
QUANTITIES = ("flops.forward", "flops.backward", "flops.total", "flops_elementwise.total",
              "params", "memory.activation_bytes", "memory.total_bytes")

#: The largest grid a sweep accepts (its CSV would be tens of gigabytes).
MAX_POINTS = 10**8


def check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("claims", nargs="+", metavar="CLAIM",
                        help="a comparison over dims and derived quantities, e.g. "
                             "'flops.total == 6*params*B' (quote it for the shell)")
    parser.add_argument("--at", action="append", default=[], metavar="DIM=VALUE,...",
                        help="also evaluate every claim at this configuration, e.g. "
                             "--at B=1048576,D=4096,F=16384 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per claim")


def verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed for the random sizes and values (default 0)")
    parser.add_argument("--no-torch", dest="no_torch", action="store_true",
                        help="finite differences only, even when PyTorch is installed")
    parser.add_argument("--at", metavar="DIM=VALUE,...",
                        help="the small sizes to check the rules at, every dim given, e.g. "
                             "--at B=2,S=3,D=4 (default: drawn with --seed, distinct, from 2 to "
                             "the number of dims + 1, at least 5); the FLOP counts are also "
                             "checked at medium sizes, drawn")


def grads_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("--inputs", required=True, metavar="IN.npz",
                        help="every input and parameter by name, and optionally the upstream "
                             "gradient of each output as d<output> (default: ones)")
    parser.add_argument("--out", required=True, metavar="OUT.npz",
                        help="where to write every derived gradient (d<tensor>), atomically "
                             "('-': standard output)")
