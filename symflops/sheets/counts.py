"""The count sections of a sheet: how each op's count arises, what a lookup or
a condition does to it, crossing orders, the numbers table, memory and the
whole model.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, TypedDict

import sympy

from . import printing as P
from .notation import Math
from ..count.cost import Costs
from ..count.evaluate import number
from ..count.precision import dtype_name
from ..count.summary import whole_model
from ..core.ir import Einsum, Factor, Tensor, substitute
from ..core.polynomial import quotient
from ..core.records import Derivation, grad_name
from ..ops.einsum.cost import einsum_flops
from ..ops.einsum.orders import bounds_of, size, steps, written


class Row(TypedDict):
    """A row of a table: its cells, already printed."""

    cells: list[str]


def flops_story(e: Einsum, extents: Mapping[str, sympy.Expr], flops: sympy.Expr,
                 poly: P.PolyPrinter, unit: str) -> str:
    """How a forward op's count arises, from the pairwise step the cost model took."""
    found = steps(e, extents, unit, written(len(e.factors)))
    if len(found) != 1 or len(e.operands) != 2:
        return poly(flops)
    span, summed = found[0].span, found[0].kind != "product"
    out = [i for i in dict.fromkeys(e.output.indices) if i in span]
    inner = [i for i in sorted(span) if i not in out]

    def size(idx: Sequence[str]) -> str:
        return poly(sympy.Mul(*(extents[i] for i in idx)))

    if summed and inner:
        factor = "2" if unit == "FLOPs" else "1"
        return (rf"{factor} \times \underbrace{{{size(out)}}}_{{\text{{outputs}}}} \times "
                rf"\underbrace{{{size(inner)}}}_{{\text{{terms each}}}} = {poly(flops)}")
    return rf"\underbrace{{{size(out)}}}_{{\text{{products}}}} = {poly(flops)}"


def domain_note(k: int, derivation: Derivation, costs: Costs, m: Math, esc: Any) -> str:
    """What a lookup or a where-clause does to op ``k``'s count, in a sentence
    computed from the op (empty for an op with neither): a lookup copies and
    is no dense product with a one-hot matrix; a condition sums over part of
    the square only."""
    op, unit, poly = derivation.layer.ops[k], costs.unit, m.poly
    extents = op.dims()
    sentences = []
    for e in op.terms:
        lookups = [f for f in e.operands if f.is_select and f.indices[0] in e.summed]
        if lookups:
            tables = [f.tensor for f in e.factors if any(x.indices[0] in f.indices for x in lookups)]
            dense = einsum_flops(_dense(e), extents, unit)
            onehot = r",\ ".join(m.ix(f) for f in lookups)
            text = (esc("A lookup, not a multiplication: each of the ")
                    + f"${poly(size(set(e.output.indices), extents))}$"
                    + esc(" elements of ") + f"${m.t(e.output.tensor)}$" + esc(" copies the element of ")
                    + f"${m.ts(tables)}$" + esc(" that ")
                    + f"${m.ts([f.tensor for f in lookups])}$"
                    + esc(" selects, with no multiply-add; as a dense product with the one-hot "
                          "matrix ") + f"${onehot}$" + esc(" it would cost ") + f"${poly(dense)}$"
                    + esc(f" {unit}."))
            scatter = [(r, c) for r, c in zip(derivation.rules, costs.backward)
                       if r.op == k and any(f.is_select and f.indices[0] in t.output.indices
                                            for t in r.terms for f in t.operands)]
            for r, c in scatter:
                text += (esc(" Its backward ") + f"${m.t(r.grad)}$"
                         + esc(" is a scatter-add, one add per element of ")
                         + f"${m.t(grad_name(op.output))}$" + esc(" read: ")
                         + f"${poly(c.elementwise)}$"
                         + esc(" FLOPs of elementwise work, not a product."))
            sentences.append(text)
        shifts = [f for f in e.operands if f.is_shift]
        if shifts and e.factors:
            dense = einsum_flops(_dense(e), extents, unit)
            inputs = [f.tensor for f in e.factors if any(x.indices[0] in f.indices for x in shifts)]
            grads = [r.grad for r in derivation.rules
                     if r.op == k and r.wrt in inputs]
            brackets = r",\ ".join(m.ix(f) for f in shifts)
            text = (esc("A convolution: ") + f"${brackets}$"
                    + esc(" fixes the shifted position given the other two letters, so only "
                          "those terms are counted; as a dense product with that 0/1 tensor it "
                          "would cost ") + f"${poly(dense)}$" + esc(f" {unit}."))
            if grads:
                text += (esc(" The input gradient ") + f"${m.ts(grads)}$"
                         + esc(" is a full correlation of ") + f"${m.t(grad_name(op.output))}$"
                         + esc(" with the flipped kernel, at the same count."))
            sentences.append(text)
        conditions = [f for f in e.operands if f.is_comparison]
        if conditions and e.factors:
            letters = {i for f in conditions for i in f.indices}
            inside = size(letters, extents, bounds_of(e))
            full = einsum_flops(Einsum(e.output, e.factors, e.coefficient), extents, unit)
            pairs = ", ".join(sorted(letters, key=[i for i, _ in op.index_dims].index))
            domain = r",\ ".join(m.ix(f) for f in conditions)
            sentences.append(
                esc("Summed over the domain ") + f"${domain}$"
                + esc(" only: ") + f"${poly(inside)}$" + esc(" of the ")
                + f"${poly(size(letters, extents))}$" + esc(f" tuples ({pairs}); over the full "
                                                             "range it would cost ")
                + f"${poly(full)}$" + esc(f" {unit}."))
    return " ".join(dict.fromkeys(sentences))


