"""The run planner behind ``symflops plan``: compute, time, memory and decoding.

Everything here is a pure function of frozen dataclasses, exact in Python
integers and fractions (the FLOPs of a large run exceed a float's 53-bit
mantissa). The planner knows a model only through :class:`Model`: what it
costs per token, what it stores, and the formula behind each figure. Three
functions fill one:

- :func:`model_from_params` -- a bare parameter count (dense, 6N per token,
  attention not counted);
- :func:`model_from_declaration` -- a whole-model declaration, its counts
  derived by the engine (:mod:`symflops.planner.model`);
- :func:`model_from_architecture` -- a Hugging Face config read by
  :mod:`symflops.planner.hfconfig`, mapped onto a shipped declaration. A model whose
  attention has a window (Mistral's ``sliding_window``) carries a
  :class:`Window`: a plan longer than it is refused.

Conventions (also printed with every plan):

- One multiply-add = 2 FLOPs. *Model* FLOPs count the useful work of a
  training token (6N plus attention); *executed* FLOPs add what a recompute
  policy runs again (full recomputation: the forward, 2N more).
- MFU is model FLOPs / (time x accelerators x peak), so the time of a run is
  ``C_model / (accelerators x peak x MFU)``. A ``sustained`` rate per
  accelerator counts useful (model) work the same way: time =
  ``C_model / (accelerators x sustained)``.
- ZeRO with data-parallel degree d: stage 1 shards the optimizer state and
  the master weights over d, stage 2 also the gradients, stage 3 (FSDP full
  shard) also the weights. Activations are never sharded.
- Decoding reads memory: a step of b sequences reads the weights a token reads
  once (the shared weights, the k of M experts it is routed to, one row of each
  lookup table: :attr:`Model.read`) and each sequence's KV cache once, at full
  context; bytes per token = (weights + b x cache) / b, and tokens/s =
  b x bandwidth / (weights + b x cache). The step's bytes are
  :func:`symflops.count.inference.decode_step_bytes`, the computation behind
  ``symflops derive``'s ``bytes_per_decoded_token``; exact for b = 1, a lower
  bound for larger b.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from ..core.errors import SymflopsError
from .hardware import Accelerator
from ..count.inference import decode_step_bytes, weights_read_bytes
from ..count.precision import Precision

if TYPE_CHECKING:
    from .hfconfig import Architecture

#: Recompute (activation checkpointing) policies.
RECOMPUTE = ("none", "full", "selective")

Number = int | Fraction

ATTENTION_NOT_COUNTED = "6N, attention not counted: give a declaration for the attention term"
NO_ACTIVATIONS = "not known for a bare parameter count"
NO_KV_CACHE = "not known for a bare parameter count"


@dataclass(frozen=True)
class Formula:
    """How a figure was produced: ``text`` symbolically ("6 N"), ``numbers`` with
    the values put in ("6 × 7e9"; empty when not given), and a caveat."""

    text: str
    numbers: str = ""
    note: str = ""


@dataclass(frozen=True)
class TokenFlops:
    """FLOPs per token at one sequence length, each with its formula.

    ``formulas`` has the keys ``model``, ``executed``, ``attention`` and
    ``inference``."""

    model: Number        # useful training FLOPs per token: 6N + attention (fwd + bwd)
    executed: Number     # executed under the recompute policy (full: 8N + ...)
    attention: Number    # the attention part of ``model`` (0 when not counted)
    inference: Number    # forward FLOPs per processed token: 2N + attention forward
    formulas: Mapping[str, Formula] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """An attention window: the model's counts (causal attention over the whole
    context) hold only for sequences of at most ``tokens``, where windowed and
    causal attention coincide. ``context`` is the longest sequence the model
    takes, the plan's length when none is given; ``source`` names what sets
    the window (``config.json: sliding_window = 4096``)."""

    tokens: int
    context: int
    source: str

    def check(self, length: int, what: str) -> None:
        if length > self.tokens:
            raise SymflopsError(
                f"{self.source} is shorter than the {show_exact(length)} tokens of {what}: "
                "symflops counts causal attention over the whole context, and windowed "
                "attention costs less beyond the window",
                hint=f"plan with --seq (and --context) at most {show_exact(self.tokens)}, where "
                     "windowed and causal attention coincide, or set sliding_window to null "
                     "in the config to plan full causal attention (--plot draws lengths up to "
                     "2^17: leave it out)")


@dataclass(frozen=True)
class Model:
    """What the planner needs to know about a model, each number with the
    formula that produced it.

    ``flops_per_token(seq_len)`` gives the training and inference FLOPs per
    token at a sequence length; it is called with None only when
    ``counts_attention`` is False (nothing then depends on the length).
    ``activation_bytes(micro_batch_sequences, seq_len)`` is the memory of the
    activations one micro-batch keeps for its backward pass under the
    recompute policy (None: unknown). ``kv_cache_bytes_per_token`` is the K and
    V cache of all layers for one token of context (None: unknown).
    ``params_read`` is what one decoded token reads of the parameters (None:
    every active parameter once, as for a dense model known by its count).
    ``formulas`` may hold ``params_total``, ``params_active``, ``params_read``,
    ``params_trainable``, ``activation_bytes`` and ``kv_cache_bytes_per_token``.
    """

    name: str
    params_total: int         # all parameters (MoE: every expert)
    params_active: int        # parameters a token passes through (MoE: its k experts)
    params_trainable: int     # parameters that get gradients and optimizer state (LoRA: adapters)
    flops_per_token: Callable[[int | None], TokenFlops]
    activation_bytes: Callable[[int, int], int] | None
    kv_cache_bytes_per_token: int | None
    formulas: Mapping[str, Formula] = field(default_factory=dict)
    recompute: str = "none"
    counts_attention: bool = False   # False: flops_per_token has no attention term
    params_read: int | None = None   # parameter elements a decoded token reads
    window: Window | None = None     # the counts hold up to this many tokens (None: any)

    @property
    def read(self) -> int:
        """Parameter elements one decoded token reads (MoE: its k experts; one
        row of each lookup table)."""
        return self.params_active if self.params_read is None else self.params_read


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise SymflopsError(f"unknown recompute policy {recompute!r}",
                            hint=f"use one of {', '.join(RECOMPUTE)}")


def show_exact(x: Number) -> str:
    """A number as written by hand: ``7e9``, ``2e12``, ``4,096``, ``0.4``, ``1.3074e15``."""
    x = Fraction(x)
    if x.denominator == 1 and abs(x) < 10**7:
        return f"{int(x):,}"
    if x.denominator != 1:
        return f"{float(x):.6g}"
    for digits in range(1, 17):
        mantissa, exponent = f"{float(x):.{digits - 1}e}".split("e")
        if Fraction(mantissa) * Fraction(10) ** int(exponent) == x:
            break
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent)}"


def model_from_params(n: int, recompute: str = "none") -> Model:
    """A dense model known only by its parameter count ``n``.

    Model FLOPs 6N per token (2N forward, 4N backward); executed 6N, or 8N
    under full recomputation (the forward runs a second time); no attention
    term; inference 2N per token. Activations and KV cache are unknown.

    >>> m = model_from_params(7 * 10**9, "full")
    >>> f = m.flops_per_token(None)
    >>> (f.model, f.executed, f.inference)
    (42000000000, 56000000000, 14000000000)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SymflopsError(f"the parameter count must be a positive whole number, got {n!r}",
                            hint="give e.g. --params 7e9")
    _check_recompute(recompute)
    shown = show_exact(n)
    executed = {
        "none": (6, Formula("6 N", f"6 × {shown}", "no recomputation: executed = model")),
        "full": (8, Formula("8 N", f"8 × {shown}", "full recomputation: the forward (2N) "
                                                   "runs again during the backward pass")),
        "selective": (6, Formula("6 N", f"6 × {shown}",
                                 "selective recomputation re-runs only the attention core, "
                                 "which a bare parameter count does not include")),
    }[recompute]
    flops = TokenFlops(
        model=6 * n, executed=executed[0] * n, attention=0, inference=2 * n,
        formulas={
            "model": Formula("6 N", f"6 × {shown}", ATTENTION_NOT_COUNTED),
            "executed": executed[1],
            "attention": Formula("0", "", "attention not counted: give a declaration for "
                                          "the attention term"),
            "inference": Formula("2 N", f"2 × {shown}", "forward only; attention not counted"),
        })

    def flops_per_token(seq_len: int | None) -> TokenFlops:
        return flops

    given = Formula("N", shown, "given")
    return Model(name=f"dense model, N = {shown} parameters", params_total=n,
                 params_active=n, params_trainable=n, flops_per_token=flops_per_token,
                 activation_bytes=None, kv_cache_bytes_per_token=None,
                 formulas={"params_total": given, "params_active": given,
                           "params_trainable": given},
                 recompute=recompute, counts_attention=False)


