"""One roofline analysis of a layer: the bytes of a phase under a convention
(:mod:`symflops.count.traffic`), each op's intensity and threshold and the
layer's (:mod:`symflops.count.roofline`), and, at given values of every dim,
the time bounds on each accelerator.  ``symflops roofline``, ``plan`` and the
sheet's section "Compute or memory bound?" read this one record, and
:meth:`Analysis.to_json` is ``symflops roofline --json``'s object.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import sympy

from ..core.ir import Layer, substitute
from ..core.records import Derivation
from .cost import Costs
from .roofline import (Bounded, Roof, Solved, Threshold, bounded, intensity, ridge_symbol,
                       threshold)
from .traffic import Convention, Moved, Phase, Traffic, Widths, traffic

LAYER = "layer"


@dataclass(frozen=True)
class Analysis:
    name: str
    title: str
    traffic: Traffic
    roofs: tuple[Roof, ...]
    dim: str | None                              # the dim thresholds are solved for
    ridge: sympy.Symbol
    thresholds: tuple[Threshold, ...]            # per op (forward entries first), then the layer
    values: tuple[tuple[str, int], ...]          # the dims given (possibly not all)
    bounds: tuple[Bounded, ...]                  # per roof, when every dim is given

    @property
    def entries(self) -> tuple[Moved, ...]:
        return self.traffic.entries

    def intensities(self) -> list[sympy.Expr | None]:
        return [intensity(e.work, e.bytes) for e in self.entries]

    @property
    def layer_intensity(self) -> sympy.Expr | None:
        return intensity(self.traffic.total("work"), self.traffic.total("bytes"))

    def to_json(self) -> dict[str, Any]:
        t = self.traffic
        w = t.widths
        out: dict[str, Any] = {
            "name": self.name, "title": self.title, "phase": t.phase,
            "convention": t.convention, "sequence_dim": t.seq,
            "widths": {"weights": _num(w.weights), "grads": _num(w.grads),
                       "activations": _num(w.activations), "masks": _num(w.masks),
                       "index": _num(w.index), "text": w.text},
            "resident": list(t.resident),
            "accelerators": [{"name": r.name, "compute": r.compute, "peak": _num(r.peak),
                              "bandwidth": _num(r.bandwidth), "ridge": _num(r.ridge),
                              "source": r.source} for r in self.roofs],
            "ridge_symbol": self.ridge.name,
            "ops": [_entry(e, i) for e, i in zip(self.entries, self.intensities())],
            "totals": {"flops": _text(t.total("flops")),
                       "flops_elementwise": _text(t.total("elementwise")),
                       "bytes": _text(t.total("bytes")),
                       "intensity": _text(self.layer_intensity)},
            "solve_for": self.dim,
            "thresholds": [_threshold(th) for th in self.thresholds],
            "at": dict(self.values) or None,
            "bounds": [_bounded(b) for b in self.bounds],
        }
        return out


def default_dim(layer: Layer) -> str | None:
    """The dim thresholds are solved for when none is named: the first
    declared dim of ``tokens:`` (the batch), else the first free dim."""
    if layer.tokens is not None:
        names = {s.name for s in layer.tokens.free_symbols}
        order = [d.name for d in layer.dims if d.name in names]
        if order:
            return order[0]
    free = [d.name for d in layer.free_dims]
    return free[0] if free else None


def analyse(derivation: Derivation, costs: Costs, phase: Phase, convention: Convention,
            w: Widths, roofs: tuple[Roof, ...], values: Mapping[str, Any], dim: str | None
            ) -> Analysis:
    """The analysis of ``phase`` (see the module); ``values`` may give some dims
    only (thresholds are then evaluated where every other dim is given, and
    time bounds need them all).  Tokens per run: the declared ``tokens:``, or
    for a decoding step its ``sequences:`` (one token each)."""
    layer = derivation.layer
    tokens = layer.sequences if phase == "decode" else layer.tokens
    if tokens is not None:
        tokens = substitute(tokens, layer.substitutions)
    t = traffic(derivation, costs, phase, convention, w)
    ridge = ridge_symbol({d.name for d in layer.dims})
    given = {k: int(v) for k, v in values.items()}
    found: list[Threshold] = []
    if dim is not None:
        for e in t.entries:
            if e.pass_ == "forward" or phase == "training":
                th = threshold(e.label, e.work, e.bytes, dim, roofs, given, ridge)
                if th is not None:
                    found.append(th)
        th = threshold(LAYER, t.total("work"), t.total("bytes"), dim, roofs, given, ridge)
        if th is not None:
            found.append(th)
    complete = all(d.name in given for d in layer.free_dims)
    bounds = tuple(bounded(t, r, given, tokens) for r in roofs) if complete else ()
    return Analysis(layer.name, layer.title, t, roofs, dim, ridge, tuple(found),
                    tuple(given.items()), bounds)


def _num(v: Any) -> int | float:
    v = Fraction(v.p, v.q) if isinstance(v, sympy.Rational) else Fraction(v)
    return int(v) if v.denominator == 1 else float(v)


def _text(e: sympy.Expr | None) -> str | None:
    return None if e is None else sympy.sstr(e)


def _entry(e: Moved, i: sympy.Expr | None) -> dict[str, Any]:
    return {"pass": e.pass_, "op": e.label, "kind": e.kind, "statement": e.statement,
            "copies": _text(e.copies), "flops": _text(e.flops),
            "flops_elementwise": _text(e.elementwise),
            "reads": {x.tensor: _text(x.elements) for x in e.reads},
            "writes": {x.tensor: _text(x.elements) for x in e.writes},
            "bytes": _text(e.bytes), "intensity": _text(i)}


def _solved(s: Solved) -> dict[str, Any]:
    return {"text": s.text, "least": None if s.least is None else _num(s.least),
            "intervals": [[_num(low), None if high is None else _num(high)]
                          for low, high in s.intervals]}


def _threshold(th: Threshold) -> dict[str, Any]:
    return {"op": th.label, "dim": th.dim, "condition": f"{sympy.sstr(th.condition)} > 0",
            "solved": th.solved, "edge": _text(th.edge), "slope": _text(th.slope),
            "limit": _text(th.limit), "large": list(th.others),
            "at": {name: _solved(s) for name, s in th.at},
            "limit_at": {name: _solved(s) for name, s in th.limit_at}}


def _bounded(b: Bounded) -> dict[str, Any]:
    split = b.bound_seconds
    return {"accelerator": b.roof.name, "seconds": _num(b.seconds),
            "compute_bound_seconds": _num(split["compute"]),
            "memory_bound_seconds": _num(split["memory"]),
            "flops": _num(b.total("work")), "bytes": _num(b.total("bytes")),
            "tokens": None if b.tokens is None else _num(b.tokens),
            "tokens_per_s": None if b.tokens_per_s is None else _num(b.tokens_per_s),
            "ops": [{"pass": o.entry.pass_, "op": o.entry.label, "copies": o.copies,
                     "flops": _num(o.work), "bytes": _num(o.bytes),
                     "intensity": None if o.intensity is None else _num(o.intensity),
                     "compute_seconds": _num(o.compute_s), "memory_seconds": _num(o.memory_s),
                     "bound": o.bound, "seconds": _num(o.seconds)} for o in b.ops]}
