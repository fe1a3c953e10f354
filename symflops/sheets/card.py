"""The sheet's first page: the card a lecturer can hand out alone.

What the layer costs to run forward, backward and in training, in FLOPs,
with the rule of thumb it confirms or breaks (2N per token forward, 6N
training, each departure named by its cause, term by term: :mod:`symflops.count.beyond`);
what training keeps in memory, in bytes, each row with what it grows with
in words; the other common optimizer policy's total in one line; and the
contrast between inference (no activations kept) and training (the saved set).

Invariants: every formula comes from the count records and every displayed
equality is an :class:`~symflops.sheets.equations.Equation` (kept by
``show`` for the equation test); a cause is said only where the engine found
it (:class:`~symflops.count.beyond.BeyondPart`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypedDict

import sympy

from . import printing as P
from .equations import Equation, Factor as EqFactor, Named, Part, chain, side
from .notation import Math
from .words import Escape, growth_phrase, names, noun
from ..count.beyond import BeyondPart
from ..count.components import op_rows
from ..count.cost import Costs
from ..count.growth import growth
from ..count.precision import POLICIES, Precision, dtype_name
from ..count.records import WholeModel
from ..core.ir import Layer, substitute


class CardLine(TypedDict):
    label: str   # escaped text
    math: str    # LaTeX, no delimiters
    note: str    # escaped text with math spans; may be empty


class CardContext(TypedDict):
    flops: list[CardLine]
    #: the causes of training minus 6N, one sentence each (empty when exactly 6N)
    beyond: list[str]
    memory: list[CardLine]
    other_policy: str | None
    contrast: str
    noun: str


#: The policy a reader compares with, for each: bf16 Adam against the usual
#: mixed-precision Adam with fp32 master weights (16 bytes per parameter), and
#: every other policy against that one.
OTHER_POLICY = {"bf16-adam": "mixed-adam", "mixed-adam": "bf16-adam", "fp32-adam": "mixed-adam",
                "bf16-sgd": "mixed-adam"}


def rows_of_ops(layer: Layer) -> dict[int, str]:
    """Each op's component name (or its output, for an op no component names)."""
    return {k: name for name, _, ks in op_rows(layer) for k in ks}


def cause_sentences(parts: Sequence[BeyondPart], layer: Layer, m: Math, esc: Escape,
                    poly: Callable[[sympy.Expr], str], tokens: bool = True) -> list[str]:
    """Each cause of training minus 6N in words, parts of one cause and one
    component together, with their FLOPs per token (or per pass)."""
    rows = rows_of_ops(layer)
    groups: dict[tuple[str, str, str | None], list[BeyondPart]] = {}
    for p in parts:
        key = (p.cause, rows.get(p.op, p.output), p.reason if p.cause == "no_gradient" else None)
        groups.setdefault(key, []).append(p)
    per = esc(" per token" if tokens else "")
    out = []
    for (cause, row, _), ps in groups.items():
        total = sympy.expand(substitute(sum((p.per_token for p in ps), sympy.Integer(0)),
                                        layer.substitutions))
        amount = ("+" if not total.could_extract_minus_sign() else "-") + " " + poly(
            -total if total.could_extract_minus_sign() else total)
        ops = names([f"${m.t(p.output)}$" for p in ps], esc)
        where = esc(f" ({row})") if row not in {p.output for p in ps} else ""
        head = f"${amount}$" + per + esc(" from ") + ops + where + esc(": ")
        out.append(head + _why(cause, ps, layer, m, esc))
    return out


def _why(cause: str, ps: Sequence[BeyondPart], layer: Layer, m: Math, esc: Escape) -> str:
    if cause == "no_weight":
        pairs = [names([f"${m.t(t)}$" for t in p.tensors], esc) for p in ps]
        context = any(getattr(layer.ops[p.op], "conditions", ()) or any(
            f.is_comparison for t in layer.ops[p.op].terms for f in t.operands) for p in ps)
        return (esc("they multiply activations (") + esc("; ").join(pairs)
                + esc("), no weight, so 6N counts nothing for them")
                + (esc(": the products over the context") if context else "") + esc("."))
    if cause == "padding":
        return esc("their products run on every row, padding slots included, while 6N counts "
                   "the rows a token fills.")
    if cause == "once_per_pass":
        return esc("it runs once per pass (a weight built from weights), while 6N counts its "
                   "parameters for every token.")
    if cause == "no_gradient":
        p = ps[0]
        what = {"frozen": " is frozen", "first_input": " is the network's first input",
                "buffer": " is a constant table"}.get(p.reason or "", " needs no gradient")
        return (f"${m.t(p.tensors[0])}$" + esc(what + ": its product runs forward and passes "
                                               "the gradient on, but no gradient of ")
                + f"${m.t(p.tensors[0])}$" + esc(" is computed (one backward product, not two)."))
    if cause == "fewer_copies":
        return esc("the first copy of the block computes no gradient for its input.")
    if cause == "order":
        return esc("a backward product costs more or less than the forward product.")
    return esc("what its products cost beyond 6 FLOPs per parameter they read, for no cause "
               "the engine names.")


