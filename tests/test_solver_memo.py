"""Exactness of the solver's speed-only paths: each answers what the general path it stands for
answers, on random inputs (the plans must not change by one bit: benchmarks/plan_dump.py)."""
from __future__ import annotations

import math
import random
from itertools import product
from pathlib import Path

import numpy as np

from rlsolve.perf import step as perf_step
from rlsolve.perf.generate import (_cdf_power, _normal_grid, _representatives, representative_count,
                                   slowest_replica_mean)
from rlsolve.perf.step import capacity_bytes, gen_side
from rlsolve.perf.train import TrainLayout, layout_with
from rlsolve.resolve import resolve
from rlsolve.solver.candidates import _critics_for, _recompute_levels, _shape_layout, _with_critics
from rlsolve.solver.rules import (RECOMPUTE, critic_like_policy, gen_universe, gen_violations, micro_batches,
                                  role_counts, train_bases, train_shapes)
from rlsolve.spec import load_spec

from test_solver_space import _random_problems, random_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _reference(problem, pool, n, lay, critics, positions, cache):
    """`_with_critics` as it was written before its memo and its no-target path: from `_critics_for`."""
    pairs = _critics_for(problem, pool, n, lay, critics, cache)
    paired, passes = [c for c, _ in pairs], [c_pass for _, c_pass in pairs]
    if problem.value is None:
        return paired, passes, [(None,)] * len(paired)
    if n not in positions:
        positions[n] = {id(c): i for i, (c, _) in enumerate(critics.get(n, ()))}
    at, like = positions[n], critic_like_policy(problem, lay)
    ckeys = [((at[id(c)],) if id(c) in at else ()) + (("like",) if c == like else ()) for c in paired]
    return paired, passes, ckeys


def _ppo_problems() -> list:
    rng = random.Random(7)
    specs = []
    while len(specs) < 12:  # PPO instances, a third of them with a target framework (the memoized path)
        spec = random_spec(rng, tight=len(specs) % 2 == 1)
        if spec["model"]["value"] is None:
            continue
        if len(specs) % 3 == 2:
            spec["target"] = {"framework": ("verl", "openrlhf", "nemo-rl")[len(specs) // 3 % 3]}
        specs.append(spec)
    problems = []
    for spec in specs:
        try:
            problems.append(resolve(load_spec(spec)))
        except Exception:  # a target that cannot run this spec: not this test's concern
            continue
    return problems + [resolve(load_spec(str(EXAMPLES / f"{name}.yaml"))) for name in ("ppo-7b-8xh100",
                                                                                         "ppo-1.5b-8xh100")]


def test_critics_beside_a_trainer_are_those_of_critics_for():
    """`_with_critics` (the options sorted once per count, the critic on the trainer's degrees placed by
    bisection; with a target, memoized by what it reads of the trainer) gives the same critics, passes
    and variant keys, in the same order, as the general path, trainer after trainer with shared memos."""
    rng = random.Random(11)
    cases = member = inserted = 0
    for problem in _ppo_problems():
        for pool in problem.pools:
            cache, critics, positions = {}, {}, {}
            ref_critics, ref_positions = critics, positions  # the same options (their ids key `positions`)
            shapes = list(train_shapes(problem, pool))
            for n, tp, pp, cp, dp in rng.sample(shapes, min(8, len(shapes))):
                if n not in role_counts(pool):
                    continue
                for (ep, vp, zero), mb, rec in product(list(train_bases(problem, tp, pp, cp, dp))[:4],
                                                       micro_batches(problem, dp)[:3], RECOMPUTE):
                    lay = TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero, micro_batch=mb,
                                      recompute=rec, sequence_parallel=tp > 1)
                    got = _with_critics(problem, pool, n, lay, critics, positions, cache)
                    want = _reference(problem, pool, n, lay, ref_critics, ref_positions, cache)
                    assert got[0] == want[0] and got[1] == want[1] and got[2] == want[2], lay
                    # fastest first: the trainer loop's skips read the critics after one as no faster
                    assert all(a[0] <= b[0] for a, b in zip(got[1], got[1][1:])), got[1]
                    cases += 1
                    member += any(k[:1] != ("like",) and "like" in k for k in got[2])
                    inserted += ("like",) in got[2]
    assert cases > 500 and member > 20 and inserted > 100, (cases, member, inserted)


def test_the_other_models_passes_read_of_the_trainer_only_what_aux_dims_keys():
    """`_aux_dims` is the memo key of `train_aux` (the critic apart, or none): on random specs (dense and
    MoE, GRPO and PPO, a reference and a reward model on the trainers, some for NeMo-RL, which swaps the
    reference into the policy's model), the layouts of a shape that share the key (every recompute and
    ZeRO stage of its bases) get the same passes and resident bytes for every placement."""
    from rlsolve.perf.step import train_aux
    from rlsolve.solver.candidates import _aux_dims, _aux_variants
    rng = random.Random(13)
    compared = swapped = 0
    for k in range(36):
        spec = random_spec(rng, tight=k % 3 == 1)
        if k % 2:
            spec["model"]["reference"] = "policy"
        if k % 4 == 3:
            spec["target"] = {"framework": "nemo-rl"}
        try:
            problem = resolve(load_spec(spec))
        except Exception:  # a target that cannot run this spec: not this test's concern
            continue
        swapped += problem.workload.framework.reference_swap_copies > 1
        for pool in problem.pools:
            shapes = list(train_shapes(problem, pool))
            for n, tp, pp, cp, dp in rng.sample(shapes, min(4, len(shapes))):
                for mb in micro_batches(problem, dp)[:2]:
                    # (a recipe's trainer may run TP without sequence parallelism: NeMo-RL v0.3.0's Megatron ones)
                    lays = [TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero, micro_batch=mb,
                                        recompute=rec, sequence_parallel=sp)
                            for (ep, vp, zero), rec, sp in product(train_bases(problem, tp, pp, cp, dp), RECOMPUTE,
                                                                   {tp > 1, False})]
                    for hosts, ref, quant in _aux_variants(problem):
                        reward = "training" if "reward" in hosts else "elsewhere"
                        seen: dict[tuple, tuple] = {}
                        for lay in lays:
                            got = train_aux(problem, pool, lay, reference=ref, reward=reward, reward_quant=quant,
                                            cache={}, critic_apart=problem.value is not None)
                            want = seen.setdefault(_aux_dims(problem, lay), got)
                            assert got == want, (lay, hosts, ref, quant, got, want)
                            compared += got is not want
    assert compared > 2000 and swapped >= 2, (compared, swapped)


