"""solve(spec) -> Plan: enumerate candidates, pick the best pair with CP-SAT, explain it.

Pure: prints nothing, writes nothing, does not mutate its input."""
from __future__ import annotations

import time
from typing import Any

from ortools.sat.python import cp_model

from rlsolve.errors import InfeasibleError, SpecError
from rlsolve.perf.hw import GB
from rlsolve.plan import (Alternative, GenParallel, Layout, Optimization, Parallelism, Pipeline, PlacementSection,
                          Plan, ResourceAllocation, RoleGPUs, SolverInfo, TrainParallel)
from rlsolve.resolve import Problem, resolve
from rlsolve.solver.candidates import AuxCand, Candidates, GenCand, TrainCand, enumerate_candidates, modes_allowed
from rlsolve.solver.diagnose import diagnose
from rlsolve.solver.estimate import evaluate_layout
from rlsolve.solver.program import Program, run
from rlsolve.solver.report import build_plan
from rlsolve.spec import Spec, load_spec

SOLVER_KEYS = {"time_limit_s", "workers", "deterministic", "top_k"}


def framework_for(t: TrainCand) -> str:
    L = t.layout
    if L.tp == L.pp == L.cp == L.ep == 1 and L.zero_stage == 3:
        return "fsdp"
    return "megatron"


def make_program(problem: Problem, cands: Candidates, modes: list[str], objective: str = "throughput") -> Program:
    """The CP-SAT program for these candidates, with its objective set."""
    budget = problem.spec.constraints.max_price_per_hour_usd
    prog = Program(cands, modes, [p.n_gpus for p in problem.pools], _aux_names(problem),
                   [round(p.price_per_gpu_hour_usd * 1000) for p in problem.pools],
                   None if budget is None else int(budget * 1000))
    if objective == "cost":
        prog.minimize_cost()
    else:
        prog.minimize_step()
    return prog


