"""What ``symflops build`` says while it writes and when it is done: a
progress line per declaration, ``[12/47] llama`` (a bar on a terminal, plain
lines in a pipe), and a summary that counts every file written, by kind."""

from __future__ import annotations

import os
from typing import Sequence, TextIO

from ..core.errors import printable


def summary(written: Sequence[str], figures: Sequence[str], failed: Sequence[str],
            pages: Sequence[str] = (), gallery: Sequence[str] = ()) -> str:
    """``318 files written (54 .md, 54 .tex, 54 .pdf sheets; 78 .png, 78 .pdf
    figures), 0 declarations failed``: ``written`` the sheets, ``figures`` the
    figure files beside them, ``failed`` the declarations that failed,
    ``pages`` the reference's pages of the HTML site (``16 reference pages``),
    ``gallery`` its ``index.html`` (``1 gallery index.html``), no sheet."""
    def kinds(paths: Sequence[str]) -> str:
        counts: dict[str, int] = {}
        for p in paths:
            ext = os.path.splitext(p)[1]
            counts[ext] = counts.get(ext, 0) + 1
        order = {".md": 0, ".tex": 1, ".pdf": 2, ".png": 3}
        return ", ".join(f"{n} {ext}" for ext, n in
                         sorted(counts.items(), key=lambda e: (order.get(e[0], 9), e[0])))

    parts = [f"{kinds(written)} sheets" if written else "",
             f"{kinds(figures)} figures" if figures else "",
             f"{len(gallery)} gallery index.html" if gallery else "",
             f"{len(pages)} reference page{'' if len(pages) == 1 else 's'}" if pages else ""]
    shown = "; ".join(p for p in parts if p)
    total = len(written) + len(figures) + len(gallery) + len(pages)
    return (f"{total} file{'' if total == 1 else 's'} written" + (f" ({shown})" if shown else "")
            + f", {len(failed)} declaration{'' if len(failed) == 1 else 's'} failed")


class Progress:
    """``[12/47] llama`` as each declaration's files are written: on a
    terminal one line redrawn, with a bar; in a pipe or a file one plain line
    each, followed by its ``wrote`` lines."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO):
        self.total, self.stream, self.done = total, stream, 0
        isatty = getattr(stream, "isatty", None)
        self.bar = bool(isatty and isatty())
        self.drawn = 0

    def step(self, name: str) -> None:
        self.done += 1
        count = f"[{self.done}/{self.total}]"
        if not self.bar:
            print(f"{count} {printable(name)}", file=self.stream)
            return
        filled = self.WIDTH * self.done // self.total
        line = f"{count} {'#' * filled}{'.' * (self.WIDTH - filled)} {printable(name)}"
        self.stream.write("\r" + line.ljust(self.drawn))
        self.stream.flush()
        self.drawn = len(line)

    def wrote(self, target: str) -> None:
        if not self.bar:
            print(f"wrote {printable(target)}", file=self.stream)

    def end(self) -> None:
        """Leave the terminal's line to the summary."""
        if self.bar and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0
