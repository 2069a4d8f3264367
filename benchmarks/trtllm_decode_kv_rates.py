"""What KV read rate do TensorRT-LLM's decode attention kernels reach in the holdout rows? Evidence for issue #15.

For every static-batch TensorRT-LLM generate row of benchmarks/data/extra_cases.yaml with 2048 output tokens (the
prefill is then a few percent of the run) and a dense model, the measured time less the model's prefill and the
model's decode without attention (weights, GEMMs, all-reduces, overheads: StepModel at context 0) is what the
attention took; the KV bytes the steps read once (StepModel's kv_tok at kv_reads = 1, summed over the growing
context) over that time is the read-once rate the kernel reached. Rows are grouped by the kernel the model says runs
(perf.generate.decode_kv_reads): MHA (one query head per KV head, masked MHA), masked MHA over GQA (re-reads each KV
head once per query head) and XQA (reads it once), and printed with the rate of all the reads the model charges (read-once x decode_kv_reads) beside the catalog's
effective HBM rate.

What it shows (after the decode GEMM size curve): the MHA rows reach 0.87-1.00 of the catalog's HBM rate (medians
per GPU), the masked-MHA GQA rows' re-reads at or above it (A100 1.60, H100 1.11, H200 1.01, L40S 3.39: h20f,
benchmarks/trtllm_kv_reread_l2.py), and the XQA rows (LLaMA-2-70B, v0.8.0 and v0.9.0) read once at 0.29-0.44 of it
(A100 0.35, H100 0.41, H200 0.44, L40S 0.29): the model reads their KV 2.3-3.5x too fast. No sourced figure of XQA's own rate was found (its v0.8.0
/ v0.9.0 kernels ship as cubins: decoderXQAImplPrecompiled.cpp launches one 256-thread CTA per (KV head, sequence),
grid {1, num_kv_heads, batch}, multi-block mode off by default): a lead, not a model rule.
Run: python benchmarks/trtllm_decode_kv_rates.py  (CPU, seconds).
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rlsolve.cases as C  # noqa: E402
from rlsolve.perf.generate import StepModel, decode_kv_reads, prefill_time  # noqa: E402


def main() -> None:
    rows = yaml.safe_load((ROOT / "benchmarks/data/extra_cases.yaml").read_text())["cases"]
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    print(f"{'row':50s} {'kernel':10s} {'attn share':>10s} {'read-once TB/s':>14s} {'all reads TB/s':>13s} "
          f"{'/ catalog HBM':>13s}")
    for row in rows:
        lay = row.get("layout") or {}
        if (row.get("kind") != "generate" or lay.get("engine") != "tensorrt-llm" or lay.get("batch") in (None, "auto")
                or float(lay.get("output_len", 0)) < 2048):
            continue
        arch, pool, dev, glay, wb, _ = C._gen_setup(row)
        if arch.is_moe:
            continue
        meas = row["measured"]
        gpus = glay.tp * glay.pp
        b, inp, out = float(lay["batch"]), float(lay["input_len"]), float(lay["output_len"])
        tok_s = meas.get("output_tokens_per_s_per_gpu")
        total = b * out / tok_s / gpus if tok_s else b * out / meas["output_tokens_per_s"]
        sm = pool.gpu.sm_count.value if pool.gpu.sm_count is not None else None
        reads = decode_kv_reads(arch, glay, b, sm, "tensorrt-llm", str(lay["engine_version"]))
        ratio = arch.heads / max(arch.n_kv_heads, glay.tp)
        kernel = "MHA" if ratio <= 1 else ("XQA" if reads == 1.0 else "masked GQA")
        step = StepModel(arch, dev, glay, wb, wb)
        steps = np.linspace(0, out, 65)
        mid = (steps[:-1] + steps[1:]) / 2
        kv = float(np.sum(np.diff(steps) * b * (inp + mid) * step.kv_tok))
        attn = total - prefill_time(arch, dev, glay, b * inp, inp / 2) - out * step.scalar_step_time(b, 0.0)
        rate = kv / attn
        groups[(kernel, pool.gpu.name)].append(reads * rate / dev.hbm_bytes_per_s)
        print(f"{row['id']:50s} {kernel:10s} {attn / total:10.2f} {rate / 1e12:14.2f} {reads * rate / 1e12:13.2f} "
              f"{reads * rate / dev.hbm_bytes_per_s:13.2f}")
    print("\nmedian rate of all the reads the model charges (x decode_kv_reads) / catalog HBM rate, by kernel and GPU:")
    for (kernel, gpu), v in sorted(groups.items()):
        print(f"  {kernel:10s} {gpu:16s} {len(v):3d} rows  {statistics.median(v):5.2f}  ({min(v):.2f} .. {max(v):.2f})")


if __name__ == "__main__":
    main()
