"""The seed design note's rule-of-thumb planner, as a baseline scored by rlsolve's own model.

The seed (shared/seed/000_*.txt) gives two procedures: `derive_parallelism` (section 3.3)
and `optimize_resource_ratio` (section 4.2), plus configuration templates (section 7) and
decision trees (section 8). This module implements them as written -- formulas, constants
and thresholds, mistakes included -- and maps their output onto a `Layout`, which
`seed_plan` scores with `rlsolve.estimate`'s path (the same performance model the solver
optimises), so the two plans are compared on equal terms.

How the seed's procedure becomes one layout (`seed_layout`):

1. Split the cluster with `optimize_resource_ratio` (N_gen generation GPUs, N_train training
   GPUs). Its inputs: `model_params` = the policy's total parameters, `seq_len` = prompt_len
   + response_len.max (the templates' `max_seq_len`), `num_gen_per_prompt` =
   rl.samples_per_prompt, `gpu_compute` = the GPU's dense BF16 TFLOP/s. Its formulas are
   kept, mistakes included: prefill counted at 6*P*s FLOPs (a forward is 2*P*s), decode
   modelled as compute-bound at 10% utilisation (decode is HBM-bandwidth bound), and every
   term is per prompt, so the ratio reduces to (12 + 20 n) / (12 + 35 n): it does not depend
   on the model, the sequence length or the GPU at all.
2. `round_to_valid_parallelism` is called but never defined in the seed. Nearest reading
   (ours): round each count independently to the nearest power of two that is also a legal
   role size -- a divisor of the node below one node, whole nodes above (ties go to the
   smaller count); if the two rounded counts then exceed the cluster, halve the larger one
   until they fit. This reproduces the seed's own templates: 8 GPUs -> 4:4 (section 7.1),
   64 -> 32:32 (7.2), 256 -> 128:128 (7.3).
3. Each role's degrees come from the section 8.1 decision tree: a model that fits on one GPU
   ("适用于 <10B模型": total parameters < 10B) gets TP=1, PP=1, DP=GPUs, which is the seed's
   1.5B example (section 3.4) and its 7B template (7.1); any other model goes through
   `derive_parallelism` with `total_gpus` = the role's GPUs. Note that `derive_parallelism`
   alone gives the 1.5B model TP=8 (its TP loop keeps the *largest* candidate whose layer
   fits in 30% of HBM, which every candidate does), contradicting its own example; and for
   70B on 64 H100 it gives TP=8 PP=1 DP=8, not the TP=8 PP=2 DP=4 of the section 3.4 text
   (it matches the 7.2 template's TP=8 PP=1 DP=8).
4. EP. `derive_parallelism` sets ep = min(dp, experts) and reports total = tp*pp*dp, i.e.
   EP lives inside DP; the section 3.4 MoE example and the 7.3 template instead count EP as
   a separate factor of the world size (4 x 4 x 8 x 1 = 128). rlsolve follows Megatron: the
   expert-parallel group carves the dp*cp data-parallel ranks, tp*pp*cp*dp = GPUs. Mapping:
   a seed result (tp, pp, ep, dp_seed) whose world counts EP maps to dp = ep*dp_seed; the
   output of `derive_parallelism` (world tp*pp*dp, ep <= dp) maps directly to dp = dp,
   ep = ep, and must divide both the experts and dp*cp (checked by `check_layout`; a seed
   EP that does not divide is reported as breaking that rule, not repaired). On the
   generation side an engine replica is tp*pp GPUs, so the seed's EP is capped at tp*pp
   (experts split inside a replica; with ep <= tp this scores the same as ep=1).
5. SP (step 5, seq_len > 32K: sp = min(tp, seq_len // 8192)) is Megatron sequence
   parallelism inside the TP group (it reuses TP's GPUs and NVLink, and the seed's total
   omits it): `sequence_parallel = sp > 1` (only meaningful with tp > 1). Context
   parallelism is not part of the seed: cp = 1.
6. Training options from the section 7 templates: gradient checkpointing -> recompute
   "full"; ZeRO-1 for MoE ("MoE不适合ZeRO-3", 7.3) and whenever pp > 1 (the section 3.4
   70B memory analysis), ZeRO-3 otherwise (7.2 and the section 5.1 trainer); micro-batch 4
   for models < 10B (7.1), 2 for larger dense models (7.2), 1 for MoE (7.3), halved until
   dp*micro_batch divides the global batch (rollout samples / mini_batches).
7. Pipeline: the seed recommends asynchronous generation-training overlap (section 4.3,
   templates `mode: async_overlap`): mode "async" with staleness 1 when the spec allows
   rl.max_staleness >= 1 (and constraints.modes allows it), else "sync". The seed's
   procedure always disaggregates, so it never picks "colocated".
8. Placement (section 7 templates, 8.3 priorities): the reference model offloaded to the
   CPU (`cpu_offload`); a reward model runs in a vLLM engine (section 5.2) -- on the
   generation GPUs -- INT8-quantised, INT4 above 100B parameters (7.3: 236B -> INT4);
   a rule-based reward stays on the CPU; the value model trains with the policy (7.1:
   share_with_policy). KV cache: everything the engine leaves free (vLLM's default).
"""
from __future__ import annotations

