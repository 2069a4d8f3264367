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
    generation: RoleGPUs
    training: RoleGPUs
    auxiliary: RoleGPUs | None = Field(None, description="GPUs of another pool that run the reference and/or "
                                       "reward forwards (placement 'auxiliary'), e.g. older nodes.")


class PlacementSection(_Out):
    reference: Placement = Field("training", description="Where the reference forward runs.")
    reward: Placement = Field("cpu", description="cpu = rule-based verifier; otherwise where the reward model runs.")
    value: Placement = Field("none", description="Where the critic lives (PPO).")


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
    ep: int = Field(1, gt=0, description="Expert parallel degree; carves the dp*cp ranks (Megatron).")
    vp: int = Field(1, gt=0, description="Virtual pipeline stages per rank (interleaved 1F1B).")
    zero_stage: int = Field(1, ge=0, le=3, description="0 none, 1 optimizer (Megatron distributed optimizer), "
                            "2 +gradients, 3 +parameters (FSDP).")
    micro_batch: int = Field(1, gt=0, description="Sequences per micro-batch per model replica.")
    grad_accum: int = Field(1, gt=0, description="Micro-batches per optimizer step per data-parallel rank.")
    recompute: Recompute = Field("none", description="Activation recompute.")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism (only with tp > 1).")


class Parallelism(_Out):
    generation: GenParallel
    training: TrainParallel


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

    pipeline: Pipeline
    resource_allocation: ResourceAllocation
    placement: PlacementSection = Field(default_factory=PlacementSection)
    parallelism: Parallelism
    optimization: Optimization = Field(default_factory=Optimization)


class Objective(_Out):
    name: str
    value: float
    unit: str


class GenMemory(_Out):
    weights: float = Field(description="Policy weights (plus reference/reward models placed here), GB.")
    kv_cache: float
    activations: float
    other: float = Field(description="CUDA context, NCCL buffers, prefill workspace, GB.")
    colocated_training: float = Field(0.0, description="Training state kept on the GPU during rollout (colocated), GB.")
    total: float
    capacity: float


class TrainMemory(_Out):
    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float = Field(description="CUDA context, NCCL buffers, allocator fragmentation, GB.")
    other_models: float = Field(0.0, description="Reference/reward weights and critic state kept here, GB.")
    total: float
    capacity: float


class MemorySection(_Out):
    generation: GenMemory
    training: TrainMemory


class TimeSection(_Out):
    step: float
    prefill: float
    decode: float
    reward: float
    reference: float
    value: float
    old_logprob: float = 0.0
    train: float
    weight_sync: float
    switch: float = 0.0


class Throughput(_Out):
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    samples_per_s: float


class Metrics(_Out):
    mfu: float
    gpu_utilization: float
    gen_train_ratio: float
    comm_fraction: float
    memory_utilization: float
    bound_tokens_per_s: float
    efficiency: float


class SolverInfo(_Out):
    wall_s: float | None = Field(description="Solve time; null in deterministic mode, whose output must not "
                                 "depend on the clock (time it from outside, e.g. benchmarks/solve_examples.py).")
    proven_optimal: bool
    gap: float
    variables: int
    candidates: int = Field(description="Non-dominated candidates the program chose among.")
    layouts_scored: int = Field(0, description="Layouts the performance model scored during enumeration.")
    status_name: str = ""


class Alternative(_Out):
    summary: str
    tokens_per_s: float
    gap: float = Field(description="Throughput shortfall against the chosen plan, as a fraction.")
    why: str


class Plan(Layout):
    status: Literal["optimal", "feasible", "estimate", "infeasible"]
    objective: Objective
    memory_gb_per_gpu: MemorySection
    time_s: TimeSection
    throughput: Throughput
    metrics: Metrics
    solver: SolverInfo | None = None
    alternatives: list[Alternative] = Field(default_factory=list)
    explanation: list[str] = Field(default_factory=list)
    validation: dict[str, Any] | None = None

    def layout(self) -> Layout:
        return Layout.model_validate(self.model_dump(include=set(Layout.model_fields)))


LAYOUT_KEYS = tuple(Layout.model_fields)
