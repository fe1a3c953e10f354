"""``symflops plan --plot FILE.png``: memory per accelerator and FLOPs per token.

Left: the training memory of one accelerator at each ZeRO stage (the chosen
one marked), stacked by component, against the accelerator's memory. Right:
training FLOPs per token against the sequence length, split into the 6N
(parameter) part and the attention part, marking where attention overtakes
6N. matplotlib is imported only here, only when a plot is asked for (install
it with ``pip install 'symflops[plot]'``); the figure is drawn without pyplot
(no global state, no display) into PNG bytes (:func:`render_png`), which
:mod:`symflops.commands.plan` writes atomically: the planner writes no file.
"""

from __future__ import annotations

import io
from fractions import Fraction

from ..core.errors import SymflopsError
from .compute import token_flops
from .memory import memory
from .plan import Plan

GB = 10**9
COMPONENTS = (("weights", "weights", "#4C72B0"), ("grads", "gradients", "#DD8452"),
              ("optimizer", "optimizer state", "#55A868"), ("master", "master weights", "#8172B3"),
              ("activations", "activations (one micro-batch)", "#C44E52"))


def _lengths(plan: Plan) -> list[int]:
    """Sequence lengths on a log grid wide enough to show the run's and attention's."""
    longest = max([plan.seq_len or 0, plan.inference.context if plan.inference and
                   plan.inference.context else 0])
    hi = max(2**17, 4 * longest)
    lo = 128
    points, t = [], lo
    while t < hi:
        points.append(t)
        t = int(t * 2**0.25) + 1
    return points + [hi]


def _crossover(plan: Plan, lo: int, hi: int) -> int:
    """The smallest length in (lo, hi] at which attention >= the 6N part
    (the part of model FLOPs that is not attention), by bisection."""
    def over(t: int) -> bool:
        f = token_flops(plan.model, t)
        return f.attention >= f.model - f.attention
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
    return hi


def _gb(x: float) -> str:
    return f"{x:,.0f} GB" if x >= 100 else f"{x:.3g} GB"


def _memory_panel(ax, plan: Plan) -> None:
    chosen = plan.memory
    stages = [memory(plan.model, plan.precision, z, chosen.dp, chosen.micro_batch,
                     chosen.seq_len, chosen.capacity) for z in range(4)]
    xs = list(range(4))
    bottoms = [0.0] * 4
    for key, label, colour in COMPONENTS:
        heights = [float(Fraction(getattr(m, key) or 0) / GB) for m in stages]
        if key == "activations" and chosen.activations is None:
            continue
        if not any(heights):
            continue
        ax.bar(xs, heights, bottom=bottoms, color=colour, label=label, width=0.6,
               edgecolor="white", linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for x, total in zip(xs, bottoms):
        ax.annotate(_gb(total), (x, total), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=9)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"ZeRO-{z}" + ("\n(this plan)" if z == chosen.zero else "")
                        for z in range(4)])
    for tick, z in zip(ax.get_xticklabels(), range(4)):
        if z == chosen.zero:
            tick.set_fontweight("bold")
    if chosen.capacity is not None:
        name = plan.accelerator.name if plan.accelerator else "accelerator"
        ax.axhline(chosen.capacity / GB, color="black", linestyle="--", linewidth=1.2,
                   label=f"{name} memory ({chosen.capacity / GB:g} GB)")
    if chosen.activations is None:
        ax.plot([], [], " ", label="activations: not known for a bare\nparameter count (not drawn)"
                if plan.model.activation_bytes is None else
                "activations: need a sequence length\n(not drawn)")
    top = max(bottoms + [chosen.capacity / GB if chosen.capacity else 0])
    ax.set_ylim(0, top * 1.45)
    ax.set_ylabel("memory per accelerator (GB, 10⁹ bytes)")
    ax.set_title(f"Training memory per accelerator ({plan.precision.name}, "
                 f"data-parallel d = {chosen.dp})")
    handles, labels = ax.get_legend_handles_labels()
    components = [label for _, label, _ in COMPONENTS]
    order = sorted(range(len(labels)), key=lambda i: (labels[i] not in components, i))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper right",
              fontsize=8.5, framealpha=0.9, ncol=2)


