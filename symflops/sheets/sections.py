"""The order of a sheet's sections: one list, which every format's base
template walks (``templates/base.*.j2``), including each section's partial
``templates/NAME.FORMAT.j2`` in turn.

A section is present when its partial renders something: each partial tests
the context variable it needs (``scale``, ``example``, ``exercises``) and
renders nothing without it.  To add a section (the issues to come: ``devices``,
"On many devices", the collectives a sharding of the index letters implies;
``roofline``, "Compute or memory bound?"), add its name here where it belongs
in the reader's order, a partial per format, and its context variable in
:class:`~symflops.sheets.context.SheetContext` (``None`` when it has nothing
to say).  A new format (HTML) walks the same list with partials of its own.
"""

from __future__ import annotations

#: The main body, in the order a student reads it: the card a lecturer hands
#: out, the setup, forward then backward with their rules, memory, what
#: changes at scale, a worked example, exercises.
BODY = ("card", "setup", "forward", "backward", "memory", "scale", "example", "exercises")

#: The appendix: the answers, then the sections a reader goes on to from
#: "What changes at scale" (on many devices; compute or memory bound), the
#: derivations step by step, the bookkeeping (conventions, counting rules,
#: other tools' conventions), the figures.  The two later sections stand here,
#: not in the body, to keep the body within its page limits (ffn 3, llama 6,
#: moe 8: with them the body was 5, 8 and 9 pages).
APPENDIX = ("answers", "devices", "roofline", "derivations", "bookkeeping", "figure_pages")


def sections() -> dict[str, tuple[str, ...]]:
    """The ``sections`` variable of a sheet's context."""
    return {"body": BODY, "appendix": APPENDIX}
