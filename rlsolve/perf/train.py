"""Training (forward+backward) time and memory of one model on one layout.

Per micro-batch, per pipeline stage: GEMMs at their per-shard shapes (rate by shape from
the catalog), flash attention at its own rate, elementwise traffic at HBM speed, and the
collectives of each parallel dimension at the bandwidth of the tier its group spans
(rank order TP innermost, then CP, then EP/DP, PP outermost). Then the 1F1B schedule, the
data-parallel gradient exchange and the optimizer step. Formulas and sources: docs/model.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from rlsolve.frameworks.runtime import layout_strategy, train_attention_kernel
from rlsolve.models import Architecture
from rlsolve.perf.generate import attention_len, expected_max_std_normal, length_quantiles
from rlsolve.perf.hw import GB, Device, constants

BF16 = 2.0
FP32_ADAM_MOMENT_BYTES = 4.0
# Bytes per parameter of the optimizer's master weights: a full fp32 copy (Megatron-Core's distributed
# optimizer without the precision-aware option, DeepSpeed, torch FSDP mixed precision); 2 where the optimizer
# keeps only the 16 low bits of each fp32 master weight, the high 16 being the bf16 parameter itself:
# Transformer Engine's FusedAdam store_param_remainders (transformer_engine/pytorch/optimizers/fused_adam.py,
# v2.8, lines 95-99 and 374-375: an int16 state), which Megatron-Core's precision-aware optimizer turns on by
# default for bf16 (megatron/core/optimizer/optimizer_config.py store_param_remainders = True, commit
# cba6b0ed line 64; optimizer/__init__.py line 392), and Apex DistributedFusedAdam's store_param_remainders
# (apex/contrib/optimizers/distributed_fused_adam.py, commit b7a4acc1, lines 462-467), which NeMo 1.x sets
# for bf16 O2 parameters with an fp32 optimizer (nemo/collections/nlp/models/language_modeling/
# megatron_base_model.py, tag r2.0.0rc1, lines 797-806); 0 where the optimizer's dtype is the parameters'
# own and it steps them in place (same NeMo lines: store_params False when the optimizer dtype is the
# model's, e.g. optim.dtype bf16).
FP32_MASTER_BYTES = 4.0
MASTER_REMAINDER_BYTES = 2.0
# Bytes per parameter of the main-gradient buffers full training accumulates into. Megatron-LM
# with bf16 parameters accumulates and reduces them in fp32 (arguments.py turns on
# accumulate_allreduce_grads_in_fp32 for bf16; "bf16 parameters, fp32 gradients: 18 bytes per
# parameter, 6 + 12/d with the distributed optimizer", docs.nvidia.com/megatron-core/
# developer-guide/latest/api-guide/dist_optimizer.html). Megatron-Core's DDP config keeps them
# in the parameters' dtype unless grad_reduce_in_fp32, which NeMo-RL's recipes leave off
# (NVIDIA-NeMo/RL examples/configs/grpo_math_1B_megatron.yaml: grad_reduce_in_fp32: false).
FP32_MAIN_GRAD_BYTES = 4.0
BF16_MAIN_GRAD_BYTES = 2.0
# Bytes per trained parameter and micro-batch a Megatron trainer without gradient_accumulation_fusion moves
# beyond the fused accumulation: its weight-gradient GEMM writes a new 16-bit gradient (2) that Megatron-Core
# DDP's backward hook reads back (2) adding it into the main gradient (param.main_grad.add_(param.grad.data);
# the main gradient's read and write are the fused GEMM's as well, charged in stage_times). See
# frameworks/runtime.yaml megatron_wgrad_unfused.
UNFUSED_WGRAD_BYTES = 2 * BF16
OFFLOADS = ("none", "optimizer", "params_optimizer")
FA_BWD_OVER_FWD = 2.5  # FlashAttention-2 backward runs 5 matmuls to the forward's 2 (Dao 2023)
# Unfused (pre-FlashAttention) attention materialises the score matrix. Bytes moved per score
# element, forward: QK^T writes it (2), the fused scale-mask-softmax reads and writes it (4),
# dropout reads it and writes output and mask (5), the AV GEMM reads it (2); the backward
# moves about twice that. The stored part is Korthikanti et al. 2022's 5as^2b term.
UNFUSED_SCORE_BYTES_FWD = 13.0
UNFUSED_SCORE_BYTES_STORED = 5.0


@dataclass(frozen=True)
class TrainLayout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    zero_stage: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    # with recompute "full": how many layers of each (virtual) stage recompute, the others
    # keep all their activations (Megatron --recompute-method block --recompute-num-layers);
    # 0 = every layer
    recompute_layers: int = 0
    sequence_parallel: bool = True
    attention: str = "flash"  # "flash" (fused kernel) or "unfused" (score matrix in HBM)
    # training state kept in host memory: "optimizer" (fp32 master + Adam moments, stepped on the
    # host: ZeRO-Offload, FSDP CPUOffload) or "params_optimizer" (the weights' shards as well)
    offload: str = "none"
    # main-gradient buffer dtype, bytes per parameter: the memory it takes and the traffic of
    # accumulating every micro-batch into it (default: the parameters' bf16)
    main_grad_bytes: float = BF16_MAIN_GRAD_BYTES
    # with recompute "selective": Megatron-Core's output-discarding recompute modules beyond the
    # attention core (RECOMPUTED_MODULES); () = core_attn only, Megatron-Core's default
    recompute_modules: tuple[str, ...] = ()
    # with recompute "selective": whether the core attention is checkpointed, "core_attn" in
    # Megatron-Core's recompute_modules. Its default list is ["core_attn"]
    # (megatron/core/transformer/transformer_config.py, commit 2edffadb, lines 1373-1374), and the
    # layer checkpoints its core attention only when the list names it (attention.py, same commit,
    # lines 328-331 checkpoint_core_attention, 1143); a recipe's own list replaces the default.
    recompute_core_attn: bool = True
    # Megatron-Core account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split
    # (both, as the recipes set them): the embedding and the loss each take one layer's slot when the
    # layers are split over the pp x vp chunks, so (layers + 2) / (pp * vp) slots per chunk, the first
    # chunk holding one transformer layer fewer beside the embedding and the last one fewer beside the
    # output layer (Megatron-LM megatron/core/transformer/transformer_block.py get_num_layers_to_build,
    # commit d98e8a64 lines 147-199)
    pipeline_split_embedding_loss: bool = False
    # the MoE stack's host-side features (Megatron-Core options): the token dispatcher ("alltoall":
    # NCCL all-to-all, the default; "deepep" or "hybridep": moe_token_dispatcher_type flex with that
    # moe_flex_dispatcher_backend) and CUDA graphs ("none"; "partial": Transformer Engine per-layer
    # graphs of the static parts, cuda_graph_scope attn / moe_router / moe_preprocess;
    # "full_iteration"); see moe_host_efficiency
    moe_dispatcher: str = "alltoall"
    cuda_graphs: str = "none"
    # Megatron-Core overlap_moe_expert_parallel_comm (with delay_wgrad_compute; Megatron-Bridge's
    # moe_a2a_overlap): the 1F1B steady state runs one micro-batch's forward and another's backward
    # layer by layer, each one's expert all-to-all on a second stream under the other's compute
    # (see ep_overlap_exposed)
    moe_a2a_overlap: bool = False
    # Megatron-Core drop-and-pad routing (moe_expert_capacity_factor with
    # moe_pad_expert_input_to_capacity; Megatron-Bridge's apply_moe_token_drop, the runs its
    # performance tables label '(tokendrop)'): every expert receives its fixed capacity, so the shapes
    # are static and the dispatcher never copies the token counts to the host: the all-to-all
    # dispatcher's device-to-host copy and its synchronize are skipped under drop_and_pad
    # (Megatron-LM megatron/core/transformer/moe/token_dispatcher.py _maybe_dtoh_and_synchronize,
    # commit cba6b0ed, line 876), and HybridEP's dispatch is non-blocking when the permuted token
    # count is known, capacity x ranks x local experts under drop-and-pad (same file, commit 55ac708,
    # line 1017; fused_a2a.py line 367). False: dropless, the default (moe_host_sync_us per pass)
    moe_token_drop: bool = False
    # Megatron-Core expert_tensor_parallel_size where a recipe sets it; 0: Megatron's default rule
    # (expert_tp below). Megatron-Core lays the expert grid out as etp x ep x expert-dp over each
    # pipeline stage's tp*cp*dp ranks (megatron/core/parallel_state.py, commit 2edffadb, lines 789-799)
    expert_tp_size: int = 0
    # bytes of each Adam moment (m, v): 4, or 2 where Megatron-Core's precision-aware optimizer keeps
    # them in bf16 (OptimizerConfig use_precision_aware_optimizer with exp_avg_dtype = exp_avg_sq_dtype =
    # bfloat16, megatron/core/optimizer/optimizer_config.py); the fp32 master weights stay
    adam_moment_bytes: float = FP32_ADAM_MOMENT_BYTES
    # bytes per parameter of the optimizer's master weights: 4 (an fp32 copy), 2 (the fp32 copy's low 16
    # bits beside the bf16 parameter) or 0 (the optimizer steps the 16-bit parameters themselves); see
    # FP32_MASTER_BYTES
    master_param_bytes: float = FP32_MASTER_BYTES
    # the training strategy (megatron | fsdp | fsdp2 | deepspeed) whose backend runs the layout, where known (a
    # published row's or a plan's; Megatron-FSDP is megatron at ZeRO-3); "": frameworks.runtime.layout_strategy's.
    # A forward-only model's layout (zero_stage 0) names its trainer's (perf/step.py _aux_layout)
    strategy: str = ""
    # the fused attention kernel a published row names (hardware_db AttentionKernel) where its stack runs another
    # than its backend's (frameworks/runtime.yaml train_attention_kernel), e.g. MosaicML llm-foundry's attn_impl
    # triton (flash_attn_triton); "": the backend's
    attn_kernel: str = ""

    @property
    def optimizer_bytes(self) -> float:
        """Optimizer-state bytes per parameter: the master weights and the two Adam moments."""
        return self.master_param_bytes + 2 * self.adam_moment_bytes

    @property
    def backend(self) -> str:
        """The training strategy run: `strategy` where set, else the one the layout's degrees stand for."""
        return self.strategy or layout_strategy(self.tp, self.pp, self.cp, self.ep, self.zero_stage)

    @property
    def attention_kernel(self) -> str:
        """The fused attention kernel this layout's backend runs (frameworks.runtime.train_attention_kernel, the
        one place of the rule), unless the layout names its own (`attn_kernel`, a published row's stack)."""
        return self.attn_kernel or train_attention_kernel(self.backend)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def sp(self) -> bool:
        return self.sequence_parallel and self.tp > 1

    @property
    def etp(self) -> int:
        return self.expert_tp_size or expert_tp(self.tp, self.dp, self.cp, self.ep)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same expert shard (they reduce its gradients)."""
        return max(1, self.tp * self.dp * self.cp // (self.etp * self.ep))


def layout_with(base: TrainLayout, **fields) -> TrainLayout:
    """`replace(base, **fields)` without re-running the dataclass's __init__ (a plain frozen dataclass with no
    __post_init__: its fields are its __dict__), which the training enumeration would pay ~100k times a solve
    (2.35 us against 0.6 us; a property test checks it equals `replace`). The base's __dict__ is copied whole
    and set as the new one's (object.__setattr__: the frozen class's own refuses): 0.7 us against 1.0 us for
    filling the new instance's empty __dict__ key by key."""
    lay = _new_object(TrainLayout)
    fresh = base.__dict__.copy()
    fresh.update(fields)
    _set_attr(lay, "__dict__", fresh)
    return lay


_new_object, _set_attr = object.__new__, object.__setattr__


def expert_tp(tp: int, dp: int, cp: int, ep: int) -> int:
    """Expert tensor parallelism: Megatron's default (= tp) while ep divides dp*cp; an EP
    group larger than that folds over the TP ranks (MoE parallel folding, arXiv 2504.14960)
    and each expert stays whole on its rank (expert_tensor_parallel_size = 1)."""
    return tp if (dp * cp) % ep == 0 else 1


@dataclass
class TrainTime:
    compute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    ep_comm: float = 0.0
    pp_comm: float = 0.0
    bubble: float = 0.0
    dp_comm: float = 0.0
    optimizer: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def total(self) -> float:
        return (self.compute + self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm
                + self.bubble + self.dp_comm + self.optimizer)

    @property
    def comm(self) -> float:
        return self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.dp_comm

    def scaled(self, k: float) -> "TrainTime":
        return TrainTime(self.compute * k, self.tp_comm * k, self.cp_comm * k, self.ep_comm * k, self.pp_comm * k,
                         self.bubble * k, self.dp_comm * k, self.optimizer * k)