def cand_layout(problem: Problem, mode: str, gc: GenCand, tc: TrainCand, ac: AuxCand | None = None) -> Layout:
    g, t = gc.layout, tc.layout
    aux_hosts = ac.hosts if ac is not None else frozenset()

    def where(role: str, on_training: str) -> str:
        if role in gc.hosts:
            return "generation"
        return "auxiliary" if role in aux_hosts else on_training

    placement = PlacementSection(
        reference="none" if problem.reference is None else where("reference", tc.reference),
        reward="cpu" if problem.reward is None else where("reward", "training"),
        value="training" if problem.value is not None else "none")
    quant = gc.reward_quant if "reward" in gc.hosts else (ac.reward_quant if "reward" in aux_hosts else tc.reward_quant)
    side = gc.side
    engine_bytes = side.weights + side.kv_cache + side.other
    opt = Optimization(reference_offload=placement.reference == "cpu_offload", reward_quantization=quant,
                       train_offload_during_rollout=tc.offload_states, kv_cache_gb=side.kv_cache / GB,
                       max_num_seqs=side.max_num_seqs,
                       gpu_memory_utilization=round(min(0.99, engine_bytes / (problem.pools[gc.pool].gpu.memory_gb * GB)),
                                                    3))
    return Layout(
        pipeline=Pipeline(mode=mode, staleness=problem.spec.rl.max_staleness if mode == "async" else 0),
        resource_allocation=ResourceAllocation(
            generation=RoleGPUs(pool=problem.pools[gc.pool].name, gpus=gc.gpus, engine="vllm"),
            training=RoleGPUs(pool=problem.pools[tc.pool].name, gpus=tc.gpus, framework=framework_for(tc)),
            auxiliary=None if ac is None else RoleGPUs(pool=problem.pools[ac.pool].name, gpus=ac.gpus, engine="vllm")),
        placement=placement,
        parallelism=Parallelism(
            generation=GenParallel(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep),
            training=TrainParallel(tp=t.tp, pp=t.pp, dp=t.dp, cp=t.cp, ep=t.ep, vp=t.vp, zero_stage=t.zero_stage,
                                   micro_batch=t.micro_batch,
                                   grad_accum=max(1, problem.spec.rl.samples // problem.spec.rl.mini_batches
                                                  // (t.dp * t.micro_batch)),
                                   recompute=t.recompute, sequence_parallel=t.sequence_parallel)),
        optimization=opt)


def _aux_names(problem: Problem) -> list[str]:
    return [n for n in ("reference", "reward") if getattr(problem, n) is not None]


def _summary(lay: Layout) -> str:
    g, t = lay.parallelism.generation, lay.parallelism.training
    return (f"{lay.pipeline.mode}: gen {lay.resource_allocation.generation.gpus} GPUs tp{g.tp} pp{g.pp} x{g.dp}; "
            f"train {lay.resource_allocation.training.gpus} GPUs tp{t.tp} pp{t.pp} cp{t.cp} dp{t.dp} ep{t.ep} "
            f"ZeRO-{t.zero_stage} mb{t.micro_batch} recompute={t.recompute}")


def _why(best: Plan, alt: Plan) -> str:
    terms = []
    for k in ("decode", "prefill", "train", "old_logprob", "reference", "value", "weight_sync", "switch"):
        d = getattr(alt.time_s, k) - getattr(best.time_s, k)
        if abs(d) >= 0.05 * best.time_s.step:
            terms.append(f"{k} {'+' if d > 0 else ''}{d:.1f} s")
    base = f"step {alt.time_s.step:.1f} s vs {best.time_s.step:.1f} s"
    if alt.time_s.step - best.time_s.step < 0.0015:
        return base + ": a tie within the 1 ms resolution, lost on the tie-break (fewer GPUs, simpler layout)"
    return base + (" (" + ", ".join(terms) + ")" if terms else "")


def solve(spec: "Spec | dict | str", objective: str | None = None, profile: dict | None = None,
          **solver_options: Any) -> Plan:
    """Return the throughput-optimal plan for `spec` (raises SpecError / InfeasibleError)."""
    t0 = time.perf_counter()
    spec = load_spec(spec)
    unknown = set(solver_options) - SOLVER_KEYS
    if unknown:
        raise TypeError(f"unknown solver option(s): {sorted(unknown)}")
    opts = spec.solver.model_copy(update=solver_options)
    objective = objective or spec.objective
    if objective not in ("throughput", "cost"):
        raise SpecError(f"unknown objective {objective!r}; use throughput or cost", field="objective")
    problem = resolve(spec, profile)
    # with a cost objective or a price cap, fewer GPUs can be better: score every count
    all_counts = objective == "cost" or spec.constraints.max_price_per_hour_usd is not None
    cands = enumerate_candidates(problem, all_counts=all_counts)
    if not cands.gen or not cands.train:
        raise InfeasibleError(diagnose(problem))
    modes = modes_allowed(problem)
    program = make_program(problem, cands, modes, objective)
    solver, status = run(program, opts.time_limit_s, opts.workers, opts.deterministic)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError(diagnose(problem))
    gc, tc, mode, ac = _chosen(program, solver, cands)
    lay = cand_layout(problem, mode, gc, tc, ac)
    est = evaluate_layout(problem, lay)
    bound = solver.best_objective_bound
    val = solver.objective_value
    gap = 0.0 if status == cp_model.OPTIMAL else (abs(val - bound) / max(abs(val), 1.0))
    info = SolverInfo(wall_s=None, proven_optimal=status == cp_model.OPTIMAL, gap=round(gap, 6),
                      variables=len(program.m.proto.variables), candidates=len(cands.gen) + len(cands.train),
                      layouts_scored=cands.evaluated,
                      status_name=solver.status_name(status))
    plan = build_plan(problem, lay, est, status="optimal" if status == cp_model.OPTIMAL else "feasible",
                      solver=info, objective=objective)
    alts = _alternatives(problem, cands, modes, plan, (gc.id, tc.id, mode), opts, objective)
    plan.alternatives = alts
    # a clock reading would break byte-identical output in deterministic mode
    plan.solver.wall_s = None if opts.deterministic else round(time.perf_counter() - t0, 3)
    return plan


def _chosen(program: Program, solver: cp_model.CpSolver, cands: Candidates
            ) -> tuple[GenCand, TrainCand, str, AuxCand | None]:
    gc = next(c for c in cands.gen if solver.value(program.v.gen[c.id]))
    tc = next(c for c in cands.train if solver.value(program.v.train[c.id]))
    ac = next((c for c in cands.aux if solver.value(program.v.aux[c.id])), None)
    mode = next(k for k, var in program.v.mode.items() if solver.value(var))
    return gc, tc, mode, ac


def _alternatives(problem: Problem, cands: Candidates, modes: list[str], best: Plan, chosen, opts, objective) -> list[Alternative]:
    """Runner-ups: the best plan of every other mode, then the next distinct plans."""
    out: list[Alternative] = []
    if opts.top_k <= 0:
        return out
    seen = {chosen}
    shown = {_summary(best.layout())}
    tries: list[tuple[str | None, bool]] = [(m, False) for m in modes if m != chosen[2]] + [(None, True)] * (2 * opts.top_k)
    for mode, exclude in tries:
        if len(out) >= opts.top_k:
            break
        prog = make_program(problem, cands, modes, objective)
        if mode:
            prog.m.add(prog.v.mode[mode] == 1)
        for g_id, t_id, _ in seen:
            prog.forbid(g_id, t_id)
        # one search thread: reproducible without the tie-break solve the main plan needs
        solver, status = run(prog, opts.time_limit_s, 1, False)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue
        gc, tc, m, ac = _chosen(prog, solver, cands)
        seen.add((gc.id, tc.id, m))
        lay = cand_layout(problem, m, gc, tc, ac)
        if _summary(lay) in shown:  # same degrees, differing only in a detail: not a distinct plan
            continue
        shown.add(_summary(lay))
        try:
            alt = build_plan(problem, lay, evaluate_layout(problem, lay), status="feasible", objective=objective)
        except InfeasibleError:
            continue
        if objective == "cost":
            gap = alt.objective.value / best.objective.value - 1.0
        else:
            gap = 1.0 - alt.throughput.tokens_per_s / best.throughput.tokens_per_s
        out.append(Alternative(summary=_summary(lay), tokens_per_s=alt.throughput.tokens_per_s, gap=round(gap, 4),
                               why=_why(best, alt)))
    return out
