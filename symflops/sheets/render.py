"""Derivation sheets: a typed context from the records, laid out by Jinja.

:func:`~symflops.sheets.context.sheet_context` computes every formula of a
sheet and escapes every piece of user text for the target format
(:mod:`.escape`); :func:`~symflops.sheets.environment.environment` builds
the sandboxed Jinja environment (``StrictUndefined``: a missing variable is
an error, not a blank); :func:`render` returns the sheet as a string.  Only
``symflops build`` writes files.

The renderer only formats what it is given: the derivation record with its
patterns and the count record (:class:`~symflops.count.explain.SheetCounts`);
it derives and counts nothing itself.
"""

from __future__ import annotations

from .context import sheet_context
from .environment import FORMATS, TEMPLATE_NAMES, Format, bounded_render, environment, template_error
from .escape import check_tex
from .figures import figures_context, figures_of
from .roofline import roofline_context, roofline_of
from ..count.explain import SheetCounts
from ..core.errors import SymflopsError
from ..core.records import Derivation


def render(derivation: Derivation, counts: SheetCounts, fmt: Format,
           user_templates: str | None = None) -> str:
    """The sheet as a string in ``fmt`` ('md' or 'tex'), of a derivation
    with its patterns (:func:`symflops.derive.patterns.with_patterns`) and
    its counts (:func:`symflops.count.explain.explain`).  Whatever a user
    template does wrong is a SymflopsError naming the template and line."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    if fmt == "tex":
        check_tex(derivation.layer)
    env = environment(fmt, user_templates)
    context = {**sheet_context(derivation, counts, fmt),
               "figures": figures_context(figures_of(derivation, counts), fmt),
               "roofline": roofline_context(roofline_of(derivation, counts), fmt)}
    try:
        return bounded_render(env.get_template(TEMPLATE_NAMES[fmt]), context)
    except SymflopsError:
        raise
    except Exception as exc:
        error = template_error(exc, fmt, user_templates)
        if error is None:
            raise
        raise error from None
