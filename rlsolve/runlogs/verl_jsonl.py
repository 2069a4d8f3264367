"""verl's file logger (`trainer.logger=['file']`): one JSON object per line,

    {"step": 12, "data": {"timing_s/gen": 74.02, "response_length/mean": 324.958, ...}}

Format: verl/utils/tracking.py `FileLogger.log` (orjson.dumps({"step": step, "data": data})),
written to $VERL_FILE_LOGGER_PATH or <root>/<project>/<experiment>.jsonl. Keys as in
verl_console."""
from __future__ import annotations

import json

from rlsolve.runlogs.common import LogStep, to_float
from rlsolve.runlogs.verl_console import split


def looks_like(text: str) -> bool:
    for line in text.splitlines()[:50]:
        s = line.strip()
        if s.startswith("{") and '"step"' in s and '"data"' in s:
            return True
    return False


def parse(text: str) -> list[LogStep]:
    steps = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("{"):
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError:
            continue  # truncated line
        if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict) or not isinstance(obj.get("step"), int):
            continue
        values = {k: to_float(v) for k, v in obj["data"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        got = split({k: v for k, v in values.items() if v is not None}, obj["step"])
        if got is not None:
            steps.append(got)
    return steps
