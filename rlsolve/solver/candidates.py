"""Score every legal layout of each role: the per-role tables the CP-SAT program picks from.

The layouts come from the rule table (`rules.py`: the universe of each role, filtered by its
violations); each is scored once by the performance model. A candidate is one side of a
plan (generation, training, or an auxiliary group) with every decision of that side fixed.

Only dominated candidates are dropped, each by a rule that cannot change the optimum (and
each has a property test in tests/test_solver_space.py):
- training, per (pool, mode, GPUs, hosted models, reference placement, quantization, and the
  refit gather async engines wait for): the Pareto front of (time, memory held during rollout);
  nothing else of a training candidate enters the program (its time holds its refit gather);
- disaggregated training across GPU counts, per (pool, hosted models, placement,
  quantization): the front of (time, send time, GPUs, refit gather that async engines wait
  for: `perf.step.refit_hold`); fewer GPUs leave more to the others;
- generation: the engines' time never grows with more replicas, so for throughput a
  disaggregated engine layout takes the largest legal count that each combination of the
  other roles leaves free in its pool (the cost objective scores every count);
- auxiliary groups: the front of (GPUs, time);
- a critic group of its own (PPO, where the target runs one), per trainer and placement: the front
  of (its GPUs, the time it adds), the best critic layout per count (not with `every_count`);
- a micro-batch larger than one that does not fit does not fit either;
- a heavier recompute of a layout, for each variant (kind, placement, critic) that a lighter
  one already fits (same states held, never faster): a heavier one is scored only where a
  variant whose other models did not fit beside the lighter one fits beside it;
- disaggregated training with uneven stages, when a smaller pipeline degree gives every model
  on the trainers the same layers per stage (`_fewer_stages_dominate`; throughput only);
- interleaved virtual stages whose sends cost more than their bubble saves, against the same
  degrees without interleaving where the same recompute fits (`_interleaving_dominated`;
  only while the fronts apply and without a target framework);
- interleaved virtual stages, without a critic, whose update plus old log-prob pass bounded from
  below by the plain layout's less its bubble loses every variant of every kind it may serve to
  a candidate already found: the fastest disaggregated trainer of its group, or a member of its
  colocated front (`_interleaved_beaten`); where that bound, from the plain layout's least recompute
  that fits, holds at every recompute, the micro-batch is skipped before its memory
  (`_SKIP_BEATEN_MICRO_BATCHES`; micro-batches of max-length sequences, without a target). Those tests ask a
  reference's pass on the trainers only where its floor (`reference_pass_floor`) does not lose already.

For the throughput objective without a price cap or linear constraints (`bounded`), bounds
against plans already found also prune. A first plan per mode comes from a few training
shapes (`_probe_incumbents`); then whatever cannot come within RUNNER_UP_MARGIN of the best
plan of every mode it serves is dropped: training GPU counts by `train_time_lower_bound`
(GEMM FLOPs at the device's fastest rate; colocated, plus `_ColocatedEngineFloor`), engines
best first by `gen_side(lower_bound=True)` with the least training side that completes a plan
with them (a trainer hosting none of their models, plus a group for the models neither hosts), then
trainers, engines and auxiliary groups by the fastest partner left. An engine whose bound already
trails an engine found in its front (`_prune_gen`'s) that leaves it out, and whose plan cannot lower an
incumbent at that bound, is not simulated (`_gen_candidates`' `fronts`). Each bound has a
property test."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import accumulate, combinations, product
from typing import Any, Callable

from rlsolve.frameworks.rules import strategies
from rlsolve.frameworks.runtime import train_attention_kernel
from rlsolve.perf.generate import GenLayout
from rlsolve.perf.hw import device
from rlsolve.perf.step import (QUANT_BYTES, AuxSide, GenSide, TrainSide, aux_side, capacity_bytes, compose_step,
                               critic_fits, critic_group_excess, critic_group_pass, critic_memory, critic_pass,
                               engine_release_time, engine_shares_fixed, gen_side, policy_memory, refit_gather_time,
                               refit_hold, trainer_switch_time, optimizer_prep_time, recv_time,
                               rollout_steps_in_flight, send_time, trainer_strategy,
                               sync_time, train_aux, train_core, train_core_floor, critic_pass_floor, with_critic)
from rlsolve.perf.train import (BF16, FA_BWD_OVER_FWD, TrainLayout, layer_elementwise_elems, layout_with,
                                moe_host_efficiency)
from rlsolve.resolve import PoolHW, Problem
from rlsolve.solver.budget import Deadline
from rlsolve.solver.rules import (RECOMPUTE, asked, aux_group_pools, aux_models, aux_shares_actor_degrees, count_ok,
                                  critic_places,
                                  count_user_violations, critic_like_policy, critic_pair_violations, critic_universe,
                                  critic_violations, engine_can_cap, engine_cap_violations, gen_universe,
                                  gen_violations,
                                  micro_batches, modes_allowed, role_counts, target_caps, target_hosting_modes,
                                  train_bases, train_layout_violations, train_shape_violations, train_shapes)
from rlsolve.solver.scale import INF_TIME, TIME_UNIT_S, mem_units_up, time_units

__all__ = ["AuxCand", "Candidates", "GenCand", "TrainCand", "enumerate_candidates", "modes_allowed"]


class _OnGPUs:
    """A candidate's GPU count is its side's."""

    side: Any

    @property
    def gpus(self) -> int:
        return self.side.gpus


@dataclass
class GenCand(_OnGPUs):
    mode: str                 # colocated | disagg
    layout: GenLayout
    hosts: frozenset          # aux models run here: {"reference", "reward"}
    reward_quant: str
    reserved_gb: int          # colocated: GB per GPU left to the training side during rollout
    side: GenSide
    sync: float               # colocated: reshard seconds; disagg: seconds to receive the weights
    pool: int = 0             # index into problem.pools
    id: int = -1
    modes: frozenset | None = None  # the modes the target runs what it hosts in (None: any)

    @property
    def time(self) -> float:
        """Colocated: the rollout, the engine's sleep that frees the GPUs, and the reshard."""
        if self.mode == "colocated":
            return self.side.time + engine_release_time(self.side) + self.sync
        return self.side.time


@dataclass
class TrainCand(_OnGPUs):
    mode: str
    layout: TrainLayout
    hosts: frozenset          # aux models run on these GPUs
    reference: str            # training | cpu_offload | elsewhere (engines or an auxiliary group) | none
    reward_quant: str
    offload_states: bool      # colocated: move states to the host during rollout
    side: TrainSide
    switch: float             # colocated offload/reload seconds
    send: float               # disagg: seconds for the trainers to send the weights
    pool: int = 0
    id: int = -1
    modes: frozenset | None = None  # the modes the target runs its placements in (None: any)
    critic: TrainLayout | None = None  # PPO: the critic's own degrees on these GPUs (or on its group's)
    critic_gpus: int = 0      # PPO: GPUs of the critic's own group in this pool (0: the critic trains here)
    hold: float = 0.0         # disagg: the refit gather async engines wait for (perf.step.refit_hold; in `time` too)

    @property
    def gpus(self) -> int:
        """The GPUs the candidate takes in its pool: the trainers' and the critic group's."""
        return self.side.gpus + self.critic_gpus

    @property
    def time(self) -> float:
        return self.side.time + self.switch

    @property
    def reserved_gb(self) -> int:
        return 0 if self.offload_states else mem_units_up(self.side.states)


@dataclass
class AuxCand(_OnGPUs):
    """Reference and/or reward forwards on GPUs of their own, in any pool (the other roles' included)."""

    side: AuxSide
    hosts: frozenset
    reward_quant: str
    pool: int
    id: int = -1
    modes: frozenset | None = None  # the modes the target runs these models on a group of their own in
    actor_tp: int | None = None     # the target runs the group with the actor's degrees: its tp (None: its own)

    @property
    def time(self) -> float:
        return self.side.time


@dataclass
class Candidates:
    gen: list[GenCand]
    train: list[TrainCand]
    aux: list[AuxCand] = field(default_factory=list)
    evaluated: int = 0


# --- the enumeration ----------------------------------------------------------------------

def _aux_variants(problem: Problem):
    """(hosts on training, reference placement, reward quant). A model `elsewhere` runs off the
    training GPUs (on disaggregated engines, or on an auxiliary group of any pool, the
    trainers' own included), chosen by the program."""
    refs = ["none"] if problem.reference is None else ["training", "cpu_offload", "elsewhere"]
    rewards = ["cpu"] if problem.reward is None else ["training", "elsewhere"]
    quants = ["none"] if problem.reward is None else ["none", "int8", "int4"]
    for r in refs:
        for w in rewards:
            for q in quants:
                train_hosts = frozenset(x for x, p in (("reference", r), ("reward", w))
                                        if p in ("training", "cpu_offload"))
                if problem.reward is not None and "reward" not in train_hosts and q != "none":
                    continue  # the quantization belongs to the reward's host
                yield train_hosts, r, q


def _hosts_elsewhere(problem: Problem, train_hosts: frozenset) -> bool:
    """A model of the job that these training GPUs do not host (it needs engines or a group of its own)."""
    return any(m not in train_hosts for m in aux_models(problem))


def enumerate_candidates(problem: Problem, all_counts: bool = False, prune: bool = True,
                         deadline: Deadline | None = None, keep_apart: frozenset = frozenset(),
                         bounded: bool = False) -> Candidates:
    """All scored candidates of every pool. `all_counts`: every legal GPU count for the
    engines (the cost objective may leave GPUs idle); otherwise a disaggregated engine takes
    the largest count the other roles leave free. `prune=False` keeps every scored training
    candidate (dominated ones too). `keep_apart`: degree names ("training.tp", "gpus") that
    user constraints mention; candidates differing in them are never compared. `bounded`:
    skip engine candidates whose lower bound cannot beat a plan already found (only valid
    for the throughput objective without a price cap or linear constraints)."""
    deadline = deadline or Deadline(None)
    modes = modes_allowed(problem)
    if aux_shares_actor_degrees(problem):
        # a group of its own runs with the actor's tp, cp and micro-batch (rules.aux_group_violations): trainers
        # differing in them pair with different groups
        keep_apart = keep_apart | {"training.tp", "training.cp", "training.micro_batch"}
    out = Candidates(gen=[], train=[])
    if not modes or not _any_legal_engine(problem, deadline):
        return out  # no engine layout is legal anywhere: nothing is worth scoring (the diagnosis says why)
    # per mode, the step (ms) of a plan already found: nothing whose lower bound exceeds it
    # in every mode it serves can be part of an optimal plan (nor, by RUNNER_UP_MARGIN, of a
    # runner-up close to it)
    memo: dict = {}  # engine sides scored by the probe, reused
    incumbent = _probe_incumbents(problem, modes, deadline, out, memo) if bounded else None
    for p in range(len(problem.pools)):
        out.train += _train_candidates(problem, p, modes, out, deadline, limit=_relaxed(incumbent),
                                       front=prune and not keep_apart, apart=_apart_degrees(keep_apart),
                                       every_count=not prune or "gpus" in keep_apart, memo=memo)
    if prune:
        out.train = _prune_train(out.train, keep_apart)
    if incumbent is not None:
        out.train = [c for c in out.train if not _train_beyond(c, _relaxed(incumbent))]
    out.aux = _aux_candidates(problem, deadline)
    if incumbent is not None:
        out.aux = _prune_aux_by_bound(problem, out.aux, out.train, _relaxed(incumbent))
    for p in range(len(problem.pools)):
        out.gen += _gen_candidates(problem, p, modes, all_counts, out, deadline, bounded, incumbent=incumbent,
                                   memo=memo, fronts=keep_apart if prune else None)
    if prune:
        out.gen = _prune_gen(out.gen, keep_apart)
    if incumbent is not None:
        _prune_by_bound(problem, out, modes, _relaxed(incumbent))
    for cands in (out.gen, out.train, out.aux):
        for i, c in enumerate(cands):
            c.id = i
    return out


def _apart_degrees(keep_apart: frozenset) -> tuple[str, ...]:
    return tuple(sorted(k.split(".", 1)[1] for k in keep_apart if k.startswith("training.") and k != "training.gpus"))


def _any_legal_engine(problem: Problem, deadline: Deadline) -> bool:
    for pool in problem.pools:
        for n in role_counts(pool):
            for lay in gen_universe(problem, pool, n):
                deadline.check("checking the engine layouts")
                if not gen_violations(problem, pool, n, lay):
                    return True
    return False


def _aux_candidates(problem: Problem, deadline: Deadline) -> list[AuxCand]:
    """Auxiliary groups for the reference/reward forwards: per pool, hosted set and
    quantization, the GPU counts on the (GPUs, time) front (more GPUs never slow the
    forwards down, so only a count that is faster than every smaller one can be chosen)."""
    names = [n for n in ("reference", "reward") if getattr(problem, n) is not None]
    subsets = [frozenset(c) for k in range(1, len(names) + 1) for c in combinations(names, k)]
    shared = aux_shares_actor_degrees(problem)
    found: list[AuxCand] = []
    for p in aux_group_pools(problem):
        pool = problem.pools[p]
        # with the actor's degrees: one front per training tp the pools allow (the program pairs them)
        tps = sorted({tp for q in problem.pools for _, tp, *_ in train_shapes(problem, q)}) if shared else [None]
        for hosts, tp in product(subsets, tps):
            for q in (("none", "int8", "int4") if "reward" in hosts else ("none",)):
                allowed_in = _hosted_modes(problem, "auxiliary", hosts, q, modes_allowed(problem))
                if not allowed_in:
                    continue
                best = math.inf
                for n in role_counts(pool):
                    deadline.check("scoring auxiliary groups")
                    side = aux_side(problem, pool, n, hosts, q, tp=tp)
                    if side.fits and time_units(side.time) < best:
                        best = time_units(side.time)
                        found.append(AuxCand(side, hosts, q, p, modes=allowed_in, actor_tp=tp))
    return found


