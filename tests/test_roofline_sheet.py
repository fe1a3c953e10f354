"""The sheet's section "Compute or memory bound?" and its roofline figure,
checked against counts done by hand in the test."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from symflops.cli import main

DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"


def sheet(tmp_path, name, fmt="md"):
    out = tmp_path / f"{name}.{fmt}"
    assert main(["render", str(DERIVATIONS / f"{name}.yaml"), "--format", fmt,
                 "-o", str(out)]) == 0
    text = out.read_text()
    return text[text.index("Compute or memory bound?"):]


def test_the_ffn_section_at_gpt2_small(tmp_path):
    section = sheet(tmp_path, "ffn")
    # GPT-2 small MLP, B = 1024, D = 768, F = 3072, bf16: H = X W_in does
    # 2 B D F = 4,831,838,208 FLOPs and moves 2 (B D + D F + B F) = 12,582,912 bytes:
    # 384 FLOPs per byte, above both ridges (295.2 on H100, 240.5 on TPU v5e)
    assert ("| $H$ | $1$ | $4.832 \\times 10^{9}$ | $1.258 \\times 10^{7}$ | $384$ "
            "| compute | compute |") in section
    # B > D F I / (D F - I (D + F)) with I = 989e12 / 3.35e12 = 19780/67
    ridge = Fraction(19780, 67)
    d, f = 768, 3072
    least = d * f * ridge / (d * f - ridge * (d + f))
    assert f"$B > {float(least):.4g}$ on h100-sxm" in section
    # as D and F grow the intensity tends to B: the scaling book's B > 240 and B > 295
    assert "the intensity tends to $B$: $B > 295.2$ on h100-sxm, $B > 240.5$ on tpu-v5e" \
        in section
    assert "No decoding step" in section       # ffn declares no tokens: or sequences:
    assert "## Appendix: where the backward rules come from" in section  # in the appendix, before the derivations


def test_attention_at_decode_is_listed_as_never_compute_bound(tmp_path):
    section = sheet(tmp_path, "llama_block")
    # a decoding step of Llama-2-7B's block: every op has intensity below ~1 FLOP per
    # byte (the weights read for one token each), far below either ridge
    assert "(every op memory-bound;" in section
    never = section[section.index("- never at the other dims"):].splitlines()[0]
    # at the prefill, B = 1: the softmax P (3 FLOPs per element read and written at
    # 2 + 2 bytes) and the gate M (5 FLOPs per 3 elements of 2 bytes) stay below 1 FLOP
    # per byte at any B; the scores A = Q K^T and the mixing O = P V read the S x S
    # probabilities of each head, which grow with B as the FLOPs do: their intensity
    # does not grow with B, ~114 here (E = 128 FLOPs per score element, less the
    # causal half), below either ridge
    for op in ("A", "P", "O", "M"):
        assert f"{op}," in never or f"{op}$" in never


def test_the_tex_section_and_the_figure_files(tmp_path):
    section = sheet(tmp_path, "ffn", "tex")
    assert section.startswith("Compute or memory bound?}") and "longtable" in section
    from symflops.count.cost import costs
    from symflops.count.explain import explain
    from symflops.declaration.reader import load
    from symflops.derive.backward import derive
    from symflops.sheets.figures import figures_of

    d = derive(load(DERIVATIONS / "ffn.yaml"))
    names = [f.filename for f in figures_of(d, explain(d, costs(d))).files]
    assert "ffn.roofline.png" in names and "ffn.roofline.pdf" in names


@pytest.mark.parametrize("name", ["attention_sliding_window", "moe_block", "linear_recurrence"])
def test_every_kind_of_layer_gets_the_section(tmp_path, name):
    # a window (Min in the counts), an MoE (no decoding step), a recurrence
    section = sheet(tmp_path, name)
    assert "h100-sxm" in section and "tpu-v5e" in section


def test_the_analysis_is_made_once_for_the_same_records_and_values():
    """A sheet's formats and its figure read one analysis: the same records at
    the same values give the same object; other values, or another layer's
    records, are analysed afresh (intensity of H = X W_in by hand: at B = 1024,
    D = 768, F = 3072 it is 384 FLOPs per byte; at B = 2 it is
    2 B D F / 2 (B D + D F + B F) = 4,718,592 / 2,371,584 = 1.99...)."""
    from symflops.count.cost import costs
    from symflops.declaration.reader import load
    from symflops.derive.backward import derive
    from symflops.sheets.roofline import sheet_roofline

    def made(name):
        d = derive(load(str(DERIVATIONS / f"{name}.yaml")))
        return d, costs(d)

    d, c = made("ffn")
    big = {"B": 1024, "D": 768, "F": 3072}
    first = sheet_roofline(d, c, big, "GPT-2 small")
    assert sheet_roofline(d, c, dict(big), "GPT-2 small") is first
    small = sheet_roofline(d, c, {**big, "B": 2}, "GPT-2 small")
    assert small is not first

    def intensity(r):
        (h,) = [o for o in r.forward.bounds[0].ops if o.entry.label == "H"]
        return h.intensity

    assert intensity(first) == 384
    assert intensity(small) == Fraction(2 * 2 * 768 * 3072, 2 * (2 * 768 + 768 * 3072 + 2 * 3072))
    d2, c2 = made("ffn")                      # equal records, other objects: analysed again
    again = sheet_roofline(d2, c2, big, "GPT-2 small")
    assert again is not first and intensity(again) == 384
