"""Training FLOPs per token against 6N, term by term, each term with its cause.

The 6N rule counts, per token, 2 FLOPs per dense parameter a token's
products read for the forward product and 4 for its two backward products.
Where a layer's training count differs from ``6 · N_active``
(:attr:`~symflops.count.records.PerToken.beyond_six_n`), this module says
where and why, op by op, from the engine's facts:

* ``no_weight``: an op whose matmul-type products multiply no parameter
  (attention's ``Q Kᵀ`` and ``P V``, an MoE's combine, a product with a weight
  computed from weights): all of its training FLOPs are beyond 6N;
* ``padding``: an op whose rows include padding (an MoE's ``M·C`` expert
  slots, of which the tokens fill ``1/c``): its three products run on every
  slot, while 6N counts the ``k`` experts a token reaches;
* ``once_per_pass``: an op over no token row (a weight built from weights):
  it runs once per pass, and 6N counts its parameters once per token;
* ``no_gradient``: a product one of whose operands gets no gradient (a frozen
  weight, the network's first input, a buffer): one backward product runs,
  not two;
* ``fewer_copies``: a backward product that runs in fewer copies of a
  repeated block than its op (the first copy's input needs no gradient);
* ``order``: a backward product that costs more or less than its forward
  product;
* ``other``: what the facts above leave (said as such, never guessed).

For an op with dense parameters, its part is split as
``3·(forward − 2·reads) + (backward − 2·forward)``: the first term is how its
forward product departs from 2 per parameter read (and each backward product
with it), the second how its backward departs from twice its forward.  The
parts sum to ``beyond_six_n`` exactly; :func:`beyond_six_n` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy

from .cost import Costs
from .facts import NoGradReason, backward_facts
from .params import _TokenRows, _is_dense_term, param_class
from ..core.polynomial import quotient
from ..core.records import Derivation

Cause = Literal["no_weight", "padding", "once_per_pass", "no_gradient", "fewer_copies", "order",
                "other"]


@dataclass(frozen=True)
class BeyondPart:
    """Op ``op`` (writing ``output``) makes ``per_token`` training FLOPs per
    token beyond (or, negative, short of) 6 per dense parameter it reads, for
    ``cause``.  ``tensors`` are what the cause is about: the operands of a
    product with no weight, the tensor that gets no gradient; ``reason`` why
    it gets none."""

    op: int
    output: str
    per_token: sympy.Expr
    cause: Cause
    tensors: tuple[str, ...] = ()
    reason: NoGradReason | None = None


def reads_by_op(derivation: Derivation) -> dict[int, sympy.Expr]:
    """Per op, the dense parameter elements one token's products read (every
    copy): the op's share of ``active_dense``, the N of 6N."""
    layer = derivation.layer
    kinds = {t.name: param_class(layer, t.name) for t in layer.params}
    out: dict[int, sympy.Expr] = {}
    for k, name, read, dense in _TokenRows(layer).reads_by_op():
        if dense and kinds[name] == "dense":
            out[k] = sympy.expand(out.get(k, sympy.Integer(0)) + read)
    return out


def beyond_six_n(derivation: Derivation, costs: Costs) -> tuple[BeyondPart, ...]:
    """The parts of training minus 6N per token, in the ops' order (empty
    without ``tokens:``, or when training is exactly 6N)."""
    layer = derivation.layer
    tokens = layer.tokens
    if tokens is None:
        return ()
    rows = _TokenRows(layer)
    reads = reads_by_op(derivation)
    facts = backward_facts(derivation, costs)
    parts: list[BeyondPart] = []

    def per(e: sympy.Expr) -> sympy.Expr:
        return sympy.expand(quotient(sympy.expand(e), tokens))

    for k, op in enumerate(layer.ops):
        forward = per(costs.forward[k].flops * costs.forward_copies[k])
        backward = per(sum((c.flops * n for r, c, n in zip(derivation.rules, costs.backward,
                                                              costs.backward_copies) if r.op == k),
                           sympy.Integer(0)))
        read = reads.get(k, sympy.Integer(0))
        if forward == 0 and backward == 0:
            continue
        if read == 0:
            # an op that reads its own output lists no terms: its unrolled form's
            # (a triangular solve's matrix and earlier rows, U_prev)
            unrolled = getattr(op, "unrolled", None)
            terms = op.terms or (unrolled().terms if unrolled is not None else ())
            operands = tuple(dict.fromkeys(f.tensor for t in terms if _is_dense_term(t)
                                            for f in t.factors))
            if not operands:  # a product with no summed letter: its backward contracts
                operands = tuple(dict.fromkeys(f.tensor for t in terms for f in t.operands
                                                if f.reads_tensor and not f.is_select))
            parts.append(BeyondPart(k, op.output, sympy.expand(forward + backward), "no_weight",
                                    operands))
            continue
        ahead = sympy.expand(3 * (forward - 2 * read))
        if ahead != 0:
            cause: Cause = ("once_per_pass" if not rows.rows.get(op.output)
                            else "padding" if rows.live.get(op.output, 1) != 1 else "other")
            parts.append(BeyondPart(k, op.output, ahead, cause))
        behind = sympy.expand(backward - 2 * forward)
        if behind == 0:
            continue
        found = []
        for p in facts.products:
            if p.op != k or p.case == "twice":
                continue
            amount = per(sum((g.flops * g.copies for g in p.products), sympy.Integer(0))
                         - 2 * p.forward * p.copies)
            if p.case in ("one_operand", "none"):
                found += [BeyondPart(k, op.output, per(-p.forward * p.copies), "no_gradient",
                                     (g.tensor,), g.reason) for g in p.missing]
                rest = sympy.expand(amount + len(p.missing) * per(p.forward * p.copies))
                if rest != 0:
                    found.append(BeyondPart(k, op.output, rest, "order"))
            else:
                found.append(BeyondPart(k, op.output, amount,
                                        "fewer_copies" if p.case == "copies" else "order"))
        known = sympy.expand(sum((f.per_token for f in found), sympy.Integer(0)))
        parts += [f for f in found if f.per_token != 0]
        if sympy.expand(behind - known) != 0:
            parts.append(BeyondPart(k, op.output, sympy.expand(behind - known), "other"))
    total = sympy.expand(sum((p.per_token for p in parts), sympy.Integer(0)))
    expected = sympy.expand(per(costs.flops_total) - 6 * sum(reads.values(), sympy.Integer(0)))
    if sympy.expand(total - expected) != 0:  # the parts must add up: a mismatch is a bug
        raise AssertionError(f"the parts of training minus 6N add up to {total}, not {expected}")
    return tuple(parts)
