"""What one torch.cuda.empty_cache() costs a training worker: the call, and the re-growth of the
working set it hands back (a device check, issue #15, phase train).

Run (one GPU): python benchmarks/empty_cache_cost.py [--gib 40] [--reps 3]
Prints, for the caching allocator with and without expandable segments (each in its own process:
PYTORCH_CUDA_ALLOC_CONF is read when CUDA starts): the seconds of empty_cache() with `--gib` GiB
cached and free, the seconds to allocate that working set again afterwards (the pages are mapped
anew), and the same allocation served from the cache (no empty_cache), per call and per GiB.

Why: NeMo-RL v0.3.0's Megatron worker calls torch.cuda.empty_cache() once per global batch of a
training pass where megatron_cfg.empty_unused_memory_level >= 1 (nemo_rl/models/policy/
megatron_policy_worker.py lines 866-867, after forward_backward_func), and turns on expandable
segments on Hopper (line 373, nemo_rl/models/policy/utils.py configure_expandable_segments).
grpo_math_70B_megatron.yaml and grpo_math_qwen30ba3b_megatron.yaml set the level to 1 (4 calls per
training pass: 2048 samples, global batch 512); grpo_math_8B_megatron.yaml sets 0. Those two are the
rows whose training phase the model misses most (-37..-59%), the 8B rows -14..-17%. The Qwen3-30B-A3B
config sets PYTORCH_CUDA_ALLOC_CONF expandable_segments:False (its env_vars), so its calls are the
other kind; configure_expandable_segments sets the variable after torch.cuda.get_device_properties has
started CUDA (whether the allocator still reads it then is not checked here). Published costs
disagree by an order of magnitude: Megatron-LM PR #5170 (eight-node GB200, 30B model): ~1.3 s per
empty_cache and the next allocator-heavy step 1.6 s instead of ~50 ms; torch_memory_saver#111: a few
ms per GiB (L20). This check gives the H100/H200 figure the model would need.

The working set is tensors of the sizes a Megatron layer's activations take for a 4096-token
micro-batch of a 70B model at TP4 without sequence parallelism (hidden 8192, MLP 28672/4 x 2, q/k/v
10240/4; bf16), repeated to `--gib`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
# bytes of the activation tensors one layer keeps for a 4096-token micro-batch (bf16): the norm
# input and output (4096 x 8192), q/k/v (4096 x 10240 / 4), the MLP's fc1 output (4096 x 2 x 28672 / 4)
# and its activation (4096 x 28672 / 4)
LAYER_TENSORS = (4096 * 8192 * 2, 4096 * 8192 * 2, 4096 * 10240 // 4 * 2, 4096 * 2 * 28672 // 4 * 2,
                 4096 * 28672 // 4 * 2)


def plan(gib: float) -> list[int]:
    """Tensor sizes (bytes) of the working set: whole layers' LAYER_TENSORS until `gib` GiB."""
    return list(LAYER_TENSORS) * int(gib * GIB // sum(LAYER_TENSORS))


def measure(gib: float, reps: int) -> dict:
    import torch

    dev = torch.device("cuda")
    sizes = plan(gib)

    def grow() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        held = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        del held
        return dt

    grow()  # first touch: the allocator reserves the working set
    cached, empty, regrow = [], [], []
    for _ in range(reps):
        cached.append(grow())  # served from the cache
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda.empty_cache()
        empty.append(time.perf_counter() - t0)
        regrow.append(grow())  # mapped anew after empty_cache
    held_gib = sum(sizes) / GIB
    med = {k: statistics.median(v) for k, v in (("cached_s", cached), ("empty_cache_s", empty),
                                                  ("regrow_s", regrow))}
    return {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "tensors": len(sizes),
            "gib": round(held_gib, 2), **{k: round(v, 4) for k, v in med.items()},
            "per_gib_ms": round(1e3 * (med["empty_cache_s"] + med["regrow_s"] - med["cached_s"]) / held_gib, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=40.0, help="working set in GiB (default 40)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.gib, args.reps)))
        return
    for conf in ("expandable_segments:True", "expandable_segments:False"):
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
        out = subprocess.run([sys.executable, __file__, "--child", "--gib", str(args.gib), "--reps", str(args.reps)],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{conf}: failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{conf}: {r['device']} torch {r['torch']}, {r['gib']} GiB in {r['tensors']} tensors: "
              f"empty_cache {r['empty_cache_s']:.3f} s, re-growth {r['regrow_s']:.3f} s "
              f"(from the cache {r['cached_s']:.3f} s): {r['per_gib_ms']:.1f} ms per GiB")


if __name__ == "__main__":
    main()
