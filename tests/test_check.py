"""``symflops check``: claims about the feed-forward block.

Expected values are worked out by hand from the seed's FFN (each of the six
products costs 2*B*D*F; forward 4BDF, backward 8BDF; params 2DF; saved X and
H), not read from symflops.
"""

import argparse
import json
import sys
from pathlib import Path

import pytest
import sympy

from symflops.checks import check
from symflops.commands import check as check_command
from symflops.core.errors import SymflopsError
from symflops.core.ir import dim_symbol

ROOT = Path(__file__).resolve().parent.parent
FFN = str(ROOT / "derivations" / "ffn.yaml")
B, D, F = (dim_symbol(n) for n in "BDF")
BIG = "B=1048576,D=4096,F=16384"


def invoke(argv, capsys):
    """What ``symflops check ARGV`` does once wired: (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="symflops check")
    check_command.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        status = check_command.run(args)
    except SymflopsError as exc:  # the CLI prints it on one line and exits 2
        print(f"symflops: {exc}", file=sys.stderr)
        status = 2
    out, err = capsys.readouterr()
    return status, out, err


def claims_json(capsys, *claims, at=()):
    argv = [FFN, *claims, "--json"] + [x for a in at for x in ("--at", a)]
    status, out, _ = invoke(argv, capsys)
    return status, json.loads(out)


def parse(text):
    """Read a difference string back (test-side only: the text is symflops's output)."""
    return sympy.sympify(text, locals={"B": B, "D": D, "F": F})


def test_six_n_b_holds(capsys):
    status, [r] = claims_json(capsys, "flops.total == 6*params*B")
    assert status == 0
    assert r["holds"] is True and r["holds_when"] is None
    assert parse(r["difference"]) == 0


def test_four_n_b_fails_with_the_hand_derived_residual(capsys):
    status, [r] = claims_json(capsys, "flops.total == 4*params*B", at=[BIG])
    assert status == 1
    assert r["holds"] is False
    # 12BDF - 4 * 2DF * B = 4BDF
    assert sympy.expand(parse(r["difference"]) - 4 * B * D * F) == 0
    [point] = r["at"]
    assert point["dims"] == {"B": 2**20, "D": 2**12, "F": 2**14}
    assert point["lhs"] == 12 * 2**46 and point["rhs"] == 8 * 2**46
    assert point["relative_error"] == pytest.approx(-1 / 3)


def test_text_report_shows_the_difference_in_the_claims_words(capsys):
    status, out, _ = invoke([FFN, "flops.total == 4*params*B", "--at", BIG], capsys)
    assert status == 1
    assert "does not hold" in out
    assert "flops.total - 4*params*B = 4*B*D*F" in out
    assert "-33.33%" in out


def test_backward_without_one_product_holds_when_a_gradient_is_dropped(capsys):
    # Dropping dX, dW_in or dW_out removes one 2BDF product (dH is still needed
    # by the other two in every case): 8BDF -> 6BDF.
    status, [r] = claims_json(capsys, "flops.backward == 6*B*D*F")
    assert status == 1 and r["holds"] is False
    assert sympy.expand(parse(r["difference"]) - 2 * B * D * F) == 0
    when = r["holds_when"]
    assert "X needs no gradient" in when
    assert "W_in is frozen" in when and "W_out is frozen" in when


def test_saved_activations_without_x_only_when_w_in_is_frozen(capsys):
    # X is read only by dW_in = X^T dH; H by dW_out.  Only freezing W_in drops X.
    status, [r] = claims_json(capsys, "activations == B*F")
    assert status == 1
    assert r["holds_when"] == "W_in is frozen (role: frozen)"


def test_claim_between_two_derived_quantities(capsys):
    status, [r] = claims_json(capsys, "flops.backward == 2*flops.forward")
    assert status == 0 and r["holds"] is True


def test_memory_keys_and_short_alias(capsys):
    # bf16-adam: 2 bytes per activation element; saved X and H: B*D + B*F.  Bytes per
    # element is a ratio: comparing bytes with elements directly is refused (below).
    status, results = claims_json(capsys, "memory.activation_bytes / activations == 2",
                                  "memory.activations == B*(D+F)", "trainable_params == 2*D*F")
    assert status == 0 and all(r["holds"] for r in results)


@pytest.mark.parametrize("claim,holds", [
    ("flops.backward > flops.forward", True),            # 8BDF > 4BDF
    ("flops.forward >= flops.backward", False),          # 4BDF >= 8BDF never
    ("activations >= B*D + B", True),                    # difference B*(F-1) >= 0
    ("activations > B*D + B", False),                    # ... and 0 when F = 1
    ("flops.total != 12*B*D*F", False),
    ("flops.total != 0", True),
    ("activations <= memory.params", None),              # B(D+F) vs 2DF: depends on B
])
def test_inequalities(capsys, claim, holds):
    status, [r] = claims_json(capsys, claim)
    assert r["holds"] is holds
    assert status == (0 if holds else 1)


def test_undetermined_becomes_false_at_a_configuration(capsys):
    status, [r] = claims_json(capsys, "activations <= memory.params", at=[BIG, "B=1,D=8,F=8"])
    assert status == 1 and r["holds"] is False
    # At the big configuration B(D+F) = 2**20 * 20480 exceeds 2*D*F = 2**27.
    assert [p["lhs"] for p in r["at"]] == [2**20 * (2**12 + 2**14), 16]
    assert [p["rhs"] for p in r["at"]] == [2**27, 128]


def test_hostile_claim_is_refused_and_never_runs(capsys, tmp_path):
    target = tmp_path / "pwned"
    hostile = [f"__import__('os').system('touch {target}') == 0",
               f'__import__("os").system("touch {target}") == 0',
               "().__class__.__bases__[0].__subclasses__() == 0",
               "lambda: 0 == 0",
               f"flops.total == 1; open('{target}', 'w')"]
    for text in hostile:
        status, out, err = invoke([FFN, text], capsys)
        assert status == 2, text
        assert out == ""
        assert "error" in err
    assert not target.exists()


def test_unknown_name_lists_every_known_name(capsys):
    status, _, err = invoke([FFN, "flops.totl == 6*params*B"], capsys)
    assert status == 2
    assert "unknown name 'flops.totl'" in err and "did you mean 'flops.total'" in err
    for name in ("B", "D", "F", "params", "trainable_params", "activations",
                 "flops.forward|backward|total", "flops_elementwise.forward|backward|total",
                 "memory.params|grads|optimizer|activations|inference_peak"):
        assert name in err, name
    assert "total_bytes" in err


@pytest.mark.parametrize("argv", [
    [FFN, "flops.total = 6*params*B"],           # '=' is not a comparison
    [FFN, "flops.total"],                        # no comparison
    [FFN, "flops.total == 6*params*B", "--at", "B=1"],        # dims missing
    [FFN, "flops.total == 6*params*B", "--at", "Q=1,B=1,D=1,F=1"],
    [str(ROOT / "derivations" / "missing.yaml"), "params == 1"],
])
def test_bad_input_exits_2(capsys, argv):
    status, out, err = invoke(argv, capsys)
    assert status == 2 and out == "" and err.startswith("symflops: ")


def test_bad_claim_points_into_the_claim(capsys):
    with pytest.raises(SymflopsError) as info:
        check.parse_claim("flops.total == 6*parms*B", {"flops.total": B, "params": D}, 2)
    assert str(info.value.span) == "<claim 2>:1:18"


# ------------------------------------------------------- pure functions --

@pytest.mark.parametrize("expr,expected", [
    (B * D, check.POSITIVE),
    (-2 * B, check.NEGATIVE),
    (B * D - B, check.NONNEGATIVE),        # B*(D - 1): zero at D = 1
    (B - D, check.UNKNOWN),
    (sympy.Integer(0), check.ZERO),
    (B * D - 2 * B + 1, check.UNKNOWN),    # B=2, D=1: -1; B=1, D=3: 2
    ((B + 1) / D, check.POSITIVE),
    (B**2 - 2 * B + 1, check.NONNEGATIVE),  # (B-1)**2: coefficients in u = B-1 are 1
])
def test_sign(expr, expected):
    assert check.sign(expr, [B, D]) == expected


def test_difference_label_parenthesises_sums():
    c = check.parse_claim("flops.total == 4*B + D", {"flops.total": F, "B": B, "D": D})
    assert check.difference_label(c) == "flops.total - (4*B + D)"


# ------------------------------------------- wrong verdicts and a crash --

MOE_FFN = """\
name: moe_ffn
dims:
  T: tokens
  D: width
  F: hidden width of one expert
  M: experts
  k: experts a token is routed to
  c: capacity factor
  C: {description: slots of one expert, equals: c*k*T/M}
tokens: T
tensors:
  X: {shape: [T, D], role: input}
  W_in: {shape: [M, D, F], role: param}
  W_out: {shape: [M, F, D], role: param}
  ex: {shape: [T, k], role: index}
  sl: {shape: [T, k], role: index}
  tt: {shape: [M, C], role: index}
ops:
  - Xe[x,q,d] = X[tt[x,q], d]
  - H[x,q,f] = Xe[x,q,d] W_in[x,d,f]
  - Ye[x,q,d] = H[x,q,f] W_out[x,f,d]
  - Y[t,d] = Ye[ex[t,j], sl[t,j], d]
"""
MOE_AT = "T=64,D=4,F=8,M=8,k=2,c=1"


@pytest.fixture
def moe_ffn(tmp_path):
    path = tmp_path / "moe_ffn.yaml"
    path.write_text(MOE_FFN)
    return str(path)


def test_a_defined_dim_stands_for_its_formula(capsys, moe_ffn):
    # C is declared equals: c*k*T/M, so the claim is c*k*T/M == c*k*T/M (it said
    # "does not hold"), and at T=64, k=2, c=1, M=8 both sides are 1*2*64/8 = 16
    # (it exited 70, "Cannot convert expression to float").
    status, out, _ = invoke([moe_ffn, "C == c*k*T/M", "--json"], capsys)
    assert status == 0 and json.loads(out)[0]["holds"] is True
    status, out, err = invoke([moe_ffn, "C == c*k*T/M", "--at", MOE_AT, "--json"], capsys)
    assert status == 0, err
    [point] = json.loads(out)[0]["at"]
    assert point["lhs"] == point["rhs"] == 16


def test_at_takes_a_defined_dim_that_agrees_with_its_formula(capsys, moe_ffn):
    status, out, err = invoke([moe_ffn, "C == 16", "--only-at", MOE_AT + ",C=16"], capsys)
    assert status == 0, err
    status, out, err = invoke([moe_ffn, "C == 16", "--only-at", MOE_AT + ",C=17"], capsys)
    assert status == 2 and out == ""
    assert "the formula of C, T*c*k/M, is 16, but C=17 is given" in err


def test_a_claim_adding_elements_to_bytes_is_refused(capsys):
    # The seed's summary line: 8DF is memory in elements (2DF each of parameters and
    # gradients, 4DF of Adam's m and v), 2B(D+F) is the activations in bytes (2 each).
    claim = ("memory.params + memory.grads + memory.optimizer + memory.activation_bytes"
             " == 8*D*F + 2*B*(D+F)")
    status, out, err = invoke([FFN, claim], capsys)
    assert status == 2 and out == ""
    assert err.startswith("symflops: <claim 1>:1:1: error: the claim adds elements "
                          "(memory.params + memory.grads + memory.optimizer) to bytes "
                          "(memory.activation_bytes)")
    assert "memory.params_bytes + memory.grads_bytes + memory.optimizer_bytes" in err


def test_a_claim_about_one_configuration_is_decided_there(capsys):
    # 24 D F bytes (bf16-adam: 12 bytes per parameter, 2 D F parameters) at D = 4096,
    # F = 16384: 24 * 2**12 * 2**14 = 1.5 * 2**30.  For every value of the dims it
    # does not hold (24 D F is not a constant); at that configuration it holds.
    status, _, _ = invoke([FFN, "memory.fixed_bytes == 1.5*2**30", "--at", "D=4096,F=16384"],
                          capsys)
    assert status == 1
    status, out, err = invoke([FFN, "memory.fixed_bytes == 1.5*2**30", "--only-at",
                               "D=4096,F=16384", "--json"], capsys)
    assert status == 0, err
    [r] = json.loads(out)
    assert r["holds"] is True and r["only_at"] is True
    assert r["at"][0]["lhs"] == r["at"][0]["rhs"] == 1_610_612_736
