"""The records of a ``symflops verify`` run and their two views: the text
report and the JSON of ``--json``.

Invariants: the records are frozen and hold plain values only (numbers,
strings, tuples), so that :meth:`Report.as_dict` is their JSON; JSON has no
infinity, so an error that could not be computed is written "inf"
(:func:`json_ready`).  Whether the run passed is derived from the records,
never stored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

import numpy as np

from ..core.text import table

FD_TOLERANCE = 1e-6      # central differences of a polynomial: rounding ~1e-10 at eps 1e-6
#: A chained gradient whose finite difference is itself noisier than this
#: (relative) is not passed on it: the difference says too little there.
FD_NOISE_LIMIT = 1e-4
TORCH_TOLERANCE = 1e-10  # the same float64 arithmetic in another order: ~1e-15

Direction = Literal["forward", "backward"]
#: small: the sizes every check runs at; medium: dims 8..64, FLOP counts only
SizeName = Literal["small", "medium"]
FlopStatus = Literal["agree", "not counted", "differs"]


# ---------------------------------------------------------------- results --

@dataclass(frozen=True)
class RuleCheck:
    """The rules forward op number ``op`` (1-based, in ``layer.ops`` order)
    sends to ``wrt``, checked on their own."""

    op: int
    wrt: str
    grad: str
    statements: tuple[str, ...]
    fd_error: float
    torch_error: float | None
    passed: bool
    problem: str = ""


@dataclass(frozen=True)
class GradCheck:
    """One gradient through the whole chain of rules.  ``fd_allowed`` is the
    finite-difference error it was held to: :data:`FD_TOLERANCE`, or more
    where the difference's own error (rounding through a long chain) is
    larger, measured as ``fd_noise`` (None: not measured, the check passed
    or failed at the tolerance)."""

    grad: str
    fd_error: float
    torch_error: float | None
    passed: bool
    problem: str = ""
    fd_allowed: float = FD_TOLERANCE
    fd_noise: float | None = None


@dataclass(frozen=True)
class FlopCheck:
    """Derived FLOPs of one forward op, or of one op's backward, against PyTorch.
    ``op`` is the op's 1-based number, None for the whole layer's totals.  ``status`` is 'agree',
    'not counted' (PyTorch counted 0), or 'differs'."""

    direction: Direction
    op: int | None
    statement: str
    size: SizeName
    derived: int
    torch: int
    status: FlopStatus
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class SavedCheck:
    derived: tuple[str, ...]
    torch: tuple[str, ...]           # forward tensors autograd saves (params excluded)
    copies: tuple[str, ...]          # of those, saved as a copy rather than a view
    internal: tuple[str, ...]        # saved tensors that are no forward tensor (shapes)
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    layer: str
    source: str
    seed: int
    small: Mapping[str, int]
    medium: Mapping[str, int]
    torch_version: str | None
    rules: tuple[RuleCheck, ...]
    gradients: tuple[GradCheck, ...]
    flops: tuple[FlopCheck, ...]
    saved: SavedCheck | None
    notes: tuple[str, ...] = field(default=())

    @property
    def failures(self) -> int:
        return (sum(not r.passed for r in self.rules) + sum(not g.passed for g in self.gradients)
                + sum(not f.passed for f in self.flops))

    @property
    def passed(self) -> bool:
        return self.failures == 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["small"], d["medium"] = dict(self.small), dict(self.medium)
        d["passed"], d["failures"] = self.passed, self.failures
        d["tolerances"] = {"finite_differences": FD_TOLERANCE, "torch": TORCH_TOLERANCE}
        return d


# ----------------------------------------------------------------- output --

def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def _dims(d: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def text_report(r: Report) -> str:
    torch = f"PyTorch {r.torch_version}" if r.torch_version else "no PyTorch"
    lines = [f"verify {r.layer} ({r.source}), seed {r.seed}, float64, {torch}",
             f"small sizes:  {_dims(r.small)}"]
    if r.flops:
        lines.append(f"medium sizes: {_dims(r.medium)} (FLOP counts only)")
    lines.append("")
    lines.append(f"backward rules, each on its own (max relative error; finite differences "
                 f"<= {FD_TOLERANCE:g}, torch.autograd <= {TORCH_TOLERANCE:g})")
    rows = [("", "rule", "fin. diff.", "autograd")]
    for c in r.rules:
        rows.append(("pass" if c.passed else "FAIL", c.statements[0], _err(c.fd_error),
                     _err(c.torch_error)))
        # Rules for one tensor from one op (diagonal and off-diagonal parts) are checked as a sum.
        rows += [("", "  + " + st, "", "") for st in c.statements[1:]]
    lines += table(rows) if r.rules else ["  (no rules)"]
    lines += [f"  {c.grad}: {c.problem}" for c in r.rules if c.problem]
    lines += ["", "gradients, rules chained through the layer (max relative error)"]
    rows = [("", "gradient", "fin. diff.", "autograd")]
    rows += [("pass" if g.passed else "FAIL", g.grad, _err(g.fd_error), _err(g.torch_error))
             for g in r.gradients]
    lines += table(rows) if r.gradients else ["  (none)"]
    lines += [f"  {g.grad}: {g.problem}" for g in r.gradients if g.problem]
    lines += [f"  {g.grad}: the finite difference's own error here is about {g.fd_noise:.1e} "
              f"(rounding through the whole chain: it moves that much when the step doubles), "
              f"so it is held to {g.fd_allowed:.1e}" for g in r.gradients
              if g.fd_allowed > FD_TOLERANCE and g.fd_noise is not None]
    if r.flops:
        lines += ["", "FLOPs, derived vs torch.utils.flop_counter.FlopCounterMode "
                      "(derived / counted by PyTorch)"]
        sizes = list(dict.fromkeys(f.size for f in r.flops))
        rows = [("", "", "op", *sizes, "")]
        cells: dict[tuple[str, int | None], dict[str, FlopCheck]] = {}
        for f in r.flops:
            cells.setdefault((f.direction, f.op), {})[f.size] = f
        ordered = sorted(cells, key=lambda key: (key[1] is None, key[1] or 0, key[0] == "backward"))
        for key in ordered:
            by_size = cells[key]
            first = next(iter(by_size.values()))
            what = f"op {first.op}: {first.statement}" if first.op is not None else "whole layer"
            status = " / ".join(dict.fromkeys(f.status for f in by_size.values()))
            agree = all(f.status == "agree" for f in by_size.values())
            passed = all(f.passed for f in by_size.values())
            # 'note': PyTorch counts it differently by a documented convention.
            rows.append(("FAIL" if not passed else "pass" if agree else "note",
                         first.direction, what,
                         *(f"{by_size[z].derived:,} / {by_size[z].torch:,}" if z in by_size else "-"
                           for z in sizes), status))
        lines += table(rows)
        notes = list(dict.fromkeys(f"op {f.op} {f.direction}: {f.note}" for f in r.flops
                                   if f.note and f.op is not None))
        lines += [f"  note: {n}" for n in notes]
    if r.saved is not None:
        s = r.saved
        lines += ["", "saved activations (parameters excluded)",
                  f"  derived:  {', '.join(s.derived) or '(none)'}",
                  f"  autograd: {', '.join(s.torch) or '(none)'}"]
        lines += [f"  note: {n}" for n in s.notes] or ["  they agree"]
    if r.notes:
        lines += [""] + [f"note: {n}" for n in r.notes]
    checks = len(r.rules) + len(r.gradients) + len(r.flops)
    lines += ["", f"result: {'pass' if r.passed else 'FAIL'} ({checks} checks, "
                  f"{r.failures} failed)"]
    return "\n".join(lines) + "\n"


def json_ready(r: Report) -> dict[str, Any]:
    """The report as JSON values (``verify --json``): :meth:`Report.as_dict`
    with every error that could not be computed written "inf"."""
    return _finite(r.as_dict())


def _finite(value: Any) -> Any:
    """JSON has no infinity: an error that could not be computed becomes "inf"."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value
