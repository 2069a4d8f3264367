"""PNG pictures with matplotlib (the optional extra `plot`). The same figures as svg.py,
drawn with matplotlib's object API and the Agg canvas (no pyplot, no global state)."""
from __future__ import annotations

import math
from typing import Sequence

from rlsolve.plan import Plan
from rlsolve.whatif.figdata import (MEMORY_PARTS, PHASES, memory_stacks, pareto_staircase, sweep_series,
                                    timeline_lanes)


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _dash(d: str):
    return "-" if not d else (0, tuple(float(x) for x in d.split(",")))


def sweep_png(rows: Sequence, path: str, title: str = "What-if study: throughput and cost by cluster size") -> None:
    rows = list(rows)
    fig = _figure(15, 5.2)
    axes = fig.subplots(1, 3)
    sizes = sorted({r.gpus for r in rows}) or [1]
    logx = sizes[-1] / max(sizes[0], 1) >= 4
    for s in sweep_series(rows):
        for ax, metric in ((axes[0], "tokens_per_s"), (axes[1], "usd_per_mtok")):
            xs = [r.gpus for r in s.points]
            ys = [getattr(r, metric) for r in s.points]
            ax.plot(xs, ys, linestyle=_dash(s.dash), marker="o", color=s.colour, label=s.label)
            px = [(r.gpus, getattr(r, metric)) for r in s.points if r.pareto]
            if px:
                ax.scatter(*zip(*px), s=160, facecolors="none", edgecolors="black", linewidths=1.8, zorder=3)
            if s.infeasible:
                ax.scatter([r.gpus for r in s.infeasible], [0] * len(s.infeasible), marker="x", color=s.colour,
                           zorder=3, clip_on=False)
        pts = [(r.usd_per_mtok, r.tokens_per_s) for r in s.points if r.usd_per_mtok and math.isfinite(r.usd_per_mtok)]
        if pts:
            axes[2].scatter(*zip(*pts), color=s.colour, zorder=2)
    front = pareto_staircase(rows)
    if front:
        axes[2].step([c for c, _ in front], [t for _, t in front], where="post", color="black", linestyle="--",
                     linewidth=1.2, label="Pareto front")
        axes[2].scatter([c for c, _ in front], [t for _, t in front], s=160, facecolors="none",
                        edgecolors="black", linewidths=1.8, zorder=3)
    for ax, ylabel, t in ((axes[0], "trained tokens/s", "Throughput"),
                          (axes[1], "USD per million tokens", "Cost per token")):
        ax.set_xlabel("cluster GPUs")
        ax.set_ylabel(ylabel)
        ax.set_title(t)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(x) for x in sizes])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("USD per million tokens (lower is better)")
    axes[2].set_ylabel("trained tokens/s")
    axes[2].set_title("Pareto front: faster vs cheaper")
    axes[2].set_xlim(left=0)
    axes[2].set_ylim(bottom=0)
    axes[2].grid(alpha=0.3)
    axes[2].legend(loc="lower right", fontsize=8)
    axes[0].legend(fontsize=8, title="circled: Pareto front", title_fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _draw_timeline(ax, plan: Plan, title: str | None) -> None:
    tl = timeline_lanes(plan, title)
    n = len(tl.lanes)
    used: dict[str, str] = {}
    if tl.overlap and tl.overlap[1] > tl.overlap[0]:
        ax.axvspan(*tl.overlap, color="#FFF3C4", zorder=0, label="async overlap")
    for i, lane in enumerate(tl.lanes):
        y = n - 1 - i
        for seg in lane.segments:
            label, colour = PHASES[seg.phase]
            ax.barh(y, seg.duration, left=seg.start, height=0.6, color=colour,
                    edgecolor="#BBBBBB" if seg.phase == "idle" else "white",
                    label=None if label in used else label, zorder=2)
            used[label] = colour
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{lane.name}\n{lane.detail}" for lane in reversed(tl.lanes)], fontsize=8)
    ax.set_xlim(0, tl.step or 1)
    ax.set_xlabel("seconds into the step")
    ax.set_title(tl.title)
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28))


def _draw_memory(ax, plan: Plan, title: str) -> None:
    stacks = memory_stacks(plan)
    used: set[str] = set()
    for i, s in enumerate(stacks):
        acc = 0.0
        for key, gb in s.parts:
            label, colour = MEMORY_PARTS[key]
            ax.bar(i, gb, bottom=acc, color=colour, edgecolor="white", width=0.5,
                   label=None if key in used else label)
            used.add(key)
            acc += gb
        ax.hlines(s.capacity, i - 0.35, i + 0.35, colors="#C00000", linestyles="--")
    ax.set_xticks(range(len(stacks)))
    ax.set_xticklabels([f"{s.name}\n{s.total:,.1f} of {s.capacity:g} GB\n{s.detail}" for s in stacks], fontsize=8)
    ax.set_ylabel("GB per GPU (dashed: capacity)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))


def timeline_png(plan: Plan, path: str, title: str | None = None, with_memory: bool = True) -> None:
    fig = _figure(12, 8.5 if with_memory else 4.2)
    if with_memory:
        ax1, ax2 = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 1.2]})
        _draw_timeline(ax1, plan, title)
        _draw_memory(ax2, plan, "Per-GPU memory by role")
    else:
        _draw_timeline(fig.subplots(1, 1), plan, title)
    fig.tight_layout()
    fig.savefig(path, format="png")


def memory_png(plan: Plan, path: str, title: str = "Per-GPU memory by role") -> None:
    fig = _figure(9, 4.8)
    _draw_memory(fig.subplots(1, 1), plan, title)
    fig.tight_layout()
    fig.savefig(path, format="png")
