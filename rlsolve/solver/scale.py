"""The one place where floats become CP-SAT integers.

Time: integer milliseconds (step times of RL runs are 1 s to hours; 1 ms keeps integers
below 1e8). Memory: whole GiB-free decimal gigabytes, rounded *up* so a candidate that
needs 20.3 GB is never matched with a KV budget computed for 20 GB."""
from __future__ import annotations

import math

TIME_UNIT_S = 1e-3
MEM_UNIT_BYTES = 1e9
INF_TIME = 10**12


def time_units(seconds: float) -> int:
    if not math.isfinite(seconds):
        return INF_TIME
    return int(math.ceil(seconds / TIME_UNIT_S - 1e-9))


def mem_units_up(nbytes: float) -> int:
    return int(math.ceil(max(nbytes, 0.0) / MEM_UNIT_BYTES - 1e-9))
