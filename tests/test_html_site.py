"""The HTML site: the gallery, the sheets and the reference (docs/*.md read
by the sheets' Markdown reader) under one navigation; every page of docs/
is in it and every link between its pages resolves, to a file and to an id
in it (symflops/sheets/site.py)."""

from __future__ import annotations

import html.parser
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from symflops.commands.build import build
from symflops.core.errors import SymflopsError
from symflops.sheets.site import reference_pages
import forked

ROOT = Path(__file__).resolve().parent.parent


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k == "href" and tag == "a" and v is not None:
                self.hrefs.append(v)
            if k == "id" and v is not None:
                self.ids.add(v)


def _read(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def dangling(out: Path) -> list[tuple[str, str]]:
    """Every (page, href) of the site under ``out`` that points at no file,
    or at an id its file does not have."""
    bad = []
    for page in sorted(out.rglob("*.html")):
        for href in _read(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc:
                continue  # an address on the web
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_file():
                bad.append((str(page.relative_to(out)), href))
            elif parts.fragment and parts.fragment not in _read(target).ids:
                bad.append((str(page.relative_to(out)), href))
    return bad


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(ROOT / "derivations" / "ffn.yaml", src)
    result = build(str(src), str(tmp / "out"), pdf=False, formats=("html",),
                   docs=str(ROOT / "docs"))
    assert not result.failed
    return tmp / "out"


def test_every_docs_page_is_in_the_site(site):
    docs = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert sorted(p.stem for p in (site / "docs").glob("*.html")) == docs
    # one navigation: the gallery lists every reference page, each page lists them all
    gallery = _read(site / "index.html").hrefs
    assert {f"docs/{d}.html" for d in docs} <= set(gallery)
    for d in docs:
        hrefs = _read(site / "docs" / f"{d}.html").hrefs
        assert "../index.html" in hrefs and "index.html" in hrefs
        assert {f"{x}.html" for x in docs if x != d} <= set(hrefs)
    # the sheet's page links the gallery and the reference
    assert {"index.html", "docs/index.html"} <= set(_read(site / "ffn.html").hrefs)


def test_every_internal_link_of_the_site_resolves(site):
    assert dangling(site) == []
    # the docs' own links between pages came through as links (json.md is cited by several)
    cited = [h for p in (site / "docs").glob("*.html") for h in _read(p).hrefs
             if h.startswith("json.html")]
    assert cited


def test_a_dangling_link_is_found(site, tmp_path):
    """The check above can fail: a page pointing at a missing page or id is reported."""
    copy = tmp_path / "out"
    shutil.copytree(site, copy)
    page = copy / "docs" / "limits.html"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("</article>", '<a href="nowhere.html">x</a>'
                                 '<a href="json.html#no-such-id">y</a></article>'),
                    encoding="utf-8")
    assert dangling(copy) == [("docs/limits.html", "nowhere.html"),
                              ("docs/limits.html", "json.html#no-such-id")]


def test_a_docs_link_the_site_does_not_hold_is_refused(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Reference\n\nSee [the page](other.md) and "
                                   "[the front page](../README.md).\n")
    (docs / "other.md").write_text("# Other\n\nBack to [the index](index.md#reference).\n")
    with pytest.raises(SymflopsError, match=r"docs/index.md links to '../README.md'"):
        reference_pages(str(docs))
    (docs / "index.md").write_text("# Reference\n\nSee [the page](other.md).\n")
    pages = {p.name: p.html for p in reference_pages(str(docs))}
    assert '<a href="other.html">the page</a>' in pages["index"]
    assert '<a href="index.html#reference">the index</a>' in pages["other"]


def test_a_build_without_html_writes_no_reference(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "derivations" / "ffn.yaml", src)
    build(str(src), str(tmp_path / "out"), pdf=False, formats=("md",), docs=str(ROOT / "docs"))
    assert not os.path.exists(tmp_path / "out" / "docs")


def test_the_working_directory_s_own_docs_are_not_the_reference(tmp_path):
    """A user building their own declarations in a project of theirs: its
    docs/ (here one whose link would be refused) is not read; the site's
    reference is symflops's own pages."""

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("# My notes\n\n[away](../secret.txt)\n")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "derivations" / "dropout.yaml", src)
    result = forked.run("build", "--src", "src", "--out", "out", "--format", "html", "--no-pdf", "-j", "1", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    pages = {p.name for p in (tmp_path / "out" / "docs").iterdir()}
    assert "notes.html" not in pages
    assert {f"{p.stem}.html" for p in (ROOT / "docs").glob("*.md")} <= pages