def model_from_declaration(path: str | os.PathLike, dims: Mapping[str, Number], recompute: str,
                           precision: Precision) -> Model:
    """A whole-model declaration (YAML) at the given dims (all but the
    sequence length ``S`` and the micro-batch ``B``), under a recompute policy
    and a precision policy: see :mod:`symflops.planner.model`."""
    from .model import model_from_declaration as from_declaration

    _check_recompute(recompute)
    return from_declaration(path, dims, recompute, precision)


def model_from_architecture(arch: Architecture, recompute: str, precision: Precision) -> Model:
    """A model read from a Hugging Face config, mapped onto a shipped declaration."""
    from .model import model_from_architecture as from_architecture

    _check_recompute(recompute)
    return from_architecture(arch, recompute, precision)


# --- the run ----------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    tokens: int                 # training tokens processed in this phase
    seq_len: int | None         # sequence length (None: not given)


@dataclass(frozen=True)
class Run:
    phases: tuple[Phase, ...]
    formula: Formula            # how the token count was given

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.phases)

    @property
    def longest(self) -> int | None:
        lengths = [p.seq_len for p in self.phases if p.seq_len is not None]
        return max(lengths) if lengths else None


def _positive_int(value: Number, what: str, example: str) -> int:
    if not (Fraction(value).denominator == 1 and value > 0):
        raise SymflopsError(f"{what} must be a positive whole number, got {show_exact(value)}",
                            hint=f"give e.g. {example}")
    return int(value)


