"""The engine's facts behind a teaching sheet (issue 27): training minus 6N by
cause, an index tensor's bytes, fused attention, derive's notes, growth.

Every expected value is a hand count written in the comment beside it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.core.errors import SymflopsError
from symflops.core.ir import substitute
from symflops.count.beyond import beyond_six_n
from symflops.count.cost import costs
from symflops.count.growth import growth
from symflops.count.indices import check_index_widths, index_widths, width_for
from symflops.count.recompute import attention_chains, recompute
from symflops.count.summary import summary
import forked

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    d = symflops.derive(symflops.load(str(ROOT / "derivations" / f"{name}.yaml")))
    return d, costs(d)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return forked.run(*args, cwd=ROOT)


def dims(d, names: str):
    """The layer's own dim symbols (they carry the assumptions the counts use)."""
    return [d.layer.dim_symbols[n] for n in names.split()]


def parts(name: str):
    d, c = load(name)
    subs = d.layer.substitutions
    return d, [(p.output, p.cause, sympy.expand(substitute(p.per_token, subs)), p.tensors,
                p.reason) for p in beyond_six_n(d, c)]


# -- item 3: training minus 6N, term by term, by the cause the engine found --------------------

def test_lora_falls_short_of_6n_only_by_its_frozen_weight() -> None:
    # Y = X W0 + U B_lo: W0 (I x O) is frozen. Per token 6N counts 6·IO for W0, but only
    # the forward X W0 (2IO) and the input gradient dY W0^T (2IO) run: -2IO, and nothing else.
    d, found = parts("lora")
    I, O = dims(d, "I O")
    assert found == [("Y", "no_gradient", -2 * I * O, ("W0",), "frozen")]


def test_llama_is_6n_plus_attention_only() -> None:
    # A = Q K^T over the causal pairs: per sequence and head S(S+1)/2 pairs x 2E FLOPs, per
    # token E(S+1) per head, N heads, L layers: forward L N E (S+1); two backward products of
    # the same size: 3 L N E (S+1) per op; P V the same. No other op departs from 6N.
    d, found = parts("llama")
    L, N, E, S = dims(d, "L N E S")
    assert [(o, c, t) for o, c, _, t, _ in found] == [
        ("A", "no_weight", ("Q", "K")), ("O", "no_weight", ("P", "V"))]
    for _, _, v, _, _ in found:
        assert sympy.expand(v - 3 * L * N * E * (S + 1)) == 0


def test_moe_departs_by_attention_padding_slots_and_the_combine() -> None:
    # The experts' three products (U, H, Ye) run on all M C = c k B S slots: per token
    # c k slots x 2DF per product, x 3 (forward and two backward) = 6 c k D F, where 6N
    # counts the k experts a token reaches, 6 k D F: +6 k D F (c - 1) each, per layer.
    # The combine XL = sum_j Gt Ye multiplies two activations: 2 D k forward per token, and
    # its dGt product 2 D k (its dYe is a scatter-add, elementwise): 4 D k L.
    d, found = parts("moe")
    L, D, F, k, c = dims(d, "L D F k c")
    padding = [(o, v) for o, cause, v, _, _ in found if cause == "padding"]
    assert [o for o, _ in padding] == ["U", "H", "Ye"]
    assert all(sympy.expand(v - 6 * D * F * L * k * (c - 1)) == 0 for _, v in padding)
    combine = [(v, t) for o, cause, v, t, _ in found if o == "XL"]
    assert combine and sympy.expand(combine[0][0] - 4 * D * L * k) == 0
    assert combine[0][1] == ("Gt", "Ye")
    s = summary(d, costs(d))
    total = sum((v for _, _, v, _, _ in found), sympy.Integer(0))
    assert sympy.expand(total - s.model.per_token.beyond_six_n) == 0


def test_exactly_6n_has_no_parts() -> None:
    assert parts("lm_loss")[1] == [] and parts("ffn")[1] == []  # ffn declares no tokens


# -- item 8: an index tensor's bytes follow its range -------------------------------------

def test_widths_are_the_smallest_signed_integer_holding_the_range() -> None:
    assert width_for(128) == 1       # 0 .. 127 fits int8
    assert width_for(129) == 2       # 128 does not
    assert width_for(32_000) == 2    # Llama-2's vocabulary: 31,999 <= 32,767
    assert width_for(32_768) == 2 and width_for(32_769) == 4
    assert width_for(128_256) == 4   # Llama-3's: 128,255 > 32,767
    assert width_for(2**31) == 4 and width_for(2**31 + 1) == 8


