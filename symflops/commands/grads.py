"""``symflops grads FILE --inputs IN.npz --out OUT.npz``: the derived
gradients of given arrays (:mod:`symflops.checks.grads`), written to an
``.npz`` atomically through :mod:`symflops.commands.output`, and a line per
gradient written (on standard error when the archive goes to standard output).
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping

import numpy as np

from ..checks.grads import compute, load_arrays
from ..core.errors import printable
from ..derive.backward import derive
from ..declaration.reader import load
from .options import grads_arguments as add_arguments  # noqa: F401 (the parser's, light)
from .output import STDOUT, open_output


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically through :mod:`symflops.commands.output`
    (same-directory temp file, fsync, os.replace; ``-`` is standard output),
    so readers see the old file or the whole new one."""
    with open_output(path, "--out") as out:
        np.savez(out, **arrays)


def run(args: argparse.Namespace) -> int:
    layer = load(args.file)
    derivation = derive(layer)
    grads = compute(derivation, load_arrays(args.inputs))
    write_npz(args.out, grads)
    rows = [(name, "x".join(map(str, g.shape)) or "scalar") for name, g in grads.items()]
    width = max((len(n) for n, _ in rows), default=0)
    lines = [f"wrote {len(grads)} gradient{'s' if len(grads) != 1 else ''} of "
             f"{printable(layer.name)} to {printable(args.out)} (float64)"]
    lines += [f"  {n.ljust(width)}  {shape}" for n, shape in rows]
    report = sys.stderr if args.out == STDOUT else sys.stdout  # not into the archive
    report.write("\n".join(lines) + "\n")
    return 0