def run_from_tokens(tokens: Number, seq_len: Number | None = None) -> Run:
    """A run of ``tokens`` training tokens at one sequence length."""
    d = _positive_int(tokens, "--tokens", "--tokens 2e12")
    t = None if seq_len is None else _positive_int(seq_len, "--seq", "--seq 4096")
    return Run((Phase(d, t),), Formula("D", show_exact(d), "given"))


def run_from_steps(steps: Number, batch: Number, seq_len: Number) -> Run:
    """``steps`` optimizer steps of ``batch`` sequences of ``seq_len`` tokens: D = S B T."""
    s = _positive_int(steps, "--steps", "--steps 500000")
    b = _positive_int(batch, "--batch", "--batch 1024 (sequences per step)")
    t = _positive_int(seq_len, "--seq", "--seq 4096")
    return Run((Phase(s * b * t, t),),
               Formula("D = S B T", f"{show_exact(s)} × {show_exact(b)} × {show_exact(t)}",
                       "steps × sequences per step × tokens per sequence"))


def run_from_phases(phases: Sequence[tuple[Number, Number]]) -> Run:
    """Phases of (tokens, sequence length), e.g. long-context extension at the end."""
    if not phases:
        raise SymflopsError("no phase given", hint="give --phase TOKENS@SEQ, e.g. 1.2e13@4096")
    parts = tuple(Phase(_positive_int(d, "the tokens of a --phase", "--phase 1.2e13@4096"),
                        _positive_int(t, "the sequence length of a --phase",
                                      "--phase 1.2e13@4096"))
                  for d, t in phases)
    return Run(parts, Formula("D = Σ D_i", " + ".join(show_exact(p.tokens) for p in parts),
                              "the phases' tokens"))


