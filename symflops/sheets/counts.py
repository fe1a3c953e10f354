"""The count sections of a sheet: how each op's count arises, what a lookup or
a condition does to it, crossing orders, the numbers table, memory and the
whole model.

Each function formats a record of :mod:`symflops.count.explain` (or the
costs themselves); none counts anything.
"""

from __future__ import annotations

import os
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Callable, Sequence, TypedDict

import sympy

from . import printing as P
from .equations import Equation, Factor as EqFactor, Named, Part, chain, side
from .notation import Math
from ..count.cost import Costs
from ..count.explain import (ConditionNote, DomainNote, LookupNote, NumbersAt, OrderChoice,
                             PairwiseCount, PrefixNote, ScatterNote, ShiftNote)
from ..count.precision import dtype_name
from ..count.records import WholeModel
from ..core.ir import Einsum, Layer, Tensor
from ..core.polynomial import quotient
from ..ops.einsum.search import DEFAULT_SIZE


class Row(TypedDict):
    """A row of a table: its cells, already printed."""

    cells: list[str]


def flops_story(p: PairwiseCount | None, flops: sympy.Expr) -> Equation:
    """How a forward op's count arises, from the pairwise step the cost model took."""
    if p is None:
        return chain(side(flops))
    if p.kind == "sum":
        story = (EqFactor(sympy.Integer(p.factor)), EqFactor(p.outputs, "outputs"),
                 EqFactor(p.inner, "terms each"))
    else:
        story = (EqFactor(p.outputs, "products"),)
    return chain((Part(factors=story),), side(p.total), side(flops))


def domain_note(notes: Sequence[DomainNote], unit: str, m: Math, esc: Any) -> str:
    """What a lookup or a where-clause does to an op's count, in sentences
    (empty for an op with neither)."""
    poly = m.poly
    sentences = []
    for n in notes:
        if isinstance(n, LookupNote):
            onehot = r",\ ".join(m.ix(f) for f in n.onehot)
            several = len(n.onehot) > 1
            if n.copy:
                text = (esc("A lookup, not a multiplication: each of the ")
                        + f"${poly(n.elements)}$"
                        + esc(" elements of ") + f"${m.t(n.output)}$" + esc(" copies the element of ")
                        + f"${m.ts(n.tables)}$" + esc(" that ")
                        + f"${m.ts(n.selectors)}$"
                        + esc(" select" if several else " selects")
                        + esc(", with no multiply-add"))
            else:
                text = (esc("The elements of ") + f"${m.ts(n.tables)}$"
                        + esc(" are read where ") + f"${m.ts(n.selectors)}$"
                        + esc(" point, with no product to select them; only their products with "
                              "the other operands are counted above"))
            text += (esc(("; as" if n.copy else ". As") + " a dense product with the one-hot "
                         + ("matrices " if several else "matrix ")) + f"${onehot}$"
                     + esc(", contracted pairwise in the cheapest order," if several else "")
                     + esc(" it would cost ") + f"${poly(n.dense)}$" + esc(f" {unit}."))
            for sc in n.scatters:
                text += (esc(" Its backward ") + f"${m.t(sc.grad)}$"
                         + esc(" is a scatter-add into the selected positions: "))
                if sympy.expand(sc.elementwise - n.elements) == 0:
                    text += (esc("one add per element of ") + f"${m.t(sc.read)}$"
                             + esc(" read, ") + f"${poly(sc.elementwise)}$")
                else:
                    text += f"${poly(sc.elementwise)}$"
                text += esc(" FLOPs of elementwise work, not a product.")
            sentences.append(text)
        elif isinstance(n, ScatterNote):
            onehot = r",\ ".join(m.ix(f) for f in n.onehot)
            several = len(n.onehot) > 1
            text = (esc("A scatter-add, the adjoint of a lookup: each of the ")
                    + f"${poly(n.terms)}$"
                    + esc(" values of " if len(n.sources) == 1 else " products of ")
                    + f"${m.ts(n.sources)}$"
                    + esc(" is added into the element of ") + f"${m.t(n.output)}$"
                    + esc(" that ") + f"${m.ts(n.selectors)}$"
                    + esc(" select" if several else " selects")
                    + esc(" (an element no index selects stays 0): one add each, elementwise "
                          "work, not a product; as a dense product with the one-hot "
                          + ("matrices " if several else "matrix ")) + f"${onehot}$"
                    + esc(" it would cost ") + f"${poly(n.dense)}$" + esc(f" {unit}."))
            if n.gathers:
                text += (esc(" Its backward ") + f"${m.ts(n.gathers)}$"
                         + esc(" reads ") + f"${m.t(n.read)}$"
                         + esc(" where the index points (a gather, no add)."))
            sentences.append(text)
        elif isinstance(n, ShiftNote):
            brackets = r",\ ".join(m.ix(f) for f in n.shifts)
            given = "the other two letters" if n.plain else "its other letters"
            text = (esc("A convolution: ") + f"${brackets}$"
                    + esc(f" fixes the shifted position given {given}, so only "
                          "those terms are counted; as a dense product with that 0/1 tensor it "
                          "would cost ") + f"${poly(n.dense)}$" + esc(f" {unit}."))
            if n.grads and n.plain:
                text += (esc(" The input gradient ") + f"${m.ts(n.grads)}$"
                         + esc(" is a full correlation of ") + f"${m.t(n.read)}$"
                         + esc(" with the flipped kernel, at the same count."))
            elif n.grads:
                text += (esc(" The input gradient ") + f"${m.ts(n.grads)}$"
                         + esc(" scatters ") + f"${m.t(n.read)}$"
                         + esc(" through the same brackets (for a stride, the transposed "
                               "convolution), at the same count."))
            if n.padded is not None:
                text += (esc(" Products that multiply the zero padding of ")
                         + f"${m.ts(n.padded.tensors)}$" + esc(" are counted, as frameworks run "
                                                              "them: all ") + f"${poly(n.padded.tuples)}$")
                text += (esc(" tuples; ") + f"${poly(n.padded.inside)}$" + esc(" of them read "
                                                                                "inside the axis.")
                         if n.padded.inside is not None else
                         esc(" tuples; how many read inside the axis is not derived for this "
                             "index."))
            sentences.append(text)
        elif isinstance(n, PrefixNote):
            letters = r",\ ".join(m.t(x) for x in n.summed)
            text = (esc("A prefix sum: a running sum of ") + f"${m.t(n.operand)}$"
                    + esc(" along ") + f"${letters}$"
                    + esc(" (one add per element after the first of each row), ")
                    + f"${poly(n.scans)}$" + esc(" adds")
                    + (esc(", and a difference of running sums for each output element whose "
                           "range leaves out the start (or the end) of the axis, ")
                       + f"${poly(n.combines)}$" if n.combines != 0 else esc(", and no difference"))
                    + esc("; one add per term of the domain would be ") + f"${poly(n.direct)}$"
                    + esc("."))
            for grad, work in n.grads:
                text += (esc(" Its gradient ") + f"${m.t(grad)}$"
                         + esc(" is a sum that its output letter bounds too (a suffix sum where "
                               "the range runs to the end), counted the same way: ")
                         + f"${poly(work)}$" + esc(" adds."))
            sentences.append(text)
        elif isinstance(n, ConditionNote):
            domain = r",\ ".join(m.ix(f) for f in n.domain)
            sentences.append(
                esc("Summed over the domain ") + f"${domain}$"
                + esc(" only: ") + f"${poly(n.inside)}$" + esc(" of the ")
                + f"${poly(n.tuples)}$" + esc(f" tuples ({', '.join(n.letters)}); over the full "
                                              "range it would cost ")
                + f"${poly(n.full)}$" + esc(f" {unit}."))
    return " ".join(dict.fromkeys(sentences))


