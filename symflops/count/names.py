"""The names of the quantities symflops reports: one registry, read by
``check`` (the names a claim may use), by ``derive --json`` and ``eval
--json`` (their ``quantities`` object) and by anything else that prints a
quantity, so that a name printed is a name a claim may use.

Each :class:`Quantity` says its name, its kind (``FLOPs``: work in the
counting unit, FLOPs or MACs with ``--macs``; ``bytes``; ``elements``;
``count``: a number of things, such as parameters or tokens), whether it is
per pass, per token or per sequence, where it comes from in ``derive
--json`` (``source``) and what it means.  Its value is read off the summary
tree (:class:`symflops.count.records.Summary`) and, for attention, the
attention products of :mod:`symflops.count.attention`; a quantity that does
not apply to a layer (per-token figures without ``tokens:``, the key/value
cache of a layer with no causal op) has no value and no name there.

Later quantities (per-device figures, bytes moved) are added with
:func:`register`; every reader sees them at once.

This module imports neither SymPy nor the engine at import time, so the
command line's help can list the names without loading them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from .traffic_names import ROOFLINE

if TYPE_CHECKING:  # pragma: no cover
    from .attention import Attention
    from .records import Summary

#: What a quantity measures.  Numbers and dims carry no unit; a ``count``
#: (parameters, tokens) neither: it multiplies into FLOPs or bytes (6·N·D).
#: ``FLOPs per byte`` is an arithmetic intensity.
Kind = Literal["FLOPs", "bytes", "elements", "count", "FLOPs per byte"]
#: What a whole-pass figure is divided by: nothing, the tokens or the sequences
#: (``params_read``, a count of one token's reads, is not a figure divided).
Per = Literal["pass", "token", "sequence"]


@dataclass(frozen=True)
class Sources:
    """What a quantity is read from: the summary, the attention products
    (None: not computed), and the recompute policy that ``flops.executed``
    and the activation memory assume (None: ``flops.executed`` as declared,
    activations without recomputation, as ``derive --json`` gives them)."""

    summary: "Summary[Any]"
    attention: "Attention | None" = None
    policy: str | None = None
    #: the bytes moved of a phase under a convention (:func:`symflops.count.traffic.source`):
    #: ``traffic(phase, convention)``, None where it does not apply; None: not computed
    traffic: "Callable[[str, str], Any] | None" = None


@dataclass(frozen=True)
class Quantity:
    name: str
    kind: Kind
    source: str          # its place in ``derive --json``, or how it is computed
    description: str
    get: Callable[[Sources], Any]  # its formula, or None where it does not apply
    per: Per = "pass"


_REGISTRY: list[Quantity] = []


def register(q: Quantity) -> Quantity:
    """Add a quantity to every reader (a name may be registered once)."""
    if any(r.name == q.name for r in _REGISTRY):
        raise ValueError(f"quantity {q.name!r} is registered twice")
    _REGISTRY.append(q)
    return q


def registry() -> tuple[Quantity, ...]:
    return tuple(_REGISTRY)


def find(name: str) -> Quantity | None:
    for q in _REGISTRY:
        if q.name == name:
            return q
    return None


# ---------------------------------------------------------------- helpers --

def _zero() -> Any:
    import sympy

    return sympy.Integer(0)


def _expand(value: Any) -> Any:
    import sympy

    return None if value is None else sympy.expand(value)


def _per(value: Any, by: Any) -> Any:
    if value is None or by is None:
        return None
    from ..core.polynomial import quotient

    return quotient(value, by)


def _policy(x: Sources) -> Any:
    """The recompute policy's costs the convention names (None: none chosen)."""
    if x.policy is None:
        return None
    return x.summary.model.recompute.policies[x.policy]


def _executed(x: Sources) -> Any:
    p = _policy(x)
    return x.summary.model.flops_executed if p is None else p.flops_executed


def _recomputed(x: Sources) -> Any:
    r = x.summary.model.recompute
    return r.policies[x.policy or r.policy].flops_recomputed


