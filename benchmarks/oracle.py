"""rlsolve against the exhaustive oracle on small clusters: the same optimum, and the ratio
of times.

Run: python benchmarks/oracle.py
The oracle (rlsolve/solver/oracle.py) takes every legal layout of the rule table on every
GPU count with every placement, drops nothing by dominance, and composes every plan with
the model's step formula; rlsolve enumerates with its dominance rules and bounds and lets
CP-SAT choose."""
from __future__ import annotations

import time

from rlsolve.resolve import resolve
from rlsolve.solver import search
from rlsolve.solver.oracle import oracle
from rlsolve.spec import load_spec

BASE = {"model": {"policy": "llama-3.1-8b", "reference": "policy", "reward": "rule"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 512,
               "response_len": {"max": 4096, "mean": 1024}, "mini_batches": 2, "max_staleness": 1}}

CASES = [
    ("8b on 8 H100", {"gpu": "H100-SXM-80GB", "nodes": 1}, {}),
    ("8b on 16 H100", {"gpu": "H100-SXM-80GB", "nodes": 2}, {}),
    ("8b on 16 A100", {"gpu": "A100-SXM-80GB", "nodes": 2, "network": "IB-HDR-200"}, {}),
    ("1.5b PPO on 8 H100", {"gpu": "H100-SXM-80GB", "nodes": 1},
     {"model": {"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "qwen2.5-1.5b", "value": "policy"},
      "rl": {**BASE["rl"], "algorithm": "ppo"}}),
    ("30b-a3b MoE on 16 H100", {"gpu": "H100-SXM-80GB", "nodes": 2},
     {"model": {"policy": "qwen3-30b-a3b", "reference": "policy", "reward": "rule"}}),
]


def main() -> None:
    print(f"{'instance':26s} {'oracle_ms':>10s} {'cpsat_ms':>10s} {'same':>5s} {'oracle_s':>9s} {'rlsolve_s':>9s} "
          f"{'ratio':>6s}")
    for name, cluster, over in CASES:
        spec = {**BASE, **over, "cluster": cluster}
        problem = resolve(load_spec(spec))
        t0 = time.perf_counter()
        oracle_ms = oracle(problem)
        t1 = time.perf_counter()
        found = search(problem)
        t2 = time.perf_counter()
        ms = found.solver.value(found.program.v.step)
        print(f"{name:26s} {oracle_ms:>10,d} {ms:>10,d} {str(ms == oracle_ms):>5s} {t1 - t0:>9.2f} {t2 - t1:>9.2f} "
              f"{(t1 - t0) / (t2 - t1):>6.1f}", flush=True)


if __name__ == "__main__":
    main()
