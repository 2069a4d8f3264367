"""Plain-text rendering of plans and catalogs (no logic beyond formatting)."""
from __future__ import annotations

import json
from typing import Any

import yaml

from rlsolve.plan import Plan

PLAN_ORDER = ["status", "objective", "pipeline", "resource_allocation", "placement", "parallelism", "optimization",
              "memory_gb_per_gpu", "time_s", "throughput", "metrics", "solver", "alternatives", "explanation",
              "validation"]


def plan_dict(plan: Plan) -> dict[str, Any]:
    d = plan.model_dump(mode="json")
    return {k: d[k] for k in PLAN_ORDER if k in d and d[k] is not None}


def dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
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
        f"train {ts.train:,.1f} | sync {ts.weight_sync:,.2f}, switch {ts.switch:,.2f}",
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
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
           "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths)))
    return "\n".join(out) + "\n"
