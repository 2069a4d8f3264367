"""Solve time of every example in this process (target: proven optimal in under 0.5 s each on 2 cores).

Run: python benchmarks/solve_examples.py
Prints one row per example: candidate count, enumeration + CP-SAT wall time, status."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import rlsolve
from rlsolve.solver import solve

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    rlsolve.load_spec(str(next((ROOT / "examples").glob("*.yaml"))))  # warm imports and catalogs
    print(f"{'example':42s} {'candidates':>10s} {'solve_s':>8s} {'status':>8s} {'tokens/s':>10s}  mode")
    worst = 0.0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        t0 = time.perf_counter()
        plan = solve(str(path))
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        print(f"{path.stem:42s} {plan.solver.candidates:>10d} {dt:>8.2f} {plan.status:>8s} "
              f"{plan.throughput.tokens_per_s:>10,.0f}  {plan.pipeline.mode}")
    print(f"slowest: {worst:.2f} s (target < 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
