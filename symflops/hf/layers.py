"""Decoder layers of several kinds, laid out as blocks: what the families of
2024-2026 share (:mod:`symflops.hf.families.decoders`, ``.moes``).

A model's layers may be of several kinds (sliding-window and full attention,
with and without rotary positions, dense and MoE feed-forward, ...): each kind
is a block of its own, repeated as often as the config has it (``L`` alone,
else ``L_kind``), the blocks in the order the kinds first appear; no count
depends on the layers' order.  Each block after the first renames its own
tensors with its kind's suffix (two blocks of one model may not share a name).

Where the norms sit (:class:`Layout`):

* ``pre``: ``Y1 = X + attn(norm1(X))``, ``Y = Y1 + ffn(norm2(Y1))`` (Llama);
* ``post``: ``Y1 = X + norm1(attn(X))``, ``Y = Y1 + norm2(ffn(Y1))`` (OLMo 2,
  EXAONE 4: the sub-layers' outputs normalised, not their inputs);
* ``sandwich``: both, four norms a layer (GLM-4);
* ``parallel``: ``Y = X + attn(norm1(X)) + ffn(norm1(X))``, one norm (Cohere,
  Phi-1/2), the branches dropped out when ``dropout`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from .attention import Attention, attention
from .emit import Block, Declaration
from .experts import Moe, moe, shared_mlp
from .parts import Mlp, Norm, mlp, norm


@dataclass(frozen=True)
class Shared:
    """Shared experts beside the routed ones: one gated MLP on every token."""

    width: str = "Fs"
    bias: bool = False
    comment: str = "shared experts: one gated MLP on every token"
    module: str = "shared experts'"


@dataclass(frozen=True)
class Kind:
    """One kind of layer: its attention and feed-forward, and how many there are."""

    name: str                         # the block's name after "layer_" (and its dim L_name)
    label: str                        # its layers, as the components name them
    count: int
    attention: Attention
    ffn: Mlp | Moe
    shared: Shared | None = None      # with routed experts
    suffix: str = ""                  # the renaming of its tensors when it is not the first
    count_key: str = "num_hidden_layers"   # the config keys that give the count
    title: str = ""                   # the block's title


@dataclass(frozen=True)
class Layout:
    norm: Norm
    placement: Literal["pre", "post", "sandwich", "parallel"] = "pre"
    #: the norms' modules, in the order they are applied
    modules: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
    dropout: str | None = None        # the parallel branches' dropout (Phi-1/2's resid_pdrop)
    dropout_note: str = "resid_pdrop"
    attention_names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")
    mlp_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")


def layers(d: Declaration, kinds: list[Kind], layout: Layout, family: str) -> None:
    """The blocks of ``kinds``, included in turn from ``X0`` to ``XL``."""
    kinds = [k for k in kinds if k.count]
    previous = "X0"
    for i, kind in enumerate(kinds):
        name = "layer" if len(kinds) == 1 else f"layer_{kind.name}"
        blk = d.block(name, f"{family} decoder layer" + (f" ({kind.title})" if kind.title else ""))
        blk.label = kind.label
        blk.tensor("X", ["B", "S", "D"], "input", "the layer's input (the residual stream)")
        _layer(d, blk, kind, layout)
        nxt = "XL" if i == len(kinds) - 1 else f"X{i + 1}"
        if len(kinds) == 1:
            repeat = d.dim("L", "layers (decoder blocks)", kind.count, kind.count_key)
        else:
            repeat = d.dim(f"L_{kind.name}", f"{kind.label} (no count depends on the layers' "
                                             "order)", kind.count, kind.count_key)
        binding = {"X": previous, "Y": nxt}
        if i:
            binding.update({n: n + kind.suffix for n in blk.own() if n not in ("X", "Y")})
        d.model.include(blk.name, repeat, binding, None if len(kinds) == 1 else
                        f"the {kind.count} {kind.label}" + (
                            f" (their tensors renamed {kind.suffix})" if i else ""))
        previous = nxt


def _layer(d: Declaration, blk: Block, kind: Kind, layout: Layout) -> None:
    """One layer's ops: its norms, attention, feed-forward and residuals."""
    n, at = layout.norm, layout.placement
    mods = layout.modules
    norms: list[str] = []

    def nrm(out: str, x: str, gain: str, module: str, comment: str | None = None) -> None:
        norms.extend(norm(blk, Norm(n.kind, n.bias, n.unit_offset, module, n.affine), out, x,
                          gain, "b,s,d", "d", comment))

    ffn_name = "routed experts" if isinstance(kind.ffn, Moe) else "MLP"
    if at == "pre":
        nrm("Xn", "X", "g1", mods[0], "attention sub-layer: norm, causal attention, residual")
        outs = attention(d, blk, kind.attention, "X", "Xn", "Y1", layout.attention_names)
        nrm("Yn", "Y1", "g2", mods[1], f"feed-forward sub-layer: norm, {ffn_name}, residual")
        fouts = _ffn(blk, kind, "Y1", "Yn", "Y", layout)
    elif at == "post":
        outs = attention(d, blk, kind.attention, "", "X", "Ya", layout.attention_names)
        nrm("An", "Ya", "g1", mods[0], "the attention's output normalised "
                                        f"({mods[0]}), then the residual")
        blk.op("Y1[b,s,d] = X[b,s,d] + An[b,s,d]")
        fouts = _ffn(blk, kind, "", "Y1", "Ym", layout)
        nrm("Mn", "Ym", "g2", mods[1], f"the {ffn_name}' output normalised ({mods[1]}), then "
                                       "the residual")
        blk.op("Y[b,s,d] = Y1[b,s,d] + Mn[b,s,d]")
        norms += ["Y1", "Y"]
    elif at == "sandwich":
        nrm("Xn", "X", "g1", mods[0], "attention sub-layer: norm, causal attention, "
                                      f"{mods[1]}, residual")
        outs = attention(d, blk, kind.attention, "", "Xn", "Ya", layout.attention_names)
        nrm("An", "Ya", "g2", mods[1])
        blk.op("Y1[b,s,d] = X[b,s,d] + An[b,s,d]")
        nrm("Yn", "Y1", "g3", mods[2], f"feed-forward sub-layer: norm, {ffn_name}, "
                                       f"{mods[3]}, residual")
        fouts = _ffn(blk, kind, "", "Yn", "Ym", layout)
        nrm("Mn", "Ym", "g4", mods[3])
        blk.op("Y[b,s,d] = Y1[b,s,d] + Mn[b,s,d]")
        norms += ["Y1", "Y"]
    else:
        nrm("Xn", "X", "g1", mods[0], f"one norm ({mods[0]}) feeds the attention and the "
                                      f"{ffn_name} in parallel; both are added to the input")
        outs = attention(d, blk, kind.attention, "", "Xn", "Ya", layout.attention_names)
        fouts = _ffn(blk, kind, "", "Xn", "Ym", layout)
        if layout.dropout:
            blk.op(f"Y[b,s,d] = X[b,s,d] + dropout(Ya[b,s,d], {layout.dropout}) + "
                   f"dropout(Ym[b,s,d], {layout.dropout})",
                   f"the parallel residual, each branch dropped out ({layout.dropout_note})")
        else:
            blk.op("Y[b,s,d] = X[b,s,d] + Ya[b,s,d] + Ym[b,s,d]", "the parallel residual")
        norms.append("Y")
    blk.component("attention", outs)
    blk.component("experts" if isinstance(kind.ffn, Moe) else "MLP", fouts)
    blk.component("norms" if at == "pre" else "norms and residuals", norms)