def _train_candidates(problem: Problem, p: int, modes: list[str], out: Candidates, deadline: Deadline,
                      shapes: list | None = None, probe: bool = False, limit: dict | None = None,
                      front: bool = False, apart: tuple[str, ...] = (), every_count: bool = False,
                      memo: dict | None = None) -> list[TrainCand]:
    """Training candidates of pool p: every legal layout (or those of `shapes`; `probe`:
    without interleaved stages) that memory fits. `limit` (ms per mode): skip a GPU count
    whose `train_time_lower_bound` exceeds it in every mode the candidate would serve.
    `front`: skip at once a colocated candidate `_prune_train` would drop (no degree is kept
    apart). `apart`: training degrees whose candidates are never compared. `every_count`: every GPU
    count of a critic group of its own (no front over them: unpruned, or constraints on the GPUs used).
    `memo`: the caller's, shared by the probe and the full enumeration: the pure memos of pool p
    (scored passes and memory, the other models' passes, critics per count, rules per degrees) live
    in it under ("train", p), so the full enumeration does not score again what the probe did."""
    pool = problem.pools[p]
    dev = device(pool, problem.workload.precision, problem.profile)
    cap = capacity_bytes(pool, problem.workload.headroom)
    single = len(problem.pools) == 1
    colocated_ok = "colocated" in modes
    disagg_ok = any(m in modes for m in ("sync", "async"))
    # pure functions of the problem, the pool and their keys (nothing here reads `limit`, `shapes` or the
    # fronts), so one set serves the probe and the full enumeration
    pure = (memo if memo is not None else {}).setdefault(("train", p), ({}, {}, {}, {}, {}))
    cache: dict[tuple, Any] = pure[0]
    found: list[TrainCand] = []
    best_disagg: dict[tuple, float] = {}
    critics: dict[int, list] = pure[1]
    positions: dict[int, dict] = pure[2]  # critic layouts of their own on n GPUs: id -> place in critics[n]
    aux_of: dict[tuple, tuple] = pure[3]  # train_aux by what it depends on (see the loop)
    variants = {kind: [(*v, allowed_in) for v in _aux_variants(problem)
                       if (allowed_in := _train_modes(problem, modes, kind, *v))] for kind in ("colocated", "disagg")}
    whole_pool = [v for v in variants["colocated"] if not _hosts_elsewhere(problem, v[0])]
    if not aux_group_pools(problem):  # a colocated trainer's other models have no home but its GPUs
        variants["colocated"] = whole_pool
    bounds: dict[tuple[int, int], tuple[int, int, int]] = {}
    fronts: dict[tuple, _Front] = {}
    rules_of: dict[tuple, dict] = pure[4]  # per (tp, pp, cp): the `_layout_allowed` memo

    def beaten(kind: str, hosts: frozenset, ref: str, quant: str, lay: TrainLayout, core_lb: float, aux: tuple,
               states: float) -> bool:
        # whether the tests below would skip this variant's candidates on n GPUs, each with an update plus
        # old log-prob pass of at least `core_lb` (the other models' passes `aux`, `states` held)
        gather, _, hold_u = _refit_terms(problem, pool, lay, modes, cache)
        side_lb = core_lb + gather + aux[0] + aux[1] + aux[2]
        if kind == "disagg":
            return side_lb >= best_disagg.get((n, hosts, ref, quant) + tuple(getattr(lay, k) for k in apart)
                                              + (hold_u,), math.inf)
        if not front:
            return False
        group = fronts.get((n, hosts, ref, quant), _NO_FRONT)
        side_lb += problem.workload.framework.orchestration_s
        for off in _offloads(problem, modes, kind, hosts, ref, quant, aux_of):
            rank = (time_units(side_lb + (2 * dev.pcie_time(states) if off else 0.0)), 0 if off else mem_units_up(states),
                    _simplicity_of(lay, off))
            if not group.covers(rank):
                return False
        return True

    def variants_of(kind: str) -> list[tuple]:
        # one pool, all of it colocated: no GPU left for an auxiliary group
        return whole_pool if kind == "colocated" and single and n >= pool.n_gpus else variants[kind]

    min_recv = _min_recv_units(problem) if limit is not None else 0
    coloc_floor = _ColocatedEngineFloor(problem, pool)
    # with a target, which critics pair with a trainer reads the policy's recompute (the engines that run
    # both, `critic_pair_violations`; the rules of a critic on the policy's degrees): a heavier recompute
    # may pair with a critic a lighter one did not
    caps = target_caps(problem)
    critics_vary = problem.value is not None and caps is not None
    group_modes = [m for m in modes if "auxiliary" in critic_places(problem, m)]
    # an interleaved base may skip a micro-batch beaten at every recompute (below): micro-batches of max-length
    # sequences whose rules read neither it nor (no target) vp with the recompute, the recompute not kept apart
    # a layout whose floor (`train_core_floor`, with a critic `_critic_floor`) already loses every candidate is not
    # scored: not with a target that pairs critics by recompute (nor, then, one that trains them on GPUs of their own)
    floor_ok = _FLOOR_BEFORE_SCORING and not critics_vary
    skip_ok = _SKIP_BEATEN_MICRO_BATCHES and problem.workload.packed_tokens is None and caps is None and \
        "micro_batch" not in problem.spec.constraints.training and "recompute" not in apart
    for n, tp, pp, cp, dp in (train_shapes(problem, pool) if shapes is None else shapes):
        deadline.check("enumerating training layouts")
        kinds = []
        # colocated: the engines share these GPUs, so their count must be legal for them too
        if colocated_ok and not count_user_violations(problem, "generation", n):
            kinds.append("colocated")
        if disagg_ok and not (single and n >= pool.n_gpus):  # one pool: the engines need a GPU too
            kinds.append("disagg")
        if limit is not None and "disagg" in kinds and _fewer_stages_dominate(problem, pool, n, tp, pp, cp, dp,
                                                                                 min_recv):
            kinds.remove("disagg")
        if limit is not None and kinds:
            if (n, pp) not in bounds:
                t_lb = _lb_units(train_time_lower_bound(problem, pool, n, pp))
                # the engines' floor is asked only where training alone stays within the colocated
                # limit: past it the candidate is beyond whatever the floor (>= 0) is
                bounds[n, pp] = (t_lb, time_units(send_time(problem, pool, n)),
                                 coloc_floor(n) if "colocated" in kinds and t_lb <= limit.get("colocated", -1)
                                 else 0)
            t_lb, send_u, gen_lb = bounds[n, pp]
            kinds = [k for k in kinds if not _beyond(k, t_lb, send_u, limit, gen_lb if k == "colocated" else 0)]
        if not kinds:
            continue
        if train_shape_violations(problem, pool, n, tp, pp, cp, dp):
            continue
        # (ep, ZeRO, micro-batch, recompute) -> the scored layout without interleaving, the variant keys and
        # kinds done by then, and whether a heavier recompute was still to be tried
        plain: dict[tuple, tuple] = {}
        rules = rules_of.setdefault((tp, pp, cp), {})  # `_layout_allowed` of these degrees (any dp)
        mbs = micro_batches(problem, dp)
        bases = list(train_bases(problem, tp, pp, cp, dp))
        smallest: dict[tuple, bool] = {}  # (ep, vp, ZeRO) -> whether the base's smallest memory fits
        least_mem: dict[tuple, Any] = {}  # (ep, vp, ZeRO) -> that memory, where it was asked (reused below)
        top_zero = max((zero for _, _, zero in bases), default=0)
        # (ep, ZeRO, micro-batch) -> the recomputes over the memory there without interleaving (`_recompute_levels`'s
        # `over` after it): over with more virtual stages or a lower ZeRO stage too (the policy's memory never falls
        # with either: `test_memory_never_falls_with_more_virtual_stages_or_less_zero`), so an interleaved base
        # (after every vp = 1 base of its ep: `train_bases`' order) asks only the rules of those
        plain_over: dict[tuple, frozenset] = {}
        # (ep, ZeRO, micro-batch) -> the least recompute that fits without interleaving and its memory (scored:
        # `plain`), for `_interleaved_beaten` over every recompute of an interleaved base (below); False: none
        # fits, one being allowed
        plain_first: dict[tuple, tuple] = {}
        # (ep, ZeRO, micro-batch) -> the least vp whose micro-batch the skip below found beaten at every recompute:
        # beaten at every larger vp too, then and later (`_interleaved_beaten` with `every_recompute` reads vp only
        # through the simplicity rank, which only grows with it, and through `apart`, where "vp" is not kept apart;
        # the fronts only gain members and the fastest disaggregated trainers only get faster)
        beaten_from: dict[tuple, int] = {}
        # (ep, ZeRO, micro-batch) -> where the least recompute that fits without interleaving was skipped by its floor
        # (below) and not scored: that layout, its memory and the floor less its bubble term, a bound on the
        # update plus old log-prob pass of the same layout with interleaving (which only shrinks the bubble)
        floored: dict[tuple, tuple] = {}
        for ep, vp, zero in bases:
            if probe and vp > 1:
                continue
            deadline.check("enumerating training layouts")
            fits = smallest.get((ep, vp, zero)) if mbs else False
            if fits is False:
                continue  # the smallest memory of this base (micro-batch 1, full recompute) does not fit
            # recomputes over memory at a smaller micro-batch: over at every larger one too, when
            # micro-batches hold max-length sequences (memory grows with them; not when packed)
            # (packed: a set of this micro-batch's alone)
            monotone = problem.workload.packed_tokens is None
            over: set[str] = set()
            for mb in mbs:
                if not monotone:
                    over = set()
                if vp > 1 and skip_ok:
                    hit = plain_first.get((ep, zero, mb))
                    if hit is False:
                        break  # no recompute fits without interleaving: none fits with it (the same rules of each)
                    if beaten_from.get((ep, zero, mb), vp + 1) <= vp:
                        continue  # (see `beaten_from`)
                    if not hit and (hit := floored.get((ep, zero, mb))) is not None:
                        # (the same skip where the layout without interleaving was not scored: its floor less the
                        # bubble term, `floored`, bounds what its scored time less its bubble would have; its
                        # critics are those of the layout without interleaving, `critic_like_policy` sets vp = 1)
                        if _all_beaten(problem, pool, layout_with(hit[0], vp=vp), hit[1], cap, hit[2],
                                       kinds, variants_of, best_disagg, fronts if front else None, modes, apart, n, pp,
                                       bounds, limit, cache, aux_of, dev, every_recompute=True, critics=hit[3]):
                            if _MEMO_BEATEN_VP and "vp" not in apart:
                                beaten_from[ep, zero, mb] = vp
                            continue
                        hit = None
                    if hit:
                        # Every candidate of this base at mb, at any recompute, loses to one already found: the least
                        # recompute that fits it is no lighter than the one without interleaving (the memory never
                        # falls with vp; the rules of a recompute do not read vp without a target), a heavier one is
                        # never faster, and interleaving only shrinks the bubble (`_interleaved_beaten`). Skipped
                        # without its memory: where no recompute fits, none fits at a larger micro-batch either
                        # (max-length sequences; the rules do not read it), so the micro-batches after it add nothing.
                        plain_lay = plain[ep, zero, mb, hit[0]]
                        if _interleaved_beaten(problem, pool, layout_with(plain_lay[0], vp=vp), hit[1], cap, plain_lay,
                                               kinds, variants_of, best_disagg, fronts if front else None, modes, apart,
                                               n, pp, bounds, limit, cache, aux_of, dev, every_recompute=True):
                            if _MEMO_BEATEN_VP and "vp" not in apart:
                                beaten_from[ep, zero, mb] = vp
                            continue
                if fits is None:  # (asked at the base's first micro-batch not skipped above)
                    fits = _smallest_fits(problem, tp, pp, cp, dp, ep, vp, zero, mbs[0], top_zero, cap, cache,
                                          smallest, least_mem)
                    if not fits:
                        break  # the smallest memory of this base (micro-batch 1, full recompute) does not fit
                if vp > 1:  # over without interleaving at this ZeRO stage or a higher one: over here
                    for z in range(zero, top_zero + 1):
                        over.update(plain_over.get((ep, z, mb), ()))
                # (built here, not per base: an interleaved base may skip every micro-batch above; at its first
                # micro-batch, its full recompute's memory, which `_smallest_fits` may have asked)
                levels = _recompute_levels(problem, layout_with(_shape_layout(tp, pp, cp, dp, mb), ep=ep, vp=vp,
                                                                 zero_stage=zero), cap, cache, over, rules,
                                           least_mem.get((ep, vp, zero)) if mb == mbs[0] else None)
                if vp == 1:
                    plain_over[ep, zero, mb] = frozenset(over)
                if levels is None:
                    if vp == 1:
                        plain_first[ep, zero, mb] = False
                    break  # no recompute fits: a larger micro-batch needs more memory still
                if levels is False:
                    continue
                # Every recompute that fits, lightest first (`_recompute_levels`). A variant (kind,
                # placement, critic) that a lighter recompute placed, or found dominated, is done: the
                # same variant with more recompute holds the same states and is never faster (a
                # property test: test_a_lighter_recompute_dominates_the_same_variant). So a heavier
                # recompute is scored only where a variant whose other models did not fit beside a
                # lighter one fits beside it (`_fits_now`), and only such variants are tried there.
                # With a target the critics paired with a trainer read its recompute: every heavier
                # recompute is scored, for every variant not done (`done`).
                failed: dict[tuple, Any] = {}  # (kind, hosts, ref, quant, critic keys) -> critic: no fit yet
                done: set[tuple] = set()     # with a target: variant keys placed or dominated
                dead: set[str] = set()       # kinds no recompute of this layout can serve within `limit`
                lighter = False              # a lighter recompute of this layout was tried
                for lay, mem in levels:
                    rec = lay.recompute
                    if front and vp > 1:
                        hit = plain.get((ep, zero, mb, rec))
                        # (`lay` is plain's layout with vp: same degrees, micro-batch and recompute; allowed, fits)
                        if hit is not None and _interleaving_dominated(problem, *hit[:3], vp, cap, cache, True):
                            # its candidates are dropped by the fronts (see `_interleaving_dominated`), and
                            # so are those of a heavier recompute of a variant the plain layout placed
                            # (no target here: the variants left are those left by both)
                            if not hit[5]:
                                break
                            failed = _left_by_both(failed, hit[3]) if lighter else hit[3]
                            dead, lighter = dead | hit[4], True
                            core_lb = (hit[1].total - hit[1].bubble + hit[2]) * (1 - 1e-12)  # its bound
                            continue
                    if lighter and not critics_vary and not _fits_now(problem, pool, lay, mem, cap, cache, aux_of,
                                                                      failed, dead, beaten, core_lb):
                        continue  # none of the variants left fits beside this recompute, or each would lose
                    if vp > 1 and (ep, zero, mb, rec) in plain and _interleaved_beaten(
                            problem, pool, lay, mem, cap, plain[ep, zero, mb, rec], [k for k in kinds if k not in dead],
                            variants_of, best_disagg, fronts if front else None, modes, apart, n, pp, bounds, limit,
                            cache, aux_of, dev):
                        break  # every candidate of it, and of a heavier recompute, would be skipped below
                    if floor_ok and lay.recompute_layers == 0:
                        floor, bubble = train_core_floor(problem, pool, lay, cache)
                        c_floor = None if problem.value is None else _critic_floor(problem, pool, n, lay, critics, cache)
                        if _all_beaten(problem, pool, lay, mem, cap, floor, [k for k in kinds if k not in dead],
                                       variants_of, best_disagg, fronts if front else None, modes, apart, n, pp,
                                       bounds, limit, cache, aux_of, dev, every_recompute=True, critics=c_floor):
                            # every candidate of it, and of a heavier recompute (never faster, the same states, less
                            # simple; its critic on the policy's degrees too), would be skipped below: its update and
                            # old log-prob pass take at least `train_core_floor` (which asks the stage times
                            # `train_core` would, and no more), its critic's pass and states at least `c_floor`
                            if vp == 1 and not lighter and skip_ok:
                                floored[ep, zero, mb] = (lay, mem, floor - bubble, c_floor)
                            break
                    t, _, old = train_core(problem, pool, lay, mem, cache=cache)
                    out.evaluated += 1
                    # every side of this layout takes at least its update and old log-prob pass (the
                    # other terms only add), so a kind it cannot serve within `limit` is skipped now:
                    # `_train_beyond` would drop each of its candidates after enumeration
                    live = [k for k in kinds if k not in dead]
                    if limit is not None:
                        live = _within_limit(live, t.total + old, n, pp, bounds, limit)
                    if len(live) < len(kinds):
                        dead = dead | (set(kinds) - set(live))  # more recompute is slower still
                    left, failed = failed, {}
                    if live:
                        paired, passes, ckeys = _with_critics(problem, pool, n, lay, critics, positions, cache)
                        dims = _aux_dims(problem, lay)
                        # the refit gather is the layout's whatever the variant (`_refit_terms`); async engines
                        # that wait for it pair differently, so a disaggregated group holds one hold time
                        gather, hold, hold_u = _refit_terms(problem, pool, lay, modes, cache)
                        core = t.total + old + gather
                        prep = optimizer_prep_time(problem, dev, mem)  # disaggregated: every step (`trainer_switch_time`)
                        apart_of = tuple(getattr(lay, k) for k in apart) + (hold_u,)
                        m_total, m_states = mem.total, mem.states
                        # the least states a critic paired here keeps: where the policy's states, the other
                        # models' and these exceed the memory, no critic fits nor could fit at a heavier
                        # recompute (the policy's memory holds its states at least; float sums are monotone)
                        least = min(c_pass[1] for c_pass in passes) if problem.value is not None and passes and \
                            m_total >= m_states else None
                        # the least states kept by the critics from each on (the kept-states test below)
                        least_from = list(accumulate([c_pass[1] for c_pass in reversed(passes)], min))[::-1] \
                            if problem.value is not None else None
                    for kind in live:
                        kept_states: dict[tuple, float] = {}
                        kept_critic: dict[tuple, float] = {}  # colocated: the states of the critic kept last
                        tries = product(variants_of(kind), enumerate(paired))
                        if lighter:
                            tries = _still_to_try(kind, tries, ckeys, done if critics_vary else None, left)
                        disagg = kind == "disagg"
                        # tries come variant by variant: what depends on the variant alone is set at its first
                        last = others = None  # the variant, and its other models' passes (asked where needed)
                        # a variant whose critics left would each be skipped by the tests below: its tries come
                        # in the order of `paired` (fastest first), so each test that skips one skips the rest
                        skip = None
                        for variant, (i, critic) in tries:
                            if variant is skip:
                                continue
                            c_pass = passes[i]  # (None without a critic)
                            if variant is not last:
                                last, others = variant, None
                                hosts, ref, quant, allowed_in = variant
                                vkey = variant[:3]
                                gkey = (n, hosts, ref, quant) + apart_of  # a disagg group
                            if critic is not None and kept_states.get(vkey) == -math.inf:
                                skip = variant  # (and stays so for the variant)
                                continue  # disaggregated: a faster critic already fits beside this trainer
                            if disagg and core + (c_pass[0] if critic is not None else 0.0) >= \
                                    best_disagg.get(gkey, math.inf):
                                skip = variant  # (the critics after it are no faster; the best only falls)
                                continue  # the test below, before the other models' passes (they only add)
                            if critic is not None and c_pass[1] >= (kept := kept_critic.get(vkey, math.inf)):
                                if least_from[i] >= kept:
                                    skip = variant  # (none after it keeps less; the kept states only fall)
                                continue  # the kept-states test below: the other models' bytes are the same
                            if critic is None:
                                ref_t, rew_t, val_t, resident = _aux_of(problem, pool, lay, dims, hosts, ref, quant,
                                                                        None, cache, aux_of)
                            else:
                                # `_aux_of` with this critic, written out: the other models' passes are asked
                                # once per variant, the critic's added as `with_critic` adds them
                                if others is None:
                                    others = _others_of(problem, pool, lay, dims, hosts, ref, quant, cache, aux_of)
                                    hopeless = least is not None and m_states + (others[3] + least) > cap
                                if hopeless:
                                    skip = variant
                                    continue  # (what the memory test below does for each critic of this variant)
                                ref_t, rew_t, val_t, resident = others[0], others[1], c_pass[0], others[3] + c_pass[1]
                            too_big = m_total + resident > cap
                            fits = None if critic is None or (too_big and m_states + resident > cap) else \
                                critic_fits(mem, resident, c_pass[1], c_pass[2], cap)  # (asked once, where it matters)
                            if too_big or fits is False:
                                # worth a heavier recompute unless no recompute can fit it: the policy's
                                # states stay (its memory is never less), and so does a critic of its own
                                if m_states + resident <= cap and (critic is None or "like" in ckeys[i] or fits):
                                    failed[kind, hosts, ref, quant, ckeys[i]] = critic
                                continue
                            if critic is not None:
                                # critics come fastest first: a slower one must keep less on the GPUs to matter
                                # (colocated), and beside a disaggregated trainer only the fastest that fits does
                                if resident >= kept_states.get(vkey, math.inf):
                                    continue
                                kept_states[vkey] = -math.inf if kind == "disagg" else resident
                                kept_critic[vkey] = -math.inf if kind == "disagg" else c_pass[1]
                            if disagg:  # only the fastest of a group survives the front: skip the rest early
                                total = core + ref_t + rew_t + val_t + prep
                                if total >= best_disagg.get(gkey, math.inf):
                                    continue
                                best_disagg[gkey] = total
                            side = TrainSide(layout=lay, gpus=n, train=t, old_logprob=old, reference=ref_t,
                                             reward=rew_t, value=val_t, mem=mem, aux_resident=resident, capacity=cap,
                                             fits=True, states=m_states + resident,
                                             orchestration=problem.workload.framework.orchestration_s,
                                             refit_gather=gather)
                            offloads = _offloads(problem, modes, kind, hosts, ref, quant, aux_of) \
                                if kind == "colocated" else (False,)
                            for off in offloads:
                                switch = trainer_switch_time(problem, dev, mem, resident, lay.zero_stage, off)
                                if kind == "colocated" and front:
                                    # what `_prune_train` keeps of a colocated group: skip now what it would drop
                                    rank = (time_units(side.time + switch), 0 if off else mem_units_up(side.states),
                                            _simplicity_of(lay, off))
                                    group = fronts.get((n, hosts, ref, quant))
                                    if group is None:
                                        group = fronts[n, hosts, ref, quant] = _Front()
                                    if group.covers(rank):
                                        continue
                                    group.add(rank)
                                send = send_time(problem, pool, n) if kind == "disagg" else 0.0
                                found.append(TrainCand(mode=kind, layout=lay, hosts=hosts, reference=ref,
                                                       reward_quant=quant, offload_states=off, side=side,
                                                       switch=switch, send=send, pool=p, modes=allowed_in,
                                                       critic=critic, hold=hold if disagg else 0.0))
                        if kind == "disagg" and group_modes:  # the critic on GPUs of its own, where the target runs it
                            found += _critic_group_cands(problem, p, lay, mem, t, old, modes, cache, aux_of,
                                                         every=every_count)
                    lighter = True
                    core_lb = (t.total + old) * (1 - 1e-12)  # more recompute is never faster (in the last bits)
                    # a heavier recompute can only matter for a variant that did not fit here, or (with a
                    # target) for a critic that the target pairs only with the heavier recompute
                    more = bool(failed) or (critics_vary and bool(set(kinds) - dead))
                    if critics_vary and more and live:  # every variant tried here is done unless it did not fit
                        done = done | ({(kind, hosts, ref, quant, c) for kind in live
                                        for hosts, ref, quant, _ in variants_of(kind) for cs in ckeys for c in cs}
                                       - {v[:4] + (c,) for v in failed for c in v[4]})
                    if vp == 1:  # (`failed` and `dead` are replaced, never changed in place: kept as now)
                        plain[ep, zero, mb, rec] = (lay, t, old, failed, dead, more)
                        plain_first.setdefault((ep, zero, mb), (rec, mem))
                    if not more:
                        break
    return found


