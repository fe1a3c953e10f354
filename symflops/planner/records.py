"""The records the planner's stages share: a model (:class:`Model`), what one
training token costs (:class:`TokenFlops`) and the formula behind each
figure (:class:`Formula`).

Below every other planner module: :mod:`symflops.planner.model` fills a
Model from a declaration, :mod:`symflops.planner.plan` from a parameter
count, and the run, memory and report modules read one; this module imports
nothing from them.  Frozen dataclasses, exact in Python integers and fractions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping

from ..core.errors import SymflopsError

#: Recompute (activation checkpointing) policies.
RECOMPUTE = ("none", "full", "selective", "fused_attention")

Number = int | Fraction


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
    #: buffer elements (role: buffer) at a sequence length, None when they depend on
    #: it and it is not given; the field is None for a model without buffers
    buffers: Callable[[int | None], int | None] | None = None
    #: the declaration ``symflops import-hf`` wrote for a Hugging Face config
    #: (:class:`symflops.hf.importer.Imported`); None for any other model
    declaration: Any = None
    #: the derived layer behind a declaration's figures, ``(layer, derivation,
    #: costs, dims)``, for the many-devices plan (:mod:`symflops.planner.devices`);
    #: None for a bare parameter count
    engine: Any = field(default=None, metadata={"figures": False})

    @property
    def read(self) -> int:
        """Parameter elements one decoded token reads (MoE: its k experts; one
        row of each lookup table)."""
        return self.params_active if self.params_read is None else self.params_read


def check_recompute(recompute: str) -> None:
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
