"""Render a what-if study as a table, CSV, JSON or Markdown (formatting only)."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Sequence

from rlsolve.whatif.sweep import Row

FORMATS = ("table", "csv", "json", "markdown")

# (header, row -> text) of the human-readable formats
_COLUMNS: list[tuple[str, Any]] = [
    ("gpu", lambda r: r.gpu),
    ("nodes", lambda r: r.nodes),
    ("network", lambda r: r.network),
    ("gpus", lambda r: r.gpus if r.gpus_used in (0, r.gpus) else f"{r.gpus_used}/{r.gpus}"),
    ("tokens/s", lambda r: _num(r.tokens_per_s, 0)),
    ("tok/s/GPU", lambda r: _num(r.tokens_per_s_per_gpu, 1)),
    ("step s", lambda r: _num(r.step_s, 1)),
    ("mode", lambda r: r.mode or r.status),
    ("generation", lambda r: _degrees(r, "gen")),
    ("training", lambda r: _degrees(r, "train")),
    ("$/Mtok", lambda r: _num(r.usd_per_mtok, 3)),
    ("tok/s/kW", lambda r: _num(r.tokens_per_s_per_kw, 0)),
    ("pareto", lambda r: "*" if r.pareto else ""),
]


def _num(x: float | None, nd: int) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:,.{nd}f}"


def _degrees(r: Row, side: str) -> str:
    text = r.generation if side == "gen" else r.training
    n = r.gen_gpus if side == "gen" else r.train_gpus
    if text is None:
        return "-"
    return f"{n}: {text}"


def _cells(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in _COLUMNS], [[str(f(r)) for _, f in _COLUMNS] for r in rows]


def _notes(rows: Sequence[Row]) -> list[str]:
    out = []
    for r in rows:
        if not r.feasible:
            out.append(f"{r.status}: {r.label}: {r.reason}")
    prices = {}
    for r in rows:
        prices.setdefault(r.gpu, f"{r.gpu} ${r.price_usd_per_gpu_hour:g}/GPU-h ({r.price_source.split(':')[0]}), "
                                 f"TDP {r.tdp_w:g} W")
    return out + ["prices: " + "; ".join(prices.values())] if prices else out


def table(rows: Sequence[Row]) -> str:
    head, body = _cells(rows)
    widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)]
    right = {1, 3, 4, 5, 6, 10, 11}
    fmt = lambda cells: "  ".join(c.rjust(w) if i in right else c.ljust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    lines = [fmt(head), "  ".join("-" * w for w in widths)] + [fmt(c) for c in body]
    lines += [""] + _notes(rows) + ["* on the throughput-cost Pareto front (no other cluster is both faster "
                                    "and cheaper per token)"]
    return "\n".join(lines) + "\n"


def markdown(rows: Sequence[Row]) -> str:
    head, body = _cells(rows)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in ("nodes", "gpus", "tokens/s",
             "tok/s/GPU", "step s", "$/Mtok", "tok/s/kW") else "---" for h in head) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in cells) + " |" for cells in body]
    notes = _notes(rows)
    if notes:
        lines += [""] + [f"- {esc(n)}" for n in notes]
    lines += ["", "`*`: on the throughput-cost Pareto front."]
    return "\n".join(lines) + "\n"


def to_csv(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    fields = list(Row.__dataclass_fields__)
    fields.remove("from_cache")
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.to_dict().items()})
    return buf.getvalue()


def to_json(rows: Sequence[Row]) -> str:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and math.isinf(v) else v
    return json.dumps([{k: clean(v) for k, v in r.to_dict().items()} for r in rows], indent=2) + "\n"


def render(rows: Sequence[Row], fmt: str = "table") -> str:
    if fmt == "table":
        return table(rows)
    if fmt == "markdown":
        return markdown(rows)
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "json":
        return to_json(rows)
    raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")
