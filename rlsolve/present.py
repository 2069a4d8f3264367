"""How plans, comparisons and catalogs are presented: the one module both shells (the CLI
and the HTTP service) import, so `rlsolve solve --format json` and `POST /v1/solve` print the
same JSON, and `rlsolve explain` and `POST /v1/explain` the same differences. Formatting
only: no solving, no I/O."""
from __future__ import annotations

import json
import math
from typing import Any

import yaml

from rlsolve.hardware_db import list_gpus, list_networks
from rlsolve.models import list_models
from rlsolve.plan import Plan

PLAN_ORDER = ["plan_version", "status", "objective", "pipeline", "resource_allocation", "placement", "parallelism", "optimization",
              "memory_gb_per_gpu", "time_s", "throughput", "metrics", "solver", "alternatives", "explanation",
              "validation"]


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The plan as `rlsolve solve --format json` prints it: sections in reading order, empty
    optional sections left out."""
    d = plan.model_dump(mode="json")
    return {k: d[k] for k in PLAN_ORDER if k in d and d[k] is not None}


def finite(value: Any) -> Any:
    """The data with every non-finite float (an infinite $/Mtok) as None: JSON has no Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(data: Any) -> str:
    """The JSON both shells print: indented, valid (non-finite numbers as null), one newline."""
    try:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    except ValueError:
        return json.dumps(finite(data), indent=2) + "\n"


def dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return to_json(data)
    return yaml.safe_dump(data, sort_keys=False, width=110)


