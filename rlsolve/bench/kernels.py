"""The microbenchmarks: each runs one kind of kernel at given shapes and returns seconds.
The all-reduce's worker processes run `_ar_worker` from here."""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any

from rlsolve.bench.timing import load_torch, median_time

GIB = 1 << 30


def gemm(dev: Any, dtype: Any, m: int, k: int, n: int, *, reps: int) -> float:
    torch = load_torch()
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    c = torch.empty(m, n, device=dev, dtype=dtype)
    return median_time(lambda: torch.matmul(a, b, out=c), dev, reps=reps)


def attention(dev: Any, dtype: Any, b: int, h: int, s: int, d: int, *, reps: int) -> float:
    """Causal fused attention forward + backward, as training runs it (SDPA picks the
    flash/efficient kernel on a GPU)."""
    torch = load_torch()
    F = torch.nn.functional
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d, device=dev, dtype=dtype)

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    return median_time(step, dev, reps=reps)


def decode(dev: Any, dtype: Any, *, batch: int, hidden: int, cols: int, kv_heads: int, group: int, d: int,
           ctx: int, layers: int, reps: int) -> tuple[float, bool]:
    """One decode step over `layers` distinct layers: a (batch x hidden) @ (hidden x cols)
    weight GEMM (the layer's weights, read once) then grouped-query attention of one new
    token per sequence over `ctx` cached tokens (K and V read once, no GQA expansion).
    Distinct per-layer buffers keep the working set out of L2, as in a real step.
    Returns (seconds, whether it ran as a CUDA graph)."""
    torch = load_torch()
    x = torch.randn(batch, hidden, device=dev, dtype=dtype)
    q = torch.randn(batch, kv_heads, group, d, device=dev, dtype=dtype)
    ws = [torch.randn(hidden, cols, device=dev, dtype=dtype) for _ in range(layers)]
    ks = [torch.randn(batch, kv_heads, ctx, d, device=dev, dtype=dtype) for _ in range(layers)]
    vs = [torch.randn(batch, kv_heads, ctx, d, device=dev, dtype=dtype) for _ in range(layers)]
    scale = 1.0 / math.sqrt(d)

    def step() -> None:
        for w, kc, vc in zip(ws, ks, vs):
            torch.matmul(x, w)
            p = torch.softmax(torch.matmul(q, kc.transpose(-1, -2)) * scale, dim=-1)
            torch.matmul(p, vc)

    run, graphed = _as_graph(step, dev)
    return median_time(run, dev, reps=reps), graphed


def _as_graph(fn: Any, dev: Any) -> tuple[Any, bool]:
    """On a GPU, `fn` captured as a CUDA graph, as engines run decode: eager launches of
    small per-layer kernels leave the GPU idle between them and would read as low HBM
    bandwidth. Falls back to eager (and says so) if capture fails."""
    if dev.type != "cuda":
        return fn, False
    torch = load_torch()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream, as the CUDA-graph docs ask
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError:
        return fn, False
    return graph.replay, True


def launch(dev: Any, *, reps: int) -> float:
    """Per-kernel cost of back-to-back launches of a one-element kernel."""
    torch = load_torch()
    x = torch.zeros(1, device=dev)
    return median_time(lambda: x.add_(1.0), dev, reps=reps, inner=200)


def allocate(dev: Any, nbytes: float) -> dict[str, float | bool]:
    """Allocate `nbytes` in 1 GiB blocks (many tensors, as a job holds them) and report
    whether it fits; everything is freed again."""
    torch = load_torch()
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # hand back what earlier items cached, or it counts against the plan
    blocks, got = [], 0
    fits = True
    try:
        while got < nbytes:
            n = int(min(GIB, nbytes - got))
            blocks.append(torch.empty(n, dtype=torch.uint8, device=dev))
            got += n
    except (torch.cuda.OutOfMemoryError, RuntimeError):  # the CPU reports OOM as RuntimeError
        fits = False
    out: dict[str, float | bool] = {"allocated_gb": round(got / 1e9, 2), "fits": fits}
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        out.update(free_after_gb=round(free / 1e9, 2), device_gb=round(total / 1e9, 2))
    del blocks
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


# --- all-reduce over several processes ----------------------------------------------------

def all_reduce(device_type: str, nproc: int, messages: list[tuple[int, int]], reps: int) -> list[float]:
    """Median seconds of an all-reduce of each (bytes, ranks) message, ranks <= nproc.

    Starts `nproc` processes (NCCL on GPUs, one GPU each; gloo on the CPU) that meet
    through a file in a private temporary folder (no port to pick or to collide on). GPU
    workers are spawned (CUDA is already initialised here and cannot be forked); CPU
    workers are forked, because spawning re-imports torch in each (8 s on two cores)."""
    torch = load_torch()
    method = "spawn" if device_type == "cuda" else "fork"
    with tempfile.TemporaryDirectory(prefix="rlsolve-ar-") as tmp:
        torch.multiprocessing.start_processes(_ar_worker, args=(nproc, device_type, messages, reps, tmp),
                                              nprocs=nproc, join=True, start_method=method)
        with open(os.path.join(tmp, "result.json")) as f:
            return json.load(f)


def _ar_worker(rank: int, nproc: int, device_type: str, messages: list[tuple[int, int]], reps: int,
               tmp: str) -> None:
    torch = load_torch()
    dist = torch.distributed
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(1)  # nproc workers share the host's cores
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                            init_method=f"file://{os.path.join(tmp, 'rendezvous')}", rank=rank, world_size=nproc)
    try:
        results, groups = [], {nproc: None}  # None: the default group of all ranks
        for nbytes, ranks in messages:
            if ranks not in groups:  # a collective call (every rank makes it) and a slow one: once per size
                groups[ranks] = dist.new_group(list(range(ranks)))
            group = groups[ranks]
            if rank < ranks:
                # bf16 gradients on GPUs; float32 on gloo, whose half-precision reductions are slow
                dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
                buf = torch.empty(max(1, nbytes // dtype.itemsize), dtype=dtype, device=dev)
                results.append(median_time(lambda: dist.all_reduce(buf, group=group), dev, reps=reps))
            dist.barrier()
        if rank == 0:
            with open(os.path.join(tmp, "result.json"), "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()
