"""The reference as pages of the sheets' site: each ``docs/*.md`` read by
the sheets' own Markdown reader (:class:`.markdown.Converter`) into
``docs/NAME.html`` beside the gallery, with one navigation for both (the
gallery, the reference's index, every reference page).

A link between reference pages (``[json.md](json.md#keys)``) becomes a
link to that page's HTML; a link to anything else the site does not hold
is refused, naming the page and the link, so that no page of the site
points nowhere.  Layout is ``templates/doc.html.j2`` (autoescaped, in the
sandbox, like the sheets' pages).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

from markupsafe import Markup

from .markdown import Converter
from ..core.errors import SymflopsError, printable

DOC_TEMPLATE = "doc.html.j2"
#: where the reference's pages go, inside a build's output directory
SITE_DIR = "docs"


@dataclass(frozen=True)
class DocPage:
    name: str        # the file's stem: ``json`` for docs/json.md
    title: str       # its first heading, as text
    html: str        # the whole page


def _title(markdown: str, name: str) -> str:
    m = re.search(r"^#\s+(.+)$", markdown, re.M)
    return re.sub(r"[`*]", "", m.group(1)).strip() if m else name


def _linker(page: str, names: set[str]) -> Callable[[str], str]:
    """A reference page's relative link target to its href in the site."""
    def link(target: str) -> str:
        path, _, fragment = target.partition("#")
        stem, ext = os.path.splitext(path)
        if ext == ".md" and "/" not in path and stem in names:
            return f"{stem}.html" + (f"#{fragment}" if fragment else "")
        raise SymflopsError(f"docs/{page}.md links to {printable(target)!r}, which the site "
                            "does not hold",
                            hint="link to another page of docs/ (NAME.md), or give the address "
                                 "with https://")
    return link


def reference_pages(docs: str, user_templates: str | None = None) -> list[DocPage]:
    """Every ``docs/*.md`` as a page of the site, the index first, then by name."""
    from .page import _render

    files = sorted(f for f in os.listdir(docs) if f.endswith(".md"))
    names = {f[:-3] for f in files}
    texts = {}
    for f in files:
        with open(os.path.join(docs, f), encoding="utf-8") as fh:
            texts[f[:-3]] = fh.read()
    order = sorted(names, key=lambda n: (n != "index", n))
    nav = [{"name": n, "title": _title(texts[n], n), "href": f"{n}.html"} for n in order]
    pages = []
    for name in order:
        converter = Converter(links=_linker(name, names))
        body = converter.convert(texts[name])
        title = _title(texts[name], name)
        pages.append(DocPage(name, title, _render(DOC_TEMPLATE, {
            "name": name, "title": title, "body": Markup(body), "nav": nav,
            "source": f"docs/{name}.md"}, user_templates)))
    return pages
