"""What a layout is and what makes it legal: the one rule table.

A role's layout is a tuple of degrees on a number of GPUs of one pool. For each role this
module gives the *universe* (every tuple the search considers: all degrees that the
parallel groups can be built from on those GPUs) and the *violations* of a tuple (each rule
it breaks, with the constraint group the diagnosis reports and a message naming the field
and the fix). Candidate enumeration, `estimate` (a user's layout), the plan validator, the
infeasibility diagnosis and the exhaustive oracle all ask these functions; none keeps a copy
of a rule.

Groups: `structure` (a layout no framework can build: divisibility, world sizes, domains),
`rl.batch` (the batch per optimizer step does not split over the data-parallel ranks),
`target` (what the target framework cannot run: rlsolve/frameworks/capabilities.yaml),
`constraints.training` / `constraints.generation` / `constraints.modes` (the user's),
`cluster.size`, and the memory groups that the performance model decides
(`memory.training`, `memory.generation`, `memory.colocated`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Iterable, Iterator, get_args

from rlsolve.errors import SpecError
from rlsolve.frameworks import (FrameworkCaps, capabilities, generation_ok, hosting_ok, mode_ok, placement_ok,
                                training_ok)
from rlsolve.frameworks.rules import pools_ok, strategies
from rlsolve.frameworks.runtime import Strategy
from rlsolve.perf.generate import GenLayout
from rlsolve.perf.train import TrainLayout, layout_with
from rlsolve.resolve import PoolHW, Problem

MODES = ("colocated", "sync", "async")
RECOMPUTE = ("none", "selective", "full")
CP_DEGREES = (1, 2, 4, 8)          # context parallel degrees searched unless the constraints name others
GEN_KEYS = ("tp", "pp", "dp", "ep")


@dataclass(frozen=True)
class Violation:
    group: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@lru_cache(maxsize=8192)
def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def target_caps(problem: Problem) -> FrameworkCaps | None:
    """The target framework's capabilities (None: target any, no restriction)."""
    t = problem.spec.target
    return capabilities(t.framework, t.version)


def one_pool(problem: Problem) -> bool:
    """Every role of the plan on one pool of a cluster of several: the target runs no roles on pools
    of different GPU types (capabilities.yaml heterogeneous_pools: NeMo-RL places its GPU bundles on
    any node of its Ray cluster), so the plan runs on one pool, whose nodes form the Ray cluster, and
    leaves the others idle."""
    return len(problem.pools) > 1 and not pools_ok(target_caps(problem), len(problem.pools))


def aux_group_pools(problem: Problem) -> list[int]:
    """The pools an auxiliary group (reference/reward on GPUs of their own) may be planned on:
    any pool when there are several, or when a named target framework runs such groups beside
    its trainers (OpenRLHF's --ref/--reward groups, verl's reward resource pool); none for
    target `any` on one pool, where the engines, the trainers or the CPU host those models (the
    one-pool groups multiply the engines' GPU counts: 65,536 GPUs solved in 60 s instead of 1 s)."""
    if len(problem.pools) > 1 or target_caps(problem) is not None:
        return list(range(len(problem.pools)))
    return []


def aux_shares_actor_degrees(problem: Problem) -> bool:
    """The target runs a reference/reward group of its own with the actor's tp and cp (OpenRLHF: one set
    of DeepSpeed flags for every model; capabilities.yaml shapes.auxiliary_own_layout), and the job has
    such a model."""
    caps = target_caps(problem)
    return caps is not None and not caps.shapes.value.auxiliary_own_layout and bool(aux_models(problem))


