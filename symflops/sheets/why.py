"""Sentences that say *why* a layer costs what it does, each produced only
when the engine's facts (:mod:`symflops.count.facts`) make it true for this
layer.

Every sentence is a string for one format: prose escaped with the format's
escape, math between ``$`` printed with the sheet's :class:`Math` (tensor
names, polynomials in the declared order), the same in Markdown and LaTeX.
Nothing here computes a count: a number in a sentence is a field of a fact
record, evaluated only at a configuration the caller names.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence, TypedDict

import sympy

from . import printing as P
from .notation import Math
from .words import noun
from ..count.evaluate import number
from ..count.facts import (BackwardFacts, LayerFacts, NoGradient, ProductFact,
                           RepeatedActivations, TokenSum)
from ..core.ir import Layer, substitute

Escape = Callable[[str], str]


class WhyContext(TypedDict):
    """The ``why`` variable of a sheet (``templates/why.*.j2``): lists of
    finished sentences, empty when the facts give nothing to say."""

    #: per group of products, how backward relates to forward
    products: list[str]
    #: backward against forward for the layer's totals, or None (no product)
    summary: str | None
    #: parameter gradients that sum over the token letters
    tokens: list[str]
    #: repeated blocks' activations and what checkpointing keeps instead
    activations: list[str]
    #: the products that are not 2 x forward, each with its reason (a part of ``products``)
    exceptions: list[str]


def why_context(layer: Layer, facts: LayerFacts, m: Math, esc: Escape, unit: str,
                at: Mapping[str, int] | None = None) -> WhyContext:
    """The sentences of ``facts`` about ``layer`` for one format; with ``at``
    (values of the free dims), shares are also given as percentages there."""
    return WhyContext(exceptions=[exception_sentence(p, facts.backward, m, esc)
                                  for p in facts.backward.exceptions],
                      products=product_sentences(facts.backward, m, esc),
                      summary=summary_sentence(facts.backward, m, esc, unit),
                      tokens=token_sentences(layer, facts.token_sums, m, esc),
                      activations=[activation_sentence(layer, r, m, esc, unit, at)
                                   for r in facts.repeated])


def _names(m: Math, names: Sequence[str]) -> str:
    """``$Q$, $K$ and $V$``: one span each, so that a long list wraps."""
    spans = [f"${m.t(n)}$" for n in dict.fromkeys(names)]
    return spans[0] if len(spans) == 1 else ", ".join(spans[:-1]) + " and " + spans[-1]


def _letters(letters: Sequence[str]) -> str:
    return ", ".join(P.index_list([x]) for x in letters)


def fraction(expr: sympy.Expr, m: Math) -> str:
    """A ratio of polynomials as LaTeX: ``2``, ``\\tfrac{1}{2}``, ``\\frac{2L - 1}{L}``."""
    num, den = sympy.fraction(sympy.cancel(sympy.together(expr)))
    if den == 1:
        return m.poly(num)
    if num.is_number and den.is_number:
        return m.poly(expr)
    return rf"\frac{{{m.poly(num)}}}{{{m.poly(den)}}}"


_REASONS = {
    "frozen": "{t} is frozen (the gradient flows through it, but it has none of its own)",
    "first_input": "{t} is the network's first input and needs no gradient",
    "buffer": "{t} is a buffer, a constant the layer reads: it has no gradient",
    "no_gradient": "{t} needs no gradient (nothing it is computed from is trained or needs one)",
}


def product_sentences(b: BackwardFacts, m: Math, esc: Escape) -> list[str]:
    """How backward relates to forward, product by product: the products that
    are exactly 2 x grouped (weight products, then products of two
    activations), then each exception with its reason."""
    out = []
    weights = [p for p in b.products if p.case == "twice" and len(p.weights) == 1]
    pairs = [p for p in b.products if p.case == "twice" and not p.weights]
    both = [p for p in b.products if p.case == "twice" and len(p.weights) == 2]
    if weights:
        out.append(
            esc("The matmul-type products computing ") + _labels(weights, b, m, esc)
            + esc(" each multiply two tensors that both need a gradient, so each yields two "
                  "backward products (one per operand: the input gradient and the weight "
                  "gradient), and the engine finds each of them exactly as large as the forward "
                  "product: backward = 2 × forward for each of these ops."))
    if pairs:
        grads = [g.grad for p in pairs for g in p.products]
        out.append(
            esc("The products computing ") + _labels(pairs, b, m, esc)
            + esc(" multiply two activations and no weight: they yield two activation "
                  "gradients (") + _names(m, grads)
            + esc(") and no weight gradient, each again exactly as large as its forward "
                  "product, so these are 2 × forward too."))
    if both:
        out.append(
            esc("The products computing ") + _labels(both, b, m, esc)
            + esc(" multiply two weights, each needing a gradient: two backward products, each "
                  "exactly as large as the forward product, so 2 × forward as well."))
    for p in b.exceptions:
        out.append(exception_sentence(p, b, m, esc))
    return out


def _label(p: ProductFact, b: BackwardFacts, m: Math, esc: Escape) -> str:
    """``$Y$``, or ``$Y$ (its term in $U$ and $B$)`` when the op has several products."""
    text = f"${m.t(p.output)}$"
    if sum(q.op == p.op for q in b.products) > 1:
        text += esc(" (its term in ") + _names(m, p.operands) + esc(")")
    return text


def _labels(ps: Sequence[ProductFact], b: BackwardFacts, m: Math, esc: Escape) -> str:
    labels = [_label(p, b, m, esc) for p in ps]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + esc(" and ") + labels[-1]


def exception_sentence(p: ProductFact, b: BackwardFacts, m: Math, esc: Escape) -> str:
    """Why product ``p`` is not 2 x forward: a missing gradient, a rule
    cheaper or dearer than the forward product, or fewer copies."""
    head = (esc("The product computing ") + f"${m.t(p.output)}$" + esc(" from ")
            + _names(m, p.operands))
    ratio = esc(", so its backward is ") + f"${fraction(p.per_forward, m)}$" + esc(" × its forward.")
    if p.case in ("one_operand", "none"):
        reasons = "; ".join(_reason(g, m, esc) for g in p.missing)
        if p.case == "none":
            return head + esc(" yields no backward product: ") + reasons + esc(".")
        kept = p.products[0]
        return (head + esc(" yields one backward product only, ") + f"${m.t(kept.grad)}$"
                + esc(": ") + reasons + ratio)
    if p.case == "copies":
        runs = "; ".join(f"${m.t(g.grad)}$" + esc(" runs in ") + f"${m.poly(g.copies)}$"
                         + esc(" of the ") + f"${m.poly(p.copies)}$" + esc(" copies")
                         for g in p.products if sympy.expand(g.copies - p.copies) != 0)
        return (head + esc(" yields two backward products as large as its forward, but ") + runs
                + esc(" (the first copy's input needs no gradient)") + ratio)
    parts = []
    for g in p.products:
        if g.same_as_forward:
            parts.append(f"${m.t(g.grad)}$" + esc(" costs what the forward product costs"))
            continue
        text = (f"${m.t(g.grad)}$" + esc(" costs ") + f"${m.poly(g.flops)}$"
                + esc(" matmul-type against the forward's ") + f"${m.poly(p.forward)}$")
        if g.per_forward.is_number:
            text += esc(" (" + ("cheaper" if g.per_forward < 1 else "dearer") + ", ratio ") \
                + f"${fraction(g.per_forward, m)}$" + esc(")")
        if g.flops == 0 and g.elementwise != 0:
            text += (esc(": it is counted as elementwise work, ") + f"${m.poly(g.elementwise)}$"
                     + esc(" FLOPs"))
        parts.append(text)
    parts += [_reason(g, m, esc) for g in p.missing]
    return head + esc(" is not 2 × forward: ") + "; ".join(parts) + ratio


def _reason(g: NoGradient, m: Math, esc: Escape) -> str:
    before, _, after = _REASONS[g.reason].partition("{t}")
    return esc(before) + f"${m.t(g.tensor)}$" + esc(after)


def summary_sentence(b: BackwardFacts, m: Math, esc: Escape, unit: str) -> str | None:
    """Backward against forward for the layer's totals: "backward = 2 x
    forward" only when the totals are exactly in that ratio."""
    if not b.products:
        return None
    see = esc(" (see the products above that are not 2 × forward)") if b.exceptions else ""
    if b.twice:
        return esc(f"For the whole layer, backward = 2 × forward: the totals of matmul-type "
                   f"{unit} are exactly in that ratio.")
    if b.per_forward is not None:
        return (esc("For the whole layer, backward = ") + f"${fraction(b.per_forward, m)}$"
                + esc(f" × forward in matmul-type {unit}, not 2 ×") + see + esc("."))
    return (esc(f"For the whole layer, backward is no fixed multiple of forward in matmul-type "
                f"{unit}: the ratio depends on the sizes") + see + esc("."))


