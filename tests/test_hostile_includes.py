"""Includes as a user may write them: identity and swapped bindings, chains
of includes hundreds deep.  Issue 25 item 11.

Expected counts are written by hand: the block ``Y[t,e] = X[t,d] W[d,e]``
costs 2·T·D² forward (one multiply-add per (t, d, e)) and 4·T·D² backward
(dW and dX, each as large as the forward product).
"""

from __future__ import annotations

import json

import pytest

from symflops import cli
from symflops.declaration.reader import MAX_INCLUDE_DEPTH
import forked

BLOCK = ("dims: {T: tokens, D: width}\n"
         "tensors:\n  X: {shape: [T, D], role: input}\n  W: {shape: [D, D], role: param}\n"
         "  V: {shape: [D, D], role: param}\n"
         "ops:\n  - H[t,e] = X[t,d] W[d,e]\n  - Y[t,f] = H[t,e] V[e,f]\n")


def _net(tmp_path, binding, name="net"):
    path = tmp_path / f"{name}.yaml"
    path.write_text("name: net\ndims: {T: tokens, D: width}\n"
                    "tensors:\n  X: {shape: [T, D], role: input}\n"
                    f"ops:\n  - include: blk.yaml\n{binding}")
    return path


def _derive_json(path, capsys):
    code = cli.main(["derive", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("binding", [
    "    tensors: {X: X, Y: Y}\n",                       # the brief's identity
    "    tensors: {X: X, H: H, W: W, V: V, Y: Y}\n",     # every tensor to itself
    "    tensors: {W: W}\n",
])
def test_an_identity_binding_is_the_include_without_it(tmp_path, capsys, binding):
    (tmp_path / "blk.yaml").write_text(BLOCK)
    plain = _derive_json(_net(tmp_path, "", "plain"), capsys)
    bound = _derive_json(_net(tmp_path, binding, "bound"), capsys)
    assert bound == plain
    T, D = 3, 5   # by hand: two products of 2 T D^2 forward, twice that backward
    ev = cli.main(["eval", str(_net(tmp_path, binding, "bound")), f"T={T}", f"D={D}", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert ev == 0 and data["flops"]["forward"] == 2 * (2 * T * D * D)
    assert data["flops"]["backward"] == 2 * (4 * T * D * D)
    assert data["params"] == 2 * D * D


def test_a_swap_is_a_renaming(tmp_path, capsys):
    """{W: V, V: W} renames both at once (one substitution): the same layer
    with the two weights' names exchanged, so the includer's W is the block's V."""
    (tmp_path / "blk.yaml").write_text(BLOCK)
    swapped = _derive_json(_net(tmp_path, "    tensors: {W: V, V: W}\n", "swapped"), capsys)
    rules = [r["rule"] for r in swapped["backward"]]
    assert "dV[d,e] = X[t,d] dH[t,e]" in rules, rules   # the block's W, named V here
    assert "dW[e,f] = H[t,e] dY[t,f]" in rules, rules   # the block's V, named W here


@pytest.mark.parametrize("binding, fragment, column", [
    # two bindings to one name: at the second ('    tensors: {W: Z, V: ' is 23 characters)
    ("    tensors: {W: Z, V: Z}\n", "the include gives 'Z' to two of the block's tensors, W and V",
     24),
    # a binding to the name of a block tensor the include keeps ('    tensors: {W: ' is 17)
    ("    tensors: {W: V}\n", "the include gives 'V' to two of the block's tensors, W and V",
     18),
])
def test_two_tensors_given_one_name_are_refused_at_the_binding(tmp_path, capsys, binding,
                                                               fragment, column):
    (tmp_path / "blk.yaml").write_text(BLOCK)
    path = _net(tmp_path, binding)
    code = cli.main(["derive", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:7:{column}: error: {fragment}" in err, err


def _chain(tmp_path, n):
    """b0.yaml includes b1.yaml ... includes b{n-1}.yaml, which holds the op."""
    for i in range(n):
        last = i == n - 1
        (tmp_path / f"b{i}.yaml").write_text(
            "dims: {T: tokens, D: width}\ntensors:\n  X: {shape: [T, D], role: input}\n"
            + ("  W: {shape: [D, D], role: param}\nops:\n  - Y[t,e] = X[t,d] W[d,e]\n" if last
               else f"ops:\n  - include: b{i + 1}.yaml\n"))
    return tmp_path / "b0.yaml"


def test_a_chain_of_300_includes_is_refused_by_its_depth(tmp_path):
    top = _chain(tmp_path, 300)
    result = forked.run("derive", str(top), timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    # refused where b31.yaml includes b32.yaml, the 33rd declaration of the chain
    assert (f"{tmp_path / 'b31.yaml'}:5:14: error: the includes nest more than 32 levels deep "
            f"(the chain starts at {top}: b0.yaml -> b1.yaml -> b2.yaml -> ...)"
            in result.stderr), result.stderr
    assert "alias" not in result.stderr


def test_a_chain_at_the_limit_is_read(tmp_path, capsys):
    assert MAX_INCLUDE_DEPTH == 32          # the README's bound (Limits)
    top = _chain(tmp_path, 32)              # 32 declarations, 31 includes deep
    T, D = 2, 3
    assert cli.main(["eval", str(top), f"T={T}", f"D={D}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flops"]["forward"] == 2 * T * D * D
    assert cli.main(["derive", str(_chain(tmp_path / "..", 1))]) == 0  # b0 alone
    capsys.readouterr()
    (tmp_path / "deeper").mkdir()
    assert cli.main(["derive", str(_chain(tmp_path / "deeper", 33))]) == 2
    assert "nest more than 32 levels deep" in capsys.readouterr().err


def test_inline_blocks_count_towards_the_depth(tmp_path, capsys):
    blocks = "".join(
        f"  b{i}:\n    dims: {{T: tokens, D: width}}\n"
        "    tensors:\n      X: {shape: [T, D], role: input}\n"
        + ("      W: {shape: [D, D], role: param}\n    ops:\n      - Y[t,e] = X[t,d] W[d,e]\n"
           if i == 39 else f"    ops:\n      - include: b{i + 1}\n")
        for i in range(40))
    path = tmp_path / "inline.yaml"
    path.write_text("dims: {T: tokens, D: width}\ntensors:\n  X: {shape: [T, D], role: input}\n"
                    "ops:\n  - include: b0\nblocks:\n" + blocks)
    assert cli.main(["derive", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the includes nest more than 32 levels deep" in err and "inline.yaml -> b0 -> b1" \
        in err, err
