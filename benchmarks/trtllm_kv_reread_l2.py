"""Would TensorRT-LLM's masked-MHA KV re-reads run at L2 bandwidth? A what-if on the holdout rows (issue #15).

TensorRT-LLM's generation-phase masked MHA kernel (no XQA) runs one thread block per (query head, sequence) with
the query heads of a KV head consecutive in blockIdx.x (grid {num_heads, batch}, hi_kv = hi / qhead_per_kv:
runtime.yaml trtllm_decode_attention), so the model charges each KV head heads / max(kv_heads, tp) reads a step
at HBM bandwidth (perf.generate.decode_kv_reads). Those blocks run in the same wave and stream the same positions,
so the re-reads might come from L2. This script scores the generate rows of benchmarks/data/extra_cases.yaml
under two L2 rules, without touching the model: it hands predict_generate an effective read count in place of
decode_kv_reads' r (StepModel charges reads x KV bytes / HBM; hbm is the catalog's effective HBM rate):

  add:  first read from HBM, the r - 1 re-reads from L2:       kv/hbm + (r-1) kv/L2  ->  1 + (r-1) hbm/L2
  max:  two-level roofline, HBM once, every read through L2:   max(kv/hbm, r kv/L2)  ->  max(1, r hbm/L2)

and prints, per moved row, the error now and under each rule, with the all-reads throughput the measured time
implies (r x KV bytes / the decode attention time: measured time - prefill - the model's non-attention decode)
and its fraction of the L2 bandwidth. Last, cross_chip() sets the measured throughput ratio of one table row
measured on two GPUs (H200/H100, L40S/H100) against the model's, for re-read rows and read-once rows: the
re-read rows' ratios follow the measured L2 bandwidth (1.0x, 0.53x), not the HBM (1.43x, 0.26x).

L2 read bandwidth, measured (te42kyfo/gpu-benches gpu-l2-cache/main.cu: 1024-thread blocks each sum a 512 kB
slice; the blocks of a run share its slices, so a working set within L2 is read from L2 over and over):
plateau inside the L2 capacity of the result files at commit 3088b3337998d1d9fff53c7af665f587af83a178.
The GPU catalog holds none of these: this script is the only reader, and the rule it tests is refuted.
Run: python benchmarks/trtllm_kv_reread_l2.py  (CPU, seconds).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rlsolve.cases as C  # noqa: E402
from rlsolve.perf.generate import StepModel, decode_kv_reads, kv_bytes_per_token_per_gpu, prefill_time  # noqa: E402

L2_BYTES_PER_S = {
    # gpu-l2-cache/a100_80.txt: 5264-5482 GB/s for working sets of 2-25 MB (one 20 MB L2 half), 1.73 TB/s DRAM
    "A100-SXM-80GB": 5.4e12,
    # gpu-l2-cache/h200.txt: 9477-10084 GB/s for 10-40 MB. The H100 SXM is the same GH100 (132 SMs, 50 MB L2,
    # 1980 MHz boost); the repo's H100 file is the PCIe part (114 SMs, 6.8-6.9 TB/s at 7-33 MB), so H100 SXM
    # takes the H200 figure
    "H200-SXM-141GB": 9.8e12,
    "H100-SXM-80GB": 9.8e12,
    # gpu-l2-cache/l40.txt: 5104-5332 GB/s for 1.5-91 MB. L40 and L40S are the same AD102 (142 SMs, 96 MB L2)
    "L40S": 5.2e12,
}


def _rows():
    data = yaml.safe_load((ROOT / "benchmarks/data/extra_cases.yaml").read_text())
    return [r for r in data["cases"] if r.get("kind") == "generate"]


def _reads(row: dict) -> float:
    arch, pool, _dev, lay, _wb, lay_in = C._gen_setup(row)
    if lay_in.get("engine") != "tensorrt-llm" or "engine_version" not in lay_in or lay_in.get("batch") == "auto":
        return 1.0
    sm = pool.gpu.sm_count.value if pool.gpu.sm_count is not None else None
    return decode_kv_reads(arch, lay, float(lay_in.get("batch", 1)), sm, "tensorrt-llm", str(lay_in["engine_version"]))


def _implied_all_reads(row: dict, r: float) -> float | None:
    """r x KV bytes over the measured decode attention time (dense static-batch rows scored on tokens/s; None for
    MoE rows, whose expert GEMMs predict_generate charges beyond this plain StepModel)."""
    arch, _pool, dev, lay, wb, lay_in = C._gen_setup(row)
    meas = row.get("measured") or {}
    if arch.is_moe:
        return None
    b, inp, out = float(lay_in["batch"]), float(lay_in["input_len"]), float(lay_in["output_len"])
    if "output_tokens_per_s" in meas:
        t_meas = b * out / meas["output_tokens_per_s"]
    elif "output_tokens_per_s_per_gpu" in meas:
        t_meas = b * out / (meas["output_tokens_per_s_per_gpu"] * lay.tp * lay.pp)
    else:
        return None
    steps = np.linspace(0, out, 65)
    mid, dt = (steps[:-1] + steps[1:]) / 2, np.diff(steps)
    step = StepModel(arch, dev, lay, wb, wb, kv_reads=r)
    decode = float(np.sum(dt * step.step_time(np.full(64, b), inp + mid)))
    kv = float(np.sum(dt * b * (inp + mid))) * kv_bytes_per_token_per_gpu(arch, lay, wb)
    attn = t_meas - prefill_time(arch, dev, lay, b * inp, inp / 2, None) - (decode - r * kv / dev.hbm_bytes_per_s)
    return r * kv / attn if attn > 0 else None


def _score(row: dict, reads: float | None):
    if reads is None:
        return C.predict_generate(row).error
    real = C.decode_kv_reads
    C.decode_kv_reads = lambda *a, **k: reads
    try:
        return C.predict_generate(row).error
    finally:
        C.decode_kv_reads = real


def _pair_key(row: dict) -> tuple | None:
    """Rows of one table measured on another GPU: same release, model, TP, batch, input and output lengths."""
    lay = row.get("layout") or {}
    if lay.get("engine") != "tensorrt-llm" or "engine_version" not in lay:
        return None
    model = row["id"].split("-", 2)[2].split("-tp")[0]
    return (str(lay["engine_version"]), model, lay.get("tp"), lay.get("batch"), lay.get("input_len"),
            lay.get("output_len"))


def cross_chip() -> None:
    """The measured throughput ratio between two GPUs against the model's, for rows whose decode re-reads KV
    (masked MHA, r > 1) and rows that read it once. H200/H100: the same GH100 die, 1.43x the HBM bandwidth
    (4.8 / 3.35 TB/s), the same L2 (this file's table). L40S/H100: 0.26x the HBM (0.864 / 3.35), 0.53x the
    measured L2 read bandwidth (5.2 / 9.8). A ratio that follows the L2, not the HBM, marks a step bound on
    chip."""
    by_key: dict[tuple, dict[str, tuple]] = {}
    for row in _rows():
        key = _pair_key(row)
        try:
            res = C.predict_generate(row) if key else None
        except (ValueError, KeyError):
            continue
        if res is None or res.error is None:
            continue
        by_key.setdefault(key, {})[C._pool(row).gpu.name] = (row, res)
    for num, den in (("H200-SXM-141GB", "H100-SXM-80GB"), ("L40S", "H100-SXM-80GB")):
        groups: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for pair in by_key.values():
            if num in pair and den in pair:
                (row, a), (_, b) = pair[num], pair[den]
                groups[_reads(row) > 1].append((a.measured / b.measured, a.predicted / b.predicted))
        for reread, ratios in groups.items():
            if ratios:
                print(f"{num}/{den} {'re-read' if reread else 'one read'} rows {len(ratios):2d}: measured ratio "
                      f"median {statistics.median(m for m, _ in ratios):.3f} (range {min(m for m, _ in ratios):.3f}-"
                      f"{max(m for m, _ in ratios):.3f}), model {statistics.median(p for _, p in ratios):.3f}")


def main() -> None:
    cols = {"now": [], "add": [], "max": []}
    print(f"{'row':50s} {'r':>4s} {'now':>7s} {'add':>7s} {'max':>7s}  all-reads TB/s (L2 measured)")
    for row in _rows():
        try:
            base = _score(row, None)
        except (ValueError, KeyError):
            continue
        if base is None:
            continue
        r, l2 = _reads(row), L2_BYTES_PER_S.get(C._pool(row).gpu.name)
        add = mx = base
        if r > 1 and l2:
            hbm = C._gen_setup(row)[2].hbm_bytes_per_s
            add, mx = _score(row, 1 + (r - 1) * hbm / l2), _score(row, max(1.0, r * hbm / l2))
            imp = _implied_all_reads(row, r)
            print(f"{row['id']:50s} {r:4.0f} {100 * base:+7.1f} {100 * add:+7.1f} {100 * mx:+7.1f}  "
                  f"{'-' if imp is None else f'{imp / 1e12:.2f}':>5s} ({l2 / 1e12:.1f}"
                  f"{'' if imp is None else f', {imp / l2:.2f} of it'})")
        for k, e in (("now", base), ("add", add), ("max", mx)):
            cols[k].append(e)
    for k, errs in cols.items():
        off = sum(e >= 1.0 or e <= -0.5 for e in errs)
        print(f"{k}: generate rows {len(errs)}, median |error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
              f"max {100 * max(abs(e) for e in errs):.1f}%, off by 2x {off}")
    cross_chip()


if __name__ == "__main__":
    main()