def token_sentences(layer: Layer, sums: Sequence[TokenSum], m: Math, esc: Escape) -> list[str]:
    """Parameter gradients grouped by the token letters they sum over."""
    if layer.tokens is None:
        return []
    groups: dict[tuple[tuple[str, ...], tuple[sympy.Expr, ...], bool], list[str]] = {}
    for s in sums:
        groups.setdefault((s.letters, s.dims, s.every_token), []).append(s.grad)
    out = []
    for (letters, dims, every), grads in groups.items():
        names = list(dict.fromkeys(grads))
        verb = esc(" sums over ") if len(names) == 1 else esc(" each sum over ")
        head = _names(m, names) + verb + f"${_letters(letters)}$"
        if every:
            out.append(head + esc(", which run over all ") + f"${m.poly(layer.tokens)}$"
                       + esc(" tokens of the pass: every token in the batch contributes, which is "
                             "why data-parallel replicas, each holding part of the batch, "
                             "all-reduce their weight gradients once per step."))
        else:
            out.append(head + esc(" (extent ") + f"${m.poly(sympy.Mul(*dims))}$"
                       + esc(") but not over all ") + f"${m.poly(layer.tokens)}$"
                       + esc(" tokens of the pass."))
    return out


def activation_sentence(layer: Layer, r: RepeatedActivations, m: Math, esc: Escape, unit: str,
                        at: Mapping[str, int] | None = None) -> str:
    """What the copies of a repeated block save, their share, and what full
    recomputation (activation checkpointing) keeps instead."""
    share = ""
    if at is not None:
        subs = layer.substitutions
        part, whole = (number(substitute(e, subs), at) for e in (r.all_copies, r.total))
        if whole:
            config = ", ".join(f"{P.symbol_name(k)} = {v}" for k, v in at.items())
            share = esc(f" ({100 * part / whole:.1f}% at ") + f"${config}$" + esc(")")
    return (esc("One copy of the block " + r.name + " saves ") + f"${m.poly(r.one_copy)}$"
            + esc(" bytes of activations for its backward pass, and it runs ")
            + f"${m.poly(r.copies)}$" + esc(" times: its copies together save ")
            + f"${m.poly(r.all_copies)}$" + esc(" of the ") + f"${m.poly(r.total)}$"
            + esc(f" bytes {noun(layer)} saves") + share
            + esc(". That is why activation checkpointing exists: with full recomputation "
                  f"(the ops of every block run again during the backward pass) {noun(layer)} keeps ")
            + f"${m.poly(r.recompute_bytes)}$" + esc(" bytes instead, for ")
            + f"${m.poly(r.recompute_flops)}$" + esc(f" more matmul-type {unit}."))