def lora_params(arch: Architecture, rank: int) -> float:
    """Adapter parameters: rank x (in + out) for every linear of every layer."""
    if rank <= 0:
        return 0.0
    h, q, v = arch.hidden, arch.q_width, arch.v_width
    kv = 2 * arch.n_kv_heads * arch.d_head
    mats = 3 if arch.activation == "swiglu" else 2
    width = arch.d_ffn if not arch.is_moe else arch.d_moe_ffn * (arch.experts_per_token + arch.shared_experts)
    per_layer = (h + q + kv) + (v + h) + mats * (h + width)
    return float(rank * per_layer * arch.layers)


# --- per-GPU parameter shares -------------------------------------------------------------

def params_per_gpu(arch: Architecture, tp: int, pp: int, ep: int, etp: int | None = None,
                   stage_layers: int | None = None) -> tuple[float, float]:
    """(non-expert, routed-expert) parameters held by the busiest GPU before ZeRO sharding.

    Layers split evenly over pp (ceil; `stage_layers`: the stage's own count); the embedding and
    the LM head sit on the first and last stage (the same stage when pp == 1); expert weights are
    split by ep and by the expert tensor-parallel degree (= tp, Megatron's default). Memoized per model
    (frozen) and degrees, as `_stored_bytes_per_token_layer` is: the solver asks ~20k times a solve for a few
    hundred sets of degrees."""
    key = (id(arch), tp, pp, ep, etp, stage_layers)
    hit = _PARAMS.get(key)
    if hit is not None and hit[0] is arch:
        return hit[1]
    layer_params = arch.non_expert_params - arch.embedding_params - arch.hidden
    stage_frac = (math.ceil(arch.layers / pp) if stage_layers is None else stage_layers) / arch.layers
    # pp > 1: the first stage's embedding or the last's output layer, the larger (a tied head's copy included)
    emb = max(arch.vocab, arch.d_out) * arch.hidden if pp > 1 else arch.embedding_params
    dense = (layer_params * stage_frac + emb) / tp
    expert = arch.routed_expert_params_total * stage_frac / ((tp if etp is None else etp) * ep)
    if len(_PARAMS) > 4096:
        _PARAMS.clear()
    _PARAMS[key] = (arch, (dense, expert))
    return dense, expert


_PARAMS: dict[tuple, tuple[Architecture, tuple[float, float]]] = {}


# --- memory -------------------------------------------------------------------------------

@dataclass
class TrainMem:
    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float
    # bytes in flight at the peak that are no state: an FSDP trainer's gathered layers and the gradients
    # being reduced (`fsdp_in_flight`)
    gathered: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other + self.gathered

    @property
    def overhead(self) -> float:
        """What a plan shows as "other": CUDA context, NCCL buffers and fragmentation, plus an FSDP trainer's
        bytes in flight (`gathered`)."""
        return self.other + self.gathered

    @property
    def states(self) -> float:
        """What must stay resident between steps (weights, grads, optimizer)."""
        return self.weights + self.grads + self.optimizer


def train_memory(arch: Architecture, lay: TrainLayout, seq_len: float, *, trainable: bool = True,
                 lora_rank: int = 0, weight_bytes: float = BF16, fp8: bool = False,
                 memo: dict | None = None, fsdp: tuple[float, ...] | None = None) -> TrainMem:
    """Peak bytes per GPU on the busiest pipeline stage (`fp8`: Transformer Engine FP8
    training, whose linear layers keep their inputs for the backward in FP8). `fsdp`: the bytes
    per parameter the framework's FSDP trainer holds (FrameworkCosts.fsdp_trainer_bytes: weights,
    grads, optimizer sharded; gathered_layer, root, output_grad in flight), which replace the
    model's own count of a trainable ZeRO-3 layout without offload (`fsdp_states`). `memo`
    (optional, the caller's) keeps the states of a trainable model, which depend on neither
    the micro-batch nor recompute, and the activations, which depend on neither dp, ep nor
    ZeRO, so layouts differing in those share them."""
    if not trainable:
        weights = frozen_weights(arch, lay, weight_bytes)
        return TrainMem(weights, 0.0, 0.0, _activations(arch, lay, seq_len, forward_only=True),
                        _other(weights, lay.gpus))
    if memo is None:
        weights, grads, opt, gathered = _states(arch, lay, lora_rank, weight_bytes, fsdp)
    else:
        # (the fields the expert TP and sequence parallelism are read from, not those properties: the same
        # keys, asked ~50k times a solve)
        key = ("states", id(arch), lay.tp, lay.pp, lay.ep, lay.expert_tp_size, lay.dp, lay.cp, lay.zero_stage,
               lay.offload, lay.main_grad_bytes, lora_rank, weight_bytes, fsdp,
               # with the embedding and loss slots the first stage's layers depend on vp (first_stage_layers)
               lay.pipeline_split_embedding_loss and lay.vp, lay.adam_moment_bytes, lay.master_param_bytes)
        hit = memo.get(key)  # (one hash of the key)
        if hit is None:
            hit = memo[key] = _states(arch, lay, lora_rank, weight_bytes, fsdp)
        weights, grads, opt, gathered = hit
    if memo is None:
        act = _activations(arch, lay, seq_len, fp8=fp8)
    else:  # the activations depend on neither dp, ep nor ZeRO: layouts differing in those share them
        key = ("activations", id(arch), lay.tp, lay.sequence_parallel, lay.cp, lay.pp, lay.vp, lay.micro_batch,
               lay.recompute, lay.recompute_layers, lay.recompute_modules, lay.recompute_core_attn, lay.attention,
               seq_len, fp8, lay.pipeline_split_embedding_loss)
        act = memo.get(key)
        if act is None:
            act = memo[key] = _activations(arch, lay, seq_len, fp8=fp8)
    return TrainMem(weights, grads, opt, act, _other(weights + grads + opt + act + gathered, lay.gpus), gathered)


def pipeline_chunk_slots(arch: Architecture, lay: TrainLayout) -> int | None:
    """Layer slots per virtual pipeline chunk when the embedding and the loss take one each
    (TrainLayout.pipeline_split_embedding_loss), else None."""
    if not lay.pipeline_split_embedding_loss or lay.pp <= 1:
        return None
    return max(1, (arch.layers + 2) // (lay.pp * lay.vp))


def first_stage_layers(arch: Architecture, lay: TrainLayout) -> int | None:
    """Transformer layers of the first pipeline stage (the one holding the most activations) where
    the split gives it one fewer than the others, else None (an even split)."""
    slots = pipeline_chunk_slots(arch, lay)
    return None if slots is None else lay.vp * slots - 1


def frozen_weights(arch: Architecture, lay: TrainLayout, weight_bytes: float = BF16) -> float:
    """Weight bytes per GPU of a forward-only model on `lay` (`train_memory`'s with trainable=False), for
    callers that need only them and not the activations beside them."""
    return _weights(arch, lay, weight_bytes, trainable=False)


def _weights(arch: Architecture, lay: TrainLayout, weight_bytes: float, trainable: bool) -> float:
    dense, expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp, first_stage_layers(arch, lay))
    z = lay.zero_stage
    weights = weight_bytes * (dense / (lay.dp * lay.cp if z >= 3 else 1) + expert / (lay.expert_dp if z >= 3 else 1))
    if trainable and lay.offload == "params_optimizer" and z >= 3:
        # only the layers being gathered stay on the GPU (two in flight with prefetch)
        weights = weight_bytes * 2 * (dense + expert) / math.ceil(arch.layers / lay.pp)
    return weights


def fsdp_states(arch: Architecture, lay: TrainLayout, lora_rank: int, fsdp: tuple[float, ...]
                ) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, in flight) bytes per GPU of an FSDP trainer holding `fsdp`
    bytes per parameter (FrameworkCosts.fsdp_trainer_bytes): weights, gradients and optimizer
    states sharded over the data- and context-parallel ranks (the routed experts over their own
    data-parallel ranks), and, in flight at the peak, gathered_layer bytes per parameter of one
    decoder layer (the layer and its prefetched neighbour gathered, its gradients being reduced),
    root bytes per parameter of the embedding and output layer the root unit keeps gathered
    through a pass and output_grad bytes per output-layer parameter for its unsharded gradient.
    With LoRA only the adapters have gradients and optimizer states (the model's count of them);
    the frozen base keeps the trainer's weight bytes, and in flight only the gathered 16-bit
    parameters count (the layer's and its prefetched neighbour's, and the root's)."""
    w, g, o, layer, root, out_grad = fsdp
    dense, expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp, first_stage_layers(arch, lay))
    shard_dense, shard_expert = lay.dp * lay.cp, lay.expert_dp
    weights = w * (dense / shard_dense + expert / shard_expert)
    emb = arch.embedding_params / lay.tp  # in `dense` (pp = 1 under ZeRO-3)
    per_layer = (dense - emb) / math.ceil(arch.layers / lay.pp) + expert / math.ceil(arch.layers / lay.pp)
    root_params = fsdp_root_params(arch, lay)
    output = arch.output_params / lay.tp
    if lora_rank > 0:
        adapters = lora_params(arch, lora_rank) / (lay.tp * lay.pp)
        grads = BF16 * adapters / shard_dense
        opt = lay.optimizer_bytes * adapters / shard_dense
        in_flight = 2 * BF16 * per_layer + root * root_params  # gathered parameters only: no base gradients
    else:
        grads = g * (dense / shard_dense + expert / shard_expert)
        opt = o * (dense / shard_dense + expert / shard_expert)
        in_flight = layer * per_layer + root * root_params + out_grad * output
    return weights, grads, opt, in_flight


def _states(arch: Architecture, lay: TrainLayout, lora_rank: int, weight_bytes: float,
            fsdp: tuple[float, ...] | None = None) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, in flight) bytes per GPU of a trainable model: the framework's
    FSDP count (`fsdp_states`) for a ZeRO-3 layout without offload where `fsdp` gives one, else the
    model's (nothing in flight)."""
    if fsdp is not None and lay.zero_stage >= 3 and lay.offload == "none":
        return fsdp_states(arch, lay, lora_rank, fsdp)
    weights = _weights(arch, lay, weight_bytes, trainable=True)
    dense, expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp, first_stage_layers(arch, lay))
    shard_dense = lay.dp * lay.cp
    shard_expert = lay.expert_dp
    z = lay.zero_stage
    if lora_rank > 0:  # only the adapters train; ZeRO shards their state like any other
        adapters = lora_params(arch, lora_rank) / (lay.tp * lay.pp)
        grads = BF16 * adapters / (shard_dense if z >= 2 else 1)
        opt = lay.optimizer_bytes * adapters / (shard_dense if z >= 1 else 1)
    else:
        gshard = (shard_dense if z >= 2 else 1), (shard_expert if z >= 2 else 1)
        oshard = (shard_dense if z >= 1 else 1), (shard_expert if z >= 1 else 1)
        grads = lay.main_grad_bytes * (dense / gshard[0] + expert / gshard[1])
        opt = lay.optimizer_bytes * (dense / oshard[0] + expert / oshard[1])
    if lay.offload != "none":
        opt = 0.0  # fp32 master weights and moments live in host memory
    return weights, grads, opt, 0.0


def _other(tracked: float, gpus: int) -> float:
    c = constants()
    nccl = c["nccl_buffers_gb"] if gpus > 1 else 0.0  # a lone GPU opens no communicator
    return (c["cuda_context_gb"] + nccl) * GB + c["fragmentation_fraction"] * tracked


def checkpoints_core_attn(lay: TrainLayout) -> bool:
    """Whether selective recompute checkpoints the core attention (TrainLayout.recompute_core_attn):
    its forward re-runs in the backward and, unfused, its score matrix is not stored. With flash
    attention the stored tensors are the same either way in this count: the checkpoint keeps q, k, v
    (its inputs) and the output projection keeps the attention output, the tensors flash attention's
    own backward saves, beside its per-head fp32 softmax statistics, which the per-layer count
    (Architecture.activation_bytes_per_token_layer) leaves out under every recompute level."""
    return lay.recompute == "selective" and lay.recompute_core_attn


def recomputed_share(lay: TrainLayout, layers_stage: int) -> float:
    """Share of a stage's layers that full recompute re-runs (all unless recompute_layers says)."""
    if lay.recompute != "full":
        return 0.0
    per_chunk = math.ceil(layers_stage / lay.vp)  # Megatron counts the layers of each virtual chunk
    return 1.0 if lay.recompute_layers <= 0 else min(1.0, lay.recompute_layers / per_chunk)


