"""The model's training and log-prob phases of RL rows, term by term, beside the measured phases.

Run: python benchmarks/rl_train_terms.py [--cases FILE] [--match TEXT]

For every rl_step row that gives measured phases and is scored on its own layout (the rows of
`rlsolve cases`, `rlsolve.cases.recipe_estimate`), prints the policy update's terms as the model
sums them (perf.train.TrainTime: compute, tp, cp, ep, pp, bubble, dp, optimizer), the old log-prob
and reference passes, and per pipeline slot: the micro-batch passes one data-parallel rank runs plus
the pipeline's fill, (m + pp - 1) per optimizer step for the update and per pass for the two log-prob
passes, with the modelled and the measured seconds per slot and their difference (`miss ms`). A cost
that scales with the slots (a per-micro-batch host cost) misses the same milliseconds per slot in
both phases; a rate the model gets wrong misses in proportion to the modelled time per slot.

The terms are the estimate `rlsolve cases` scores (their sum is its `train` phase; a test holds it).

Where a row measures NeMo-RL's one log-prob timer (`logprob`: old log-probs and reference together), it also
prints the update at the forward rate that timer implies: the same run's two log-prob passes forward the
policy's weights with its own degrees and kernels (NeMo-RL runs the reference in the policy's own model on the
same micro-batches, use_reference_model), so measured / modelled of their forward (the reference's weight swap,
the model's reference pass less its old log-prob pass, set apart) is the share of the update's miss that a
forward rate explains, and what is left is the update's own (backward, optimizer, per-global-batch work).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from rlsolve.cases import NoRecipeLayout, recipe_estimate
from rlsolve.perf import step as S

ROOT = Path(__file__).resolve().parents[1]
TERMS = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "bubble", "dp_comm", "optimizer")


def row_terms(row: dict) -> dict | None:
    """The update's terms, the log-prob passes and the per-slot figures of one rl_step row, or None
    where the row is not scored on its own layout or gives no measured phases."""
    measured = (row.get("measured") or {}).get("phases_measured_s") or {}
    if row.get("kind") != "rl_step" or not measured:
        return None
    try:
        problem, _, est, _ = recipe_estimate(row)
    except (NoRecipeLayout, ValueError):
        return None
    side, wl = est.train, problem.workload
    lay = S._train_pass_layout(wl, S.trainer_layout(problem, side.layout))
    lp = S._logprob_pass(wl, lay)[0]
    m = max(1.0, wl.global_batch / (lay.dp * lay.micro_batch))
    m_lp = max(1.0, wl.samples / (lp.dp * lp.micro_batch))
    update_slots = wl.optimizer_steps * (m + lay.pp - 1)
    logprob_slots = 2 * (m_lp + lp.pp - 1)  # old log-probs and reference
    out = {"id": row["id"], "layout": f"tp{lay.tp} pp{lay.pp} dp{lay.dp} z{lay.zero_stage}",
           "terms": {k: getattr(side.train, k) for k in TERMS}, "train": side.train.total,
           "old_logprob": side.old_logprob, "reference": side.reference, "measured": measured,
           "slots": {"train": update_slots, "logprob": logprob_slots}}
    modelled = {"train": side.train.total, "logprob": side.old_logprob + side.reference}
    out["forward_rate"] = forward_rate(side.old_logprob, side.reference, measured)
    out["per_slot_ms"] = {k: (1e3 * modelled[k] / out["slots"][k],
                              1e3 * float(measured[k]) / out["slots"][k] if k in measured else None)
                          for k in modelled}
    return out


def forward_rate(old: float, reference: float, measured: dict) -> float | None:
    """Measured / modelled forward of a row's two log-prob passes where it gives them under one timer
    (`logprob`) and both are the policy's forward on the same micro-batches (NeMo-RL): the measured timer
    less the modelled reference swap (the reference pass less the old log-prob pass), over twice the
    modelled old log-prob pass. None where the row gives no such timer, no train phase or no old pass."""
    if "logprob" not in measured or "train" not in measured or old <= 0:
        return None
    swap = reference - old
    return (float(measured["logprob"]) - swap) / (2 * old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(ROOT / "benchmarks" / "data" / "extra_cases.yaml"))
    ap.add_argument("--match", default="", help="only rows whose id contains this text")
    args = ap.parse_args()
    data = yaml.safe_load(Path(args.cases).read_text())
    for row in data["cases"]:
        if args.match not in row["id"]:
            continue
        r = row_terms(row)
        if r is None:
            continue
        print(f"{r['id']}  ({r['layout']})")
        print("  update  " + "  ".join(f"{k.replace('_comm', '')} {v:.2f}" for k, v in r["terms"].items() if v)
              + f"  = {r['train']:.2f} s (measured {r['measured'].get('train', '-')})")
        print(f"  log-prob  old {r['old_logprob']:.2f} + reference {r['reference']:.2f} s"
              f" (measured {r['measured'].get('logprob', '-')})")
        if r["forward_rate"] is not None:
            at_rate = r["forward_rate"] * r["train"]
            rest = float(r["measured"]["train"]) - at_rate
            print(f"  update at the log-prob passes' measured forward rate (x{r['forward_rate']:.2f}): {at_rate:.2f} s,"
                  f" the update's own miss {rest:+.2f} s ({rest / at_rate:+.0%})")
        for k, (mod, meas) in r["per_slot_ms"].items():
            miss = f"  miss {meas - mod:+.0f} ms" if meas is not None else ""
            got = f"{meas:.0f}" if meas is not None else "-"
            print(f"  {k:8s} {r['slots'][k]:6.1f} slots  model {mod:.0f} ms/slot  measured {got}{miss}")


if __name__ == "__main__":
    main()
