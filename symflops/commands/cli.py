"""The ``symflops`` command line's parser: every command, its options and help.

Light by design: building the parser imports neither SymPy, Jinja2, PyYAML
nor NumPy (the options of check, verify and grads and the values sweep's
help names are in :mod:`symflops.commands.options`; plan's module is light
itself), so that ``symflops --help``, ``symflops CMD --help`` and the light
commands start fast.  :mod:`symflops.cli` parses with it and runs the command.
"""

from __future__ import annotations

import argparse

from .. import __version__
from . import options
from . import importhf as importhf_command
from . import plan as plan_command
from .shardargs import DESCRIPTION as SHARD_DESCRIPTION, EPILOG as SHARD_EPILOG
from .shardargs import add_arguments as _shard_arguments
from . import roofline as roofline_command
from ..count.precision import DEFAULT_POLICY, POLICIES

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
  symflops roofline derivations/ffn.yaml --accelerator h100 D=4096 F=16384

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
                                   "values (exact integers for integer dims), or at one of the "
                                   "configurations the declaration names under 'examples:' "
                                   "(--example NAME). A declaration's examples are used only "
                                   "when named: without values or --example, eval asks for "
                                   "every dim's value.")
    _common(e)
    e.add_argument("values", nargs="*", metavar="DIM=VALUE",
                   help="a value for every dimension, e.g. B=1048576 D=4096 F=16384 "
                        "(also B=2**20, D=4e3, or comma-separated)")
    e.add_argument("--example", metavar="NAME",
                   help="evaluate at the declaration's example NAME (its 'examples:' block, "
                        "e.g. --example Llama-2-7B) instead of dim values; --json has the same "
                        "shape, 'at' holding the example's values")
    w = sub.add_parser("sweep", help="evaluate the polynomials over a grid of dims, to CSV",
                       description="Evaluate FLOPs (forward, backward, total, elementwise), "
                                   "parameters and memory bytes at every configuration of a grid "
                                   "of dim values, vectorised with NumPy, and write one CSV row "
                                   "per configuration (atomically).",
                       epilog="values: B=1048576 (one), D=1024:8192:1024 (start:stop:step; the "
                              "stop is included when a step lands on it), N=8,16,32 (a list, "
                              "whose items may be ranges). Every dim needs values; the grid may "
                              f"hold at most {options.MAX_POINTS:,} configurations. "
                              "Numbers are float64: exact below 2**53 (about 9.0e15), rounded "
                              "to float64 above (int64 would overflow at about 9.2e18); "
                              "symflops eval gives exact integers.")
    w.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    w.add_argument("values", nargs="*", metavar="DIM=VALUES",
                   help="values for every dimension, e.g. B=1048576 D=1024:8192:1024 F=8,16,32")
    w.add_argument("--csv", required=True, metavar="OUT",
                   help="write the CSV here ('-' for standard output); columns: the dims, then "
                        + ", ".join(options.QUANTITIES)
                        + " (macs.* instead of flops.* with --macs)")
    _unit_options(w)
    r = sub.add_parser("render", help="render one derivation sheet (Markdown, LaTeX or HTML)",
                       description="Render the derivation sheet of one declaration, or of the "
                                   "declaration 'symflops import-hf' writes for a Hugging Face "
                                   "config.json (--hf-config).")
    r.add_argument("file", nargs="?", help="a layer declaration (YAML)")
    r.add_argument("--hf-config", metavar="PATH",
                   help="render the declaration of this Hugging Face config.json instead")
    r.add_argument("--attention", choices=("exact", "full-square"), default="exact",
                   help="with --hf-config: the causal attention products over the pairs "
                        "t <= s (exact) or the full S x S square (full-square)")
    r.add_argument("--experts", choices=("model", "executed"), default="model",
                   help="with --hf-config: routed experts as the model defines them (model) or "
                        "as transformers runs them where that differs (executed: Llama 4)")
    r.add_argument("--format", choices=("md", "tex", "html"), default="md",
                   help="sheet format (default md; html: the self-contained page with live "
                        "numbers, see docs/html.md)")
    r.add_argument("-o", "--output", metavar="PATH",
                   help="write here (atomically) instead of standard output ('-': standard "
                        "output); an existing path must be a regular file")
    _sheet_options(r)
    b = sub.add_parser("build", help="render every declaration in derivations/ into build/",
                       description="Render every declaration in a directory into NAME.md, "
                                   "NAME.tex and NAME.html (a self-contained page with live "
                                   "numbers; index.html lists them all), and NAME.pdf when "
                                   "pdflatex is on the path, with "
                                   "the figures they show beside them (NAME.graph.pdf, the "
                                   "computation graph; NAME.components, NAME.flops and "
                                   "NAME.memory .png/.pdf, plotted at the declaration's first "
                                   "example or the first --at). A declaration that fails is "
                                   "reported, its previous files are left untouched, and the "
                                   "command exits 2 after building the others.")
    b.add_argument("--src", default="derivations", help="declarations directory (default derivations)")
    b.add_argument("--out", default="build", help="output directory (default build)")
    b.add_argument("--docs", default=None, metavar="DIR",
                   help="the reference's Markdown pages, written with the HTML sheets into "
                        "OUT/docs/ and linked from the gallery (default: symflops's own "
                        "reference, whatever the working directory; see docs/html.md)")
    pdf = b.add_mutually_exclusive_group()
    pdf.add_argument("--pdf", dest="pdf", action="store_true", default=None,
                     help="require PDFs (fail when pdflatex is missing)")
    pdf.add_argument("--no-pdf", dest="pdf", action="store_false", help="skip the PDF step")
    b.add_argument("--format", action="append", choices=("md", "tex", "html"), default=None,
                   dest="formats", metavar="FORMAT",
                   help="write only this format (md, tex with its PDF, html with the gallery "
                        "index.html); repeatable; default all three")
    b.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="derive N declarations at once in worker processes (default 0: one "
                        "per core; never more than the cores or the declarations); output "
                        "is the same and written in name order")
    _sheet_options(b)
    c = sub.add_parser("check", help="decide claims about FLOPs, params and memory",
                       description=options.CHECK_DESCRIPTION, epilog=options.check_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    options.check_arguments(c)
    _unit_options(c)
    x = sub.add_parser("exercises", help="print exercises about a layer, with their answers",
                       description="Print 3 to 4 exercises about a layer, generated from the "
                                   "engine's facts (the cost of a backward rule, the tensors "
                                   "kept for the backward pass, what data-parallel replicas "
                                   "all-reduce, the memory of training, what doubling a dim "
                                   "does, the distance from 6N and its causes, what full "
                                   "recomputation costs), at one of the declaration's examples, "
                                   "then their answers, each computed by the engine. The same "
                                   "seed gives the same set; the sheet's set is seed 0.")
    _common(x)
    x.add_argument("--seed", type=int, default=0, metavar="N",
                   help="choose the exercises, the rule and the example with this seed "
                        "(default 0, the sheet's set)")
    v = sub.add_parser("verify", help="check the derived rules numerically and against PyTorch",
                       description="Check every derived backward rule against finite differences "
                                   "and, where PyTorch is installed, torch.autograd; compare FLOPs "
                                   "with FlopCounterMode and saved tensors with autograd's.")
    options.verify_arguments(v)
    g = sub.add_parser("grads", help="evaluate the derived gradients on arrays from an .npz",
                       description="Run the forward pass and the derived backward rules on the "
                                   "given arrays and write every gradient to an .npz, atomically.")
    options.grads_arguments(g)
    pl = sub.add_parser("plan", help="plan a training run: FLOPs, time, memory, decoding",
                        description=plan_command.DESCRIPTION, epilog=plan_command.EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    plan_command.add_arguments(pl)
    sh = sub.add_parser("shard", help="split a declaration over many devices: collectives, "
                                      "per-device FLOPs and memory, thresholds",
                        description=SHARD_DESCRIPTION, epilog=SHARD_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _shard_arguments(sh)
    rf = sub.add_parser("roofline", help="bytes moved, intensity and compute-bound thresholds "
                                         "per op, and time bounds on accelerators",
                        description=roofline_command.DESCRIPTION, epilog=roofline_command.EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    roofline_command.add_arguments(rf)
    ih = sub.add_parser("import-hf", help="write the declaration of a Hugging Face config.json",
                        description=importhf_command.DESCRIPTION,
                        epilog=importhf_command.EPILOG_HEAD + importhf_command.families_text(),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    importhf_command.add_arguments(ih)
    return parser


def _sheet_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--at", action="append", default=[], metavar="DIM=V,...",
                   help="add a numbers table at this configuration, e.g. "
                        "--at B=1048576,D=4096,F=16384 (repeatable; with build, a "
                        "configuration is used for the sheets whose dims it names exactly)")
    p.add_argument("--example", action="append", default=[], metavar="NAME",
                   help="show only this one of the declaration's examples ('examples:' block) "
                        "in the numbers table, before any --at column (repeatable; default: "
                        "every example; with build, used for the sheets that declare it, and "
                        "a name that no declaration has is refused)")
    p.add_argument("--templates", metavar="DIR",
                   help="a directory of Jinja templates that override the shipped ones by name")
    _unit_options(p)
