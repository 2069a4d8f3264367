"""The exhaustive oracle: the best plan of a small instance found by trying every legal plan.

Independent of the solver's candidate tables and of its CP-SAT formulation: it takes every
layout of the rule table's universes without violations (rules.py), on every GPU count of
every pool, with every placement, quantization, offload and KV-budget choice, and drops
nothing by dominance. Each side is
scored by the performance model and each plan composed by `perf.step.compose_step` in the
program's integer units, so the oracle's optimum and the solver's must be equal to the
millisecond. Exponential in the instance size: for tests and benchmarks/oracle.py only."""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations, product

import numpy as np

from rlsolve.frameworks.rules import strategies
from rlsolve.perf.hw import device
from rlsolve.perf.step import (QUANT_BYTES, aux_side, capacity_bytes, compose_step, critic_fits, critic_group_excess,
                               critic_group_pass, critic_pass,
                               engine_release_time, engine_shares_fixed, gen_side, policy_memory, recv_time,
                               refit_gather_time, refit_hold, trainer_switch_time,
                               optimizer_prep_time, rollout_steps_in_flight, send_time,
                               sync_time, train_aux, train_core)
from rlsolve.resolve import Problem
from rlsolve.solver.rules import (aux_group_pools, aux_group_violations, aux_models, aux_shares_actor_degrees,
                                  critic_pair_violations,
                                  critic_places,
                                  critic_universe, critic_violations, engine_can_cap, engine_cap_violations,
                                  gen_universe, gen_violations, modes_allowed, one_pool, role_counts, target_caps,
                                  target_placement_violations, train_shapes, train_universe, train_violations)
from rlsolve.solver.scale import mem_units_up, time_units


@dataclass(frozen=True)
class Side:
    """One scored role: its pool, GPUs, integer terms and the models it hosts."""

    pool: int
    gpus: int
    time_ms: int
    sync_ms: int = 0           # engines: receive time (disaggregated); trainers: send time
    hosts: frozenset = frozenset()
    held_gb: int = 0           # colocated trainers: memory kept during rollout
    what: tuple = ()
    place: tuple = ()          # what the target's placement rules read: trainers (reference, reward on it?,
                               # quantization, offload); engines and auxiliary groups (quantization,)
    degrees: tuple = ()        # where the target runs an auxiliary group with the actor's degrees: trainers
                               # (tp, cp), auxiliary groups (tp,)
    in_flight: int = 1         # engines: steps decoded at once (rollout_steps_in_flight); 1 elsewhere
    fixed_shares: bool = True  # engines: a step's samples split over them in fixed shares (engine_shares_fixed)
    hold_ms: int = 0           # disaggregated trainers: the refit gather async engines wait for (refit_hold)


def _fastest(sides: list[Side]) -> list[Side]:
    """Of sides that agree on everything but their time, the fastest: an exact reduction (the
    slower one can be swapped for it in any plan), unlike the solver's dominance rules."""
    best: dict[tuple, Side] = {}
    for x in sides:
        key = (x.pool, x.gpus, x.sync_ms, x.hosts, x.held_gb, x.place, x.degrees, x.in_flight, x.fixed_shares,
               x.hold_ms)
        if key not in best or x.time_ms < best[key].time_ms:
            best[key] = x
    return list(best.values())


def _train_layouts(problem: Problem, p: int, n: int):
    """Every legal training layout on n GPUs of pool p: the rule table's universe, filtered
    by its violations (the universe's completeness has its own test against plain divisor
    loops: tests/test_solver_space.py)."""
    pool = problem.pools[p]
    for m, tp, pp, cp, dp in train_shapes(problem, pool):
        if m == n:
            for lay in train_universe(problem, pool, n, tp, pp, cp, dp):
                if not train_violations(problem, pool, n, lay):
                    yield lay


def _placements(problem: Problem):
    """(reference placement, reward on training?, quantization) of the training side; a model
    `elsewhere` runs on the engines (disaggregated) or on an auxiliary group of any pool."""
    refs = ["none"] if problem.reference is None else ["training", "cpu_offload", "elsewhere"]
    rewards = [False] if problem.reward is None else [True, False]
    for ref in refs:
        for on_train in rewards:
            for q in (["none", "int8", "int4"] if on_train else ["none"]):
                yield ref, on_train, q


