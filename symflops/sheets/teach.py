"""The parts of a sheet's context that teach: the card, the backward pass
told op by op with its sentences of why, the memory rows in words, what
changes at scale, the worked example and the exercises (issue 27's order;
the section list is :mod:`.sections`).

:func:`teaching_context` gathers them from the engine's records; each part is
formatted by its module (:mod:`.card`, :mod:`.steps`, :mod:`.memory`,
:mod:`.scale`, :mod:`.example`, :mod:`.drills`).
"""

from __future__ import annotations

from typing import Any, Callable, TypedDict

import sympy

from .card import card_context, rows_of_ops
from .drills import drills_context
from .equations import Equation, Named
from .example import example_context
from .memory import index_note, memory_rows, saved_rows
from .notation import Math
from .scale import scale_context
from .sections import sections
from .steps import op_groups, rule_sentences
from .words import Escape, noun, role_words
from ..count.beyond import beyond_six_n
from ..count.explain import SheetCounts
from ..count.exercises import exercises
from ..count.facts import backward_facts, token_sums
from ..count.rulefacts import saved_facts, shape_facts
from ..count.summary import whole_model
from ..count.worked import worked_example
from ..core.records import Derivation


class TeachingContext(TypedDict):
    """The sheet variables of this module (see :class:`SheetContext`)."""

    sections: dict[str, tuple[str, ...]]
    #: "the layer" or "the whole model", escaped
    noun: str
    card: dict[str, Any]
    #: the backward rows grouped by the op they differentiate (a short layer)
    backward_groups: list[dict[str, Any]]
    #: per backward row (by its rule's position), its sentences of why
    rule_why: dict[int, list[str]]
    #: the moved booked-elementwise products, in words, or None
    moved: str | None
    teach_memory: list[dict[str, list[str]]]
    saved_rows: list[dict[str, list[str]]]
    index_note: str | None
    scale: dict[str, Any]
    example: dict[str, Any] | None
    exercises: dict[str, Any] | None
    roles: dict[str, str]
    #: the component of each backward row (its rule's op), for the table
    components: dict[int, str]
    #: whether the declaration names components (the setup's component table)
    has_components: bool


def teaching_context(derivation: Derivation, counts: SheetCounts, rows: list[dict[str, Any]],
                     headlines: dict[str, str], m: Math, esc: Escape,
                     poly: Callable[[sympy.Expr], str], shape_poly: Any,
                     show: Callable[[Equation], str], n_param: Named, taken: set[str],
                     fresh: Callable[[str, set[str]], str]) -> TeachingContext:
    costs = counts.costs
    layer = derivation.layer
    unit = costs.unit
    model = whole_model(derivation, costs)
    parts = beyond_six_n(derivation, costs) if layer.tokens is not None else ()
    facts = backward_facts(derivation, costs)
    sums = token_sums(derivation)
    saved = saved_facts(derivation, costs)
    worked = counts.worked
    example = None
    if worked is not None:
        w = worked_example(derivation, costs, model if layer.tokens is not None else None,
                           dict(worked.config), worked.name)
        example = example_context(w, m, esc, unit, show, costs.precision)
    try:
        found = exercises(derivation, costs, 0)
    except Exception as exc:  # noqa: BLE001 - a layer the exercises cannot be set at
        from ..core.errors import SymflopsError
        if not isinstance(exc, SymflopsError):
            raise
        found = ()
    moved = None
    if facts.per_forward is None and facts.per_forward_moved is not None:
        moved = (esc("Backward is no fixed multiple of forward in matmul-type FLOPs only because ")
                 + f"${poly(facts.moved)}$" + esc(" FLOPs of backward products (scatter-adds, such "
                                                  "as a combine's gradient) are booked as "
                                                  "elementwise work; counted with the products, "
                                                  "backward = ")
                 + f"${poly(facts.per_forward_moved)}$" + esc(" × forward exactly."))
    ops = rows_of_ops(layer)
    return TeachingContext(
        sections=sections(),
        noun=esc(noun(layer)),
        card=card_context(layer, costs, model if layer.tokens is not None else None, parts,
                          headlines, m, esc, poly, show, n_param, taken, facts.twice,
                          counts.inference_peak, counts.inference_candidates, fresh),
        backward_groups=op_groups(derivation, rows, m, esc),
        rule_why=rule_sentences(derivation, shape_facts(derivation), sums, saved, m, esc, unit,
                                poly, shape_poly),
        moved=moved,
        teach_memory=memory_rows(layer, costs, layer.params, m, esc, poly,
                                 n_param.latex if len(layer.ops) > 8 else None),
        saved_rows=saved_rows(layer, costs, saved, m, esc, poly, unit),
        index_note=index_note(layer, costs, m, esc, poly),
        scale=scale_context(layer, costs, counts, model,
                            parts, sums, dict(model.recompute.policies), m, esc, poly),
        example=example,
        exercises=drills_context(found, m, esc, unit, poly),
        roles={t.name: esc(role_words(t.role, t.requires_grad)) for t in layer.tensors},
        components={i: esc(ops.get(r.op, layer.ops[r.op].output))
                    for i, r in enumerate(derivation.rules)},
        has_components=bool(layer.components),
    )
