"""The errors the public API raises. The CLI maps them to exit codes 2 (SpecError),
3 (InfeasibleError, proven) and 4 (NoAnswerError: no answer within the time limit)."""
from __future__ import annotations

import difflib
from typing import Iterable


MAX_WORD_CHARS = 120      # a GPU name, a key, a value quoted in a message
MAX_MESSAGE_CHARS = 1000  # a whole message line


def clip(text: str, word: int = MAX_WORD_CHARS, total: int = MAX_MESSAGE_CHARS) -> str:
    """Shorten the user text a message quotes: a 5 MB unknown GPU name is shown by its first
    characters and its length, and a message over `total` keeps its start and its end (the
    fix is said last), so one bad input cannot print megabytes."""
    if len(text) <= word and len(text) <= total:
        return text
    words = [w if len(w) <= word else f"{w[:word // 2]}...({len(w):,} chars)" for w in text.split(" ")]
    text = " ".join(words)
    if len(text) > total:
        tail = total // 4
        text = f"{text[:total - tail]} ...({len(text) - total:,} chars left out)... {text[-tail:]}"
    return text


def printable(text: str) -> str:
    """User text (a field name, a pool name) escaped where it is not printable, so a message
    stays the one line it is meant to be: a record separator or newline in a key must not
    split it; and clipped, so it stays a line of readable length."""
    return clip("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text))


class SpecError(ValueError):
    """Invalid input: names the field and the fix. CLI exit code 2."""

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(printable(f"{field}: {message}" if field else message))


class InfeasibleError(RuntimeError):
    """No layout satisfies the constraints. `reasons` says which, with numbers. CLI exit code 3."""

    def __init__(self, reasons: list[str]):
        self.reasons = [printable(r) for r in reasons]
        super().__init__("infeasible: " + "; ".join(self.reasons))


class NoAnswerError(RuntimeError):
    """No plan was found within the time limit, and none was proven impossible either
    (status `unknown`). Never to be read or cached as infeasibility. CLI exit code 4, HTTP 504.
    `limit_s` is the limit that stopped the search; `stage` says where it stopped."""

    def __init__(self, limit_s: float, stage: str):
        self.limit_s, self.stage = limit_s, stage
        super().__init__(f"no answer within the time limit of {limit_s:g} s (stopped during {stage}); "
                         f"raise --time-limit (solver.time_limit_s) to search longer")


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    if close:
        return "did you mean " + ", ".join(repr(lowered[c]) for c in close) + "?"
    return "known names: " + ", ".join(sorted(choices)[:12]) + (" ..." if len(choices) > 12 else "")