# --- compute ----------------------------------------------------------------

@dataclass(frozen=True)
class PhaseFlops:
    phase: Phase
    per_token: TokenFlops

    @property
    def model(self) -> Number:
        return self.phase.tokens * self.per_token.model

    @property
    def executed(self) -> Number:
        return self.phase.tokens * self.per_token.executed

    @property
    def attention(self) -> Number:
        return self.phase.tokens * self.per_token.attention


@dataclass(frozen=True)
class Compute:
    phases: tuple[PhaseFlops, ...]

    @property
    def tokens(self) -> int:
        return sum(p.phase.tokens for p in self.phases)

    @property
    def model(self) -> Number:
        """C: model (useful) FLOPs of the run, the sum over its phases."""
        return sum(p.model for p in self.phases)

    @property
    def executed(self) -> Number:
        return sum(p.executed for p in self.phases)

    @property
    def attention(self) -> Number:
        return sum(p.attention for p in self.phases)

    @property
    def per_token(self) -> Fraction:
        """Model FLOPs per token, averaged over the run's phases."""
        return Fraction(self.model, self.tokens)

    @property
    def executed_per_token(self) -> Fraction:
        return Fraction(self.executed, self.tokens)

    @property
    def attention_share(self) -> Fraction:
        """The part of the model FLOPs that attention accounts for."""
        return Fraction(self.attention, self.model)


def token_flops(model: Model, seq_len: int | None) -> TokenFlops:
    """The model's FLOPs per token at ``seq_len``; an error when the model has an
    attention term and no length is known."""
    if seq_len is None and model.counts_attention:
        raise SymflopsError("the attention term depends on the sequence length, which was "
                            "not given", hint="give --seq T (or --phase TOKENS@SEQ)")
    if seq_len is not None and model.window is not None:
        model.window.check(seq_len, "a sequence")
    return model.flops_per_token(seq_len)


def compute(model: Model, run: Run) -> Compute:
    """Model and executed FLOPs of a run: each phase's tokens times its per-token
    FLOPs at its sequence length, summed."""
    return Compute(tuple(PhaseFlops(p, token_flops(model, p.seq_len)) for p in run.phases))


# --- time -------------------------------------------------------------------

@dataclass(frozen=True)
class Rate:
    """How fast the accelerators do useful work."""

    accelerators: int
    peak: Fraction | None        # per accelerator, FLOP/s (dense)
    mfu: Fraction | None         # model FLOPs utilisation, in (0, 1]
    sustained: Fraction | None   # per accelerator, useful (model) FLOP/s

    @property
    def known(self) -> bool:
        """Whether a useful rate is known (an MFU with a peak, or a sustained rate)."""
        return self.sustained is not None or self.mfu is not None

    @property
    def per_accelerator(self) -> Fraction | None:
        """Useful FLOP/s of one accelerator: peak × MFU, or the sustained rate."""
        if self.sustained is not None:
            return self.sustained
        if self.mfu is not None:
            return self.peak * self.mfu
        return None

    @property
    def delivered(self) -> Fraction | None:
        """Useful FLOP/s of all the accelerators together."""
        return None if not self.known else self.accelerators * self.per_accelerator

    @property
    def implied_mfu(self) -> Fraction | None:
        """The given MFU, or sustained / peak when both are known."""
        if self.mfu is not None:
            return self.mfu
        if self.sustained is not None and self.peak is not None:
            return self.sustained / self.peak
        return None


