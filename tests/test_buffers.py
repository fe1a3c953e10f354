"""Buffers (``role: buffer``): constant tables a layer reads.

A buffer gets no gradient, is no parameter (not in params, gradients,
optimizer state, nor the 6N rule) and no saved activation; its memory is a
line of its own.  The expected counts are hand derivations written here, for
the two shipped declarations:

* ``attention_rope``: rotate-half RoPE on Q and K, a head 2E wide as E pairs
  (the half index i over 2), tables ``cos_t[s,e]``, ``sin_t[s,e]`` and the
  2x2 rotation ``R[i,j]``;
* ``attention_alibi``: causal attention whose scores subtract ``m[n]
  dist[s,t]``, slopes and distances as buffers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import sympy

import symflops
from symflops import cli
from symflops.count.cost import costs
from symflops.count.summary import summary
from symflops.checks.check import check

ROOT = Path(__file__).resolve().parent.parent
DERIVATIONS = ROOT / "derivations"
S, D, N, E = sympy.symbols("S D N E", positive=True, integer=True)
PAIRS = S * (S + 1) / 2  # (s, t) with t <= s: S(S+1)/2 per head


def _load(name: str, text: str | None = None, tmp_path: Path | None = None):
    path = DERIVATIONS / f"{name}.yaml"
    if text is not None:  # a variant of the shipped file
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
    d = symflops.derive(symflops.load(path))
    return d, costs(d)


def _as_params(name: str, tables: tuple[str, ...]) -> str:
    """The shipped text with the given buffers declared as parameters instead."""
    text = (DERIVATIONS / f"{name}.yaml").read_text()
    for t in tables:
        text, n = re.subn(rf"^(  {t}: {{shape: \[[^\]]*\], role: )buffer", r"\1param", text,
                          flags=re.M)
        assert n == 1, t
    return text


# ------------------------------------------------------------------ RoPE --

def test_rope_parameters_leave_the_tables_out_and_tables_as_params_add_2SE(tmp_path):
    d, c = _load("attention_rope")
    # four projections of D x (N heads x 2E wide): 4 D N 2E; no table counted
    assert sympy.expand(c.params - 4 * D * N * 2 * E) == 0
    assert sympy.expand(c.trainable - 8 * D * N * E) == 0
    # the issue's measurement: cos and sin as parameters add exactly 2 S E
    _, as_params = _load("attention_rope", _as_params("attention_rope", ("cos_t", "sin_t")),
                         tmp_path)
    assert sympy.expand(as_params.params - c.params) == 2 * S * E
    assert sympy.expand(as_params.buffers) == 4  # R alone is left, 2 x 2


def test_rope_flops_match_a_hand_count():
    _, c = _load("attention_rope")
    # forward, matmul-type:
    #   Q, K, V, Y: each 2 S D (N 2E)                          = 4 x 4SDNE
    #   R[i,j] Q[s,n,j,e] (and K): a 2x2 product, 2 S N E (2 x 2) = 2 x 8SNE
    #   A = Qr Kr over (i, e), 2E wide, on S(S+1)/2 pairs per head: 2 (2E) N S(S+1)/2
    #   O = P V, the same
    proj, rot, pair = 4 * S * D * N * E, 8 * S * N * E, 2 * (2 * E) * N * PAIRS
    assert sympy.expand(c.flops_forward - (4 * proj + 2 * rot + 2 * pair)) == 0
    # backward: each projection twice (input and weight gradients); dQr, dKr, dP, dV
    # one pair product each; the rotation's gradient R^T dQr (and dK) once each
    assert sympy.expand(c.flops_backward - (8 * proj + 2 * rot + 4 * pair)) == 0
    # the rotation op itself, elementwise: Q cos, (R Q) sin and their sum, 2SNE each
    rotation = c.forward[3]
    assert sympy.expand(rotation.flops - 8 * S * N * E) == 0
    assert sympy.expand(rotation.elementwise - 3 * 2 * S * N * E) == 0


def test_rope_buffers_have_no_gradient_and_are_never_saved():
    d, c = _load("attention_rope")
    buffers = {"cos_t", "sin_t", "R"}
    assert {t.name for t in d.layer.buffers} == buffers
    assert not buffers & {r.wrt for r in d.rules}  # no rule computes a buffer's gradient
    assert not buffers & d.needs_grad
    assert not buffers & set(d.saved)  # the rotation's rules read them; they are kept anyway
    assert any(buffers & set(r.reads) for r in d.rules)
    s = summary(d, c)
    assert all(not s.tensors[b].requires_grad and s.tensors[b].role == "buffer" for b in buffers)
    assert not buffers & set(s.model.parameters.classes)
    # saved: X (S D); V, Qr, Kr, O (S N 2E each); P (N S^2 stored, as every score
    # tensor is); no table
    assert sympy.expand(c.activations - (S * D + 4 * 2 * S * N * E + N * S**2)) == 0


def test_rope_buffer_memory_is_a_line_of_its_own():
    _, c = _load("attention_rope")
    mem = c.memory()
    assert sympy.expand(mem["buffers"] - (2 * S * E + 4)) == 0  # cos, sin: S E each; R: 4
    assert sympy.expand(mem["buffers_bytes"] - 2 * (2 * S * E + 4)) == 0  # bf16, the params' width
    # the buffers join the total only: neither fixed (weights, grads, Adam) nor activations
    assert sympy.expand(mem["fixed_bytes"] - 8 * D * N * E * (2 + 2 + 2 * 4)) == 0
    assert sympy.expand(mem["total_bytes"] - mem["fixed_bytes"] - mem["activation_bytes"]
                        - mem["buffers_bytes"]) == 0
    d = symflops.derive(symflops.load(DERIVATIONS / "attention_rope.yaml"))
    assert costs(d, precision="fp32-adam").memory()["buffers_bytes"] == 4 * (2 * S * E + 4)


def test_derive_and_eval_json_report_the_buffers(capsys):
    path = DERIVATIONS / "attention_rope.yaml"
    assert cli.main(["derive", str(path), "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert (mem["buffers"], mem["buffers_bytes"]) == ("2*E*S + 4", "4*E*S + 8")
    assert cli.main(["eval", str(path), "--example", "Llama-2-7B attention", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    # Llama-2-7B: S = 4096 positions, E = 128 / 2 = 64 frequencies: 2 x 4096 x 64 + 4
    assert mem["buffers"] == 524_292 and mem["buffers_bytes"] == 2 * 524_292
    # a layer without buffers prints no such key (its --json is as before)
    assert cli.main(["derive", str(DERIVATIONS / "ffn.yaml"), "--json"]) == 0
    assert "buffers" not in json.loads(capsys.readouterr().out)["memory"]


def test_derive_text_has_a_buffers_line(capsys):
    assert cli.main(["derive", str(DERIVATIONS / "attention_rope.yaml")]) == 0
    out = capsys.readouterr().out
    assert "buffers (cos_t, sin_t, R; constants: no gradient, not params)  2*(E*S + 2)" in out
    assert "buffers (cos_t, sin_t, R; at the params' 2 bytes)" in out
    assert cli.main(["derive", str(DERIVATIONS / "ffn.yaml")]) == 0
    assert "buffers" not in capsys.readouterr().out


def test_check_sees_a_buffer_as_no_parameter():
    path = str(DERIVATIONS / "attention_rope.yaml")
    results = check(symflops.load(path), ["params == 8*D*N*E", "memory.buffers == 2*S*E + 4",
                                          "params + memory.buffers == 8*D*N*E + 2*S*E + 4"])
    assert all(r.holds for r in results)


# ----------------------------------------------------------------- ALiBi --

def test_alibi_parameters_and_tables(tmp_path):
    _, c = _load("attention_alibi")
    assert sympy.expand(c.params - 4 * D * N * E) == 0  # four D x N E projections
    assert sympy.expand(c.buffers - (N + S**2)) == 0    # slopes m[n], distances dist[s,t]
    _, as_params = _load("attention_alibi", _as_params("attention_alibi", ("m", "dist")),
                         tmp_path)
    assert sympy.expand(as_params.params - c.params) == N + S**2


def test_alibi_flops_match_a_hand_count():
    _, c = _load("attention_alibi")
    # matmul-type: Q, K, V, Y each 2 S D N E; Q K^T and P V each 2 E N S(S+1)/2;
    # backward twice each (the bias gets no rule: m and dist are buffers)
    proj, pair = 2 * S * D * N * E, 2 * E * N * PAIRS
    assert sympy.expand(c.flops_forward - (4 * proj + 2 * pair)) == 0
    assert sympy.expand(c.flops_backward - (8 * proj + 4 * pair)) == 0
    # the scores op, elementwise, on the S(S+1)/2 pairs of each head: the 1/sqrt(E)
    # scaling, the product m[n] dist[s,t] and the subtraction, one each
    scores = c.forward[3]
    assert sympy.expand(scores.elementwise - 3 * N * PAIRS) == 0


def test_alibi_bias_adds_elementwise_work_only(tmp_path):
    """Against the same file without the bias: the same matmul FLOPs, the same
    backward, and 2 N S(S+1)/2 more elementwise FLOPs (multiply, subtract)."""
    text = (DERIVATIONS / "attention_alibi.yaml").read_text()
    plain = text.replace(" - m[n] dist[s,t] where t <= s", " where t <= s")
    assert plain != text
    _, with_bias = _load("attention_alibi", None)
    _, without = _load("attention_alibi", plain, tmp_path)
    assert with_bias.flops_total == without.flops_total
    assert with_bias.elementwise_backward == without.elementwise_backward
    assert sympy.expand(with_bias.elementwise_forward - without.elementwise_forward
                        - 2 * N * PAIRS) == 0


# -------------------------------------------------- structure, checks, sheets --

def test_a_repeated_block_reads_one_table(tmp_path):
    """A buffer of an included block is bound like an input: L copies read one
    table (counted once), while each copy has its own weight."""
    (tmp_path / "block.yaml").write_text(
        "dims: {S: seq, E: width}\n"
        "tensors:\n"
        "  X: {shape: [S, E], role: input}\n"
        "  W: {shape: [E, E], role: param}\n"
        "  c: {shape: [S, E], role: buffer}\n"
        "ops:\n"
        "  - Y[s,f] = X[s,e] c[s,e] W[e,f]\n")
    (tmp_path / "model.yaml").write_text(
        "dims: {S: seq, E: width, L: layers}\n"
        "tensors:\n"
        "  X0: {shape: [S, E], role: input}\n"
        "ops:\n"
        "  - include: block.yaml\n"
        "    repeat: L\n"
        "    tensors: {X: X0, Y: XL}\n")
    L = sympy.Symbol("L", positive=True, integer=True)
    d = symflops.derive(symflops.load(tmp_path / "model.yaml"))
    c = costs(d)
    assert sympy.expand(c.params - L * E**2) == 0
    assert sympy.expand(c.buffers - S * E) == 0


def test_a_buffer_asking_for_a_gradient_is_refused_at_its_position(capsys):
    path = ROOT / "tests" / "bad" / "buffer_requires_grad.yaml"
    assert cli.main(["derive", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6:55: error: tensor 'cos_t' is a buffer" in err
    assert "use role: param for a trained weight" in err


def test_the_sheet_lists_the_buffers_apart(capsys):
    assert cli.main(["render", str(DERIVATIONS / "attention_rope.yaml"), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert ("| Buffers $\\mathit{cos}_{\\text{t}}$, $\\mathit{sin}_{\\text{t}}$ and $R$ (constants: "
            "no gradient, not parameters) | $2(SE + 2)$ | 2 (bf16) | $4(SE + 2)$ |") in md
    assert "- Constant tables (buffers): $4(SE + 2)$" in md
    assert "class t_cos_t,t_sin_t,t_R buffer" in md  # the graph draws them as buffers
    # at Llama-2-7B: (2 x 4096 x 64 + 4) elements x 2 bytes = 1,048,584 bytes
    assert "| buffer memory (bytes) | $1.049 \\times 10^{6}$ |" in md
    assert cli.main(["render", str(DERIVATIONS / "attention_causal.yaml"), "--format", "md"]) == 0
    assert "buffer" not in capsys.readouterr().out.lower()


def test_terms_are_joined_inside_the_domain_of_the_output():
    """A where-clause on two output letters restricts every term, a broadcast
    bias too, so the output is zero outside it and the terms are joined on
    the S(S+1)/2 pairs only (one add or subtract each), not on all S^2."""
    dims = {"S": "sequence", "E": "width"}
    tensors = {"Q": {"shape": ["S", "E"]}, "K": {"shape": ["S", "E"]},
               "m": {"shape": ["S", "S"], "role": "buffer"}, "b": {"shape": ["S"], "role": "buffer"}}

    def join(op: str) -> sympy.Expr:
        layer = symflops.declare("j", dims=dims, tensors=tensors, ops=[op])
        return costs(symflops.derive(layer)).forward[0].elementwise

    # the sign of "- m" is the join's (a subtraction), no multiply; b[t] broadcast over s
    # costs nothing itself
    assert sympy.expand(join("A[s,t] = Q[s,e] K[t,e] - m[s,t] where t <= s") - PAIRS) == 0
    assert sympy.expand(join("A[s,t] = Q[s,e] K[t,e] + b[t] where t <= s") - PAIRS) == 0
    # without the clause: all S^2 entries
    assert sympy.expand(join("A[s,t] = Q[s,e] K[t,e] + b[t]") - S**2) == 0


def test_plan_memory_lists_the_buffers_apart(tmp_path, capsys):
    (tmp_path / "rope.yaml").write_text(
        "dims: {B: sequences, S: sequence, D: width, E: half width}\n"
        "tokens: B*S\n"
        "tensors:\n"
        "  X: {shape: [B, S, D], role: input}\n"
        "  W: {shape: [D, 2, E], role: param}\n"
        "  cos_t: {shape: [S, E], role: buffer}\n"
        "ops:\n"
        "  - Q[b,s,i,e] = X[b,s,d] W[d,i,e]\n"
        "  - Y[b,s,i,e] = Q[b,s,i,e] cos_t[s,e]\n")
    args = ["plan", str(tmp_path / "rope.yaml"), "D=64", "E=8", "--tokens", "1e6", "--seq", "128",
            "--json"]
    assert cli.main(args) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    # the table: S x E = 128 x 8 elements at bf16's 2 bytes; W: 64 x 2 x 8 = 1,024 parameters
    assert mem["buffers"] == 2 * 128 * 8
    assert mem["weights"] == 2 * 1024
    assert mem["total"] == mem["states"] + mem["buffers"] + mem["activations"]
