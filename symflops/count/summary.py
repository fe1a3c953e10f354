"""The quantities of a derived layer as one frozen typed tree.

:func:`summary` gathers what ``symflops derive`` reports into a
:class:`symflops.count.records.Summary` whose formula leaves are SymPy
expressions.  The same tree is printed symbolically (``--json``: formulas as
strings SymPy parses, :meth:`~symflops.count.records.Record.to_json`) and
numerically (:func:`symflops.count.evaluate.evaluate`), so the two outputs
cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import sympy

from .cost import Costs, saved_blocks
from ..core.records import Derivation, OpCost
from .inference import inference
from ..core.ir import RECOMPUTE_POLICIES, Block, Layer, substitute
from ..core.polynomial import quotient
from . import names
from .attention import attention
from .params import param_counts
from .records import (BackwardEntry, BlockSaved, BlockSummary, CrossingOrders, FlopTotals,
                      ForwardBackward, ForwardEntry, Formula, InferenceInfo, Memory, OrderCandidate,
                      Parameters, PerToken, PolicyCost, PrecisionInfo, Recompute, SavedDetail,
                      Summary, TensorInfo, WholeModel, frozen, map_formulas)
from .recompute import attention_chains, recompute
from .growth import sequence_dim
from .traffic import source as traffic_source

_ORDER = ("products of several tensors are contracted pairwise: forward terms in the order "
          "written (or the cheapest, with forward_order: cheapest), backward rules in the cheapest "
          "order (where the cheapest orders cross: the one cheapest at the declared sizes, else the "
          "least of their costs); 'flops' counts the pairwise products that multiply two tensors, "
          "sum over a letter and keep a letter only one of them has (matrix products, and "
          "convolutions: a scatter through a window whose operands each have a letter the "
          "other lacks sums the products reaching each position), "
          "'flops_elementwise' everything else")

CONVENTIONS = {
    "FLOPs": "one multiply-add = 2 FLOPs; " + _ORDER,
    "MACs": "one multiply-accumulate = 1 MAC; " + _ORDER,
}


def summary(derivation: Derivation, costs: Costs, *, quantities: bool = True
            ) -> Summary[Formula]:
    """Everything ``symflops derive`` reports, with defined dims substituted.
    ``quantities=False`` leaves the named quantities out (an empty mapping):
    they are a third of a summary's time."""
    data = _summary(derivation, costs)
    if quantities:
        data = dataclasses.replace(data, quantities=frozen(names.values(names.Sources(
            data, attention(derivation, costs.unit, costs.forward_copies,
                            costs.backward_copies),
            traffic=traffic_source(derivation, costs)))))
    return _defined(data, derivation.layer)


def model_part(derivation: Derivation, costs: Costs) -> WholeModel[Formula]:
    """:func:`summary`'s ``model`` alone, with defined dims substituted: what
    the planner reads, without the per-op entries, notes and named
    quantities it does not (most of a summary's time for a large model)."""
    return _defined(whole_model(derivation, costs), derivation.layer)


def _defined(data: Any, layer: Layer) -> Any:
    """``data``'s formulas with the layer's defined dims replaced by their formulas."""
    subs = layer.substitutions
    return map_formulas(data, lambda e: substitute(e, subs)) if subs else data


@functools.lru_cache(maxsize=1024)  # the summaries of one layer under each policy share them
def _per(expr: sympy.Expr, tokens: sympy.Expr | None) -> sympy.Expr | None:
    return None if tokens is None else sympy.expand(quotient(expr, tokens))


def _totals(forward: Formula, backward: Formula, total: Formula | None = None
            ) -> FlopTotals[Formula]:
    """Forward, backward and (unless given) their sum."""
    return FlopTotals(forward, backward,
                      sympy.expand(forward + backward) if total is None else total)


