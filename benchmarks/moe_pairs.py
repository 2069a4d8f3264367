"""MoE training rows of a case file and the pairs among them that isolate one stack change.

Run: python benchmarks/moe_pairs.py [--cases FILE]

Prints each MoE `train` row with the facts of its MoE stack (micro-batch, local experts, tokens one
local expert sees per micro-batch, dispatcher, CUDA graphs, token dropping), its error and the time the
model misses per MoE layer and micro-batch (`miss ms`: measured minus predicted step time over the
micro-batches one pipeline runs times the MoE layers of a stage, `moe_layers / pp`; and that over the
micro-batch's tokens, `us/tok`; rows scored on tokens/s or iteration time), then every
pair of rows on the same model, GPU, GPU count and precision whose layouts differ in at most one
field (`global_batch` and `vp` aside: they change the optimizer's amortisation and the pipeline
schedule, not the MoE block). For each pair it prints the measured and the predicted ratio of the
two rows' metric:

- `same`: the rows differ in nothing the time model reads, so the predicted ratio is ~1 by
  construction; a measured ratio far from 1 is a change of software release (container, Megatron-Core,
  Transformer Engine) that no layout term can follow.
- any other field name: the model reads that field; the two ratios compare the model's size of that
  change with the measured one (e.g. `moe_dispatcher` deepep -> hybridep is x1.137 in the model,
  constants.yaml moe_hybridep_gain).

The pairs are what a candidate mechanism has to explain together: one keyed on the layout moves
both rows of a `same` pair alike. Scoring is `rlsolve.cases.predict_train` (the same as `rlsolve
cases`), a few seconds for the extra file's MoE rows.
"""
from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from rlsolve.cases import _arch, predict_train

ROOT = Path(__file__).resolve().parents[1]
# layout fields that do not change the MoE block's time per micro-batch
IGNORED = ("global_batch", "vp")
# defaults rlsolve.cases._train_layout applies to a field a row leaves out
DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "vp": 1, "micro_batch": 1, "moe_dispatcher": "alltoall",
            "cuda_graphs": "none", "recompute": "none",
            "moe_a2a_overlap": False, "moe_token_drop": False}


@dataclass
class MoeRow:
    id: str
    model: str
    gpu: str
    gpus: int
    precision: str
    fields: dict  # the layout (defaults filled, lists as tuples) but IGNORED
    schedule: dict  # the IGNORED fields
    local_experts: int
    tokens_per_expert: float
    measured: float
    predicted: float
    error: float
    missed_s: float | None  # step time the model misses per MoE layer and micro-batch
    tokens: float  # one micro-batch's tokens per rank


def moe_rows(data: dict) -> list[MoeRow]:
    """The MoE train rows of a case file that the model scores, with their stack facts."""
    out = []
    for row in data["cases"]:
        if row.get("kind") != "train":
            continue
        arch = _arch(row)
        if not arch.is_moe:
            continue
        r = predict_train(row)
        if r.error is None:
            continue
        lay = {**DEFAULTS, **(row.get("layout") or {})}
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in lay.items() if k not in IGNORED}
        tokens = int(lay["micro_batch"]) * float(lay["seq_len"]) / int(lay["cp"])
        ep = int(lay["ep"])
        out.append(MoeRow(row["id"], row["model"]["name"], row["hardware"]["gpu"], int(row["hardware"]["gpus"]),
                          str(row.get("precision", "bf16")), fields, {k: lay.get(k) for k in IGNORED},
                          arch.experts // ep,
                          tokens * arch.experts_per_token / arch.experts * ep, r.measured, r.predicted, r.error,
                          _missed_per_layer(row, lay, r, arch.moe_layers), tokens))
    return out


def _missed_per_layer(row: dict, lay: dict, r, moe_layers: int) -> float | None:
    """Seconds of the measured step the model misses per MoE layer and micro-batch on one GPU:
    (measured - predicted step time) / (micro-batches per pipeline * moe_layers / pp). Rows scored
    on tokens/s per GPU or iteration time only (others: None)."""
    gpus, tp, pp, cp = int(row["hardware"]["gpus"]), int(lay["tp"]), int(lay["pp"]), int(lay["cp"])
    dp = int(lay.get("dp") or gpus // (tp * pp * cp))
    if "global_batch_tokens" in lay:
        return None
    gb, seq = int(lay["global_batch"]), float(lay["seq_len"])
    if r.metric == "tokens_per_s_per_gpu":
        t_meas, t_pred = gb * seq / gpus / r.measured, gb * seq / gpus / r.predicted
    elif r.metric == "iteration_s":
        t_meas, t_pred = r.measured, r.predicted
    else:
        return None
    micro = gb / (int(lay["micro_batch"]) * dp)
    return (t_meas - t_pred) / (micro * moe_layers / pp)


def one_change_pairs(rows: list[MoeRow]) -> list[tuple[str, MoeRow, MoeRow]]:
    """(changed field or 'same', row a, row b) for rows on the same model, GPU, GPU count and
    precision whose fields differ in at most one key."""
    pairs = []
    for a, b in itertools.combinations(rows, 2):
        if (a.model, a.gpu, a.gpus, a.precision) != (b.model, b.gpu, b.gpus, b.precision):
            continue
        diff = sorted(k for k in set(a.fields) | set(b.fields) if a.fields.get(k) != b.fields.get(k))
        if len(diff) <= 1:
            pairs.append((diff[0] if diff else "same", a, b))
    return pairs


def _fmt(x: float | None, scale: float, width: int) -> str:
    return f"{x * scale:+{width}.2f}" if x is not None else f"{'-':>{width}s}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=str(ROOT / "benchmarks" / "data" / "extra_cases.yaml"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = moe_rows(yaml.safe_load(Path(args.cases).read_text()))
    print(f"{'row':56s} {'mb':>2s} {'local':>5s} {'tok/exp':>7s} {'dispatcher':10s} {'graphs':14s} "
          f"{'drop':4s} {'error':>7s} {'miss ms':>7s} {'us/tok':>6s}")
    for r in sorted(rows, key=lambda r: (r.model, r.gpu, r.id)):
        f = r.fields
        print(f"{r.id:56s} {f['micro_batch']:>2d} {r.local_experts:5d} {r.tokens_per_expert:7.0f} "
              f"{f['moe_dispatcher']:10s} {f['cuda_graphs']:14s} {'yes' if f['moe_token_drop'] else 'no':4s} "
              f"{r.error:+7.1%} {_fmt(r.missed_s, 1e3, 7)} {_fmt(r.missed_s and r.missed_s / r.tokens, 1e6, 6)}")
    print()
    print(f"{'change':17s} {'row a':52s} {'row b':52s} {'a:b meas':>8s} {'a:b pred':>8s}  also")
    for change, a, b in one_change_pairs(rows):
        also = ", ".join(f"{k} {a.schedule[k]}/{b.schedule[k]}" for k in IGNORED if a.schedule[k] != b.schedule[k])
        print(f"{change:17s} {a.id:52s} {b.id:52s} {a.measured / b.measured:8.2f} {a.predicted / b.predicted:8.2f}"
              f"  {also}")
    print(f"scored {len(rows)} MoE train rows in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