def _order_latex(e: Einsum, tree: Any, m: "Math") -> str:
    """An order of pairwise products in the sheet's notation: ``(dY_{sf} V_{tf}) Q_{se}``."""
    def text(t: Any, top: bool) -> str:
        if isinstance(t, int):
            return m.ix(e.factors[t])
        inner = rf"{text(t[0], False)}\, {text(t[1], False)}"
        return inner if top else rf"\left({inner}\right)"

    return text(tree, True)


def order_notes(name: str, terms: Sequence[Einsum], c: Any, layer: Any, m: "Math",
                 esc: Any) -> list[str]:
    """For each term whose cheapest orders cross: each order, its cost, when it
    is the cheapest, and which count the sheet uses."""
    notes = []
    dims = [d.name for d in layer.free_dims]
    names = {d.symbol: sympy.Symbol(P.symbol_name(d.name)) for d in layer.dims}
    for o in c.orders:
        e = terms[o.term]
        conditions = o.cheaper_when(dims) if len(o.candidates) <= 4 else (None,) * len(o.candidates)
        parts = []
        for cand, cond in zip(o.candidates, conditions):
            part = (f"${_order_latex(e, cand.tree, m)}$" + esc(" costs ") + f"${m.poly(cand.total)}$"
                    + esc(" FLOPs"))
            if cond is not None:
                part += esc(", the cheapest when ") + f"${sympy.latex(cond.xreplace(names))}$"
            parts.append(part)
        if o.chosen is not None:
            at = ", ".join(f"{P.symbol_name(n)} = {v}" for n, v in o.sizes)
            counted = (esc(" Counted here: ") + f"${_order_latex(e, o.candidates[o.chosen].tree, m)}$"
                       + esc(", the cheapest at the declared sizes ") + f"${at}$"
                       + esc("; symflops eval, sweep and plan count the cheapest order at the "
                             "sizes they are given."))
        else:
            counted = esc(" Counted here: the least of these, which depends on the sizes; "
                          "symflops eval, sweep and plan count the cheapest order at the sizes "
                          "they are given (declare typical sizes with sizes: to choose one).")
        notes.append(esc("The cost of ") + f"${name}$" + esc(" depends on the order of its "
                                                               "pairwise products: ")
                     + "; ".join(parts) + "." + counted)
    return notes


