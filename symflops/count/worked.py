"""A worked example: the sheet's counts walked in numbers at one configuration.

The third seed walks its toy layer in numbers: each product ``2 × 10 × 4 × 3
= 240`` FLOPs, three of them ``240 + 240 + 240 = 720 = 6 × 12 × 10``.  This
module computes the same walk for any layer at a configuration (the sheet's
worked one: its first example), exactly:

* each step a count of one copy, and, where the count is a monomial, the
  factors it is the product of (its coefficient, then each dim's value, in
  the declaration's order: ``2 × 1,024 × 768 × 3,072``);
* the steps are the forward ops and the backward rules of a layer of at most
  :data:`OP_STEPS` ops, else the components of the front table (one copy each,
  with their copies);
* the totals, the 6N split (``6 × N_active × tokens``, plus each part beyond
  it), and the memory in bytes: parameters times the bytes each parameter
  costs, activations, the sum.

Everything is an exact integer (or a fraction for a per-token count);
:mod:`symflops.sheets.example` prints each equality as an
:class:`~symflops.sheets.equations.Equation` the equation test proves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from .beyond import BeyondPart, beyond_six_n
from .components import component_table
from .cost import Costs
from .evaluate import number
from .records import WholeModel
from ..core.ir import substitute
from ..core.records import Derivation

#: A layer of at most this many ops is walked op by op and rule by rule; a
#: longer one (a whole model) component by component.
OP_STEPS = 8


@dataclass(frozen=True)
class Step:
    """One count at the configuration: ``label`` (a tensor, a gradient or a
    component name), its ``kind``, ``value`` for one copy, ``copies`` copies,
    and, when the count is a monomial, ``factors`` whose product is ``value``
    (coefficient first, then each dim's value)."""

    label: str
    kind: str  # "forward", "backward" or "component"
    value: int
    copies: int
    factors: tuple[int, ...] | None = None
    #: the dims the factors after the coefficient are the values of
    dims: tuple[str, ...] = ()
    #: for a component: its backward count (``value`` is its forward count)
    backward: int = 0


@dataclass(frozen=True)
class WorkedExample:
    """The walk at ``config`` (named ``name``; None for an ``--at`` column)."""

    name: str | None
    config: tuple[tuple[str, int], ...]
    steps: tuple[Step, ...]
    forward: int
    backward: int
    training: int
    params: int
    trainable: int
    tokens: int | None
    #: 6 × N_active × tokens and the parts beyond it (per step, at the config)
    six_n: int | None
    beyond: tuple[tuple[BeyondPart, int], ...]
    #: training as ``k × params × rest`` when the count per parameter is a
    #: polynomial (the ffn's 6B): ``(k, rest)`` at the config, else None
    per_param: tuple[int, int] | None
    bytes_per_param: int
    fixed_bytes: int
    activation_elements: int
    activation_bytes: int
    total_bytes: int
    #: the saved elements at each width: ``(bytes per element, elements)``
    activation_groups: tuple[tuple[int, int], ...] = ()
    buffer_bytes: int = 0


def _factors(expr: sympy.Expr, values: Mapping[str, int],
             order: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """A monomial's coefficient and each dim's value (a power repeated), in
    the declaration's order; None for anything else."""
    expr = sympy.expand(expr)
    if expr == 0 or isinstance(expr, sympy.Add) or not expr.is_polynomial():
        return None
    coefficient, rest = expr.as_coeff_Mul()
    if not coefficient.is_Integer:
        return None
    powers = []
    for part in sympy.Mul.make_args(rest):
        base, exp = part.as_base_exp()
        if not base.is_Symbol or not exp.is_Integer or str(base) not in values:
            return None
        powers += [str(base)] * int(exp)
    powers.sort(key=lambda n: order.index(n) if n in order else len(order))
    return (int(coefficient), *(int(values[n]) for n in powers)), tuple(powers)


def worked_example(derivation: Derivation, costs: Costs, model: WholeModel | None,
                   config: Mapping[str, int], name: str | None = None) -> WorkedExample:
    """The walk of ``derivation``'s counts at ``config`` (a value for every
    free dim)."""
    layer = derivation.layer
    subs = layer.substitutions
    values = {k: int(v) for k, v in config.items()}
    # a defined dim (R = N / G) is a value too, so that monomials in it factor
    for sym, formula in subs.items():
        values.setdefault(str(sym), number(formula, values))
    order = tuple(d.name for d in layer.dims)

    def at(e: sympy.Expr) -> int:
        return int(number(substitute(sympy.sympify(e), subs), config))

    def step(label: str, kind: str, e: sympy.Expr, copies: sympy.Expr) -> Step:
        found = _factors(e, values, order)
        return Step(label, kind, at(e), at(copies), *(found if found else (None, ())))

    steps: list[Step] = []
    if len(layer.ops) <= OP_STEPS:
        steps += [step(op.output, "forward", c.flops, n)
                  for op, c, n in zip(layer.ops, costs.forward, costs.forward_copies)
                  if c.flops != 0]
        steps += [step(r.grad, "backward", c.flops, n)
                  for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies)
                  if c.flops != 0]
    else:
        for row in component_table(derivation, costs).rows:
            if row.forward == 0 and row.backward == 0:
                continue
            steps.append(Step(row.name, "component", at(row.forward), at(row.repeat),
                              backward=at(row.backward)))
    mem = costs.memory()
    tokens = at(layer.tokens) if layer.tokens is not None else None
    six_n = beyond = None
    if model is not None and model.per_token is not None and tokens is not None:
        six_n = at(model.per_token.six_n) * tokens
        beyond = tuple((p, int(number(substitute(p.per_token * layer.tokens, subs), config)))
                       for p in beyond_six_n(derivation, costs))
    p = costs.precision
    widths: dict[int, sympy.Expr] = {}
    for s in costs.saved:
        w = s.element_bytes(p)
        widths[w] = sympy.expand(widths.get(w, sympy.Integer(0)) + s.total)
    per = costs.per_param(costs.flops_total)
    per_param = None
    if per is not None and per != 0:
        k, rest = sympy.expand(per).as_coeff_Mul()
        if k.is_Integer:
            per_param = (int(k), at(rest))
    return WorkedExample(
        name=name, config=tuple((k, int(v)) for k, v in config.items()), steps=tuple(steps),
        forward=at(costs.flops_forward), backward=at(costs.flops_backward),
        training=at(costs.flops_total), params=at(costs.params), trainable=at(costs.trainable),
        tokens=tokens, six_n=six_n, beyond=beyond or (), per_param=per_param,
        bytes_per_param=p.bytes_per_trainable_param,
        fixed_bytes=at(mem["fixed_bytes"]), activation_elements=at(costs.activations),
        activation_bytes=at(mem["activation_bytes"]), total_bytes=at(mem["total_bytes"]),
        activation_groups=tuple((w, at(e)) for w, e in widths.items()),
        buffer_bytes=at(mem["buffers_bytes"]))
