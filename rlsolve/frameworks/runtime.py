"""Load runtime.yaml: how each framework runs a step where its config leaves a choice open (the
defaults `rlsolve cases` uses to rebuild a published run's layout). Pydantic, extra="forbid"."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from rlsolve.reader import parse_yaml

Strategy = Literal["megatron", "fsdp", "fsdp2", "deepspeed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sourced(_Strict):
    source: str = Field(min_length=10, description="Where the fact is read: the release and its file.")


class _Str(_Sourced):
    value: str


class _Int(_Sourced):
    value: int


class _OptInt(_Sourced):
    value: int | None


class _Bool(_Sourced):
    value: bool


class _BoolUntil(_Bool):
    # the fact holds for the framework's releases before this one (None: every release read)
    until_version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")


class _Float(_Sourced):
    value: float


class _FloatUntil(_Float):
    # the fact holds for the framework's releases before this one (None: every release read)
    until_version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")


class _FsdpCopyBytes(_Sourced):
    value: dict[Literal["forward", "backward"], float]
    # the fact holds for this training strategy of the framework only (None: every FSDP it runs);
    # a plan that names no strategy gets the framework's default train_strategy
    strategy: Strategy | None = None


FsdpTrainerKey = Literal["weights", "grads", "optimizer", "gathered_layer", "root", "output_grad"]
FSDP_TRAINER_BYTES_KEYS = get_args(FsdpTrainerKey)


class _FsdpTrainerBytes(_Sourced):
    # bytes per parameter an FSDP trainer holds: sharded (weights, grads, optimizer, each divided over the
    # sharding group) and in flight (gathered_layer: per parameter of one decoder layer, the layers gathered and
    # the gradients being reduced at the peak; root: per parameter of the root unit, embedding and output layer,
    # kept gathered through a pass; output_grad: per output-layer parameter, its unsharded gradient)
    value: dict[FsdpTrainerKey, float]
    strategy: Strategy | None = None


class _BoolForStrategy(_Bool):
    # the fact holds for this training strategy of the framework only (None: every one it runs)
    strategy: Strategy | None = None


class _FloatForStrategy(_Float):
    # the fact holds for this training strategy of the framework only (None: every one it runs)
    strategy: Strategy | None = None


class _IntUntilForStrategy(_Sourced):
    value: int
    # the fact holds for this training strategy of the framework only (None: every one it runs) ...
    strategy: Strategy | None = None
    # ... in the framework's releases before this one (None: every release read)
    until_version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")


class _ElementwiseBytes(_Sourced):
    value: dict[Literal["rms_norm", "rotary", "gated_activation"], float]
    # the fact holds for the framework's releases before this one (None: every release read)
    until_version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")


Mode = Literal["colocated", "sync", "async"]


class _ModeBools(_Sourced):
    # a yes/no fact per mode the framework runs (a mode it does not run has no key)
    value: dict[Mode, bool]


class FrameworkRuntime(_Strict):
    train_strategy: _Str
    micro_batch: _Int
    sequence_packing: _Bool
    reference: _Str
    train_offload_during_rollout: _Bool
    gpu_memory_utilization: _Float
    max_num_seqs: _OptInt
    orchestration_s_per_step: _Float
    # the single controller's work outside the named phases, per sample of the step, in the releases before
    # `until_version`, where it stands for all of that work (orchestration_s_per_step not charged; None: not read)
    driver_us_per_sample: _FloatUntil | None = None
    rollout_logprobs: _Bool
    # per mode: the step's samples are split over the engines in fixed shares before any response ends, and the
    # step waits for every engine's share (False: requests go to the engines as they free up, with no barrier
    # per step at each engine)
    fixed_engine_shares: _ModeBools
    # the engine is asked for the sampled tokens' log-probs in the releases before `until_version`
    # (an earlier default that rollout_logprobs, read in the current release, no longer holds; None: not read)
    earlier_rollout_logprobs: _BoolUntil | None = None
    # the framework's asynchronous (off-policy) mode drives vLLM's AsyncLLM, built without max_num_seqs
    # (None: not read; the engine's LLM-class default applies)
    async_engine_when_async: _Bool | None = None
    # ... and in every mode (None: not read)
    async_engine_always: _Bool | None = None
    # sequences per log-prob micro-batch (None: not read; a row must state it or the training
    # micro-batch applies)
    logprob_micro_batch: _Int | None = None
    # micro-batches of the framework's dynamic batching (not packing) rounded to this length (None: not read)
    dynamic_batching_round: _Int | None = None
    # RL-specific costs of the training and log-prob passes, where read in the framework's source
    # (None: not read; the model's own physics applies)
    reference_swap_copies: _Int | None = None
    # how many of those copies go into host memory allocated afresh for them each step (pinned: the
    # policy's weights copied out); None: not read, every copy at PCIe speed
    reference_swap_fresh_host_copies: _Int | None = None
    # the reference is an FSDP module of its own, sharded as the policy is, with its parameters in host
    # memory (FSDP CPUOffload): each unshard copies the local shard in again, so every forward micro-batch
    # of the reference pass copies the rank's shard (None: not read; one copy per step of its weights)
    reference_fsdp_cpu_offload: _Bool | None = None
    # an engine over more than one GPU runs on vLLM's 'ray' executor backend (one GPU: the uni executor; None: not
    # read): its engine core schedules synchronously where that backend cannot schedule asynchronously
    engine_ray_executor_multi_gpu: _Bool | None = None
    # its synchronous engines are vLLM's LLM class with VLLM_ENABLE_V1_MULTIPROCESSING=0: the output processor
    # runs in the engine core's thread (None: not read)
    engine_inproc_llm: _Bool | None = None
    logit_fp32_bytes_forward: _Float | None = None
    pipeline_pads_packed_micro_batches: _Bool | None = None
    fsdp_grad_reduce_bytes_per_param: _Float | None = None
    logit_fp32_bytes_backward: _FloatUntil | None = None
    loss_per_packed_sequence: _Bool | None = None
    fsdp_copy_bytes_per_param: _FsdpCopyBytes | None = None
    # what its FSDP trainer holds per parameter, sharded and in flight (None: not read; the model's ZeRO-3 count,
    # 16-bit weights and gradients and 12 bytes of optimizer, nothing in flight)
    fsdp_trainer_bytes_per_param: _FsdpTrainerBytes | None = None
    fsdp_model_elementwise_bytes: _ElementwiseBytes | None = None
    # the FSDP trainer pads every packed training micro-batch to the token budget (None: not read; the bins'
    # own lengths)
    fsdp_pads_packed_to_budget: _BoolForStrategy | None = None
    # the FSDP trainer's root unit holds the embedding, final norm and output layer: their all-gather opens
    # every pass and their gradients' reduce-scatter closes every backward, with nothing to hide under (None:
    # not read; every parameter is gathered with the layers)
    fsdp_root_holds_embeddings: _BoolForStrategy | None = None
    # bytes per hidden element per decoder layer that the FSDP trainer's mixed-precision policy moves casting
    # each layer's output to fp32 and the next layer's input back to bf16, in a forward (the backward the same)
    # (None: not read; none charged)
    fsdp_layer_output_cast_bytes: _FloatForStrategy | None = None
    # tensor ops per parameter tensor of the FSDP trainer's optimizer step where it runs torch's single-tensor
    # Adam over DTensor parameters (foreach and fused off), each a DTensor op dispatch on the host (None: not read;
    # the fused step's traffic only)
    fsdp_optimizer_tensor_ops: _IntUntilForStrategy | None = None
    # DTensor ops per parameter tensor the FSDP trainer dispatches on the host around each optimizer step beyond the
    # optimizer's own (the gradient-norm and clipping passes over the DTensor gradients) (None: not read; none)
    fsdp_grad_norm_tensor_ops: _IntUntilForStrategy | None = None
    # host synchronisations per decoder layer in a forward over micro-batches without padding (sequences
    # flattened into one row, told apart by their position ids): the attention derives its varlen arguments
    # from the position ids on the host, so the host waits for the GPU there in every layer (None: not read;
    # the host runs ahead of the GPU)
    packed_attention_host_syncs_per_layer: _Int | None = None
    # all-gathers of a decoder layer's sequence-sharded inputs in a forward where the FSDP trainer runs tensor
    # parallelism with sequence parallelism: one per column-parallel projection its plan gives the sharded norm
    # output to (None: not read; one before the attention and one before the MLP, the model's count)
    fsdp_sp_input_gathers_per_layer: _IntUntilForStrategy | None = None
    # bytes per parameter the FSDP trainer all-gathers to build the full tensors it hands the engine
    # at each refit (None: not read; no gather is charged)
    fsdp_refit_gather_bytes_per_param: _Float | None = None
    # bytes per parameter a Megatron (sharded-optimizer) trainer gathers over its tensor- and pipeline-parallel
    # groups to build the full tensors of every refit (None: not read; none charged)
    megatron_refit_gather_bytes_per_param: _FloatUntil | None = None
    # bytes per parameter of its local shard an FSDP trainer copies at each swap of the reference into the
    # policy's model (None: not read; the reference's 16-bit weights)
    fsdp_reference_swap_bytes_per_param: _FloatUntil | None = None
    # a disaggregated refit broadcasts every full tensor from one trainer rank to all engine GPUs
    # (None: not read; each engine GPU receives its own shard)
    refit_broadcasts_full_model: _Bool | None = None
    # HBM bytes per parameter the engine moves quantizing the refit's bf16 weights to FP8 itself, on
    # every engine GPU (None: not read; none charged)
    fp8_refit_quantize_bytes_per_param: _Float | None = None
    # a colocated refit first moves the trainer's offloaded states to host memory, inside the framework's
    # refit timer (None: not read; the offload is timed with the switch)
    refit_offloads_trainer_states: _Bool | None = None
    # the trainer moves its optimizer states to host memory before the log-prob passes and back before the update,
    # every step (None: not read; they stay on the GPUs unless the colocated rollout needs the memory)
    logprob_prep_offloads_optimizer: _BoolUntil | None = None
    # its Megatron trainer runs without Megatron-Core's gradient_accumulation_fusion: every weight-gradient GEMM
    # writes a new 16-bit gradient that the DDP backward hook then adds into the main-gradient buffer (None: not
    # read; the GEMM accumulates into the buffer itself)
    megatron_wgrad_unfused: _Bool | None = None


class _ZeroByStrategy(_Sourced):
    value: dict[Strategy, int]


class _KernelByStrategy(_Sourced):
    value: dict[Strategy, Literal["flash_attn_2", "transformer_engine"]]


class _EngineCap(_Sourced):
    value: dict[Literal["large", "small"], int]


class _ByRelease(_Sourced):
    # a fact that changed between an engine's releases: {first release it was read to hold from: value}
    value: dict[str, float]

    def at(self, version: str | None) -> float:
        """The value at `version`: the entry of the last release at or before it (the first entry before them
        all; None: the newest read)."""
        table = sorted((release(k), v) for k, v in self.value.items())
        if version is None:
            return table[-1][1]
        at = release(version)
        return next((v for r, v in reversed(table) if r <= at), table[0][1])


class _FloatList(_Sourced):
    value: list[float]


class TrtllmDecodeAttention(_Strict):
    """Which kernel TensorRT-LLM's decode attention runs, and so how often it reads each KV head's cache."""
    kv_reads_per_query_head: _Bool
    xqa_default_from: _Str
    xqa_q_heads_per_kv: _Int
    xqa_head_sizes: _FloatList
    xqa_min_block_factor: _Float


class TrtllmMoe(_Strict):
    """What TensorRT-LLM's MoE plugin runs: the experts' precision, the grouped GEMM's tensor-core path on Hopper,
    and where a built-from-config engine's random weights send the tokens."""
    fp8_experts_from: _Str
    sm90_moe_gemm_from: _Str
    random_weights_nan_after_first_moe_layer: _Bool
    nan_rows_gate_to_first_expert: _Bool


