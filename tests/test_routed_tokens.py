"""Per-token figures of layers that route a fraction of the tokens (issue 25,
item 18): a Mixture-of-Depths block (the top C of each sequence's S tokens
pass through it) and an expert-choice MoE layer (each expert picks its top C
tokens), both combined by a scatter at the routed slots.

Expected values are counted by hand below, from the papers' definitions:
Raposo et al. 2024 (per token, a routed block's parameters count C/S of the
time, the router always) and Zhou et al. 2022 (M C = c B S slots: a token
reaches c experts on average).
"""

import json
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.core.errors import SymflopsError
from symflops.core.ir import substitute
from symflops.count.cost import costs
from symflops.count.summary import summary
import forked

ROOT = Path(__file__).resolve().parent.parent
MOD = ROOT / "derivations" / "mod_block.yaml"
EC = ROOT / "derivations" / "moe_expert_choice.yaml"
B, S, C, D, N, E, F, M, c = sympy.symbols("B S C D N E F M c", positive=True, integer=True)


def parse(text):
    return sympy.parse_expr(text, local_dict={str(s): s for s in (B, S, C, D, N, E, F, M, c)})


def summary_json(path):
    d = symflops.derive(symflops.load(path))
    return summary(d, costs(d)).to_json()


def test_mixture_of_depths_parameters_by_hand():
    p = summary_json(MOD)["parameters"]
    # router w_r: D; LayerNorm gains and biases: 4 D; W_q, W_k, W_v: 3 D N E;
    # W_o: N E D; W_in, W_out: 2 D F; b_in: F; b_out: D.
    block_dense = 4 * D * N * E + 2 * D * F
    assert sympy.expand(parse(p["total"]) - (block_dense + D + 4 * D + F + D)) == 0
    # A token passes through the block C/S of the time: C of each sequence's S.
    # The router reads every token (D).
    assert sympy.expand(parse(p["active_dense"]) - (C * block_dense / S + D)) == 0
    # active adds the gains and biases whole (5 D + F), as published counts do.
    assert sympy.expand(parse(p["active"]) - (C * block_dense / S + D + 5 * D + F)) == 0
    # every element a token's forward pass reads: the block's all, C/S of the time
    assert sympy.expand(parse(p["read_per_token"])
                        - (C * (block_dense + 5 * D + F) / S + D)) == 0


def test_mixture_of_depths_flops_per_token_by_hand():
    t = summary_json(MOD)["per_token"]
    # Router: 2 D. On the C routed tokens of a sequence: Q, K, V 3 * 2 D N E,
    # W_o 2 N E D, W_in and W_out 2 * 2 D F, each C/S per token; attention
    # among them, causal: C (C + 1)/2 pairs, 2 E FLOPs each per head for the
    # scores and as many for the mixing, per sequence of S tokens.
    forward = 2 * D + C * (8 * D * N * E + 4 * D * F) / S + 2 * N * E * C * (C + 1) / S
    assert sympy.expand(parse(t["flops"]["forward"]) - forward) == 0


def test_mixture_of_depths_at_the_example():
    """GPT-2 small's block sizes, capacity 12.5 % (C = 1024 / 8 = 128)."""
    run = forked.run("eval", str(MOD), "--example", "GPT-2 small sizes, capacity 12.5 %", "--json", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    p = json.loads(run.stdout)["parameters"]
    # (4 * 768 * 12 * 64 + 2 * 768 * 3072) / 8 + 768
    #   = (2,359,296 + 4,718,592) / 8 + 768 = 884,736 + 768
    assert p["active_dense"] == 885_504
    # total: 7,077,888 + 6 * 768 + 3072
    assert p["total"] == 7_085_568


def test_expert_choice_parameters_and_flops_by_hand():
    out = summary_json(EC)
    p, t = out["parameters"], out["per_token"]
    assert sympy.expand(parse(p["total"]) - (2 * D * F * M + D * M)) == 0
    # M C = c B S slots, each reading one expert's 2 D F: c experts per token
    # on average, plus the router D M.
    assert sympy.expand(parse(p["active_dense"]) - (2 * c * D * F + D * M)) == 0
    # Router 2 D M; per slot 2 D F up and 2 D F down, c slots per token.
    assert sympy.expand(parse(t["flops"]["forward"]) - (2 * D * M + 4 * c * D * F)) == 0


def test_expert_choice_combine_is_counted_at_the_slots():
    """The combine Y[tb[x,q], ts[x,q], d] += Gx[x,q] Ye[x,q,d]: a multiply and
    an add per slot and width, 2 M C D = 2 c B S D, not a masked gather of
    every expert at every token (2 B S M D)."""
    d = symflops.derive(symflops.load(EC))

    c_ = costs(d)
    k = [op.output for op in d.layer.ops].index("Y")
    combine = substitute(c_.forward[k].elementwise, d.layer.substitutions)
    assert c_.forward[k].flops == 0
    assert sympy.expand(combine - 2 * c * B * S * D) == 0


def test_rows_that_are_no_fraction_of_the_tokens_are_refused(tmp_path):
    text = MOD.read_text().replace("ts: {shape: [B, C]", "ts: {shape: [B, C + 1]")
    path = tmp_path / "mod.yaml"
    path.write_text(text)
    with pytest.raises(SymflopsError) as info:
        d = symflops.derive(symflops.load(path))
        summary(d, costs(d))
    assert "not a multiple, a divisor or a fraction (a ratio of products of dims)" in \
        info.value.message
