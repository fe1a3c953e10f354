"""`symflops exercises`: every answer the engine computes is checked here by
an independent computation: a hand formula (the arithmetic in the comment)
at the declaration's example, and, for a rule's cost, a brute-force count of
its multiply-adds at small sizes."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.exercises import MOST, exercises
import forked

ROOT = Path(__file__).resolve().parents[1]
GPT2_MLP = {"B": 1024, "D": 768, "F": 3072}


def load(name: str):
    d = symflops.derive(symflops.load(str(ROOT / "derivations" / f"{name}.yaml")))
    return d, costs(d)


def all_kinds(name: str) -> dict:
    """Every kind of exercise the layer has, over a few seeds."""
    d, c = load(name)
    found = {}
    for seed in range(12):
        for e in exercises(d, c, seed):
            found.setdefault((e.kind, e.config_name, e.subject), e)
    return found


def brute_force_pairs(rule, extents: dict[str, int]) -> int:
    """Multiply-adds of a rule, counted by visiting every index tuple its one
    term sums over and keeping those its where-clause allows."""
    (term,) = rule.terms
    letters = list(dict.fromkeys(i for f in (term.output, *term.operands) for i in f.indices))
    cond = [f for f in term.operands if f.is_comparison]
    count = 0
    for values in itertools.product(*(range(extents[x]) for x in letters)):
        at = dict(zip(letters, values))
        if all(_holds(f, at) for f in cond):
            count += 1
    return count


def _holds(f, at) -> bool:
    a, b = (at[i] for i in f.indices)
    return {"<=": a <= b, "<": a < b, ">=": a >= b, ">": a > b}[f.relation]


def test_a_set_has_three_to_four_exercises_and_a_seed_fixes_it() -> None:
    d, c = load("ffn")
    first = exercises(d, c, 0)
    assert 3 <= len(first) <= MOST
    assert first == exercises(d, c, 0)
    assert {e.kind for e in first} >= {"rule_flops", "saved"}


def test_ffn_answers_by_hand() -> None:
    B, D, F = GPT2_MLP["B"], GPT2_MLP["D"], GPT2_MLP["F"]
    for (kind, name, subject), e in all_kinds("ffn").items():
        a = e.answer
        assert dict(e.config) == GPT2_MLP and name == "GPT-2 small MLP"
        if kind == "rule_flops":  # every ffn rule: one product of 2 x B x D x F
            assert a["flops"] == 2 * B * D * F == 4_831_838_208
        elif kind == "saved":     # X (B x D) and H (B x F) at 2 bytes
            assert [t for t, _ in a["tensors"]] == ["X", "H"]
            assert a["bytes"] == 2 * B * (D + F) == 7_864_320
        elif kind == "allreduce":  # dW_in and dW_out: 2DF elements at 2 bytes
            assert a["bytes"] == 2 * 2 * D * F
        elif kind == "memory":    # 12 bytes x 2DF + 2 x B(D + F)
            assert a["total"] == 12 * 2 * D * F + 2 * B * (D + F) == 64_487_424
        elif kind == "double":    # B doubles: every count is linear in B
            assert subject == "B" and a["flops_ratio"] == 2 and a["bytes_ratio"] == 2
        elif kind == "recompute":  # both ops again (4BDF), X alone kept (2BD bytes)
            assert a["recomputed"] == 4 * B * D * F and a["bytes"] == 2 * B * D
        else:
            pytest.fail(f"an ffn exercise of kind {kind}")


def test_llama_answers_by_hand() -> None:
    found = all_kinds("llama")
    # Llama-2-7B: L 32, V 32,000, B 1, S 4,096, D 4,096, N = G = 32 (R = 1), E 128, F 11,008
    L, V, B, S, D, N, G, E, F = 32, 32000, 1, 4096, 4096, 32, 32, 128, 11008
    # per token: q and o 2DNE, k and v 2DGE, the MLP 3DF per layer, and the head VD
    n_active = D * (2 * L * N * E + 2 * L * G * E + 3 * L * F + V)

    def training(s: int) -> int:  # 6N per token + the causal attention, 6LNE(S + 1)
        return (6 * n_active + 6 * L * N * E * (s + 1)) * B * s

    kinds = {k for k, _, _ in found}
    assert {"six_n", "double"} <= kinds
    for (kind, name, subject), e in found.items():
        a = e.answer
        if name != "Llama-2-7B":
            continue
        if kind == "six_n":
            assert a["training"] == training(S) and a["n_active"] == n_active
            assert a["six_n"] == 6 * n_active * B * S
            assert sorted((op, v) for op, _, _, _, v in a["parts"]) == [
                ("A", 3 * L * N * E * (S + 1) * B * S), ("O", 3 * L * N * E * (S + 1) * B * S)]
        if kind == "double":
            assert subject == "S" and a["flops_ratio"] == Fraction(training(2 * S), training(S))


@pytest.mark.parametrize("name, small", [
    ("ffn", {"B": 3, "D": 2, "F": 4}),
    ("attention_causal", {"S": 5, "D": 2, "H": 3}),
    ("lora", {"B": 3, "I": 2, "O": 4, "R": 2}),
])
def test_a_rule_s_cost_is_its_brute_force_count(name: str, small: dict[str, int]) -> None:
    """The formula an exercise's answer evaluates, at small sizes, against the
    multiply-adds of the rule visited one index tuple at a time (2 FLOPs each)."""
    d, c = load(name)
    found = [e for e in all_kinds(name).values() if e.kind == "rule_flops"]
    assert found
    for e in found:
        i = next(k for k, r in enumerate(d.rules) if r.grad == e.subject)
        extents = {x: small[str(ext)] for x, ext in d.rules[i].index_dims}
        formula = e.answer["formula"].subs({d.layer.dim_symbols[k]: v for k, v in small.items()})
        assert formula == 2 * brute_force_pairs(d.rules[i], extents)


def test_the_command_prints_questions_then_answers() -> None:
    run = forked.run("exercises", "derivations/ffn.yaml", "--seed", "3", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    head, _, answers = run.stdout.partition("\nanswers\n")
    assert head.count("?") >= 3 and ("FLOPs" in answers or "bytes" in answers)
    out = json.loads(forked.run("exercises", "derivations/ffn.yaml", "--json", cwd=ROOT).stdout)
    assert 3 <= len(out) <= MOST and all({"question", "answer", "values"} <= set(x) for x in out)
    bad = forked.run("exercises", "no/such.yaml", cwd=ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