def _engine_caps_scan(n_requests: float, groups: int = 32) -> tuple[int, ...]:
    """`perf.step.engine_caps` as it was written before its bisection: each cap's largest weight within it
    by a scan over every weight."""
    import math
    from rlsolve.perf.generate import representative_count
    g = representative_count(n_requests, groups)
    if n_requests <= 1:
        return ()
    v = (n_requests - 1) / (g - 1)
    weights = sorted({a * v + b for a in range(g) for b in (0, 1) if a or b})
    caps = set()
    for w in range(2, g + 1):
        cap = math.ceil(n_requests / w)
        held = max(x for x in weights if x <= cap + 1e-9) if cap + 1e-9 >= 1 else 1.0
        least = max(1, math.ceil(held - 1e-9))
        if least + 1e-9 < n_requests:
            caps.add(least)
    return tuple(sorted(caps))


def test_engine_caps_by_bisection_are_those_of_the_scan():
    """`engine_caps` finds each cap's largest weight within it by bisection: the same caps as the scan
    over every weight, on random request counts (fractional ones too, below and above the representatives'
    count, and those at the weights' edges: multiples of the groups) and group counts."""
    from rlsolve.perf.step import engine_caps
    rng = random.Random(17)
    counts = [rng.uniform(0.5, 40.0) for _ in range(300)] + [rng.uniform(1, 1e5) for _ in range(300)] + \
        [float(rng.randint(1, 4096)) for _ in range(300)] + [31.0 * k + 1 for k in range(1, 60)]
    bound = 0
    for n in counts:
        for groups in (32, rng.randint(2, 64)):
            got = engine_caps.__wrapped__(n, groups)
            assert got == _engine_caps_scan(n, groups), (n, groups)
            bound += bool(got)
    assert bound > 1000, bound


def test_prefill_memo_and_the_least_caps_reserve():
    """gen_side's engine search: `_prefill` (prefill_time memoized by tp and pp), asked of layouts that differ
    in what it is not keyed by (dp, ep), gives what prefill_time gives on each, float for float; and the
    profile-run reserve (`gen_other_bytes`) never falls with the cap, float for float, so the least of the
    caps engine_caps gives (sorted) leaves the lower-bound path its largest KV room."""
    from rlsolve.perf.generate import GenLayout, gen_other_bytes, prefill_time
    from rlsolve.perf.hw import device
    from rlsolve.perf.step import _prefill, engine_caps
    from rlsolve.solver.rules import gen_universe
    rng = random.Random(19)
    compared = capped = 0
    for k in range(16):
        problem = resolve(load_spec(random_spec(rng, tight=k % 2 == 1)))
        arch, version = problem.policy, problem.workload.engine_version
        for pool in problem.pools:
            dev = device(pool, problem.workload.precision, problem.profile)
            for n in rng.sample(role_counts(pool), min(3, len(role_counts(pool)))):
                for lay in list(gen_universe(problem, pool, n))[:6]:
                    for dp, ep in ((lay.dp, lay.ep), (rng.randint(1, 64), rng.choice((1, lay.tp, 2 * lay.tp)))):
                        other_lay = GenLayout(tp=lay.tp, pp=lay.pp, dp=dp, ep=ep)
                        tokens, ctx = rng.uniform(1, 1e6), rng.uniform(1, 8192)
                        assert _prefill(arch, dev, other_lay, tokens, ctx) == prefill_time(arch, dev, other_lay,
                                                                                           tokens, ctx)
                        caps = engine_caps(rng.choice((rng.uniform(1, 4096), float(rng.randint(1, 4096)))))
                        reserves = [gen_other_bytes(arch, other_lay, c, version) for c in caps]
                        assert list(caps) == sorted(caps) and reserves == sorted(reserves), (caps, reserves)
                        compared += 1
                        capped += len(set(reserves)) > 1
    assert compared > 300 and capped > 50, (compared, capped)


