"""Plans for a target framework against the exhaustive oracle, which checks the target's placement rules
on the whole plan (where each model runs, in the chosen mode) while the solver has each candidate carry
the modes its own placements are allowed in. Needs no framework installed."""
from __future__ import annotations

import random

import pytest

import rlsolve
from rlsolve import load_spec
from rlsolve.errors import SpecError
from rlsolve.resolve import resolve
from rlsolve.solver.oracle import oracle
from rlsolve.solver.validate import plan_violations

from test_solver_space import _solver_value, random_spec

TARGETS = ("verl", "openrlhf", "nemo-rl")


@pytest.mark.parametrize("seed", range(24))
def test_optimum_for_a_target_equals_the_exhaustive_oracle(seed):
    rng = random.Random(7000 + seed)
    spec = random_spec(rng)
    if rng.random() < 0.5:  # reward models often, so that placements matter
        spec["model"]["reward"] = "policy"
    spec["target"] = {"framework": TARGETS[seed % 3]}
    try:
        problem = resolve(load_spec(spec))
    except SpecError as e:  # the target refuses the job itself (pools, algorithm): named, nothing to compare
        assert "target" in str(e)
        return
    assert _solver_value(problem) == oracle(problem)


def _one_pool_reward_job(target: str, modes: list[str], staleness: int = 1) -> dict:
    return {"cluster": {"gpu": "H100-SXM-80GB", "gpus_per_node": 4, "nodes": 2, "network": "IB-NDR-400"},
            "model": {"policy": {"layers": 4, "hidden": 2048, "heads": 8, "kv_heads": 2, "vocab": 32000},
                      "reference": "policy", "reward": "policy"},
            "rl": {"algorithm": "grpo", "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 512,
                   "response_len": {"max": 2048, "mean": 512}, "mini_batches": 2, "max_staleness": staleness},
            "constraints": {"modes": modes}, "target": {"framework": target}, "solver": {"top_k": 0}}


def test_a_placement_allowed_in_one_disaggregated_mode_only_is_planned_in_that_mode():
    """OpenRLHF 0.11 runs a reward model on the trainers' GPUs in async mode but not in sync mode
    (capabilities.yaml). On one pool that is the only home the reward model has apart from
    colocation, so the disaggregated optimum is async with the reward on the trainers. A rule that
    asked a disaggregated trainer to be allowed in every disaggregated mode found no plan here."""
    spec = _one_pool_reward_job("openrlhf", ["sync", "async"])
    plan = rlsolve.solve(spec)
    assert (plan.pipeline.mode, plan.placement.reward) == ("async", "training")
    problem = resolve(load_spec(spec))
    assert not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)
    # sync alone: OpenRLHF runs the reward model only on a group of its own (--reward.num_nodes/num_gpus_per_node
    # without --train.colocate_all), here on GPUs of the same pool beside the engines and the trainers
    spec["constraints"]["modes"] = ["sync"]
    plan = rlsolve.solve(spec)
    ra = plan.resource_allocation
    assert (plan.pipeline.mode, plan.placement.reward) == ("sync", "auxiliary")
    assert ra.auxiliary.pool == ra.training.pool == ra.generation.pool
    assert ra.generation.gpus + ra.training.gpus + ra.auxiliary.gpus <= 8
    problem = resolve(load_spec(spec))
    assert not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)


def test_a_mode_the_target_refuses_is_named_in_the_diagnosis():
    """verl 0.9.1 has no separate-pool on-policy trainer (sync): with modes [sync, async] and no
    staleness allowed, no plan exists, and the reasons name the target and its source."""
    spec = _one_pool_reward_job("verl", ["sync", "async"], staleness=0)
    spec["model"]["reward"] = "rule"
    with pytest.raises(rlsolve.InfeasibleError) as err:
        rlsolve.solve(spec)
    text = " ".join(err.value.reasons)
    assert "target verl" in text and "mode sync" in text and "source:" in text


# --- the critic's own layout (PPO) ---------------------------------------------------------------

def _ppo_job(target: str = "any") -> dict:
    return {"cluster": {"gpu": "A100-SXM-40GB", "nodes": 4, "gpus_per_node": 4, "network": "IB-NDR-400"},
            "model": {"policy": {"layers": 4, "hidden": 2048, "heads": 4, "kv_heads": 4, "vocab": 32000},
                      "reference": "policy", "reward": "policy", "value": "policy"},
            "rl": {"algorithm": "ppo", "prompts_per_step": 4, "samples_per_prompt": 4, "prompt_len": 512,
                   "response_len": {"max": 2048, "mean": 512}, "mini_batches": 2, "max_staleness": 1},
            "target": {"framework": target}, "solver": {"top_k": 0}}


