"""What every log reader returns."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# ANSI colour codes (Ray colours its worker prefixes) and Ray's "(TaskRunner pid=123)" prefix
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\^\[\[[0-9;]*m")
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"


@dataclass
class LogStep:
    """One logged RL step: the framework's timers (seconds, its own names) and metrics."""

    step: int
    timers: dict[str, float]
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RunLog:
    framework: str          # verl | nemo-rl | openrlhf
    format: str             # the reader that parsed it
    steps: list[LogStep]
    source: str = ""
    config: dict | None = None  # the configuration the framework printed at start-up, if any


def to_float(text: str) -> float | None:
    """A finite float, or None (a truncated or garbled value)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def clean(line: str) -> str:
    return ANSI.sub("", line)