class Runtime(_Strict):
    frameworks: dict[Literal["verl", "openrlhf", "nemo-rl"], FrameworkRuntime]
    zero_stage_by_strategy: _ZeroByStrategy
    train_attention_kernel: _KernelByStrategy
    engine_max_num_seqs: _EngineCap
    engine_context_max_num_seqs: _Int
    engine_v1_default_from: _Str
    engine_async_scheduling_default_from: _Str
    engine_ray_async_scheduling_from: _Str
    engine_profile_sampler_bytes_per_logit: _ByRelease
    engine_inproc_output_us_per_seq: _ByRelease
    engine_runner_us_per_seq: _ByRelease
    trtllm_decode_attention: TrtllmDecodeAttention
    trtllm_paged_kv_cache_default_from: _Str
    trtllm_moe: TrtllmMoe


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    text = resources.files("rlsolve.frameworks").joinpath("runtime.yaml").read_text()
    return Runtime.model_validate(parse_yaml(text, what="rlsolve/frameworks/runtime.yaml"))


def layout_strategy(tp: int, pp: int, cp: int, ep: int, zero_stage: int) -> str:
    """The training strategy a layout runs where it names none (the solver's layouts): FSDP for ZeRO-3 without model
    parallelism, else Megatron-Core (the plan's training framework: solver/api.py framework_for, before a target
    that lacks it moves the export to another of its strategies)."""
    return "fsdp" if tp == pp == cp == ep == 1 and zero_stage == 3 else "megatron"


