"""One RL step: generation side, training side, weight sync, and how the pipeline mode
combines them (SPEC sections 6-7). Both the solver and `estimate` call these functions, so
a plan re-scored by `estimate` gives the numbers the solver reported."""
from __future__ import annotations

import heapq
import math
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from functools import lru_cache

from rlsolve.frameworks.rules import plan_strategy
from rlsolve.frameworks.runtime import FrameworkCosts, engine_default_max_num_seqs, release, runtime
from rlsolve.models import Architecture
from rlsolve.perf.generate import (GenLayout, StepModel, attention_len, decode_lower_bound, decode_time, decode_trace,
                                   gen_other_bytes, kv_need_floor, kv_bytes_per_token_per_gpu, prefill_time,
                                   representative_count, resume_decode, simulate_decode, slowest_replica_mean,
                                   weight_bytes_per_gpu)
from rlsolve.perf.hw import GB, Device, constants, device
from rlsolve.perf.train import (TrainLayout, TrainMem, TrainTime, ep_overlap_paired_share, forward_time, frozen_weights,
                                layout_with, lora_params, micro_batch_lengths, model_flops, params_per_gpu, stage_times,
                                train_memory, train_time, unpadded_busiest_share)
from rlsolve.resolve import PoolHW, Problem

QUANT_BYTES = {"none": 2.0, "int8": 1.0, "int4": 0.5}


def seq_attention(wl) -> float:
    """Attention-effective tokens per sequence where sequences run attention on their own lengths (packed or
    unpadded flash attention): E[L^2] / E[L] over the workload's prompt plus response
    (generate.attention_len, cached per length distribution); the GEMMs and elementwise work stay on
    `wl.seq_mean`."""
    return attention_len(wl.prompt_len, wl.response_mean, wl.response_max, wl.clip_ratio)


def gen_dtype_bytes(problem: Problem) -> float:
    """Rollout weights and KV cache in FP8 when the spec asks for fp8, else 16-bit."""
    return problem.workload.gen_bytes


def capacity_bytes(pool: PoolHW, headroom: float) -> float:
    return pool.gpu.memory_bytes * (1.0 - headroom)


def engine_cap_bytes(problem: Problem, pool: PoolHW) -> float:
    """What the engine may take per GPU (weights, KV cache, workspace): the user's
    gpu_memory_utilization share of the GPU's memory, else no limit beyond capacity."""
    util = problem.workload.engine_share
    return float("inf") if util is None else util * pool.gpu.memory_bytes


# --- generation side ----------------------------------------------------------------------

@dataclass
class GenSide:
    layout: GenLayout
    gpus: int
    prefill: float
    decode: float
    aux: float                 # reference/reward forwards run on the generation GPUs (seconds, summed)
    weights: float             # bytes per GPU
    kv_cache: float
    activations: float
    other: float
    reserved: float            # bytes per GPU held by other roles (colocated training states, aux models)
    capacity: float
    kv_tokens: float
    peak_batch: float
    kv_limited: bool
    fits: bool
    max_num_seqs: int | None = None  # the engine cap the time was computed with (None: no cap)
    aux_times: dict = field(default_factory=dict)  # the same per model: {"reference": s, "reward": s}
    cut: float | None = None  # gen_side's `beyond` where no run came under it (then the decode time is inf)

    @property
    def time(self) -> float:
        return self.prefill + self.decode + self.aux

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.other + self.reserved


def aux_forward_on_gen(arch: Architecture, dev: Device, lay: GenLayout, sequences: float, seq_len: float,
                       attn_len: float | None = None) -> float:
    """A reference/reward forward over the rollout batch on the engine's layout: prefill-like, each sequence
    attending over its own length (mean context per token: half the attention-effective length `attn_len`,
    `seq_attention`; None: `seq_len`, sequences of one length)."""
    return _prefill(arch, dev, lay, sequences * seq_len / lay.dp, (attn_len or seq_len) / 2)


class _IdentityMemo:
    """Results keyed by the identity of the objects they are computed from (architectures, devices, StepModels:
    never changed once built), each kept alive beside its result so that an id is never taken for another
    object's (as `device` guards its own memo); cleared once it holds more than `limit` results. With no owners
    (`()`), results keyed by values alone."""

    MISS = object()

    def __init__(self, limit: int):
        self.limit = limit
        self.table: dict[tuple, tuple] = {}

    def get(self, key: tuple, owners: tuple):
        hit = self.table.get(key)
        if hit is None:
            return self.MISS
        for a, b in zip(hit[0], owners):  # (a loop, not all() over a generator: the search asks ~100,000 times)
            if a is not b:
                return self.MISS
        return hit[1]

    def put(self, key: tuple, owners: tuple, value):
        if len(self.table) > self.limit:
            self.table.clear()
        self.table[key] = (owners, value)
        return value


_PREFILLS = _IdentityMemo(65536)


def _prefill(arch: Architecture, dev, lay: GenLayout, tokens: float, context: float) -> float:
    """`prefill_time`, memoized (the engine search asks the same prefills at every memory level of a layout),
    by the identity of the architecture and device and by the degrees prefill_time reads: tp and pp (never dp
    nor ep)."""
    key = (id(arch), id(dev), lay.tp, lay.pp, tokens, context)
    hit = _PREFILLS.get(key, (arch, dev))
    if hit is not _PREFILLS.MISS:
        return hit
    return _PREFILLS.put(key, (arch, dev), prefill_time(arch, dev, lay, tokens, context))


def rollout_steps_in_flight(mode: str, staleness: int) -> int:
    """Steps whose rollouts an engine decodes at once. An async engine may run `staleness`
    steps ahead of the trainer (NeMo-RL's max_trajectory_age_steps, verl's staleness
    threshold), so it keeps admitting the next steps' prompts while a step's longest responses
    finish: the long tail is paid once per `staleness` steps (NeMo-RL v0.7.0 docs/guides/
    async-grpo.md: the collector generates in the background into a buffer of
    num_prompts_per_step x max_trajectory_age_steps x 2; "increase [the age limit] for higher
    throughput"). On-policy engines (colocated, sync) wait for every response of the step
    before the weights change."""
    return max(1, staleness) if mode == "async" else 1


def engine_shares_fixed(mode: str, framework: FrameworkCosts) -> bool:
    """Whether the target framework, in `mode`, splits a step's samples over the engines in fixed shares before
    any response ends, so the step waits for the slowest engine's share (`generate.slowest_replica_mean`);
    else requests go to the engines as they free up (frameworks/runtime.yaml fixed_engine_shares: NeMo-RL's
    async GRPO and verl's separate_async do, OpenRLHF's async trainer dispatches batch by batch)."""
    return mode in framework.fixed_share_modes


_STEPS = _IdentityMemo(4096)


def v1_serial_engine_core(engine_version: str | None, ray_executor: bool = False) -> bool:
    """True where a V1 vLLM release (runtime.yaml engine_v1_default_from) schedules synchronously: its engine core
    schedules and updates every running request between GPU steps. So do releases before
    engine_async_scheduling_default_from, and, on vLLM's 'ray' executor backend (`ray_executor`), those before
    engine_ray_async_scheduling_from. None (the newest release read) schedules asynchronously, beside the GPU."""
    if engine_version is None:
        return False
    rt, at = runtime(), release(engine_version)
    if at < release(rt.engine_v1_default_from.value):
        return False
    until = rt.engine_ray_async_scheduling_from if ray_executor else rt.engine_async_scheduling_default_from
    return at < release(until.value)


def inproc_output_us_per_seq(engine_version: str) -> float:
    """vLLM's output processor per running sequence per step at the release (runtime.yaml
    engine_inproc_output_us_per_seq)."""
    return runtime().engine_inproc_output_us_per_seq.at(engine_version)


def runner_us_per_seq(engine_version: str) -> float:
    """vLLM's GPU model runner host work per running sequence per decode step at the release (runtime.yaml
    engine_runner_us_per_seq)."""
    return runtime().engine_runner_us_per_seq.at(engine_version)


def _step_model(arch: Architecture, dev, lay: GenLayout, wb: float, host_per_seq: float, eager: bool) -> StepModel:
    """The engine's StepModel, memoized (a pure function of its arguments, never changed after it is built: the
    search bounds and simulates the same layout under many memory budgets). Keyed by the identity of the
    architecture and device (`_IdentityMemo`), and by one replica's degrees: a StepModel reads tp, pp and ep
    only through max(tp, ep) (the GPUs a routed expert is split over), never dp, so the counts of one replica
    shape share it, and so do an engine with ep <= tp and the same with ep = tp (built with dp = 1 and that
    ep)."""
    key = (id(arch), id(dev), lay.tp, lay.pp, max(lay.tp, lay.ep), wb, host_per_seq, eager)
    hit = _STEPS.get(key, (arch, dev))
    if hit is not _STEPS.MISS:
        return hit
    step = StepModel(arch, dev, GenLayout(tp=lay.tp, pp=lay.pp, dp=1, ep=max(lay.tp, lay.ep)), wb, wb,
                     host_per_seq=host_per_seq, eager=eager)
    return _STEPS.put(key, (arch, dev), step)


# The KV budgets an engine may pin (the plan's kv_cache_gb, exported through its gpu_memory_utilization)
# below U, what its run with that cap (or none) needs unpinned (`DecodeResult.kv_need`): a geometric grid,
# KV_BUDGETS_PER_HALVING of them down to U / 2 (where a little preemption can beat the next smaller cap,
# whose own unpinned run is a candidate), then, for the run without a cap (or with the one asked for),
# which no smaller cap stands in for, COARSE_PER_HALVING per halving down to one full-length sequence, which
# that run may always pin. The grid depends on U, never on the memory: that makes the engine's time (the
# best run whose need fits) never rise with more memory. A search resolution, not a model constant: a finer
# grid tries more budgets and simulates more (benchmarks/solve_examples.py counts them).
KV_BUDGETS_PER_HALVING = 8
COARSE_PER_HALVING = 2
_TOP = -1  # the search's mark of a run unpinned (budget index 0: one full-length sequence)


def pinned_budget(need: float, k: int) -> float:
    """The k-th pinnable KV budget (tokens per replica, k >= 1) below a run's unpinned need (the grid above)."""
    if k <= KV_BUDGETS_PER_HALVING:
        return need * 2.0 ** (-k / KV_BUDGETS_PER_HALVING)
    return need * 2.0 ** (-1 - (k - KV_BUDGETS_PER_HALVING) / COARSE_PER_HALVING)


def _first_within(need: float, room: float, stop: int) -> int | None:
    """The least k in 1 .. stop - 1 with `pinned_budget(need, k) <= room`, None where there is none: the scan's
    answer, from the grid's closed form (k >= 8 log2(need / room) on the fine part, 8 + 2 (log2(need / room) - 1)
    on the coarse one), then walked to the least k whose budget is within the room (pinned_budget never rises
    with k, so those k are every one from the least on): a few calls instead of a scan of up to ~10 (the engine
    search asks this for every unpinned run it takes, 1,722 times on the 70B example)."""
    if not (0.0 < room and 0.0 < need < math.inf):
        return next((k for k in range(1, stop) if pinned_budget(need, k) <= room), None)
    over = math.log2(need / room) if need > room else 0.0
    k = math.ceil(KV_BUDGETS_PER_HALVING * over) if over <= 1.0 else \
        KV_BUDGETS_PER_HALVING + math.ceil(COARSE_PER_HALVING * (over - 1.0))
    k = min(max(k, 1), stop)
    while k > 1 and pinned_budget(need, k - 1) <= room:
        k -= 1
    while k < stop and pinned_budget(need, k) > room:
        k += 1
    return k if k < stop else None


