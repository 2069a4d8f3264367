"""What-if: the rollout of rl_step rows when one prompt's responses are alike in length.

Run: python benchmarks/prompt_grouped_rollout.py --match TEXT --samples-per-prompt K [--cases FILE]

The model's slowest engine (`perf.generate.slowest_replica_mean`) holds the largest of dp means of
n independent responses: mean + sd / sqrt(n) x E[max of dp standard normals], which its docstring
calls the floor. The frameworks hand each engine whole prompt groups: NeMo-RL repeats every prompt
num_generations_per_prompt times in a row (grpo.py grpo_train, batch.repeat_interleave, tag v0.7.0)
and VllmGeneration.generate cuts that batch into dp contiguous shares (shard_by_batch_size), so an
engine of n requests holds n / K prompts. Where a prompt's K responses had one length, an engine's
mean would vary as a mean of n / K draws: sd / sqrt(n / K). This script prints, for every matched
rl_step row scored on its own layout (`rlsolve.cases.recipe_estimate`), the step and its generation
under the model (the floor) and under that bound (the same model with n / K in place of n), beside
the measured step. The truth lies between them, by the share of length variance that lies between
prompts; no public source this project has checked states that share, so the model keeps the floor.
K is the recipe's num_generations_per_prompt (the case format flattens prompts x generations).

The bound runs in a child process (the model memoizes decode runs by their arguments, and the bound
replaces `slowest_replica_mean` before any is run).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

from rlsolve.cases import NoRecipeLayout, recipe_estimate
from rlsolve.perf import generate as G

ROOT = Path(__file__).resolve().parents[1]


def grouped_slowest_mean(k: int):
    """`slowest_replica_mean` with an engine's n requests drawn as n / k prompt groups of one length each."""
    floor = G.slowest_replica_mean

    def slowest(n_requests, mean_len, max_len, n_total, clip=None, fixed_shares=True):
        dp = int(round(n_total / n_requests)) if n_requests > 0 else 1
        if not fixed_shares or dp <= 1 or n_requests <= 1 or mean_len >= max_len:
            return floor(n_requests, mean_len, max_len, n_total, clip, fixed_shares)
        groups = max(1.0, n_requests / k)
        shifted = mean_len + G._length_std(mean_len, max_len, clip) / math.sqrt(groups) * G.expected_max_std_normal(dp)
        return min(shifted, max_len)
    return slowest


def score(rows: list[dict]) -> list[dict]:
    """Step, generation and the slowest engine's mean response of each row on its own layout."""
    out = []
    for row in rows:
        try:
            problem, _, est, _ = recipe_estimate(row)
        except (NoRecipeLayout, ValueError):
            continue
        wl, gs = problem.workload, est.gen
        n_req = wl.samples / gs.layout.dp
        out.append({"id": row["id"], "measured": row["measured"].get("step_s"), "step": est.step,
                    "generation": gs.prefill + gs.decode, "engines": gs.layout.dp,
                    "slowest_mean": G.slowest_replica_mean(n_req, wl.response_mean, wl.response_max, wl.samples,
                                                           wl.clip_ratio)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(ROOT / "benchmarks" / "data" / "extra_cases.yaml"))
    ap.add_argument("--match", required=True, help="only rl_step rows whose id contains this text")
    ap.add_argument("--samples-per-prompt", type=int, required=True,
                    help="the recipe's responses per prompt (NeMo-RL grpo.num_generations_per_prompt)")
    ap.add_argument("--grouped", action="store_true", help="(child) score under the prompt-grouped bound, as JSON")
    args = ap.parse_args()
    data = yaml.safe_load(Path(args.cases).read_text())
    rows = [r for r in data["cases"] if r.get("kind") == "rl_step" and args.match in r["id"]]
    if args.grouped:
        G.slowest_replica_mean = grouped_slowest_mean(args.samples_per_prompt)
        print(json.dumps(score(rows)))
        return
    floor = score(rows)
    child = subprocess.run([sys.executable, __file__, "--cases", args.cases, "--match", args.match,
                            "--samples-per-prompt", str(args.samples_per_prompt), "--grouped"],
                           capture_output=True, text=True, check=True)
    bound = {r["id"]: r for r in json.loads(child.stdout)}
    print(f"{'id':60s} {'measured':>8s} | {'floor: step':>11s} {'gen':>6s} {'mean':>6s} | "
          f"{'grouped: step':>13s} {'gen':>6s} {'mean':>6s}")
    for f in floor:
        b = bound[f["id"]]
        err = lambda s: f"{s:7.0f} ({s / f['measured'] - 1:+.0%})" if f["measured"] else f"{s:7.0f}"  # noqa: E731
        print(f"{f['id']:60s} {f['measured'] or 0:8.0f} | {err(f['step']):>11s} {f['generation']:6.0f} "
              f"{f['slowest_mean']:6.0f} | {err(b['step']):>13s} {b['generation']:6.0f} {b['slowest_mean']:6.0f}")


if __name__ == "__main__":
    main()