def rate(accelerators: int, peak: Number | None = None, mfu: Number | None = None,
         sustained: Number | None = None) -> Rate:
    """Check and gather the throughput options (see the module's conventions)."""
    if isinstance(accelerators, bool) or not isinstance(accelerators, int) or accelerators < 1:
        raise SymflopsError(f"the accelerator count must be a positive whole number, got "
                            f"{accelerators!r}", hint="give e.g. -n 1024")
    if mfu is not None and sustained is not None:
        raise SymflopsError("--mfu and --sustained both given",
                            hint="give either an MFU (with a peak or a preset) or a sustained "
                                 "rate per accelerator, not both")
    if peak is not None and not peak > 0:
        raise SymflopsError(f"--peak must be positive, got {show_exact(peak)}",
                            hint="give FLOP/s per accelerator, e.g. --peak 989e12")
    if mfu is not None:
        if not 0 < mfu <= 1:
            raise SymflopsError(f"--mfu must lie in (0, 1], got {show_exact(mfu)}",
                                hint="give a fraction of peak such as 0.4 (or 40%)")
        if peak is None:
            raise SymflopsError("--mfu needs a peak FLOP/s",
                                hint="give --accelerator PRESET or --peak FLOP/s")
    if sustained is not None:
        if not sustained > 0:
            raise SymflopsError(f"--sustained must be positive, got {show_exact(sustained)}",
                                hint="give useful FLOP/s per accelerator, e.g. --sustained 4e14")
        if peak is not None and sustained > peak:
            raise SymflopsError(f"--sustained {show_exact(sustained)} FLOP/s exceeds the peak "
                                f"{show_exact(peak)} FLOP/s",
                                hint="a sustained rate is a part of the peak; check the units")
    frac = lambda x: None if x is None else Fraction(x)  # noqa: E731
    return Rate(accelerators, frac(peak), frac(mfu), frac(sustained))


@dataclass(frozen=True)
class Time:
    seconds: Fraction
    accelerators: int
    hfu: Fraction | None     # executed FLOPs / (time × accelerators × peak), when the peak is known

    @property
    def hours(self) -> Fraction:
        return self.seconds / 3600

    @property
    def days(self) -> Fraction:
        return self.seconds / 86400

    @property
    def accelerator_seconds(self) -> Fraction:
        return self.accelerators * self.seconds

    @property
    def accelerator_hours(self) -> Fraction:
        return self.accelerator_seconds / 3600


def timing(c: Compute, r: Rate) -> Time:
    """time = C_model / delivered useful FLOP/s (MFU counts model FLOPs)."""
    seconds = Fraction(c.model) / r.delivered
    hfu = None
    if r.peak is not None:
        hfu = Fraction(c.executed) / (seconds * r.accelerators * r.peak)
    return Time(seconds, r.accelerators, hfu)


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

    @property
    def states(self) -> Fraction:
        """Weights, gradients, optimizer state and master weights."""
        return self.weights + self.grads + self.optimizer + self.master

    @property
    def total(self) -> Fraction:
        """States plus activations (activations counted as 0 when unknown)."""
        return self.states + (self.activations or 0)

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
    return Memory(
        precision=p, zero=zero, dp=dp,
        weights=per_accelerator("weights", p.params * n),
        grads=per_accelerator("grads", p.grads * trainable),
        optimizer=per_accelerator("optimizer", p.optimizer_states * p.optimizer * trainable),
        master=per_accelerator("master", p.master * trainable),
        activations=activations, micro_batch=micro_batch, seq_len=seq_len, capacity=capacity)


# --- decoding -----------------------------------------------------------------

@dataclass(frozen=True)
class Inference:
    """Bandwidth-bound decoding on one accelerator holding the whole model.

    A decoding step of ``batch`` sequences reads the weights a token reads
    once and each sequence's KV cache once, at full ``context`` (the last,
    slowest step of a generation): :func:`symflops.count.inference.decode_step_bytes`."""

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


