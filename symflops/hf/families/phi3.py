"""Phi-3 (``phi3``: Phi-3 mini/small/medium 4k and 128k, and the Phi-4-mini
configs that reuse the type).

Each block: RMSNorm, causal attention with grouped key/value heads and
rotary positions, residual (through ``resid_pdrop`` dropout); RMSNorm, a
gated MLP, residual (through the same dropout).  What changes a count:

* the sizes; ``head_dim`` (else hidden_size / num_attention_heads);
* the fused projections: ``qkv_proj`` is one ``nn.Linear(D, (N + 2G) E)``
  and ``gate_up_proj`` one ``nn.Linear(D, 2F)``; the declaration writes their
  row blocks as separate tensors (``W_q``, ``W_k``, ``W_v``; ``W_gate``,
  ``W_up``): the same parameters, and the same matrix-product FLOPs (the
  fused forward mm is the sum of the blocks' products, and so are its dW
  and dX mms);
* ``sliding_window``: every layer attends to the last W positions (a null
  window: causal);
* ``tie_word_embeddings`` (default false; true in Phi-4-mini);
* ``resid_pdrop`` (dropout on both residual branches), ``attention_dropout``
  (on the probabilities): elementwise work and masks when positive.

``embd_pdrop`` is never applied by transformers' Phi3Model, so it changes
nothing.  ``partial_rotary_factor`` (Phi-4-mini: 0.75) rotates only the first
``int(E f)`` entries of each head, the rest passed through (elementwise work
and the tables' size only).  Refused: biases (``attention_bias``,
``mlp_bias``, ``lm_head_bias`` true: transformers' Phi3 builds none).
"""

from __future__ import annotations

import re
from fractions import Fraction

from ..attention import Attention, attention
from ..config import BY_HAND, Config
from ..emit import Block, Declaration, Dim, quoted
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, decoder_dims, dropout, layer_count, layer_kinds, model_base, \
    rope_keys, window_dim

READ = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "hidden_act", "attention_dropout", "resid_pdrop", "sliding_window",
    "partial_rotary_factor",
    # not read by transformers' Phi3 (which has no bias anywhere): false only
    "attention_bias", "mlp_bias", "lm_head_bias",
    # keys of Phi-4-mini's remote code, not read by transformers: 1 only
    "full_attn_mod", "interpolate_factor",
))
IGNORED = frozenset(rope_keys(
    "rms_norm_eps",
    # longrope's switch between its short and long factors: buffer values only
    "original_max_position_embeddings",
    # declared by Phi3Config but never applied by Phi3Model (transformers 5.24): no op
    "embd_pdrop",
))


def rotary_fraction(c: Config) -> tuple[Fraction, str]:
    """``partial_rotary_factor``, at the top level or inside ``rope_parameters`` /
    ``rope_scaling`` (1 when absent), and the key that gives it."""
    found: tuple[str, object] | None = None
    for key in ("partial_rotary_factor", "rope_parameters", "rope_scaling"):
        value = c.data.get(key)
        if isinstance(value, dict):
            value = value.get("partial_rotary_factor")
        if value is not None and found is None:
            found = (key, value)
    if found is None:
        return Fraction(1), "partial_rotary_factor"
    key, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        where = "" if key == "partial_rotary_factor" else f" (in key {key!r})"
        raise c.error(key, f"partial_rotary_factor{where} must be a number in (0, 1], found "
                           f"{value!r}", "write it as e.g. 0.75")
    return (Fraction(repr(value)) if isinstance(value, float) else Fraction(value)), key


