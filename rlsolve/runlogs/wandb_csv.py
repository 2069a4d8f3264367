"""A wandb export of a verl run as CSV: a step column and one column per logged key
(timing_s/gen, timing_s/step, response_length/mean, ...).

Two shapes exist: the public API's `run.history()` written with pandas `to_csv` (columns
`_step` and the keys themselves; wandb docs, "Export data": api.run(...).history()), and a
panel's "Export CSV" in the web UI (columns `Step` and "<run name> - <key>", plus
"<key>__MIN" / "__MAX" companions that are dropped here). Keys as in verl_console."""
from __future__ import annotations

import csv
import io

from rlsolve.runlogs.common import LogStep, to_float
from rlsolve.runlogs.verl_console import split

STEP_COLUMNS = ("_step", "Step", "step", "training/global_step")


def _key(column: str) -> str:
    return column.rsplit(" - ", 1)[-1].strip()


def _body(text: str) -> str:
    """The CSV without leading '#' comment lines (a fixture's or a user's note)."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def looks_like(text: str) -> bool:
    head = _body(text).split("\n", 1)[0]
    return "," in head and "timing_s/step" in head and any(c in head for c in STEP_COLUMNS)


def parse(text: str) -> list[LogStep]:
    reader = csv.reader(io.StringIO(_body(text)))
    try:
        header = next(reader)
    except StopIteration:
        return []
    step_col = next((i for i, c in enumerate(header) if c.strip() in STEP_COLUMNS), None)
    if step_col is None:
        return []
    cols = [(i, _key(c)) for i, c in enumerate(header) if i != step_col and not c.endswith(("__MIN", "__MAX"))]
    steps = []
    for row in reader:
        if len(row) != len(header):
            continue  # truncated row
        step = to_float(row[step_col])
        if step is None:
            continue
        values = {k: v for i, k in cols if (v := to_float(row[i])) is not None}
        got = split(values, int(step))
        if got is not None:
            steps.append(got)
    return steps
