"""Facts about a layer's costs that a sheet may explain in words, as records.

Each record states something the engine has checked for this layer, so that
a sentence built from it (:mod:`symflops.sheets.why`) is true by
construction:

* :class:`ProductFact`: one matmul-type forward product of two tensors, the
  backward products it yields and their counts, compared as polynomials with
  SymPy (never assumed equal), and which operand gets no gradient and why;
* :class:`BackwardFacts`: those products for the whole layer, and whether
  the layer's backward total is exactly twice its forward total;
* :class:`TokenSum`: a parameter gradient that sums over the letters of the
  declared token dims (``tokens: B*S``);
* :class:`RepeatedActivations`: the activation bytes a repeated block keeps,
  its copies together, their share of all saved bytes, and what full
  recomputation keeps instead.

A product that the engine cannot compare exactly (a term of three or more
tensors, an operand whose gradient rule joins several terms) gets no record:
no sentence is better than a wrong one.  Every record is frozen and holds
SymPy expressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy

from .cost import Costs, saved_blocks
from .explain import ratio
from .summary import whole_model
from ..core.polynomial import cancelled
from ..core.ir import Einsum, Layer
from ..core.records import Derivation, Rule
from ..ops.einsum.cost import term_cost

#: Why an operand of a product gets no gradient: a frozen weight, the
#: network's first input (``requires_grad: false``), a buffer (a constant
#: table, ``role: buffer``), or an activation computed only from tensors
#: that need none.
NoGradReason = Literal["frozen", "first_input", "buffer", "no_gradient"]

#: How a product's backward count relates to its forward count:
#: ``twice`` (every operand gets a gradient, each rule costs what the forward
#: product costs), ``one_operand`` (an operand gets no gradient: one rule,
#: once the forward), ``none`` (neither operand gets one), ``order`` (a rule
#: costs more or less than the forward product), ``copies`` (the rules cost
#: what the forward does, but a rule runs in fewer copies of a repeated
#: block than its op).
ProductCase = Literal["twice", "one_operand", "none", "order", "copies"]


@dataclass(frozen=True)
class BackwardProduct:
    """The backward product of rule ``rule`` (position in ``Derivation.rules``)
    for ``wrt``: its count for one copy, its copies, and that count over the
    forward product's (a rational number or a formula)."""

    rule: int
    wrt: str
    grad: str
    flops: sympy.Expr
    #: its elementwise work (a scatter-add is counted there, not in ``flops``)
    elementwise: sympy.Expr
    copies: sympy.Expr
    per_forward: sympy.Expr

    @property
    def same_as_forward(self) -> bool:
        return self.per_forward == 1


@dataclass(frozen=True)
class NoGradient:
    """An operand of a product that gets no gradient, and why."""

    tensor: str
    reason: NoGradReason


@dataclass(frozen=True)
class ProductFact:
    """Term ``term`` of op ``op`` (writing ``output``): a product of the two
    tensors ``operands`` counted as matmul-type, ``forward`` for one copy and
    ``copies`` copies; its backward products, its operands without a
    gradient, and backward over forward for this product, every copy counted
    (``per_forward``)."""

    op: int
    term: int
    output: str
    operands: tuple[str, str]
    forward: sympy.Expr
    copies: sympy.Expr
    products: tuple[BackwardProduct, ...]
    missing: tuple[NoGradient, ...]
    #: the operands that are parameters (none for attention's Q K^T and P V:
    #: two activation gradients and no weight gradient)
    weights: tuple[str, ...]
    per_forward: sympy.Expr
    case: ProductCase


@dataclass(frozen=True)
class BackwardFacts:
    """Every matmul-type product of the layer that the engine could compare,
    and backward over forward for the layer's totals (None when it is not a
    constant)."""

    products: tuple[ProductFact, ...]
    per_forward: sympy.Rational | None
    #: backward products of these products counted as elementwise work (an
    #: MoE combine's scatter-add ``dYe``): their FLOPs, every copy
    moved: sympy.Expr = sympy.Integer(0)
    #: backward over forward with ``moved`` counted as matmul-type (None when
    #: not a constant, or nothing is moved)
    per_forward_moved: sympy.Rational | None = None

    @property
    def twice(self) -> bool:
        """The layer's backward total is exactly twice its forward total."""
        return self.per_forward == 2

    @property
    def exceptions(self) -> tuple[ProductFact, ...]:
        return tuple(p for p in self.products if p.case != "twice")


