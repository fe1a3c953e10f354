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


#: The relative tolerance of '≈' by default (symflops.checks.decide.DEFAULT_RTOL).
DEFAULT_RTOL_TEXT = "0.05"

CHECK_DESCRIPTION = """\
Decide claims about a layer's counts, as a reviewer checks a paper's formulas:
each claim is an equation, an inequality or an approximation over the dims and
the named quantities, decided for every positive integer value of the dims
(or, with --only-at, at the configurations given alone). A claim that fails
is explained: its difference split into named parts of the layer (attention
products, a causal mask's diagonal, a norm's statistics, recomputed forward
ops, capacity padding, frozen weights), and the nearest claim that holds."""


def check_epilog() -> str:
    from ..count.names import listing

    return f"""\
claims:
  LHS OP RHS, OP one of == != < <= > >= and ≈ (or ~=, 'approximately': within
  --rtol of the left-hand side, default {DEFAULT_RTOL_TEXT}; where it holds only for some
  values, the answer is the region, e.g. 'S <= 19*N*E', solved where it can be)

names (symflops derive --json lists their formulas under "quantities"):
  the dims (a dim defined by a formula stands for it), and
{_indent(listing(74), 2)}
  A name of a second declaration given with --with NAME=PATH: NAME:flops.total.

units:
  every quantity has one: FLOPs (MACs with --macs), bytes, elements, or none
  (counts: params, tokens; dims and numbers). A sum of two units is refused
  (elements + bytes), so is a comparison of two units; a side without a unit
  takes the other's (flops.total == 6*params*B: 6 FLOPs per parameter and
  token). A side may end in a unit word, after a number or a formula of dims
  and counts: FLOPs MACs kFLOPs MFLOPs GFLOPs TFLOPs PFLOPs EFLOPs, bytes kB MB
  GB TB PB EB KiB MiB GiB TiB PiB, elements (memory.total_bytes <= 80 GB).

conventions (what the quantities count):
  --attention exact|full-square  causal products over their pairs t <= s, or
                                 over the full square (as eager PyTorch runs them)
  --recompute none|full|selective  the policy of flops.executed and of the
                                 activation memory (default: flops.executed as
                                 declared, activations without recomputation)
  --precision NAME, --macs       bytes per element; multiply-accumulates

examples:
  symflops check derivations/ffn.yaml 'flops.total == 6*params*B'
  symflops check derivations/ffn.yaml 'memory.fixed_bytes == 1.5 GiB' --only-at D=4096,F=16384
  symflops check derivations/transformer.yaml 'attention_flops_per_token.forward ≈ 2*L*S*N*E'
  symflops check derivations/transformer.yaml \\
      'flops.executed == 96*B*S*L*D**2*(1 + S/(6*D) + V/(16*L*D))' \\
      --given F=4*D,D=N*E --recompute full --attention full-square
  symflops check derivations/lora.yaml 'flops.total ≈ 2/3*full:flops.total' \\
      --with full=claims/linear.yaml
  symflops check --claims claims/seeds.yaml
(the claims come right after FILE, the options after them)
"""


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="a layer declaration (YAML), e.g. "
                        "derivations/ffn.yaml (not with --claims)")
    parser.add_argument("claims", nargs="*", metavar="CLAIM",
                        help="a comparison over dims and named quantities, e.g. "
                             "'flops.total == 6*params*B' (quote it for the shell)")
    parser.add_argument("--at", action="append", default=[], metavar="DIM=VALUE,...",
                        help="also evaluate every claim at this configuration, e.g. "
                             "--at B=1048576,D=4096,F=16384 (repeatable); a claim for all "
                             "values false there does not hold")
    parser.add_argument("--only-at", dest="only_at", action="append", default=[],
                        metavar="DIM=VALUE,...",
                        help="decide the claims at this configuration alone (repeatable: "
                             "at each), for the numbers a paper prints ('1.875 GB per device')")
    parser.add_argument("--rtol", metavar="X",
                        help=f"relative tolerance of '≈' (default {DEFAULT_RTOL_TEXT}), above 0 "
                             "and below 1")
    parser.add_argument("--attention", choices=("exact", "full-square"), default=None,
                        help="count causal products over their pairs (exact) or the full "
                             "square (full-square)")
    parser.add_argument("--recompute", choices=("none", "full", "selective"), default=None,
                        help="the recompute policy of flops.executed and the activation memory")
    parser.add_argument("--given", action="append", default=[], metavar="DIM=FORMULA,...",
                        help="dims standing for formulas of other dims, a paper's assumptions, "
                             "e.g. --given D=N*E,F=4*N*E (repeatable)")
    parser.add_argument("--with", dest="with_", action="append", default=[],
                        metavar="NAME=PATH",
                        help="a second declaration whose quantities a claim names as "
                             "NAME:flops.total (repeatable)")
    parser.add_argument("--claims", dest="claims_file", metavar="FILE.yaml",
                        help="check every claim of a claims file (each with its declaration, "
                             "source, unit, tolerance, convention and documented verdict); "
                             "exit 1 when any gets another verdict")
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
