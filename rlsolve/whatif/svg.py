"""SVG pictures without any dependency (the standard library only).

- sweep_svg(rows): throughput and dollars per million tokens against cluster size, one line
  per GPU type (dashes per network), and throughput against cost, with the Pareto front
  marked; infeasible clusters are crosses on the axis.
- timeline_svg(plan): one RL step as bars per GPU group (async overlap shaded), with the
  per-GPU memory of each role below (with_memory=False leaves it out).
- memory_svg(plan): per-GPU memory as stacked bars per role against the capacity.

Every element carries a <title>, so hovering in a browser shows the number behind it.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Sequence
from xml.sax.saxutils import escape, quoteattr

from rlsolve.plan import Plan
from rlsolve.whatif.figdata import (MEMORY_PARTS, PHASES, Stack, Timeline, memory_stacks, pareto_staircase,
                                    sweep_series, timeline_lanes)

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
AXIS = "#444444"
GRID = "#E5E5E5"


def _f(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


class Canvas:
    """A tiny SVG builder: shapes append text; `svg()` returns the document."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.parts: list[str] = []

    @staticmethod
    def _attrs(**kw) -> str:
        out = []
        for k, v in kw.items():
            if v is None or v == "":
                continue
            out.append(f"{k.rstrip('_').replace('_', '-')}={quoteattr(_f(v) if isinstance(v, float) else str(v))}")
        return " ".join(out)

    def _el(self, tag: str, title: str | None, **kw) -> None:
        attrs = self._attrs(**kw)
        if title:
            self.parts.append(f"<{tag} {attrs}><title>{escape(title)}</title></{tag}>")
        else:
            self.parts.append(f"<{tag} {attrs}/>")

    def rect(self, x, y, w, h, fill, stroke=None, title=None, opacity=None, dash=None, sw=None) -> None:
        self._el("rect", title, x=float(x), y=float(y), width=float(max(w, 0)), height=float(max(h, 0)), fill=fill,
                 stroke=stroke, stroke_width=sw, fill_opacity=opacity, stroke_dasharray=dash)

    def line(self, x1, y1, x2, y2, stroke=AXIS, sw=1.0, dash=None, title=None) -> None:
        self._el("line", title, x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), stroke=stroke,
                 stroke_width=float(sw), stroke_dasharray=dash)

    def polyline(self, pts, stroke, sw=2.0, dash=None, fill="none", title=None) -> None:
        if len(pts) < 2:
            return
        self._el("polyline", title, points=" ".join(f"{_f(x)},{_f(y)}" for x, y in pts), fill=fill,
                 stroke=stroke, stroke_width=float(sw), stroke_dasharray=dash, stroke_linejoin="round")

    def circle(self, x, y, r, fill, stroke=None, sw=None, title=None) -> None:
        self._el("circle", title, cx=float(x), cy=float(y), r=float(r), fill=fill, stroke=stroke, stroke_width=sw)

    def cross(self, x, y, r, stroke, title=None) -> None:
        d = f"M{_f(x - r)},{_f(y - r)} L{_f(x + r)},{_f(y + r)} M{_f(x - r)},{_f(y + r)} L{_f(x + r)},{_f(y - r)}"
        self._el("path", title, d=d, stroke=stroke, stroke_width=2.0, fill="none")

    def text(self, x, y, s, size=12, anchor="start", weight=None, fill="#222222", rotate=None, title=None) -> None:
        attrs = self._attrs(x=float(x), y=float(y), font_size=size, text_anchor=anchor, font_weight=weight,
                            fill=fill, transform=f"rotate({rotate} {_f(x)} {_f(y)})" if rotate else None)
        inner = escape(str(s)) + (f"<title>{escape(title)}</title>" if title else "")
        self.parts.append(f"<text {attrs}>{inner}</text>")

    @contextmanager
    def group(self, dx: float = 0, dy: float = 0) -> Iterator[None]:
        self.parts.append(f'<g transform="translate({_f(dx)},{_f(dy)})">')
        yield
        self.parts.append("</g>")

    def svg(self, title: str = "") -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(self.width)}" height="{_f(self.height)}" '
                f'viewBox="0 0 {_f(self.width)} {_f(self.height)}" font-family={quoteattr(FONT)}>')
        body = [head, f"<title>{escape(title)}</title>" if title else "",
                f'<rect x="0" y="0" width="{_f(self.width)}" height="{_f(self.height)}" fill="#FFFFFF"/>']
        return "\n".join([b for b in body if b] + self.parts + ["</svg>"]) + "\n"


