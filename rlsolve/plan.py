"""The output schema: the plan (SPEC section 4).

The first five sections (pipeline, resource_allocation, placement, parallelism,
optimization) are the *layout*: the decisions. `rlsolve estimate` accepts a plan or just
those sections and re-scores them. The rest is the estimate and the proof.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["colocated", "sync", "async"]
Placement = Literal["training", "generation", "cpu_offload", "auxiliary", "cpu", "none"]
Recompute = Literal["none", "selective", "full"]

# The plan's format. Raised when a field is renamed, removed or changes meaning, so a reader
# (a scheduler, `rlsolve estimate` on a stored plan) can tell which format it holds;
# `rlsolve schema --plan` prints the format of this version.
PLAN_VERSION = 1


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pipeline(_Out):
    mode: Mode = Field(description="colocated: one GPU set time-shares generation and training; sync: separate "
                       "GPU sets take turns; async: separate sets overlap, generation runs ahead by `staleness`.")
    staleness: int = Field(0, ge=0, description="Steps generation runs ahead of training (async only).")


class RoleGPUs(_Out):
    pool: str = Field("main", description="Pool the role runs on.")
    gpus: int = Field(gt=0, description="GPUs of the role (colocated: all of them).")
    engine: str | None = Field(None, description="Generation engine (vllm | sglang).")
    framework: str | None = Field(None, description="Training framework (megatron | fsdp | deepspeed).")


class ResourceAllocation(_Out):
    generation: RoleGPUs = Field(description='GPUs that run the rollout engines.')
    training: RoleGPUs = Field(description='GPUs that train the policy (and host the models placed on training).')
    auxiliary: RoleGPUs | None = Field(None, description="GPUs of their own (in any pool, the other roles' "
                                       "included) that run the reference and/or reward forwards (placement "
                                       "'auxiliary'), e.g. a reward model's group or older nodes.")
    critic: RoleGPUs | None = Field(None, description="PPO: GPUs of the critic's own (placement value "
                                    "'auxiliary'), in the training pool, where the target trains the critic "
                                    "there concurrently with the actor (OpenRLHF's --critic.* group); its "
                                    "degrees are parallelism.critic.")


class PlacementSection(_Out):
    reference: Placement = Field("training", description="Where the reference forward runs.")
    reward: Placement = Field("cpu", description="cpu = rule-based verifier; otherwise where the reward model runs.")
    value: Placement = Field("none", description="Where the critic lives (PPO): training (the trainers' GPUs), "
                             "auxiliary (GPUs of its own: resource_allocation.critic), none.")


class GenParallel(_Out):
    tp: int = Field(1, gt=0, description="Tensor parallel degree of one engine replica.")
    pp: int = Field(1, gt=0, description="Pipeline parallel degree of one engine replica.")
    dp: int = Field(1, gt=0, description="Engine replicas.")
    ep: int = Field(1, gt=0, description="Expert parallel degree (MoE); 1 = experts sharded by TP.")


class TrainParallel(_Out):
    tp: int = Field(1, gt=0, description="Tensor parallel degree.")
    pp: int = Field(1, gt=0, description="Pipeline parallel degree.")
    dp: int = Field(1, gt=0, description="Data parallel degree.")
    cp: int = Field(1, gt=0, description="Context parallel degree.")
    ep: int = Field(1, gt=0, description="Expert parallel degree; carves the dp*cp ranks (Megatron), or folds over "
                    "the TP ranks too when larger (expert tensor parallelism 1).")
    vp: int = Field(1, gt=0, description="Virtual pipeline stages per rank (interleaved 1F1B).")
    zero_stage: int = Field(1, ge=0, le=3, description="0 none, 1 optimizer (Megatron distributed optimizer), "
                            "2 +gradients, 3 +parameters (FSDP).")
    micro_batch: int = Field(1, gt=0, description="Sequences per micro-batch per model replica.")
    grad_accum: int = Field(1, gt=0, description="Micro-batches per optimizer step per data-parallel rank.")
    recompute: Recompute = Field("none", description="Activation recompute.")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism (only with tp > 1).")


class Parallelism(_Out):
    generation: GenParallel = Field(description='Degrees of one engine replica and the replica count.')
    training: TrainParallel = Field(description='Degrees, ZeRO stage, micro-batch and recompute of the trainer.')
    critic: TrainParallel | None = Field(None, description="PPO: the critic's own degrees, ZeRO stage, micro-batch "
                                         "and recompute on the training GPUs (null: the trainer's).")


class Optimization(_Out):
    reference_offload: bool = Field(False, description="Reference weights live in CPU memory, streamed in each step.")
    reward_quantization: Literal["none", "int8", "int4"] = Field("none", description="Reward model weight precision.")
    train_offload_during_rollout: bool = Field(False, description="Colocated: move optimizer states and gradients "
                                               "to the CPU while generating, freeing HBM for the KV cache.")
    kv_cache_gb: float | None = Field(None, ge=0, description="KV-cache memory per generation GPU (null: all that is left).")
    max_num_seqs: int | None = Field(None, gt=0, description="Engine cap on concurrent sequences (null: no cap "
                                     "beyond KV memory).")
    gpu_memory_utilization: float | None = Field(None, description="Engine memory fraction implied by the plan.")


class Layout(_Out):
    """The decisions of a plan; what `estimate` scores."""

    pipeline: Pipeline = Field(description="Colocated, sync or async, and the staleness.")
    resource_allocation: ResourceAllocation = Field(description="GPUs (and pool) of each role.")
    placement: PlacementSection = Field(default_factory=PlacementSection,
                                        description="Where the reference, reward and value models run.")
    parallelism: Parallelism = Field(description="Parallel degrees of generation and training.")
    optimization: Optimization = Field(default_factory=Optimization, description="Memory options and engine knobs.")


class Objective(_Out):
    name: str = Field(description='throughput or cost.')
    value: float = Field(description='The optimized value.')
    unit: str = Field(description='Its unit.')


class GenMemory(_Out):
    weights: float = Field(description="Policy weights (plus reference/reward models placed here), GB.")
    kv_cache: float = Field(description='KV-cache budget, GB.')
    activations: float = Field(description='Activation workspace outside "other", GB.')
    other: float = Field(description="CUDA context, NCCL buffers, prefill workspace, GB.")
    colocated_training: float = Field(0.0, description="Training state kept on the GPU during rollout (colocated), GB.")
    total: float = Field(description='Sum of the parts, GB.')
    capacity: float = Field(description="The GPU's memory, GB (the plan keeps min_headroom of it free).")


class TrainMemory(_Out):
    weights: float = Field(description="16-bit weights (an FSDP trainer's fp32 shards), GB (sharded by ZeRO-3).")
    grads: float = Field(description="16-bit gradients (an FSDP trainer's fp32 shards), GB (sharded by ZeRO-2/3).")
    optimizer: float = Field(description="Adam fp32 master weights, m and v (an FSDP trainer's m and v), GB "
                                         "(sharded by ZeRO-1/2/3).")
    activations: float = Field(description='Stored activations of the micro-batches in flight plus fp32 logits, GB.')
    other: float = Field(description="CUDA context, NCCL buffers, allocator fragmentation, and an FSDP trainer's "
                         "layers gathered and gradients being reduced at the peak, GB.")
    other_models: float = Field(0.0, description="Reference/reward weights and critic state kept here, GB.")
    total: float = Field(description='Sum of the parts, GB.')
    capacity: float = Field(description="The GPU's memory, GB (the plan keeps min_headroom of it free).")


class MemorySection(_Out):
    generation: GenMemory = Field(description='Per generation GPU, GB.')
    training: TrainMemory = Field(description='Per training GPU (busiest pipeline stage), GB.')


class TimeSection(_Out):
    step: float = Field(description='Seconds per RL step (the pipeline mode combines the phases below).')
    prefill: float = Field(description='Prompt prefill on the engines, s.')
    decode: float = Field(description='Decoding every response, tail included, s.')
    reward: float = Field(description='Reward model forward (0 for a rule reward on the CPU), s.')
    reference: float = Field(description='Reference forward (plus host transfer when offloaded), s.')
    value: float = Field(description='Critic forward and update (PPO), s.')
    old_logprob: float = Field(0.0, description='Policy forward recomputing the behaviour log-probs, s.')
    train: float = Field(description='Policy update: all epochs and mini-batches, s.')
    weight_sync: float = Field(description='New weights from trainer to engines, s.')
    switch: float = Field(0.0, description="Colocated: the engine's sleep after the rollout, plus the training state "
                         "to the host and back when it is offloaded; where the trainers keep their states, the "
                         "framework's own optimizer round trip to the host around the log-prob passes, if it makes "
                         "one, s.")
    engine_release: float = Field(0.0, description="Colocated: the engine's sleep alone (part of `switch`), s.")
    orchestration: float = Field(0.0, description="The target framework's own work per step between rollout and "
                                 "update (data preparation, advantages, transfers; frameworks/runtime.yaml), s.")


class Throughput(_Out):
    tokens_per_s: float = Field(description='Trained tokens per second: samples x (prompt + mean response) / step.')
    tokens_per_s_per_gpu: float = Field(description='The same per GPU used.')
    samples_per_s: float = Field(description='Responses per second.')


class Metrics(_Out):
    mfu: float = Field(description='Model FLOPs of the step / (step time x peak of the GPUs used).')
    gpu_utilization: float = Field(description='Busy GPU-seconds / (GPUs used x step time).')
    gen_train_ratio: float = Field(description='Generation side time / training side time.')
    comm_fraction: float = Field(description='Exposed training communication plus weight sync / step time.')
    memory_utilization: float = Field(description='Highest role memory / GPU memory.')
    bound_tokens_per_s: float = Field(description='Roofline of the whole cluster (docs/model.md section 5).')
    efficiency: float = Field(description='tokens_per_s / bound_tokens_per_s.')


class SolverInfo(_Out):
    wall_s: float | None = Field(description="Solve time; null in deterministic mode, whose output must not "
                                 "depend on the clock (time it from outside, e.g. benchmarks/solve_examples.py).")
    proven_optimal: bool = Field(description="True only when CP-SAT proved the plan optimal over the whole legal "
                                 "space of layouts (every candidate the rule table allows, less only those a "
                                 "dominance rule shows cannot win).")
    gap: float = Field(description='Relative gap between the plan and the best bound (0 when optimal).')
    variables: int = Field(description='Variables of the CP-SAT program.')
    candidates: int = Field(description="Non-dominated candidates the program chose among.")
    layouts_scored: int = Field(0, description="Layouts the performance model scored during enumeration.")
    status_name: str = Field("", description="CP-SAT's status.")
    stopped_by: str | None = Field(None, description="What stopped the search before a proof (the time limit), "
                                   "when the status is feasible; null when proven optimal.")


class Alternative(_Out):
    summary: str = Field(description='Mode, GPUs and degrees of the runner-up.')
    tokens_per_s: float = Field(description='Its throughput.')
    gap: float = Field(description="Throughput shortfall against the chosen plan, as a fraction.")
    why: str = Field(description='The phases that made it lose.')


class Plan(Layout):
    plan_version: Literal[1] = Field(PLAN_VERSION, description="Version of this output format (`rlsolve schema "
                                     "--plan` prints it); raised when a field is renamed, removed or changes "
                                     "meaning.")
    status: Literal["optimal", "feasible", "estimate", "infeasible"] = Field(
        description="optimal: proven by CP-SAT; feasible: best found within the time limit; estimate: a "
                    "given layout re-scored.")
    objective: Objective = Field(description="What was optimized and its value.")
    memory_gb_per_gpu: MemorySection = Field(description="Memory per GPU of each role, GB.")
    time_s: TimeSection = Field(description="Seconds per step and per phase.")
    throughput: Throughput = Field(description="Trained tokens and samples per second.")
    metrics: Metrics = Field(description="Utilization, communication share and the roofline.")
    solver: SolverInfo | None = Field(None, description="Proof and size of the program (absent for estimates).")
    alternatives: list[Alternative] = Field(default_factory=list, description="Runner-up plans and why they lost.")
    explanation: list[str] = Field(default_factory=list, description="Bottleneck phase and binding constraints.")
    validation: dict[str, Any] | None = Field(None, description="Measurements of `rlsolve validate`, when run.")

    def layout(self) -> Layout:
        return Layout.model_validate(self.model_dump(include=set(Layout.model_fields)))


LAYOUT_KEYS = tuple(Layout.model_fields)