def _dense(e: Einsum) -> Einsum:
    """``e`` with each lookup's one-hot matrix as an ordinary dense operand."""
    return Einsum(e.output, tuple(Factor(f"onehot_{f.tensor}", f.indices) if f.is_select
                                  else Factor("shift", f.indices) if f.is_shift else f
                                  for f in e.operands), e.coefficient)


def _group(value: int) -> str:
    return f"{value:,}".replace(",", "{,}")


def _sci(value: int | float) -> str:
    """``2.815 \\times 10^{14}``: four significant digits, for tables of numbers
    (an int beyond a float's range too: Decimal rounds it exactly)."""
    if value == 0:
        return "0"
    if abs(value) < 100_000:
        return _group(value) if isinstance(value, int) else f"{value:.4g}"
    from decimal import Decimal  # exact for any int, and for a float the same as float's format
    mantissa, exp = f"{Decimal(value):.3e}".split("e")
    return rf"{float(mantissa):.4g} \times 10^{{{int(exp)}}}"


def at_each_size(derivation: Derivation, c: Costs) -> Costs:
    """The costs a numbers table evaluates: where a term's orders cross, the
    least of them, which at each configuration is the cheapest order there
    (as ``symflops eval`` counts), not the one chosen at the declared sizes."""
    crossing = any(o.orders for o in (*c.forward, *c.backward))
    if not (crossing and derivation.layer.sizes):
        return c
    from ..count.cost import costs

    return costs(derivation, c.unit, c.precision, "minimum")


def numbers_table(c: Costs, configs: Sequence[Mapping[str, sympy.Expr]], esc: Any,
             subs: Mapping[sympy.Symbol, sympy.Expr]) -> dict[str, Any] | None:
    """The numbers table at each configuration (values of the free dims; a
    defined dim takes its formula's value)."""
    if not configs:
        return None
    mem = c.memory()
    rows = [
        (f"forward ({c.unit})", c.flops_forward),
        (f"backward ({c.unit})", c.flops_backward),
        (f"training ({c.unit})", c.flops_total),
        ("parameters (elements)", c.params),
        ("saved activations (elements)", c.activations),
        ("fixed memory (bytes)", mem["fixed_bytes"]),
        ("activation memory (bytes)", mem["activation_bytes"]),
        ("training memory (bytes)", mem["total_bytes"]),
    ]
    return {
        "heads": [r",\ ".join(f"{P.symbol_name(k)} = "
                              + (_group(int(v)) if abs(v) < 10**21 else _sci(int(v)))
                              for k, v in cfg.items())
                  for cfg in configs],
        "rows": [{"label": esc(label), "cells": [_sci(number(substitute(expr, subs), cfg))
                                                 for cfg in configs]}
                 for label, expr in rows],
    }


def memory_rows(c: Costs, tensors: Sequence[Tensor], m: Math, esc: Any,
                 scales_batch: str) -> list[Row]:
    """The seed's memory table: item, elements, bytes per element, bytes, scaling."""
    prec, mem, poly = c.precision, c.memory(), m.poly
    params = [t.name for t in tensors]
    trainable = [t.name for t in tensors if t.requires_grad]

    def row(item: str, elements: sympy.Expr, width: int, nbytes: sympy.Expr, scales: str) -> Row:
        return {"cells": [item, f"${poly(elements)}$", f"{width} ({dtype_name(width)})",
                          f"${poly(nbytes)}$", scales]}

    def names(ns: Sequence[str]) -> str:  # one math span each, so a long list can wrap
        return ", ".join(f"${m.t(n)}$" for n in ns)

    rows = [row(esc("Parameters") + (" " + names(params) if params else ""), c.params, prec.params,
                mem["params_bytes"], esc("model"))]
    if c.trainable != 0:
        rows.append(row(esc("Gradients") + " " + names(["d" + n for n in trainable]),
                        c.trainable, prec.grads, mem["grads_bytes"], esc("model")))
        for state in prec.state_names:
            rows.append(row(esc(state), c.trainable, prec.optimizer,
                            c.trainable * prec.optimizer, esc("model")))
        if prec.master:
            rows.append(row(esc("Master weights"), c.trainable, prec.master,
                            mem["master_bytes"], esc("model")))
    if c.saved:
        rows.append(row(esc("Activations") + " " + names([s.name for s in c.saved]),
                        c.activations, prec.activations, mem["activation_bytes"], scales_batch))
    return rows



