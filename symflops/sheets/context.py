"""The sheet's context: every formula of a sheet, computed from the records,
as LaTeX math (which Markdown viewers render between ``$``), with every
piece of user text escaped for the target format, so that templates only
place strings and never compute.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

import sympy

from . import printing as P
from .counts import (Row, domain_note, flops_story, memory_rows, model_section, numbers_table,
                     order_notes)
from .derivations import derivation_lines, function_items, reduction_lines
from .environment import Format
from .escape import CODE_ESCAPES, ESCAPES
from .notation import Math, Substituted, fold_lines, sympy_latex
from ..count.explain import SheetCounts
from ..core.records import Derivation, IndexTerm, matrix_form


class SheetContext(TypedDict):
    """Every variable a sheet template may use.  Math strings are LaTeX
    without delimiters; text strings are already escaped for the format."""

    fmt: Format
    name: str
    title: str
    source: str
    unit: str
    unit_note: str
    order_note: str
    dims: list[dict[str, str]]
    tensors: list[dict[str, str]]
    outputs: str
    output_grads: str
    P: str | None
    forward: list[dict[str, Any]]
    forward_sum: str
    forward_total: str
    forward_elementwise: str
    backward_elementwise: str
    forward_per_param: str | None
    generic: list[dict[str, Any]]
    normalizations: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    backward: list[dict[str, Any]]
    backward_lines: list[str]
    order_notes: list[str]
    backward_sum: str
    backward_total: str
    backward_per_param: str | None
    ratio: str | None
    chain: str | None
    saved: list[dict[str, str]]
    saved_names: str
    training_total: str
    training_per_param: str | None
    elementwise: str | None
    memory_rows: list[Row]
    precision: str
    fixed_bytes: str
    activation_bytes: str
    activation_elements: str
    inference_peak: str
    inference_candidates: list[str]
    batch_dims: str
    numbers: dict[str, Any] | None
    model: dict[str, Any] | None


def _ratio(q: sympy.Rational | None) -> str | None:
    """``forward : backward``, from backward / forward."""
    if q is None:
        return None
    if q.is_Integer:
        return f"1 : {int(q)}"
    return f"{q.q} : {q.p}"



def sheet_context(derivation: Derivation, counts: SheetCounts, fmt: Format) -> SheetContext:
    """Everything the sheet shows, formatted from the derivation (its patterns
    prepared) and the sheet's counts, escaped for ``fmt``."""
    esc, code = ESCAPES[fmt], CODE_ESCAPES[fmt]
    fold = fold_lines if fmt == "tex" else (lambda lines: lines)
    costs = counts.costs
    layer = derivation.layer
    shape_poly = P.PolyPrinter(tuple(d.name for d in layer.dims))
    poly = Substituted(shape_poly, tuple(layer.substitutions.items()))
    m = Math(poly, frozenset(t.name for t in layer.tensors))
    tensors = layer.tensor_map
    unit = costs.unit

    # The parameter count is P, unless a dim is named P (a convolution's positions).
    psym = r"N_{\mathrm{param}}" if any(d.name == "P" for d in layer.dims) else "P"

    def per_param(expr: sympy.Expr) -> str | None:  # "= 6 P B"; nothing to say about 0
        q = costs.per_param(expr) if costs.params != 0 and expr != 0 else None
        return poly.times_params(q, psym) if q is not None else None

    forward = [{
        "statement": code(op.statement()),
        "index": op.latex(m),
        "definition": (None if op.formula() is None else
                       f"{m.ix(op.out)} = " + sympy_latex(op.formula(), m)),
        "matrix": m.matrix(matrix_form(op.terms[0])) if len(op.terms) == 1 else None,
        "flops": poly(c.flops),
        "elementwise": poly(c.elementwise) if c.elementwise != 0 else None,
        "story": flops_story(x.pairwise, c.flops, poly),
        "note": " ".join(filter(None, [domain_note(x.domain, unit, m, esc), *order_notes(
            m.t(op.output), x.orders, layer, m, esc)])),
    } for op, c, x in zip(layer.ops, costs.forward, counts.forward)]

    normalizations = []
    for op in layer.ops:
        red = op.shown()
        if red is None or op.output not in derivation.needs_grad:
            continue
        normalizations.append({"op": op.latex(m), "grad": m.t(red.lhs.tensor),
                               "lines": fold(reduction_lines(red, m))})

    if derivation.patterns is None:
        raise ValueError("the derivation's patterns are not prepared: "
                         "pass symflops.derive.patterns.with_patterns(derivation)")
    generic: list[dict[str, Any]] = []
    for pattern in derivation.patterns:
        g = pattern.term
        gm = Math(poly, frozenset(f.tensor for f in (g.output, *g.operands)))
        generic.append({
            "op": gm.index_form(g),
            "matrix": gm.matrix(matrix_form(g)),
            "output": gm.t("Y"),
            "gradient": gm.t("dY"),
            "applies_to": m.ts(list(pattern.applies_to)),
            "rules": [{"wrt": gm.t(r.wrt), "lines": fold(derivation_lines(r.rules, gm))}
                      for r in pattern.rules],
            "boxed": [gm.matrix(rule.matrix_form) for r in pattern.rules for rule in r.rules
                      if rule.matrix_form is not None],
        })

    backward = []
    for r, c in zip(derivation.rules, costs.backward):
        terms = [IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms]
        lhs = m.ix(r.terms[0].output)
        pieces = [m.terms([t]) for t in terms]
        backward.append({
            "grad": m.t(r.grad),
            "index": f"{lhs} = " + m.terms(terms),
            "index_lines": [f"{lhs} &= {pieces[0]}"] + [
                (r"&\quad - " + p[1:]) if p.startswith("-") else (r"&\quad + " + p)
                for p in pieces[1:]],
            "matrix": m.matrix(r.matrix_form),
            "flops": poly(c.flops),
            "elementwise": poly(c.elementwise),
            "op": m.t(layer.ops[r.op].output),
        })

    # The gradient chain through activations and inputs: dY -> dH -> dX.
    flow = ["d" + n for n in layer.outputs]
    for r in derivation.rules:
        if not tensors[r.wrt].is_param and r.grad not in flow:
            flow.append(r.grad)
    chain = r" \;\longrightarrow\; ".join(m.t(n) for n in flow) if len(flow) > 1 else None

    batch = sorted(counts.batch, key=poly.rank)
    batch_dims = ", ".join(P.symbol_name(str(s)) for s in batch)
    scales_batch = esc("batch") + (f" (${batch_dims}$)" if batch_dims else "")
    mem = costs.memory()
    ew = counts.elementwise
    params = layer.params
    p_line = None
    if params:
        p_line = f"{psym} = " + " + ".join(poly(t.elements) for t in params)
        if len(params) > 1:
            p_line += f" = {poly(costs.params)}"

    return SheetContext(
        fmt=fmt,
        name=esc(layer.name),
        title=esc(layer.title),
        source=code(os.path.basename(layer.source)),
        unit=esc(unit),
        unit_note=esc("one multiply-add = 2 FLOPs" if unit == "FLOPs"
                      else "one multiply-accumulate = 1 MAC"),
        order_note=esc("Products of several tensors are contracted pairwise: forward terms "
                       + ("in the cheapest order" if layer.forward_order == "cheapest"
                          else "in the order written")
                       + ", backward rules in the cheapest order. A pairwise product that "
                         "multiplies two tensors, sums over a letter and keeps a letter only one "
                         "of them has (a matrix product) counts as matmul-type; all other work "
                         "is elementwise."),
        dims=[{"name": P.symbol_name(d.name), "description": esc(d.description)}
              for d in layer.dims],
        tensors=[{"name": m.t(t.name),
                  "role": esc({"activation": "computed"}.get(t.role, t.role)
                              + ("" if t.requires_grad or t.role in ("activation", "frozen")
                                 else ", no gradient")),
                  "shape": P.shape(t.shape, shape_poly), "description": esc(t.description)}
                 for t in layer.tensors],
        outputs=m.ts(layer.outputs),
        output_grads=", ".join(rf"{m.t('d' + n)} = \partial L / \partial {m.t(n)}"
                               for n in layer.outputs),
        P=p_line,
        forward=forward,
        forward_sum=" + ".join(f["flops"] for f in forward if f["flops"] != "0") or "0",
        forward_total=poly(costs.flops_forward),
        forward_elementwise=poly(costs.elementwise_forward),
        backward_elementwise=poly(costs.elementwise_backward),
        forward_per_param=per_param(costs.flops_forward),
        generic=generic,
        normalizations=normalizations,
        functions=function_items(layer, derivation, m),
        backward=backward,
        backward_lines=[line for b in backward for line in b["index_lines"]],
        order_notes=[n for r, x in zip(derivation.rules, counts.backward)
                     for n in order_notes(m.t(r.grad), x, layer, m, esc)],
        backward_sum=" + ".join(b["flops"] for b in backward if b["flops"] != "0") or "0",
        backward_total=poly(costs.flops_backward),
        backward_per_param=per_param(costs.flops_backward),
        ratio=_ratio(counts.backward_per_forward),
        chain=chain,
        saved=[{"name": m.t(s.name), "elements": poly(s.elements),
                "rules": ", ".join("$" + (m.matrix(r.matrix_form) or m.index_form(r.terms[0])) + "$"
                                   for r in derivation.rules if s.name in r.reads)}
               for s in costs.saved],
        saved_names=", ".join(f"${m.t(s.name)}$" for s in costs.saved),  # one span each: wraps
        training_total=poly(costs.flops_total),
        training_per_param=per_param(costs.flops_total),
        elementwise=poly(ew) if ew != 0 else None,
        memory_rows=memory_rows(costs, layer.params, m, esc, scales_batch),
        precision=esc(f"{costs.precision.name}: {costs.precision.description}"),
        fixed_bytes=poly(mem["fixed_bytes"]),
        activation_bytes=poly(mem["activation_bytes"]),
        activation_elements=poly(costs.activations),
        inference_peak=poly(counts.inference_peak),
        inference_candidates=[poly(a) for a in counts.inference_candidates],
        batch_dims=batch_dims,
        numbers=numbers_table(counts.numbers, unit, esc),
        model=model_section(counts.model, layer, costs, poly, m, esc),
    )