def train_attention_kernel(strategy: str) -> str:
    """The attention kernel a training strategy's backend runs (`train_attention_kernel`): flash_attn_2 for the
    Hugging Face modeling code of the FSDP and DeepSpeed trainers, transformer_engine for Megatron-Core (with its
    distributed optimizer or Megatron-FSDP)."""
    return runtime().train_attention_kernel.value[strategy]


@dataclass(frozen=True)
class FrameworkCosts:
    """What a target framework adds to every step the physics does not: its own orchestration,
    the engine's log-prob returns, and how its training and log-prob passes run: host<->GPU
    weight copies per reference pass (1: the reference's weights streamed in) and how many of them
    go into freshly allocated host memory (0: every one at PCIe speed), bytes moved per
    fp32 logit in a forward's log-prob computation (None: the model's own count), whether
    pipeline-parallel training pads every packed micro-batch to the longest, and the bytes per
    parameter its FSDP reduce-scatters gradients in (None: the parameters' 16 bits), and the bytes
    per element of (RMSNorm, rotary, gated activation) of the modeling code its FSDP path trains
    (None: the model's fused count); the bytes per fp32 logit its training loss's vocab-parallel
    log-prob backward moves (None: the model's count), and whether that loss runs sequence by
    sequence over a packed micro-batch (each sequence's logits a slice of the micro-batch's); the
    bytes per parameter its FSDP copies on the compute stream in a forward and a backward (None:
    not read, none charged); whether its disaggregated refit broadcasts the whole model to every
    engine GPU, and whether its colocated refit timer holds the trainer's offload to host memory; whether its
    trainer sends the optimizer states to host memory and back around the log-prob passes every step; whether its
    Megatron trainer adds each weight gradient into the main gradient apart from the GEMM (no
    gradient_accumulation_fusion); the HBM
    bytes per parameter its FP8 engines move quantizing each refit; the bytes
    per parameter its FSDP trainer all-gathers into full tensors for every refit, and its Megatron
    trainer over the tensor- and pipeline-parallel groups (None: none charged); the bytes per
    parameter of its local shard its FSDP trainer copies at each swap of the reference into the
    policy's model (None: the reference's 16-bit weights); whether its FSDP trainer pads every packed
    training micro-batch to the token budget, and whether its FSDP root unit holds the embedding and output
    layer (gathered before a pass's first layer, reduce-scattered after its backward's last); the bytes per
    hidden element per layer its FSDP mixed-precision policy moves casting each layer's output to fp32 and
    back (None: none charged); the tensor ops per parameter tensor of its FSDP trainer's single-tensor Adam over
    DTensor parameters, each dispatched on the host (None: the fused step); the host synchronisations per decoder
    layer of its forward over micro-batches without padding (0: none read); the modes in which it splits a step's
    samples over the engines in fixed shares (the step waits for the slowest engine's share)."""

    orchestration_s: float
    rollout_logprobs: bool
    # the concurrent-sequence cap its engines run at where its config sets none, in every mode (None: vLLM's
    # LLM-class default for the GPU, engine_default_max_num_seqs)
    engine_unset_max_num_seqs: int | None = None
    reference_swap_copies: int = 1
    reference_swap_fresh_copies: int = 0
    reference_fsdp_cpu_offload: bool = False
    engine_ray_multi_gpu: bool = False
    logit_fp32_bytes_forward: float | None = None
    pipeline_pads_packed: bool = False
    fsdp_grad_reduce_bytes: float | None = None
    fsdp_elementwise_bytes: tuple[float, float, float] | None = None
    logit_fp32_bytes_backward: float | None = None
    loss_per_packed_sequence: bool = False
    fsdp_copy_bytes: tuple[float, float] | None = None
    # (weights, grads, optimizer, gathered_layer, root, output_grad) bytes per parameter its FSDP trainer holds
    # (runtime.yaml fsdp_trainer_bytes_per_param; None: the model's ZeRO-3 count)
    fsdp_trainer_bytes: tuple[float, ...] | None = None
    fsdp_refit_gather_bytes: float | None = None
    megatron_refit_gather_bytes: float | None = None
    fsdp_reference_swap_bytes: float | None = None
    refit_full_broadcast: bool = False
    fp8_refit_quantize_bytes: float | None = None
    refit_offloads_trainer: bool = False
    logprob_prep_offloads_optimizer: bool = False
    megatron_wgrad_unfused: bool = False
    fsdp_pads_packed_to_budget: bool = False
    fsdp_root_embeddings: bool = False
    fsdp_layer_cast_bytes: float | None = None
    fsdp_optimizer_tensor_ops: int | None = None
    fsdp_grad_norm_tensor_ops: int | None = None
    packed_attention_syncs: int = 0
    fsdp_sp_input_gathers: int | None = None
    fixed_share_modes: frozenset = frozenset({"colocated", "sync", "async"})