def _activations(x: Sources) -> Any:
    p = _policy(x)
    return x.summary.memory.activations if p is None else p.activations


def _activation_bytes(x: Sources) -> Any:
    p = _policy(x)
    return x.summary.memory.activation_bytes if p is None else p.activation_bytes


def _master(x: Sources) -> Any:
    return x.summary.trainable_params if x.summary.precision.master else _zero()


def _fixed(x: Sources) -> Any:
    m = x.summary.memory
    return _expand(m.params + m.grads + m.optimizer + _master(x))


def _attention(x: Sources, backward: bool | None) -> Any:
    if x.attention is None or not x.attention.terms:
        return None
    return x.attention.total(backward)


def _tokens(x: Sources) -> Any:
    return x.summary.model.tokens


def _per_token(x: Sources) -> Any:
    return x.summary.model.per_token


def _inference(x: Sources) -> Any:
    return x.summary.model.inference


def _add(name: str, kind: Kind, source: str, description: str, get: Callable[[Sources], Any],
         per: Per = "pass") -> None:
    register(Quantity(name, kind, source, description, get, per))


# ------------------------------------------------------------ the names --
# The order is the order names are listed in (check --help, the error for an
# unknown name, derive --json's quantities): the names check has always
# taken first, as before.

_add("params", "count", "params", "parameter elements, every copy (the P of 2·B·P)",
     lambda x: x.summary.params)
_add("trainable_params", "count", "trainable_params", "the parameters that are trained",
     lambda x: x.summary.trainable_params)
_add("activations", "elements", "memory.activations",
     "short for memory.activations: saved activation elements", _activations)
for _k in ("forward", "backward", "total"):
    _add(f"flops.{_k}", "FLOPs", f"flops.{_k}",
         f"matrix-product FLOPs of the {'training step' if _k == 'total' else _k + ' pass'} "
         "(model FLOPs: no recomputation)",
         lambda x, k=_k: getattr(x.summary.flops, k))
for _k in ("forward", "backward", "total"):
    _add(f"flops_elementwise.{_k}", "FLOPs", f"flops_elementwise.{_k}",
         f"everything else, {_k}: functions, norms, softmax, additions, scatters",
         lambda x, k=_k: getattr(x.summary.flops_elementwise, k))
_MEMORY = {
    "params": ("elements", "parameter elements"),
    "grads": ("elements", "gradient elements (trainable parameters)"),
    "optimizer": ("elements", "optimizer state elements (Adam: m and v)"),
    "activations": ("elements", "saved activation elements"),
    "inference_peak": ("elements", "the most activation elements live at once in inference"),
    "params_bytes": ("bytes", "parameters in bytes"),
    "grads_bytes": ("bytes", "gradients in bytes"),
    "optimizer_bytes": ("bytes", "optimizer state in bytes"),
    "master_bytes": ("bytes", "master weights in bytes"),
    "fixed_bytes": ("bytes", "parameters, gradients, optimizer state and master weights, in bytes"),
    "activation_bytes": ("bytes", "saved activations in bytes"),
    "total_bytes": ("bytes", "fixed bytes, activation bytes and buffers"),
}
_MEMORY_GET: dict[str, Callable[[Sources], Any]] = {
    "activations": _activations,
    "activation_bytes": _activation_bytes,
    "total_bytes": lambda x: _expand(x.summary.memory.fixed_bytes + _activation_bytes(x)
                                     + x.summary.memory.buffers_bytes),
}
for _k, (_kind, _what) in _MEMORY.items():
    _add(f"memory.{_k}", _kind, f"memory.{_k}", _what,  # type: ignore[arg-type]
         _MEMORY_GET.get(_k, lambda x, k=_k: getattr(x.summary.memory, k)))
_add("memory.buffers", "elements", "memory.buffers", "elements of the constant tables (buffers)",
     lambda x: x.summary.memory.buffers or None)
_add("memory.buffers_bytes", "bytes", "memory.buffers_bytes", "the buffers in bytes",
     lambda x: x.summary.memory.buffers_bytes or None)
