"""The rows of a plan's report: each figure of a :class:`symflops.planner.plan.Plan`
with its unit, the formula that produced it (``C = 6 N D = 6 × 7e9 × 2e12``)
and a note, grouped in sections (:func:`sections`), and the numbers as text.

The text table, the Markdown table and the JSON formulas of
:mod:`symflops.planner.report` all come from these rows, so they cannot drift
apart.  Pure functions of the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .memory import ZERO_SHARDS
from .plan import NO_ACTIVATIONS, NO_KV_CACHE, Plan
from .records import Formula, Number, show_exact
from ..count.precision import dtype_name


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


def equation(*parts: str) -> str:
    return " = ".join(p for p in parts if p)


def json_number(x: Number | None) -> int | float | None:
    """Whole numbers as ints (exact), others as floats."""
    if x is None:
        return None
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


# --- the rows -----------------------------------------------------------------

RECOMPUTE_WORDS = {"none": "no recomputation", "full": "full recomputation",
              "selective": "selective recomputation",
              "fused_attention": "fused attention (scores and probabilities recomputed, not "
                                 "saved)"}


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
                        equation("N (total = active = trainable)", given.numbers), given.note,
                        "params.total"))
    else:
        for key, label, symbol, value in (("params_total", "parameters", "N", m.params_total),
                                          ("params_active", "active per token", "N_active",
                                           m.params_active),
                                          ("params_trainable", "trainable", "N_train",
                                           m.params_trainable)):
            f = m.formulas.get(key, Formula(symbol))
            rows.append(Row(label, value, "", equation(symbol, f.text if f.text != symbol else "",
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
                ("executed", "F_exec", f"executed per token ({RECOMPUTE_WORDS[m.recompute]})",
                 tf.executed, "flops.executed_per_token"),
                ("attention", "F_attn", "attention per token" + at, tf.attention,
                 "flops.attention_per_token"),
                ("inference", "F_inf", "inference per token" + at, tf.inference,
                 "flops.inference_per_token"))
        for name, symbol, label, value, key in spec:
            if name == "attention" and not m.counts_attention:
                continue
            fm = f.get(name, Formula(""))
            rows.append(Row(label, value, "FLOPs", equation(symbol, fm.text, fm.numbers), fm.note,
                            key))
    return Section("model", tuple(rows))


def _run_section(plan: Plan) -> Section | None:
    run = plan.run
    if run is None:
        return None
    rows = [Row("training tokens", run.tokens, "tokens", equation(run.formula.text,
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
            formula = equation(symbol, text, numbers)
        else:
            terms = " + ".join(f"{show_exact(p.phase.tokens)} × {show(getattr(p.per_token, name))}"
                               for p in c.phases)
            formula = equation(symbol, f"Σ D_i F{'_exec' if name == 'executed' else ''}(T_i)", terms)
        rows.append(Row(label, value, "FLOPs", formula, key=f"flops.{name}"))
    if len(c.phases) > 1:
        rows.append(Row("model FLOPs per token (run average)", c.per_token, "FLOPs",
                        equation("C / D", f"{show(c.model)} / {show_exact(c.tokens)}"),
                        key="flops.average_per_token"))
    if plan.model.counts_attention:
        rows.append(Row("attention share", c.attention_share, "%",
                        equation("C_attn / C", f"{show(c.attention)} / {show(c.model)}"),
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
        delivered = equation("R = n × sustained", f"{n} × {show_exact(r.sustained)}")
        note = "sustained = useful (model) FLOP/s per accelerator"
    else:
        delivered = equation("R = n × peak × MFU",
                        f"{n} × {show_exact(r.peak)} × {show_exact(r.mfu)}")
        note = "MFU counts model FLOPs"
    rows = [Row("delivered (useful)", r.delivered, "FLOP/s", delivered, note, "rate.delivered"),
            Row("time", t.seconds, "s", equation("t = C / R", f"{show(c.model)} / {show(r.delivered)}"),
                key="time.seconds"),
            Row("accelerator-hours", t.accelerator_hours, "accelerator-hours",
                equation("n t / 3600", f"{n} × {show(t.seconds)} / 3600"),
                f"{show(t.accelerator_seconds)} accelerator-seconds",
                "time.accelerator_hours")]
    if r.sustained is not None and r.peak is not None:
        rows.append(Row("implied MFU", r.implied_mfu, "%",
                        equation("sustained / peak", f"{show_exact(r.sustained)} / "
                                                f"{show_exact(r.peak)}"), key="rate.mfu"))
    if t.hfu is not None:
        rows.append(Row("HFU", t.hfu, "%", equation("C_exec / (n × peak × t)",
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


def _placed_memory(plan: Plan) -> Section:
    """One device's memory as the many-devices placements give it (each
    tensor split over the mesh axes its placement names; see 'on many devices')."""
    mem = plan.memory
    rows = [Row(name, getattr(mem, name), "B", "", f"from the placements ({mem.devices})",
                f"memory.{name}") for name in ("weights", "grads", "optimizer", "master")]
    if mem.buffers is not None:
        rows.append(Row("buffers", mem.buffers, "B", "", "whole on every device",
                        "memory.buffers"))
    rows.append(Row("activations", mem.activations, "B", "",
                    f"the micro-batches in flight on the stage, as placed", "memory.activations"))
    fits = ""
    if mem.capacity is not None:
        name = plan.accelerator.name if plan.accelerator else "the accelerator"
        fits = (f"fits in {name} ({show(Fraction(mem.capacity, 10**9))} GB)" if mem.fits else
                f"does not fit in {name} ({show(Fraction(mem.total, 10**9))} GB > "
                f"{show(Fraction(mem.capacity, 10**9))} GB)")
    rows.append(Row("total", mem.total, "B", "", fits, "memory.total"))
    return Section(f"memory per accelerator ({plan.precision.name}, {mem.devices})", tuple(rows))


def _memory_section(plan: Plan) -> Section:
    mem, p, m = plan.memory, plan.precision, plan.model
    _, trainable = _symbols(plan)
    shards = ZERO_SHARDS[mem.zero]
    rows = []
    if mem.devices:
        return _placed_memory(plan)
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
        rows.append(Row(name, getattr(mem, name), "B", equation(text, numbers),
                        what + (f", sharded over d = {mem.dp}" if split else ""),
                        f"memory.{name}"))
    if m.buffers is not None:  # a row only for a model with buffers
        rows.append(Row("buffers", mem.buffers, "B",
                        equation(f"{p.params} × {show_exact(mem.buffers // p.params)}"),
                        f"{dtype_name(p.params)} constant tables (role: buffer), elements at the "
                        "weights' width, on every accelerator", "memory.buffers")
                    if mem.buffers is not None else
                    Row("buffers", None, "", note="depend on the sequence length: give --seq T"))
    if mem.activations is None:
        why = NO_ACTIVATIONS if m.activation_bytes is None else \
            "depends on the sequence length: give --seq T"
        rows.append(Row("activations", None, "", note=why))
    else:
        fm = m.formulas.get("activation_bytes", Formula(""))
        rows.append(Row("activations", mem.activations, "B", equation(fm.text, fm.numbers),
                        (fm.note + "; " if fm.note else "") +
                        f"one micro-batch of {mem.micro_batch} sequence(s) of "
                        f"{show_exact(mem.seq_len)} tokens, {m.recompute} recompute",
                        "memory.activations"))
    parts = ["weights", "grads", "optimizer", "master"] + \
        (["buffers"] if mem.buffers is not None else []) + \
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
    rows.append(Row("total", mem.total, "B", equation(" + ".join(parts), " + ".join(values)), fits,
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
        why = m.formulas.get("kv_cache_bytes_per_token", Formula("")).note or NO_KV_CACHE
        rows.append(Row("KV cache", None, "", note=why +
                        "; the figures below count the weights only (bytes per token is a "
                        "lower bound, tokens/s an upper bound)"))
    else:
        fm = m.formulas.get("kv_cache_bytes_per_token", Formula(""))
        rows.append(Row("KV cache per token", inf.kv_per_token, "B",
                        equation("K", fm.text, fm.numbers), fm.note,
                        "inference.kv_cache_bytes_per_token"))
        if inf.context is None:
            rows.append(Row("KV cache per sequence", None, "",
                            note="give --context T (or --seq)"))
        else:
            ctx = show_exact(inf.context)
            rows.append(Row("KV cache per sequence", inf.kv_per_sequence, "B",
                            equation("T_ctx K", f"{ctx} × {show_exact(inf.kv_per_token)}"),
                            key="inference.kv_cache_bytes_per_sequence"))
            rows.append(Row(f"KV cache, batch of {inf.batch}", inf.kv_batch, "B",
                            equation("b T_ctx K", f"{inf.batch} × {show(inf.kv_per_sequence)}"),
                            key="inference.kv_cache_bytes"))
    read = active if m.read == m.params_active else "N_read"
    fr = m.formulas.get("params_read", Formula(""))
    rows.append(Row("weights read per step", inf.weights_read, "B",
                    equation(f"W = {p.params} {read}", f"{p.params} × {show_exact(m.read)}"),
                    "every weight once per decoding step" if m.read == m.params_total else
                    f"the weights one token reads ({read}" + (f" = {fr.text}" if fr.text else "") +
                    "): the shared "
                    "weights, the k of M experts it is routed to, one row of each lookup table; "
                    "exact for b = 1, a lower bound for larger b (each sequence reads its own "
                    "rows and may be routed to other experts)",
                    "inference.weights_bytes_read"))
    if inf.kv_batch is not None:
        per_token = equation("(W + b T_ctx K) / b",
                        f"({show(inf.weights_read)} + {show(inf.kv_batch)}) / {inf.batch}")
    else:
        per_token = equation("W / b", f"{show(inf.weights_read)} / {inf.batch}")
    rows.append(Row("bytes read per token", inf.bytes_per_token, "B", per_token,
                    key="inference.bytes_per_token"))
    if inf.bandwidth is None:
        rows.append(Row("decode rate", None, "",
                        note="give --bandwidth bytes/s or --accelerator PRESET"))
    else:
        bw = show_exact(inf.bandwidth)
        kv = " + b T_ctx K" if inf.kv_batch is not None else ""
        rows.append(Row("decode rate (batch)", inf.tokens_per_s, "tokens/s",
                        equation(f"b × BW / (W{kv})",
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
    rows.append(Row("inference memory", inf.memory, "B", equation(mem_formula,
                    f"{show(inf.weights_bytes)}" + (f" + {show(inf.kv_batch)}"
                                                    if inf.kv_batch is not None else "")),
                    fits, "inference.memory"))
    ctx = f", context {show_exact(inf.context)}" if inf.context is not None else ""
    return Section(f"inference (decoding, batch b = {inf.batch}{ctx})", tuple(rows))


def sections(plan: Plan) -> list[Section]:
    out = [_model_section(plan), _run_section(plan), _compute_section(plan), _time_section(plan),
           _memory_section(plan), _inference_section(plan)]
    return [s for s in out if s is not None]
