"""solve(spec) -> Plan: enumerate candidates, pick the best pair with CP-SAT, explain it.

Pure: prints nothing, writes nothing, does not mutate its input."""
from __future__ import annotations

import gc as collector
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.perf.hw import GB
from rlsolve.plan import (Alternative, GenParallel, Layout, Optimization, Parallelism, Pipeline, PlacementSection,
                          Plan, ResourceAllocation, RoleGPUs, SolverInfo, TrainParallel)
from rlsolve.resolve import Problem, resolve
from rlsolve.linear import parse_linear
from rlsolve.solver.budget import Deadline
from rlsolve.solver.candidates import AuxCand, Candidates, GenCand, TrainCand, enumerate_candidates
from rlsolve.solver.diagnose import diagnose
from rlsolve.solver.estimate import evaluate_layout
from rlsolve.solver.program import Program, run
from rlsolve.solver.report import build_plan
from rlsolve.frameworks.rules import plan_strategy
from rlsolve.solver.rules import aux_group_violations, aux_models, aux_shares_actor_degrees, modes_allowed, one_pool
from rlsolve.spec import Spec, load_spec

SOLVER_KEYS = {"time_limit_s", "workers", "deterministic", "top_k"}
# CP-SAT's deterministic time units for one runner-up solve: reproducible under any load
ALT_DETERMINISTIC_TIME = 1.0


def framework_for(problem: Problem, t: TrainCand) -> str:
    """The training engine: FSDP for ZeRO-3 without model parallelism, else Megatron, unless
    the target runs the layout only on another of its strategies."""
    L, target = t.layout, problem.spec.target
    return plan_strategy(target.framework, target.version, L.tp, L.pp, L.cp, L.ep, L.vp, L.zero_stage, L.recompute)


def make_program(problem: Problem, cands: Candidates, modes: list[str], objective: str = "throughput",
                 linear: list | None = None, aux_rule: bool = True) -> Program:
    """The CP-SAT program for these candidates, with its objective set (`aux_rule` False: without the
    rule table's refused auxiliary-group pairs, which only the infeasibility explanation asks for)."""
    budget = problem.spec.constraints.max_price_per_hour_usd
    if linear is None:
        linear = [parse_linear(t) for t in problem.spec.constraints.linear]
    prog = Program(cands, modes, [p.n_gpus for p in problem.pools], aux_models(problem),
                   [round(p.price_per_gpu_hour_usd * 1000) for p in problem.pools],
                   None if budget is None else int(budget * 1000), linear, one_pool=one_pool(problem),
                   aux_apart=_aux_apart(problem, cands) if aux_rule else frozenset())
    if objective == "cost":
        prog.minimize_cost()
    else:
        prog.minimize_step()
    return prog


def _aux_apart(problem: Problem, cands: Candidates) -> frozenset[tuple[int, int]]:
    """(auxiliary row, training row) pairs of the actor's tp that the rule table refuses together
    (`aux_group_violations`: a group run with the actor's degrees and batch flags)."""
    verdicts: dict[tuple, bool] = {}  # by what the rule reads: the group's GPUs and the trainer's degrees
    out = set()
    for a in cands.aux:
        if a.actor_tp is None:
            continue
        for x in cands.train:
            lay = x.layout
            if lay.tp != a.actor_tp:
                continue
            key = (a.gpus, lay.tp, lay.cp, lay.micro_batch)
            if key not in verdicts:
                verdicts[key] = bool(aux_group_violations(problem, a.gpus, lay))
            if verdicts[key]:
                out.add((a.id, x.id))
    return frozenset(out)


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
        value="none" if problem.value is None else ("auxiliary" if tc.critic_gpus else "training"))
    quant = gc.reward_quant if "reward" in gc.hosts else (ac.reward_quant if "reward" in aux_hosts else tc.reward_quant)
    side = gc.side
    engine_bytes = side.weights + side.kv_cache + side.other
    opt = Optimization(reference_offload=placement.reference == "cpu_offload", reward_quantization=quant,
                       train_offload_during_rollout=tc.offload_states, kv_cache_gb=side.kv_cache / GB,
                       max_num_seqs=side.max_num_seqs,
                       gpu_memory_utilization=round(min(0.99, engine_bytes / problem.pools[gc.pool].gpu.memory_bytes),
                                                    3))
    return Layout(
        pipeline=Pipeline(mode=mode, staleness=problem.workload.max_staleness if mode == "async" else 0),
        resource_allocation=ResourceAllocation(
            generation=RoleGPUs(pool=problem.pools[gc.pool].name, gpus=gc.gpus, engine="vllm"),
            training=RoleGPUs(pool=problem.pools[tc.pool].name, gpus=tc.side.gpus,
                              framework=framework_for(problem, tc)),
            auxiliary=None if ac is None else RoleGPUs(pool=problem.pools[ac.pool].name, gpus=ac.gpus, engine="vllm"),
            critic=None if not tc.critic_gpus else RoleGPUs(pool=problem.pools[tc.pool].name, gpus=tc.critic_gpus,
                                                            framework=framework_for(problem, tc))),
        placement=placement,
        parallelism=Parallelism(
            generation=GenParallel(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep),
            training=_train_parallel(problem, t),
            critic=None if tc.critic is None else _train_parallel(problem, tc.critic)),
        optimization=opt)