def test_engines_sharing_decode_runs_score_as_each_alone(monkeypatch):
    """gen_side's decode runs are shared by every engine with the same replica requests (`_decode_run`: an event
    run's events re-timed per StepModel, a pinned run resumed from a trace another StepModel took), and its
    bounds by every memory level (`_decode_bound`): engines of other degrees, weight bytes and held memory,
    exact or bounds, scored one after another, give float for float what each gives scored alone (its memos
    emptied first)."""
    from dataclasses import astuple
    from rlsolve.perf.generate import GenLayout, decode_lower_bound
    from rlsolve.perf.hw import device
    from rlsolve.perf import step as perf_step
    rng = random.Random(23)
    calls = {"decode_time": 0, "resume_decode": 0}
    for name in calls:
        def counted(*args, _run=getattr(perf_step, name), _name=name, **kwargs):
            calls[_name] += 1
            return _run(*args, **kwargs)
        monkeypatch.setattr(perf_step, name, counted)

    def alone(problem, pool, lay, **kw):
        perf_step._RUNS.table.clear()
        perf_step._BOUNDS.table.clear()
        perf_step._TRACES.table.clear()
        perf_step._SCHEDULES.table.clear()
        return perf_step.gen_side(problem, pool, lay, **kw)

    compared = 0
    problems = [resolve(load_spec(random_spec(rng, tight=k % 2 == 1))) for k in range(6)]
    for problem in problems + [resolve(load_spec(str(EXAMPLES / f"{name}.yaml")))
                               for name in ("grpo-70b-64xh100", "grpo-deepseek-v2-256xh100")]:
        pool = problem.pools[0]
        tps = [tp for tp in (1, 2, 4, 8) if tp <= pool.gpus_per_node and problem.policy.heads % tp == 0]
        scored = []
        for _ in range(6):  # one replica count, so the engines share their replicas' requests
            lay = GenLayout(tp=rng.choice(tps), pp=rng.choice((1, 2)), dp=2)
            k, bound = rng.choice((1, 2)), rng.random() < 0.3
            for held in (0.0, 0.3, 0.6):  # memory levels: the same engine's runs and bounds again
                kw = dict(reserved=held * pool.gpu.memory_gb * 1e9, in_flight=k, lower_bound=bound)
                scored.append((lay, kw, perf_step.gen_side(problem, pool, lay, **kw)))
        for lay, kw, side in scored:
            if side.fits:
                assert astuple(side) == astuple(alone(problem, pool, lay, **kw)), (lay, kw)
                compared += 1
        wl, step = problem.workload, perf_step._step_model(problem.policy, device(pool), GenLayout(), 2.0, 0.0, False)
        for _ in range(30):  # a few runs' bounds under many budgets, asked again and again
            n_req, cap, n_total = rng.choice((3.0, 40.0, 500.0)), rng.choice((7.0, 60.0, math.inf)), 2048.0
            budget = rng.uniform(1, 30) * wl.seq_max
            assert perf_step._decode_bound(step, n_req, wl, n_total, budget, cap) == decode_lower_bound(
                step, n_req, wl.prompt_len, wl.response_mean, wl.response_max, budget, n_total, clip=wl.clip_ratio,
                max_num_seqs=cap)
    # (runs re-timed, and pinned runs resumed, alone included)
    assert compared > 60 and calls["decode_time"] > 30 and calls["resume_decode"] > 30, (compared, calls)


def _least_training_side(problem, cands, pool: int, n: int, hosts: frozenset):
    """What `_TrainIndex.completing` stands for, by brute force over the candidates: the least trainer +
    auxiliary group time (ms) over a disaggregated trainer and at most one group that, with n engine GPUs of
    `pool` hosting `hosts`, host every model exactly once (Program._placement) and fit every pool's GPUs
    (Program._world), and whether the least takes a group. None: no such pair."""
    from rlsolve.solver.rules import aux_models
    from rlsolve.solver.scale import time_units
    models = frozenset(aux_models(problem))
    best, grouped = None, False
    for c in (c for c in cands.train if c.mode == "disagg"):
        for a in [None] + list(cands.aux):
            a_hosts = a.hosts if a is not None else frozenset()
            placed = [hosts, c.hosts, a_hosts]
            if sum(len(h) for h in placed) != len(models) or frozenset().union(*placed) != models:
                continue
            used = [0] * len(problem.pools)
            used[pool] += n
            used[c.pool] += c.gpus
            if a is not None:
                used[a.pool] += a.gpus
            if any(u > q.n_gpus for u, q in zip(used, problem.pools)):
                continue
            t = time_units(c.time) + (time_units(a.time) if a is not None else 0)
            if best is None or t < best or (t == best and a is None):
                best, grouped = t, a is not None
    return best, grouped


def test_the_training_side_an_engine_is_bounded_with_completes_a_plan():
    """`_TrainIndex.completing`, the training side `_gen_candidates` bounds an engine candidate with: on random
    specs (1-3 pools, reference and reward models, half for OpenRLHF, whose groups run on one pool too), for
    every pool, engine count and hosted set, the brute force's least trainer + group time over the pairs that
    complete a plan (None where none does); and the program with an engine row of the candidates chosen has
    no plan whose training side is below it."""
    from ortools.sat.python import cp_model
    from rlsolve.solver.api import make_program
    from rlsolve.solver.candidates import _TrainIndex, _all_gen_host_variants, enumerate_candidates
    from rlsolve.solver.rules import modes_allowed
    from rlsolve.solver.scale import time_units
    rng = random.Random(23)
    compared = none = grouped = solved = 0
    for k in range(40):
        spec = random_spec(rng, tight=k % 3 == 2)
        if k % 2:  # a target that runs reference/reward groups of their own, on one pool too
            spec["target"] = {"framework": "openrlhf"}
        try:
            problem = resolve(load_spec(spec))
        except Exception:  # a target that cannot run this spec: not this test's concern
            continue
        cands = enumerate_candidates(problem)
        index = _TrainIndex(problem, cands, "disagg")
        for p, pool in enumerate(problem.pools):
            for n in role_counts(pool):
                for hosts in {h for h, _ in _all_gen_host_variants(problem)}:
                    got = index.completing(p, n, hosts)
                    want, with_group = _least_training_side(problem, cands, p, n, hosts)
                    assert got == want, (spec, p, n, hosts)
                    compared += 1
                    none += got is None
                    grouped += with_group
        if not cands.gen or not cands.train:
            continue
        prog = make_program(problem, cands, modes_allowed(problem))
        for g in [g for g in cands.gen if g.mode == "disagg"][:3]:
            m = prog.m.clone()
            m.add(m.get_bool_var_from_proto_index(prog.v.gen[g.id].index) == 1)
            m.clear_objective()
            m.minimize(sum(time_units(c.time) * m.get_bool_var_from_proto_index(prog.v.train[c.id].index)
                           for c in cands.train)
                       + sum(time_units(a.time) * m.get_bool_var_from_proto_index(prog.v.aux[a.id].index)
                             for a in cands.aux))
            solver = cp_model.CpSolver()
            solver.parameters.num_workers = 1
            status = solver.solve(m)
            bound = index.completing(g.pool, g.gpus, g.hosts)
            if status == cp_model.OPTIMAL:
                assert bound is not None and bound <= round(solver.objective_value), (spec, g.id)
                solved += 1
            else:
                assert status == cp_model.INFEASIBLE, solver.status_name(status)
    assert compared > 400 and none > 100 and grouped > 10 and solved > 60, (compared, none, grouped, solved)


