"""Turn a scored layout into a Plan that explains itself: objective terms, memory headroom,
the bottleneck phase, and the binding constraints."""
from __future__ import annotations

from rlsolve.errors import InfeasibleError
from rlsolve.perf.hw import GB
from rlsolve.perf.step import StepEstimate, rollout_steps_in_flight, step_flops
from rlsolve.plan import (GenMemory, Layout, Metrics, MemorySection, Objective, Plan, SolverInfo, Throughput,
                          TimeSection, TrainMemory)
from rlsolve.resolve import Problem
from rlsolve.solver.rules import one_pool, target_caps


def _gb(x: float) -> float:
    return round(x / GB, 2)


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def train_reason(problem: Problem, t, pool) -> str:
    head = problem.spec.constraints.min_headroom
    return (f"training needs {_gb(t.total):,.1f} GB per GPU (weights {_gb(t.mem.weights):.1f}, grads "
            f"{_gb(t.mem.grads):.1f}, optimizer {_gb(t.mem.optimizer):.1f}, activations "
            f"{_gb(t.mem.activations):.1f}, other models {_gb(t.aux_resident):.1f}, overhead "
            f"{_gb(t.mem.overhead):.1f}); a {pool.gpu.name} allows {_gb(t.capacity):.1f} GB "
            f"({1 - head:.0%} of the {pool.gpu.memory_bytes / GB:.1f} GB the device reports)")


def gen_reason(problem: Problem, g) -> str:
    need = problem.spec.rl.prompt_len + problem.spec.rl.response_len.max
    return (f"generation: weights {_gb(g.weights):.1f} GB + overhead {_gb(g.other):.1f} GB + training "
            f"state kept during rollout {_gb(g.reserved):.1f} GB leave {_gb(max(g.kv_cache, 0)):.1f} GB "
            f"for the KV cache, {g.kv_tokens:,.0f} tokens per replica, fewer than one {need:,}-token "
            f"sequence (or than the requested kv_cache_gb); capacity {_gb(g.capacity):.1f} GB")


def memory_reasons(problem: Problem, est: StepEstimate) -> list[str]:
    out = []
    if not est.train.fits:
        out.append(train_reason(problem, est.train, est.pool_train))
    if not est.gen.fits:
        out.append(gen_reason(problem, est.gen))
    if est.aux is not None and not est.aux.fits:
        out.append(f"auxiliary pool {est.aux.pool.name!r}: {', '.join(sorted(est.aux.times))} do not fit on "
                   f"{est.aux.gpus} {est.aux.pool.gpu.name} at any tensor-parallel degree inside a node")
    return out


