"""Bytes moved: what each op and each backward rule reads from memory and
writes to it, as polynomials in the dims (the roofline's denominator).

Each op kind says which elements its forward and each of its rules read and
write (:meth:`symflops.ops.base.Op.moved`); :mod:`symflops.count.access`
counts the distinct elements of each tensor, and a width per element turns
them into bytes: a weight (parameter, frozen weight, buffer) at the
policy's parameter width, a parameter's gradient at its gradient width,
activations and their gradients at its activation width, a dropout mask at
its mask width, an index tensor at :data:`INDEX_BYTES`.  ``--weights`` and
``--activations`` (:func:`widths`) override the first and the third (int8
weights with bf16 activations).

Two conventions (:data:`Convention`):

* ``naive``: every op reads each element of its operands from memory once and
  writes each element of its outputs once (a round trip per op; an element
  an op reads twice is read once);
* ``fused``: as ``naive``, except that a tensor an op writes and only
  *elementwise* ops read (ops whose products sum over no letter and select,
  shift or restrict nothing: a pointwise function, a gate, a residual or bias
  add, a norm's gain) stays on chip: the elementwise ops run in the epilogue
  of the ops producing their operands (a merged gate and up projection for
  SwiGLU), so it is neither written nor read.  A tensor the pass outputs, or
  (in training) one a backward rule reads, is written all the same.  Nothing
  else is assumed resident: attention's scores and probabilities round-trip
  memory (a flash-attention kernel keeps them on chip; not modelled), and
  the backward pass is counted naive.

Three phases (:data:`Phase`): ``forward``, one inference pass at the declared
dims (for a causal model, the prefill; a loss op is left out: inference
computes none); ``decode``, one decoding step of ``B`` sequences at context
``S`` (the declaration's ``tokens / sequences``), each op viewed at the last
position (:func:`symflops.count.access.decoded`): the weights are read once
for the step, the key/value cache whole, one position of everything else;
its FLOPs are the op's at ``S`` minus its FLOPs at ``S - 1`` (the work of
the last position, exact for a causal op), or its whole FLOPs for an op
over no position; ``training``: the forward pass (with its loss) and every
backward rule, each writing its contribution to a gradient, and one entry
per gradient with several contributions that reads each and writes their
sum (three elements moved per addition).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Literal, Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, Tensor, substitute
from ..core.records import Derivation, OpCost
from .access import decoded, elements_of, part, touched, union
from .cost import Costs
from .precision import Precision

Convention = Literal["naive", "fused"]
Phase = Literal["forward", "decode", "training"]
CONVENTIONS: tuple[Convention, ...] = ("naive", "fused")
PHASES: tuple[Phase, ...] = ("forward", "decode", "training")

#: Bytes per element of a number format, for ``--weights`` and ``--activations``.
DTYPES: dict[str, sympy.Rational] = {
    "fp32": sympy.Integer(4), "tf32": sympy.Integer(4), "bf16": sympy.Integer(2),
    "fp16": sympy.Integer(2), "fp8": sympy.Integer(1), "int8": sympy.Integer(1),
    "int4": sympy.Rational(1, 2)}
#: An index tensor's element: int64, PyTorch's index type.
INDEX_BYTES = 8


@dataclass(frozen=True)
class Widths:
    """Bytes per element of each kind of tensor."""

    weights: sympy.Rational
    grads: sympy.Rational
    activations: sympy.Rational
    masks: sympy.Rational
    index: sympy.Rational = sympy.Integer(INDEX_BYTES)
    #: what the widths are, in words ("bf16-adam: weights 2, activations 2 bytes")
    text: str = ""

    def of(self, name: str, tensors: Mapping[str, Tensor]) -> sympy.Rational:
        t = tensors.get(name)
        if t is None:
            base = tensors.get(name[1:]) if name.startswith("d") else None
            return self.grads if base is not None and base.is_param else self.activations
        if t.is_param or t.is_buffer:
            return self.weights
        return {"index": self.index, "mask": self.masks}.get(t.role, self.activations)


def widths(precision: Precision, weights: str | None = None,
           activations: str | None = None) -> Widths:
    """The policy's widths, with weights and activations overridden by name."""
    for given, what in ((weights, "--weights"), (activations, "--activations")):
        if given is not None and given not in DTYPES:
            raise SymflopsError(f"unknown number format {given!r} for {what}",
                                hint=f"use one of {', '.join(DTYPES)}")
    w = DTYPES[weights] if weights else sympy.Integer(precision.params)
    a = DTYPES[activations] if activations else sympy.Integer(precision.activations)
    text = (f"{precision.name}: weights {sympy.sstr(w)}{f' ({weights})' if weights else ''}, "
            f"activations {sympy.sstr(a)}{f' ({activations})' if activations else ''}, "
            f"parameter gradients {precision.grads}, masks {precision.masks}, "
            f"indices {INDEX_BYTES} (int64) bytes per element")
    return Widths(w, sympy.Integer(precision.grads), a, sympy.Integer(precision.masks), text=text)