def fp8_saved_input_bytes_saved(arch: Architecture) -> float:
    """Bytes per token and layer that FP8 training saves on stored activations: Transformer
    Engine's Linear keeps the FP8-quantized copy of its input for the weight gradient, dropping
    the 16-bit one (transformer_engine/pytorch/module/linear.py: saved_inputmat = inputmat after
    the cast, "Discard row-wise data since it is not needed in backward pass"). That covers the
    QKV input, the dense MLP's input and its second GEMM's input, or the routed experts' copies
    of their tokens and their second GEMM's inputs; the attention output projection keeps an
    FP8 copy beside the 16-bit output flash attention needs for its own backward."""
    h = arch.hidden
    if arch.is_moe:
        k = arch.experts_per_token + arch.shared_experts
        gemm_inputs = h + k * (h + arch.d_moe_ffn)  # the router's input stays 16-bit
    else:
        gemm_inputs = 2 * h + arch.d_ffn
    return (BF16 - 1.0) * gemm_inputs - 1.0 * arch.v_width


# Megatron-Core's selective-recompute modules beyond core_attn that the model counts: output-discarding
# checkpoints (megatron/core/transformer/transformer_config.py recompute_modules, Megatron-LM commit
# 60e039626 lines 572-574: "moe_act", "layernorm" and "mla_up_proj" use output-discarding checkpointing,
# tensor_parallel/random.py CheckpointWithoutOutput): the module's output is freed once its consumer has
# saved what it needs and recomputed from the module's input in the backward.
RECOMPUTED_MODULES = ("layernorm", "moe_act", "mla_up_proj", "mlp", "shared_experts")


# "mlp" and "shared_experts" are normal checkpoints (same file, lines 573-574): the submodule keeps only
# its input (the pre-MLP norm's output, which the layer stores anyway) and re-runs its whole forward in
# the backward. "mlp" applies to dense layers only (transformer/transformer_layer.py lines 537-539 at
# 60e039626: `if not isinstance(self.mlp, MoELayer): self.recompute_mlp = True`); "shared_experts" to
# the MoE layers' shared experts (transformer/moe/moe_layer.py lines 252-254, 517-527). "moe" (the
# whole MoE layer, its token dispatch re-run too) is not modelled.
def _checkpointed_mlps(arch: Architecture, modules: tuple[str, ...]) -> float:
    """FFN width summed over the checkpointed MLPs, averaged per layer of the model: the dense
    layers' d_ffn under "mlp", the shared experts' under "shared_experts"."""
    width = 0.0
    if "mlp" in modules:
        dense = arch.layers - arch.moe_layers if arch.is_moe else arch.layers
        width += arch.d_ffn * dense / arch.layers
    if "shared_experts" in modules and arch.is_moe:
        width += arch.shared_experts * arch.d_moe_ffn * arch.moe_layers / arch.layers
    return width


def recompute_module_bytes_saved(arch: Architecture, modules: tuple[str, ...], fp8: bool) -> tuple[float, float]:
    """(bytes per token and layer that the output-discarding modules free from the stored
    activations, of which the part held whole on every TP rank without sequence parallelism).
    layernorm: the two norms' outputs (the QKV and MLP inputs), 16-bit; under FP8 Transformer
    Engine's Linear keeps its own FP8 copy, so only a MoE's router input (16-bit) is freed.
    moe_act: the routed experts' activation outputs (the second GEMM's inputs), 16-bit; none under
    FP8 (the FP8 copy stays). mla_up_proj: MLA's up-projected q and per-head k/v, less the query
    latent kept to recompute them."""
    h = arch.hidden
    whole = per_rank = 0.0
    if "layernorm" in modules:
        whole = BF16 * (h if arch.is_moe else 0.0) if fp8 else BF16 * 2 * h
    if "moe_act" in modules and arch.is_moe and not fp8:
        per_rank += BF16 * arch.experts_per_token * arch.d_moe_ffn * arch.moe_layers / arch.layers
    if "mla_up_proj" in modules and arch.is_mla:
        per_rank += BF16 * (arch.q_width + arch.heads * (arch.qk_nope_head_dim + arch.v_head_dim)
                            - arch.q_lora_rank)
    width = _checkpointed_mlps(arch, modules)
    if width:
        # the first GEMM's output (gate and up for SwiGLU) 16-bit, the activation output (the second
        # GEMM's input) 16-bit, or its FP8 copy under FP8 (fp8_saved_input_bytes_saved)
        first = 2 * width if arch.activation == "swiglu" else width
        per_rank += BF16 * first + (1.0 if fp8 else BF16) * width
    return whole + per_rank, whole


def recompute_module_rerun_fwd(arch: Architecture, dev: Device, lay: TrainLayout, tokens: float) -> float:
    """Seconds the backward of one micro-batch spends, per layer of the stage, re-running the
    output-discarding modules: the two norms and the experts' gated activation at their fused
    elementwise bytes, the MLA up-projection GEMMs."""
    mods = lay.recompute_modules if lay.recompute == "selective" else ()
    if not mods:
        return 0.0
    shard = lay.tp if lay.sp else 1
    t = 0.0
    if "layernorm" in mods:
        t += dev.stream_time(tokens * 2 * FUSED_ELEMENTWISE_BYTES["rms_norm"] * arch.hidden / shard)
    if "moe_act" in mods and arch.is_moe:
        width = arch.experts_per_token * arch.d_moe_ffn * arch.moe_layers / arch.layers
        t += dev.stream_time(tokens * FUSED_ELEMENTWISE_BYTES["gated_activation"] * width / lay.tp)
    if "mla_up_proj" in mods and arch.is_mla:
        q_in = arch.q_lora_rank or arch.hidden
        t += dev.gemm_time(2 * tokens * (q_in * arch.q_width + arch.kv_lora_rank * arch.heads
                                         * (arch.qk_nope_head_dim + arch.v_head_dim)) / lay.tp)
    width = _checkpointed_mlps(arch, mods)
    if width:  # the checkpointed MLPs' two GEMMs and their activation, re-run
        first = 2 * width if arch.activation == "swiglu" else width
        t += dev.gemm_time(2 * tokens * arch.hidden * (first + width) / lay.tp)
        t += dev.stream_time(tokens * FUSED_ELEMENTWISE_BYTES["gated_activation"] * width / lay.tp)
    return t


_STORED: dict[tuple[int, bool], tuple[Architecture, float]] = {}


def _stored_bytes_per_token_layer(arch: Architecture, fp8: bool) -> float:
    """Activation bytes a layer stores per token (memoized per model: the solver asks for it
    for every candidate layout)."""
    hit = _STORED.get((id(arch), fp8))
    if hit is not None and hit[0] is arch:
        return hit[1]
    value = arch.activation_bytes_per_token_layer() - (fp8_saved_input_bytes_saved(arch) if fp8 else 0.0)
    if len(_STORED) > 256:
        _STORED.clear()
    _STORED[(id(arch), fp8)] = (arch, value)
    return value


def _activations(arch: Architecture, lay: TrainLayout, seq_len: float, forward_only: bool = False,
                 fp8: bool = False) -> float:
    """Korthikanti et al. 2022 per-layer activations (flash attention: no s^2 term), split by
    tp with sequence parallelism (without it the norms and residuals are replicated), by cp
    along the sequence; 1F1B keeps pp micro-batches in flight on the first stage; plus the
    fp32 logits of the last stage."""
    tokens = lay.micro_batch * seq_len / lay.cp
    per_tok_layer = _stored_bytes_per_token_layer(arch, fp8 and not forward_only)
    freed, freed_whole = (recompute_module_bytes_saved(arch, lay.recompute_modules, fp8)
                          if lay.recompute == "selective" and not forward_only else (0.0, 0.0))
    if lay.tp > 1 and not lay.sp:
        # norms/residual inputs (4h of the per-layer count) stay whole on every TP rank
        repl = 2.0 * 4 * arch.hidden
        per_tok_layer = repl - freed_whole + (per_tok_layer - repl - (freed - freed_whole)) / lay.tp
    else:
        per_tok_layer = (per_tok_layer - freed) / lay.tp
    if lay.attention == "unfused" and lay.recompute != "full" and not checkpoints_core_attn(lay):
        # the score matrix, softmax output and dropout mask per token (checkpointing the core attention
        # drops them)
        per_tok_layer += UNFUSED_SCORE_BYTES_STORED * arch.heads * seq_len / lay.tp
    slots = pipeline_chunk_slots(arch, lay)
    layers_stage = math.ceil(arch.layers / lay.pp) if slots is None else lay.vp * slots
    logits = tokens * arch.d_out / lay.tp * 4.0
    if forward_only:  # one layer's working set plus the logits
        return tokens * per_tok_layer + logits
    if lay.recompute == "full":
        full = recomputed_share(lay, layers_stage) * layers_stage
        stored = (tokens * full * BF16 * arch.hidden / (lay.tp if lay.sp else 1) + tokens * per_tok_layer
                  + tokens * (layers_stage - full) * per_tok_layer)
    else:
        stored = tokens * layers_stage * per_tok_layer
    # 1F1B keeps pp micro-batches' worth of a stage's activations in flight on the first stage;
    # the interleaved schedule (vp chunks per stage) keeps (1 + (pp-1)/(pp*vp)) x that
    # (Korthikanti et al. 2022, arXiv 2205.05198, activation memory under pipeline parallelism)
    in_flight = lay.pp * (1 + (lay.pp - 1) / (lay.pp * lay.vp)) if lay.vp > 1 else lay.pp
    if lay.pp == 1:
        return stored + logits
    if slots is not None:
        in_flight *= first_stage_in_flight_share(lay, slots)
    # the fp32 logits live on the last stage, which holds one micro-batch in flight
    return max(stored * in_flight, stored + logits)


