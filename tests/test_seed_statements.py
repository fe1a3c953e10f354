"""Every statement of the seed cheatsheet (../shared/seeds/000) that is true
for the feed-forward block appears on the ffn sheet, derived (issue 27).

The table below is the seed's statements in its order, each with where the
sheet says it (text the rendered Markdown must hold, in the sheet's
notation) and, where the statement is a number, the engine's check of it
written by hand.  The seed's closing summary adds an element count (8DF) to
a byte count (2·B·(D+F)); the sheet states the same facts in bytes, and the
element count is checked against the engine instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.render import render

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ffn():
    d = with_patterns(symflops.derive(symflops.load(str(ROOT / "derivations" / "ffn.yaml"))))
    c = costs(d)
    return d, c, render(d, explain(d, c), "md")


# (the seed's statement, what the sheet must say: every string in the Markdown sheet)
STATEMENTS = [
    ("inference frees activations (X) immediately",
     ["Inference runs the forward pass only and keeps no activations"]),
    ("training must keep activations (X) alive for the backward pass",
     ["Training must keep $X$ and $H$ from the forward pass until the backward pass reaches"]),
    ("and additionally carry gradients and optimizer state in GPU memory",
     ["Weights, gradients and optimizer state (bytes): $24DF$"]),
    ("X: block input (activations) [B, D]", [r"| $X$ | input | $[B, D]$ | block input (activations) |"]),
    ("W_in: up-projection [D, F]", [r"| $W_{\text{in}}$ | weight, trained | $[D, F]$ | up-projection |"]),
    ("H: hidden activation [B, F]", [r"$H\ [B, F]$"]),
    ("W_out: down-projection [F, D]",
     [r"| $W_{\text{out}}$ | weight, trained | $[F, D]$ | down-projection |"]),
    ("Y: block output (same width as input) [B, D]", [r"$Y\ [B, D]$"]),
    ("B is the batch (number of tokens), D = d_model, F = d_ff",
     ["$B$, tokens in the batch", "$D$, model width (d\\_model)", "$F$, hidden width (d\\_ff)"]),
    ("Two matmuls, one per layer: H_bj = sum_i X_bi (W_in)_ij, Y_bk = sum_j H_bj (W_out)_jk",
     [r"H_{bf} = \sum_{d} X_{bd}\, (W_{\text{in}})_{df}",
      r"Y_{be} = \sum_{f} H_{bf}\, (W_{\text{out}})_{fe}"]),
    ("Each output element is a dot product (one multiply + one add = 2 ops per term)",
     [r"2 \times \underbrace{BF}_{\text{outputs}} \times \underbrace{D}_{\text{terms each}} = 2BDF"]),
    ("The block has P = DF + FD = 2DF parameters", [r"N_{\text{param}} = DF + DF = 2DF"]),
    ("forward = 4BDF = 2BP (2 FLOPs per parameter per token)",
     [r"4BDF = 2 \cdot N_{\text{param}} \cdot B"]),
    ("In pure inference you compute Y and throw X and H away; in training you cannot",
     ["keeps no activations", "Training must keep $X$ and $H$"]),
    ("the two backward rules for any linear layer: dW = X^T dY, dX = dY W^T",
     [r"\boxed{dX = dH\, W_{\text{in}}^\top}", r"\boxed{dW_{\text{in}} = X^\top\, dH}"]),
    ("Shape-matching gives the answer: dW must match W, dX must match X",
     ["Match the shapes", r"$dW_{\text{in}}$ has $W_{\text{in}}$'s shape $[D, F]$",
      "$dX$ has $X$'s shape $[B, D]$"]),
    ("dW = X^T dY sums over B: every token contributes; in data parallelism gradients are "
     "AllReduced", ["It sums over $b$, which run over all $B$ tokens: every token contributes, "
                    "which is why data-parallel replicas", "all-reduce it once per step"]),
    ("Down-projection: dW_out = H^T dY, dH = dY W_out^T",
     [r"dW_{\text{out}} = H^\top\, dY", r"dH = dY\, W_{\text{out}}^\top"]),
    ("Up-projection: dW_in = X^T dH, dX = dH W_in^T",
     [r"dW_{\text{in}} = X^\top\, dH", r"dX = dH\, W_{\text{in}}^\top"]),
    ("The chain: dY -> dH -> dX", [r"dY \;\longrightarrow\; dH \;\longrightarrow\; dX"]),
    ("Each backward matmul is the same size as its layer's forward matmul: 2BDF each",
     [r"that is $dW_{\text{out}} = H^\top\, dY$: $2BDF$ FLOPs",
      r"that is $dX = dH\, W_{\text{in}}^\top$: $2BDF$ FLOPs"]),
    ("backward = 8BDF = 2x forward = 4BP", [r"8BDF = 4 \cdot N_{\text{param}} \cdot B",
                                              "2 × forward"]),
    ("Combined: the 6ND rule", [r"12BDF = 6 \cdot N_{\text{param}} \cdot B", "the 6ND rule"]),
    ("dW_out = H^T dY needs H, and dW_in = X^T dH needs X: both must survive until backward",
     ["It reads $H$, so $H$ is kept from the forward pass until here",
      "It reads $X$, so $X$ is kept from the forward pass until here"]),
    ("activation memory scales with batch B", ["linearly with the tokens in the batch $B$"]),
    ("gradient checkpointing (recomputing H instead of storing it) is the escape hatch",
     ["recomputing it instead runs the op that writes it, $H$, again: $2BDF$ FLOPs",
      "Full recomputation (activation checkpointing"]),
    ("Memory table: params 2DF at 2 bytes, grads 2DF at 2, Adam m 2DF at 4, Adam v 2DF at 4, "
     "activations X, H B(D+F) at 2",
     [r"| Parameters $W_{\text{in}}$ and $W_{\text{out}}$ | $2DF$ | 2 (bf16) | $4DF$ |",
      r"| Gradients $dW_{\text{in}}$ and $dW_{\text{out}}$ | $2DF$ | 2 (bf16) | $4DF$ |",
      r"| Adam m | $2DF$ | 4 (fp32) | $8DF$ |", r"| Adam v | $2DF$ | 4 (fp32) | $8DF$ |",
      r"| Activations $X$ and $H$ | $B(D + F)$ | 2 (bf16) | $2B(D + F)$ |"]),
    ("Parameters, gradients, optimizer depend only on the model, never on batch size",
     ["| $8DF$ | the model only |", "not at all |"]),
    ("Activations scale with B", ["| linearly | linearly | not at all |"]),
    ("FLOPs = 6 · params · tokens = 12BDF per block", [r"12BDF = 6 \cdot N_{\text{param}} \cdot B"]),
    ("why data parallelism shards activations; why FSDP also shards the fixed model block",
     ["so each replica has 1/n of them", "ZeRO and FSDP shard them too"]),
]


@pytest.mark.parametrize("statement, shown", STATEMENTS, ids=[s[:40] for s, _ in STATEMENTS])
def test_the_seed_statement_is_on_the_sheet(ffn, statement: str, shown: list[str]) -> None:
    _, _, text = ffn
    for piece in shown:
        assert piece in text, f"seed: {statement!r}: the sheet does not say {piece!r}"


def test_the_seed_numbers_are_the_engine_s(ffn) -> None:
    """The seed's figures, by hand: P = 2DF; forward 4BDF = 2BP; backward 8BDF =
    4BP; training 12BDF = 6BP; fixed memory 8DF elements (params, grads, m, v:
    2DF each), 24DF bytes at 2 + 2 + 4 + 4; activations B(D + F) elements."""
    d, c, _ = ffn
    B, D, F = (d.layer.dim_symbols[n] for n in "BDF")
    P = 2 * D * F
    assert c.params == P
    assert c.flops_forward == 2 * B * P and c.flops_backward == 4 * B * P
    assert sympy.expand(c.flops_total - 6 * B * P) == 0
    m = c.memory()
    assert sympy.expand(m["params"] + m["grads"] + m["optimizer"] - 8 * D * F) == 0
    assert m["fixed_bytes"] == 24 * D * F
    assert c.activations == sympy.expand(B * (D + F))
