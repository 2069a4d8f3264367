"""The solver: optimality against brute force, validity, determinism, estimate round trip."""
from __future__ import annotations

import gc
import json

import pytest

import rlsolve
from rlsolve.errors import InfeasibleError
from rlsolve.resolve import resolve
from rlsolve.solver import api as solve_module, program as program_module, search, solve
from rlsolve.solver.estimate import estimate
from rlsolve.solver.oracle import oracle
from rlsolve.solver.validate import plan_violations
from rlsolve.spec import load_spec

from conftest import EXAMPLES, small_spec

SMALL = [
    small_spec(),
    small_spec(cluster={"gpu": "A100-SXM-80GB", "nodes": 1, "network": "IB-HDR-200"},
               model={"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "qwen2.5-1.5b", "value": "policy"},
               rl={"algorithm": "ppo"}),
    small_spec(cluster={"gpu": "H100-SXM-80GB", "nodes": 1}, rl={"max_staleness": 0}),
    small_spec(model={"policy": "qwen3-30b-a3b", "reference": None, "reward": "rule"}),
    small_spec(cluster={"gpu": "L40S", "nodes": 2}, model={"policy": "qwen2.5-7b"}),
]


@pytest.mark.parametrize("spec", SMALL, ids=["8b-h100", "ppo-1.5b-a100", "onpolicy", "moe", "l40s"])
def test_cpsat_matches_the_exhaustive_oracle(spec):
    problem = resolve(load_spec(spec))
    found = search(problem)
    assert found.solver.status_name(found.status) == "OPTIMAL"
    best_ms = found.solver.value(found.program.v.step)
    assert best_ms == oracle(problem)
    # and the integer terms agree with the float model's combine() on the chosen plan
    assert solve(spec).time_s.step == pytest.approx(best_ms / 1000, abs=0.004)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_solve_optimal_and_valid(path):
    # optimality and validity, not speed (benchmarks/solve_examples.py times them): a limit no loaded machine
    # reaches, where the default 10 s stopped DeepSeek-V2's enumeration on a 2-core box at load 5
    plan = solve(str(path), time_limit_s=120)
    problem = resolve(load_spec(str(path)))
    assert plan.status == "optimal" and plan.solver.proven_optimal
    assert plan_violations(problem, plan) == []
    for alt in plan.alternatives:
        assert alt.tokens_per_s <= plan.throughput.tokens_per_s + 0.1
    assert plan.explanation[0].startswith("bottleneck phase")


@pytest.mark.parametrize("spec", SMALL[:3], ids=["8b-h100", "ppo", "onpolicy"])
def test_estimate_reproduces_the_solvers_numbers(spec):
    plan = solve(spec)
    again = estimate(spec, plan)
    for section in ("time_s", "throughput", "memory_gb_per_gpu", "metrics"):
        assert getattr(again, section) == getattr(plan, section), section
    assert plan_violations(resolve(load_spec(spec)), again) == []


def test_estimate_accepts_layout_sections_only():
    spec = small_spec()
    plan = solve(spec)
    layout = {k: v for k, v in plan.model_dump().items()
              if k in ("pipeline", "resource_allocation", "placement", "parallelism", "optimization")}
    assert estimate(spec, layout).time_s == plan.time_s


def test_deterministic_mode_gives_byte_identical_plans():
    spec = small_spec()
    outs = {json.dumps(solve(spec).model_dump(mode="json"), sort_keys=True) for _ in range(3)}
    assert len(outs) == 1


def test_deterministic_runner_ups_do_not_depend_on_the_search_path(monkeypatch):
    """Runner-ups tie too (here two async engines of 32 GPUs, tp4 pp2 x4 and tp4 pp4 x2, with the same step,
    GPUs and simplicity): in deterministic mode each is the best plan's tie-break of its solve, so CP-SAT's
    random seed (or any change in how the search runs: presolve, a faster model) picks none of them
    differently. Without the tie-break, eight seeds gave four different lists here."""
    make = program_module._solver
    seed = [7]

    def seeded(time_limit_s, workers):
        solver = make(time_limit_s, workers)
        solver.parameters.random_seed = seed[0]
        return solver

    monkeypatch.setattr(program_module, "_solver", seeded)
    spec = load_spec(str(next(p for p in EXAMPLES if p.stem == "grpo-hetero-h20-h800")))
    spec = spec.model_copy(update={"constraints": spec.constraints.model_copy(
        update={"linear": ["generation.gpus >= 2 * training.gpus"]})})
    lists = set()
    for seed[0] in (7, 1, 2, 4):
        lists.add(tuple(a.summary for a in solve(spec).alternatives))
    assert len(lists) == 1 and len(next(iter(lists))) == 3, lists


def test_solve_is_pure():
    spec = small_spec()
    before = json.dumps(spec, sort_keys=True)
    solve(spec)
    assert json.dumps(spec, sort_keys=True) == before


def test_onpolicy_forbids_async():
    plan = solve(small_spec(rl={"max_staleness": 0}))
    assert plan.pipeline.mode != "async"
    assert all(not a.summary.startswith("async") for a in plan.alternatives)


def test_modes_constraint_is_honoured():
    plan = solve(small_spec(constraints={"modes": ["sync"]}))
    assert plan.pipeline.mode == "sync"


def test_fixed_degrees_are_honoured():
    plan = solve(small_spec(constraints={"training": {"tp": 2}, "generation": {"tp": [2, 4]}}))
    assert plan.parallelism.training.tp == 2
    assert plan.parallelism.generation.tp in (2, 4)


def test_model_that_cannot_fit_is_infeasible_with_numbers():
    spec = small_spec(cluster={"gpu": "L4", "nodes": 1, "gpus_per_node": 2}, model={"policy": "llama-3.1-70b"})
    with pytest.raises(InfeasibleError) as e:
        solve(spec)
    text = " ".join(e.value.reasons)
    assert "GB" in text and "70" in text


def test_solve_pauses_the_garbage_collector_and_leaves_it_as_it_found_it(monkeypatch):
    """solve runs with the cyclic collector off (api._collector_paused) and leaves it on or off as it was, after a
    plan and after an error."""
    seen = []
    real = solve_module._solve
    monkeypatch.setattr(solve_module, "_solve", lambda *a: seen.append(gc.isenabled()) or real(*a))
    infeasible = small_spec(cluster={"gpu": "L4", "nodes": 1, "gpus_per_node": 2}, model={"policy": "llama-3.1-70b"})
    assert gc.isenabled()
    solve(small_spec())
    assert gc.isenabled()
    with pytest.raises(InfeasibleError):
        solve(infeasible)
    assert gc.isenabled() and seen == [False, False]
    gc.disable()
    try:
        solve(small_spec())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_public_api_names():
    assert callable(rlsolve.load_spec) and callable(rlsolve.solve) and callable(rlsolve.estimate)
    assert issubclass(rlsolve.SpecError, ValueError)
    assert issubclass(rlsolve.InfeasibleError, RuntimeError)


def test_kv_memory_binds_for_long_responses():
    plan = solve(small_spec(cluster={"nodes": 1}, rl={"response_len": {"max": 32768, "mean": 16000},
                                                     "prompts_per_step": 128}))
    assert plan.memory_gb_per_gpu.generation.kv_cache > 0
    assert any("KV" in e for e in plan.explanation) or plan.optimization.max_num_seqs is not None or \
        plan.memory_gb_per_gpu.generation.total > 0.9 * plan.memory_gb_per_gpu.generation.capacity
