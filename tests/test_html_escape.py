"""Escaping of user text on the HTML sheet and the gallery: names with ``<``,
``"``, ``</script>``, ``<!--``, U+2028 and format characters read literally,
as text, attribute values and the script's data; no user string makes an
element, an attribute or code.  (The same pages run in a browser in
tests/test_html_browser.py: no alert, no console error.)"""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import forked

ROOT = Path(__file__).resolve().parent.parent

TITLE = "Sneaky </script><script>alert(1)</script> <!-- \"quoted\" & 'single' \u2028line <b>bold</b>"
EXAMPLE = "ex </script><img src=x onerror=alert(2)> \"q\" \u2029"
HOSTILE = f"""\
name: "evil</script>"
title: {json.dumps(TITLE)}
dims:
  B: "tokens <img src=x onerror=alert(3)> \\" & \\u202e"
  D: "</script><!--"
tensors:
  X: {{shape: [B, D], role: input, description: "<script>alert(4)</script>"}}
  W: {{shape: [D, D], role: param}}
ops:
  - Y[b, e] = X[b, d] W[d, e]
examples:
  {json.dumps(EXAMPLE)}: {{B: 3, D: 4}}
"""
HOSTILE_FILE = "evil\"<img src=x onerror=alert(5)>"


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each script."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.scripts, self._in = [], [], None
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = []

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append("".join(self._in))
            self._in = None

    def handle_data(self, data):
        (self._in if self._in is not None else self.text).append(data)


def parse(page):
    p = Elements()
    p.feed(page)
    p.close()
    return p


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "src").mkdir()
    (folder / "src" / f"{HOSTILE_FILE}.yaml").write_text(HOSTILE)
    result = forked.run("build", "--src", folder / "src", "--out", folder / "out", "--format", "html")
    assert result.returncode == 0, result.stderr
    return folder / "out"


def test_the_sheet_has_only_its_own_elements_and_scripts(hostile):
    page = (hostile / f"{HOSTILE_FILE}.html").read_text()
    p = parse(page)
    assert len(p.scripts) == 2  # the data and the live numbers' code, nothing a name made
    for tag, attrs in p.tags:
        assert tag not in ("img", "iframe", "object", "embed", "b"), tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
    # every user string is in the text, literally (the HTML parser reads the escapes back)
    text = "".join(p.text)
    assert "Sneaky </script><script>alert(1)</script> <!-- \"quoted\" & 'single'" in text
    assert "<script>alert(4)</script>" in text
    assert "ex </script><img src=x onerror=alert(2)>" in text   # the example's option
    # the data the script reads gives the strings back exactly
    data = json.loads(p.scripts[0])
    assert data["name"] == "evil</script>"
    assert data["examples"][0]["name"] == EXAMPLE
    assert data["dims"][1]["description"] == "</script><!--"
    # and the element holding it cannot be ended or commented out by them
    raw = page[page.index('id="live-data">'):]
    raw = raw[:raw.index("</script>")]
    assert "<" not in raw and "\u2028" not in raw and "\u2029" not in raw
    # the script is the shipped one: no user text in it (its data is the JSON above)
    assert "evil" not in p.scripts[1] and "alert" not in p.scripts[1]


def test_the_gallery_escapes_titles_and_links(hostile):
    page = (hostile / "index.html").read_text()
    p = parse(page)
    assert not p.scripts
    links = [a["href"] for tag, a in p.tags if tag == "a" and not a["href"].startswith("docs/")]
    # the file name is a relative path, percent-encoded: never a scheme nor markup
    # (the other links are the reference's pages, docs/NAME.html)
    assert links == ["./evil%22%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.html"], links
    assert TITLE.replace("\u2028", " ").split(" line")[0] in "".join(p.text).replace("\u2028", " ")
    assert not [t for t, _ in p.tags if t in ("img", "b")]


def test_a_declaration_named_index_would_overwrite_the_gallery_and_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "Index.yaml").write_text((ROOT / "derivations" / "ffn.yaml").read_text())
    result = forked.run("build", "--src", tmp_path / "src", "--out", tmp_path / "out", "--format", "html")
    assert result.returncode == 2 and "the gallery of the build" in result.stderr, result.stderr
    assert "Index.html" not in [p.name for p in (tmp_path / "out").iterdir()]
