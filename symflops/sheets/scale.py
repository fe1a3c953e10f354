"""What changes at scale: which counts grow with the tokens, the sequence
length and the layers, and what data parallelism, recomputation and fused
attention do to each (the seeds' closing points, derived).

Each sentence is made from an engine record: the degree of a polynomial in
a dim (:mod:`symflops.count.growth`), a recompute policy's counts
(:mod:`symflops.count.recompute`), the parts of training beyond 6N
(:mod:`symflops.count.beyond`) with the share of the full square their
where-clause leaves (:class:`~symflops.count.explain.ConditionNote`), the
key/value cache (:mod:`symflops.count.inference`).  A claim the records do
not make true is not said.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy

from .notation import Math
from .printing import index_list
from .words import DEGREE, Escape, dim_phrase, names
from ..count.beyond import BeyondPart
from ..count.cost import Costs
from ..count.explain import ConditionNote, SheetCounts
from ..count.facts import TokenSum
from ..count.growth import degree, dim_kind, model_dims, sequence_dim
from ..count.inference import cache_note
from ..count.records import WholeModel
from ..core.ir import Layer, substitute
from ..core.polynomial import quotient
from ..core import factoring


def _deg(k: int) -> str:
    return DEGREE.get(k, f"as the power {k}") if k else "not at all"


def growth_sentences(layer: Layer, costs: Costs, esc: Escape) -> list[dict[str, str]]:
    """For each dim a run grows (the tokens', the sequence length, the
    layers, and any other dim the activations grow with): how the training
    FLOPs, the saved activations and the fixed memory grow with it (a row
    of the section's table: ``dim``, ``flops``, ``activations``, ``fixed``)."""
    subs = layer.substitutions
    mem = costs.memory()
    flops = substitute(costs.flops_total, subs)
    acts = substitute(mem["activation_bytes"], subs)
    fixed = substitute(mem["fixed_bytes"], subs)
    weights = model_dims(layer)
    out = []
    for d in layer.dims:
        s = d.symbol
        kind = dim_kind(layer, d.name)
        if d.name in {n for n, _ in layer.definitions}:
            continue
        a, f, w = degree(acts, s), degree(flops, s), degree(fixed, s)
        if kind == "other" and (s in weights or a == 0):
            continue
        out.append({"dim": dim_phrase(layer, d.name, esc), "flops": esc(_deg(f)),
                    "activations": esc(_deg(a)), "fixed": esc(_deg(w))})
    return out


def dp_sentence(layer: Layer, costs: Costs, sums: Sequence[TokenSum], m: Math, esc: Escape,
                poly: Callable[[sympy.Expr], str]) -> str | None:
    """What data parallelism does, when the layer declares its tokens: the
    split dim (the sequences, else the tokens' first dim), the counts it
    divides (those linear in it), the gradients it all-reduces."""
    if layer.tokens is None or costs.trainable == 0:
        return None
    split = layer.sequences if layer.sequences is not None else layer.tokens
    dims = sorted(sympy.expand(split).free_symbols, key=str)
    if len(dims) != 1:
        return None
    s = dims[0]
    subs = layer.substitutions
    mem = costs.memory()
    linear = all(degree(substitute(e, subs), s) == 1
                 for e in (costs.flops_total, mem["activation_bytes"]))
    if not linear:
        return None
    reduced = any(t.every_token for t in sums)
    text = (esc("Data parallelism on n replicas gives each ") + f"${poly(s)}$" + esc("/n of the ")
            + f"${poly(s)}$" + esc(": training FLOPs and saved activations are linear in ")
            + f"${poly(s)}$" + esc(", so each replica has 1/n of them, while the weights, gradients "
                                   "and optimizer state stay whole on each (ZeRO and FSDP shard "
                                   "them too)."))
    if reduced:
        text += (esc(" The weight gradients sum over the tokens, so the replicas all-reduce them "
                     "once per step: ") + f"${poly(costs.trainable)}$" + esc(" elements, ")
                 + f"${poly(mem['grads_bytes'])}$" + esc(" bytes."))
    return text


def recompute_sentences(layer: Layer, costs: Costs, model: WholeModel | None, m: Math,
                        esc: Escape, poly: Callable[[sympy.Expr], str],
                        policies: dict[str, Any]) -> list[str]:
    """What each recompute policy keeps and costs against keeping everything."""
    none = policies["none"]
    tok = layer.tokens
    per_token = esc(" per token") if tok is not None else esc("")

    def per(e: sympy.Expr) -> sympy.Expr:
        return quotient(e, tok) if tok is not None else e

    out = []
    full = policies.get("full")
    if full is not None and full.flops_recomputed != 0:
        text = (esc("Full recomputation (activation checkpointing: ")
                + esc("each block keeps its input" if layer.blocks else "only the layer's input "
                      "and the tensors no op writes are kept")
                + esc(", and its forward runs again in the backward pass) keeps ")
                + f"${poly(full.activation_bytes)}$" + esc(" bytes of activations instead of all "
                                                           "the saved tensors, for ")
                + f"${poly(per(full.flops_recomputed))}$" + esc(" more FLOPs") + per_token)
        if model is not None and model.per_token is not None:
            n = model.parameters.active_dense
            if sympy.expand(quotient(full.flops_recomputed, tok) - 2 * n) == 0:
                text += esc(": the forward again, 2N, so 8N per token are executed")
        out.append(text + esc("."))
    fused = policies.get("fused_attention")
    if fused is not None:
        saved = sympy.expand(none.activation_bytes - fused.activation_bytes)
        ops = names([f"${m.t(o)}$" for o in fused.ops], esc)
        out.append(esc("Fused attention (a FlashAttention-style kernel, recompute policy "
                       "fused_attention) never writes ") + ops
                   + esc(" to memory: it keeps one statistic per row of the softmax instead and "
                         "recomputes them in the backward pass, saving ") + f"${poly(saved)}$"
                   + esc(" bytes of activations for ")
                   + f"${poly(per(fused.flops_recomputed))}$" + esc(" more FLOPs") + per_token
                   + esc("."))
    return out


def attention_sentence(layer: Layer, counts: SheetCounts, parts: Sequence[BeyondPart],
                       m: Math, esc: Escape, poly: Callable[[sympy.Expr], str]) -> str | None:
    """The attention correction per token as the sources state it: the exact
    count of the products over the context beside the full square's."""
    exact = full = sympy.Integer(0)
    ops = []
    for p in parts:
        if p.cause != "no_weight":
            continue
        notes = [n for n in counts.forward[p.op].domain if isinstance(n, ConditionNote)]
        if len(notes) != 1:
            continue
        n = notes[0]
        exact += p.per_token
        full += sympy.cancel(p.per_token * n.tuples / n.inside)
        ops.append(p.output)
    if not ops:
        return None
    exact, full = sympy.expand(exact), factoring.factor_ratio(full)
    if not full.is_polynomial() or sympy.expand(exact - full) == 0:
        return None
    return (esc("The attention products (") + names([f"${m.t(o)}$" for o in ops], esc)
            + esc(") cost ") + f"${poly(exact)}$"
            + esc(" FLOPs per token, forward and backward, over exactly the pairs their "
                  "where-clause allows; over the full square, as a kernel that computes every pair "
                  "and masks does (the correction the sources state), ")
            + f"${poly(sympy.expand(full))}$" + _share(layer, exact, full, esc) + esc("."))


def _share(layer: Layer, exact: sympy.Expr, full: sympy.Expr, esc: Escape) -> str:
    """``: the exact count tends to 1/2 of it as S grows``, from the limit."""
    dim, _ = sequence_dim(layer)
    if dim is None:
        return ""
    s = layer.dim_symbols[dim]
    q = sympy.limit(sympy.cancel(substitute(exact / full, layer.substitutions)), s, sympy.oo)
    if not q.is_Rational or q == 1:
        return ""
    half = ", about half" if q == sympy.Rational(1, 2) else ""
    return esc(f": the exact count tends to {q} of it as {dim} grows{half}")


def cache_sentence(layer: Layer, model: WholeModel | None, m: Math, esc: Escape,
                   poly: Callable[[sympy.Expr], str]) -> str | None:
    inf = model.inference if model is not None else None
    said = cache_note(layer, inf is not None)
    note = None if said is None else "".join(
        esc(v) if kind == "text" else f"${m.t(v)}$" if kind == "tensor"
        else f"${poly(v)}$" if kind == "dim" else f"${index_list([v])}$"
        for kind, v in said.pieces)
    if inf is None:
        return None if note is None else esc("The key/value cache is ") + note + esc(".")
    per_seq = inf.cache_bytes_per_sequence is not None
    text = (esc("Decoding keeps, for every position already seen, ") + names(
        [f"${m.t(c)}$" for c in inf.cache], esc) + esc(" (the key/value cache): ")
        + f"${poly(inf.cache_bytes_per_sequence if per_seq else inf.cache_bytes)}$"
        + esc(" bytes" + (" per sequence" if per_seq else "")))
    if inf.bytes_per_decoded_token is not None:
        text += (esc("; each decoded token reads the weights it uses and that cache once, ")
                 + f"${poly(inf.bytes_per_decoded_token)}$"
                 + esc(" bytes, so memory bandwidth, not FLOPs, bounds the decode rate"))
    return text + (esc("; ") + note + esc(".") if note else esc("."))


def scale_context(layer: Layer, costs: Costs, counts: SheetCounts, model: WholeModel | None,
                  parts: Sequence[BeyondPart], sums: Sequence[TokenSum], policies: dict[str, Any],
                  m: Math, esc: Escape, poly: Callable[[sympy.Expr], str]) -> dict[str, Any]:
    return {
        "growth": growth_sentences(layer, costs, esc),
        "parallel": dp_sentence(layer, costs, sums, m, esc, poly),
        "recompute": recompute_sentences(layer, costs, model, m, esc, poly, policies),
        "attention": attention_sentence(layer, counts, parts, m, esc, poly),
        "cache": cache_sentence(layer, model, m, esc, poly),
    }