def aux_group_violations(problem: Problem, gpus: int, train: TrainLayout) -> list[Violation]:
    """An auxiliary group beside this trainer: where the target runs it with the actor's degrees, its
    GPUs hold whole replicas of tp x cp GPUs, and the actor's batch flags make a whole number of
    micro-batches on each of its replicas (OpenRLHF builds every model's DeepSpeed config from the actor's
    --train.batch_size and --train.micro_batch_size, and DeepSpeedConfig asserts the batch is micro-batch x
    accumulation x the group's data-parallel world)."""
    if not aux_shares_actor_degrees(problem):
        return []
    caps = target_caps(problem)
    replica = train.tp * train.cp
    if gpus % replica:
        return [Violation("target", "resource_allocation.auxiliary.gpus",
                          f"{gpus} GPUs do not hold whole replicas of the actor's tp x cp = {replica} GPUs "
                          f"(source: {caps.shapes.source})")]
    batch, per_step = problem.workload.global_batch, train.micro_batch * (gpus // replica)
    if batch % per_step:
        return [Violation("target", "resource_allocation.auxiliary.gpus",
                          f"{gpus} GPUs are {gpus // replica} replicas of the actor's tp x cp = {replica}: the actor's "
                          f"batch of {batch} samples per optimizer step is no whole number of micro-batches of "
                          f"{train.micro_batch} on each (source: {caps.shapes.source})")]
    return []


def _target(verdict, field: str) -> list[Violation]:
    return [] if verdict else [Violation("target", field, verdict.reason)]


# --- user constraints (one allowed value or a list) ---------------------------------------

def allowed(cons: dict[str, Any], key: str, value: Any) -> bool:
    if key not in cons:
        return True
    want = cons[key]
    return value in want if isinstance(want, (list, tuple, set)) else value == want


def asked(cons: dict[str, Any], key: str) -> list:
    """The values a constraint names (empty when it names none)."""
    want = cons.get(key, [])
    return list(want) if isinstance(want, (list, tuple, set)) else [want]


def _user(role: str, cons: dict[str, Any], values: dict[str, Any], n: int | None) -> list[Violation]:
    """The user's allowed values; `n` None: the GPU count is checked elsewhere."""
    if not cons:
        return []  # (nothing named: the search asks this ~100k times per large solve)
    group = f"constraints.{role}"
    out = [Violation(group, f"constraints.{role}.{k}", f"{k}={v} is not allowed (allowed: {cons[k]})")
           for k, v in values.items() if not allowed(cons, k, v)]
    if n is None:
        return out
    if "max_gpus" in cons and n > cons["max_gpus"]:
        out.append(Violation(group, f"constraints.{role}.max_gpus", f"{n} GPUs exceed max_gpus {cons['max_gpus']}"))
    if not allowed(cons, "gpus", n):
        out.append(Violation(group, f"constraints.{role}.gpus", f"{n} GPUs is not allowed (allowed: {cons['gpus']})"))
    return out


# --- GPU counts ---------------------------------------------------------------------------

def role_counts(pool: PoolHW) -> list[int]:
    """Legal GPU counts of one role in a pool: whole nodes, or a divisor of a node's GPUs
    (a role smaller than a node stays inside it)."""
    g = pool.gpus_per_node
    return sorted(set(d for d in divisors(g) if d < g) | {k * g for k in range(1, pool.nodes + 1)})


def count_ok(pool: PoolHW, n: int) -> bool:
    g = pool.gpus_per_node
    return 0 < n <= pool.n_gpus and (n % g == 0 if n >= g else g % n == 0)


def count_user_violations(problem: Problem, role: str, n: int) -> list[Violation]:
    """The user's constraints on a role's GPU count (gpus, max_gpus)."""
    return _user(role, getattr(problem.spec.constraints, role), {}, n)


def count_violations(pool: PoolHW, n: int, role: str) -> list[Violation]:
    if n > pool.n_gpus:
        return [Violation("cluster.size", f"resource_allocation.{role}.gpus",
                          f"{n} GPUs requested, pool {pool.name!r} has {pool.n_gpus}")]
    if not count_ok(pool, n):
        return [Violation("structure", f"resource_allocation.{role}.gpus",
                          f"{n} GPUs is neither whole {pool.gpus_per_node}-GPU nodes nor a divisor of one node; "
                          f"use one of {role_counts(pool)[:8]}")]
    return []


# --- tensor parallelism (both roles) ------------------------------------------------------

def _tp_violations(problem: Problem, pool: PoolHW, tp: int, role: str, cons: dict[str, Any], user: bool
                   ) -> list[Violation]:
    """`user=False` (a layout someone wrote): its TP degree is named, so it may span nodes."""
    a = problem.policy
    f = f"parallelism.{role}.tp"
    out = []
    if a.heads % tp:
        out.append(Violation("structure", f, f"tp={tp} does not divide the {a.heads} attention heads of {a.name}; "
                             f"use one of {[d for d in divisors(a.heads) if d <= 64]}"))
    elif role == "training" and not a.is_mla and a.n_kv_heads % tp and tp % a.n_kv_heads:
        out.append(Violation("structure", f, f"tp={tp}: Megatron needs the {a.n_kv_heads} query groups divisible by tp "
                             f"(or tp a multiple of them)"))
    domain = max(pool.scaleup_size, 1)
    if user and domain % tp and tp not in asked(cons, "tp"):
        out.append(Violation("structure", f, f"tp={tp} groups would cross the {domain}-GPU NVLink domain (tp must "
                             f"divide it); name it in constraints.{role}.tp to allow it"))
    return out


def _tp_universe(problem: Problem, pool: PoolHW, n: int, cons: dict[str, Any]) -> list[int]:
    extra = {t for t in asked(cons, "tp") if n % t == 0}
    return sorted(set(divisors(math.gcd(n, max(pool.scaleup_size, 1)))) | extra)


# --- generation ---------------------------------------------------------------------------

def gen_ep_choices(problem: Problem, tp: int, dp: int, *, searched: bool = True) -> list[int]:
    """vLLM's expert parallelism (enable_expert_parallel): the experts spread whole over a
    replica's tp ranks instead of TP-sharded. Over every rank of the engines (tp x replicas,
    the data-parallel attention layout verl can run) a layout may name it, but it is not
    searched: the model has no term for the all-to-all between replicas it needs."""
    a = problem.policy
    if not a.is_moe:
        return [1]
    return sorted({1} | {e for e in (tp,) + (() if searched else (tp * dp,)) if e > 1 and a.experts % e == 0})


def gen_universe(problem: Problem, pool: PoolHW, n: int) -> Iterator[GenLayout]:
    cons = problem.spec.constraints.generation
    for tp in _tp_universe(problem, pool, n, cons):
        for pp in divisors(n // tp):
            if pp > problem.policy.layers:
                break
            for ep in gen_ep_choices(problem, tp, n // (tp * pp)):
                yield GenLayout(tp=tp, pp=pp, dp=n // (tp * pp), ep=ep)


def gen_violations(problem: Problem, pool: PoolHW, n: int, lay: GenLayout, *, user: bool = True) -> list[Violation]:
    """Rules of an engine layout on n GPUs of `pool` (memory is the performance model's)."""
    a = problem.policy
    cons = problem.spec.constraints.generation
    # the degrees first: a count that no legal degrees fill follows from them
    out = _tp_violations(problem, pool, lay.tp, "generation", cons, user)
    if lay.tp * lay.pp * lay.dp != n:
        out.append(Violation("structure", "parallelism.generation", f"tp*pp*dp = {lay.tp * lay.pp * lay.dp} but "
                             f"resource_allocation.generation.gpus = {n}; make them equal"))
    out += count_violations(pool, n, "generation")
    if lay.pp > a.layers:
        out.append(Violation("structure", "parallelism.generation.pp", f"pp={lay.pp} exceeds the {a.layers} layers"))
    if lay.ep not in gen_ep_choices(problem, lay.tp, lay.dp, searched=user):
        out.append(Violation("structure", "parallelism.generation.ep",
                             f"ep={lay.ep}: an engine's expert parallelism spans its tp ranks or all tp x dp ranks "
                             f"({sorted({lay.tp, lay.tp * lay.dp})}) and needs an MoE policy whose experts it divides"))
    if user:
        out += _user("generation", cons, {k: getattr(lay, k) for k in GEN_KEYS}, n)
        out += _target(generation_ok(target_caps(problem), "vllm", lay.tp, lay.pp, lay.dp, lay.ep),
                       "parallelism.generation")
    return out


def engine_cap_violations(problem: Problem, lay: GenLayout, max_num_seqs: int | None) -> list[Violation]:
    """An engine scored with a cap on concurrent sequences needs a target that can set it."""
    if not max_num_seqs:
        return []
    return _target(generation_ok(target_caps(problem), "vllm", lay.tp, lay.pp, lay.dp, lay.ep,
                                 max_num_seqs=max_num_seqs), "optimization.max_num_seqs")


def engine_can_cap(problem: Problem, lay: GenLayout) -> bool:
    """Whether the target can set this engine's max_num_seqs at all: where it cannot, `perf.step.gen_side`
    searches none (its `cap_search`) and the engine runs at the cap its framework builds it with."""
    return not engine_cap_violations(problem, lay, 1)


# --- training -----------------------------------------------------------------------------

def expert_degrees(problem: Problem, tp: int, dp: int, cp: int) -> list[int]:
    """EP degrees dividing the experts and the ranks: inside dp*cp (experts TP-sharded like
    the dense layers), or folded over the TP ranks too (experts whole, expert TP = 1)."""
    a = problem.policy
    if not a.is_moe:
        return [1]
    return [e for e in divisors(tp * dp * cp) if a.experts % e == 0]


def zero_stages(pp: int) -> tuple[int, ...]:
    """ZeRO stages a framework runs with these degrees: Megatron's distributed optimizer
    (stage 1) or none with pipelines; FSDP/DeepSpeed stages 0-3 without."""
    return (0, 1, 2, 3) if pp == 1 else (0, 1)


def vp_choices(problem: Problem, pp: int) -> list[int]:
    """Interleaved virtual stages: any count that splits each stage's layers evenly."""
    if pp == 1:
        return [1]
    L = problem.policy.layers
    return [v for v in divisors(L) if L % (pp * v) == 0] if L % pp == 0 else [1]


def cp_choices(problem: Problem) -> list[int]:
    cons = problem.spec.constraints.training
    return sorted(set(CP_DEGREES) | set(asked(cons, "cp")))


def train_shapes(problem: Problem, pool: PoolHW) -> Iterator[tuple[int, int, int, int, int]]:
    """(GPUs, tp, pp, cp, dp) for every training count of the pool: tp inside the domain
    (or named), any pipeline degree up to the layers (uneven first and last stages allowed: pipeline_split), the searched
    CP degrees, and a data-parallel degree that divides the global batch. Built from the
    degrees rather than from the counts, so a pool of thousands of nodes costs no more than
    its divisors."""
    cons = problem.spec.constraints.training
    gb = problem.workload.global_batch
    L = problem.policy.layers
    tps = sorted(set(divisors(max(pool.scaleup_size, 1))) | set(asked(cons, "tp")))
    for tp in tps:
        for pp in range(1, L + 1):
            if pipeline_split(L, pp) is None:
                continue
            for cp in cp_choices(problem):
                m = tp * pp * cp
                if m > pool.n_gpus:
                    break
                for dp in divisors(gb):
                    n = m * dp
                    if n > pool.n_gpus:
                        break
                    if count_ok(pool, n):
                        yield n, tp, pp, cp, dp


def pipeline_split(layers: int, pp: int) -> tuple[int, int, int] | None:
    """(first, middle, last) transformer layers per stage of a pp-stage pipeline whose busiest stage holds
    ceil(layers / pp), as the performance model times it (perf/train.py), in the one shape Megatron-Core
    expresses: the first and the last stage set apart (--decoder-first/last-pipeline-num-layers,
    TransformerConfig num_layers_in_first/last_pipeline_stage, each > 0) and the middle stages even
    (megatron/core/transformer/transformer_config.py, 'Uneven PP': the middle layers divisible by the middle
    stages). The last stage takes the larger end share (the first holds the most in-flight activations).
    None where no such split keeps every stage within ceil(layers / pp): that pipeline degree does not run as
    timed."""
    most = -(-layers // pp)
    if pp == 1 or layers % pp == 0:
        return most, most, most
    for middle in range(most, 0, -1):  # the fullest middle stages whose remainder the two ends can hold
        ends = layers - (pp - 2) * middle
        if 2 <= ends <= 2 * most:
            return ends // 2, middle, ends - ends // 2
    return None


def pipeline_ends(layers: int, pp: int) -> tuple[int, int] | None:
    """The (first, last) stage layer counts an export sets apart where the layers do not split evenly over pp
    (`pipeline_split`'s ends; Megatron-Core's num_layers_in_first/last_pipeline_stage); None where they do."""
    if layers % pp == 0:
        return None
    first, _, last = pipeline_split(layers, pp)
    return first, last


def train_bases(problem: Problem, tp: int, pp: int, cp: int, dp: int) -> Iterator[tuple[int, int, int]]:
    """(ep, vp, ZeRO stage) of every training layout with these degrees."""
    for ep in expert_degrees(problem, tp, dp, cp):
        for vp in vp_choices(problem, pp):
            for zero in zero_stages(pp):
                yield ep, vp, zero


def micro_batches(problem: Problem, dp: int) -> tuple[int, ...]:
    """Micro-batch sizes that split each rank's share of the global batch, smallest first."""
    gb = problem.workload.global_batch
    return divisors(gb // dp) if gb % dp == 0 else ()


def train_universe(problem: Problem, pool: PoolHW, n: int, tp: int, pp: int, cp: int, dp: int
                   ) -> Iterator[TrainLayout]:
    """Every training layout with these degrees (the enumeration walks the same space by
    train_bases x micro_batches x RECOMPUTE, stopping early where memory runs out)."""
    for ep, vp, zero in train_bases(problem, tp, pp, cp, dp):
        for mb in micro_batches(problem, dp):
            for rec in RECOMPUTE:
                yield TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, zero_stage=zero,
                                  micro_batch=mb, recompute=rec, sequence_parallel=tp > 1)


def train_shape_violations(problem: Problem, pool: PoolHW, n: int, tp: int, pp: int, cp: int, dp: int, *,
                           user: bool = True) -> list[Violation]:
    """The rules of a training layout's GPU count and tp/pp/cp/dp degrees."""
    a = problem.policy
    cons = problem.spec.constraints.training
    f = "parallelism.training"
    out = _tp_violations(problem, pool, tp, "training", cons, user)
    if tp * pp * cp * dp != n:
        out.append(Violation("structure", f, f"tp*pp*cp*dp = {tp * pp * cp * dp} but "
                             f"resource_allocation.training.gpus = {n}; make them equal"))
    out += count_violations(pool, n, "training")
    if pp > a.layers:
        out.append(Violation("structure", f + ".pp", f"pp={pp} exceeds the {a.layers} layers"))
    elif pipeline_split(a.layers, pp) is None:
        out.append(Violation("structure", f + ".pp", f"pp={pp}: the {a.layers} layers split into stages of at most "
                             f"{-(-a.layers // pp)} only with uneven middle stages, which Megatron-Core cannot "
                             f"express (it sets apart the first and last stage only); choose another pp"))
    if user and cp not in cp_choices(problem):
        out.append(Violation("structure", f + ".cp", f"cp={cp} is not searched; name it in constraints.training.cp "
                             f"(searched: {cp_choices(problem)})"))
    if user:
        out += _user("training", cons, {"tp": tp, "pp": pp, "cp": cp, "dp": dp}, n)
    return out


def train_layout_violations(problem: Problem, lay: TrainLayout, *, user: bool = True) -> list[Violation]:
    """The rules of a training layout's other choices (ep, vp, ZeRO, micro-batch, recompute)."""
    a = problem.policy
    cons = problem.spec.constraints.training
    gb = problem.workload.global_batch
    f = "parallelism.training"
    out = []
    if lay.ep > 1 and (not a.is_moe or a.experts % lay.ep or (lay.tp * lay.dp * lay.cp) % lay.ep):
        out.append(Violation("structure", f + ".ep", f"ep={lay.ep} must divide the experts ({a.experts}) and "
                             f"tp*dp*cp ({lay.tp * lay.dp * lay.cp})"))
    if lay.vp > 1 and (lay.pp == 1 or a.layers % (lay.pp * lay.vp)):
        out.append(Violation("structure", f + ".vp", f"vp={lay.vp} needs pp > 1 and the layers ({a.layers}) "
                             f"divisible by pp*vp"))
    if lay.zero_stage not in zero_stages(lay.pp):
        out.append(Violation("structure", f + ".zero_stage", f"ZeRO-{lay.zero_stage} with pp={lay.pp}: pipelines run "
                             f"with Megatron's distributed optimizer (ZeRO 0 or 1)"))
    if gb % (lay.dp * lay.micro_batch):
        out.append(Violation("rl.batch", f + ".micro_batch", f"the global batch of {gb} sequences "
                             f"(rl.prompts_per_step x samples_per_prompt / mini_batches) is not divisible by "
                             f"dp*micro_batch = {lay.dp * lay.micro_batch}"))
    if user:
        out += _user("training", cons, {k: getattr(lay, k) for k in ("ep", "vp", "zero_stage", "micro_batch",
                                                                      "recompute")}, None)
        out += _target(training_ok(target_caps(problem), lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage,
                                   lay.recompute), f)
    return out


def train_violations(problem: Problem, pool: PoolHW, n: int, lay: TrainLayout, *, user: bool = True
                     ) -> list[Violation]:
    """Every rule of a training layout on n GPUs of `pool` (memory is the performance model's)."""
    return (train_shape_violations(problem, pool, n, lay.tp, lay.pp, lay.cp, lay.dp, user=user)
            + train_layout_violations(problem, lay, user=user))


# --- the critic (PPO): its own degrees on the training GPUs ---------------------------------

def critic_universe(problem: Problem, pool: PoolHW, n: int) -> Iterator[TrainLayout]:
    """Every layout of the critic on the trainer's n GPUs (verl's critic worker on the trainer's
    pool with degrees of its own): tp inside the NVLink domain, any pipeline degree up to its
    layers, the searched CP degrees, a data-parallel degree dividing the batch, its expert
    degrees, ZeRO stages, micro-batches and recompute (no virtual stages)."""
    a = problem.value
    if a is None:
        return
    gb = problem.workload.global_batch
    for tp in divisors(math.gcd(n, max(pool.scaleup_size, 1))):
        for pp in range(1, a.layers + 1):
            for cp in cp_choices(problem):
                if n % (tp * pp * cp):
                    continue
                dp = n // (tp * pp * cp)
                if gb % dp:
                    continue
                eps = [1] if not a.is_moe else [e for e in divisors(tp * dp * cp) if a.experts % e == 0]
                for ep in eps:
                    for zero in zero_stages(pp):
                        for mb in micro_batches(problem, dp):
                            for rec in RECOMPUTE:
                                yield TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=1, zero_stage=zero,
                                                  micro_batch=mb, recompute=rec, sequence_parallel=tp > 1)


def critic_violations(problem: Problem, pool: PoolHW, n: int, lay: TrainLayout) -> list[Violation]:
    """The rules of the critic's own layout on the trainer's n GPUs, and whether the target
    trains a critic with these degrees."""
    a = problem.value
    f = "parallelism.critic"
    if a is None:
        return [Violation("structure", f, "the spec has no value model (model.value); remove parallelism.critic")]
    out = []
    if lay.gpus != n:
        out.append(Violation("structure", f, f"tp*pp*cp*dp = {lay.gpus} but the critic trains on the "
                             f"{n} training GPUs; make them equal"))
    if a.heads % lay.tp:
        out.append(Violation("structure", f + ".tp", f"tp={lay.tp} does not divide the {a.heads} attention heads "
                             f"of the critic ({a.name})"))
    elif not a.is_mla and a.n_kv_heads % lay.tp and lay.tp % a.n_kv_heads:
        out.append(Violation("structure", f + ".tp", f"tp={lay.tp}: Megatron needs the critic's {a.n_kv_heads} "
                             f"query groups divisible by tp (or tp a multiple of them)"))
    if max(pool.scaleup_size, 1) % lay.tp:
        out.append(Violation("structure", f + ".tp", f"tp={lay.tp} groups would cross the NVLink domain"))
    if lay.pp > a.layers:
        out.append(Violation("structure", f + ".pp", f"pp={lay.pp} exceeds the critic's {a.layers} layers"))
    if lay.cp not in cp_choices(problem):
        out.append(Violation("structure", f + ".cp", f"cp={lay.cp} is not searched (searched: {cp_choices(problem)})"))
    if lay.vp != 1:
        out.append(Violation("structure", f + ".vp", "the critic runs without virtual pipeline stages (vp=1)"))
    if lay.ep > 1 and (not a.is_moe or a.experts % lay.ep or (lay.tp * lay.dp * lay.cp) % lay.ep):
        out.append(Violation("structure", f + ".ep", f"ep={lay.ep} must divide the critic's experts and tp*dp*cp"))
    if lay.zero_stage not in zero_stages(lay.pp):
        out.append(Violation("structure", f + ".zero_stage", f"ZeRO-{lay.zero_stage} with pp={lay.pp}: pipelines run "
                             f"with Megatron's distributed optimizer (ZeRO 0 or 1)"))
    gb = problem.workload.global_batch
    if gb % (lay.dp * lay.micro_batch):
        out.append(Violation("rl.batch", f + ".micro_batch", f"the global batch of {gb} sequences is not divisible "
                             f"by the critic's dp*micro_batch = {lay.dp * lay.micro_batch}"))
    out += _target(training_ok(target_caps(problem), lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage,
                               lay.recompute, critic=True), f)
    return out


def critic_pair_violations(problem: Problem, policy: TrainLayout, critic: TrainLayout, *, group: bool = False
                           ) -> list[Violation]:
    """The target trains the critic beside this policy layout: with degrees of its own only where
    the framework has them (`shapes.critic_own_layout`; `group`: on GPUs of its own, so with its own
    data-parallel degree), and on an engine that runs both (verl picks one engine for the actor and
    the critic) unless the critic's backend is its own (`critic_training.own_engine`)."""
    caps = target_caps(problem)
    if caps is None:
        return []
    f = "parallelism.critic"
    like = critic_like_policy(problem, policy)
    if group:
        like = replace(like, dp=critic.dp)
    # degrees only: which backend runs each (TrainLayout.strategy) is the engine check's below
    if not caps.shapes.value.critic_own_layout and replace(critic, strategy=like.strategy) != like:
        return [Violation("target", f, f"{problem.spec.target.framework} trains the critic with the actor's degrees "
                          f"(source: {caps.shapes.source})")]
    if caps.critic_training is not None and caps.critic_training.own_engine:
        return []  # NeMo-RL: the value model's backend is its own (capabilities.yaml critic_training)
    both = set(strategies(caps, *_strategy_args(policy))) & set(strategies(caps, *_strategy_args(critic),
                                                                           critic=True))
    if not both:
        return [Violation("target", f, f"no training engine of {problem.spec.target.framework} runs both the actor's "
                          f"and the critic's degrees (source: {caps.training.source})")]
    return []


def critic_like_policy(problem: Problem, policy: TrainLayout) -> TrainLayout:
    """The critic with the policy's degrees (what a framework without a critic layout of its own runs)."""
    a = problem.value
    ep = policy.ep if a is not None and a.is_moe and a.experts % policy.ep == 0 else 1
    return layout_with(policy, ep=ep, vp=1)


def _strategy_args(lay: TrainLayout) -> tuple:
    return lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage, lay.recompute


# --- the step: modes, placement, pools ----------------------------------------------------

def modes_allowed(problem: Problem) -> list[str]:
    return [m for m in MODES if not mode_violations(problem, m)]


def mode_violations(problem: Problem, mode: str, *, user: bool = True) -> list[Violation]:
    """The user's modes, staleness, and (user=True) what the target runs: the mode, with the
    critic training beside the policy."""
    if mode == "async" and problem.workload.max_staleness == 0:
        return [Violation("constraints.modes", "pipeline.mode", "async overlap needs rl.max_staleness >= 1")]
    if not user:
        return []
    if mode not in (problem.spec.constraints.modes or MODES):
        return [Violation("constraints.modes", "pipeline.mode",
                          f"{mode} is not in constraints.modes {problem.spec.constraints.modes}")]
    caps = target_caps(problem)
    out = _target(mode_ok(caps, mode), "pipeline.mode")
    where = caps.placements[mode].value.value if caps is not None and not out else None
    if where is not None and problem.value is not None and not set(critic_places(problem, mode)) & set(where):
        out.append(Violation("target", "placement.value", f"{problem.spec.target.framework} does not train a critic "
                             f"in {mode} mode where rlsolve plans one (source: {caps.placements[mode].source})"))
    return out


def critic_places(problem: Problem, mode: str) -> tuple[str, ...]:
    """Where the plan may train the critic (PPO) in `mode`: on the trainers' GPUs, or, in a
    disaggregated mode for a target that trains it on GPUs of its own (placements value: auxiliary,
    OpenRLHF's --critic.* group), on a group of its own in the training pool. Not for target `any`:
    its plans keep the critic on the trainers (the shape is a framework's, searched where one runs it)."""
    if problem.value is None:
        return ("none",)
    caps = target_caps(problem)
    if mode != "colocated" and caps is not None and "auxiliary" in caps.placements[mode].value.value:
        return ("training", "auxiliary")
    return ("training",)


def target_placement_violations(problem: Problem, mode: str, *, reference: str, reward: str, quant: str = "none",
                                offload: bool = False, auxiliary: frozenset = frozenset(),
                                value: str | None = None) -> list[Violation]:
    """Where the target runs the reference, reward and value models in this mode (`elsewhere`:
    on the engines or an auxiliary group; `value` None: the critic, if any, on the trainers), the
    reward's precision, offloading the training state during rollout, and the models on an
    auxiliary group."""
    if value is None:
        value = "training" if problem.value is not None else "none"
    return _target(placement_ok(target_caps(problem), mode, reference=reference, reward=reward, value=value,
                                reward_quantization=quant, train_offload=offload, auxiliary=auxiliary), "placement")


def target_hosting_modes(problem: Problem, modes: Iterable[str], places: dict[str, str], *, quant: str = "none",
                         offload: bool = False, auxiliary: frozenset = frozenset()) -> frozenset[str]:
    """The modes of `modes` in which the target runs the models `places` names where it puts them
    ({model: placement}), the reward at `quant`, the training state offloaded or not, and the
    models of `auxiliary` on a group of their own. Each candidate answers for the models it hosts;
    the program picks a mode allowed by every chosen candidate, which is the whole plan's rule
    since the target allows each model's placement per mode on its own (frameworks.rules.hosting_ok)."""
    caps = target_caps(problem)
    return frozenset(m for m in modes if hosting_ok(caps, m, places, reward_quantization=quant, train_offload=offload,
                                                    auxiliary=auxiliary))


def aux_models(problem: Problem) -> list[str]:
    """The forward-only models that need a home (the reward only when it is a model)."""
    return [n for n in ("reference", "reward") if getattr(problem, n) is not None]


def placement_violations(problem: Problem, mode: str, reference: str, reward: str, has_aux_group: bool
                         ) -> list[Violation]:
    """Where the reference and reward models may run in this mode."""
    out = []
    f = "placement"
    if problem.reference is None and reference != "none":
        out.append(Violation("structure", f + ".reference", "the spec has no reference model; set placement.reference: none"))
    if problem.reference is not None and reference not in ("training", "cpu_offload", "generation", "auxiliary"):
        out.append(Violation("structure", f + ".reference", "the spec has a reference model; place it "
                             "(training | cpu_offload | generation | auxiliary)"))
    if problem.reward is None and reward != "cpu":
        out.append(Violation("structure", f + ".reward", "the reward is rule-based; set placement.reward: cpu"))
    if problem.reward is not None and reward not in ("training", "generation", "auxiliary"):
        out.append(Violation("structure", f + ".reward", "place the reward model on training, generation or auxiliary"))
    if mode == "colocated" and "generation" in (reference, reward):
        out.append(Violation("structure", f, "colocated roles share GPUs; use placement 'training'"))
    if "auxiliary" in (reference, reward) and not has_aux_group:
        out.append(Violation("structure", "resource_allocation.auxiliary",
                             "placement 'auxiliary' needs resource_allocation.auxiliary {pool, gpus}"))
    return out


def critic_group_violations(problem: Problem, mode: str, value: str, lay) -> list[Violation]:
    """The critic's placement (PPO) and its group of its own: `value: auxiliary` exactly when
    resource_allocation.critic is given, in a disaggregated mode, in the training pool, with the
    group's degrees in parallelism.critic."""
    ra = lay.resource_allocation
    f = "placement.value"
    if problem.value is None and ra.critic is not None:
        return [Violation("structure", "resource_allocation.critic", "the spec has no value model; remove "
                          "resource_allocation.critic")]
    if problem.value is not None and (value == "auxiliary") != (ra.critic is not None):
        return [Violation("structure", "resource_allocation.critic", "placement.value 'auxiliary' and "
                          "resource_allocation.critic {pool, gpus} go together")]
    if ra.critic is None:
        return []
    out = []
    if mode == "colocated":
        out.append(Violation("structure", f, "a critic on GPUs of its own needs a disaggregated mode (sync or async)"))
    if pool_named(problem, ra.critic.pool, "layout.resource_allocation.critic.pool") is not \
            pool_named(problem, ra.training.pool, "layout.resource_allocation.training.pool"):
        out.append(Violation("structure", "resource_allocation.critic.pool", "the critic's group runs in the "
                             f"training pool ({ra.training.pool!r})"))
    if lay.parallelism.critic is None:
        out.append(Violation("structure", "parallelism.critic", "give the degrees of the critic's own group"))
    return out


def pool_use_violations(problem: Problem, mode: str, uses: Iterable[tuple[str, PoolHW, int]]) -> list[Violation]:
    """GPUs per pool: colocated roles share theirs, every other role has its own.
    `uses`: (role, pool, GPUs) of generation, training and the auxiliary group."""
    uses = list(uses)
    out = []
    by_role = {r: (p, n) for r, p, n in uses}
    if mode == "colocated" and "generation" in by_role and "training" in by_role:
        (pg, ng), (pt, nt) = by_role["generation"], by_role["training"]
        if pg is not pt or ng != nt:
            out.append(Violation("structure", "resource_allocation",
                                 "colocated roles share the same GPUs; give both the same pool and count"))
    used: dict[str, int] = {}
    pools: dict[str, PoolHW] = {}
    for role, pool, n in uses:
        if mode == "colocated" and role == "training":
            continue
        used[pool.name] = used.get(pool.name, 0) + n
        pools[pool.name] = pool
    for name, n in used.items():
        if n > pools[name].n_gpus:
            out.append(Violation("cluster.size", "resource_allocation",
                                 f"{n} GPUs used in pool {name!r}, which has {pools[name].n_gpus}"))
    return out


# --- a whole layout (a plan, or one a user wrote) -----------------------------------------

def pool_named(problem: Problem, name: str, field: str) -> PoolHW:
    for p in problem.pools:
        if p.name == name:
            return p
    if len(problem.pools) == 1:  # a single-pool layout may name its pool anything
        return problem.pools[0]
    raise SpecError(f"unknown pool {name!r}; the cluster's pools: {', '.join(p.name for p in problem.pools)}",
                    field=field)


def known_strategy(name: str | None) -> str:
    """A layout's named training framework where it is one of the strategies the model knows ("": none)."""
    return name if name in get_args(Strategy) else ""


def role_layouts(lay) -> tuple[GenLayout, TrainLayout]:
    """The perf model's layouts of a plan's (or user's) Layout sections."""
    g, t = lay.parallelism.generation, lay.parallelism.training
    return (GenLayout(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep),
            TrainLayout(tp=t.tp, pp=t.pp, dp=t.dp, cp=t.cp, ep=t.ep, vp=t.vp, zero_stage=t.zero_stage,
                        micro_batch=t.micro_batch, recompute=t.recompute, sequence_parallel=t.sequence_parallel,
                        strategy=known_strategy(lay.resource_allocation.training.framework)))


def layout_violations(problem: Problem, lay, *, user: bool = True) -> list[Violation]:
    """Every rule of a whole layout: both roles, the mode, the placement and the GPUs per
    pool. `user=False` leaves out the user's constraints (estimate scores what it is given)
    and lets a layout name a TP degree beyond the NVLink domain."""
    ra = lay.resource_allocation
    pg = pool_named(problem, ra.generation.pool, "layout.resource_allocation.generation.pool")
    pt = pool_named(problem, ra.training.pool, "layout.resource_allocation.training.pool")
    g, t = role_layouts(lay)
    mode = lay.pipeline.mode
    out = gen_violations(problem, pg, ra.generation.gpus, g, user=user) + \
        train_violations(problem, pt, ra.training.gpus, t, user=user)
    out += mode_violations(problem, mode, user=user)
    pl = lay.placement
    out += placement_violations(problem, mode, pl.reference, pl.reward, ra.auxiliary is not None)
    if user:
        aux = frozenset(m for m in ("reference", "reward") if getattr(pl, m) == "auxiliary")
        out += target_placement_violations(problem, mode, reference=pl.reference, reward=pl.reward,
                                           quant=lay.optimization.reward_quantization,
                                           offload=lay.optimization.train_offload_during_rollout, auxiliary=aux,
                                           value=pl.value if problem.value is not None else "none")
        out += engine_cap_violations(problem, g, lay.optimization.max_num_seqs)
    uses = [("generation", pg, ra.generation.gpus), ("training", pt, ra.training.gpus)]
    if ra.auxiliary is not None:
        uses.append(("auxiliary", pool_named(problem, ra.auxiliary.pool, "layout.resource_allocation.auxiliary.pool"),
                     ra.auxiliary.gpus))
        out += aux_group_violations(problem, ra.auxiliary.gpus, t)
    group = critic_group_violations(problem, mode, pl.value, lay)
    out += group
    critic = critic_layout(lay)
    if ra.critic is not None and not group:
        out += count_violations(pt, ra.critic.gpus, "critic")
        uses.append(("critic", pt, ra.critic.gpus))
        out += critic_violations(problem, pt, ra.critic.gpus, critic)
        if user:
            out += critic_pair_violations(problem, t, critic, group=True)
    elif critic is not None and ra.critic is None:
        out += critic_violations(problem, pt, ra.training.gpus, critic)
        if user:
            out += critic_pair_violations(problem, t, critic)
    out += pool_use_violations(problem, mode, uses)
    if user:
        out += _target(pools_ok(target_caps(problem), len({pool.name for _, pool, _ in uses})), "resource_allocation")
    return out


def critic_layout(lay) -> TrainLayout | None:
    """The critic's own degrees of a plan's (or user's) Layout (None: the trainer's)."""
    c = lay.parallelism.critic
    if c is None:
        return None
    return TrainLayout(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, ep=c.ep, vp=c.vp, zero_stage=c.zero_stage,
                       micro_batch=c.micro_batch, recompute=c.recompute, sequence_parallel=c.sequence_parallel)
