"""The summary as a frozen typed tree (symflops.count.records).

Expected keys are the README's ``--json`` table (the public contract); the
expected numbers are the feed-forward block's by hand: forward 2 products of
2 B D F FLOPs each, backward twice that, 2 D F parameters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import sympy

from symflops.checks.check import claim_symbols
from symflops.cli import main
from symflops.count.cost import costs
from symflops.count.evaluate import evaluate
from symflops.count.records import (FlopTotals, Memory, Summary, WholeModel, leaves, lookup,
                                    map_formulas, to_json)
from symflops.count.summary import summary
from symflops.derive.backward import derive
from symflops.declaration.reader import load

ROOT = Path(__file__).resolve().parent.parent
B, D, F = sympy.symbols("B D F", positive=True, integer=True)

# The README's `--json` table, in the order `derive --json` prints the keys.
TOP_KEYS = ["name", "title", "unit", "conventions", "forward_order", "sizes", "dims", "tensors",
            "params", "trainable_params", "flops", "flops_per_param", "flops_elementwise",
            "forward", "backward", "saved", "saved_detail", "memory", "precision", "tokens",
            "sequences", "definitions", "parameters", "per_token", "flops_executed", "recompute",
            "inference", "blocks", "quantities", "notes"]  # notes: only when there are any (ffn has)
MEMORY_KEYS = ["params", "grads", "optimizer", "activations", "inference_peak", "params_bytes",
               "grads_bytes", "optimizer_bytes", "master_bytes", "fixed_bytes",
               "activation_bytes", "total_bytes"]


def _summary(name: str) -> Summary:
    d = derive(load(ROOT / "derivations" / f"{name}.yaml"))
    return summary(d, costs(d))


def test_json_keys_are_the_readme_s_in_order():
    out = _summary("ffn").to_json()
    assert list(out) == TOP_KEYS  # the whole-model part is inlined, no "model" key
    assert list(out["memory"]) == MEMORY_KEYS
    assert list(out["flops"]) == ["forward", "backward", "total"]
    assert list(out["parameters"]) == ["total", "trainable", "active", "active_dense",
                                       "read_per_token", "dense", "lookup", "elementwise",
                                       "classes"]


def test_orders_are_written_only_where_cheapest_orders_cross():
    out = _summary("ffn").to_json()
    assert list(out["forward"][0]) == ["op", "output", "copies", "flops", "flops_elementwise",
                                       "matrix_form"]
    assert list(out["backward"][0]) == ["grad", "wrt", "rule", "copies", "flops",
                                        "flops_elementwise", "matrix_form", "reads", "from_op"]


def test_formulas_print_as_text_sympy_reads_back():
    s = _summary("ffn")
    out = json.loads(json.dumps(s.to_json()))
    assert out["flops"] == {"forward": "4*B*D*F", "backward": "8*B*D*F", "total": "12*B*D*F"}
    assert out["tensors"]["W_in"]["shape"] == ["D", "F"]
    assert out["precision"]["params"] == 2  # a byte width, not a formula: a number


def test_evaluate_gives_the_same_tree_with_numbers():
    s = _summary("ffn")
    at = {"B": sympy.Integer(8), "D": sympy.Integer(3), "F": sympy.Integer(5)}
    n = evaluate(s, at)
    assert type(n) is Summary and type(n.model) is WholeModel and type(n.memory) is Memory
    assert n.flops == FlopTotals(4 * 8 * 3 * 5, 8 * 8 * 3 * 5, 12 * 8 * 3 * 5)
    assert type(n.flops.total) is int
    assert n.params == 2 * 3 * 5 and n.tensors["X"].shape == (8, 3)
    assert n.name == s.name and n.precision == s.precision  # text and byte widths are kept
    assert evaluate(s.flops.total, at) == 12 * 8 * 3 * 5  # one formula alone


def test_the_tree_is_frozen():
    s = _summary("ffn")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.params = sympy.Integer(0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.tensors["X"] = None  # type: ignore[index]
    assert s.model.recompute.policies["none"].flops_executed == 12 * B * D * F


def test_map_formulas_keeps_every_other_leaf():
    s = _summary("ffn")
    doubled = map_formulas(s, lambda e: 2 * e)
    assert doubled.flops.total == 24 * B * D * F
    assert doubled.forward[0].op == s.forward[0].op and doubled.dims == s.dims
    assert to_json(doubled)["precision"] == to_json(s)["precision"]


def test_lookup_and_leaves_name_fields_by_dotted_paths():
    s = _summary("ffn")
    assert lookup(s, "memory.total_bytes") is s.memory.total_bytes
    assert lookup(s, "model.parameters.dense") == 2 * D * F
    assert list(leaves(s.flops, "flops")) == ["flops.forward", "flops.backward", "flops.total"]


def test_claim_names_are_the_public_grammar(tmp_path):
    """The names the README and ``check``'s docstring give: the dims, params,
    trainable_params, activations, flops.*, flops_elementwise.*, memory.* (as
    before), then the names added for reviewing papers; the feed-forward block
    without its tokens: line declares no tokens, sequences or causal op, so no per-token, attention or
    cache names; then the bytes moved and intensities of the roofline, without
    the decoding step's, which needs tokens: and sequences:."""
    text = (ROOT / "derivations" / "ffn.yaml").read_text()
    assert "\ntokens: B\n" in text
    (tmp_path / "ffn.yaml").write_text(text.replace("\ntokens: B\n", "\n"))
    layer = load(tmp_path / "ffn.yaml")
    d = derive(layer)
    names = claim_symbols(layer, summary(d, costs(d)))
    totals = ["forward", "backward", "total"]
    assert list(names) == (["B", "D", "F", "params", "trainable_params", "activations"]
                           + [f"flops.{k}" for k in totals]
                           + [f"flops_elementwise.{k}" for k in totals]
                           + [f"memory.{k}" for k in MEMORY_KEYS]
                           + ["memory.master", "memory.fixed", "memory.total",
                              "memory.inference_peak_bytes", "params_active",
                              "params_active_dense", "params_dense", "params_lookup",
                              "params_elementwise", "flops.inference", "flops.executed",
                              "flops.recomputed"]
                           + [f"bytes_moved.{k}" for k in totals]
                           + ["bytes_moved_fused.forward", "intensity.forward",
                              "intensity.total", "intensity_fused.forward"])
    # the shipped block declares tokens: B, which adds the per-token names
    shipped = load(ROOT / "derivations" / "ffn.yaml")
    with_tokens = claim_symbols(shipped, summary(derive(shipped), costs(derive(shipped))))
    assert set(with_tokens) - set(names) == {
        "tokens", "params_read", *(f"flops_per_token.{k}" for k in (
            *totals, "inference", "executed", "elementwise", "six_n", "beyond_six_n"))}
    # 12 B D F training FLOPs over B tokens; 6N with N = 2 D F dense parameters
    assert sympy.expand(with_tokens["flops_per_token.total"] - 12 * D * F) == 0
    assert sympy.expand(with_tokens["flops_per_token.six_n"] - 12 * D * F) == 0
    # bf16-adam: 2 + 2 + 2 x 4 bytes per parameter; X and H saved at 2 bytes
    assert sympy.expand(names["memory.total_bytes"] - (12 * 2 * D * F + 2 * B * (D + F))) == 0
    # in elements: 2DF each of parameters and gradients, 2 x 2DF of Adam's m and v
    assert sympy.expand(names["memory.fixed"] - 8 * D * F) == 0
    assert sympy.expand(names["memory.total"] - (8 * D * F + B * (D + F))) == 0


