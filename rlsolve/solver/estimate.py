"""Score a given layout with the performance model: the path `estimate` and the solver's
final plan share, so both report the same numbers."""
from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from rlsolve.errors import SpecError
from rlsolve.perf.generate import GenLayout
from rlsolve.perf.step import QUANT_BYTES, StepEstimate, aux_side, combine, gen_side, train_side
from rlsolve.perf.train import TrainLayout
from rlsolve.plan import LAYOUT_KEYS, Layout, Plan
from rlsolve.resolve import Problem
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


def pool_named(problem: Problem, name: str, field: str):
    for p in problem.pools:
        if p.name == name:
            return p
    if len(problem.pools) == 1:  # a single-pool layout may name its pool anything
        return problem.pools[0]
    raise SpecError(f"unknown pool {name!r}; the cluster's pools: {', '.join(p.name for p in problem.pools)}",
                    field=field)


def check_layout(problem: Problem, lay: Layout) -> None:
    """Structural rules a layout must obey; SpecError names the field and the fix."""
    a = problem.policy
    g, t = lay.parallelism.generation, lay.parallelism.training
    ra = lay.resource_allocation
    if g.tp * g.pp * g.dp != ra.generation.gpus:
        raise SpecError(f"tp*pp*dp = {g.tp * g.pp * g.dp} but resource_allocation.generation.gpus = "
                        f"{ra.generation.gpus}; make them equal", field="layout.parallelism.generation")
    if t.tp * t.pp * t.cp * t.dp != ra.training.gpus:
        raise SpecError(f"tp*pp*cp*dp = {t.tp * t.pp * t.cp * t.dp} but resource_allocation.training.gpus = "
                        f"{ra.training.gpus}; make them equal", field="layout.parallelism.training")
    for role, tp in (("generation", g.tp), ("training", t.tp)):
        if a.heads % tp:
            raise SpecError(f"tp={tp} does not divide the {a.heads} attention heads of {a.name}; use one of "
                            f"{[d for d in range(1, a.heads + 1) if a.heads % d == 0 and d <= 64]}",
                            field=f"layout.parallelism.{role}.tp")
    if t.pp > a.layers:
        raise SpecError(f"pp={t.pp} exceeds the {a.layers} layers", field="layout.parallelism.training.pp")
    if t.ep > 1 and (not a.is_moe or a.experts % t.ep or (t.tp * t.dp * t.cp) % t.ep):
        raise SpecError(f"ep={t.ep} must divide the experts ({a.experts}) and tp*dp*cp ({t.tp * t.dp * t.cp})",
                        field="layout.parallelism.training.ep")
    if t.vp > 1 and a.layers % (t.pp * t.vp):
        raise SpecError(f"vp={t.vp} needs layers ({a.layers}) divisible by pp*vp", field="layout.parallelism.training.vp")
    pg = pool_named(problem, ra.generation.pool, "layout.resource_allocation.generation.pool")
    pt = pool_named(problem, ra.training.pool, "layout.resource_allocation.training.pool")
    if lay.pipeline.mode == "colocated":
        if ra.generation.gpus != ra.training.gpus or pg is not pt:
            raise SpecError("colocated roles share the same GPUs; give both the same pool and count",
                            field="layout.resource_allocation")
        if ra.training.gpus > pt.n_gpus:
            raise SpecError(f"{ra.training.gpus} GPUs requested, pool {pt.name!r} has {pt.n_gpus}",
                            field="layout.resource_allocation.training.gpus")
    elif pg is pt and ra.generation.gpus + ra.training.gpus > pt.n_gpus:
        raise SpecError(f"generation ({ra.generation.gpus}) + training ({ra.training.gpus}) GPUs exceed the "
                        f"{pt.n_gpus} of pool {pt.name!r}", field="layout.resource_allocation")
    else:
        for role, cnt, pool in (("generation", ra.generation.gpus, pg), ("training", ra.training.gpus, pt)):
            if cnt > pool.n_gpus:
                raise SpecError(f"{cnt} GPUs requested, pool {pool.name!r} has {pool.n_gpus}",
                                field=f"layout.resource_allocation.{role}.gpus")
    if lay.pipeline.mode == "async" and problem.spec.rl.max_staleness == 0:
        raise SpecError("async overlap needs rl.max_staleness >= 1", field="layout.pipeline.mode")
    pl = lay.placement
    if problem.reference is None and pl.reference not in ("none",):
        raise SpecError("the spec has no reference model; set placement.reference: none", field="layout.placement.reference")
    if problem.reference is not None and pl.reference == "none":
        raise SpecError("the spec has a reference model; place it (training | cpu_offload | generation | auxiliary)",
                        field="layout.placement.reference")
    if problem.reward is None and pl.reward != "cpu":
        raise SpecError("the reward is rule-based; set placement.reward: cpu", field="layout.placement.reward")
    if problem.reward is not None and pl.reward not in ("training", "generation", "auxiliary"):
        raise SpecError("place the reward model on training, generation or auxiliary", field="layout.placement.reward")
    if lay.pipeline.mode == "colocated" and "generation" in (pl.reference, pl.reward):
        raise SpecError("colocated roles share GPUs; use placement 'training'", field="layout.placement")
    uses_aux = "auxiliary" in (pl.reference, pl.reward)
    if uses_aux and ra.auxiliary is None:
        raise SpecError("placement 'auxiliary' needs resource_allocation.auxiliary {pool, gpus}",
                        field="layout.resource_allocation.auxiliary")
    if ra.auxiliary is not None:
        pa = pool_named(problem, ra.auxiliary.pool, "layout.resource_allocation.auxiliary.pool")
        used = ra.auxiliary.gpus + sum(r.gpus for r, p in ((ra.generation, pg), (ra.training, pt))
                                       if p is pa and not (r is ra.training and lay.pipeline.mode == "colocated"))
        if used > pa.n_gpus:
            raise SpecError(f"{used} GPUs requested in pool {pa.name!r}, which has {pa.n_gpus}",
                            field="layout.resource_allocation.auxiliary.gpus")