def memory_lines(layer: Layer, costs: Costs, m: Math, esc: Escape,
                 poly: Callable[[sympy.Expr], str]) -> list[CardLine]:
    """The training memory in bytes, row by row, each with what it grows with."""
    p = costs.precision
    mem = costs.memory()
    out: list[CardLine] = []
    fixed_note = _per_param(p, costs)
    out.append(CardLine(label=esc("Weights, gradients and optimizer state (bytes)"),
                        math=poly(mem["fixed_bytes"]),
                        note=esc(fixed_note + "; the model only, not the tokens")))
    groups: dict[tuple[str, int], list[Any]] = {}
    for s in costs.saved:
        kind = ("index tensors" if s.width is not None else "keep-masks" if s.mask
                else "saved activations")
        groups.setdefault((kind, s.element_bytes(p)), []).append(s)
    for (kind, width), saved in groups.items():
        total = sympy.expand(sum((s.total * width for s in saved), sympy.Integer(0)))
        grows = growth_phrase(layer, growth(layer, substitute(total, layer.substitutions)), esc)
        label = esc(f"{kind[0].upper()}{kind[1:]} at {width} byte{'s' if width != 1 else ''} "
                    f"({_dtype(width, kind)}): ")
        shown = [s.name for s in saved]
        listing = names([f"${m.t(n)}$" for n in shown[:4]], esc) + (
            esc(f" and {len(shown) - 4} more") if len(shown) > 4 else "")
        out.append(CardLine(label=label + listing, math=poly(total),
                            note=(esc("grows ") + grows) if grows else esc("a fixed size")))
    if costs.buffers != 0:
        out.append(CardLine(label=esc("Constant tables (buffers)"), math=poly(mem["buffers_bytes"]),
                            note=esc("kept whatever the backward pass needs")))
    return out


def _dtype(width: int, kind: str) -> str:
    if kind == "index tensors":
        return {1: "int8", 2: "int16", 4: "int32", 8: "int64"}[width]
    if kind == "keep-masks":
        return "8-bit"
    return dtype_name(width)


def _per_param(p: Precision, costs: Costs) -> str:
    """``12 bytes per parameter: 2 weight + 2 gradient + 4 + 4 Adam m and v``."""
    parts = [f"{p.params} weight", f"{p.grads} gradient"]
    for state in p.state_names:
        parts.append(f"{p.optimizer} {state}")
    if p.master:
        parts.append(f"{p.master} master weight ({dtype_name(p.master)})")
    each = f"{p.bytes_per_trainable_param} bytes per trained parameter: " + " + ".join(parts)
    if costs.trainable != costs.params:
        each += f"; {p.params} per frozen parameter"
    return each


def other_policy_line(costs: Costs, esc: Escape, poly: Callable[[sympy.Expr], str],
                      show: Callable[[Equation], str]) -> str | None:
    """One line with the other common policy's fixed bytes (see
    :data:`OTHER_POLICY`), as a proven equation."""
    if costs.trainable == 0:
        return None
    p = costs.precision
    q = POLICIES[OTHER_POLICY[p.name]]
    frozen = sympy.expand(costs.params - costs.trainable)
    total = sympy.expand(costs.trainable * q.bytes_per_trainable_param + frozen * q.params)
    eq = chain((Part(terms=(costs.trainable,), factors=(EqFactor(q.bytes_per_trainable_param),)),
                *((Part(terms=(frozen,), factors=(EqFactor(q.params),)),) if frozen != 0 else ())),
               side(total))
    return (esc(f"Under {q.name} the fixed part is ") + f"${show(eq)}$"
            + esc(f" bytes: {_per_param(q, costs)}, against {p.bytes_per_trainable_param} here."))


def contrast_sentence(layer: Layer, costs: Costs, inference_peak: sympy.Expr,
                      candidates: Sequence[sympy.Expr], m: Math, esc: Escape,
                      poly: Callable[[sympy.Expr], str]) -> str:
    """Inference keeps no activations; training keeps the saved set."""
    live = (f"${poly(inference_peak)}$" if len(candidates) <= 1 else
            esc("the largest of ") + ", ".join(f"${poly(c)}$" for c in candidates)
            if len(candidates) <= 3 else
            esc(f"the largest of {len(candidates)} sets, which depends on the sizes"))
    head = (esc("Inference runs the forward pass only and keeps no activations: each tensor is "
                "dropped once the ops that read it have run (at most ") + live
            + esc(" elements live at once). "))
    if not costs.saved:
        return head + esc("Training keeps nothing more: no backward rule reads a forward tensor.")
    shown = [s.name for s in costs.saved]
    listing = names([f"${m.t(n)}$" for n in shown[:8]], esc) + (
        esc(f" and {len(shown) - 8} more") if len(shown) > 8 else "")
    return (head + esc("Training must keep ") + listing
            + esc(" from the forward pass until the backward pass reaches the rules that read "
                  "them: ") + f"${poly(costs.activations)}$" + esc(" elements."))


