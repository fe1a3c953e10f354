"""Weights tied across the copies of a repeated block (``shared:``), and ALBERT.

Oracles, all outside the code under test:

* the same network written out copy by copy with one tensor ``W`` that every
  copy reads (no ``repeat``, no ``shared``): parameters, FLOPs in both
  buckets, gradient additions and saved activations must agree;
* hand counts of ALBERT-base from its published sizes (albert-base-v2's
  config.json), written out below;
* the refusals: each names its position and a fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.core.errors import SymflopsError
from symflops.core.ir import dim_symbol
from symflops.count.cost import costs

ROOT = Path(__file__).resolve().parent.parent
ALBERT = ROOT / "derivations" / "albert.yaml"

# BLOCK: an RMSNorm with gain g, then a residual matmul by W; _repeated: it three
# times in sequence, then a final RMSNorm (pytest puts tests/ on the path)
from test_repeat_memory import BLOCK, _repeated as _untied  # noqa: E402


def _repeated(shared: str, flag: str = "") -> str:
    """test_repeat_memory's three copies, with ``shared: ...`` on the include."""
    text = _untied(first_needs_grad=not flag).replace(
        "    tensors: {X: X0, Y: XL}\n", f"    tensors: {{X: X0, Y: XL}}\n    shared: {shared}\n")
    assert "shared:" in text
    return text


def _unrolled(tied: tuple[str, ...], flag: str = "") -> str:
    """Three copies written out; a tied name is one tensor all copies read."""
    params = "".join(f"  {p}: {{shape: {shape}, role: param}}\n"
                     for p, shape in (("g", "[D]"), ("W", "[D, D]")) if p in tied)
    params += "".join(f"  {p}{k}: {{shape: {shape}, role: param}}\n" for k in (1, 2, 3)
                      for p, shape in (("g", "[D]"), ("W", "[D, D]")) if p not in tied)

    def name(p: str, k: int) -> str:
        return p if p in tied else f"{p}{k}"

    ops = "".join(f"  - N{k}[b,d] = rmsnorm_d(X{k - 1}[b,d]) * {name('g', k)}[d]\n"
                  f"  - X{k}[b,d] = X{k - 1}[b,d] + N{k}[b,e] {name('W', k)}[e,d]\n"
                  for k in (1, 2, 3))
    return (f"dims: {{B: batch, D: width}}\ntensors:\n  X0: {{shape: [B, D], role: input{flag}}}\n"
            f"{params}  gf: {{shape: [D], role: param}}\nops:\n{ops}"
            "  - Z[b,d] = rmsnorm_d(X3[b,d]) * gf[d]\n")


def _costs(path: Path):
    return costs(symflops.derive(symflops.load(path)))


@pytest.mark.parametrize("tied", [("W",), ("g", "W")], ids=["W", "g-and-W"])
@pytest.mark.parametrize("flag", ["", ", requires_grad: false"], ids=["dX0", "no-dX0"])  # as there
def test_shared_counts_like_the_unrolled_network_with_one_tensor(tmp_path, tied, flag):
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "repeated.yaml").write_text(_repeated("[" + ", ".join(tied) + "]", flag))
    (tmp_path / "unrolled.yaml").write_text(_unrolled(tied, flag))
    a, b = _costs(tmp_path / "repeated.yaml"), _costs(tmp_path / "unrolled.yaml")
    for quantity in ("params", "trainable", "flops_forward", "flops_backward",
                     "elementwise_forward", "elementwise_backward", "accumulate", "activations"):
        assert sympy.expand(getattr(a, quantity) - getattr(b, quantity)) == 0, quantity
    for key in ("grads", "optimizer", "total_bytes"):
        assert sympy.expand(a.memory()[key] - b.memory()[key]) == 0, key