def build_plan(problem: Problem, lay: Layout, est: StepEstimate, *, status: str, solver: SolverInfo | None = None,
               alternatives=None, objective: str = "throughput") -> Plan:
    reasons = memory_reasons(problem, est)
    if reasons:
        raise InfeasibleError(reasons)
    rl = problem.spec.rl
    g, t = est.gen, est.train
    aux_t = est.aux.times if est.aux is not None else {}
    cap_g, cap_t = est.pool_gen.gpu.memory_bytes, est.pool_train.gpu.memory_bytes  # bytes
    gen_mem = GenMemory(weights=_gb(g.weights), kv_cache=_gb(g.kv_cache), activations=_gb(g.activations),
                        other=_gb(g.other), colocated_training=_gb(g.reserved), total=_gb(g.total), capacity=_gb(cap_g))
    tr_mem = TrainMemory(weights=_gb(t.mem.weights), grads=_gb(t.mem.grads), optimizer=_gb(t.mem.optimizer),
                         activations=_gb(t.mem.activations), other=_gb(t.mem.overhead), other_models=_gb(t.aux_resident),
                         total=_gb(t.total), capacity=_gb(cap_t))
    times = TimeSection(step=_r(est.step), prefill=_r(g.prefill), decode=_r(g.decode),
                        reward=_r(t.reward + g.aux_times.get("reward", 0.0) + aux_t.get("reward", 0.0)),
                        reference=_r(t.reference + g.aux_times.get("reference", 0.0) + aux_t.get("reference", 0.0)),
                        value=_r(t.value), old_logprob=_r(t.old_logprob), train=_r(t.train.total),
                        weight_sync=_r(est.sync + t.refit_gather), switch=_r(est.switch), orchestration=_r(t.orchestration),
                        engine_release=_r(est.release))
    tps = est.tokens_per_s
    n_used = est.n_gpus_used
    train_flops, gen_flops = step_flops(problem)
    prec = problem.spec.model.precision
    if est.mode == "colocated":
        peak_total = g.gpus * est.pool_gen.gpu.peak_tflops(prec) * 1e12
    else:
        peak_total = (g.gpus * est.pool_gen.gpu.peak_tflops(prec)
                      + (t.gpus + t.critic_gpus) * est.pool_train.gpu.peak_tflops(prec)) * 1e12
    if est.aux is not None:
        peak_total += est.aux.gpus * est.aux.pool.gpu.peak_tflops(prec) * 1e12
    mfu = (train_flops + gen_flops) / (est.step * peak_total)
    aux_busy = est.aux.gpus * est.aux.time if est.aux is not None else 0.0
    if est.mode == "colocated":
        busy = (g.gpus * (est.step - est.switch - (est.aux.time if est.aux else 0.0)) + aux_busy) / (n_used * est.step)
    else:
        busy = (g.gpus * g.time + t.gpus * t.time + t.critic_gpus * t.critic_busy + aux_busy) / (n_used * est.step)
    comm = t.train.comm + est.sync
    bound = bound_tokens_per_s(problem)
    usd_per_mtok = est.usd_per_hour / 3600.0 / tps * 1e6 if tps > 0 else float("inf")
    if objective == "cost":
        obj = Objective(name="cost", value=_r(usd_per_mtok, 4), unit="USD per million trained tokens")
    else:
        obj = Objective(name="throughput", value=_r(tps, 1), unit="trained tokens/s")
    metrics = Metrics(mfu=_r(mfu, 4), gpu_utilization=_r(busy, 4), gen_train_ratio=_r(g.time / t.time if t.time else 0, 3),
                      comm_fraction=_r(comm / est.step, 4),
                      memory_utilization=_r(max(g.total / cap_g, t.total / cap_t), 4),
                      bound_tokens_per_s=_r(bound, 1), efficiency=_r(tps / bound if bound else 0.0, 4))
    plan = Plan(status=status, objective=obj, **lay.model_dump(),
                memory_gb_per_gpu=MemorySection(generation=gen_mem, training=tr_mem), time_s=times,
                throughput=Throughput(tokens_per_s=_r(tps, 1), tokens_per_s_per_gpu=_r(tps / n_used, 2),
                                      samples_per_s=_r(rl.samples / est.step, 3)),
                metrics=metrics, solver=solver, alternatives=list(alternatives or []),
                explanation=explain(problem, est, usd_per_mtok))
    return plan


def bound_tokens_per_s(problem: Problem) -> float:
    """Roofline of the whole cluster: every FLOP of the step at the GPUs' dense peak, or the
    decode's unavoidable HBM traffic (each response token reads its KV context once and one
    replica reads the weights once per step of the longest response) at full bandwidth,
    whichever takes longer."""
    rl = problem.spec.rl
    a = problem.policy
    prec = problem.spec.model.precision
    train_flops, gen_flops = step_flops(problem)
    t_flops = (train_flops + gen_flops) / sum(p.n_gpus * p.gpu.peak_tflops(prec) * 1e12 for p in problem.pools)
    mean = rl.response_len.mean_tokens
    kv = a.kv_bytes_per_token(2.0) * rl.samples * mean * (rl.prompt_len + mean / 2)
    weights = a.total_params * 2.0 * rl.response_len.max
    t_bytes = (kv + weights) / sum(p.n_gpus * p.gpu.hbm_gbps * GB for p in problem.pools)
    return rl.tokens_per_step / max(t_flops, t_bytes)