@dataclass(frozen=True)
class TokenSum:
    """Parameter gradient rule ``rule`` sums over ``letters``, which range over
    ``dims``, all dims of the declared tokens; ``every_token`` when together
    they run over every token of the pass (their extents multiply to it)."""

    rule: int
    grad: str
    wrt: str
    letters: tuple[str, ...]
    dims: tuple[sympy.Expr, ...]
    every_token: bool


@dataclass(frozen=True)
class RepeatedActivations:
    """Block ``name`` runs ``repeat`` times inside ``copies`` copies of the
    blocks around it; one copy saves ``one_copy`` bytes of activations, all
    of them ``all_copies``, a share ``share`` of the ``total`` bytes the
    layer saves.  Full recomputation keeps ``recompute_bytes`` in all and
    executes ``recompute_flops`` more matmul-type FLOPs (or MACs)."""

    name: str
    title: str
    repeat: sympy.Expr
    copies: sympy.Expr
    one_copy: sympy.Expr
    all_copies: sympy.Expr
    total: sympy.Expr
    share: sympy.Expr
    recompute_bytes: sympy.Expr
    recompute_flops: sympy.Expr


@dataclass(frozen=True)
class LayerFacts:
    backward: BackwardFacts
    token_sums: tuple[TokenSum, ...]
    repeated: tuple[RepeatedActivations, ...]


def layer_facts(derivation: Derivation, costs: Costs) -> LayerFacts:
    """Every fact of this module about ``derivation`` with ``costs``."""
    return LayerFacts(backward_facts(derivation, costs), token_sums(derivation),
                      repeated_activations(derivation, costs))


def backward_facts(derivation: Derivation, costs: Costs) -> BackwardFacts:
    layer = derivation.layer
    products = []
    for k, op in enumerate(layer.ops):
        if costs.forward[k].flops == 0:
            continue
        for j, e in enumerate(op.terms):
            fact = _product(derivation, costs, k, j, e)
            if fact is not None:
                products.append(fact)
    moved = sympy.expand(sum((g.elementwise * g.copies for p in products for g in p.products
                              if g.flops == 0 and g.elementwise != 0), sympy.Integer(0)))
    return BackwardFacts(tuple(products), ratio(costs.flops_forward, costs.flops_backward), moved,
                         ratio(costs.flops_forward, costs.flops_backward + moved)
                         if moved != 0 else None)


def _tensors(e: Einsum) -> tuple[str, ...]:
    """The tensors a term multiplies (lookups, brackets and shifts left out)."""
    return tuple(f.tensor for f in e.operands if not f.is_indicator)


def _product(derivation: Derivation, costs: Costs, k: int, j: int, e: Einsum
             ) -> ProductFact | None:
    layer = derivation.layer
    op = layer.ops[k]
    operands = _tensors(e)
    if len(operands) != 2 or len(set(operands)) != 2:
        return None
    forward, _, _ = term_cost(e, op.dims(), costs.unit, layer.forward_order, layer.sizes)
    if forward == 0:  # a product of the elementwise bucket
        return None
    # An operand read by another term of the op too gets one rule for both terms:
    # this term's share of it cannot be told apart, so nothing is said.
    elsewhere = {t for i, other in enumerate(op.terms) if i != j for t in _tensors(other)}
    if elsewhere & set(operands):
        return None
    copies = costs.forward_copies[k]
    products, missing = [], []
    for name in operands:
        found = [(i, r) for i, r in enumerate(derivation.rules) if r.op == k and r.wrt == name]
        if not found:
            if name in derivation.needs_grad:  # a gradient without a rule of its own here
                return None
            missing.append(NoGradient(name, _reason(layer, name)))
            continue
        if len(found) != 1 or len(found[0][1].terms) != 1:
            return None
        i, r = found[0]
        flops = costs.backward[i].flops
        products.append(BackwardProduct(i, r.wrt, r.grad, flops, costs.backward[i].elementwise,
                                        costs.backward_copies[i],
                                        cancelled(flops, forward)))
    total = sum((p.flops * p.copies for p in products), sympy.Integer(0))
    per_forward = cancelled(total, forward * copies)
    return ProductFact(k, j, op.output, (operands[0], operands[1]), forward, copies,
                       tuple(products), tuple(missing),
                       tuple(n for n in operands if layer.tensor(n).is_param), per_forward,
                       _case(products, missing, copies))


