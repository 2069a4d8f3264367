"""verl's console logger: one line per step,

    step:12 - actor/pg_loss:0.001 - ... - response_length/mean:324.958 - timing_s/gen:74.02 - ... - timing_s/step:96.551

Format: verl/utils/logger/aggregate_logger.py `concat_dict_to_str` (f"step:{step}", then
f"{k}:{pprint.pformat(v)}" for numeric values, joined by " - "; older releases print
f"{k}:{v:.3f}"), printed by `LocalLogger.log` for `trainer.logger=['console']`; under Ray
the line may carry a "(TaskRunner pid=N)" prefix and ANSI colours. Keys: timing_s/* from
verl/trainer/ppo/metric_utils.py `compute_timing_metrics` (timers named in
verl/trainer/ppo/ray_trainer.py `marked_timer(...)`)."""
from __future__ import annotations

import re

from rlsolve.runlogs.common import NUMBER, LogStep, clean, to_float

LINE = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
PAIR = re.compile(r"^([^\s:][^:]*?):(" + NUMBER + r")$")


def looks_like(text: str) -> bool:
    return any(LINE.search(clean(ln)) and "timing_s/" in ln for ln in text.splitlines()[:200000])


def parse_pairs(body: str) -> dict[str, float] | None:
    """key:value pairs of one line; None when a pair is cut (a truncated line)."""
    out: dict[str, float] = {}
    for part in body.strip().split(" - "):
        m = PAIR.match(part.strip())
        if not m:
            return None
        v = to_float(m.group(2))
        if v is None:
            return None
        out[m.group(1)] = v
    return out


def split(values: dict[str, float], step: int) -> LogStep | None:
    timers = {k[len("timing_s/"):]: v for k, v in values.items() if k.startswith("timing_s/")}
    if "step" not in timers:
        return None  # a validation-only line (step:0 - val-core/...) has no step timer
    metrics = {k: v for k, v in values.items() if not k.startswith(("timing_s/", "timing_per_token_ms/"))}
    return LogStep(step=step, timers=timers, metrics=metrics)


def parse(text: str) -> list[LogStep]:
    steps = []
    for line in text.splitlines():
        m = LINE.search(clean(line))
        if not m:
            continue
        values = parse_pairs(m.group(2))
        if values is None:
            continue  # truncated: counted out, never half-read
        s = split(values, int(m.group(1)))
        if s is not None:
            steps.append(s)
    return steps
