"""The live numbers' code generation (symflops/sheets/live.py): the engine's
polynomials as exact JavaScript, and the data the page's script reads.
The numbers themselves are compared with ``symflops eval`` in a real
browser (tests/test_html_browser.py)."""

import json
from pathlib import Path

import pytest
import sympy

from symflops.core.ir import dim_symbol
from symflops.declaration.reader import load
from symflops.sheets.live import Unsupported, compile_expr, functions_js, live_data, script_json

ROOT = Path(__file__).resolve().parent.parent
B, D, N, G = (dim_symbol(x) for x in "BDNG")
INDEX = {B: 0, D: 1, N: 2, G: 3}


def test_a_polynomial_compiles_to_exact_rational_helpers():
    # 12*B*D*F-like: a product of an integer and dims; a sum; a rational coefficient
    assert compile_expr(12 * B * D, INDEX) == "M(R(12n,1n),v[0],v[1])"
    assert compile_expr(B + D, INDEX) == "A(v[0],v[1])"
    assert compile_expr(sympy.Rational(3, 2) * B, INDEX) == "M(R(3n,2n),v[0])"
    # a defined dim substituted: D*N/G is a power -1 of G, kept exact
    assert compile_expr(D * N / G, INDEX) == "M(v[1],v[2],P(v[3],-1))"
    assert compile_expr(sympy.floor(B / 2), INDEX) == "F(M(R(1n,2n),v[0]))"


def test_what_cannot_be_evaluated_exactly_is_refused():
    with pytest.raises(Unsupported, match="not an integer"):
        compile_expr(sympy.sqrt(B), INDEX)
    with pytest.raises(Unsupported, match="log"):
        compile_expr(sympy.log(B), INDEX)
    with pytest.raises(Unsupported, match="not a dim"):
        compile_expr(dim_symbol("Z"), INDEX)


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
        assert data["code"] and functions_js(data["code"]).startswith("[(v)=>")


@pytest.mark.parametrize("hostile", ["</script><script>alert(1)</script>", "<!-- x", "a\u2028b\u2029c",
                                     "\"quoted\" & 'single'"])
def test_the_script_data_cannot_end_its_element(hostile):
    text = script_json({"name": hostile})
    assert "</script" not in text.lower() and "<!--" not in text and "<" not in text
    assert "\u2028" not in text and "\u2029" not in text and "&" not in text
    assert json.loads(text) == {"name": hostile}
