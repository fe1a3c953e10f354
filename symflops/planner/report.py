"""The views of a :class:`symflops.planner.plan.Plan`: text table, Markdown, JSON.

Text and Markdown come from one list of rows (:mod:`symflops.planner.rows`),
each a figure with the formula that produced it (``C = 6 N D = 6 × 7e9 ×
2e12``), so the two cannot drift apart; JSON carries the same numbers unscaled (bytes, FLOPs, seconds), as
integers when they are whole, and the same formulas under ``formulas``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from ..core.errors import printable
from ..core.text import escape_md
from .plan import Plan
from .records import Number
from .rows import RECOMPUTE_WORDS, equation, json_number, sections, show, show_value

CONVENTIONS = {
    "flops": "one multiply-add = 2 FLOPs; model FLOPs count the useful work of a training "
             "token (6N + attention, forward and backward); executed FLOPs add what the "
             "recompute policy runs again (full recomputation: the forward, 2N more)",
    "time": "MFU = model FLOPs / (time × accelerators × peak), so time = C_model / "
            "(accelerators × peak × MFU); a sustained rate counts useful (model) FLOP/s per "
            "accelerator: time = C_model / (accelerators × sustained); HFU counts executed "
            "FLOPs against the peak",
    "memory": "bytes per accelerator; ZeRO stage 1 shards optimizer state and master weights "
              "over the data-parallel degree d, stage 2 also gradients, stage 3 (FSDP full "
              "shard) also weights; activations are not sharded; with --tp, --pp, --cp, --ep, --sp, "
              "--micro-batches or --interleave, one device's memory comes from the "
              "placements instead (see 'on many devices')",
    "inference": "one accelerator holds the whole model; a decoding step of b sequences reads "
                 "the weights a token reads once (the shared weights, the k of M experts it is "
                 "routed to, one row of each lookup table) and each sequence's KV cache once, "
                 "at full context; bytes per token = (weights + b × cache) / b; tokens/s = "
                 "b × bandwidth / (weights + b × cache), over the batch; exact for b = 1, for "
                 "larger b a lower bound on the bytes (each sequence reads its own table rows "
                 "and may be routed to other experts)",
}

# --- text, Markdown ------------------------------------------------------------------

def _header(plan: Plan) -> list[str]:
    lines = [f"symflops plan: {printable(plan.model.name)}" + (
        f", {RECOMPUTE_WORDS[plan.model.recompute]}" if plan.model.recompute != "none" else "")]
    imported = plan.model.declaration
    if imported is not None:
        counted = ("the causal pairs t <= s" if imported.attention == "exact"
                   else "the full S x S square")
        lines.append(f"declaration: written from {printable(imported.file)} by symflops "
                     f"import-hf; attention products over {counted}")
        lines.append(f"  save it: {imported.command} (or print it: --show-declaration)")
    if plan.accelerator is not None:
        lines.append(f"accelerator: {plan.accelerator.description} ({plan.accelerator.source})")
    lines.append(f"precision: {plan.precision.name} ({plan.precision.description})")
    return lines


def text_report(plan: Plan) -> str:
    lines = _header(plan)
    for section in sections(plan):
        lines += ["", section.title]
        width = max(len(r.label) for r in section.rows)
        for r in section.rows:
            value = show_value(r.value, r.unit)
            if r.value is not None and r.formula.rsplit(" = ", 1)[-1] == show(r.value):
                value = value[len(show(r.value)):].strip()  # the formula ends in the value
                body = f"{r.formula} {value}".rstrip()
            else:
                body = equation(r.formula, value) if value else (r.formula or "")
            if r.value is None:
                body = equation(r.formula, r.note) if r.formula else r.note
            line = f"  {r.label.ljust(width)}  {body}"
            if r.note and r.value is not None:
                line += f"  [{r.note}]"
            lines.append(line.rstrip())
    lines += ["", "conventions"]
    lines += [f"  {k}: {v}" for k, v in CONVENTIONS.items()]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """A table cell: '|' would end it, and '<', '>', '&' (a name in a note)
    are written as entities, so that no raw HTML gets through."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|"))


def _plain(value: Number | None) -> str:
    """A number a spreadsheet reads: digits, or 6 significant digits."""
    if value is None:
        return ""
    x = Fraction(value)
    if x.denominator == 1 and abs(x) < 10**15:
        return str(int(x))
    return f"{float(x):.6g}"


def markdown_report(plan: Plan) -> str:
    lines = [f"**symflops plan**: {escape_md(plan.model.name)}; precision {plan.precision.name}" +
             (f"; {plan.accelerator.name}" if plan.accelerator else ""), "",
             "| section | quantity | value | unit | formula | note |",
             "|---|---|---:|---|---|---|"]
    for section in sections(plan):
        head = section.title.split(" (")[0].split(":")[0]
        for r in section.rows:
            unit = "fraction" if r.unit == "%" else r.unit
            lines.append("| " + " | ".join(_cell(c) for c in (
                head, r.label, _plain(r.value), unit, r.formula, r.note)) + " |")
    return "\n".join(lines) + "\n"