def _train_sides(problem: Problem, colocated: bool) -> list[Side]:
    out = []
    shared = aux_shares_actor_degrees(problem)
    for p, pool in enumerate(problem.pools):
        cap = capacity_bytes(pool, problem.workload.headroom)
        dev = device(pool, problem.workload.precision, problem.profile)
        cache: dict = {}  # memoizes the model's passes by their degrees, as the solver does
        for n in role_counts(pool):
            for lay in _train_layouts(problem, p, n):
                mem = policy_memory(problem, lay)
                if mem.total > cap:
                    continue
                t, _, old = train_core(problem, pool, lay, mem, cache=cache)
                gather = refit_gather_time(problem, pool, lay)  # the trainers' in every mode
                hold = time_units(refit_hold(problem, gather))  # async engines wait for it too
                for (ref, on_train, q), critic in product(_placements(problem),
                                                          _critics(problem, p, n, lay, cache)):
                    ref_t, rew_t, val_t, resident = train_aux(problem, pool, lay, reference=ref,
                                                              reward="training" if on_train else "elsewhere",
                                                              reward_quant=q, cache=cache, critic=critic)
                    if mem.total + resident > cap:
                        continue
                    if critic is not None and not critic_fits(mem, resident, *critic_pass(problem, pool, critic,
                                                                                          cache)[1:], cap):
                        continue
                    hosts = frozenset([x for x, on in (("reference", ref in ("training", "cpu_offload")),
                                                       ("reward", on_train)) if on])
                    core = t.total + old + ref_t + rew_t + val_t + problem.workload.framework.orchestration_s + gather
                    states = mem.states + resident
                    degrees = (lay.tp, lay.cp, lay.micro_batch) if shared else ()
                    value = "none" if problem.value is None else "training"
                    if colocated:
                        for off in (False, True):
                            switch = trainer_switch_time(problem, dev, mem, resident, lay.zero_stage, off)
                            out.append(Side(p, n, time_units(core + switch), 0, hosts,
                                            0 if off else mem_units_up(states), (lay, ref, q, off),
                                            _place(problem, (ref, on_train, q, off, value)), degrees))
                    else:
                        out.append(Side(p, n, time_units(core + optimizer_prep_time(problem, dev, mem)),
                                        time_units(send_time(problem, pool, n)), hosts, 0,
                                        (lay, ref, q), _place(problem, (ref, on_train, q, False, value)), degrees,
                                        hold_ms=hold))
                if not colocated and any("auxiliary" in critic_places(problem, m) for m in modes_allowed(problem)):
                    out += _critic_group_sides(problem, p, lay, mem, t, old, cache)
    return _fastest(out)


def _critic_group_sides(problem: Problem, p: int, lay, mem, t, old: float, cache: dict) -> list[Side]:
    """Disaggregated trainers with the critic on GPUs of its own in the same pool (rules.critic_places):
    every count of the group, every critic layout the rule table allows there beside this policy
    layout, every placement of the other models; the side takes the trainers' and the group's GPUs."""
    pool = problem.pools[p]
    n = lay.gpus
    cap = capacity_bytes(pool, problem.workload.headroom)
    shared = aux_shares_actor_degrees(problem)
    gather = refit_gather_time(problem, pool, lay)
    dev = device(pool, problem.workload.precision, problem.profile)
    out = []
    for m in role_counts(pool):
        if n + m > pool.n_gpus:
            break
        key = ("oracle critic groups", p, m)
        if key not in cache:  # the group's legal layouts that fit, whatever the policy's
            cache[key] = [(c, critic_group_pass(problem, pool, c, cache)) for c in critic_universe(problem, pool, m)
                          if not critic_violations(problem, pool, m, c)]
            cache[key] = [(c, x) for c, x in cache[key] if x[2] <= cap]
        for c, (fwd, upd, _) in cache[key]:
            if critic_pair_violations(problem, lay, c, group=True):
                continue
            for ref, on_train, q in _placements(problem):
                ref_t, rew_t, _, resident = train_aux(problem, pool, lay, reference=ref,
                                                      reward="training" if on_train else "elsewhere", reward_quant=q,
                                                      cache=cache, critic_apart=True)
                if mem.total + resident > cap:
                    continue
                hosts = frozenset([x for x, on in (("reference", ref in ("training", "cpu_offload")),
                                                   ("reward", on_train)) if on])
                excess = critic_group_excess(old + ref_t + rew_t, t.total, fwd, upd)
                core = t.total + old + ref_t + rew_t + excess + problem.workload.framework.orchestration_s + gather \
                    + optimizer_prep_time(problem, dev, mem)
                out.append(Side(p, n + m, time_units(core), time_units(send_time(problem, pool, n)), hosts, 0,
                                (lay, ref, q, m, c), _place(problem, (ref, on_train, q, False, "auxiliary")),
                                (lay.tp, lay.cp, lay.micro_batch) if shared else (),
                                hold_ms=time_units(refit_hold(problem, gather))))
    return out


