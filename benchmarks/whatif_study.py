"""What-if study timing: 3 GPU types x 3 node counts x 2 networks (18 solves) with the local
process pool. Target: under 30 s on a 2-core machine.

Run: python benchmarks/whatif_study.py [SPEC] [--workers N] [--plot out.svg]
Default SPEC: examples/grpo-70b-64xh100.yaml (Llama-3.1-70B GRPO, 70B reward model). Solves
from scratch (a fresh cache directory), then again from the cache, and prints both times and
the table (Markdown)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from rlsolve.whatif import compare, render, write_sweep_plot

ROOT = Path(__file__).resolve().parents[1]
GPUS = ["H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB"]
NODES = [4, 8, 16]
NETWORKS = ["IB-NDR-400", "IB-XDR-800"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "grpo-70b-64xh100.yaml"))
    ap.add_argument("--workers", type=int, default=None, help="local processes (default: CPUs)")
    ap.add_argument("--plot", default=None, help="also draw the study (.svg, .png or .pdf)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        rows = compare(args.spec, gpus=GPUS, nodes=NODES, networks=NETWORKS, cache_dir=cache,
                       workers=args.workers, progress=True)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = compare(args.spec, gpus=GPUS, nodes=NODES, networks=NETWORKS, cache_dir=cache)
        warm = time.perf_counter() - t0
    assert [r.to_dict() for r in rows] == [r.to_dict() for r in again], "cached results differ"
    print(render(rows, "markdown"))
    if args.plot:
        write_sweep_plot(rows, args.plot)
        print(f"wrote {args.plot}")
    feasible = sum(r.feasible for r in rows)
    print(f"{len(rows)} clusters ({feasible} feasible) on {os.cpu_count()} CPUs, "
          f"{args.workers or os.cpu_count()} worker processes: {cold:.1f} s from scratch "
          f"(target < 30 s), {warm:.2f} s from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
