"""A solver-independent check of any plan: the rules of SPEC section 6 re-derived from the
plan's own numbers, without calling the solver. Returns the list of violations."""
from __future__ import annotations

from rlsolve.perf.hw import constants
from rlsolve.plan import Plan
from rlsolve.resolve import Problem


def plan_violations(problem: Problem, plan: Plan) -> list[str]:
    bad: list[str] = []
    from rlsolve.solver.estimate import pool_named
    a = problem.policy
    g, t = plan.parallelism.generation, plan.parallelism.training
    ra = plan.resource_allocation
    pg = pool_named(problem, ra.generation.pool, "generation.pool")
    pt = pool_named(problem, ra.training.pool, "training.pool")
    mode = plan.pipeline.mode
    if g.tp * g.pp * g.dp != ra.generation.gpus:
        bad.append(f"generation tp*pp*dp={g.tp * g.pp * g.dp} != {ra.generation.gpus} GPUs")
    if t.tp * t.pp * t.cp * t.dp != ra.training.gpus:
        bad.append(f"training tp*pp*cp*dp={t.tp * t.pp * t.cp * t.dp} != {ra.training.gpus} GPUs")
    for role, tp, pool in (("generation", g.tp, pg), ("training", t.tp, pt)):
        if a.heads % tp:
            bad.append(f"{role} tp={tp} does not divide {a.heads} heads")
        if tp > max(pool.scaleup_size, 1) and tp > 1:
            bad.append(f"{role} tp={tp} spans beyond the NVLink domain of {pool.scaleup_size}")
    if t.ep > 1 and (a.experts % t.ep or (t.tp * t.dp * t.cp) % t.ep):
        bad.append(f"training ep={t.ep} must divide experts {a.experts} and tp*dp*cp {t.tp * t.dp * t.cp}")
    if t.pp > a.layers:
        bad.append(f"pp={t.pp} > layers {a.layers}")
    gb = problem.spec.rl.samples // problem.spec.rl.mini_batches
    if gb % (t.dp * t.micro_batch):
        bad.append(f"global batch {gb} not divisible by dp*micro_batch={t.dp * t.micro_batch}")
    if t.grad_accum * t.dp * t.micro_batch != gb:
        bad.append(f"grad_accum*dp*micro_batch={t.grad_accum * t.dp * t.micro_batch} != global batch {gb}")
    used: dict[str, int] = {}
    roles = [(pg, ra.generation.gpus)] + ([] if mode == "colocated" else [(pt, ra.training.gpus)])
    if ra.auxiliary is not None:
        roles.append((pool_named(problem, ra.auxiliary.pool, "auxiliary.pool"), ra.auxiliary.gpus))
    for pool, cnt in roles:
        used[pool.name] = used.get(pool.name, 0) + cnt
    for pool in problem.pools:
        if used.get(pool.name, 0) > pool.n_gpus:
            bad.append(f"pool {pool.name!r}: {used[pool.name]} GPUs used > {pool.n_gpus}")
    if "auxiliary" in (plan.placement.reference, plan.placement.reward) and ra.auxiliary is None:
        bad.append("placement 'auxiliary' without resource_allocation.auxiliary")
    if mode == "colocated":
        if not (ra.generation.gpus == ra.training.gpus <= pt.n_gpus and pg is pt):
            bad.append("colocated roles must share the same GPUs")
    else:
        for role, cnt, pool in (("generation", ra.generation.gpus, pg), ("training", ra.training.gpus, pt)):
            if cnt > pool.n_gpus:
                bad.append(f"{role} uses {cnt} GPUs, pool has {pool.n_gpus}")
            if cnt > pool.gpus_per_node and cnt % pool.gpus_per_node:
                bad.append(f"{role} uses {cnt} GPUs: not whole {pool.gpus_per_node}-GPU nodes")
        if mode == "async" and problem.spec.rl.max_staleness < 1:
            bad.append("async mode with max_staleness 0")
    mem = plan.memory_gb_per_gpu
    for role, m, pool in (("generation", mem.generation, pg), ("training", mem.training, pt)):
        cap = pool.gpu.memory_gb * (1 - problem.spec.constraints.min_headroom) + 0.011
        if m.total > cap:
            bad.append(f"{role} memory {m.total} GB > {cap:.2f} GB allowed")
    util = problem.spec.constraints.generation.get("gpu_memory_utilization")
    engine_g = mem.generation.total - mem.generation.colocated_training
    if util is not None and engine_g > util * pg.gpu.memory_gb + 0.011:
        bad.append(f"engine memory {engine_g:.2f} GB > gpu_memory_utilization {util} x {pg.gpu.memory_gb} GB")
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
    tok = problem.spec.rl.tokens_per_step
    if ts.step > 0 and abs(tok / ts.step - plan.throughput.tokens_per_s) > 0.01 * plan.throughput.tokens_per_s + 0.2:
        bad.append(f"throughput {plan.throughput.tokens_per_s} != tokens/step / step = {tok / ts.step:.1f}")
    return bad
