"""The roofline's quantities as names ``check`` takes (``bytes_moved.*``,
``intensity.*``, ``flops.decode``), the decoding step's thresholds, and
the refusals, each checked against a count done by hand in the test.

Widths: the shipped declarations use bf16-adam, 2 bytes per weight,
activation and parameter-gradient element.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from symflops.cli import main, run as cli_run
from symflops.count.roofline import symbolic

DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"
FFN = str(DERIVATIONS / "ffn.yaml")
BLOCK = str(DERIVATIONS / "llama_block.yaml")
MOE = str(DERIVATIONS / "moe.yaml")


def check(capsys, path, *claims):
    code = main(["check", path, *claims, "--json"])
    out = capsys.readouterr()
    return code, out


def verdicts(capsys, path, *claims):
    code, out = check(capsys, path, *claims)
    return code, [r["verdict"] for r in json.loads(out.out)]


def test_ffn_bytes_moved_and_intensity_are_names(capsys):
    # forward: H = X W_in reads X (B D) and W_in (D F), writes H (B F); Y = H W_out
    # reads H (B F) and W_out (F D), writes Y (B D): 2BD + 2DF + 2BF elements, 2 bytes each
    # backward, four rules each reading two operands and writing one:
    #   dH = dY W_out^T (dY, W_out -> dH), dW_out = H^T dY (H, dY -> dW_out),
    #   dX = dH W_in^T (dH, W_in -> dX), dW_in = X^T dH (X, dH -> dW_in):
    #   B D: dY, dY, dX, X; D F: W_out, dW_out, W_in, dW_in; B F: dH, H, dH, dH
    #   -> 4BD + 4DF + 4BF elements, 2 bytes each
    # intensity: 2 products of 2BDF FLOPs over 4(BD + DF + BF) bytes
    code, found = verdicts(capsys, FFN,
                           "bytes_moved.forward == 4*(B*D + D*F + B*F)",
                           "bytes_moved.backward == 8*(B*D + D*F + B*F)",
                           "bytes_moved.total == 12*(B*D + D*F + B*F)",
                           "intensity.forward == B*D*F/(B*D + D*F + B*F)",
                           "intensity.total == intensity.forward",
                           # nothing here is read only by an elementwise op
                           "bytes_moved_fused.forward == bytes_moved.forward",
                           "bytes_moved.forward <= 1 GB")
    assert code == 1 and found[:6] == ["holds"] * 6 and found[6] == "holds where"


def test_an_intensity_is_in_flops_per_byte(capsys):
    code, out = check(capsys, FFN, "intensity.forward > 100 FLOPs")
    assert code == 2 and "FLOPs/bytes (intensity.forward) with FLOPs" in out.err
    code, found = verdicts(capsys, FFN, "intensity.forward * bytes_moved.forward == flops.forward")
    assert (code, found) == (0, ["holds"])


def test_the_decoding_step_of_a_llama_block(capsys):
    # one sequence's last position: Q 2DEN, K and V 2DEG each, the output projection
    # 2END, the MLP's three products 2DF each; Q K^T and P V over the S cached
    # positions 2ENS each (the scores' scaling and the softmax are elementwise)
    # fused: Xn_hat, Yn_hat (D each) and U, H (F each) of each sequence are neither
    # written nor read: 2 x 2 bytes per element saved
    code, found = verdicts(capsys, BLOCK,
                           "flops.decode == B*(2*D*E*N + 4*D*E*G + 2*E*N*D + 6*D*F + 4*E*N*S)",
                           "bytes_moved.decode - bytes_moved_fused.decode == 4*B*(2*D + 2*F)")
    assert (code, found) == (0, ["holds", "holds"])


def test_decode_batch_at_which_weight_reads_stop_dominating(capsys):
    assert cli_run(["roofline", BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                    "--phase", "decode", "--solve-for", "B", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    q = next(t for t in out["thresholds"] if t["op"] == "Q")
    # Q at decode: 2BDEN FLOPs, 2(BD + BEN + DEN) bytes; compute-bound when
    # B (DEN - I (D + EN)) > I DEN; at D = EN = 4096: B > 4096 I / (4096 - 2 I),
    # I = 989e12 / 3.35e12 = 19780/67
    ridge = Fraction(19780, 67)
    assert q["at"]["h100-sxm"]["least"] == pytest.approx(float(4096 * ridge / (4096 - 2 * ridge)),
                                                         rel=1e-12)
    assert 344 < q["at"]["h100-sxm"]["least"] < 345


def test_attention_at_decode_stays_memory_bound_at_every_context(capsys):
    assert cli_run(["roofline", BLOCK, "--example", "Llama-2-7B block", "--accelerator", "h100",
                    "--phase", "decode", "--solve-for", "S", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    o = next(t for t in out["thresholds"] if t["op"] == "O")
    # O = P V at the last position reads P (N S), the cached V (S E G), writes O (E N):
    # intensity 2ENS / 2(NS + EGS + EN) < N / G = 1 (Llama-2-7B: G = N = 32) for every S,
    # far below the ridge of 295
    assert o["at"]["h100-sxm"] == {"text": "no S", "least": None, "intervals": []}
    # symbolically: E N S > I (E G S + E N + N S), linear in S with slope E N - I (E G + N)
    assert o["solved"] == "S > E*I_acc*N/(E*N - I_acc*(E*G + N)) when E*N > I_acc*(E*G + N) " \
        "(else never)"


def test_an_moe_decode_is_refused_not_counted_at_its_capacity():
    # the experts' slots range over c k B S / M, which grows with S: counting them
    # at one position would be wrong, so the decoding step is refused (regression:
    # it used to print the experts' products over every slot of the whole sequence)
    assert main(["roofline", MOE, "--accelerator", "h100", "--phase", "decode"]) == 2


def test_an_moe_has_forward_bytes_but_no_decode_names(capsys):
    code, _ = check(capsys, MOE, "bytes_moved.decode > 0")
    assert code == 2
    code, found = verdicts(capsys, MOE, "bytes_moved.forward > 0")
    assert (code, found) == (0, ["holds"])


def test_a_solved_bound_is_written_without_a_leading_minus():
    # 2BS > I (BS + B + S)  <=>  B (2S - I (S + 1)) > I S  <=>  B > I S / (2S - I (S + 1))
    # where 2S > I (S + 1); the engine's own factoring gave (-I S) / (I (S + 1) - 2S)
    B, S = sympy.symbols("B S", positive=True)
    ridge = sympy.Symbol("I_acc", positive=True)
    text, edge, slope = symbolic(sympy.expand(2 * B * S - ridge * (B * S + B + S)), B)
    assert text == "B > I_acc*S/(2*S - I_acc*(S + 1)) when 2*S > I_acc*(S + 1) (else never)"
    assert sympy.simplify(edge - ridge * S / (2 * S - ridge * (S + 1))) == 0


def test_a_sliding_window_is_counted_and_its_min_left_unsolved(capsys):
    # regression: the window's pair count holds Min(S, W), which sympy.limit could not
    # take (exit 70); such a condition is now left unsolved, the others solved
    assert cli_run(["roofline", str(DERIVATIONS / "attention_sliding_window.yaml"),
                    "--example", "Mistral-7B, one head, 32k context", "--accelerator", "h100",
                    "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    q = next(o for o in out["bounds"][0]["ops"] if o["op"] == "Q")
    # Q = X W_q reads X (S D) and W_q (D H), writes Q (S H), 2 bytes each, at S = 32768,
    # D = 4096, H = 128: 2 (134,217,728 + 524,288 + 4,194,304) = 277,872,640
    assert q["bytes"] == 277_872_640 and q["flops"] == 2 * 32768 * 4096 * 128
    th = {t["op"]: t for t in out["thresholds"]}
    # intensity D H S / (D H + D S + H S) < D H / (D + H) = 4096 * 128 / 4224 = 124.1 < 295.2
    assert th["Q"]["at"]["h100-sxm"]["text"] == "no S"
    assert th["A"]["solved"] is None and th["A"]["limit"] is None and th["A"]["at"] == {}