import math
from typing import Any

from rlsolve.errors import InfeasibleError, SpecError
from rlsolve.plan import (GenParallel, Layout, Optimization, Parallelism, Pipeline, PlacementSection, Plan,
                          ResourceAllocation, RoleGPUs, TrainParallel)
from rlsolve.resolve import Problem

# --- the seed's constants, as written ---------------------------------------------------------

TP_CANDIDATES = (1, 2, 4, 8)        # 3.3 step 1
LAYER_MEMORY_FRACTION = 0.3         # 3.3 step 1: "留30%给激活" (one layer must fit in 30% of HBM)
BYTES_PER_PARAM = 2                 # BF16
MIN_LAYERS_PER_STAGE = 4            # 3.3 step 2: "每PP stage至少4层"
LONG_SEQUENCE = 32768               # 3.3 step 5
SP_CHUNK = 8192                     # 3.3 step 5
SMALL_MODEL_PARAMS = 10e9           # 8.1: "模型能放进单GPU? 是 -> TP=1, PP=1, DP=GPU数 (适用于 <10B模型)"
PREFILL_UTILIZATION = 0.5           # 4.2
DECODE_UTILIZATION = 0.1            # 4.2: decode treated as compute at 10%
TRAIN_UTILIZATION = 0.4             # 4.2
INT4_ABOVE_PARAMS = 100e9           # 7.1/7.2: 7B, 70B -> INT8; 7.3: 236B -> INT4


class BaselineError(ValueError):
    """The seed's procedure produced something no layout can express (e.g. a zero degree)."""


# --- section 3.3 ------------------------------------------------------------------------------

