"""Mamba-2's mixer (Dao and Gu 2024), as declaration text: the input
projection, the causal depthwise convolution, the step sizes and the chunked
SSD of ``derivations/mamba2_ssd.yaml`` (Listing 1), the gated RMSNorm and the
output projection, as transformers' ``mamba2_chunk_scan`` runs it.

Letters: ``b`` the sequence, ``s`` a position, ``d`` the model width, ``g`` a
group of heads sharing the input and output matrices B and C, ``r`` a head
within its group (head ``h = g R + r``, as ``repeat_interleave`` lays them
out), ``p`` a head's width, ``n`` the state, ``k`` a tap of the convolution,
``c`` and ``z`` chunks, ``l`` and ``m`` offsets inside a chunk, ``u`` and ``w``
the summed letters of the prefix sums.

The in_proj is written as its five slices (z, x, B, C, dt), one product each:
the same parameters and the same FLOPs as the one fused product.  The
convolution (``groups = channels``, ``Kp + 1`` taps) runs on each of the three slices it sees
(x, B, C), each through ``Kp`` zeros in front (a buffer joined along the
time axis: PyTorch's padding), so that its ``S`` outputs are the model's.

Where the products are masked (the offsets ``m <= l`` of a chunk, the chunks
``c < z`` before a chunk), ``attention="exact"`` counts the pairs inside;
``"full-square"`` counts the whole squares, as the eager einsums run them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .emit import Block
from .parts import AttentionCount


@dataclass(frozen=True)
class Mamba2:
    activation: str = "silu"        # after the convolution (hidden_act)
    conv_bias: bool = True          # mamba_conv_bias
    proj_bias: bool = False         # mamba_proj_bias: in_proj's and out_proj's biases
    count: AttentionCount = "exact"
    residual_scale: str | None = None   # the output times this before the residual


def mamba2(blk: Block, m: Mamba2, x: str, xn: str, out: str) -> list[str]:
    """The mixer of ``xn`` added to the residual ``x``, into ``out``; returns the
    ops' outputs."""
    blk.uses("B", "S", "D", "Hm", "Gm", "Rm", "Ph", "Nm", "Kp", "Qc", "Nk")
    outs: list[str] = []

    def op(stmt: str, comment: str | None = None) -> None:
        blk.op(stmt, comment)
        outs.append(stmt.split("[", 1)[0])

    def proj(name: str, w: str, letters: str, shape: list[str], what: str,
             comment: str | None = None) -> None:
        blk.tensor(w, ["D", *shape], "param", f"in_proj, the rows of {what}")
        stmt = f"{name}[b,s,{letters}] = {xn}[b,s,d] {w}[d,{letters}]"
        if m.proj_bias:
            bias = "b" + w[1:]
            blk.tensor(bias, shape, "param", f"in_proj's bias, the entries of {what}")
            stmt += f" + {bias}[{letters}]"
        op(stmt, comment)

    head = ["Gm", "Rm", "Ph"]
    proj("Zg", "W_z", "g,r,p", head, "the gate z",
         "Mamba-2 mixer: in_proj as its five slices (z, x, B, C, dt), one product each")
    proj("Xi", "W_x", "g,r,p", head, "the input x")
    proj("Bi", "W_B", "g,n", ["Gm", "Nm"], "B (one per group)")
    proj("Ci", "W_C", "g,n", ["Gm", "Nm"], "C (one per group)")
    proj("Dr", "W_dt", "g,r", ["Gm", "Rm"], "the step sizes dt (one per head)")
    blk.tensor("Zpad", ["Kp"], "buffer", "the convolution's Kp zeros in front of the time "
                                         "axis (padding)")
    plus = m.conv_bias
    for name, src, letters, shape, what in (("X", "Xi", "g,r,p", head, "x"),
                                            ("B", "Bi", "g,n", ["Gm", "Nm"], "B"),
                                            ("C", "Ci", "g,n", ["Gm", "Nm"], "C")):
        w = f"Wc{name.lower()}"
        blk.tensor(w, [*shape, "Kp + 1"], "param", f"conv1d's Kp + 1 taps over the channels of {what} "
                                               "(depthwise: one kernel per channel)")
        bias = ""
        if plus:
            blk.tensor(f"bc{name.lower()}", shape, "param", f"conv1d's bias over the channels "
                                                             f"of {what}")
            bias = f" + bc{name.lower()}[{letters}]"
        op(f"{name}pad[b,t,{letters}] = concat_t(Zpad[e], {src}[b,s,{letters}])",
           f"causal depthwise conv1d of {what}: Kp zeros in front, then each output reads "
           "the Kp + 1 positions up to its own" if name == "X" else None)
        op(f"{name}cv[b,s,{letters}] = {name}pad[b,s+k,{letters}] {w}[{letters},k]{bias}")
        op(f"{name}a[b,s,{letters}] = {m.activation}({name}cv[b,s,{letters}])")
    blk.tensor("dt_bias", ["Gm", "Rm"], "param", "dt_bias, one per head")
    blk.tensor("A_log", ["Gm", "Rm"], "param", "A_log: A = -exp(A_log), one per head")
    blk.tensor("Dskip", ["Gm", "Rm"], "param", "D, the skip connection's weight per head")
    op("Dtb[b,s,g,r] = Dr[b,s,g,r] + dt_bias[g,r]", "the step sizes dt = softplus(dt + "
                                                     "dt_bias) (time_step_limit: no clamp)")
    op("Dt[b,s,g,r] = softplus(Dtb[b,s,g,r])")
    op("Ae[g,r] = exp(A_log[g,r])")
    op("La[b,s,g,r] = -1 Ae[g,r] Dt[b,s,g,r]", "the log-decays A dt (negative) and the input "
                                               "x dt")
    op("Xd[b,s,g,r,p] = Xa[b,s,g,r,p] Dt[b,s,g,r]")
    view = "Qc*c+l"
    op(f"Xv[b,c,l,g,r,p] = Xd[b,{view},g,r,p]",
       "the positions viewed as (chunk c, offset l) pairs, S = Nk Qc (a reshape)")
    op(f"Av[b,c,l,g,r] = La[b,{view},g,r]")
    op(f"Bv[b,c,l,g,n] = Ba[b,{view},g,n]")
    op(f"Cv[b,c,l,g,n] = Ca[b,{view},g,n]")
    full = m.count == "full-square"
    inside = "" if full else " where m <= l"
    before = "" if full else " where c < z"
    op("Acs[b,g,r,c,l] = Av[b,c,u,g,r] where u <= l",
       "the SSD of derivations/mamba2_ssd.yaml (Listing 1), B and C shared by the heads of a "
       "group: A_cumsum, segsum(A) and the decay to the chunk's end are prefix sums")
    op("Seg[b,g,r,c,l,m] = Av[b,c,u,g,r] where m < u, u <= l")
    op("Suf[b,g,r,c,l] = Av[b,c,u,g,r] where l < u")
    op("Ld[b,g,r,c,l,m] = exp(Seg[b,g,r,c,l,m]) where m <= l",
       "1. the diagonal blocks: CB = C B, CBL = CB L, Y_diag = CBL (x dt)" + (
           " (over every pair of offsets of a chunk, as the einsums run: --attention "
           "full-square)" if full else " (over the pairs m <= l)"))
    op(f"CB[b,c,l,m,g] = Cv[b,c,l,g,n] Bv[b,c,m,g,n]{inside}")
    op(f"CBL[b,c,l,m,g,r] = CB[b,c,l,m,g] Ld[b,g,r,c,l,m]{inside}")
    op(f"Yd[b,c,l,g,r,p] = CBL[b,c,l,m,g,r] Xv[b,c,m,g,r,p]{inside}")
    op("Dst[b,g,r,c,l] = exp(Suf[b,g,r,c,l])", "2. each chunk's state, decayed to its end")
    op("Bd[b,c,l,g,r,n] = Bv[b,c,l,g,n] Dst[b,g,r,c,l]")
    op("St[b,c,g,r,p,n] = Bd[b,c,l,g,r,n] Xv[b,c,l,g,r,p]")
    op("At[b,g,r,c] = Av[b,c,u,g,r]", "3. the recurrence over chunks: the state entering "
                                      "chunk z sums the chunks c before it" + (
                                          " (every pair of chunks: --attention full-square)"
                                          if full else ""))
    op("Sc[b,g,r,z,c] = At[b,g,r,w] where c < w, w < z")
    op("Dc[b,g,r,z,c] = exp(Sc[b,g,r,z,c]) where c < z")
    op(f"Hin[b,z,g,r,p,n] = Dc[b,g,r,z,c] St[b,c,g,r,p,n]{before}")
    op("Eo[b,g,r,c,l] = exp(Acs[b,g,r,c,l])", "4. state to output: Y_off = (C states) "
                                              "exp(A_cumsum)")
    op("Ch[b,c,l,g,r,p] = Cv[b,c,l,g,n] Hin[b,c,g,r,p,n]")
    op("Yo[b,c,l,g,r,p] = Ch[b,c,l,g,r,p] Eo[b,g,r,c,l]")
    op("Yc[b,c,l,g,r,p] = Yd[b,c,l,g,r,p] + Yo[b,c,l,g,r,p]")
    op(f"Ys[b,{view},g,r,p] = Yc[b,c,l,g,r,p]", "the chunks viewed back as positions")
    op("Yk[b,s,g,r,p] = Ys[b,s,g,r,p] + Dskip[g,r] Xa[b,s,g,r,p]",
       "the skip connection D x (x before its step size)")
    blk.tensor("g_m", head, "param", "gain of the mixer's gated RMSNorm (norm.weight)")
    op("Yz[b,s,g,r,p] = silu(Zg[b,s,g,r,p]) * Yk[b,s,g,r,p]",
       "the gated RMSNorm: y silu(z), normalised over each group's Rm Ph entries")
    op("Yn[b,s,g,r,p] = rmsnorm_{r,p}(Yz[b,s,g,r,p]) * g_m[g,r,p]")
    blk.tensor("W_out", [*head, "D"], "param", "output projection (out_proj)")
    scale = f"{m.residual_scale} " if m.residual_scale else ""
    stmt = f"{out}[b,s,d] = {x}[b,s,d] + {scale}Yn[b,s,g,r,p] W_out[g,r,p,d]"
    if m.proj_bias:
        blk.tensor("b_out", ["D"], "param", "out_proj's bias")
        stmt += f" + {scale}b_out[d]"
    op(stmt, "out_proj" + (f" times residual_multiplier ({m.residual_scale})"
                           if m.residual_scale else "") + ", then the residual")
    return outs