def test_llama_token_ids_take_4_bytes_from_its_largest_example() -> None:
    d, c = load("llama")
    assert index_widths(d.layer) == {"tok": 4, "y": 4}  # Llama-3-8B's V = 128,256
    widths = {s.name: s.element_bytes(c.precision) for s in c.saved}
    assert widths["tok"] == 4 and widths["y"] == 4 and widths["X0"] == 2
    # At Llama-2-7B (B = 1, S = 4,096): tok and y, 4,096 elements each, at 4 bytes rather
    # than 2: 2 x 4,096 x 2 = 16,384 bytes more than at the policy's 2 bytes.
    out = json.loads(run_cli("eval", "derivations/llama.yaml", "--example", "Llama-2-7B",
                             "--json").stdout)
    at2 = sympy.expand(substitute(sum((s.total * 2 for s in c.saved), sympy.Integer(0)),
                                  d.layer.substitutions))
    values = {d.layer.dim_symbols[k]: v for k, v in out["at"].items()}
    assert out["memory"]["activation_bytes"] - int(at2.subs(values)) == 16_384


def test_an_index_range_beyond_its_width_is_refused() -> None:
    d, _ = load("embedding")
    check_index_widths(d.layer, {"B": 4, "D": 3, "V": 10**5})
    with pytest.raises(SymflopsError, match="'tok' holds values up to 9,999,999,999"):
        check_index_widths(d.layer, {"B": 4, "D": 3, "V": 10**10})
    r = run_cli("eval", "derivations/embedding.yaml", "B=4", "D=3", "V=10**10")
    assert r.returncode == 2 and "needs 8 bytes" in r.stderr and "Traceback" not in r.stderr


# -- item 13: fused attention recomputes the scores and probabilities ----------------------

def test_fused_attention_keeps_no_probabilities_and_recomputes_the_scores() -> None:
    d, c = load("attention_causal")
    assert [[d.layer.ops[k].output for k in ch] for ch in attention_chains(d, c)] == [["A", "P"]]
    r = recompute(d, c, "fused_attention")
    S, H, D = dims(d, "S H D")
    # the score product again: S(S+1)/2 causal pairs x 2H FLOPs
    assert sympy.expand(r.flops - H * S * (S + 1)) == 0
    # P (S x S at 2 bytes) is not kept; one log-sum-exp per row (S rows at 4 bytes) is
    none = c.memory()["activation_bytes"]
    assert sympy.expand(none - r.activation_bytes(c) - (2 * S**2 - 4 * S)) == 0
    assert "P" not in {s.name for s in r.kept} and "lse_P" in {s.name for s in r.kept}


def test_fused_attention_in_the_json_and_in_plan() -> None:
    out = json.loads(run_cli("derive", "derivations/llama.yaml", "--json").stdout)
    assert "fused_attention" in out["recompute"]["policies"]
    assert "fused_attention" not in json.loads(
        run_cli("derive", "derivations/ffn.yaml", "--json").stdout)["recompute"]["policies"]
    args = ["plan", "derivations/llama.yaml", "L=32", "V=32000", "D=4096", "N=32", "G=32",
            "E=128", "F=11008", "--seq", "4096", "--tokens", "2e12", "--json"]
    none = json.loads(run_cli(*args).stdout)
    fused = json.loads(run_cli(*args, "--recompute", "fused_attention").stdout)

    def per_token(plan):
        return plan["flops"]["executed_per_token"]

    # the recomputed score product per token: L N E (S + 1) = 32 x 32 x 128 x 4,097
    assert per_token(fused) - per_token(none) == 32 * 32 * 128 * 4097
    r = run_cli("plan", "derivations/ffn.yaml", "B=1", "--tokens", "1e9", "--recompute",
                "fused_attention")
    assert r.returncode == 2 and "Traceback" not in r.stderr


# -- item 18: a tool's remarks go to derive's notes, not on the sheet -----------------------

def test_derive_notes_say_what_the_declaration_could_add() -> None:
    out = run_cli("derive", "derivations/activations.yaml").stdout   # no tokens:
    assert "notes" in out and "declare 'tokens:'" in out
    assert json.loads(run_cli("derive", "derivations/activations.yaml", "--json").stdout)["notes"]
    assert "notes" not in json.loads(run_cli("derive", "derivations/llama.yaml",
                                              "--json").stdout)


# -- item 2: what a row grows with ----------------------------------------------------------

def test_activations_grow_quadratically_with_the_sequence_length() -> None:
    # llama keeps P (B G R S S per layer): quadratic in S; linear in B and L.
    d, c = load("llama")
    g = {x.dim: (x.degree, x.kind) for x in growth(d.layer, c.activations)}
    assert g == {"L": (1, "layers"), "B": (1, "tokens"), "S": (2, "sequence")}
    d, c = load("ffn")
    assert [(x.dim, x.degree) for x in growth(d.layer, c.activations)] == [("B", 1)]
