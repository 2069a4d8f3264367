"""Quality: rlsolve's optimal plan against the seed design note's rule-of-thumb plan.

Run: python benchmarks/quality_vs_seed.py

For every examples/*.yaml: solve with rlsolve, build the seed's layout (rlsolve/baseline.py:
sections 3.3 derive_parallelism and 4.2 optimize_resource_ratio, section 7 templates) and
score it with the same performance model. Prints a Markdown table -- rlsolve tokens/s, seed
tokens/s (or why the seed's layout does not fit / breaks a rule), the ratio -- then the
median ratio over the scenarios where the seed's layout fits (target >= 1.3x), each seed
layout, and any way it lies outside the solver's search space."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import rlsolve
from rlsolve.baseline import BaselineError, seed_layout, seed_plan, search_space_escapes
from rlsolve.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.3


def _plan_summary(plan) -> str:
    g, t = plan.parallelism.generation, plan.parallelism.training
    ra = plan.resource_allocation
    return (f"{plan.pipeline.mode}: gen {ra.generation.gpus} tp{g.tp} pp{g.pp} dp{g.dp}; train {ra.training.gpus} "
            f"tp{t.tp} pp{t.pp} cp{t.cp} dp{t.dp} ep{t.ep} ZeRO-{t.zero_stage} mb{t.micro_batch} {t.recompute}")


def main() -> int:
    rows, notes, ratios = [], [], []
    t_all = time.perf_counter()
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        name = path.stem
        plan = rlsolve.solve(str(path))
        ours = plan.throughput.tokens_per_s
        seed, why = seed_plan(str(path))
        if seed is None:
            seed_col, ratio_col = why.split(":", 1)[0], "-"
            notes.append(f"- `{name}`: seed {why}")
        else:
            r = ours / seed.throughput.tokens_per_s
            ratios.append(r)
            seed_col, ratio_col = f"{seed.throughput.tokens_per_s:,.0f}", f"{r:.2f}x"
            notes.append(f"- `{name}`: seed {why}")
        notes.append(f"  rlsolve {_plan_summary(plan)}")
        problem = resolve(rlsolve.load_spec(str(path)))
        try:
            for e in search_space_escapes(problem, seed_layout(problem)):
                notes.append(f"  outside the solver's space: {e}")
        except BaselineError:
            pass
        rows.append((name, f"{ours:,.0f}", plan.pipeline.mode, seed_col, ratio_col))

    print("| scenario | rlsolve tokens/s | rlsolve mode | seed tokens/s | ratio |")
    print("|---|---:|---|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    if ratios:
        med = statistics.median(ratios)
        print(f"median ratio over the {len(ratios)} scenarios where the seed's layout fits: {med:.2f}x "
              f"(target >= {TARGET}x: {'met' if med >= TARGET else 'NOT met'}); min {min(ratios):.2f}x, "
              f"max {max(ratios):.2f}x")
    else:
        print("the seed's layout fits in none of the scenarios")
    print(f"seed layout does not fit or breaks a rule in {len(rows) - len(ratios)} of {len(rows)} scenarios")
    print()
    print("\n".join(notes))
    print(f"\ntotal wall time {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
