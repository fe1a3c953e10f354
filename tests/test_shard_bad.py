"""Bad input to the many-devices options and to ``parallel:``: one line naming the
place (the option, or the declaration's file:line:column) and the fix, exit 2,
no traceback; never a figure computed on a layout that does not exist."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import forked

DERIVATIONS = Path(__file__).resolve().parent.parent / "derivations"
# ffn.yaml without its own strategies (each test below writes its own)
FFN = "".join(line for line in (DERIVATIONS / "ffn.yaml").read_text().splitlines(True)
              if not line.startswith("parallel:"))
LINE = f":{FFN.count(chr(10)) + 1}:"  # the line a key appended to it stands on


def run(*args):
    return forked.run(*map(str, args))


def refused(result, *words):
    assert result.returncode == 2, (result.returncode, result.stdout[-300:], result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    for w in words:
        assert w in result.stderr, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_hf_import import LLAMA2_7B
    path = tmp_path_factory.mktemp("llama2") / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    return path


@pytest.mark.parametrize("args, words", [
    # a mesh that does not divide the dims it splits
    (["shard", DERIVATIONS / "ffn.yaml", "B=12", "D=8", "F=30", "--dp", "8"],
     ["X's axis 1 (B = 12) is split over dp = 8 (--dp), which does not divide it"]),
    # a dim (letter) given two placements, an axis twice in one tensor, an unknown axis
    (["shard", DERIVATIONS / "ffn.yaml", "--mesh", "X", "--place", "B=X", "--place", "B=X"],
     ["--place splits the dim B twice"]),
    (["shard", DERIVATIONS / "ffn.yaml", "--mesh", "X", "--place", "W_in[X,X]"],
     ["the placement of W_in uses the mesh axis X twice"]),
    (["shard", DERIVATIONS / "ffn.yaml", "--mesh", "X", "--place", "W_in[X,Q]"],
     ["names 'Q', which is not an axis of the mesh"]),
    (["shard", DERIVATIONS / "ffn.yaml", "--mesh", "X", "--place", "W_in[X]"],
     ["one entry per axis (2)"]),
    (["shard", DERIVATIONS / "ffn.yaml", "--place", "B=X"], ["--place needs --mesh"]),
    (["shard", DERIVATIONS / "ffn.yaml", "--tp", "1.5"], ["--tp: '1.5' is not a positive"]),
    # strategies that need others, or roles the declaration does not give
    (["shard", DERIVATIONS / "decoder_block.yaml", "--sp"], ["tp is 1"]),
    (["shard", DERIVATIONS / "moe.yaml", "--ep", "2"], ["dp is 1"]),
    (["shard", DERIVATIONS / "moe.yaml", "--ep", "3", "--dp", "8"], ["does not divide dp"]),
    (["shard", DERIVATIONS / "attention.yaml", "--tp", "2"],
     ["does not say which dim that is", "roles: {heads: DIM}"]),
    (["shard", DERIVATIONS / "gelu_mlp.yaml"], ["no strategies given"]),
    # an op that runs along a split letter
    (["shard", DERIVATIONS / "linear_recurrence.yaml", "--mesh", "X", "--place", "S=X"],
     ["linear_recurrence.yaml:", "the op runs along it"]),
])
def test_refused_options(args, words):
    refused(run(*args), *words)


def test_plan_refusals(llama2, tmp_path):
    refused(run("plan", "--hf-config", llama2, "--seq", "4096", "--tp", "3"),
            "is split over tp = 3 (--tp), which does not divide it")
    refused(run("plan", "--hf-config", llama2, "--seq", "4096", "--pp", "64"),
            "64 pipeline stages for 32 layers")
    refused(run("plan", "--hf-config", llama2, "--seq", "4096", "--tp", "8", "-n", "12"),
            "-n 12 is not a multiple of tp x pp x cp = 8")
    refused(run("plan", "--params", "7e9", "--tp", "8"), "need a declaration")


@pytest.mark.parametrize("parallel, words", [
    ("parallel: {dp: 8, foo: 2}", [LINE, "unknown key 'foo' in 'parallel'"]),
    ("parallel: {dp: 0}", [LINE, "'dp' must be at least 1"]),
    ("parallel: {zero: 4}", [LINE, "ZeRO stage 0, 1, 2 or 3"]),
    ("parallel: {schedule: zigzag}", [LINE, "unknown pipeline schedule 'zigzag'"]),
    ("parallel: {mesh: {X: 4}, tensors: {W_in: [X, X]}}", [LINE, "uses the mesh axis X twice"]),
    ("parallel: {mesh: {X: 4}, dims: {Q: X}}", [LINE, "'dims' places 'Q', which is not a dim"]),
    ("parallel: {mesh: {B: 4}}", [LINE, "the mesh axis B has the name of a dim"]),
    ("parallel: {dims: {B: X}}", [LINE, "declares no mesh"]),
    ("parallel: {mesh: {X: 4}, dp: 2}", [LINE, "gives both a mesh and the strategies dp"]),
    ("parallel: {tp: D}", [LINE, "the size name D of 'tp' is a dim"]),
])
def test_refused_declarations(tmp_path, parallel, words):
    path = tmp_path / "ffn.yaml"
    path.write_text(FFN.rstrip("\n") + "\n" + parallel + "\n")
    refused(run("shard", path), *words)


def test_a_declared_degree_that_does_not_divide_names_its_key(tmp_path):
    path = tmp_path / "ffn.yaml"
    path.write_text(FFN.rstrip("\n") + "\nparallel: {dp: 8}\n")
    err = refused(run("shard", path, "B=12", "D=8", "F=16"), "which does not divide it")
    assert "ffn.yaml" + LINE in err


def test_roles_are_checked_where_written(tmp_path):
    path = tmp_path / "ffn.yaml"
    path.write_text(FFN.replace("roles: {batch: B, hidden: F}", "roles: {batch: B, hiden: F}"))
    refused(run("derive", path), "unknown role 'hiden'", "did you mean 'hidden'")
    path.write_text(FFN.replace("roles: {batch: B, hidden: F}", "roles: {batch: B, hidden: G}"))
    refused(run("derive", path), "names 'G', which is not a dim")


def test_pair_form_experts_are_refused_expert_parallelism(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_hf_import import MIXTRAL_8X7B
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_8X7B))
    refused(run("plan", "--hf-config", path, "--seq", "4096", "--dp", "8", "--ep", "8"),
            "the pair form", "slot form")
