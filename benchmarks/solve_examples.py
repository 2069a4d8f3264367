"""Solve time of every example in this process (target: proven optimal in under 0.5 s each on 2 cores).

Run: python benchmarks/solve_examples.py [--time-limit S]
Prints one row per example: candidate count, layouts scored, decode simulations run (the engine
model's costliest call, `perf.generate.simulate_decode`, counted through the name `perf.step` calls
it by), enumeration + CP-SAT wall time, status. Counts do not depend on the machine's load; times do."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import rlsolve
from rlsolve.perf import step as perf_step
from rlsolve.solver import solve

ROOT = Path(__file__).resolve().parents[1]
SIMULATIONS = [0]
_simulate = perf_step.simulate_decode


def _counted(*args, **kwargs):
    SIMULATIONS[0] += 1
    return _simulate(*args, **kwargs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=None,
                    help="solver.time_limit_s (default: each example's; a loaded machine may need more)")
    args = ap.parse_args()
    limit = {} if args.time_limit is None else {"time_limit_s": args.time_limit}
    perf_step.simulate_decode = _counted
    rlsolve.load_spec(str(next((ROOT / "examples").glob("*.yaml"))))  # warm imports and catalogs
    print(f"{'example':42s} {'candidates':>10s} {'scored':>7s} {'sims':>5s} {'solve_s':>8s} {'status':>8s} "
          f"{'tokens/s':>10s}  mode")
    worst = 0.0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        SIMULATIONS[0] = 0
        t0 = time.perf_counter()
        plan = solve(str(path), **limit)
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        print(f"{path.stem:42s} {plan.solver.candidates:>10d} {plan.solver.layouts_scored:>7d} {SIMULATIONS[0]:>5d} "
              f"{dt:>8.2f} {plan.status:>8s} {plan.throughput.tokens_per_s:>10,.0f}  {plan.pipeline.mode}")
    print(f"slowest: {worst:.2f} s (target < 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