def train_layout(lay: Layout) -> TrainLayout:
    t = lay.parallelism.training
    return TrainLayout(tp=t.tp, pp=t.pp, dp=t.dp, cp=t.cp, ep=t.ep, vp=t.vp, zero_stage=t.zero_stage,
                       micro_batch=t.micro_batch, recompute=t.recompute, sequence_parallel=t.sequence_parallel)


def gen_layout(lay: Layout) -> GenLayout:
    g = lay.parallelism.generation
    return GenLayout(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep)


def evaluate_layout(problem: Problem, lay: Layout) -> StepEstimate:
    check_layout(problem, lay)
    ra = lay.resource_allocation
    pg = pool_named(problem, ra.generation.pool, "layout.resource_allocation.generation.pool")
    pt = pool_named(problem, ra.training.pool, "layout.resource_allocation.training.pool")
    pl, opt = lay.placement, lay.optimization
    mode = lay.pipeline.mode
    ts = train_side(problem, pt, train_layout(lay),
                    reference=pl.reference if pl.reference in ("training", "cpu_offload") else "elsewhere",
                    reward="training" if pl.reward == "training" else "elsewhere",
                    reward_quant=opt.reward_quantization)
    if mode == "colocated":
        reserved = 0.0 if opt.train_offload_during_rollout else ts.states
        gs = gen_side(problem, pg, gen_layout(lay), reserved=reserved, kv_cache_gb=opt.kv_cache_gb,
                      max_num_seqs=opt.max_num_seqs)
    else:
        aux = []
        if pl.reference == "generation":
            aux.append(("reference", problem.reference, 2.0))
        if pl.reward == "generation":
            aux.append(("reward", problem.reward, QUANT_BYTES[opt.reward_quantization]))
        gs = gen_side(problem, pg, gen_layout(lay), aux_models=tuple(aux), kv_cache_gb=opt.kv_cache_gb,
                      max_num_seqs=opt.max_num_seqs)
    aux = None
    hosts = frozenset(k for k in ("reference", "reward") if getattr(pl, k) == "auxiliary")
    if hosts:
        pa = pool_named(problem, ra.auxiliary.pool, "layout.resource_allocation.auxiliary.pool")
        aux = aux_side(problem, pa, ra.auxiliary.gpus, hosts, opt.reward_quantization)
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