def test_fixed_and_drawn_engine_shares_share_the_decode_runs_where_they_cannot_differ(monkeypatch):
    """`generate` reads `fixed_shares` only through `slowest_replica_mean`, so where that is the mean (one
    replica, or a replica of one request) the two flags give the same engine float for float, and
    `gen_side` asks the drawn-shares engine (async, where the target does not fix the shares) for no decode
    run that the fixed-shares one (sync, colocated) has not already run: one memo entry serves both. Where the
    slowest replica's mean is longer, the two are different runs. Their times have no fixed order: each engine
    searches its own settings (pinned KV budgets step down from its own run's need), and a preempting run is not
    monotone in its lengths (with the device-reported memory, one layout here runs 2% faster on fixed shares)."""
    runs = [0]
    for name in ("simulate_decode", "decode_trace", "resume_decode"):  # counted as benchmarks/solve_examples.py does
        monkeypatch.setattr(perf_step, name, lambda *a, _run=getattr(perf_step, name), **k: (
            runs.__setitem__(0, runs[0] + 1), _run(*a, **k))[1])
    rng = random.Random(17)
    problems = [resolve(load_spec(str(EXAMPLES / "grpo-70b-64xh100.yaml")))]
    for k in range(10):
        spec = random_spec(rng)
        spec["rl"]["response_len"] = {"max": 4096, "mean": 1024}  # a long tail: the slowest share is longer
        problems.append(resolve(load_spec(spec)))
    shared = apart = 0
    for problem in problems:
        wl = problem.workload
        for pool in problem.pools:
            for n in role_counts(pool):
                for lay in gen_universe(problem, pool, n):
                    if gen_violations(problem, pool, n, lay) or rng.random() > 0.5:
                        continue
                    n_req, n_total = wl.samples / lay.dp, wl.samples
                    same = slowest_replica_mean(n_req, wl.response_mean, wl.response_max, n_total,
                                                wl.clip_ratio) == wl.response_mean
                    assert same == (lay.dp == 1 or n_req <= 1), (lay, n_req)
                    before = runs[0]
                    fixed = gen_side(problem, pool, lay, fixed_shares=True)
                    ran = runs[0] - before
                    drawn = gen_side(problem, pool, lay, fixed_shares=False)
                    if same:
                        g = representative_count(n_req)
                        for a, b in zip(_representatives(n_req, wl.response_mean, wl.response_max, n_total, g,
                                                         wl.clip_ratio, True),
                                        _representatives(n_req, wl.response_mean, wl.response_max, n_total, g,
                                                         wl.clip_ratio, False)):
                            assert np.array_equal(a, b)
                        assert drawn == fixed and runs[0] == before + ran, lay
                        shared += ran > 0
                    else:
                        apart += runs[0] > before + ran
    assert shared > 20 and apart > 20, (shared, apart)


def test_the_normal_cdf_power_is_pow_over_the_whole_grid():
    """`_cdf_power` runs pow only where Phi^n is not 0: the same array, bit for bit (signed zeros included),
    as `cdf ** n` over the whole grid, for the replica counts a search asks (2 to 65,536 and beyond)."""
    _, cdf, _ = _normal_grid()
    rng = random.Random(19)
    skipped = 0
    for n in list(range(1, 400)) + rng.sample(range(400, 200_000), 400):
        got, want = _cdf_power(cdf, n), cdf ** n
        assert got.tobytes() == want.tobytes(), n
        skipped += int(np.count_nonzero(got == 0.0) > 0)
    assert skipped > 600, skipped  # most counts skip part of the grid


def _levels(problem, base, cap, cache, over, rules):
    levels = _recompute_levels(problem, base, cap, cache, over, rules)
    return levels if levels in (None, False) else [(lay, mem.total) for lay, mem in levels]


