"""How much of an example's solve any shape-level skip of the training enumeration could save (issue #13): the
solve with every training shape (GPUs, tp, pp, cp, dp) against the same solve told in advance which shapes score
no layout at all (an oracle: no sound bound knows it before their layouts' floors), so that a proposed group
bound can be judged by the most it could win before it is built.

Per example: the shapes `rules.train_shapes` gives the full enumeration, those with at least one layout scored
(`train_core`, the probe's included), the layout floors asked (`train_core_floor`) and layouts scored with all
shapes and with only those, and the process time of each solve (min of --repeat, the two alternated --rounds
times: the machine's speed varies, compare only side by side); `same plan`: the plans without the solver's
bookkeeping (plan_dump's) are equal, as they must be (a shape that scores nothing adds no candidate).

Run: python benchmarks/train_shape_headroom.py [examples/x.yaml ...] [--repeat 3] [--rounds 2]
(default: the DeepSeek-V2 and 70B examples, the two over 0.5 s on the training side)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import rlsolve
from rlsolve.solver import candidates as cand_mod

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from plan_dump import _strip  # noqa: E402  (the plan without the search's bookkeeping)

DEFAULT = ("grpo-deepseek-v2-256xh100", "grpo-70b-64xh100")


def _counting(name: str, counts: dict, record=None):
    fn = getattr(cand_mod, name)

    def counted(problem, pool, lay, *args, **kwargs):
        counts[name] = counts.get(name, 0) + 1
        if record is not None:
            record.add((lay.tp, lay.pp, lay.cp, lay.dp))
        return fn(problem, pool, lay, *args, **kwargs)
    return fn, counted


def headroom(path: str, repeat: int = 3, rounds: int = 2) -> dict:
    """The figures of one example (see the module's docstring): shapes, scoring shapes, floors and layouts scored
    (all shapes, then the oracle's), the least process time of each solve, and whether their plans are equal."""
    all_shapes = cand_mod.train_shapes
    rlsolve.load_spec(path)
    seen: set = set()
    scoring: set = set()

    def recording(problem, pool):
        for shape in all_shapes(problem, pool):
            seen.add(shape[1:])
            yield shape

    def oracle(problem, pool):
        return (shape for shape in all_shapes(problem, pool) if shape[1:] not in dead)

    counts: dict = {}
    core, counted_core = _counting("train_core", counts, scoring)
    floor, counted_floor = _counting("train_core_floor", counts)
    cand_mod.train_shapes, cand_mod.train_core, cand_mod.train_core_floor = recording, counted_core, counted_floor
    try:
        plan_all = _strip(rlsolve.solve(path))
        dead = seen - scoring
        first = dict(counts)
        counts.clear()
        cand_mod.train_shapes = oracle
        plan_oracle = _strip(rlsolve.solve(path))
        second = dict(counts)
    finally:
        cand_mod.train_shapes, cand_mod.train_core, cand_mod.train_core_floor = all_shapes, core, floor
    best = {"all": float("inf"), "oracle": float("inf")}
    for _ in range(rounds):
        for key, shapes in (("all", all_shapes), ("oracle", oracle)):
            cand_mod.train_shapes = shapes
            try:
                for _ in range(repeat):
                    t0 = time.process_time()
                    rlsolve.solve(path)
                    best[key] = min(best[key], time.process_time() - t0)
            finally:
                cand_mod.train_shapes = all_shapes
    return {"shapes": len(seen), "scoring": len(seen & scoring),
            "floors": (first.get("train_core_floor", 0), second.get("train_core_floor", 0)),
            "scored": (first.get("train_core", 0), second.get("train_core", 0)),
            "all_s": best["all"], "oracle_s": best["oracle"], "same_plan": plan_all == plan_oracle}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("examples", nargs="*", help="spec files (default: %s)" % ", ".join(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3, help="solves per timing (the least process time is kept)")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two solves")
    args = ap.parse_args()
    paths = args.examples or [str(ROOT / "examples" / f"{name}.yaml") for name in DEFAULT]
    print(f"{'example':32s} {'shapes':>6s} {'scoring':>7s} {'floors':>13s} {'scored':>11s} "
          f"{'all_s':>6s} {'oracle_s':>8s}  same plan")
    for path in paths:
        h = headroom(path, args.repeat, args.rounds)
        floors = "{:,d}->{:,d}".format(*h["floors"])
        scored = "{:,d}->{:,d}".format(*h["scored"])
        print(f"{Path(path).stem:32s} {h['shapes']:>6d} {h['scoring']:>7d} {floors:>13s} {scored:>11s} "
              f"{h['all_s']:>6.3f} {h['oracle_s']:>8.3f}  {h['same_plan']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
