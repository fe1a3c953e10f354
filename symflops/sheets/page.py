"""The HTML sheet: one self-contained page per declaration, and the gallery.

The page's body is the Markdown sheet (the same partials, sections and
order, :func:`symflops.sheets.render.render` in ``md``) read into HTML by
:mod:`.markdown`, the math as MathML (:mod:`.mathml`), the figures inline
as SVG; above it, the live numbers (:mod:`.live`): an input per dim and
every named quantity recomputed in the browser from code compiled out of
the engine's polynomials.  Nothing is loaded at view time: no script,
style, font or image comes from anywhere but the page.

Layout and prose are in ``templates/sheet.html.j2`` (with ``live.js.j2``
and ``style.css.j2``) and ``templates/index.html.j2``, rendered in Jinja's
sandbox with autoescaping on: a user string reaches the page escaped for
HTML unless it is markup this module made (MathML, SVG, the converted
body), and the script's data is JSON escaped for a ``<script>`` element
(:func:`.live.script_json`).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping, Sequence

from urllib.parse import quote

import jinja2
import sympy
from markupsafe import Markup

from .environment import _Bounded, _Loader, bounded_render, template_dir, template_error
from .live import live_data, script_json
from .markdown import Converter
from .mathml import mathml
from ..core.errors import SymflopsError
from ..core.ir import substitute
from ..core.records import Derivation
from ..count.explain import SheetCounts

SHEET_TEMPLATE = "sheet.html.j2"
INDEX_TEMPLATE = "index.html.j2"


@functools.lru_cache(maxsize=8)
def html_environment(user_templates: str | None = None) -> jinja2.Environment:
    """The sandboxed Jinja environment of the HTML pages: autoescaped."""
    dirs = ([user_templates] if user_templates else []) + [template_dir()]
    return _Bounded(loader=_Loader(dirs), undefined=jinja2.StrictUndefined, autoescape=True,
                    keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def _render(name: str, context: Mapping[str, Any], user_templates: str | None) -> str:
    env = html_environment(user_templates)
    try:
        return bounded_render(env.get_template(name), context)
    except SymflopsError:
        raise
    except Exception as exc:
        error = template_error(exc, "md", user_templates)
        if error is None:
            raise
        raise error from None


def inline_svg(data: bytes) -> str:
    """The ``<svg>`` elements of one or more SVG files (joined), for the page:
    their XML prologs and doctypes dropped, and slimmed (:func:`slim_svg`).
    matplotlib escapes the text it writes."""
    text = data.decode("utf-8")
    parts = [p[:p.rindex("</svg>") + 6] for p in re.split(r"(?=<svg\b)", text)[1:]]
    if not parts:
        raise SymflopsError("a figure is not an SVG image", hint="this is a bug in symflops")
    return "\n".join(slim_svg(p) for p in parts)


_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)
_GEOMETRY = re.compile(r'\s(d|x|y|transform)="([^"]*)"')
_DECIMAL = re.compile(r"-?\d+\.\d+")
_ID = re.compile(r'\sid="([^"]*)"')


def _rounded(m: re.Match) -> str:
    text = f"{float(m.group(0)):.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def slim_svg(svg: str) -> str:
    """One matplotlib SVG image, smaller and drawn the same at a page's scale:
    coordinates to a tenth of a point (matplotlib writes six decimals), no
    metadata block, no indentation or line breaks between tags or inside a
    path, and no ``id`` that nothing refers to (``url(#...)``,
    ``xlink:href="#..."``).  Text inside elements is left as it is."""
    svg = _METADATA.sub("", svg)
    svg = _GEOMETRY.sub(lambda m: f' {m.group(1)}="' + " ".join(
        _DECIMAL.sub(_rounded, m.group(2)).split()) + '"', svg)
    used = set(re.findall(r"url\(#([^)]+)\)", svg)) | set(re.findall(r'href="#([^"]+)"', svg))
    svg = _ID.sub(lambda m: m.group(0) if m.group(1) in used else "", svg)
    svg = re.sub(r">\s+<", "><", _COMMENT.sub("", svg))
    return _classes(_unwrap_groups(svg))


_STYLE = re.compile(r' style="([^"]*)"')


def _classes(svg: str) -> str:
    """Each ``style`` that recurs in the image written once, as a class in
    the image's ``<style>`` (named after a digest of the image, so that two
    images on one page keep theirs apart): the rule applies as the
    attribute did (a class outranks matplotlib's ``*`` rule, as the style
    attribute did, and nothing else on the page styles an SVG's elements)."""
    import hashlib

    counts: dict[str, int] = {}
    for style in _STYLE.findall(svg):
        counts[style] = counts.get(style, 0) + 1
    shared = [st for st, n in counts.items() if n > 1 and "{" not in st and "}" not in st]
    if not shared or "</style>" not in svg:
        return svg
    tag = "f" + hashlib.sha256(svg.encode()).hexdigest()[:6]
    names = {st: f"{tag}{k}" for k, st in enumerate(shared)}
    svg = _STYLE.sub(lambda m: f' class="{names[m.group(1)]}"' if m.group(1) in names
                     else m.group(0), svg)
    rules = "".join(f".{n}{{{st}}}" for st, n in names.items())
    return svg.replace("</style>", rules + "</style>", 1)


_COMMENT = re.compile(r"<!--.*?-->", re.S)
_GROUP = re.compile(r"<g(\s[^>]*)?>|</g>")


def _unwrap_groups(svg: str) -> str:
    """``<g>...</g>`` without attributes (matplotlib's grouping once its ids
    are gone) replaced by its content: it changes nothing drawn."""
    out, kept, at = [], [], 0
    for m in _GROUP.finditer(svg):
        out.append(svg[at:m.start()])
        at = m.end()
        if m.group(0) == "</g>":
            if kept.pop():
                out.append("</g>")
        elif m.group(0).endswith("/>"):  # an empty group
            continue
        else:
            keep = bool((m.group(1) or "").strip())
            kept.append(keep)
            if keep:
                out.append(m.group(0))
    out.append(svg[at:])
    return "".join(out)


def svg_figures(derivation: Derivation, counts: SheetCounts) -> dict[str, bytes]:
    """The Markdown sheet's figures drawn as SVG, by the file name the
    Markdown sheet gives them, and the computation graph (which the
    Markdown sheet writes in Mermaid) as ``mermaid``."""
    import dataclasses

    from .figures import draw, figures_of
    from .plots import graph_svgs

    chosen = figures_of(derivation, counts)
    svg = dataclasses.replace(chosen, files=tuple(
        dataclasses.replace(f, fmt="svg", filename=f.filename[:-4] + ".svg")
        for f in chosen.of("md")))
    drawn = draw(svg, derivation, counts.costs)
    out = {name[:-4] + ".png": data for name, data in drawn.items()}
    out["mermaid"] = b"".join(graph_svgs(chosen.graph))
    return out


#: What each kind of quantity is counted in, for the live table.
def _unit(kind: str, unit: str) -> str:
    return {"FLOPs": unit, "bytes": "bytes", "elements": "elements", "count": ""}.get(kind, "")


#: The quantities the live panel shows first (the others are one click away).
HEADLINE = ("params", "flops.forward", "flops.backward", "flops.total", "flops_per_token.total",
            "memory.fixed_bytes", "memory.activation_bytes", "memory.total_bytes",
            "kv_cache.bytes")


def _rows(data: Mapping[str, Any], headline: bool) -> list[dict[str, Any]]:
    """The live table's rows (the headline ones, or the others): each
    quantity with the cells it shows."""
    total = "flops.total"
    rows = []
    for q in data["quantities"]:
        if (q["name"] in HEADLINE) != headline:
            continue
        cells = [("exact", None), ("approx", None)]
        if q["kind"] == "bytes":
            cells += [("GB", None), ("GiB", None)]
        elif q["kind"] == "FLOPs" and q["per"] == "pass" and q["name"] != total:
            cells += [("share", total), ("", None)]
        else:
            cells += [("", None), ("", None)]
        rows.append({"name": q["name"], "description": q["description"],
                     "unit": _unit(q["kind"], data["unit"]), "cells": cells})
    return rows


def sheet_page(derivation: Derivation, counts: SheetCounts, markdown: str,
               figures: Mapping[str, bytes], user_templates: str | None = None,
               reference: bool = False) -> str:
    """The HTML sheet of ``derivation``: ``markdown`` (its Markdown sheet)
    read into HTML with ``figures`` (file name -> SVG bytes; ``mermaid`` the
    computation graph, which the Markdown sheet draws as Mermaid) inline;
    ``reference``: the site has the reference's pages (:mod:`.site`), linked."""
    layer = derivation.layer
    converter = Converter({k: inline_svg(v) for k, v in figures.items()}, title=False)
    body = converter.convert(markdown)
    data = live_data(layer, macs=counts.costs.unit == "MACs", derivation=derivation)
    context = {
        "name": layer.name,
        "title": layer.title or layer.name,
        "body": Markup(body),
        "toc": [(level, ident, Markup(text)) for level, ident, text in converter.headings
                if level == 2],
        "dims": data["dims"],
        "examples": data["examples"],
        "first": data["examples"][0]["values"] if data["examples"] else [None] * len(data["dims"]),
        "precisions": data["precisions"],
        "precision": data["precision"],
        "attention": data["attention"],
        "headline": _rows(data, True),
        "rows": _rows(data, False),
        "unit": data["unit"],
        "data_json": Markup(script_json(data)),
        "reference": reference,
    }
    return _render(SHEET_TEMPLATE, context, user_templates)


def headline(derivation: Derivation, counts: SheetCounts) -> list[tuple[str, str]]:
    """The gallery's formulas of one sheet, as MathML printed as the sheet
    prints polynomials: parameters, training work, saved activations in bytes."""
    from .printing import PolyPrinter

    c = counts.costs
    poly = PolyPrinter(tuple(d.name for d in derivation.layer.dims))
    subs = derivation.layer.substitutions
    out = [("parameters", c.params), (f"training {c.unit}", c.flops_total),
           (f"saved activations, bytes ({c.precision.name})", c.memory()["activation_bytes"])]
    return [(label, mathml(poly(substitute(sympy.expand(expr), subs) if subs else expr)))
            for label, expr in out]


def notebook_view(derivation: Derivation, counts: SheetCounts) -> str:
    """The HTML a notebook shows for a derivation: the headline formulas as
    MathML and their numbers at each of the declaration's examples (exact,
    computed here: the view runs no script)."""
    from .printing import PolyPrinter
    from ..count.evaluate import number

    layer = derivation.layer
    c = counts.costs
    poly = PolyPrinter(tuple(d.name for d in layer.dims))
    subs = layer.substitutions
    memory = c.memory()
    quantities = [("parameters (elements)", c.params),
                  (f"forward {c.unit}", c.flops_forward),
                  (f"backward {c.unit}", c.flops_backward),
                  (f"training {c.unit}", c.flops_total),
                  ("saved activations (elements)", c.activations),
                  ("training memory (bytes)", memory["total_bytes"])]
    examples = [e for e in layer.examples]
    rows = []
    for label, expr in quantities:
        expr = substitute(sympy.expand(expr), subs) if subs else sympy.expand(expr)
        values = []
        for e in examples:
            v = number(expr, {k: sympy.Integer(x) for k, x in e.values})
            values.append(f"{v:,}" if isinstance(v, int) else f"{v:.6g}")
        rows.append({"label": label, "formula": Markup(mathml(poly(expr))), "numbers": values})
    return _render("notebook.html.j2", {
        "title": layer.title or layer.name, "name": layer.name, "unit": c.unit,
        "precision": c.precision.name, "examples": [e.name for e in examples], "rows": rows,
        "rules": [r.statement for r in derivation.rules]}, None)


def index_page(entries: Sequence[Mapping[str, Any]], user_templates: str | None = None,
               reference: Sequence[Any] = ()) -> str:
    """The gallery: each sheet's title, file and headline formulas
    (``entries``: ``name``, ``title``, ``file``, ``formulas`` as MathML)."""
    shown = [{"name": e["name"], "title": e["title"], "href": "./" + quote(e["file"]),
              "formulas": [(label, Markup(f)) for label, f in e["formulas"]]} for e in entries]
    docs = [{"title": p.title, "href": f"docs/{quote(p.name)}.html"} for p in reference]
    return _render(INDEX_TEMPLATE, {"entries": shown, "reference": docs}, user_templates)