def test_interleaved_bases_seeded_with_the_recomputes_over_without_interleaving_keep_their_levels():
    """Speed-only path (`_train_candidates`' `plain_over`): an interleaved base's `_recompute_levels`,
    its `over` seeded with the recomputes found over the memory at the same micro-batch by the base
    without interleaving at its ZeRO stage or a higher one, yields what it yields without the seed
    (the same layouts and memory, None and False alike), micro-batch after micro-batch as the
    enumeration walks them (one `over` a base, a set of each micro-batch's alone when packed)."""
    rng = random.Random(41)
    checked = seeded = 0
    for problem in _random_problems(10, 43):
        for pool in problem.pools[:1]:
            cap, cache = capacity_bytes(pool, problem.workload.headroom), {}
            shapes = list(train_shapes(problem, pool))
            for n, tp, pp, cp, dp in rng.sample(shapes, min(12, len(shapes))):
                mbs = micro_batches(problem, dp)
                bases = list(train_bases(problem, tp, pp, cp, dp))
                if not mbs or not any(vp > 1 for _, vp, _ in bases):
                    continue
                top = max(zero for _, _, zero in bases)
                monotone = problem.workload.packed_tokens is None
                plain_over, rules = {}, {}
                for ep, vp, zero in bases:
                    over, bare = set(), set()
                    for mb in mbs:
                        if not monotone:
                            over, bare = set(), set()
                        seed = set().union(*(plain_over.get((ep, z, mb), ()) for z in range(zero, top + 1))) \
                            if vp > 1 else set()
                        seeded += bool(seed - over)
                        over |= seed
                        base = layout_with(_shape_layout(tp, pp, cp, dp, mb), ep=ep, vp=vp, zero_stage=zero)
                        got = _levels(problem, base, cap, cache, over, rules)
                        assert got == _levels(problem, base, cap, cache, bare, rules)
                        checked += 1
                        if vp == 1:
                            plain_over[ep, zero, mb] = frozenset(over)
                        if got is None:
                            break
    assert checked >= 300 and seeded >= 30, (checked, seeded)


def _train_rows(cands) -> list[tuple]:
    return [(c.mode, c.layout, c.hosts, c.reference, c.reward_quant, c.offload_states, c.side.time, c.side.states,
             c.switch, c.send, c.pool, c.modes, c.critic, c.critic_gpus, c.hold) for c in cands.train]


def _enumeration_problems(seed: int) -> list:
    """14 random instances (every other one with tight memory; those the resolver refuses left out) and four
    examples: the inputs of the enumeration's equality tests."""
    rng = random.Random(seed)
    problems = []
    for k in range(14):
        try:
            problems.append(resolve(load_spec(random_spec(rng, tight=k % 2 == 1))))
        except Exception:  # a spec the resolver refuses: not these tests' concern
            continue
    return problems + [resolve(load_spec(str(EXAMPLES / f"{name}.yaml"))) for name in
                       ("grpo-deepseek-v2-256xh100", "grpo-70b-64xh100", "grpo-8b-16xa100", "grpo-hetero-h20-h800")]


def test_interleaved_micro_batches_beaten_at_every_recompute_leave_the_candidates_as_they_are(monkeypatch):
    """Skip rule (`_train_candidates`' `_SKIP_BEATEN_MICRO_BATCHES`): an interleaved base skips a
    micro-batch, before its memory, where `_interleaved_beaten` (`every_recompute`) bounds each of its
    candidates at every recompute by the layout without interleaving at its least recompute that fits:
    the training candidates (each field, the order) are those of the enumeration without the rule, on
    random instances, tight memory among them, and the examples, with and without the bounds of plans
    already found."""
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    problems = _enumeration_problems(47)
    skipped = [0]
    beaten = cand_mod._interleaved_beaten

    def counted(*args, **kwargs):
        hit = beaten(*args, **kwargs)
        skipped[0] += bool(hit and kwargs.get("every_recompute"))
        return hit
    monkeypatch.setattr(cand_mod, "_interleaved_beaten", counted)
    # (the floor rule, which skips most of these layouts before the skip rule is asked, has a test of its own)
    monkeypatch.setattr(cand_mod, "_FLOOR_BEFORE_SCORING", False)
    compared = 0
    for problem in problems:
        for bounded in (True, False):
            monkeypatch.setattr(cand_mod, "_SKIP_BEATEN_MICRO_BATCHES", True)
            with_rule = _train_rows(enumerate_candidates(problem, bounded=bounded))
            monkeypatch.setattr(cand_mod, "_SKIP_BEATEN_MICRO_BATCHES", False)
            assert with_rule == _train_rows(enumerate_candidates(problem, bounded=bounded))
            compared += bool(with_rule)
    assert compared >= 12 and skipped[0] >= 1000, (compared, skipped[0])


def test_a_micro_batch_beaten_at_one_vp_is_beaten_at_every_larger_one_later(monkeypatch):
    """Memo (`_train_candidates`' `beaten_from`, `_MEMO_BEATEN_VP`): an interleaved base skips, without asking
    `_interleaved_beaten` again, a micro-batch that the skip rule found beaten (`every_recompute`) at a smaller vp
    of the same shape, ep and ZeRO stage. The premise, checked on the calls made without the memo: no verdict
    True at one vp is followed, in the same shape, by False at a larger vp (the bound does not read vp, the
    simplicity rank only grows with it, the fronts only gain members and the fastest disaggregated trainers only
    get faster). The effect: the training candidates (each field, the order) are those without the memo, on
    random instances, tight memory among them, and the examples, with and without the bounds of plans already
    found; and the memo saves calls."""
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    problems = _enumeration_problems(53)
    beaten = cand_mod._interleaved_beaten
    verdicts: list[tuple] = []

    def logged(problem, pool, lay, *args, **kwargs):
        hit = beaten(problem, pool, lay, *args, **kwargs)
        if kwargs.get("every_recompute"):
            verdicts.append(((id(problem), id(pool), lay.tp, lay.pp, lay.cp, lay.dp, lay.ep, lay.zero_stage,
                              lay.micro_batch), lay.vp, hit))
        return hit
    monkeypatch.setattr(cand_mod, "_interleaved_beaten", logged)
    monkeypatch.setattr(cand_mod, "_FLOOR_BEFORE_SCORING", False)  # (as in the test above)
    compared = checked = 0
    calls = {True: 0, False: 0}
    for problem in problems:
        for bounded in (True, False):
            rows = {}
            for memo in (False, True):
                monkeypatch.setattr(cand_mod, "_MEMO_BEATEN_VP", memo)
                verdicts.clear()
                rows[memo] = _train_rows(enumerate_candidates(problem, bounded=bounded))
                calls[memo] += len(verdicts)
                if not memo:
                    least: dict[tuple, int] = {}  # per shape, ep, ZeRO and micro-batch: the least vp found beaten
                    for key, vp, hit in verdicts:  # (a shape's calls come together: a later shape starts afresh)
                        if key in least and least[key] <= vp:
                            assert hit, (key, vp, least[key])
                            checked += 1
                        if hit:
                            least[key] = min(vp, least.get(key, vp))
            assert rows[True] == rows[False]
            compared += bool(rows[True])
    assert compared >= 12 and checked >= 1000 and calls[True] + 1000 <= calls[False], (compared, checked, calls)


