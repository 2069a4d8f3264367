"""Solve time against cluster size and pool count: the whole call `rlsolve.solve` makes
(enumeration, CP-SAT, the default three runner-up plans), in this process (targets: 16,384
GPUs in 3 pools and 65,536 GPUs in one pool within 5 s, proven optimal, on 2 cores).

Run: python benchmarks/solver_scale.py [--quick | --targets] [--calls] [--time-limit S]
A 70B GRPO workload (8B below 64 GPUs, where 70B cannot train) whose batch grows with the
cluster (one prompt per two GPUs, 16 samples each). Prints GPUs, pools, candidates, layouts
scored, the solve's wall time, status and runner-ups; `--calls`: also the Python function calls
each solve makes under cProfile (as benchmarks/solve_examples.py --calls counts them)."""
from __future__ import annotations

import argparse
import cProfile
import time

import rlsolve


def spec(gpus: int, pools: int, time_limit_s: float = 60) -> dict:
    nodes = gpus // 8
    if pools == 1:
        cluster = {"gpu": "H100-SXM-80GB", "nodes": nodes, "network": "IB-NDR-400"}
    else:
        kinds = [("h100", "H100-SXM-80GB", "IB-NDR-400"), ("h200", "H200-SXM-141GB", "IB-NDR-400"),
                 ("a100", "A100-SXM-80GB", "IB-HDR-200")][:pools]
        share = [nodes // 2, nodes // 4, nodes // 4] if pools == 3 else [nodes // 2, nodes // 2]
        cluster = {"pools": [{"name": n, "gpu": g, "nodes": max(1, k), "network": w}
                             for (n, g, w), k in zip(kinds, share)]}
    return {"cluster": cluster,
            "model": {"policy": "llama-3.1-8b" if gpus < 64 else "llama-3.1-70b", "reference": "policy",
                      "reward": "rule"},
            "rl": {"algorithm": "grpo", "prompts_per_step": max(32, gpus // 2), "samples_per_prompt": 16,
                   "prompt_len": 1024, "response_len": {"max": 8192, "mean": 3072}, "mini_batches": 4,
                   "max_staleness": 1},
            "solver": {"time_limit_s": time_limit_s}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the rows above 4,096 GPUs")
    ap.add_argument("--targets", action="store_true", help="only the two target rows (16,384 x 3 and 65,536 x 1)")
    ap.add_argument("--calls", action="store_true", help="count each solve's Python function calls (cProfile)")
    ap.add_argument("--time-limit", type=float, default=60,
                    help="solver.time_limit_s of each row (under cProfile on a loaded machine 16,384 x 3 can "
                         "pass the default 60 s)")
    args = ap.parse_args()
    rows = [(8, 1), (64, 1), (512, 1), (1024, 1), (4096, 1), (16384, 1), (65536, 1), (64, 2), (512, 3), (4096, 3),
            (16384, 3)]
    if args.quick:
        rows = [r for r in rows if r[0] <= 4096]
    if args.targets:
        rows = [(16384, 3), (65536, 1)]
    rlsolve.solve(spec(8, 1))  # warm the catalogs and OR-Tools, as a long-running scheduler would be
    print(f"{'GPUs':>6} {'pools':>5} {'cands':>6} {'scored':>7} {'solve_s':>7}  {'status':8s} runner-ups"
          + ("       calls" if args.calls else ""))
    for gpus, pools in rows:
        prof = cProfile.Profile() if args.calls else None
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        plan = rlsolve.solve(spec(gpus, pools, args.time_limit))
        if prof is not None:
            prof.disable()
        t1 = time.perf_counter()
        alts = len(plan.alternatives)
        tail = f"{alts}" if prof is None else f"{alts:>10} {sum(e.callcount for e in prof.getstats()):>11,d}"
        print(f"{gpus:>6} {pools:>5} {plan.solver.candidates:>6} {plan.solver.layouts_scored:>7} {t1 - t0:>7.2f}  "
              f"{plan.status:8s} {tail}", flush=True)


if __name__ == "__main__":
    main()