def first_stage_in_flight_share(lay: TrainLayout, slots: int) -> float:
    """Layers the first stage holds activations of at its peak, over what an even split would hold,
    when its first chunk has one layer fewer (pipeline_split_embedding_loss). Megatron-Core's
    interleaved schedule runs (pp - 1) * 2 + (vp - 1) * pp warmup forwards on the first stage before
    its first backward, so that many plus one chunk-micro-batches are in flight (Korthikanti et al.'s
    pp * vp + pp - 1), the k-th on chunk (k // pp) % vp (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_with_interleaving, get_model_chunk_id); 1F1B (vp = 1) holds pp, all on
    the one chunk."""
    n = (lay.pp - 1) * 2 + (lay.vp - 1) * lay.pp + 1 if lay.vp > 1 else lay.pp
    first = sum(1 for k in range(n) if (k // lay.pp) % lay.vp == 0)
    return (first * (slots - 1) + (n - first) * slots) / (n * slots)


# --- time ---------------------------------------------------------------------------------

MOE_DISPATCHERS = ("alltoall", "deepep", "hybridep")
CUDA_GRAPHS = ("none", "partial", "full_iteration")


def moe_host_efficiency(lay: TrainLayout) -> float:
    """Share of its kernels' speed the routed MoE block runs at on the host-bound default stack
    (constants.yaml moe_block_host_efficiency), raised by the stack features the layout's recipe
    enables, each by its measured step in Megatron-Core's DeepSeek-V3 GB200 optimization history
    (constants.yaml moe_flex_dispatcher_gain, moe_hybridep_gain, moe_partial_cuda_graph_gain), and
    lowered by the EP all-to-all overlap's extra host work (moe_a2a_overlap_host_gain, measured
    turning it off in a Megatron-Bridge recipe); a full-iteration CUDA graph launches nothing from
    the host (1.0)."""
    if lay.cuda_graphs == "full_iteration":
        return 1.0
    c = constants()
    eff = c["moe_block_host_efficiency"]
    if lay.moe_dispatcher != "alltoall":
        eff *= c["moe_flex_dispatcher_gain"] * (c["moe_hybridep_gain"] if lay.moe_dispatcher == "hybridep" else 1.0)
        if lay.cuda_graphs == "partial":
            eff *= c["moe_partial_cuda_graph_gain"]
    if lay.moe_a2a_overlap:
        eff *= c["moe_a2a_overlap_host_gain"]
    return min(1.0, eff)


def expert_gemm_issue_time(dev: Device, local_experts: float) -> float:
    """Host time to issue one MoE layer's routed-expert GEMMs in a forward (the backward issues
    twice as many: dgrad and wgrad; the caller's backward doubles the block). Megatron-Core's
    grouped experts (moe_grouped_gemm, TEGroupedMLP) run Transformer Engine's GroupedLinear for fc1
    and fc2, whose grouped GEMM is a host loop of one cuBLASLt call per local expert
    (TransformerEngine v2.3 transformer_engine/common/gemm/cublaslt_gemm.cu
    nvte_multi_stream_cublas_gemm, lines 632-663; the single-kernel CUTLASS grouped GEMM of v2.8+
    runs only on Hopper behind NVTE_USE_CUTLASS_GROUPED_GEMM, default off: v2.8 lines 1002-1016):
    2 x local calls at constants.yaml expert_gemm_host_us each, on this system's host
    (x host_slowdown). After the dropless dispatcher's host sync the GPU has nothing queued, so
    the routed block takes the longer of its kernels and this issue time (the issue of the next
    GEMM overlaps the running one; _layer_fwd)."""
    return 2 * local_experts * constants()["expert_gemm_host_us"] * 1e-6 * dev.host_slowdown


def expert_destinations(experts: int, k: int, units: int) -> float:
    """Expected distinct units (EP ranks, or servers) a token's k experts sit on when `experts`
    are spread evenly over `units` and routing is balanced (each token's k experts a uniform draw
    without replacement, as Megatron-Core's benchmark routing draws them: moe_router_force_load_balancing
    replaces the router logits by random ones, router.py apply_random_logits): units times the chance
    that a unit holds at least one of them, 1 - C(E - E/u, k) / C(E, k). Group-limited routing
    (DeepSeek-V3 picks 4 of 8 expert groups) only lowers it."""
    if units <= 1:
        return 1.0
    per = experts / units
    miss = 1.0
    for i in range(min(k, experts)):  # C(E - per, k) / C(E, k) as a product
        miss *= max(0.0, (experts - per - i) / (experts - i))
    return units * (1.0 - miss)


def expert_all_to_all(dev: Device, nbytes: float, k: int, experts: int, n: int, span: int,
                      dedup: bool = False) -> float:
    """One dispatch (or combine) of a rank's tokens routed to k of `experts` experts over `n` EP
    ranks spread evenly over `span` GPUs; `nbytes`: k copies of each token (its hidden state).

    NCCL all-to-all (Megatron-Core's alltoall dispatcher) sends a copy of the token per routed
    expert, k copies, 1/n of them to each rank; when the group leaves the NVLink domain the share
    bound for other domains crosses the NICs while the share for peers in the rank's own domain
    moves over NVLink at the same time (point-to-point sends, each on its peer's path): the slower
    of the two, plus the latency of the slower tier.

    Across domains the flex dispatcher (`dedup`: DeepEP, HybridEP) sends a token once per
    destination server over RDMA, forwarded over NVLink inside it to each of its ranks there
    (Megatron-LM megatron/core/transformer/moe/README.md, commit 2edffadb: DeepEP 'removes redundant
    tokens during cross-node communication'; DeepEP V1 docs/legacy.md: kernels 'forwarding data from
    NVLink domain to RDMA domain', dispatch layout num_tokens_per_rdma_rank / is_token_in_rank;
    Hybrid-EP_Implementation.md: inter-node RDMA, intra-node NVLink; its tests/test_hybrid_ep.py counts
    the RDMA bytes as count_rdma_send_from_routing_map, one per token and remote server, and its H100
    table reaches 37-58 GB/s of them per GPU (BF16 dispatch, torch API) at 16-64 ranks, about the
    NIC's rate): expected distinct servers and ranks under balanced routing (expert_destinations).
    Inside one NVLink domain the all-to-all is the NCCL count for every dispatcher: what the flex
    dispatcher saves there (no top-k copies of the global permute) is inside moe_flex_dispatcher_gain,
    measured end to end on GB200 NVL72 where all EP traffic stays in the domain (Megatron-LM
    docs/discussions/deepseek-v3-gb200-optimization, commit eb0783b6, lines 69 and 108). The payload
    is the 16-bit hidden state both ways: Megatron-Core passes it to DeepEP unquantized (fused_a2a.py
    at 2edffadb, FusedDispatch.forward; HybridEP asserts not fp8_dispatch)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    domain = max(dev.pool.scaleup_size, dev.pool.gpus_per_node)
    if span <= domain:
        domains = local = 1
    else:
        local = max(1, min(n, round(n * domain / span)))  # group ranks in this rank's domain
        domains = -(-n // local)
    if domains == 1:  # inside the NVLink domain: the flex dispatcher's gain is moe_flex_dispatcher_gain's
        return dev.all_to_all(nbytes, n, span)
    if not dedup:
        off = dev.all_to_all(nbytes * (n - local) / (n - 1), n, span)  # (n-local)/n of the bytes
        inside = dev.all_to_all(nbytes * (local - 1) / (n - 1), local, domain) if local > 1 else 0.0
        return max(off, inside)
    token_bytes = nbytes / k
    # per-destination copies; all_to_all(b, m, .) moves (m-1)/m * b, so pass b = copies * m/(m-1)
    ranks = expert_destinations(experts, k, n)
    nodes = expert_destinations(experts, k, domains)
    off = dev.all_to_all(token_bytes * nodes * (domains - 1) / domains * n / (n - 1), n, span)
    # inside each destination server the RDMA receiver forwards to the token's ranks there: every
    # (token, rank) copy crosses NVLink once, except the receiver's own (all_to_all's (m-1)/m)
    inside = dev.all_to_all(token_bytes * ranks, local, domain) if local > 1 else 0.0
    return max(off, inside)


def _layer_fwd(arch: Architecture, dev: Device, lay: TrainLayout, tokens: float, seq_len: float,
               moe: bool, attn_len: float | None = None) -> tuple[float, float, float, float, float, float, float, float]:
    """(gemm_s, attention_fwd_s, attention_bwd_s, elementwise_fwd_s, elementwise_bwd_s, ep_comm_s,
    moe_block_s, ep_kernel_s) for one layer on one GPU (the backward's GEMMs are scaled by the
    caller); moe_block_s: the part of gemm_s that is the MoE block (router, routed and shared
    experts); ep_kernel_s: the all-to-all's own transfer time within ep_comm_s (less where the
    host-bound stack stretches it). `attn_len`: the tokens each token attends over on average for flash
    attention (micro_batch_lengths' attention figure; None: `seq_len`, sequences of one length)."""
    h, tp = arch.hidden, lay.tp
    shard = tp if lay.sp else 1
    attn_in = arch.attn_params_per_layer - arch.v_width * h
    gemm = dev.gemm_time(2 * tokens * attn_in / tp) + dev.gemm_time(2 * tokens * arch.v_width * h / tp)
    mats = 3 if arch.activation == "swiglu" else 2
    # widths (elements per token) of every GEMM input and output, for the FP8 casts below
    gemm_in = h / shard + arch.v_width / tp
    gemm_out = (attn_in / h) / tp + h / shard
    ep_comm = sync = block = ep_kernel = 0.0
    if moe:
        k, E = arch.experts_per_token, arch.experts
        tok_expert = tokens * k / E * lay.ep  # tokens one local expert sees (balanced routing)
        local = E / lay.ep
        w = arch.d_moe_ffn
        mlp = dev.gemm_time(2 * tok_expert * h * w * (mats - 1) / tp, local)
        mlp += dev.gemm_time(2 * tok_expert * w * h / tp, local)
        gemm_in += k * (h + w) / tp
        gemm_out += k * (w * (mats - 1) + h) / tp
        if arch.shared_experts:
            sw = arch.shared_experts * w
            mlp += dev.gemm_time(2 * tokens * h * sw * (mats - 1) / tp) + dev.gemm_time(2 * tokens * sw * h / tp)
            gemm_in += (h + sw) / tp
            gemm_out += (sw * (mats - 1) + h) / tp
        mlp += dev.gemm_time(2 * tokens * h * E)  # router
        width_elem = k * w + arch.shared_experts * w
        # dispatch + combine all-to-all of the routed hidden states
        # folded (etp != tp): the expert grid's etp x ep ranks are consecutive, so EP spans etp*ep GPUs
        span = lay.tp * lay.cp * lay.ep if lay.etp == lay.tp else lay.etp * lay.ep
        ep_comm = 2 * expert_all_to_all(dev, tokens * k * h * BF16 / tp, k, E, lay.ep, span,
                                        dedup=lay.moe_dispatcher != "alltoall")
        perm = 2 * (k * h + h) / tp  # permute (read h, write k*h) and unpermute (the reverse)
        # a dropless dispatcher needs each expert's token count on the host: one sync per pass (none
        # inside a full-iteration CUDA graph, which the sync-free path makes possible, nor under
        # drop-and-pad routing, whose counts are the fixed capacity: TrainLayout.moe_token_drop)
        no_sync = lay.cuda_graphs == "full_iteration" or lay.moe_token_drop
        sync = 0.0 if no_sync else constants()["moe_host_sync_us"] * 1e-6
        # the routed block runs host-bound in Megatron-Core's default stack (a host sync before
        # the dispatch, no CUDA graphs, many small router/permute/quantize kernels): 1/eff the
        # time of its kernels back to back. That includes an all-to-all inside the NVLink domain
        # (short, issued right after the sync); one over the NICs is long and bandwidth-bound.
        eff = moe_host_efficiency(lay)
        # after that sync the host issues the routed experts' GEMMs one local expert at a time
        # (expert_gemm_issue_time): the block takes the longer of its kernels and their issue
        block = max(mlp / eff, 0.0 if no_sync else expert_gemm_issue_time(dev, local))
        gemm += block
        perm /= eff
        # the all-to-all's transfer, the part the EP A2A overlap can hide: one over the NICs; one
        # inside the NVLink domain is host-bound (below), and the overlap's extra stage syncs add to
        # the host time (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, commit
        # eb0783b6, line 237: 1F1B AlltoAll overlap 'aggravates the CPU overhead, so the overall
        # benefit is negative on the GB200'), so none of it hides there
        ep_kernel = ep_comm if span > dev.pool.scaleup_size else 0.0
        if span <= dev.pool.scaleup_size:
            ep_comm /= eff
    else:
        w = arch.d_ffn
        gemm += dev.gemm_time(2 * tokens * h * w * (mats - 1) / tp) + dev.gemm_time(2 * tokens * w * h / tp)
        gemm_in += (h + w) / tp
        gemm_out += (w * (mats - 1) + h) / tp
        width_elem = w
        perm = 0.0
    if lay.attention == "unfused":
        # batched GEMMs over the whole (masked, not skipped) square, plus the score traffic
        attn_flops = tokens * arch.attention_flops_per_token(seq_len, causal=False) / arch.layers / tp
        matrices = max(1.0, arch.heads * lay.micro_batch / tp)  # (head, sequence) pairs on this rank
        attention = dev.gemm_time(attn_flops / (2 * matrices), 2 * matrices)  # QK^T and AV for each
        attention += dev.stream_time(UNFUSED_SCORE_BYTES_FWD * tokens * seq_len * arch.heads / tp)
        attention_bwd = 2.0 * attention
    else:
        # flash attention (causal) over the full sequence; cp splits the queries
        attn_flops = tokens * arch.attention_flops_per_token(attn_len or seq_len, causal=True) / arch.layers / tp
        # at the forward and backward rates of the kernel the layout's training backend runs
        # (frameworks/runtime.yaml train_attention_kernel; hardware_db attention_kernels)
        fwd_rate, bwd_rate = dev.attention_rates(lay.attention_kernel)
        attention = attn_flops / fwd_rate
        attention_bwd = FA_BWD_OVER_FWD * attn_flops / bwd_rate
    elems = layer_elementwise_elems(arch, width_elem, shard, tp) + perm
    fwd_bytes, bwd_bytes = BF16 * elems, 2 * BF16 * elems
    if dev.precision == "fp8":
        # Transformer Engine casts every GEMM input (forward) and output gradient (backward):
        # an amax pass (read 2 B), the cast (read 2 B, write 1 B) and a transposed copy (1 B)
        fwd_bytes += FP8_CAST_BYTES * gemm_in
        bwd_bytes += FP8_CAST_BYTES * gemm_out
    return (gemm, attention, attention_bwd, dev.stream_time(tokens * fwd_bytes) + sync,
            dev.stream_time(tokens * bwd_bytes) + sync, ep_comm, block, ep_kernel)


def layer_elementwise_elems(arch: Architecture, width_elem: float, shard: int = 1, tp: int = 1) -> float:
    """Elements per token a layer's fused elementwise kernels move in a forward (bf16; the backward
    moves twice as many), beside a MoE's permute: 2 norms (read+write h), 2 residual adds (read 2h,
    write h), rotary on q/k, the activation function over the MLP width `width_elem` (swiglu reads
    2w, writes w); the hidden-sized ones split by `shard` (sequence parallelism), the MLP's by tp."""
    kvw = 2 * arch.n_kv_heads * arch.d_head if not arch.is_mla else arch.kv_lora_rank + arch.qk_rope_head_dim
    mats = 3 if arch.activation == "swiglu" else 2
    return (10 * arch.hidden + 2 * (arch.q_width + kvw)) / shard + mats * width_elem / tp


FP8_CAST_BYTES = 6.0
# The model's own count of the fp32 log-softmax over the vocabulary in a forward: read and
# write of the logits plus one more pass, 4 bytes each (the backward moves twice that).
LOGIT_FP32_BYTES_FWD = 12.0


def logit_extra_fwd(arch: Architecture, dev: Device, lay: TrainLayout, seq_len: float,
                    logit_bytes_fwd: float | None) -> float:
    """Seconds one micro-batch's forward spends on its log-probs beyond the model's own count,
    where the framework's log-prob code moves `logit_bytes_fwd` bytes per fp32 logit (separate
    cast, max, subtract, exp, sum passes over the full vocabulary: frameworks/runtime.yaml)."""
    if logit_bytes_fwd is None or logit_bytes_fwd <= LOGIT_FP32_BYTES_FWD:
        return 0.0
    tokens = lay.micro_batch * seq_len / lay.cp
    return dev.stream_time(tokens * arch.d_out / lay.tp * (logit_bytes_fwd - LOGIT_FP32_BYTES_FWD))


def logit_extra_bwd(arch: Architecture, dev: Device, lay: TrainLayout, seq_len: float,
                    logit_bytes_bwd: float | None, per_packed_sequence: bool) -> float:
    """Seconds one training micro-batch's backward spends on its log-probs beyond the model's own
    count (twice the forward's LOGIT_FP32_BYTES_FWD): the framework's log-prob backward moving
    `logit_bytes_bwd` bytes per fp32 logit (None: the model's count), and, where its loss runs
    sequence by sequence over a packed micro-batch of `lay.micro_batch` sequences
    (`per_packed_sequence`), each sequence's slice of the 16-bit logits back-propagating into a
    zeroed gradient of the whole micro-batch (written once per sequence), its own slice copied in,
    and autograd summing the micro_batch gradients (read two, write one, micro_batch - 1 times)."""
    per_logit = 0.0
    if logit_bytes_bwd is not None and logit_bytes_bwd > 2 * LOGIT_FP32_BYTES_FWD:
        per_logit += logit_bytes_bwd - 2 * LOGIT_FP32_BYTES_FWD
    if per_packed_sequence:
        k = max(1.0, lay.micro_batch)
        per_logit += BF16 * k + 2 * BF16 + 3 * BF16 * (k - 1)
    if per_logit == 0.0:
        return 0.0
    tokens = lay.micro_batch * seq_len / lay.cp
    return dev.stream_time(tokens * arch.d_out / lay.tp * per_logit)


@lru_cache(maxsize=256)
def _packed_fill(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                 clip: float | None, budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """`packed_bins` with, for each bin, the sum of its sequences' squared lengths (their attention, which
    runs per sequence) and the length of the sequence placed in it last (first-fit-decreasing: its shortest)."""
    n = max(1, int(sequences))
    u = (np.arange(n) + 0.5) / n
    lengths = np.minimum(np.ceil(prompt_len + length_quantiles(response_mean, response_max, u, clip)), budget)
    bins, squares, last = np.zeros(n), np.zeros(n), np.zeros(n)
    used = 0
    for x in np.sort(lengths)[::-1]:  # first fit, longest first
        room = np.nonzero(bins[:used] + x <= budget)[0]
        i = int(room[0]) if room.size else used
        used = max(used, i + 1)
        bins[i] += x
        squares[i] += x * x
        last[i] = x
    return bins[:used], squares[:used], last[:used], float(lengths.sum())


def packed_bins(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                clip: float | None, budget: int) -> tuple[np.ndarray, float]:
    """(tokens of each bin, real tokens) when a batch of `sequences` is packed first-fit-decreasing
    into bins of `budget` tokens, as NeMo-RL packs every training and log-prob batch
    (BatchedDataDict.shard_by_batch_size: bin_packer.pack). Lengths: prompt plus the
    response-length distribution of the rollout model (generate.length_quantiles)."""
    bins, _, _, total = _packed_fill(sequences, prompt_len, response_mean, response_max, clip, budget)
    return bins, total


def packed_attention_len(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                         clip: float | None, budget: int, dp: int, pad: str = "none") -> float:
    """Attention-effective tokens per sequence (the figure the attention term multiplies the computed tokens
    by: the pass's attention over its computed tokens) of the busiest rank's packed micro-batches, whose
    sequences each run attention on their own length (flash attention over cu_seqlens: sum of L^2, not the
    bin's length squared). The bins are dealt round-robin as the token figures deal them (`packed_pad_factor`,
    `packed_busiest_share`). `pad`: "none", the bins run unpadded and the rank with the most tokens sets the
    pace (`packed_busiest_share`); "longest", every bin padded to the longest and the padding joins the bin's
    last sequence (NeMo-RL v0.3.1 nemo_rl/models/megatron/common.py _pack_sequences_for_megatron: with
    pad_packed_seq_to, cu_seqlens_padded[-1] = pad_packed_seq_to, so the last segment runs over the padding);
    "budget", every bin padded to the budget and the padding in no sequence (NeMo-RL v0.3.0
    dtensor_policy_worker.py train: pack_sequences(min_seq_len=train_mb_tokens) with flash_attn_kwargs from
    get_flash_attention_kwargs(input_lengths), cu_seqlens over the real lengths only)."""
    bins, squares, last, _ = _packed_fill(int(sequences), prompt_len, response_mean, response_max, clip,
                                          int(budget))
    dp = max(1, int(dp))
    if pad == "none":
        r = max(range(min(dp, len(bins))), key=lambda k: float(bins[k::dp].sum()))
        return float(squares[r::dp].sum() / bins[r::dp].sum())
    width = float(bins.max()) if pad == "longest" else float(budget)
    b, sq, tail = bins[0::dp], squares[0::dp], last[0::dp]  # the first rank holds the most bins
    if pad == "longest":
        sq = sq - tail * tail + (tail + width - b) ** 2
    return float(sq.sum() / (len(b) * width))


def packed_sequences_per_bin(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                             clip: float | None, budget: int) -> float:
    """Mean sequences per packed micro-batch: the batch over its first-fit-decreasing bins. The
    framework runs one micro-batch per bin, so this (not budget / mean length, nor a divisor of
    the batch) sets how many micro-batches a step runs."""
    bins, _ = packed_bins(int(sequences), prompt_len, response_mean, response_max, clip, int(budget))
    return max(1, int(sequences)) / len(bins)


def packed_pad_factor(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                      clip: float | None, budget: int, dp: int) -> float:
    """Tokens the busiest rank computes over its share of the real tokens when a global batch of
    `sequences` is packed into bins of `budget` tokens, the bins dealt round-robin to the `dp`
    ranks, and every bin padded to the longest one: NeMo-RL packs each global batch
    first-fit-decreasing (shard_by_batch_size: bin_packer.pack, then shard_idx = bin_idx % shards)
    and, under pipeline parallelism, pads every packed micro-batch to the batch's longest
    (frameworks/runtime.yaml pipeline_pads_packed_micro_batches)."""
    bins, total = packed_bins(int(sequences), prompt_len, response_mean, response_max, clip, int(budget))
    busiest = math.ceil(len(bins) / dp) * bins.max()
    return float(busiest * dp / total)


def packed_budget_pad_factor(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                             clip: float | None, budget: int, dp: int) -> float:
    """Tokens the busiest rank computes over its share of the real tokens when every packed bin is padded
    to the whole `budget` (frameworks/runtime.yaml fsdp_pads_packed_to_budget: NeMo-RL's DTensor worker packs
    each training micro-batch with min_seq_len = train_mb_tokens) and the ranks with fewer bins run dummy
    micro-batches up to the most any rank has: ceil(bins / dp) bins of `budget` tokens on every rank."""
    bins, total = packed_bins(int(sequences), prompt_len, response_mean, response_max, clip, int(budget))
    return float(math.ceil(len(bins) / dp) * int(budget) * dp / total)


def packed_busiest_share(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                         clip: float | None, budget: int, dp: int) -> float:
    """Real tokens of the busiest rank over the ranks' mean when the bins of a packed batch are dealt
    round-robin to the `dp` ranks without padding (packed_pad_factor's dealing: the longest-first bins
    go to the first ranks). The ranks meet at the end of the pass (the gradient reduction of the
    optimizer step; NeMo-RL v0.3.0's DTensor worker also runs dummy micro-batches up to the most any
    rank has, dtensor_policy_worker.py train, dummy_batch_ct), so the busiest rank sets the pace."""
    bins, total = packed_bins(int(sequences), prompt_len, response_mean, response_max, clip, int(budget))
    busiest = max(float(bins[r::dp].sum()) for r in range(min(dp, len(bins))))
    return busiest * dp / total


@lru_cache(maxsize=256)
def unpadded_busiest_share(micro_batch: int, per_rank: int, prompt_len: float, response_mean: float,
                           response_max: float, clip: float | None, dp: int) -> float:
    """Tokens of the busiest rank's micro-batch over the mean micro-batch when every rank runs
    fixed-count micro-batches of `micro_batch` sequences on their own tokens (padding removed) and
    the ranks wait for each other at every layer: verl's FSDP passes split each rank's share into
    `micro_batch`-sequence micro-batches (verl v0.3.0.post0 verl/workers/actor/dp_actor.py line 209
    compute_log_prob batch.split(micro_batch_size), line 265 update_policy
    mini_batch.split(ppo_micro_batch_size_per_gpu); main b178a3cd5 lines 463, 558) and computes each
    on its unpadded tokens (unpad_input, line 83), while FULL_SHARD FSDP all-gathers every layer's
    parameters over the data-parallel ranks before its forward, so no rank runs ahead of the slowest
    by more than a layer. verl's balance_batch (trainer.balance_batch: True in v0.3.0.post0
    ppo_trainer.yaml line 179, main line 126; ray_trainer.py _balance_batch, seqlen_balancing.py
    get_seqlen_balanced_partitions) equalises each rank's total tokens but keeps each rank's sequences
    in rollout order (sorted(partition) by index), so a micro-batch is `micro_batch` draws from the
    rank's `per_rank` sequences whose sum is fixed: its token count has the lengths' variance times
    micro_batch x (1 - micro_batch / per_rank) (sampling without replacement). The busiest of the
    `dp` ranks sits E[max of dp normals] standard deviations above the mean (normal approximation of
    the sum). Lengths: the prompt plus the rollout's response-length distribution
    (generate.length_quantiles)."""
    k, n = max(1, int(micro_batch)), max(1, int(per_rank))
    if dp <= 1 or k >= n:
        return 1.0
    u = (np.arange(2000) + 0.5) / 2000
    resp = length_quantiles(response_mean, response_max, u, clip)
    mean = prompt_len + float(resp.mean())
    sd = math.sqrt(k * float(resp.var()) * (1.0 - k / n))
    return 1.0 + expected_max_std_normal(int(dp)) * sd / (k * mean)


# The model's own elementwise bytes per element (fused kernels, bf16): an RMSNorm reads and writes
# its input, rotary embedding reads and writes q and k, a gated activation reads two and writes one.
FUSED_ELEMENTWISE_BYTES = {"rms_norm": 4.0, "rotary": 4.0, "gated_activation": 6.0}


def unfused_elementwise_fwd(arch: Architecture, dev: Device, lay: TrainLayout, seq_len: float,
                            bytes_per_element: tuple[float, float, float] | None) -> float:
    """Seconds one micro-batch's forward spends, over the busiest stage's layers, on elementwise
    traffic beyond the model's fused count where the framework trains the Hugging Face modeling
    code op by op: `bytes_per_element` = (RMSNorm, rotary, gated activation) bytes moved per
    element (frameworks/runtime.yaml fsdp_model_elementwise_bytes, counted in the source)."""
    if not bytes_per_element:
        return 0.0
    norm, rotary, gated = (b - FUSED_ELEMENTWISE_BYTES[k] for b, k in zip(
        bytes_per_element, ("rms_norm", "rotary", "gated_activation")))
    shard = lay.tp if lay.sp else 1
    per_token = 2 * norm * arch.hidden / shard + rotary * (arch.q_width + arch.n_kv_heads * arch.d_head) / lay.tp
    if arch.activation == "swiglu":
        moe = arch.moe_layers / arch.layers
        width = (1 - moe) * arch.d_ffn + (moe * (arch.experts_per_token + arch.shared_experts) * arch.d_moe_ffn
                                          if arch.is_moe else 0.0)
        per_token += gated * width / lay.tp
    tokens = lay.micro_batch * seq_len / lay.cp
    return dev.stream_time(max(0.0, per_token) * tokens * math.ceil(arch.layers / lay.pp))


@lru_cache(maxsize=256)
def dynamic_batches(sequences: int, prompt_len: float, response_mean: float, response_max: float,
                    clip: float | None, budget: int, dp: int, round_to: int) -> tuple[float, float, float]:
    """(sequences per micro-batch, tokens computed over the real tokens, attention-effective tokens per
    sequence: every row runs its padded length, so sum of count x width^2 over the computed tokens) of NeMo-RL's dynamic
    batching (nemo_rl/distributed/batched_data_dict.py shard_by_batch_size with
    dynamic_batching_args, v0.3.1 lines 343-363 and 526-600): the batch is sorted by length and
    strided over the `dp` ranks; the ranks' i-th sequences share one padded length, the longest
    of them rounded up to `round_to`; consecutive sequences join a micro-batch while its count x
    its longest padded length stays within `budget` tokens, and each micro-batch runs padded to
    its longest. Lengths: prompt plus the rollout's length distribution (generate.length_quantiles)."""
    n = max(1, int(sequences))
    u = (np.arange(n) + 0.5) / n
    lengths = np.sort(np.ceil(prompt_len + length_quantiles(response_mean, response_max, u, clip)))
    per_rank = math.ceil(n / dp)
    width = lengths[-1]
    padded = [min(math.ceil(lengths[min(n - 1, j * dp + dp - 1)] / round_to) * round_to, width)
              for j in range(per_rank)]  # the longest of the ranks' j-th sequences
    groups, count, longest = [], 0, 0.0
    for x in padded:
        if count and (count + 1) * max(longest, x) > budget:
            groups.append((count, longest))
            count, longest = 0, 0.0
        count, longest = count + 1, max(longest, x)
    groups.append((count, longest))
    tokens = sum(c * w for c, w in groups)
    return (per_rank / len(groups), float(tokens * dp / lengths.sum()),
            float(sum(c * w * w for c, w in groups) / tokens))


def micro_batch_lengths(seq_mean: float, pp: int, dp: int, *, packed_tokens: int | None, pads_packed: bool,
                        global_batch: int, prompt_len: float, response_mean: float, response_max: float,
                        clip: float | None, dynamic_round: int | None = None,
                        pads_to_budget: bool = False) -> tuple[float, float]:
    """(tokens per sequence, attention-effective tokens per sequence) the training and log-prob
    micro-batches compute. Tokens: the mean sequence, stretched by the padding of packed micro-batches
    where the framework pads them (pipeline parallelism: every micro-batch must have one shape;
    `pads_to_budget`: every bin to the whole token budget, `packed_budget_pad_factor`), or by the padding of
    NeMo-RL's dynamic batches (`dynamic_round`: its sequence_length_round; `dynamic_batches`); unpadded packed
    micro-batches by the busiest rank's share of the bins (`packed_busiest_share`). Attention (the figure the
    attention term multiplies those tokens by, the GEMMs and elementwise staying on the tokens): each padded
    row its own width squared (dynamic batches), each packed sequence its own length squared
    (`packed_attention_len`), and micro-batches of sequences on their own lengths the lengths' second moment
    (generate.attention_len: E[L^2] / E[L]): fixed micro-batches, which the tokens count at the mean sequence,
    run flash attention over each sequence's own tokens (verl use_remove_padding: unpad_input and varlen;
    transformers' flash_attention_2 unpads a padded batch by its attention mask, _upad_input)."""
    lengths = (prompt_len, response_mean, response_max, clip)
    if dynamic_round and packed_tokens:
        _, stretch, attn = dynamic_batches(global_batch, *lengths, int(packed_tokens), dp, int(dynamic_round))
        return seq_mean * stretch, attn
    if packed_tokens:
        budget = int(packed_tokens)
        if pads_to_budget:
            return (seq_mean * max(1.0, packed_budget_pad_factor(global_batch, *lengths, budget, dp)),
                    packed_attention_len(global_batch, *lengths, budget, dp, "budget"))
        if pads_packed and pp > 1:
            return (seq_mean * max(1.0, packed_pad_factor(global_batch, *lengths, budget, dp)),
                    packed_attention_len(global_batch, *lengths, budget, dp, "longest"))
        share = max(1.0, packed_busiest_share(global_batch, *lengths, budget, dp)) if dp > 1 else 1.0
        return seq_mean * share, packed_attention_len(global_batch, *lengths, budget, dp, "none")
    return seq_mean, attention_len(*lengths)



def stage_times(arch: Architecture, dev: Device, lay: TrainLayout, seq_len: float, *,
                lora: bool = False, memo: dict | None = None, attn_len: float | None = None) -> dict[str, float]:
    """Forward and backward time of one micro-batch on the busiest stage, split by cause; `seq_len`
    tokens per sequence, `attn_len` the attention-effective figure for flash attention (`_layer_fwd`).
    `memo` (optional, the caller's) keeps the per-layer times and the LM head's, which depend
    on neither pp nor recompute, so layouts that differ in those share them, and their sums over the stage's
    layers (`_stage_sums`), which depend on neither dp, ZeRO nor recompute."""
    tokens = lay.micro_batch * seq_len / lay.cp
    layers_stage = math.ceil(arch.layers / lay.pp)
    moe_frac = arch.moe_layers / arch.layers
    slots = pipeline_chunk_slots(arch, lay)
    if memo is None:
        memo = {}
    etp = lay.etp
    key = ("layer_fwd", id(arch), id(dev.pool), dev.precision, dev.overrides, lay.tp, lay.sp, lay.cp, lay.ep,
           etp, lay.micro_batch, lay.attention, lay.attention_kernel, seq_len, attn_len, lay.moe_dispatcher, lay.cuda_graphs,
           lay.moe_token_drop, lay.moe_a2a_overlap)
    hit = memo.get(key)  # (one hash of the key)
    if hit is None:
        dense = _layer_fwd(arch, dev, lay, tokens, seq_len, moe=False, attn_len=attn_len)
        moe = _layer_fwd(arch, dev, lay, tokens, seq_len, moe=True, attn_len=attn_len) if arch.is_moe else (
            (0.0,) * len(dense))
        # the LM head stays in 16-bit under FP8 recipes (Transformer Engine keeps first/last layers in BF16)
        head = replace(dev, precision="bf16").gemm_time(2 * tokens * arch.output_params / lay.tp)
        head_elem = dev.stream_time(tokens * arch.d_out / lay.tp * LOGIT_FP32_BYTES_FWD)  # fp32 log-softmax
        # tensor parallel: 2 all-reduce equivalents per layer forward (AG+RS with SP: same bytes)
        tp_layer = dev.all_reduce(tokens * arch.hidden * BF16, lay.tp, lay.tp)
        # context parallel: ring exchange of this rank's K/V, overlapped with attention
        kv_bytes = tokens * (2 * arch.n_kv_heads * arch.d_head) * BF16 / lay.tp
        cp_layer = dev.all_gather(kv_bytes * lay.cp, lay.cp, lay.tp * lay.cp)
        hit = memo[key] = dense, moe, head, head_elem, tp_layer, cp_layer, {}
    # the sums over the stage's layers read the per-layer times and how many layers the stage holds (pp, and vp
    # where the embedding and the loss take slots) alone: memoized in the per-layer entry (its last item, so the
    # layer key is hashed once), shared by every dp, ZeRO stage and recompute of those degrees
    sums = hit[6]
    skey = (lay.pp, None if slots is None else lay.vp)
    stage = sums.get(skey)
    if stage is None:
        stage = sums[skey] = _stage_sums(hit, layers_stage, moe_frac, slots, lay)
    layers_stage, head, head_elem, gemm, attn, attn_b, elem, elem_b, ep, tp_fwd, cp_exposed = stage
    moe = hit[1]
    bwd_gemm = 1.0 if lora else 2.0  # frozen weights need no weight-gradient GEMM
    # (each pass's compute and exposed TP, EP and CP terms, as scalars: the solver asks ~10k times a solve)
    fwd_compute = gemm + attn + elem + head + head_elem
    bwd_compute = bwd_gemm * (gemm + head) + attn_b + elem_b + 2 * head_elem
    bwd_tp, bwd_ep, bwd_cp = tp_fwd, ep, cp_exposed * attn_b / attn if attn else 0.0
    if not lora:  # frozen weights have no gradients to accumulate
        dense_p, expert_p = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, etp)
        if lay.zero_stage >= 2:  # gradients sharded: each rank accumulates only its shard
            dense_p, expert_p = dense_p / (lay.dp * lay.cp), expert_p / lay.expert_dp
        bwd_compute += dev.stream_time(2 * lay.main_grad_bytes * (dense_p + expert_p))
    if lay.recompute == "full":  # the recomputed layers' forward again (not the LM head's)
        share = recomputed_share(lay, layers_stage)
        bwd_compute += share * (fwd_compute - (head + head_elem))
        bwd_tp += share * tp_fwd
        bwd_ep += share * ep
        bwd_cp += share * cp_exposed
    elif lay.recompute == "selective":
        bwd_compute += ((attn if checkpoints_core_attn(lay) else 0.0)
                        + layers_stage * recompute_module_rerun_fwd(arch, dev, lay, tokens))
    # pipeline: send activations forward, gradients back, per (virtual) stage boundary
    pp_bytes = tokens * arch.hidden * BF16 / (lay.tp if lay.sp else 1)
    pp_span = 2 * lay.tp * lay.cp * lay.dp
    p2p = dev.p2p(pp_bytes, pp_span) if lay.pp > 1 else 0.0
    ep_hidden = 0.0
    if lay.moe_a2a_overlap and arch.is_moe:
        ep_hidden = layers_stage * moe_frac * (2 * moe[5] - ep_overlap_exposed(moe, bwd_gemm,
                                                                                ep_comm_sm_share(dev, lay)))
    return {"fwd": fwd_compute + tp_fwd + ep + cp_exposed, "bwd": bwd_compute + bwd_tp + bwd_ep + bwd_cp,
            "fwd_compute": fwd_compute, "bwd_compute": bwd_compute, "tp": tp_fwd + bwd_tp, "tp_fwd": tp_fwd,
            "ep": ep + bwd_ep, "cp": cp_exposed + bwd_cp, "p2p": p2p, "ep_hidden": ep_hidden}


def _stage_sums(layer: tuple, layers_stage: int, moe_frac: float, slots: int | None, lay: TrainLayout) -> tuple:
    """`stage_times`' sums over the busiest stage's layers from the per-layer times `layer` (_layer_fwd's dense
    and MoE tuples, the LM head's GEMM and log-softmax, a layer's TP and CP collectives; after them `stage_times`'
    memo of these sums) and the even split's `layers_stage`: (layers, head, head_elem, GEMM, attention, attention backward, elementwise, elementwise
    backward, EP, TP forward, exposed CP forward)."""
    dense, moe, head, head_elem, tp_layer, cp_layer = layer[:6]
    if slots is not None:
        # the busiest stage: a middle one (vp * slots layers) or the last (one layer fewer, plus the
        # output layer), whichever takes longer; with pp = 2 there is no middle stage
        layers_stage = lay.vp * slots - 1
        # one layer's forward and backward (GEMMs 1 + 2 passes, attention, elementwise, 2 x the
        # all-to-all, 4 TP all-reduces) against the output layer's (its GEMM 3 passes, its log-softmax)
        per_layer = sum((1 - moe_frac) * d * k + moe_frac * x * k for d, x, k in zip(dense, moe, (3, 1, 1, 1, 1, 2)))
        if lay.pp > 2 and per_layer + 4 * tp_layer > 3 * (head + head_elem):
            layers_stage, head, head_elem = lay.vp * slots, 0.0, 0.0
    gemm, attn, attn_b, elem, elem_b, ep, _, _ = [layers_stage * ((1 - moe_frac) * d + moe_frac * m)
                                                  for d, m in zip(dense, moe)]
    tp_fwd = layers_stage * 2 * tp_layer
    cp_fwd = layers_stage * cp_layer
    attn_fwd_exposed = max(attn, cp_fwd) if lay.cp > 1 else attn
    return layers_stage, head, head_elem, gemm, attn, attn_b, elem, elem_b, ep, tp_fwd, attn_fwd_exposed - attn


def ep_comm_sm_share(dev: Device, lay: TrainLayout) -> float:
    """Share of the GPU's SMs the flex dispatcher's all-to-all kernels hold while they run: DeepEP's
    and HybridEP's dispatch and combine are SM kernels of a set size (constants.yaml moe_deepep_num_sms,
    moe_hybridep_num_sms) over the GPU's SM count (hardware_db sm_count). Under the EP A2A overlap the
    compute beside them runs on the rest (ep_overlap_exposed). NCCL's all-to-all (the alltoall
    dispatcher) takes one CTA per p2p channel, a count NCCL's topology search sets at init
    (src/graph/paths.cc ncclTopoComputeP2pChannels: min(nChannels, NCCL_MAX_P2P_NCHANNELS)), which
    no source states for these runs: 0, and an unrecorded SM count gives 0 too."""
    sms = dev.pool.gpu.sm_count
    if sms is None or lay.moe_dispatcher == "alltoall":
        return 0.0
    c = constants()
    used = c["moe_deepep_num_sms"] if lay.moe_dispatcher == "deepep" else c["moe_hybridep_num_sms"]
    return min(1.0, used / sms.value)


def ep_overlap_exposed(moe_layer: tuple, bwd_gemm: float = 2.0, sm_share: float = 0.0) -> float:
    """Expert all-to-all seconds a MoE layer leaves exposed when one micro-batch's forward and
    another's backward run together under Megatron-Core's EP A2A overlap (`moe_layer`: _layer_fwd's
    tuple). Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py (commit 2edffadb,
    TransformerLayerSchedulePlan.run) runs per layer pair
        comm stream:    combine_bwd | dispatch_fwd -> dispatch_bwd    | combine_fwd
        compute stream: attn_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd | attn_bwd
    so each of the four all-to-alls (a quarter of the layer's forward + backward ep_comm) hides
    under the compute beside it and shows only what exceeds it. Only a transfer over the NICs hides
    (_layer_fwd's ep_kernel_s): an all-to-all inside the NVLink domain is host time in the model,
    which a second stream does not shorten (one host launches both micro-batches' kernels). The
    attention side is the layer's compute less the MoE block (its
    backward: bwd_gemm GEMM passes, the attention backward, twice the elementwise bytes); the MoE
    block's backward is bwd_gemm times its forward.

    `sm_share` (ep_comm_sm_share): the all-to-all kernel holds that share of the SMs while it runs,
    so the compute beside it runs at 1 - sm_share of its speed until the transfer ends: with a
    transfer of a seconds beside compute of C seconds, the pair takes C + a*sm_share when the
    compute outlasts it, else a; exposed max(a*sm_share, a - C)."""
    gemm, attn, attn_b, elem, elem_b, ep, block, ep_kernel = moe_layer[:8]
    a, ak = ep / 2, ep_kernel / 2  # one all-to-all: the layer's forward runs two (dispatch, combine)
    attn_f = gemm - block + attn + elem
    attn_bw = bwd_gemm * (gemm - block) + attn_b + elem_b
    mlp = block * (1 + bwd_gemm)
    f = sm_share
    hideable = max(ak * f, ak - attn_f) + max(2 * ak * f, 2 * ak - mlp) + max(ak * f, ak - attn_bw)
    return 4 * (a - ak) + hideable


def ep_overlap_paired_share(lay: TrainLayout, microbatches: float) -> float:
    """Share of a step's micro-batch passes that run paired (a forward with another micro-batch's
    backward) under EP A2A overlap; the warmup forwards and the cooldown backwards run alone.
    Megatron-LM megatron/core/pipeline_parallel/schedules.py (commit 2edffadb, lines 805-831):
    the interleaved schedule's warmup is (pp - rank - 1) * 2 + (vp - 1) * pp chunk-forwards plus
    one more with overlap_moe_expert_parallel_comm (taken at the mean rank, pp - 1 for the first
    term); without a pipeline (combined_1f1b_schedule_for_no_pipelining) the first forward and the
    last backward run alone. The overlap requires vp with pp > 1 (transformer_config.py L2099-2103)."""
    if not lay.moe_a2a_overlap:
        return 0.0
    passes = max(1.0, microbatches * lay.vp)
    alone = (lay.pp - 1) + (lay.vp - 1) * lay.pp + 1 if lay.pp > 1 else 1
    return max(0.0, 1.0 - alone / passes)


def train_time(arch: Architecture, dev: Device, lay: TrainLayout, global_batch: int, seq_len: float,
               *, optimizer_steps: int = 1, lora_rank: int = 0, overlap_grad_reduce: bool = True,
               st: dict | None = None, memo: dict | None = None, logit_bytes_fwd: float | None = None,
               fsdp_reduce_bytes: float | None = None,
               unfused_elementwise: tuple[float, float, float] | None = None,
               logit_bytes_bwd: float | None = None, loss_per_packed_sequence: bool = False,
               fsdp_copy_bytes: tuple[float, float] | None = None, fsdp_root: bool = False,
               fsdp_cast_bytes: float | None = None, unfused_wgrad: bool = False,
               sp_input_gathers: int | None = None) -> TrainTime:
    """Time of `optimizer_steps` steps, each over `global_batch` sequences of `seq_len` tokens.
    `memo` (optional, the caller's) keeps the gradient collectives and the optimizer step,
    which depend on neither the micro-batch, vp nor recompute. `logit_bytes_fwd`: the
    framework's log-prob traffic per fp32 logit, see logit_extra_fwd; `fsdp_reduce_bytes`: bytes
    per parameter the framework's FSDP reduce-scatters gradients in, None: the parameters' 16
    bits; `unfused_elementwise`: see unfused_elementwise_fwd, its backward moving twice the
    forward's bytes as the fused count does; `logit_bytes_bwd`, `loss_per_packed_sequence`: the
    framework's log-prob backward, see logit_extra_bwd; `fsdp_copy_bytes`: see fsdp_copy_time; `fsdp_root`:
    the framework's FSDP root unit holds the embedding and output layer (zero3_exposed's `root`);
    `fsdp_cast_bytes`: see fsdp_layer_cast_time (forward and backward, ZeRO-3 layouts only); `unfused_wgrad`: the
    framework's Megatron trainer adds each weight gradient into the main gradient apart from its GEMM
    (UNFUSED_WGRAD_BYTES per trained parameter and micro-batch; layouts below ZeRO-3 only); `sp_input_gathers`:
    see sp_input_gather_share."""
    st = st or stage_times(arch, dev, lay, seq_len, lora=lora_rank > 0)
    m = max(1.0, global_batch / (lay.dp * lay.micro_batch))
    logits = logit_extra_fwd(arch, dev, lay, seq_len, logit_bytes_fwd)
    logits += logit_extra_bwd(arch, dev, lay, seq_len, logit_bytes_bwd, loss_per_packed_sequence)
    if unfused_wgrad and lay.zero_stage < 3:
        logits += dev.stream_time(UNFUSED_WGRAD_BYTES * sum(_trained_params(arch, lay, lora_rank)))
    eager = unfused_elementwise_fwd(arch, dev, lay, seq_len, unfused_elementwise)
    logits += eager * (3.0 + recomputed_share(lay, math.ceil(arch.layers / lay.pp)))
    per_mb = st["fwd"] + st["bwd"]
    p2p = m * 2 * lay.vp * st["p2p"]
    bubble = (lay.pp - 1) / lay.vp * per_mb
    if memo is None:
        comm, opt, share = _grad_sync_and_step(arch, dev, lay, lora_rank)
    else:
        key = ("grad sync+step", id(arch), id(dev.pool), dev.precision, dev.overrides, lay.tp, lay.pp, lay.ep,
               lay.etp, lay.dp, lay.cp, lay.zero_stage, lay.offload, lora_rank, lay.adam_moment_bytes,
               lay.master_param_bytes)
        hit = memo.get(key)
        comm, opt, share = hit if hit is not None else memo.setdefault(key, _grad_sync_and_step(arch, dev, lay,
                                                                                                lora_rank))
    if lay.zero_stage >= 3:
        # parameters stay sharded: gathered layer by layer in every micro-batch's forward and
        # backward, gradients reduce-scattered as each layer's backward ends (in fp32 where the
        # framework's mixed-precision policy sets reduce_dtype=float32: frameworks/runtime.yaml)
        base_dense, base_expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp)
        dense, expert = _trained_params(arch, lay, lora_rank)
        grad_bytes = (BF16 * dense, BF16 * expert)
        if fsdp_reduce_bytes is not None:
            grad_bytes = tuple(fsdp_reduce_bytes * x for x in (dense, expert))
        root = None
        if fsdp_root and lay.pp == 1:
            rp = fsdp_root_params(arch, lay)
            root = (BF16 * rp, 0.0 if lora_rank > 0 else (fsdp_reduce_bytes or BF16) * rp)
        dp_exposed = m * zero3_exposed(dev, lay, st, math.ceil(arch.layers / lay.pp),
                                       (BF16 * base_dense, BF16 * base_expert), grad_bytes, root)
        logits += fsdp_copy_time(dev, base_dense + base_expert, dense + expert, fsdp_copy_bytes, backward=True)
        logits += 2 * fsdp_layer_cast_time(arch, dev, lay, seq_len, fsdp_cast_bytes)
    else:
        dp_exposed = overlapped_exposed(comm, st["bwd_compute"], share) if overlap_grad_reduce else comm
    t = TrainTime(
        compute=m * (st["fwd_compute"] + st["bwd_compute"] + logits),
        tp_comm=m * st["tp"] * (1.0 + sp_input_gather_share(lay, sp_input_gathers)), cp_comm=m * st["cp"],
        ep_comm=m * (st["ep"] - ep_overlap_paired_share(lay, m) * st.get("ep_hidden", 0.0)), pp_comm=p2p,
        bubble=bubble, dp_comm=dp_exposed, optimizer=opt)
    return t.scaled(optimizer_steps / dev.train_efficiency)


def _trained_params(arch: Architecture, lay: TrainLayout, lora_rank: int) -> tuple[float, float]:
    """(dense, expert) parameters per GPU that get gradients (the adapters only with LoRA)."""
    if lora_rank > 0:
        return lora_params(arch, lora_rank) / (lay.tp * lay.pp), 0.0
    return params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp)