def test_engine_frames_shared_by_replica_counts_score_as_each_alone():
    """gen_side reads what does not depend on the replica count (weights, profile-run reserve, KV room, StepModel:
    `_engine_frame`) from a memo shared by every count of an engine shape and by every later call: engines of
    random degrees, counts, held memory, hosted models, pinned KV and caps, exact or bounds, scored in a random
    order, give float for float what each gives with the memo emptied first, and its keys hold each engine shape
    once, whatever the counts asked."""
    from dataclasses import astuple

    from rlsolve.perf.generate import GenLayout
    rng = random.Random(29)
    compared = 0
    problems = [resolve(load_spec(random_spec(rng, tight=k % 2 == 1))) for k in range(6)]
    for problem in problems + [resolve(load_spec(str(EXAMPLES / f"{name}.yaml")))
                               for name in ("grpo-70b-64xh100", "grpo-deepseek-v2-256xh100", "ppo-7b-8xh100")]:
        aux = [(role, arch, 2.0) for role, arch in (("reference", problem.reference), ("reward", problem.reward))
               if arch is not None]
        asked = []
        for pool in problem.pools:
            tps = [tp for tp in (1, 2, 4, 8) if tp <= pool.gpus_per_node and problem.policy.heads % tp == 0]
            for _ in range(8):
                tp, pp = rng.choice(tps), rng.choice((1, 2))
                ep = rng.choice([e for e in (1, tp) if problem.policy.is_moe and problem.policy.experts % e == 0] or [1])
                kw = dict(reserved=rng.choice((0.0, 0.2, 0.5)) * pool.gpu.memory_gb * 1e9,
                          aux_models=tuple(rng.sample(aux, rng.randint(0, len(aux)))),
                          kv_cache_gb=rng.choice((None, None, 0.05 * pool.gpu.memory_gb)),
                          max_num_seqs=rng.choice((None, None, 64)), lower_bound=rng.random() < 0.5,
                          in_flight=rng.choice((1, 2)), cap_search=rng.random() < 0.8)
                for dp in rng.sample(range(1, 65), 3):  # counts of one shape share its frame
                    asked.append((pool, GenLayout(tp=tp, pp=pp, dp=dp, ep=ep), kw))
        rng.shuffle(asked)
        scored = [(pool, lay, kw, gen_side(problem, pool, lay, **kw)) for pool, lay, kw in asked]
        shapes = {(id(pool), lay.tp, lay.pp, lay.ep, kw["reserved"], tuple((r, id(a), b) for r, a, b in kw["aux_models"]),
                   kw["kv_cache_gb"], kw["max_num_seqs"], kw["cap_search"]) for pool, lay, kw in asked}
        assert {k[1:] for k in perf_step._FRAMES.table if k[0] == id(problem)} == shapes
        for pool, lay, kw, side in scored:
            perf_step._FRAMES.table.clear()
            assert astuple(side) == astuple(gen_side(problem, pool, lay, **kw)), (lay, kw)
            compared += side.fits
    assert compared > 100, compared


def test_layouts_whose_floor_loses_every_candidate_leave_the_candidates_as_they_are(monkeypatch):
    """Skip rule (`_train_candidates`' `_FLOOR_BEFORE_SCORING`): a layout is not scored where its floor
    (`perf.step.train_core_floor`, at most its update plus old log-prob pass: a property test) already loses each of
    its candidates, at its recompute and every heavier one, to one found (`_all_beaten`), and an interleaved base
    then bounds its micro-batch by that floor less its bubble. The training candidates (each field, the order) are
    those of the enumeration without the rule, on random instances, tight memory among them, the examples and RL
    rows' targets, PPO ones among them (their critics bounded by `_critic_floor`), with and without the bounds of plans
    already found; and the rule saves scoring."""
    from test_solver_space import _framework_problems
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    problems = _enumeration_problems(59) + _framework_problems(step=12) + \
        [resolve(load_spec(str(EXAMPLES / f"{name}.yaml"))) for name in ("ppo-7b-8xh100", "ppo-1.5b-8xh100")]
    compared = 0
    scored = {True: 0, False: 0}
    ppo = {True: 0, False: 0}  # (of the PPO problems)
    for problem in problems:
        for bounded in (True, False):
            rows = {}
            for rule in (True, False):
                monkeypatch.setattr(cand_mod, "_FLOOR_BEFORE_SCORING", rule)
                cands = enumerate_candidates(problem, bounded=bounded)
                rows[rule] = _train_rows(cands)
                scored[rule] += cands.evaluated
                if problem.value is not None:
                    ppo[rule] += cands.evaluated
            assert rows[True] == rows[False]
            compared += bool(rows[True])
    assert compared >= 14 and scored[True] < 0.5 * scored[False], (compared, scored)
    assert ppo[True] < 0.7 * ppo[False], ppo


