"""``symflops check`` as a reviewer uses it: names, units, approximate claims,
conventions, explanations, comparisons across declarations and claims files.

Every expected verdict and number is worked out by hand in the test (the
arithmetic in a comment) or is a figure a paper or seed prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import sympy

from symflops.cli import main

ROOT = Path(__file__).resolve().parent.parent
DERIVATIONS = ROOT / "derivations"
FFN = str(DERIVATIONS / "ffn.yaml")
TRANSFORMER = str(DERIVATIONS / "transformer.yaml")
DECODER = str(DERIVATIONS / "decoder_block.yaml")
LORA = str(DERIVATIONS / "lora.yaml")
LINEAR = str(ROOT / "claims" / "linear.yaml")
SEEDS = str(ROOT / "claims" / "seeds.yaml")
B, D, F, I, O, R, S, L, N, E = (sympy.Symbol(n, positive=True, integer=True)
                                for n in ("B", "D", "F", "I", "O", "R", "S", "L", "N", "E"))


def check(capsys, *argv):
    """(exit status, the JSON list, standard error) of ``symflops check ARGV --json``."""
    status = main(["check", *argv, "--json"])
    out, err = capsys.readouterr()
    return status, (json.loads(out) if out else None), err


def refused(capsys, *argv) -> str:
    status = main(["check", *argv])
    out, err = capsys.readouterr()
    assert status == 2 and out == "", err
    assert "Traceback" not in err
    return err.splitlines()[0]


def parse(text, *symbols):
    return sympy.sympify(text, locals={str(s): s for s in symbols})


# ------------------------------------------------------------------ units --

def test_a_unit_word_scales_the_number_it_follows(capsys):
    # ffn at GPT-2 small's MLP (B=1024, D=768, F=3072), bf16-adam: 12 bytes per
    # parameter of 2 D F, and 2 bytes per saved element of X and H:
    # 24*768*3072 + 2*1024*(768 + 3072) = 56,623,104 + 7,864,320 = 64,487,424 bytes.
    at = ["--only-at", "B=1024,D=768,F=3072"]
    status, [gb, mb, mib], _ = check(capsys, FFN, "memory.total_bytes <= 80 GB",
                                     "memory.total_bytes <= 64 MB",
                                     "memory.total_bytes <= 62 MiB", *at)
    assert gb["at"][0]["lhs"] == 64_487_424 and gb["holds"] is True
    assert mb["at"][0]["rhs"] == 64_000_000 and mb["holds"] is False      # 64e6 < 64,487,424
    assert mib["at"][0]["rhs"] == 62 * 2**20 and mib["holds"] is True     # 65,011,712
    assert gb["unit"] == "bytes"
    assert status == 1


def test_comparing_elements_with_bytes_is_refused_with_the_conversion(capsys):
    first = refused(capsys, FFN, "memory.params <= 16 GB")
    assert first.startswith("symflops: <claim 1>:1:17: error: the claim compares elements "
                            "(memory.params) with bytes (16 GB)")
    assert "fix: name the quantity in bytes, memory.params_bytes" in first
    first = refused(capsys, FFN, "memory.activation_bytes == 2*activations")
    assert "memory.activation_bytes / activations == 2" in first


def test_a_sum_of_two_units_and_a_unit_after_a_quantity_are_refused(capsys):
    first = refused(capsys, FFN, "flops.total + memory.fixed_bytes > 0")
    assert "the claim adds FLOPs (flops.total) to bytes (memory.fixed_bytes)" in first
    first = refused(capsys, FFN, "flops.total == flops.forward FLOPs")
    assert first.startswith("symflops: <claim 1>:1:30: error: the unit 'FLOPs' follows a side "
                            "that is in FLOPs already")
    first = refused(capsys, FFN, "log(flops.total) > 0")
    assert "flops.total is in FLOPs, and a function here takes a number" in first


def test_macs_and_flops_convert_by_two(capsys):
    # --macs: flops.total is 6 B D F multiply-accumulates = 12 B D F FLOPs.
    status, [named, bare], _ = check(capsys, FFN, "flops.total == 12*B*D*F FLOPs",
                                     "flops.total == 12*B*D*F", "--macs")
    assert named["holds"] is True
    assert bare["holds"] is False
    assert parse(bare["difference"], B, D, F) == -6 * B * D * F
    assert bare["nearest"] == "the same claim with FLOPs (not --macs)"


# ------------------------------------------------------- approximate claims --

def test_an_approximation_that_holds_everywhere(capsys):
    # 12 B D F against 6 x 2 D F x B: equal, so within any tolerance; '~=' is '≈'.
    # flops.total - 12 B D F is 0: equal to 0 within any tolerance (it was undetermined,
    # the tolerance of a left-hand side of 0 being 0).
    status, results, _ = check(capsys, FFN, "flops.total ≈ 6*params*B",
                               "flops.total ~= 6*params*B", "flops.total - 12*B*D*F ≈ 0")
    assert status == 0 and all(r["holds"] is True and r["approximate"] for r in results)
    assert results[0]["rtol"] == 0.05


def test_an_approximation_off_everywhere_does_not_hold(capsys):
    # 3 x 2 D F x B = 6 B D F is half of 12 B D F: 50 % off at every size.
    status, [r], _ = check(capsys, FFN, "flops.total ≈ 3*params*B")
    assert status == 1 and r["holds"] is False


def test_kaplans_attention_holds_where_the_context_is_long_enough(capsys):
    # Exact causal pairs: forward attention per token is 2 L N E (S + 1) (two products
    # of E S(S+1)/2 multiply-adds per head and sequence, per S tokens).  Kaplan et al.
    # write 2 n_layer n_ctx d_attn = 2 L S N E: off by 1/(S + 1) of the lhs, within
    # 5 % where 1/(S + 1) <= 1/20, S >= 19; within 1 %, S >= 99.
    claim = "attention_flops_per_token.forward ≈ 2*L*S*N*E"
    status, [r], _ = check(capsys, TRANSFORMER, claim, "--at", "L=12,S=18,N=12,E=64",
                           "--at", "L=12,S=19,N=12,E=64")
    assert status == 1
    assert r["verdict"] == "holds where" and r["region"] == "S >= 19"
    assert parse(r["difference"], L, N, E) == 2 * E * L * N
    # at S = 18: 1/19 = 5.26 % off; at S = 19, 1/20 = 5 %
    assert [round(a["relative_error"], 6) for a in r["at"]] == [round(-1 / 19, 6), -0.05]
    [term] = r["terms"]
    assert term["label"].startswith("the diagonal t = s of the causal triangle")
    assert set(term["from"]) == {"A", "O"} and parse(term["value"], E, L, N) == 2 * E * L * N
    status, [r], _ = check(capsys, TRANSFORMER, claim, "--rtol", "0.01")
    assert r["region"] == "S >= 99"


def test_the_region_of_an_inequality(capsys):
    # saved B (D + F) against 2 D F parameters: B (D + F) <= 2 D F where B <= 2DF/(D + F).
    status, [r], _ = check(capsys, FFN, "activations <= memory.params")
    assert r["holds"] is None and r["verdict"] == "holds where"
    assert r["region"] == "B <= 2*D*F/(D + F)"


@pytest.mark.parametrize("rtol", ["0", "-0.1", "1", "2"])
def test_a_tolerance_outside_zero_to_one_is_refused(capsys, rtol):
    first = refused(capsys, FFN, "flops.total ≈ 6*params*B", "--rtol", rtol)
    assert "the relative tolerance must be above 0 and below 1" in first


def test_the_stated_default_tolerance_is_the_engines():
    from symflops.checks.decide import DEFAULT_RTOL
    from symflops.commands.options import DEFAULT_RTOL_TEXT
    from symflops.lang.expr import parse_number

    assert parse_number(DEFAULT_RTOL_TEXT) == DEFAULT_RTOL == sympy.Rational(1, 20)


# ------------------------------------------------------------ conventions --

MEGATRON = "flops.executed == 96*B*S*L*D**2*(1 + S/(6*D) + V/(16*L*D))"
GIVEN = ["--given", "F=4*D,D=N*E"]


def test_megatrons_formula_is_the_executed_flops_under_its_conventions(capsys):
    # Narayanan et al. (2021), eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), with
    # d_ff = 4h and h = N E.  By hand, per layer and sequence: projections 3 x 8 S h^2
    # (Q, K, V, output: 4 x 2 S h^2, times 3 for training), MLP 3 x 16 S h^2, attention
    # over the full square 3 x 4 S^2 h; full recomputation runs the forward once more:
    # 4/3 of (72 S h^2 + 12 S^2 h) = 96 S h^2 + 16 S^2 h; the head 6 S h V, not
    # recomputed.  96 B S L h^2 + 16 B S^2 L h + 6 B S h V is the formula expanded.
    status, [r], err = check(capsys, TRANSFORMER, MEGATRON, *GIVEN, "--recompute", "full",
                             "--attention", "full-square")
    assert status == 0 and r["holds"] is True, err
    assert r["conventions"] == "--attention full-square --recompute full"
    status, [r], _ = check(capsys, TRANSFORMER, MEGATRON, *GIVEN)
    assert status == 1 and r["holds"] is False
    assert r["nearest"] == "the same claim with --attention full-square --recompute full"
    labels = {t["label"] for t in r["terms"]}
    assert labels == {"the forward ops run again (--recompute full)",
                      "the pairs t > s counted over the full square"}


def test_full_square_attention_per_token(capsys):
    # Over the full square each of the two products costs 2 S h per token and layer
    # (one query against S keys of width h = N E): 4 L S N E forward, 12 L S N E training.
    status, results, _ = check(capsys, TRANSFORMER, "attention_flops_per_token.forward == "
                               "4*L*S*N*E", "attention_flops_per_token.total == 12*L*S*N*E",
                               "--attention", "full-square")
    assert status == 0


def test_full_square_counts_as_the_import_of_a_config_with_full_square():
    """The convention, applied to any declaration, gives what import-hf writes
    with --attention full-square (a separate writer, symflops/hf/parts.py), for
    a grouped-query model and a windowed one."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_hf_import import LLAMA3_8B, MISTRAL_7B, imported

    from symflops.count.attention import full_square
    from symflops.count.cost import costs
    from symflops.derive.backward import derive
    from symflops.planner.model import imported_layer

    for config in (LLAMA3_8B, MISTRAL_7B):
        exact = imported_layer(imported(config, "exact"))
        full = imported_layer(imported(config, "full-square"))
        ours = costs(derive(full_square(exact))).flops_total
        theirs = costs(derive(full)).flops_total
        assert sympy.expand(ours - theirs) == 0
        assert sympy.expand(ours - costs(derive(exact)).flops_total) != 0