def partial_rotary(d: Declaration, blk: Block, c: Config, key: str, width: int,
                   rotated: int) -> list[str]:
    """Rotate only the first ``rotated`` of a head's ``width`` entries (the
    rest pass through, as transformers' apply_rotary_pos_emb concatenates
    them): rewrites the rotary ops ``attention`` wrote for the whole head.  The
    head width becomes ``E = E_r + E_p``; the rotated part reads the tables
    ``cos``, ``sin`` of ``E_r`` columns.  Returns the new ops' outputs."""
    if rotated < 2 or rotated % 2 or rotated >= width:
        where = "" if key == "partial_rotary_factor" else f" (in key {key!r})"
        raise c.error(key, f"partial_rotary_factor{where} rotates {rotated} of a head's "
                           f"{width} entries: an even number from 2 to the head width is needed",
                      "check partial_rotary_factor and head_dim, " + BY_HAND)
    head = d.dims["E"]
    d.dims["E"] = Dim("E", head.description + " (E_r rotated + E_p passed through)",
                      equals="E_r + E_p")
    d.dim("E_r", "entries of a head the rotary embedding rotates", rotated,
          "int(head width * partial_rotary_factor)")
    d.dim("E_p", "entries of a head passed through unrotated", width - rotated,
          "head width - E_r")
    blk.uses("E_r", "E_p")
    tables = {"cos": ("S", "E_r", "rotary table cos(position * frequency) of the rotated "
                                  "entries, each frequency twice (rotate-half layout)"),
              "sin": ("S", "E_r", "rotary table sin(position * frequency) of the rotated "
                                  "entries, negative on the first half (rotate-half)")}
    tensors = []
    for name, line in blk.tensors:
        if name in tables:
            rows, cols, text = tables[name]
            tensors.append((name, f"{{shape: [{rows}, {cols}], role: buffer, "
                                  f"description: {quoted(text)}}}"))
        elif name == "rot":
            tensors.append(("rot", "{shape: [E_r], role: index, description: "
                            + quoted("rotate-half partner of each rotated entry: u + E_r/2 on "
                                     "the first half, u - E_r/2 on the second") + "}"))
            tensors.append(("lo", "{shape: [E_r], role: index, description: "
                            + quoted("the rotated entries of a head: 0 .. E_r - 1") + "}"))
            tensors.append(("hi", "{shape: [E_p], role: index, description: "
                            + quoted("the entries passed through: E_r .. E - 1") + "}"))
        else:
            tensors.append((name, line))
    blk.tensors = tensors
    ops: list[str] = []
    for line in blk.ops:
        m = re.match(r"- (Qr|Kr)\[b,(s|t),([a-z,]+),e\] = (\w+)\[", line)
        if not m:
            ops.append(line)
            continue
        out, pos, heads, src = m.groups()
        x = out[0]
        ops += ["# partial_rotary_factor: the first E_r entries rotated, the E_p others "
                "passed through, then joined" if x == "Q" else "# and the keys",
                f"- {x}a[b,{pos},{heads},u] = {src}[b,{pos},{heads},lo[u]] cos[{pos},u] + "
                f"{src}[b,{pos},{heads},rot[u]] sin[{pos},u]",
                f"- {x}b[b,{pos},{heads},w] = {src}[b,{pos},{heads},hi[w]]",
                f"- {out}[b,{pos},{heads},e] = concat_e({x}a[b,{pos},{heads},u], "
                f"{x}b[b,{pos},{heads},w])"]
    blk.ops = ops
    return ["Qa", "Qb", "Ka", "Kb"]


def build(c: Config, o: Options) -> Declaration:
    d = model_base(c, o, f"Phi-3 decoder (from {o.source})")
    for key in ("attention_bias", "mlp_bias", "lm_head_bias"):
        c.must_be(key, False, False, "transformers' Phi3 has no biases")
    for key in ("full_attn_mod", "interpolate_factor"):
        c.must_be(key, 1, 1, "a key of remote code transformers does not run")
    fraction, rotary_key = rotary_fraction(c)
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim")
    width = d.dims["E"].value
    assert width is not None
    layers = c.integer("num_hidden_layers")
    activation = c.activation("hidden_act", "silu")
    d.dim("F", "MLP hidden width (gate_up_proj is 2F wide)", c.integer("intermediate_size"),
          "intermediate_size")
    kinds = layer_kinds(c, layers, windowed_family=True)
    window = kinds[0][0] == "sliding"
    if window:
        window_dim(d, c)
    attn_p, resid_p = dropout(c, "attention_dropout"), dropout(c, "resid_pdrop")
    rotary_embedding(d, "embd_pdrop is not applied by transformers")
    m = d.model
    blk = d.block("layer", "Phi-3 decoder block" + (" (sliding window)" if window else ""))
    blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
    norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
         "attention sub-block: RMSNorm, causal attention, residual.  qkv_proj is one linear "
         "of (N + 2G) E outputs: W_q, W_k, W_v\nare its row blocks (the same parameters and "
         "matrix-product FLOPs as the fused product)")
    outs = attention(d, blk, Attention("g,r" if grouped else "n", window=window,
                                       count=o.attention, dropout=attn_p),
                     "" if resid_p else "X", "Xn", "Ya" if resid_p else "Y1",
                     ("qkv_proj, query rows", "qkv_proj, key rows", "qkv_proj, value rows",
                      "o_proj"))
    if fraction != 1:
        # int(head_dim * partial_rotary_factor) in floating point, as transformers computes it
        outs += partial_rotary(d, blk, c, rotary_key, width, int(width * float(fraction)))
    if resid_p:
        blk.op(f"Y1[b,s,d] = X[b,s,d] + dropout(Ya[b,s,d], {resid_p})",
               "residual dropout (resid_pdrop: resid_attn_dropout)")
        outs.append("Y1")
    norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn", "Y1", "g2", "b,s,d",
         "d", "MLP sub-block: RMSNorm, gated MLP, residual.  gate_up_proj is one linear of 2F "
              "outputs, chunked: W_gate, W_up\nare its two halves (the same parameters and "
              "FLOPs)")
    mouts = mlp(blk, Mlp(True, activation, residual_dropout=resid_p,
                         residual_note="resid_pdrop: resid_mlp_dropout"), "Y1", "Yn", "Y",
                ("gate_up_proj, first half", "gate_up_proj, second half", "down_proj"))
    blk.component("attention", outs)
    blk.component("MLP", mouts)
    blk.component("norms", ["Xn", "Yn"])
    m.include("layer", layer_count(d, kinds[0][0], layers, 1), {"X": "X0", "Y": "XL"})
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = (Family("phi3", ("Phi3ForCausalLM",), READ, IGNORED, build),)