def test_the_reference_floor_leaves_the_verdicts_and_candidates_as_they_are(monkeypatch):
    """Skip rule (`candidates._REFERENCE_FLOOR`): `_all_beaten` asks a hosted reference's pass only where
    `reference_pass_floor` (at most that pass: a property test in test_solver_space.py) does not already lose the
    variant. Every verdict is the one the pass gives, so the layouts scored (their count) and the training
    candidates (each field, the order) are those without the rule, on random instances, tight memory among them,
    the examples (PPO ones among them), with and without the bounds of plans already found; and the rule leaves
    reference passes unscored."""
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    real = cand_mod.train_aux
    asked = [0]

    def counted(*args, **kwargs):
        asked[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cand_mod, "train_aux", counted)
    problems = _enumeration_problems(67) + \
        [resolve(load_spec(str(EXAMPLES / f"{name}.yaml"))) for name in ("ppo-7b-8xh100", "ppo-1.5b-8xh100")]
    compared = 0
    passes = {True: 0, False: 0}
    for problem in problems:
        for bounded in (True, False):
            rows = {}
            for rule in (True, False):
                monkeypatch.setattr(cand_mod, "_REFERENCE_FLOOR", rule)
                asked[0] = 0
                cands = enumerate_candidates(problem, bounded=bounded)
                rows[rule] = (_train_rows(cands), cands.evaluated)
                passes[rule] += asked[0]
            assert rows[True] == rows[False]
            compared += bool(rows[True][0])
    assert compared >= 14 and passes[True] < passes[False], (compared, passes)  # (44,130 against 50,471 when written)


def _gen_rows(cands) -> list[tuple]:
    return [(c.mode, c.layout, c.hosts, c.reward_quant, c.reserved_gb, c.side, c.sync, c.pool, c.modes)
            for c in cands.gen]


def test_engines_cut_at_the_pruning_limit_leave_the_candidates_as_they_are(monkeypatch):
    """Skip rule (`candidates._beyond_limit`, `gen_side`'s `beyond`): an engine's search stops where none of its
    runs can come under the time from which `_prune_by_bound` drops it whatever it pairs with. Every candidate
    (each field, the order: engines, trainers, auxiliary groups) is that of the enumeration without the rule, on
    random instances, tight memory among them, the examples and RL rows' targets, with the bounds of plans already
    found (the rule's only use); and the rule cuts some engines short."""
    from test_solver_space import _framework_problems
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    real = cand_mod.gen_side
    cut = [0]

    def counted(*args, **kwargs):
        side = real(*args, **kwargs)
        cut[0] += side.cut is not None
        return side

    monkeypatch.setattr(cand_mod, "gen_side", counted)
    limit = cand_mod._beyond_limit
    compared = 0
    for problem in _enumeration_problems(61) + _framework_problems(step=12):
        rows = {}
        for rule in (True, False):
            monkeypatch.setattr(cand_mod, "_beyond_limit", limit if rule else (lambda *args, **kwargs: None))
            cands = enumerate_candidates(problem, bounded=True)
            rows[rule] = (_gen_rows(cands), _train_rows(cands),
                          [(a.pool, a.gpus, a.hosts, a.reward_quant, a.side) for a in cands.aux], cands.evaluated)
        assert rows[True] == rows[False]
        compared += bool(rows[True][0])
    assert compared >= 14 and cut[0] > 50, (compared, cut)


def test_engines_left_out_of_their_front_before_simulating_leave_the_candidates_as_they_are(monkeypatch):
    """Skip rule (`_gen_candidates`' `fronts`, `_SKIP_DOMINATED_ENGINES`): an engine whose lower bound already
    trails an engine found in its front that leaves it out (`_gen_covers`), and whose plan cannot lower an
    incumbent at that bound (`_plan_steps`), is not simulated: `_prune_gen` drops it whatever its exact time.
    Every candidate (each field, the order: engines, trainers, auxiliary groups) is that of the enumeration
    without the rule, on random instances, tight memory among them, the examples and RL rows' targets, with and
    without the bounds of plans already found and with an engine degree kept apart (user constraints); and the
    rule skips some engines (fewer scored)."""
    from test_solver_space import _framework_problems
    from rlsolve.solver import candidates as cand_mod
    from rlsolve.solver.candidates import enumerate_candidates
    compared = 0
    scored = {True: 0, False: 0}
    for problem in _enumeration_problems(67) + _framework_problems(step=12):
        for bounded, apart in ((True, frozenset()), (False, frozenset()), (True, frozenset({"generation.tp"}))):
            rows = {}
            for rule in (True, False):
                monkeypatch.setattr(cand_mod, "_SKIP_DOMINATED_ENGINES", rule)
                cands = enumerate_candidates(problem, bounded=bounded, keep_apart=apart)
                rows[rule] = (_gen_rows(cands), _train_rows(cands),
                              [(a.pool, a.gpus, a.hosts, a.reward_quant, a.side) for a in cands.aux])
                scored[rule] += cands.evaluated
            assert rows[True] == rows[False], (bounded, apart)
            compared += bool(rows[True][0])
    assert compared >= 30 and scored[True] < scored[False], (compared, scored)


