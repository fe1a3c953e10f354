"""Accelerator presets: the one hardware table of symflops.

``symflops plan --accelerator NAME``, the sheets, the roofline and the
many-devices arithmetic all read this table; nothing else types a peak or a
bandwidth.  Each preset holds the printed figures for one accelerator, each
with the document it comes from:

* peak *dense* tensor FLOP/s per precision.  The datasheets also print
  figures twice as large "with sparsity", for 2:4 structured-sparse matrices;
  a dense model never reaches them, so they are not used;
* memory capacity (the datasheet's decimal gigabytes: 80 GB = 80e9 bytes;
  the driver reports a slightly different usable figure) and memory
  bandwidth (HBM to the chip, bytes/s);
* the links a device talks to others over: its *scale-up* link (NVLink,
  Infinity Fabric, a TPU's inter-chip interconnect) and, where the vendor
  states one, its *scale-out* network per device.

A :class:`Link` gives the rate one device sends at in a ring collective
along one axis of a mesh (:attr:`Link.ring`), the bandwidth the many-devices
arithmetic divides bytes by, and says how it follows from the printed
figures:

* a GPU behind an NVLink switch sends through all its links at once; a
  ring collective is limited by what each GPU sends in one direction, half
  the bidirectional total the datasheet prints (H100: 900 GB/s printed,
  450 GB/s one way);
* a TPU axis with wraparound is a ring of chips each linked to its two
  neighbours, and a ring collective runs both ways round it: the rate is
  the bidirectional figure of one link (TPU v5e: 4.5e10 bytes/s one way per
  link, 9e10 both ways), as "How to Scale Your Model" counts it.

A peak is what the tensor cores could do, never what a run does: the planner
multiplies it by an MFU, or takes a sustained rate instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from .errors import SymflopsError

#: The precisions a peak may be given for (the element type the tensor cores multiply).
Compute = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]


@dataclass(frozen=True)
class Link:
    """A kind of link between devices, as one device sees it."""

    name: str                # "NVLink 4 (NVSwitch)", "ICI", ...
    ring: Fraction           # bytes/s one device sends in a ring collective along one mesh axis
    printed: str             # the printed figure the rate comes from, and how
    domain: int | None       # devices reachable over it in one hop or switch (None: not bounded here)
    source: str


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: Fraction     # dense bf16 tensor FLOP/s (not the 2:4-sparsity figure)
    memory_bytes: int        # datasheet capacity, decimal
    bandwidth: Fraction      # memory bandwidth, bytes/s
    source: str              # where the figures above come from
    peaks: tuple[tuple[Compute, Fraction], ...] = ()   # dense FLOP/s (OP/s for int8) per precision
    scale_up: Link | None = None
    scale_out: Link | None = None

    @property
    def description(self) -> str:
        return (f"{self.name}: {float(self.peak_flops) / 10**12:g} TFLOP/s dense bf16, "
                f"{self.memory_bytes / 10**9:g} GB, {float(self.bandwidth) / 10**12:g} TB/s")

    def peak(self, compute: Compute = "bf16") -> Fraction:
        """The dense peak for ``compute``; an error naming the precisions the
        table has when the vendor prints none for it.

        >>> preset("h100").peak("fp8") == 1979 * 10**12
        True
        """
        for name, value in self.peaks:
            if name == compute:
                return value
        if compute == "bf16":
            return self.peak_flops
        known = ", ".join(n for n, _ in self.peaks) or "bf16"
        raise SymflopsError(f"the {self.name} preset has no {compute} peak",
                            hint=f"its table has {known}; give --peak FLOP/s yourself")


_DENSE = "dense figure (the datasheet's sparsity figure is twice this)"
_T = 10**12
_G = 10**9


def _peaks(**figures: float | int) -> tuple[tuple[Compute, Fraction], ...]:
    """Peaks in TFLOP/s (TOP/s for int8), kept exact: ``bf16=989`` is 989e12."""
    return tuple((name, Fraction(str(value)) * _T) for name, value in figures.items())  # type: ignore[misc]


_NVIDIA_RING = "half the printed bidirectional total: a ring collective sends one way through the switch"

PRESETS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator(
            "a100-80gb-sxm", Fraction(312 * _T), 80 * _G, Fraction(2039 * _G),
            f"NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: BF16 Tensor "
            f"Core 312 TFLOPS, {_DENSE}; 80GB HBM2e; 2,039 GB/s",
            _peaks(fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
            Link("NVLink 3 (NVSwitch)", Fraction(300 * _G), f"600 GB/s; {_NVIDIA_RING}", 8,
                 "NVIDIA A100 datasheet: NVIDIA NVLink 600 GB/s (SXM)"),
            Link("InfiniBand HDR, one 200 Gb/s NIC per GPU", Fraction(25 * _G),
                 "200 Gb/s = 25 GB/s one way", None,
                 "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 200 Gb/s HDR InfiniBand "
                 "for 8 GPUs")),
        Accelerator(
            "h100-sxm", Fraction(989 * _T), 80 * _G, Fraction(3350 * _G),
            f"NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 Tensor Core "
            f"989 TFLOPS, {_DENSE}; 80GB; 3.35 TB/s",
            _peaks(fp32=67, tf32=494.5, bf16=989, fp16=989, fp8=1979, int8=1979),
            Link("NVLink 4 (NVSwitch)", Fraction(450 * _G), f"900 GB/s; {_NVIDIA_RING}", 8,
                 "NVIDIA H100 datasheet, SXM column: NVIDIA NVLink 900 GB/s"),
            Link("InfiniBand NDR, one 400 Gb/s NIC per GPU", Fraction(50 * _G),
                 "400 Gb/s = 50 GB/s one way", None,
                 "NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 400 Gb/s InfiniBand "
                 "for 8 GPUs")),
        Accelerator(
            "h200", Fraction(989 * _T), 141 * _G, Fraction(4800 * _G),
            f"NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 Tensor Core "
            f"989 TFLOPS, {_DENSE}; 141GB HBM3e; 4.8 TB/s",
            _peaks(fp32=67, tf32=494.5, bf16=989, fp16=989, fp8=1979, int8=1979),
            Link("NVLink 4 (NVSwitch)", Fraction(450 * _G), f"900 GB/s; {_NVIDIA_RING}", 8,
                 "NVIDIA H200 datasheet, SXM column: NVIDIA NVLink 900 GB/s"),
            Link("InfiniBand NDR, one 400 Gb/s NIC per GPU", Fraction(50 * _G),
                 "400 Gb/s = 50 GB/s one way", None,
                 "NVIDIA DGX H200 datasheet: 8x single-port ConnectX-7 400 Gb/s for 8 GPUs")),
        Accelerator(
            "b200", Fraction(2250 * _T), 180 * _G, Fraction(8000 * _G),
            f"NVIDIA Blackwell datasheets, HGX B200 at 1,000 W: BF16 Tensor Core 2.25 PFLOPS, "
            f"{_DENSE}; DGX B200: 1,440 GB HBM3e and 64 TB/s for 8 GPUs, i.e. 180 GB and "
            f"8 TB/s each",
            _peaks(fp32=80, tf32=1100, bf16=2250, fp16=2250, fp8=4500, int8=4500),
            Link("NVLink 5 (NVSwitch)", Fraction(900 * _G), f"1.8 TB/s; {_NVIDIA_RING}", 8,
                 "NVIDIA DGX B200 datasheet: fifth-generation NVLink, 1.8 TB/s per GPU "
                 "(14.4 TB/s for 8)"),
            Link("InfiniBand NDR, one 400 Gb/s NIC per GPU", Fraction(50 * _G),
                 "400 Gb/s = 50 GB/s one way", None,
                 "NVIDIA DGX B200 datasheet: 8x single-port ConnectX-7 400 Gb/s for 8 GPUs")),
        Accelerator(
            "mi300x", Fraction(13074 * 10**11), 192 * _G, Fraction(5300 * _G),
            f"AMD Instinct MI300X datasheet: peak BF16 1307.4 TFLOPs, {_DENSE}; "
            f"192 GB HBM3; 5.3 TB/s peak memory bandwidth",
            _peaks(fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9),
            Link("Infinity Fabric (fully connected, 8 GPUs)", Fraction(448 * _G),
                 "7 links x 128 GB/s = 896 GB/s peer-to-peer, half of it one way", 8,
                 "AMD Instinct MI300X datasheet: 896 GB/s aggregate peak Infinity Fabric "
                 "bandwidth, 7 links x 128 GB/s"),
            None),
        Accelerator(
            "tpu-v5e", Fraction(197 * _T), 16 * _G, Fraction(819 * _G),
            "Google Cloud TPU v5e documentation, key chip specifications: 197 TFLOPs bf16, "
            "393 TOPs int8 (the dense peaks: TPUs print no sparsity figure); HBM2 16 GB, "
            "819 GBps",
            _peaks(bf16=197, int8=393),
            Link("ICI, one axis of a 2D torus with wraparound", Fraction(9 * 10**10),
                 "4.5e10 bytes/s one way per link; a ring along an axis sends both ways: 9e10", 256,
                 "How to Scale Your Model (jax-ml/scaling-book at 0819a7d), TPU chapter: ICI "
                 "4.5e10 bytes/s one way, 9e10 bidirectional per link for TPU v5e; 256 chips "
                 "a pod (Google Cloud TPU v5e documentation)"),
            None),
        Accelerator(
            "tpu-v5p", Fraction(459 * _T), 95 * _G, Fraction(2765 * _G),
            "Google Cloud TPU v5p documentation, key specifications: 459 TFLOPs bf16 (the "
            "dense peak: TPUs print no sparsity figure); HBM2e 95 GB, 2765 GBps; int8 "
            "9.18e14 from How to Scale Your Model (jax-ml/scaling-book at 0819a7d), TPU chapter",
            _peaks(bf16=459, int8=918),
            Link("ICI, one axis of a 3D torus with wraparound", Fraction(18 * 10**10),
                 "9e10 bytes/s one way per link; a ring along an axis sends both ways: 1.8e11", 8960,
                 "How to Scale Your Model (jax-ml/scaling-book at 0819a7d), TPU chapter: ICI "
                 "9e10 bytes/s one way, 1.8e11 bidirectional per link for TPU v5p; 8,960 chips "
                 "a pod (Google Cloud TPU v5p documentation)"),
            Link("data-center network (DCN)", Fraction(625 * 10**7), "50 Gb/s = 6.25e9 bytes/s",
                 None, "Google Cloud TPU v5p documentation: DCN bandwidth per chip 50 Gbps")),
    )
}

_ALIASES = {"a100": "a100-80gb-sxm", "a100-80gb": "a100-80gb-sxm", "h100": "h100-sxm",
            "h200-sxm": "h200", "b200-sxm": "b200", "v5e": "tpu-v5e", "v5p": "tpu-v5p",
            "tpuv5e": "tpu-v5e", "tpuv5p": "tpu-v5p"}


def preset(name: str) -> Accelerator:
    """The preset called ``name`` (case-insensitive; ``h100`` and ``a100`` are
    short for the SXM parts, ``v5e`` and ``v5p`` for the TPUs); SymflopsError
    listing the known ones otherwise.

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
