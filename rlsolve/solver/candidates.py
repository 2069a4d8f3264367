"""Enumerate the legal layouts of each role and score them with the performance model.

Each candidate is one side of a plan (generation or training) with every decision of that
side fixed; the CP-SAT program then picks one of each. Dominated candidates are dropped
here (same mode, GPUs and hosted models, no faster and no smaller), which keeps the
program small without changing its optimum."""
from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlsolve.frameworks import capabilities, generation_ok, mode_ok, placement_ok, training_ok
from rlsolve.frameworks.catalog import FrameworkCaps
from rlsolve.models import Architecture
from rlsolve.perf.generate import GenLayout
from rlsolve.perf.hw import device
from rlsolve.perf.step import (QUANT_BYTES, AuxSide, GenSide, TrainSide, aux_side, capacity_bytes,
                               engine_release_time, gen_side, policy_memory, recv_time, send_time, sync_time,
                               train_aux, train_core)
from rlsolve.perf.train import TrainLayout
from rlsolve.resolve import PoolHW, Problem
from rlsolve.solver.scale import mem_units_up, time_units



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

    @property
    def time(self) -> float:
        return self.side.time


@dataclass
class Candidates:
    gen: list[GenCand]
    train: list[TrainCand]
    aux: list[AuxCand] = field(default_factory=list)
    evaluated: int = 0


# --- user constraints ---------------------------------------------------------------------

def target_caps(problem: Problem) -> FrameworkCaps | None:
    """The target framework's capabilities (None: any framework, no restriction)."""
    t = problem.spec.target
    return capabilities(t.framework, t.version)


def _allowed(cons: dict[str, Any], key: str, value: Any) -> bool:
    if key not in cons:
        return True
    want = cons[key]
    return value in want if isinstance(want, (list, tuple, set)) else value == want


# --- GPU counts and degrees ---------------------------------------------------------------

@lru_cache(maxsize=4096)
def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def role_gpu_counts(pool: PoolHW, exclusive: bool) -> list[int]:
    """Legal GPU counts for one role: whole nodes, or a power of two inside one node."""
    g = pool.gpus_per_node
    total = pool.n_gpus
    sub = [d for d in divisors(g) if d < g]
    whole = [k * g for k in range(1, pool.nodes + 1)]
    counts = sub + whole
    if exclusive:  # the other role needs at least one GPU
        counts = [c for c in counts if c < total]
    return counts


def tp_choices(problem: Problem, pool: PoolHW, n: int, *, training: bool) -> list[int]:
    """TP degrees inside the NVLink domain; a degree beyond it only when the constraints name
    it (engines spanning nodes exist: NeMo-RL runs DeepSeek-V3 rollouts at TP32)."""
    a = problem.policy
    cons = problem.spec.constraints.training if training else problem.spec.constraints.generation
    asked = cons.get("tp", [])
    asked = asked if isinstance(asked, list) else [asked]
    out = []
    for t in sorted(set(divisors(min(n, pool.scaleup_size))) | {t for t in asked if n % t == 0}):
        if a.heads % t:
            continue
        if training and not a.is_mla and a.n_kv_heads % t and t % a.n_kv_heads:
            continue  # Megatron needs query groups divisible by tp (or tp a multiple of them)
        out.append(t)
    return out


def expert_degrees(a: Architecture, tp: int, dp: int, cp: int) -> list[int]:
    """EP degrees dividing the experts: inside dp*cp (experts TP-sharded like the dense
    layers), or folded over the TP ranks too (experts whole, expert TP = 1)."""
    if not a.is_moe:
        return [1]
    return [e for e in divisors(tp * dp * cp) if a.experts % e == 0]