@pytest.mark.parametrize("target", ["any", "verl", "openrlhf", "nemo-rl"])
def test_the_critics_layout_is_searched_and_equals_the_oracle(target):
    """The critic's own degrees on the training GPUs are part of the search (verl and NeMo-RL: its own;
    OpenRLHF: the actor's), and the optimum equals the exhaustive oracle's, which tries every critic layout
    the rule table allows beside every trainer. NeMo-RL 0.7 runs PPO colocated only, the critic on the
    policy's GPUs, with its value backend's own limits (capabilities.yaml critic_training)."""
    spec = _ppo_job(target)
    if target == "verl":  # colocated (the critic shares the trainers' GPUs; async, a 1-GPU trainer is best),
        spec["constraints"] = {"modes": ["colocated"]}  # 8 layers and a 128k vocabulary: the critic (a value
        spec["model"]["policy"]["layers"] = 8           # head, no LM head) and the trainers want other degrees
        spec["model"]["policy"]["vocab"] = 128000
    plan = rlsolve.solve(spec)
    problem = resolve(load_spec(spec))
    assert plan.parallelism.critic is not None and not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)
    c, t = plan.parallelism.critic, plan.parallelism.training
    if target == "verl":
        assert (c.tp, c.dp) != (t.tp, t.dp)
    if target == "openrlhf":
        assert (c.tp, c.pp, c.cp, c.dp, c.zero_stage, c.micro_batch) == (t.tp, t.pp, t.cp, t.dp, t.zero_stage,
                                                                          t.micro_batch)
    if target == "nemo-rl":
        assert plan.pipeline.mode == "colocated" and plan.placement.value == "training"
        assert c.cp == 1 or c.zero_stage < 3  # DTensor's value model runs no context parallelism


def test_a_written_critic_layout_is_checked_and_scored():
    spec = _ppo_job("verl")
    plan = rlsolve.solve(spec).model_dump(mode="json")
    problem = resolve(load_spec(spec))
    bad = {**plan, "parallelism": {**plan["parallelism"], "critic": {**plan["parallelism"]["critic"], "tp": 3}}}
    from rlsolve.plan import Plan
    assert any("parallelism.critic" in v for v in plan_violations(problem, Plan.model_validate(bad)))
    crit = plan["parallelism"]["critic"]
    slower = {**crit, "micro_batch": 1, "grad_accum": crit["grad_accum"] * crit["micro_batch"], "recompute": "full"}
    other = {**plan, "parallelism": {**plan["parallelism"], "critic": slower}}
    assert rlsolve.estimate(spec, other).time_s.value > rlsolve.estimate(spec, plan).time_s.value


def test_a_reward_group_with_the_actors_degrees_pairs_only_with_trainers_of_its_tp():
    """OpenRLHF 0.11.2 runs a reward model's actor group with the actor's tp x ring GPUs per replica
    (capabilities.yaml shapes.auxiliary_own_layout: false). A reward model that fits only at tp >= 2 on
    its own GPUs of the one pool then forces the trainer's tp: the plan pairs them, and the optimum
    equals the oracle's, which pairs every trainer with every group of the same tp whose GPUs hold
    whole replicas."""
    spec = _one_pool_reward_job("openrlhf", ["sync"])
    spec["cluster"]["gpu"] = "A100-SXM-40GB"
    spec["model"]["reward"] = {"layers": 60, "hidden": 6144, "heads": 48, "kv_heads": 8, "vocab": 32000}
    plan = rlsolve.solve(spec)
    ra, t = plan.resource_allocation, plan.parallelism.training
    assert plan.placement.reward == "auxiliary" and t.tp >= 2 and ra.auxiliary.gpus % (t.tp * t.cp) == 0
    problem = resolve(load_spec(spec))
    assert not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)
    bad = plan.model_dump(mode="json")
    bad["resource_allocation"]["auxiliary"]["gpus"] = 1  # not whole replicas of the actor's tp x cp
    from rlsolve.plan import Plan
    assert any("auxiliary.gpus" in v for v in plan_violations(problem, Plan.model_validate(bad)))