def _critic_group_cands(problem: Problem, p: int, lay: TrainLayout, mem, t, old: float, modes: list[str],
                        cache: dict, aux_of: dict, every: bool = False) -> list[TrainCand]:
    """Disaggregated trainers with the critic (PPO) on GPUs of its own in the same pool, for a target
    that trains it there concurrently with the actor (`rules.critic_places`; OpenRLHF's --critic.*
    group): per placement of the other models, the critic group's GPU counts on the (GPUs, time) front
    (more GPUs only matter while the critic still adds time beyond the actor's, `critic_group_excess`).
    The critic's degrees are the actor's with the group's data-parallel degree where the target has no
    critic layout of its own (OpenRLHF: one set of DeepSpeed flags), else its own on those GPUs.
    `every`: every count (no front: prune=False, or user constraints that compare GPU counts)."""
    pool = problem.pools[p]
    n = lay.gpus
    cap = capacity_bytes(pool, problem.workload.headroom)
    caps = target_caps(problem)
    own = caps is None or caps.shapes.value.critic_own_layout
    room = pool.n_gpus - n - (1 if len(problem.pools) == 1 else 0)  # one pool: the engines need a GPU too
    found: list[TrainCand] = []
    options: dict[int, list] = {}  # critic group count -> [(critic layout, (forward s, update s, peak))]
    for m in role_counts(pool):
        if m > room:
            break
        if own:
            cands = [c for _, c in _critic_options(problem, pool, m, cache)]
        elif m % (lay.tp * lay.pp * lay.cp) == 0:
            cands = [replace(critic_like_policy(problem, lay), dp=m // (lay.tp * lay.pp * lay.cp))]
        else:
            cands = []
        scored = []
        for c in cands:
            legal = aux_of.get(("critic group legal", m, c))  # the group's rules, once per count and layout
            if legal is None:
                legal = aux_of["critic group legal", m, c] = not critic_violations(problem, pool, m, c) and \
                    critic_group_pass(problem, pool, c, cache)[2] <= cap
            if legal and not critic_pair_violations(problem, lay, c, group=True):
                scored.append((c, critic_group_pass(problem, pool, c, cache)))
        if scored:
            options[m] = scored
    if not options:
        return found
    send = send_time(problem, pool, n)
    gather, hold, _ = _refit_terms(problem, pool, lay, modes, cache)
    prep = optimizer_prep_time(problem, device(pool, problem.workload.precision, problem.profile), mem)
    for hosts, ref, quant in _aux_variants(problem):
        allowed_in = _train_modes(problem, modes, "disagg", hosts, ref, quant, value="auxiliary")
        if not allowed_in:
            continue
        akey = ("critic apart", lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch, lay.zero_stage >= 3, ref,
                "reward" in hosts, quant)
        if akey not in aux_of:
            aux_of[akey] = train_aux(problem, pool, lay, reference=ref,
                                     reward="training" if "reward" in hosts else "elsewhere", reward_quant=quant,
                                     cache=cache, critic_apart=True)
        ref_t, rew_t, _, resident = aux_of[akey]
        if mem.total + resident > cap:
            continue
        forwards = old + ref_t + rew_t
        best = math.inf
        for m, scored in options.items():  # counts ascending
            c, (fwd, upd, _) = min(scored, key=lambda x: critic_group_excess(forwards, t.total, *x[1][:2]))
            excess = critic_group_excess(forwards, t.total, fwd, upd)
            if time_units(excess) >= best and not every:
                continue
            best = min(best, time_units(excess))
            side = TrainSide(layout=lay, gpus=n, train=t, old_logprob=old, reference=ref_t, reward=rew_t, value=excess,
                             mem=mem, aux_resident=resident, capacity=cap, fits=True, states=mem.states + resident,
                             orchestration=problem.workload.framework.orchestration_s, critic_gpus=m,
                             critic_busy=fwd + upd, refit_gather=gather)
            found.append(TrainCand(mode="disagg", layout=lay, hosts=hosts, reference=ref, reward_quant=quant,
                                   offload_states=False, side=side, switch=prep, send=send, pool=p, modes=allowed_in,
                                   critic=c, critic_gpus=m, hold=hold))
            if best == 0 and not every:
                break  # the critic adds nothing beyond the actor: more GPUs cannot help
    return found


def _with_critics(problem: Problem, pool: PoolHW, n: int, lay: TrainLayout, critics: dict, positions: dict,
                  cache: dict) -> tuple[list, list, list[tuple]]:
    """The critics to pair with this trainer (`_critics_for`), their passes, and each one's variant
    keys: its place among the critic layouts of its own on n GPUs (`positions`, memoized), and
    `like` when it runs the policy's degrees (the same critic as beside a lighter recompute of the
    policy, with that recompute); (None,) without a critic. Memoized in `critics` by what they read
    of the trainer: the critic on its degrees (`critic_like_policy`: all of them but ep and vp) and
    its ep and vp (`critic_pair_violations` asks the target's engines about the policy's own); the
    lists are shared, never changed."""
    if problem.value is None:
        return [None], [None], [(None,)]
    like = critic_like_policy(problem, lay)
    if target_caps(problem) is None:
        return _critics_beside(problem, pool, n, like, critics, positions, cache)
    key = ("with critics", n, like, lay.ep, lay.vp)
    hit = critics.get(key)
    if hit is not None:
        return hit
    pairs = _critics_for(problem, pool, n, lay, critics, cache)
    paired, passes = [c for c, _ in pairs], [c_pass for _, c_pass in pairs]
    if n not in positions:
        positions[n] = {id(c): i for i, (c, _) in enumerate(critics.get(n, ()))}  # (they live as long as `critics`)
    at = positions[n]
    ckeys = [((at[id(c)],) if id(c) in at else ()) + (("like",) if c == like else ()) for c in paired]
    hit = critics[key] = (paired, passes, ckeys)
    return hit


def _critics_beside(problem: Problem, pool: PoolHW, n: int, like: TrainLayout, critics: dict, positions: dict,
                    cache: dict) -> tuple[list, list, list[tuple]]:
    """`_with_critics` without a target: no pair rule, so every trainer on n GPUs pairs with all of
    `_critic_options` and, unless among them or against the rules, the critic on its own degrees
    (`like`). The options are sorted once per count as `_critics_for` sorts them (fastest, then fewer
    states kept; a stable sort); `like` then takes the place that sort gives it (first among its
    ties), by bisection: the same lists as `_critics_for`'s, without comparing it to each option (a
    property test checks they agree)."""
    key = ("sorted", n)
    hit = critics.get(key)
    if hit is None:
        own = _own_critics(problem, pool, n, critics, cache)
        if n not in positions:
            positions[n] = {id(c): i for i, (c, _) in enumerate(own)}
        at = positions[n]
        order = sorted(own, key=lambda c: c[1][:2])
        hit = critics[key] = ([c for c, _ in order], [c_pass for _, c_pass in order], [c_pass[:2] for _, c_pass in order],
                              [(at[id(c)],) for c, _ in order], {c: i for i, (c, _) in enumerate(order)})
    paired, passes, keys, ckeys, index = hit
    i = index.get(like)
    if i is not None:  # among the options: first among its ties
        j = bisect.bisect_left(keys, keys[i])
        return (paired[:j] + [paired[i]] + paired[j:i] + paired[i + 1:],
                passes[:j] + [passes[i]] + passes[j:i] + passes[i + 1:],
                ckeys[:j] + [ckeys[i] + ("like",)] + ckeys[j:i] + ckeys[i + 1:])
    if critic_violations(problem, pool, n, like):
        return paired, passes, ckeys
    like_pass = critic_pass(problem, pool, like, cache)
    j = bisect.bisect_left(keys, like_pass[:2])
    return paired[:j] + [like] + paired[j:], passes[:j] + [like_pass] + passes[j:], ckeys[:j] + [("like",)] + ckeys[j:]


def _aux_dims(problem: Problem, lay: TrainLayout) -> tuple:
    """What the other models' passes (`train_aux`, the critic apart or none) read of the trainer's
    layout: its degrees, micro-batch and whether it shards parameters (ZeRO-3), and its ZeRO stage
    where the framework swaps the reference into the policy's own model (reference_swap_copies > 1:
    the reference pass then runs on the policy's sharding), and the attention kernel of the backend it
    runs on (perf.step.trainer_strategy: the models beside the trainer run its modeling code), and its
    sequence parallelism (perf.step._aux_layout). Not its recompute (read only for a critic on the policy's
    degrees, which the callers add themselves). A property test checks the key."""
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch, lay.zero_stage >= 3,
            train_attention_kernel(trainer_strategy(problem, lay)), lay.sp) + (
        (lay.zero_stage,) if problem.workload.framework.reference_swap_copies > 1 else ())


def _refit_terms(problem: Problem, pool: PoolHW, lay: TrainLayout, modes: list[str], cache: dict
                 ) -> tuple[float, float, int]:
    """(refit gather s, the part async engines wait for s, that part in the program's units) of a trainer
    layout: `refit_gather_time`, charged on the training side in every mode, and `refit_hold` where an
    async mode is allowed (0 otherwise: no mode would charge it). Memoized in `cache` by what the gather
    reads of the layout: its degrees, expert TP (keyed by the field it is read from with them) and whether
    it shards parameters (ZeRO-3), not its micro-batch, recompute or virtual stages."""
    key = ("refit gather", lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.expert_tp_size, lay.zero_stage >= 3)
    hit = cache.get(key)
    if hit is None:
        gather = refit_gather_time(problem, pool, lay)
        hold = refit_hold(problem, gather) if "async" in modes else 0.0
        hit = cache[key] = (gather, hold, time_units(hold))
    return hit


def _aux_of(problem: Problem, pool: PoolHW, lay: TrainLayout, dims: tuple, hosts: frozenset, ref: str, quant: str,
            critic: TrainLayout | None, cache: dict, aux_of: dict, critic_pass_of: tuple | None = None) -> tuple:
    """`train_aux` of this trainer and variant, memoized in `aux_of` by what it depends on (`dims`).
    With a critic of given degrees, the other models' part is asked once per trainer and variant
    (`critic_apart`) and the critic's pass added to it (`with_critic`, as train_aux adds it):
    `critic_pass_of`, where the caller holds it, else `critic_pass`."""
    akey = (dims, ref, "reward" in hosts, quant, id(critic))
    hit = aux_of.get(akey)
    if hit is None or hit[0] is not critic:  # (an id is only this critic's while it lives)
        reward = "training" if "reward" in hosts else "elsewhere"
        if critic is None or problem.value is None:
            aux = train_aux(problem, pool, lay, reference=ref, reward=reward, reward_quant=quant, cache=cache,
                            critic=critic)
        else:
            aux = with_critic(_others_of(problem, pool, lay, dims, hosts, ref, quant, cache, aux_of),
                              critic_pass_of or critic_pass(problem, pool, critic, cache))
        hit = aux_of[akey] = (critic, aux)
    return hit[1]


def _others_of(problem: Problem, pool: PoolHW, lay: TrainLayout, dims: tuple, hosts: frozenset, ref: str, quant: str,
               cache: dict, aux_of: dict) -> tuple:
    """`train_aux` with the critic apart (the other models' passes, that a critic's are added to),
    memoized in `aux_of` by what it depends on (`dims`)."""
    reward = "training" if "reward" in hosts else "elsewhere"
    bkey = ("others", dims, ref, reward, quant)
    others = aux_of.get(bkey)
    if others is None:
        others = aux_of[bkey] = train_aux(problem, pool, lay, reference=ref, reward=reward, reward_quant=quant,
                                          cache=cache, critic_apart=True)
    return others


def _interleaved_beaten(problem: Problem, pool: PoolHW, lay: TrainLayout, mem: Any, cap: float, plain: tuple,
                        kinds: list[str], variants_of, best_disagg: dict, fronts: dict | None, modes: list[str],
                        apart: tuple, n: int, pp: int, bounds: dict, limit: dict | None, cache: dict, aux_of: dict,
                        dev: Any, every_recompute: bool = False) -> bool:
    """Whether an interleaved layout (vp > 1) need not be scored: without a critic, the plain one
    (vp = 1, same recompute, scored: `plain`) bounds its update plus old log-prob pass from below
    by the plain one's less its bubble (interleaving leaves the stages' times and the old log-prob
    pass as they are and only shrinks the bubble, to 1/vp: a property test). With that bound, each
    kind it may still serve within `limit` loses every variant to a candidate already found: a
    disaggregated one to the fastest trainer of its group (`best_disagg`), a colocated one to a
    member of its front (`fronts`, only while they apply) that is no slower, holds no more and is
    no less simple, or holds the policy's states and its other models beyond the memory. These are
    the tests of `_train_candidates` that would skip each candidate, at this recompute and every
    heavier one (more recompute is slower still, holds the same states and is less simple).
    `every_recompute`: `lay` and `mem` are plain's (its least recompute that fits, with vp), and the
    verdict covers the interleaved layout at that recompute and every heavier one whether or not it
    fits beside the other models there (its rank is no less than that bound's either way)."""
    lay1, t1, old1 = plain[:3]
    if problem.value is not None or lay1.recompute_layers > 0:
        return False
    lb = (t1.total - t1.bubble + old1) * (1 - 1e-12)  # (the float sums may differ in their last bits)
    return _all_beaten(problem, pool, lay, mem, cap, lb, kinds, variants_of, best_disagg, fronts, modes, apart, n, pp,
                       bounds, limit, cache, aux_of, dev, every_recompute)


def _all_beaten(problem: Problem, pool: PoolHW, lay: TrainLayout, mem: Any, cap: float, lb: float, kinds: list[str],
                variants_of, best_disagg: dict, fronts: dict | None, modes: list[str], apart: tuple, n: int, pp: int,
                bounds: dict, limit: dict | None, cache: dict, aux_of: dict, dev: Any,
                every_recompute: bool = False, critics: tuple | None = None) -> bool:
    """Whether every candidate of `lay` (memory `mem`) whose update plus old log-prob pass takes at least `lb`
    would be skipped by the tests of `_train_candidates` (see `_interleaved_beaten`, whose verdict this is;
    `every_recompute` there). `critics` (PPO, no target; with `every_recompute`): (pass s, states) pairs that
    each critic paired with it is no less than one of (`_critic_floor`), added to the other models' as
    `with_critic` adds a critic's; None: no critic. A reference on these GPUs is charged its floor
    (`reference_pass_floor`) first: where that loses the variant, its pass is not asked (the same verdict)."""
    live = kinds if limit is None else _within_limit(kinds, lb, n, pp, bounds, limit)
    gather, _, hold_u = _refit_terms(problem, pool, lay, modes, cache)  # (interleaving does not change it)
    lb += gather
    if "colocated" in live and fronts is None:
        return False
    # (what only some branches read is built at its first use: most calls end on the disaggregated trainers'
    # best or the fronts, without the other models' passes)
    dims = apart_of = simple = bound_ranks = ref_floor = ref_ranks = None
    m_states = mem.states
    orchestration = problem.workload.framework.orchestration_s
    for kind in live:
        for hosts, ref, quant, _ in variants_of(kind):
            # a reference on these GPUs (resident or streamed in) takes at least `reference_pass_floor`: where that
            # alone loses, its pass is not scored (the verdict is the one its pass would give: the terms only add)
            hosted_ref = _REFERENCE_FLOOR and ref in ("training", "cpu_offload")
            if hosted_ref and ref_floor is None:
                ref_floor = reference_pass_floor(problem, pool, n, pp, cache)
            if kind == "disagg":
                if apart_of is None:
                    apart_of = tuple(getattr(lay, k) for k in apart) + (hold_u,)
                best = best_disagg.get((n, hosts, ref, quant) + apart_of, math.inf)
                if lb >= best or (hosted_ref and lb + ref_floor >= best):
                    continue
                if dims is None:
                    dims = _aux_dims(problem, lay)
                if critics is None:
                    ref_t, rew_t, val_t, _ = _aux_of(problem, pool, lay, dims, hosts, ref, quant, None, cache, aux_of)
                else:  # (the fastest critic's pass)
                    ref_t, rew_t, _, _ = _others_of(problem, pool, lay, dims, hosts, ref, quant, cache, aux_of)
                    val_t = critics[0][0]
                if lb + ref_t + rew_t + val_t < best:
                    return False
                continue
            group = fronts.get((n, hosts, ref, quant), _NO_FRONT)
            offloads = _offloads(problem, modes, kind, hosts, ref, quant, aux_of)
            if simple is None:
                simple = (_simplicity_of(lay, False), _simplicity_of(lay, True))
            if every_recompute:
                if bound_ranks is None:  # (the same for every variant: built at the first)
                    bound_ranks = ((time_units(lb + orchestration), mem_units_up(m_states), simple[False]),
                                   (time_units(lb + orchestration + 2 * dev.pcie_time(m_states)), 0, simple[True]))
                for off in offloads:  # (a loop, not all() over a generator: ~14k calls a DeepSeek-V2 solve)
                    if not group.covers(bound_ranks[off]):
                        break
                else:
                    # covered without the other models' passes and bytes: with them (>= 0) the rank is no less in
                    # time nor in memory, and a front member that covers a rank covers every rank above it
                    continue
                if hosted_ref and ref_floor > 0.0:  # (the same with the reference's floor in the time)
                    if ref_ranks is None:
                        at = lb + ref_floor + orchestration
                        ref_ranks = ((time_units(at), bound_ranks[0][1], simple[False]),
                                     (time_units(at + 2 * dev.pcie_time(m_states)), 0, simple[True]))
                    for off in offloads:
                        if not group.covers(ref_ranks[off]):
                            break
                    else:
                        continue
            if dims is None:
                dims = _aux_dims(problem, lay)
            if critics is None:
                ref_t, rew_t, val_t, resident = _aux_of(problem, pool, lay, dims, hosts, ref, quant, None, cache,
                                                        aux_of)
                pairs = ((val_t, 0.0),)
            else:  # the other models' passes, with each pair of `critics`
                ref_t, rew_t, _, resident = _others_of(problem, pool, lay, dims, hosts, ref, quant, cache, aux_of)
                pairs = critics
            for val_t, c_states in pairs:
                states = m_states + (resident + c_states)
                if states > cap:
                    continue  # no recompute fits it
                if not every_recompute and mem.total + (resident + c_states) > cap:
                    return False  # a heavier recompute may fit it
                side_lb = lb + ref_t + rew_t + val_t + orchestration
                for off in offloads:
                    rank = (time_units(side_lb + (2 * dev.pcie_time(states) if off else 0.0)),
                            0 if off else mem_units_up(states), simple[off])
                    if not group.covers(rank):
                        return False
    return True


def _critic_floor(problem: Problem, pool: PoolHW, n: int, lay: TrainLayout, critics: dict, cache: dict
                  ) -> tuple[tuple[float, float], ...]:
    """(seconds, states bytes) pairs, the least time first, such that every critic `_with_critics` pairs (no
    target) with this trainer on n GPUs, or with the same trainer at a heavier recompute, takes no less time and
    keeps no fewer states than one of them: the `critic_pass` of the critic's own layouts on n GPUs (those on
    the front of time and states, asked once per count) and the policy's degrees (`critic_like_policy`, legal or
    not) at its floor (`perf.step.critic_pass_floor`: its update and forward grow with the recompute, its states
    do not)."""
    key = ("floor", n)
    front = critics.get(key)
    if front is None:
        front = []
        for c_pass in sorted(c_pass[:2] for _, c_pass in _own_critics(problem, pool, n, critics, cache)):
            if not front or c_pass[1] < front[-1][1]:
                front.append(c_pass)
        front = critics[key] = tuple(front)
    like = critic_like_policy(problem, lay)
    return tuple(sorted(front + ((critic_pass_floor(problem, pool, like, cache),
                                  critic_memory(problem, like, cache).states),)))


class _Front:
    """A colocated front of `_train_candidates`: the ranks (time, memory held, simplicity) of the
    candidates it kept, in their order, with the least memory held by each prefix of them. A member
    covers a rank where it holds no more and comes no later in that order (`_prune_train` would drop
    a candidate of that rank): the members no later are a prefix (bisection), and one of them holds
    no more where that prefix's least does (a property test compares it with the scan of every member)."""
    __slots__ = ("ranks", "least")

    def __init__(self) -> None:
        self.ranks: list[tuple] = []
        self.least: list[int] = []  # least[j]: the least memory held among ranks[:j + 1]

    def covers(self, rank: tuple) -> bool:
        j = bisect.bisect_right(self.ranks, rank)
        return j > 0 and self.least[j - 1] <= rank[1]

    def add(self, rank: tuple) -> None:
        j = bisect.bisect_right(self.ranks, rank)
        least = self.least
        m = rank[1] if j == 0 else min(least[j - 1], rank[1])
        self.ranks.insert(j, rank)
        least.insert(j, m)
        for i in range(j + 1, len(least)):  # (the prefixes after it: non-increasing, so they stop at one below m)
            if least[i] <= m:
                break
            least[i] = m


_NO_FRONT = _Front()  # (the front of a group with no member yet: read, never added to)


def _offloads(problem: Problem, modes: list[str], kind: str, hosts: frozenset, ref: str, quant: str, memo: dict
              ) -> tuple[bool, ...]:
    """The offload choices of a training candidate: (False, True) where the target runs its placements
    with the states offloaded during rollout in some mode (`_train_modes` with offload), else (False,);
    memoized in `memo` (the caller's, for one set of modes)."""
    key = ("offloads", kind, hosts, ref, quant)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (False, True) if _train_modes(problem, modes, kind, hosts, ref, quant, offload=True) \
            else (False,)
    return hit


def _keys_of(failed: dict) -> set[tuple]:
    """Each key (kind, hosts, reference, quantization, critic key) of the variants in `failed`."""
    return {v[:4] + (k,) for v in failed for k in v[4]}


def _left_by_both(failed: dict, other: dict) -> dict:
    """The variants of `failed` whose keys all are left in `other` too (neither placed nor dominated)."""
    keys = _keys_of(other)
    return {v: c for v, c in failed.items() if all(v[:4] + (k,) in keys for k in v[4])}


def _still_to_try(kind: str, tries, ckeys: list[tuple], done: set | None, left: dict) -> list:
    """Of (variant, (i, critic)) at a heavier recompute, in order, those not done at a lighter one:
    with `done` (a target), none of whose keys is in it; else each that `left` (the variants whose
    models did not fit beside the lighter one) holds all the keys of."""
    if done is not None:
        return [(v, ic) for v, ic in tries if not any((kind,) + v[:3] + (k,) in done for k in ckeys[ic[0]])]
    # `left`'s critic keys of this kind, by variant: a variant's tries share its set (asked once per variant)
    held: dict[tuple, set] = {}
    for k in _keys_of(left):
        if k[0] == kind:
            held.setdefault(k[1:4], set()).add(k[4])
    if not held:
        return []
    out, last, mine, none = [], None, None, frozenset()
    for v, ic in tries:
        if v is not last:
            last, mine = v, held.get(v[:3], none)
        if all(k in mine for k in ckeys[ic[0]]):
            out.append((v, ic))
    return out


def _fits_now(problem: Problem, pool: PoolHW, lay: TrainLayout, mem: Any, cap: float, cache: dict, aux_of: dict,
              failed: dict, dead: set, beaten=None, core_lb: float = 0.0) -> bool:
    """Whether a variant whose other models did not fit beside a lighter recompute (`failed`) fits
    beside this one (the memory tests of `_train_candidates`, which need no scoring) and, with
    `beaten`, would not lose to a candidate already found with the lighter one's update and old
    log-prob pass (`core_lb`: more recompute is never faster). Its critic is the same layout of its
    own, or the policy's degrees at this recompute (only without a target, where the critics paired
    with a trainer do not read its recompute)."""
    dims = _aux_dims(problem, lay)
    like = None
    m_total, m_states = mem.total, mem.states
    passes: dict[int, tuple] = {}  # critic_pass by the critic's id (each critic recurs once per variant)
    last = others = None  # the variant of the entry before, and its other models' passes (asked where needed)
    for (kind, hosts, ref, quant, keys), critic in failed.items():
        if kind in dead:
            continue
        tries = [critic] if keys.count("like") < len(keys) else []  # (a key other than "like")
        if "like" in keys:
            like = like or critic_like_policy(problem, lay)
            tries.append(like)
        if last is None or hosts is not last[0] or ref is not last[1] or quant is not last[2]:
            last, others = (hosts, ref, quant), None  # (entries come variant by variant: `failed`'s order)
        for c in tries:
            if c is None:
                aux = _aux_of(problem, pool, lay, dims, hosts, ref, quant, None, cache, aux_of)
            else:  # (`_aux_of` with this critic, written out as in `_train_candidates`)
                c_pass = passes.get(id(c))
                if c_pass is None:  # (the critics live in `failed` and `like` while this runs: their ids hold)
                    c_pass = passes[id(c)] = critic_pass(problem, pool, c, cache)
                if others is None:
                    others = _others_of(problem, pool, lay, dims, hosts, ref, quant, cache, aux_of)
                aux = with_critic(others, c_pass)
            resident = aux[3]
            if m_total + resident <= cap and (c is None or critic_fits(mem, resident, *c_pass[1:], cap)) and (
                    beaten is None or not beaten(kind, hosts, ref, quant, lay, core_lb, aux, m_states + resident)):
                return True
    return False


def _within_limit(kinds: list[str], core_s: float, n: int, pp: int, bounds: dict, limit: dict) -> list[str]:
    """The kinds in which a trainer whose update plus old log-prob pass takes `core_s` can still
    come within `limit`: its candidates' time is at least that (the other models' passes,
    the orchestration and the offload switch only add), with the send time of its count and,
    colocated, the floor of any engine on its GPUs (the bounds of the GPU count's test above:
    `_prune_by_bound` drops such a candidate, and no engine's bound pairs below it)."""
    _, send_u, gen_u = bounds[n, pp]
    core_u = time_units(core_s)
    return [k for k in kinds if not _beyond(k, core_u, send_u, limit, gen_u if k == "colocated" else 0)]


def _min_recv_units(problem: Problem) -> int:
    """No engine GPU receives the weights faster than this (ms): its share shrinks with tp
    and pp, so the widest tp any pool may use with one layer per stage receives the least."""
    cons = problem.spec.constraints.generation
    tp = max([max(pool.scaleup_size, 1) for pool in problem.pools] + [int(t) for t in asked(cons, "tp")])
    L = problem.policy.layers
    return min(time_units(recv_time(problem, pool, GenLayout(tp=tp, pp=L, dp=1))) for pool in problem.pools)


@lru_cache(maxsize=4096)
def _same_stage_degrees_of(layers: tuple[int, ...], pp: int) -> tuple[int, ...]:
    return tuple(q for q in range(2, pp) if all(math.ceil(L / q) == math.ceil(L / pp) for L in layers))


def _same_stage_degrees(problem: Problem, pp: int) -> tuple[int, ...]:
    """Pipeline degrees 1 < q < pp that give every model on the trainers the layers per
    stage that pp gives."""
    archs = (problem.policy, problem.value, problem.reference, problem.reward)
    return _same_stage_degrees_of(tuple(a.layers for a in archs if a is not None), pp)


def _fewer_stages_dominate(problem: Problem, pool: PoolHW, n: int, tp: int, pp: int, cp: int, dp: int,
                           min_recv: int) -> bool:
    """Dominance for disaggregated trainers: with uneven stages, a smaller pipeline degree pp'
    > 1 that gives every model on the trainers (policy, critic, reference, reward) the same
    layers per stage (ceil(layers / pp)) holds the same parameters per GPU, fewer
    micro-batches in flight and a shorter bubble and fill, on fewer GPUs: every layout of
    this shape is matched by one of pp' that is no slower and needs no more memory (a
    property test checks it). Fewer GPUs send the weights slower, so this holds only while
    their send time stays within what the fastest engine GPU needs to receive them (the
    broadcast takes the longer). Not with LoRA (adapters split by pp, not by stage) or a
    target framework (it may run one degree and not the other), nor for colocated trainers,
    whose GPUs are the engines'."""
    if pp <= 2 or problem.workload.lora_rank or target_caps(problem) is not None or problem.value is not None:
        return False  # (a critic may take a layout of its own on these GPUs, which fewer GPUs may not hold)
    for q in _same_stage_degrees(problem, pp):
        m = tp * q * cp * dp
        if (count_ok(pool, m) and time_units(send_time(problem, pool, m)) <= min_recv
                and not train_shape_violations(problem, pool, m, tp, q, cp, dp)):
            return True
    return False


class _ColocatedEngineFloor:
    """A lower bound (ms) on the rollout of colocated engines on n GPUs of a pool, whatever
    memory training holds: the least `gen_side(lower_bound=True)` time over the engine
    layouts on n GPUs, each read at the next power of two of replicas (the bound never falls
    with fewer replicas, and held memory never speeds generation: both are property tests),
    so a few evaluations serve every count."""

    def __init__(self, problem: Problem, pool: PoolHW):
        self.problem, self.pool = problem, pool
        self.memo: dict[tuple, int] = {}
        self.counts: dict[int, int] = {}

    def _at(self, tp: int, pp: int, ep: int, dp: int) -> int:
        key = (tp, pp, ep, dp)
        if key not in self.memo:
            lb = gen_side(self.problem, self.pool, GenLayout(tp=tp, pp=pp, dp=dp, ep=ep), lower_bound=True,
                          fixed_shares=engine_shares_fixed("colocated", self.problem.workload.framework))
            self.memo[key] = _lb_units(lb.time) if lb.fits else INF_TIME
        return self.memo[key]

    def __call__(self, n: int) -> int:
        if n not in self.counts:
            self.counts[n] = min((self._at(lay.tp, lay.pp, lay.ep, 1 << (lay.dp - 1).bit_length())
                                  for lay in gen_universe(self.problem, self.pool, n)), default=INF_TIME)
        return self.counts[n]


def _critic_options(problem: Problem, pool: PoolHW, n: int, cache: dict, skip: bool = True
                    ) -> list[tuple[frozenset, TrainLayout]]:
    """The critic's own layouts on n GPUs worth pairing with a trainer: per set of target engines
    that run it, the front of (time, states kept, peak memory) (a critic no faster, holding no
    less and peaking no lower than another is never better beside any trainer).
    `skip` (False only in tests): a layout is not scored where one already scored with the same engines
    keeps no more states, peaks no lower (`critic_pass`'s states and peak: `critic_memory`'s, cheap and
    exact) and comes before it in the front's order even at its time floor (`perf.step.critic_pass_floor`
    <= its time, a property test): the front drops it, and whatever it would drop, that one drops too
    (the same options with and without the skip: a test)."""
    caps = target_caps(problem)
    cap = capacity_bytes(pool, problem.workload.headroom)
    scored = []
    rivals: dict[frozenset, list] = {}
    for i, lay in enumerate(critic_universe(problem, pool, n)):
        if critic_violations(problem, pool, n, lay):
            continue  # against the rules
        mem = critic_memory(problem, lay, cache)  # (`critic_pass`'s: its memo keys do not read the strategy)
        states, peak = mem.states, mem.total
        if peak > cap:
            continue  # no room for it even alone
        engines = frozenset(strategies(caps, lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage, lay.recompute,
                                       critic=True))
        mine = rivals.setdefault(engines, [])
        covering = [r for r in mine if r[1] <= states and r[2] <= peak] if skip else []
        if covering:
            least = (time_units(critic_pass_floor(problem, pool, lay, cache)), states, peak, lay.zero_stage,
                     lay.micro_batch, i)
            if any(r < least for r in covering):
                continue  # dominated by a layout scored already, whatever its time
        t, states, peak = critic_pass(problem, pool, lay, cache)
        key = (time_units(t), states, peak, lay.zero_stage, lay.micro_batch, i)
        mine.append(key)
        scored.append((key, engines, lay))
    scored.sort(key=lambda x: x[0])
    fronts: dict[frozenset, list] = {}
    for (t, states, peak, *_), engines, lay in scored:
        front = fronts.setdefault(engines, [])
        if any(s2 <= states and p2 <= peak for _, s2, p2, _ in front):
            continue
        front.append((t, states, peak, lay))
    return [(engines, lay) for engines, front in fronts.items() for *_, lay in front]


def _own_critics(problem: Problem, pool: PoolHW, n: int, critics: dict, cache: dict) -> list[tuple]:
    """The critic's own layouts on n GPUs (`_critic_options`), each with its `critic_pass`: looked up once per count
    (memoized in `critics[n]`)."""
    hit = critics.get(n)
    if hit is None:
        hit = critics[n] = [(lay, critic_pass(problem, pool, lay, cache))
                            for _, lay in _critic_options(problem, pool, n, cache)]
    return hit


def _critics_for(problem: Problem, pool: PoolHW, n: int, policy: TrainLayout, critics: dict, cache: dict
                 ) -> list[tuple]:
    """The critic layouts to pair with this trainer, each with its `critic_pass`: [(None, None)]
    without a critic; the policy's degrees where the target has no critic layout of its own;
    else the front of its own layouts that some target engine runs beside the policy's."""
    if problem.value is None:
        return [(None, None)]
    caps = target_caps(problem)
    if caps is not None and not caps.shapes.value.critic_own_layout:
        like = critic_like_policy(problem, policy)
        return [(like, critic_pass(problem, pool, like, cache))] if not critic_violations(problem, pool, n, like) else []
    found = [(lay, cp) for lay, cp in _own_critics(problem, pool, n, critics, cache)
             if not critic_pair_violations(problem, policy, lay)]
    like = critic_like_policy(problem, policy)
    if all(lay != like for lay, _ in found) and not critic_violations(problem, pool, n, like) and not \
            critic_pair_violations(problem, policy, like):
        found.append((like, critic_pass(problem, pool, like, cache)))
    # fastest first, then fewer states kept; on a tie the trainer's own degrees
    return sorted(found, key=lambda c: (c[1][:2], c[0] != like))


def _interleaving_dominated(problem: Problem, plain: TrainLayout, t: Any, old: float, vp: int, cap: float,
                            cache: dict, allowed_and_fits: bool = False) -> bool:
    """Dominance across virtual stages: `plain` (vp = 1, its least recompute r, scored: update
    time `t`, old log-prob pass `old`) against the same degrees with vp interleaved chunks.
    With r, the stages' times do not depend on vp (only a partial `recompute_layers` would),
    so interleaving changes the update by exactly its pipeline terms: the p2p sends grow
    vp-fold and the bubble shrinks to 1/vp, i.e. by (vp - 1) x (p2p - bubble / vp) of plain's;
    the old log-prob pass, the states, the other models' passes and their memory do not
    change, and the activations in flight only grow (Korthikanti et al.'s interleaved
    factor). So when that change is positive and r fits with vp (the least recompute that
    fits is then r: a lesser one is over at vp = 1 already, or not allowed), the interleaved
    layout is slower than plain, holds the same states and no less memory, and is less
    simple: no front keeps it (it fits nothing plain does not). Only without a target
    framework, whose engines may run one vp and not the other. A property test checks it.
    `allowed_and_fits`: the caller holds that layout (plain's with vp) from `_recompute_levels`, which
    yields only layouts the rules allow and the memory fits: those two tests are not asked again."""
    if plain.recompute_layers > 0 or target_caps(problem) is not None:
        return False
    if (vp - 1) * (t.pp_comm - t.bubble / vp) <= 1e-9 * (t.total + old):
        return False  # faster (or too close to call in floating point): scored as usual
    if allowed_and_fits:
        return True
    lay = layout_with(plain, vp=vp)
    return not train_layout_violations(problem, lay) and policy_memory(problem, lay, cache).total <= cap


def _smallest_fits(problem: Problem, tp: int, pp: int, cp: int, dp: int, ep: int, vp: int, zero: int, mb: int,
                   top_zero: int, cap: float, cache: dict, memo: dict, mems: dict | None = None) -> bool:
    """Whether the smallest memory of a training base (its least micro-batch `mb`, full recompute)
    fits `cap`, memoized in `memo` (the caller's, for one shape) per (ep, vp, ZeRO stage). The
    policy's memory never falls with more virtual stages (more micro-batches in flight, the same
    states) nor with a lower ZeRO stage (less sharded states, the same activations): a property
    test, `test_memory_never_falls_with_more_virtual_stages_or_less_zero`. So where the same base
    with vp = 1, or with the shape's highest ZeRO stage `top_zero`, does not fit, this one does
    not either; both are bases of the same shape that the caller asks about anyway. `mems` (the
    caller's): the memory of each base asked here, by the same key."""
    key = (ep, vp, zero)
    hit = memo.get(key)
    if hit is not None:
        return hit
    for other in ((ep, 1, zero) if vp > 1 else None, (ep, vp, top_zero) if zero < top_zero else None):
        if other is not None:
            fits = memo.get(other)
            if fits is None:
                fits = _smallest_fits(problem, tp, pp, cp, dp, *other, mb, top_zero, cap, cache, memo, mems)
            if not fits:
                memo[key] = False
                return False
    mem = policy_memory(problem, layout_with(_shape_layout(tp, pp, cp, dp, mb), ep=ep, vp=vp, zero_stage=zero,
                                              recompute="full"), cache)
    if mems is not None:
        mems[key] = mem
    hit = memo[key] = mem.total <= cap
    return hit


@lru_cache(maxsize=4096)
def _shape_layout(tp: int, pp: int, cp: int, dp: int, mb: int) -> TrainLayout:
    """The default layout of these degrees and micro-batch, to copy bases from (`layout_with`)."""
    return TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=mb, sequence_parallel=tp > 1)


