"""The options of ``symflops shard`` (light: the parser imports it at start-up;
the command itself is :mod:`symflops.commands.shard`)."""

from __future__ import annotations

import argparse

from ..core.hardware import PRESETS
from ..count.precision import DEFAULT_POLICY, POLICIES

DESCRIPTION = """\
Split a declaration over many devices. From a mesh and the placement of its
tensors (the declaration's 'parallel:' key, or the options below: strategy
presets, or --mesh with --place), derive for every op and backward rule the
collectives its shards need (the four sharded-matmul cases, row statistics of
a split reduction, lookups that gather or move rows), each with its axis, its
bytes V and its time (AllGather and ReduceScatter V/W, AllReduce 2V/W,
AllToAll V/(4W)); one device's FLOPs and memory per pipeline stage; the
traffic of each axis; the bubble; and the conditions under which the
collectives hide behind the compute, solved. Without values the figures are
polynomials in the dims and the mesh's sizes (a degree may be a name: --tp t).
"""

EPILOG = """\
examples:
  symflops shard derivations/decoder_block.yaml --tp t --sp
  symflops shard derivations/ffn.yaml --mesh X --place B=X --accelerator tpu-v5p
  symflops shard derivations/ffn.yaml --mesh X,Y --place 'X[X,Y]' --place 'W_in[X,Y]' \\
      --place 'W_out[Y,X]' --place 'H[X,Y]' --place 'Y[X,Y]'
  symflops shard derivations/llama.yaml --example Llama-2-7B --dp 8 --tp 4 --zero 1 --json

presets: """ + ", ".join(PRESETS)

STRATEGIES = ("dp", "tp", "pp", "cp", "ep", "micro_batches", "interleave")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a layer declaration (YAML)")
    p.add_argument("values", nargs="*", metavar="NAME=V",
                   help="every dim's value (and each degree given by name), for numbers")
    p.add_argument("--example", metavar="NAME", help="take the dims of the declaration's example "
                                                     "NAME")
    s = p.add_argument_group("strategies (each degree a whole number or a name)")
    for key, what in (("dp", "data-parallel degree"), ("tp", "tensor-parallel degree "
                                                       "(Megatron: heads, MLP hidden, vocabulary)"),
                      ("pp", "pipeline stages"), ("cp", "context-parallel degree (sequence)"),
                      ("ep", "expert-parallel degree (inside the data-parallel one)"),
                      ("micro-batches", "micro-batches per step (pipeline)"),
                      ("interleave", "model chunks per device (interleaved 1F1B)")):
        p.add_argument("--" + key, metavar="N", help=what)
    p.add_argument("--sp", action="store_true", help="sequence parallelism over the tp axis")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=None,
                   help="ZeRO stage over the data-parallel axes")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default=None,
                   help="pipeline schedule (default 1f1b)")
    e = p.add_argument_group("a mesh and placements instead")
    e.add_argument("--mesh", metavar="X=4,Y=2", help="the mesh's axes, innermost first, with "
                                                     "their sizes (X alone: a size named X)")
    e.add_argument("--place", action="append", default=[], metavar="SPEC",
                   help="DIM=AXES (every tensor's first axis over DIM, e.g. B=X or B=X+Y) or "
                        "'TENSOR[AX,...]' (one entry per axis, - for whole); repeatable")
    p.add_argument("--recompute", choices=("none", "full", "selective"), default=None,
                   help="activation recomputation (default: the declaration's)")
    p.add_argument("--accelerator", metavar="PRESET", help="times on this accelerator's links")
    p.add_argument("--compare", action="append", default=[], metavar="PRESET",
                   help="also give each threshold's value on this accelerator (repeatable)")
    p.add_argument("--precision", choices=sorted(POLICIES), default=None,
                   help=f"bytes per element policy (default: the declaration's, else "
                        f"{DEFAULT_POLICY})")
    p.add_argument("--json", action="store_true", help="one JSON object")