_POLICY_TEXT = {"none": "none (keep every saved tensor)",
                "full": "full (each block keeps its input and runs its forward again)",
                "selective": "selective (recompute only the listed ops)"}


def model_section(derivation: Derivation, costs: Costs, poly: Any, m: "Math", esc: Any
           ) -> dict[str, Any] | None:
    """The whole-model section: blocks, parameter classes, FLOPs per token
    against 6N, recomputation, the key/value cache.  None for a layer that
    declares no tokens and includes no block."""
    layer = derivation.layer
    if layer.tokens is None and not layer.blocks:
        return None
    w = whole_model(derivation, costs)
    par = w.parameters
    per = w.per_token
    tok = layer.tokens

    def scaled(e: sympy.Expr) -> str:  # a whole-layer count, per token when tokens are declared
        return poly(quotient(e, tok) if tok is not None else e)

    def named(kind: str) -> Any:  # the parameters of one class
        return m.ts([n for n, c in par.classes.items() if c == kind])

    blocks = [{
        "title": esc(b.title), "source": esc(os.path.basename(b.source)),
        "copies": poly(b.copies), "params": poly(b.params),
        "forward": poly(b.flops.forward), "backward": poly(b.flops.backward),
        "activation_bytes": poly(b.activation_bytes),
        "saved": [{"name": m.t(s.tensor), "bytes": poly(s.bytes),
                   "mask": s.mask, "needed_by": m.ts(s.needed_by)} for s in b.saved],
    } for b in w.blocks]
    policies = [{
        "name": esc(_POLICY_TEXT[name]),
        "ops": m.ts(r.ops) if name == "selective" else None,
        "executed": scaled(r.flops_executed),
        "recomputed": scaled(r.flops_recomputed),
        "activation_bytes": poly(r.activation_bytes),
        "working": poly(r.working) if r.working != 0 else None,
    } for name, r in w.recompute.policies.items()]
    inf = w.inference
    return {
        "tokens": poly(tok) if tok is not None else None,
        "definitions": [f"{P.symbol_name(n)} = {poly(e)}" for n, e in w.definitions.items()],
        "blocks": blocks,
        "params": {"total": poly(par.total), "trainable": poly(par.trainable),
                   "active": poly(par.active), "active_dense": poly(par.active_dense),
                   "dense": poly(par.dense), "lookup": poly(par.lookup),
                   "elementwise": poly(par.elementwise)},
        "params_differ": {"trainable": par.trainable != par.total,
                          "active": par.active != par.total},
        "dense_names": named("dense"),
        "lookup_names": named("lookup"),
        "elementwise_names": named("elementwise"),
        "per_token": None if per is None else {
            "total": poly(per.flops.total), "forward": poly(per.flops.forward),
            "backward": poly(per.flops.backward), "six_n": poly(per.six_n),
            "beyond": poly(per.beyond_six_n),
            "beyond_sign": "zero" if per.beyond_six_n == 0 else "other",
            "elementwise": poly(per.flops_elementwise),
            "inference": poly(per.inference_forward),
        },
        "policy": esc(layer.recompute),
        "activation_width": costs.precision.activations,
        "mask_width": costs.precision.masks,
        "policies": policies,
        "inference": None if inf is None else {
            "cache": m.ts(inf.cache),
            "elements": poly(inf.cache_elements_per_sequence
                             if inf.cache_elements_per_sequence is not None
                             else inf.cache_elements),
            "bytes": poly(inf.cache_bytes_per_sequence if inf.cache_bytes_per_sequence is not None
                          else inf.cache_bytes),
            "per_sequence": inf.cache_elements_per_sequence is not None,
            "weights_bytes": poly(inf.weights_bytes),
            "per_token_bytes": (poly(inf.bytes_per_decoded_token)
                                if inf.bytes_per_decoded_token is not None else None),
            "activation_width": costs.precision.activations,
        },
    }