# --- JSON ------------------------------------------------------------------------

def to_json(plan: Plan) -> dict[str, Any]:
    """The plan as plain JSON values: numbers unscaled, formulas under ``formulas``."""
    j = json_number
    m, p = plan.model, plan.precision
    out: dict[str, Any] = {
        "model": m.name,
        "recompute": m.recompute,
        "counts_attention": m.counts_attention,
        "conventions": dict(CONVENTIONS),
        "precision": {"name": p.name, "description": p.description, "params": p.params,
                      "grads": p.grads, "optimizer": p.optimizer,
                      "optimizer_states": p.optimizer_states, "master": p.master,
                      "activations": p.activations},
        "accelerator": None if plan.accelerator is None else {
            "name": plan.accelerator.name, "peak_flops": j(plan.accelerator.peak_flops),
            "memory_bytes": plan.accelerator.memory_bytes,
            "bandwidth": j(plan.accelerator.bandwidth), "source": plan.accelerator.source},
        "params": {"total": m.params_total, "active": m.params_active,
                   "trainable": m.params_trainable},
        "seq_len": plan.seq_len,
    }
    flops: dict[str, Any] = {}
    tf = plan.token_flops
    if tf is not None:
        flops.update(per_token=j(tf.model), executed_per_token=j(tf.executed),
                     attention_per_token=j(tf.attention) if m.counts_attention else None,
                     inference_per_token=j(tf.inference))
    if plan.run is not None:
        out["run"] = {"tokens": plan.run.tokens,
                      "phases": [{"tokens": ph.tokens, "seq_len": ph.seq_len}
                                 for ph in plan.run.phases]}
    c = plan.compute
    if c is not None:
        flops.update(average_per_token=j(c.per_token),
                     average_executed_per_token=j(c.executed_per_token), model=j(c.model), executed=j(c.executed),
                     attention=j(c.attention) if m.counts_attention else None,
                     attention_share=j(c.attention_share) if m.counts_attention else None,
                     phases=[{"tokens": pf.phase.tokens, "seq_len": pf.phase.seq_len,
                              "per_token": j(pf.per_token.model),
                              "executed_per_token": j(pf.per_token.executed),
                              "model": j(pf.model), "executed": j(pf.executed)}
                             for pf in c.phases])
    out["flops"] = flops
    r = plan.rate
    if r is not None:
        out["rate"] = {"accelerators": r.accelerators, "peak": j(r.peak), "mfu": j(r.implied_mfu),
                       "sustained": j(r.sustained),
                       "delivered": j(r.delivered)}
    t = plan.time
    if t is not None:
        out["time"] = {"seconds": j(t.seconds), "hours": j(t.hours), "days": j(t.days),
                       "accelerator_seconds": j(t.accelerator_seconds),
                       "accelerator_hours": j(t.accelerator_hours), "hfu": j(t.hfu)}
    mem = plan.memory
    out["memory"] = {"weights": j(mem.weights), "grads": j(mem.grads),
                     "optimizer": j(mem.optimizer), "master": j(mem.master),
                     "activations": mem.activations, "states": j(mem.states),
                     "total": j(mem.total), "capacity": mem.capacity, "fits": mem.fits,
                     "zero": mem.zero, "dp": mem.dp, "micro_batch": mem.micro_batch,
                     "seq_len": mem.seq_len,
                     **({"buffers": mem.buffers} if plan.model.buffers is not None else {})}
    inf = plan.inference
    if inf is not None:
        out["inference"] = {
            "context": inf.context, "batch": inf.batch,
            "kv_cache_bytes_per_token": inf.kv_per_token,
            "kv_cache_bytes_per_sequence": inf.kv_per_sequence,
            "kv_cache_bytes": inf.kv_batch, "weights_bytes_read": inf.weights_read,
            "bytes_per_token": j(inf.bytes_per_token), "bandwidth": j(inf.bandwidth),
            "step_seconds": j(inf.step_seconds), "decode_tokens_per_s": j(inf.tokens_per_s),
            "memory": inf.memory, "fits": inf.fits}
    rows = [row for s in sections(plan) for row in s.rows]
    out["formulas"] = {row.key: row.formula for row in rows if row.key and row.formula}
    out["notes"] = {row.key or row.label: row.note for row in rows if row.note}
    return out


def check_finite(value: Any) -> None:
    """Fail loudly on NaN or infinity before JSON output (a bug, never input)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite number {value} in a plan")
    if isinstance(value, dict):
        for v in value.values():
            check_finite(v)
    elif isinstance(value, list):
        for v in value:
            check_finite(v)