@lru_cache(maxsize=4096)
def engine_caps(n_requests: float, groups: int = 32) -> tuple[int, ...]:
    """The max_num_seqs an engine's unpinned runs try: a replica's requests in w waves, ceil(n / w) for
    w = 2, 3, ..., each lowered to the least cap that `simulate_decode` runs alike. The simulation stands
    for the requests by `groups` representatives weighing v = (n - 1) / (groups - 1) each but the longest,
    which weighs 1, and admits one while the batch's weight stays within cap + 1e-9: a batch weighs
    a x v + b (b = 0 or 1), so a cap runs as the least integer at or above the largest such weight within
    it, and that least cap leaves the profile run's reserve the smallest (`gen_other_bytes` grows with the
    cap). A cap at or above the requests never binds: the run without a cap."""
    g = representative_count(n_requests, groups)
    if n_requests <= 1:
        return ()
    v = (n_requests - 1) / (g - 1)
    weights = sorted({a * v + b for a in range(g) for b in (0, 1) if a or b})
    caps = set()
    for w in range(2, g + 1):
        cap = math.ceil(n_requests / w)
        # the largest weight within the cap (sorted weights; 1 is one, so one is within a cap + 1e-9 >= 1)
        held = weights[bisect_right(weights, cap + 1e-9) - 1] if cap + 1e-9 >= 1 else 1.0
        least = max(1, math.ceil(held - 1e-9))
        if least + 1e-9 < n_requests:
            caps.add(least)
    return tuple(sorted(caps))


_RUNS = _IdentityMemo(65536)
# by the run's arguments alone (no StepModel: `generate.decode_time`), the unpinned runs' `DecodeTrace`s (None for a
# closed-form run) and the event runs' schedules (about 2 kB each: 3 doubles an event), each with the result of
# the first StepModel to run it
_TRACES = _IdentityMemo(4096)
_SCHEDULES = _IdentityMemo(16384)


def _run_key(step: StepModel, n_req: float, wl, n_total: float, budget: float, cap: float, fixed_shares: bool
             ) -> tuple:
    """A decode candidate's memo key: the StepModel's identity, then what its run reads (the run's arguments,
    `key[1:]`, with the budget and cap last)."""
    return (id(step), n_req, wl.prompt_len, wl.response_mean, wl.response_max, n_total, wl.clip_ratio, fixed_shares,
            budget, cap)


def _decode_run(step: StepModel, n_req: float, wl, n_total: float, budget: float, cap: float,
                fixed_shares: bool = True):
    """`simulate_decode` of one (cap, KV budget) candidate, memoized: its run does not depend on the
    memory the engine has (that only decides whether it is allowed), so the search shares it across
    every memory level it is asked at. Keyed like `_step_model`, by the StepModel's identity, kept
    alive beside the result. Nor do an event run's events depend on the StepModel, only its time does
    (`generate.decode_time`): one found for another engine with the same replica requests is re-timed, not
    run again. The cap's unpinned run (budget inf) keeps its `DecodeTrace`, and a pinned run of the same cap
    starts from it where its budget first changes the run (`resume_decode`: the same result as
    `simulate_decode`'s, float for float; the search takes the unpinned run before its pinned ones)."""
    key = _run_key(step, n_req, wl, n_total, budget, cap, fixed_shares)
    hit = _RUNS.get(key, (step,))
    if hit is not _RUNS.MISS:
        return hit
    run = key[1:]
    known = _SCHEDULES.get(run, ())
    if known is not _SCHEDULES.MISS:
        events, first = known
        return _RUNS.put(key, (step,), replace(first, time=decode_time(step, events)))
    at = run[:-2] + (cap,)
    events: list = []
    if budget == math.inf:
        res, trace = decode_trace(step, n_req, wl.prompt_len, wl.response_mean, wl.response_max, cap, n_total,
                                  clip=wl.clip_ratio, fixed_shares=fixed_shares)
        _TRACES.put(at, (), trace)
        if trace is not None:
            events = trace.events
    else:
        trace = _TRACES.get(at, ())
        if trace is not _TRACES.MISS and trace is not None:  # (None: a closed-form run keeps no events)
            res = resume_decode(step, trace, budget, events=events)
        else:
            res = simulate_decode(step, n_req, wl.prompt_len, wl.response_mean, wl.response_max, budget, cap,
                                  n_total, clip=wl.clip_ratio, fixed_shares=fixed_shares, events=events)
    if len(events):  # an event run (a closed form is timed afresh: numpy, no events)
        _SCHEDULES.put(run, (), (events if isinstance(events, array) else array("d", events), res))
    return _RUNS.put(key, (step,), res)


def _unpinned_need(n_req: float, wl, n_total: float, cap: float, fixed_shares: bool) -> float | None:
    """The `kv_need` of a cap's unpinned event run where an engine ran it already (`_SCHEDULES`), else None. Like
    its events, a run's need never reads the StepModel (`DecodeResult.kv_need`: the KV compared with the
    capacity), so it is every engine's with these replica requests."""
    known = _SCHEDULES.get((n_req, wl.prompt_len, wl.response_mean, wl.response_max, n_total, wl.clip_ratio,
                            fixed_shares, math.inf, cap), ())
    return None if known is _SCHEDULES.MISS else known[1].kv_need


_BOUNDS = _IdentityMemo(65536)


def _decode_bound(step: StepModel, n_req: float, wl, n_total: float, budget: float, cap: float,
                  fixed_shares: bool = True) -> float:
    """`decode_lower_bound` of one (cap, KV budget) candidate, memoized like `_decode_run` (the search bounds the
    same pinned budgets, which follow from a run's need, at every memory level it asks an engine at)."""
    key = _run_key(step, n_req, wl, n_total, budget, cap, fixed_shares)
    hit = _BOUNDS.get(key, (step,))
    if hit is not _BOUNDS.MISS:
        return hit
    return _BOUNDS.put(key, (step,), decode_lower_bound(step, n_req, wl.prompt_len, wl.response_mean,
                                                        wl.response_max, budget, n_total, clip=wl.clip_ratio,
                                                        max_num_seqs=cap, fixed_shares=fixed_shares))


_FRAMES = _IdentityMemo(16384)


def _engine_frame(problem: Problem, pool: PoolHW, lay: GenLayout, reserved: float,
                  aux_models: tuple[tuple[str, Architecture, float], ...], kv_cache_gb: float | None,
                  max_num_seqs: float | None, cap_search: bool) -> tuple:
    """What `gen_side` reads of an engine that does not depend on its replica count (dp): its device, bytes per
    weight, weights per GPU, the cap an unset engine runs at, the profile run's reserve, the hosted models'
    weights, the capacity, the KV cache and whether it fits, the KV bytes and tokens per replica, the
    StepModel, and `rooms_of(cap)`: the KV tokens a cap's profile run leaves (memoized per cap). None of it reads
    dp (the weights, KV and reserve of a GPU follow from tp, pp and ep; `_step_model` is built with dp = 1), and
    the engine search asks every engine shape at hundreds of counts (16,384 GPUs x 3 pools: ~19,000 bounds), so
    it is memoized by the identity of the problem, the pool and the hosted architectures (`_IdentityMemo`) and by
    the degrees and arguments it reads."""
    key = (id(problem), id(pool), lay.tp, lay.pp, lay.ep, reserved,
           tuple([(r, id(a), b) for r, a, b in aux_models]) if aux_models else (), kv_cache_gb, max_num_seqs, cap_search)
    owners = (problem, pool) + tuple([a for _, a, _ in aux_models]) if aux_models else (problem, pool)
    hit = _FRAMES.get(key, owners)
    if hit is not _FRAMES.MISS:
        return hit
    wl = problem.workload
    arch = problem.policy
    dev = device(pool, problem.workload.precision, problem.profile)
    wb = gen_dtype_bytes(problem)
    weights = weight_bytes_per_gpu(arch, lay, wb)
    # vLLM's profile run warms the sampler up over max_num_seqs rows. Without a cap, the engine's own
    # default (frameworks/runtime.py engine_default_max_num_seqs, which cases.py asks too): a figure independent of
    # the replica count, as the engine search's count loop needs (whether a layout fits does not depend on
    # dp); the exporters then write a step's requests per replica, which may differ from it
    default_seqs = engine_default_max_num_seqs(pool.gpu.memory_bytes, pool.gpu.name)
    # where the target cannot set the cap, an engine the plan gives none runs at the one its framework builds it
    # with (OpenRLHF's AsyncLLM: the engine-context default); where it can, the export writes one that never binds
    unset = math.inf if cap_search else float(wl.framework.engine_unset_max_num_seqs or default_seqs)
    other = gen_other_bytes(arch, lay, max_num_seqs or (default_seqs if cap_search else unset), wl.engine_version)
    aux_bytes = sum(weight_bytes_per_gpu(a, lay, b) for _, a, b in aux_models)
    cap = capacity_bytes(pool, problem.workload.headroom)
    engine_room = min(cap - reserved, engine_cap_bytes(problem, pool)) - weights - aux_bytes

    def kv_room(other_bytes: float) -> float:
        """KV-cache bytes the engine gets after a profile-run reserve of `other_bytes`."""
        free_c = engine_room - other_bytes
        return free_c if kv_cache_gb is None else min(kv_cache_gb * GB, max(free_c, 0.0))

    free = engine_room - other
    kv = kv_room(other)
    fits = free > 0 and (kv_cache_gb is None or kv_cache_gb * GB <= free + 1.0)  # 1 byte: float round trip
    kv_tok_gpu = kv_bytes_per_token_per_gpu(arch, lay, wb)
    kv_tokens = max(kv, 0.0) / kv_tok_gpu
    # a replica must hold at least one full-length sequence
    fits = fits and kv_tokens >= wl.seq_max
    # the engine returns each sampled token's log-prob when the framework asks for it
    host_per_seq = dev.decode_host_per_seq_s if wl.framework.rollout_logprobs else 0.0
    serial_us = 0.0  # the engine's own host work per running sequence between GPU steps, on the reference host
    if wl.engine_sync_output:  # a V0 engine without its async output processor (enforce_eager)
        serial_us += constants()["decode_v0_sync_output_us_per_seq"]
    ray = wl.framework.engine_ray_multi_gpu and lay.tp * lay.pp > 1
    if v1_serial_engine_core(wl.engine_version, ray):  # the engine core's pass over the running requests
        serial_us += constants()["decode_v1_core_us_per_seq"]
        serial_us += runner_us_per_seq(wl.engine_version)  # and the model runner's, before and after the GPU step
        if wl.engine_inproc_output:  # ... and the output processor's, in the same thread
            serial_us += inproc_output_us_per_seq(wl.engine_version)
    host_per_seq += serial_us * dev.host_slowdown * 1e-6
    step = _step_model(arch, dev, lay, wb, host_per_seq, wl.engine_eager)
    rooms: dict[float, float] = {}

    def rooms_of(c: float) -> float:
        """The KV tokens per replica left beside the profile run's reserve for cap `c`."""
        hit = rooms.get(c)
        if hit is None:
            hit = rooms[c] = max(kv_room(gen_other_bytes(arch, lay, c, wl.engine_version)), 0.0) / kv_tok_gpu
        return hit

    return _FRAMES.put(key, owners, (dev, wb, weights, unset, other, aux_bytes, cap, kv, fits, kv_tok_gpu, kv_tokens,
                                     step, rooms_of))