# --- axes ---------------------------------------------------------------------------------

def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def si(x: float) -> str:
    """1234567 -> 1.23M; 0.5 -> 0.5."""
    a = abs(x)
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{x / div:.3g}{suf}"
    return f"{x:.3g}"


class Scale:
    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False):
        self.log = log and lo > 0
        if self.log:
            self.lo, self.hi = math.log2(lo), math.log2(hi) if hi > lo else math.log2(lo) + 1
        else:
            self.lo, self.hi = lo, hi if hi > lo else lo + 1
        self.p0, self.p1 = p0, p1

    def __call__(self, v: float) -> float:
        v = math.log2(v) if self.log else v
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _frame(c: Canvas, x0, y0, x1, y1, xs: Scale, ys: Scale, xticks, yticks, xlabel, ylabel, title,
           xfmt=si, yfmt=si) -> None:
    for t in yticks:
        y = ys(t)
        c.line(x0, y, x1, y, stroke=GRID)
        c.text(x0 - 6, y + 4, yfmt(t), size=11, anchor="end")
    for t in xticks:
        x = xs(t)
        c.line(x, y1, x, y1 + 4)
        c.text(x, y1 + 17, xfmt(t), size=11, anchor="middle")
    c.line(x0, y1, x1, y1)
    c.line(x0, y0, x0, y1)
    c.text((x0 + x1) / 2, y1 + 36, xlabel, size=12, anchor="middle")
    c.text(x0 - 52, (y0 + y1) / 2, ylabel, size=12, anchor="middle", rotate=-90)
    c.text((x0 + x1) / 2, y0 - 12, title, size=13, anchor="middle", weight="bold")


# --- (1) what-if sweep --------------------------------------------------------------------

def sweep_svg(rows: Sequence, title: str = "What-if study: throughput and cost by cluster size") -> str:
    rows = list(rows)
    series = sweep_series(rows)
    ok = [r for r in rows if r.feasible]
    W, H = 1320.0, 520.0
    c = Canvas(W, H)
    c.text(W / 2, 26, title, size=16, anchor="middle", weight="bold")
    sizes = sorted({r.gpus for r in rows}) or [1]
    logx = sizes[-1] / max(sizes[0], 1) >= 4
    panel_w, top, bottom = 340.0, 80.0, 400.0
    lefts = [80.0, 520.0, 960.0]
    tps_max = max((r.tokens_per_s for r in ok), default=1.0)
    cost = [r.usd_per_mtok for r in ok if r.usd_per_mtok is not None and math.isfinite(r.usd_per_mtok)]
    cost_max = max(cost, default=1.0)
    yt_tps = nice_ticks(0, tps_max * 1.05)
    yt_cost = nice_ticks(0, cost_max * 1.05)
    xpad = 0.5 if logx else (sizes[-1] - sizes[0]) * 0.06 or 1
    xlo, xhi = (sizes[0] / 1.3, sizes[-1] * 1.3) if logx else (max(0, sizes[0] - xpad), sizes[-1] + xpad)
    xt = sizes if len(sizes) <= 8 else nice_ticks(xlo, xhi)

    def size_panel(x0: float, metric: str, yticks: list[float], ylabel: str, ptitle: str) -> None:
        xs = Scale(xlo, xhi, x0, x0 + panel_w, log=logx)
        ys = Scale(0, yticks[-1], bottom, top)
        _frame(c, x0, top, x0 + panel_w, bottom, xs, ys, xt, yticks, "cluster GPUs", ylabel, ptitle,
               xfmt=lambda v: f"{v:g}")
        for s in series:
            pts = [(xs(r.gpus), ys(getattr(r, metric))) for r in s.points]
            c.polyline(pts, s.colour, dash=s.dash or None, title=s.label)
            for r, (x, y) in zip(s.points, pts):
                tip = _tip(r)
                if r.pareto:
                    c.circle(x, y, 8, "none", stroke="#000000", sw=2.0, title=tip)
                c.circle(x, y, 4, s.colour, title=tip)
            for r in s.infeasible:
                c.cross(xs(r.gpus), bottom - 6, 5, s.colour, title=f"{r.label}: {r.status}: {r.reason}")

    size_panel(lefts[0], "tokens_per_s", yt_tps, "trained tokens/s", "Throughput")
    size_panel(lefts[1], "usd_per_mtok", yt_cost, "USD per million tokens", "Cost per token")

    # throughput against cost, with the front
    x0 = lefts[2]
    xs = Scale(0, yt_cost[-1], x0, x0 + panel_w)
    ys = Scale(0, yt_tps[-1], bottom, top)
    _frame(c, x0, top, x0 + panel_w, bottom, xs, ys, yt_cost, yt_tps, "USD per million tokens (lower is better)",
           "trained tokens/s", "Pareto front: faster vs cheaper", xfmt=lambda v: f"{v:g}")
    front = pareto_staircase(rows)
    if front:
        stair: list[tuple[float, float]] = []
        for i, (cx, ty) in enumerate(front):
            if i:
                stair.append((xs(cx), ys(front[i - 1][1])))
            stair.append((xs(cx), ys(ty)))
        c.polyline(stair, "#000000", sw=1.5, dash="4,3", title="Pareto front")
    for s in series:
        for r in s.points:
            if r.usd_per_mtok is None or not math.isfinite(r.usd_per_mtok):
                continue
            x, y = xs(r.usd_per_mtok), ys(r.tokens_per_s)
            if r.pareto:
                c.circle(x, y, 8, "none", stroke="#000000", sw=2.0, title=_tip(r))
                c.text(x + 10, y - 8, f"{r.nodes}n", size=10, fill="#333333")
            c.circle(x, y, 4, s.colour, title=_tip(r))

    # legend
    ly = 462.0
    lx = 80.0
    for s in series:
        c.line(lx, ly, lx + 28, ly, stroke=s.colour, sw=2.5, dash=s.dash or None)
        c.circle(lx + 14, ly, 4, s.colour)
        c.text(lx + 34, ly + 4, s.label, size=12)
        lx += 44 + 7.0 * len(s.label)
        if lx > W - 260:
            lx, ly = 80.0, ly + 22
    c.circle(lx + 14, ly, 8, "none", stroke="#000000", sw=2.0)
    c.text(lx + 28, ly + 4, "on the Pareto front", size=12)
    lx += 170
    if any(s.infeasible for s in series):
        c.cross(lx + 8, ly, 5, AXIS)
        c.text(lx + 20, ly + 4, "infeasible", size=12)
    return c.svg(title)


