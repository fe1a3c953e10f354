"""The HTML sheets' math (symflops/sheets/mathml.py) and Markdown reader
(symflops/sheets/markdown.py): every fragment of every shipped sheet
converts with no LaTeX left in its text, and no user text becomes markup."""

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from symflops.sheets.markdown import Converter, to_html
from symflops.sheets.mathml import MathError, mathml, sanitize

ROOT = Path(__file__).resolve().parent.parent
SHEETS = sorted((ROOT / "build").glob("*.md"))


def fragments(md):
    """Every display ($$...$$) and inline ($...$) math fragment of a Markdown sheet."""
    out = [m.group(1).strip() for m in re.finditer(r"\$\$(.+?)\$\$", md, re.S)]
    rest = re.sub(r"`[^`\n]*`", "", re.sub(r"\$\$(.+?)\$\$", "", md, flags=re.S))
    out += [m.group(1) for m in re.finditer(r"(?<!\\)\$(.+?)(?<!\\)\$", rest)]
    return out


def text_of(markup):
    """What a reader sees of MathML: its text, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_every_fragment_of_every_shipped_sheet_converts():
    seen = set()
    for path in SHEETS:
        seen.update(fragments(path.read_text()))
    assert len(seen) > 1000  # the sheets print thousands of distinct fragments
    for latex in sorted(seen):
        out = mathml(latex)
        ET.fromstring(out.replace("<math", '<math xmlns="http://www.w3.org/1998/Math/MathML"', 1))
        # the text of names, numbers and words (an operator may be a brace or a hat's ^)
        words = "".join(html.unescape(t) for t in re.findall(r"<m(?:i|n|text)\b[^>]*>([^<]*)<", out))
        left = re.findall(r"\\[A-Za-z]+|[{}^$&]", words)
        assert not left, (latex, left)


@pytest.mark.parametrize("latex, tag, text", [
    (r"\mathit{Xn}", "mi", "Xn"),  # one letter per <mi>: italic, its default, unsaid
    (r"\mathrm{cd}", 'mi mathvariant="normal"', "cd"),
    (r"W_{\text{in}}", "mtext", "Win"),
    (r"\hat{x}", "mover", "x^"),
    (r"\sum_{d=0}^{D - 1} X_{bd}", "msubsup", "∑d=0D−1Xbd"),
    (r"2 \times \underbrace{BF}_{\text{outputs}}", "munder", "2×BF⏟outputs"),
    (r"\begin{cases} a & x \\ 0 & \text{otherwise} \end{cases}", "mtable", "{ax0otherwise"),
    (r"\begin{aligned} a &= b \\ c &= d \end{aligned}", "mtable", "a=bc=d"),
    (r"\frac{\partial Y}{\partial X}", "mfrac", "∂Y∂X"),
])
def test_constructs_the_sheets_use(latex, tag, text):
    out = mathml(latex)
    assert f"<{tag}" in out, out
    assert text_of(out).replace("\u2062", "").replace(" ", "") == text, text_of(out)


@pytest.mark.parametrize("hostile", [
    r"\text{</mtext><script>alert(1)</script>}",
    r"\text{<img src=x onerror=alert(1)>}",
    r'\text{" onmouseover="alert(1)}',
    r"\mathrm{<b>}",
    r"\text{&lt;script&gt;}",
])
def test_text_in_math_is_never_markup(hostile):
    out = mathml(hostile)
    # parsed as XML, only MathML elements; no attribute beyond the vocabulary
    root = ET.fromstring(out)
    tags = {e.tag for e in root.iter()}
    assert tags <= {"math", "mrow", "mtext", "mi", "mo"}, tags
    assert "<script" not in out and "<img" not in out and "<b>" not in out
    assert not [a for e in root.iter() for a in e.attrib if a.startswith("on")]


def test_a_bare_character_of_markup_is_escaped_by_the_sanitizer():
    # what latex2mathml writes for \text{a<b&c"}: raw text inside <mtext>
    assert sanitize('<math><mtext>a<b&c"</mtext></math>') == \
        "<math><mtext>a&lt;b&amp;c&quot;</mtext></math>"
    # a tag of the vocabulary closing the wrong element is text, not markup
    assert sanitize("<math><mrow></mtext></mrow></math>") == \
        "<math><mrow>&lt;/mtext&gt;</mrow></math>"
    with pytest.raises(MathError):
        sanitize("<math><mrow>")


def test_an_alignment_mark_outside_an_environment_is_refused():
    # latex2mathml reads no 'array' without a column spec as an environment: '&' would show
    with pytest.raises(MathError, match="alignment"):
        mathml(r"a & b")


def test_markdown_escapes_read_literally_and_no_html_passes():
    md = ("# Sneaky &lt;b&gt;bold&lt;/b&gt; 50% \\$x\\$ &amp; {y}\n\n"
          "Text with <script>alert(1)</script> and \\| pipe, **bold $x_{1}$** and `a<b`.\n\n"
          "| A | B |\n|---|---:|\n| $x \\mid y$ | a \\| b |\n")
    out = to_html(md)
    assert "<script>" not in out and "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert '<h1 id="sneaky-b-bold-b-50-x-y">Sneaky &lt;b&gt;bold&lt;/b&gt; 50% $x$ &amp; {y}</h1>' in out
    assert "<code>a&lt;b</code>" in out and "<strong>bold <math" in out
    assert '<td class="r">a | b</td>' in out  # the escaped pipe is text, not a column


def test_an_image_that_is_not_a_figure_of_the_sheet_is_refused():
    with pytest.raises(Exception, match="no inline figure"):
        to_html("![x](https://example.com/track.png)")
    assert "<svg" in Converter({"f.png": "<svg></svg>"}).convert("![cap](f.png)")


def test_the_pages_body_is_the_markdown_sheet_read(tmp_path):
    """The HTML sheet's content is the Markdown sheet's, read by this module:
    the freshness test of build/*.md covers it (build/*.html is not tracked)."""
    from symflops.commands.build import render_layer
    from symflops.declaration.reader import load
    from symflops.sheets.page import svg_figures, inline_svg
    from symflops.count.cost import costs
    from symflops.count.explain import explain
    from symflops.derive.patterns import with_patterns
    import symflops

    path = ROOT / "derivations" / "ffn.yaml"
    page = render_layer(load(path), "html")
    md = render_layer(load(path), "md")
    d = with_patterns(symflops.derive(load(path)))
    figures = {k: inline_svg(v) for k, v in svg_figures(d, explain(d, costs(d))).items()}
    body = page[page.index('<article class="sheet">') + len('<article class="sheet">'):page.index("</article>")]
    assert body.strip() == Converter(figures, title=False).convert(md).strip()
    assert md.startswith("# Transformer feed-forward block\n")  # shown above the live numbers
    assert md == (ROOT / "build" / "ffn.md").read_text()


def test_a_line_that_starts_like_a_table_row_but_is_not_one_is_text():
    # llama's compact forward table has rows broken across lines (a note inside a cell):
    # the reader looped on the stray ' | $2BSDNE$ | $0$ |' line, growing without end
    md = "| a | b |\n|---|---|\n| 1 | note\n\nmore\n\n | $x$ | 0 |\n| 2 | 3 |\n"
    out = to_html(md)
    assert out.count("<table>") == 1 and "<p>more</p>" in out and "<p>| <math" in out