def engine_default_max_num_seqs(gpu_memory_bytes: float, gpu_name: str) -> int:
    """vLLM's LLM-class max_num_seqs when none is given (`engine_max_num_seqs`): the large value on GPUs
    reporting at least 70 GiB other than A100 (vLLM compares the device's total memory and its name)."""
    caps = runtime().engine_max_num_seqs.value
    return caps["large"] if gpu_memory_bytes >= 70 * 2**30 and "A100" not in gpu_name else caps["small"]


def unset_max_num_seqs(fw: FrameworkRuntime) -> int | None:
    """The concurrent-sequence cap a framework's engines run at, in every mode, where its config sets none: its
    own default, else the scheduler's engine-context default where it always builds vLLM's AsyncLLM without the
    field, else None (vLLM's LLM-class default for the GPU, `engine_default_max_num_seqs`)."""
    if fw.max_num_seqs.value is not None:
        return int(fw.max_num_seqs.value)
    if fw.async_engine_always is not None and fw.async_engine_always.value:
        return int(runtime().engine_context_max_num_seqs.value)
    return None


def release(text: str) -> tuple[int, ...]:
    """A release string (0.3.0, v0.10.1.post1) as a comparable tuple of its first three numbers."""
    parts = re.findall(r"\d+", str(text))[:3]
    if not parts:
        raise ValueError(f"a release looks like 0.3.0, got {text!r}")
    return tuple(int(p) for p in parts)


