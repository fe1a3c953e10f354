"""The Markdown of a sheet's sections as HTML: the subset the shipped
partials write (headings, paragraphs, pipe tables, lists, fenced code,
display and inline math, code spans, bold and italic, links, images).

The HTML sheet is the Markdown sheet's sections, section by section
(:mod:`symflops.sheets.page`), so that it has the same content in the same
order as the other formats and no template of its own that could drift.
Unlike a Markdown viewer this reader passes no HTML through: every
character of text is escaped for HTML (:func:`html.escape`) after the
Markdown escapes are read (``\\$``, ``\\|``, ``\\_``, and the entities
``&lt;``... that :func:`symflops.core.text.escape_md` writes), so user text
that the Markdown sheet escaped reads literally here too.  Math goes
through :func:`symflops.sheets.mathml.mathml`.  Images are the sheet's
figures, inlined (``figures`` maps a file name to its SVG); an image of any
other file is refused, so that the page never loads anything.
"""

from __future__ import annotations

import html
import re
from typing import Callable, Mapping

from .mathml import mathml
from ..core.errors import SymflopsError

#: Inline math longer than this (LaTeX characters) is set in a box that scrolls.
LONG_INLINE = 40

_ESCAPABLE = set("\\`*_{}[]()#+-.!|$<>~^&\"'=:")
_ENTITY = re.compile(r"&(?:#x[0-9A-Fa-f]{1,6}|#[0-9]{1,7}|[A-Za-z]{2,8});")
_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"(\s*)([-*+]|\d+[.)])\s+(.*)")
_RULE = re.compile(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def slug(text: str, taken: set[str]) -> str:
    """An id for a heading: its words, lower case, joined by '-', unique."""
    base = re.sub(r"[^a-z0-9]+", "-", html.unescape(re.sub(r"<[^>]*>", "", text)).lower()).strip("-")
    base = base[:60] or "section"
    out, k = base, 2
    while out in taken:
        out, k = f"{base}-{k}", k + 1
    taken.add(out)
    return out


#: ``[text](target)`` with a relative target (a page of the reference)
_LOCAL = re.compile(r"\[([^\]]+)\]\(([^)\s:]+)\)")


class Converter:
    """One page's conversion (heading ids are unique across its sections)."""

    def __init__(self, figures: Mapping[str, str] | None = None, title: bool = True,
                 links: Callable[[str], str] | None = None):
        self.figures = dict(figures or {})
        #: a relative link's target to its href (the reference's pages); None: a sheet,
        #: whose text has no relative links (``[`` is then text)
        self.links = links
        #: whether the sheet's title (its first level-1 heading) is kept (the page shows its own)
        self.title = title
        self.ids: set[str] = set()
        self.headings: list[tuple[int, str, str]] = []  # (level, id, html)

    # ------------------------------------------------------------ inline --
    def inline(self, text: str) -> str:
        out: list[str] = []
        open_: list[str] = []
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n and text[i + 1] in _ESCAPABLE:
                out.append(html.escape(text[i + 1]))
                i += 2
            elif text.startswith("``", i) and text.find("``", i + 2) > 0:
                j = text.find("``", i + 2)  # a code span that holds a backtick
                out.append(f"<code>{html.escape(text[i + 2:j].strip())}</code>")
                i = j + 2
            elif c == "`":
                j = text.find("`", i + 1)
                if j < 0:
                    out.append("`")
                    i += 1
                else:
                    out.append(f"<code>{html.escape(text[i + 1:j])}</code>")
                    i = j + 1
            elif c == "$":
                j = _closing_dollar(text, i + 1)
                if j < 0:
                    out.append("$")
                    i += 1
                else:
                    latex = text[i + 1:j]
                    m = mathml(latex)
                    # a long formula scrolls in its own box (MathML does not break lines)
                    out.append(f'<span class="m">{m}</span>' if len(latex) > LONG_INLINE else m)
                    i = j + 1
            elif text.startswith("**", i):
                out.append(self._toggle(open_, "strong"))
                i += 2
            elif c == "*" and (open_ and open_[-1] == "em" or (i + 1 < n and not text[i + 1].isspace())):
                out.append(self._toggle(open_, "em"))
                i += 1
            elif c == "&":
                m = _ENTITY.match(text, i)
                if m:
                    out.append(html.escape(html.unescape(m.group(0))))
                    i = m.end()
                else:
                    out.append("&amp;")
                    i += 1
            elif c == "!" and text.startswith("![", i):
                m = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)").match(text, i)
                if not m:
                    out.append("!")
                    i += 1
                    continue
                out.append(self.image(m.group(1), m.group(2)))
                i = m.end()
            elif c == "[":
                m = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)").match(text, i)
                local = None if m or self.links is None else _LOCAL.match(text, i)
                if local:
                    href = self.links(local.group(2))
                    out.append(f'<a href="{html.escape(href)}">{self.inline(local.group(1))}</a>')
                    i = local.end()
                    continue
                if not m:
                    out.append("[")
                    i += 1
                    continue
                out.append(f'<a href="{html.escape(m.group(2))}">{self.inline(m.group(1))}</a>')
                i = m.end()
            else:
                out.append(html.escape(c))
                i += 1
        while open_:
            out.append(f"</{open_.pop()}>")
        return "".join(out)

    @staticmethod
    def _toggle(open_: list[str], tag: str) -> str:
        if open_ and open_[-1] == tag:
            open_.pop()
            return f"</{tag}>"
        open_.append(tag)
        return f"<{tag}>"

    def image(self, alt: str, src: str) -> str:
        if src not in self.figures:
            raise SymflopsError(f"the HTML sheet has no inline figure for the image {src!r}",
                                hint="a sheet's images are its figures; render them first")
        # the sheet writes the caption below the image; the alt text labels the figure
        label = html.escape(html.unescape(re.sub(r"<[^>]*>", "", self.inline(alt))), quote=True)
        return f'<figure role="img" aria-label="{label}">{self.figures[src]}</figure>'

    # ------------------------------------------------------------- blocks --
    def convert(self, markdown: str) -> str:
        lines = markdown.replace("\r\n", "\n").split("\n")
        out: list[str] = []
        i, n = 0, len(lines)
        while i < n:
            line = lines[i]
            stripped = line.strip()
            if not stripped:
                i += 1
                continue
            if stripped.startswith("```"):
                j = i + 1
                while j < n and not lines[j].strip().startswith("```"):
                    j += 1
                lang = stripped[3:].strip()
                if lang == "mermaid" and "mermaid" in self.figures:
                    # the computation graph, which the Markdown sheet writes in Mermaid
                    out.append(f'<figure class="graph">{self.figures["mermaid"]}</figure>')
                else:
                    body = html.escape("\n".join(lines[i + 1:j]))
                    out.append(f"<pre><code>{body}</code></pre>")
                i = j + 1
                continue
            if stripped == "$$" or (stripped.startswith("$$") and not stripped.endswith("$$")):
                j = i + 1
                while j < n and not lines[j].strip().endswith("$$"):
                    j += 1
                body = "\n".join([stripped[2:]] + [s for s in lines[i + 1:j]] +
                                 ([lines[j].strip()[:-2]] if j < n else []))
                out.append(f'<div class="display">{mathml(body.strip(), display=True)}</div>')
                i = j + 1
                continue
            if stripped.startswith("$$") and stripped.endswith("$$") and len(stripped) > 4:
                out.append(f'<div class="display">{mathml(stripped[2:-2].strip(), display=True)}</div>')
                i += 1
                continue
            m = _HEADING.match(stripped)
            if m:
                level = len(m.group(1))
                body = self.inline(m.group(2))
                if level == 1 and not self.title:
                    self.title = True  # the first title only
                    i += 1
                    continue
                ident = slug(body, self.ids)
                self.headings.append((level, ident, body))
                out.append(f'<h{level} id="{ident}">{body}</h{level}>')
                i += 1
                continue
            if stripped.startswith("|") and i + 1 < n and _RULE.match(lines[i + 1]):
                j = i + 2
                while j < n and lines[j].strip().startswith("|"):
                    j += 1
                out.append(self.table(lines[i], lines[i + 1], lines[i + 2:j]))
                i = j
                continue
            if _BULLET.match(line) and not stripped.startswith("**"):
                j = i
                items: list[tuple[int, str, str]] = []
                while j < n and lines[j].strip():
                    b = _BULLET.match(lines[j])
                    if b and not lines[j].strip().startswith("**"):
                        items.append((len(b.group(1)), b.group(2), b.group(3)))
                    elif items:
                        indent, mark, body = items[-1]
                        items[-1] = (indent, mark, body + " " + lines[j].strip())
                    j += 1
                    if j < n and not lines[j].strip() and j + 1 < n and _BULLET.match(lines[j + 1]):
                        j += 1  # a loose list: blank lines between items
                out.append(self.list(items))
                i = j
                continue
            if stripped.startswith(">"):
                j = i
                quoted = []
                while j < n and lines[j].strip().startswith(">"):
                    quoted.append(lines[j].strip()[1:].lstrip())
                    j += 1
                out.append(f"<blockquote>{self.convert(chr(10).join(quoted))}</blockquote>")
                i = j
                continue
            j = i
            para = []
            # the first line always (a line that starts like a table or math but is not one
            # is text), then every line up to one that starts another block
            while j < n and lines[j].strip() and (j == i or not (
                    lines[j].strip().startswith(("```", "$$", "|")) or _HEADING.match(lines[j].strip())
                    or _BULLET.match(lines[j]))):
                para.append(lines[j].strip())
                j += 1
            out.append(f"<p>{self.inline(' '.join(para))}</p>")
            i = j
        return "\n".join(out)

    def table(self, head: str, rule: str, rows: list[str]) -> str:
        align = [("right" if c.strip().endswith(":") else "") for c in _cells(rule)]

        def row(line: str, tag: str) -> str:
            cells = _cells(line)
            parts = []
            for k, cell in enumerate(cells):
                a = f' class="r"' if k < len(align) and align[k] == "right" else ""
                parts.append(f"<{tag}{a}>{self.inline(cell.strip())}</{tag}>")
            return "<tr>" + "".join(parts) + "</tr>"

        body = "".join(row(r, "td") for r in rows)
        return (f'<div class="table"><table><thead>{row(head, "th")}</thead>'
                f"<tbody>{body}</tbody></table></div>")

    def list(self, items: list[tuple[int, str, str]]) -> str:
        out: list[str] = []
        stack: list[tuple[int, str]] = []
        for indent, mark, body in items:
            tag = "ol" if mark[0].isdigit() else "ul"
            while stack and indent < stack[-1][0]:
                out.append(f"</li></{stack.pop()[1]}>")
            if not stack or indent > stack[-1][0]:
                stack.append((indent, tag))
                out.append(f"<{tag}><li>")
            else:
                out.append("</li><li>")
            out.append(self.inline(body))
        while stack:
            out.append(f"</li></{stack.pop()[1]}>")
        return "".join(out)


def _closing_dollar(text: str, start: int) -> int:
    """The index of the ``$`` that closes inline math opened before ``start`` (-1: none)."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "$":
            return i
        i += 1
    return -1


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table row: split at each ``|`` that is not escaped
    nor inside math or a code span."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    cells, cur, i, math, code = [], [], 0, False, False
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == "`" and not math:
            code = not code
        elif c == "$" and not code:
            math = not math
        elif c == "|" and not math and not code:
            cells.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if "".join(cur).strip():
        cells.append("".join(cur))
    return cells


def to_html(markdown: str, figures: Mapping[str, str] | None = None) -> str:
    """``markdown`` (one sheet section) as HTML."""
    return Converter(figures).convert(markdown)
