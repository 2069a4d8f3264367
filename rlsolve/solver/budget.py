"""The time limit of one solve, shared by every stage (enumeration, CP-SAT, runner-ups,
diagnosis), so `time_limit_s` bounds the whole call and not CP-SAT alone."""
from __future__ import annotations

import time

from rlsolve.errors import NoAnswerError


class Deadline:
    """`limit_s` None: no limit. `check(stage)` raises NoAnswerError once the limit has
    passed; `left()` is the time the next stage may still use."""

    def __init__(self, limit_s: float | None):
        self.limit_s = limit_s
        self.start = time.monotonic()
        self._calls = 0

    def left(self) -> float:
        if self.limit_s is None:
            return float("inf")
        return max(0.0, self.limit_s - (time.monotonic() - self.start))

    def passed(self) -> bool:
        return self.left() <= 0.0

    def check(self, stage: str, now: bool = False) -> None:
        """Raise NoAnswerError if the limit has passed. In tight loops the clock is read every
        64th call (reading it each time would cost more than the loop's work); `now` reads it."""
        self._calls += 1
        if self.limit_s is not None and (now or (self._calls & 63) == 0) and self.passed():
            raise NoAnswerError(self.limit_s, stage)
