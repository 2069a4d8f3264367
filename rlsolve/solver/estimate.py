"""Score a given layout with the performance model: the path `estimate` and the solver's
final plan share, so both report the same numbers."""
from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from rlsolve.errors import SpecError
from rlsolve.perf.step import (QUANT_BYTES, StepEstimate, aux_side, combine, engine_shares_fixed, gen_side,
                               rollout_steps_in_flight, train_side)
from rlsolve.plan import LAYOUT_KEYS, Layout, Plan
from rlsolve.resolve import Problem
from rlsolve.solver.rules import (aux_shares_actor_degrees, critic_layout, engine_can_cap, layout_violations,
                                  pool_named, role_layouts)
from rlsolve.spec import Spec, format_validation_error, load_spec, read_yaml


def to_layout(layout: Any) -> Layout:
    """Accept a Plan, a Layout, a dict or a YAML path holding at least the layout sections."""
    if isinstance(layout, Layout):
        return Layout.model_validate(layout.model_dump(include=set(LAYOUT_KEYS)))
    if isinstance(layout, (str, os.PathLike)):
        layout = read_yaml(layout, what="layout file")
    if not isinstance(layout, dict):
        raise SpecError("a layout must be a mapping with pipeline, resource_allocation, parallelism", field="layout")
    data = {k: v for k, v in layout.items() if k in LAYOUT_KEYS}
    try:
        return Layout.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, prefix="layout.") from None


def check_layout(problem: Problem, lay: Layout) -> None:
    """The rule table's rules a layout must obey (rules.layout_violations, without the user's
    constraints); SpecError names the field and the fix of the first one broken."""
    bad = layout_violations(problem, lay, user=False)
    if bad:
        v = bad[0]
        raise SpecError(v.message, field="layout." + v.field)


def evaluate_layout(problem: Problem, lay: Layout) -> StepEstimate:
    check_layout(problem, lay)
    g_lay, t_lay = role_layouts(lay)
    ra = lay.resource_allocation
    pg = pool_named(problem, ra.generation.pool, "layout.resource_allocation.generation.pool")
    pt = pool_named(problem, ra.training.pool, "layout.resource_allocation.training.pool")
    pl, opt = lay.placement, lay.optimization
    mode = lay.pipeline.mode
    can_cap = engine_can_cap(problem, g_lay)  # the engine searches max_num_seqs where the target sets it
    fixed = engine_shares_fixed(mode, problem.workload.framework)  # the step waits for the slowest engine's share
    ts = train_side(problem, pt, t_lay,
                    reference=pl.reference if pl.reference in ("training", "cpu_offload") else "elsewhere",
                    reward="training" if pl.reward == "training" else "elsewhere",
                    reward_quant=opt.reward_quantization, critic=critic_layout(lay),
                    critic_gpus=ra.critic.gpus if ra.critic is not None else 0)
    if mode == "colocated":
        reserved = 0.0 if opt.train_offload_during_rollout else ts.states
        gs = gen_side(problem, pg, g_lay, reserved=reserved, kv_cache_gb=opt.kv_cache_gb,
                      max_num_seqs=opt.max_num_seqs, cap_search=can_cap, fixed_shares=fixed)
    else:
        aux = []
        if pl.reference == "generation":
            aux.append(("reference", problem.reference, 2.0))
        if pl.reward == "generation":
            aux.append(("reward", problem.reward, QUANT_BYTES[opt.reward_quantization]))
        gs = gen_side(problem, pg, g_lay, aux_models=tuple(aux), kv_cache_gb=opt.kv_cache_gb,
                      max_num_seqs=opt.max_num_seqs, in_flight=rollout_steps_in_flight(mode, lay.pipeline.staleness),
                      cap_search=can_cap, fixed_shares=fixed)
    aux = None
    hosts = frozenset(k for k in ("reference", "reward") if getattr(pl, k) == "auxiliary")
    if hosts:
        pa = pool_named(problem, ra.auxiliary.pool, "layout.resource_allocation.auxiliary.pool")
        # a target that runs the group with the actor's degrees: the actor's tp
        aux = aux_side(problem, pa, ra.auxiliary.gpus, hosts, opt.reward_quantization,
                       tp=lay.parallelism.training.tp if aux_shares_actor_degrees(problem) else None)
    return combine(problem, mode, gs, ts, offload_states=opt.train_offload_during_rollout, pool_train=pt, pool_gen=pg,
                   aux=aux)


def estimate(spec: "Spec | dict | str", layout: Any, profile: dict | None = None, objective: str | None = None) -> Plan:
    """Re-score a layout (a plan or its layout sections) under the performance model."""
    from rlsolve.resolve import resolve
    from rlsolve.solver.report import build_plan
    spec = load_spec(spec)
    problem = resolve(spec, profile)
    lay = to_layout(layout)
    if objective is None and isinstance(layout, Plan):
        objective = layout.objective.name
    est = evaluate_layout(problem, lay)
    return build_plan(problem, lay, est, status="estimate", objective=objective or spec.objective)