_SKIP_BEATEN_MICRO_BATCHES = True  # (a switch for the property test that compares the candidates without it)
_MEMO_BEATEN_VP = True  # (likewise: `beaten_from` in `_train_candidates`)
_FLOOR_BEFORE_SCORING = True  # (likewise: the floor test before `train_core` in `_train_candidates`)
_REFERENCE_FLOOR = True  # (likewise: `reference_pass_floor` before the other models' passes in `_all_beaten`)
_SKIP_DOMINATED_ENGINES = True  # (likewise: `_gen_candidates`' engines left out of their front before simulating)


def _layout_allowed(problem: Problem, lay: TrainLayout, rules: dict | None) -> bool:
    """No `train_layout_violations`, memoized in `rules` (the caller's, for one set of tp, pp and
    cp degrees) by what they depend on there: the expert, virtual-stage, ZeRO and recompute
    choices, whether dp * micro-batch splits the batch and tp * dp * cp holds whole expert groups
    (the rules read dp nowhere else), and the micro-batch itself only where the user names
    micro-batches."""
    if rules is None:
        return not train_layout_violations(problem, lay)
    mb = lay.micro_batch if "micro_batch" in problem.spec.constraints.training else 0
    key = (lay.ep, lay.vp, lay.zero_stage, lay.recompute, mb, problem.workload.global_batch % (lay.dp * lay.micro_batch)
           == 0, lay.tp * lay.dp * lay.cp % lay.ep == 0)
    hit = rules.get(key)
    if hit is None:
        hit = rules[key] = not train_layout_violations(problem, lay)
    return hit