def _grad_sync_and_step(arch: Architecture, dev: Device, lay: TrainLayout,
                        lora_rank: int) -> tuple[float, float, float]:
    """(the gradient collectives of one step with ZeRO 0-2 (0 with ZeRO-3, whose collectives run
    per micro-batch: `zero3_exposed`), the optimizer step, the contention share of those collectives
    (collectives_contention_share))."""
    dense, expert = _trained_params(arch, lay, lora_rank)
    span = lay.tp * lay.cp * lay.dp
    n_d, n_e = lay.dp * lay.cp, lay.expert_dp
    grad_bytes_d, grad_bytes_e = BF16 * dense, BF16 * expert
    if lay.zero_stage >= 3:
        parts = ((0.0, n_d), (0.0, n_e))
    elif lay.zero_stage == 0:
        parts = ((dev.all_reduce(grad_bytes_d, n_d, span), n_d), (dev.all_reduce(grad_bytes_e, n_e, span), n_e))
    else:  # reduce-scatter grads, all-gather updated params
        parts = ((2 * dev.reduce_scatter(grad_bytes_d, n_d, span), n_d),
                 (2 * dev.reduce_scatter(grad_bytes_e, n_e, span), n_e))
    comm = parts[0][0] + parts[1][0]
    shard_d, shard_e = (n_d, n_e) if lay.zero_stage >= 1 else (1, 1)
    if lay.offload == "none":
        # the fused Adam step reads and writes each moment and the master weight: 16-bit moments move 4 x 2
        # bytes less, a 16-bit master remainder (or none) 2 x 2 (or 2 x 4)
        per_param = (constants()["optimizer_bytes_per_param"] - 4 * (FP32_ADAM_MOMENT_BYTES - lay.adam_moment_bytes)
                     - 2 * (FP32_MASTER_BYTES - lay.master_param_bytes))
        opt = dev.stream_time(per_param * (dense / shard_d + expert / shard_e))
    else:
        # the step runs on the host: this rank's gradient shard goes down and its updated
        # 16-bit weights come back over PCIe (ZeRO-Offload, arXiv 2101.06840); the host's Adam
        # itself is not modelled
        opt = dev.pcie_time(2 * BF16 * (dense / shard_d + expert / shard_e))
    return comm, opt, collectives_contention_share(dev, parts, span)