def _critics(problem: Problem, p: int, n: int, policy, cache: dict) -> list:
    """Every critic layout the rule table allows beside this policy layout ([None]: no critic)."""
    if problem.value is None:
        return [None]
    pool = problem.pools[p]
    key = ("oracle critics", p, n)
    if key not in cache:
        caps = target_caps(problem)
        scored = []
        for c in critic_universe(problem, pool, n):
            if not critic_violations(problem, pool, n, c):
                t, states, peak = critic_pass(problem, pool, c, cache)
                scored.append((t, states, peak, frozenset(strategies(caps, c.tp, c.pp, c.cp, c.ep, c.vp, c.zero_stage,
                                                                     c.recompute, critic=True)), c))
        # A critic no faster, keeping no less and peaking no higher than another that the same
        # engines run can be swapped for it in any plan (every constraint is monotone in the
        # three): keep the others. Where the target has no critic layout of its own, the critic
        # must be the policy's, so keep them all.
        own = caps is None or caps.shapes.value.critic_own_layout
        cache[key] = [x[4] for x in scored if not own or not any(
            y[0] <= x[0] and y[1] <= x[1] and y[2] <= x[2] and y[3] == x[3] and y[:3] != x[:3] for y in scored)]
    return [c for c in cache[key] if not critic_pair_violations(problem, policy, c)]


def _gen_layouts(problem: Problem, p: int, n: int):
    pool = problem.pools[p]
    for lay in gen_universe(problem, pool, n):
        if not gen_violations(problem, pool, n, lay):
            yield lay


def _gen_sides(problem: Problem) -> list[Side]:
    """Disaggregated engines with every choice of the models they host."""
    out = []
    variants = [(frozenset(), "none")]
    if problem.reference is not None:
        variants.append((frozenset({"reference"}), "none"))
    if problem.reward is not None:
        for q in ("none", "int8", "int4"):
            variants.append((frozenset({"reward"}), q))
            if problem.reference is not None:
                variants.append((frozenset({"reference", "reward"}), q))
    decoding = sorted({(rollout_steps_in_flight(m, problem.workload.max_staleness),
                        engine_shares_fixed(m, problem.workload.framework)) for m in ("sync", "async")})
    for p, pool in enumerate(problem.pools):
        for n in role_counts(pool):
            for lay in _gen_layouts(problem, p, n):
                for (hosts, q), (k, fixed) in product(variants, decoding):
                    aux = tuple((h, getattr(problem, h), QUANT_BYTES[q] if h == "reward" else 2.0) for h in sorted(hosts))
                    side = gen_side(problem, pool, lay, aux_models=aux, in_flight=k, fixed_shares=fixed,
                                    cap_search=engine_can_cap(problem, lay))
                    if side.fits and not engine_cap_violations(problem, lay, side.max_num_seqs):
                        out.append(Side(p, n, time_units(side.time), time_units(recv_time(problem, pool, lay)), hosts,
                                        0, (lay, q), _place(problem, (q,)), in_flight=k, fixed_shares=fixed))
    return _fastest(out)


def _coloc_gen(problem: Problem, p: int, n: int, level_gb: int, cache: dict) -> list[int]:
    """Integer generation terms of every engine layout on (pool, n) with `level_gb` held by
    training (the KV budget the program scores colocated engines with)."""
    key = (p, n, level_gb)
    if key not in cache:
        pool = problem.pools[p]
        terms = []
        for lay in _gen_layouts(problem, p, n):
            side = gen_side(problem, pool, lay, reserved=level_gb * 1e9, cap_search=engine_can_cap(problem, lay),
                            fixed_shares=engine_shares_fixed("colocated", problem.workload.framework))
            if side.fits and not engine_cap_violations(problem, lay, side.max_num_seqs):
                sync, _ = sync_time(problem, pool, pool, lay, n, colocated=True)
                terms.append(time_units(side.time + engine_release_time(side) + sync))
        cache[key] = terms
    return cache[key]