def _recompute_levels(problem: Problem, base: TrainLayout, cap: float, cache: dict, over: set[str] | None = None,
                      rules: dict | None = None, full: Any = None):
    """The recomputes that the rules allow and memory fits (the policy alone), lightest first:
    an iterator of (layout, memory), computed as it is read (the caller stops early). None:
    nothing fits; False: nothing is allowed. `over` (updated): recomputes known not to fit
    (the caller's, from a smaller micro-batch), only checked against the rules. `full`: the
    policy's memory of `base` with full recompute, where the caller has it."""
    allowed_any = False
    skipped = []
    over = set() if over is None else over
    for k, rec in enumerate(RECOMPUTE):
        if rec == "selective" and "none" in over and base.attention != "unfused":
            over.add(rec)  # with fused attention it stores what "none" stores (`train_memory`): no fit either
        if rec in over:
            skipped.append(rec)
            continue
        lay = layout_with(base, recompute=rec)
        if not _layout_allowed(problem, lay, rules):
            continue
        allowed_any = True
        mem = full if rec == "full" and full is not None else policy_memory(problem, lay, cache)
        if mem.total <= cap:
            return _heavier_levels(problem, base, lay, mem, RECOMPUTE[k + 1:], cap, cache, rules, full)
        over.add(rec)
    if not allowed_any:  # none is allowed unless one known not to fit is
        allowed_any = any(_layout_allowed(problem, layout_with(base, recompute=rec), rules) for rec in skipped)
    return None if allowed_any else False


