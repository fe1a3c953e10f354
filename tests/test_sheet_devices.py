"""The sheet's section "On many devices" (templates/devices.*.j2, symflops/sheets/devices.py).

ffn.yaml names How to Scale Your Model's mixed FSDP and tensor parallelism
(``parallel: {dp: n_dp, tp: n_tp, zero: 3}``; jax-ml/scaling-book at 0819a7d,
training.md).  The expected figures are derived here by hand:

- W_in[D, F] in bf16 (2 bytes), its F split over tp, stored flat over dp and
  gathered whole over dp before each use: V = 2·D·F / n_tp bytes, V/W seconds,
  forward and again in the backward pass; its gradient reduce-scattered back
  onto the dp shards, the same V;
- Y = H W_out sums over f, split over tp: an AllReduce of Y's bf16 block of
  B/n_dp rows, V = 2·B·D / n_dp, 2V/W = 4·B·D / (n_dp W_tp);
- data parallelism is compute-bound when B/n_dp > C/W_dp (the book's B/X > C/W):
  4.59e14 / 1.8e11 = 2550 on TPU v5p, 989e12 / 450e9 = 2197.8 on an H100 in its
  NVLink domain;
- the book's X_opt = sqrt(B/F · M_X/M_Y · N) for the FSDP axis, so the tensor axis
  n_tp = N / X_opt = sqrt(F N W_tp / (B W_dp)), compute-bound there when
  B > 4 C² N / (F W_dp W_tp) (B/N > 4 α² / (M_X M_Y F)).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from symflops.cli import run as cli_run

ROOT = Path(__file__).resolve().parent.parent
DERIVATIONS = ROOT / "derivations"
TEMPLATES = ROOT / "templates"


def render(path: Path, out: Path, fmt: str = "md") -> str:
    assert cli_run(["render", str(path), "--format", fmt, "-o", str(out)]) == 0
    return out.read_text()


def section(text: str) -> str:
    start = text.index("## On many devices")
    return text[start:text.index("\n## ", start + 3)]


@pytest.fixture(scope="module")
def ffn(tmp_path_factory):
    return section(render(DERIVATIONS / "ffn.yaml", tmp_path_factory.mktemp("ffn") / "ffn.md"))


def test_the_collectives_of_mixed_fsdp_and_tensor_parallelism(ffn):
    V_w, T_w = r"\frac{2 D F}{n_{\text{tp}}}", r"\frac{2 D F}{W_{\text{dp}} n_{\text{tp}}}"
    rows = [line for line in ffn.splitlines() if line.startswith("| All")
            or line.startswith("| Reduce")]
    assert f"| AllGather | dp | $W_{{\\text{{in}}}}$ | ${V_w}$ | ${T_w}$ (V/W) | forward, once per " \
           "micro-batch |" in rows
    assert f"| ReduceScatter | dp | $dW_{{\\text{{in}}}}$ | ${V_w}$ | ${T_w}$ (V/W) | backward, " \
           "once per micro-batch |" in rows
    assert r"| AllReduce | tp | $Y$ | $\frac{2 B D}{n_{\text{dp}}}$ | " \
           r"$\frac{4 B D}{W_{\text{tp}} n_{\text{dp}}}$ (2V/W) | forward, once per micro-batch |" \
        in rows
    # forward: 2 gathers + 1 AllReduce; backward: 2 gathers, 2 ReduceScatters, 1 AllReduce
    assert len(rows) == 8
    # the seed's closing statements, as the engine's reasons
    assert "W\\_in is stored in shards over dp (ZeRO-3, FSDP) and used whole." in ffn
    assert "`dW_in[d,f] = X[b,d] dH[b,f]`: the sum over b, split over dp, leaves each device " \
           "a partial sum." in ffn


def test_one_device_and_the_thresholds(ffn):
    # 2 bf16 matrices of D F, split n_dp n_tp ways; Adam's two fp32 states of them
    assert r"| weights (bytes) | $\frac{4 D F}{n_{\text{dp}} n_{\text{tp}}}$ |" in ffn
    assert r"| optimizer state (bytes) | $\frac{16 D F}{n_{\text{dp}} n_{\text{tp}}}$ |" in ffn
    assert r"| FLOPs forward | $\frac{4 B D F}{n_{\text{dp}} n_{\text{tp}}}$ |" in ffn
    assert (r"- backward, over dp: $\frac{B}{n_{\text{dp}}} > \frac{C}{W_{\text{dp}}}$, that is "
            r"$B > \frac{C n_{\text{dp}}}{W_{\text{dp}}}$ ($C/W$ in FLOPs per byte: $2197.8$ on "
            r"h100-sxm, $2{,}550$ on tpu-v5p).") in ffn
    assert (r"$n_{\text{tp}} = \sqrt{\frac{F N W_{\text{tp}}}{B W_{\text{dp}}}}$, compute-bound "
            r"there when $B > \frac{4 C^{2} N}{F W_{\text{dp}} W_{\text{tp}}}$") in ffn


def test_no_section_without_strategies(tmp_path):
    text = render(DERIVATIONS / "gelu_mlp.yaml", tmp_path / "g.md")
    assert "On many devices" not in text
    text = render(DERIVATIONS / "gelu_mlp.yaml", tmp_path / "g.tex", "tex")
    assert "On many devices" not in text


def test_the_latex_section(tmp_path):
    text = render(DERIVATIONS / "ffn.yaml", tmp_path / "ffn.tex", "tex")
    start = text.index(r"\section{On many devices}")
    body = text[start:text.index(r"\section{", start + 10)]
    assert r"AllGather & dp & $W_{\text{in}}$ & $\frac{2 D F}{n_{\text{tp}}}$" in body
    assert r"tp $= n_{\text{tp}}$ devices {(}tensor parallel{)}" in body
    assert r"\texttt{dW\_in[d,f] = X[b,d] dH[b,f]}" in body


def test_a_pipeline_has_a_column_per_stage_and_its_bubble(tmp_path):
    """transformer.yaml over tp 2, dp 2 (ZeRO-1) and 2 pipeline stages of 8 micro-batches:
    1F1B's bubble (p - 1)/m = 1/8 of the ideal compute, (p - 1)/(m + p - 1) = 1/9 of the step."""
    shutil.copy(DERIVATIONS / "decoder_block.yaml", tmp_path)
    text = (DERIVATIONS / "transformer.yaml").read_text()
    assert "\nroles:" in text
    text = text.replace("\nroles:", "\nparallel: {tp: 2, pp: 2, micro_batches: 8, dp: 2, "
                                    "zero: 1}\nroles:", 1)
    (tmp_path / "transformer.yaml").write_text(text)
    body = section(render(tmp_path / "transformer.yaml", tmp_path / "t.md"))
    assert "| One device | first stage |last stage |" in body
    assert (r"Pipeline (1f1b): the bubble is $\tfrac{1}{8}$ of the ideal compute time and "
            r"$\tfrac{1}{9}$ of the step") in body


@pytest.mark.parametrize("name", ["devices.md.j2", "devices.tex.j2"])
def test_the_templates_hold_no_formula(name):
    """Derived, never pasted: outside the engine's values, the math the partials write
    is the names of the conventions only (V, C/W, a multiplication sign)."""
    text = (TEMPLATES / name).read_text()
    text = re.sub(r"\{\{.*?\}\}|\(\(\(.*?\)\)\)", "", text)
    math = re.findall(r"\$([^$]*)\$", text)
    assert math and set(math) <= {"V", "C", "W", "C/W", r"\times ", "", " = ", "= "}, set(math)