def _train_parallel(problem: Problem, t) -> TrainParallel:
    return TrainParallel(tp=t.tp, pp=t.pp, dp=t.dp, cp=t.cp, ep=t.ep, vp=t.vp, zero_stage=t.zero_stage,
                         micro_batch=t.micro_batch,
                         grad_accum=max(1, problem.workload.global_batch // (t.dp * t.micro_batch)),
                         recompute=t.recompute, sequence_parallel=t.sequence_parallel)


def _summary(lay: Layout) -> str:
    g, t = lay.parallelism.generation, lay.parallelism.training
    return (f"{lay.pipeline.mode}: gen {lay.resource_allocation.generation.gpus} GPUs tp{g.tp} pp{g.pp} x{g.dp}; "
            f"train {lay.resource_allocation.training.gpus} GPUs tp{t.tp} pp{t.pp} cp{t.cp} dp{t.dp} ep{t.ep} "
            f"ZeRO-{t.zero_stage} mb{t.micro_batch} recompute={t.recompute}"
            + (f"; critic {lay.resource_allocation.critic.gpus} GPUs of its own" if lay.resource_allocation.critic
               else ""))


def _why(best: Plan, alt: Plan) -> str:
    terms = []
    for k in ("decode", "prefill", "train", "old_logprob", "reference", "value", "weight_sync", "switch"):
        d = getattr(alt.time_s, k) - getattr(best.time_s, k)
        if abs(d) >= 0.05 * best.time_s.step:
            terms.append(f"{k} {'+' if d > 0 else ''}{d:.1f} s")
    digits = 1 if abs(alt.time_s.step - best.time_s.step) >= 0.05 else 3  # never "31.1 s vs 31.1 s"
    base = f"step {alt.time_s.step:.{digits}f} s vs {best.time_s.step:.{digits}f} s"
    if alt.time_s.step - best.time_s.step < 0.0015:
        return base + ": a tie within the 1 ms resolution, lost on the tie-break (fewer GPUs, simpler layout)"
    return base + (" (" + ", ".join(terms) + ")" if terms else "")


def solve(spec: "Spec | dict | str", objective: str | None = None, profile: dict | None = None,
          **solver_options: Any) -> Plan:
    """Return the best plan for `spec`: status `optimal` when CP-SAT proves it over the whole
    legal space, `feasible` (with the gap) when the time limit stopped the search first.

    Raises SpecError (bad input), InfeasibleError (proven: no plan exists) or NoAnswerError
    (no plan found within solver.time_limit_s, which bounds the whole call)."""
    t0 = time.perf_counter()
    spec = load_spec(spec)
    unknown = set(solver_options) - SOLVER_KEYS
    if unknown:
        raise TypeError(f"unknown solver option(s): {sorted(unknown)}")
    opts = spec.solver.model_copy(update=solver_options)
    objective = objective or spec.objective
    if objective not in ("throughput", "cost"):
        raise SpecError(f"unknown objective {objective!r}; use throughput or cost", field="objective")
    deadline = Deadline(opts.time_limit_s)
    with _collector_paused():
        return _solve(spec, objective, profile, opts, deadline, t0)


@contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for one solve, as it was before afterwards. The search allocates
    millions of short-lived tuples, freed by reference counting; their count alone set off full collections
    that scan every object the memos hold: 0.10-0.13 s of the 70B example's 0.42-0.45 s and up to 0.3 s of
    DeepSeek-V2's (in one process, alternated). A solve leaves a few thousand cyclic objects, which the next
    collection after it frees (peak memory of those two solves: 177.6 MB with it, 177.7 MB without)."""
    was = collector.isenabled()
    collector.disable()
    try:
        yield
    finally:
        if was:
            collector.enable()


def _solve(spec: Spec, objective: str, profile: dict | None, opts, deadline: Deadline, t0: float) -> Plan:
    """`solve` once its input is read: resolve, search, the plan and its runner-ups."""
    problem = resolve(spec, profile)
    found = search(problem, objective, opts.workers, opts.deterministic, deadline)
    program, solver, status, cands, modes = found.program, found.solver, found.status, found.cands, found.modes
    gc, tc, mode, ac = _chosen(program, solver, cands)
    lay = cand_layout(problem, mode, gc, tc, ac)
    est = evaluate_layout(problem, lay)
    bound = solver.best_objective_bound
    val = solver.objective_value
    proven = status == cp_model.OPTIMAL
    gap = 0.0 if proven else (abs(val - bound) / max(abs(val), 1.0))
    info = SolverInfo(wall_s=None, proven_optimal=proven, gap=round(gap, 6),
                      variables=len(program.m.proto.variables), candidates=len(cands.gen) + len(cands.train),
                      layouts_scored=cands.evaluated, status_name=solver.status_name(status),
                      stopped_by=None if proven else f"the time limit of {opts.time_limit_s:g} s (solver.time_limit_s)")
    plan = build_plan(problem, lay, est, status="optimal" if proven else "feasible", solver=info, objective=objective)
    plan.alternatives = _alternatives(problem, program, cands, modes, plan, (gc.id, tc.id, mode), opts, objective,
                                      deadline)
    # a clock reading would break byte-identical output in deterministic mode
    plan.solver.wall_s = None if opts.deterministic else round(time.perf_counter() - t0, 3)
    return plan


@dataclass
class Search:
    program: Program
    solver: Any
    status: int
    cands: Candidates
    modes: list[str]


def search(problem: Problem, objective: str = "throughput", workers: int = 2, deterministic: bool = True,
           deadline: Deadline | None = None, explain: bool = True, aux_rule: bool = True) -> Search:
    """Enumerate, build and solve: the optimum in the program's units (`program.v.step` for
    throughput, `v.extra["cost"]` for cost), which the oracle tests compare with brute force.
    Raises InfeasibleError (proven; its reasons only with `explain`) or NoAnswerError (out of time).
    `aux_rule` False lifts the auxiliary-group pairing rule (`_binding_rules` asks so)."""
    deadline = deadline or Deadline(None)
    linear = [parse_linear(t) for t in problem.spec.constraints.linear]
    # with a cost objective, a price cap or a linear constraint, fewer GPUs can be better
    all_counts = objective == "cost" or problem.spec.constraints.max_price_per_hour_usd is not None or bool(linear)
    cands = enumerate_candidates(problem, all_counts=all_counts, deadline=deadline, keep_apart=_mentioned(linear),
                                 bounded=not all_counts)

    def why() -> list[str]:
        return diagnose(problem, deadline, lambda: _binding_rules(problem, objective, deadline)) if explain else []

    if not cands.gen or not cands.train:
        raise InfeasibleError(why())
    modes = modes_allowed(problem)
    program = make_program(problem, cands, modes, objective, linear, aux_rule)
    deadline.check("building the program", now=True)
    limit = deadline.left() if deadline.limit_s is not None else 3600.0
    solver, status = run(program, limit, workers, deterministic)
    if status in (cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
        raise InfeasibleError(why())
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise NoAnswerError(deadline.limit_s or limit, "the CP-SAT search")
    return Search(program, solver, status, cands, modes)


def _binding_rules(problem: Problem, objective: str, deadline: Deadline) -> list[str]:
    """The rules the relaxed diagnosis model leaves out (diagnose.py asks when it finds every constraint
    group satisfiable on its own): the user's linear constraints and the target's pairing of an auxiliary
    group with the trainer's batch. The search runs again without each one alone; each whose removal
    lets a plan exist is binding, and is named with what the plan found without it does instead. A rule
    whose search the time limit stopped is named as not checked (no answer is not infeasibility)."""
    out, unchecked = [], []
    linear = problem.spec.constraints.linear
    for i, text in enumerate(linear):
        cons = problem.spec.constraints.model_copy(update={"linear": [t for j, t in enumerate(linear) if j != i]})
        found = _lifted(replace(problem, spec=problem.spec.model_copy(update={"constraints": cons})), objective,
                        deadline)
        if found is _NO_ANSWER:
            unchecked.append(f"constraints.linear {text!r}")
        elif found is not None:
            lc = parse_linear(text)
            values = ", ".join(f"{name} = {found.solver.value(found.program.v.degrees[name])}" for name in lc.terms)
            out.append(f"constraints.linear {text!r} leaves no plan together with the other constraints; without it "
                       f"there is a plan, with {values}")
    if aux_shares_actor_degrees(problem):
        found = _lifted(problem, objective, deadline, aux_rule=False)
        if found is _NO_ANSWER:
            unchecked.append(f"target {problem.spec.target.framework}'s auxiliary-group rule")
        elif found is not None:
            _, tc, _, ac = _chosen(found.program, found.solver, found.cands)
            broken = aux_group_violations(problem, ac.gpus, tc.layout) if ac is not None else []
            out += [f"target {problem.spec.target.framework}: the plan that fits every other rule breaks this one: "
                    f"{v.message}; leave GPUs idle (a constraint that does not fix the GPU total), change "
                    f"rl.prompts_per_step or samples_per_prompt, or use target any" for v in broken]
    if unchecked:
        out.append(f"not checked within the time limit of {deadline.limit_s:g} s: whether lifting "
                   f"{', '.join(unchecked)} alone gives a plan; raise --time-limit for the explanation")
    return out


_NO_ANSWER = object()


def _lifted(problem: Problem, objective: str, deadline: Deadline, aux_rule: bool = True):
    """The search on a problem with one rule lifted: its Search, None when it is infeasible too, or
    _NO_ANSWER when the time limit stopped it."""
    try:
        return search(problem, objective, 1, True, deadline, explain=False, aux_rule=aux_rule)
    except InfeasibleError:
        return None
    except NoAnswerError:
        return _NO_ANSWER


def _mentioned(linear: list) -> frozenset:
    """Degree names the user's linear constraints mention: candidates that differ in them
    are not compared for dominance."""
    return frozenset(name for lc in linear for name in lc.terms)


def _chosen(program: Program, solver: cp_model.CpSolver, cands: Candidates
            ) -> tuple[GenCand, TrainCand, str, AuxCand | None]:
    gc = next(c for c in cands.gen if solver.value(program.v.gen[c.id]))
    tc = next(c for c in cands.train if solver.value(program.v.train[c.id]))
    ac = next((c for c in cands.aux if solver.value(program.v.aux[c.id])), None)
    mode = next(k for k, var in program.v.mode.items() if solver.value(var))
    return gc, tc, mode, ac


def _alternatives(problem: Problem, program: Program, cands: Candidates, modes: list[str], best: Plan, chosen,
                  opts, objective, deadline: Deadline) -> list[Alternative]:
    """Runner-ups from the same program: the best plan of every other mode (solved on a copy with
    the mode fixed: `run`'s `fixed`), then the next distinct plans, each excluding the pairs
    already shown by a cut added to the one model (no model is rebuilt). One search thread, a
    deterministic-time limit and, in deterministic mode, the best plan's tie-break keep them
    reproducible; whatever the deadline leaves no time for is left out."""
    out: list[Alternative] = []
    if opts.top_k <= 0:
        return out
    seen = {chosen}
    shown = {_summary(best.layout())}
    program.forbid(chosen[0], chosen[1])
    tries: list[str | None] = [m for m in modes if m != chosen[2]] + [None] * (2 * opts.top_k)
    for mode in tries:
        if len(out) >= opts.top_k or deadline.left() < 0.05:
            break
        # deterministic: of equal plans the one the best plan's tie-break would pick, whatever path the search took
        solver, status = run(program, min(deadline.left(), opts.time_limit_s), 1, opts.deterministic,
                             deterministic_time=ALT_DETERMINISTIC_TIME, fixed=(program.v.mode[mode],) if mode else ())
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue
        gc, tc, m, ac = _chosen(program, solver, cands)
        seen.add((gc.id, tc.id, m))
        program.forbid(gc.id, tc.id)
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