@dataclass(frozen=True)
class Touch:
    tensor: str
    elements: sympy.Expr        # distinct elements, one run
    width: sympy.Rational       # bytes per element

    @property
    def bytes(self) -> sympy.Expr:
        return sympy.expand(self.elements * self.width)


@dataclass(frozen=True)
class Moved:
    """One op, rule or accumulation of a phase: one run of it, and its runs."""

    pass_: Literal["forward", "backward"]
    number: int                  # the op's or rule's position (-1: an accumulation)
    label: str                   # the op's output, or the gradient
    statement: str
    kind: str                    # the op's kind, "rule" or "accumulate"
    reads: tuple[Touch, ...]
    writes: tuple[Touch, ...]
    flops: sympy.Expr            # matrix products, one run
    elementwise: sympy.Expr      # everything else, one run
    copies: sympy.Expr           # runs

    @property
    def bytes(self) -> sympy.Expr:
        return sympy.expand(sum((t.bytes for t in self.reads + self.writes), sympy.Integer(0)))

    @property
    def work(self) -> sympy.Expr:
        """Every FLOP, both buckets: what the compute side of the roofline counts."""
        return sympy.expand(self.flops + self.elementwise)


@dataclass(frozen=True)
class Traffic:
    phase: Phase
    convention: Convention
    widths: Widths
    entries: tuple[Moved, ...]
    resident: tuple[str, ...]    # tensors the fused convention keeps on chip
    seq: str | None = None       # the sequence length a decoding step is at

    def total(self, what: str) -> sympy.Expr:
        """``bytes``, ``flops``, ``elementwise`` or ``work`` over every run."""
        return _total(self.entries, what)


@functools.lru_cache(maxsize=256)
def _total(entries: tuple[Moved, ...], what: str) -> sympy.Expr:
    """:meth:`Traffic.total`, once per entries: the summaries of one layer under
    policies of the same widths share their entries (:func:`_entries`)."""
    return sympy.expand(sum((getattr(e, what) * e.copies for e in entries), sympy.Integer(0)))


def sequence_dim(layer: Layer) -> sympy.Symbol:
    """The sequence length a decoding step is at: ``tokens / sequences``, one dim."""
    if layer.tokens is None or layer.sequences is None:
        raise SymflopsError(f"{layer.name} declares no 'tokens:' and 'sequences:', so a "
                            "decoding step is not defined",
                            hint="declare e.g. tokens: B*S and sequences: B")
    seq = sympy.cancel(layer.tokens / layer.sequences)
    if not isinstance(seq, sympy.Symbol):
        raise SymflopsError(f"{layer.name}'s tokens per sequence, {seq}, is not one dim",
                            hint="declare tokens: B*S and sequences: B")
    return seq


def _is_map(op: object) -> bool:
    """An elementwise op: a sum of products (a norm or a softmax is none),
    each summing over no letter, with no lookup, shift, placement or condition."""
    terms = op.terms  # type: ignore[attr-defined]
    return bool(terms) and all(not t.summed and not any(f.is_indicator for f in t.operands)
                               for t in terms)