def zero3_exposed(dev: Device, lay: TrainLayout, st: dict, layers: int, weight_bytes: tuple[float, float],
                  grad_bytes: tuple[float, float] | None, root: tuple[float, float] | None = None,
                  issue_share: float = 1.0) -> float:
    """Exposed ZeRO-3 / FSDP communication of one micro-batch on one stage. Each layer's
    parameters are all-gathered before its forward and again before its backward, and its
    gradients reduce-scattered after it (`grad_bytes` None: forward only); every collective pays
    its latency. Prefetching overlaps the next layer's collectives with this layer's compute
    (FSDP forward/backward prefetch, DeepSpeed stage3_prefetch_bucket_size), so a layer exposes
    what its compute does not cover, and the first gather of the pass is exposed whole
    (nothing runs before it).

    `root`: (gathered, reduce-scattered) bytes of the FSDP root unit's parameters, the embedding and
    output layer, where the framework's FSDP keeps them in the root (frameworks/runtime.yaml
    fsdp_root_holds_embeddings): the root is gathered whole before the first layer's gather, both
    exposed, and a backward ends waiting for the first layer's reduce-scatter and then the root's
    (FSDP2's final callback); the layers share the rest of the dense bytes.

    `issue_share`: the share of a layer's forward compute still queued when the host issues the next layer's
    gather (forward only, see host_synced_issue_share; 1: the host runs ahead, the whole layer hides it)."""
    span = lay.tp * lay.cp * lay.dp
    groups = ((lay.dp * lay.cp), lay.expert_dp)
    if root is not None:
        weight_bytes = (max(0.0, weight_bytes[0] - root[0]), weight_bytes[1])
        if grad_bytes is not None:
            grad_bytes = (max(0.0, grad_bytes[0] - root[1]), grad_bytes[1])
    gathers = tuple((dev.all_gather(b / layers, n, span), n) for b, n in zip(weight_bytes, groups))
    gather = sum(t for t, _ in gathers)
    fwd_layer = st["fwd_compute"] / layers
    f = collectives_contention_share(dev, gathers, span)
    opening = gather + (dev.all_gather(root[0], groups[0], span) if root is not None else 0.0)
    if grad_bytes is None:
        return opening + layers * overlapped_exposed(gather, fwd_layer * issue_share, f)
    scatters = tuple((dev.reduce_scatter(b / layers, n, span), n) for b, n in zip(grad_bytes, groups))
    scatter = sum(t for t, _ in scatters)
    bwd_layer = st["bwd_compute"] / layers
    closing = (scatter + dev.reduce_scatter(root[1], groups[0], span)) if root is not None else 0.0
    return opening + closing + layers * (overlapped_exposed(gather, fwd_layer, f)
                                         + overlapped_exposed(gather + scatter, bwd_layer,
                                                              collectives_contention_share(dev, gathers + scatters,
                                                                                           span)))