def test_a_convention_that_changes_nothing_is_refused(capsys):
    first = refused(capsys, FFN, "flops.total > 0", "--attention", "full-square")
    assert "ffn has no matrix product restricted by a where-clause" in first
    first = refused(capsys, FFN, "flops.total > 0", "--recompute", "selective")
    assert "ffn declares no selective recomputation" in first


def test_korthikantis_activation_memory(capsys):
    # Korthikanti et al. (2022), per layer in bytes: s b h (34 + 5 a s / h) without
    # recomputation, 34 s b h with selective recomputation of the attention scores,
    # softmax and its dropout (2 + 1 + 2 bytes of a s^2 b).  With d_ff = 4h, h = N E:
    # the block's saved tensors come to 34 B S D + 5 B N S^2 bytes, plus the two
    # LayerNorms' per-row 1/std, B S elements each at 2 bytes: 4 B S, which the paper
    # leaves out.
    status, [none, selective], _ = check(
        capsys, DECODER, "memory.activation_bytes == S*B*D*(34 + 5*N*S/D)",
        "memory.activation_bytes == 34*S*B*D + 4*B*S", *GIVEN)
    assert none["holds"] is False and parse(none["difference"], B, S) == 4 * B * S
    [term] = none["terms"]
    assert term["label"] == "the LayerNorms' per-row statistics, one 1/std per row"
    assert term["from"] == ["rstd_Xn_hat", "rstd_Yn_hat"]
    assert parse(term["value"], B, S) == 4 * B * S
    assert selective["holds"] is False
    assert selective["nearest"] == "the same claim with --recompute selective"
    status, [r], _ = check(capsys, DECODER, "memory.activation_bytes == 34*S*B*D + 4*B*S",
                           *GIVEN, "--recompute", "selective")
    assert status == 0 and r["holds"] is True


