"""Wall time and verdict of `rlsolve validate` on every example's optimal plan (target on a
GPU: under 60 s each; on the CPU it runs the test-mode shapes and says so).

Run: python benchmarks/validate_examples.py [--device auto|cuda|cpu] [--nproc N]
Prints one row per example: wall seconds, verdict, and the re-scored step change."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rlsolve.bench import validate_plan
from rlsolve.solver import solve

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--nproc", type=int, default=None)
    args = ap.parse_args()
    print(f"{'example':42s} {'wall_s':>7s} {'step change':>12s}  verdict")
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        plan = solve(str(path), top_k=0)
        t0 = time.perf_counter()
        v = validate_plan(str(path), plan, device=args.device, nproc=args.nproc).validation
        dt = time.perf_counter() - t0
        print(f"{path.stem:42s} {dt:7.1f} {v['rescored']['step_change']:+12.1%}  {v['verdict']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