def _tip(r) -> str:
    return (f"{r.label}: {r.tokens_per_s:,.0f} tokens/s, {r.usd_per_mtok:,.3f} USD/Mtok, {r.mode}, "
            f"{r.gpus_used} GPUs used" + (", Pareto front" if r.pareto else ""))


# --- (2) timeline -------------------------------------------------------------------------

def _draw_timeline(c: Canvas, tl: Timeline, width: float) -> float:
    left, right = 250.0, width - 30.0
    top, lane_h, gap = 50.0, 40.0, 22.0
    c.text(width / 2, 24, tl.title, size=15, anchor="middle", weight="bold")
    span = tl.step if tl.step > 0 else 1.0
    ticks = nice_ticks(0, span, 8)
    if ticks[-1] > span * 1.02:
        ticks = [t for t in ticks if t <= span * 1.02]
    xs = Scale(0, max(span, ticks[-1]), left, right)
    bottom = top + len(tl.lanes) * (lane_h + gap) - gap
    for t in ticks:
        c.line(xs(t), top - 4, xs(t), bottom + 4, stroke=GRID)
        c.text(xs(t), bottom + 20, f"{t:g}", size=11, anchor="middle")
    c.text((left + right) / 2, bottom + 40, "seconds into the step", size=12, anchor="middle")
    if tl.overlap and tl.overlap[1] > tl.overlap[0]:
        a, b = tl.overlap
        c.rect(xs(a), top - 8, xs(b) - xs(a), bottom - top + 16, "#FFF3C4", opacity=0.8,
               title=f"async overlap: generation of step k+1 runs while step k trains ({b - a:,.1f} s)")
        c.text((xs(a) + xs(b)) / 2, top - 12, "overlap: generation k+1 while training k", size=11,
               anchor="middle", fill="#7A5C00")
    used = []
    for i, lane in enumerate(tl.lanes):
        y = top + i * (lane_h + gap)
        c.text(left - 10, y + 13, lane.name, size=12, anchor="end", weight="bold")
        for j, line in enumerate(lane.detail.split("\n")):
            c.text(left - 10, y + 26 + 11 * j, line, size=10, anchor="end", fill="#555555")
        for seg in lane.segments:
            label, colour = PHASES[seg.phase]
            if seg.phase not in used:
                used.append(seg.phase)
            x0, x1 = xs(seg.start), xs(seg.end)
            stroke = "#BBBBBB" if seg.phase == "idle" else "#FFFFFF"
            c.rect(x0, y, max(x1 - x0, 0.8), lane_h, colour, stroke=stroke, sw=0.5,
                   title=f"{lane.name}: {label} {seg.duration:,.2f} s ({seg.start:,.1f}-{seg.end:,.1f} s)",
                   dash="3,2" if seg.phase == "idle" else None)
            if x1 - x0 > 7.0 * len(label) + 6:
                c.text((x0 + x1) / 2, y + lane_h / 2 + 4, label, size=11, anchor="middle",
                       fill="#222222" if seg.phase in ("idle", "old_logprob", "prefill", "reference") else "#FFFFFF")
    # legend
    ly, lx = bottom + 62, left
    for ph in used:
        label, colour = PHASES[ph]
        c.rect(lx, ly - 10, 14, 14, colour, stroke="#999999", sw=0.5)
        c.text(lx + 19, ly + 1, label, size=11)
        lx += 32 + 6.5 * len(label)
    return ly + 20


