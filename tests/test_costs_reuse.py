"""count/cost: the counts of one derivation are made once in a process and
handed from one precision policy to another (:meth:`Costs.at`).  What is
handed on must not depend on the policy; what does depend on it (bytes)
must be the new policy's.  Expected values: each total worked out afresh on
a copy that was never counted (``dataclasses.replace`` with the policy), and
ffn's bytes by hand."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
import sympy

from symflops.count.cost import Costs, costs
from symflops.count.precision import POLICIES
from symflops.declaration.reader import load
from symflops.derive.backward import derive

ROOT = Path(__file__).resolve().parent.parent
TOTALS = sorted(k for k, v in vars(Costs).items() if isinstance(v, functools.cached_property))


@pytest.mark.parametrize("name", ["ffn", "llama", "moe"])
def test_every_total_handed_to_another_policy_is_the_one_it_would_work_out(name):
    d = derive(load(str(ROOT / "derivations" / f"{name}.yaml")))
    counted = costs(d)
    for k in TOTALS:  # worked out under the first policy, then handed on
        getattr(counted, k)
    for p in POLICIES.values():
        handed = counted.at(p)
        fresh = dataclasses.replace(counted, precision=p)  # nothing worked out yet
        assert handed.precision is p
        for k in TOTALS:
            assert getattr(handed, k) == getattr(fresh, k), (name, p.name, k)
        assert handed.memory() == fresh.memory()


def test_the_bytes_are_the_new_policys():
    """ffn: parameters 2DF; fp32-adam keeps 4 bytes of each parameter and
    2 x 4 of optimizer state (Adam's m and v); bf16-adam 2 bytes of each
    parameter.  The FLOPs are the same under both."""
    d = derive(load(str(ROOT / "derivations" / "ffn.yaml")))
    D, F = (d.layer.dim_symbols[k] for k in "DF")
    counted = costs(d, precision="bf16-adam")
    assert counted.flops_total == costs(d, precision="fp32-adam").flops_total
    fp32 = counted.at(POLICIES["fp32-adam"]).memory()
    assert sympy.expand(fp32["params_bytes"] - 4 * 2 * D * F) == 0
    assert sympy.expand(fp32["optimizer_bytes"] - 8 * 2 * D * F) == 0
    assert sympy.expand(counted.memory()["params_bytes"] - 2 * 2 * D * F) == 0


def test_the_same_derivation_is_counted_once():
    d = derive(load(str(ROOT / "derivations" / "ffn.yaml")))
    assert costs(d) is costs(d)
    assert costs(d, "MACs") is not costs(d) and costs(d, "MACs").unit == "MACs"
    assert costs(d).at(costs(d).precision) is costs(d)
