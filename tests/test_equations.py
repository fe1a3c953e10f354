"""Every equality a shipped sheet displays is true.

The sheet prints its equalities from :class:`symflops.sheets.equations.Equation`
records only (``SheetContext.equations``); here each link ``a = b`` of every
record of every shipped sheet is proven by expanding ``a - b`` to zero with
SymPy, and each printed record is found in the rendered sheet, so the records
proven are the equations shown.  The regression cases below are equalities a
reader found false on earlier sheets; their expected values are written by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.context import sheet_context
from symflops.sheets.equations import Equation, Part, Printer, chain, grouped, side
from symflops.sheets.printing import PolyPrinter

from committed import committed_sheet
import forked

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(p.name for p in (ROOT / "derivations").glob("*.yaml"))


def _context(name: str, fmt: str):
    d = with_patterns(symflops.derive(symflops.load(str(ROOT / "derivations" / name))))
    counts = explain(d, costs(d), ())
    return d, counts, sheet_context(d, counts, fmt)


@pytest.mark.parametrize("name", SHEETS)
def test_every_displayed_equality_holds(name: str) -> None:
    d, counts, ctx = _context(name, "md")
    assert ctx["equations"], "a sheet displays at least its totals"
    text = committed_sheet(name)
    for eq in ctx["equations"]:
        for a, b in eq.links():
            assert sympy.expand(a - b) == 0, f"{name}: {a} != {b} in {eq}"
    shown = {Printer(_poly(d))(eq) for eq in ctx["equations"]}
    for line in shown:
        assert line in text, f"{name}: a proven equation is not on the sheet: {line}"


def _poly(d):
    """The printer the sheet uses (defined dims substituted)."""
    from symflops.sheets.notation import Substituted
    layer = d.layer
    return Substituted(PolyPrinter(tuple(x.name for x in layer.dims)),
                       tuple(layer.substitutions.items()))


def test_a_false_link_is_caught() -> None:
    """The check is not vacuous: one block's terms beside the whole model's total fail."""
    L, D, F = sympy.symbols("L D F")
    one_block = grouped([2 * D * F, 2 * D * F], [1, 1])          # the bug: L dropped
    assert not chain(one_block, side(4 * L * D * F)).holds()
    assert chain(grouped([2 * D * F, 2 * D * F], [L, L]), side(4 * L * D * F)).holds()


def test_repeated_blocks_are_shown_as_copies_times_one_block() -> None:
    """llama: N_param = VD + D + VD + L x (one block's parameters) = the total
    (hand count: embedding VD, final gain D, unembedding VD; per block two
    gains 2D, W_q and W_o DNE each, W_k and W_v DGE each, three MLP matrices DF)."""
    d, counts, ctx = _context("llama.yaml", "md")
    s = d.layer.dim_symbols
    L, V, D, N, G, F, E = (s[k] for k in "LVDNGFE")
    sub = lambda e: sympy.expand(e.subs(d.layer.substitutions))  # R = N / G
    p = next(eq for eq in ctx["equations"] if eq.name is not None and "param" in eq.name.latex)
    block = [x for x in p.sides[0] if x.factors]
    assert len(block) == 1 and block[0].factors[0].value == L
    assert sub(block[0].value - L * (2 * D + 2 * D * N * E + 2 * D * G * E + 3 * D * F)) == 0
    assert sub(p.name.value - (2 * V * D + D + L * (2 * D + 2 * D * N * E + 2 * D * G * E
                                                   + 3 * D * F))) == 0
    assert r"L \times (" in ctx["P"] and r"L \times (" in ctx["forward_line"]
    assert r"L \times (" in ctx["backward_line"]


@pytest.mark.parametrize("name", ["llama.yaml", "moe.yaml", "transformer.yaml", "attention.yaml",
                                  "conv1d.yaml"])
def test_derived_quantities_take_no_declared_name(name: str) -> None:
    """The parameter count is never called P (the softmax's P) or N (heads), and
    the loss is never L (layers)."""
    d, counts, ctx = _context(name, "md")
    text = committed_sheet(name)
    assert "$P = " not in text and "$N = " not in text and "$6N = " not in text
    assert r"\partial L " not in text and r"\partial L}" not in text
    assert r"N_{\text{param}}" in ctx["P"]


def test_printer_shows_products_sums_and_named_counts() -> None:
    B, D, F = sympy.symbols("B D F")
    poly = PolyPrinter(("B", "D", "F"))
    say = Printer(poly)
    n = __import__("symflops.sheets.equations", fromlist=["Named"]).Named.of("N", 2 * D * F)
    from symflops.sheets.equations import Factor
    eq = Equation((side(2 * B * D * F, 2 * B * D * F), side(4 * B * D * F),
                   (Part(factors=(Factor(2 * B),), named=n),)))
    assert say(eq) == r"2BDF + 2BDF = 4BDF = 2 \cdot N \cdot B"
    assert eq.holds()
    assert not Equation((side(4 * B * D * F), (Part(factors=(Factor(3 * B),), named=n),))).holds()


def _md(name: str) -> str:
    return committed_sheet(name)


def test_a_gradient_with_several_contributions_is_shown_as_their_sum() -> None:
    """LoRA: X is read by the frozen W0 and by A_lo, so dX = dY W0^T + dU A_lo^T
    (hand derivation: Y = X W0 + (X A_lo) B_lo, U = X A_lo); no row claims dX = dY W0^T."""
    text = _md("lora.yaml")
    assert (r"$dX = {dX}^{(1)} + {dX}^{(2)} = dY\, \mathit{W0}^\top + dU\, A_{\text{lo}}^\top$"
            in text)
    assert r"$dX = dY\, \mathit{W0}^\top$" not in text
    # llama: the normalised input feeds W_q, W_k, W_v: one sum of three parts.
    llama = _md("llama.yaml")
    assert (r"d\mathit{Xn}_{btd} = {d\mathit{Xn}}^{(1)}_{btd} + {d\mathit{Xn}}^{(2)}_{btd}"
            r" + {d\mathit{Xn}}^{(3)}_{btd}") in llama


def test_the_gradient_flow_is_a_chain_only_when_it_is_one() -> None:
    """ffn: dY -> dH -> dX is a chain; LoRA's dX needs dY and dU, which is not."""
    assert r"dY \;\longrightarrow\; dH \;\longrightarrow\; dX" in _md("ffn.yaml")
    lora = _md("lora.yaml")
    assert r"\longrightarrow" not in lora
    assert r"- $dX \leftarrow dY, dU$" in lora


def test_read_by_lists_cite_rules_by_name_and_the_table_holds_them_whole() -> None:
    """A saved tensor's rules are cited by the gradient they compute, never as a
    truncated equation; the row of that gradient holds the whole rule: the
    norms' dX its second term (a short layer says on the rule's own line what
    it reads and keeps), the loss's dZ its -[v = y] term, the causal softmax's
    dA its sum (a long layer's saved table cites the rules by name)."""
    norms = _md("norms.yaml")
    row = next(x for x in norms.splitlines() if x.startswith("- ${dX}^{(1)}_{bd} = "))
    assert r"- \sum_{e} \frac{1}{D}\, X_{bd}" in row
    assert "It reads $X$, so $X$ is kept" in norms
    llama = _md("llama.yaml")
    assert "| $y$ | $BS$ | $dZ$ |" in llama
    row = next(x for x in llama.splitlines() if "| $dZ$ |" in x)
    assert r"- \frac{1}{B S}\, [v = y_{bs}]\, d\mathit{Loss}" in row
    row = next(x for x in llama.splitlines() if "| $dA$ " in x)
    assert r"- \sum_{u} P_{bgrst}\, P_{bgrsu}\, dP_{bgrsu}" in row


@pytest.mark.parametrize("name", ["attention_causal.yaml", "llama.yaml", "moe.yaml",
                                  "transformer.yaml"])
def test_a_causal_softmax_is_shown_with_its_mask(name: str) -> None:
    """P_st = e^{A_st} / sum_{u <= s} e^{A_su} for t <= s, 0 otherwise; the
    derivative SymPy takes is of that form, not of the unmasked softmax."""
    text = _md(name)
    assert r"\sum_{u=0}^{S - 1} e^{" not in text
    assert r"\sum_{u=0}^{s} e^{" in text
    assert r"\text{for}\: s \geq t \\0 & \text{otherwise}" in text
    assert r"\text{for}\: s \geq t \wedge s \geq t'" in text


def test_the_masked_softmax_forward_is_the_numeric_one() -> None:
    """The displayed masked formula, evaluated with numpy, equals the op's own
    numeric forward (a row of length S: entries past s are 0, the rest sum to 1)."""
    import numpy as np
    d = symflops.derive(symflops.load(str(ROOT / "derivations" / "attention_causal.yaml")))
    op = next(o for o in d.layer.ops if getattr(o, "kind", None) == "softmax")
    shown = op.formula()
    S = 5
    A = np.random.default_rng(0).normal(size=(S, S))
    sym = {str(x): x for x in shown.free_symbols}
    value = np.zeros((S, S))
    for s in range(S):
        for t in range(S):
            e = shown.subs({sym["s"]: s, sym["t"]: t}).doit()
            e = e.replace(lambda x: isinstance(x, sympy.Indexed),
                          lambda x: sympy.Float(A[int(x.indices[0]), int(x.indices[1])]))
            value[s, t] = float(e)
    want = np.tril(np.exp(A)) / np.tril(np.exp(A)).sum(axis=1, keepdims=True)
    assert np.allclose(value, want)


@pytest.mark.parametrize("name", SHEETS)
def test_no_letter_of_a_rule_is_printed_like_a_dim(name: str) -> None:
    """MoE's capacity factor is the dim c: no rule may sum over a letter c
    (the lookup letters of the combine are chosen apart from every dim's name)."""
    d = symflops.derive(symflops.load(str(ROOT / "derivations" / name)))
    dims = {x.name for x in d.layer.dims}
    for r in d.rules:
        letters = {i for t in r.terms for f in (t.output, *t.operands) for i in f.indices}
        assert not letters & dims, f"{name}: {r.grad} uses {letters & dims}"


def test_the_moe_combine_is_not_called_a_copy() -> None:
    """Y = Y1 + Gt[b,s,j] Ye[ex, sl, d] multiplies: 2BSDk FLOPs (hand count: one
    multiply-add per (b, s, j, d)), so its note must not say 'no multiply-add'."""
    text = _md("moe_block.yaml")
    assert r"| $Y_{bsd} = \mathit{Y1}_{bsd} + " in text       # op 20, counted 2BSDk
    line = next(x for x in text.splitlines() if x.startswith("- Op 20: "))
    assert "no multiply-add" not in line and "copies" not in line
    assert "are read where" in line


def test_repeats_are_shown_in_the_body_not_only_in_the_summary() -> None:
    """llama: the block's ops, backward rows and saved tensors say they run L times."""
    text = _md("llama.yaml")
    assert "| 4 ($\\times L$) | $Q_{bsgre} = " in text          # the forward table marks them
    assert "runs in each of the $n$ copies of a repeated block" in text
    assert r"| $dW_{\text{q}}$ ($\times L$) |" in text
    assert r"| $Q$ | $L \times BSNE$ | $dK$ |" in text             # the saved table
    assert r"| $dW_{\text{U}}$ |" in text                 # the head runs once


def test_render_at_a_named_configuration_of_a_model_with_defined_dims() -> None:
    """llama defines R = N / G: `render --at` with the free dims works (it
    exited 70 on the unbound R), and giving R too is refused with exit 2."""
    at = "L=32,V=32000,B=1,S=4096,D=4096,N=32,G=32,E=128,F=11008"
    run = lambda *a: forked.run(*a, cwd=ROOT)
    ok = run("render", "derivations/llama.yaml", "--at", at)
    assert ok.returncode == 0, ok.stderr
    # Llama-2-7B: 6,738,415,616 parameters (its published count)
    assert r"| parameters (elements) | $6.738 \times 10^{9}$" in ok.stdout
    bad = run("render", "derivations/llama.yaml", "--at", at + ",R=1")
    assert bad.returncode == 2 and "defined by a formula" in bad.stderr
    assert "Traceback" not in bad.stderr