def test_the_gradient_sum_costs_two_additions_per_element_for_three_copies(tmp_path):
    """By hand: dW = dW^(1) + dW^(2) + dW^(3) is 2 additions per element of W
    (D*D) and of g (D): 2*D**2 + 2*D, elementwise; untied, nothing is summed
    and the parameters are three times D**2 + D."""
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "tied.yaml").write_text(_repeated("[g, W]"))
    (tmp_path / "untied.yaml").write_text(_untied(first_needs_grad=True))
    D = dim_symbol("D")
    tied, untied = _costs(tmp_path / "tied.yaml"), _costs(tmp_path / "untied.yaml")
    assert tied.shared_sum == 2 * D**2 + 2 * D and untied.shared_sum == 0
    assert sympy.expand(tied.elementwise_backward - untied.elementwise_backward
                        - (2 * D**2 + 2 * D)) == 0
    assert tied.params == D**2 + 2 * D and untied.params == 3 * (D**2 + D) + D
    assert tied.flops_total == untied.flops_total == 18 * dim_symbol("B") * D**2


def test_a_block_parameter_tied_to_the_includers(tmp_path):
    """Tied encoder-decoder embeddings: the block's W_E is the includer's W_E.
    By hand: params V*D once; its gradient has a scatter-add from the lookup
    here and a product in the block, 1 addition per element (V*D)."""
    (tmp_path / "head.yaml").write_text("""
dims: {B: batch, D: width, V: vocab}
tensors:
  H: {shape: [B, D], role: input}
  W_E: {shape: [V, D], role: param}
ops:
  - Z[b,v] = H[b,d] W_E[v,d]
""")
    (tmp_path / "model.yaml").write_text("""
dims: {B: batch, D: width, V: vocab}
tensors:
  tok: {shape: [B], role: index}
  W_E: {shape: [V, D], role: param}
ops:
  - X[b,d] = W_E[tok[b], d]
  - include: head.yaml
    tensors: {H: X}
    shared: [W_E]
""")
    c = _costs(tmp_path / "model.yaml")
    B, D, V = (dim_symbol(n) for n in "BDV")
    assert c.params == V * D
    assert c.shared_sum == 0  # not shared across copies: an ordinary two-rule sum
    assert sympy.expand(c.accumulate - V * D) == 0
    assert c.flops_forward == 2 * B * D * V


ALBERT_BASE = dict(L=12, V=30000, T=2, B=1, S=512, E=128, H=768, N=12, D=64, F=3072)


def _albert_block(H: int, N: int, D: int, F: int) -> int:
    """One ALBERT layer: q, k and v with their [N, D] biases, o with its [H]
    bias, two LayerNorms (gain and bias), the MLP with its biases."""
    return 3 * (H * N * D + N * D) + (N * D * H + H) + 2 * 2 * H + (H * F + F) + (F * H + H)


def test_albert_base_has_its_published_parameter_count(capsys):
    """By hand from albert-base-v2's sizes.  In: word, position (512 rows) and
    token-type embeddings with their LayerNorm; the E -> H projection with
    bias; ONE block (shared by the 12 layers: counted once); the masked-LM
    head (H -> E with bias, LayerNorm, decoder bias; the decoder's weights
    are the word embedding).  Out: the pooler (H*H + H) and the
    sentence-order head, not declared."""
    V, T, S, E, H, N, D, F = (ALBERT_BASE[k] for k in "VTSEHNDF")
    embeddings = V * E + S * E + T * E + 2 * E            # 3,906,048
    projection = E * H + H                                # 99,072
    block = _albert_block(H, N, D, F)                     # 7,087,872
    mlm_head = (H * E + E) + 2 * E + V                    # 128,688
    expected = embeddings + projection + block + mlm_head
    assert (embeddings, projection, block, mlm_head) == (3_906_048, 99_072, 7_087_872, 128_688)
    assert expected == 11_221_680
    # The Hugging Face AlbertModel of this config (pooler in, masked-LM head out)
    # has 11,683,584 parameters; the paper's Table 1 says 12M.
    assert expected - mlm_head + (H * H + H) == 11_683_584
    assert abs(expected - 12e6) / 12e6 < 0.07
    layer = symflops.load(ALBERT)
    c = costs(symflops.derive(layer))
    at = {dim_symbol(k): v for k, v in ALBERT_BASE.items()}
    assert c.params.xreplace(at) == expected
    # untied, the same sizes would have 11 more copies of the block
    assert (sympy.expand(c.params + (dim_symbol("L") - 1) * block).xreplace(at)
            == expected + 11 * block)