@functools.lru_cache(maxsize=8)  # a sheet asks once per format
def whole_model(derivation: Derivation, costs: Costs) -> WholeModel[Formula]:
    """The whole-model part: parameter classes, per-token counts, the 6N rule,
    recomputation policies, the key/value cache and per-block lines (defined
    dims not substituted)."""
    layer = derivation.layer
    tokens = layer.tokens
    counts = param_counts(layer, costs.trainable)
    dense = counts.active_dense
    policies = {}
    for name in RECOMPUTE_POLICIES:
        if name == "selective" and not layer.selective:
            continue
        if name == "fused_attention" and not attention_chains(derivation, costs):
            continue  # no attention core to fuse
        r = recompute(derivation, costs, name)
        policies[name] = PolicyCost(
            ops=tuple(r.ops), flops_recomputed=r.flops, flops_elementwise_recomputed=r.elementwise,
            flops_executed=sympy.expand(costs.flops_total + r.flops),
            kept=tuple(s.name for s in r.kept), activations=r.activations,
            activation_bytes=r.activation_bytes(costs), working=r.working)
    chosen = policies[layer.recompute]
    per_token = None
    if tokens is not None:
        per_token = PerToken(
            flops=FlopTotals(_per(costs.flops_forward, tokens), _per(costs.flops_backward, tokens),
                             _per(costs.flops_total, tokens)),
            flops_executed=_per(chosen.flops_executed, tokens),
            flops_elementwise=_per(costs.elementwise_forward + costs.elementwise_backward, tokens),
            six_n=sympy.expand(6 * dense),
            beyond_six_n=sympy.expand(_per(costs.flops_total, tokens) - 6 * dense),
            inference_forward=_per(costs.flops_forward, tokens))
    inf = inference(derivation, costs, counts.read)
    return WholeModel(
        tokens=tokens,
        sequences=layer.sequences,
        definitions=frozen({n: e for n, e in layer.definitions}),
        parameters=Parameters(
            total=counts.total, trainable=counts.trainable, active=counts.active,
            active_dense=counts.active_dense, read_per_token=counts.read,
            dense=counts.of("dense"), lookup=counts.of("lookup"),
            elementwise=counts.of("elementwise"), classes=frozen(dict(counts.classes))),
        per_token=per_token,
        flops_executed=chosen.flops_executed,
        recompute=Recompute(policy=layer.recompute, selective=tuple(layer.selective),
                            policies=frozen(policies)),
        inference=None if inf is None else InferenceInfo(
            cache=tuple(n for n, _ in inf.cache), cache_elements=inf.cache_elements,
            cache_bytes=inf.cache_bytes,
            cache_elements_per_sequence=inf.cache_elements_per_sequence,
            cache_bytes_per_sequence=inf.cache_bytes_per_sequence,
            weights_bytes=inf.weights_bytes, weights_bytes_read=inf.weights_bytes_read,
            bytes_per_decoded_token=inf.bytes_per_decoded_token),
        blocks=tuple(_block(derivation, costs, b) for b in layer.blocks))


def _block(derivation: Derivation, costs: Costs, block: Block) -> BlockSummary[Formula]:
    """One copy of a block: its parameters (shared ones too: a copy uses
    them), FLOPs and the activations it keeps."""
    layer = derivation.layer
    p = costs.precision
    outer = sympy.Mul(*(b.repeat for b in layer.blocks if set(block.tensors) <= set(b.tensors)))
    ops = set(block.ops)
    fwd = [(c, n) for op, c, n in zip(layer.ops, costs.forward, costs.forward_copies)
           if op.output in ops]
    bwd = [(c, n) for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies)
           if layer.ops[r.op].output in ops]
    one = (lambda items, kind: sympy.expand(sum((getattr(c, kind) * n for c, n in items),
                                                sympy.Integer(0)) / outer))
    saved = [s for s in costs.saved if block in saved_blocks(layer, derivation, s.name)]
    params = [t for t in layer.params if t.name in block.tensors]
    return BlockSummary(
        name=block.name, title=block.title, source=block.source, repeat=block.repeat,
        copies=outer,
        # a parameter the copies share exists once, and one copy uses all of it
        params=sympy.expand(sum((t.elements * layer.uses(t.name) for t in params),
                                sympy.Integer(0)) / outer),
        flops=_totals(one(fwd, "flops"), one(bwd, "flops")),
        flops_elementwise=ForwardBackward(one(fwd, "elementwise"), one(bwd, "elementwise")),
        saved=tuple(BlockSaved(tensor=s.name, elements=s.elements, mask=s.mask,
                               bytes=s.elements * s.element_bytes(p),
                               needed_by=tuple(s.needed_by)) for s in saved),
        activations=sympy.expand(sum((s.elements for s in saved), sympy.Integer(0))),
        activation_bytes=sympy.expand(sum((s.elements * s.element_bytes(p)
                                           for s in saved), sympy.Integer(0))))


