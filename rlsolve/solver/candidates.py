"""Score every legal layout of each role: the per-role tables the CP-SAT program picks from.

The layouts come from the rule table (`rules.py`: the universe of each role, filtered by its
violations); each is scored once by the performance model. A candidate is one side of a
plan (generation, training, or an auxiliary group) with every decision of that side fixed.

Only dominated candidates are dropped, each by a rule that cannot change the optimum (and
each has a property test in tests/test_solver_space.py):
- training, per (pool, mode, GPUs, hosted models, reference placement, quantization): the
  Pareto front of (time, memory held during rollout); nothing else of a training candidate
  enters the program;
- disaggregated training across GPU counts, per (pool, hosted models, placement,
  quantization): the front of (time, send time, GPUs); fewer GPUs leave more to the others;
- generation: the engines' time never grows with more replicas, so for throughput a
  disaggregated engine layout takes the largest legal count that each combination of the
  other roles leaves free in its pool (the cost objective scores every count);
- auxiliary groups: the front of (GPUs, time);
- a micro-batch larger than one that does not fit does not fit either;
- more recompute than the least that fits (same states held, never faster)."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from itertools import combinations, product
from typing import Any

from rlsolve.frameworks.rules import strategies
from rlsolve.perf.generate import GenLayout
from rlsolve.perf.hw import device
from rlsolve.perf.step import (QUANT_BYTES, AuxSide, GenSide, TrainSide, aux_side, capacity_bytes, compose_step,
                               critic_fits, critic_memory, critic_pass, engine_release_time, gen_side, policy_memory,
                               recv_time, send_time, sync_time, train_aux, train_core)
from rlsolve.perf.train import TrainLayout
from rlsolve.resolve import PoolHW, Problem
from rlsolve.solver.budget import Deadline
from rlsolve.solver.rules import (RECOMPUTE, aux_models, count_user_violations, critic_like_policy,
                                  critic_pair_violations, critic_universe, critic_violations, engine_cap_violations,
                                  gen_universe, gen_violations, micro_batches, modes_allowed, role_counts,
                                  target_caps, target_hosting_modes, train_bases, train_layout_violations,
                                  train_shape_violations, train_shapes)
from rlsolve.solver.scale import INF_TIME, mem_units_up, time_units

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
    reference: str            # training | cpu_offload | elsewhere (engines or auxiliary pool) | none
    reward_quant: str
    offload_states: bool      # colocated: move states to the host during rollout
    side: TrainSide
    switch: float             # colocated offload/reload seconds
    send: float               # disagg: seconds for the trainers to send the weights
    pool: int = 0
    id: int = -1
    modes: frozenset | None = None  # the modes the target runs its placements in (None: any)
    critic: TrainLayout | None = None  # PPO: the critic's own degrees on these GPUs

    @property
    def time(self) -> float:
        return self.side.time + self.switch

    @property
    def reserved_gb(self) -> int:
        return 0 if self.offload_states else mem_units_up(self.side.states)


@dataclass
class AuxCand(_OnGPUs):
    """Reference and/or reward forwards on GPUs of their own pool."""

    side: AuxSide
    hosts: frozenset
    reward_quant: str
    pool: int
    id: int = -1
    modes: frozenset | None = None  # the modes the target runs these models on a group of their own in

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

def _aux_variants(problem: Problem, elsewhere: bool):
    """(hosts on training, reference placement, reward quant). `elsewhere`: a model may run
    off the training GPUs (on the engines, or on an auxiliary pool), chosen by the program."""
    refs = ["none"] if problem.reference is None else (["training", "cpu_offload"] + (["elsewhere"] if elsewhere else []))
    rewards = ["cpu"] if problem.reward is None else (["training"] + (["elsewhere"] if elsewhere else []))
    quants = ["none"] if problem.reward is None else ["none", "int8", "int4"]
    for r in refs:
        for w in rewards:
            for q in quants:
                train_hosts = frozenset(x for x, p in (("reference", r), ("reward", w))
                                        if p in ("training", "cpu_offload"))
                if problem.reward is not None and "reward" not in train_hosts and q != "none":
                    continue  # the quantization belongs to the reward's host
                yield train_hosts, r, q


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
    out = Candidates(gen=[], train=[])
    if not modes or not _any_legal_engine(problem, deadline):
        return out  # no engine layout is legal anywhere: nothing is worth scoring (the diagnosis says why)
    for p in range(len(problem.pools)):
        out.train += _train_candidates(problem, p, modes, out, deadline)
    if prune:
        out.train = _prune_train(out.train, keep_apart)
    if len(problem.pools) > 1:
        out.aux = _aux_candidates(problem, deadline)
    for p in range(len(problem.pools)):
        out.gen += _gen_candidates(problem, p, modes, all_counts, out, deadline, bounded)
    if prune:
        out.gen = _prune_gen(out.gen, keep_apart)
    for cands in (out.gen, out.train, out.aux):
        for i, c in enumerate(cands):
            c.id = i
    return out


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
    found: list[AuxCand] = []
    for p, pool in enumerate(problem.pools):
        for hosts in subsets:
            for q in (("none", "int8", "int4") if "reward" in hosts else ("none",)):
                allowed_in = _hosted_modes(problem, "auxiliary", hosts, q, modes_allowed(problem))
                if not allowed_in:
                    continue
                best = math.inf
                for n in role_counts(pool):
                    deadline.check("scoring auxiliary groups")
                    side = aux_side(problem, pool, n, hosts, q)
                    if side.fits and time_units(side.time) < best:
                        best = time_units(side.time)
                        found.append(AuxCand(side, hosts, q, p, modes=allowed_in))
    return found


def _train_candidates(problem: Problem, p: int, modes: list[str], out: Candidates, deadline: Deadline
                      ) -> list[TrainCand]:
    pool = problem.pools[p]
    dev = device(pool, problem.workload.precision, problem.profile)
    cap = capacity_bytes(pool, problem.workload.headroom)
    single = len(problem.pools) == 1
    colocated_ok = "colocated" in modes
    disagg_ok = any(m in modes for m in ("sync", "async"))
    cache: dict[tuple, Any] = {}
    found: list[TrainCand] = []
    best_disagg: dict[tuple, float] = {}
    critics: dict[int, list] = {}
    variants = {kind: [(*v, allowed_in) for v in _aux_variants(problem, kind == "disagg" or not single)
                       if (allowed_in := _train_modes(problem, modes, kind, *v))] for kind in ("colocated", "disagg")}
    for n, tp, pp, cp, dp in train_shapes(problem, pool):
        deadline.check("enumerating training layouts")
        kinds = []
        # colocated: the engines share these GPUs, so their count must be legal for them too
        if colocated_ok and not count_user_violations(problem, "generation", n):
            kinds.append("colocated")
        if disagg_ok and not (single and n >= pool.n_gpus):  # one pool: the engines need a GPU too
            kinds.append("disagg")
        if not kinds:
            continue
        if train_shape_violations(problem, pool, n, tp, pp, cp, dp):
            continue
        for ep, vp, zero in train_bases(problem, tp, pp, cp, dp):
            deadline.check("enumerating training layouts")
            mbs = micro_batches(problem, dp)
            if not mbs or policy_memory(problem, TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero,
                                                             micro_batch=mbs[0], recompute="full",
                                                             sequence_parallel=tp > 1)).total > cap:
                continue  # the smallest memory of this base (micro-batch 1, full recompute) does not fit
            for mb in mbs:
                scored = _score_least_recompute(problem, pool, n, TrainLayout(
                    tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero, micro_batch=mb,
                    sequence_parallel=tp > 1), cap, cache)
                if scored is None:
                    break  # no recompute fits: a larger micro-batch needs more memory still
                if scored is False:
                    continue
                lay, mem, t, old = scored
                out.evaluated += 1
                paired = _critics_for(problem, pool, n, lay, critics, cache)
                for kind in kinds:
                    kept_states: dict[tuple, float] = {}
                    for (hosts, ref, quant, allowed_in), critic in product(variants[kind], paired):
                        ref_t, rew_t, val_t, resident = train_aux(
                            problem, pool, lay, reference=ref, reward="training" if "reward" in hosts else "elsewhere",
                            reward_quant=quant, cache=cache, critic=critic)
                        if mem.total + resident > cap:
                            continue
                        if critic is not None:
                            if not critic_fits(mem, resident, *critic_pass(problem, pool, critic, cache)[1:], cap):
                                continue
                            # critics come fastest first: a slower one must keep less on the GPUs to matter
                            # (colocated), and beside a disaggregated trainer only the fastest that fits does
                            vkey = (hosts, ref, quant)
                            if resident >= kept_states.get(vkey, math.inf):
                                continue
                            kept_states[vkey] = -math.inf if kind == "disagg" else resident
                        if kind == "disagg":  # only the fastest of a group survives the front: skip the rest early
                            key = (n, hosts, ref, quant)
                            total = t.total + old + ref_t + rew_t + val_t
                            if total >= best_disagg.get(key, math.inf):
                                continue
                            best_disagg[key] = total
                        side = TrainSide(layout=lay, gpus=n, train=t, old_logprob=old, reference=ref_t,
                                         reward=rew_t, value=val_t, mem=mem, aux_resident=resident, capacity=cap,
                                         fits=True, states=mem.states + resident)
                        offloads = (False, True) if kind == "colocated" and _train_modes(
                            problem, modes, kind, hosts, ref, quant, offload=True) else (False,)
                        for off in offloads:
                            switch = 2 * dev.pcie_time(side.states) if off else 0.0
                            send = send_time(problem, pool, n) if kind == "disagg" else 0.0
                            found.append(TrainCand(mode=kind, layout=lay, hosts=hosts, reference=ref,
                                                   reward_quant=quant, offload_states=off, side=side, switch=switch,
                                                   send=send, pool=p, modes=allowed_in, critic=critic))
    return found


def _critic_options(problem: Problem, pool: PoolHW, n: int, cache: dict) -> list[tuple[frozenset, TrainLayout]]:
    """The critic's own layouts on n GPUs worth pairing with a trainer: per set of target engines
    that run it, the front of (time, states kept, peak memory) (a critic no faster, holding no
    less and peaking no lower than another is never better beside any trainer)."""
    caps = target_caps(problem)
    cap = capacity_bytes(pool, problem.workload.headroom)
    scored = []
    for lay in critic_universe(problem, pool, n):
        if critic_violations(problem, pool, n, lay) or critic_memory(problem, lay).total > cap:
            continue  # against the rules, or no room for it even alone
        t, states, peak = critic_pass(problem, pool, lay, cache)
        engines = frozenset(strategies(caps, lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage, lay.recompute))
        scored.append((time_units(t), states, peak, engines, lay))
    scored.sort(key=lambda x: (x[0], x[1], x[2], x[4].zero_stage, x[4].micro_batch))
    fronts: dict[frozenset, list] = {}
    for t, states, peak, engines, lay in scored:
        front = fronts.setdefault(engines, [])
        if any(s2 <= states and p2 <= peak for _, s2, p2, _ in front):
            continue
        front.append((t, states, peak, lay))
    return [(engines, lay) for engines, front in fronts.items() for *_, lay in front]


def _critics_for(problem: Problem, pool: PoolHW, n: int, policy: TrainLayout, critics: dict, cache: dict) -> list:
    """The critic layouts to pair with this trainer: [None] without a critic; the policy's
    degrees where the target has no critic layout of its own; else the front of its own
    layouts that some target engine runs beside the policy's."""
    if problem.value is None:
        return [None]
    caps = target_caps(problem)
    if caps is not None and not caps.shapes.value.critic_own_layout:
        like = critic_like_policy(problem, policy)
        return [like] if not critic_violations(problem, pool, n, like) else []
    if n not in critics:
        critics[n] = _critic_options(problem, pool, n, cache)
    found = [lay for engines, lay in critics[n] if not critic_pair_violations(problem, policy, lay)]
    like = critic_like_policy(problem, policy)
    if like not in found and not critic_violations(problem, pool, n, like) and not critic_pair_violations(
            problem, policy, like):
        found.append(like)
    # fastest first, then fewer states kept; on a tie the trainer's own degrees
    return sorted(found, key=lambda c: (critic_pass(problem, pool, c, cache)[:2], c != like))


