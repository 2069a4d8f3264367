"""Reading a log: format detection and the capped, guarded read (the package docstring says
what each format is); re-exported by rlsolve.runlogs."""
from __future__ import annotations

from pathlib import Path

from rlsolve.errors import SpecError
from rlsolve.reader import STDIN, read_bytes
from rlsolve.runlogs import nemo_rl, openrlhf, verl_console, verl_jsonl, wandb_csv
from rlsolve.runlogs.common import LogStep, RunLog
from rlsolve.runlogs.config import printed_config

# format name -> module with `looks_like(text)` and `parse(text) -> list[LogStep]`
FORMATS = {"verl-console": verl_console, "verl-jsonl": verl_jsonl, "wandb-csv": wandb_csv,
           "nemo-rl": nemo_rl, "openrlhf": openrlhf}
FRAMEWORK = {"verl-console": "verl", "verl-jsonl": "verl", "wandb-csv": "verl", "nemo-rl": "nemo-rl",
             "openrlhf": "openrlhf"}
MAX_LOG_BYTES = 256 * 1024 * 1024  # a month of per-step lines is a few MB; this bounds memory


def detect_format(text: str) -> str | None:
    """The first format whose markers the text carries (None: no known format)."""
    for name, mod in FORMATS.items():
        if mod.looks_like(text):
            return name
    return None


def parse_log_text(text: str, fmt: str | None = None, *, what: str = "--from-log", source: str = "") -> RunLog:
    """Read a log's text into a RunLog; `fmt` forces a format (else it is detected)."""
    if fmt is not None and fmt not in FORMATS:
        raise SpecError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}", field="--log-format")
    if not text.strip():
        raise SpecError("the log is empty; give the file the framework printed its per-step lines to", field=what)
    found = fmt or detect_format(text)
    if found is None:
        raise SpecError("no per-step timing lines of a known framework (verl `step:N - timing_s/...`, its JSONL "
                        "file logger, a wandb CSV with timing_s/* columns, NeMo-RL's `Timing:` block, OpenRLHF's "
                        "`Global step N: {...}`); check the file or pass --log-format", field=what)
    steps = FORMATS[found].parse(text)
    if not steps:
        raise SpecError(f"no step with timings found in this {found} log (is it truncated, or another "
                        f"framework's? pass --log-format to force one)", field=what)
    framework = FRAMEWORK[found]
    return RunLog(framework=framework, format=found, steps=steps, source=source,
                  config=printed_config(text, framework))


def read_log(path: str, fmt: str | None = None, *, what: str = "--from-log") -> RunLog:
    """Read a log file (or standard input for `-`) through the one guarded reader, with the
    log's own size cap; UTF-8; a binary file is refused."""
    p = Path(path)
    if str(path) != STDIN and p.is_file() and p.stat().st_size > MAX_LOG_BYTES:  # say so before reading it
        raise SpecError(f"{p} is over {MAX_LOG_BYTES // 2**20} MiB; cut it to the steps to fit on", field=what)
    raw = read_bytes(path, what, limit=MAX_LOG_BYTES)
    if b"\x00" in raw[:65536]:
        raise SpecError(f"{p} is binary, not a text log; give the console output or the JSONL/CSV export", field=what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{p} is not UTF-8 text (byte {e.start}); give the console output as text", field=what) from None
    return parse_log_text(text, fmt, what=what, source=str(p))
