"""Dump every example's plan (and the scale benchmark's, with --scale) as JSON without the
solver's own bookkeeping (wall time, candidate and variable counts), so that two checkouts'
plans can be diffed: a change that only speeds the search up must leave this output identical.

Run: python benchmarks/plan_dump.py [--scale] > before.json; (change); ... > after.json; diff"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import rlsolve

ROOT = Path(__file__).resolve().parents[1]
BOOKKEEPING = {"wall_s", "variables", "candidates", "layouts_scored"}  # how the search went, not what it found


def _strip(plan) -> dict:
    d = plan.model_dump(mode="json")
    d["solver"] = {k: v for k, v in d.get("solver", {}).items() if k not in BOOKKEEPING}
    return d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", action="store_true", help="also the scale benchmark's rows up to 4,096 GPUs")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="solver.time_limit_s for every solve (on a loaded machine the examples' 10 s can stop a "
                         "solve; compare dumps made with the same value)")
    args = ap.parse_args()
    out = {}
    limit = {} if args.time_limit is None else {"time_limit_s": args.time_limit}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        out[path.stem] = _strip(rlsolve.solve(str(path), **limit))
    if args.scale:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from solver_scale import spec
        for gpus, pools in ((8, 1), (64, 1), (512, 1), (1024, 1), (4096, 1), (64, 2), (512, 3), (4096, 3)):
            out[f"scale-{gpus}x{pools}"] = _strip(rlsolve.solve(spec(gpus, pools), **limit))
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
