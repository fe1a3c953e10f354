"""The roofline (symflops roofline): bytes moved, intensity, thresholds and time
bounds, each checked through the command line against a figure printed
outside symflops or computed by hand in the test.

Sources:
* "How to Scale Your Model", roofline chapter (jax-ml/scaling-book at
  0819a7d8c55ddc113f5cba0285a5f97380cac1e3, Feb 2025): a bf16 matmul
  X[B,D] W[D,F] moves 2BD + 2DF + 2BF bytes for 2BDF FLOPs, intensity
  2BDF / (2BD + 2DF + 2BF) -> B for B << D, F; compute-bound above
  B = 1.97e14 / 8.2e11 = 240 on TPU v5e, 9.89e14 / 3.35e12 = 295 on H100
  (its Problem 5 rounds H100's peak to 1e15: 298); int8 weights with bf16
  compute: 2B > 240, B > 120; int8 everything at the figures its Question 1
  gives (3.94e14 OP/s, 8.1e11 B/s): B > 486 / 2 = 243.  Its footnote counts
  the exact FLOPs BF(2D - 1) (B F D multiplies, B F (D - 1) adds); symflops
  counts one multiply-add as 2 FLOPs, 2BDF, as the chapter's text does.
* LLM-Viewer (hahnyuan/LLM-Viewer at 472f71f1a1807e80b573252e9185fd5e8d795e95,
  model_analyzer.py and configs/Llama.py): a linear layer at decode counts
  OPs = ic * oc * batch * 2 (2 per multiply-add, as symflops), load_weight =
  ic * oc * w_byte, load_act = ic * batch * a_byte, store_act = oc * batch *
  a_byte; Llama-2-7B's q_proj (4096 x 4096) at batch 1 in fp16: 33,554,432
  OPs, 33,570,816 bytes, intensity 0.99951.
* The seeds' bandwidth-bound decode: a 7B model in bf16 reads 14 GB per token;
  at 3.35e12 B/s (H100) that is at most 3.35e12 / 1.4e10 = 239.3 tokens/s.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from symflops.cli import main, run as cli_run

DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"
FFN = str(DERIVATIONS / "ffn.yaml")
BLOCK = str(DERIVATIONS / "llama_block.yaml")
LLAMA = str(DERIVATIONS / "llama.yaml")


def roofline(capsys, *args):
    assert cli_run(["roofline", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def expr(text: str) -> sympy.Expr:
    names = {n: sympy.Symbol(n, positive=True, integer=True)
             for n in ("B", "D", "F", "S", "E", "N", "G", "L", "V")}
    return sympy.parse_expr(text, local_dict=names)


def op(out, name):
    return next(o for o in out["ops"] if o["op"] == name)


def threshold(out, name):
    return next(t for t in out["thresholds"] if t["op"] == name)


def bound(out, name, accelerator=0):
    return next(o for o in out["bounds"][accelerator]["ops"] if o["op"] == name)


# --- the scaling book's matmul ------------------------------------------------------

def test_bf16_matmul_intensity_and_the_critical_batch(capsys):
    out = roofline(capsys, FFN, "--accelerator", "tpu-v5e", "--accelerator", "h100")
    h = op(out, "H")
    B, D, F = expr("B"), expr("D"), expr("F")
    # the book: load 2BD + 2DF bytes, write 2BF, 2BDF FLOPs (not its footnote's BF(2D - 1))
    assert expr(h["flops"]) == 2 * B * D * F
    assert sympy.expand(expr(h["bytes"]) - (2 * B * D + 2 * D * F + 2 * B * F)) == 0
    assert sympy.simplify(expr(h["intensity"]) - 2*B*D*F / (2*B*D + 2*D*F + 2*B*F)) == 0
    t = threshold(out, "H")
    # B << D, F: the intensity tends to B as D and F grow together
    assert expr(t["limit"]) == B and t["large"] == ["D", "F"]
    v5e, h100 = t["limit_at"]["tpu-v5e"]["least"], t["limit_at"]["h100-sxm"]["least"]
    # TPU v5e: the table's 197e12 / 819e9 = 240.54; the book's 1.97e14 / 8.2e11 = 240.24
    # (it rounds Google's 819 GB/s to 8.2e11): both "B > 240"
    assert v5e == pytest.approx(197e12 / 819e9) and int(v5e) == 240
    # H100: 989e12 / 3.35e12 = 295.22, the book's 9.89e14 / 3.35e12 = 295
    assert h100 == pytest.approx(989e12 / 3.35e12) and int(h100) == 295
    # the exact condition, solved for B: B > D F I / (D F - I (D + F)) where D F > I (D + F)
    assert t["solved"] == "B > D*F*I_acc/(D*F - I_acc*(D + F)) when D*F > I_acc*(D + F) (else never)"


def test_the_book_s_own_figures_give_its_thresholds(capsys):
    # with the book's rounded bandwidth (8.2e11) and H100 peak (Problem 5: 1e15)
    out = roofline(capsys, FFN, "--accelerator", "v5e", "--bandwidth", "8.2e11")
    assert int(threshold(out, "H")["limit_at"]["tpu-v5e"]["least"]) == 240   # 240.24
    out = roofline(capsys, FFN, "--accelerator", "h100", "--peak", "1e15")
    assert int(threshold(out, "H")["limit_at"]["h100-sxm"]["least"]) == 298  # 298.5


def test_the_exact_threshold_at_given_sizes(capsys):
    out = roofline(capsys, FFN, "D=8192", "F=32768", "--accelerator", "v5e")
    least = Fraction(threshold(out, "H")["at"]["tpu-v5e"]["least"])
    # by hand: I = 197e12 / 819e9; B > D F I / (D F - I (D + F)) at D = 8192, F = 32768
    i = Fraction(197 * 10**12, 819 * 10**9)
    d, f = 8192, 32768
    assert float(least) == pytest.approx(float(d * f * i / (d * f - i * (d + f))), rel=1e-12)
    assert 249 < least < 250   # 249.7: above the limit 240.5, D and F being finite


def test_int8_weights_with_bf16_compute_halve_the_critical_batch(capsys):
    out = roofline(capsys, FFN, "--accelerator", "v5e", "--weights", "int8")
    t = threshold(out, "H")
    B, D, F = expr("B"), expr("D"), expr("F")
    # DF weights at 1 byte: 2BDF / (2BD + DF + 2BF) -> 2B, so 2B > 240.5: B > 120
    assert sympy.expand(expr(op(out, "H")["bytes"]) - (2*B*D + D*F + 2*B*F)) == 0
    assert expr(t["limit"]) == 2 * B
    assert int(t["limit_at"]["tpu-v5e"]["least"]) == 120


def test_int8_everything_at_the_book_s_question_1_figures(capsys):
    out = roofline(capsys, FFN, "--accelerator", "v5e", "--compute", "int8", "--peak", "3.94e14",
                   "--bandwidth", "8.1e11", "--weights", "int8", "--activations", "int8")
    # 2BDF / (BD + DF + BF) -> 2B; 3.94e14 / 8.1e11 = 486.4: B > 243.2
    least = threshold(out, "H")["limit_at"]["tpu-v5e"]["least"]
    assert least == pytest.approx(3.94e14 / 8.1e11 / 2) and int(least) == 243


def test_time_bound_binds_on_the_larger_side(capsys):
    out = roofline(capsys, FFN, "B=128", "D=4096", "F=16384", "--accelerator", "h100")
    h = bound(out, "H")
    flops = 2 * 128 * 4096 * 16384
    moved = 2 * (128 * 4096 + 4096 * 16384 + 128 * 16384)
    assert (h["flops"], h["bytes"]) == (flops, moved)
    # 128 tokens: 2BDF / 989e12 = 1.39e-5 s against 135.3 MB / 3.35e12 = 4.04e-5 s
    assert h["bound"] == "memory"
    assert h["seconds"] == pytest.approx(moved / 3.35e12)
    assert out["bounds"][0]["seconds"] == pytest.approx(2 * moved / 3.35e12)
    out = roofline(capsys, FFN, "B=4096", "D=4096", "F=16384", "--accelerator", "h100")
    h = bound(out, "H")
    assert h["bound"] == "compute"
    assert h["seconds"] == pytest.approx(2 * 4096 * 4096 * 16384 / 989e12)


# --- LLM-Viewer's Llama-2-7B at decode -----------------------------------------------

def test_llm_viewer_q_proj_at_decode(capsys):
    out = roofline(capsys, BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                   "--phase", "decode")
    q = bound(out, "Q")
    ic = oc = 4096
    assert q["flops"] == ic * oc * 1 * 2 == 33_554_432
    assert q["bytes"] == ic * oc * 2 + ic * 1 * 2 + oc * 1 * 2 == 33_570_816
    assert round(q["intensity"], 5) == 0.99951
    assert q["bound"] == "memory"


def test_llm_viewer_attention_and_activation_at_decode(capsys):
    out = roofline(capsys, BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                   "--phase", "decode")
    s, e, n, g, f = 4096, 128, 32, 32, 11008
    a = bound(out, "A")
    # qk_matmul: load_act E N (the query), load_kv_cache S E G (the keys), store_act S N
    assert a["bytes"] == 2 * (e * n + s * e * g + s * n) == 33_824_768
    # its OPs S E N 2 = 33,554,432; symflops also counts the 1/sqrt(E) scaling of the
    # S N scores (elementwise), which LLM-Viewer leaves out
    assert a["flops"] == 2 * s * e * n + s * n
    o = bound(out, "O")      # sv_matmul: the same bytes, S E N 2 OPs
    assert (o["flops"], o["bytes"]) == (2 * s * e * n, 2 * (s * n + s * e * g + e * n))
    # mlp_act: LLM-Viewer counts it over hidden_size (its issue #16: 4096 elements,
    # OPs 2 per element); symflops over the MLP width F = 11008: silu (4) and the
    # gate product (1) per element, reading U and H, writing M
    m = bound(out, "M")
    assert (m["flops"], m["bytes"]) == (5 * f, 2 * 3 * f)


def test_bandwidth_bound_decode_of_a_7b_model(capsys):
    # the seed's figure: 7e9 parameters x 2 bytes = 14 GB per token, 3.35e12 / 1.4e10 tok/s
    assert cli_run(["plan", "--params", "7e9", "--accelerator", "h100", "--decode-batch", "1",
                    "--context", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["inference"]["bytes_per_token"] == 14 * 10**9
    assert plan["inference"]["decode_tokens_per_s"] == pytest.approx(3.35e12 / 1.4e10)
    # the roofline of Llama-2-7B (6,738,415,616 parameters), op by op, at one token of context
    out = roofline(capsys, LLAMA, "L=32", "V=32000", "B=1", "S=1", "D=4096", "N=32", "G=32",
                   "E=128", "F=11008", "--accelerator", "h100", "--phase", "decode")
    b = out["bounds"][0]
    assert {o["bound"] for o in b["ops"]} == {"memory"}
    weights = {"W_E", "g1", "W_q", "W_k", "W_v", "W_o", "g2", "W_gate", "W_up", "W_down",
               "g_f", "W_U"}
    read = sum(sympy.Integer(1) * int(expr(n).subs(dict(zip(map(expr, "LVBSDNGEF"),
                                                            (32, 32000, 1, 1, 4096, 32, 32,
                                                             128, 11008)))))
               * (32 if o["copies"] == "L" else 1)
               for o in out["ops"] for t, n in o["reads"].items() if t in weights)
    # by hand: every weight once, but one row (D) of the embedding table: 6,738,415,616
    # - 32000 x 4096 + 4096 = 6,607,347,712 elements, 2 bytes each
    assert read == 6_607_347_712
    assert b["bytes"] > 2 * read and b["bytes"] < 2 * read * 1.001
    assert b["tokens_per_s"] == pytest.approx(3.35e12 / b["bytes"])
    assert 250 < b["tokens_per_s"] < 254          # 6.6e9 weights read, not 7e9: ~253.5
    # LLM-Viewer's lm_head counts B D V x 1 OPs (1 per multiply-add, where its linear
    # layers count 2); symflops counts 2 B D V
    assert bound(out, "Z")["flops"] == 2 * 4096 * 32000


# --- conventions --------------------------------------------------------------------

def test_fused_keeps_what_only_elementwise_ops_read(capsys):
    naive = roofline(capsys, BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                     "--phase", "decode")
    fused = roofline(capsys, BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                     "--phase", "decode", "--convention", "fused")
    # the norms' normalised tensors (read only by the gain's product) and SwiGLU's U, H
    # (read only by M = silu(U) H) stay on chip
    assert fused["resident"] == ["H", "U", "Xn_hat", "Yn_hat"]
    d, f = 4096, 11008
    # each resident tensor is neither written nor read: 2 x 2 bytes per element saved
    saved = 2 * 2 * (d + d + f + f)
    assert naive["bounds"][0]["bytes"] - fused["bounds"][0]["bytes"] == saved
    assert bound(fused, "M")["bytes"] == 2 * f            # M written, U and H never read


def test_training_counts_every_rule_and_each_accumulation(capsys):
    out = roofline(capsys, FFN, "B=8", "D=3", "F=5", "--accelerator", "h100",
                   "--phase", "training")
    # six products, each 2BD + 2DF + 2BF bytes (its two operands read, its output written)
    b = out["bounds"][0]
    assert len(b["ops"]) == 6
    assert b["bytes"] == 6 * 2 * (8 * 3 + 3 * 5 + 8 * 5)
    assert b["flops"] == 12 * 8 * 3 * 5


# --- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([FFN, "--accelerator", "tpu-v9"], "unknown accelerator preset 'tpu-v9'"),
    ([FFN, "--accelerator", "h100", "--phase", "decode"], "declares no 'tokens:'"),
    ([str(DERIVATIONS / "albert.yaml"), "--accelerator", "h100", "--phase", "decode"],
     "no causal condition between them"),
    ([FFN, "--accelerator", "h100", "--solve-for", "Q"], "has no dimension 'Q'"),
    ([FFN, "--accelerator", "h100", "--accelerator", "v5e", "--peak", "1e15"],
     "override one accelerator"),
    ([FFN, "--accelerator", "h100", "--peak", "-3"], "--peak must be positive"),
    ([FFN, "B=0", "--accelerator", "h100"], "must be a positive integer"),
    ([FFN, "--accelerator", "v5e", "--compute", "fp8"], "no fp8 peak"),
    ([str(DERIVATIONS / "linear_recurrence.yaml"), "--accelerator", "h100", "--phase",
      "decode"], "a recurrence reads its last state"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    assert main(["roofline", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