def _short(t: int) -> str:
    """128, 512, 2k, 8k, 32k, 128k, 512k, 2M ... (k = 1024)."""
    if t < 1024:
        return str(t)
    if t < 2**20:
        return f"{t // 1024}k"
    return f"{t // 2**20}M"


def _flops_panel(ax, plan: Plan) -> None:
    m = plan.model
    lengths = _lengths(plan)
    per = [token_flops(m, t) for t in lengths]
    scale = 10**9
    total = [float(Fraction(f.model) / scale) for f in per]
    attention = [float(Fraction(f.attention) / scale) for f in per]
    params_part = [float(Fraction(f.model - f.attention) / scale) for f in per]
    ax.plot(lengths, total, color="black", linewidth=2, label="model FLOPs per token (total)")
    if any(f.executed != f.model for f in per):
        ax.plot(lengths, [float(Fraction(f.executed) / scale) for f in per], color="#777777",
                linestyle=":", linewidth=1.5,
                label=f"executed, {plan.model.recompute} recomputation (not model FLOPs)")
    if m.counts_attention:
        ax.plot(lengths, params_part, color="#4C72B0", linestyle="--",
                label="6N part (parameters)")
        ax.plot(lengths, attention, color="#C44E52", linestyle="-.", label="attention part")
        cross = next((i for i, f in enumerate(per) if f.attention >= f.model - f.attention), None)
        if cross is None:
            ax.plot([], [], " ", label=f"attention stays below 6N up to T = {lengths[-1]:,}")
        else:
            t = lengths[0] if cross == 0 else _crossover(plan, lengths[cross - 1], lengths[cross])
            ax.axvline(t, color="#C44E52", linestyle=":", linewidth=1.2,
                       label=f"attention overtakes 6N at T = {t:,}")
    else:
        ax.plot(lengths, params_part, color="#4C72B0", linestyle="--",
                label="6N part (parameters)")
        ax.text(0.5, 0.25, "bare parameter count:\nattention not counted\n(give a declaration "
                           "for the attention term)", transform=ax.transAxes, ha="center",
                va="center", fontsize=10, color="#555555",
                bbox={"boxstyle": "round", "facecolor": "#f4f4f4", "edgecolor": "#bbbbbb"})
    if plan.run is not None:
        marked = sorted({p.seq_len for p in plan.run.phases if p.seq_len is not None})
        for i, t in enumerate(marked):
            ax.plot([t], [float(Fraction(token_flops(m, t).model) / scale)], "o",
                    color="black", markersize=6,
                    label="this run's sequence length(s)" if i == 0 else None)
    ax.set_xscale("log", base=2)
    ax.set_xticks([2**k for k in range(7, 40, 2) if 2**k <= lengths[-1]])
    ax.set_xticklabels([_short(2**k) for k in range(7, 40, 2) if 2**k <= lengths[-1]])
    ax.set_xlabel("sequence length T (tokens, log scale)")
    ax.set_ylabel("training FLOPs per token (GFLOP, 10⁹ FLOPs)")
    ceiling = max(total + [float(Fraction(f.executed) / scale) for f in per])
    ax.set_ylim(0, ceiling * 1.6)
    ax.set_title("Training FLOPs per token against sequence length")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8.5, framealpha=0.9)


def render_png(plan: Plan) -> bytes:
    """The two-panel figure as PNG bytes."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SymflopsError("--plot needs matplotlib, which is not installed",
                            hint="pip install 'symflops[plot]' (or pip install matplotlib)") \
            from None
    fig = Figure(figsize=(14, 6), dpi=110, layout="constrained")
    left, right = fig.subplots(1, 2)
    _memory_panel(left, plan)
    _flops_panel(right, plan)
    fig.suptitle(f"symflops plan: {plan.model.name}", fontsize=13)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