def _score_least_recompute(problem: Problem, pool: PoolHW, n: int, base: TrainLayout, cap: float, cache: dict):
    """The least recompute that the rules allow and memory fits, scored: (layout, memory,
    update time, old log-prob time). More recompute keeps the same states (what colocation
    holds) and is never faster, so it is dominated once a lesser one fits. None: nothing
    fits; False: nothing is allowed."""
    allowed_any = False
    for rec in RECOMPUTE:
        lay = replace(base, recompute=rec)
        if train_layout_violations(problem, lay):
            continue
        allowed_any = True
        mem = policy_memory(problem, lay)
        if mem.total <= cap:
            t, _, old = train_core(problem, pool, lay, mem, cache=cache)
            return lay, mem, t, old
    return None if allowed_any else False


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


def _lb_units(seconds: float) -> int:
    """A time bound in the program's units, rounded down (the bound must not overstate)."""
    return int(math.floor(seconds / 1e-3 * (1 - 1e-9))) if math.isfinite(seconds) else INF_TIME


class _TrainIndex:
    """The trainers an engine candidate can pair with, for bounds and incumbents: per pool
    (and hosted models), sorted by the key a pairing limits (GPUs for disaggregated trainers,
    memory held for colocated ones on one count) with the running minimum of their times,
    so each query is one bisection."""

    def __init__(self, problem: Problem, out: Candidates, mode: str):
        self.models = frozenset(aux_models(problem))
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


