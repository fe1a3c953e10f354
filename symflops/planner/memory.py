"""Bytes: the training memory of one accelerator under a precision policy and a
ZeRO stage (:func:`memory`), and bandwidth-bound decoding (:func:`inference`),
with :mod:`symflops.planner.plan`'s conventions.  Pure functions of frozen
dataclasses, exact in integers and fractions.

The decoding bytes are :mod:`symflops.count.inference`'s functions, the ones
``symflops derive`` reports; that module needs SymPy, so it is imported when
decoding is asked for, not at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..core.errors import SymflopsError
from ..count.decoding import decode_step_bytes, weights_read_bytes
from ..count.precision import Precision
from .records import Model, Number, show_exact


# --- memory -----------------------------------------------------------------

#: The components each ZeRO stage shards over the data-parallel degree.
ZERO_SHARDS = {
    0: frozenset(),
    1: frozenset({"optimizer", "master"}),
    2: frozenset({"optimizer", "master", "grads"}),
    3: frozenset({"optimizer", "master", "grads", "weights"}),
}


@dataclass(frozen=True)
class Memory:
    """Training memory of one accelerator, in bytes."""

    precision: Precision
    zero: int
    dp: int
    weights: Fraction
    grads: Fraction
    optimizer: Fraction        # optimizer states (Adam m and v)
    master: Fraction           # master copy of the trainable weights (0 when none)
    activations: int | None    # one micro-batch's saved activations; None: unknown
    micro_batch: int
    seq_len: int | None
    capacity: int | None       # the accelerator's memory, when known
    #: buffers (role: buffer) at the weights' width, on every accelerator (not
    #: sharded); None without buffers, or when they depend on an unknown length
    buffers: int | None = None
    #: set when the figures are one device's from the placements of a many-devices
    #: plan (:mod:`symflops.planner.devices`): which device and strategies
    devices: str = ""

    @property
    def states(self) -> Fraction:
        """Weights, gradients, optimizer state and master weights."""
        return self.weights + self.grads + self.optimizer + self.master

    @property
    def total(self) -> Fraction:
        """States plus buffers plus activations (activations counted as 0 when unknown)."""
        return self.states + (self.buffers or 0) + (self.activations or 0)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity


def memory(model: Model, precision: Precision, zero: int = 0, dp: int = 1, micro_batch: int = 1,
           seq_len: int | None = None, capacity: int | None = None) -> Memory:
    """Per-accelerator memory under a precision policy and ZeRO stage ``zero``
    with data-parallel degree ``dp``; activations for ``micro_batch`` sequences
    of ``seq_len`` tokens when the model knows them."""
    if zero not in ZERO_SHARDS:
        raise SymflopsError(f"unknown ZeRO stage {zero!r}", hint="use 0, 1, 2 or 3")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise SymflopsError(f"the data-parallel degree must be a positive whole number, got "
                            f"{dp!r}", hint="give e.g. --dp 64")
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise SymflopsError(f"--micro-batch must be a positive whole number, got {micro_batch!r}",
                            hint="give sequences per micro-batch, e.g. --micro-batch 1")
    shards = ZERO_SHARDS[zero]

    def per_accelerator(name: str, count: int) -> Fraction:
        return Fraction(count, dp if name in shards else 1)

    p, n, trainable = precision, model.params_total, model.params_trainable
    activations = None
    if model.activation_bytes is not None and seq_len is not None:
        activations = model.activation_bytes(micro_batch, seq_len)
    elements = model.buffers(seq_len) if model.buffers is not None else None
    return Memory(
        precision=p, zero=zero, dp=dp,
        weights=per_accelerator("weights", p.params * n),
        grads=per_accelerator("grads", p.grads * trainable),
        optimizer=per_accelerator("optimizer", p.optimizer_states * p.optimizer * trainable),
        master=per_accelerator("master", p.master * trainable),
        activations=activations, micro_batch=micro_batch, seq_len=seq_len, capacity=capacity,
        buffers=None if elements is None else p.params * elements)


# --- decoding -----------------------------------------------------------------

@dataclass(frozen=True)
class Inference:
    """Bandwidth-bound decoding on one accelerator holding the whole model.

    A decoding step of ``batch`` sequences reads the weights a token reads
    once and each sequence's KV cache once, at full ``context`` (the last,
    slowest step of a generation): :func:`symflops.count.decoding.decode_step_bytes`."""

    context: int | None
    batch: int
    weights_bytes: int              # all weights, stored
    weights_read: int               # the weights a token reads, once per step
    kv_per_token: int | None        # K and V of all layers, one token of context
    bandwidth: Fraction | None
    capacity: int | None

    @property
    def kv_per_sequence(self) -> int | None:
        if self.kv_per_token is None or self.context is None:
            return None
        return self.context * self.kv_per_token

    @property
    def kv_batch(self) -> int | None:
        return None if self.kv_per_sequence is None else self.batch * self.kv_per_sequence

    @property
    def step_bytes(self) -> int:
        """Bytes read per decoding step: weights once + each sequence's cache
        (weights only when the cache is unknown: then a lower bound)."""
        return decode_step_bytes(self.weights_read, self.kv_per_sequence or 0, self.batch)

    @property
    def bytes_per_token(self) -> Fraction:
        return Fraction(self.step_bytes, self.batch)

    @property
    def step_seconds(self) -> Fraction | None:
        return None if self.bandwidth is None else self.step_bytes / self.bandwidth

    @property
    def tokens_per_s(self) -> Fraction | None:
        """Tokens per second over the whole batch: b × bandwidth / step bytes."""
        return None if self.bandwidth is None else self.batch * self.bandwidth / self.step_bytes

    @property
    def memory(self) -> int:
        """Weights plus the batch's cache (weights only when the cache is unknown)."""
        return self.weights_bytes + (self.kv_batch or 0)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.memory <= self.capacity


def inference(model: Model, precision: Precision, context: int | None, batch: int = 1,
              bandwidth: Number | None = None, capacity: int | None = None) -> Inference:
    """Decoding figures; weights stored at the policy's bytes per parameter."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SymflopsError(f"--decode-batch must be a positive whole number, got {batch!r}",
                            hint="give sequences decoded together, e.g. --decode-batch 8")
    if context is not None and (not isinstance(context, int) or context < 1):
        raise SymflopsError(f"--context must be a positive whole number, got {context!r}",
                            hint="give tokens of context, e.g. --context 4096")
    if bandwidth is not None and not bandwidth > 0:
        raise SymflopsError(f"--bandwidth must be positive, got {show_exact(bandwidth)}",
                            hint="give bytes/s, e.g. --bandwidth 3.35e12")
    return Inference(context=context, batch=batch,
                     weights_bytes=precision.params * model.params_total,
                     weights_read=weights_read_bytes(model.read, precision),
                     kv_per_token=model.kv_cache_bytes_per_token,
                     bandwidth=None if bandwidth is None else Fraction(bandwidth),
                     capacity=capacity)
