"""The gated DeltaNet mixer (Yang, Kautz and Hatamizadeh 2024) of Qwen3-Next and
Qwen3.5, as declaration text, as transformers 5.24's ``Qwen3NextGatedDeltaNet``
runs it with ``torch_chunk_gated_delta_rule`` (chunks of ``Qc = 64``).

Letters: ``b`` the sequence, ``s`` a position, ``d`` the model width, ``g`` a
key head, ``r`` a value head within its key head (value head ``h = g Rv + r``,
as ``repeat_interleave`` lays them out), ``e`` a key head's width, ``p`` a value
head's width, ``k`` a tap of the convolution, ``c`` a chunk, ``l`` and ``m``
offsets inside a chunk, ``u`` the summed offset of the prefix sums.

The pieces, in the model's order:

* the input projections as their slices (q, k, v, the gate z; beta's b and the
  decay's a, one per value head): Qwen3-Next's fused ``in_proj_qkvz`` and
  ``in_proj_ba`` and Qwen3.5's four ``in_proj_*`` are the same products;
* the causal depthwise ``conv1d`` (no bias) of q, k and v, each through ``Kp``
  zeros in front (PyTorch's padding; the model's ``S`` outputs), then the
  activation (``hidden_act``);
* q and k L2-normalised over their width (``l2norm``: ``x / sqrt(sum x^2 +
  eps)``, written ``rmsnorm_e(x) / sqrt(Dk)``, the same value with the norm's
  epsilon ``eps / Dk``), q scaled by ``Dk^-1/2``; ``beta = sigmoid(b)``; the
  log-decays ``g = -exp(A_log) softplus(a + dt_bias)``;
* the positions viewed as ``Nk = S / Qc`` chunks; within a chunk the decays
  (prefix sums of g), the UT transform (two unit lower-triangular solves of
  ``(I + T)``, ``T = (k beta k^T) * decays`` strictly below the diagonal: the
  new values ``U`` and the decayed keys ``W``), the intra-chunk attention ``A =
  (q k^T) * decays`` over ``m <= l``;
* the loop over chunks, one op (``N = U - W S``, ``O = (q e^g) S + A N``, ``S' =
  e^g_last S + (k e^(g_last - g)) N``, ``S`` the state entering chunk ``c``,
  zero for the first);
* the gated RMSNorm (each value head's ``Dv`` entries, one gain of ``Dv`` shared by
  the heads, times ``silu(z)``) and ``out_proj``.

``q k^T`` is written once per key head (the model's product, times each value
head's decays); transformers repeats q and k over the ``Rv`` value heads of a key
head before every product and so runs it ``Rv`` times.  Under
``attention="full-square"`` the products over a chunk's pairs run over the whole
``Qc x Qc`` square, as the torch path's matmuls do; under ``"exact"`` over the
pairs ``m <= l`` (``m < l`` for the UT system), the loop's ``A N`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from .emit import Block
from .parts import AttentionCount


@dataclass(frozen=True)
class DeltaNet:
    activation: str = "silu"        # after the convolution (hidden_act)
    count: AttentionCount = "exact"
    #: the input projections' modules, for the tensors' descriptions
    fused: bool = True              # Qwen3-Next's in_proj_qkvz / in_proj_ba; else Qwen3.5's


def deltanet(blk: Block, m: DeltaNet, x: str, xn: str, out: str) -> list[str]:
    """The gated DeltaNet of ``xn`` added to the residual ``x``, into ``out``;
    returns the ops' outputs."""
    blk.uses("B", "S", "D", "Hk", "Rv", "Dk", "Dv", "Kp", "Qc", "Nk")
    outs: list[str] = []

    def op(stmt: str, comment: str | None = None) -> None:
        blk.op(stmt, comment)
        outs.append(stmt.split("[", 1)[0])

    qkvz = "in_proj_qkvz" if m.fused else "in_proj_qkv"
    modules = ("in_proj_qkvz and in_proj_ba" if m.fused else
               "in_proj_qkv, in_proj_z, in_proj_b and in_proj_a")
    z_mod = "in_proj_qkvz" if m.fused else "in_proj_z"
    a_mod, b_mod = ("in_proj_ba", "in_proj_ba") if m.fused else ("in_proj_a", "in_proj_b")
    key, value = ["Hk", "Dk"], ["Hk", "Rv", "Dv"]
    for w, shape, what in (("W_dq", key, f"{qkvz}, the rows of q"),
                           ("W_dk", key, f"{qkvz}, the rows of k"),
                           ("W_dv", value, f"{qkvz}, the rows of v"),
                           ("W_dz", value, f"{z_mod}, the rows of the gate z"),
                           ("W_db", ["Hk", "Rv"], f"{b_mod}, the rows of b (beta's logits, "
                                                  "one per value head)"),
                           ("W_da", ["Hk", "Rv"], f"{a_mod}, the rows of a (the decay's "
                                                  "input, one per value head)")):
        blk.tensor(w, ["D", *shape], "param", what)
    op(f"Qi[b,s,g,e] = {xn}[b,s,d] W_dq[d,g,e]",
       f"gated DeltaNet: the input projections as their slices (q, k, v, z; b, a): "
       f"{modules}'s products")
    op(f"Ki[b,s,g,e] = {xn}[b,s,d] W_dk[d,g,e]")
    op(f"Vi[b,s,g,r,p] = {xn}[b,s,d] W_dv[d,g,r,p]")
    op(f"Zi[b,s,g,r,p] = {xn}[b,s,d] W_dz[d,g,r,p]")
    op(f"Bi[b,s,g,r] = {xn}[b,s,d] W_db[d,g,r]")
    op(f"Ai[b,s,g,r] = {xn}[b,s,d] W_da[d,g,r]")
    blk.tensor("Zpad", ["Kp"], "buffer", "the convolution's Kp zeros in front of the time "
                                         "axis (padding)")
    for name, src, letters, shape, what in (("Q", "Qi", "g,e", key, "q"),
                                            ("K", "Ki", "g,e", key, "k"),
                                            ("V", "Vi", "g,r,p", value, "v")):
        w = f"Wc{name.lower()}"
        blk.tensor(w, [*shape, "Kp + 1"], "param", f"conv1d's Kp + 1 taps over the channels "
                                                   f"of {what} (depthwise: one kernel per "
                                                   "channel, no bias)")
        op(f"{name}pad[b,t,{letters}] = concat_t(Zpad[z], {src}[b,s,{letters}])",
           "causal depthwise conv1d of q, k and v: Kp zeros in front, each output reads the "
           "Kp + 1 positions up to its own,\nthen the activation" if name == "Q" else None)
        op(f"{name}cv[b,s,{letters}] = {name}pad[b,s+k,{letters}] {w}[{letters},k]")
        op(f"{name}a[b,s,{letters}] = {m.activation}({name}cv[b,s,{letters}])")
    op("Qn[b,s,g,e] = rmsnorm_e(Qa[b,s,g,e])",
       "q and k L2-normalised over their width: l2norm(x) = rmsnorm(x) / sqrt(Dk) (its "
       "epsilon eps / Dk); q also scaled by Dk^-1/2")
    op("Qs[b,s,g,e] = Qn[b,s,g,e] / Dk")
    op("Kn[b,s,g,e] = rmsnorm_e(Ka[b,s,g,e])")
    op("Ks[b,s,g,e] = Kn[b,s,g,e] / sqrt(Dk)")
    blk.tensor("dt_bias", ["Hk", "Rv"], "param", "dt_bias, one per value head")
    blk.tensor("A_log", ["Hk", "Rv"], "param", "A_log: the decay rate exp(A_log), one per "
                                               "value head")
    op("Be[b,s,g,r] = sigmoid(Bi[b,s,g,r])", "beta = sigmoid(b); the log-decays g = "
                                              "-exp(A_log) softplus(a + dt_bias)")
    op("Ab[b,s,g,r] = Ai[b,s,g,r] + dt_bias[g,r]")
    op("Sp[b,s,g,r] = softplus(Ab[b,s,g,r])")
    op("Ae[g,r] = exp(A_log[g,r])")
    op("Gl[b,s,g,r] = -1 Ae[g,r] Sp[b,s,g,r]")
    view = "Qc*c+l"
    op(f"Qv[b,c,l,g,e] = Qs[b,{view},g,e]",
       "the positions viewed as (chunk c, offset l) pairs, S = Nk Qc (a reshape)")
    op(f"Kv[b,c,l,g,e] = Ks[b,{view},g,e]")
    op(f"Vv[b,c,l,g,r,p] = Va[b,{view},g,r,p]")
    op(f"Bv[b,c,l,g,r] = Be[b,{view},g,r]")
    op(f"Gv[b,c,l,g,r] = Gl[b,{view},g,r]")
    full = m.count == "full-square"
    upto = "" if full else " where m <= l"
    below = "" if full else " where m < l"
    op("Gcs[b,g,r,c,l] = Gv[b,c,u,g,r] where u <= l",
       "the decays inside a chunk: g's prefix sum (cum_decay), the segment sums between two "
       "offsets, the sum to the chunk's\nend from after an offset, the chunk's total")
    op("Seg[b,g,r,c,l,m] = Gv[b,c,u,g,r] where m < u, u <= l")
    op("Suf[b,g,r,c,l] = Gv[b,c,u,g,r] where l < u")
    op("Gc[b,g,r,c] = Gv[b,c,u,g,r]")
    op("Dm[b,g,r,c,l,m] = exp(Seg[b,g,r,c,l,m]) where m <= l")
    op("Ge[b,g,r,c,l] = exp(Gcs[b,g,r,c,l])")
    op("Kb[b,g,r,c,l,e] = Kv[b,c,l,g,e] Bv[b,c,l,g,r]",
       "the UT transform: k_beta = k beta, v_beta = v beta, T = (k_beta k^T) times the "
       "decays, strictly below the diagonal" + (" (the product over the chunk's whole "
                                                "square, as the torch path runs it)"
                                                if full else ""))
    op("Vb[b,g,r,c,l,p] = Vv[b,c,l,g,r,p] Bv[b,c,l,g,r]")
    op(f"Kk[b,g,r,c,l,m] = Kb[b,g,r,c,l,e] Kv[b,c,m,g,e]{below}")
    op("T[b,g,r,c,l,m] = Kk[b,g,r,c,l,m] Dm[b,g,r,c,l,m] where m < l")
    op("Kg[b,g,r,c,l,e] = Kb[b,g,r,c,l,e] Ge[b,g,r,c,l]")
    op("Un[b,g,r,c,l,p] = Vb[b,g,r,c,l,p] - T[b,g,r,c,l,m] Un[b,g,r,c,m,p] where m < l",
       "(I + T) U = v_beta and (I + T) W = k_beta exp(cum_decay): two unit lower-triangular "
       "solves (solve_triangular),\nthe new values and the decayed keys that read the state "
       "entering the chunk")
    op("W[b,g,r,c,l,e] = Kg[b,g,r,c,l,e] - T[b,g,r,c,l,m] W[b,g,r,c,m,e] where m < l")
    op(f"QK[b,g,c,l,m] = Qv[b,c,l,g,e] Kv[b,c,m,g,e]{upto}",
       "the intra-chunk attention (q k^T) times the decays, m <= l: q k^T once per key head"
       + (" (over the chunk's whole square)" if full else ""))
    op("A[b,g,r,c,l,m] = QK[b,g,c,l,m] Dm[b,g,r,c,l,m] where m <= l")
    op("Qd[b,g,r,c,l,e] = Qv[b,c,l,g,e] Ge[b,g,r,c,l]",
       "what the loop reads: q exp(cum_decay), k exp(g_last - cum_decay), exp(g_last)")
    op("Dst[b,g,r,c,l] = exp(Suf[b,g,r,c,l])")
    op("Kd[b,g,r,c,l,e] = Kv[b,c,l,g,e] Dst[b,g,r,c,l]")
    op("Gd[b,g,r,c] = exp(Gc[b,g,r,c])")
    # the loop's three statements are one op, whose output is Oc (Nv and St are its own)
    blk.op("Nv[b,g,r,c,l,p] = Un[b,g,r,c,l,p] - W[b,g,r,c,l,e] St[b,g,r,c-1,e,p]",
       "the loop over the chunks, one op: the state St entering chunk c (zero for the first) "
       "corrects the new values\n(the delta rule), is read by the queries, and is decayed and "
       "updated; the first chunk's products with the zero\nstate and the last chunk's update "
       "(the final state, for the cache) are not counted")
    op("Oc[b,g,r,c,l,p] = Qd[b,g,r,c,l,e] St[b,g,r,c-1,e,p] + A[b,g,r,c,l,m] Nv[b,g,r,c,m,p]"
       + upto)
    blk.op("St[b,g,r,c,e,p] = Gd[b,g,r,c] St[b,g,r,c-1,e,p] + Kd[b,g,r,c,l,e] Nv[b,g,r,c,l,p]")
    op(f"Yp[b,{view},g,r,p] = Oc[b,g,r,c,l,p]", "the chunks viewed back as positions")
    blk.tensor("g_d", ["Dv"], "param", "gain of the gated RMSNorm (norm.weight: Dv entries, "
                                       "shared by the value heads)")
    op("Yr[b,s,g,r,p] = rmsnorm_p(Yp[b,s,g,r,p]) * g_d[p]",
       "the gated RMSNorm: each value head normalised over its Dv entries, times the gain, "
       "times silu(z)")
    op("Yz[b,s,g,r,p] = silu(Zi[b,s,g,r,p]) * Yr[b,s,g,r,p]")
    blk.tensor("W_do", [*value, "D"], "param", "output projection (out_proj)")
    op(f"{out}[b,s,d] = {x}[b,s,d] + Yz[b,s,g,r,p] W_do[g,r,p,d]", "out_proj, then the "
                                                                   "residual")
    return outs
