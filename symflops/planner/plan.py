"""The run planner behind ``symflops plan``: compute, time, memory and decoding.

This module makes the whole plan (:func:`make_plan`) from the run and its
time (:mod:`symflops.planner.compute`) and the memory and decoding
(:mod:`symflops.planner.memory`), over the shared records of
:mod:`symflops.planner.records`.  Everything is a pure function of frozen
dataclasses, exact in Python integers and fractions (the FLOPs of a large run
exceed a float's 53-bit mantissa). The planner knows a model only through
:class:`~symflops.planner.records.Model`: what it costs per token, what it
stores, and the formula behind each figure. Three functions fill one:

- :func:`model_from_params` -- a bare parameter count (dense, 6N per token,
  attention not counted);
- :func:`model_from_declaration` -- a whole-model declaration, its counts
  derived by the engine (:mod:`symflops.planner.model`);
- :func:`model_from_import` -- a Hugging Face config, through the
  declaration ``symflops import-hf`` writes for it (:mod:`symflops.hf`), its
  counts derived by the engine as for any declaration.

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
  lookup table: :attr:`~symflops.planner.records.Model.read`) and each sequence's KV cache once, at full
  context; bytes per token = (weights + b x cache) / b, and tokens/s =
  b x bandwidth / (weights + b x cache). The step's bytes are
  :func:`symflops.count.decoding.decode_step_bytes`, the computation behind
  ``symflops derive``'s ``bytes_per_decoded_token``; exact for b = 1, a lower
  bound for larger b.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

from ..core.errors import SymflopsError
from ..count.precision import Precision
from . import compiled, prepared
from .compute import Compute, Rate, Run, Time, compute, timing, token_flops
from ..core.hardware import Accelerator
from .memory import Inference, Memory, inference, memory
from .records import Formula, Model, Number, TokenFlops, check_recompute, show_exact


ATTENTION_NOT_COUNTED = "6N, attention not counted: give a declaration for the attention term"
NO_ACTIVATIONS = "not known for a bare parameter count"
NO_KV_CACHE = "not known for a bare parameter count"


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
    check_recompute(recompute)
    shown = show_exact(n)
    executed = {
        "none": (6, Formula("6 N", f"6 × {shown}", "no recomputation: executed = model")),
        "full": (8, Formula("8 N", f"8 × {shown}", "full recomputation: the forward (2N) "
                                                   "runs again during the backward pass")),
        "selective": (6, Formula("6 N", f"6 × {shown}",
                                 "selective recomputation re-runs only the attention core, "
                                 "which a bare parameter count does not include")),
        "fused_attention": (6, Formula("6 N", f"6 × {shown}",
                                       "fused attention recomputes only the attention core "
                                       "(scores and probabilities), which a bare parameter "
                                       "count does not include")),
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

    check_recompute(recompute)
    return from_declaration(path, dims, recompute, precision)


def import_parts(imported: Any, recompute: str, precision: Precision) -> tuple:
    """What a model of an imported config depends on, for the cache: the shape
    of its declaration (not its file name, not its dims' values, which the
    kept model is evaluated at) and the options."""
    return ("import", imported.structure, imported.attention, imported.experts, recompute,
            dataclasses.astuple(precision))


def model_from_import(imported: Any, recompute: str, precision: Precision,
                      cached: bool = False) -> Model:
    """A model from a Hugging Face config (:class:`symflops.hf.importer.Imported`).

    ``cached``: the model may be read from the user's cache, without SymPy,
    and is kept there when derived (:mod:`symflops.planner.compiled`); its
    figures are the same, but it carries no ``engine``, which the
    many-devices plan needs."""
    check_recompute(recompute)

    def derived() -> Model:
        from .model import model_from_import as from_import

        return from_import(imported, recompute, precision)

    if not cached:
        return derived()
    parts = import_parts(imported, recompute, precision)
    name = compiled.key(*parts)
    kept = compiled.load(name) or prepared.lookup(parts)
    if kept is not None:
        return dataclasses.replace(compiled.model(kept, imported.dims, imported.file, derived),
                                   declaration=imported)
    from .model import compile_import

    model, plain = compile_import(imported, recompute, precision)
    if plain is not None:
        compiled.store(name, plain)
    return model


# --- the whole plan -------------------------------------------------------------

def _check_longest(model: Model, *lengths: int | None) -> None:
    """A model whose positions are a learned table takes at most its rows; one
    counted on whole chunks of positions (Llama 4's chunked attention, exactly;
    Mamba-2's SSD; the gated DeltaNet) takes a multiple of the chunk."""
    multiple = getattr(model.declaration, "multiple", None)
    if multiple is not None:
        chunk, key = multiple
        for n in lengths:
            if n is not None and n % chunk:
                other = getattr(model.declaration, "multiple_alternative", "")
                raise SymflopsError(
                    f"{model.declaration.file}: a sequence of {show_exact(n)} tokens is not a "
                    f"whole number of the model's chunks of {show_exact(chunk)} positions "
                    f"({key}), which the count of its chunked layers needs",
                    hint=f"plan with --seq (and --context) a multiple of {show_exact(chunk)}"
                         + (f", {other}" if other else ""))
    longest = getattr(model.declaration, "longest", None)
    if longest is None:
        return
    limit, key = longest
    for n in lengths:
        if n is not None and n > limit:
            raise SymflopsError(
                f"{model.declaration.file}: a sequence of {show_exact(n)} tokens is longer "
                f"than the {show_exact(limit)} positions the model has ({key})",
                hint=f"plan with --seq (and --context) at most {show_exact(limit)}")


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
    _check_longest(model, seq_len, context if decode else None)
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
        names = [f.name for f in dataclasses.fields(value) if f.metadata.get("figures", True)]
        names += [n for n, a in vars(type(value)).items() if isinstance(a, property)]
        for name in names:
            check_figures(getattr(value, name), f"{path}.{name}".lstrip("."))