def pp_choices(problem: Problem, n_over_tp: int, limit: int = 16) -> list[int]:
    """Pipeline degrees: powers of two up to `limit` (uneven last stage allowed, as Megatron's
    decoder-first/last options do), at least two layers per stage."""
    L = problem.policy.layers
    return [p for p in divisors(n_over_tp) if p <= min(limit, max(1, L // 2)) and p & (p - 1) == 0]


def gen_layouts(problem: Problem, pool: PoolHW, n: int) -> Iterable[GenLayout]:
    cons = problem.spec.constraints.generation
    for tp in tp_choices(problem, pool, n, training=False):
        for pp in pp_choices(problem, n // tp, limit=8):
            if pp > 1 and tp < min(pool.scaleup_size, n):
                continue  # engines add pipeline stages only once TP fills the NVLink domain
            dp = n // (tp * pp)
            if not generation_ok(target_caps(problem), "vllm", tp, pp, dp):  # framework rule
                continue
            lay = GenLayout(tp=tp, pp=pp, dp=dp, ep=1)
            if all(_allowed(cons, k, getattr(lay, k)) for k in ("tp", "pp", "dp", "ep")):
                yield lay


def train_layouts(problem: Problem, pool: PoolHW, n: int) -> Iterable[TrainLayout]:
    cons = problem.spec.constraints.training
    a = problem.policy
    rl = problem.spec.rl
    seq_max = rl.prompt_len + rl.response_len.max
    gb = max(1, rl.samples // rl.mini_batches)
    for tp in tp_choices(problem, pool, n, training=True):
        for pp in pp_choices(problem, n // tp):
            for cp in (1, 2, 4, 8):
                if (n // tp // pp) % cp or (cp > 1 and seq_max / cp < 2048):
                    continue
                dp = n // (tp * pp * cp)
                for ep in expert_degrees(a, tp, dp, cp):
                    vps = [1] + ([v for v in (2, 4) if a.layers % (pp * v) == 0] if pp > 1 else [])
                    for vp in vps:
                        for zero in zero_choices(pp, cons):
                            for rec in recompute_choices(cons):
                                for mb in (1, 2, 4, 8):
                                    if gb % (dp * mb):
                                        continue
                                    if not training_ok(target_caps(problem), tp, pp, cp, ep, vp, zero,
                                                       rec):  # framework rule
                                        break
                                    lay = TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero,
                                                      micro_batch=mb, recompute=rec, sequence_parallel=tp > 1)
                                    if not cons or all(_allowed(cons, k, getattr(lay, k)) for k in
                                                       ("tp", "pp", "dp", "cp", "ep", "vp", "zero_stage",
                                                        "micro_batch", "recompute")):
                                        # the caller stops the mb loop when memory runs out
                                        if (yield lay) is False:
                                            break


def zero_choices(pp: int, cons: dict[str, Any]) -> tuple[int, ...]:
    """ZeRO stages worth scoring. With pp == 1, stage 1 takes exactly stage 2's time (same
    reduce-scatter + all-gather, same sharded optimizer step) and never less memory, so it is
    dominated unless the user asks for it; with pipelines Megatron offers 0 and 1."""
    stages = (0, 2, 3) if pp == 1 else (0, 1)
    if "zero_stage" in cons:
        want = cons["zero_stage"]
        stages = tuple(sorted(set(want) if isinstance(want, (list, tuple, set)) else {want}))
        stages = tuple(z for z in stages if pp == 1 or z <= 1)
    return stages


def recompute_choices(cons: dict[str, Any]) -> tuple[str, ...]:
    """Selective recompute re-runs the attention core to drop its activations; with flash
    attention those are not stored, so it costs time and saves nothing: scored only when asked."""
    if "recompute" in cons:
        want = cons["recompute"]
        return tuple(want) if isinstance(want, (list, tuple)) else (want,)
    return ("none", "full")


def _count_ok(cons: dict[str, Any], n: int) -> bool:
    if "max_gpus" in cons and n > cons["max_gpus"]:
        return False
    return _allowed(cons, "gpus", n)


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
                yield train_hosts, r, q


def modes_allowed(problem: Problem) -> list[str]:
    allowed = problem.spec.constraints.modes or ["colocated", "sync", "async"]
    if problem.spec.rl.max_staleness == 0:
        allowed = [m for m in allowed if m != "async"]
    caps = target_caps(problem)  # framework rule: the target's modes, and where its critic may train in each
    critic = "training" if problem.value is not None else "none"
    allowed = [m for m in allowed if mode_ok(caps, m) and
               (caps is None or critic in caps.placements[m].value.value)]
    return allowed


def variant_ok(problem: Problem, modes: list[str], mode: str, hosts: frozenset, reference: str, quant: str,
               offload: bool = False) -> bool:
    """framework rule: a training candidate's placements in its mode (a disaggregated candidate in
    every disaggregated mode the program may pick)."""
    caps = target_caps(problem)
    if caps is None:
        return True
    reward = "cpu" if problem.reward is None else ("training" if "reward" in hosts else "elsewhere")
    value = "training" if problem.value is not None else "none"
    ref = "none" if problem.reference is None else reference
    each = ["colocated"] if mode == "colocated" else [m for m in modes if m != "colocated"]
    return all(placement_ok(caps, m, reference=ref, reward=reward, value=value, reward_quantization=quant,
                            train_offload=offload) for m in each)


def hosted_ok(problem: Problem, where: str, hosts: frozenset, quant: str) -> bool:
    """framework rule: models on the engines' GPUs (`generation`) or on GPUs of their own
    (`auxiliary`), in some mode the program may pick."""
    caps = target_caps(problem)
    if caps is None or not hosts:
        return True
    kw = {m: (where if m in hosts else ("cpu" if m == "reward" else "training")) for m in ("reference", "reward")}
    if problem.reward is None:
        kw["reward"] = "cpu"
    if problem.reference is None:
        kw["reference"] = "none"
    value = "training" if problem.value is not None else "none"
    aux = hosts if where == "auxiliary" else ()
    return any(placement_ok(caps, m, value=value, reward_quantization=quant, auxiliary=aux, **kw)
               for m in modes_allowed(problem))


def enumerate_candidates(problem: Problem, all_counts: bool = False, prune: bool = True) -> Candidates:
    """All scored candidates of every pool. `all_counts`: every legal GPU count for each role
    (the cost objective may leave GPUs idle); otherwise generation takes the largest count
    that training leaves free, and colocation takes the whole pool. `prune=False` keeps
    dominated training candidates and every generation count (the oracle's full space)."""
    modes = modes_allowed(problem)
    out = Candidates(gen=[], train=[])
    for p in range(len(problem.pools)):
        out.train += _train_candidates(problem, p, modes, all_counts, out)
    if prune:
        out.train = _prune_train(out.train)
    for p in range(len(problem.pools)):
        out.gen += _gen_candidates(problem, p, modes, all_counts or not prune, out)
    if len(problem.pools) > 1:
        out.aux = _aux_candidates(problem, out, all_counts)
    for cands in (out.gen, out.train, out.aux):
        for i, c in enumerate(cands):
            c.id = i
    return out


def _aux_candidates(problem: Problem, out: Candidates, all_counts: bool) -> list[AuxCand]:
    """Auxiliary pools for the reference/reward forwards: per pool, hosted set and
    quantization, the GPU counts on the (GPUs, time) Pareto front. More GPUs never slow the
    forwards down, so for throughput an auxiliary set takes the largest legal count the
    other roles leave in its pool; the cost objective tries the whole pool and power-of-two
    node counts."""
    names = [n for n in ("reference", "reward") if getattr(problem, n) is not None]
    subsets = [frozenset(c) for k in range(1, len(names) + 1) for c in combinations(names, k)]
    found: list[AuxCand] = []
    for p, pool in enumerate(problem.pools):
        legal = sorted(set(role_gpu_counts(pool, exclusive=False)))
        if all_counts:
            g = pool.gpus_per_node
            counts = {n for n in legal if n <= g or (n // g) & (n // g - 1) == 0} | {pool.n_gpus}
        else:
            left = {pool.n_gpus} | {pool.n_gpus - c.gpus for c in out.gen + out.train if c.pool == p}
            counts = {max((n for n in legal if n <= r), default=0) for r in left} - {0}
        for hosts in subsets:
            for q in (("none", "int8", "int4") if "reward" in hosts else ("none",)):
                if not hosted_ok(problem, "auxiliary", hosts, q):  # framework rule
                    continue
                best = math.inf
                for n in sorted(counts):
                    side = aux_side(problem, pool, n, hosts, q)
                    if side.fits and side.time < best - 1e-9:
                        best = side.time
                        found.append(AuxCand(side, hosts, q, p))
    return found


def _role_counts(problem: Problem, pool: PoolHW, cons: dict[str, Any]) -> list[int]:
    single = len(problem.pools) == 1  # with one pool the other role needs a GPU too
    return [n for n in role_gpu_counts(pool, exclusive=single) if _count_ok(cons, n)]


def _train_candidates(problem: Problem, p: int, modes: list[str], all_counts: bool, out: Candidates) -> list[TrainCand]:
    pool = problem.pools[p]
    gen_c, train_c = problem.spec.constraints.generation, problem.spec.constraints.training
    dev = device(pool, problem.spec.model.precision, problem.profile)
    cap = capacity_bytes(pool, problem.spec.constraints.min_headroom)
    aux_cache: dict[tuple, tuple] = {}
    counts: list[tuple[str, int]] = []
    if "colocated" in modes:
        coloc = _role_counts(problem, pool, train_c) + [pool.n_gpus] if all_counts else [pool.n_gpus]
        counts += [("colocated", n) for n in sorted(set(coloc)) if _count_ok(train_c, n) and _count_ok(gen_c, n)]
    if any(m in modes for m in ("sync", "async")):
        counts += [("disagg", n) for n in _role_counts(problem, pool, train_c)]
    found: list[TrainCand] = []
    best_disagg: dict[tuple, float] = {}
    for mode, n in counts:
        variants = [v for v in _aux_variants(problem, mode == "disagg" or len(problem.pools) > 1)
                    if not (problem.reward is not None and "reward" not in v[0] and v[2] != "none")
                    and variant_ok(problem, modes, mode, *v)]  # framework rule
        layouts = train_layouts(problem, pool, n)
        verdict = None
        while True:
            try:
                lay = layouts.send(verdict)
            except StopIteration:
                break
            mem = policy_memory(problem, lay)
            verdict = mem.total <= cap  # False: a larger micro-batch cannot fit either
            if not verdict:
                continue
            t, _, old = train_core(problem, pool, lay, mem, cache=aux_cache)
            out.evaluated += 1
            core_time = t.total + old
            for hosts, ref, quant in variants:
                ref_t, rew_t, val_t, resident = train_aux(
                    problem, pool, lay, reference=ref, reward="training" if "reward" in hosts else "elsewhere",
                    reward_quant=quant, cache=aux_cache)
                if mem.total + resident > cap:
                    continue
                if mode == "disagg":  # only the fastest of a group can be chosen: skip the rest early
                    key = (n, hosts, ref, quant)
                    total = core_time + ref_t + rew_t + val_t
                    if total >= best_disagg.get(key, math.inf):
                        continue
                    best_disagg[key] = total
                side = TrainSide(layout=lay, gpus=lay.gpus, train=t, old_logprob=old, reference=ref_t, reward=rew_t,
                                 value=val_t, mem=mem, aux_resident=resident, capacity=cap, fits=True,
                                 states=mem.states + resident)
                for off in ((False, True) if mode == "colocated" else (False,)):
                    if off and not variant_ok(problem, modes, mode, hosts, ref, quant, offload=True):  # framework rule
                        continue
                    switch = 2 * dev.pcie_time(side.states) if off else 0.0
                    send = send_time(problem, pool, n) if mode == "disagg" else 0.0
                    found.append(TrainCand(mode=mode, layout=lay, hosts=hosts, reference=ref, reward_quant=quant,
                                           offload_states=off, side=side, switch=switch, send=send, pool=p))
    return found


def _gen_candidates(problem: Problem, p: int, modes: list[str], all_counts: bool, out: Candidates) -> list[GenCand]:
    pool = problem.pools[p]
    gen_c = problem.spec.constraints.generation
    found: list[GenCand] = []
    g_counts: list[tuple[str, int]] = []
    coloc_counts = sorted({c.gpus for c in out.train if c.mode == "colocated" and c.pool == p})
    g_counts += [("colocated", n) for n in coloc_counts]
    if any(m in modes for m in ("sync", "async")):
        legal = _role_counts(problem, pool, gen_c)
        if not all_counts:
            # Throughput: more engine replicas never slow generation down, so generation takes
            # the largest legal count that each training choice leaves free in this pool.
            left = {pool.n_gpus - (c.gpus if c.pool == p else 0) for c in out.train if c.mode == "disagg"}
            legal = sorted({max((n for n in legal if n <= r), default=0) for r in left} - {0})
        g_counts += [("disagg", n) for n in legal]
    for mode, n in g_counts:
        levels = sorted({c.reserved_gb for c in out.train if c.mode == "colocated" and c.pool == p and c.gpus == n})
        for lay in gen_layouts(problem, pool, n):
            if mode == "colocated":
                for lv in levels:
                    side = gen_side(problem, pool, lay, reserved=lv * 1e9)
                    out.evaluated += 1
                    if not side.fits:
                        break  # more reserved memory fits even less
                    if not _cap_ok(problem, lay, side):  # framework rule
                        continue
                    sync, _ = sync_time(problem, pool, pool, lay, n, colocated=True)
                    found.append(GenCand(mode, lay, frozenset(), "none", lv, side, sync, pool=p))
            else:
                for hosts, q in _gen_host_variants(problem):
                    aux = tuple((h, getattr(problem, h), QUANT_BYTES[q] if h == "reward" else 2.0) for h in sorted(hosts))
                    side = gen_side(problem, pool, lay, aux_models=aux)
                    out.evaluated += 1
                    if not side.fits or not _cap_ok(problem, lay, side):  # framework rule
                        continue
                    found.append(GenCand(mode, lay, hosts, q, 0, side, recv_time(problem, pool, lay), pool=p))
    return found


def _cap_ok(problem: Problem, lay: GenLayout, side: GenSide) -> bool:
    """framework rule: a candidate that relies on the engine's concurrent-sequence cap needs a
    target that can set it."""
    return not side.max_num_seqs or bool(generation_ok(target_caps(problem), "vllm", lay.tp, lay.pp, lay.dp, lay.ep,
                                                       max_num_seqs=side.max_num_seqs))


def _gen_host_variants(problem: Problem):
    for hosts, q in _all_gen_host_variants(problem):
        if hosted_ok(problem, "generation", hosts, q):  # framework rule
            yield hosts, q


def _all_gen_host_variants(problem: Problem):
    yield frozenset(), "none"
    if problem.reference is not None:
        yield frozenset({"reference"}), "none"
    if problem.reward is not None:
        for q in ("none", "int8", "int4"):
            yield frozenset({"reward"}), q
            if problem.reference is not None:
                yield frozenset({"reference", "reward"}), q


def _prune_train(cands: list[TrainCand]) -> list[TrainCand]:
    """Keep, per (mode, GPUs, hosted models, reference placement, quantization), the
    candidates on the Pareto front of (time, memory held during rollout). Nothing else of a
    training candidate enters the program, so the optimum is unchanged; disaggregated
    candidates hold nothing during rollout, so only the fastest survives."""
    groups: dict[tuple, list[TrainCand]] = {}
    for c in cands:
        key = (c.pool, c.mode, c.gpus, c.hosts, c.reference, c.reward_quant)
        groups.setdefault(key, []).append(c)
    out = []
    for key, cs in groups.items():
        cs.sort(key=lambda c: (time_units(c.time), c.reserved_gb if c.mode == "colocated" else 0, _simplicity(c)))
        best_mem = math.inf
        for c in cs:
            mem = c.reserved_gb if c.mode == "colocated" else 0
            if mem < best_mem:
                out.append(c)
                best_mem = mem
    return out


def _simplicity(c: TrainCand) -> tuple:
    L = c.layout
    rec = {"none": 0, "selective": 1, "full": 2}[L.recompute]
    return (L.zero_stage, rec, L.vp, -L.micro_batch, c.offload_states)
