"""Per-step phase timings read from RL frameworks' own logs (`rlsolve calibrate --from-log`).

One module per format, each built from the framework's logging code (cited in its
docstring): verl's console logger and JSONL file logger and a wandb CSV export of the same
keys, NeMo-RL's per-step timing block, OpenRLHF's per-step status line. Every reader returns
a `RunLog`: the steps in order, each step's timers by the framework's own names, and the
metrics the fit needs (mean response length). Which timer is which model phase is in
`rlsolve.runlogs.phases`. Pure: no printing; bad input raises SpecError naming the flag."""
from rlsolve.runlogs.api import FORMATS, FRAMEWORK, MAX_LOG_BYTES, detect_format, parse_log_text, read_log
from rlsolve.runlogs.common import LogStep, RunLog

__all__ = ["FORMATS", "FRAMEWORK", "MAX_LOG_BYTES", "LogStep", "RunLog", "detect_format", "parse_log_text",
           "read_log"]