def _case(products: list[BackwardProduct], missing: list[NoGradient],
          copies: sympy.Expr) -> ProductCase:
    if any(not p.same_as_forward for p in products):
        return "order"
    if missing:
        return "one_operand" if products else "none"
    if any(sympy.expand(p.copies - copies) != 0 for p in products):
        return "copies"
    return "twice"


def _reason(layer: Layer, name: str) -> NoGradReason:
    """Why a tensor that needs no gradient needs none."""
    t = layer.tensor(name)
    if t.role == "frozen":
        return "frozen"
    if t.role == "input" and not t.requires_grad:
        return "first_input"
    if t.role == "buffer":
        return "buffer"
    return "no_gradient"


def token_sums(derivation: Derivation) -> tuple[TokenSum, ...]:
    """Each trainable parameter's gradient rule that sums over letters of the
    token dims (none without ``tokens:``)."""
    layer = derivation.layer
    if layer.tokens is None:
        return ()
    token_dims = sympy.expand(layer.tokens).free_symbols
    out = []
    for i, r in enumerate(derivation.rules):
        t = layer.tensor(r.wrt)
        if not (t.role == "param" and t.requires_grad):
            continue
        letters = _token_letters(r, token_dims)
        if not letters:
            continue
        extents = r.dims()
        dims = tuple(extents[x] for x in letters)
        every = (len(set(dims)) == len(dims)
                 and sympy.expand(sympy.Mul(*dims) - layer.tokens) == 0)
        out.append(TokenSum(i, r.grad, r.wrt, letters, dims, every))
    return tuple(out)


def _token_letters(r: Rule, token_dims: set[sympy.Basic]) -> tuple[str, ...]:
    """The letters every term of ``r`` sums over whose extent is a token dim,
    in the order the rule's first term sums them."""
    extents = r.dims()
    summed = [set(e.summed) for e in r.terms]
    common = set.intersection(*summed) if summed else set()
    return tuple(x for x in r.terms[0].summed
                 if x in common and extents[x] in token_dims)


def repeated_activations(derivation: Derivation, costs: Costs) -> tuple[RepeatedActivations, ...]:
    """For each block that repeats, what its copies save and what full
    recomputation keeps instead (none without a repeated block)."""
    layer = derivation.layer
    if not any(b.repeat != 1 for b in layer.blocks):
        return ()
    model = whole_model(derivation, costs)
    total = costs.memory()["activation_bytes"]
    full = model.recompute.policies["full"]
    p = costs.precision
    out = []
    for block, b in zip(layer.blocks, model.blocks):
        if block.repeat == 1:
            continue
        # Every copy's own tensors, as the unrolled network keeps them (a
        # block's bound input may be kept in one copy fewer than the block runs).
        everything = sympy.expand(sum(
            (s.total * s.element_bytes(p) for s in costs.saved
             if block in saved_blocks(layer, derivation, s.name)), sympy.Integer(0)))
        out.append(RepeatedActivations(
            name=b.name, title=b.title, repeat=b.repeat, copies=b.copies,
            one_copy=b.activation_bytes, all_copies=everything, total=total,
            share=cancelled(everything, total) if total != 0 else sympy.Integer(0),
            recompute_bytes=full.activation_bytes, recompute_flops=full.flops_recomputed))
    return tuple(out)