# --- the whole plan -------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    model: Model
    precision: Precision
    accelerator: Accelerator | None
    seq_len: int | None               # for per-token figures and activations
    token_flops: TokenFlops | None    # per token at seq_len (None: depends on an unknown length)
    run: Run | None
    compute: Compute | None
    rate: Rate | None
    time: Time | None
    memory: Memory
    inference: Inference | None


def make_plan(model: Model, precision: Precision, *, run: Run | None = None,
              seq_len: int | None = None, throughput: Rate | None = None,
              accelerator: Accelerator | None = None, zero: int = 0, dp: int | None = None,
              micro_batch: int = 1, decode: bool = False, context: int | None = None,
              decode_batch: int = 1, bandwidth: Number | None = None) -> Plan:
    """Every figure of a plan. ``seq_len`` defaults to the run's longest phase;
    ``dp`` to the accelerator count; the capacity and bandwidth to the
    accelerator's; the decoding context to ``seq_len``."""
    if run is not None and seq_len is None:
        seq_len = run.longest
    if model.window is not None:
        longest = max((n for n in (seq_len, context if decode else None) if n is not None),
                      default=None)
        if longest is None:
            model.window.check(model.window.context, "context the model takes (give --seq)")
        else:
            model.window.check(longest, "the plan's sequences" if longest == seq_len
                               else "decoding context")
    accelerators = throughput.accelerators if throughput is not None else 1
    if dp is None:
        dp = accelerators
    elif dp > accelerators:
        raise SymflopsError(f"--dp {dp} exceeds the {accelerators} accelerator(s)",
                            hint="the data-parallel degree is at most the accelerator count "
                                 "(-n)")
    capacity = accelerator.memory_bytes if accelerator is not None else None
    per_token = None
    if seq_len is not None or not model.counts_attention:
        per_token = token_flops(model, seq_len)
    c = compute(model, run) if run is not None else None
    t = timing(c, throughput) if c is not None and throughput is not None and \
        throughput.known else None
    m = memory(model, precision, zero, dp, micro_batch, seq_len, capacity)
    inf = None
    if decode:
        if bandwidth is None and accelerator is not None:
            bandwidth = accelerator.bandwidth
        inf = inference(model, precision, context if context is not None else seq_len,
                        decode_batch, bandwidth, capacity)
    plan = Plan(model=model, precision=precision, accelerator=accelerator, seq_len=seq_len,
                token_flops=per_token, run=run, compute=c, rate=throughput, time=t, memory=m,
                inference=inf)
    check_figures(plan)
    return plan


#: Figures are printed as floats (up to about 1.8e308): each must lie within
#: 10**±300 of 1, or be 0.  Command-line numbers are bounded far tighter
#: (symflops.commands.plan); a declaration's counts at huge dims can still exceed it.
MAX_FIGURE = 10**300


def check_figures(value: object, path: str = "") -> None:
    """Refuse a plan with a figure that cannot be printed: every number in
    its dataclasses, their properties included, within :data:`MAX_FIGURE`."""
    if isinstance(value, bool) or value is None or callable(value):
        return
    if isinstance(value, (int, Fraction)):
        size = abs(Fraction(value))
        if size > MAX_FIGURE or 0 < size < Fraction(1, MAX_FIGURE):
            exponent = round((size.numerator.bit_length() - size.denominator.bit_length())
                             * math.log10(2))
            raise SymflopsError(f"the plan's {path} is about 1e{exponent}, beyond the 1e-300 "
                                "to 1e300 it can print", hint="give smaller dims or numbers")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_figures(item, f"{path}.{key}".lstrip("."))
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_figures(item, path)
    elif dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
        names += [n for n, a in vars(type(value)).items() if isinstance(a, property)]
        for name in names:
            check_figures(getattr(value, name), f"{path}.{name}".lstrip("."))
