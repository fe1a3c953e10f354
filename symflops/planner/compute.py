"""A training run, its FLOPs and its time (:mod:`symflops.planner.plan`'s
conventions): the run's phases (:func:`run_from_tokens`, :func:`run_from_steps`,
:func:`run_from_phases`), model and executed FLOPs per phase and in all
(:func:`compute`), and the time at a throughput (:func:`rate`, :func:`timing`).
Pure functions of frozen dataclasses, exact in integers and fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..core.errors import SymflopsError
from .records import Formula, Model, Number, TokenFlops, show_exact


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
