"""The ``symflops`` command: wires declaration -> derive -> cost -> evaluate -> output.

Exit status: 0 success; 1 a check or verification failed; 2 bad input (one
line on stderr naming file:line:column, no traceback); 70 an internal error
(a bug: set SYMFLOPS_DEBUG=1 for the traceback); 130 interrupted (Ctrl-C,
SIGINT); 143 terminated (SIGTERM; 129 for SIGHUP).  A termination signal is
raised as :class:`~symflops.core.errors.Terminated` where the program is, so that
temporary files (``.tmp-*`` beside an output, ``symflops-tex-*``) are removed
on the way out, exactly as for Ctrl-C.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading
import traceback
from typing import Sequence

from .. import __version__
from . import check as check_command
from . import grads as grads_command
from . import plan as plan_command
from . import sweep as sweep_command
from . import verify as verify_command
from ..count.cost import UNITS, costs
from ..derive.backward import derive
from ..core.errors import SymflopsError, Terminated
from .build import build, render_file
from .output import STDOUT, write_file
from ..count.evaluate import evaluate, parse_assignments, parse_config
from ..count.precision import DEFAULT_POLICY, POLICIES
from .text import text_report
from ..declaration.reader import load
from ..count.summary import summary

DESCRIPTION = """\
symflops derives, from a layer declared as einsum contractions, its backward
rules, FLOP polynomials (forward, backward, training) and memory polynomials
(parameters, gradients, optimizer state, saved activations), and evaluates them.

Conventions: one multiply-add = 2 FLOPs (--macs counts multiply-accumulates);
'flops' counts contractions only, elementwise work is reported apart; memory is
in elements, bytes come from a precision policy.
"""

EPILOG = """\
examples:
  symflops build                       # every derivations/*.yaml -> build/NAME.md, .tex, .pdf
  symflops render derivations/ffn.yaml --format md --at B=1048576,D=4096,F=16384
  symflops derive derivations/ffn.yaml
  symflops derive derivations/ffn.yaml --json
  symflops eval derivations/ffn.yaml B=1048576 D=4096 F=16384
  symflops sweep derivations/ffn.yaml B=1048576 D=1024:8192:1024 F=4096,16384 --csv ffn.csv
  symflops check derivations/ffn.yaml 'flops.total == 6*params*B' --at B=1048576,D=4096,F=16384
  symflops verify derivations/ffn.yaml
  symflops grads derivations/ffn.yaml --inputs in.npz --out grads.npz
  symflops plan --params 7e9 --tokens 2e12 -n 1024 --sustained 4e14

