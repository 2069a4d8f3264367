"""Why is a problem infeasible? A second, objective-free CP-SAT model over *relaxed*
candidates (user constraints and memory limits not applied, only recorded), with one
assumption literal per constraint group; CP-SAT's sufficient assumptions name the groups
that together rule every plan out, and each group is put into words with numbers.

Feasibility only: no times are computed, and training is scored at its smallest memory
setting (micro-batch 1, full recompute), so the relaxed set is cheap to build."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ortools.sat.python import cp_model

from rlsolve.errors import NoAnswerError
from rlsolve.perf.generate import gen_other_bytes, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from rlsolve.perf.hw import GB
from rlsolve.perf.step import QUANT_BYTES, aux_side, capacity_bytes, engine_cap_bytes, policy_memory, train_aux
from rlsolve.perf.train import TrainLayout
from rlsolve.resolve import Problem
from rlsolve.solver.budget import Deadline
from rlsolve.solver.rules import (aux_models, cp_choices, divisors, expert_degrees, gen_universe, gen_violations,
                                  mode_violations, modes_allowed, role_counts, target_caps, train_violations,
                                  zero_stages)

GROUPS = {
    "rl.batch": "the batch per optimizer step",
    "constraints.training": "constraints.training",
    "constraints.generation": "constraints.generation",
    "constraints.modes": "constraints.modes / rl.max_staleness",
    "cluster.size": "the cluster's GPU count",
    "memory.training": "training memory per GPU",
    "memory.generation": "generation memory per GPU",
    "memory.colocated": "colocated memory",
    "constraints.max_price_per_hour_usd": "the price budget",
    "target": "the target framework's capabilities",
}


@dataclass
class Option:
    pool: int
    gpus: int
    mode: str                         # colocated | disagg
    violates: set[str] = field(default_factory=set)
    need: float = 0.0                 # bytes per GPU (training) / bytes per GPU before the KV cache (generation)
    cap: float = 0.0
    held: float = 0.0                 # training: state kept during rollout (colocated)
    room: float = 0.0                 # generation: bytes free for training state (colocated)
    what: str = ""
    dp: int = 0                       # training: the data-parallel degree
    target: str = ""                  # the target framework's reason, when it refuses this layout


def _groups(violations) -> set[str] | None:
    """The diagnosable groups of a layout's violations; None when it breaks a structural rule
    (no framework can build it, so it is no option at all)."""
    groups = {v.group for v in violations}
    return None if "structure" in groups else groups


def _target_reason(violations) -> str:
    return next((v.message for v in violations if v.group == "target"), "")


def _train_options(problem: Problem, deadline: Deadline) -> list[Option]:
    single = len(problem.pools) == 1
    out = []
    for p, pool in enumerate(problem.pools):
        cap = capacity_bytes(pool, problem.workload.headroom)
        for n in role_counts(pool):
            for tp in divisors(math.gcd(n, max(pool.scaleup_size, 1))):
                for pp in divisors(n // tp):
                    if pp > problem.policy.layers:
                        break
                    for cp in cp_choices(problem):
                        if (n // tp // pp) % cp:
                            continue
                        dp = n // (tp * pp * cp)
                        for ep in expert_degrees(problem, tp, dp, cp):
                            for zero in zero_stages(pp):
                                deadline.check("explaining the infeasibility")
                                lay = TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero_stage=zero, micro_batch=1,
                                                  recompute="full", sequence_parallel=tp > 1)
                                found = train_violations(problem, pool, n, lay)
                                v = _groups(found)
                                if v is None:
                                    continue
                                mem = policy_memory(problem, lay)
                                _, _, _, resident = train_aux(problem, pool, lay, reference="cpu_offload",
                                                              reward="elsewhere", reward_quant="int4")
                                need = mem.total + resident
                                if need > cap:
                                    v.add("memory.training")
                                for mode in ("colocated", "disagg"):
                                    if mode == "disagg" and single and n >= pool.n_gpus:
                                        continue
                                    out.append(Option(p, n, mode, set(v), need, cap, mem.states + resident, 0.0,
                                                      f"tp={tp} pp={pp} cp={cp} dp={dp} ep={ep} ZeRO-{zero} "
                                                      f"micro_batch=1 full recompute on {n} {pool.gpu.name}", dp,
                                                      _target_reason(found)))
    return out


def _gen_options(problem: Problem, deadline: Deadline) -> list[Option]:
    wl = problem.workload
    wb = wl.gen_bytes
    single = len(problem.pools) == 1
    out = []
    for p, pool in enumerate(problem.pools):
        cap = min(capacity_bytes(pool, wl.headroom), engine_cap_bytes(problem, pool))
        for n in role_counts(pool):
            for lay in gen_universe(problem, pool, n):
                deadline.check("explaining the infeasibility")
                found = gen_violations(problem, pool, n, lay)
                v = _groups(found)
                if v is None:
                    continue
                # the least memory: a cap of one sequence makes the sampler warm-up's reserve smallest
                need = weight_bytes_per_gpu(problem.policy, lay, wb) + gen_other_bytes(problem.policy, lay, 1) + \
                    wl.seq_max * kv_bytes_per_token_per_gpu(problem.policy, lay, wb)
                if need > cap:
                    v.add("memory.generation")
                for mode in ("colocated", "disagg"):
                    if mode == "disagg" and single and n >= pool.n_gpus:
                        continue
                    out.append(Option(p, n, mode, set(v), need, cap, 0.0, max(0.0, cap - need),
                                      f"tp={lay.tp} pp={lay.pp} x{lay.dp} on {n} {pool.gpu.name}",
                                      target=_target_reason(found)))
    return out


def diagnose(problem: Problem, deadline: Deadline | None = None,
             binding: Callable[[], list[str]] | None = None) -> list[str]:
    """Reasons, in words with numbers, for which no plan exists (the caller has proven that
    none does; this explains it within what is left of the time limit). `binding`: the rules this
    relaxed model leaves out, each tried by lifting it (api._binding_rules), asked only when every
    group here can be met together."""
    deadline = deadline or Deadline(None)
    try:
        return _diagnose(problem, deadline, binding)
    except NoAnswerError:
        return [f"no layout satisfies every constraint (proven by the search); finding which constraints are "
                f"binding did not finish within the time limit of {deadline.limit_s:g} s: raise --time-limit for "
                f"the explanation"]


def _diagnose(problem: Problem, deadline: Deadline, binding: Callable[[], list[str]] | None) -> list[str]:
    gens, trains = _gen_options(problem, deadline), _train_options(problem, deadline)
    if not gens or not trains:
        return ["no legal degrees at all: the policy's heads and layers admit no tensor/pipeline split on these GPUs"]
    # A role none of whose options is clean, with groups every option violates, is a reason
    # on its own: answer without the joint model (which is large on large clusters).
    blocked: set[str] = set()
    for opts in (gens, trains):
        if all(o.violates for o in opts):
            blocked |= set.intersection(*(o.violates for o in opts))
    if blocked:
        return [_words(problem, k, gens, trains) for k in GROUPS if k in blocked]
    m = cp_model.CpModel()
    A = {k: m.new_bool_var(k) for k in GROUPS}
    x = [m.new_bool_var(f"g{i}") for i in range(len(gens))]
    y = [m.new_bool_var(f"t{i}") for i in range(len(trains))]
    allowed = modes_allowed(problem)
    mode = {k: m.new_bool_var(k) for k in ("colocated", "sync", "async")}
    m.add_exactly_one(x)
    m.add_exactly_one(y)
    m.add_exactly_one(mode.values())
    for k, var in mode.items():
        if k not in allowed:
            for group in sorted({v.group for v in mode_violations(problem, k)} or {"constraints.modes"}):
                m.add_implication(var, A[group].Not())
    for opts, vs in ((gens, x), (trains, y)):
        m.add(sum(v for o, v in zip(opts, vs) if o.mode == "colocated") == mode["colocated"])
        for o, v in zip(opts, vs):
            for group in sorted(o.violates):
                m.add_implication(v, A[group].Not())
    # colocated: same pool and count (one equality per (pool, count), not one clause per pair:
    # thousands of options on large clusters made the pairwise form millions of clauses);
    # what training keeps must fit the engines' spare room
    keys = sorted({(o.pool, o.gpus) for o in gens + trains if o.mode == "colocated"})
    for key in keys:
        m.add(sum(v for g, v in zip(gens, x) if g.mode == "colocated" and (g.pool, g.gpus) == key)
              == sum(v for t, v in zip(trains, y) if t.mode == "colocated" and (t.pool, t.gpus) == key))
    held = sum(int(t.held / 1e6) * v for t, v in zip(trains, y) if t.mode == "colocated")
    room = sum(int(g.room / 1e6) * v for g, v in zip(gens, x) if g.mode == "colocated")
    m.add(held <= room).only_enforce_if(A["memory.colocated"])
    # disaggregated: GPUs per pool
    for p, pool in enumerate(problem.pools):
        used = sum(g.gpus * v for g, v in zip(gens, x) if g.pool == p and g.mode == "disagg") + \
            sum(t.gpus * v for t, v in zip(trains, y) if t.pool == p and t.mode == "disagg")
        m.add(used <= pool.n_gpus).only_enforce_if(A["cluster.size"])
    budget = problem.spec.constraints.max_price_per_hour_usd
    if budget is not None:
        price = [round(p.price_per_gpu_hour_usd * 1000) for p in problem.pools]
        rate = sum(price[g.pool] * g.gpus * v for g, v in zip(gens, x)) + \
            sum(price[t.pool] * t.gpus * v for t, v in zip(trains, y) if t.mode == "disagg")
        m.add(rate <= int(budget * 1000)).only_enforce_if(A["constraints.max_price_per_hour_usd"])
    m.add_assumptions(list(A.values()))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # assumption cores need the single-thread search
    solver.parameters.max_time_in_seconds = min(10.0, max(deadline.left(), 0.01))
    status = solver.solve(m)
    if status == cp_model.UNKNOWN:
        return [f"no plan fits, and the diagnosis of why did not finish in "
                f"{solver.parameters.max_time_in_seconds:.1f} s ({len(gens):,} generation and {len(trains):,} "
                f"training options); relax constraints or memory settings one at a time to find the binding one"]
    if status != cp_model.INFEASIBLE:
        return _homeless(problem) or (binding() if binding else []) or [
            "the combination of the chosen options (reward quantization, placements, memory settings) leaves "
            "no plan; every constraint group alone can be met"]
    core = [list(A)[i] for i in solver.sufficient_assumptions_for_infeasibility()]
    return [_words(problem, k, gens, trains) for k in GROUPS if k in core] or [
        "no (generation, training) pair satisfies all constraint groups together"]


def _homeless(problem: Problem) -> list[str]:
    """Reference/reward models that the target runs, in the modes left, only on GPUs of their own, and
    that fit on no group of any pool (at the least precision the target allows)."""
    caps, modes = target_caps(problem), modes_allowed(problem)
    if caps is None or not modes:
        return []
    out = []
    for model in aux_models(problem):
        places = {p for m in modes for p in getattr(caps.placements[m].value, model)} - {"cpu", "none"}
        if places != {"auxiliary"}:
            continue
        quants = caps.reward_quantization.value if model == "reward" else ["none"]
        q = min(quants, key=lambda x: QUANT_BYTES[x])
        sides = [aux_side(problem, pool, pool.n_gpus, frozenset({model}), q) for pool in problem.pools]
        if any(sd.fits for sd in sides):
            continue
        arch = getattr(problem, model)
        biggest = max(problem.pools, key=lambda pool: pool.n_gpus * pool.gpu.memory_bytes)
        out.append(f"{model} model: target {problem.spec.target.framework} runs it in modes {modes} only on GPUs of "
                   f"its own ({caps.placements[modes[0]].source}), and its {arch.total_params / 1e9:,.1f}B "
                   f"parameters ({'16-bit' if q == 'none' else q} weights) fit on no group: not even all {biggest.n_gpus} GPUs of pool "
                   f"{biggest.name!r} at a tensor-parallel degree inside a node; add larger GPUs, allow a mode "
                   f"that places it elsewhere, or use a smaller {model} model")
    return out


def _words(problem: Problem, group: str, gens: list[Option], trains: list[Option]) -> str:
    a = problem.policy
    if group == "rl.batch":
        gb = problem.workload.global_batch
        dps = sorted({o.dp for o in trains if "rl.batch" in o.violates})
        return (f"batch: the {gb} sequences of each optimizer step (rl.prompts_per_step x samples_per_prompt / "
                f"mini_batches) do not split evenly over the data-parallel degrees these GPU counts allow "
                f"({', '.join(map(str, dps[:8]))}{' ...' if len(dps) > 8 else ''}); make the batch a multiple of them, "
                f"or change gpus_per_node / nodes")
    if group == "memory.training":
        best = min(trains, key=lambda t: t.need / t.cap)
        total = sum(p.n_gpus * p.gpu.memory_bytes for p in problem.pools) / GB
        n = sum(p.n_gpus for p in problem.pools)
        return (f"training memory: the {a.name} policy's {a.total_params / 1e9:,.1f}B parameters need "
                f"{a.total_params * 16 / GB:,.0f} GB for weights, gradients and Adam states; the cluster's {n} "
                f"GPU{'s' if n != 1 else ''} hold{'' if n != 1 else 's'} "
                f"{total:,.0f} GB; the smallest layout ({best.what}) needs {best.need / GB:,.1f} GB per GPU where "
                f"{best.cap / GB:,.1f} GB is allowed")
    if group == "memory.generation":
        best = min(gens, key=lambda g: g.need / g.cap)
        seq = problem.workload.seq_max
        util = problem.workload.engine_share
        why = f" (constraints.generation.gpu_memory_utilization {util}; raise it)" if util is not None else ""
        return (f"generation memory: even {best.what} needs {best.need / GB:,.1f} GB per GPU for the weights and one "
                f"{seq:,}-token sequence's KV cache where {best.cap / GB:,.1f} GB is allowed{why}")
    if group == "memory.colocated":
        t = min((t for t in trains if t.mode == "colocated"), key=lambda t: t.held, default=None)
        g = max((g for g in gens if g.mode == "colocated"), key=lambda g: g.room, default=None)
        if t and g:
            return (f"colocated memory: training keeps at least {t.held / GB:,.1f} GB per GPU during rollout "
                    f"({t.what}); the engines can spare at most {g.room / GB:,.1f} GB ({g.what})")
        return "colocated memory: no colocated pair fits"
    if group == "cluster.size":
        need_g = min((g.gpus for g in gens if g.mode == "disagg" and not g.violates), default=None)
        need_t = min((t.gpus for t in trains if t.mode == "disagg" and not t.violates), default=None)
        n = sum(p.n_gpus for p in problem.pools)
        if need_g and need_t:
            return (f"cluster size: separate generation and training GPUs need at least {need_g} + {need_t} = "
                    f"{need_g + need_t} GPUs; the cluster has {n}")
        return f"cluster size: no split of the {n} GPUs gives both roles a layout that fits"
    if group.startswith("constraints.") and group in ("constraints.training", "constraints.generation"):
        role = group.split(".")[1]
        cons = getattr(problem.spec.constraints, role)
        return (f"{group} {cons} leaves no {role} layout that fits (legal degrees divide the heads, layers and "
                f"the batch of {problem.workload.global_batch} sequences)")
    if group == "constraints.modes":
        return (f"constraints.modes {problem.spec.constraints.modes or 'all'} with rl.max_staleness "
                f"{problem.spec.rl.max_staleness} rule out every mode that fits")
    if group == "constraints.max_price_per_hour_usd":
        cheapest = min(g.gpus * problem.pools[g.pool].price_per_gpu_hour_usd for g in gens if not g.violates) \
            if any(not g.violates for g in gens) else math.nan
        return (f"price budget: {problem.spec.constraints.max_price_per_hour_usd:,.2f} USD/hour; the GPUs of the "
                f"smallest plan that fits cost more (generation alone from {cheapest:,.2f} USD/hour)")
    if group == "target":
        t = problem.spec.target
        modes = [v.message for k in ("colocated", "sync", "async") for v in mode_violations(problem, k)
                 if v.group == "target"]
        why = "; ".join(dict.fromkeys(modes)) or next((o.target for o in gens + trains if o.target), "")
        return (f"target {t.framework}: the layouts and placements it runs leave no plan that fits"
                + (f" ({why})" if why else "") + "; target any lifts its limits")
    return group
