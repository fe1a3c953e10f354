"""A repeated block counts what its unrolled copies count.

The oracle is the same network written out copy by copy, with no ``repeat``
(each tensor is then one tensor, counted once): parameters, FLOPs in both
buckets and saved activations must agree.  Before, a block's output was
counted once per copy on top of the next copy's input, and a tensor only the
first copy's unneeded input gradient reads was kept by every copy.
"""

from __future__ import annotations

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.core.ir import dim_symbol

BLOCK = """
dims: {B: batch, D: width}
tensors:
  X: {shape: [B, D], role: input}
  g: {shape: [D], role: param}
  W: {shape: [D, D], role: param}
ops:
  - N[b,d] = rmsnorm_d(X[b,d]) * g[d]
  - Y[b,d] = X[b,d] + N[b,e] W[e,d]
"""


def _repeated(first_needs_grad: bool) -> str:
    flag = "" if first_needs_grad else ", requires_grad: false"
    return f"""
dims: {{B: batch, D: width}}
tensors:
  X0: {{shape: [B, D], role: input{flag}}}
  gf: {{shape: [D], role: param}}
ops:
  - include: block.yaml
    repeat: 3
    tensors: {{X: X0, Y: XL}}
  - Z[b,d] = rmsnorm_d(XL[b,d]) * gf[d]
"""


def _unrolled(first_needs_grad: bool) -> str:
    flag = "" if first_needs_grad else ", requires_grad: false"
    params = "".join(f"  g{k}: {{shape: [D], role: param}}\n  W{k}: {{shape: [D, D], role: param}}\n"
                     for k in (1, 2, 3))
    ops = "".join(f"  - N{k}[b,d] = rmsnorm_d(X{k - 1}[b,d]) * g{k}[d]\n"
                  f"  - X{k}[b,d] = X{k - 1}[b,d] + N{k}[b,e] W{k}[e,d]\n" for k in (1, 2, 3))
    return (f"dims: {{B: batch, D: width}}\ntensors:\n  X0: {{shape: [B, D], role: input{flag}}}\n"
            f"{params}  gf: {{shape: [D], role: param}}\nops:\n{ops}"
            "  - Z[b,d] = rmsnorm_d(X3[b,d]) * gf[d]\n")


@pytest.mark.parametrize("first_needs_grad", [False, True])
def test_repeat_counts_like_the_unrolled_network(tmp_path, first_needs_grad):
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "repeated.yaml").write_text(_repeated(first_needs_grad))
    (tmp_path / "unrolled.yaml").write_text(_unrolled(first_needs_grad))
    a = costs(symflops.derive(symflops.load(tmp_path / "repeated.yaml")))
    b = costs(symflops.derive(symflops.load(tmp_path / "unrolled.yaml")))
    for quantity in ("params", "flops_forward", "flops_backward", "elementwise_forward",
                     "elementwise_backward", "activations"):
        assert sympy.expand(getattr(a, quantity) - getattr(b, quantity)) == 0, quantity


def test_llama_keeps_each_residual_stream_once():
    """Llama's saved activations: each block keeps its input (read by its first
    RMSNorm); the last block's output XL is kept once, for the final norm."""
    s = costs(symflops.derive(symflops.load("derivations/llama.yaml")))
    L = dim_symbol("L")
    by = {t.name: t for t in s.saved}
    assert by["XL"].copies == 1 and by["X0"].copies == L
