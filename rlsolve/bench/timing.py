"""Torch loading, device choice and the timer every measurement uses.

torch is an optional extra: it is imported here, lazily, and its absence is an input error
(exit 2) that names the install line, so `rlsolve --help` never needs it."""
from __future__ import annotations

import platform
import statistics
import time
from datetime import datetime, timezone
from typing import Any, Callable

from rlsolve.errors import SpecError

INSTALL = 'pip install "rlsolve[bench]"'


def load_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise SpecError(f"torch is not installed; {INSTALL}", field="torch") from None
    return torch


def pick_device(name: str = "auto") -> Any:
    torch = load_torch()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SpecError("cuda requested but torch sees no GPU (CPU-only build or no driver); use --device cpu",
                        field="--device")
    if name not in ("cuda", "cpu"):
        raise SpecError(f"unknown device {name!r}; use cuda or cpu", field="--device")
    return torch.device(name)


def synchronize(dev: Any) -> None:
    if dev.type == "cuda":
        load_torch().cuda.synchronize(dev)


def median_time(fn: Callable[[], Any], dev: Any, *, warmup: int = 3, reps: int = 10, inner: int = 1) -> float:
    """Median seconds per call of `fn`. Warm-up calls absorb cuBLAS heuristics, allocator
    growth and lazy module loading; on a GPU each repetition is bracketed by CUDA events
    (device time, not host launch time) and `inner` calls amortise the event resolution
    for microsecond kernels; the median resists the odd preempted repetition."""
    for _ in range(warmup):
        fn()
    synchronize(dev)
    times = []
    if dev.type == "cuda":
        torch = load_torch()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def device_info(dev: Any) -> dict[str, Any]:
    torch = load_torch()
    info: dict[str, Any] = {"type": dev.type, "torch": str(torch.__version__), "cuda": torch.version.cuda,
                            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=props.name, count=torch.cuda.device_count(), memory_gb=round(props.total_memory / 1e9, 2),
                    capability=f"{props.major}.{props.minor}")
    else:
        info.update(name=platform.processor() or platform.machine() or "cpu", count=1,
                    threads=torch.get_num_threads())
    return info