def _aux_sides(problem: Problem) -> list[Side | None]:
    """Every group of GPUs of their own for the reference and/or reward forwards, on any pool (the
    trainers' and engines' own included: the GPUs per pool are summed per plan)."""
    out: list[Side | None] = [None]
    names = aux_models(problem)
    # a target that runs the group with the actor's degrees: every tp a trainer may have (paired in `_pairs`)
    tps = [None] if not aux_shares_actor_degrees(problem) else range(1, max(p.n_gpus for p in problem.pools) + 1)
    for p in aux_group_pools(problem):
        pool = problem.pools[p]
        for k in range(1, len(names) + 1):
            for hosts in map(frozenset, combinations(names, k)):
                for q in (("none", "int8", "int4") if "reward" in hosts else ("none",)):
                    for n, tp in product(role_counts(pool), tps):
                        side = aux_side(problem, pool, n, hosts, q, tp=tp)
                        if side.fits:
                            out.append(Side(p, n, time_units(side.time), 0, hosts, 0, (q,), _place(problem, (q,)),
                                            () if tp is None else (tp,)))
    return out


def _pairs(problem: Problem, t: Side, a: Side | None) -> bool:
    """This trainer and auxiliary group go together: where the target runs the group with the actor's
    degrees, the same tp, and the rule table's other conditions (`aux_group_violations`)."""
    if a is None or not a.degrees:
        return True
    return a.degrees[0] == t.degrees[0] and not aux_group_violations(problem, a.gpus, t.what[0])


def oracle(problem: Problem, objective: str = "throughput") -> int | None:
    """The optimal objective in the program's integer units (step ms for throughput,
    milli-dollars per hour x ms for cost), or None when no plan exists."""
    models = aux_models(problem)
    modes = modes_allowed(problem)
    sizes = [p.n_gpus for p in problem.pools]
    price = [round(p.price_per_gpu_hour_usd * 1000) for p in problem.pools]
    budget = problem.spec.constraints.max_price_per_hour_usd
    budget_milli = None if budget is None else int(budget * 1000)
    auxes = _aux_sides(problem)
    single = one_pool(problem)  # the target runs every role on one pool: the roles' pools are all one
    best = math.inf

    def homed(*hosts: frozenset) -> bool:
        return all(sum(m in h for h in hosts) == 1 for m in models)

    def consider(step: int, used: list[int]) -> None:
        nonlocal best
        if any(u > s for u, s in zip(used, sizes)):
            return
        rate = sum(u * pr for u, pr in zip(used, price))
        if budget_milli is not None and rate > budget_milli:
            return
        best = min(best, step * rate if objective == "cost" else step)

    if "colocated" in modes:
        cache: dict = {}
        for t in _train_sides(problem, colocated=True):
            for a in auxes:
                if not homed(t.hosts, a.hosts if a else frozenset()) or not _pairs(problem, t, a):
                    continue
                if single and a is not None and a.pool != t.pool:
                    continue
                if not _target_runs(problem, "colocated", t, None, a):
                    continue
                terms = _coloc_gen(problem, t.pool, t.gpus, t.held_gb, cache)
                if not terms:
                    continue
                used = [0] * len(sizes)
                used[t.pool] += t.gpus
                if a:
                    used[a.pool] += a.gpus
                tt = t.time_ms + (a.time_ms if a else 0)
                consider(compose_step("colocated", min(terms), tt, 0, 0), used)
    disagg = [m for m in modes if m != "colocated"]
    gens = _gen_sides(problem) if disagg else []
    trains = _train_sides(problem, colocated=False) if gens else []
    if trains:
        bit = {m: 1 << i for i, m in enumerate(models)}
        full = sum(bit.values())
        mask = (lambda hosts: sum(bit[m] for m in hosts))
        g = {k: np.array([getattr(x, k) for x in gens], dtype=np.int64)
             for k in ("pool", "gpus", "time_ms", "sync_ms", "in_flight", "fixed_shares")}
        t = {k: np.array([getattr(x, k) for x in trains], dtype=np.int64)
             for k in ("pool", "gpus", "time_ms", "sync_ms", "hold_ms")}
        g_h = np.array([mask(x.hosts) for x in gens])[None, :]
        t_h = np.array([mask(x.hosts) for x in trains])[:, None]
        for a in auxes:
            a_h = mask(a.hosts) if a else 0
            homed = ((g_h | t_h | a_h) == full) & ((g_h & t_h) == 0) & ((g_h & a_h) == 0) & ((t_h & a_h) == 0)
            used = [(g["pool"] == q)[None, :] * g["gpus"][None, :] + (t["pool"] == q)[:, None] * t["gpus"][:, None]
                    + (a.gpus if a and a.pool == q else 0) for q in range(len(sizes))]
            ok = homed & np.logical_and.reduce([u <= size for u, size in zip(used, sizes)])
            ok &= np.array([_pairs(problem, x, a) for x in trains])[:, None]
            if single:
                ok &= g["pool"][None, :] == t["pool"][:, None]
                if a is not None:
                    ok &= (t["pool"] == a.pool)[:, None]
            rate = sum(u * pr for u, pr in zip(used, price))
            if budget_milli is not None:
                ok &= rate <= budget_milli
            if not ok.any():
                continue
            tt = (t["time_ms"] + (a.time_ms if a else 0))[:, None]
            for mode in disagg:
                k = rollout_steps_in_flight(mode, problem.workload.max_staleness)
                fixed = engine_shares_fixed(mode, problem.workload.framework)
                runs = (ok & _target_matrix(problem, mode, trains, gens, a)
                        & ((g["in_flight"] == k) & (g["fixed_shares"] == fixed))[None, :])
                if not runs.any():
                    continue
                steps = compose_step(mode, g["time_ms"][None, :], tt, g["sync_ms"][None, :], t["sync_ms"][:, None],
                                     hold=t["hold_ms"][:, None], maximum=np.maximum)
                value = steps * rate if objective == "cost" else steps
                best = min(best, int(value[runs].min()))
    return None if best == math.inf else int(best)


