"""Exercises with answers, generated from the engine's facts about a layer.

Each exercise asks for something the sheet teaches (what one backward rule
costs, what the forward pass must keep, what training keeps in memory, what
data-parallel replicas all-reduce, how the costs change when a dim doubles,
how far training is from 6N and why, what full recomputation costs) at one
configuration, and carries its answer as exact numbers computed here by the
engine (:func:`~symflops.count.evaluate.number` of the layer's polynomials).
The tests check every kind against an independent computation (a hand
formula, a brute-force count).

:func:`exercises` picks 3 to :data:`MOST` of the kinds that apply to the
layer, a rule and a configuration (one of the declaration's examples, else
its ``sizes:``, else every dim at :data:`DEFAULT_DIM`), with a seeded
``random.Random``: the same seed gives the same set.  The records hold no
prose: ``symflops exercises`` words them in plain text
(:func:`plain_text`), a sheet in its own format.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Mapping

import sympy

from .beyond import beyond_six_n
from .cost import Costs
from .evaluate import check_definitions, number
from .recompute import recompute
from ..core.ir import substitute
from ..core.records import Derivation

Kind = Literal["rule_flops", "saved", "memory", "allreduce", "double", "six_n", "recompute"]

#: The kinds in the order a set presents them (the order the sheet teaches).
ORDER: tuple[Kind, ...] = ("rule_flops", "saved", "allreduce", "memory", "double", "six_n",
                           "recompute")
#: At most this many exercises in a set (at least 3 where 3 kinds apply).
MOST = 4
#: A dim's value when the declaration gives none (examples or sizes).
DEFAULT_DIM = 16


@dataclass(frozen=True)
class Exercise:
    """One exercise: its ``kind``, the configuration it is asked at, its
    subject (``subject``: a gradient, a dim) and its ``answer``, exact
    numbers and names keyed by kind (see :func:`_answer`)."""

    kind: Kind
    config: tuple[tuple[str, int], ...]
    config_name: str | None
    subject: str | None
    answer: Mapping[str, Any] = field(default_factory=dict)


def _config(derivation: Derivation, rng: random.Random,
            seed: int) -> tuple[dict[str, int], str | None]:
    layer = derivation.layer
    if layer.examples:  # seed 0 (the sheet's set): the worked example, its first
        e = layer.examples[0] if seed == 0 else rng.choice(layer.examples)
        return {k: int(v) for k, v in e.values}, e.name
    free = [d.name for d in layer.free_dims]
    if layer.sizes and set(dict(layer.sizes)) >= set(free):
        return {k: int(v) for k, v in layer.sizes if k in free}, None
    return {n: DEFAULT_DIM for n in free}, None


def _doubled(derivation: Derivation, costs: Costs) -> str | None:
    """The dim whose doubling a sheet's reader asks about: the sequence
    length, else a dim the saved activations grow with, else the first dim
    of the declared tokens."""
    from .growth import growth, sequence_dim

    layer = derivation.layer
    seq, _ = sequence_dim(layer)
    if seq is not None:
        return seq
    free = {d.name for d in layer.free_dims}
    grows = [g.dim for g in growth(layer, substitute(costs.activations, layer.substitutions))
             if g.dim in free]
    if grows:
        return grows[0]
    if layer.tokens is not None:
        names = [str(s) for s in sorted(layer.tokens.free_symbols, key=str) if str(s) in free]
        return names[0] if names else None
    return None


def _applicable(derivation: Derivation, costs: Costs) -> list[Kind]:
    layer = derivation.layer
    kinds: list[Kind] = []
    if any(c.flops != 0 for c in costs.backward):
        kinds.append("rule_flops")
    if costs.saved:
        kinds.append("saved")
    if costs.trainable != 0:
        kinds.append("allreduce")
    kinds.append("memory")
    if _doubled(derivation, costs) is not None:
        kinds.append("double")
    if layer.tokens is not None and costs.unit == "FLOPs" and beyond_six_n(derivation, costs):
        kinds.append("six_n")
    if costs.saved and costs.flops_forward != 0:
        kinds.append("recompute")
    return kinds


def exercises(derivation: Derivation, costs: Costs, seed: int = 0) -> tuple[Exercise, ...]:
    """3 to :data:`MOST` exercises about ``derivation`` (fewer only when
    fewer kinds apply), their answers computed exactly."""
    rng = random.Random(seed)
    config, name = _config(derivation, rng, seed)
    check_definitions(derivation.layer, config)
    kinds = _applicable(derivation, costs)
    if len(kinds) > MOST:
        # the first two (a rule's cost, what is saved) always: they are the sheet's core
        keep = kinds[:2] + rng.sample(kinds[2:], MOST - 2)
        kinds = [k for k in ORDER if k in keep]
    return tuple(_answer(derivation, costs, k, config, name, rng) for k in kinds)


def _answer(derivation: Derivation, costs: Costs, kind: Kind, config: Mapping[str, int],
            name: str | None, rng: random.Random) -> Exercise:
    layer = derivation.layer
    subs = layer.substitutions
    mem = costs.memory()
    p = costs.precision

    def at(e: Any, values: Mapping[str, int] = config) -> int | float:
        return number(substitute(sympy.sympify(e), subs), values)

    pairs = tuple((k, int(v)) for k, v in config.items())
    if kind == "rule_flops":
        parts: dict[str, int] = {}
        for r in derivation.rules:
            parts[r.grad] = parts.get(r.grad, 0) + 1
        # a gradient of one contribution: "the rule computing dW" names one rule
        rules = [i for i, c in enumerate(costs.backward)
                 if c.flops != 0 and parts[derivation.rules[i].grad] == 1] or \
            [i for i, c in enumerate(costs.backward) if c.flops != 0]
        i = rng.choice(rules)
        r = derivation.rules[i]
        return Exercise(kind, pairs, name, r.grad, {
            "rule": r.statement, "matrix": str(r.matrix_form) if r.matrix_form else None,
            "flops": at(costs.backward[i].flops),
            "formula": sympy.expand(substitute(costs.backward[i].flops, subs)),
            "copies": at(costs.backward_copies[i])})
    if kind == "saved":
        return Exercise(kind, pairs, name, None, {
            "tensors": tuple((s.name, tuple(s.needed_by)) for s in costs.saved),
            "elements": at(costs.activations), "bytes": at(mem["activation_bytes"])})
    if kind == "allreduce":
        grads = tuple(t.name for t in layer.params if t.requires_grad)
        return Exercise(kind, pairs, name, None, {
            "gradients": grads, "elements": at(costs.trainable), "width": p.grads,
            "bytes": at(mem["grads_bytes"])})
    if kind == "memory":
        return Exercise(kind, pairs, name, p.name, {
            "fixed": at(mem["fixed_bytes"]), "activations": at(mem["activation_bytes"]),
            "total": at(mem["total_bytes"]), "per_param": p.bytes_per_trainable_param,
            "params": at(costs.params)})
    if kind == "double":
        dim = _doubled(derivation, costs)
        twice = {**config, dim: 2 * int(config[dim])}
        check_definitions(layer, twice)
        before = (at(costs.flops_total), at(mem["activation_bytes"]))
        after = (at(costs.flops_total, twice), at(mem["activation_bytes"], twice))
        return Exercise(kind, pairs, name, dim, {
            "value": int(config[dim]), "flops": before[0], "flops_doubled": after[0],
            "bytes": before[1], "bytes_doubled": after[1],
            "flops_ratio": Fraction(after[0]) / Fraction(before[0]) if before[0] else None,
            "bytes_ratio": Fraction(after[1]) / Fraction(before[1]) if before[1] else None})
    if kind == "six_n":
        from .summary import whole_model

        w = whole_model(derivation, costs)
        tokens = at(layer.tokens)
        parts = tuple((b.output, b.cause, b.tensors, b.reason,
                       at(b.per_token * layer.tokens)) for b in beyond_six_n(derivation, costs))
        return Exercise(kind, pairs, name, None, {
            "training": at(costs.flops_total), "tokens": tokens,
            "n_active": at(w.parameters.active_dense),
            "six_n": at(w.per_token.six_n) * tokens, "parts": parts})
    full = recompute(derivation, costs, "full")
    return Exercise(kind, pairs, name, "full", {
        "recomputed": at(full.flops), "executed": at(costs.flops_total + full.flops),
        "training": at(costs.flops_total), "kept": tuple(s.name for s in full.kept),
        "bytes": at(full.activation_bytes(costs)), "bytes_none": at(mem["activation_bytes"])})


# ------------------------------------------------------------ plain text --

def _n(x: Any) -> str:
    if isinstance(x, Fraction):
        return str(x.numerator) if x.denominator == 1 else f"{x} = {float(x):.4g}"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _at(e: Exercise) -> str:
    values = ", ".join(f"{k} = {v:,}" for k, v in e.config)
    return f"at {e.config_name} ({values})" if e.config_name else f"at {values}"


def question_text(e: Exercise, unit: str = "FLOPs") -> str:
    """The question of ``e`` in plain text."""
    a = e.answer
    if e.kind == "rule_flops":
        return (f"How many {unit} (matmul-type) does the backward rule {a['rule']} cost, "
                f"for one copy, {_at(e)}?")
    if e.kind == "saved":
        return ("Which tensors must the forward pass keep for the backward pass, which rules "
                f"read each, and how many bytes do they take {_at(e)}?")
    if e.kind == "allreduce":
        return ("Under data parallelism, which gradients do the replicas all-reduce once per "
                f"step, and how many bytes is that {_at(e)}?")
    if e.kind == "memory":
        return (f"How many bytes does training keep in memory {_at(e)} under {e.subject}, and "
                "how much of it is fixed (the model) and how much activations?")
    if e.kind == "double":
        where = _at(e)
        return (f"{where[0].upper() + where[1:]}, {e.subject} = {a['value']:,} is doubled. By what "
                f"factor do the training {unit} and the saved activation bytes change?")
    if e.kind == "six_n":
        return (f"How far are the training FLOPs from 6 x N_active x tokens {_at(e)}, and "
                "which ops make the difference?")
    return (f"Under full recomputation, how many more {unit} does one training step execute, "
            f"and how many activation bytes does it keep instead, {_at(e)}?")


def answer_text(e: Exercise, unit: str = "FLOPs") -> str:
    """The answer of ``e`` in plain text."""
    a = e.answer
    if e.kind == "rule_flops":
        return f"{_n(a['flops'])} {unit} ({sympy.sstr(a['formula'])})."
    if e.kind == "saved":
        kept = "; ".join(f"{t} (read by {', '.join(r)})" for t, r in a["tensors"])
        return f"{kept}: {_n(a['elements'])} elements, {_n(a['bytes'])} bytes."
    if e.kind == "allreduce":
        return (f"the gradients {', '.join('d' + g for g in a['gradients'])}: "
                f"{_n(a['elements'])} elements at {a['width']} bytes, {_n(a['bytes'])} bytes.")
    if e.kind == "memory":
        return (f"{_n(a['fixed'])} bytes fixed ({a['per_param']} bytes per parameter) + "
                f"{_n(a['activations'])} bytes of activations = {_n(a['total'])} bytes.")
    if e.kind == "double":
        flops = (f"training {unit}: {_n(a['flops'])} -> {_n(a['flops_doubled'])}, "
                 f"x{_n(a['flops_ratio'])}" if a["flops_ratio"] is not None
                 else f"no matmul-type {unit} either way")
        kept = (f"activation bytes: {_n(a['bytes'])} -> {_n(a['bytes_doubled'])}, "
                f"x{_n(a['bytes_ratio'])}" if a["bytes_ratio"] is not None
                else "no activation is saved either way")
        return f"{flops}; {kept}."
    if e.kind == "six_n":
        parts = "; ".join(f"{sign(v)}{_n(abs(v))} from {op} ({cause.replace('_', ' ')})"
                          for op, cause, _, _, v in a["parts"])
        return (f"training {_n(a['training'])} = 6 x {_n(a['n_active'])} x {_n(a['tokens'])} "
                f"({_n(a['six_n'])}) {parts}.")
    return (f"{_n(a['recomputed'])} more {unit} ({_n(a['training'])} -> {_n(a['executed'])}); "
            f"it keeps {', '.join(a['kept'])}: {_n(a['bytes'])} bytes instead of "
            f"{_n(a['bytes_none'])}.")


def sign(v: int | float) -> str:
    return "- " if v < 0 else "+ "


def plain_text(derivation: Derivation, costs: Costs, found: tuple[Exercise, ...]) -> str:
    """A set of exercises as ``symflops exercises`` prints it: the questions,
    then the answers."""
    unit = costs.unit
    lines = [f"{derivation.layer.name}: exercises", ""]
    lines += [f"{k}. {question_text(e, unit)}" for k, e in enumerate(found, 1)]
    lines += ["", "answers"]
    lines += [f"{k}. {answer_text(e, unit)}" for k, e in enumerate(found, 1)]
    return "\n".join(lines) + "\n"


def to_json(found: tuple[Exercise, ...], unit: str = "FLOPs") -> list[dict[str, Any]]:
    """The set as ``symflops exercises --json`` prints it: per exercise its
    ``kind``, ``at`` (the configuration), ``example`` (its name or null),
    ``question`` and ``answer`` (plain text) and ``values`` (the exact
    numbers and names of the answer; a ratio as a string ``"9/4"``, a
    formula as SymPy text)."""
    def plain(v: Any) -> Any:
        if isinstance(v, Fraction):
            return str(v)
        if isinstance(v, sympy.Basic):
            return sympy.sstr(v)
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return [{"kind": e.kind, "at": dict(e.config), "example": e.config_name,
             "question": question_text(e, unit), "answer": answer_text(e, unit),
             "values": {k: plain(v) for k, v in e.answer.items()}} for e in found]
