"""``plan --hf-config`` without --seq plans at the config's context length
(max_position_embeddings) and says so; with --seq, --phase or --steps nothing
changes."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from symflops.cli import main
from test_hf_import import GPT2_SMALL, LLAMA2_7B


def plan(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def llama(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    return str(path)


LINE = ("sequence length: no --seq given, so T = 4,096 tokens, the config's context length "
        "(max_position_embeddings); give --seq T for another")


def test_without_seq_the_plan_is_the_plan_at_the_context_length_and_says_so(llama):
    assert LLAMA2_7B["max_position_embeddings"] == 4096
    code, out, err = plan("--hf-config", llama, "--tokens", "2e12")
    code_at, out_at, _ = plan("--hf-config", llama, "--tokens", "2e12", "--seq", "4096")
    assert (code, err, code_at) == (0, "", 0)
    assert out == out_at.rstrip("\n") + "\n\n" + LINE + "\n"
    # 6*E*L*N*S + 6*E*L*N at E=128, L=N=32, S=4096: 6*131072*4097 = 3,221,999,616
    assert "attention per token at T = 4,096" in out and "F_attn = 6*E*L*N*S + 6*E*L*N = 3.222e9" in out


def test_the_json_says_the_default_and_its_key(llama):
    _, out, _ = plan("--hf-config", llama, "--tokens", "2e12", "--json")
    _, out_at, _ = plan("--hf-config", llama, "--tokens", "2e12", "--seq", "4096", "--json")
    data, at = json.loads(out), json.loads(out_at)
    assert data["declaration"].pop("default_seq_len") == {"seq_len": 4096,
                                                          "key": "max_position_embeddings"}
    assert data == at


def test_per_token_figures_without_a_run_use_the_default_too(llama):
    _, out, _ = plan("--hf-config", llama)
    assert out.rstrip("\n").endswith(LINE) and "FLOPs per token at T = 4,096" in out


def test_gpt2_s_context_key_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2_SMALL))
    code, out, _ = plan("--hf-config", str(path), "--tokens", "1e9")
    assert code == 0 and "FLOPs per token at T = 1,024" in out
    assert out.rstrip("\n").splitlines()[-1].startswith(
        "sequence length: no --seq given, so T = 1,024 tokens, the config's context length (n_positions")


@pytest.mark.parametrize("given", [["--seq", "2048"], ["--phase", "1e12@2048"]])
def test_a_given_length_is_used_and_nothing_is_said(llama, given):
    _, out, _ = plan("--hf-config", llama, *(["--tokens", "1e12"] if given[0] == "--seq" else []),
                     *given)
    assert "T = 2,048" in out and "no --seq given" not in out


def test_steps_and_batch_still_need_seq(llama):
    code, out, err = plan("--hf-config", llama, "--steps", "10", "--batch", "8")
    assert code == 2 and "--seq missing" in err