def _heavier_levels(problem: Problem, base: TrainLayout, lay: TrainLayout, mem: Any, heavier: tuple[str, ...],
                    cap: float, cache: dict, rules: dict | None, full: Any = None):
    yield lay, mem
    for rec in heavier:
        lay = layout_with(base, recompute=rec)
        if _layout_allowed(problem, lay, rules):
            mem = full if rec == "full" and full is not None else policy_memory(problem, lay, cache)
            if mem.total <= cap:
                yield lay, mem


def _largest_count(pool: PoolHW, left: int, per_replica: int) -> int:
    """The largest legal count <= left that whole replicas of `per_replica` GPUs fill (0: none)."""
    g = pool.gpus_per_node
    if left >= g:
        step = g * per_replica // math.gcd(g, per_replica)  # whole nodes holding whole replicas
        c = left // step * step
        if c >= g:
            return c
    for d in sorted((d for d in range(1, min(left, g - 1) + 1) if g % d == 0), reverse=True):
        if d % per_replica == 0:
            return d
    return 0


def _gen_counts(problem: Problem, p: int, all_counts: bool, out: Candidates) -> list[int]:
    """Engine GPU counts to score in pool p (disaggregated)."""
    pool = problem.pools[p]
    single = len(problem.pools) == 1
    legal = [n for n in role_counts(pool) if not (single and n >= pool.n_gpus)]
    if all_counts:
        return legal
    taken_t = {0} | {c.gpus for c in out.train if c.pool == p and c.mode == "disagg"}
    taken_a = {0} | {a.gpus for a in out.aux if a.pool == p}
    lefts = {pool.n_gpus - t - a for t in taken_t for a in taken_a if pool.n_gpus - t - a > 0}
    if single:  # the trainers take at least one GPU of the pool
        lefts = {x for x in lefts if x < pool.n_gpus}
    per_replica = {lay.tp * lay.pp for lay in gen_universe(problem, pool, max(legal, default=1))} | {1}
    counts = set()
    for x in lefts:
        for r in per_replica:
            c = _largest_count(pool, x, r)
            while c > 0 and count_user_violations(problem, "generation", c):  # the user caps the engines' GPUs
                c = _largest_count(pool, c - 1, r)
            counts.add(c)
    return sorted(c for c in counts if c > 0)


# Bounds prune against the best plan found in each mode plus this share of it, not the plan
# itself: the runner-ups (the best plan of every other mode, then the next plans, each within
# the margin of its mode's best) stay in the program, whose optimum is unaffected either way.
RUNNER_UP_MARGIN = 0.1


def _relaxed(incumbent: dict | None) -> dict | None:
    """The pruning limit of each mode (ms): its incumbent plus RUNNER_UP_MARGIN (no limit
    while a mode has no plan yet)."""
    if incumbent is None:
        return None
    return {m: u if u >= INF_TIME else u + int(u * RUNNER_UP_MARGIN) for m, u in incumbent.items()}


def _lb_units(seconds: float) -> int:
    """A time bound in the program's units, rounded down (the bound must not overstate)."""
    return int(math.floor(seconds / 1e-3 * (1 - 1e-9))) if math.isfinite(seconds) else INF_TIME


def train_time_lower_bound(problem: Problem, pool: PoolHW, n: int, pp: int = 1) -> float:
    """Seconds that no training side on n GPUs of `pool` with `pp` pipeline stages beats, by
    the model's own terms, each taken at its least over the layouts the solver scores: the
    weight GEMMs of the policy's update (forward and backward; the weight-gradient GEMM only
    when the weights train) and of its old log-prob pass, and the critic's the same way, at the
    device's fastest GEMM rate (`Device.gemm_time` of an infinitely large GEMM), the routed MoE
    block slowed by the host-bound stack (`moe_host_efficiency` of the solver's layouts, which
    never set a dispatcher or CUDA graphs: `rules.train_bases`), the attention (`_layer_fwd`:
    fused causal at `attention_flops` or unfused at the GEMM rate, whichever is less, and its
    backward) and the elementwise HBM traffic (norms, residuals, rotary, activation, MoE
    permute; forward once, backward twice), each divided by the efficiency a profile grants. A
    stage runs its share of the n / pp GPUs' work, and the pipeline goes at its busiest stage,
    which holds at least ceil(layers / pp) layers and the output layer, and at least 1/pp of the
    whole model.
    Communication, bubbles, recompute, the optimizer and the other models' forwards only add to
    it, so it holds whatever the model charges for them (a property test checks it against
    `train_core`)."""
    wl = problem.workload
    dev = device(pool, wl.precision, problem.profile)
    update = wl.optimizer_steps * wl.global_batch / dev.train_efficiency
    forward = wl.samples / dev.logprob_efficiency
    train = 2 if wl.lora_rank else 3  # GEMM passes of a training micro-batch
    work = update * _stage_seconds_per_token(problem.policy, dev, pp, wl.seq_mean, train) + \
        forward * _stage_seconds_per_token(problem.policy, dev, pp, wl.seq_mean, 0)
    if problem.value is not None:
        work += update * _stage_seconds_per_token(problem.value, dev, pp, wl.seq_mean, 3) + \
            forward * _stage_seconds_per_token(problem.value, dev, pp, wl.seq_mean, 0)
    return work * wl.seq_mean * pp / n


def reference_pass_floor(problem: Problem, pool: PoolHW, n: int, pp: int, cache: dict | None = None) -> float:
    """Seconds that the reference's forward pass on a trainer of n GPUs with `pp` stages (`train_aux`'s reference
    time, resident or streamed from the host) never undercuts: `train_time_lower_bound`'s forward term with the
    reference's architecture (its GEMMs at the device's fastest rate, attention, elementwise traffic and the MoE
    host slowdown at their least, over the rollout's samples of mean length, the busiest stage's share of the
    n / pp GPUs), shaded by 1e-9; 0 without a reference. The copies over PCIe of a reference on the host only add.
    A property test checks it against `train_aux`. Memoized in `cache` (the caller's, for one pool) by (n, pp)."""
    if problem.reference is None:
        return 0.0
    key = ("reference pass floor", n, pp)
    hit = None if cache is None else cache.get(key)
    if hit is None:
        wl = problem.workload
        dev = device(pool, wl.precision, problem.profile)
        per_token = _stage_seconds_per_token(problem.reference, dev, pp, wl.seq_mean, 0)
        hit = wl.samples / dev.logprob_efficiency * per_token * wl.seq_mean * pp / n * (1 - 1e-9)
        if cache is not None:
            cache[key] = hit
    return hit


def _stage_seconds_per_token(arch, dev, pp: int, seq_len: float, train_gemms: int) -> float:
    """Least seconds per token of one GPU on the busiest of pp stages, times the stage's GPUs
    (a token's work is split over them): a training micro-batch (`train_gemms` weight-GEMM
    passes, 3 or 2 under LoRA) or a forward (0). Each term is one `train._layer_fwd` and
    `stage_times` add, at its least: GEMMs at the device's fastest rate (16-bit for the LM head
    under FP8 recipes), the routed block's over the default stack's host efficiency; attention
    at the lesser of the fused causal (at the GPU's fastest attention kernel and pass, whichever
    backend trains) and the unfused full-square kernels (backward: the lesser
    of FA_BWD_OVER_FWD and the unfused 2x); elementwise bytes at HBM rate (backward moves twice
    the forward's). Norms hold weights but run no GEMM; a stage's layers may all be of the
    cheaper kind, dense or MoE; the busiest stage holds the output layer beside them (without
    pipeline_split_embedding_loss, which the solver's layouts never set, `stage_times` charges it
    to the stage of ceil(layers / pp) layers)."""
    dev16 = replace(dev, precision="bf16")
    rate = max(dev.peak_flops * dev.gemm_fraction, dev16.peak_flops * dev16.gemm_fraction)
    fwd_only = train_gemms == 0
    gemm_passes = 1 if fwd_only else train_gemms
    attn_passes = 1.0 if fwd_only else 1.0 + min(FA_BWD_OVER_FWD, 2.0)
    elem_passes = 1.0 if fwd_only else 3.0
    eff = moe_host_efficiency(TrainLayout())
    h = arch.hidden
    attention = min(arch.attention_flops_per_token(seq_len, causal=True) / dev.fastest_attention_flops,
                    arch.attention_flops_per_token(seq_len, causal=False) / rate) / arch.layers

    def layer(mlp_flops: float, width_elem: float, perm: float) -> float:
        gemm = (2.0 * arch.attn_params_per_layer / rate + mlp_flops) * gemm_passes
        elems = BF16 * (layer_elementwise_elems(arch, width_elem) + perm)
        return gemm + attention * attn_passes + dev.stream_time(elems) * elem_passes

    dense = layer(2.0 * arch.dense_mlp_params / rate, arch.d_ffn, 0.0)
    kinds = [dense] if arch.layers > arch.moe_layers else []
    moe = 0.0
    if arch.moe_layers:
        k = arch.experts_per_token
        mlp = 2.0 * (h * arch.experts + (k + arch.shared_experts) * arch.expert_params) / rate / eff
        moe = layer(mlp, (k + arch.shared_experts) * arch.d_moe_ffn, 2 * (k * h + h) / eff)
        kinds.append(moe)
    head = 2.0 * arch.output_params / rate * gemm_passes
    whole = (arch.layers - arch.moe_layers) * dense + arch.moe_layers * moe + head
    # the busiest stage `stage_times` charges: ceil(layers / pp) layers and the output layer (the
    # solver's layouts never give the embedding and the loss a layer's slot: rules.train_universe)
    return max(math.ceil(arch.layers / pp) * min(kinds) + head, whole / pp)


def _beyond(kind: str, train_units: int, send_units: int, incumbent: dict, gen_units: int = 0) -> bool:
    """A training side of this kind whose time is at least `train_units` (ms), paired with
    engines taking at least `gen_units`, cannot be part of a plan faster than the incumbent of
    any mode it serves (a mode missing from `incumbent` is not allowed): colocated, the step
    is at least generation plus training; sync, generation plus sending the weights plus
    training; async, the training time (`compose_step`: no term subtracts from these)."""
    if kind == "colocated":
        return gen_units + train_units > incumbent.get("colocated", -1)
    return (gen_units + train_units + send_units > incumbent.get("sync", -1)
            and train_units > incumbent.get("async", -1))


def _train_beyond(c: TrainCand, incumbent: dict, gen_units: int = 0) -> bool:
    return _beyond(c.mode, time_units(c.time), time_units(c.send), incumbent, gen_units)


def _probe_shapes(problem: Problem, pool: PoolHW) -> list[tuple]:
    """A few training shapes for a first plan: in the top two octaves of the pool's size, the largest
    legal count, with the widest tensor parallelism and the least context parallelism there."""
    shapes = list(train_shapes(problem, pool))
    counts = sorted({s[0] for s in shapes})
    picked = {max((c for c in counts if c <= pool.n_gpus >> k), default=0) for k in range(2)} - {0}
    out = []
    for n in sorted(picked):
        at = [s for s in shapes if s[0] == n and not train_shape_violations(problem, pool, *s)]
        if not at:
            continue
        cp = min(s[3] for s in at)
        tp = max(s[1] for s in at if s[3] == cp)
        out += [s for s in at if s[3] == cp and s[1] == tp]
    return out


def _probe_incumbents(problem: Problem, modes: list[str], deadline: Deadline, out: Candidates, memo: dict
                      ) -> dict:
    """Per mode, the step (ms) of the best plan among a few training shapes (`_probe_shapes`)
    and the engines they leave room for, without auxiliary groups: real plans of the full
    space, so the optimum is no slower than each."""
    probe = Candidates(gen=[], train=[])
    for p, pool in enumerate(problem.pools):
        probe.train += _train_candidates(problem, p, modes, probe, deadline, shapes=_probe_shapes(problem, pool),
                                         probe=True, front=True, memo=memo)
    probe.train = _prune_train(probe.train)
    incumbent = {m: INF_TIME for m in modes}
    for p in range(len(problem.pools)):
        # the probe only needs the best plan of each mode: no margin for runner-ups
        _gen_candidates(problem, p, modes, False, probe, deadline, True, incumbent=incumbent, memo=memo, margin=False)
    out.evaluated += probe.evaluated
    return incumbent


def _prune_aux_by_bound(problem: Problem, aux: list[AuxCand], train: list[TrainCand], incumbent: dict,
                        gen_units: dict | None = None) -> list[AuxCand]:
    """An auxiliary group's forwards add to the training side in every mode, so a plan with it
    takes at least its time plus the fastest trainer of that mode's kind that fits beside it
    (a trainer in the group's pool has the GPUs the group leaves), plus, when known, the
    fastest engines `gen_units` of the mode (generation and training are in sequence
    colocated and sync)."""
    gen_units = gen_units or {}
    index = {kind: sorted((c.pool, c.gpus, time_units(c.time)) for c in train if c.mode == kind)
             for kind in ("colocated", "disagg")}

    def fastest(kind: str, a: AuxCand) -> int:
        left = problem.pools[a.pool].n_gpus - a.gpus
        return min((t for q, n, t in index[kind] if q != a.pool or n <= left), default=INF_TIME)

    kept = []
    for a in aux:
        tu = time_units(a.time)
        floor = {kind: fastest(kind, a) for kind in ("colocated", "disagg")}
        if any(tu + floor["colocated" if m == "colocated" else "disagg"] + gen_units.get(m, 0) <= incumbent[m]
               for m in incumbent):
            kept.append(a)
    return kept


def _prune_by_bound(problem: Problem, out: Candidates, modes: list[str], incumbent: dict) -> None:
    """With the final incumbents: drop the engines whose best pairing (the bound of
    `_gen_candidates`, with their simulated time) cannot beat them, then the trainers no engine
    left can make a plan with (a colocated one needs a colocated engine on its pool and
    count) or whose time with the fastest engine cannot beat them, then the auxiliary
    groups."""
    d_modes = [m for m in modes if m in ("sync", "async")]
    coloc = _TrainIndex(problem, out, "colocated")
    disagg = _TrainIndex(problem, out, "disagg")
    kept = []
    for g in out.gen:
        if g.mode == "colocated":
            t = coloc.colocated(g.pool, g.gpus, g.reserved_gb)
            ok = t is not None and time_units(g.time) + time_units(t.time) <= incumbent["colocated"]
        else:
            t = disagg.disagg(g.pool, g.gpus, problem.pools[g.pool].n_gpus, len(problem.pools))
            ok = t is not None and any(compose_step(m, time_units(g.time), time_units(t.time), time_units(g.sync), 0)
                                       <= incumbent[m] for m in d_modes)
        if ok:
            kept.append(g)
    out.gen = kept
    coloc_gen: dict[tuple, int] = {}
    for g in out.gen:
        if g.mode == "colocated":
            key = (g.pool, g.gpus)
            coloc_gen[key] = min(coloc_gen.get(key, INF_TIME), time_units(g.time))
    disagg_gen = min((time_units(g.time) for g in out.gen if g.mode == "disagg"), default=INF_TIME)
    out.train = [c for c in out.train if not _train_beyond(
        c, incumbent, coloc_gen.get((c.pool, c.gpus), INF_TIME) if c.mode == "colocated" else disagg_gen)]
    gen_floor = {"colocated": min(coloc_gen.values(), default=INF_TIME), "sync": disagg_gen}
    out.aux = _prune_aux_by_bound(problem, out.aux, out.train, incumbent, gen_floor)


