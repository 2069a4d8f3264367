"""What to measure (from a plan, or a fixed calibration set), what the model assumed for the
same work, and the profile the measurements imply (SPEC section 8).

Every item is run at the plan's per-GPU shape, shrunk only to bound time and memory (on the
CPU, to test-mode size); the assumed time is the model's for the shape actually run, so the
measured/assumed ratio compares like with like."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from rlsolve.bench import kernels
from rlsolve.bench.timing import device_info, load_torch, pick_device
from rlsolve.errors import SpecError
from rlsolve.hardware_db import GPU, find_gpu, list_gpus
from rlsolve.perf.hw import GB, Device, constants
from rlsolve.perf.train import FA_BWD_OVER_FWD

TOLERANCE = 0.10  # re-scored step within 10% of the plan's: validated (repeat runs on one GPU vary by a few %)

# Work per item: GPU budgets keep `validate` near a minute on one H100. On the CPU every
# length is first divided by `scale` (so the items keep their relative sizes and the GEMM
# size curve can still be fitted), then capped so test mode takes about a second.
BUDGET = {
    "cuda": {"scale": 1, "gemm": 1e13, "attention": 5e12, "decode": 4 * 2**30, "allreduce": 2**30, "reps": 10},
    "cpu": {"scale": 16, "gemm": 1e8, "attention": 4e6, "decode": 4e6, "allreduce": 4e6, "reps": 5},
}
SCALED = {"gemm": ("m", "k", "n"), "attention": ("s", "d"), "decode": ("hidden", "cols", "ctx", "d")}
CPU_ALLOC_BYTES = 64e6  # test mode allocates this much, not the plan's peak, on the host


@dataclass
class Item:
    name: str
    kind: str                    # gemm | attention | decode | launch | allreduce
    key: str                     # the profile key it informs
    shape: dict[str, int]        # the plan's per-GPU shape
    run: dict[str, int] = field(default_factory=dict)  # the shape run (after shrinking)
    seconds: float | None = None
    assumed: float | None = None


# --- shapes -------------------------------------------------------------------------------

def shrink(shape: dict[str, int], cost: Callable[[dict], float], budget: float, first: str | None = None
           ) -> dict[str, int]:
    """Halve `first` (e.g. the layer count) and then the largest dimension until the work
    fits the budget: keeps the small dimensions (batch, heads) as the plan has them."""
    s = dict(shape)
    while cost(s) > budget:
        if first and s[first] > 1:
            k = first
        else:
            k = max((k for k in s if k != first), key=lambda k: s[k])
            if s[k] <= 1:
                break
        s[k] = max(1, s[k] // 2)
    return s


def gemm_flops(s: dict) -> float:
    return 2.0 * s["m"] * s["k"] * s["n"]


def attn_fwd_flops(s: dict) -> float:
    return 2.0 * s["b"] * s["h"] * s["s"] ** 2 * s["d"]  # causal: half of QK^T and PV's 4bhs^2d


def decode_bytes(s: dict, eb: float) -> tuple[float, float]:
    """(weight bytes, KV bytes) one decode step reads over its layers."""
    return (s["hidden"] * s["cols"] * eb * s["layers"],
            2.0 * s["batch"] * s["kv_heads"] * s["ctx"] * s["d"] * eb * s["layers"])


def decode_time(s: dict, eb: float, hbm: float, gemm_rate: float, attn_rate: float, gemm_fill_s: float) -> float:
    """The model's decode step (perf/generate.py StepModel) for this work: weight GEMMs =
    max(bytes / HBM, FLOPs / GEMM rate + one fill time t0 per GEMM: the kernel runs one a layer),
    then attention = max(KV bytes / HBM, FLOPs / rate)."""
    wb, kvb = decode_bytes(s, eb)
    wf = 2.0 * s["batch"] * s["hidden"] * s["cols"] * s["layers"]
    af = 4.0 * s["batch"] * s["kv_heads"] * s["group"] * s["ctx"] * s["d"] * s["layers"]
    return max(wb / hbm, wf / gemm_rate + s["layers"] * gemm_fill_s) + max(kvb / hbm, af / attn_rate)


def plan_items(problem: Any, plan: Any) -> list[Item]:
    """The per-GPU shapes of the plan: training and prefill GEMMs (the smallest and the
    largest of a layer), training attention, the decode step, launch cost, all-reduces."""
    from rlsolve.perf.generate import GenLayout, kv_bytes_per_token_per_gpu
    from rlsolve.perf.train import params_per_gpu
    a, rl = problem.policy, problem.spec.rl
    t, g = plan.parallelism.training, plan.parallelism.generation
    h, mats = a.hidden, 3 if a.activation == "swiglu" else 2
    seq = rl.prompt_len + rl.response_len.mean_tokens
    tokens = max(1, int(t.micro_batch * seq / t.cp))
    chunk = max(1, int(min(constants()["prefill_chunk_tokens"], rl.prompts_per_step * rl.prompt_len / g.dp)))

    def mlp(tok: int, ep: int) -> tuple[int, int]:  # (tokens, width) of one (expert) MLP
        if a.is_moe:
            return max(1, int(tok * a.experts_per_token / a.experts * ep)), a.d_moe_ffn
        return tok, a.d_ffn

    items = []
    for phase, tp, tok, ep in (("training", t.tp, tokens, t.ep), ("prefill", g.tp, chunk, g.ep)):
        mt, w = mlp(tok, ep)
        items.append(Item(f"{phase} GEMM attention-out", "gemm", "gemm_fraction",
                          {"m": tok, "k": max(1, a.v_width // tp), "n": h}))
        items.append(Item(f"{phase} GEMM MLP-up", "gemm", "gemm_fraction",
                          {"m": mt, "k": h, "n": max(1, w * (mats - 1) // tp)}))
    items.append(Item("training attention fwd+bwd", "attention", "attention_fraction",
                      {"b": t.micro_batch, "h": max(1, a.heads // t.tp), "s": int(seq), "d": a.q_width // a.heads}))
    # decode: the running batch is what the KV budget holds, capped by the requests and max_num_seqs
    gl = GenLayout(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep)
    wb = 1.0 if problem.spec.model.precision == "fp8" else 2.0
    kv_gb = plan.optimization.kv_cache_gb or plan.memory_gb_per_gpu.generation.kv_cache
    fit = kv_gb * GB / kv_bytes_per_token_per_gpu(a, gl, wb) / (rl.prompt_len + rl.response_len.mean_tokens)
    batch = max(1, int(min(rl.samples / g.dp, plan.optimization.max_num_seqs or math.inf, fit)))
    if a.is_mla:  # one latent "head" per token; K and V halves stand for its bytes
        kvh, d = 1, max(1, (a.kv_lora_rank + a.qk_rope_head_dim) // 2)
    else:
        kvh, d = max(1, max(a.n_kv_heads, g.tp) // g.tp), a.d_head
    layer_params = (a.non_expert_params - a.embedding_params) / a.layers / g.tp
    items.append(Item("decode step", "decode", "hbm_fraction", {
        "batch": batch, "hidden": h, "cols": max(1, int(layer_params / h)), "kv_heads": kvh,
        "group": max(1, a.heads // g.tp // kvh), "d": d, "ctx": int(rl.prompt_len + rl.response_len.mean_tokens / 2),
        "layers": math.ceil(a.layers / g.pp)}))
    items.append(Item("kernel launch", "launch", "kernel_launch_us", {}))
    dense, _ = params_per_gpu(a, t.tp, t.pp, t.ep)
    for name, nbytes, n in (("training TP all-reduce", tokens * h * 2, t.tp),
                            ("decode TP all-reduce", batch * h * 2, g.tp),
                            ("training DP gradients", int(2 * dense), t.dp * t.cp),
                            ("bandwidth probe 256 MB", 256 << 20, 8)):
        if n < 2:  # this plan has no such group
            continue
        items.append(Item(name, "allreduce", "nvlink_busbw_fraction", {"bytes": int(nbytes), "ranks": n}))
    return items


def calibration_items() -> list[Item]:
    """Fixed shapes for `calibrate`: GEMMs from below to far above the half-efficiency size
    (so the size curve can be fitted), a Llama-8B-like decode step, attention, launch."""
    items = [Item(f"GEMM {m}x{k}x{n}", "gemm", "gemm_fraction", {"m": m, "k": k, "n": n})
             for m, k, n in ((256, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                             (8192, 8192, 8192))]
    items.append(Item("attention fwd+bwd", "attention", "attention_fraction", {"b": 1, "h": 32, "s": 4096, "d": 128}))
    items.append(Item("decode step", "decode", "hbm_fraction", {"batch": 64, "hidden": 4096, "cols": 53248,
                                                               "kv_heads": 8, "group": 4, "d": 128, "ctx": 2048,
                                                               "layers": 32}))
    items.append(Item("kernel launch", "launch", "kernel_launch_us", {}))
    items.append(Item("bandwidth probe 256 MB", "allreduce", "nvlink_busbw_fraction",
                      {"bytes": 256 << 20, "ranks": 8}))
    return items


# --- measuring ----------------------------------------------------------------------------

def measure(items: list[Item], dev: Any, nproc: int) -> list[str]:
    """Fill each item's run shape and seconds; return notes on what was skipped."""
    torch = load_torch()
    b = BUDGET[dev.type]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32  # CPU bf16 GEMMs are emulated: slow
    eb = 2.0 if dev.type == "cuda" else 4.0
    reps, notes = b["reps"], []
    messages = []
    for it in items:
        s = {k: max(1, v // b["scale"]) if k in SCALED.get(it.kind, ()) else v for k, v in it.shape.items()}
        if it.kind == "gemm":
            it.run = shrink(s, lambda r: r["m"] * r["k"] * r["n"], b["gemm"])
            it.seconds = kernels.gemm(dev, dtype, it.run["m"], it.run["k"], it.run["n"], reps=reps)
        elif it.kind == "attention":
            it.run = shrink(s, lambda r: r["b"] * r["h"] * r["s"] ** 2 * r["d"], b["attention"])
            it.seconds = kernels.attention(dev, dtype, it.run["b"], it.run["h"], it.run["s"], it.run["d"], reps=reps)
        elif it.kind == "decode":
            it.run = shrink(s, lambda r: sum(decode_bytes(r, eb)), b["decode"], first="layers")
            it.seconds, graphed = kernels.decode(dev, dtype, **it.run, reps=reps)
            if dev.type == "cuda" and not graphed:
                notes.append("decode step ran without a CUDA graph (capture failed): launch gaps slow it")
        elif it.kind == "launch":
            it.seconds = kernels.launch(dev, reps=reps)
        elif it.kind == "allreduce":
            if nproc < 2 or s["ranks"] < 2:
                continue
            it.run = {"bytes": int(min(s["bytes"], b["allreduce"])), "ranks": min(s["ranks"], nproc)}
            messages.append(it)
    ar = [it for it in items if it.kind == "allreduce"]
    if messages:
        secs = kernels.all_reduce(dev.type, nproc, [(m.run["bytes"], m.run["ranks"]) for m in messages], reps)
        for it, sec in zip(messages, secs):
            it.seconds = sec
    elif ar:
        notes.append("all-reduce not measured: " + ("one device visible (--nproc N with N GPUs to measure it)"
                                                     if nproc < 2 else "the plan has no multi-GPU group"))
    return notes


def assume(items: list[Item], cat: Device, eb: float) -> None:
    """The catalog model's time for each item's run shape."""
    for it in items:
        r = it.run
        if it.seconds is None:
            continue
        if it.kind == "gemm":
            it.assumed = cat.gemm_time(gemm_flops(r))
        elif it.kind == "attention":
            it.assumed = (1 + FA_BWD_OVER_FWD) * attn_fwd_flops(r) / cat.attention_flops
        elif it.kind == "decode":
            it.assumed = decode_time(r, eb, cat.hbm_bytes_per_s, cat.peak_flops * cat.gemm_fraction, cat.attention_flops,
                                     cat.gemm_fill_s)
        elif it.kind == "launch":
            it.assumed = cat.launch_s
        elif it.kind == "allreduce":
            it.assumed = cat.all_reduce(r["bytes"], r["ranks"], r["ranks"])


# --- from measurements to a profile --------------------------------------------------------

def fit_gemm(points: list[tuple[float, float]], half_default: float) -> tuple[float, float]:
    """(gemm_fraction, gemm_half_size_flops) of the model's curve r(f) = g f / (f + h),
    fitted by least squares on its linear form 1/r = 1/g + (h/g)(1/f)."""
    xs, ys = [1.0 / f for f, _ in points], [1.0 / r for _, r in points]
    if len({round(x * 1e15) for x in xs}) >= 2:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        icpt = my - slope * mx
        if icpt > 0 and slope >= 0:
            return 1.0 / icpt, slope / icpt
    # one size, or noise that bends the curve the wrong way: keep the catalog's size curve
    f, r = max(points)
    return r * (f + half_default) / f, half_default


def solve_hbm(s: dict, eb: float, seconds: float, peak_hbm: float, gemm_rate: float, attn_rate: float,
              gemm_fill_s: float) -> float | None:
    """The HBM fraction at which the model's decode step takes the measured time (None when
    the step is compute bound, so bandwidth cannot be read from it)."""
    f = lambda frac: decode_time(s, eb, peak_hbm * frac, gemm_rate, attn_rate, gemm_fill_s)  # noqa: E731 (decreasing)
    lo, hi = 1e-7, 10.0
    if f(hi) >= seconds:
        return None
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) > seconds else (lo, mid)
    return math.sqrt(lo * hi)


def decode_hbm_fraction(s: dict, eb: float, seconds: float, gpu: GPU) -> float | None:
    """`solve_hbm` for a measured decode step with its compute terms at `gpu`'s catalog rates (GEMM rate, its
    fill time, attention rate): the step is there to read bandwidth, and a decode-time GEMV/attention runs
    nothing like the training kernels the suite measures."""
    peak, eff = gpu.bf16_tflops * 1e12, gpu.efficiency
    gemm_rate = peak * eff.gemm_fraction.value
    return solve_hbm(s, eb, seconds, gpu.hbm_gbps * GB, gemm_rate, peak * eff.attention_fraction.value,
                     eff.gemm_half_size_flops.value / gemm_rate)


def profile_from(items: list[Item], gpu: GPU, eb: float) -> tuple[dict[str, float], list[str]]:
    """The measured efficiencies, as fractions of `gpu`'s catalog peaks (so the model applies
    them to that GPU), and notes on the keys that keep their catalog value."""
    peak, eff = gpu.bf16_tflops * 1e12, gpu.efficiency
    prof: dict[str, float] = {}
    notes = []
    gemms = [(gemm_flops(it.run), gemm_flops(it.run) / it.seconds / peak) for it in items
             if it.kind == "gemm" and it.seconds]
    if gemms:
        prof["gemm_fraction"], prof["gemm_half_size_flops"] = fit_gemm(gemms, eff.gemm_half_size_flops.value)
    for it in items:
        if not it.seconds:
            continue
        if it.kind == "attention":
            prof["attention_fraction"] = (1 + FA_BWD_OVER_FWD) * attn_fwd_flops(it.run) / it.seconds / peak
        elif it.kind == "launch":
            prof["kernel_launch_us"] = it.seconds * 1e6
    for it in items:
        if it.kind == "decode" and it.seconds:
            hbm = decode_hbm_fraction(it.run, eb, it.seconds, gpu)
            if hbm is None:
                notes.append("hbm_fraction not measured: the decode step ran compute bound")
            else:
                prof["hbm_fraction"] = hbm
    ars = [it for it in items if it.kind == "allreduce" and it.seconds]
    if ars and gpu.nvlink_gbps_per_dir > 0:
        # the largest message: its time is bandwidth, less the model's latency steps
        it = max(ars, key=lambda i: i.run["bytes"])
        n = it.run["ranks"]
        lat = math.ceil(math.log2(n)) * constants()["nvlink_collective_latency_us"] * 1e-6
        busbw = 2 * (n - 1) / n * it.run["bytes"] / max(it.seconds - lat, it.seconds / 10)
        prof["nvlink_busbw_fraction"] = busbw / (gpu.nvlink_gbps_per_dir * GB)
    notes.append("network_busbw_fraction not measured: it needs GPUs in several nodes; catalog value kept")
    return {k: float(f"{v:.4g}") for k, v in prof.items()}, notes


# --- the two entry points -----------------------------------------------------------------

def catalog_gpu(name: str | None, info: dict[str, Any]) -> GPU:
    """The catalog GPU the profile is for: --gpu, else the one the CUDA device name names."""
    if name:
        return find_gpu(name, field="--gpu")
    if info["type"] != "cuda":
        raise SpecError("on the CPU name the catalog GPU the test profile is keyed by, e.g. --gpu H100-SXM-80GB",
                        field="--gpu")
    import re
    dev_name = info["name"].upper()
    hits = [g for g in list_gpus() if re.search(rf"\b{re.escape(g.name.split('-')[0].upper())}\b", dev_name)]
    hits = [g for g in hits if ("PCIE" in dev_name) == ("PCIE" in g.name.upper())] or hits
    if not hits:
        raise SpecError(f"cannot tell which catalog GPU {info['name']!r} is; pass --gpu NAME (see rlsolve gpus)",
                        field="--gpu")
    return min(hits, key=lambda g: abs(g.memory_bytes / 1e9 - info["memory_gb"]))


def item_rows(items: list[Item], gpu: GPU, eb: float) -> list[dict[str, Any]]:
    """One row per item: shapes, measured and assumed seconds, the achieved rate, and the
    efficiency (the profile key's quantity) measured against the catalog's."""
    peak, eff = gpu.bf16_tflops * 1e12, gpu.efficiency
    rows = []
    for it in items:
        row: dict[str, Any] = {"item": it.name, "key": it.key, "shape": it.shape}
        if it.run and it.run != it.shape:
            row["run_shape"] = it.run
        row["measured_s"] = None if it.seconds is None else float(f"{it.seconds:.4g}")
        if it.seconds is None:
            rows.append(row)
            continue
        row["assumed_s"] = float(f"{it.assumed:.4g}")
        row["measured_over_assumed"] = round(it.seconds / it.assumed, 3)
        r, t = it.run, it.seconds
        meas = assumed = None
        if it.kind == "gemm":
            f = gemm_flops(r)
            row["tflops"] = round(f / t / 1e12, 3)
            meas, assumed = f / t / peak, eff.gemm_fraction.value * f / (f + eff.gemm_half_size_flops.value)
        elif it.kind == "attention":
            row["tflops"] = round((1 + FA_BWD_OVER_FWD) * attn_fwd_flops(r) / t / 1e12, 3)
            meas, assumed = row["tflops"] * 1e12 / peak, eff.attention_fraction.value
        elif it.kind == "decode":
            row["gb_per_s"] = round(sum(decode_bytes(r, eb)) / t / GB, 2)
            meas = decode_hbm_fraction(r, eb, t, gpu)
            assumed = eff.hbm_fraction.value
        elif it.kind == "launch":
            meas, assumed = t * 1e6, eff.kernel_launch_us.value
        elif it.kind == "allreduce":
            n = r["ranks"]
            row["busbw_gb_per_s"] = round(2 * (n - 1) / n * r["bytes"] / t / GB, 2)
            if gpu.nvlink_gbps_per_dir > 0:
                meas = row["busbw_gb_per_s"] / gpu.nvlink_gbps_per_dir
                assumed = eff.nvlink_busbw_fraction.value
        row["efficiency"] = {"measured": None if meas is None else float(f"{meas:.4g}"),
                             "assumed": None if assumed is None else float(f"{assumed:.4g}")}
        rows.append(row)
    return rows


def run_items(items: list[Item], dev: Any, nproc: int, pool: Any) -> dict[str, Any]:
    """Measure `items`, price them with the catalog model of `pool`'s GPU, fit the profile."""
    eb = 2.0 if dev.type == "cuda" else 4.0
    torch = load_torch()
    threads = torch.get_num_threads()
    if dev.type == "cpu":
        # small shapes on a few shared cores: intra-op threads contend and single timings
        # jump 100x; one thread is slower but steady
        torch.set_num_threads(1)
    try:
        notes = measure(items, dev, nproc)
    finally:
        torch.set_num_threads(threads)
    from rlsolve.perf.hw import device as model_device
    assume(items, model_device(pool, "bf16"), eb)
    prof, more = profile_from(items, pool.gpu, eb)
    return {"rows": item_rows(items, pool.gpu, eb), "profile": {pool.gpu.name: prof}, "notes": notes + more}


def open_device(device: str, nproc: int | None) -> tuple[Any, dict[str, Any], int]:
    """(torch device, its description, processes for the all-reduce)."""
    torch = load_torch()
    dev = pick_device(device)
    info = device_info(dev)
    if nproc is None:
        nproc = info["count"] if dev.type == "cuda" else 1
    if nproc < 1:
        raise SpecError("needs at least 1 process", field="--nproc")
    if dev.type == "cuda" and nproc > info["count"]:
        raise SpecError(f"{nproc} processes but {info['count']} GPUs are visible", field="--nproc")
    info.update(nproc=nproc, dtype=str(torch.bfloat16 if dev.type == "cuda" else torch.float32).replace("torch.", ""))
    return dev, info, nproc


def bench_pool(gpu: GPU, nproc: int) -> Any:
    """A one-node pool of `gpu` for pricing calibration items (all-reduces stay in the node)."""
    from rlsolve.hardware_db import list_networks
    from rlsolve.resolve import PoolHW
    return PoolHW(name="bench", gpu=gpu, nodes=1, gpus_per_node=max(gpu.default_gpus_per_node, nproc),
                  network=list_networks()[0], nics_per_node=1, price_per_gpu_hour_usd=gpu.price_per_gpu_hour_usd)