_add("memory.master", "elements", "trainable_params (when the policy keeps master weights)",
     "master weight elements", _master)
_add("memory.fixed", "elements", "memory.params + grads + optimizer + master elements",
     "the fixed memory in elements: parameters, gradients, optimizer state, master weights",
     _fixed)
_add("memory.total", "elements", "memory.fixed + activations + buffers, in elements",
     "everything stored in training, in elements",
     lambda x: _expand(_fixed(x) + _activations(x) + x.summary.memory.buffers))
_add("memory.inference_peak_bytes", "bytes", "memory.inference_peak x precision.activations",
     "the inference peak in bytes",
     lambda x: _expand(x.summary.memory.inference_peak * x.summary.precision.activations))
_add("tokens", "count", "tokens", "tokens one pass processes (the declaration's tokens:)", _tokens)
_add("sequences", "count", "sequences", "sequences in one pass (the declaration's sequences:)",
     lambda x: x.summary.model.sequences)
_add("params_active", "count", "parameters.active",
     "parameters a token uses: the dense ones it reads, every other whole (published counts)",
     lambda x: x.summary.model.parameters.active)
_add("params_active_dense", "count", "parameters.active_dense",
     "the N of 6N: dense parameters a token's products read (an MoE's k of M experts)",
     lambda x: x.summary.model.parameters.active_dense)
_add("params_dense", "count", "parameters.dense",
     "parameters multiplied in a product that sums over an index (every expert)",
     lambda x: x.summary.model.parameters.dense)
_add("params_lookup", "count", "parameters.lookup", "parameters read only through a lookup",
     lambda x: x.summary.model.parameters.lookup)
_add("params_elementwise", "count", "parameters.elementwise",
     "biases, norm gains, added position tables", lambda x: x.summary.model.parameters.elementwise)
_add("params_read", "count", "parameters.read_per_token",
     "parameter elements one token's forward pass reads",
     lambda x: x.summary.model.parameters.read_per_token)
_add("flops.inference", "FLOPs", "flops.forward",
     "the forward pass: what inference runs (nothing saved, no backward)",
     lambda x: x.summary.flops.forward)
_add("flops.executed", "FLOPs", "flops_executed (recompute.policies.P.flops_executed)",
     "training FLOPs executed: model FLOPs plus the recomputed forward ops "
     "(--recompute, else the declared policy)", _executed)
_add("flops.recomputed", "FLOPs", "recompute.policies.P.flops_recomputed",
     "the forward FLOPs the recompute policy runs again", _recomputed)
for _k, _b in (("forward", False), ("backward", True), ("total", None)):
    _add(f"attention_flops.{_k}", "FLOPs", "the attention products (symflops.count.attention)",
         f"the products over two sequence letters (scores and mixing), {_k}",
         lambda x, b=_b: _attention(x, b))
for _k in ("forward", "backward", "total"):
    _add(f"flops_per_token.{_k}", "FLOPs", f"per_token.flops.{_k}",
         f"flops.{_k} divided by the tokens",
         lambda x, k=_k: getattr(_per_token(x).flops, k) if _per_token(x) else None, "token")
_add("flops_per_token.inference", "FLOPs", "per_token.inference_forward",
     "the forward pass per token (inference)",
     lambda x: _per_token(x).inference_forward if _per_token(x) else None, "token")
_add("flops_per_token.executed", "FLOPs", "per_token.flops_executed",
     "flops.executed divided by the tokens", lambda x: _per(_executed(x), _tokens(x)), "token")
_add("flops_per_token.elementwise", "FLOPs", "per_token.flops_elementwise",
     "elementwise FLOPs of the training step per token",
     lambda x: _per_token(x).flops_elementwise if _per_token(x) else None, "token")
_add("flops_per_token.six_n", "FLOPs", "per_token.six_n", "6 x params_active_dense",
     lambda x: _per_token(x).six_n if _per_token(x) else None, "token")