def test_albert_flops_are_the_layers_times_one_block_by_hand():
    """Matrix-product FLOPs, by hand, per token (B*S tokens): the projection
    2EH; per layer q, k, v, o 4 * 2HND, scores and mixing 2 * 2SND (every
    query against all S keys, N heads of width D), the MLP 2 * 2HF; the head
    2HE and the tied decoder 2EV.  Every product has its two backward
    products (the embeddings want a gradient, so even the projection's input
    gradient is computed): backward = 2 x forward.  The shared block runs L
    times: its FLOPs are L x one block, though its parameters count once."""
    L, V, B, S, E, H, N, D, F = (dim_symbol(k) for k in "LVBSEHNDF")
    per_layer = 4 * 2 * H * N * D + 2 * 2 * S * N * D + 2 * 2 * H * F
    forward = B * S * (2 * E * H + L * per_layer + 2 * H * E + 2 * E * V)
    c = costs(symflops.derive(symflops.load(ALBERT)))
    assert sympy.expand(c.flops_forward - forward) == 0
    assert sympy.expand(c.flops_backward - 2 * forward) == 0
    at = {dim_symbol(k): v for k, v in ALBERT_BASE.items()}
    assert c.flops_forward.xreplace(at) == 100_770_250_752
    # the copies' gradient contributions summed into one: (L - 1) x the block's elements
    block = _albert_block(H, N, D, F)
    assert sympy.expand(c.shared_sum - (L - 1) * block) == 0
    assert c.shared_sum.xreplace(at) == 11 * 7_087_872


def test_albert_memory_has_one_gradient_and_one_optimizer_state():
    """bf16-adam: parameters and gradients 2 bytes, Adam m and v 4 bytes each,
    all for 11,221,680 elements (not 12 copies of the block)."""
    c = costs(symflops.derive(symflops.load(ALBERT)))
    at = {dim_symbol(k): v for k, v in ALBERT_BASE.items()}
    mem = {k: sympy.sympify(v).xreplace(at) for k, v in c.memory().items()}
    n = 11_221_680
    assert (mem["params"], mem["grads"], mem["optimizer"]) == (n, n, 2 * n)
    assert mem["fixed_bytes"] == 2 * n + 2 * n + 8 * n


def test_6n_param_is_not_albert_training_but_6_n_active_is_with_attention(capsys):
    """check must not call 6 * params * tokens the training count: the
    shared block's weights do L copies' work.  By hand, what a token's
    products read is N_active = L(4HND + 2HF) + VE + 2EH, and training is
    6 N_active BS plus attention's 12 L S N D per token."""
    from symflops.cli import main

    assert main(["check", str(ALBERT), "flops.total == 6*params*B*S"]) == 1
    L, V, B, S, E, H, N, D, F = (dim_symbol(k) for k in "LVBSEHNDF")
    n_active = L * (4 * H * N * D + 2 * H * F) + V * E + 2 * E * H
    c = costs(symflops.derive(symflops.load(ALBERT)))
    assert sympy.expand(c.flops_total - 6 * n_active * B * S - 12 * L * B * S**2 * N * D) == 0
    capsys.readouterr()


