"""Solve time of every example in this process (target: proven optimal in under 0.5 s each on 2 cores).

Run: python benchmarks/solve_examples.py [--time-limit S] [--calls]
Prints one row per example: candidate count, layouts scored, decode simulations run (the engine
model's costliest call, `perf.generate.simulate_decode`, or its `decode_trace` / `resume_decode`, counted
through the names `perf.step` calls them by; a run re-timed for another engine, `decode_time`, is none),
enumeration + CP-SAT wall time, status. Counts do not
depend on the machine's load; times do.
`--calls`: each solve runs under cProfile and the row adds the Python function calls it made (a
load-independent measure of the work; the times then include the profiler's overhead)."""
from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path

import rlsolve
from rlsolve.perf import step as perf_step
from rlsolve.solver import solve

ROOT = Path(__file__).resolve().parents[1]
SIMULATIONS = [0]
RUNS = ("simulate_decode", "decode_trace", "resume_decode")


def _counted(run):
    def counted(*args, **kwargs):
        SIMULATIONS[0] += 1
        return run(*args, **kwargs)
    return counted


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=None,
                    help="solver.time_limit_s (default: each example's; a loaded machine may need more)")
    ap.add_argument("--calls", action="store_true", help="count each solve's Python function calls (cProfile)")
    args = ap.parse_args()
    limit = {} if args.time_limit is None else {"time_limit_s": args.time_limit}
    for name in RUNS:
        setattr(perf_step, name, _counted(getattr(perf_step, name)))
    rlsolve.load_spec(str(next((ROOT / "examples").glob("*.yaml"))))  # warm imports and catalogs
    print(f"{'example':42s} {'candidates':>10s} {'scored':>7s} {'sims':>5s} {'solve_s':>8s} {'status':>8s} "
          f"{'tokens/s':>10s}  mode" + ("       calls" if args.calls else ""))
    worst = 0.0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        SIMULATIONS[0] = 0
        prof = cProfile.Profile() if args.calls else None
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        plan = solve(str(path), **limit)
        if prof is not None:
            prof.disable()
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        # (summed over the profiler's own entries: pstats merges functions that share a file, line and
        # name, such as the __eq__ every dataclass generates, and keeps one of their counts)
        mode = plan.pipeline.mode if prof is None else \
            f"{plan.pipeline.mode:9s} {sum(e.callcount for e in prof.getstats()):>11,d}"
        print(f"{path.stem:42s} {plan.solver.candidates:>10d} {plan.solver.layouts_scored:>7d} {SIMULATIONS[0]:>5d} "
              f"{dt:>8.2f} {plan.status:>8s} {plan.throughput.tokens_per_s:>10,.0f}  {mode}")
    print(f"slowest: {worst:.2f} s (target < 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