def derive_parallelism(model_params: float, num_layers: int, hidden_dim: int, num_heads: int, num_experts: int,
                       seq_len: int, gpus_per_node: int, gpu_memory: float, gpu_compute: float, nvlink_bw: float,
                       ib_bw: float, total_gpus: int) -> dict[str, int]:
    """Section 3.3, line by line. `model_params` in parameters, `gpu_memory` in GB.

    hidden_dim, gpu_compute, nvlink_bw and ib_bw are inputs of the seed's signature that its
    body never reads; they are kept for fidelity. Where the seed would divide by zero (a role
    smaller than the chosen TP, or fewer than 4 layers) BaselineError says so."""
    # Step 1: TP (communication heavy, inside the node); the loop keeps the LAST passing candidate
    tp_max = min(gpus_per_node, num_heads)
    params_per_layer = model_params / num_layers
    tp = 1
    for t in TP_CANDIDATES:
        if t <= tp_max:
            layer_mem = params_per_layer / t * BYTES_PER_PARAM / 1e9  # GB, as gpu_memory
            if layer_mem < gpu_memory * LAYER_MEMORY_FRACTION:
                tp = t
    # Step 2: PP
    gpus_for_pp = total_gpus // tp
    pp_max_per_node = gpus_per_node // tp
    if gpus_for_pp <= pp_max_per_node:
        pp = gpus_for_pp
    else:
        pp = pp_max_per_node
    pp = min(pp, num_layers // MIN_LAYERS_PER_STAGE)
    if pp < 1:
        raise BaselineError(f"derive_parallelism gives pp=0 (total_gpus {total_gpus} // tp {tp} = {gpus_for_pp}, "
                            f"layers // 4 = {num_layers // MIN_LAYERS_PER_STAGE}); its dp = total // (tp*pp) "
                            "divides by zero")
    # Step 3: DP
    dp = total_gpus // (tp * pp)
    # Step 4: EP (MoE)
    ep = 1
    if num_experts > 1:
        ep = min(dp, num_experts)
    # Step 5: SP (long sequences)
    sp = 1
    if seq_len > LONG_SEQUENCE:
        sp = min(tp, seq_len // SP_CHUNK)
    return {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "sp": sp, "total": tp * pp * dp}


def tree_parallelism(model_params: float, num_layers: int, hidden_dim: int, num_heads: int, num_experts: int,
                     seq_len: int, gpus_per_node: int, gpu_memory: float, gpu_compute: float, nvlink_bw: float,
                     ib_bw: float, total_gpus: int) -> dict[str, int]:
    """Section 8.1's decision tree in front of `derive_parallelism`: a model that fits on one
    GPU (the tree's own scope, < 10B parameters) gets TP=1, PP=1, DP=GPUs; then the same EP
    and SP steps. Larger models follow `derive_parallelism` (whose TP choice is the tree's
    TP = min(GPUs per node, heads) whenever a layer fits)."""
    if model_params < SMALL_MODEL_PARAMS:
        tp, pp, dp = 1, 1, total_gpus
        ep = min(dp, num_experts) if num_experts > 1 else 1
        sp = min(tp, seq_len // SP_CHUNK) if seq_len > LONG_SEQUENCE else 1
        return {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "sp": sp, "total": tp * pp * dp}
    return derive_parallelism(model_params, num_layers, hidden_dim, num_heads, num_experts, seq_len,
                              gpus_per_node, gpu_memory, gpu_compute, nvlink_bw, ib_bw, total_gpus)


# --- section 4.2 ------------------------------------------------------------------------------

def resource_ratio_terms(model_params: float, seq_len: int, num_gen_per_prompt: int,
                         gpu_compute: float) -> dict[str, float]:
    """The time estimates of section 4.2 (seconds per prompt; `gpu_compute` in TFLOP/s)."""
    c = gpu_compute * 1e12
    prefill_flops = 6 * model_params * seq_len
    prefill_time = prefill_flops / (c * PREFILL_UTILIZATION)
    decode_flops_per_token = 2 * model_params
    decode_time_per_token = decode_flops_per_token / (c * DECODE_UTILIZATION)
    decode_time = decode_time_per_token * seq_len * num_gen_per_prompt
    total_gen_time = prefill_time + decode_time
    train_flops = 6 * model_params * seq_len * num_gen_per_prompt
    train_time = train_flops / (c * TRAIN_UTILIZATION)
    gen_ratio = total_gen_time / (total_gen_time + train_time)
    return {"prefill_time": prefill_time, "decode_time": decode_time, "gen_time": total_gen_time,
            "train_time": train_time, "gen_ratio": gen_ratio}


def legal_role_counts(gpus_per_node: int, nodes: int) -> list[int]:
    """GPU counts a role may take: a divisor of the node below one node, or whole nodes."""
    sub = [d for d in range(1, gpus_per_node) if gpus_per_node % d == 0]
    return sub + [k * gpus_per_node for k in range(1, nodes + 1)]


def round_to_valid_parallelism(n: int, gpus_per_node: int = 8, nodes: int | None = None) -> int:
    """Undefined in the seed. Our reading: the nearest power of two among the legal role
    sizes (sub-node divisors, whole nodes; ties to the smaller); the nearest legal size if no
    power of two is legal. `nodes=None`: no upper limit."""
    if nodes is None:
        nodes = max(1, math.ceil(max(n, 1) / gpus_per_node) * 2)
    legal = legal_role_counts(gpus_per_node, nodes)
    pow2 = [c for c in legal if c & (c - 1) == 0]
    pool = pow2 or legal
    return min(pool, key=lambda c: (abs(c - n), c))


def optimize_resource_ratio(model_params: float, seq_len: int, num_gen_per_prompt: int, gpu_compute: float,
                            gpu_memory: float, total_gpus: int, gpus_per_node: int = 8) -> tuple[int, int]:
    """Section 4.2: N_gen, N_train. `gpus_per_node` feeds our reading of the undefined
    round_to_valid_parallelism; if the rounded pair exceeds the cluster the larger is halved."""
    gen_ratio = resource_ratio_terms(model_params, seq_len, num_gen_per_prompt, gpu_compute)["gen_ratio"]
    n_gen = int(total_gpus * gen_ratio)
    n_train = total_gpus - n_gen
    nodes = max(1, total_gpus // gpus_per_node)
    n_gen = round_to_valid_parallelism(n_gen, gpus_per_node, nodes)
    n_train = round_to_valid_parallelism(n_train, gpus_per_node, nodes)
    legal = legal_role_counts(gpus_per_node, nodes)
    while n_gen + n_train > total_gpus:
        if n_gen >= n_train:
            n_gen = max([c for c in legal if c <= n_gen // 2] or [0])
        else:
            n_train = max([c for c in legal if c <= n_train // 2] or [0])
        if n_gen < 1 or n_train < 1:
            raise BaselineError(f"{total_gpus} GPUs cannot be split into generation and training GPUs")
    return n_gen, n_train


# --- the layout -------------------------------------------------------------------------------

def _role_degrees(problem: Problem, n_gpus: int) -> dict[str, int]:
    a, pool, rl = problem.policy, problem.pool, problem.spec.rl
    return tree_parallelism(
        model_params=a.total_params, num_layers=a.layers, hidden_dim=a.hidden, num_heads=a.heads,
        num_experts=a.experts if a.is_moe else 0, seq_len=rl.prompt_len + rl.response_len.max,
        gpus_per_node=pool.gpus_per_node, gpu_memory=pool.gpu.memory_gb,
        gpu_compute=pool.gpu.peak_tflops(problem.spec.model.precision), nvlink_bw=pool.gpu.nvlink_gbps_per_dir,
        ib_bw=pool.nic_gbytes_per_gpu, total_gpus=n_gpus)


def _check_world(role: str, d: dict[str, int], n: int) -> None:
    if d["total"] != n:
        raise BaselineError(f"{role}: the seed's degrees tp={d['tp']} pp={d['pp']} dp={d['dp']} cover "
                            f"{d['total']} of the role's {n} GPUs (dp = total // (tp*pp) rounds down)")


def _micro_batch(problem: Problem, dp: int) -> int:
    a = problem.policy
    mb = 1 if a.is_moe else (4 if a.total_params < SMALL_MODEL_PARAMS else 2)
    gb = max(1, problem.spec.rl.samples // problem.spec.rl.mini_batches)
    while mb > 1 and gb % (dp * mb):
        mb //= 2
    if gb % dp:
        raise BaselineError(f"training dp={dp} does not divide the global batch {gb} "
                            "(rl.samples / rl.mini_batches)")
    return mb


def seed_split(problem: Problem) -> tuple[int, int, float]:
    """(N_gen, N_train, gen_ratio) of section 4.2 for this problem."""
    a, pool, rl = problem.policy, problem.pool, problem.spec.rl
    seq = rl.prompt_len + rl.response_len.max
    tflops = pool.gpu.peak_tflops(problem.spec.model.precision)
    ratio = resource_ratio_terms(a.total_params, seq, rl.samples_per_prompt, tflops)["gen_ratio"]
    n_gen, n_train = optimize_resource_ratio(a.total_params, seq, rl.samples_per_prompt, tflops,
                                             pool.gpu.memory_gb, pool.n_gpus, pool.gpus_per_node)
    return n_gen, n_train, ratio


def seed_layout(problem: Problem) -> Layout:
    """The layout the seed's procedure gives for `problem` (see the module docstring for each
    mapping). Raises BaselineError when the procedure yields no expressible layout."""
    spec = problem.spec
    rl = spec.rl
    a = problem.policy
    if len(problem.pools) > 1:
        raise BaselineError("the seed's procedure assumes one homogeneous cluster; the spec has several pools")
    allowed = spec.constraints.modes or ["colocated", "sync", "async"]
    mode = "async" if rl.max_staleness >= 1 and "async" in allowed else "sync"
    if mode not in allowed:
        raise BaselineError(f"the seed always disaggregates generation and training; constraints.modes allows "
                            f"only {allowed}")
    n_gen, n_train, _ = seed_split(problem)
    g = _role_degrees(problem, n_gen)
    t = _role_degrees(problem, n_train)
    _check_world("generation", g, n_gen)
    _check_world("training", t, n_train)

    zero = 1 if (a.is_moe or t["pp"] > 1) else 3
    mb = _micro_batch(problem, t["dp"])
    gb = max(1, rl.samples // rl.mini_batches)
    train = TrainParallel(tp=t["tp"], pp=t["pp"], dp=t["dp"], cp=1, ep=t["ep"] if a.is_moe else 1, vp=1,
                          zero_stage=zero, micro_batch=mb, grad_accum=max(1, gb // (t["dp"] * mb)),
                          recompute="full", sequence_parallel=t["sp"] > 1 and t["tp"] > 1)
    gen = GenParallel(tp=g["tp"], pp=g["pp"], dp=g["dp"], ep=min(g["ep"], g["tp"] * g["pp"]) if a.is_moe else 1)

    quant = "none"
    if problem.reward is not None:
        quant = "int4" if problem.reward.total_params > INT4_ABOVE_PARAMS else "int8"
    placement = PlacementSection(
        reference="none" if problem.reference is None else "cpu_offload",
        reward="cpu" if problem.reward is None else "generation",
        value="training" if problem.value is not None else "none")
    framework = "megatron" if (a.is_moe or t["pp"] > 1) else "deepspeed"
    return Layout(
        pipeline=Pipeline(mode=mode, staleness=1 if mode == "async" else 0),
        resource_allocation=ResourceAllocation(
            generation=RoleGPUs(pool=problem.pool.name, gpus=n_gen, engine="vllm"),
            training=RoleGPUs(pool=problem.pool.name, gpus=n_train, framework=framework)),
        placement=placement,
        parallelism=Parallelism(generation=gen, training=train),
        optimization=Optimization(reference_offload=problem.reference is not None, reward_quantization=quant))


def describe(lay: Layout) -> str:
    g, t = lay.parallelism.generation, lay.parallelism.training
    ra = lay.resource_allocation
    return (f"{lay.pipeline.mode}: gen {ra.generation.gpus} GPUs tp{g.tp} pp{g.pp} dp{g.dp}"
            + (f" ep{g.ep}" if g.ep > 1 else "")
            + f"; train {ra.training.gpus} GPUs tp{t.tp} pp{t.pp} dp{t.dp}" + (f" ep{t.ep}" if t.ep > 1 else "")
            + f" ZeRO-{t.zero_stage} mb{t.micro_batch} recompute={t.recompute}"
            + (" SP" if t.sequence_parallel and t.tp > 1 else ""))


def seed_plan(spec: Any) -> tuple[Plan | None, str]:
    """Score the seed's layout with rlsolve's performance model.

    Returns (plan, summary of the seed's layout) when it fits, else (None, reason): "does not
    fit: ..." when memory rules it out, "breaks a rule: ..." when the procedure's output
    violates a divisibility or structural rule. Invalid specs raise SpecError as `solve` does."""
    from rlsolve.resolve import resolve
    from rlsolve.solver.estimate import evaluate_layout
    from rlsolve.solver.report import build_plan
    from rlsolve.solver.validate import plan_violations
    from rlsolve.spec import load_spec

    problem = resolve(load_spec(spec))
    try:
        lay = seed_layout(problem)
    except BaselineError as e:
        return None, f"breaks a rule: {e}"
    try:
        est = evaluate_layout(problem, lay)
        plan = build_plan(problem, lay, est, status="estimate")
    except SpecError as e:
        return None, f"breaks a rule: {describe(lay)}: {e}"
    except InfeasibleError as e:
        return None, f"does not fit: {describe(lay)}: " + "; ".join(e.reasons)
    bad = plan_violations(problem, plan)
    if bad:
        return None, f"breaks a rule: {describe(lay)}: " + "; ".join(bad)
    return plan, describe(lay)


# --- is the seed's layout inside the solver's search space? ----------------------------------

def search_space_escapes(problem: Problem, lay: Layout) -> list[str]:
    """Where `lay` lies outside the space the solver searches (empty: inside): the rule
    table's violations of the layout, the user's constraints included. The one choice the
    space fixes is sequence parallelism (on whenever tp > 1: off moves the same TP bytes and
    leaves norms, residuals and activations unsharded, never faster, never smaller)."""
    from rlsolve.solver.rules import layout_violations

    out = [str(v) for v in layout_violations(problem, lay, user=True)]
    t = lay.parallelism.training
    if t.tp > 1 and not t.sequence_parallel:
        out.append(f"training sequence_parallel=False with tp={t.tp}: the solver scores sequence parallelism on "
                   "instead (dominated)")
    return out
