"""`validate_plan` and `calibrate` (see the package docstring)."""
from __future__ import annotations

import os
import time
from typing import Any

from rlsolve.bench.suite import (CPU_ALLOC_BYTES, TOLERANCE, bench_pool, calibration_items, catalog_gpu,
                                 open_device, plan_items, run_items)
from rlsolve.errors import SpecError

TIME_TERMS = ("step", "prefill", "decode", "old_logprob", "reference", "reward", "value", "train", "weight_sync")


def _plan(spec: Any, plan: Any) -> Any:
    """A Plan from a Plan, a dict or a file; a bare layout is scored first."""
    from pydantic import ValidationError

    from rlsolve.plan import Plan
    from rlsolve.reader import read_yaml
    from rlsolve.solver.estimate import estimate
    from rlsolve.spec import format_validation_error
    if isinstance(plan, Plan):
        return plan
    data = read_yaml(plan, what="plan file") if isinstance(plan, (str, os.PathLike)) else plan
    if not isinstance(data, dict) or "time_s" not in data:
        return estimate(spec, data)
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, prefix="plan.") from None


def _same_gpu(info: dict[str, Any], name: str) -> bool:
    try:
        return catalog_gpu(None, info).name == name
    except SpecError:
        return False


def _pool(problem: Any, info: dict[str, Any]) -> Any:
    """The plan's pool this device stands for: the one with this GPU (heterogeneous
    clusters are validated one GPU type at a time), else the first."""
    if info["type"] == "cuda":
        for pool in problem.pools:
            if _same_gpu(info, pool.gpu.name):
                return pool
    return problem.pool


def validate_plan(spec: Any, plan: Any, *, device: str = "auto", nproc: int | None = None) -> Any:
    """Return `plan` with its `validation` section filled (see docs/validation.md)."""
    from rlsolve.bench import kernels
    from rlsolve.perf.hw import constants
    from rlsolve.resolve import resolve
    from rlsolve.solver.estimate import estimate
    from rlsolve.spec import load_spec
    t0 = time.perf_counter()
    spec = load_spec(spec)
    problem = resolve(spec)
    plan = _plan(spec, plan)
    # the model's figures for this layout (also: a plan for another spec fails here, not
    # after a minute of measuring)
    base = estimate(spec, plan.layout())
    dev, info, nproc = open_device(device, nproc)
    pool = _pool(problem, info)
    gpu = pool.gpu
    info["catalog_gpu"] = gpu.name
    res = run_items(plan_items(problem, plan), dev, nproc, pool)
    notes = res["notes"]
    if spec.model.precision == "fp8":
        notes.append("the plan runs FP8 GEMMs; bf16 was measured and gemm_fp8_fraction keeps its catalog value")

    # memory: the plan's peak per GPU on this pool, less the CUDA context this process holds
    ra, mg = plan.resource_allocation, base.memory_gb_per_gpu
    roles = [r for r in ("generation", "training") if getattr(ra, r).pool == pool.name] or ["generation", "training"]
    need = max(getattr(mg, r).total for r in roles)
    if dev.type == "cuda":
        mem = kernels.allocate(dev, max(0.0, need - constants()["cuda_context_gb"]) * 1e9)
    else:
        mem = {**kernels.allocate(dev, CPU_ALLOC_BYTES), "fits": None,
               "note": f"cpu test mode: allocated {CPU_ALLOC_BYTES / 1e6:.0f} MB of host memory, not the plan's peak"}
    memory = {"needed_gb": need, **mem}

    # re-score with the measured efficiencies in place of the catalog's
    again = estimate(spec, plan.layout(), profile=res["profile"])
    change = again.time_s.step / base.time_s.step - 1.0 if base.time_s.step else 0.0
    rescored = {k: {"assumed": getattr(base.time_s, k), "measured": getattr(again.time_s, k)} for k in TIME_TERMS}
    rescored["tokens_per_s"] = {"assumed": base.throughput.tokens_per_s, "measured": again.throughput.tokens_per_s}
    rescored["step_change"] = round(change, 4)

    if dev.type == "cpu":
        verdict = "cpu test mode: ran on the CPU with small shapes, the figures are not GPU figures; no verdict"
    elif not mem["fits"]:
        verdict = "memory does not fit"
        notes.insert(0, f"needs {need:.1f} GB per GPU; allocated {mem['allocated_gb']:.1f} GB "
                        f"of {mem.get('device_gb', 0):.1f} GB")
    elif change > TOLERANCE:
        verdict = f"slower than assumed by {change:.0%}"
    else:
        verdict = "validated"
    if dev.type == "cuda" and not _same_gpu(info, gpu.name):
        notes.insert(0, f"measured on {info['name']}, the plan is for {gpu.name}: the figures are this device's")
    validation = {"verdict": verdict, "device": info, "items": res["rows"], "memory": memory,
                  "rescored": rescored, "profile": res["profile"], "notes": notes,
                  "wall_s": round(time.perf_counter() - t0, 2)}
    return plan.model_copy(update={"validation": validation})


def calibrate(*, device: str = "auto", gpu: str | None = None, nproc: int | None = None) -> dict[str, Any]:
    """Measure the calibration shapes; returns {profile: {GPU: {key: value}}, measured: {...}}."""
    t0 = time.perf_counter()
    dev, info, nproc = open_device(device, nproc)
    g = catalog_gpu(gpu, info)
    info["catalog_gpu"] = g.name
    res = run_items(calibration_items(), dev, nproc, bench_pool(g, nproc))
    notes = res["notes"]
    if dev.type == "cpu":
        notes.insert(0, "cpu test mode: ran on the CPU with small shapes; these are not GPU figures and this "
                        f"profile would make {g.name} look far slower than it is")
    elif not _same_gpu(info, g.name):
        notes.insert(0, f"measured on {info['name']} but keyed as {g.name}")
    return {"profile": res["profile"],
            "measured": {"device": info, "test_mode": dev.type == "cpu", "notes": notes, "items": res["rows"],
                         "wall_s": round(time.perf_counter() - t0, 2)}}