class _TrainIndex:
    """The trainers an engine candidate can pair with, for bounds and incumbents: per pool
    (and hosted models), sorted by the key a pairing limits (GPUs for disaggregated trainers,
    memory held for colocated ones on one count) with the running minimum of their times,
    so each query is one bisection."""

    def __init__(self, problem: Problem, out: Candidates, mode: str):
        self.models = frozenset(aux_models(problem))
        self.pools = [pool.n_gpus for pool in problem.pools]
        self.by_time = sorted((c for c in out.train if c.mode == mode), key=lambda c: time_units(c.time))
        # per (hosted models, pool): the auxiliary groups by GPUs, with the least time (ms) up to each
        groups_of: dict[tuple, list[AuxCand]] = {}
        for a in out.aux:
            groups_of.setdefault((a.hosts, a.pool), []).append(a)
        self.aux_front: dict[tuple, tuple[list[int], list[int]]] = {}
        for key, cs in groups_of.items():
            gpus, least = [], []
            for a in sorted(cs, key=lambda a: (a.gpus, time_units(a.time))):
                gpus.append(a.gpus)
                least.append(min(time_units(a.time), least[-1]) if least else time_units(a.time))
            self.aux_front[key] = (gpus, least)
        self.completions: dict[tuple, int | None] = {}
        self.lists: dict[tuple, tuple[list[int], list[int], list[TrainCand]]] = {}
        groups: dict[tuple, list[TrainCand]] = {}
        for c in out.train:
            if c.mode != mode:
                continue
            where = (c.pool, c.gpus) if mode == "colocated" else (c.pool,)
            for hosts in (None, c.hosts):
                groups.setdefault(where + (hosts,), []).append(c)
        for key, cs in groups.items():
            cs.sort(key=lambda c: (self._limit_key(c), time_units(c.time)))
            keys, best, who = [], [], []
            for c in cs:
                if not best or time_units(c.time) < best[-1]:
                    keys.append(self._limit_key(c))
                    best.append(time_units(c.time))
                    who.append(c)
            self.lists[key] = (keys, best, who)

    @staticmethod
    def _limit_key(c: TrainCand) -> int:
        return c.reserved_gb if c.mode == "colocated" else c.gpus

    def _query(self, key: tuple, limit: float) -> TrainCand | None:
        entry = self.lists.get(key)
        if not entry:
            return None
        i = bisect.bisect_right(entry[0], limit) - 1
        return entry[2][i] if i >= 0 else None

    def colocated(self, pool: int, n: int, level: int, hosts: frozenset | None = None) -> TrainCand | None:
        """The fastest colocated trainer on (pool, n) holding at most `level` GB (and, with
        `hosts`, hosting exactly the models the engines do not)."""
        return self._query((pool, n, None if hosts is None else self.models - hosts), level)

    def disagg(self, pool: int, n: int, pool_gpus: int, n_pools: int, hosts: frozenset | None = None
               ) -> TrainCand | None:
        """The fastest disaggregated trainer that fits beside n engine GPUs of `pool`."""
        want = None if hosts is None else self.models - hosts
        found = [self._query((q, want), pool_gpus - n if q == pool else math.inf) for q in range(n_pools)]
        found = [c for c in found if c is not None]
        return min(found, key=lambda c: time_units(c.time)) if found else None

    def completing(self, pool: int, n: int, hosts: frozenset) -> int | None:
        """The least training-side time (ms) of a plan with n engine GPUs of `pool` hosting `hosts`: a
        disaggregated trainer that hosts none of the engines' models (each model runs in exactly one place:
        `Program._placement`) and fits beside them, plus, where the two leave models unhosted, the fastest
        auxiliary group (of the candidates) hosting exactly those that fits in what the two leave of its
        pool (`Program._world`; its forwards add to the trainers' time: `Program._pipeline`). None: no plan
        has these engines. On one pool without auxiliary groups, the time of the trainer hosting the models
        the engines do not (`disagg` with `hosts`); never below `disagg`'s."""
        key = (pool, n, hosts)
        if key in self.completions:
            return self.completions[key]
        best = None
        for c in self.by_time:
            t = time_units(c.time)
            if best is not None and t >= best:
                break  # (trainers come fastest first; a group only adds)
            if c.hosts & hosts:
                continue
            free = list(self.pools)
            free[pool] -= n
            free[c.pool] -= c.gpus
            if free[pool] < 0 or free[c.pool] < 0:
                continue
            rest = self.models - hosts - c.hosts
            if rest:
                fastest = None
                for q, left in enumerate(free):
                    front = self.aux_front.get((rest, q))
                    i = bisect.bisect_right(front[0], left) - 1 if front else -1
                    if i >= 0 and (fastest is None or front[1][i] < fastest):
                        fastest = front[1][i]
                if fastest is None:
                    continue  # the models left have no group that fits
                t += fastest
            if best is None or t < best:
                best = t
        self.completions[key] = best
        return best


def _gen_candidates(problem: Problem, p: int, modes: list[str], all_counts: bool, out: Candidates,
                    deadline: Deadline, bounded: bool, incumbent: dict | None = None,
                    memo: dict | None = None, margin: bool = True,
                    fronts: frozenset | None = None) -> list[GenCand]:
    """Engine candidates of pool p. `bounded` (throughput, no price cap, no linear
    constraint): best first by a lower bound of the best plan each can be part of
    (`gen_side(lower_bound=True)` and the least training side it can complete a plan with:
    `_TrainIndex.completing`; none: not scored); one whose bound exceeds the best plan already
    found in every mode it serves (plus RUNNER_UP_MARGIN) is not simulated, since it cannot be
    part of an optimal plan. `incumbent` (per mode, ms): the plans found before,
    updated with the ones found here. `fronts`: the degrees the caller's `_prune_gen` keeps apart, where it
    prunes the engines to their fronts (None: it keeps them all); then a candidate whose least time (its
    bound) already trails an engine found in its front that leaves it out of the front (`_gen_covers`), and
    that cannot lower an incumbent with that least time, is not simulated: `_prune_gen` drops it whatever its
    exact time (the member sorts before it), and the incumbents come out the same; nor is its exact time
    needed past that member's where its plan cannot lower an incumbent there (gen_side's `beyond`)."""
    pool = problem.pools[p]
    memo = {} if memo is None else memo
    tasks: list[tuple] = []   # (bound ms per mode, order, mode, n, layout, level or hosts, quant, weight-sync s)
    coloc = _TrainIndex(problem, out, "colocated")
    disagg = _TrainIndex(problem, out, "disagg")
    d_modes = [m for m in modes if m in ("sync", "async")]
    order = 0
    coloc_counts = sorted({c.gpus for c in out.train if c.mode == "colocated" and c.pool == p})
    # the colocated limit the task loop below starts from (it only falls)
    c_limit = (_relaxed(incumbent) if margin else incumbent).get("colocated", INF_TIME) \
        if bounded and incumbent is not None else None
    coloc_fixed = engine_shares_fixed("colocated", problem.workload.framework)
    for n in coloc_counts:
        levels = sorted({c.reserved_gb for c in out.train if c.mode == "colocated" and c.pool == p and c.gpus == n})
        for _, lay in _legal_engines(problem, p, n, memo, deadline):
            sync, _ = sync_time(problem, pool, pool, lay, n, colocated=True)
            low = None  # the engines' side of the bound at the last level scored (ms)
            for lv in levels:
                t = coloc.colocated(p, n, lv)
                if c_limit is not None and low is not None and low + time_units(t.time) > c_limit:
                    # more held memory never lowers the engines' bound (a property test), so this level's
                    # bound is beyond the limit too and the task loop would skip it: not scored
                    continue
                lb = _engine_side(problem, p, lay, memo, reserved_gb=lv, lower_bound=True, fixed_shares=coloc_fixed)
                if not lb.fits:
                    break  # more reserved memory fits even less
                low = _lb_units(lb.time + engine_release_time(lb) + sync)
                bound = low + time_units(t.time)
                # (the release: the engine's sleep reads its weights alone, the same at any decode time)
                tasks.append(({"colocated": bound}, (0, order), "colocated", n, lay, lv, "none",
                              (sync, engine_release_time(lb)), low))
                order += 1
    if d_modes:
        # Counts from the largest down: an engine layout's bound never falls with fewer
        # replicas (the same tp, pp and hosted models; a property test checks it), so once its
        # generation and receive time alone exceed the limit of every mode, no smaller count of
        # it is scored (sync also pays the fastest trainer).
        limit = (_relaxed(incumbent) if margin else incumbent) if bounded and incumbent is not None else None
        fastest = min((time_units(c.time) for c in out.train if c.mode == "disagg"), default=INF_TIME)
        dead: set[tuple] = set()
        floors: dict[tuple, int] = {}  # per key below: the bound (ms) of its engines at the last larger count
        # an async engine decodes several steps' rollouts at once (rollout_steps_in_flight), and the
        # target may not split them over the engines in fixed shares (engine_shares_fixed), so its time
        # differs from the same engine's in sync: one candidate per such group of modes
        host_variants = [(hosts, q, group, k, fixed) for hosts, q, allowed_in in _gen_host_variants(problem, d_modes)
                         for group, k, fixed in _in_flight_groups(problem, allowed_in)]
        # an engine shape (tp, pp, ep) whose every host variant is dead: no count of it is
        # scored again, so its layouts need no rule check either (`_legal_engines`' skip)
        dead_shapes: set[tuple] = set()
        for n in sorted(_gen_counts(problem, p, all_counts, out), reverse=True):
            for li, lay in _legal_engines(problem, p, n, memo, deadline,
                                          skip=lambda lay: (lay.tp, lay.pp, lay.ep) in dead_shapes):
                # a pure function of the pool and the replica's degrees (`recv_time` reads tp, pp and ep
                # through the GPU's weight share, never dp): asked once per replica shape, not per count
                rkey = ("recv", p, lay.tp, lay.pp, lay.ep)
                recv_s = memo.get(rkey)
                if recv_s is None:
                    recv_s = memo[rkey] = recv_time(problem, pool, lay)
                recv = time_units(recv_s)
                for hi, (hosts, q, allowed_in, k, fixed) in enumerate(host_variants):
                    key = (lay.tp, lay.pp, lay.ep, hosts, q, k, fixed)
                    if key in dead:
                        continue
                    # bounded: the least training side of a plan with these engines (a trainer hosting none of
                    # their models, and a group for the models neither hosts); none: no plan has them
                    tt = disagg.completing(p, n, hosts) if bounded else None
                    if bounded and tt is None:
                        continue
                    if limit is not None and key in floors and all(
                            compose_step(m, floors[key], tt, recv, 0) > limit[m] for m in allowed_in):
                        # the same engines on more GPUs bound these (the bound never falls with fewer
                        # replicas): beyond the limit here, so the loop below would skip them; not scored.
                        # (Not dead: a smaller count may leave room for a faster trainer.)
                        continue
                    lb = _engine_side(problem, p, lay, memo, hosts=hosts, quant=q, lower_bound=True, in_flight=k,
                                      fixed_shares=fixed)
                    if not lb.fits:
                        continue
                    tg = floors[key] = _lb_units(lb.time)
                    if limit is not None and all(tg + recv + (fastest if m == "sync" else 0) > limit[m]
                                                 for m in allowed_in):
                        dead.add(key)
                        if all((lay.tp, lay.pp, lay.ep, h, qq, kk, ff) in dead for h, qq, _, kk, ff in host_variants):
                            dead_shapes.add((lay.tp, lay.pp, lay.ep))
                        continue
                    if not bounded:
                        t = disagg.disagg(p, n, pool.n_gpus, len(problem.pools))
                        if t is None:
                            continue
                        tt = time_units(t.time)
                    bound = {m: compose_step(m, tg, tt, recv, 0) for m in allowed_in}
                    tasks.append((bound, (1, n, li, hi), "disagg", n, lay, (hosts, allowed_in, k, fixed), q,
                                  (recv_s, 0.0), tg))
    if incumbent is None:
        incumbent = {m: INF_TIME for m in modes}
    found: list[GenCand] = []
    apart = _gen_apart(fronts) if fronts is not None and _SKIP_DOMINATED_ENGINES else None
    members: dict[tuple, list[tuple]] = {}  # per front (`_gen_front`): (time in ms, rank) of the engines found
    for bound, _, mode, n, lay, extra, q, (sync, release), least in sorted(
            tasks, key=lambda x: (min(x[0].values()), x[1])):
        limit = _relaxed(incumbent) if margin else incumbent
        if bounded and all(b > limit[m] for m, b in bound.items()):
            continue
        fastest = None  # the time (ms) of the fastest engine found that leaves this one out of its front
        if apart is not None:
            hosts, level, within = (frozenset(), extra, None) if mode == "colocated" else (extra[0], 0, extra[1])
            key, rank = _gen_front(mode, p, n, hosts, q, within, lay, level, sync, apart)
            fastest = min((u for u, k in members.get(key, ()) if _gen_covers(mode, k, rank)), default=None)
            if fastest is not None and fastest < least and all(step >= incumbent[m] for m, step in _plan_steps(
                    problem, mode, p, n, hosts, within, level, sync, coloc, disagg, least).items()):
                continue
        deadline.check("simulating engine layouts")
        # the engine time (s) from which on this candidate is pruned (`_beyond_limit`): its exact time is not needed
        beyond = _beyond_limit(problem, p, n, mode, coloc if mode == "colocated" else disagg, extra, sync, release,
                               limit, d_modes) if bounded else None
        if fastest is not None and all(step >= incumbent[m] for m, step in _plan_steps(
                problem, mode, p, n, hosts, within, level, sync, coloc, disagg, fastest + 1).items()):
            # nor from a time (ms) past the fastest engine found that leaves it out of its front, where its plan
            # cannot lower an incumbent either (`_prune_gen` drops it): in seconds as `_beyond_limit` turns one
            own = (fastest + 1) * TIME_UNIT_S * (1 + 1e-5) - (sync + release if mode == "colocated" else 0.0)
            beyond = own if beyond is None else min(beyond, own)
        if mode == "colocated":
            side = _engine_side(problem, p, lay, memo, reserved_gb=extra, fixed_shares=coloc_fixed, beyond=beyond)
            g = GenCand(mode, lay, frozenset(), "none", extra, side, sync, pool=p)
        else:
            extra, allowed_in, k, fixed = extra
            side = _engine_side(problem, p, lay, memo, hosts=extra, quant=q, in_flight=k, fixed_shares=fixed,
                                beyond=beyond)
            g = GenCand(mode, lay, extra, q, 0, side, sync, pool=p, modes=allowed_in)
        out.evaluated += 1
        if not side.fits or side.cut is not None or engine_cap_violations(problem, lay, side.max_num_seqs):
            continue
        found.append(g)
        if apart is not None:
            members.setdefault(key, []).append((time_units(g.time), rank))
        # the best plan this candidate makes with a trainer that hosts what it does not
        for m, step in _plan_steps(problem, mode, p, n, g.hosts, g.modes, g.reserved_gb, g.sync, coloc, disagg,
                                   time_units(g.time)).items():
            incumbent[m] = min(incumbent[m], step)
    return found


