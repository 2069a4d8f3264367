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
    spec["constraints"]["modes"] = ["sync"]  # sync alone: the reward model has no home the target runs
    with pytest.raises(rlsolve.InfeasibleError):
        rlsolve.solve(spec)
    assert oracle(resolve(load_spec(spec))) is None


def test_a_mode_the_target_refuses_is_named_in_the_diagnosis():
    """verl 0.9.1 has no separate-pool on-policy trainer (sync): with modes [sync, async] and no
    staleness allowed, no plan exists, and the reasons name the target and its source."""
    spec = _one_pool_reward_job("verl", ["sync", "async"], staleness=0)
    spec["model"]["reward"] = "rule"
    with pytest.raises(rlsolve.InfeasibleError) as err:
        rlsolve.solve(spec)
    text = " ".join(err.value.reasons)
    assert "target verl" in text and "mode sync" in text and "source:" in text
