"""Start-up time of the commands that do not solve, against the floor of importing their
libraries (target: `rlsolve --help` within 1.5x of `python -c "import click, pydantic, yaml"`).

Run: python benchmarks/startup.py
Each command runs 7 times in a fresh interpreter, alternating with the baseline; the median
wall time of each is printed, and the ratio."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

BASELINE = [sys.executable, "-c", "import click, pydantic, yaml"]
COMMANDS = [["--help"], ["gpus"], ["models"], ["schema"]]


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    print(f"{'command':20s} {'median_s':>8s} {'baseline_s':>10s} {'ratio':>6s}")
    for args in COMMANDS:
        runs, base = [], []
        for _ in range(7):
            base.append(wall(BASELINE))
            runs.append(wall([sys.executable, "-m", "rlsolve.cli.main", *args]))
        m, b = statistics.median(runs), statistics.median(base)
        print(f"{'rlsolve ' + ' '.join(args):20s} {m:>8.3f} {b:>10.3f} {m / b:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