def test_a_precision_policy_in_a_claim(capsys):
    # mixed-adam: 2 + 2 + 8 + 4 = 16 bytes per parameter (seed 002's table)
    status, [r], _ = check(capsys, FFN, "memory.fixed_bytes == 16*params",
                           "--precision", "mixed-adam")
    assert status == 0 and r["conventions"] == "--precision mixed-adam"


# ------------------------------------------------------------------ names --

def test_the_names_of_a_whole_model(capsys):
    # tokens B S; K and V of every layer cached: 2 L S N E elements per sequence, 2
    # bytes each; 6N + attention per token (6 x (4 D N E + 2 D F) L + 6 D V, the head).
    status, results, _ = check(
        capsys, TRANSFORMER, "tokens == B*S", "sequences == B",
        "kv_cache.bytes_per_sequence == 4*L*S*N*E",
        "params_active_dense == L*(4*D*N*E + 2*D*F) + D*V",
        "flops_per_token.total == 6*params_active_dense + attention_flops_per_token.total",
        "attention_flops.forward == 2*B*L*N*E*S*(S + 1)")
    assert status == 0, [r["reason"] for r in results]


def test_attention_without_tokens_or_a_where_clause(capsys):
    # attention.yaml: one sequence, no tokens: declared; A = Q K^T and O = P V each
    # 2 S^2 H over the full square (S is the input's row axis, which no weight has).
    status, [r], _ = check(capsys, str(DERIVATIONS / "attention.yaml"),
                           "attention_flops.forward == 4*S**2*H")
    assert status == 0