def test_a_reward_model_that_fits_on_no_group_of_its_own_is_named():
    """OpenRLHF in sync mode runs a reward model only on a group of its own: one too large for every
    group the pool can give is the reason, with its size, not a generic 'combination' message."""
    spec = _one_pool_reward_job("openrlhf", ["sync"])
    spec["cluster"] = {"gpu": "L4", "gpus_per_node": 2, "nodes": 1, "network": "IB-NDR-400"}
    spec["model"]["reward"] = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "vocab": 32000}
    with pytest.raises(rlsolve.InfeasibleError) as err:
        rlsolve.solve(spec)
    text = " ".join(err.value.reasons)
    assert "reward model" in text and "only on GPUs of its own" in text and "fit on no group" in text
    assert oracle(resolve(load_spec(spec))) is None


@pytest.mark.parametrize("modes,reward,nodes", [(["sync"], "policy", 2), (["sync", "async"], "policy", 2),
                                               (["sync"], "rule", 3), (["sync", "async", "colocated"], "rule", 2)])
def test_openrlhf_critic_on_a_group_of_its_own_equals_the_oracle(modes, reward, nodes):
    """OpenRLHF 0.11.2 trains a PPO critic beside separate vLLM engines only on a --critic.* group of its
    own (placements sync value: auxiliary), concurrently with the actor (critic_group_concurrent). The
    solver plans that group in sync mode, its GPUs counted, and the exhaustive oracle (which enumerates
    every group count and critic layout itself) finds the same optimum."""
    spec = _one_pool_reward_job("openrlhf", modes)
    spec["rl"]["algorithm"] = "ppo"
    spec["model"]["value"] = "policy"
    spec["model"]["reward"] = reward
    spec["cluster"]["nodes"] = nodes
    plan = rlsolve.solve(spec)
    problem = resolve(load_spec(spec))
    assert not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)
    ra = plan.resource_allocation
    if plan.pipeline.mode == "sync":
        assert plan.placement.value == "auxiliary" and ra.critic is not None and ra.critic.pool == ra.training.pool
    if ra.critic is not None:
        c, t = plan.parallelism.critic, plan.parallelism.training
        assert c.tp * c.pp * c.cp * c.dp == ra.critic.gpus  # the group's own data-parallel degree
        assert (c.tp, c.cp, c.zero_stage, c.micro_batch) == (t.tp, t.cp, t.zero_stage, t.micro_batch)  # one --ds.*
        used = ra.generation.gpus + ra.training.gpus + ra.critic.gpus + (ra.auxiliary.gpus if ra.auxiliary else 0)
        assert used <= 4 * nodes and plan.throughput is not None


@pytest.mark.parametrize("reward", ["rule", "policy"])
def test_nemo_rl_on_two_pools_plans_one_and_equals_the_oracle(reward):
    """NeMo-RL 0.7 runs every role on one pool (capabilities.yaml heterogeneous_pools: its bundles ask for any
    GPU): on an A100 pool and an H100 pool the plan's engines, trainers and reward group share one pool, and the
    optimum equals the exhaustive oracle's, which keeps only combinations on one pool; verl, which pins pools,
    is not held to it (its optimum here spreads over both)."""
    spec = _one_pool_reward_job("nemo-rl", ["colocated", "sync", "async"])
    spec["cluster"] = {"pools": [{"name": "a", "gpu": "A100-SXM-40GB", "nodes": 1, "gpus_per_node": 4,
                                  "network": "IB-NDR-400"},
                                 {"name": "h", "gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 4,
                                  "network": "IB-NDR-400"}]}
    spec["model"]["reward"] = reward
    plan = rlsolve.solve(spec)
    ra = plan.resource_allocation
    assert len({ra.generation.pool, ra.training.pool} | ({ra.auxiliary.pool} if ra.auxiliary else set())) == 1
    assert any("left idle" in line and "one pool" in line for line in plan.explanation)
    problem = resolve(load_spec(spec))
    assert not plan_violations(problem, plan)
    assert _solver_value(problem) == oracle(problem)
    spec["target"] = {"framework": "verl"}
    spread = rlsolve.solve(spec).resource_allocation
    assert spread.generation.pool != spread.training.pool
    problem = resolve(load_spec(spec))
    assert _solver_value(problem) == oracle(problem)
