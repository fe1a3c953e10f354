"""``symflops grads FILE --inputs IN.npz --out OUT.npz``: the derived
gradients of given arrays (:mod:`symflops.checks.grads`), written to an
``.npz`` atomically through :mod:`symflops.commands.output`, and a line per
gradient written (on standard error when the archive goes to standard output).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Mapping

from .output import STDOUT, open_output

if TYPE_CHECKING:
    import numpy as np


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically through :mod:`symflops.commands.output`
    (same-directory temp file, fsync, os.replace; ``-`` is standard output),
    so readers see the old file or the whole new one."""
    import numpy as np  # here, not above: the parser takes add_arguments without NumPy

    with open_output(path, "--out") as out:
        np.savez(out, **arrays)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a layer declaration (YAML), e.g. derivations/ffn.yaml")
    parser.add_argument("--inputs", required=True, metavar="IN.npz",
                        help="every input and parameter by name, and optionally the upstream "
                             "gradient of each output as d<output> (default: ones)")
    parser.add_argument("--out", required=True, metavar="OUT.npz",
                        help="where to write every derived gradient (d<tensor>), atomically "
                             "('-': standard output)")


def run(args: argparse.Namespace) -> int:
    # imported here, not above: the parser takes add_arguments without SymPy or NumPy
    from ..checks.grads import compute, load_arrays
    from ..declaration.reader import load
    from ..derive.backward import derive

    layer = load(args.file)
    derivation = derive(layer)
    grads = compute(derivation, load_arrays(args.inputs))
    write_npz(args.out, grads)
    rows = [(name, "x".join(map(str, g.shape)) or "scalar") for name, g in grads.items()]
    width = max((len(n) for n, _ in rows), default=0)
    lines = [f"wrote {len(grads)} gradient{'s' if len(grads) != 1 else ''} of {layer.name} "
             f"to {args.out} (float64)"]
    lines += [f"  {n.ljust(width)}  {shape}" for n, shape in rows]
    report = sys.stderr if args.out == STDOUT else sys.stdout  # not into the archive
    report.write("\n".join(lines) + "\n")
    return 0