@dataclass(frozen=True)
class Mamba1:
    activation: str = "silu"        # after the convolution (hidden_act)
    conv_bias: bool = True          # mamba_conv_bias
    proj_bias: bool = False         # mamba_proj_bias: in_proj's and out_proj's biases
    #: RMSNorms of the step sizes' rank, of B and of C (Jamba's dt/b/c_layernorm)
    inner_norms: bool = True


def mamba1(blk: Block, m: Mamba1, x: str, xn: str, out: str) -> list[str]:
    """Mamba's selective SSM mixer (Gu and Dao 2023; Jamba's ``JambaMambaMixer``)
    of ``xn`` added to ``x``, into ``out``: in_proj (x and the gate z), the causal
    depthwise conv of x, x_proj (the step sizes' rank ``Rk``, B and C, each
    RMS-normalised), dt_proj, the recurrence ``H = exp(A dt) H_prev + dt B x`` over
    the positions, its output ``C H``, the skip ``D x``, the gate ``silu(z)``, out_proj.
    Letters: ``i`` the inner width, ``n`` the state, ``q`` the step sizes' rank.
    Returns the ops' outputs."""
    blk.uses("B", "S", "D", "Im", "Nm", "Rk", "Kp")
    outs: list[str] = []

    def op(stmt: str, comment: str | None = None) -> None:
        blk.op(stmt, comment)
        outs.append(stmt.split("[", 1)[0])

    bias = " + b_in[i]" if m.proj_bias else ""
    blk.tensor("W_x", ["D", "Im"], "param", "in_proj, its first half (x)")
    blk.tensor("W_z", ["D", "Im"], "param", "in_proj, its second half (the gate z)")
    if m.proj_bias:
        blk.tensor("b_in", ["Im"], "param", "in_proj's bias (x half)")
        blk.tensor("b_z", ["Im"], "param", "in_proj's bias (z half)")
    op(f"Xi[b,s,i] = {xn}[b,s,d] W_x[d,i]{bias}", "Mamba mixer: in_proj as its two halves "
                                                  "(x, the gate z)")
    op(f"Zg[b,s,i] = {xn}[b,s,d] W_z[d,i]" + (" + b_z[i]" if m.proj_bias else ""))
    blk.tensor("Zpad", ["Kp"], "buffer", "the convolution's Kp zeros in front of the time "
                                         "axis (padding)")
    blk.tensor("Wc", ["Im", "Kp + 1"], "param", "conv1d's Kp + 1 taps, one kernel per channel "
                                                "(depthwise)")
    cb = ""
    if m.conv_bias:
        blk.tensor("bc", ["Im"], "param", "conv1d's bias")
        cb = " + bc[i]"
    op("Xpad[b,t,i] = concat_t(Zpad[e], Xi[b,s,i])", "causal depthwise conv1d of x: Kp zeros "
                                                     "in front, each output reads the Kp + 1 "
                                                     "positions up to its own")
    op(f"Xcv[b,s,i] = Xpad[b,s+k,i] Wc[i,k]{cb}")
    op(f"Xa[b,s,i] = {m.activation}(Xcv[b,s,i])")
    blk.tensor("W_tr", ["Im", "Rk"], "param", "x_proj, the rows of the step sizes' rank")
    blk.tensor("W_B", ["Im", "Nm"], "param", "x_proj, the rows of B")
    blk.tensor("W_C", ["Im", "Nm"], "param", "x_proj, the rows of C")
    op("Tr[b,s,q] = Xa[b,s,i] W_tr[i,q]", "x_proj as its three slices (dt's rank, B, C)")
    op("Bs[b,s,n] = Xa[b,s,i] W_B[i,n]")
    op("Cs[b,s,n] = Xa[b,s,i] W_C[i,n]")
    t, bn, cn = "Tr", "Bs", "Cs"
    if m.inner_norms:
        for src, dst, gain, over, module in (("Tr", "Trn", "g_dt", "q", "dt_layernorm"),
                                             ("Bs", "Bn", "g_b", "n", "b_layernorm"),
                                             ("Cs", "Cn", "g_c", "n", "c_layernorm")):
            blk.tensor(gain, ["Rk" if over == "q" else "Nm"], "param",
                       f"gain of the {module} (RMSNorm)")
            letters = f"b,s,{over}"
            op(f"{dst}[{letters}] = rmsnorm_{over}({src}[{letters}]) * {gain}[{over}]",
               "RMSNorms of dt's rank, B and C" if over == "q" else None)
        t, bn, cn = "Trn", "Bn", "Cn"
    blk.tensor("W_dt", ["Rk", "Im"], "param", "dt_proj's weight")
    blk.tensor("b_dt", ["Im"], "param", "dt_proj's bias (added in the scan)")
    blk.tensor("A_log", ["Im", "Nm"], "param", "A_log: A = -exp(A_log)")
    blk.tensor("Dskip", ["Im"], "param", "D, the skip connection's weight")
    op(f"Dl[b,s,i] = {t}[b,s,q] W_dt[q,i] + b_dt[i]", "the step sizes dt = softplus(dt_proj(.) "
                                                      "+ bias)")
    op("Dt[b,s,i] = softplus(Dl[b,s,i])")
    op("Ae[i,n] = exp(A_log[i,n])", "discretised: exp(A dt) and dt B x")
    op("Lg[b,s,i,n] = -1 Ae[i,n] Dt[b,s,i]")
    op("Da[b,s,i,n] = exp(Lg[b,s,i,n])")
    op(f"Db[b,s,i,n] = Dt[b,s,i] {bn}[b,s,n]")
    op("Bu[b,s,i,n] = Db[b,s,i,n] Xa[b,s,i]")
    op("Hs[b,s,i,n] = Da[b,s,i,n] Hs[b,s-1,i,n] + Bu[b,s,i,n]",
       "the selective scan: a diagonal linear recurrence over the positions (zero before the "
       "first), counted as a loop over time")
    op(f"Yc[b,s,i] = Hs[b,s,i,n] {cn}[b,s,n]", "the output C h, the skip D x, the gate silu(z)")
    op("Yk[b,s,i] = Yc[b,s,i] + Dskip[i] Xa[b,s,i]")
    op("Yg[b,s,i] = silu(Zg[b,s,i]) * Yk[b,s,i]")
    blk.tensor("W_out", ["Im", "D"], "param", "output projection (out_proj)")
    stmt = f"{out}[b,s,d] = {x}[b,s,d] + Yg[b,s,i] W_out[i,d]"
    if m.proj_bias:
        blk.tensor("b_out", ["D"], "param", "out_proj's bias")
        stmt += " + b_out[d]"
    op(stmt, "out_proj, then the residual")
    return outs