def test_the_largest_engine_time_within_a_limit_is_that_of_a_scan():
    """`candidates._largest_within` (the engine time `_beyond_limit` allows in a mode): the largest x in [-1, limit]
    whose step stays within the limit, as a scan finds it, for any guess, right or wrong, on every mode's
    `compose_step` with random trainer and receive times."""
    from rlsolve.perf.step import compose_step
    from rlsolve.solver.candidates import _largest_within
    rng = random.Random(67)
    for _ in range(300):
        mode = rng.choice(["sync", "async"])
        tt, recv, hold, limit = rng.randint(0, 400), rng.randint(0, 60), rng.randint(0, 30), rng.randint(0, 500)
        f = (lambda x: compose_step(mode, x, tt, recv, 0, hold=hold))
        scan = max([x for x in range(-1, limit + 1) if x < 0 or f(x) <= limit])
        for guess in (limit - recv - (tt if mode == "sync" else 0), rng.randint(-3, limit + 3), scan, scan + 1):
            assert _largest_within(f, limit, guess) == scan, (mode, tt, recv, hold, limit, guess)


def test_an_unpinned_runs_need_known_from_one_engine_is_every_engines():
    """`perf.step._unpinned_need` (gen_side leaves an unpinned run that cannot fit untimed): the KV need an event run
    kept from one StepModel is, float for float, that of the same replica requests run afresh under others
    (other weight bytes and degrees, host work per sequence), every memo emptied."""
    from rlsolve.perf.generate import GenLayout
    from rlsolve.perf.hw import device
    from rlsolve.perf import step as perf_step
    rng = random.Random(71)
    known = 0
    for k in range(6):
        problem = resolve(load_spec(random_spec(rng, tight=k % 2 == 1)))
        pool, wl = problem.pools[0], problem.workload
        tps = [tp for tp in (1, 2, 4) if tp <= pool.gpus_per_node and problem.policy.heads % tp == 0]
        for _ in range(8):
            n_req, cap = rng.choice((3.0, 40.0, 500.0, 3000.0)), rng.choice((7.0, 60.0, 400.0, math.inf))
            fixed = rng.random() < 0.5
            first = perf_step._step_model(problem.policy, device(pool), GenLayout(tp=rng.choice(tps)), 2.0, 0.0, False)
            perf_step._decode_run(first, n_req, wl, 4096.0, math.inf, cap, fixed)
            need = perf_step._unpinned_need(n_req, wl, 4096.0, cap, fixed)
            for table in (perf_step._RUNS, perf_step._TRACES, perf_step._SCHEDULES):
                table.table.clear()
            other = perf_step._step_model(problem.policy, device(pool), GenLayout(tp=rng.choice(tps), pp=2),
                                          rng.choice((1.0, 2.0)), rng.choice((0.0, 2e-5)), rng.random() < 0.5)
            alone = perf_step._decode_run(other, n_req, wl, 4096.0, math.inf, cap, fixed)
            if need is not None:  # (None: a closed-form run, which keeps no events)
                assert need == alone.kv_need, (n_req, cap, fixed)
                known += 1
    assert known > 10, known


def _queue_steps_reference(n_requests, mean_len, max_len, n_total, g, clip, batch_cap, fixed_shares=True):
    """`generate._queue_steps` as first written (the threshold computed per finisher, max() for the last finish)."""
    from bisect import insort
    from rlsolve.perf.generate import _queue
    if batch_cap == math.inf:
        return 0.0
    finished, before, out = [], 0.0, 0.0
    for length, w in _queue(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares):
        need = before - batch_cap + w - 1e-9
        start = 0.0
        if need > 0 and finished:
            start, acc = finished[-1][0], 0.0
            for f, fw in finished:
                acc += fw
                if acc >= need * (1 - 1e-12):
                    start = f
                    break
        insort(finished, (start + length, w))
        before += w
        out = max(out, start + length)
    return out


def test_the_queue_steps_are_those_first_written():
    """`generate._queue_steps` (the decode bound's FIFO schedule of a batch's slots), float for float the reference
    on random replicas, lengths, clips and batch caps."""
    from rlsolve.perf.generate import _queue_steps
    rng = random.Random(73)
    for _ in range(2000):
        args = (rng.choice([3.0, 40.0, 512.0, 2048.0, 4096.0]), rng.choice([300.0, 1000.0, 3000.0]),
                rng.choice([4096.0, 8192.0]), rng.choice([4096.0, 65536.0]), rng.choice([8, 32]),
                rng.choice([None, 0.05]), rng.choice([rng.uniform(1, 3000), float(rng.randint(1, 64)), math.inf]),
                rng.random() < 0.5)
        with np.errstate(divide="ignore"):  # a clipped share maps its top quantile to log1p(-1), then to max
            assert _queue_steps.__wrapped__(*args) == _queue_steps_reference(*args), args
    # caps about the requests' total weight, where `_queue_steps` answers the longest without its loop
    for _ in range(300):
        n = rng.choice([3.0, 40.0, 512.0, 2048.0])
        cap = n * (1 + rng.choice([-1e-6, -1e-9, -1e-12, 0.0, 1e-12, 1e-9, 2e-9, 1e-6])) + rng.choice([0.0, 1e-6, 1.0])
        args = (n, rng.choice([300.0, 3000.0]), 8192.0, rng.choice([4096.0, 65536.0]), rng.choice([8, 32]),
                rng.choice([None, 0.05]), cap, rng.random() < 0.5)
        with np.errstate(divide="ignore"):
            assert _queue_steps.__wrapped__(*args) == _queue_steps_reference(*args), args
