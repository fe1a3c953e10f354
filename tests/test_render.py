"""Derivation sheets: the FFN sheet against the seed, escaping, templates, PDFs.

The expected formulas are the seed cheatsheet's (../shared/seeds/000), written
here by hand in the LaTeX the sheet uses.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import symflops
from symflops.commands.build import build
from symflops.commands.pdf import compile_pdf
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.escape import escape_md, escape_tex
from symflops.sheets.render import render
import forked

ROOT = Path(__file__).resolve().parent.parent
DERIVATIONS = sorted((ROOT / "derivations").glob("*.yaml"))
NEEDS_PDF = os.environ.get("CI") == "true"  # CI installs TeX Live; there the PDF check must run


def run_cli(*args, cwd=None):
    return forked.run(*map(str, args), cwd=cwd)


def sheet(fmt, path=ROOT / "derivations" / "ffn.yaml", configs=()):
    d = with_patterns(symflops.derive(symflops.load(path)))
    return render(d, explain(d, costs(d), configs), fmt)


# What the seed derives for the feed-forward block, as it must appear on the sheet.
FFN_FORMULAS = [
    r"H_{bf} = \sum_{d} X_{bd}\, (W_{\text{in}})_{df}",           # forward, index form
    r"H = X\, W_{\text{in}}",                                      # forward, matrix form
    r"Y = H\, W_{\text{out}}",
    # the seed's P is N_param here: a sheet never names a count like a tensor (softmax's P)
    r"2BDF + 2BDF = 4BDF = 2 \cdot N_{\text{param}} \cdot B",      # forward total = 2BP
    r"N_{\text{param}} = DF + DF = 2DF",
    # the seed's generic rules, derived in the first op's own names (Y = XW is H = X W_in)
    r"\boxed{dW_{\text{in}} = X^\top\, dH}",
    r"\boxed{dX = dH\, W_{\text{in}}^\top}",
    r"\delta_{dd'}",                                               # from Kronecker deltas
    r"dW_{\text{out}} = H^\top\, dY",                              # the four backward products
    r"dH = dY\, W_{\text{out}}^\top",
    r"dW_{\text{in}} = X^\top\, dH",
    r"dX = dH\, W_{\text{in}}^\top",
    r"2BDF + 2BDF + 2BDF + 2BDF = 8BDF = 4 \cdot N_{\text{param}} \cdot B",  # backward = 2x fwd
    r"12BDF = 6 \cdot N_{\text{param}} \cdot B",                   # training
    r"dY \;\longrightarrow\; dH \;\longrightarrow\; dX",           # the chain
    "1 : 2",                                                       # forward : backward
]


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_ffn_sheet_has_the_seed_derivation(fmt):
    text = sheet(fmt)
    for formula in FFN_FORMULAS:
        assert formula in text, formula


def test_ffn_memory_table_follows_the_seed_policy():
    text = sheet("md")
    # Seed 000, section 5: params 2DF at 2 bytes (bf16), grads 2DF, Adam m and v 2DF at 4 (fp32),
    # activations X, H: B(D + F) at 2 bytes, scaling with the batch.
    # Each row says what it grows with, in words (issue 27): the model's rows not at all.
    assert r"| Parameters $W_{\text{in}}$ and $W_{\text{out}}$ | $2DF$ | 2 (bf16) | $4DF$ | the model only |" in text
    assert r"| Adam m | $2DF$ | 4 (fp32) | $8DF$ | the model only |" in text
    assert r"| Adam v | $2DF$ | 4 (fp32) | $8DF$ | the model only |" in text
    assert (r"| Activations $X$ and $H$ | $B(D + F)$ | 2 (bf16) | $2B(D + F)$ | linearly with the "
            r"tokens in the batch $B$ |") in text
    # the card: 24DF bytes fixed (12 per parameter), 2B(D + F) of activations
    assert r"Weights, gradients and optimizer state (bytes): $24DF$" in text
    assert r"$X$ and $H$: $2B(D + F)$" in text


def test_a_zero_count_is_not_written_per_parameter():
    # norms.yaml has no matmul-type products: its total is 0, not "0 = 0 P";
    # ffn's 4BDF is written 2 N_param B beside it (N_param = 2DF parameters).
    norms = sheet("md", ROOT / "derivations" / "norms.yaml")
    assert "Forward total: $0$ FLOPs in matmul-type products" in norms
    assert r"0 \cdot N" not in norms
    assert r"$4BDF = 2 \cdot N_{\text{param}} \cdot B$" in sheet("md")


def test_inference_peak_says_which_is_largest_only_when_there_is_a_choice():
    one = sheet("md", ROOT / "derivations" / "norms.yaml")
    assert "the most that is live at once is $" in one and "which one is largest" not in one
    several = sheet("md", ROOT / "derivations" / "moe.yaml")
    assert "the most that is live at once is the largest of $" in several
    assert "elements of activations (which one is largest depends on the sizes)." in several


def test_inference_candidates_on_the_sheet_are_those_of_the_json():
    # moe.yaml defines C = c k B S / M; substituted, one candidate,
    # BS(2kc + 3D + 2k + 1), is bounded by BS(Dkc + 2kc + 2D + 3k + 1) for
    # every c, k >= 1 (Dkc >= D, 3k >= 2k), so neither lists it.
    import sympy

    from symflops.derive.backward import derive
    from symflops.declaration.reader import load
    from symflops.count.summary import summary

    path = ROOT / "derivations" / "moe.yaml"
    d = derive(load(str(path)))
    peak = summary(d, costs(d)).memory.inference_peak
    text = sheet("md", path)
    line = next(l for l in text.splitlines() if l.startswith("In inference"))
    assert isinstance(peak, sympy.Max) and line.count("$BS(") == len(peak.args) == 9
    assert "$BS(2kc + 3D + 2k + 1)$" not in line


def test_numbers_table_at_the_toy_layer_sizes():
    import sympy

    text = sheet("md", configs=[{"B": sympy.Integer(10), "D": sympy.Integer(4), "F": sympy.Integer(3)}])
    # 2 products of 2*10*4*3 = 240 forward; 4 backward; 12 * 10 * 4 * 3 = 1440 in all.
    # The --at column is the last one (ffn's declared examples come first).
    lines = text.splitlines()
    assert next(l for l in lines if l.startswith("| forward (FLOPs) |")).endswith("| $480$ |")
    assert next(l for l in lines if l.startswith("| training (FLOPs) |")).endswith("| $1{,}440$ |")


@pytest.mark.parametrize("path", DERIVATIONS, ids=[p.stem for p in DERIVATIONS])
def test_committed_sheets_are_fresh(path):
    """build/NAME.md and .tex are what the engine renders (both formats from
    one derivation, as a build makes them).  The layout tests
    (tests/test_layout.py) and others read these committed files."""
    d = with_patterns(symflops.derive(symflops.load(path)))
    c = explain(d, costs(d), ())
    for fmt in ("md", "tex"):
        built = ROOT / "build" / f"{path.stem}.{fmt}"
        assert built.exists(), f"{built} missing: run `symflops build`"
        assert built.read_text() == render(d, c, fmt), f"{built} is stale: run `symflops build`"


HOSTILE_TITLES = [r"\input{/etc/passwd}", "$x$_%&#", r"}\end{document}", "<script>x</script> *a* `b`"]


def hostile_layer(title, tmp_path):
    path = tmp_path / "evil.yaml"
    text = (ROOT / "derivations" / "ffn.yaml").read_text()
    quoted = title.replace("'", "''")
    path.write_text(text.replace("title: Transformer feed-forward block", f"title: '{quoted}'")
                    .replace("B: tokens in the batch", f"B: '{quoted}'"))
    return path


@pytest.mark.parametrize("title", HOSTILE_TITLES)
def test_user_text_is_escaped(title, tmp_path):
    path = hostile_layer(title, tmp_path)
    md, tex = sheet("md", path), sheet("tex", path)
    assert escape_md(title) in md and title not in md.replace(escape_md(title), "")
    assert escape_tex(title) in tex
    assert r"\input{/etc/passwd}" not in tex


@pytest.mark.skipif(not shutil.which("pdflatex") and not NEEDS_PDF, reason="pdflatex not installed")
@pytest.mark.parametrize("title", HOSTILE_TITLES[:3])
def test_hostile_title_prints_literally_in_the_pdf(title, tmp_path):
    pdf = compile_pdf(sheet("tex", hostile_layer(title, tmp_path)), "evil")
    (tmp_path / "evil.pdf").write_bytes(pdf)
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(tmp_path / "evil.pdf"), "-"],
                              capture_output=True, text=True).stdout
        assert title.replace(" ", "") in text.replace(" ", "").replace("\n", "")


def test_missing_template_variable_fails_loudly(tmp_path):
    (tmp_path / "sheet.md.j2").write_text("# {{ title }}\n{{ no_such_variable }}\n")
    result = run_cli("render", ROOT / "derivations" / "ffn.yaml", "--templates", tmp_path)
    assert result.returncode == 2
    assert "no_such_variable" in result.stderr and "undefined" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_user_template_directory_overrides_by_name(tmp_path):
    (tmp_path / "sheet.md.j2").write_text(
        "{% extends 'base.md.j2' %}{% block body %}Training: ${{ training_total }}$ (mine){% endblock %}")
    result = run_cli("render", ROOT / "derivations" / "ffn.yaml", "--templates", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Training: $12BDF$ (mine)" in result.stdout
    assert "# Transformer feed-forward block" in result.stdout  # the shipped base still applies


def test_build_keeps_old_files_of_a_failing_declaration(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    shutil.copy(ROOT / "derivations" / "ffn.yaml", src / "ffn.yaml")
    shutil.copy(ROOT / "derivations" / "ffn.yaml", src / "other.yaml")
    assert run_cli("build", "--src", src, "--out", out, "--format", "md").returncode == 0
    before = (out / "other.md").read_text()
    (src / "other.yaml").write_text("dims: {B: b}\ntensors: {}\nops:\n  - Y[b] = Z[b]\n")
    (out / "ffn.md").write_text("old")
    result = run_cli("build", "--src", src, "--out", out, "--format", "md")
    assert result.returncode == 2
    assert "other.yaml:4:12: error: unknown tensor 'Z'" in result.stderr
    assert (out / "other.md").read_text() == before      # untouched
    assert (out / "ffn.md").read_text() != "old"          # the good one was rebuilt
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]


def test_render_to_file_is_atomic_and_reports(tmp_path):
    target = tmp_path / "ffn.tex"
    result = run_cli("render", ROOT / "derivations" / "ffn.yaml", "--format", "tex", "-o", target)
    assert result.returncode == 0 and f"wrote {target}" in result.stdout
    assert target.read_text().startswith("\\documentclass")


def test_at_naming_an_unknown_dim_is_an_error():
    result = run_cli("render", ROOT / "derivations" / "ffn.yaml", "--at", "B=1,D=2,Q=3")
    assert result.returncode == 2 and "has no dimension 'Q'" in result.stderr


def test_notebook_display_is_the_sheet():
    d = symflops.derive(symflops.load(ROOT / "derivations" / "ffn.yaml"))
    assert d._repr_markdown_().startswith("# Transformer feed-forward block")


def test_numbers_table_of_a_layer_with_a_defined_dim(tmp_path):
    """llama_block defines R = N/G: --at gives the free dims and R follows.
    Parameters by hand at D=64, N=32, G=8 (R=4), E=2, F=16: W_q and W_o
    D G R E = 4096 each, W_k and W_v D G E = 1024 each, three MLP matrices
    3 D F = 3072, two gains 2 D = 128: 13,440."""
    from symflops.cli import main

    out = tmp_path / "sheet.md"
    assert main(["render", "derivations/llama_block.yaml", "--at",
                 "B=1,S=8,D=64,N=32,G=8,E=2,F=16", "-o", str(out)]) == 0
    params = next(l for l in out.read_text().splitlines() if l.startswith("| parameters (elements) |"))
    assert params.endswith("| $13{,}440$ |")  # the --at column, after the declared examples
    src = tmp_path / "src"
    src.mkdir()
    (src / "llama_block.yaml").write_text(open("derivations/llama_block.yaml").read())
    assert main(["build", "--src", str(src), "--out", str(tmp_path / "b"), "--format", "md",
                 "--at", "B=1,S=8,D=64,N=32,G=8,E=2,F=16"]) == 0
    assert "$13{,}440$" in (tmp_path / "b" / "llama_block.md").read_text()
    # G = 5 makes R = 6.4: refused, naming the declaration, not silently left out
    assert main(["build", "--src", str(src), "--out", str(tmp_path / "c"), "--format", "md",
                 "--at", "B=1,S=8,D=64,N=32,G=5,E=2,F=16"]) == 2