def _resident(layer: Layer, ops: list[int], saved: set[str]) -> set[str]:
    outputs = {layer.ops[k].output for k in ops}
    readers: dict[str, list[int]] = {}
    for k in ops:
        for name in layer.ops[k].inputs:
            readers.setdefault(name, []).append(k)
    return {name for name in outputs
            if readers.get(name) and name not in saved
            and all(_is_map(layer.ops[k]) for k in readers[name])}


def _touches(access: object, extents: Mapping[str, sympy.Expr], layer: Layer, w: Widths,
             skip: set[str], span: object, seq: sympy.Symbol | None, decode: bool
             ) -> tuple[tuple[Touch, ...], tuple[Touch, ...]]:
    tensors = layer.tensor_map
    if decode:   # a defined dim (an MoE capacity c k B S / M) is its formula here
        subs = layer.substitutions
        extents = {k: substitute(v, subs) for k, v in extents.items()}
    out = []
    for side in ("reads", "writes"):
        found: dict[str, list[tuple[sympy.Expr, object]]] = {}
        for term in getattr(access, side):
            ext = extents
            if decode:
                term, ext = decoded(term, extents, seq, span)  # type: ignore[arg-type]
            factors = [f for f in term.operands if f.reads_tensor] if side == "reads" \
                else [term.output]
            for f in factors:
                found.setdefault(f.tensor, []).append(
                    (touched(f, term, ext, tensors, span), part(f, term, ext)))
        touches = []
        for name, counts in found.items():
            if name in skip:
                continue
            n = union(counts, None if decode else elements_of(name, tensors), name, span)
            touches.append(Touch(name, n, w.of(name, tensors)))
        out.append(tuple(touches))
    return out[0], out[1]


