"""The sheet's context: every formula of a sheet, computed from the records,
as LaTeX math (which Markdown viewers render between ``$``), with every
piece of user text escaped for the target format, so that templates only
place strings and never compute.
"""

from __future__ import annotations

import os
from typing import Any, Sequence, TypedDict

import sympy

from . import printing as P
from .backward import backward_rows, gradient_flow
from .counts import (Row, domain_note, fresh_name, flops_story, memory_rows, model_section, numbers_table,
                     order_notes)
from .derivations import derivation_lines, function_items, reduction_lines
from .environment import Format
from .loops import loop_items
from .recurrences import recurrence_items
from .solves import solve_items
from .tables import backward_table, forward_table
from .front import FrontContext, front_context
from .teach import TeachingContext, teaching_context
from .words import role_words
from .why import WhyContext, why_context
from .windows import window_context
from .devices import devices_context
from .hybrid import hybrid_context
from ..count.facts import layer_facts
from .equations import Equation, Factor as EqFactor, Named, Part, Printer, Side, chain, grouped, side
from .escape import CODE_ESCAPES, ESCAPES
from .notation import Math, Substituted, fold_lines, sympy_latex
from ..count.explain import SheetCounts
from ..core.ir import Layer
from ..core.records import Derivation, matrix_form
from ..count.cost import Costs


class SheetContext(TeachingContext):
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
    param_symbol: str
    forward: list[dict[str, Any]]
    #: the forward pass as one table (more than COMPACT_OPS ops)
    compact: bool
    forward_line: str
    forward_headline: str
    forward_total: str
    forward_elementwise: str
    backward_elementwise: str
    generic: list[dict[str, Any]]
    normalizations: list[dict[str, Any]]
    recurrences: list[dict[str, Any]]
    loops: list[dict[str, Any]]
    solves: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    backward: list[dict[str, Any]]
    backward_lines: list[str]
    order_notes: list[str]
    backward_line: str
    backward_headline: str
    backward_total: str
    ratio: str | None
    chain: str | None
    flow_needs: list[str]
    saved: list[dict[str, str]]
    saved_names: str
    training_total: str
    training_headline: str
    elementwise: str | None
    memory_rows: list[Row]
    precision: str
    fixed_bytes: str
    buffer_bytes: str | None  # None without buffers
    buffer_names: str
    activation_bytes: str
    activation_elements: str
    inference_peak: str
    inference_candidates: list[str]
    batch_dims: str
    numbers: dict[str, Any] | None
    model: dict[str, Any] | None
    #: the front page: the per-component table and its headline formulas
    front: FrontContext
    #: the sentences that say why, each produced only when the facts make it true
    why: WhyContext
    #: parameters the copies of a repeated block share (``shared:``), None without any
    tied: dict[str, Any] | None
    #: every equality the sheet displays, as the records it was printed from
    equations: list[Equation]
    #: the sliding windows, each beside the other accounts' figures (symflops.sheets.windows)
    windows: list[dict[str, Any]]
    #: one device's share, the collectives and thresholds under ``parallel:`` (symflops.sheets.devices)
    devices: dict[str, Any] | None
    #: a hybrid model's state-space and attention layers per token, and their crossing
    #: length (symflops.sheets.hybrid); None for other layers
    hybrid: dict[str, Any] | None
    #: a long layer's forward and backward tables on the LaTeX page: their
    #: column widths and cells set to fit (symflops.sheets.tables); None otherwise
    tables: dict[str, Any] | None


