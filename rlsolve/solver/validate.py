"""A solver-independent check of any plan: the rules of SPEC section 6 re-derived from the
plan's own numbers, without calling the solver. Returns the list of violations."""
from __future__ import annotations

from rlsolve.linear import parse_linear
from rlsolve.perf.hw import GB, constants
from rlsolve.plan import Plan
from rlsolve.resolve import Problem
from rlsolve.solver.rules import layout_violations, pool_named


def _degree_values(plan: Plan) -> dict[str, int]:
    """The plan's values of the variables a linear constraint may name."""
    g, t, ra = plan.parallelism.generation, plan.parallelism.training, plan.resource_allocation
    out = {f"generation.{k}": getattr(g, k) for k in ("tp", "pp", "dp", "ep")}
    out |= {f"training.{k}": getattr(t, k) for k in ("tp", "pp", "dp", "cp", "ep", "vp", "zero_stage", "micro_batch")}
    out["generation.gpus"], out["training.gpus"] = ra.generation.gpus, ra.training.gpus
    aux = ra.auxiliary.gpus if ra.auxiliary is not None else 0
    out["gpus"] = (ra.generation.gpus if plan.pipeline.mode == "colocated" else ra.generation.gpus + ra.training.gpus) + aux
    return out


def plan_violations(problem: Problem, plan: Plan) -> list[str]:
    """The rule table's rules (rules.layout_violations, the user's constraints included) on
    the plan's layout, then its own numbers: memory against capacity, the parts against
    the totals, the step against its phases, the throughput against the step."""
    bad: list[str] = [str(v) for v in layout_violations(problem, plan, user=True)]
    for lc in (parse_linear(t) for t in problem.spec.constraints.linear):
        if not lc.holds(_degree_values(plan)):
            bad.append(f"constraints.linear: {lc.text!r} does not hold")
    ra = plan.resource_allocation
    pg = pool_named(problem, ra.generation.pool, "generation.pool")
    pt = pool_named(problem, ra.training.pool, "training.pool")
    mode = plan.pipeline.mode
    t = plan.parallelism.training
    gb = problem.workload.global_batch
    if t.grad_accum * t.dp * t.micro_batch != gb:
        bad.append(f"grad_accum*dp*micro_batch={t.grad_accum * t.dp * t.micro_batch} != global batch {gb}")
    c = plan.parallelism.critic
    if c is not None and c.grad_accum * c.dp * c.micro_batch != gb:
        bad.append(f"critic grad_accum*dp*micro_batch={c.grad_accum * c.dp * c.micro_batch} != global batch {gb}")
    mem = plan.memory_gb_per_gpu
    for role, m, pool in (("generation", mem.generation, pg), ("training", mem.training, pt)):
        cap = pool.gpu.memory_bytes / GB * (1 - problem.workload.headroom) + 0.011
        if m.total > cap:
            bad.append(f"{role} memory {m.total} GB > {cap:.2f} GB allowed")
    util = problem.workload.engine_share
    engine_g = mem.generation.total - mem.generation.colocated_training
    if util is not None and engine_g > util * pg.gpu.memory_bytes / GB + 0.011:
        bad.append(f"engine memory {engine_g:.2f} GB > gpu_memory_utilization {util} x {pg.gpu.memory_bytes / GB:.2f} GB")
    parts_g = mem.generation.weights + mem.generation.kv_cache + mem.generation.activations + \
        mem.generation.other + mem.generation.colocated_training
    if abs(parts_g - mem.generation.total) > 0.05:
        bad.append(f"generation memory parts {parts_g:.2f} != total {mem.generation.total}")
    ts = plan.time_s
    on_gen = {k for k in ("reference", "reward") if getattr(plan.placement, k) == "generation"}
    side_g = ts.prefill + ts.decode + sum(getattr(ts, k) for k in on_gen)
    # forwards on the training GPUs or an auxiliary pool precede training on the training side
    side_t = ts.train + ts.old_logprob + ts.value + sum(getattr(ts, k) for k in ("reference", "reward") if k not in on_gen)
    if ts.step + 0.01 < max(side_g, side_t):
        bad.append(f"step {ts.step} s shorter than a side ({side_g:.2f} / {side_t:.2f} s)")
    if mode == "colocated":
        sleep = mem.generation.weights / constants()["engine_sleep_offload_gbps_per_gpu"]
        if ts.switch + 0.01 < sleep:
            bad.append(f"colocated switch {ts.switch} s < the engine's sleep {sleep:.2f} s")
    if mode != "async" and ts.step + 0.01 < side_g + side_t:
        bad.append(f"{mode} step {ts.step} s shorter than generation + training {side_g + side_t:.2f} s")
    tok = problem.workload.tokens_per_step
    if ts.step > 0 and abs(tok / ts.step - plan.throughput.tokens_per_s) > 0.01 * plan.throughput.tokens_per_s + 0.2:
        bad.append(f"throughput {plan.throughput.tokens_per_s} != tokens/step / step = {tok / ts.step:.1f}")
    return bad
