"""Every picture of rlsolve, drawn with matplotlib's object API (a Figure on the Agg canvas:
no pyplot, no global state), so SVG, PNG and PDF are the same drawing. The builders return
the Figure; `pictures.py` saves it. What is drawn comes from figdata.py.

- sweep_figure(rows): throughput and cost against cluster size per GPU type (colour) and
  network (line style, marker), and the throughput-cost Pareto front;
- timeline_figure(plan): one RL step per GPU group, every block named on the bar when it is
  wide enough and always in the legend, and (by default) the per-GPU memory below it;
- memory_figure(plan): the per-GPU memory of each role as stacked bars under the GPU's
  capacity line.

Legends sit outside the axes (constrained layout), log axes say so in their label, and
numbers on the axes carry thousands separators."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from rlsolve.plan import Plan
from rlsolve.whatif.figdata import MEMORY_PARTS, PHASES, memory_stacks, pareto_staircase, sweep_series, timeline_lanes

# One line style and marker per network, so a second network's series stays visible where it
# runs on top of the first (the markers differ and the second's are hollow).
NETWORK_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
INFEASIBLE_LABEL = "no feasible plan"
CAPACITY_COLOUR = "#C00000"
# A timeline block gets its name on the bar when the text fits: about this share of the axis
# width per character at font size 8 on the 13-inch figure (narrower blocks: the legend).
CHAR_FRACTION = 0.0075

_thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")  # 120,000 rather than 120000 or 1.2e5


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


# --- what-if study ------------------------------------------------------------------------------

def sweep_figure(rows: Sequence, title: str = "What-if study: throughput and cost by cluster size") -> Figure:
    rows = list(rows)
    series = sweep_series(rows)
    networks = list(dict.fromkeys(r.network for r in rows))
    sizes = sorted({r.gpus for r in rows}) or [1]
    logx = sizes[-1] / max(sizes[0], 1) >= 4
    fig = _figure(15, 5.8)
    ax_tps, ax_cost, ax_front = fig.subplots(1, 3)

    # Points of different series at one cluster size are spread a little sideways (a few per
    # cent of the size), so neither close points nor the infeasible crosses hide each other.
    spread = 0.035 if logx else 0.012

    def dodge(x: float, i: int) -> float:
        k = i - (len(series) - 1) / 2
        return x * (1 + spread * k) if logx else x + spread * k * (sizes[-1] - sizes[0] or 1)

    handles: list = []
    for i, s in enumerate(series):
        ls, marker = NETWORK_STYLES[networks.index(s.points[0].network if s.points else s.infeasible[0].network)
                                    % len(NETWORK_STYLES)]
        hollow = ls != "-"
        style = dict(color=s.colour, linestyle=ls, marker=marker, markersize=7, linewidth=1.8,
                     markerfacecolor="white" if hollow else s.colour, markeredgewidth=1.6)
        for ax, metric in ((ax_tps, "tokens_per_s"), (ax_cost, "usd_per_mtok")):
            pts = [(dodge(r.gpus, i), getattr(r, metric)) for r in s.points
                   if getattr(r, metric) is not None and math.isfinite(getattr(r, metric))]
            if pts:
                ax.plot(*zip(*pts), label=s.label, **style)
            front = [(dodge(r.gpus, i), getattr(r, metric)) for r in s.points if r.pareto]
            if front:
                ax.scatter(*zip(*front), s=230, facecolors="none", edgecolors="black", linewidths=1.4, zorder=4)
            if s.infeasible:
                ax.scatter([dodge(r.gpus, i) for r in s.infeasible], [0] * len(s.infeasible), marker="x", s=60,
                           color=s.colour, linewidths=2, zorder=5, clip_on=False)
        cost_pts = [(r.usd_per_mtok, r.tokens_per_s) for r in s.points
                    if r.usd_per_mtok is not None and math.isfinite(r.usd_per_mtok)]
        if cost_pts:
            ax_front.plot(*zip(*cost_pts), linestyle="none", marker=marker, markersize=7, color=s.colour,
                          markerfacecolor="white" if hollow else s.colour, markeredgewidth=1.6, zorder=3)
        handles.append(Line2D([], [], label=s.label, **style))
    front = pareto_staircase(rows)
    if front:
        ax_front.step([c for c, _ in front], [t for _, t in front], where="post", color="black", linestyle="--",
                      linewidth=1.1, zorder=2)
        ax_front.scatter([c for c, _ in front], [t for _, t in front], s=230, facecolors="none",
                         edgecolors="black", linewidths=1.4, zorder=4)
        handles.append(Line2D([], [], color="black", linestyle="--", marker="o", markersize=13,
                              markerfacecolor="none", label="Pareto front (circled: no cluster is both faster "
                                                            "and cheaper)"))
    if any(s.infeasible for s in series):
        handles.append(Line2D([], [], color="grey", linestyle="none", marker="x", markersize=8,
                              markeredgewidth=2, label=f"{INFEASIBLE_LABEL} (drawn at 0)"))

    xlabel = "cluster GPUs (log scale)" if logx else "cluster GPUs"
    for ax, ylabel, panel in ((ax_tps, "trained tokens/s", "Throughput (higher is better)"),
                              (ax_cost, "USD per million trained tokens", "Cost per token (lower is better)")):
        if logx:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sizes)
        ax.set_xticklabels([f"{x:,}" for x in sizes])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    ax_tps.yaxis.set_major_formatter(_thousands)
    ax_front.set_xlabel("USD per million trained tokens (lower is better)")
    ax_front.set_ylabel("trained tokens/s")
    ax_front.set_title("Pareto front: faster vs cheaper")
    ax_front.set_xlim(left=0)
    ax_front.set_ylim(bottom=0)
    ax_front.yaxis.set_major_formatter(_thousands)
    ax_front.grid(alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=9,
               title="colour: GPU type" + ("; line and marker: network" if len(networks) > 1 else ""),
               title_fontsize=9)
    fig.suptitle(title)
    return fig


# --- one plan: timeline and memory ---------------------------------------------------------------

def pool_title(plan: Plan, role: str, gpu_names: Mapping[str, str] | None) -> str:
    """'pool rollout: H20-96GB' (the pool and its GPU type; the pool alone without names)."""
    pool = getattr(plan.resource_allocation, role).pool
    gpu = (gpu_names or {}).get(pool)
    return f"pool {pool}: {gpu}" if gpu else f"pool {pool}"


def _draw_timeline(ax, plan: Plan, title: str | None, gpu_names: Mapping[str, str] | None) -> None:
    tl = timeline_lanes(plan, title)
    n = len(tl.lanes)
    handles: dict[str, object] = {}
    if tl.overlap and tl.overlap[1] > tl.overlap[0]:
        ax.axvspan(*tl.overlap, color="#FFF3C4", zorder=0)
        handles["async overlap"] = Patch(facecolor="#FFF3C4", label="async overlap (both sides run)")
    roles = ["generation"] if tl.mode == "colocated" else ["generation", "training"]
    for i, (lane, role) in enumerate(zip(tl.lanes, roles)):
        y = n - 1 - i
        for seg in lane.segments:
            label, colour = PHASES[seg.phase]
            ax.barh(y, seg.duration, left=seg.start, height=0.6, color=colour, zorder=2,
                    edgecolor="#BBBBBB" if seg.phase == "idle" else "white", linewidth=0.8)
            handles.setdefault(label, Patch(facecolor=colour, edgecolor="#BBBBBB", label=label))
            # the name on one line, else a word per line, when that fits the block
            room = seg.duration / (CHAR_FRACTION * (tl.step or 1))
            name = label if len(label) <= room else label.replace(" ", "\n")
            text = f"{name}\n{seg.duration:,.0f} s"
            if seg.phase != "idle" and max(map(len, text.split("\n"))) <= room:
                dark = colour in ("#0072B2", "#7F3C8D", "#D55E00", "#009E73")
                ax.text(seg.start + seg.duration / 2, y, text, ha="center",
                        va="center", fontsize=8, color="white" if dark else "black", zorder=3, clip_on=True)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{lane.name}\n{pool_title(plan, role, gpu_names)}\n{lane.detail}"
                        for lane, role in reversed(list(zip(tl.lanes, roles)))], fontsize=8)
    ax.set_xlim(0, tl.step or 1)
    ax.set_ylim(-0.6, n - 0.4)
    ax.xaxis.set_major_formatter(_thousands)
    ax.set_xlabel("seconds into the step")
    ax.set_title(tl.title)
    ax.legend(handles=list(handles.values()), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title="phases (every block)", title_fontsize=8, borderaxespad=0)


def _draw_memory(ax, plan: Plan, title: str, gpu_names: Mapping[str, str] | None) -> None:
    stacks = memory_stacks(plan)
    handles: dict[str, object] = {}
    for i, (s, role) in enumerate(zip(stacks, ("generation", "training"))):
        acc = 0.0
        for key, gb in s.parts:
            label, colour = MEMORY_PARTS[key]
            ax.bar(i, gb, bottom=acc, color=colour, edgecolor="white", width=0.5)
            handles.setdefault(label, Patch(facecolor=colour, label=label))
            acc += gb
        ax.hlines(s.capacity, i - 0.35, i + 0.35, colors=CAPACITY_COLOUR, linestyles="--", linewidth=1.6)
        gpu = (gpu_names or {}).get(getattr(plan.resource_allocation, role).pool)
        ax.annotate(f"capacity {s.capacity:,.0f} GB" + (f" ({gpu})" if gpu else ""), (i, s.capacity),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8,
                    color=CAPACITY_COLOUR)
    handles["capacity"] = Line2D([], [], color=CAPACITY_COLOUR, linestyle="--", label="GPU memory capacity")
    ax.set_xticks(range(len(stacks)))
    ax.set_xticklabels([f"{s.name}, {pool_title(plan, role, gpu_names)}\n{s.total:,.1f} of {s.capacity:,.0f} GB"
                        f"\n{s.detail}" for s, role in zip(stacks, ("generation", "training"))], fontsize=8)
    ax.set_xlim(-0.6, len(stacks) - 0.4)
    ax.set_ylim(0, max(s.capacity for s in stacks) * 1.12)
    ax.set_ylabel("GB per GPU")
    ax.set_title(title)
    ax.legend(handles=list(handles.values()), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title="memory per GPU", title_fontsize=8, borderaxespad=0)


def timeline_figure(plan: Plan, title: str | None = None, with_memory: bool = True,
                    gpu_names: Mapping[str, str] | None = None) -> Figure:
    fig = _figure(13, 9 if with_memory else 4.4)
    if with_memory:
        ax1, ax2 = fig.subplots(2, 1, height_ratios=[1, 1.2])
        _draw_timeline(ax1, plan, title, gpu_names)
        _draw_memory(ax2, plan, "Per-GPU memory by role", gpu_names)
    else:
        _draw_timeline(fig.subplots(1, 1), plan, title, gpu_names)
    return fig


def memory_figure(plan: Plan, title: str = "Per-GPU memory by role",
                  gpu_names: Mapping[str, str] | None = None) -> Figure:
    fig = _figure(10, 5)
    _draw_memory(fig.subplots(1, 1), plan, title, gpu_names)
    return fig