# --- the target's placement rules, on the whole plan --------------------------------------------

def _place(problem: Problem, place: tuple) -> tuple:
    """A side's placement choices, kept apart by `_fastest` only when a target framework reads them."""
    return place if target_caps(problem) is not None else ()


def _target_runs(problem: Problem, mode: str, t: Side, g: Side | None, a: Side | None) -> bool:
    """The target runs this plan's placements in `mode`: the whole plan's (where each model runs,
    the reward's precision, offload, the auxiliary group) checked at once by the rule table."""
    if target_caps(problem) is None:
        return True
    ref, on_train, t_quant, offload, value = t.place
    others = [(s, "generation") for s in (g,) if s is not None] + [(s, "auxiliary") for s in (a,) if s is not None]
    where = {"reference": ref if ref != "elsewhere" else None, "reward": "training" if on_train else None}
    quant = t_quant if on_train else "none"
    for side, name in others:
        for model in side.hosts:
            where[model] = name
            if model == "reward":
                quant = side.place[0]
    reward = "cpu" if problem.reward is None else where["reward"]
    if None in (where["reference"], reward):
        return False  # a model without a home: not a plan
    return not target_placement_violations(problem, mode, reference=where["reference"], reward=reward, quant=quant,
                                           offload=offload, auxiliary=a.hosts if a is not None else frozenset(),
                                           value=value)


def _target_matrix(problem: Problem, mode: str, trains: list[Side], gens: list[Side], a: Side | None) -> np.ndarray:
    """`_target_runs` for every (trainer, engine) pair, computed once per distinct placement."""
    if target_caps(problem) is None:
        return np.ones((len(trains), len(gens)), dtype=bool)
    t_keys = [(x.hosts, x.place) for x in trains]
    g_keys = [(x.hosts, x.place) for x in gens]
    t_ids = {k: i for i, k in enumerate(dict.fromkeys(t_keys))}
    g_ids = {k: i for i, k in enumerate(dict.fromkeys(g_keys))}
    t_rep = {t_ids[k]: x for k, x in zip(t_keys, trains)}
    g_rep = {g_ids[k]: x for k, x in zip(g_keys, gens)}
    table = np.array([[_target_runs(problem, mode, t_rep[i], g_rep[j], a) for j in range(len(g_ids))]
                      for i in range(len(t_ids))], dtype=bool)
    return table[np.array([t_ids[k] for k in t_keys])[:, None], np.array([g_ids[k] for k in g_keys])[None, :]]