def _ffn(blk: Block, kind: Kind, x: str, xn: str, out: str, layout: Layout) -> list[str]:
    """The feed-forward of ``xn`` (added to ``x`` when given), into ``out``."""
    f = kind.ffn
    if isinstance(f, Mlp):
        return mlp(blk, f, x, xn, out, layout.mlp_names)
    outs, routed = moe(blk, f, xn)
    terms = [f"{x}[b,s,d]"] if x else []
    if kind.shared is not None:
        sh = kind.shared
        souts, term = shared_mlp(blk, f.activation, xn, sh.width, sh.bias, sh.comment,
                                 sh.module)
        outs += souts
        terms.append(routed)
        terms.append(term)
        blk.op(f"{out}[b,s,d] = " + " + ".join(terms),
               "the routed experts' sum, the shared experts" + (", the residual" if x else ""))
    else:
        terms.append(routed)
        blk.op(f"{out}[b,s,d] = " + " + ".join(terms),
               "the k experts' sum" + (", the residual" if x else ""))
    return [*outs, out]


def kinds_as_blocks(d: Declaration, order: Sequence[tuple[str, str]], plan: Sequence[tuple[str, str]],
                    title: str, label: Callable[[str, str], str],
                    fill: Callable[[Block, str, str], None], source: str) -> None:
    """A hybrid's layers as one block per kind of layer, in ``order`` (a
    (mixer, feed-forward) pair each), repeated as often as ``plan`` (the
    kind of each layer) has it, one after the other on the residual stream
    (no count depends on the layers' order): ``fill`` writes a block's ops,
    ``label`` names a kind, ``source`` the keys its repeat comes from.  A
    block after the first has its own tensors renamed ``_i``."""
    previous = "X0"
    for i, (mix, ff) in enumerate(order):
        words = label(mix, ff)
        name = "layer" if len(order) == 1 else f"layer_{mix}_{ff}"
        blk = d.block(name, f"{title} layer ({words})")
        blk.label = words
        blk.tensor("X", ["B", "S", "D"], "input", "the layer's input (the residual stream)")
        fill(blk, mix, ff)
        count = plan.count((mix, ff))
        repeat = d.dim("L" if len(order) == 1 else f"L_{mix}_{ff}",
                       "layers (decoder blocks)" if len(order) == 1 else
                       f"{words} (no count depends on the layers' order)", count, source)
        nxt = "XL" if i == len(order) - 1 else f"X{i + 1}"
        binding = {"X": previous, "Y": nxt}
        if i:
            binding.update({t: f"{t}_{i}" for t in blk.own() if t not in ("X", "Y")})
        d.model.include(blk.name, repeat, binding, None if len(order) == 1 else
                        f"the {count} {words}" + (f" (their tensors renamed _{i})" if i else ""))
        previous = nxt