def _holds(entry, version: str | None):
    """The entry where it holds for `version`: a fact with `until_version` only for an earlier
    stated release (a plan names no release, so it gets the current one's facts)."""
    until = getattr(entry, "until_version", None)
    if entry is None or until is None:
        return entry
    return entry if version is not None and release(version) < release(until) else None


def _for_strategy(entry, fw: FrameworkRuntime, strategy: str | None):
    """The entry where it holds for the training strategy run (`strategy`, else the framework's
    default train_strategy): a fact read for one strategy (FSDP2's copies) only for that one."""
    want = getattr(entry, "strategy", None)
    if entry is None or want is None:
        return entry
    return entry if (strategy or fw.train_strategy.value) == want else None


def _earlier_logprobs(fw: FrameworkRuntime, version: str | None) -> bool:
    """True where the stated release predates the change that stopped asking the engine for log-probs."""
    entry = _holds(fw.earlier_rollout_logprobs, version)
    return entry is not None and entry.value


def orchestration_s(fw: FrameworkRuntime, version: str | None = None, samples: int | None = None) -> float:
    """The framework's own work per step outside the named phases: `samples` x driver_us_per_sample where that
    fact holds for the release (its driver scores and reshuffles the batch sample by sample), else
    orchestration_s_per_step."""
    entry = _holds(fw.driver_us_per_sample, version)
    if entry is not None and samples:
        return entry.value * 1e-6 * samples
    return fw.orchestration_s_per_step.value


