"""``verify`` and the bucket rule agree on dot products.

A dot product (a summed letter, every kept letter on both operands: a full
dot ``KL[] = P[v] L[v]``, a row-wise one ``dg[d] = X[b,d] dY[b,d]``) is
elementwise work by the bucket rule: 0 in ``flops``.  PyTorch's own
dot-product kernels agree (``torch.dot``, ``torch.linalg.vecdot``,
``(x * y).sum()``: FlopCounterMode counts none of them), but ``torch.einsum``
lowers one to a bmm over length-1 axes, which it counts, so verify's oracle
(which ran every product with ``torch.einsum``) counted 48 for a KL term of
24 letters and failed the declaration.  The oracle now runs each product as
the kernel its bucket names; these tests fail on the code before.
"""

from __future__ import annotations

import dataclasses

import pytest

import symflops
from symflops.checks import oracle, verify

torch = pytest.importorskip("torch")

KL = """
name: kl
dims: {B: batch, V: vocabulary}
tensors:
  P: {shape: [B, V], role: input}
  Q: {shape: [B, V], role: input}
ops:
  # the KL divergence of a batch, summed: one full dot product over (b, v)
  - KL[] = P[b,v] log(P[b,v]) - P[b,v] log(Q[b,v])
"""

CLIP = """
name: clip_positive
dims: {B: pairs, E: embedding width}
tensors:
  I: {shape: [B, E], role: input}
  T: {shape: [B, E], role: input}
ops:
  # CLIP's positive-pair term, summed over the batch: a full dot over (b, e)
  - Lpos[] = I[b,e] T[b,e]
  # the per-pair similarities: a row-wise dot (b kept, on both operands)
  - Sim[b] = I[b,e] T[b,e]
"""


@pytest.mark.parametrize("text,name", [(KL, "kl.yaml"), (CLIP, "clip.yaml")])
def test_a_dot_product_passes_verify(text, name):
    d = symflops.derive(symflops.loads(text, name))
    report = verify.verify(d)
    assert report.passed, verify.text_report(report)
    for f in report.flops:
        # By the rule a dot product books nothing in flops, and PyTorch's dot
        # kernels (a multiply and a sum) count nothing: 0 = 0 at both sizes.
        assert (f.derived, f.torch, f.status) == (0, 0, "agree"), f


def test_a_dot_product_booked_as_a_matrix_product_fails():
    """The comparison is a check, not a note: a dot product's forward booked in
    flops (2*B*V, as einsum's bmm would count it) fails verify."""
    d = symflops.derive(symflops.loads(KL, "kl.yaml"))
    c = symflops.costs(d)
    B, V = (symflops.core.ir.dim_symbol(n) for n in "BV")
    # KL has two terms, each a dot over (b, v): 2 B V each as a bmm
    wrong = dataclasses.replace(c, forward=(dataclasses.replace(c.forward[0],
                                                                flops=4 * B * V),))
    checks = oracle.check_flops(d, wrong, {"small": {"B": 2, "V": 3}}, oracle.load_torch())
    [bad] = [f for f in checks if not f.passed]
    assert (bad.op, bad.direction, bad.derived, bad.torch) == (1, "forward", 24, 0)
    assert "dot product" in bad.note


def test_the_oracle_runs_a_contraction_as_a_bmm_and_a_dot_as_mul_and_sum():
    from torch.utils.flop_counter import FlopCounterMode

    from symflops.core.ir import Einsum, Factor
    from symflops.ops.einsum.torch import torch_einsum

    a = torch.randn(3, 4, dtype=torch.float64)
    b = torch.randn(3, 4, dtype=torch.float64)
    w = torch.randn(4, 5, dtype=torch.float64)
    cases = [
        # (einsum, tensors, PyTorch's count: 2 x product of the extents for a bmm)
        (Einsum(Factor("Y", ()), (Factor("A", ("b", "d")), Factor("B", ("b", "d")))), 0),
        (Einsum(Factor("Y", ("d",)), (Factor("A", ("b", "d")), Factor("B", ("b", "d")))), 0),
        (Einsum(Factor("Y", ("b",)), (Factor("A", ("b", "d")), Factor("B", ("b", "d")))), 0),
        (Einsum(Factor("Y", ("b", "f")), (Factor("A", ("b", "d")), Factor("W", ("d", "f")))),
         2 * 3 * 4 * 5),
    ]
    tensors = {"A": a, "B": b, "W": w}
    for e, expected in cases:
        with FlopCounterMode(display=False) as counter:
            got = torch_einsum(torch, e, tensors)
        spec = (",".join("".join(f.indices) for f in e.operands) + "->"
                + "".join(e.output.indices))
        assert torch.allclose(got, torch.einsum(spec, *(tensors[f.tensor] for f in e.operands)))
        assert counter.get_total_flops() == expected, e