def _plan_steps(problem: Problem, mode: str, pool: int, gpus: int, hosts: frozenset, modes: frozenset | None,
                reserved_gb: int, sync: float, coloc: _TrainIndex, disagg: _TrainIndex, gen_units: int) -> dict:
    """Per mode, the step (ms) of the best plan an engine candidate (`GenCand`'s fields) makes with a trainer that
    hosts what it does not, its engines taking `gen_units` (ms: `GenCand.time`'s; nothing else here reads its
    side): the incumbents `_gen_candidates` updates. Never falls as `gen_units` rises (`compose_step`)."""
    if mode == "colocated":
        t = coloc.colocated(pool, gpus, reserved_gb, frozenset())
        return {} if t is None else {"colocated": gen_units + time_units(t.time)}
    t = disagg.disagg(pool, gpus, problem.pools[pool].n_gpus, len(problem.pools), hosts)
    if t is None:
        return {}
    return {m: compose_step(m, gen_units, time_units(t.time), time_units(sync), time_units(t.send),
                            hold=time_units(t.hold))
            for m in modes & (t.modes if t.modes is not None else modes)}  # a plan the target runs


def _beyond_limit(problem: Problem, p: int, n: int, mode: str, index: _TrainIndex, level: Any, sync: float,
                  release: float, limit: dict, d_modes: list[str]) -> float | None:
    """Seconds of engine time (`GenSide.time`) at or above which an engine candidate of pool p on n GPUs
    (colocated: held memory `level`) is dropped by `_prune_by_bound` whatever it is paired with, at `limit`
    or any lower one (the limits only fall): colocated, its time with the sleep (`release`) and the reshard
    (`sync`) in whole ms plus the fastest trainer holding at most `level` beyond the colocated limit;
    disaggregated, its step with the fastest trainer beside it and its receive time (`sync`) beyond the limit
    of every disaggregated mode. Such a candidate cannot change the incumbents either (a plan with it pairs a
    trainer no faster), nor, absent, another candidate's place in a front (one it would cover takes no less
    time with no faster partner: pruned too). None: no such limit (a mode without a plan yet, no trainer).

    The limit K (ms) the candidate's time may reach is turned into seconds one unit up, with a 1e-5 margin
    over the float rounding of `time_units` and of the engine search's 1e-6 bound tolerance (`gen_side`'s
    `beyond`)."""
    if mode == "colocated":
        t = index.colocated(p, n, level)
        if t is None or limit["colocated"] >= INF_TIME:
            return None
        most = limit["colocated"] - time_units(t.time)
    else:
        t = index.disagg(p, n, problem.pools[p].n_gpus, len(problem.pools))
        if t is None or any(limit[m] >= INF_TIME for m in d_modes):
            return None
        tt, recv = time_units(t.time), time_units(sync)
        most = max(_largest_within(lambda x: compose_step(m, x, tt, recv, 0), limit[m],
                                   limit[m] - recv - (tt if m == "sync" else 0)) for m in d_modes)
        sync = release = 0.0
    return (most + 1) * TIME_UNIT_S * (1 + 1e-5) - sync - release


def _largest_within(f: Callable[[int], float], limit: int, guess: int) -> int:
    """The largest integer x in [-1, limit] with f(x) <= limit, f never falling (-1 where f(0) exceeds it): `guess`
    where it is that one (two calls), else by bisection."""
    if 0 <= guess < limit and f(guess) <= limit < f(guess + 1):
        return guess
    lo, hi = -1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if f(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _legal_engines(problem: Problem, p: int, n: int, memo: dict, deadline: Deadline,
                   skip: Callable[[GenLayout], bool] | None = None) -> list[tuple[int, GenLayout]]:
    """The engine layouts on n GPUs of pool p without `gen_violations`, each with its place in
    `gen_universe` (the order the candidates are scored in), memoized in `memo` across the probe
    and the full enumeration (they ask for the same counts). `skip`: layouts the caller has no
    use for, left out unchecked (each layout's verdict is memoized on its own, so a later call
    without them checks only what it has not)."""
    key = ("legal engines", p, n)
    if key in memo:
        return memo[key] if skip is None else [(li, lay) for li, lay in memo[key] if not skip(lay)]
    pool = problem.pools[p]
    verdicts = memo.setdefault(("engine verdicts", p, n), {})
    legal = []
    for li, lay in enumerate(gen_universe(problem, pool, n)):
        if skip is not None and skip(lay):
            continue
        ok = verdicts.get(li)
        if ok is None:
            deadline.check("enumerating engine layouts")
            ok = verdicts[li] = not gen_violations(problem, pool, n, lay)
        if ok:
            legal.append((li, lay))
    if skip is None:
        memo[key] = legal
    return legal


def _engine_side(problem: Problem, p: int, lay: GenLayout, memo: dict, *, reserved_gb: int = 0,
                 hosts: frozenset = frozenset(), quant: str = "none", lower_bound: bool = False,
                 in_flight: int = 1, fixed_shares: bool = True, beyond: float | None = None) -> GenSide:
    """`gen_side` of an engine layout, memoized across the probe and the full enumeration
    (they score many of the same engines); its max_num_seqs search only where the target can set one.
    gen_side reads the hosted models only through their architectures and bytes per parameter (their
    weights beside the engine's, their forwards): engines hosting the same architectures at the same
    bytes under other roles (a reference and a reward model that are both the policy) share one
    evaluation, its per-model times relabelled. `in_flight` and `fixed_shares`: how the mode decodes (gen_side).
    `beyond`: gen_side's; a side cut at a smaller one is computed again (`_cut_short`)."""
    key = (p, lay, reserved_gb, hosts, quant, lower_bound, in_flight, fixed_shares)
    hit = memo.get(key)
    if hit is None or _cut_short(hit, beyond):
        aux = _aux_on_gen(problem, hosts, quant)
        models = tuple(sorted((id(a), b) for _, a, b in aux))
        same = memo.get(("engine of models", p, lay, reserved_gb, models, lower_bound, in_flight, fixed_shares))
        if same is None or _cut_short(same[1], beyond):
            hit = gen_side(problem, problem.pools[p], lay, reserved=reserved_gb * 1e9, aux_models=aux,
                           lower_bound=lower_bound, in_flight=in_flight,
                           cap_search=engine_can_cap(problem, lay), fixed_shares=fixed_shares, beyond=beyond)
            memo["engine of models", p, lay, reserved_gb, models, lower_bound, in_flight, fixed_shares] = (aux, hit)
        else:
            hit = _relabelled(*same, aux)
        memo[key] = hit
    return hit


def _cut_short(side: GenSide, beyond: float | None) -> bool:
    """Whether a memoized side was cut at a smaller `beyond` than a caller asks for (None: the exact time), so
    that it says nothing the caller can use."""
    return side.cut is not None and (beyond is None or beyond > side.cut)


def _relabelled(aux: tuple, side: GenSide, other: tuple) -> GenSide:
    """`side`, scored with the hosted models `aux` ((role, architecture, bytes) each), for the same
    architectures and bytes hosted under the roles of `other`: each role's time moves to the role
    whose model is the same."""
    if [r for r, _, _ in aux] == [r for r, _, _ in other]:
        return side
    left = list(aux)
    times = {}
    for role, a, b in other:
        i = next(i for i, (_, a2, b2) in enumerate(left) if a2 is a and b2 == b)
        times[role] = side.aux_times[left.pop(i)[0]]
    return replace(side, aux_times=times)


def _in_flight_groups(problem: Problem, modes: frozenset) -> list[tuple[frozenset, int, bool]]:
    """The disaggregated modes split by how an engine decodes in them: the steps it decodes at once
    (`rollout_steps_in_flight`) and whether the target splits a step's samples over the engines in fixed
    shares (`engine_shares_fixed`): one group when they agree."""
    groups: dict[tuple[int, bool], set] = {}
    for m in modes:
        groups.setdefault((rollout_steps_in_flight(m, problem.workload.max_staleness),
                           engine_shares_fixed(m, problem.workload.framework)), set()).add(m)
    return [(frozenset(ms), k, fixed) for (k, fixed), ms in sorted(groups.items())]


def _aux_on_gen(problem: Problem, hosts: frozenset, quant: str) -> tuple:
    return tuple((h, getattr(problem, h), QUANT_BYTES[quant] if h == "reward" else 2.0) for h in sorted(hosts))


def _train_modes(problem: Problem, modes: list[str], kind: str, hosts: frozenset, reference: str, quant: str,
                 offload: bool = False, value: str = "training") -> frozenset:
    """The modes of its kind in which the target runs a training candidate's placements (a model
    `elsewhere` counts where the target runs it on the engines or an auxiliary group; the
    candidate that hosts it answers for the exact place; `value`: where it trains the critic,
    on these GPUs or on a group of its own)."""
    places = {"reference": reference,
              "reward": "cpu" if problem.reward is None else ("training" if "reward" in hosts else "elsewhere"),
              "value": "none" if problem.value is None else value}
    each = ["colocated"] if kind == "colocated" else [m for m in modes if m != "colocated"]
    return target_hosting_modes(problem, [m for m in each if m in modes], places, quant=quant, offload=offload)


def _hosted_modes(problem: Problem, where: str, hosts: frozenset, quant: str, modes: list[str]) -> frozenset:
    """The modes of `modes` in which the target runs these models on the engines' GPUs
    (`generation`) or on a group of their own (`auxiliary`)."""
    return target_hosting_modes(problem, modes, dict.fromkeys(hosts, where), quant=quant,
                                auxiliary=hosts if where == "auxiliary" else frozenset())


def _gen_host_variants(problem: Problem, modes: list[str]):
    """(hosted models, reward quantization, the modes of `modes` the target runs them on the engines in)."""
    for hosts, q in _all_gen_host_variants(problem):
        allowed_in = _hosted_modes(problem, "generation", hosts, q, modes)
        if allowed_in:
            yield hosts, q, allowed_in


def _all_gen_host_variants(problem: Problem):
    yield frozenset(), "none"
    if problem.reference is not None:
        yield frozenset({"reference"}), "none"
    if problem.reward is not None:
        for q in ("none", "int8", "int4"):
            yield frozenset({"reward"}), q
            if problem.reference is not None:
                yield frozenset({"reference", "reward"}), q


def _prune_train(cands: list[TrainCand], keep_apart: frozenset = frozenset()) -> list[TrainCand]:
    """Keep the fronts described in the module docstring."""
    apart = sorted(k.split(".", 1)[1] for k in keep_apart if k.startswith("training.") and k != "training.gpus")
    groups: dict[tuple, list[TrainCand]] = {}
    for c in cands:
        key = (c.pool, c.mode, c.gpus, c.side.gpus, c.hosts, c.reference, c.reward_quant, c.modes,
               time_units(c.hold)) + tuple(getattr(c.layout, k) for k in apart)
        groups.setdefault(key, []).append(c)
    kept: list[TrainCand] = []
    for cs in groups.values():
        cs.sort(key=lambda c: (time_units(c.time), c.reserved_gb if c.mode == "colocated" else 0, _simplicity(c)))
        best_mem = math.inf
        for c in cs:
            mem = c.reserved_gb if c.mode == "colocated" else 0
            if mem < best_mem:
                kept.append(c)
                best_mem = mem
    if keep_apart & {"training.gpus", "gpus"}:
        return kept
    # across GPU counts (disaggregated): fewer GPUs, no slower, no slower to send the weights, no longer
    # a refit gather for async engines to wait for
    fronts: dict[tuple, list[TrainCand]] = {}
    out = [c for c in kept if c.mode == "colocated"]
    for c in sorted((c for c in kept if c.mode == "disagg"),
                    key=lambda c: (time_units(c.time), time_units(c.send), c.gpus, _simplicity(c))):
        front = fronts.setdefault((c.pool, c.hosts, c.reference, c.reward_quant, c.modes)
                                  + tuple(getattr(c.layout, k) for k in apart), [])
        send, gpus, hold = time_units(c.send), c.gpus, time_units(c.hold)
        if any(k[0] <= send and k[1] <= gpus and k[2] <= hold for k in front):  # (each member's (send, GPUs, hold))
            continue
        front.append((send, gpus, hold))
        out.append(c)
    return out


def _prune_gen(cands: list[GenCand], keep_apart: frozenset = frozenset()) -> list[GenCand]:
    """Engine fronts. A colocated engine enters the program only through its pool, count,
    time and the memory it spares; a disaggregated one through its pool, count, time,
    receive time and hosted models. Keep, per colocated (pool, count), the front of (time,
    memory spared); per disaggregated (pool, hosted models, quantization), the front of
    (time, receive time, GPUs)."""
    apart = _gen_apart(keep_apart)
    fronts: dict[tuple, list[tuple]] = {}
    out: list[GenCand] = []
    order = sorted(cands, key=lambda c: (time_units(c.time), -c.reserved_gb, time_units(c.sync), c.gpus,
                                         c.layout.ep, c.layout.pp, c.layout.tp))
    for c in order:  # (each front holds what its test reads of its members)
        key, rank = _gen_front(c.mode, c.pool, c.gpus, c.hosts, c.reward_quant, c.modes, c.layout, c.reserved_gb,
                               c.sync, apart)
        front = fronts.setdefault(key, [])
        if any(_gen_covers(c.mode, k, rank) for k in front):
            continue
        front.append(rank)
        out.append(c)
    return out


def _gen_apart(keep_apart: frozenset) -> list[str]:
    """The engine degrees (or "gpus") that user constraints name: engines differing in them are never compared."""
    return sorted(k.split(".", 1)[1] for k in keep_apart if k.startswith("generation."))


def _gen_front(mode: str, pool: int, gpus: int, hosts: frozenset, quant: str, modes: frozenset | None,
               layout: GenLayout, reserved_gb: int, sync: float, apart: list[str]) -> tuple[tuple, Any]:
    """The front an engine candidate competes in (`_prune_gen`), and what the front compares of it beside its time
    (none of it reads the engines' side, so it is known before they are simulated): colocated, its pool and
    count, and the memory it spares; disaggregated, its pool, hosted models, quantization and modes, and its
    receive time (ms) and GPUs; each front with the degrees kept apart."""
    extra = tuple(gpus if k == "gpus" else getattr(layout, k) for k in apart)
    if mode == "colocated":
        return ("colocated", pool, gpus) + extra, reserved_gb
    return ("disagg", pool, hosts, quant, modes) + extra, (time_units(sync), gpus)


def _gen_covers(mode: str, member, rank) -> bool:
    """Whether a front member (its `_gen_front` rank), no slower, leaves a candidate of that rank out of the front:
    colocated, sparing at least its memory; disaggregated, receiving no slower on no more GPUs."""
    if mode == "colocated":
        return member >= rank
    return member[0] <= rank[0] and member[1] <= rank[1]


def _simplicity(c: TrainCand) -> tuple:
    return _simplicity_of(c.layout, c.offload_states)


def _simplicity_of(L: TrainLayout, offload_states: bool) -> tuple:
    rec = {"none": 0, "selective": 1, "full": 2}[L.recompute]
    return (L.zero_stage, rec, L.vp, -L.micro_batch, offload_states)
