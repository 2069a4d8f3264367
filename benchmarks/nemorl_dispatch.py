"""Bytes NeMo-RL's single controller sends to and gathers from the policy workers in each log-prob and
training call, beside the model's miss on the measured phases (issue #15: a lead, not modelled).

Run: python benchmarks/nemorl_dispatch.py [--cases FILE]

Before v0.7.0, RayWorkerGroup.run_all_workers_sharded_data (nemo_rl/distributed/worker_groups.py, v0.3.0
lines 822-866) calls each worker's method with its data-parallel shard as a by-value argument, so a shard
replicated over the tensor-, pipeline- and context-parallel axes is serialized and stored once per worker:
Ray puts every by-value argument over 100 KB into the object store per call and does not deduplicate
(docs.ray.io ray-core/patterns/pass-large-arg-by-value). NeMo-RL PR #1944 (ad0f56d06, first in v0.7.0)
puts each shard once ("reduce the cost of repeated serialization when we send same arguments to multiple
workers"). MultiWorkerFuture.get_results ray.get()s every worker's result before keeping one per data-parallel
group (v0.3.0 line 99; the same ray.get(object_refs) at v0.4.0 line 102, v0.6.0 103, v0.7.0 104), so a
log-prob call also brings every replica's [samples, L] float32 log-probs back to the driver (NeMo-RL
PR #3954, after v0.7.0, describes and fixes this).

Per sample the data carry, padded to the batch's longest sequence L (grpo.py v0.3.0 lines 626-645,
batched_message_log_to_flat_message): input_ids and token_mask int64, advantages and generation_logprobs
float32 = 24 bytes per position in the log-prob calls, and prev_logprobs and reference_policy_logprobs
float32 as well in the training call (32). L is at most max_seq_len; the rows do not give the longest
sequence, so the figures printed are upper bounds at L = max_seq_len.

No rate turns these bytes into seconds here (none is sourced): the script prints the bytes and the
seconds the model misses, for comparison across rows.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from rlsolve.frameworks.runtime import release

ROOT = Path(__file__).resolve().parents[1]
LOGPROB_BYTES = 8 + 8 + 4 + 4          # input_ids, token_mask (int64); advantages, generation_logprobs (fp32)
TRAIN_BYTES = LOGPROB_BYTES + 4 + 4    # + prev_logprobs, reference_policy_logprobs (fp32)
RESULT_BYTES = 4                       # the log-probs each worker returns (fp32)
PUT_ONCE_FROM = (0, 7, 0)              # NeMo-RL PR #1944: one put per shard from v0.7.0


def dispatch_bytes(samples: int, seq_len: int, dp: int, replicas: int, version: str) -> dict[str, float]:
    """Bytes the driver serializes per call (`out_logprob`, `out_train`: every worker's copy of its shard
    before v0.7.0, one per shard from it) and the log-probs it gathers per log-prob call (`in_logprob`:
    every replica's), for `samples` sequences padded to `seq_len` over `dp` data-parallel shards each
    replicated on `replicas` workers (tp x pp x cp)."""
    copies = dp * (1 if release(version) >= PUT_ONCE_FROM else replicas)
    per_shard = samples / dp * seq_len
    return {"out_logprob": copies * per_shard * LOGPROB_BYTES, "out_train": copies * per_shard * TRAIN_BYTES,
            "in_logprob": dp * replicas * per_shard * RESULT_BYTES, "workers": dp * replicas}


def row_dispatch(row: dict) -> dict | None:
    """`dispatch_bytes` of a NeMo-RL rl_step row on its stated layout, or None for other rows."""
    lay = row.get("layout") or {}
    if row.get("kind") != "rl_step" or lay.get("framework") != "nemo-rl":
        return None
    t = lay.get("training") or {}
    replicas = int(t.get("tp", 1)) * int(t.get("pp", 1)) * int(t.get("cp", 1))
    gpus = int(row["hardware"]["gpus"])
    if lay.get("mode", "colocated") != "colocated" or gpus % replicas:
        return None  # the policy's GPU count is not the row's: left out
    return dispatch_bytes(int(lay["samples_per_step"]), int(lay["max_seq_len"]), gpus // replicas, replicas,
                          str(lay.get("framework_version", "0.0.0")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(ROOT / "benchmarks" / "data" / "extra_cases.yaml"))
    args = ap.parse_args()
    from rl_train_terms import row_terms  # (its neighbour in benchmarks/, on sys.path when this runs as a script)
    for row in yaml.safe_load(Path(args.cases).read_text())["cases"]:
        d = row_dispatch(row)
        if d is None:
            continue
        r = row_terms(row)
        miss = ""
        if r is not None and ("logprob" in r["measured"] or "train" in r["measured"]):
            m = r["measured"]
            lp = float(m["logprob"]) - r["old_logprob"] - r["reference"] if "logprob" in m else None
            tr = float(m["train"]) - r["train"] if "train" in m else None
            miss = "  missed:" + (f" logprob {lp:+.1f} s" if lp is not None else "") + (
                f" train {tr:+.1f} s" if tr is not None else "")
        print(f"{row['id'][:58]:58s} {row['layout'].get('framework_version')} {d['workers']:4d} workers: per log-prob call"
              f" {d['out_logprob'] / 1e9:5.2f} GB out, {d['in_logprob'] / 1e9:5.2f} GB in; train call"
              f" {d['out_train'] / 1e9:5.2f} GB out{miss}")


if __name__ == "__main__":
    main()
