"""Solve time against cluster size and pool count (issue: proven optimal in under 1 s up to
1,024 GPUs and under 10 s at 16,384 GPUs with 3 pools, on 2 cores).

Run: python benchmarks/solver_scale.py [--quick]
A 70B GRPO workload (8B below 64 GPUs, where 70B cannot train) whose batch grows with the
cluster (one prompt per two GPUs, 16 samples each). Prints GPUs, pools, candidates, layouts
scored, enumeration and CP-SAT time, status."""
from __future__ import annotations

import argparse
import time

from rlsolve.resolve import resolve
from rlsolve.solver import make_program
from rlsolve.solver.candidates import enumerate_candidates, modes_allowed
from rlsolve.solver.program import run
from rlsolve.spec import load_spec


def spec(gpus: int, pools: int) -> dict:
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
            "solver": {"top_k": 0}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 16,384-GPU rows")
    args = ap.parse_args()
    rows = [(8, 1), (64, 1), (512, 1), (1024, 1), (4096, 1), (16384, 1), (64, 2), (512, 3), (4096, 3), (16384, 3)]
    if args.quick:
        rows = [r for r in rows if r[0] <= 4096]
    print(f"{'GPUs':>6} {'pools':>5} {'cands':>6} {'scored':>7} {'enum_s':>7} {'cpsat_s':>7} {'total_s':>7}  status")
    for gpus, pools in rows:
        t0 = time.perf_counter()
        problem = resolve(load_spec(spec(gpus, pools)))
        cands = enumerate_candidates(problem)
        t1 = time.perf_counter()
        prog = make_program(problem, cands, modes_allowed(problem))
        solver, status = run(prog, 60, 2, True)
        t2 = time.perf_counter()
        print(f"{gpus:>6} {pools:>5} {len(cands.gen) + len(cands.train):>6} {cands.evaluated:>7} {t1 - t0:>7.2f} "
              f"{t2 - t1:>7.2f} {t2 - t0:>7.2f}  {solver.status_name(status)}", flush=True)


if __name__ == "__main__":
    main()