def _gen_candidates(problem: Problem, p: int, modes: list[str], all_counts: bool, out: Candidates,
                    deadline: Deadline, bounded: bool) -> list[GenCand]:
    """Engine candidates of pool p. `bounded` (throughput, no price cap, no linear
    constraint): best first by a lower bound of the best plan each can be part of
    (`gen_side(lower_bound=True)` and the fastest trainer it can pair with); one whose bound
    exceeds the best plan already found in every mode it serves is not simulated, since it
    cannot be part of an optimal plan."""
    pool = problem.pools[p]
    tasks: list[tuple] = []   # (bound ms per mode, order, mode, n, layout, level or hosts, quant, weight-sync s)
    coloc = _TrainIndex(problem, out, "colocated")
    disagg = _TrainIndex(problem, out, "disagg")
    d_modes = [m for m in modes if m in ("sync", "async")]
    order = 0
    coloc_counts = sorted({c.gpus for c in out.train if c.mode == "colocated" and c.pool == p})
    for n in coloc_counts:
        levels = sorted({c.reserved_gb for c in out.train if c.mode == "colocated" and c.pool == p and c.gpus == n})
        for lay in gen_universe(problem, pool, n):
            deadline.check("enumerating engine layouts")
            if gen_violations(problem, pool, n, lay):
                continue
            sync, _ = sync_time(problem, pool, pool, lay, n, colocated=True)
            for lv in levels:
                lb = gen_side(problem, pool, lay, reserved=lv * 1e9, lower_bound=True)
                if not lb.fits:
                    break  # more reserved memory fits even less
                t = coloc.colocated(p, n, lv)
                bound = _lb_units(lb.time + engine_release_time(lb) + sync) + time_units(t.time)
                tasks.append(({"colocated": bound}, order, "colocated", n, lay, lv, "none", sync))
                order += 1
    if d_modes:
        for n in _gen_counts(problem, p, all_counts, out):
            for lay in gen_universe(problem, pool, n):
                deadline.check("enumerating engine layouts")
                if gen_violations(problem, pool, n, lay):
                    continue
                recv_s = recv_time(problem, pool, lay)
                recv = time_units(recv_s)
                for hosts, q, allowed_in in _gen_host_variants(problem, d_modes):
                    aux = _aux_on_gen(problem, hosts, q)
                    lb = gen_side(problem, pool, lay, aux_models=aux, lower_bound=True)
                    if not lb.fits:
                        continue
                    t = disagg.disagg(p, n, pool.n_gpus, len(problem.pools))
                    if t is None:
                        continue
                    tg = _lb_units(lb.time)
                    bound = {m: compose_step(m, tg, time_units(t.time), recv, 0) for m in allowed_in}
                    tasks.append((bound, order, "disagg", n, lay, (hosts, allowed_in), q, recv_s))
                    order += 1
    incumbent = {m: INF_TIME for m in modes}
    found: list[GenCand] = []
    for bound, _, mode, n, lay, extra, q, sync in sorted(tasks, key=lambda x: (min(x[0].values()), x[1])):
        if bounded and all(b > incumbent[m] for m, b in bound.items()):
            continue
        deadline.check("simulating engine layouts")
        if mode == "colocated":
            side = gen_side(problem, pool, lay, reserved=extra * 1e9)
            g = GenCand(mode, lay, frozenset(), "none", extra, side, sync, pool=p)
        else:
            extra, allowed_in = extra
            side = gen_side(problem, pool, lay, aux_models=_aux_on_gen(problem, extra, q))
            g = GenCand(mode, lay, extra, q, 0, side, sync, pool=p, modes=allowed_in)
        out.evaluated += 1
        if not side.fits or engine_cap_violations(problem, lay, side.max_num_seqs):
            continue
        found.append(g)
        # the best plan this candidate makes with a trainer that hosts what it does not
        if mode == "colocated":
            t = coloc.colocated(p, n, extra, frozenset())
            if t is not None:
                incumbent["colocated"] = min(incumbent["colocated"], time_units(g.time) + time_units(t.time))
        else:
            t = disagg.disagg(p, n, pool.n_gpus, len(problem.pools), extra)
            if t is not None:
                for m in g.modes & (t.modes if t.modes is not None else g.modes):  # a plan the target runs
                    step = compose_step(m, time_units(g.time), time_units(t.time), time_units(g.sync),
                                        time_units(t.send))
                    incumbent[m] = min(incumbent[m], step)
    return found