def gen_side(problem: Problem, pool: PoolHW, lay: GenLayout, *, reserved: float = 0.0,
             aux_models: tuple[tuple[str, Architecture, float], ...] = (), kv_cache_gb: float | None = None,
             max_num_seqs: float | None = None, lower_bound: bool = False, in_flight: int = 1,
             cap_search: bool = True, fixed_shares: bool = True, beyond: float | None = None) -> GenSide:
    """Time and memory of generating one step's samples on `lay.dp` replicas.

    `reserved`: bytes per GPU held by other roles while generating (colocated training
    states). `aux_models`: (role, architecture, bytes per parameter) run on these GPUs after
    decoding (reference, reward). `lower_bound`: the decode time is `decode_lower_bound`'s
    instead of the simulation's (the search prunes with it; the rest is exact). `in_flight`
    (`rollout_steps_in_flight`): the engine decodes that many steps' requests as one
    continuously batched stream; the step is charged its share of that stream's time. `fixed_shares`
    (`engine_shares_fixed`): the framework splits the step's samples over the engines in fixed shares, so
    the replica simulated is the slowest (`generate.slowest_replica_mean`); else the mean one.

    Without `max_num_seqs` the engine runs the fastest of its candidates: no cap or a cap that binds
    (`engine_caps`; none when `cap_search` is off, for a target that cannot set one: its engines then run at
    the cap their framework builds them with, `FrameworkCosts.engine_unset_max_num_seqs`), each with the KV
    cache unpinned (all the memory left: allowed when the run's `kv_need` fits) or pinned to a
    `pinned_budget` below that need (allowed when it fits). No candidate's time depends on the memory,
    only whether it is allowed, and more memory allows more: the time never rises with memory (the
    colocated fronts and the oracle's KV levels rely on it; a property test). With `max_num_seqs`, the
    same over that one cap. Best first by `decode_lower_bound` (property tests: never above the run it
    stands for; a cap or a smaller budget never lowers it), so the search simulates only candidates whose
    bound is below the best run found, and the time is the least over all the candidates.

    `beyond` (seconds): a time the caller has no use for the engine's exact time at or above (the engine
    search's pruning limit). The search also stops where every candidate left is bounded at or above it; if no
    run then comes under it, the side's decode time is inf (`fits` still true) and its exact time is at least
    `beyond` x (1 - 1e-6). Where one does, the side is the one without `beyond`, float for float: up to the
    first run under it the search takes the same candidates in the same order, and from then on it stops
    where it would without `beyond`."""
    wl = problem.workload
    arch = problem.policy
    frame = _engine_frame(problem, pool, lay, reserved, aux_models, kv_cache_gb, max_num_seqs, cap_search)
    dev, wb, weights, unset, other, aux_bytes, cap, kv, fits, kv_tok_gpu, kv_tokens, step, rooms_of = frame
    k = max(1, int(in_flight))
    n_req = k * wl.samples / lay.dp
    prompts = k * wl.prompts / lay.dp
    chosen_cap = max_num_seqs
    prompt_tokens = prompts * wl.prompt_len
    ctx = wl.prompt_len / 2
    n_total = k * wl.samples
    # fixed shares change the run only where the slowest replica's mean differs from the mean (more than one
    # replica): elsewhere the runs of both are the same floats, so they share one memo entry (`_decode_run`)
    fixed_shares = fixed_shares and slowest_replica_mean(n_req, wl.response_mean, wl.response_max, n_total,
                                                         wl.clip_ratio) != wl.response_mean
    # the candidates' caps (None: no cap) and the KV tokens each leaves (its profile run reserves for it)
    caps: tuple = (max_num_seqs,) if max_num_seqs else (None,) + (engine_caps(n_req) if cap_search else ())

    def bound(c: float, budget: float) -> float:
        return _decode_bound(step, n_req, wl, n_total, budget, c, fixed_shares)

    aux_times = {role: aux_forward_on_gen(a, dev, lay, wl.samples, wl.seq_mean, seq_attention(wl))
                 for role, a, _ in aux_models}
    aux = sum(aux_times.values())

    if fits and lower_bound:
        # every candidate's KV is within the largest room (the least cap's), and a cap only raises the bound.
        # The profile-run reserve never falls with the cap and the room never grows with the reserve, float for
        # float (a property test), so the largest room of the caps tried is that of the least (engine_caps sorts)
        top = kv_tokens if len(caps) < 2 else max(kv_tokens, rooms_of(caps[1]))
        decode = bound(float(max_num_seqs or unset), top)
        peak, limited, rep = 0.0, False, 0.0
    elif fits:
        base = float(wl.seq_max)
        rooms = [kv_tokens] + [rooms_of(c) for c in caps[1:]]
        floor = _prefill(arch, dev, lay, prompt_tokens, ctx)  # re-prefills only add (a property test)
        room = dict(zip(caps, rooms))  # every run the search takes is of one of these caps
        limit = {c: float(c or unset) for c in caps}  # a cap as the simulation takes it (None: `unset`)
        # the heap: (bound, order, cap, at): at = _TOP the cap's run unpinned, else its at-th pinned budget
        # (0: one full-length sequence, no cap or the one asked for); a smaller budget only raises the bound,
        # so each pinned run is pushed when the one above it is taken. A cap whose least need
        # (`kv_need_floor`) leaves even its smallest pinned budget beyond its room cannot be allowed: not tried
        lowest = pinned_budget(1.0, KV_BUDGETS_PER_HALVING)  # a bound cap's smallest pinned budget, over its need
        heap = [(floor + bound(limit[c], r), n, c, _TOP) for n, (c, r) in enumerate(zip(caps, rooms))
                if r >= base and (c == caps[0] or kv_need_floor(n_req, wl.prompt_len, wl.response_mean, wl.response_max,
                                                                n_total, limit[c], clip=wl.clip_ratio,
                                                                fixed_shares=fixed_shares) * lowest
                                  <= r * (1 + 1e-9))]
        heap.append((floor + bound(limit[caps[0]], base), len(caps), caps[0], 0))
        heapq.heapify(heap)
        order, need = len(caps) + 1, {}
        best, pick = math.inf, None
        # `beyond` in the heap's terms (a run's decode plus its prefill, for k steps): the time is (that) / k + aux
        cut = math.inf if beyond is None else (beyond - aux) * k
        while heap:
            lb, _, c, at = heapq.heappop(heap)
            if lb * (1 - 1e-6) >= (best if best < cut else cut):
                break  # every candidate left takes at least its bound: none can win (or come under the cut)
            if at == _TOP:
                budget = None
                # whether this memory runs it unpinned is the run's need alone: known without timing it for this
                # engine where another engine ran it (`_unpinned_need`), and then not timed where it does not fit
                known = _unpinned_need(n_req, wl, n_total, limit[c], fixed_shares)
                res = None if known is not None and known > room[c] * (1 + 1e-9) else \
                    _decode_run(step, n_req, wl, n_total, math.inf, limit[c], fixed_shares)
                need[c] = known if res is None else res.kv_need
                # its pinned budgets: the first within the room (and above a full-length sequence)
                nxt = _first_within(need[c], room[c] * (1 + 1e-9),
                                    KV_BUDGETS_PER_HALVING + 1 if c != caps[0] else 10 ** 6)
            else:
                budget = base if at == 0 else pinned_budget(need[c], at)
                res = _decode_run(step, n_req, wl, n_total, budget, limit[c], fixed_shares)
                nxt = at + 1 if 0 < at and (c == caps[0] or at < KV_BUDGETS_PER_HALVING) else None
            below = pinned_budget(need[c], nxt) if nxt is not None else 0.0
            if below > base:
                heapq.heappush(heap, (floor + bound(limit[c], below), order, c, nxt))
                order += 1
            if budget is None and need[c] > room[c] * (1 + 1e-9):
                continue  # the unpinned run needs more KV than this memory leaves
            if res.time + floor >= best:
                continue  # its re-prefills only add to `floor` (a property test): it cannot win, so not priced
            t = res.time + _prefill(arch, dev, lay, prompt_tokens + res.reprefill_tokens, ctx)
            if t < best:
                best, pick = t, (c, budget, res)
        if best >= cut:  # no run comes under the cut (the caller has no use for the time)
            decode, peak, limited, rep = math.inf, 0.0, False, 0.0
        else:
            chosen_cap, budget, res = pick
            decode, peak, limited, rep = res.time, res.peak_batch, res.kv_limited, res.reprefill_tokens
            if chosen_cap is not None and max_num_seqs is None:
                # the plan exports the cap: the engine's profile run reserves for it, not for vLLM's default
                other = gen_other_bytes(arch, lay, chosen_cap, wl.engine_version)
            # the KV cache: all that is left beside that reserve, or the budget the plan pins
            kv_tokens = room[chosen_cap] if budget is None else budget
            kv = kv_tokens * kv_tok_gpu
    else:
        decode, peak, limited, rep = float("inf"), 0.0, True, 0.0
    # prefix caching: each prompt is prefilled once for its samples_per_prompt responses;
    # k steps in flight: this step's share
    prefill = _prefill(arch, dev, lay, prompt_tokens + rep, ctx) / k
    decode = decode / k
    return GenSide(layout=lay, gpus=lay.tp * lay.pp * lay.dp, prefill=prefill, decode=decode,
                   aux=aux, aux_times=aux_times,
                   weights=weights + aux_bytes, kv_cache=max(kv, 0.0), activations=0.0, other=other,
                   reserved=reserved, capacity=cap, kv_tokens=kv_tokens, peak_batch=peak, kv_limited=limited,
                   fits=fits, max_num_seqs=chosen_cap, cut=beyond if fits and decode == math.inf else None)


# --- training side ------------------------------------------------------------------------

@dataclass
class TrainSide:
    layout: TrainLayout
    gpus: int
    train: TrainTime
    old_logprob: float
    reference: float
    reward: float
    value: float
    mem: TrainMem
    aux_resident: float        # bytes per GPU of reference/reward/critic kept on these GPUs
    capacity: float
    fits: bool
    states: float              # bytes per GPU that colocation must keep (or offload) during rollout
    orchestration: float = 0.0  # the framework's own work per step between rollout and update (s)
    critic_gpus: int = 0       # PPO: GPUs of the critic's own group (0: the critic, if any, trains on these GPUs)
    critic_busy: float = 0.0   # seconds the critic's own group computes per step (forward + update)
    refit_gather: float = 0.0  # the refit's all-gather of full parameters on these GPUs (part of weight_sync)

    @property
    def time(self) -> float:
        return self.train.total + self.old_logprob + self.reference + self.reward + self.value + self.orchestration \
            + self.refit_gather

    @property
    def total(self) -> float:
        return self.mem.total + self.aux_resident


