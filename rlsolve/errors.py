"""The two errors the public API raises. The CLI maps them to exit codes 2 and 3."""
from __future__ import annotations

import difflib
from typing import Iterable


def printable(text: str) -> str:
    """User text (a field name, a pool name) escaped where it is not printable, so a message
    stays the one line it is meant to be: a record separator or newline in a key must not
    split it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


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


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    if close:
        return "did you mean " + ", ".join(repr(lowered[c]) for c in close) + "?"
    return "known names: " + ", ".join(sorted(choices)[:12]) + (" ..." if len(choices) > 12 else "")