def _draw_memory(c: Canvas, stacks: list[Stack], width: float, title: str) -> float:
    top, bottom = 50.0, 300.0
    left = 90.0
    c.text(width / 2, 24, title, size=15, anchor="middle", weight="bold")
    ymax = max([s.capacity for s in stacks] + [s.total for s in stacks] + [1.0])
    yt = nice_ticks(0, ymax * 1.05)
    ys = Scale(0, yt[-1], bottom, top)
    bar_w, step = 130.0, 260.0
    plot_right = left + step * len(stacks) + 20
    for t in yt:
        c.line(left, ys(t), plot_right, ys(t), stroke=GRID)
        c.text(left - 6, ys(t) + 4, f"{t:g}", size=11, anchor="end")
    c.line(left, bottom, plot_right, bottom)
    c.line(left, top, left, bottom)
    c.text(left - 50, (top + bottom) / 2, "GB per GPU", size=12, anchor="middle", rotate=-90)
    used: list[str] = []
    for i, s in enumerate(stacks):
        x = left + 60 + i * step
        acc = 0.0
        for key, gb in s.parts:
            label, colour = MEMORY_PARTS[key]
            if key not in used:
                used.append(key)
            y0, y1 = ys(acc + gb), ys(acc)
            c.rect(x, y0, bar_w, y1 - y0, colour, stroke="#FFFFFF", sw=0.5, title=f"{s.name}: {label} {gb:,.1f} GB")
            if y1 - y0 > 14:
                c.text(x + bar_w / 2, (y0 + y1) / 2 + 4, f"{gb:,.1f}", size=10, anchor="middle",
                       fill="#222222" if key in ("kv_cache", "activations", "colocated_training", "other") else "#FFFFFF")
            acc += gb
        cy = ys(s.capacity)
        c.line(x - 20, cy, x + bar_w + 20, cy, stroke="#C00000", sw=1.5, dash="6,3",
               title=f"capacity {s.capacity:g} GB")
        c.text(x + bar_w + 22, cy + 4, f"capacity {s.capacity:g}", size=10, fill="#C00000")
        c.text(x + bar_w / 2, bottom + 18, s.name, size=12, anchor="middle", weight="bold")
        c.text(x + bar_w / 2, bottom + 32, f"{acc:,.1f} of {s.capacity:g} GB per GPU", size=11, anchor="middle")
        c.text(x + bar_w / 2, bottom + 46, s.detail, size=10, anchor="middle", fill="#555555")
    lx, ly = plot_right + 30, top + 10
    for key in used:
        label, colour = MEMORY_PARTS[key]
        c.rect(lx, ly - 10, 14, 14, colour, stroke="#999999", sw=0.5)
        c.text(lx + 20, ly + 1, label, size=11)
        ly += 22
    return bottom + 60


def timeline_svg(plan: Plan, title: str | None = None, with_memory: bool = True) -> str:
    tl = timeline_lanes(plan, title)
    W = 1100.0
    c = Canvas(W, 10)
    h = _draw_timeline(c, tl, W)
    if with_memory:
        with c.group(0, h + 10):
            h += 10 + _draw_memory(c, memory_stacks(plan), W, "Per-GPU memory by role")
    c.height = h + 10
    return c.svg(tl.title)


def memory_svg(plan: Plan, title: str = "Per-GPU memory by role") -> str:
    W = 900.0
    c = Canvas(W, 10)
    c.height = _draw_memory(c, memory_stacks(plan), W, title) + 10
    return c.svg(title)