def _decode_work(cost: sympy.Expr, op: object, seq: sympy.Symbol,
                 subs: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    cost = substitute(sympy.expand(cost), subs)
    over = any(sympy.expand(e - seq) == 0 for e in op.dims().values())  # type: ignore[attr-defined]
    return sympy.expand(cost - cost.subs(seq, seq - 1)) if over else cost


def traffic(derivation: Derivation, costs: Costs, phase: Phase = "forward",
            convention: Convention = "naive", w: Widths | None = None) -> Traffic:
    """The bytes each op (and rule) of ``phase`` moves under ``convention``."""
    w = w or widths(costs.precision)
    # The entries depend on the policy only through its widths (as numbers), and
    # on the costs only through the ops' and rules' counts and runs.
    entries, resident, seq = _entries(derivation, costs.forward, costs.backward,
                                      costs.forward_copies, costs.backward_copies,
                                      phase, convention, dataclasses.replace(w, text=""))
    return Traffic(phase, convention, w, entries, resident, seq)


@functools.lru_cache(maxsize=64)
def _entries(derivation: Derivation, forward: tuple[OpCost, ...], backward: tuple[OpCost, ...],
             forward_copies: tuple[sympy.Expr, ...], backward_copies: tuple[sympy.Expr, ...],
             phase: Phase, convention: Convention, w: Widths
             ) -> tuple[tuple[Moved, ...], tuple[str, ...], str | None]:
    """:func:`traffic`'s entries, the tensors kept on chip, the decoding step's
    sequence dim; counted once for every policy of the same widths."""
    layer = derivation.layer
    subs = layer.substitutions
    seq = sequence_dim(layer) if phase == "decode" else None
    ops = [k for k, op in enumerate(layer.ops)
           if phase == "training" or op.kind != "cross_entropy"]
    if phase == "decode":
        for k in ops:
            if layer.ops[k].kind in ("recurrence", "loop"):
                raise SymflopsError(f"cannot count one decoding step of {layer.ops[k].output}: "
                                    f"a {layer.ops[k].kind} reads its last state, which is not "
                                    "modelled",
                                    layer.ops[k].span, "count the forward pass instead")
    saved = set(derivation.saved) if phase == "training" else set()
    resident = _resident(layer, ops, saved) if convention == "fused" else set()
    entries: list[Moved] = []
    for k in ops:
        op = layer.ops[k]
        reads, writes = _touches(op.moved(), op.dims(), layer, w, resident, op.span, seq,
                                 phase == "decode")
        flops, elementwise = forward[k].flops, forward[k].elementwise
        if phase == "decode":
            flops = _decode_work(flops, op, seq, subs)  # type: ignore[arg-type]
            elementwise = _decode_work(elementwise, op, seq, subs)  # type: ignore[arg-type]
        entries.append(Moved("forward", k, op.output, op.statement(), op.kind, reads, writes,
                             flops, elementwise, forward_copies[k]))
    if phase == "training":
        entries += _backward(derivation, backward, backward_copies, w)
    return (tuple(_substituted(e, subs) for e in entries), tuple(sorted(resident)),
            None if seq is None else seq.name)


def source(derivation: Derivation, costs: Costs) -> Callable[[str, str], Traffic | None]:
    """``traffic`` of each phase and convention, counted when first asked,
    None where the phase does not apply to the layer (the named quantities'
    :attr:`symflops.count.names.Sources.traffic`)."""
    found: dict[tuple[str, str], Traffic | None] = {}

    def get(phase: str, convention: str) -> Traffic | None:
        if (phase, convention) not in found:
            try:
                found[phase, convention] = traffic(derivation, costs, phase,  # type: ignore[arg-type]
                                                   convention)  # type: ignore[arg-type]
            except SymflopsError:
                found[phase, convention] = None
        return found[phase, convention]

    return get


def _backward(derivation: Derivation, backward: tuple[OpCost, ...],
              backward_copies: tuple[sympy.Expr, ...], w: Widths) -> list[Moved]:
    layer = derivation.layer
    tensors = layer.tensor_map
    out: list[Moved] = []
    contributions: dict[str, list[sympy.Expr]] = {}
    for j, rule in enumerate(derivation.rules):
        op = layer.ops[rule.op]
        reads, writes = _touches(op.moved(rule), rule.dims(), layer, w, set(), op.span,
                                 None, False)
        cost = backward[j]
        out.append(Moved("backward", j, rule.grad, rule.statement, "rule", reads, writes,
                         cost.flops, cost.elementwise, backward_copies[j]))
        contributions.setdefault(rule.wrt, []).append(backward_copies[j])
    for name, runs in contributions.items():
        n = tensors[name].elements
        if layer.sharing(name):   # every run of every rule adds into the one gradient
            adds, copies = sympy.expand(sum(runs, sympy.Integer(0)) - layer.copies(name)), \
                sympy.Integer(1)
        elif len(runs) > 1:
            adds, copies = sympy.Integer(len(runs) - 1), runs[0]
        else:
            continue
        if adds == 0:
            continue
        grad = "d" + name
        width = w.of(grad, tensors)
        total = sympy.expand(adds * n)
        out.append(Moved("backward", -1, grad, f"{grad} = sum of its {len(runs)} contributions"
                         if not layer.sharing(name) else f"{grad} = sum over the copies",
                         "accumulate", (Touch(grad, total, width),
                                        Touch(f"{grad} (contribution)", total, width)),
                         (Touch(grad, total, width),), sympy.Integer(0), total, copies))
    return out


def _substituted(e: Moved, subs: Mapping[sympy.Symbol, sympy.Expr]) -> Moved:
    if not subs:
        return e

    def s(x: sympy.Expr) -> sympy.Expr:
        return substitute(sympy.expand(x), subs)

    def t(touches: tuple[Touch, ...]) -> tuple[Touch, ...]:
        return tuple(Touch(x.tensor, s(x.elements), x.width) for x in touches)

    return Moved(e.pass_, e.number, e.label, e.statement, e.kind, t(e.reads), t(e.writes),
                 s(e.flops), s(e.elementwise), s(e.copies))