#: Beyond this many ops the forward pass is one table (a model's sheet stays short).
COMPACT_OPS = 8


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
    # A tensor that would print as a dim prints primed (llama's values V, beside
    # the vocabulary V): one symbol, one meaning on a page.
    dims = {P.symbol_name(d.name) for d in layer.dims}
    m = Math(poly, frozenset(t.name for t in layer.tensors)
             | {t.name + P.PRIME for t in layer.tensors if P.symbol_name(t.name) in dims})
    unit = costs.unit

    # Derived quantities take names no declared tensor or dim prints as.
    taken = {m.t(t.name) for t in layer.tensors} | dims
    n_param = Named.of(fresh_name(r"N_{\text{param}}", taken), costs.params)
    equations: list[Equation] = []
    say = Printer(poly)

    def show(eq: Equation) -> str:
        """Print ``eq`` and keep it, so that every displayed equality can be proven."""
        equations.append(eq)
        return say(eq)

    def per_param(expr: sympy.Expr) -> Side | None:  # "= 6 N B"; nothing to say about 0
        q = costs.per_param(expr) if costs.params != 0 and expr != 0 else None
        return None if q is None else (Part(factors=(EqFactor(q),), named=n_param),)

    def total_line(values: Sequence[sympy.Expr], copies: Sequence[sympy.Expr],
                   total: sympy.Expr) -> str:
        """``sum of the ops' counts (with their copies) = total [= k N_param B]``."""
        extra = per_param(total)
        return show(chain(grouped(values, copies), side(total), *([extra] if extra else [])))

    def headline(total: sympy.Expr) -> str:
        extra = per_param(total)
        return show(chain(side(total), *([extra] if extra else [])))

    compact = len(layer.ops) > COMPACT_OPS
    forward = [{
        "statement": code(op.statement()),
        "index": op.latex(m),
        "definition": (None if op.formula() is None else
                       f"{m.ix(op.out)} = " + sympy_latex(op.formula(), m)),
        "matrix": m.matrix(matrix_form(op.terms[0])) if len(op.terms) == 1 else None,
        "flops": poly(c.flops),
        "elementwise": poly(c.elementwise) if c.elementwise != 0 else None,
        # a long layer's forward pass is a table of totals: the story is told op by op only
        "story": poly(c.flops) if compact else show(flops_story(x.pairwise, c.flops)),
        "note": " ".join(filter(None, [domain_note(x.domain, unit, m, esc), *order_notes(
            m.t(op.output), x.orders, layer, m, esc)])),
    } for op, c, x in zip(layer.ops, costs.forward, counts.forward)]
    copies = costs.forward_copies
    first_of_kind: dict[str, int] = {}
    for i, (op, f) in enumerate(zip(layer.ops, forward)):
        f["number"] = i + 1
        f["copies"] = poly(copies[i]) if copies[i] != 1 else None
        # a definition is shown once per kind of op (rmsnorm, softmax, ...): the others point to it
        # (a masked softmax is not defined as an unmasked one is: the mask's relations count)
        mask = ",".join(str(f.fn) for f in getattr(op, "conditions", ()))
        kind = f"{type(op).__name__}:{getattr(op, 'kind', '')}:{mask}"
        f["same_as"] = first_of_kind.setdefault(kind, i + 1) if f["definition"] else None
    for i, f in enumerate(forward):  # a run of ops from one repeated block: said once, at its start
        n = copies[i]
        f["run"] = None
        if n != 1 and (i == 0 or copies[i - 1] != n):
            j = i
            while j + 1 < len(copies) and copies[j + 1] == n:
                j += 1
            f["run"] = {"first": i + 1, "last": j + 1, "copies": poly(n)}

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
        first, *others = pattern.applies_to
        generic.append({
            "op": m.index_form(g),
            "matrix": m.matrix(matrix_form(g)),
            "output": m.t(g.output.tensor),
            "gradient": m.t("d" + g.output.tensor),
            "first": m.t(first),
            "applies_to": m.ts(list(pattern.applies_to)),
            "others": m.ts(others) if others else None,
            "rules": [{"wrt": m.t(r.wrt), "lines": fold(derivation_lines(r.rules, m))}
                      for r in pattern.rules],
            "boxed": [m.matrix(rule.matrix_form) for r in pattern.rules for rule in r.rules
                      if rule.matrix_form is not None],
        })

    worked = counts.worked

    backward = backward_rows(derivation, costs, m, poly)
    for b in backward:  # how many times the row runs: once per copy of its repeated block
        n = costs.backward_copies[b["rule"] if b["rule"] is not None else b["last"]]
        b["copies"] = poly(n) if n != 1 else None
    by_rule = {b["rule"]: b for b in backward if b["rule"] is not None}
    flow_chain, flow_needs = gradient_flow(derivation, m)

    batch = sorted(counts.batch, key=poly.rank)
    batch_dims = ", ".join(P.symbol_name(str(s)) for s in batch)
    scales_batch = esc("batch") + (f" (${batch_dims}$)" if batch_dims else "")
    mem = costs.memory()
    ew = counts.elementwise
    params = layer.params
    p_line = None
    if params:
        p_line = show(chain(grouped([t.elements for t in params],
                                    [layer.copies(t.name) for t in params]),
                            side(costs.params), name=n_param))

    headlines = {"forward": headline(costs.flops_forward),
                 "backward": headline(costs.flops_backward),
                 "training": headline(costs.flops_total)}
    teaching = teaching_context(derivation, counts, backward, headlines, m, esc, poly,
                                shape_poly, show, n_param, taken, fresh_name)
    return SheetContext(
        **teaching,
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
                  "role": esc(role_words(t.role, t.requires_grad))
                          + _shared_role(layer, t.name, poly, esc),
                  "shape": P.shape(t.shape, shape_poly), "description": esc(t.description),
                  # the table lists what the user declares; the ops' outputs follow in one line
                  "computed": t.role == "activation"}
                 for t in layer.tensors],
        outputs=m.ts(layer.outputs),
        output_grads=", ".join(rf"{m.t('d' + n)} = \partial \mathcal{{L}} / \partial {m.t(n)}"
                               for n in layer.outputs),
        P=p_line,
        forward=forward,
        compact=compact,
        param_symbol=n_param.latex,
        forward_line=total_line([c.flops for c in costs.forward], costs.forward_copies,
                                costs.flops_forward),
        forward_headline=headline(costs.flops_forward),
        forward_total=poly(costs.flops_forward),
        forward_elementwise=poly(costs.elementwise_forward),
        backward_elementwise=poly(costs.elementwise_backward),
        generic=generic,
        normalizations=normalizations,
        recurrences=recurrence_items(derivation, costs, m, poly, fold),
        loops=loop_items(derivation, costs, m, poly),
        solves=solve_items(derivation, costs, m, poly, fold),
        functions=function_items(layer, derivation, m),
        backward=backward,
        backward_lines=[line for b in backward for line in b["index_lines"]],
        order_notes=[n for r, x in zip(derivation.rules, counts.backward)
                     for n in order_notes(m.t(r.grad), x, layer, m, esc)],
        backward_line=total_line([c.flops for c in costs.backward], costs.backward_copies,
                                 costs.flops_backward),
        backward_headline=headline(costs.flops_backward),
        backward_total=poly(costs.flops_backward),
        ratio=_ratio(counts.backward_per_forward),
        chain=flow_chain,
        flow_needs=flow_needs,
        saved=[{"name": m.t(s.name),
                "elements": (poly(s.elements) if s.copies == 1
                             else rf"{poly(s.copies)} \times {poly(s.elements)}"),
                # the rules are cited by the gradient they compute (each is in the table whole)
                "rules": ", ".join("$" + by_rule[i]["grad"] + "$"
                                   for i, r in enumerate(derivation.rules) if s.name in r.reads)}
               for s in costs.saved],
        saved_names=", ".join(f"${m.t(s.name)}$" for s in costs.saved),  # one span each: wraps
        training_total=poly(costs.flops_total),
        training_headline=headline(costs.flops_total),
        elementwise=poly(ew) if ew != 0 else None,
        memory_rows=memory_rows(costs, layer.params, m, esc, scales_batch, layer.buffers,
                                scales_batch if costs.buffers.free_symbols & set(batch)
                                else esc("model")),
        buffer_bytes=poly(mem["buffers_bytes"]) if layer.buffers else None,
        buffer_names=", ".join(f"${m.t(t.name)}$" for t in layer.buffers),
        precision=esc(f"{costs.precision.name}: {costs.precision.description}"),
        fixed_bytes=poly(mem["fixed_bytes"]),
        activation_bytes=poly(mem["activation_bytes"]),
        activation_elements=poly(costs.activations),
        inference_peak=poly(counts.inference_peak),
        inference_candidates=[poly(a) for a in counts.inference_candidates],
        batch_dims=batch_dims,
        numbers=numbers_table(counts.numbers, unit, esc),
        model=model_section(counts.model, layer, costs, poly, m, esc, show, taken),
        front=front_context(derivation, costs, counts.model, poly, m, esc, show, n_param, taken,
                            dict(worked.config) if worked else None,
                            worked.name if worked else None, headlines=False),
        why=why_context(layer, layer_facts(derivation, costs), m, esc, unit,
                        dict(worked.config) if worked else None),
        tied=tied_context(derivation, costs, m, esc, show),
        equations=equations,
        windows=window_context(derivation, counts, m, esc),
        devices=devices_context(derivation, counts, m, esc, code),
        hybrid=hybrid_context(derivation, counts, m, esc),
        tables=({"forward": forward_table(forward, unit), "backward": backward_table(backward, unit)}
                if compact and fmt == "tex" else None),
    )