def _summary(derivation: Derivation, costs: Costs) -> Summary[Formula]:
    layer = derivation.layer
    p = costs.precision
    per_param = [costs.per_param(v) for v in
                 (costs.flops_forward, costs.flops_backward, costs.flops_total)]
    return Summary(
        name=layer.name,
        title=layer.title,
        unit=costs.unit,
        conventions=CONVENTIONS[costs.unit],
        forward_order=layer.forward_order,
        sizes=frozen(layer.sizes) if layer.sizes else None,
        dims=frozen({d.name: d.description for d in layer.dims}),
        tensors=frozen({t.name: TensorInfo(shape=tuple(t.shape), role=t.role,
                                           requires_grad=t.name in derivation.needs_grad,
                                           elements=t.elements)
                        for t in layer.tensors}),
        params=costs.params,
        trainable_params=costs.trainable,
        flops=FlopTotals(costs.flops_forward, costs.flops_backward, costs.flops_total),
        flops_per_param=FlopTotals(*per_param) if all(v is not None for v in per_param) else None,
        flops_elementwise=_totals(costs.elementwise_forward, costs.elementwise_backward),
        forward=tuple(
            ForwardEntry(op=op.statement(), output=op.output, copies=n, flops=c.flops,
                         flops_elementwise=c.elementwise,
                         matrix_form=_matrix(op.terms[0]) if len(op.terms) == 1 else None,
                         orders=_orders(c, layer))
            for op, c, n in zip(layer.ops, costs.forward, costs.forward_copies)),
        backward=tuple(
            BackwardEntry(grad=r.grad, wrt=r.wrt, rule=r.statement, copies=n, flops=c.flops,
                          flops_elementwise=c.elementwise,
                          matrix_form=str(r.matrix_form) if r.matrix_form else None,
                          reads=tuple(r.reads), from_op=layer.ops[r.op].statement(),
                          orders=_orders(c, layer))
            for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies)),
        saved=tuple(s.name for s in costs.saved),
        saved_detail=tuple(SavedDetail(tensor=s.name, elements=s.elements, copies=s.copies,
                                       needed_by=tuple(s.needed_by)) for s in costs.saved),
        memory=Memory(**costs.memory()),
        precision=PrecisionInfo(name=p.name, description=p.description, params=p.params,
                                grads=p.grads, optimizer_states=p.optimizer_states,
                                optimizer=p.optimizer, master=p.master,
                                activations=p.activations),
        model=whole_model(derivation, costs),
        notes=notes(derivation, costs))


def notes(derivation: Derivation, costs: Costs) -> tuple[str, ...]:
    """What the declaration leaves its sheet without, and how to add it: a
    tool's remarks, printed by ``derive`` rather than on the sheet."""
    from .components import component_table

    layer = derivation.layer
    out = []
    loose = [r.name for r in component_table(derivation, costs).rows if r.kind == "op"]
    if loose:
        out.append(f"ops that no component names ({', '.join(loose)}) are rows of their own in "
                   "the sheet's component table: declare 'components:' to group them")
    dim, why = sequence_dim(layer)
    if dim is None:
        out.append(f"the sheet has no plots against the sequence length: {why}")
    if layer.tokens is None:
        out.append("the sheet has no per-token counts and no 6N rule: declare 'tokens:' "
                   "(e.g. tokens: B*S) for them")
    return tuple(out)


#: Beyond this many candidate orders, the condition under which each is the
#: cheapest is not written out (``cheaper_when`` is null).
MAX_CONDITIONS = 4


def _orders(c: OpCost, layer: Layer) -> tuple[CrossingOrders[Formula], ...]:
    """For an op or rule, each term whose cheapest orders cross (none, mostly):
    each candidate's order and cost, when it is the cheapest, and which one is
    counted."""
    dims = [d.name for d in layer.free_dims]
    out = []
    for o in c.orders:
        conditions = (o.cheaper_when(dims) if 1 < len(o.candidates) <= MAX_CONDITIONS
                      else (None,) * len(o.candidates))
        out.append(CrossingOrders(
            term=o.term,
            counted=(o.texts[o.chosen] if o.chosen is not None else "the least of the candidates"),
            sizes=frozen(o.sizes) if o.chosen is not None else None,
            candidates=tuple(OrderCandidate(order=text, flops=cand.flops,
                                            flops_elementwise=cand.elementwise,
                                            cheaper_when=None if cond is None
                                            else sympy.sstr(cond))
                             for text, cand, cond in zip(o.texts, o.candidates, conditions)),
            bounded=o.bounded))
    return tuple(out)


def _matrix(e: Any) -> str | None:
    from ..core.records import matrix_form

    m = matrix_form(e)
    return str(m) if m else None
