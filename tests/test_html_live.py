"""The live numbers' code generation (symflops/sheets/live.py): the engine's
polynomials as a table of exact nodes, and the data the page's script reads.
The numbers themselves are compared with ``symflops eval`` in a real
browser (tests/test_html_browser.py)."""

import json
from pathlib import Path

import pytest
import sympy

from symflops.core.ir import dim_symbol
from symflops.declaration.reader import load
from symflops.sheets.live import Nodes, Unsupported, evaluate_nodes, live_data, script_json

ROOT = Path(__file__).resolve().parent.parent
B, D, N, G = (dim_symbol(x) for x in "BDNG")
INDEX = {B: 0, D: 1, N: 2, G: 3}


def test_a_polynomial_becomes_a_table_of_shared_nodes():
    table = Nodes(INDEX)
    # 12*B*D: the coefficient and the monomial B*D, which 14*B*D then shares
    k = table.add(12 * B * D)
    before = len(table.nodes)
    assert table.nodes[k] == ["M", table.nodes.index("12"), table.add(B * D)]
    assert len(table.nodes) == before  # B*D was made with 12*B*D
    table.add(14 * B * D)
    assert len(table.nodes) == before + 2  # "14" and 14*(B*D); B, D and B*D are shared
    # a defined dim substituted: D*N/G is a power -1 of G, kept exact
    root = table.add(D * N / G)
    assert ["P", table.add(G), -1] in table.nodes
    assert table.nodes[table.add(sympy.Rational(3, 2))] == "3/2"
    assert table.nodes[table.add(sympy.floor(B / 2))][0] == "F"
    # the walk the script does gives what SymPy gives (D*N/G at D=6, N=4, G=8: 3)
    assert evaluate_nodes(table.nodes, root, [1, 6, 4, 8]) == 3


@pytest.mark.parametrize("expr", [12 * B * D + sympy.Rational(3, 2) * B * N,
                                  B * D * N / (B * D + D * N + B * N),
                                  sympy.floor(B / G) + sympy.ceiling(D / G),
                                  sympy.Max(B, D) * sympy.Min(N, G) + (B + 1) ** 3])
def test_the_walk_gives_sympys_value(expr):
    table = Nodes(INDEX)
    root = table.add(expr)
    at = {B: 7, D: 10, N: 3, G: 4}
    assert evaluate_nodes(table.nodes, root, [7, 10, 3, 4]) == expr.subs(at)


def test_what_cannot_be_evaluated_exactly_is_refused():
    with pytest.raises(Unsupported, match="not an integer"):
        Nodes(INDEX).add(sympy.sqrt(B))
    with pytest.raises(Unsupported, match="log"):
        Nodes(INDEX).add(sympy.log(B))
    with pytest.raises(Unsupported, match="not a dim"):
        Nodes(INDEX).add(dim_symbol("Z"))


def test_llama_offers_each_precision_and_both_attention_conventions():
    data = live_data(load(ROOT / "derivations" / "llama.yaml"))
    assert [d["name"] for d in data["dims"]] == ["L", "V", "B", "S", "D", "N", "G", "E", "F"]
    assert data["attention"] == ["exact", "full-square"]
    assert len(data["conventions"]) == 2 * 4  # x bf16-adam, mixed-adam, fp32-adam, bf16-sgd
    assert data["precision"] == "bf16-adam"
    exact, square = data["conventions"]["exact|bf16-adam"], data["conventions"]["full-square|bf16-adam"]
    # the causal products differ between the conventions; the parameters do not
    assert exact["flops.forward"] != square["flops.forward"]
    assert exact["params"] == square["params"]
    # precision changes bytes only
    mixed = data["conventions"]["exact|mixed-adam"]
    assert exact["memory.total_bytes"] != mixed["memory.total_bytes"]
    assert exact["flops.total"] == mixed["flops.total"]
    # the defined dim R = N / G is checked in the browser as eval checks it
    assert [(d["name"], d["formula"]) for d in data["definitions"]] == [("R", "N/G")]
    assert data["examples"][0]["values"] == [32, 32000, 1, 4096, 4096, 32, 32, 128, 11008]


def test_every_shipped_declaration_compiles():
    for path in sorted((ROOT / "derivations").glob("*.yaml"))[:8]:  # the rest in the browser test
        data = live_data(load(path))
        assert data["nodes"] and all(isinstance(n, (str, list)) for n in data["nodes"])
        # every node's children come before it (the script walks it in one pass)
        for k, n in enumerate(data["nodes"]):
            if isinstance(n, list) and n[0] not in ("v", "P"):
                assert all(c < k for c in n[1:])


@pytest.mark.parametrize("hostile", ["</script><script>alert(1)</script>", "<!-- x", "a\u2028b\u2029c",
                                     "\"quoted\" & 'single'"])
def test_the_script_data_cannot_end_its_element(hostile):
    text = script_json({"name": hostile})
    assert "</script" not in text.lower() and "<!--" not in text and "<" not in text
    assert "\u2028" not in text and "\u2029" not in text and "&" not in text
    assert json.loads(text) == {"name": hostile}
