"""The views of a :class:`symflops.planner.plan.Plan`: text table, Markdown, JSON.

Text and Markdown come from one list of rows, each a figure with the formula
that produced it (``C = 6 N D = 6 × 7e9 × 2e12``), so the two cannot drift
apart; JSON carries the same numbers unscaled (bytes, FLOPs, seconds), as
integers when they are whole, and the same formulas under ``formulas``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .memory import ZERO_SHARDS
from .plan import NO_ACTIVATIONS, NO_KV_CACHE, Plan
from .records import Formula, Number, show_exact
from ..count.precision import dtype_name

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
              "shard) also weights; activations are not sharded; no tensor or pipeline "
              "parallelism is modelled",
    "inference": "one accelerator holds the whole model; a decoding step of b sequences reads "
                 "the weights a token reads once (the shared weights, the k of M experts it is "
                 "routed to, one row of each lookup table) and each sequence's KV cache once, "
                 "at full context; bytes per token = (weights + b × cache) / b; tokens/s = "
                 "b × bandwidth / (weights + b × cache), over the batch; exact for b = 1, for "
                 "larger b a lower bound on the bytes (each sequence reads its own table rows "
                 "and may be routed to other experts)",
}


@dataclass(frozen=True)
class Row:
    label: str
    value: Number | None          # None: not known (the note says why)
    unit: str
    formula: str = ""             # "C = 6 N D = 6 × 7e9 × 2e12"
    note: str = ""
    key: str = ""                 # the JSON path of the figure, for the formulas map


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[Row, ...]


# --- numbers as text --------------------------------------------------------------

def show(x: Number, digits: int = 4) -> str:
    """A computed figure to ``digits`` significant digits: ``8.4e22``, ``980,329``, ``56.97``."""
    x = Fraction(x)
    if x == 0:
        return "0"
    if abs(x) >= 10**7:
        mantissa, exponent = f"{float(x):.{digits - 1}e}".split("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    if x.denominator == 1:
        return f"{int(x):,}"
    if abs(x) >= 10**(digits - 1):
        return f"{round(x):,}"
    return f"{float(x):.{digits}g}"


def show_bytes(x: Number) -> str:
    if x == 0:
        return "0 B"
    return f"{show(x)} B ({show(Fraction(x) / 10**9)} GB, {show(Fraction(x) / 2**30)} GiB)"


def show_value(value: Number | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "B":
        return show_bytes(value)
    if unit == "s":
        v = Fraction(value)
        return f"{show(v)} s = {show(v / 3600)} h = {show(v / 86400)} days"
    if unit == "%":
        return f"{show(Fraction(value) * 100)} %"
    return f"{show(value)} {unit}".rstrip()


def _wrap(text: str) -> str:
    """Parenthesise a sum before multiplying it."""
    return f"({text})" if (" + " in text or " - " in text) else text


def _eq(*parts: str) -> str:
    return " = ".join(p for p in parts if p)


def json_number(x: Number | None) -> int | float | None:
    """Whole numbers as ints (exact), others as floats."""
    if x is None:
        return None
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


# --- the rows -----------------------------------------------------------------

_RECOMPUTE = {"none": "no recomputation", "full": "full recomputation",
              "selective": "selective recomputation"}


def _symbols(plan: Plan) -> tuple[str, str]:
    m = plan.model
    active = "N" if m.params_active == m.params_total else "N_active"
    trainable = "N" if m.params_trainable == m.params_total else "N_train"
    return active, trainable


def _model_section(plan: Plan) -> Section:
    m = plan.model
    rows: list[Row] = []
    given = m.formulas.get("params_total", Formula("N"))
    if m.params_total == m.params_active == m.params_trainable:
        rows.append(Row("parameters", m.params_total, "",
                        _eq(f"N (total = active = trainable)", given.numbers), given.note,
                        "params.total"))
    else:
        for key, label, symbol, value in (("params_total", "parameters", "N", m.params_total),
                                          ("params_active", "active per token", "N_active",
                                           m.params_active),
                                          ("params_trainable", "trainable", "N_train",
                                           m.params_trainable)):
            f = m.formulas.get(key, Formula(symbol))
            rows.append(Row(label, value, "", _eq(symbol, f.text if f.text != symbol else "",
                                                  f.numbers), f.note,
                            "params." + key.split("_")[1]))
    tf = plan.token_flops
    at = f" at T = {show_exact(plan.seq_len)}" if plan.seq_len is not None and \
        m.counts_attention else ""
    if tf is None:
        rows.append(Row("FLOPs per token", None, "",
                        note="depends on the sequence length: give --seq T"))
    else:
        f = tf.formulas
        spec = (("model", "F", "FLOPs per token" + at, tf.model, "flops.per_token"),
                ("executed", "F_exec", f"executed per token ({_RECOMPUTE[m.recompute]})",
                 tf.executed, "flops.executed_per_token"),
                ("attention", "F_attn", "attention per token" + at, tf.attention,
                 "flops.attention_per_token"),
                ("inference", "F_inf", "inference per token" + at, tf.inference,
                 "flops.inference_per_token"))
        for name, symbol, label, value, key in spec:
            if name == "attention" and not m.counts_attention:
                continue
            fm = f.get(name, Formula(""))
            rows.append(Row(label, value, "FLOPs", _eq(symbol, fm.text, fm.numbers), fm.note,
                            key))
    return Section("model", tuple(rows))


def _run_section(plan: Plan) -> Section | None:
    run = plan.run
    if run is None:
        return None
    rows = [Row("training tokens", run.tokens, "tokens", _eq(run.formula.text,
                run.formula.numbers), run.formula.note, "run.tokens")]
    if len(run.phases) > 1:
        for i, p in enumerate(run.phases, 1):
            rows.append(Row(f"phase {i}", p.tokens, f"tokens at T = {show_exact(p.seq_len)}",
                            f"D_{i}"))
    elif run.phases[0].seq_len is not None:
        rows.append(Row("sequence length", run.phases[0].seq_len, "tokens", "T"))
    return Section("run", tuple(rows))


def _compute_section(plan: Plan) -> Section | None:
    c = plan.compute
    if c is None:
        return None
    rows = []
    for name, symbol, label, value in (("model", "C", "model FLOPs", c.model),
                                       ("executed", "C_exec", "executed FLOPs", c.executed)):
        if len(c.phases) == 1:
            pf = c.phases[0]
            fm = pf.per_token.formulas.get(name, Formula(""))
            d = show_exact(pf.phase.tokens)
            # a derived polynomial is shown in the model section; here it is named
            short = fm.text if len(fm.text) <= 24 else ("F" if name == "model" else "F_exec")
            text = f"{_wrap(short)} D" if fm.text else ""
            numbers = f"{_wrap(fm.numbers)} × {d}" if fm.numbers else \
                f"{show(getattr(pf.per_token, name))} × {d}"
            formula = _eq(symbol, text, numbers)
        else:
            terms = " + ".join(f"{show_exact(p.phase.tokens)} × {show(getattr(p.per_token, name))}"
                               for p in c.phases)
            formula = _eq(symbol, f"Σ D_i F{'_exec' if name == 'executed' else ''}(T_i)", terms)
        rows.append(Row(label, value, "FLOPs", formula, key=f"flops.{name}"))
    if len(c.phases) > 1:
        rows.append(Row("model FLOPs per token (run average)", c.per_token, "FLOPs",
                        _eq("C / D", f"{show(c.model)} / {show_exact(c.tokens)}"),
                        key="flops.average_per_token"))
    if plan.model.counts_attention:
        rows.append(Row("attention share", c.attention_share, "%",
                        _eq("C_attn / C", f"{show(c.attention)} / {show(c.model)}"),
                        key="flops.attention_share"))
    else:
        rows.append(Row("attention share", None, "",
                        note="attention not counted for a bare parameter count"))
    return Section("compute", tuple(rows))


def _time_section(plan: Plan) -> Section | None:
    r, t, c = plan.rate, plan.time, plan.compute
    if c is None:
        return None
    if t is None:
        return Section("time", (Row("time", None, "", note="give --mfu with --accelerator or "
                                    "--peak, or --sustained FLOP/s per accelerator"),))
    n = show_exact(r.accelerators)
    if r.sustained is not None:
        delivered = _eq("R = n × sustained", f"{n} × {show_exact(r.sustained)}")
        note = "sustained = useful (model) FLOP/s per accelerator"
    else:
        delivered = _eq("R = n × peak × MFU",
                        f"{n} × {show_exact(r.peak)} × {show_exact(r.mfu)}")
        note = "MFU counts model FLOPs"
    rows = [Row("delivered (useful)", r.delivered, "FLOP/s", delivered, note, "rate.delivered"),
            Row("time", t.seconds, "s", _eq("t = C / R", f"{show(c.model)} / {show(r.delivered)}"),
                key="time.seconds"),
            Row("accelerator-hours", t.accelerator_hours, "accelerator-hours",
                _eq("n t / 3600", f"{n} × {show(t.seconds)} / 3600"),
                f"{show(t.accelerator_seconds)} accelerator-seconds",
                "time.accelerator_hours")]
    if r.sustained is not None and r.peak is not None:
        rows.append(Row("implied MFU", r.implied_mfu, "%",
                        _eq("sustained / peak", f"{show_exact(r.sustained)} / "
                                                f"{show_exact(r.peak)}"), key="rate.mfu"))
    if t.hfu is not None:
        rows.append(Row("HFU", t.hfu, "%", _eq("C_exec / (n × peak × t)",
                        f"{show(c.executed)} / ({n} × {show_exact(r.peak)} × {show(t.seconds)})"),
                        "hardware FLOPs utilisation: executed FLOPs, recomputation included",
                        "time.hfu"))
    return Section("time", tuple(rows))


def _optimizer_words(p) -> str:
    if not p.optimizer_states:
        return f"{p.optimizer_name}: no state"
    names = p.state_names
    if p.optimizer_name == "Adam" and len(names) == 2:
        return f"Adam m and v in {dtype_name(p.optimizer)}"
    return f"{', '.join(names)} in {dtype_name(p.optimizer)}"


def _memory_section(plan: Plan) -> Section:
    mem, p, m = plan.memory, plan.precision, plan.model
    _, trainable = _symbols(plan)
    shards = ZERO_SHARDS[mem.zero]
    rows = []
    for name, per_param, count, symbol, what in (
            ("weights", p.params, m.params_total, "N", f"{dtype_name(p.params)} weights"),
            ("grads", p.grads, m.params_trainable, trainable, f"{dtype_name(p.grads)} gradients"),
            ("optimizer", p.optimizer_states * p.optimizer, m.params_trainable, trainable,
             _optimizer_words(p)),
            ("master", p.master, m.params_trainable, trainable,
             f"{dtype_name(p.master)} master weights" if p.master else "no master copy")):
        if per_param == 0:
            rows.append(Row(name, 0, "B", "", f"{what} under {p.name}", f"memory.{name}"))
            continue
        split = name in shards
        text = f"{per_param} {symbol}" + (" / d" if split else "")
        numbers = f"{per_param} × {show_exact(count)}" + (f" / {mem.dp}" if split else "")
        rows.append(Row(name, getattr(mem, name), "B", _eq(text, numbers),
                        what + (f", sharded over d = {mem.dp}" if split else ""),
                        f"memory.{name}"))
    if mem.activations is None:
        why = NO_ACTIVATIONS if m.activation_bytes is None else \
            "depends on the sequence length: give --seq T"
        rows.append(Row("activations", None, "", note=why))
    else:
        fm = m.formulas.get("activation_bytes", Formula(""))
        rows.append(Row("activations", mem.activations, "B", _eq(fm.text, fm.numbers),
                        (fm.note + "; " if fm.note else "") +
                        f"one micro-batch of {mem.micro_batch} sequence(s) of "
                        f"{show_exact(mem.seq_len)} tokens, {m.recompute} recompute",
                        "memory.activations"))
    parts = ["weights", "grads", "optimizer", "master"] + \
        (["activations"] if mem.activations is not None else [])
    values = [show(getattr(mem, k)) for k in parts]
    fits = ""
    if mem.capacity is not None:
        name = plan.accelerator.name if plan.accelerator else "the accelerator"
        if mem.fits:
            fits = f"fits in {name} ({show(Fraction(mem.capacity, 10**9))} GB)"
        else:
            fits = (f"does not fit in {name} ({show(Fraction(mem.total, 10**9))} GB > "
                    f"{show(Fraction(mem.capacity, 10**9))} GB)")
    if mem.activations is None:
        fits = "; ".join(x for x in (fits, "activations not included") if x)
    rows.append(Row("total", mem.total, "B", _eq(" + ".join(parts), " + ".join(values)), fits,
                    "memory.total"))
    title = (f"memory per accelerator ({p.name}, ZeRO-{mem.zero}, data-parallel d = {mem.dp}, "
             f"micro-batch {mem.micro_batch})")
    return Section(title, tuple(rows))


def _inference_section(plan: Plan) -> Section | None:
    inf, m, p = plan.inference, plan.model, plan.precision
    if inf is None:
        return None
    active, _ = _symbols(plan)
    rows = []
    if inf.kv_per_token is None:
        rows.append(Row("KV cache", None, "", note=NO_KV_CACHE +
                        "; the figures below count the weights only (bytes per token is a "
                        "lower bound, tokens/s an upper bound)"))
    else:
        fm = m.formulas.get("kv_cache_bytes_per_token", Formula(""))
        rows.append(Row("KV cache per token", inf.kv_per_token, "B",
                        _eq("K", fm.text, fm.numbers), fm.note,
                        "inference.kv_cache_bytes_per_token"))
        if inf.context is None:
            rows.append(Row("KV cache per sequence", None, "",
                            note="give --context T (or --seq)"))
        else:
            ctx = show_exact(inf.context)
            rows.append(Row("KV cache per sequence", inf.kv_per_sequence, "B",
                            _eq("T_ctx K", f"{ctx} × {show_exact(inf.kv_per_token)}"),
                            key="inference.kv_cache_bytes_per_sequence"))
            rows.append(Row(f"KV cache, batch of {inf.batch}", inf.kv_batch, "B",
                            _eq("b T_ctx K", f"{inf.batch} × {show(inf.kv_per_sequence)}"),
                            key="inference.kv_cache_bytes"))
    read = active if m.read == m.params_active else "N_read"
    fr = m.formulas.get("params_read", Formula(""))
    rows.append(Row("weights read per step", inf.weights_read, "B",
                    _eq(f"W = {p.params} {read}", f"{p.params} × {show_exact(m.read)}"),
                    "every weight once per decoding step" if m.read == m.params_total else
                    f"the weights one token reads ({read}" + (f" = {fr.text}" if fr.text else "") +
                    "): the shared "
                    "weights, the k of M experts it is routed to, one row of each lookup table; "
                    "exact for b = 1, a lower bound for larger b (each sequence reads its own "
                    "rows and may be routed to other experts)",
                    "inference.weights_bytes_read"))
    if inf.kv_batch is not None:
        per_token = _eq("(W + b T_ctx K) / b",
                        f"({show(inf.weights_read)} + {show(inf.kv_batch)}) / {inf.batch}")
    else:
        per_token = _eq("W / b", f"{show(inf.weights_read)} / {inf.batch}")
    rows.append(Row("bytes read per token", inf.bytes_per_token, "B", per_token,
                    key="inference.bytes_per_token"))
    if inf.bandwidth is None:
        rows.append(Row("decode rate", None, "",
                        note="give --bandwidth bytes/s or --accelerator PRESET"))
    else:
        bw = show_exact(inf.bandwidth)
        kv = " + b T_ctx K" if inf.kv_batch is not None else ""
        rows.append(Row("decode rate (batch)", inf.tokens_per_s, "tokens/s",
                        _eq(f"b × BW / (W{kv})",
                            f"{inf.batch} × {bw} / {show(inf.step_bytes)}"),
                        f"{show(inf.tokens_per_s / inf.batch)} tokens/s per sequence; "
                        f"one step takes {show(inf.step_seconds * 1000)} ms",
                        "inference.decode_tokens_per_s"))
    mem_formula = f"{p.params} N" + (" + b T_ctx K" if inf.kv_batch is not None else "")
    fits = ""
    if inf.capacity is not None:
        fits = ("fits" if inf.fits else "does not fit") + \
            f" in one {plan.accelerator.name if plan.accelerator else 'accelerator'} " \
            f"({show(Fraction(inf.capacity, 10**9))} GB)"
    rows.append(Row("inference memory", inf.memory, "B", _eq(mem_formula,
                    f"{show(inf.weights_bytes)}" + (f" + {show(inf.kv_batch)}"
                                                    if inf.kv_batch is not None else "")),
                    fits, "inference.memory"))
    ctx = f", context {show_exact(inf.context)}" if inf.context is not None else ""
    return Section(f"inference (decoding, batch b = {inf.batch}{ctx})", tuple(rows))


def sections(plan: Plan) -> list[Section]:
    out = [_model_section(plan), _run_section(plan), _compute_section(plan), _time_section(plan),
           _memory_section(plan), _inference_section(plan)]
    return [s for s in out if s is not None]


# --- text, Markdown ------------------------------------------------------------------

def _header(plan: Plan) -> list[str]:
    lines = [f"symflops plan: {plan.model.name}" + (
        f", {_RECOMPUTE[plan.model.recompute]}" if plan.model.recompute != "none" else "")]
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
                body = _eq(r.formula, value) if value else (r.formula or "")
            if r.value is None:
                body = _eq(r.formula, r.note) if r.formula else r.note
            line = f"  {r.label.ljust(width)}  {body}"
            if r.note and r.value is not None:
                line += f"  [{r.note}]"
            lines.append(line.rstrip())
    lines += ["", "conventions"]
    lines += [f"  {k}: {v}" for k, v in CONVENTIONS.items()]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _plain(value: Number | None) -> str:
    """A number a spreadsheet reads: digits, or 6 significant digits."""
    if value is None:
        return ""
    x = Fraction(value)
    if x.denominator == 1 and abs(x) < 10**15:
        return str(int(x))
    return f"{float(x):.6g}"


def markdown_report(plan: Plan) -> str:
    lines = [f"**symflops plan**: {plan.model.name}; precision {plan.precision.name}" +
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
                     "seq_len": mem.seq_len}
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