def collectives_contention_share(dev: Device, parts: tuple[tuple[float, int], ...], span: int) -> float:
    """overlap_contention_share of collectives run back to back, `parts` (seconds, ranks) over `span` GPUs (a
    layer's dense and expert-parallel gathers): each one's share weighted by its time; 0 when they take none."""
    total = sum(t for t, _ in parts)
    if total <= 0:
        return 0.0
    return sum(t * overlap_contention_share(dev, n, span) for t, n in parts) / total


def overlap_contention_share(dev: Device, n: int, span: int) -> float:
    """Share of its speed the compute on the other stream loses while an overlapped collective of `n` ranks
    spread over `span` GPUs runs beside it (the FSDP / ZeRO-3 per-layer all-gathers and reduce-scatters, the
    data-parallel gradient reduction overlapped with the last backward): the SMs the collective's kernel holds
    (nccl_sm_share) plus the share of the HBM bandwidth its traffic takes. A ring step stores what arrives over
    the link in HBM and reads it back to pass it on (and reads or writes the user buffer): at least
    constants.yaml nccl_hbm_bytes_per_bus_byte HBM bytes per byte at the collective's bus bandwidth
    (dev.ring_link, the rate dev.all_gather charges it at) against the HBM rate (dev.hbm_bytes_per_s). A ring inside
    an NVLink domain, or over whole nodes, runs at NVLink rates and that is the larger part (H100: 2 x 369 / 2982 =
    0.25 beside 24 / 132 = 0.18 of the SMs); a group with one rank per node runs at its NIC's few tens of GB/s and
    the SM share remains. The two add: pytorch/pytorch PR #172714's 8 x H100 bench separates them (a copy-engine
    collective, which holds no SMs, still slows the GEMM beside it; see the constant's source). 0 for a group of
    one; at most 1."""
    if n <= 1:
        return 0.0
    bw, _ = dev.ring_link(n, span)
    hbm = constants()["nccl_hbm_bytes_per_bus_byte"] * bw / dev.hbm_bytes_per_s
    return min(1.0, nccl_sm_share(dev, n, span) + hbm)