def test_the_parameters_a_token_uses_are_the_nearest_claim(capsys, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_check import MOE_FFN as TEXT

    path = tmp_path / "moe_ffn.yaml"
    path.write_text(TEXT)
    # With c = 1, k T slots: each expert matrix 2 k T D F forward, 6 k T D F training,
    # two of them: 12 k T D F = 6 x (k x 2 D F) x T, the k experts a token uses; the
    # parameter count 2 M D F counts all M.
    status, [r], _ = check(capsys, str(path), "flops.total == 6*params*T", "--given", "c=1")
    assert r["holds"] is False
    assert r["nearest"] == "flops.total == 6*params_active_dense*T"


def test_every_name_is_in_the_docs_and_the_help():
    from symflops.cli import build_parser
    from symflops.count.names import registry

    section = (ROOT / "docs" / "check.md").read_text()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--help"])
    for q in registry():
        head, _, tail = q.name.partition(".")
        assert q.name in section or (tail and head in section and tail in section), q.name


def test_check_help_lists_the_names(capsys):
    from symflops.count.names import registry

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    for q in registry():
        assert q.name.partition(".")[0] in out
    for word in ("≈", "~=", "--rtol", "GiB", "--attention", "--recompute", "--claims", "--with"):
        assert word in out


# -------------------------------------------------- comparing declarations --

def test_lora_costs_about_two_thirds_of_full_fine_tuning(capsys):
    # LoRA: forward 2BIO + 2BIR + 2BRO; backward dX through W0 (2BIO) and A (2BIR),
    # dA (2BIR), dU and dB (2BRO each); no dW0: 4BIO + 6BR(I + O).  Full fine-tuning
    # of the same layer: 6BIO, two thirds of which is 4BIO.  Within 5 %:
    # 6BR(I+O) <= (4BIO + 6BR(I+O))/20, i.e. R <= 4IO/(114(I + O)) = 2IO/(57(I + O)).
    status, [r], err = check(capsys, LORA, "flops.total ≈ 2/3*full:flops.total",
                             "--with", f"full={LINEAR}", "--at", "B=4096,I=4096,O=4096,R=8")
    assert r["verdict"] == "holds where", err
    assert r["region"] == "R <= 2*I*O/(57*(I + O))"
    assert sympy.expand(parse(r["difference"], B, I, O, R) - 6 * B * R * (I + O)) == 0
    # at 4096 and R = 8: 6 x 8 x 8192 / (4 x 4096 + 6 x 8 x 8192) = 0.5825 %
    assert r["at"][0]["relative_error"] == pytest.approx(-6 * 8 * 8192 / (4 * 4096**2 + 6 * 8 * 8192))


def test_an_unknown_declaration_name_is_refused_where_written(capsys):
    first = refused(capsys, LORA, "flops.total <= 2*full:flops.total")
    assert first.startswith("symflops: <claim 1>:1:18: error: no declaration named 'full'")


# --------------------------------------------------------------- explaining --

def test_bytes_for_elements_names_the_claim_that_holds(capsys):
    # The seed's 8DF is the fixed memory in elements (2DF parameters, 2DF gradients,
    # 4DF of Adam's m and v); in bytes under bf16-adam it is 2 x (2 + 2 + 4 + 4) DF.
    status, [r], _ = check(capsys, FFN, "memory.fixed_bytes == 8*D*F")
    assert r["nearest"] == ("memory.fixed == 8*D*F (memory.fixed counts elements; in bytes "
                            "under bf16-adam, memory.fixed_bytes = 24*D*F)")
    assert r["terms"] == []  # the claim names the wrong quantity: no parts to name


def test_a_frozen_weight_is_named(capsys):
    # LoRA per token: 4IO + 6R(I + O) against 6 (IO + R(I + O)) parameters: the
    # weight gradient of the frozen W0 (2IO per token) is missing.
    status, [r], _ = check(capsys, LORA, "flops_per_token.total == 6*params")
    assert parse(r["difference"], I, O) == -2 * I * O
    [term] = r["terms"]
    assert term["label"] == "the weight gradients frozen parameters do not get"
    assert term["from"] == ["W0"]
    assert r["holds_when"] == "W0 is trained (role: param)"


def test_capacity_padding_attention_and_routing_are_named(capsys):
    # moe_block per token, against 6 x the active dense parameters: the expert slots
    # c k B S hold k B S tokens, so (c - 1) k of every c k expert rows are padding:
    # 3 matrices x 6 D F x (c - 1) k = 18 D F k (c - 1); attention 6 N E (S + 1) as for
    # the transformer; the combine Y = Gt Ye, 2 D k forward and 2 D k for dGt.
    status, [r], _ = check(capsys, str(DERIVATIONS / "moe_block.yaml"),
                           "flops_per_token.total ≈ 6*params_active_dense")
    c, k = sympy.symbols("c k", positive=True, integer=True)
    values = {t["label"]: parse(t["value"], c, k, D, F, N, E, S) for t in r["terms"]}
    expected = {
        "the expert slots no token fills (capacity padding)": 18 * D * F * k * (c - 1),
        "the attention products (over two sequence letters)": 6 * N * E * (S + 1),
        "the products of Y": 4 * D * k}
    assert set(values) == set(expected)
    assert all(sympy.expand(values[n] - expected[n]) == 0 for n in expected)


# -------------------------------------------------------------- claims files --

def test_the_seeds_claims_file_gets_its_documented_verdicts(capsys):
    status = main(["check", "--claims", SEEDS, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    results = json.loads(out)
    assert all(r["as_expected"] for r in results)
    by = {r["claim"]: r for r in results}
    line = by["memory.fixed + memory.activation_bytes == 8*D*F + 2*B*(D+F)"]
    assert line["verdict"] == "refused"
    assert "adds elements (memory.fixed) to bytes (memory.activation_bytes)" in line["reason"]
    assert by["flops.total == 8.4e22 FLOPs"]["at"][0]["lhs"] == 84 * 10**21   # 6 x 7e9 x 2e12
    assert by["flops.total == 6.354e24 FLOPs"]["at"][0]["lhs"] == 6354 * 10**21  # 6 x 70.6e9 x 15e12
    # 12 x 80 x 8192 x 8192 = 64,424,509,440; causal: 6 x 80 x 8192 x 8193 = 32,216,186,880
    assert by["attention_flops_per_token.total ≈ 64.42e9"]["at"][0]["lhs"] == 64_424_509_440
    assert by["attention_flops_per_token.total ≈ 32.22e9"]["at"][0]["lhs"] == 32_216_186_880
    assert by["memory.fixed_bytes == 112 GB"]["at"][0]["lhs"] == 112 * 10**9  # 16 x 7e9


def _claims_file(tmp_path, body: str) -> str:
    path = tmp_path / "claims.yaml"
    path.write_text(f"declarations:\n  ffn: {FFN}\nclaims:\n{body}")
    return str(path)


def test_a_verdict_other_than_documented_fails_the_file(capsys, tmp_path):
    path = _claims_file(tmp_path, "  - claim: flops.total == 4*params*B\n"
                                  "    source: a wrong formula, said to hold\n")
    status = main(["check", "--claims", path])
    out, _ = capsys.readouterr()
    assert status == 1
    assert "DIFFERS from the documented verdict: holds" in out
    path = _claims_file(tmp_path, "  - claim: flops.total == 4*params*B\n"
                                  "    expect: does not hold\n")
    assert main(["check", "--claims", path]) == 0


def test_a_bad_claim_in_a_file_is_reported_at_its_line_and_column(capsys, tmp_path):
    path = _claims_file(tmp_path, "  - claim: flops.total == 6*parms*B\n")
    first = refused(capsys, "--claims", path)
    # the claim text starts at column 12 of line 4; 'parms' is 17 characters in
    assert first.startswith(f"symflops: {path}:4:29: error: unknown name 'parms'")
    path = _claims_file(tmp_path, "  - claim: flops.total > 0\n    colour: red\n")
    assert f"{path}:5:5: error: unknown key 'colour'" in refused(capsys, "--claims", path)
    path = _claims_file(tmp_path, "  - claim: flops.total > 0\n    unit: bytes\n")
    assert "is in FLOPs, not bytes" in refused(capsys, "--claims", path)
    path = _claims_file(tmp_path, "  - claim: flops.total ≈ 0\n    rtol: 0\n")
    assert "above 0 and below 1" in refused(capsys, "--claims", path)


def test_a_quoted_claim_is_located_inside_its_quotes(capsys, tmp_path):
    path = _claims_file(tmp_path, "  - claim: 'flops.total == 6*parms*B'\n")
    assert refused(capsys, "--claims", path).startswith(f"symflops: {path}:4:30: error:")


# ------------------------------------------------------------------- json --

def test_json_keeps_its_keys_and_adds(capsys):
    status, [r], _ = check(capsys, FFN, "flops.total == 6*params*B")
    assert list(r)[:7] == ["claim", "holds", "verdict", "difference", "reason", "at",
                           "holds_when"]
    assert {"region", "approximate", "rtol", "only_at", "unit", "conventions", "nearest",
            "terms", "declaration"} <= set(r)


def test_the_readme_shows_korthikantis_table_as_checked(capsys):
    """The README's paper table, checked end to end: its printed lines are the
    command's.  Table 2 of Korthikanti et al. (2022), t = 1: sbh(34 + 5as/h)
    misses the LayerNorms' 4 B S bytes (see test_korthikantis_activation_memory);
    full recomputation keeps the layer's input, 2 s b h."""
    status = main(["check", "--claims", str(ROOT / "claims" / "korthikanti.yaml")])
    out, _ = capsys.readouterr()
    assert status == 0
    readme = (ROOT / "docs" / "check.md").read_text()
    shown = readme[readme.index("$ symflops check --claims claims/korthikanti.yaml"):]
    shown = shown[:shown.index("```")].splitlines()[1:]
    shown = [line for line in shown if line.strip() and line.strip() != "..."]
    assert len(shown) > 10
    for line in shown:
        assert line in out.splitlines(), line


def test_a_convention_that_changes_nothing_is_refused_at_its_key(capsys, tmp_path):
    path = _claims_file(tmp_path, "  - claim: flops.total > 0\n    attention: full-square\n")
    first = refused(capsys, "--claims", path)
    assert first.startswith(f"symflops: {path}:5:5: error: ffn has no matrix product "
                            "restricted by a where-clause")


def test_the_help_examples_run(capsys, monkeypatch):
    """Each example of check --help is a command that runs (0 or 1, never 2)."""
    import shlex

    from symflops.commands.options import check_epilog

    monkeypatch.chdir(ROOT)
    text = check_epilog().split("examples:")[1].replace("\\\n", " ")
    commands = [shlex.split(line.strip())[1:] for line in text.splitlines()
                if line.strip().startswith("symflops check")]
    assert len(commands) == 6
    for argv in commands:
        assert main(argv) in (0, 1), argv
        capsys.readouterr()