exit status: 0 ok, 1 a claim or verification failed, 2 bad input (or a declaration
that failed to build), 70 internal error.
"""


def _unit_options(p: argparse.ArgumentParser) -> None:
    """--macs and --precision, shared by every command that counts."""
    p.add_argument("--macs", action="store_true",
                   help="count multiply-accumulates (1 per multiply-add) instead of FLOPs")
    p.add_argument("--precision", choices=sorted(POLICIES), default=None,
                   help=f"bytes per element policy (default: the declaration's, else "
                        f"{DEFAULT_POLICY})")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    _unit_options(p)



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="symflops", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"symflops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    d = sub.add_parser("derive", help="derive backward rules, FLOP and memory polynomials",
                       description="Derive a layer's backward rules and its FLOP and memory "
                                   "polynomials, symbolically.")
    _common(d)
    e = sub.add_parser("eval", help="evaluate the polynomials at given dims",
                       description="Evaluate every polynomial of a layer at the given dimension "
                                   "values (exact integers for integer dims).")
    _common(e)
    e.add_argument("values", nargs="*", metavar="DIM=VALUE",
                   help="a value for every dimension, e.g. B=1048576 D=4096 F=16384 "
                        "(also B=2**20, D=4e3, or comma-separated)")
    w = sub.add_parser("sweep", help="evaluate the polynomials over a grid of dims, to CSV",
                       description="Evaluate FLOPs (forward, backward, total, elementwise), "
                                   "parameters and memory bytes at every configuration of a grid "
                                   "of dim values, vectorised with NumPy, and write one CSV row "
                                   "per configuration (atomically).",
                       epilog="values: B=1048576 (one), D=1024:8192:1024 (start:stop:step; the "
                              "stop is included when a step lands on it), N=8,16,32 (a list, "
                              "whose items may be ranges). Every dim needs values; the grid may "
                              f"hold at most {sweep_command.MAX_POINTS:,} configurations. "
                              "Numbers are float64: exact below 2**53 (about 9.0e15), rounded "
                              "to float64 above (int64 would overflow at about 9.2e18); "
                              "symflops eval gives exact integers.")
    w.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    w.add_argument("values", nargs="*", metavar="DIM=VALUES",
                   help="values for every dimension, e.g. B=1048576 D=1024:8192:1024 F=8,16,32")
    w.add_argument("--csv", required=True, metavar="OUT",
                   help="write the CSV here ('-' for standard output); columns: the dims, then "
                        + ", ".join(sweep_command.QUANTITIES)
                        + " (macs.* instead of flops.* with --macs)")
    _unit_options(w)
    r = sub.add_parser("render", help="render one derivation sheet (Markdown or LaTeX)",
                       description="Render the derivation sheet of one declaration.")
    r.add_argument("file", help="a layer declaration (YAML)")
    r.add_argument("--format", choices=("md", "tex"), default="md", help="sheet format (default md)")
    r.add_argument("-o", "--output", metavar="PATH",
                   help="write here (atomically) instead of standard output ('-': standard "
                        "output); an existing path must be a regular file")
    _sheet_options(r)
    b = sub.add_parser("build", help="render every declaration in derivations/ into build/",
                       description="Render every declaration in a directory into NAME.md and "
                                   "NAME.tex, and NAME.pdf when pdflatex is on the path. A "
                                   "declaration that fails is reported, its previous files are "
                                   "left untouched, and the command exits 2 after building the "
                                   "others.")
    b.add_argument("--src", default="derivations", help="declarations directory (default derivations)")
    b.add_argument("--out", default="build", help="output directory (default build)")
    pdf = b.add_mutually_exclusive_group()
    pdf.add_argument("--pdf", dest="pdf", action="store_true", default=None,
                     help="require PDFs (fail when pdflatex is missing)")
    pdf.add_argument("--no-pdf", dest="pdf", action="store_false", help="skip the PDF step")
    b.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="derive N declarations at once in worker processes (0: one per core; "
                        "default 1); output is the same and written in name order")
    _sheet_options(b)
    c = sub.add_parser("check", help="decide claims about FLOPs, params and memory",
                       description="Decide each claim (an equation or inequality over the dims "
                                   "and derived quantities) for all dim values; exit 1 when any "
                                   "does not hold or is undetermined.")
    check_command.add_arguments(c)
    _unit_options(c)
    v = sub.add_parser("verify", help="check the derived rules numerically and against PyTorch",
                       description="Check every derived backward rule against finite differences "
                                   "and, where PyTorch is installed, torch.autograd; compare FLOPs "
                                   "with FlopCounterMode and saved tensors with autograd's.")
    verify_command.add_arguments(v)
    g = sub.add_parser("grads", help="evaluate the derived gradients on arrays from an .npz",
                       description="Run the forward pass and the derived backward rules on the "
                                   "given arrays and write every gradient to an .npz, atomically.")
    grads_command.add_arguments(g)
    pl = sub.add_parser("plan", help="plan a training run: FLOPs, time, memory, decoding",
                        description=plan_command.DESCRIPTION, epilog=plan_command.EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    plan_command.add_arguments(pl)
    return parser


def _sheet_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--at", action="append", default=[], metavar="DIM=V,...",
                   help="add a numbers table at this configuration, e.g. "
                        "--at B=1048576,D=4096,F=16384 (repeatable; with build, a "
                        "configuration is used for the sheets whose dims it names exactly)")
    p.add_argument("--templates", metavar="DIR",
                   help="a directory of Jinja templates that override the shipped ones by name")
    _unit_options(p)


def _run_sheet(args: argparse.Namespace) -> int:
    configs = [parse_config(text) for text in args.at]
    unit = "MACs" if args.macs else "FLOPs"
    if args.templates and not os.path.isdir(args.templates):
        raise SymflopsError(f"{args.templates}: no such template directory",
                            hint="give a directory holding sheet.md.j2 and/or sheet.tex.j2")
    if args.command == "build":
        if args.jobs < 0:
            raise SymflopsError(f"--jobs must be 0 or more, got {args.jobs}",
                                hint="give -j 0 for one worker per core, or a count")
        result = build(args.src, args.out, pdf=args.pdf, configs=configs, jobs=args.jobs,
                       templates=args.templates, unit=unit, precision=args.precision)
        print(f"{len(result.written)} files written, {len(result.failed)} declarations failed",
              file=sys.stderr if result.failed else sys.stdout)
        return 70 if result.internal else 2 if result.failed else 0
    layer = load(args.file)
    for config in configs:
        parse_assignments([",".join(f"{k}={v}" for k, v in config.items())], layer)
    text = render_file(args.file, args.format, configs, args.templates, unit, args.precision)
    if args.output is not None and args.output != STDOUT:
        write_file(args.output, text, "-o")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def _run_sweep(args: argparse.Namespace) -> int:
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


def _run_plan(args: argparse.Namespace) -> int:
    return plan_command.run(args)


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("build", "render"):
        return _run_sheet(args)
    if args.command == "plan":
        return _run_plan(args)
    commands = {"check": check_command, "verify": verify_command, "grads": grads_command}
    if args.command in commands:
        return commands[args.command].run(args)
    if args.command == "sweep":
        return _run_sweep(args)
    layer, s = _derive_structure(args, "declared" if args.command == "derive" else "minimum")
    if args.command == "derive":
        out = json.dumps(s.to_json(), indent=2) + "\n" if args.json else text_report(s)
    else:  # eval
        values = parse_assignments(args.values, layer)
        numbers = evaluate(s, values)
        at = {k: int(v) if v.is_Integer else float(v) for k, v in values.items()}
        if args.json:
            out = json.dumps({**numbers.to_json(), "at": at}, indent=2) + "\n"
        else:
            out = text_report(numbers, at)
    sys.stdout.write(out)
    return 0


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP: unwind like Ctrl-C does (a second signal during
    the clean-up is ignored, so that the clean-up finishes)."""
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _quiet_stdout() -> None:
    """Standard output failed (the reader left, the disk is full): point it at
    /dev/null so that the interpreter's last flush has nothing to complain of."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    previous = {}
    if threading.current_thread() is threading.main_thread():  # where handlers can be set
        previous = {sig: signal.signal(sig, _terminate) for sig in _SIGNALS}
    try:
        code = run(argv)
        sys.stdout.flush()  # a full disk behind standard output shows here
        return code
    except SymflopsError as exc:
        print(f"symflops: {exc}", file=sys.stderr)
        excerpt = exc.excerpt()
        if excerpt:
            print(excerpt, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symflops: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"symflops: terminated by signal {exc.signum}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) and not exc.filename:
            _quiet_stdout()  # writing standard output failed: the input was fine, the output not
            print(f"symflops: cannot write standard output: {exc.strerror}", file=sys.stderr)
            return 2
        return _internal(exc)
    except Exception as exc:  # a bug in symflops, not in the user's input
        return _internal(exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _internal(exc: Exception) -> int:
    if os.environ.get("SYMFLOPS_DEBUG"):
        traceback.print_exception(exc)
    print(f"symflops: internal error: {type(exc).__name__}: {exc} "
          "(this is a bug; rerun with SYMFLOPS_DEBUG=1 and report the traceback)",
          file=sys.stderr)
    return 70


if __name__ == "__main__":
    sys.exit(main())