def explain(problem: Problem, est: StepEstimate, usd_per_mtok: float) -> list[str]:
    g, t = est.gen, est.train
    aux_t = est.aux.times if est.aux is not None else {}
    phases = {"decode": g.decode, "prefill": g.prefill, "training (update)": t.train.total,
              "old log-probs": t.old_logprob,
              "reference": t.reference + g.aux_times.get("reference", 0.0) + aux_t.get("reference", 0.0),
              "reward": t.reward + g.aux_times.get("reward", 0.0) + aux_t.get("reward", 0.0),
              "value (critic)": t.value, "weight sync": est.sync, "offload switch": est.switch}
    top = max(phases, key=phases.get)
    out = [f"bottleneck phase: {top} ({phases[top]:.1f} s of a {est.step:.1f} s step)"]
    if est.mode == "colocated":
        out.append(f"colocated on {g.gpus} GPUs: phases run one after another; generation {g.time:.1f} s, "
                   f"training side {t.time:.1f} s")
    elif est.mode == "sync":
        out.append(f"disaggregated, synchronous: {g.gpus} GPUs generate ({g.time:.1f} s) while {t.gpus} wait, "
                   f"then train ({t.time:.1f} s)")
    else:
        slower = "generation" if g.time + est.sync_exposed >= t.time else "training"
        out.append(f"disaggregated, async (staleness {problem.spec.rl.max_staleness}): generation {g.time:.1f} s on "
                   f"{g.gpus} GPUs overlaps training {t.time:.1f} s on {t.gpus} GPUs; {slower} sets the pace")
        k = rollout_steps_in_flight("async", problem.spec.rl.max_staleness)
        if k > 1:
            out.append(f"the engines decode {k} steps' rollouts as one stream (they may run {k} steps ahead): "
                       f"a step's longest responses overlap the next steps', and generation is this step's share")
    if g.kv_limited:
        out.append(f"binding: KV-cache memory caps the decode batch at {g.peak_batch:,.0f} sequences per replica "
                   f"({g.kv_tokens:,.0f} tokens of {g.kv_cache / GB:.1f} GB)")
    cap_t = est.pool_train.gpu.memory_bytes / GB
    head_t = 1 - t.total / (cap_t * GB)
    group = (f"{' and '.join(sorted(est.aux.times))} on {est.aux.gpus} GPUs of their own" if est.aux is not None
             else "")
    if len(problem.pools) > 1:
        out.append(f"pools: generation on {est.pool_gen.name!r} ({est.pool_gen.gpu.name}), training on "
                   f"{est.pool_train.name!r} ({est.pool_train.gpu.name})"
                   + (f", {group} in {est.aux.pool.name!r} ({est.aux.pool.gpu.name}, {est.aux.time:.1f} s)"
                      if est.aux is not None else ""))
    elif est.aux is not None:  # one pool: the group's GPUs are beside the engines' and the trainers'
        out.append(f"auxiliary group: {group} ({est.aux.time:.1f} s, tp={est.aux.tp}) beside the "
                   f"{'colocated' if est.mode == 'colocated' else 'engine and training'} GPUs")
    out.append(f"training memory {t.total / GB:.1f} of {cap_t:.1f} GB per GPU "
               f"({head_t:.0%} headroom); generation {g.total / GB:.1f} GB")
    idle_pools = []
    if one_pool(problem):  # the target runs every role on one pool: the others are idle by its rule
        used = est.pool_train.name
        idle_pools = [p for p in problem.pools if p.name != used]
        caps = target_caps(problem)
        out.append(f"one pool: {problem.spec.target.framework} runs every role on one pool, here {used!r} "
                   f"({est.pool_train.n_gpus} {est.pool_train.gpu.name}, whose nodes form its Ray cluster); "
                   + ", ".join(f"{p.name!r} ({p.n_gpus} {p.gpu.name})" for p in idle_pools)
                   + f" left idle (source: {caps.heterogeneous_pools.source})")
    total = est.n_gpus_total - sum(p.n_gpus for p in idle_pools)
    if est.n_gpus_used < total:
        out.append(f"{total - est.n_gpus_used} of {total} GPUs{' of that pool' if idle_pools else ''} left idle: "
                   f"more would not shorten the step under the divisibility and node rules")
    out.append(f"cost: {usd_per_mtok:,.2f} USD per million trained tokens ({est.usd_per_hour:,.2f} USD/hour for "
               f"{est.n_gpus_used} GPUs)")
    return out