def flops_lines(layer: Layer, costs: Costs, model: WholeModel | None, headlines: dict[str, str],
                m: Math, esc: Escape, poly: Callable[[sympy.Expr], str],
                show: Callable[[Equation], str], n_param: Named, taken: set[str],
                twice: bool, fresh: Callable[[str, set[str]], str]) -> tuple[list[CardLine], str | None]:
    """The FLOPs lines (forward, backward, training, inference, elementwise)
    and, where 6N splits the training count, the N of 6N's line."""
    unit = costs.unit
    lines = [CardLine(label=esc(f"Forward ({unit})"), math=headlines["forward"], note=""),
             CardLine(label=esc(f"Backward ({unit})"), math=headlines["backward"],
                      note=esc("2 × forward: each matrix product has two backward products "
                               "(its input's and its weight's gradient), each as large as "
                               "itself") if twice else "")]
    per = model.per_token if model is not None else None
    tokens = model.tokens if model is not None else None
    training = CardLine(label=esc(f"Training ({unit})"), math=headlines["training"], note="")
    active_line = None
    if (per is not None and tokens is not None and unit == "FLOPs"
            and sympy.expand(model.parameters.active_dense) == 0
            and sympy.expand(per.beyond_six_n) != 0):
        training = CardLine(label=training["label"], math=headlines["training"], note=esc(
            "no parameter is read by a product, so 6N is 0: all of it is the parts below"))
    elif per is not None and tokens is not None and unit == "FLOPs":
        same = sympy.expand(model.parameters.active_dense - costs.params) == 0
        active = n_param if same else Named.of(fresh(r"N_{\text{active}}", taken),
                                               model.parameters.active_dense)
        beyond = sympy.expand(tokens * per.beyond_six_n)
        six = (Part(factors=(EqFactor(6 * tokens),), named=active),) + (
            (Part((beyond,)),) if beyond != 0 else ())
        eq = chain(side(costs.flops_total), six)
        if eq.holds():
            training = CardLine(label=training["label"], math=show(eq), note=esc(
                ("the 6ND rule, exactly: 6 FLOPs per parameter, per token" if same else
                 "the 6ND rule, exactly: 6 FLOPs per dense parameter a token reads, per token")
                if beyond == 0 else "6 per dense parameter a token reads, per token, and the "
                "parts below"))
            dense = model.parameters.dense
            active_line = None if same else (
                esc("where ") + f"${show(chain(side(active.value), name=active))}$"
                + esc(" dense parameters are read by one token's products (the N of 6N)"))
            if active_line is not None and sympy.expand(dense - active.value) != 0:
                all_dense = Named.of(fresh(r"N_{\text{dense}}", taken), dense)
                active_line += (esc(", of the ") + f"${show(chain(side(dense), name=all_dense))}$"
                                + esc(" parameters that are operands of matrix products (an MoE's "
                                      "every expert; a token reads its k)"))
            if active_line is not None:
                active_line += esc(".")
    elif costs.params != 0 and unit == "FLOPs":
        q = costs.per_param(costs.flops_total)
        if q is not None and q != 0:
            k, rest = sympy.expand(q).as_coeff_Mul()
            if k == 6:
                training = CardLine(label=training["label"], math=headlines["training"],
                                    note=esc("the 6ND rule: 6 FLOPs per parameter and per ")
                                    + f"${poly(rest)}$")
    lines.append(training)
    if per is not None and tokens is not None:
        lines.append(CardLine(label=esc(f"Inference, per token ({unit})"),
                              math=poly(per.inference_forward),
                              note=esc("the forward pass only")))
    else:
        lines.append(CardLine(label=esc(f"Inference ({unit})"), math=poly(costs.flops_forward),
                              note=esc("the forward pass only")))
    return lines, active_line


def card_context(layer: Layer, costs: Costs, model: WholeModel | None,
                 parts: Sequence[BeyondPart], headlines: dict[str, str], m: Math, esc: Escape,
                 poly: Callable[[sympy.Expr], str], show: Callable[[Equation], str],
                 n_param: Named, taken: set[str], twice: bool, inference_peak: sympy.Expr,
                 candidates: Sequence[sympy.Expr],
                 fresh: Callable[[str, set[str]], str]) -> dict[str, Any]:
    flops, active = flops_lines(layer, costs, model, headlines, m, esc, poly, show, n_param,
                                taken, twice, fresh)
    return {
        "flops": flops,
        "active": active,
        "beyond": cause_sentences(parts, layer, m, esc, poly),
        "memory": memory_lines(layer, costs, m, esc, poly),
        "other_policy": other_policy_line(costs, esc, poly, show),
        "contrast": contrast_sentence(layer, costs, inference_peak, candidates, m, esc, poly),
        "noun": esc(noun(layer)),
    }