def _aux_on_gen(problem: Problem, hosts: frozenset, quant: str) -> tuple:
    return tuple((h, getattr(problem, h), QUANT_BYTES[quant] if h == "reward" else 2.0) for h in sorted(hosts))


def _train_modes(problem: Problem, modes: list[str], kind: str, hosts: frozenset, reference: str, quant: str,
                 offload: bool = False) -> frozenset:
    """The modes of its kind in which the target runs a training candidate's placements (a model
    `elsewhere` counts where the target runs it on the engines or an auxiliary group; the
    candidate that hosts it answers for the exact place)."""
    places = {"reference": reference,
              "reward": "cpu" if problem.reward is None else ("training" if "reward" in hosts else "elsewhere")}
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
        key = (c.pool, c.mode, c.gpus, c.hosts, c.reference, c.reward_quant, c.modes) + tuple(
            getattr(c.layout, k) for k in apart)
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
    # across GPU counts (disaggregated): fewer GPUs, no slower, no slower to send the weights
    fronts: dict[tuple, list[TrainCand]] = {}
    out = [c for c in kept if c.mode == "colocated"]
    for c in sorted((c for c in kept if c.mode == "disagg"),
                    key=lambda c: (time_units(c.time), time_units(c.send), c.gpus, _simplicity(c))):
        front = fronts.setdefault((c.pool, c.hosts, c.reference, c.reward_quant, c.modes)
                                  + tuple(getattr(c.layout, k) for k in apart), [])
        if any(time_units(k.send) <= time_units(c.send) and k.gpus <= c.gpus for k in front):
            continue
        front.append(c)
        out.append(c)
    return out