def plan_table(plan: Plan) -> str:
    p = plan
    g, t = p.parallelism.generation, p.parallelism.training
    ra = p.resource_allocation
    mg, mt = p.memory_gb_per_gpu.generation, p.memory_gb_per_gpu.training
    ts = p.time_s
    lines = [
        f"status       {p.status}" + (f"  (proven optimal, {p.solver.candidates} candidates)" if p.solver and p.solver.proven_optimal
                                      else (f"  (gap {p.solver.gap:.2%})" if p.solver else "")),
        f"objective    {p.objective.value:,.2f} {p.objective.unit}",
        f"throughput   {p.throughput.tokens_per_s:,.0f} tokens/s  ({p.throughput.tokens_per_s_per_gpu:,.1f} per GPU, "
        f"{p.throughput.samples_per_s:,.2f} samples/s)",
        f"pipeline     {p.pipeline.mode}" + (f", staleness {p.pipeline.staleness}" if p.pipeline.mode == "async" else ""),
        "",
        f"generation   {ra.generation.gpus} GPUs, {ra.generation.engine}: tp={g.tp} pp={g.pp} replicas={g.dp}"
        + (f" ep={g.ep}" if g.ep > 1 else ""),
        f"training     {ra.training.gpus} GPUs, {ra.training.framework}: tp={t.tp} pp={t.pp} cp={t.cp} dp={t.dp}"
        + (f" ep={t.ep}" if t.ep > 1 else "") + (f" vp={t.vp}" if t.vp > 1 else "")
        + f" ZeRO-{t.zero_stage} micro_batch={t.micro_batch} grad_accum={t.grad_accum} recompute={t.recompute}",
        *([f"critic       on the training GPUs: tp={c.tp} pp={c.pp} cp={c.cp} dp={c.dp}"
           + (f" ep={c.ep}" if c.ep > 1 else "")
           + f" ZeRO-{c.zero_stage} micro_batch={c.micro_batch} grad_accum={c.grad_accum} recompute={c.recompute}"]
          if (c := p.parallelism.critic) is not None else []),
        f"placement    reference={p.placement.reference} reward={p.placement.reward} value={p.placement.value}",
        f"options      reference_offload={p.optimization.reference_offload} "
        f"reward_quantization={p.optimization.reward_quantization} "
        f"offload_during_rollout={p.optimization.train_offload_during_rollout} "
        f"max_num_seqs={p.optimization.max_num_seqs}",
        "",
        f"memory/GPU   generation {mg.total:.1f}/{mg.capacity:g} GB (weights {mg.weights:.1f}, KV {mg.kv_cache:.1f}, "
        f"other {mg.other:.1f}" + (f", training state {mg.colocated_training:.1f}" if mg.colocated_training else "") + ")",
        f"             training   {mt.total:.1f}/{mt.capacity:g} GB (weights {mt.weights:.1f}, grads {mt.grads:.1f}, "
        f"optimizer {mt.optimizer:.1f}, activations {mt.activations:.1f}, other {mt.other:.1f}"
        + (f", other models {mt.other_models:.1f}" if mt.other_models else "") + ")",
        f"time/step    {ts.step:,.1f} s = prefill {ts.prefill:,.1f} + decode {ts.decode:,.1f} | old log-probs "
        f"{ts.old_logprob:,.1f}, reference {ts.reference:,.1f}, reward {ts.reward:,.1f}, value {ts.value:,.1f}, "
        f"train {ts.train:,.1f}, orchestration {ts.orchestration:,.2f} | sync {ts.weight_sync:,.2f}, "
        f"switch {ts.switch:,.2f}",
        f"metrics      MFU {p.metrics.mfu:.1%}, GPU busy {p.metrics.gpu_utilization:.1%}, comm "
        f"{p.metrics.comm_fraction:.1%}, roofline {p.metrics.bound_tokens_per_s:,.0f} tokens/s "
        f"({p.metrics.efficiency:.0%} of it)",
    ]
    if p.explanation:
        lines += ["", "why:"] + [f"  - {e}" for e in p.explanation]
    if p.alternatives:
        lines += ["", "runner-up plans:"]
        for a in p.alternatives:
            lines.append(f"  - {a.tokens_per_s:,.0f} tokens/s ({-a.gap:+.1%}): {a.summary}")
            lines.append(f"      lost by: {a.why}")
    return "\n".join(lines) + "\n"


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(table_cell(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
           "  ".join("-" * w for w in widths)]
    for row in cells:
        out.append("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return "\n".join(out) + "\n"


# --- explain: the optimum against a given layout ------------------------------------------

# The time terms of a plan, in the order `rlsolve explain` prints them.
TIME_TERMS = ("step", "prefill", "decode", "old_logprob", "reference", "reward", "value", "train", "weight_sync",
              "switch")
SIGNIFICANT = 0.005  # a term is worth printing when it differs by more than 0.5 % (of the optimal step for times)


def differences(best: Plan, other: Plan) -> list[dict[str, Any]]:
    """Term by term: your layout minus the optimal plan (seconds, tokens/s, GB). `significant`
    marks a difference above SIGNIFICANT (of the optimal step for time terms)."""
    rows: list[dict[str, Any]] = []
    step = max(best.time_s.step, 1e-9)

    def add(term: str, unit: str, plan_value: float, layout_value: float, scale: float) -> None:
        rows.append({"term": term, "unit": unit, "plan": plan_value, "layout": layout_value,
                     "delta": round(layout_value - plan_value, 6),
                     "significant": abs(layout_value - plan_value) > SIGNIFICANT * scale})

    for k in TIME_TERMS:
        add(f"time_s.{k}", "s", getattr(best.time_s, k), getattr(other.time_s, k), step)
    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s"):
        b = getattr(best.throughput, k)
        add(f"throughput.{k}", k.split("_per_")[0] + "/s", b, getattr(other.throughput, k), max(abs(b), 1e-9))
    for role in ("generation", "training"):
        b = getattr(best.memory_gb_per_gpu, role).total
        add(f"memory_gb_per_gpu.{role}.total", "GB", b, getattr(other.memory_gb_per_gpu, role).total,
            max(abs(b), 1e-9))
    return rows


def optimum_summary(best: Plan) -> str:
    return f"optimal: {best.throughput.tokens_per_s:,.0f} tokens/s, step {best.time_s.step:,.1f} s, {best.pipeline.mode}"


def layout_summary(best: Plan, other: Plan) -> str:
    return (f"your layout: {other.throughput.tokens_per_s:,.0f} tokens/s, step {other.time_s.step:,.1f} s "
            f"vs {best.time_s.step:,.1f} s")


def misfit_summary(reasons: list[str]) -> str:
    return "your layout does not fit: " + "; ".join(reasons)


def differences_text(rows: list[dict[str, Any]]) -> str:
    """The significant time terms of `differences`, one line each (the step itself is in the summary)."""
    out = []
    for r in rows:
        if r["significant"] and r["unit"] == "s" and r["term"] != "time_s.step":
            k = r["term"].split(".", 1)[1]
            out.append(f"  {k:12s} {r['layout']:10,.1f} s  vs {r['plan']:10,.1f} s  ({r['delta']:+,.1f} s)")
    return "".join(line + "\n" for line in out)


# --- catalogs -------------------------------------------------------------------------------

def gpu_rows() -> list[dict[str, Any]]:
    """Every GPU catalog entry, sources included (`rlsolve gpus --format json`, GET /v1/gpus)."""
    return [g.model_dump(mode="json") for g in list_gpus()]


def network_rows() -> list[dict[str, Any]]:
    return [n.model_dump(mode="json") for n in list_networks()]


def model_rows() -> list[dict[str, Any]]:
    """Every architecture, with total and active parameters in billions and the KV cache per
    token in KiB (bf16)."""
    rows = []
    for m in list_models():
        row = m.model_dump(mode="json")
        row.update(total_params_b=round(m.total_params / 1e9, 3), active_params_b=round(m.active_params / 1e9, 3),
                   kv_kib_per_token=round(m.kv_bytes_per_token(2.0) / 1024, 2))
        rows.append(row)
    return rows


# the columns `rlsolve gpus|models` print as a table (every field in json/yaml)
GPU_COLUMNS = ["name", "bf16_tflops", "fp8_tflops", "memory_gb", "device_memory_bytes", "hbm_gbps", "nvlink_gbps_per_dir",
               "nvlink_domain", "price_per_gpu_hour_usd"]
NETWORK_COLUMNS = ["name", "gbps_per_nic", "latency_us", "busbw_fraction"]
MODEL_COLUMNS = ["name", "hf_id", "total_params_b", "active_params_b", "layers", "hidden", "kv_kib_per_token"]


def table_cell(value: Any) -> Any:
    """A catalog value as a table cell: a sourced number ({value, source}) shows its value."""
    if isinstance(value, dict) and "value" in value:
        return value["value"]
    return "" if value is None else value
