"""A loop's sheet says where the totals its rules read come from: the
reverse loop, each total the sum of the rules of every place that reads the
tensor, the state's one step on.

The expected lines are derived here by hand with the chain rule, for a
delta-rule loop written for this test (no gate, the output reads the new
values directly):

    N_c = V_c - K_c S_{c-1};   O_c = Q_c S_{c-1} + N_c;   S_c = S_{c-1} + K_c^T N_c

N_c is read by O_c (gradient dO_c) and by S_c (K_c G_S,c); S_c is read, as
the previous state, by the three statements of step c+1: -K_{c+1}^T G_N,c+1,
Q_{c+1}^T dO_{c+1} and G_S,c+1.  Nothing follows the last step.
"""

from __future__ import annotations

import symflops
from symflops.checks.verify import verify
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.render import render

DIMS = {"C": "chunks", "L": "chunk length", "E": "key width", "P": "value width"}
OPS = ["N[c,l,p] = V[c,l,p] - K[c,l,e] S[c-1,e,p]",
       "O[c,l,p] = Q[c,l,e] S[c-1,e,p] + N[c,l,p]",
       "S[c,e,p] = S[c-1,e,p] + K[c,l,e] N[c,l,p]"]


def _layer():
    return symflops.declare("delta", dims=DIMS, tensors={
        "V": {"shape": ["C", "L", "P"], "role": "input"},
        "K": {"shape": ["C", "L", "E"], "role": "input"},
        "Q": {"shape": ["C", "L", "E"], "role": "input"}}, ops=OPS)


def _sheet(fmt: str) -> str:
    d = with_patterns(symflops.derive(_layer()))
    return render(d, explain(d, costs(d), ()), fmt)


def test_the_totals_of_the_reverse_loop_by_hand():
    text = _sheet("md")
    g_n = r"(G_{\text{N}})_{clp} &= dO_{clp} + \sum_{e} K_{cle}\, (G_{\text{S}})_{cep} \\"
    g_s = (r"(G_{\text{S}})_{cep} &= -\sum_{l} K_{c+1,l,e}\, (G_{\text{N}})_{c+1,l,p} + "
           r"\sum_{l} Q_{c+1,l,e}\, dO_{c+1,l,p} + (G_{\text{S}})_{c+1,e,p}")
    lines = text.splitlines()
    assert g_n in lines and g_s in lines
    assert "zero at the last step, $c = C - 1$, since no step follows it" in text
    # the reverse loop's products: -K^T G_N and Q^T dO at every step but the
    # first (step 0 has no previous state), K G_S at every step but the last,
    # each 2 L E P FLOPs a step: 3 x 2 L E P (C - 1)
    assert "The reverse loop costs $6LEP(C - 1)$ FLOPs in matrix products" in text
    assert text.index(g_n) < text.index("## Appendix: conventions")


def test_the_latex_sheet_has_the_same_lines():
    text = _sheet("tex")
    assert r"(G_{\text{S}})_{cep} &= -\sum_{l} K_{c+1,l,e}" in text
    assert "since no step follows it" in text


def test_the_reverse_loop_the_sheet_shows_passes_verify():
    """The totals are what the rules run (the engine's records): verify checks
    the rules' gradients against finite differences."""
    assert verify(symflops.derive(_layer()), seed=3, use_torch=False).passed