def test_eval_json_is_the_tree_s_numbers_plus_at(capsys):
    assert main(["eval", str(ROOT / "derivations" / "ffn.yaml"), "B=8", "D=3", "F=5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == TOP_KEYS + ["at"]
    assert out["at"] == {"B": 8, "D": 3, "F": 5}
    assert out["flops"]["total"] == 12 * 8 * 3 * 5
    # the names a claim takes, with their numbers: 12 B D F, and 8 D F elements fixed
    assert out["quantities"]["flops.total"] == 12 * 8 * 3 * 5
    assert out["quantities"]["memory.fixed"] == 8 * 3 * 5


def test_the_literal_codes_are_the_engine_s():
    from typing import get_args

    from symflops.core.ir import RECOMPUTE_POLICIES
    from symflops.count.params import CLASSES
    from symflops.count.records import ParamClass, RecomputePolicy

    assert get_args(RecomputePolicy) == RECOMPUTE_POLICIES
    assert get_args(ParamClass) == CLASSES



def test_each_code_alias_lists_exactly_the_values_the_engine_checks():
    from typing import get_args

    from symflops.core.ir import FORWARD_ORDERS, LEAF_ROLES, ROLES, Layer, Order, Role, Tensor
    from symflops.count.cost import UNITS
    from symflops.count.precision import DEFAULT_POLICY, POLICIES, PolicyName
    from symflops.ops.base import Unit
    from symflops.sheets.render import FORMATS, TEMPLATE_NAMES

    assert ROLES == ("input", "param", "frozen", "index", "buffer", "activation",
                     "mask") == get_args(Role)
    assert LEAF_ROLES == ("input", "param", "frozen", "index", "buffer")
    assert FORWARD_ORDERS == ("written", "cheapest") == get_args(Order)
    assert UNITS == ("FLOPs", "MACs") == get_args(Unit)
    assert tuple(POLICIES) == get_args(PolicyName) and DEFAULT_POLICY in POLICIES
    assert FORMATS == ("md", "tex") == tuple(TEMPLATE_NAMES)
    assert Tensor.__annotations__["role"] == "Role" and Layer.__annotations__["forward_order"] == "Order"


def test_a_peak_in_bytes_is_the_bytes_per_element_times_the_peak_in_elements():
    """moe_block keeps its activations in bf16, 2 bytes each, and has defined
    dims, so its inference peak is rebuilt after they are substituted: the
    peak in bytes lists the very candidates of the peak in elements (it once
    kept one more, 3BDS + 2BSck + 2BSk, which BDSck + 2BDS + 2BSck + 3BSk
    bounds for every c, k >= 1)."""
    s = _summary("moe_block")
    assert s.quantities["memory.inference_peak_bytes"] == 2 * s.memory.inference_peak
