"""The notebook's view of a derivation (``_repr_html_``): formulas as MathML,
numbers at the declaration's examples, no script, nothing loaded; the
Markdown view stays."""

import re
from pathlib import Path

import symflops

ROOT = Path(__file__).resolve().parent.parent


def test_the_notebook_view_shows_formulas_and_exact_numbers_offline():
    d = symflops.derive(symflops.load(ROOT / "derivations" / "ffn.yaml"))
    view = d._repr_html_()
    assert "<script" not in view and "src=" not in view and "href=" not in view  # nothing to load
    assert view.count("<math") == 6
    # by hand at the example GPT-2 small MLP, B = 1024, D = 768, F = 3072:
    # training 12BDF = 12 * 1024 * 768 * 3072 = 28,991,029,248; params 2DF = 4,718,592;
    # memory at bf16-adam: 2(BD + BF + 12DF) = 2(786,432 + 3,145,728 + 28,311,552) = 64,487,424
    for figure in ("28,991,029,248", "4,718,592", "64,487,424"):
        assert f">{figure}</td>" in view, figure
    assert "GPT-2 small MLP" in view
    assert "dW_out[f,e] = H[b,f] dY[b,e]" in view
    assert d._repr_markdown_().startswith("# Transformer feed-forward block\n")


def test_the_notebook_view_escapes_the_title(tmp_path):
    text = (ROOT / "derivations" / "ffn.yaml").read_text().replace(
        "title: Transformer feed-forward block", "title: '<img src=x onerror=alert(1)> & </div>'")
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    view = symflops.derive(symflops.load(path))._repr_html_()
    assert "<img" not in view and "&lt;img src=x onerror=alert(1)&gt; &amp; &lt;/div&gt;" in view
    assert len(re.findall(r"<div\b", view)) == len(re.findall(r"</div>", view))