def cached_stage_times(arch: Architecture, dev, lay: TrainLayout, seq_len: float, lora: bool,
                       cache: dict | None, attn_len: float | None = None) -> dict:
    """stage_times memoized by what it depends on: the data-parallel degree enters only
    through the tier the pipeline neighbours talk over, the expert TP it implies, and (ZeRO-2/3)
    the gradient shard each rank accumulates, so layouts that differ in dp alone otherwise
    (the same degrees on more nodes) share one evaluation."""
    if cache is None:
        return stage_times(arch, dev, lay, seq_len, lora=lora, attn_len=attn_len)
    pp_link = dev.link(2 * lay.tp * lay.cp * lay.dp) if lay.pp > 1 else None
    grad_shard = (lay.dp, lay.expert_dp) if lay.zero_stage >= 2 else None
    key = ("stage", id(arch), id(dev.pool), dev.precision, dev.overrides, lay.tp, lay.pp, lay.cp, lay.ep, lay.vp,
           lay.micro_batch, lay.recompute, lay.recompute_modules, lay.recompute_core_attn,
           lay.sequence_parallel, lay.attention, lay.attention_kernel, lay.etp,
           lay.pipeline_split_embedding_loss, lay.moe_dispatcher, lay.cuda_graphs, lay.moe_token_drop, lay.moe_a2a_overlap,
           grad_shard, pp_link, seq_len, attn_len, lora)
    hit = cache.get(key)  # (one hash of the key)
    if hit is None:
        hit = cache[key] = stage_times(arch, dev, lay, seq_len, lora=lora, memo=cache, attn_len=attn_len)
    return hit


def train_core(problem: Problem, pool: PoolHW, lay: TrainLayout, mem: TrainMem | None = None,
               cache: dict | None = None) -> tuple[TrainTime, TrainMem, float]:
    """The policy's own work on the training GPUs: (update time, memory, old log-prob pass)."""
    lay = trainer_layout(problem, lay)
    wl = problem.workload
    arch = problem.policy
    dev = device(pool, problem.workload.precision, problem.profile)
    lora = problem.workload.lora_rank
    gb, steps, logits = wl.global_batch, wl.optimizer_steps, wl.framework.logit_fp32_bytes_forward
    planned, lay = lay, _train_pass_layout(wl, lay)
    seq, attn = _pass_seq_len(wl, lay)
    st = cached_stage_times(arch, dev, lay, seq, lora > 0, cache, attn)
    eager = _fsdp_elementwise(wl, lay)
    # the vocab-parallel log-prob backward runs in Megatron at every TP and in the FSDP path's
    # DTensor logits only with TP (without, the loss takes torch's log_softmax: the model's count)
    logit_bwd = wl.framework.logit_fp32_bytes_backward if lay.zero_stage < 3 or lay.tp > 1 else None
    t = train_time(arch, dev, lay, gb, seq, optimizer_steps=steps, lora_rank=lora, st=st, memo=cache,
                   logit_bytes_fwd=logits, fsdp_reduce_bytes=wl.framework.fsdp_grad_reduce_bytes,
                   unfused_elementwise=eager, logit_bytes_bwd=logit_bwd,
                   loss_per_packed_sequence=wl.framework.loss_per_packed_sequence and wl.packed_micro_batch is not None,
                   fsdp_copy_bytes=wl.framework.fsdp_copy_bytes, fsdp_root=wl.framework.fsdp_root_embeddings,
                   fsdp_cast_bytes=wl.framework.fsdp_layer_cast_bytes,
                   unfused_wgrad=wl.framework.megatron_wgrad_unfused and lay.backend == "megatron",
                   sp_input_gathers=wl.framework.fsdp_sp_input_gathers)
    single = fsdp_single_tensor_adam_time(problem, dev, lay)
    if single is not None:  # the framework's FSDP optimizer steps parameter by parameter (host-bound)
        t = replace(t, optimizer=max(t.optimizer, steps * single / dev.train_efficiency))
    if not wl.old_logprob_pass:  # the framework forces the ratio to 1 and skips the pass (workload.old_logprob_pass)
        return t, mem or policy_memory(problem, planned), 0.0
    lp, lp_seq, lp_attn = _logprob_pass(wl, lay)
    if lora or lp is not lay:  # the old log-prob pass is a plain forward, on its own micro-batches
        st = cached_stage_times(arch, dev, lp, lp_seq, False, cache, lp_attn)
    old = forward_time(arch, dev, lp, wl.samples, lp_seq, st=st, logit_bytes_fwd=logits, unfused_elementwise=eager,
                       fsdp_copy_bytes=wl.framework.fsdp_copy_bytes, fsdp_cast_bytes=wl.framework.fsdp_layer_cast_bytes,
                       host_syncs=_packed_host_syncs(wl, lp), sp_input_gathers=wl.framework.fsdp_sp_input_gathers)
    return t, mem or policy_memory(problem, planned), old


def train_core_floor(problem: Problem, pool: PoolHW, lay: TrainLayout, cache: dict | None = None
                     ) -> tuple[float, float]:
    """(floor, its bubble term): seconds that `train_core`'s update plus old log-prob pass (t.total + old)
    never undercut, from its stage times alone (memoized in `cache` as `train_core` memoizes them, so a
    layout scored after its floor costs no second `stage_times`): `train_time`'s micro-batch passes
    (m x (fwd + bwd): the compute and the exposed TP, EP and CP terms, less what the EP A2A overlap hides)
    and its bubble, and `forward_time`'s passes ((m + pp - 1) x fwd), with the rest of either left out:
    the log-prob and elementwise extras, the pipeline sends, the data-parallel collectives and the
    optimizer (each >= 0), whatever the model charges for them. The sums come in another order than
    `train_time`'s: shaded by 1e-9 (a property test checks it on random layouts). The bubble term
    (`train_time`'s bubble, shaded alike) is the part of the floor that interleaving shrinks: the floor
    less it bounds the same layout with more virtual stages (a property test)."""
    wl, arch = problem.workload, problem.policy
    lay = _train_pass_layout(wl, trainer_layout(problem, lay))
    dev = device(pool, wl.precision, problem.profile)
    lora = wl.lora_rank
    seq, attn = _pass_seq_len(wl, lay)
    st = cached_stage_times(arch, dev, lay, seq, lora > 0, cache, attn)
    floor, bubble = _update_floor(wl, dev, lay, st)
    if wl.old_logprob_pass:
        lp, lp_seq, lp_attn = _logprob_pass(wl, lay)
        if lora or lp is not lay:
            st = cached_stage_times(arch, dev, lp, lp_seq, False, cache, lp_attn)
        floor += _forward_floor(wl, dev, lp, st)
    return floor * (1 - 1e-9), bubble * (1 - 1e-9)


def _update_floor(wl, dev, lay: TrainLayout, st: dict) -> tuple[float, float]:
    """(floor, bubble) of `train_time`'s update over the workload's global batch from the stage times `st`
    alone: m x (fwd + bwd) less what the EP A2A overlap hides, and the bubble (see `train_core_floor`)."""
    m = max(1.0, wl.global_batch / (lay.dp * lay.micro_batch))
    per_mb = st["fwd"] + st["bwd"]
    hidden = m * ep_overlap_paired_share(lay, m) * st.get("ep_hidden", 0.0)
    scale = wl.optimizer_steps / dev.train_efficiency
    bubble = (lay.pp - 1) / lay.vp * per_mb * scale
    return (m * per_mb - hidden) * scale + bubble, bubble


def _forward_floor(wl, dev, lay: TrainLayout, st: dict) -> float:
    """`forward_time`'s passes over the rollout's samples from the stage times `st` alone ((m + pp - 1) x fwd:
    the sends, log-prob and elementwise extras, host syncs and ZeRO-3 terms, each >= 0, left out)."""
    return (max(1.0, wl.samples / (lay.dp * lay.micro_batch)) + lay.pp - 1) * st["fwd"] / dev.logprob_efficiency


def critic_pass_floor(problem: Problem, pool: PoolHW, critic: TrainLayout, cache: dict | None = None) -> float:
    """Seconds that `critic_pass`'s forward + update of the critic with the degrees `critic` never undercut,
    from the stage times `critic_group_pass` asks (memoized alike in `cache`, so a critic scored after its floor
    costs no second `stage_times`): the update's and the value forward's passes as `train_core_floor` takes
    the policy's, every other term (>= 0) left out, shaded by 1e-9 (a property test checks it)."""
    critic = trainer_layout(problem, critic)
    wl = problem.workload
    dev = device(pool, wl.precision, problem.profile)
    seq, attn = _unpadded_busiest(wl, critic, wl.seq_mean, seq_attention(wl))
    st = cached_stage_times(problem.value, dev, critic, seq, False, cache, attn)
    return (_forward_floor(wl, dev, critic, st) + _update_floor(wl, dev, critic, st)[0]) * (1 - 1e-9)


# bytes per fp32 parameter torch's single-tensor Adam moves over its 8 ops (runtime.yaml fsdp_optimizer_tensor_ops:
# mul_ 8, lerp_ 12, mul_ 8, addcmul_ 16, sqrt 8, division 8, add_ 8, addcdiv_ 16)
SINGLE_TENSOR_ADAM_BYTES = 84.0


def fsdp_single_tensor_adam_time(problem: Problem, dev, lay: TrainLayout) -> float | None:
    """Seconds of one optimizer step where the framework's FSDP trainer runs torch's single-tensor Adam over
    its DTensor parameters (workload.framework.fsdp_optimizer_tensor_ops: NeMo-RL's DTensor recipes before 0.7.0
    turn foreach and fused off): parameter tensor after parameter tensor (the model's, `checkpoint_tensors`), that
    many ops each, every one a DTensor dispatch on the host (constants.yaml dtensor_op_dispatch_us, on this
    system's host), their kernels over the rank's shard (SINGLE_TENSOR_ADAM_BYTES a parameter at HBM speed); the
    longer of the two. Before it, the framework's gradient-norm and clipping passes dispatch
    workload.framework.fsdp_grad_norm_tensor_ops DTensor ops per parameter tensor on the host with no GPU work of
    size to hide them (NeMo-RL before 0.5.0: p.grad.detach() in each pass), added in full. None where the fact
    does not apply (not ZeRO-3, not read, LoRA: the adapters only)."""
    fw = problem.workload.framework
    ops = fw.fsdp_optimizer_tensor_ops
    if not ops or lay.zero_stage < 3 or problem.workload.lora_rank:
        return None
    arch = problem.policy
    dense, expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp)
    local = dense / max(1, lay.dp * lay.cp) + expert / lay.expert_dp
    per_op = checkpoint_tensors(arch) / lay.pp * constants()["dtensor_op_dispatch_us"] * 1e-6 * dev.host_slowdown
    norm = per_op * (fw.fsdp_grad_norm_tensor_ops or 0)
    return norm + max(per_op * ops, dev.stream_time(SINGLE_TENSOR_ADAM_BYTES * local))


