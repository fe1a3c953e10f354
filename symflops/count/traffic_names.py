"""The roofline's named quantities: bytes moved, the decoding step's FLOPs
and arithmetic intensities, read off :func:`symflops.count.traffic.source`
(the ``traffic`` of :class:`symflops.count.names.Sources`).

:mod:`symflops.count.names` registers :data:`ROOFLINE` in its order; this
module imports neither it nor SymPy at import time.  A name's value is None
(the name does not apply) where the phase cannot be counted for the layer:
a decoding step needs ``tokens:``, ``sequences:`` and a causal op.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol


class Sources(Protocol):
    """What these quantities read of :class:`symflops.count.names.Sources`:
    its ``traffic``, ``(phase, convention) -> Traffic``, or None."""

    traffic: Callable[[str, str], Any] | None


def _traffic(x: Sources, phase: str, convention: str = "naive") -> Any:
    return None if x.traffic is None else x.traffic(phase, convention)


def _moved(x: Sources, phase: str, convention: str = "naive",
           which: str | None = None) -> Any:
    t = _traffic(x, phase, convention)
    if t is None:
        return None
    if which is None:
        return t.total("bytes")
    import sympy

    return sympy.expand(sum((e.bytes * e.copies for e in t.entries if e.pass_ == which),
                            sympy.Integer(0)))


def _work(x: Sources, phase: str, what: str) -> Any:
    t = _traffic(x, phase)
    return None if t is None else t.total(what)


def _intensity(x: Sources, phase: str, convention: str = "naive") -> Any:
    """Both buckets of FLOPs over the bytes, cancelled (not factored: a
    summary computes it for every layer, and factoring costs more)."""
    t = _traffic(x, phase, convention)
    if t is None or t.total("bytes") == 0:
        return None
    return _cancelled(t.total("work"), t.total("bytes"))


@functools.lru_cache(maxsize=64)
def _cancelled(work: Any, moved: Any) -> Any:
    """``work / moved`` cancelled, once per pair: the summaries of one layer
    under several precision policies share most of their ratios (llama's
    HTML sheet asked 58 cancellations of 22 distinct ratios)."""
    from ..core.polynomial import cancelled

    return cancelled(work, moved)


_PHASES = {"forward": "one inference pass (no loss; the prefill of a causal model)",
           "backward": "the backward rules of a training step",
           "total": "one training step, forward (with its loss) and backward",
           "decode": "one decoding step of every sequence at context S"}

Entry = tuple[str, str, str, str, Callable[[Sources], Any]]


def _entries() -> tuple[Entry, ...]:
    out: list[Entry] = []
    for k, phase, which in (("forward", "forward", None), ("backward", "training", "backward"),
                            ("total", "training", None), ("decode", "decode", None)):
        out.append((f"bytes_moved.{k}", "bytes",
                    "symflops roofline --phase ... --json: totals.bytes",
                    f"bytes read and written, every op a round trip (naive): {_PHASES[k]}",
                    lambda x, p=phase, w=which: _moved(x, p, "naive", w)))
    for k in ("forward", "decode"):
        out.append((f"bytes_moved_fused.{k}", "bytes",
                    "symflops roofline --convention fused --json: totals.bytes",
                    f"bytes moved when what only elementwise ops read stays on chip: "
                    f"{_PHASES[k]}", lambda x, p=k: _moved(x, p, "fused")))
    out.append(("flops.decode", "FLOPs", "symflops roofline --phase decode --json: totals.flops",
                "matrix-product FLOPs of one decoding step (the last position's work)",
                lambda x: _work(x, "decode", "flops")))
    out.append(("flops_elementwise.decode", "FLOPs",
                "symflops roofline --phase decode --json: totals.flops_elementwise",
                "elementwise FLOPs of one decoding step",
                lambda x: _work(x, "decode", "elementwise")))
    for k, phase in (("forward", "forward"), ("total", "training"), ("decode", "decode")):
        out.append((f"intensity.{k}", "FLOPs per byte",
                    "symflops roofline --json: totals.intensity",
                    f"FLOPs (both buckets) per byte moved (naive): {_PHASES[k]}",
                    lambda x, p=phase: _intensity(x, p)))
    for k in ("forward", "decode"):
        out.append((f"intensity_fused.{k}", "FLOPs per byte",
                    "symflops roofline --convention fused --json: totals.intensity",
                    f"FLOPs per byte moved (fused): {_PHASES[k]}",
                    lambda x, p=k: _intensity(x, p, "fused")))
    return tuple(out)


#: (name, kind, source, description, value) of each roofline quantity, in order.
ROOFLINE: tuple[Entry, ...] = _entries()