_add("flops_per_token.beyond_six_n", "FLOPs", "per_token.beyond_six_n",
     "training FLOPs per token minus 6N: attention, routing, frozen weights",
     lambda x: _per_token(x).beyond_six_n if _per_token(x) else None, "token")
for _k, _b in (("forward", False), ("backward", True), ("total", None)):
    _add(f"attention_flops_per_token.{_k}", "FLOPs", "attention_flops divided by the tokens",
         f"attention_flops.{_k} divided by the tokens",
         lambda x, b=_b: _per(_attention(x, b), _tokens(x)), "token")
_add("kv_cache.elements", "elements", "inference.cache_elements",
     "the key/value cache at the declared context, every sequence and layer",
     lambda x: _inference(x).cache_elements if _inference(x) else None)
_add("kv_cache.bytes", "bytes", "inference.cache_bytes", "the key/value cache in bytes",
     lambda x: _inference(x).cache_bytes if _inference(x) else None)
_add("kv_cache.elements_per_sequence", "elements", "inference.cache_elements_per_sequence",
     "the cache of one sequence",
     lambda x: _inference(x).cache_elements_per_sequence if _inference(x) else None, "sequence")
_add("kv_cache.bytes_per_sequence", "bytes", "inference.cache_bytes_per_sequence",
     "the cache of one sequence in bytes",
     lambda x: _inference(x).cache_bytes_per_sequence if _inference(x) else None, "sequence")
_add("inference.weights_bytes", "bytes", "inference.weights_bytes", "every weight, stored",
     lambda x: _inference(x).weights_bytes if _inference(x) else None)
_add("inference.weights_bytes_read", "bytes", "inference.weights_bytes_read",
     "the weights one decoded token reads, in bytes",
     lambda x: _inference(x).weights_bytes_read if _inference(x) else None)
_add("inference.bytes_per_decoded_token", "bytes", "inference.bytes_per_decoded_token",
     "the weights a token reads plus one sequence's cache, once each",
     lambda x: _inference(x).bytes_per_decoded_token if _inference(x) else None)


# ------------------------------------------------- bytes moved (the roofline) --
# symflops/count/traffic_names.py says them (it imports nothing of this module).

for _q in ROOFLINE:
    _add(*_q)


def values(x: Sources, only: frozenset[str] | None = None) -> dict[str, Any]:
    """Every registered quantity that applies, in registry order: name ->
    formula; with ``only``, those of its names alone (the bytes moved, say,
    are not counted for a claim about FLOPs)."""
    out = {}
    for q in _REGISTRY:
        if only is not None and q.name not in only:
            continue
        v = q.get(x)
        if v is not None:
            out[q.name] = v
    return out


def listing(width: int = 76) -> str:
    """The names, one line per head and kind, with the kind: for a help text."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for q in _REGISTRY:
        head, dot, tail = q.name.partition(".")
        groups.setdefault((head, q.kind, q.per), []).append(tail if dot else "")
    lines = []
    for (head, kind, per), tails in groups.items():
        what = kind + ("" if per == "pass" else f" per {per}")
        if not any(tails):
            lines.append((head, what))
            continue
        line = f"{head}."
        for k, tail in enumerate(tails):
            piece = tail + ("|" if k < len(tails) - 1 else "")
            if len(line) + len(piece) > width - 2 and not line.endswith("."):
                lines.append((line, ""))
                line = "    "
            line += piece
        lines.append((line, what))
    # plain names share lines; a dotted group gets its own
    out, current = [], ""
    for text, what in lines:
        item = f"{text} ({what})" if what else text
        if "." in text or text.startswith(" ") or not what:
            if current:
                out.append(current)
                current = ""
            out.append(item)
        elif current and len(current) + 2 + len(item) > width:
            out.append(current)
            current = item
        else:
            current = f"{current}, {item}" if current else item
    if current:
        out.append(current)
    return "\n".join(out)


def kinds_of(names: Mapping[str, Any]) -> dict[str, Kind]:
    """The kind of each registered name among ``names``."""
    known = {q.name: q.kind for q in _REGISTRY}
    return {n: known[n] for n in names if n in known}