def framework_costs(framework: str, version: str | None = None, strategy: str | None = None,
                    samples: int | None = None) -> FrameworkCosts:
    """The target's costs (of its release `version` where facts change between releases, and of
    the training `strategy` it runs where a fact holds for one: None, the framework's default; its orchestration
    for `samples` per step where it grows with them, `orchestration_s`); `any` (no framework chosen) takes the cheapest framework's, so a plan for any framework is
    never charged for one it may not run on."""
    fws = runtime().frameworks
    chosen = list(fws.values()) if framework not in fws else [fws[framework]]
    logit = [f.logit_fp32_bytes_forward for f in chosen]
    reduce = [f.fsdp_grad_reduce_bytes_per_param for f in chosen]
    eager = [_holds(f.fsdp_model_elementwise_bytes, version) for f in chosen]
    logit_bwd = [_holds(f.logit_fp32_bytes_backward, version) for f in chosen]
    copies = [_for_strategy(f.fsdp_copy_bytes_per_param, f, strategy) for f in chosen]
    held = [_for_strategy(f.fsdp_trainer_bytes_per_param, f, strategy) for f in chosen]
    gather = [f.fsdp_refit_gather_bytes_per_param for f in chosen]
    gather_mcore = [_holds(f.megatron_refit_gather_bytes_per_param, version) for f in chosen]
    swap = [_holds(f.fsdp_reference_swap_bytes_per_param, version) for f in chosen]
    quant = [f.fp8_refit_quantize_bytes_per_param for f in chosen]
    casts = [_for_strategy(f.fsdp_layer_output_cast_bytes, f, strategy) for f in chosen]
    adam_ops = [_for_strategy(_holds(f.fsdp_optimizer_tensor_ops, version), f, strategy) for f in chosen]
    norm_ops = [_for_strategy(_holds(f.fsdp_grad_norm_tensor_ops, version), f, strategy) for f in chosen]
    syncs = [f.packed_attention_host_syncs_per_layer for f in chosen]
    sp_gathers = [_for_strategy(_holds(f.fsdp_sp_input_gathers_per_layer, version), f, strategy) for f in chosen]

    # a mode's shares are fixed where every chosen framework that runs the mode fixes them (`any`: the cheaper)
    fixed = frozenset(m for m in ("colocated", "sync", "async")
                      if all(f.fixed_engine_shares.value.get(m, True) for f in chosen))

    def flag(name: str) -> bool:  # a yes/no fact held by every chosen framework (for the release and strategy run)
        return all((e := _for_strategy(_holds(getattr(f, name), version), f, strategy)) is not None and e.value
                   for f in chosen)
    unset = {unset_max_num_seqs(f) for f in chosen}
    return FrameworkCosts(orchestration_s=min(orchestration_s(f, version, samples) for f in chosen),
                          engine_unset_max_num_seqs=unset.pop() if len(unset) == 1 else None,
                          rollout_logprobs=all(f.rollout_logprobs.value or _earlier_logprobs(f, version)
                                               for f in chosen),
                          reference_swap_copies=min(f.reference_swap_copies.value if f.reference_swap_copies else 1
                                                    for f in chosen),
                          reference_swap_fresh_copies=min(f.reference_swap_fresh_host_copies.value
                                                          if f.reference_swap_fresh_host_copies else 0
                                                          for f in chosen),
                          reference_fsdp_cpu_offload=flag("reference_fsdp_cpu_offload"),
                          engine_ray_multi_gpu=flag("engine_ray_executor_multi_gpu"),
                          logit_fp32_bytes_forward=None if None in logit else min(x.value for x in logit),
                          pipeline_pads_packed=flag("pipeline_pads_packed_micro_batches"),
                          fsdp_grad_reduce_bytes=None if None in reduce else min(x.value for x in reduce),
                          fsdp_elementwise_bytes=None if None in eager else tuple(
                              min(x.value[k] for x in eager) for k in ("rms_norm", "rotary", "gated_activation")),
                          logit_fp32_bytes_backward=None if None in logit_bwd else min(x.value for x in logit_bwd),
                          loss_per_packed_sequence=flag("loss_per_packed_sequence"),
                          fsdp_copy_bytes=None if None in copies else tuple(
                              min(x.value[k] for x in copies) for k in ("forward", "backward")),
                          fsdp_trainer_bytes=None if None in held else tuple(
                              min(x.value[k] for x in held) for k in FSDP_TRAINER_BYTES_KEYS),
                          fsdp_refit_gather_bytes=None if None in gather else min(x.value for x in gather),
                          megatron_refit_gather_bytes=None if None in gather_mcore else min(
                              x.value for x in gather_mcore),
                          fsdp_reference_swap_bytes=None if None in swap else min(x.value for x in swap),
                          refit_full_broadcast=flag("refit_broadcasts_full_model"),
                          fp8_refit_quantize_bytes=None if None in quant else min(x.value for x in quant),
                          refit_offloads_trainer=flag("refit_offloads_trainer_states"),
                          logprob_prep_offloads_optimizer=flag("logprob_prep_offloads_optimizer"),
                          megatron_wgrad_unfused=flag("megatron_wgrad_unfused"),
                          fsdp_pads_packed_to_budget=flag("fsdp_pads_packed_to_budget"),
                          fsdp_root_embeddings=flag("fsdp_root_holds_embeddings"),
                          fsdp_layer_cast_bytes=None if None in casts else min(x.value for x in casts),
                          fsdp_optimizer_tensor_ops=None if None in adam_ops else min(x.value for x in adam_ops),
                          fsdp_grad_norm_tensor_ops=None if None in norm_ops else min(x.value for x in norm_ops),
                          packed_attention_syncs=0 if None in syncs else min(x.value for x in syncs),
                          fsdp_sp_input_gathers=None if None in sp_gathers else min(x.value for x in sp_gathers),
                          fixed_share_modes=fixed)