def _order_latex(e: Einsum, tree: Any, m: "Math") -> str:
    """An order of pairwise products in the sheet's notation: ``(dY_{sf} V_{tf}) Q_{se}``."""
    def text(t: Any, top: bool) -> str:
        if isinstance(t, int):
            return m.ix(e.factors[t])
        inner = rf"{text(t[0], False)}\, {text(t[1], False)}"
        return inner if top else rf"\left({inner}\right)"

    return text(tree, True)


def order_notes(name: str, choices: Sequence[OrderChoice], layer: Layer, m: Math,
                esc: Any) -> list[str]:
    """For each term whose cheapest orders cross: each order, its cost, when it
    is the cheapest, and which count the sheet uses."""
    notes = []
    names = {d.symbol: sympy.Symbol(P.symbol_name(d.name)) for d in layer.dims}
    for choice in choices:
        e, o, conditions = choice.term, choice.orders, choice.cheaper_when
        if o.bounded:
            at = ", ".join(f"{P.symbol_name(n)} = {v}" for n, v in o.sizes)
            cand = o.candidates[0]
            notes.append(esc("The search for the cheapest order of the pairwise products of ")
                         + f"${name}$" + esc(f" was bounded: {o.bounded}. Counted here: ")
                         + f"${_order_latex(e, cand.tree, m)}$" + esc(", which costs ")
                         + f"${m.poly(cand.total)}$" + esc(" FLOPs, the cheapest order at ")
                         + f"${at}$" + esc(f" (the declared sizes, and {DEFAULT_SIZE} for each "
                                           "dim they leave out); symflops eval, sweep and plan "
                                           "count the same order."))
            continue
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


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, primed until no declared name prints the same."""
    while base in taken:
        base += "'"
    return base


def _group(value: int) -> str:
    return f"{value:,}".replace(",", "{,}")


def _sci(value: int | float | Fraction) -> str:
    """``2.815 \\times 10^{14}``: four significant digits, for tables of numbers
    (an int beyond a float's range too: Decimal rounds it exactly; a fraction,
    such as a count of GB, from its exact decimal expansion)."""
    if value == 0:
        return "0"
    fraction = isinstance(value, Fraction) and value.denominator != 1
    if fraction and Fraction(1, 1000) <= abs(value) < 1000:
        return f"{_decimal(value):.4g}"
    if fraction and abs(value) < 100_000:  # four or five digits: the nearest whole number
        return _group(round(value))
    if not fraction and abs(value) < 100_000:
        return f"{value:.4g}" if isinstance(value, float) else _group(int(value))
    mantissa, exp = f"{_decimal(value):.3e}".split("e")
    return rf"{float(mantissa):.4g} \times 10^{{{int(exp)}}}"


def _decimal(value: int | float | Fraction) -> Decimal:
    """``value`` as a Decimal: exactly for an int or a float, to 40 digits for a fraction."""
    if not isinstance(value, Fraction):
        return Decimal(value)
    with localcontext() as ctx:
        ctx.prec = 40
        return Decimal(value.numerator) / Decimal(value.denominator)


#: The numbers table's rows: label (its unit in parentheses, ``{unit}`` the
#: FLOP unit) and the field of :class:`~symflops.count.explain.NumbersAt`.
NUMBER_ROWS = (
    ("forward ({unit})", "forward"),
    ("backward ({unit})", "backward"),
    ("training ({unit})", "training"),
    ("parameters (elements)", "params"),
    ("saved activations (elements)", "activations"),
    ("fixed memory (bytes)", "fixed_bytes"),
    ("activation memory (bytes)", "activation_bytes"),
    ("buffer memory (bytes)", "buffer_bytes"),  # only for a layer with buffers
    ("training memory (bytes)", "training_bytes"),
    ("training memory (GB)", "training_gb"),
    ("training memory (GiB)", "training_gib"),
)


def numbers_table(columns: Sequence[NumbersAt], unit: str, esc: Any) -> dict[str, Any] | None:
    """The numbers table, one column per configuration (None without any):
    ``heads``, each column's dims (math, without delimiters); ``dims``, the
    same one dim a string (``D = 4{,}096``), to stack them; ``names``, each
    column's example name (escaped text; "" for an ``--at`` column) and
    ``named``, whether any column has one (a row of names above the dims);
    ``rows``, each with its ``label`` (escaped text naming its unit) and its
    ``cells`` (math)."""
    if not columns:
        return None
    dims = [[f"{P.symbol_name(k)} = " + (_group(v) if abs(v) < 10**21 else _sci(v))
             for k, v in col.config] for col in columns]
    return {
        "heads": [r",\ ".join(col) for col in dims],
        "dims": dims,
        "names": [esc(col.name) if col.name is not None else "" for col in columns],
        "named": any(col.name is not None for col in columns),
        "rows": [{"label": esc(label.format(unit=unit)),
                  "cells": [_sci(getattr(col, field)) for col in columns]}
                 for label, field in NUMBER_ROWS
                 if field != "buffer_bytes" or any(col.buffer_bytes for col in columns)],
    }


def memory_rows(c: Costs, tensors: Sequence[Tensor], m: Math, esc: Any,
                 scales_batch: str, buffers: Sequence[Tensor] = (),
                 buffer_scales: str = "") -> list[Row]:
    """The seed's memory table: item, elements, bytes per element, bytes, scaling.
    Buffers, when there are any, get a row of their own at the parameter width
    (``buffer_scales`` says what they scale with)."""
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
    if buffers:
        rows.append(row(esc("Buffers") + " " + names([t.name for t in buffers])
                        + esc(" (constants: no gradient, not parameters)"),
                        c.buffers, prec.params, mem["buffers_bytes"], buffer_scales))
    return rows


_POLICY_TEXT = {"none": "none (keep every saved tensor)",
                "full": "full (each block keeps its input and runs its forward again)",
                "selective": "selective (recompute only the listed ops)",
                "fused_attention": "fused attention (the attention core's scores and "
                                   "probabilities recomputed, one statistic per row kept)"}


def model_section(w: WholeModel | None, layer: Layer, costs: Costs, poly: Any, m: Math,
                  esc: Any, show: Callable[[Equation], str], taken: set[str]
                  ) -> dict[str, Any] | None:
    """The whole-model section: blocks, parameter classes, FLOPs per token
    against 6N, recomputation, the key/value cache.  None for a layer that
    declares no tokens and includes no block (``w`` is None)."""
    if w is None:
        return None
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
    # The dense-parameter counts take names no declared tensor or dim prints as.
    dense = Named.of(fresh_name(r"N_{\text{dense}}", taken), par.dense)
    active = Named.of(fresh_name(r"N_{\text{active}}", taken), par.active_dense)
    six = active if par.active != par.total else dense
    return {
        "dense_line": show(chain(side(par.dense), name=dense)),
        "active_line": (show(chain(side(par.active_dense), name=active))
                        if par.active != par.total else None),
        "six_n_symbol": r"6 \cdot " + six.latex,
        "six_symbol": six.latex,
        "six_n_line": None if per is None else show(
            chain((Part(factors=(EqFactor(sympy.Integer(6)),), named=six),), side(per.six_n))),
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