def test_albert_sheet_states_the_sharing_and_the_gradient_sum(capsys):
    from symflops.cli import main

    assert main(["render", str(ALBERT), "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert r"dW_{\text{q}} = \sum_{\ell=1}^{L} {dW_{\text{q}}}^{(\ell)}" in text
    assert "shared by the $L$ copies of albert\\_block" in text
    assert "one gradient and one optimizer state, not one per copy" in text
    assert "training is not $6 \\cdot N_{\\text{param}}$ per token" in text
    assert "(L - 1) \\times (" in text


# ------------------------------------------------------------- refusals --


def _load_error(tmp_path, include: str) -> SymflopsError:
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "top.yaml").write_text(f"""dims: {{B: batch, D: width}}
tensors:
  X0: {{shape: [B, D], role: input}}
ops:
  - include: block.yaml
{include}""")
    with pytest.raises(SymflopsError) as info:
        symflops.load(tmp_path / "top.yaml")
    return info.value


@pytest.mark.parametrize("include, line, column, words", [
    ("    tensors: {X: X0}\n    shared: [W]\n", 7, 14,
     ["no 'repeat'", "add 'repeat: L'"]),
    ("    repeat: 2\n    tensors: {X: X0}\n    shared: [X]\n", 8, 14,
     ["'X' is a tensor of role 'input' of the block, not a parameter", "role: param"]),
    ("    repeat: 2\n    tensors: {X: X0}\n    shared: [N]\n", 8, 14,
     ["'N' is an op's output of the block, not a parameter"]),
    ("    repeat: 2\n    tensors: {X: X0}\n    shared: [Wq]\n", 8, 14,
     ["no tensor 'Wq' to share", "'W'"]),
    ("    repeat: 2\n    tensors: {X: X0}\n    shared: [W, W]\n", 8, 17, ["listed twice"]),
    ("    repeat: 2\n    tensors: {X: X0}\n    shared: W\n", 8, 13, ["must be a list"]),
], ids=["no-repeat", "input", "activation", "unknown", "twice", "not-a-list"])
def test_bad_shared_is_refused_at_its_position(tmp_path, include, line, column, words):
    err = _load_error(tmp_path, include)
    text = str(err)
    assert f"top.yaml:{line}:{column}" in text, text
    for w in words:
        assert w in text, text


def test_the_clash_advice_says_renaming_unties_and_points_to_shared(tmp_path):
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "top.yaml").write_text("""dims: {B: batch, D: width}
tensors:
  X0: {shape: [B, D], role: input}
  W: {shape: [D, D], role: param}
ops:
  - Y0[b,d] = X0[b,e] W[e,d]
  - include: block.yaml
    tensors: {X: Y0}
""")
    with pytest.raises(SymflopsError) as info:
        symflops.load(tmp_path / "top.yaml")
    text = str(info.value)
    assert "clashes with 'W' here" in text
    assert "untied from the one here" in text and "'shared: [W]'" in text


def test_a_tie_to_the_includer_must_match_its_shape(tmp_path):
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "top.yaml").write_text("""dims: {B: batch, D: width}
tensors:
  X0: {shape: [B, D], role: input}
  W: {shape: [D], role: param}
ops:
  - Y0[b,d] = X0[b,d] * W[d]
  - include: block.yaml
    tensors: {X: Y0}
    shared: [W]
""")
    with pytest.raises(SymflopsError) as info:
        symflops.load(tmp_path / "top.yaml")
    assert "top.yaml:9:14" in str(info.value) and "one shape" in str(info.value)


def _verify(path: Path, capsys) -> str:
    from symflops.commands import verify as verify_command

    parser = argparse.ArgumentParser(prog="symflops verify")
    verify_command.add_arguments(parser)
    status = verify_command.run(parser.parse_args([str(path)]))
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "result: pass" in out
    return out


def test_a_small_tied_model_passes_verify(tmp_path, capsys):
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "tied.yaml").write_text(_repeated("[g, W]"))
    _verify(tmp_path / "tied.yaml", capsys)


@pytest.mark.slow
def test_albert_passes_verify(capsys):
    """The whole model (a few CPU minutes: test_verify leaves whole models out,
    but this one's embeddings and head are verified nowhere else)."""
    out = _verify(ALBERT, capsys)
    assert "0 failed" in out
