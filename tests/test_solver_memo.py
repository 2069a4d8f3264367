"""Exactness of the solver's speed-only paths: each answers what the general path it stands for
answers, on random inputs (the plans must not change by one bit: benchmarks/plan_dump.py)."""
from __future__ import annotations

import random
from itertools import product
from pathlib import Path

from rlsolve.perf.train import TrainLayout
from rlsolve.resolve import resolve
from rlsolve.solver.candidates import _critics_for, _with_critics
from rlsolve.solver.rules import RECOMPUTE, critic_like_policy, micro_batches, role_counts, train_bases, train_shapes
from rlsolve.spec import load_spec

from test_solver_space import random_spec

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
                    lays = [TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero, micro_batch=mb,
                                        recompute=rec, sequence_parallel=tp > 1)
                            for (ep, vp, zero), rec in product(train_bases(problem, tp, pp, cp, dp), RECOMPUTE)]
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