def nccl_sm_share(dev: Device, n: int, span: int) -> float:
    """Share of the GPU's SMs (CUs on AMD) a collective of `n` ranks spread over `span` GPUs holds while it runs
    beside compute on another stream (overlap_contention_share's SM part): the library launches one CTA per
    channel, each resident on an SM until the collective ends (nccl_collective_ctas), over the GPU's SM count
    (hardware_db sm_count). 0 where the SM count is not recorded."""
    sms = dev.pool.gpu.sm_count
    ctas = nccl_collective_ctas(dev, n, span)
    if sms is None or ctas is None:
        return 0.0
    return min(1.0, ctas / sms.value)


def nccl_collective_ctas(dev: Device, n: int, span: int) -> float | None:
    """CTAs (channels) a ring collective of `n` ranks spread over `span` GPUs launches on each GPU. NVIDIA: inside
    one NVLink domain constants.yaml nccl_collective_ctas (24: NCCL's channel rule on an 8-GPU NVSwitch node, the
    count Nsight and NCCL's logs print); a group that crosses domains leaves each through the NICs of its ranks
    there (Device.ranks_per_domain x the pool's NICs per GPU), one search channel each, doubled where the NIC is
    fast and the group leaves through at most 4 (nccl_dup_nic_gbytes_per_s), and NCCL runs
    nccl_ctas_per_search_channel CTAs per search channel, at most the in-domain count: 16 for a ring over whole
    8-NIC nodes; a group with one rank per node 4 on 400 Gb/s NICs, 2 on 200 Gb/s. AMD: RCCL's count on 8 MI300X
    (rccl_collective_ctas, 56). None for other vendors (not read)."""
    c = constants()
    vendor = dev.pool.gpu.vendor
    if vendor == "AMD":
        return c["rccl_collective_ctas"]
    if vendor != "NVIDIA":
        return None
    inside = c["nccl_collective_ctas"]
    per_domain = dev.ranks_per_domain(n, span)
    if per_domain is None:
        return inside
    nics = max(1, round(per_domain * dev.pool.nics_per_node / dev.pool.gpus_per_node))
    search = 2 * nics if nics <= 4 and dev.pool.network.gbytes_per_s >= c["nccl_dup_nic_gbytes_per_s"] else nics
    return min(inside, c["nccl_ctas_per_search_channel"] * search)


def overlapped_exposed(comm: float, compute: float, sm_share: float) -> float:
    """Seconds a collective of `comm` seconds adds beside `compute` seconds of kernels on the compute stream when the
    compute loses `sm_share` of its speed beside it (`overlap_contention_share`: the SMs the collective's kernel
    holds and the HBM bandwidth its traffic takes): the compute runs at 1 - sm_share of its speed while the
    collective runs, so the pair takes compute + comm * sm_share when the compute outlasts it, else comm (the
    exposed formula of ep_overlap_exposed): max(comm * sm_share, comm - compute), never below 0."""
    return max(comm * sm_share, comm - compute, 0.0)


def sp_input_gather_share(lay: TrainLayout, gathers: int | None) -> float:
    """Tensor-parallel time a pass adds, as a share of the model's count (stage_times: two all-reduce
    equivalents per layer and pass, i.e. two all-gathers and two reduce-scatters of the layer's hidden states),
    where the framework's FSDP trainer runs sequence parallelism with a plan that all-gathers a layer's
    sequence-sharded input `gathers` times per forward instead of twice (frameworks/runtime.yaml
    fsdp_sp_input_gathers_per_layer: one per column-parallel projection): each further gather moves half an
    all-reduce of the hidden states, and in the backward the reduce-scatter of its input's gradient the same,
    so (gathers - 2) / 4 of the forward's and of the backward's count. 0 where the fact is not read or the
    layout runs no sequence-parallel FSDP trainer (ZeRO-3 with tp > 1 and sequence parallelism)."""
    if not gathers or lay.zero_stage < 3 or lay.tp <= 1 or not lay.sp:
        return 0.0
    return max(0, gathers - 2) / 4


def host_synced_issue_share(arch: Architecture, seq_len: float, syncs: int) -> float:
    """Share of a decoder layer's forward compute that hides the next layer's FSDP all-gather where the host
    waits for the GPU `syncs` times inside each layer's attention (frameworks/runtime.yaml
    packed_attention_host_syncs_per_layer, after the q/k/v projections are queued). FSDP's forward prefetch is
    implicit: the next layer's gather is issued by its pre-forward hook when the host reaches it, so after the
    wait only what the GPU has left of the layer, the attention core, output projection and MLP, runs under the
    gather; the q/k/v projections (their share of the layer's forward FLOPs) no longer do. 1 where `syncs` is 0
    (the host runs ahead and the whole layer hides the gather)."""
    if syncs <= 0:
        return 1.0
    qkv = 2.0 * (arch.attn_params_per_layer - arch.v_width * arch.hidden) * arch.layers
    layer = arch.matmul_flops_per_token - 2.0 * arch.output_params + arch.attention_flops_per_token(seq_len)
    return max(0.0, 1.0 - qkv / layer)


def host_sync_time(arch: Architecture, dev: Device, lay: TrainLayout, syncs: int) -> float:
    """Seconds one micro-batch's forward leaves the GPU idle at `syncs` host waits per decoder layer
    (frameworks/runtime.yaml packed_attention_host_syncs_per_layer): each drains the queue, and the GPU waits
    for the host to launch the next kernel (hardware_db kernel_launch_us) at each one."""
    return syncs * math.ceil(arch.layers / lay.pp) * dev.launch_s


def fsdp_root_params(arch: Architecture, lay: TrainLayout) -> float:
    """Parameters per GPU of the FSDP root unit where it holds everything outside the decoder layers: the
    input embedding, the output layer (one matrix when tied) and the final norm, sharded by tp."""
    return (arch.embedding_params + arch.hidden) / lay.tp


def fsdp_copy_time(dev: Device, params: float, trained: float, copy_bytes: tuple[float, float] | None,
                   backward: bool) -> float:
    """Seconds one micro-batch's pass spends on the copies its FSDP runs on the compute stream, where
    the framework's FSDP makes them (frameworks/runtime.yaml fsdp_copy_bytes_per_param, (forward,
    backward) bytes per parameter; None: none): each unshard copies the gathered 16-bit buffer out
    into the `params` parameters (the forward's bytes, again in a backward that gathers anew), and a
    backward copies the `trained` parameters' gradients into the reduce-scatter buffer (the rest of
    the backward's bytes)."""
    if not copy_bytes:
        return 0.0
    fwd, bwd = copy_bytes
    nbytes = fwd * params + (fwd * params + (bwd - fwd) * trained if backward else 0.0)
    return dev.stream_time(nbytes)


def fsdp_layer_cast_time(arch: Architecture, dev: Device, lay: TrainLayout, seq_len: float,
                         bytes_per_element: float | None) -> float:
    """Seconds one micro-batch's forward spends, over the stage's layers, on the casts the framework's FSDP
    mixed-precision policy makes at every decoder layer's boundary (frameworks/runtime.yaml
    fsdp_layer_output_cast_bytes: each layer's output to fp32, the next one's input back to bf16),
    `bytes_per_element` per hidden element of every token (split by tp only with sequence parallelism);
    a backward moves the same again."""
    if not bytes_per_element:
        return 0.0
    tokens = lay.micro_batch * seq_len / lay.cp
    return dev.stream_time(tokens * arch.hidden / (lay.tp if lay.sp else 1) * bytes_per_element
                           * math.ceil(arch.layers / lay.pp))


def forward_time(arch: Architecture, dev: Device, lay: TrainLayout, sequences: int, seq_len: float,
                 st: dict | None = None, logit_bytes_fwd: float | None = None,
                 unfused_elementwise: tuple[float, float, float] | None = None,
                 fsdp_copy_bytes: tuple[float, float] | None = None, fsdp_cast_bytes: float | None = None,
                 host_syncs: int = 0, sp_input_gathers: int | None = None) -> float:
    """Forward-only pass (log-probs, reference, reward, value) over `sequences` (`fsdp_cast_bytes`: see
    fsdp_layer_cast_time, ZeRO-3 layouts only; `host_syncs`: the host's waits for the GPU per decoder layer,
    see host_sync_time and host_synced_issue_share; `sp_input_gathers`: see sp_input_gather_share)."""
    st = st or stage_times(arch, dev, lay, seq_len)
    m = max(1.0, sequences / (lay.dp * lay.micro_batch))
    per_mb = (st["fwd"] + (st["p2p"] if lay.pp > 1 else 0.0) + logit_extra_fwd(arch, dev, lay, seq_len, logit_bytes_fwd)
              + unfused_elementwise_fwd(arch, dev, lay, seq_len, unfused_elementwise)
              + host_sync_time(arch, dev, lay, host_syncs)
              + sp_input_gather_share(lay, sp_input_gathers) * st["tp_fwd"])
    if lay.zero_stage >= 3:  # sharded weights are gathered layer by layer in every pass
        dense, expert = params_per_gpu(arch, lay.tp, lay.pp, lay.ep, lay.etp)
        per_mb += zero3_exposed(dev, lay, st, math.ceil(arch.layers / lay.pp), (BF16 * dense, BF16 * expert), None,
                                issue_share=host_synced_issue_share(arch, seq_len, host_syncs))
        per_mb += fsdp_copy_time(dev, dense + expert, 0.0, fsdp_copy_bytes, backward=False)
        per_mb += fsdp_layer_cast_time(arch, dev, lay, seq_len, fsdp_cast_bytes)
    return (m + lay.pp - 1) * per_mb / dev.logprob_efficiency


def model_flops(arch: Architecture, tokens: float, seq_len: float, *, recompute: bool = False,
                causal: bool = False) -> float:
    """Training FLOPs by the published convention: 3 passes (4 with full recompute, the
    'hardware' count of Narayanan et al. 2021 eq. 3), attention counted non-causal."""
    layers = arch.matmul_flops_per_token - 2.0 * arch.output_params
    head = 2.0 * arch.output_params
    attn = arch.attention_flops_per_token(seq_len, causal=causal)
    passes = 4 if recompute else 3
    return tokens * (passes * (layers + attn) + 3 * head)
