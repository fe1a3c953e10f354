"""The public ``symflops.derive``: a derivation that shows its sheet in a notebook.

The display is here, above every stage, so that no stage reaches back: the
derivation record itself (:class:`~symflops.core.records.Derivation`) knows
nothing of costs or sheets.
"""

from __future__ import annotations

from .core.ir import Layer
from .core.records import Derivation
from .derive.backward import derive as _derive


class ShownDerivation(Derivation):
    """A :class:`~symflops.core.records.Derivation` that a notebook shows: as
    HTML (``_repr_html_``, what JupyterLab picks) and as its Markdown sheet
    (``_repr_markdown_``)."""

    def _repr_markdown_(self) -> str:
        from .count.cost import costs
        from .count.explain import explain
        from .derive.patterns import with_patterns
        from .sheets.render import render

        shown = with_patterns(self)
        return render(shown, explain(shown, costs(shown)), "md")

    def _repr_html_(self) -> str:
        """The notebook's view: headline formulas as MathML and their numbers at
        the declaration's examples (no script, nothing loaded: offline)."""
        from .count.cost import costs
        from .count.explain import explain
        from .derive.patterns import with_patterns
        from .sheets.page import notebook_view

        shown = with_patterns(self)
        return notebook_view(shown, explain(shown, costs(shown)))


def derive(layer: Layer) -> ShownDerivation:
    """All backward rules of ``layer`` (see :func:`symflops.derive.backward.derive`)."""
    d = _derive(layer)
    return ShownDerivation(d.layer, d.rules, d.needs_grad)