def _prune_gen(cands: list[GenCand], keep_apart: frozenset = frozenset()) -> list[GenCand]:
    """Engine fronts. A colocated engine enters the program only through its pool, count,
    time and the memory it spares; a disaggregated one through its pool, count, time,
    receive time and hosted models. Keep, per colocated (pool, count), the front of (time,
    memory spared); per disaggregated (pool, hosted models, quantization), the front of
    (time, receive time, GPUs)."""
    apart = sorted(k.split(".", 1)[1] for k in keep_apart if k.startswith("generation."))
    key_of = (lambda c: tuple(c.gpus if k == "gpus" else getattr(c.layout, k) for k in apart))
    fronts: dict[tuple, list[GenCand]] = {}
    out: list[GenCand] = []
    order = sorted(cands, key=lambda c: (time_units(c.time), -c.reserved_gb, time_units(c.sync), c.gpus,
                                         c.layout.ep, c.layout.pp, c.layout.tp))
    for c in order:
        if c.mode == "colocated":
            front = fronts.setdefault(("colocated", c.pool, c.gpus) + key_of(c), [])
            if any(k.reserved_gb >= c.reserved_gb for k in front):
                continue
        else:
            front = fronts.setdefault(("disagg", c.pool, c.hosts, c.reward_quant, c.modes) + key_of(c), [])
            if any(time_units(k.sync) <= time_units(c.sync) and k.gpus <= c.gpus for k in front):
                continue
        front.append(c)
        out.append(c)
    return out


def _simplicity(c: TrainCand) -> tuple:
    L = c.layout
    rec = {"none": 0, "selective": 1, "full": 2}[L.recompute]
    return (L.zero_stage, rec, L.vp, -L.micro_batch, c.offload_states)
