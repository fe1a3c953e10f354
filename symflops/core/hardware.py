"""Accelerator presets for ``symflops plan --accelerator NAME``.

Each preset holds the vendor's printed figures for one accelerator: peak
*dense* bf16 tensor FLOP/s (the datasheets also print a figure twice as large
"with sparsity", for 2:4 structured-sparse matrices; a dense model never
reaches it, so it is not used), memory capacity and memory bandwidth.
Capacities are the datasheet's decimal gigabytes (80 GB = 80e9 bytes); the
driver reports a slightly different usable figure.

A peak is what the tensor cores could do, never what a run does: the planner
multiplies it by an MFU, or takes a sustained rate instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .errors import SymflopsError


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: Fraction     # dense bf16 tensor FLOP/s (not the 2:4-sparsity figure)
    memory_bytes: int        # datasheet capacity, decimal
    bandwidth: Fraction      # memory bandwidth, bytes/s
    source: str              # where the figures come from

    @property
    def description(self) -> str:
        return (f"{self.name}: {float(self.peak_flops) / 10**12:g} TFLOP/s dense bf16, "
                f"{self.memory_bytes / 10**9:g} GB, {float(self.bandwidth) / 10**12:g} TB/s")


_DENSE = "dense bf16 figure (the datasheet's sparsity figure is twice this)"

PRESETS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("a100-80gb-sxm", Fraction(312 * 10**12), 80 * 10**9, Fraction(2039 * 10**9),
                    f"NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: BF16 Tensor "
                    f"Core 312 TFLOPS, {_DENSE}; 80GB HBM2e; 2,039 GB/s"),
        Accelerator("h100-sxm", Fraction(989 * 10**12), 80 * 10**9, Fraction(3350 * 10**9),
                    f"NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 Tensor Core "
                    f"989 TFLOPS, {_DENSE}; 80GB; 3.35 TB/s"),
        Accelerator("h200", Fraction(989 * 10**12), 141 * 10**9, Fraction(4800 * 10**9),
                    f"NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 Tensor Core "
                    f"989 TFLOPS, {_DENSE}; 141GB HBM3e; 4.8 TB/s"),
        Accelerator("mi300x", Fraction(13074 * 10**11), 192 * 10**9, Fraction(5300 * 10**9),
                    f"AMD Instinct MI300X datasheet: peak BF16 1307.4 TFLOPs, {_DENSE}; "
                    f"192 GB HBM3; 5.3 TB/s peak memory bandwidth"),
    )
}

_ALIASES = {"a100": "a100-80gb-sxm", "a100-80gb": "a100-80gb-sxm", "h100": "h100-sxm",
            "h200-sxm": "h200"}


def preset(name: str) -> Accelerator:
    """The preset called ``name`` (case-insensitive; ``h100`` and ``a100`` are
    short for the SXM parts); SymflopsError listing the known ones otherwise.

    >>> preset("H100").peak_flops == 989 * 10**12
    True
    """
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PRESETS:
        raise SymflopsError(f"unknown accelerator preset {name!r}",
                            hint=f"use one of {', '.join(PRESETS)}, or give --peak, "
                                 f"--bandwidth yourself")
    return PRESETS[key]