def _shared_role(layer: Layer, name: str, poly: Any, esc: Any) -> str:
    """``, shared by the L copies of block`` for a ``shared:`` parameter, else ''."""
    blocks = layer.sharing(name)
    if not blocks:
        return ""
    return (esc(", shared by the ") + f"${poly(layer.uses(name) / layer.copies(name))}$"
            + esc(" copies of " + " in ".join(b.name for b in reversed(blocks))))


def tied_context(derivation: Derivation, costs: Costs, m: Math, esc: Any,
                 show: Any) -> dict[str, Any] | None:
    """What the sheet says of parameters shared by a repeated block's copies:
    each one's gradient as the sum of its copies' contributions, and the
    additions that sum costs (the engine's :attr:`Costs.shared_sum`, shown as
    a proven equation)."""
    layer = derivation.layer
    names = [t.name for t in layer.params if layer.sharing(t.name)]
    if not names:
        return None
    wanted = [n for n in names if n in derivation.needs_grad]
    items = []
    for n in wanted:
        copies = layer.uses(n) / layer.copies(n)
        grad = m.t("d" + n)
        items.append({"name": m.t(n), "copies": m.poly(copies),
                      "sum": rf"{grad} = \sum_{{\ell=1}}^{{{m.poly(copies)}}} {{{grad}}}^{{(\ell)}}"})
    tensors = layer.tensor_map
    contributions = [sympy.Integer(0)] * len(wanted)
    for r, n in zip(derivation.rules, costs.backward_copies):
        if r.wrt in wanted:
            contributions[wanted.index(r.wrt)] += n
    by_count: dict[sympy.Expr, sympy.Expr] = {}  # additions per element -> elements
    for n, c in zip(wanted, contributions):
        k = sympy.expand(c - layer.copies(n))
        by_count[k] = sympy.expand(by_count.get(k, sympy.Integer(0)) + tensors[n].elements)
    adds = None
    if wanted:
        terms = [(t, k) for k, e in by_count.items() for t in sympy.Add.make_args(e)]
        adds = show(chain(grouped([t for t, _ in terms], [k for _, k in terms]),
                          side(costs.shared_sum)))
    return {"names": m.ts(names), "grads": items, "are": "are" if len(names) > 1 else "is", "adds": adds,
            "elements": m.poly(sum((tensors[n].elements for n in names), sympy.Integer(0)))}