def _train_pass_layout(wl, lay: TrainLayout) -> TrainLayout:
    """The layout the training micro-batches run: with packed micro-batches, one per
    first-fit-decreasing bin, holding the workload's `packed_micro_batch` sequences on average
    (the plan's micro_batch divides the global batch, as a plan's must; the bins need not)."""
    return lay if wl.packed_micro_batch is None else layout_with(lay, micro_batch=wl.packed_micro_batch)


def _unpadded_busiest(wl, lay: TrainLayout, seq: float, attn: float) -> tuple[float, float]:
    """(`seq`, `attn`) stretched to the busiest rank's micro-batch where fixed-count micro-batches run on
    their own tokens (workload.unpadded) and ZeRO-3 / FSDP's per-layer gathers make the ranks wait for the
    slowest (train.unpadded_busiest_share): its sequences run longer, their attention with them."""
    ranks = lay.dp * lay.cp
    if not wl.unpadded or wl.packed_tokens is not None or lay.zero_stage < 3 or ranks <= 1:
        return seq, attn
    share = unpadded_busiest_share(int(lay.micro_batch), int(wl.samples // ranks), wl.prompt_len,
                                   wl.response_mean, wl.response_max, wl.clip_ratio, ranks)
    return seq * share, attn * share


def _pass_seq_len(wl, lay: TrainLayout) -> tuple[float, float]:
    """(tokens per sequence, attention-effective tokens per sequence) the policy's training micro-batches
    compute (padded packed micro-batches under pipeline parallelism, or on an FSDP trainer that pads them to
    the token budget, where the framework pads them; unpadded fixed micro-batches at the busiest rank's
    tokens, `_unpadded_busiest`; the attention figure: train.micro_batch_lengths)."""
    return _unpadded_busiest(wl, lay, *_packed_seq_len(wl, lay))


def _packed_seq_len(wl, lay: TrainLayout, train: bool = True) -> tuple[float, float]:
    """train.micro_batch_lengths of the workload's training micro-batches. `train`: the training pass, which
    an FSDP trainer may pad to the token budget (the log-prob passes keep their bins' own lengths)."""
    return micro_batch_lengths(wl.seq_mean, lay.pp, lay.dp, packed_tokens=wl.packed_tokens,
                               pads_packed=wl.framework.pipeline_pads_packed, global_batch=wl.global_batch,
                               prompt_len=wl.prompt_len, response_mean=wl.response_mean,
                               response_max=wl.response_max, clip=wl.clip_ratio, dynamic_round=wl.dynamic_round,
                               pads_to_budget=train and wl.framework.fsdp_pads_packed_to_budget
                               and lay.zero_stage >= 3)


def _logprob_pass(wl, lay: TrainLayout) -> tuple[TrainLayout, float, float]:
    """(layout, tokens per sequence, attention-effective tokens per sequence) of the log-prob passes (old
    log-probs, reference): the framework's log-prob micro-batches where the workload gives them (NeMo-RL
    packs the whole rollout batch into logprob_mb_tokens bins: lm_policy.py get_logprobs,
    shard_by_batch_size with batch_size=None), else the training ones."""
    if wl.logprob_micro_batch is None:
        lay = _train_pass_layout(wl, lay)
        return (lay, *_unpadded_busiest(wl, lay, *_packed_seq_len(wl, lay, train=False)))
    lengths = micro_batch_lengths(wl.seq_mean, lay.pp, lay.dp, packed_tokens=wl.logprob_packed_tokens,
                                  pads_packed=wl.framework.pipeline_pads_packed, global_batch=wl.samples,
                                  prompt_len=wl.prompt_len, response_mean=wl.response_mean,
                                  response_max=wl.response_max, clip=wl.clip_ratio, dynamic_round=wl.dynamic_round)
    lay = layout_with(lay, micro_batch=wl.logprob_micro_batch)
    return (lay, *_unpadded_busiest(wl, lay, *lengths))


def _fsdp_elementwise(wl, lay: TrainLayout) -> tuple[float, float, float] | None:
    """The framework's unfused elementwise bytes where its trainer shards parameters (ZeRO-3: the
    FSDP path, which trains the Hugging Face modeling code), else None."""
    return wl.framework.fsdp_elementwise_bytes if lay.zero_stage >= 3 else None


def _packed_host_syncs(wl, lay: TrainLayout) -> int:
    """The host's waits for the GPU per decoder layer of a forward where the framework's FSDP path (ZeRO-3: the
    Hugging Face modeling code) runs fixed micro-batches without their padding (workload.unpadded: one flattened
    row told apart by position ids), frameworks/runtime.yaml packed_attention_host_syncs_per_layer; else 0."""
    return wl.framework.packed_attention_syncs if wl.unpadded and lay.zero_stage >= 3 else 0


def policy_memory(problem: Problem, lay: TrainLayout, cache: dict | None = None) -> TrainMem:
    """Peak training memory of the policy; sized for micro-batches of max-length sequences, or
    for the token budget when micro-batches are packed to one. `cache` memoizes the states
    (the solver asks for every micro-batch and recompute of a layout)."""
    wl = problem.workload
    seq = wl.seq_max if wl.packed_tokens is None else max(1.0, wl.packed_tokens / lay.micro_batch)
    if wl.packed_tokens is None and wl.unpadded:
        seq = wl.seq_mean  # the micro-batch holds its sequences' own tokens (workload.unpadded)
    return train_memory(problem.policy, lay, seq, lora_rank=problem.workload.lora_rank, memo=cache,
                        fsdp=wl.framework.fsdp_trainer_bytes)


def trainer_layout(problem: Problem, lay: TrainLayout) -> TrainLayout:
    """`lay` with the training strategy its backend runs, where it names none (a solver layout): the one the plan's
    training framework names for the target (frameworks.rules.plan_strategy, e.g. verl runs a ZeRO-2 layout on its
    FSDP workers), so the model times its attention with that backend's kernel (TrainLayout.attention_kernel)."""
    return lay if lay.strategy else layout_with(lay, strategy=trainer_strategy(problem, lay))


def trainer_strategy(problem: Problem, lay: TrainLayout) -> str:
    """The training strategy `trainer_layout` gives `lay` (its own where it names one)."""
    if lay.strategy:
        return lay.strategy
    t = problem.spec.target
    return plan_strategy(t.framework, t.version, lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage, lay.recompute)


def _aux_layout(a: Architecture, lay: TrainLayout) -> TrainLayout:
    """Forward-only models reuse the trainer's degrees (experts split only where they divide) and its
    sequence parallelism: NeMo-RL runs the reference in the policy's own model (use_reference_model,
    frameworks/runtime.yaml reference_swap_copies), so a trainer without sequence parallelism (NeMo-RL
    v0.3.0 grpo_math_1B_megatron.yaml megatron_cfg.sequence_parallel: false) runs its reference pass
    without it too."""
    return TrainLayout(tp=lay.tp, pp=lay.pp, dp=lay.dp, cp=lay.cp,
                       ep=lay.ep if a.is_moe and a.experts % lay.ep == 0 else 1,
                       micro_batch=lay.micro_batch, zero_stage=0, strategy=lay.backend,
                       sequence_parallel=lay.sequence_parallel)


def critic_pass(problem: Problem, pool: PoolHW, critic: TrainLayout, cache: dict | None = None
                ) -> tuple[float, float, float]:
    """(forward + update s, states bytes per GPU, peak bytes per GPU) of the critic (PPO) trained
    on the training GPUs with the degrees `critic` (its own, or the policy's)."""
    cache = {} if cache is None else cache
    key = ("critic", critic)
    hit = cache.get(key)  # (one hash of the key: a layout's hashes all its fields)
    if hit is None:
        critic_group_pass(problem, pool, critic, cache)  # (which fills this key too: the memory asked once)
        hit = cache[key]
    return hit


def critic_group_pass(problem: Problem, pool: PoolHW, critic: TrainLayout, cache: dict | None = None
                      ) -> tuple[float, float, float]:
    """(value forward s, update s, peak bytes per GPU) of the critic with the degrees `critic`, the
    forward and the update apart: on GPUs of its own (its dp over those GPUs) each overlaps a different
    phase of the actor's (`critic_group_excess`); on the trainers `critic_pass` adds them."""
    cache = {} if cache is None else cache
    key = ("critic group", critic)
    hit = cache.get(key)  # (one hash of the key)
    if hit is None:
        given, critic = critic, trainer_layout(problem, critic)
        wl = problem.workload
        dev = device(pool, wl.precision, problem.profile)
        a = problem.value
        eager = _fsdp_elementwise(wl, critic)
        # the forward and the update share one stage_times (both ask for it without LoRA)
        seq, attn = _unpadded_busiest(wl, critic, wl.seq_mean, seq_attention(wl))
        st = cached_stage_times(a, dev, critic, seq, False, cache, attn)
        fwd = forward_time(a, dev, critic, wl.samples, seq, st=st, unfused_elementwise=eager,
                           host_syncs=_packed_host_syncs(wl, critic))
        upd = train_time(a, dev, critic, wl.global_batch, seq, optimizer_steps=wl.optimizer_steps, st=st,
                         memo=cache, fsdp_reduce_bytes=wl.framework.fsdp_grad_reduce_bytes,
                         unfused_elementwise=eager).total
        mem = critic_memory(problem, critic, cache)  # (its states do not read the strategy trainer_layout sets)
        hit = cache[key] = (fwd, upd, mem.total)
        cache["critic", given] = (fwd + upd, mem.states, mem.total)  # (`critic_pass`)
    return hit


def critic_group_excess(forwards: float, update: float, critic_fwd: float, critic_upd: float) -> float:
    """Seconds a critic on GPUs of its own adds to the training side when it runs concurrently with the
    actor (capabilities.yaml critic_group_concurrent): its value forward beside the actor's forwards
    (old log-probs, reference, reward on the trainers: `forwards`), its update beside the actor's
    (`update`); each pair joins before the next phase, so the side takes max(forwards, critic forward) +
    max(update, critic update), written as what it adds beyond the actor's own terms."""
    return max(0.0, critic_fwd - forwards) + max(0.0, critic_upd - update)


def critic_memory(problem: Problem, critic: TrainLayout, cache: dict | None = None) -> TrainMem:
    """Peak training memory of the critic with its own degrees (max-length sequences);
    `cache` memoizes its states as `policy_memory`'s does."""
    wl = problem.workload
    return train_memory(problem.value, critic, wl.seq_mean if wl.unpadded else wl.seq_max, memo=cache,
                        fsdp=wl.framework.fsdp_trainer_bytes)


def critic_fits(mem: TrainMem, resident: float, critic_states: float, critic_peak: float, cap: float) -> bool:
    """While the critic trains with its own degrees, the policy's states and the other models
    placed here stay resident beside the critic's peak."""
    return mem.states + resident - critic_states + critic_peak <= cap


def train_aux(problem: Problem, pool: PoolHW, lay: TrainLayout, *, reference: str, reward: str,
              reward_quant: str, cache: dict | None = None, critic: TrainLayout | None = None,
              critic_apart: bool = False) -> tuple[float, float, float, float]:
    """(reference s, reward s, value s, resident bytes per GPU) of the other models placed on
    the training GPUs. `reference`: training (resident) | cpu_offload (streamed over PCIe
    each step) | elsewhere. `reward`: training | elsewhere (rule reward: CPU). `critic`: the
    critic's own degrees (None: the policy's); `critic_apart`: the critic trains on GPUs of its own
    (value 0 here, `critic_group_pass` scores it). `cache` memoizes each model's pass by the
    degrees it depends on (the solver scores thousands)."""
    lay = trainer_layout(problem, lay)
    critic = None if critic is None else trainer_layout(problem, critic)
    wl = problem.workload
    dev = device(pool, problem.workload.precision, problem.profile)
    seq_mean = wl.seq_mean
    cache = {} if cache is None else cache
    # the reference and reward run the trainer's modeling code (the policy's own model in NeMo-RL)
    eager = _fsdp_elementwise(wl, lay)
    # a framework that swaps the reference's weights into the policy's own model (reference_swap_copies
    # > 1: NeMo-RL's use_reference_model) runs the reference pass on the policy's sharding: a ZeRO-3
    # policy gathers every layer in each reference micro-batch, and swaps only its local shard
    in_policy = reference == "cpu_offload" and wl.framework.reference_swap_copies > 1
    # a framework whose FSDP trainer keeps the reference as an FSDP module of its own with its parameters in
    # host memory (verl: workload.framework.reference_fsdp_cpu_offload, read for its FSDP workers, so ZeRO-3
    # layouts only) shards it as the policy is: its pass gathers every layer as a ZeRO-3 policy's does, and
    # what each micro-batch copies in is the rank's shard
    fsdp_offload = reference == "cpu_offload" and wl.framework.reference_fsdp_cpu_offload and lay.zero_stage >= 3
    # the passes read the policy's ZeRO stage only as whether it shards parameters (ZeRO-3: the FSDP path's
    # elementwise bytes and host syncs, the busiest rank's tokens) unless the reference runs on the policy's
    # own sharding (in_policy, fsdp_offload): policy layouts that differ in ZeRO stage 0-2 share them
    shards = lay.zero_stage if in_policy or fsdp_offload else lay.zero_stage >= 3
    dims = (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch, shards, lay.backend, lay.sp)

    def forward(role: str, a: Architecture, wbytes_per_param: float) -> tuple[float, float]:
        key = (role, dims, wbytes_per_param, eager, in_policy, fsdp_offload)
        hit = cache.get(key)
        if hit is None:
            # the pass's time reads no weight bytes (the reward's quantization, the reference's swap): memoized
            # apart, with the layout it ran on, which the resident weights are read from
            pkey = (role, dims, eager, in_policy, fsdp_offload)
            passed = cache.get(pkey)
            if passed is None:
                al = _aux_layout(a, lay)
                # the reference computes the policy's log-probs on the policy's log-prob micro-batches
                if role == "reference":
                    lp, seq, attn = _logprob_pass(wl, lay)
                    al, logits = layout_with(al, micro_batch=lp.micro_batch), wl.framework.logit_fp32_bytes_forward
                    if in_policy or fsdp_offload:
                        al = layout_with(al, zero_stage=lay.zero_stage)
                else:
                    seq, attn, logits = seq_mean, seq_attention(wl), None
                st = cached_stage_times(a, dev, al, seq, False, cache, attn)
                passed = cache[pkey] = (forward_time(a, dev, al, wl.samples, seq, st=st, logit_bytes_fwd=logits,
                                                     unfused_elementwise=eager,
                                                     fsdp_copy_bytes=wl.framework.fsdp_copy_bytes,
                                                     fsdp_cast_bytes=wl.framework.fsdp_layer_cast_bytes,
                                                     host_syncs=_packed_host_syncs(wl, lay),
                                                     sp_input_gathers=wl.framework.fsdp_sp_input_gathers), al)
            # (train_memory's weights, without the activations)
            hit = cache[key] = (passed[0], frozen_weights(a, passed[1], wbytes_per_param))
        return hit

    ref_t = rew_t = val_t = resident = 0.0
    if problem.reference is not None and reference in ("training", "cpu_offload"):
        # a ZeRO-3 policy swapped in place copies its own (fp32 master) shards: framework.fsdp_reference_swap_bytes
        swap_bytes = wl.framework.fsdp_reference_swap_bytes if in_policy and lay.zero_stage >= 3 else None
        ref_t, wbytes = forward("reference", problem.reference, swap_bytes or 2.0)
        if reference == "cpu_offload":
            # streamed in each step, not overlapped (conservative); a framework that swaps the
            # reference into the policy's own model also copies the policy's weights out and back
            # (workload.framework.reference_swap_copies); one whose FSDP offloads the reference's
            # parameters copies the shard in again for every forward micro-batch
            # (workload.framework.reference_fsdp_cpu_offload, verl); of a swap's copies, those into host
            # memory allocated afresh each step (workload.framework.reference_swap_fresh_copies: NeMo-RL's
            # policy weights copied out) run at the rate of such a copy (`fresh_host_copy_time`)
            copies = wl.framework.reference_swap_copies
            fresh = min(copies, wl.framework.reference_swap_fresh_copies) if in_policy else 0
            if fsdp_offload:
                copies *= reference_micro_batches(wl, lay)
            ref_t += (copies - fresh) * dev.pcie_time(wbytes) + fresh * fresh_host_copy_time(dev, wbytes)
        else:
            resident += wbytes
    if problem.reward is not None and reward == "training":
        rew_t, wbytes = forward("reward", problem.reward, QUANT_BYTES[reward_quant])
        resident += wbytes
    if problem.value is not None and not critic_apart:
        # the critic trains on the same GPUs with its own degrees, or with the policy's
        vl = critic if critic is not None else TrainLayout(**{
            **_aux_layout(problem.value, lay).__dict__, "zero_stage": lay.zero_stage, "recompute": lay.recompute})
        return with_critic((ref_t, rew_t, val_t, resident), critic_pass(problem, pool, vl, cache))
    return ref_t, rew_t, val_t, resident


def reference_micro_batches(wl, lay: TrainLayout) -> int:
    """Forward micro-batches of the reference pass on one data-parallel rank: its share of the rollout
    batch over the log-prob micro-batch (`_logprob_pass`; the training one where none is given),
    the last one partial (verl dp_actor.py compute_log_prob: batch.split(micro_batch_size))."""
    lp = _logprob_pass(wl, lay)[0]
    per_rank = wl.samples / max(1, lay.dp * lay.cp)
    return max(1, math.ceil(per_rank / max(float(lp.micro_batch), 1.0) - 1e-9))


def with_critic(aux: tuple[float, float, float, float], critic: tuple[float, float, float]
                ) -> tuple[float, float, float, float]:
    """`train_aux`'s (reference s, reward s, value s, resident bytes) with the critic (PPO) trained on
    the same GPUs, given its `critic_pass`: its pass is the value time, its states stay resident
    (`aux`: train_aux's answer with critic_apart, which the solver asks once per trainer layout and
    completes here for each critic it pairs)."""
    val_t, states, _ = critic
    return aux[0], aux[1], val_t, aux[3] + states


def train_side(problem: Problem, pool: PoolHW, lay: TrainLayout, *, reference: str = "training",
               reward: str = "cpu", reward_quant: str = "none",
               core: tuple[TrainTime, TrainMem, float] | None = None, critic: TrainLayout | None = None,
               critic_gpus: int = 0) -> TrainSide:
    """`critic_gpus` > 0: the critic trains with the degrees `critic` on that many GPUs of its own in the
    same pool, concurrently with the actor (`critic_group_excess`)."""
    t, mem, old = core or train_core(problem, pool, lay)
    cache: dict = {}
    apart = critic_gpus > 0 and problem.value is not None and critic is not None
    ref_t, rew_t, val_t, resident = train_aux(problem, pool, lay, reference=reference, reward=reward,
                                              reward_quant=reward_quant, cache=cache, critic=critic,
                                              critic_apart=apart)
    cap = capacity_bytes(pool, problem.workload.headroom)
    fits = mem.total + resident <= cap
    busy = 0.0
    if apart:
        c_fwd, c_upd, c_peak = critic_group_pass(problem, pool, critic, cache)
        val_t = critic_group_excess(old + ref_t + rew_t, t.total, c_fwd, c_upd)
        fits = fits and c_peak <= cap
        busy = c_fwd + c_upd
    elif critic is not None and problem.value is not None:
        _, c_states, c_peak = critic_pass(problem, pool, critic, cache)
        fits = fits and critic_fits(mem, resident, c_states, c_peak, cap)
    return TrainSide(layout=lay, gpus=lay.gpus, train=t, old_logprob=old, reference=ref_t, reward=rew_t,
                     orchestration=problem.workload.framework.orchestration_s,
                     refit_gather=refit_gather_time(problem, pool, lay),
                     value=val_t, mem=mem, aux_resident=resident, capacity=cap,
                     fits=fits, states=mem.states + resident, critic_gpus=critic_gpus if apart else 0,
                     critic_busy=busy)


def refit_gather_time(problem: Problem, pool: PoolHW, lay: TrainLayout) -> float:
    """Seconds the trainers spend building full parameters for a refit where the framework's
    trainer gathers them. FSDP (workload.framework.fsdp_refit_gather_bytes: NeMo-RL's DTensor worker
    turns every fp32 master shard into its full tensor): an all-gather over the data-parallel (and
    context) ranks of the tensor-parallel shard, then over the tensor-parallel ranks. Sharded-optimizer
    Megatron trainers (workload.framework.megatron_refit_gather_bytes: NeMo-RL's gather_params before 0.4
    and Megatron-Bridge's export from 0.4 give every trainer GPU every full tensor): the TP all-gather of
    this stage's tensors inside the TP group, then every other stage's full tensors received over the PP
    group, whose ranks sit tp x cp x dp apart (Megatron's default tp-cp-ep-dp-pp rank order) and so cross
    the nodes once the model spans more than one. That PP step is one broadcast per tensor from the stage
    that holds it (v0.3.0 refit_utils.py line 127 torch.distributed.broadcast; Megatron-Bridge
    broadcast_from_pp_rank), not an all-gather: each broadcast's pipelined ring carries the whole tensor over
    every link while its root receives nothing, so the stages' broadcasts in turn take the whole model's
    bytes / bus bandwidth (`Device.broadcast`), pp/(pp-1) times the all-gather of the same result. A MoE's routed experts are then all-gathered
    over the expert-parallel group (`_expert_refit_gather`): the PP step moved only this EP rank's
    experts. The rest of a refit (the engine's wake, the CUDA-IPC reshard, the engine's load) is
    `sync_time`'s."""
    fw, lora = problem.workload.framework, problem.workload.lora_rank
    if lora:
        return 0.0
    dev = device(pool, problem.workload.precision, problem.profile)
    if lay.zero_stage >= 3:
        b = fw.fsdp_refit_gather_bytes
        if b is None:
            return 0.0
        full = problem.policy.total_params * b
        return dev.all_gather(full / lay.tp, lay.dp * lay.cp, lay.gpus) + dev.all_gather(full, lay.tp, lay.tp)
    b = fw.megatron_refit_gather_bytes
    if b is None:
        return 0.0
    arch = problem.policy
    full = (arch.total_params - _ep_only_params(arch, lay)) * b
    return (dev.all_gather(full / lay.pp, lay.tp, lay.tp) + dev.broadcast(full, lay.pp, lay.gpus)
            + _expert_refit_gather(dev, arch, lay, b))


def _ep_only_params(arch: Architecture, lay: TrainLayout) -> float:
    """Parameters of the routed experts that a pipeline rank does not hold because expert parallelism
    left them on the other EP ranks (the refit's PP step moves each rank's own experts only)."""
    return arch.routed_expert_params_total * (1.0 - 1.0 / lay.ep) if arch.is_moe and lay.ep > 1 else 0.0


def _expert_refit_gather(dev: Device, arch: Architecture, lay: TrainLayout, bytes_per_param: float) -> float:
    """The refit's all-gather of every routed expert over the expert-parallel group (NeMo-RL v0.3.0
    refit_utils.py line 142; Megatron-Bridge gather_from_ep_ranks, runtime.yaml
    megatron_refit_gather_bytes_per_param): each GPU receives the other EP ranks' experts of every layer.
    The EP group's ranks are consecutive inside the expert grid: etp x ep GPUs apart from the folded
    layout, tp x cp x ep where the expert TP is the dense one (the span perf/train.py gives the MoE
    all-to-all)."""
    if not arch.is_moe or lay.ep <= 1:
        return 0.0
    span = lay.tp * lay.cp * lay.ep if lay.etp == lay.tp else lay.etp * lay.ep
    return dev.all_gather(arch.routed_expert_params_total * bytes_per_param / lay.etp, lay.ep, span)


# --- auxiliary pool -----------------------------------------------------------------------

@dataclass
class AuxSide:
    """Reference/reward forwards on GPUs of their own (another pool, say older nodes)."""

    pool: PoolHW
    gpus: int
    times: dict                # {"reference": s, "reward": s}
    weights: float             # bytes per GPU
    capacity: float
    tp: int
    fits: bool

    @property
    def time(self) -> float:
        return sum(self.times.values())


def aux_side(problem: Problem, pool: PoolHW, gpus: int, hosts: frozenset, reward_quant: str = "none",
             tp: int | None = None) -> AuxSide:
    """The hosted models run one after the other, data parallel over the GPUs, each with the
    smallest tensor-parallel degree (inside the NVLink domain) at which it fits, or with `tp`
    (a framework that runs every model with the actor's degrees)."""
    wl = problem.workload
    dev = device(pool, problem.workload.precision, problem.profile)
    seq_mean, seq_max = wl.seq_mean, wl.seq_max
    cap = capacity_bytes(pool, problem.workload.headroom)
    times: dict = {}
    weights, tp_used, fits = 0.0, 1, True
    for role in sorted(hosts):
        a = getattr(problem, role)
        wb = QUANT_BYTES[reward_quant] if role == "reward" else 2.0
        best = None
        for t_ in ((1, 2, 4, 8, 16, 32, 64, 72) if tp is None else (tp,)):
            if gpus % t_ or t_ > max(1, pool.scaleup_size) or a.heads % t_:
                continue
            lay = TrainLayout(tp=t_, dp=gpus // t_, zero_stage=0, micro_batch=1)
            mem = train_memory(a, lay, seq_max, trainable=False, weight_bytes=wb)
            if mem.total <= cap:
                best = (lay, mem)
                break
        if best is None:
            fits = False
            times[role] = float("inf")
            continue
        lay, mem = best
        times[role] = forward_time(a, dev, lay, wl.samples, seq_mean)
        weights = max(weights, mem.weights)
        tp_used = max(tp_used, lay.tp)
    return AuxSide(pool=pool, gpus=gpus, times=times, weights=weights, capacity=cap, tp=tp_used, fits=fits)


# --- weight sync and the step -------------------------------------------------------------

def _sync_bytes(problem: Problem) -> float:
    """Bytes of one weight update: the whole policy in the rollout dtype, or the LoRA adapters."""
    lora = problem.workload.lora_rank
    if lora:
        return lora_params(problem.policy, lora) * 2.0
    return problem.policy.total_params * gen_dtype_bytes(problem)


def _nic(pool: PoolHW) -> tuple[float, float]:
    """(achievable bytes/s per GPU over the NICs, latency s)."""
    return (pool.nic_gbytes_per_gpu * GB * pool.network.busbw_fraction.value, pool.network.latency_us * 1e-6)


def send_time(problem: Problem, pool_train: PoolHW, n_train: int) -> float:
    """Trainers push one copy of the weights, each GPU its shard, over their NICs."""
    bw, lat = _nic(pool_train)
    return _sync_bytes(problem) / (n_train * bw) + BROADCAST_HOPS * lat


def recv_time(problem: Problem, pool_gen: PoolHW, gen: GenLayout) -> float:
    """Every engine GPU must receive its own shard over its NIC (pipelined broadcast), and load the
    checkpoint's tensors (`engine_load_time`)."""
    bw, lat = _nic(pool_gen)
    dev = device(pool_gen, problem.workload.precision, problem.profile)
    load = engine_load_time(problem, dev)
    if problem.workload.framework.refit_full_broadcast:
        # one broadcast of the whole model to every engine GPU (workload.framework.refit_full_broadcast):
        # NCCL's pipelined ring enters each server through all its NICs, or stays on the scale-up links
        # when the pool is one NVLink domain
        inside, _ = dev.link(max(pool_gen.scaleup_size, pool_gen.gpus_per_node))
        if pool_gen.n_gpus > pool_gen.scaleup_size:
            inside = min(inside, pool_gen.gpus_per_node * bw)
        return _sync_bytes(problem) / inside + BROADCAST_HOPS * lat + load
    share = weight_bytes_per_gpu(problem.policy, gen, 1.0) / problem.policy.total_params
    return _sync_bytes(problem) * share / bw + BROADCAST_HOPS * lat + load


BROADCAST_HOPS = 20  # pipelined chunks in flight: latency paid per hop of the broadcast tree


def checkpoint_tensors(arch: Architecture) -> int:
    """Weight tensors of the model in its Hugging Face checkpoint layout, the names a refit hands the
    engine one by one (vLLM model.load_weights): the linear layers' matrices (`linear_weight_tensors`),
    and per layer two norms beside them, the attention's biases (q, k, v) or MLA's q_a and kv_a
    layernorms; the embedding, final norm and LM head (transformers modeling_llama.py,
    modeling_qwen3_moe.py, DeepSeek-V3 modeling_deepseek.py)."""
    if arch.is_mla:
        extra = (1 if arch.q_lora_rank else 0) + 1
    else:
        extra = 3 if arch.qkv_bias else 0
    return linear_weight_tensors(arch) + arch.layers * (2 + extra) + (2 if arch.tied_embeddings else 3)


def engine_load_time(problem: Problem, dev: Device) -> float:
    """Host time an engine GPU spends handing a refit's tensors to the model's weight loaders, one
    call per checkpoint tensor (constants.yaml refit_engine_load_us_per_tensor, on this system's host);
    LoRA adapters are loaded as one adapter, not counted here."""
    if problem.workload.lora_rank:
        return 0.0
    arch, wl = problem.policy, problem.workload
    calls = checkpoint_tensors(arch)
    quantize = 0.0
    q = wl.framework.fp8_refit_quantize_bytes
    if q is not None and wl.gen_bytes < 2.0:
        # an FP8 engine fed bf16 weights quantizes every full linear weight itself (framework
        # fp8_refit_quantize_bytes of HBM traffic a parameter) and loads its scale as a tensor of its own
        calls += linear_weight_tensors(arch)
        quantize = (arch.total_params - arch.embedding_params) * q / dev.hbm_bytes_per_s
    return calls * constants()["refit_engine_load_us_per_tensor"] * 1e-6 * dev.host_slowdown + quantize


def linear_weight_tensors(arch: Architecture) -> int:
    """The checkpoint's linear-layer weight matrices (`checkpoint_tensors` without norms, biases,
    the embedding and the LM head), the tensors an FP8 engine quantizes: per layer the attention's
    projections (q, k, v, o; MLA: q_a and q_b or q, kv_a_proj_with_mqa, kv_b, o), a dense MLP's
    matrices, or the router, each routed expert's matrices and the shared expert's."""
    mats = 3 if arch.activation == "swiglu" else 2
    attn = ((2 if arch.q_lora_rank else 1) + 3) if arch.is_mla else 4
    dense = (arch.layers - arch.moe_layers) * mats
    moe = arch.moe_layers * (1 + arch.experts * mats + (mats if arch.shared_experts else 0))
    return arch.layers * attn + dense + moe


def sync_time(problem: Problem, pool_train: PoolHW, pool_gen: PoolHW, gen: GenLayout, n_train: int,
              colocated: bool) -> tuple[float, float]:
    """(total, exposed-to-generation) seconds to move the new policy weights to every
    engine. Disaggregated: a pipelined broadcast bounded by what each engine GPU must
    receive and by what the trainers can send. Colocated, what the refit does on each engine GPU
    (NeMo-RL v0.3.0 nemo_rl/algorithms/grpo.py refit_policy_generation lines 411-455), one term each:
    `colocated_wake_time` (the sleeping engine's weights copied back from host memory), the CUDA-IPC
    reshard of the new weights over NVLink and their copy into the engine's tensors (HBM), and
    `engine_load_time` (one weight-loader call per checkpoint tensor). The trainers' gathers are
    `refit_gather_time`, charged on the training side; the trainers' own offload inside the refit
    timer is moved here by `combine` (framework refit_offloads_trainer)."""
    if colocated:
        dev = device(pool_gen, problem.workload.precision, problem.profile)
        share = weight_bytes_per_gpu(problem.policy, gen, 1.0) / problem.policy.total_params
        recv = _sync_bytes(problem) * share
        bw, lat = dev.link(min(pool_gen.scaleup_size, max(gen.tp * gen.pp, 2)))
        t = colocated_wake_time(problem, dev, recv) + recv / bw + lat + dev.stream_time(2 * recv)
        t += engine_load_time(problem, dev)
        return t, t
    recv = recv_time(problem, pool_gen, gen)
    return max(recv, send_time(problem, pool_train, n_train)), recv


def colocated_wake_time(problem: Problem, dev: Device, recv: float) -> float:
    """Seconds to wake a colocated engine's weights before the refit writes into them: level-1 sleep
    (`engine_release_time`) backed the engine's weights up in pinned host memory, and the wake copies
    them back (vLLM CuMemAllocator.wake_up) at the rate measured for it (constants.yaml
    engine_wake_gbps_per_gpu; a profile's colocated_refit_gbps_per_gpu) and no faster than PCIe.
    A LoRA refit updates adapters: the base weights are woken all the same (the bytes are the
    engine's own weights, `recv` scaled back from the adapters is not what moves), so the engine's
    full weight share is charged."""
    if problem.workload.lora_rank:
        recv = problem.policy.total_params * gen_dtype_bytes(problem) * recv / max(_sync_bytes(problem), 1.0)
    return max(recv / dev.engine_wake_bytes_per_s, dev.pcie_time(recv))


def trainer_offload_time(problem: Problem, dev: Device, mem, resident: float, zero_stage: int) -> tuple[float, float]:
    """(seconds inside the refit, seconds in the switch) for colocated trainers to move their states
    to host memory for the rollout and back. Where the framework's refit holds the way out
    (runtime.yaml refit_offloads_trainer_states, NeMo-RL): a Megatron trainer (zero_stage < 3) frees
    its gradient buffer and copies its parameter buffer into the pinned host copy kept from the
    previous step (Megatron-Core ParamAndGradBuffer.offload_to_cpu: PCIe), and every optimizer state
    tensor with `.to('cpu')` into freshly allocated host memory; an FSDP trainer copies its model
    and optimizer state that way (`.to('cpu')`). A copy into fresh host memory runs at the rate
    measured for one (constants.yaml engine_sleep_offload_gbps_per_gpu). Elsewhere, and for the
    way back: PCIe both ways over all the states (weights, gradients, optimizer, resident models).
    The way out is never charged below PCIe over all the states, so the round trip is never below
    2 x PCIe (the solver's pruning bound)."""
    states = mem.states + resident
    pcie = dev.pcie_time(states)
    if not problem.workload.framework.refit_offloads_trainer:
        return 0.0, 2 * pcie
    if zero_stage >= 3:
        # the FSDP worker's model.to('cpu') carries the gradients too (nn.Module._apply moves each parameter's
        # .grad; NeMo-RL v0.3.0 dtensor_policy_worker.py offload_after_refit -> move_to_cpu, lines 1287-1335, and
        # the gradients of the last update are still set: optimizer.zero_grad() runs at the start of train, line
        # 561), where the framework's FSDP trainer bytes were read (runtime.yaml fsdp_trainer_bytes_per_param)
        grads = mem.grads if problem.workload.framework.fsdp_trainer_bytes is not None else 0.0
        out = fresh_host_time(mem.weights + grads + mem.optimizer) + dev.pcie_time(resident)
    else:
        out = dev.pcie_time(mem.weights + resident) + fresh_host_time(mem.optimizer)
    return max(out, pcie), pcie


def fresh_host_time(nbytes: float) -> float:
    """Seconds to copy `nbytes` per GPU from the GPU into host memory allocated for the copy (pinned pages
    allocated and registered as they are filled): the rate measured for one (constants.yaml
    engine_sleep_offload_gbps_per_gpu, the engines' level-1 sleep that does the same)."""
    return nbytes / (constants()["engine_sleep_offload_gbps_per_gpu"] * GB)


def fresh_host_copy_time(dev: Device, nbytes: float) -> float:
    """`fresh_host_time`, never below PCIe."""
    return max(fresh_host_time(nbytes), dev.pcie_time(nbytes))


def optimizer_prep_time(problem: Problem, dev: Device, mem) -> float:
    """Seconds per step a trainer spends sending its optimizer states to host memory before the log-prob
    passes and fetching them back before the update, where the framework does so every step (runtime.yaml
    logprob_prep_offloads_optimizer, NeMo-RL before 0.5.0: `.to('cpu')` into freshly allocated host memory at
    the rate measured for one, constants.yaml engine_sleep_offload_gbps_per_gpu, and back over PCIe, as
    `trainer_offload_time` charges the optimizer). 0 where the framework keeps them on the GPUs."""
    if not problem.workload.framework.logprob_prep_offloads_optimizer:
        return 0.0
    return fresh_host_time(mem.optimizer) + dev.pcie_time(mem.optimizer)


def trainer_switch_time(problem: Problem, dev: Device, mem, resident: float, zero_stage: int,
                        offload_states: bool) -> float:
    """Seconds per step the trainers spend moving their states between the GPUs and host memory outside the
    phases: the colocated offload for the rollout and back (`trainer_offload_time`) where the rollout takes
    their memory, else the framework's optimizer round trip around the log-prob passes (`optimizer_prep_time`),
    which the colocated offload makes a no-op (the optimizer is already on the host)."""
    if offload_states:
        return sum(trainer_offload_time(problem, dev, mem, resident, zero_stage))
    return optimizer_prep_time(problem, dev, mem)


def engine_release_time(gen: GenSide) -> float:
    """Seconds for colocated engines to give their GPUs to training after the rollout: the
    frameworks sleep the engine at level 1, copying its weights to host memory at the measured
    rate (constants.yaml engine_sleep_offload_gbps_per_gpu); the KV cache is dropped."""
    return fresh_host_time(gen.weights)


def compose_step(mode: str, gen, train, recv, send, hold=0, maximum=max):
    """The step of a pipeline mode from its terms (SPEC section 6): the one composition the
    performance model (floats), the CP-SAT program (linear expressions, `maximum` building a
    max-equality) and the exhaustive oracle (integer milliseconds) share.

    gen: the generation side (colocated: with the engine's sleep and the reshard);
    train: the training side (forwards on an auxiliary group, the colocated offload switch; its
    refit gather, `TrainSide.refit_gather`);
    recv / send: the disaggregated weight sync, what each engine GPU receives and what the
    trainers send (the broadcast takes the longer; engines pause only to receive);
    hold: the part of the trainers' refit gather that async engines wait for as well (`refit_hold`);
    sync and colocated steps run the gather in series with everything, inside `train`."""
    if mode == "colocated":
        return gen + train
    if mode == "sync":
        return gen + maximum(recv, send) + train
    # async: generation of step k+1 overlaps training of step k
    return maximum(gen + hold + recv, train + maximum(recv, send) - recv)


def refit_hold(problem: Problem, refit_gather: float) -> float:
    """Seconds of the trainers' refit gather (`refit_gather_time`) that an async engine waits for:
    all of it where the framework streams the gathers into its broadcast (NeMo-RL's collective
    refit, workload.framework.refit_full_broadcast: the engines sit in the update while the trainers
    gather), else none (the engines pause only to receive). `compose_step`'s `hold`."""
    return refit_gather if problem.workload.framework.refit_full_broadcast else 0.0


@dataclass
class StepEstimate:
    mode: str
    gen: GenSide
    train: TrainSide
    sync: float
    sync_exposed: float
    switch: float
    step: float
    tokens_per_step: float
    n_gpus_used: int
    n_gpus_total: int
    pool_gen: PoolHW | None = None
    pool_train: PoolHW | None = None
    aux: AuxSide | None = None
    notes: list[str] = field(default_factory=list)
    overhead: float = 0.0      # framework time per step outside the phases (profile step_overhead_s)
    release: float = 0.0       # colocated: the engine's sleep (part of switch)

    @property
    def usd_per_hour(self) -> float:
        """Price of the GPUs the plan uses (a colocated set counts once)."""
        usd = self.gen.gpus * self.pool_gen.price_per_gpu_hour_usd
        if self.mode != "colocated":
            usd += (self.train.gpus + self.train.critic_gpus) * self.pool_train.price_per_gpu_hour_usd
        if self.aux is not None:
            usd += self.aux.gpus * self.aux.pool.price_per_gpu_hour_usd
        return usd

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step if self.step > 0 else 0.0


def combine(problem: Problem, mode: str, gen: GenSide, train: TrainSide, *, offload_states: bool = False,
            pool_train: PoolHW | None = None, pool_gen: PoolHW | None = None, aux: AuxSide | None = None
            ) -> StepEstimate:
    """The step of a mode. Forwards on an auxiliary pool run between generation and training
    (they need the samples; training needs their log-probs and rewards)."""
    pool_train = pool_train or problem.pool
    pool_gen = pool_gen or problem.pool
    wl = problem.workload
    colocated = mode == "colocated"
    sync, exposed = sync_time(problem, pool_train, pool_gen, gen.layout, train.gpus, colocated)
    switch = release = 0.0
    t_aux = aux.time if aux is not None else 0.0
    dev_t = device(pool_train, problem.workload.precision, problem.profile)
    if colocated:
        release = engine_release_time(gen)
        offload = 0.0
        if offload_states:  # out to host before rollout, back after
            # the way out that the framework's refit holds is shown in weight_sync, the rest in the switch
            out, offload = trainer_offload_time(problem, dev_t, train.mem, train.states - train.mem.states,
                                                train.layout.zero_stage)
            sync, exposed = sync + out, exposed + out
        else:  # the states stay: the framework's own optimizer round trip, if any (`trainer_switch_time`)
            offload = optimizer_prep_time(problem, dev_t, train.mem)
        switch = release + offload
        step = compose_step(mode, gen.time + release + sync, t_aux + train.time + offload, 0.0, 0.0)
        used = max(gen.gpus, train.gpus)
    else:
        # an async engine pauses for the whole refit, the trainers' gathers too where the framework streams
        # them into its broadcast (`refit_hold`; sync and colocated steps run them in series anyway)
        switch = optimizer_prep_time(problem, dev_t, train.mem)
        step = compose_step(mode, gen.time, t_aux + train.time + switch, exposed,
                            send_time(problem, pool_train, train.gpus), hold=refit_hold(problem, train.refit_gather))
        used = gen.gpus + train.gpus + train.critic_gpus
    used += aux.gpus if aux is not None else 0
    # framework time outside every modelled phase (0 unless a profile fitted on a log sets it)
    overhead = device(pool_gen, wl.precision, problem.profile).step_overhead_s
    step += overhead
    total = sum(p.n_gpus for p in problem.pools)
    return StepEstimate(mode=mode, gen=gen, train=train, sync=sync, sync_exposed=exposed, switch=switch,
                        step=step, tokens_per_step=wl.tokens_per_step, n_gpus_used=used, n_gpus_total=total,
                        pool_gen=pool_gen, pool_train=pool_train, aux=aux, overhead=overhead, release=release)


def step_flops(problem: Problem) -> tuple[float, float]:
    """(training-side FLOPs, generation FLOPs) of one step by the model-FLOPs convention."""
    wl = problem.workload
    arch = problem.policy
    seq = wl.seq_mean
    tokens = wl.samples * seq
    train = model_flops(arch, tokens, seq) * wl.ppo_epochs
    fwd = lambda a: model_flops(a, tokens, seq) / 3  # noqa: E731
    train += fwd(arch)  # old log-probs
    for a in (problem.reference, problem.reward):
        if a is not None:
            train += fwd(a)
    if problem.value is not None:
        train += fwd(problem.value) + model_flops(problem.value, tokens, seq) * wl.ppo_epochs
    gen = wl.samples * wl.response_mean * arch.matmul_flops_per_token + \
        wl.prompts * wl.prompt_len * arch.matmul_flops_per_token
    return train, gen
