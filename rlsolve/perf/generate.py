"""Generation (rollout) time and memory of one engine replica.

Decode step = weight GEMMs (max of weight bytes over HBM and FLOPs over the GEMM rate)
then attention (max of KV bytes over HBM and attention FLOPs), run one after the other,
plus the TP all-reduces and the engine's per-step overhead. A replica's requests are
simulated as a fluid: lengths drawn from a truncated exponential with the spec's mean and
max; the running batch is capped by KV memory and max_num_seqs; as short responses finish
the batch shrinks and the long tail decodes at low batch. Prefill is compute bound and,
with prefix caching, done once per prompt. Formulas and sources: docs/model.md.
"""
from __future__ import annotations

import math
from array import array
from bisect import insort
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rlsolve.frameworks.runtime import release, runtime
from rlsolve.models import Architecture
from rlsolve.perf.hw import GB, Device, constants


@dataclass(frozen=True)
class GenLayout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp


def weight_bytes_per_gpu(arch: Architecture, lay: GenLayout, bytes_per_param: float,
                         expert_bytes_per_param: float | None = None) -> float:
    """Weight bytes on a GPU (the routed experts at `expert_bytes_per_param` where given: `trtllm_experts_16bit`)."""
    expert_div = max(lay.tp, lay.ep) * lay.pp
    if expert_bytes_per_param is not None:
        return (bytes_per_param * arch.non_expert_params / (lay.tp * lay.pp)
                + expert_bytes_per_param * arch.routed_expert_params_total / expert_div)
    return bytes_per_param * (arch.non_expert_params / (lay.tp * lay.pp)
                              + arch.routed_expert_params_total / expert_div)


def kv_bytes_per_token_per_gpu(arch: Architecture, lay: GenLayout, kv_bytes: float) -> float:
    """vLLM splits KV heads over tp and replicates them when tp > kv_heads; the MLA latent
    has no head dimension, so every TP rank holds all of it."""
    full = arch.kv_bytes_per_token(kv_bytes) / lay.pp
    if arch.is_mla:
        return full
    return full * max(arch.n_kv_heads, lay.tp) / arch.n_kv_heads / lay.tp


def decode_kv_reads(arch: Architecture, lay: GenLayout, batch: float, sm_count: float | None,
                    engine: str | None = None, engine_version: str | None = None) -> float:
    """How many times one decode step's attention reads each KV head's cache on a GPU: 1, but TensorRT-LLM's
    masked MHA kernel runs a thread block per query head, each reading its KV head's whole context, so a KV
    head is read once per query head it serves (heads / max(kv_heads, tp) times). XQA reads it once: from the
    release that runs it by default, for the ratio and head sizes it has kernels for, and where its heuristic
    takes it (kv heads per GPU x batch x the factor >= the SM count; a GPU whose SM count the catalog lacks
    counts as taking it). Facts and sources: frameworks/runtime.yaml trtllm_decode_attention. Other engines
    (vLLM, SGLang) and rows that name no engine release: 1."""
    if engine != "tensorrt-llm" or engine_version is None or arch.is_mla:
        return 1.0
    facts = runtime().trtllm_decode_attention
    ratio = arch.heads / max(arch.n_kv_heads, lay.tp)
    if ratio <= 1.0 or not facts.kv_reads_per_query_head.value:
        return 1.0
    xqa = (release(engine_version) >= release(facts.xqa_default_from.value)
           and ratio == facts.xqa_q_heads_per_kv.value and arch.d_head in facts.xqa_head_sizes.value
           and (sm_count is None or max(arch.n_kv_heads / lay.tp, 1.0) * batch * facts.xqa_min_block_factor.value
                >= sm_count))
    return 1.0 if xqa else ratio


def trtllm_experts_16bit(arch: Architecture, precision: str, engine: str | None = None,
                         engine_version: str | None = None) -> bool:
    """Whether an FP8 TensorRT-LLM engine runs its routed experts with 16-bit weights and GEMMs: before the
    release whose MoE plugin has an FP8 type (runtime.yaml trtllm_moe.fp8_experts_from)."""
    return (arch.is_moe and precision == "fp8" and engine == "tensorrt-llm" and engine_version is not None
            and release(engine_version) < release(runtime().trtllm_moe.fp8_experts_from.value))


def trtllm_moe_gemm_fraction(arch: Architecture, gpu, engine: str | None = None,
                             engine_version: str | None = None) -> float | None:
    """Fraction of the dense 16-bit peak the routed experts' grouped GEMMs reach in a TensorRT-LLM release whose
    MoE plugin runs its Ampere (sm80, mma.sync) CUTLASS kernel on every GPU from sm80 up (before runtime.yaml
    trtllm_moe.sm90_moe_gemm_from): the GPU's catalog sm80_kernel_fraction, where that path cannot reach the GPU's
    own tensor-core rate (Hopper). None elsewhere: the experts' GEMMs run at the GPU's GEMM rate."""
    frac = gpu.efficiency.sm80_kernel_fraction
    if not (arch.is_moe and engine == "tensorrt-llm" and engine_version is not None and frac is not None):
        return None
    if release(engine_version) >= release(runtime().trtllm_moe.sm90_moe_gemm_from.value):
        return None
    return frac.value


def random_weight_experts_reached(arch: Architecture, engine: str | None = None) -> float | None:
    """Experts each MoE layer reaches per step, averaged over the MoE layers, in a TensorRT-LLM engine built from
    a model config without a checkpoint (layout.random_weights): every token reaches the same top-k experts in the
    first MoE layer, whose output overflows fp16, and every later layer gates its NaN rows to its first expert
    (runtime.yaml trtllm_moe). None where the batch decides (StepModel.experts_touched)."""
    facts = runtime().trtllm_moe
    if not (arch.is_moe and engine == "tensorrt-llm" and facts.random_weights_nan_after_first_moe_layer.value
            and facts.nan_rows_gate_to_first_expert.value):
        return None
    return (arch.experts_per_token + (arch.moe_layers - 1)) / arch.moe_layers


@lru_cache(maxsize=64)
def profile_sampler_bytes_per_logit(engine_version: str | None = None) -> float:
    """Bytes per (row x vocabulary) element live at the peak of the sampler warm-up of vLLM's profile
    run, at the engine release (None: the newest read), from frameworks/runtime.yaml."""
    return runtime().engine_profile_sampler_bytes_per_logit.at(engine_version)


def gen_other_bytes(arch: Architecture, lay: GenLayout, max_num_seqs: float,
                    engine_version: str | None = None) -> float:
    """What vLLM's profile run keeps from the KV cache besides the weights: context, NCCL buffers and
    the run's peak, the larger of its two parts: the activation workspace of the forward over one
    prefill chunk of max_num_batched_tokens (`prefill_chunk_tokens`), and the sampler warm-up over
    min(max_num_seqs, max_num_batched_tokens) rows of the full vocabulary (every TP rank holds the
    gathered logits; frameworks/runtime.yaml engine_profile_sampler_bytes_per_logit) beside the
    forward's bf16 hidden states, which profile_run holds until the sampler has run."""
    c = constants()
    chunk = c["prefill_chunk_tokens"]
    act = chunk * (4 * arch.hidden + 3 * (arch.d_moe_ffn if arch.is_moe else arch.d_ffn) / lay.tp) * 2.0
    rows = max(1.0, min(float(max_num_seqs), chunk))
    sampler = chunk * arch.hidden * 2.0 + rows * arch.d_out * profile_sampler_bytes_per_logit(engine_version)
    nccl = c["nccl_buffers_gb"] if lay.tp * lay.pp > 1 else 0.0  # a lone GPU opens no communicator
    return (c["cuda_context_gb"] + nccl) * GB + max(act, sampler)


def decode_gemms_per_step(arch: Architecture) -> float:
    """Weight GEMMs one decode step runs on a GPU, each paying Device.gemm_fill_s: 4 a layer (the attention's
    QKV and output projections, the MLP's fused up/gate and down projections: the four GEMMs of vLLM's
    LlamaDecoderLayer that constants.yaml decode_eager_kernels_per_layer counts, and the count prefill_time and the
    training layer (perf/train.py _layer_fwd) charge; an MoE layer's routed experts run as one grouped GEMM per
    projection) and the LM head. Over pp stages a GPU runs L/pp layers for each of pp micro-batches: the same."""
    return 4.0 * arch.layers + 1.0


def eager_launches_per_layer(tp: int) -> float:
    """Kernel launches per layer and decode step that an engine without CUDA graphs (enforce_eager)
    pays beyond the graph's: every kernel of the layer but the small ones already charged a launch
    (constants.yaml decode_eager_kernels_per_layer - decode_small_kernels_per_layer), and the two
    TP all-reduces when tp > 1."""
    c = constants()
    return c["decode_eager_kernels_per_layer"] - c["decode_small_kernels_per_layer"] + (2 if tp > 1 else 0)


class StepModel:
    """Decode-step time of one replica as a function of batch and mean context."""

    def __init__(self, arch: Architecture, dev: Device, lay: GenLayout, weight_bytes: float, kv_bytes: float,
                 host_per_seq: float = 0.0, eager: bool = False, kv_reads: float = 1.0,
                 expert_bytes: float | None = None, expert_dev: Device | None = None,
                 experts_reached: float | None = None):
        """`expert_bytes`, `expert_dev`: the routed experts' bytes per parameter and the device (precision) their
        GEMMs run at, where they differ from the rest (`trtllm_experts_16bit`); `experts_reached`: experts an MoE
        layer reaches per step whatever the batch (`random_weight_experts_reached`), else the batch decides."""
        self.arch, self.dev, self.lay = arch, dev, lay
        self.experts_reached = experts_reached
        n = lay.tp * lay.pp
        # With pp stages the batch moves as pp micro-batches and each re-reads its stage's
        # weights: per decode step every GPU reads its weights pp times (pp x W/(tp*pp)).
        self.dense_w = weight_bytes * arch.non_expert_params / lay.tp
        # bytes of ONE routed expert (all MoE layers) on a GPU: sharded by tp, or whole on 1/ep of the GPUs
        self.expert_w = (weight_bytes if expert_bytes is None else expert_bytes) * arch.expert_params \
            / max(lay.tp, lay.ep) * arch.moe_layers
        # KV bytes the attention reads per context token: the cache's, times the reads of each KV head
        # (decode_kv_reads: more than one where the engine's kernel reads it once per query head)
        self.kv_tok = kv_bytes_per_token_per_gpu(arch, lay, kv_bytes) * kv_reads
        self.flops_tok = arch.matmul_flops_per_token / n
        if arch.is_mla:  # absorbed MLA attends in the latent space: q.(c,k_rope) and p.c
            self.attn_flops_ctx = 2.0 * arch.heads * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim) * arch.layers / n
        else:
            self.attn_flops_ctx = 2.0 * (arch.q_width + arch.v_width) * arch.layers / n
        # 2 all-reduces per layer (attention, MLP); a GPU runs its L/pp layers for pp micro-batches
        self.tp_ar_per_token = 2 * arch.layers
        # engine host time per step, plus the small per-layer kernels (norms, rotary, activation)
        # that run at their launch floor whatever the batch: every layer runs once per step
        c = constants()
        self.overhead = dev.decode_step_overhead_s + dev.launch_s * (
            arch.layers * c["decode_small_kernels_per_layer"]
            + (arch.moe_layers * c["decode_moe_small_kernels_per_layer"] if arch.is_moe else 0))
        if eager:  # no CUDA graph: the host launches every other kernel of every layer, and the all-reduces
            self.overhead += dev.launch_s * eager_launches_per_layer(lay.tp) * arch.layers
        # host work per running sequence each step, serial with the GPU's: returning the sampled token's log-prob
        # (Device.decode_host_per_seq_s) when the framework asks for it, and the engine core's scheduler pass
        # where the release schedules synchronously (perf/step.py v1_serial_engine_core)
        self.host_per_seq = host_per_seq
        self.hbm, self.attn_rate = dev.hbm_bytes_per_s, dev.attention_flops
        self.gemm_rate = dev.peak_flops * dev.gemm_fraction
        # each GEMM of a step takes the catalog's fixed time t0 beside its FLOPs at the large-GEMM rate
        # (Device.gemm_time's size curve, which prefill and training already pay): `decode_gemms_per_step` of them
        self.gemm_fill = decode_gemms_per_step(arch) * dev.gemm_fill_s
        # the routed experts' GEMM FLOPs per token, where they run at another rate than the rest
        self.expert_rate = expert_dev.peak_flops * expert_dev.gemm_fraction if expert_dev is not None else None
        self.expert_flops_tok = 2.0 * arch.moe_layers * arch.experts_per_token * arch.expert_params / n
        self.pp_hops = (lay.pp - 1) * dev.p2p(1.0, lay.tp * lay.pp) if lay.pp > 1 else 0.0
        # With pp stages the engine keeps pp micro-batches in flight (vLLM V1: batch_queue_size =
        # max_concurrent_batches = pipeline_parallel_size, vllm-project/vllm@00080ee1 vllm/config/vllm.py) and
        # its engine core, one host thread, schedules and updates each one (EngineCore.step_with_batch_queue:
        # one schedule() and one update_from_output() per micro-batch, vllm/v1/engine/core.py; V0: one
        # engine_step per virtual engine on one asyncio loop, AsyncLLMEngine.run_engine_loop; SGLang:
        # event_loop_pp schedules each of pp_size micro-batches): a token round costs pp of the per-step host
        # passes. They overlap the GPUs' work on the other micro-batches (execute_model is
        # non-blocking), and one of them lies on each micro-batch's loop (the `overhead` above), so a round
        # takes at least pp host passes plus the per-sequence host work of all the micro-batches: a floor
        # under the GPU time, not a term added to it. None with pp = 1 (the one pass is in `overhead`).
        self.host_round = lay.pp * dev.decode_step_overhead_s if lay.pp > 1 else 0.0
        # Inside a server the engine's all-reduce (vLLM's custom one) is affine in the batch:
        # fixed hops + bytes per sequence. Across servers it runs on NCCL, whose cost is the
        # fastest of its protocols (Device.all_reduce): exact per batch in the step time, and an
        # affine bound below it (ar_fixed, ar_per_seq) for decode_lower_bound.
        self.ar_fixed, per_byte = dev.all_reduce_bound(lay.tp, lay.tp)
        self.ar_per_seq = per_byte * arch.hidden * 2.0
        self.ar_affine = dev.nodes_spanned(lay.tp, lay.tp) == 1
        self._per_batch: dict[float, tuple[float, float, float]] = {}  # scalar_step_time's batch terms
        self._expert_bytes: dict[tuple, float] = {}  # _expert_bytes_at_least's sums, per replica's requests

    def all_reduce(self, b: float) -> float:
        """One TP all-reduce of a decode step at batch b."""
        if self.ar_affine:
            return self.ar_fixed + self.ar_per_seq * b
        return self.dev.all_reduce(b * self.arch.hidden * 2.0, self.lay.tp, self.lay.tp)

    def experts_touched(self, batch: np.ndarray) -> np.ndarray:
        """Distinct experts one micro-batch visits per layer: E(1 - (1 - k/E)^(b/pp)), or `experts_reached`."""
        a = self.arch
        if not a.is_moe:
            return np.zeros_like(batch)
        if self.experts_reached is not None:
            return np.full_like(np.asarray(batch, dtype=float), self.experts_reached)
        return a.experts * (1.0 - (1.0 - a.experts_per_token / a.experts) ** (batch / self.lay.pp))

    def weight_bytes(self, b: float) -> float:
        """Weight bytes one decode step reads at batch b (the touched experts of MoE layers)."""
        a = self.arch
        if a.is_moe and self.experts_reached is not None:
            return self.dense_w + self.experts_reached * self.expert_w
        touched = a.experts * (1.0 - (1.0 - a.experts_per_token / a.experts) ** (b / self.lay.pp)) if a.is_moe else 0.0
        return self.dense_w + touched * self.expert_w

    def gemm_compute(self, b):
        """GEMM FLOP time of a step at batch b (a float or an array): the routed experts' share at their rate."""
        if self.expert_rate is None:
            return b * self.flops_tok / self.gemm_rate
        return b * ((self.flops_tok - self.expert_flops_tok) / self.gemm_rate + self.expert_flops_tok / self.expert_rate)

    def scalar_step_time(self, b: float, ctx: float) -> float:
        """step_time for one (batch, context) point, without numpy overhead. The terms that depend on the
        batch alone (the GEMMs, the all-reduces, the host's per-sequence work) are kept per batch: the
        simulation meets the same batch weights again and again (the same floats as computed afresh)."""
        hit = self._per_batch.get(b)
        if hit is None:
            gemm = max(self.weight_bytes(b) / self.hbm, self.gemm_compute(b) + self.gemm_fill)
            hit = (gemm, self.all_reduce(b) * self.tp_ar_per_token, self.host_per_seq * b)
            if len(self._per_batch) > 8192:
                self._per_batch.clear()
            self._per_batch[b] = hit
        gemm, ar, host = hit
        bc = b * ctx
        # (the two max() of step_time written out: `y if y > x else x` keeps what max(x, y) keeps, and the
        # simulation asks this ~100,000 times a solve; a builtin call costs more than the comparison)
        attn = bc * self.kv_tok / self.hbm
        other = bc * self.attn_flops_ctx / self.attn_rate
        if other > attn:
            attn = other
        t = gemm + attn + ar + self.pp_hops + self.overhead + host
        other = self.host_round + host
        return other if other > t else t

    def step_time(self, batch: np.ndarray, context: np.ndarray) -> np.ndarray:
        batch = np.asarray(batch, dtype=float)
        wbytes = self.dense_w + self.experts_touched(batch) * self.expert_w
        gemm = np.maximum(wbytes / self.hbm, self.gemm_compute(batch) + self.gemm_fill)
        attn = np.maximum(batch * context * self.kv_tok / self.hbm, batch * context * self.attn_flops_ctx / self.attn_rate)
        if self.ar_affine:
            ar = self.ar_fixed + self.ar_per_seq * batch
        else:
            ar = np.array([self.all_reduce(float(b)) for b in batch.ravel()]).reshape(batch.shape)
        host = self.host_per_seq * batch
        return np.maximum(gemm + attn + ar * self.tp_ar_per_token + self.pp_hops + self.overhead + host,
                          self.host_round + host)


def prefill_time(arch: Architecture, dev: Device, lay: GenLayout, tokens: float, context: float,
                 expert_dev: Device | None = None) -> float:
    """Compute-bound prefill of `tokens` prompt tokens with mean attention context `context` (the routed
    experts' GEMMs at `expert_dev`'s rate where given: `trtllm_experts_16bit`)."""
    if tokens <= 0:
        return 0.0
    n = lay.tp * lay.pp
    chunk = min(constants()["prefill_chunk_tokens"], tokens)
    n_chunks = tokens / chunk
    gemm = dev.gemm_time(chunk * arch.matmul_flops_per_token / n / 4, 4 * n_chunks)  # ~4 GEMMs per layer
    if expert_dev is not None and arch.is_moe:
        share = 2.0 * arch.moe_layers * arch.experts_per_token * arch.expert_params / arch.matmul_flops_per_token
        gemm *= 1.0 - share + share * (dev.peak_flops * dev.gemm_fraction) / (expert_dev.peak_flops
                                                                             * expert_dev.gemm_fraction)
    # a token at mean context c attends c tokens: the forward FLOPs of a causal square of side 2c
    # (Architecture.attention_flops_per_token halves the square for causal kernels)
    attn = tokens * arch.attention_flops_per_token(2.0 * context, causal=True) / n / dev.attention_flops
    layers = math.ceil(arch.layers / lay.pp)
    ar = n_chunks * 2 * layers * dev.all_reduce(chunk * arch.hidden * 2.0, lay.tp, lay.tp)
    return gemm + attn + ar


# --- response lengths ---------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _trunc_exp_rate(mean: float, max_len: float) -> float:
    """Rate lam of a truncated exponential on [0, max] with the given mean (lam < 0 puts the
    mass near max); lam = 0 is the uniform distribution."""
    r = mean / max_len
    if abs(r - 0.5) < 1e-6:
        return 0.0

    def m(lam: float) -> float:  # mean / max as a function of lam * max
        if abs(lam) < 1e-9:
            return 0.5
        return 1.0 / lam - 1.0 / math.expm1(lam)

    lo, hi = -500.0, 500.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if m(mid) > r:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2 / max_len


def length_quantiles(mean: float, max_len: float, u: np.ndarray, clip: float | None = None) -> np.ndarray:
    """Response lengths at quantiles `u`: a truncated exponential on [0, max] with the given
    mean; with `clip`, that share of the responses is cut at max (verl's
    response_length/clip_ratio) and the rest follow the truncated exponential whose mean makes
    the overall mean right."""
    u = np.asarray(u, dtype=float)
    if mean >= max_len:
        return np.full_like(u, float(max_len))
    if clip:
        rest = (mean - clip * max_len) / (1.0 - clip)  # the spec checks clip * max <= mean
        below = length_quantiles(max(rest, 1.0), max_len, np.minimum(u / (1.0 - clip), 1.0))
        return np.where(u >= 1.0 - clip, float(max_len), below)
    lam = _trunc_exp_rate(float(mean), float(max_len))
    if abs(lam) < 1e-12:
        x = u * max_len
    else:
        x = -np.log1p(-u * (-math.expm1(-lam * max_len))) / lam
    return np.clip(x, 1.0, max_len)


@dataclass
class DecodeResult:
    time: float
    steps: float
    peak_batch: float
    mean_batch: float
    kv_limited: bool
    reprefill_tokens: float
    # the largest KV (tokens) the run compared with the capacity: under any capacity of at least this much
    # the same run follows (every comparison comes out the same), so it is what the run needs of memory
    kv_need: float = 0.0


def representative_count(n_requests: float, groups: int = 32) -> int:
    """How many representative requests stand for a replica's `n_requests` (`_representatives`): `groups`,
    fewer for fewer requests, never under 2 (the replica's requests and the step's longest response)."""
    return max(2, min(groups, int(n_requests)))


def simulate_decode(step: StepModel, n_requests: float, prompt_len: float, mean_len: float, max_len: float,
                    kv_capacity_tokens: float, max_num_seqs: float, n_total: float, groups: int = 32,
                    clip: float | None = None, fixed_shares: bool = True, events: list | None = None) -> DecodeResult:
    """Continuous batching of one replica's `n_requests`, as a fluid.

    `groups` representative requests stand for the replica's requests (each with a weight);
    one sits at the quantile of the longest response among all `n_total` samples, because
    the step waits for the slowest replica's longest response. Requests are admitted while
    their context fits in the free KV tokens and the batch is under max_num_seqs; when
    growing contexts overflow the KV memory the newest requests are preempted and later
    re-prefilled (vLLM's recompute preemption). `kv_need` of the result: the largest KV in
    use it compared with `kv_capacity_tokens` (the closed form: the KV held at its busiest), so
    that any capacity of at least that runs the same (the engine search's memory-independent
    candidates, `perf.step.gen_side`). `fixed_shares`: the framework splits the step's samples
    over the engines in fixed shares, so the replica stands for the slowest
    (`slowest_replica_mean`); else for the mean. `events`: an event run appends its schedule to it (`_events`;
    the closed form, none)."""
    g = representative_count(n_requests, groups)
    fast = _decode_all_admitted(step, n_requests, prompt_len, mean_len, max_len, kv_capacity_tokens,
                                max_num_seqs, n_total, g, clip, fixed_shares)
    if fast is not None:
        return fast
    return _events(step, _start(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares), prompt_len,
                   kv_capacity_tokens, max_num_seqs, events=events)


def decode_time(step: StepModel, events, t: float = 0.0) -> float:
    """The time of an event run's schedule (`_events`' `events`: batch, mean context and steps of each event, in
    order) under `step`, from `t`: the very sum `_events` adds as it runs, float for float. Nothing else of the
    run reads the StepModel (its events follow from the requests, the capacity and the cap alone), so a run
    found once is re-timed for every engine with the same replica requests (`perf.step._decode_run`)."""
    step_time = step.scalar_step_time
    it = iter(events)
    for n_act, ctx, dt in zip(it, it, it):
        t += dt * step_time(n_act, ctx)
    return t


@dataclass(frozen=True)
class DecodeTrace:
    """`simulate_decode`'s event run of one replica without a KV limit (capacity inf), kept so that a run
    under a finite capacity can start where it first differs (`resume_decode`): `states[e]` is the run's
    state when event e starts, `over[e]` the largest value compared with `capacity` (`> capacity`) in events
    0..e and `over_slack[e]` the largest compared with `capacity * 1.0001` in them (the preemption test).
    Under a capacity at or above both maxima of events 0..e every comparison of those events comes out as
    without a limit, so they run the same: from the same state, the same float operations. `events`: the
    run's schedule (`decode_time`): a state's time so far is that of the events before it under the
    StepModel resumed with, so one trace serves every StepModel (the states hold the time of the one it was
    taken with)."""
    args: tuple
    states: tuple
    over: tuple
    over_slack: tuple
    events: array


def _start(n_requests: float, mean_len: float, max_len: float, n_total: float, g: int, clip: float | None,
           fixed_shares: bool = True):
    """The event run's state before its first event: the representatives in queue order (`_queue`), none
    decoded nor admitted."""
    table = _queue(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    L = [length for length, _ in table]
    w = [weight for _, weight in table]
    # (L, w, done, queue, active, t, steps, area, peak, reprefill, need_most, limited, fresh, events left)
    return (L, w, [0.0] * g, list(range(g)), [], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, False, None, 50 * g)


def _events(step: StepModel, state: tuple, p: float, cap: float, max_num_seqs: float,
            trace: list | None = None, events: list | None = None) -> DecodeResult:
    """`simulate_decode`'s event loop from `state` (`_start`'s, or one a `DecodeTrace` kept). With `trace`
    (a run without a KV limit), it appends each event's starting state and the values compared with the
    capacity to it; with `events`, each event's batch, mean context and steps (its schedule: `decode_time`
    gives its time under any StepModel)."""
    L, w, done, queue, active, t, steps, area, peak, reprefill, need_most, limited, fresh, left = state
    done, queue, active = list(done), list(queue), list(active)
    step_time = step.scalar_step_time
    seqs, slack = max_num_seqs + 1e-9, cap * 1.0001
    # beside `active`, in its order, each running request's KV in use w[i] * (p + done[i]), what it has left
    # to decode L[i] - done[i] and its weight: each computed once when done[i] changes (or it is admitted) and
    # summed where the loop sums them, so every sum adds the same floats in the same order as over `active`
    # (sums over lists, about twice as fast as over generators; `if x > m: m = x` keeps what max(m, x) keeps)
    kv = [w[i] * (p + done[i]) for i in active]
    rem = [L[i] - done[i] for i in active]
    wa = [w[i] for i in active]
    # fresh: the KV in use summed at the end of the last event, while no preemption changed it since
    for e in range(left):
        if trace is not None:
            trace.append((done[:], queue[:], active[:], t, steps, area, peak, reprefill, need_most, limited, fresh,
                          left - e))
            over = over_slack = -math.inf
        used = fresh if fresh is not None else sum(kv)
        n_act = sum(wa)
        admitted = False
        while queue:  # admit
            i = queue[0]
            wi = w[i]
            need = wi * (p + done[i])
            if active:
                x = used + need
                if x > need_most:
                    need_most = x
                if trace is not None and x > over:
                    over = x
                if x > cap or n_act + wi > seqs:
                    limited = limited or x > cap
                    break
            queue.pop(0)
            active.append(i)
            kv.append(need)
            rem.append(L[i] - done[i])
            wa.append(wi)
            used += need
            n_act += wi
            admitted = True
            if done[i] > 0:
                reprefill += need
        if not active:
            break
        dt = min(rem)
        if len(active) > 1:
            x = used + n_act * dt
            if x > need_most:
                need_most = x
            if trace is not None and x > over:
                over = x
            if x > cap:  # overflow before the next finish
                dt_over = max(1.0, (cap - used) / n_act)
                if dt_over < dt:
                    dt, limited = dt_over, True
        # the KV in use summed over the batch: `used` is that very sum (the same terms in the same order)
        # unless a request was admitted above (then it was added to, not summed)
        ctx = (sum(kv) if admitted else used) / n_act + dt / 2
        t += dt * step_time(n_act, ctx)  # (`decode_time` adds the same)
        if events is not None:
            events += n_act, ctx, dt
        steps += dt
        area += n_act * dt
        if n_act > peak:
            peak = n_act
        # decode dt tokens of every running request; those with nothing left finish
        kept, kv, rem = [], [], []
        for i in active:
            d = done[i] = done[i] + dt
            r = L[i] - d
            if r > 1e-9:
                kept.append(i)
                kv.append(w[i] * (p + d))
                rem.append(r)
        if len(kept) < len(active):
            wa = [w[i] for i in kept]
        active = kept
        used = fresh = sum(kv)
        if len(active) > 1:
            x = used / 1.0001
            if x > need_most:
                need_most = x
            if trace is not None:
                over_slack = used
            while used > slack and len(active) > 1:  # preempt the newest
                queue.insert(0, active.pop())
                used -= kv.pop()
                rem.pop()
                wa.pop()
                fresh = None
        if trace is not None:
            trace.append((over, over_slack))
        if not active and not queue:
            break
    return DecodeResult(time=t, steps=steps, peak_batch=peak, mean_batch=area / steps if steps else 0.0,
                        kv_limited=limited, reprefill_tokens=reprefill, kv_need=need_most)


def decode_trace(step: StepModel, n_requests: float, prompt_len: float, mean_len: float, max_len: float,
                 max_num_seqs: float, n_total: float, groups: int = 32,
                 clip: float | None = None, fixed_shares: bool = True) -> tuple[DecodeResult, DecodeTrace | None]:
    """`simulate_decode` without a KV limit (capacity inf), and its `DecodeTrace` when it ran events (None for
    the closed form, whose runs under a finite capacity share no events with it)."""
    g = representative_count(n_requests, groups)
    fast = _decode_all_admitted(step, n_requests, prompt_len, mean_len, max_len, math.inf, max_num_seqs, n_total, g,
                                clip, fixed_shares)
    if fast is not None:
        return fast, None
    start = _start(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    log: list = []
    events: list = []
    res = _events(step, start, prompt_len, math.inf, max_num_seqs, log, events)
    states, over, over_slack = [], [], []
    hi = hi_slack = -math.inf
    for k in range(0, len(log), 2):
        states.append(log[k])
        if k + 1 < len(log):  # an event that ran to its end (the last may stop with nothing left to admit)
            hi, hi_slack = max(hi, log[k + 1][0]), max(hi_slack, log[k + 1][1])
        over.append(hi)
        over_slack.append(hi_slack)
    args = (n_requests, prompt_len, mean_len, max_len, max_num_seqs, n_total, g, clip, fixed_shares)
    return res, DecodeTrace(args, tuple((start[0], start[1]) + s for s in states), tuple(over), tuple(over_slack),
                            array("d", events))


def resume_decode(step: StepModel, trace: DecodeTrace, kv_capacity_tokens: float,
                  events: list | None = None) -> DecodeResult:
    """`simulate_decode(step, ..., kv_capacity_tokens, ...)` of the run `trace` was taken without a KV limit
    (the same result, float for float: a property test, whichever StepModel the trace was taken with), started
    from the last event before which every comparison with the capacity came out as without a limit. `events`:
    the run's whole schedule is appended to it (`simulate_decode`'s), the trace's events before that one
    included."""
    n_requests, prompt_len, mean_len, max_len, max_num_seqs, n_total, g, clip, fixed_shares = trace.args
    fast = _decode_all_admitted(step, n_requests, prompt_len, mean_len, max_len, kv_capacity_tokens, max_num_seqs,
                                n_total, g, clip, fixed_shares)
    if fast is not None:
        return fast
    cap, slack = kv_capacity_tokens, kv_capacity_tokens * 1.0001
    e = 0
    while e < len(trace.states) and not (trace.over[e] > cap or trace.over_slack[e] > slack):
        e += 1
    # event e is the first whose comparisons may differ: it starts from the state the unlimited run had then,
    # at the time of the events before it under this StepModel
    e = min(e, len(trace.states) - 1)
    before = trace.events[:3 * e]
    state = trace.states[e]
    state = state[:5] + (decode_time(step, before),) + state[6:]
    if events is not None:
        events += before
    return _events(step, state, prompt_len, cap, max_num_seqs, events=events)


def decode_lower_bound(step: StepModel, n_requests: float, prompt_len: float, mean_len: float, max_len: float,
                       kv_capacity_tokens: float, n_total: float, groups: int = 32, clip: float | None = None,
                       max_num_seqs: float = math.inf, fixed_shares: bool = True) -> float:
    """A lower bound on `simulate_decode`'s time (any max_num_seqs, or at most `max_num_seqs`), in O(1), for pruning.

    With the same representative requests, a step costs at least the dense weights (or the
    batch's GEMM FLOPs), the KV reads of the batch's contexts, the all-reduces and the fixed
    overheads, each a sum over steps that is known without simulating: the tokens decoded
    and the context tokens read are fixed by the lengths (a request at position k reads
    prompt + k tokens, preempted ones resume where they stopped), and there are at least as
    many steps as the longest response, as the tokens over the largest batch the KV memory
    admits (each running request holds its prompt; an empty batch admits one request), and
    as the context tokens read over the KV tokens a step can hold. With `max_num_seqs` the
    simulation admits a request into a running batch only while the batch stays within it
    (an empty batch admits one), so the batch is also at most max(max_num_seqs, the heaviest
    representative): the bound of a capped run, which the search compares with an uncapped
    one before simulating the cap (`gen_side`)."""
    g = representative_count(n_requests, groups)
    tokens, kv_reads, steps, b_max, w_min, w_next, longest_next, lone_len = _bound_steps(
        n_requests, prompt_len, mean_len, max_len, kv_capacity_tokens, n_total, g, clip, max_num_seqs, fixed_shares)
    b_min = min(1.0, w_min)
    # weight bytes per step grow with the batch, concavely for MoE (distinct experts touched):
    # above the chord between the smallest and the largest batch, so summed over the steps at
    # least steps x (chord at 0) + tokens x slope
    w_lo, w_hi = step.weight_bytes(b_min), step.weight_bytes(b_max)
    slope = (w_hi - w_lo) / (b_max - b_min) if b_max > b_min else 0.0
    weights_read = steps * (w_lo - b_min * slope) + tokens * slope
    if w_next > w_min and w_hi > w_lo:
        # sharper for MoE (a dense model's weight bytes do not depend on the batch): a batch is the weight of
        # the representatives running, so a step weighs w_min only while the lightest runs alone (at most its
        # length lone_len of the steps, and not the longest_next steps the longest of the others runs) and at
        # least w_next otherwise, where the chord from w_next to b_max lies below the weight bytes f: S1 lone
        # steps and S - S1 others read at least S1 f(w_min) + (S - S1) f(w_next) + slope_next x the tokens
        # beyond S1 w_min + (S - S1) w_next (if any); the most lone steps gives the least (f concave), and the
        # sum grows with S and falls with b_max, as the chord's does
        w_next_bytes = step.weight_bytes(w_next)
        slope_next = (w_hi - w_next_bytes) / (b_max - w_next) if b_max > w_next else 0.0
        lone = min(lone_len, max(steps - longest_next, 0.0))
        rest = tokens - lone * w_min - (steps - lone) * w_next
        weights_read = max(weights_read, lone * step.weight_bytes(w_min) + (steps - lone) * w_next_bytes
                           + max(rest, 0.0) * slope_next, steps * step.weight_bytes(0.0)
                           + (_expert_bytes_at_least(step, n_requests, mean_len, max_len, g, clip)
                              if g == groups else 0.0))
    gemm = max(weights_read / step.hbm, step.gemm_compute(tokens) + steps * step.gemm_fill)
    attn = kv_reads * max(step.kv_tok / step.hbm, step.attn_flops_ctx / step.attn_rate)
    ar = (steps * step.ar_fixed + tokens * step.ar_per_seq) * step.tp_ar_per_token
    # a step is the larger of its GPU loop and the engine's host passes (StepModel.host_round): the sum of
    # the larger is at least the larger of the sums
    host = tokens * step.host_per_seq
    return max(gemm + attn + ar + steps * (step.pp_hops + step.overhead) + host, steps * step.host_round + host)


@lru_cache(maxsize=16384)
def _bound_steps(n_requests: float, prompt_len: float, mean_len: float, max_len: float, kv_capacity_tokens: float,
                 n_total: float, g: int, clip: float | None, max_num_seqs: float, fixed_shares: bool) -> tuple:
    """What `decode_lower_bound` reads of the run that does not depend on the StepModel (cached: the search bounds
    the same replica requests, budget and cap for every engine shape with that replica count): the tokens decoded
    and context tokens read, the least steps, the largest batch, and the MoE sharpening's weights and lengths
    (`_bound_sums`')."""
    tokens, kv_reads, w_max, w_sum, longest, w_min, w_next, longest_next, lone_len = _bound_sums(
        n_requests, prompt_len, mean_len, max_len, n_total, g, clip, fixed_shares)
    b_max = min(max(kv_capacity_tokens / prompt_len, w_max), w_sum, max(max_num_seqs + 1e-9, w_max))
    # the KV tokens in use during a step stay within the capacity (or one representative
    # request admitted into an empty batch), plus one token per running request (the
    # simulation's smallest step), so the context tokens read take at least kv_reads / that
    kv_in_use = max(kv_capacity_tokens * 1.0001, w_max * (prompt_len + max_len)) + b_max
    # sharper where one representative can outgrow the capacity: only a request running alone can, so a
    # step reads at most the capacity (plus a token per request) unless one request runs alone (`_lone_steps`)
    kv_steps = kv_reads / kv_in_use
    # sharper where the batch cannot fill that from the start: a running request at step s holds at most p + s
    # tokens (it has decoded at most s), so the KV in use at step s is at most b_max (p + s) as well; the reads
    # by step S are at most the integral of min(kv_in_use, b_max (p + s)) over [0, S] (its ramp to the capacity
    # first, at s_full, then the capacity)
    s_full = kv_in_use / b_max - prompt_len
    if s_full > 0:
        ramp = b_max * (prompt_len * s_full + s_full * s_full / 2)
        kv_steps = s_full + (kv_reads - ramp) / kv_in_use if kv_reads >= ramp else \
            math.sqrt(prompt_len * prompt_len + 2 * kv_reads / b_max) - prompt_len
    if w_max * (prompt_len + max_len) > kv_capacity_tokens * 1.0001:
        kv_steps = max(kv_steps, _lone_steps(n_requests, prompt_len, mean_len, max_len, n_total, g, clip,
                                             kv_capacity_tokens * 1.0001 + b_max, kv_reads, fixed_shares))
    # nor can the run end before a request's first admission plus its length (`_queue_steps`)
    steps = max(longest, tokens / b_max, kv_steps,
                _queue_steps(n_requests, mean_len, max_len, n_total, g, clip,
                             min(max_num_seqs, kv_capacity_tokens / prompt_len), fixed_shares))
    return tokens, kv_reads, steps, b_max, w_min, w_next, longest_next, lone_len


def _lone_steps(n_requests: float, prompt_len: float, mean_len: float, max_len: float, n_total: float, g: int,
                clip: float | None, per_step: float, reads: float, fixed_shares: bool = True) -> float:
    """Steps `simulate_decode` takes at least to read its context tokens (`reads`, `_bound_sums`') when a step
    with two or more requests running reads at most `per_step` KV tokens (the capacity with its preemption
    slack, plus the token each running request adds in a step) and a step with one request running reads that
    request's KV alone, which may be more. Request j (weight w, length L) running alone for x steps reads at
    most the KV of its last x positions, lone(x) = w (p x + L x - x^2 / 2); the other steps read at most
    per_step each, so steps >= sum x_j + (reads - sum lone_j(x_j)) / per_step >= (reads - sum_j gain_j) /
    per_step, with gain_j = max over x in [0, L] of lone_j(x) - per_step x (at x = p + L - per_step / w, where
    j's KV passes per_step). Never rises with per_step (its derivative is (sum_j lone_j(x_j) - reads) /
    per_step^2 <= 0), nor with the capacity."""
    lengths, weight = _representatives(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    p = prompt_len
    run = weight > 0
    L, w = lengths[run], weight[run]
    x = np.clip(p + L - per_step / w, 0.0, L)
    gain = float(np.sum(w * (p * x + L * x - x * x / 2) - per_step * x))
    return (reads - gain) / per_step


def _expert_bytes_at_least(step: StepModel, n_requests: float, mean_len: float, max_len: float, g: int,
                           clip: float | None) -> float:
    """Weight bytes beyond the dense ones, summed over `simulate_decode`'s steps, at least (kept on the StepModel:
    the search bounds many budgets and caps of one replica). Of the g representatives (`_representatives`)
    take the g - 1 groups, each weighing v = (n - 1) / (g - 1): while m of them run, the batch is at least
    m v, so a step reads at least f(0) + phi(m), phi(m) = f(m v) - f(0), f the weight bytes, concave in the
    batch (MoE). Group j runs l_j steps, so the time at least k groups run, summed over k <= K, is at least
    the sum of the K longest lengths whatever the order (the K longest run l_1 + ... + l_K steps, at most
    min(m, K) at a time); with phi's increments decreasing, the sum of phi(m) over the steps is then at
    least sum_k (phi(k) - phi(k - 1)) l_(k), l_(k) the k-th longest: the run where all groups start together.
    The lengths taken are the step's quantiles without the slowest replica's shift (`_representatives`
    lengthens them, never shortens), so that with g = groups fixed the sum only falls as the requests per
    replica do (v falls): the engines' count loop needs a bound that never rises with more replicas
    (with fewer requests than groups, g changes with them: 0 there)."""
    key = (n_requests, mean_len, max_len, g, clip)
    hit = step._expert_bytes.get(key)
    if hit is None:
        if len(step._expert_bytes) > 4096:
            step._expert_bytes.clear()
        hit = step._expert_bytes[key] = _expert_bytes_sum(step, n_requests, mean_len, max_len, g, clip)
    return hit


def _expert_bytes_sum(step: StepModel, n_requests: float, mean_len: float, max_len: float, g: int,
                      clip: float | None) -> float:
    """`_expert_bytes_at_least`, computed."""
    if g < 2 or n_requests < 2:
        return 0.0
    u = (np.arange(g - 1) + 0.5) / (g - 1)
    with np.errstate(divide="ignore"):  # a clipped share maps its top quantiles to log1p(-1), then to max_len
        lengths = length_quantiles(mean_len, max_len, u, clip)
    v = (n_requests - 1) / (g - 1)
    out, before = 0.0, step.weight_bytes(0.0)
    for k, length in enumerate(sorted((float(x) for x in lengths), reverse=True), start=1):
        now = step.weight_bytes(k * v)
        out += (now - before) * length
        before = now
    return out


@lru_cache(maxsize=65536)
def _queue_steps(n_requests: float, mean_len: float, max_len: float, n_total: float, g: int, clip: float | None,
                 batch_cap: float, fixed_shares: bool = True) -> float:
    """Steps before `simulate_decode`'s last request finishes, at least, when a running batch never weighs
    more than `batch_cap` (max_num_seqs; or the KV capacity over the prompt, which every running request
    holds). Requests are first admitted in queue order (the fixed shuffle; a preempted one goes back to the
    front), so when the one at position q is, every request before it runs or has finished, and those
    running weigh at most batch_cap - w_q (or none run: the empty batch admits one, and all before it
    have finished): a weight of at least W_before - batch_cap + w_q has finished. A request finishes at
    least its length after its first admission; so, in queue order, q starts no earlier than the least
    time by which that much weight before it can have finished (their finishing times at least), and
    finishes its length later: a FIFO schedule of the batch's slots."""
    if batch_cap == math.inf:
        return 0.0
    table = _queue(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    if batch_cap >= _queue_weight(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares):
        # every request's `need` below is negative (the weight before it plus its own is within the cap, by far
        # more than the rounding of the sum): each starts at 0.0 and ends at its length, the last at the longest
        # (most of the search's KV-limited budgets leave a cap over the requests: no loop, no insort)
        return max(length for length, _ in table)
    finished: list[tuple[float, float]] = []  # (finishing step at least, weight), ascending
    before = out = 0.0
    for length, w in table:
        need = before - batch_cap + w - 1e-9
        start = 0.0
        if need > 0 and finished:
            # (the threshold taken once, not per finisher: the search's bounds run this ~1,300 times a solve)
            start, acc, threshold = finished[-1][0], 0.0, need * (1 - 1e-12)
            for f, fw in finished:
                acc += fw
                if acc >= threshold:
                    start = f
                    break
        end = start + length
        insort(finished, (end, w))
        before += w
        if end > out:  # (max(out, end), without the builtin's call)
            out = end
    return out


@lru_cache(maxsize=8192)
def _queue_weight(n_requests: float, mean_len: float, max_len: float, n_total: float, g: int, clip: float | None,
                  fixed_shares: bool = True) -> float:
    """A cap at or above which no request in `_queue_steps` waits for another: the queue's total weight, with a
    margin far beyond the rounding of any partial sum of it (and of `need`'s 1e-9)."""
    table = _queue(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    return sum(w for _, w in table) * (1 + 1e-9) + 1e-6


@lru_cache(maxsize=8192)
def _queue(n_requests: float, mean_len: float, max_len: float, n_total: float, g: int, clip: float | None,
           fixed_shares: bool = True):
    """(length, weight) of the representative requests in `simulate_decode`'s queue order: a fixed
    low-discrepancy shuffle (requests arrive in no particular length order)."""
    lengths, weight = _representatives(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    order = sorted(range(g), key=lambda i: (i * 0.6180339887) % 1.0)
    return tuple((float(lengths[i]), float(weight[i])) for i in order)


@lru_cache(maxsize=8192)
def kv_need_floor(n_requests: float, prompt_len: float, mean_len: float, max_len: float, n_total: float,
                  max_num_seqs: float, groups: int = 32, clip: float | None = None, fixed_shares: bool = True) -> float:
    """A lower bound on the `kv_need` of `simulate_decode` without a KV limit (capacity inf), in O(g): the
    requests first admitted are the longest prefix of the queue whose weight stays within max_num_seqs
    (the first always), and when two or more run, the KV they hold when the shortest of them finishes
    (each its prompt plus that many tokens) is compared with the capacity; a closed-form run (every
    request admitted) needs the KV held at its start at least. (Cached: the engine search asks it for every cap
    at every memory level of an engine: 3,112 calls for 130 distinct runs on the 70B example.)"""
    g = representative_count(n_requests, groups)
    table = _queue(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    weight = shortest = 0.0
    count = 0
    for length, w in table:
        if count and weight + w > max_num_seqs + 1e-9:
            break
        weight += w
        shortest = length if not count else min(shortest, length)
        count += 1
    if count == len(table) and n_requests <= max_num_seqs + 1e-9:
        return weight * prompt_len  # the closed form: its KV at the first finish is at least this
    return weight * (prompt_len + shortest) if count > 1 else 0.0


@lru_cache(maxsize=8192)
def _bound_sums(n_requests: float, prompt_len: float, mean_len: float, max_len: float, n_total: float, g: int,
                clip: float | None, fixed_shares: bool = True) -> tuple[float, ...]:
    """What `decode_lower_bound` reads of the representative requests (cached: the search bounds
    thousands of engines over a few replica sizes): tokens decoded, context tokens read, the
    heaviest and the total weight, the longest response and the lightest weight present; then, of the
    others than one lightest representative, the lightest weight and the longest response (the lightest's
    own weight and none if it is alone), and that lightest representative's length."""
    lengths, weight = _representatives(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    present = np.flatnonzero(weight > 0)
    w_min = float(weight[present].min())
    lightest = present[np.argmin(weight[present])]
    others = present[present != lightest]
    w_next = float(weight[others].min()) if len(others) else w_min
    longest_next = float(lengths[others].max()) if len(others) else 0.0
    return (float(np.dot(lengths, weight)), float(np.dot(weight, prompt_len * lengths + lengths * lengths / 2)),
            float(weight[present].max()), float(weight.sum()), float(lengths[present].max()), w_min,
            w_next, longest_next, float(lengths[lightest]))


@lru_cache(maxsize=1)
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, Phi(x), phi(x)) on the grid `expected_max_std_normal` integrates over, built once (the search asks
    for thousands of replica counts; only the power of Phi depends on the count)."""
    x = np.linspace(-8.0, 8.0, 4001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-x * x / 2.0) / math.sqrt(2.0 * math.pi)
    return x, cdf, pdf


@lru_cache(maxsize=4096)
def expected_max_std_normal(k: int) -> float:
    """E[max of k independent standard normals] (0 for k = 1), by integrating x d(Phi(x)^k) on a
    fine grid: the expected largest of k equally distributed sample means, in their standard
    deviations (the central limit approximation of a mean over many requests)."""
    if k <= 1:
        return 0.0
    x, cdf, pdf = _normal_grid()
    return float(np.trapezoid(x * k * _cdf_power(cdf, k - 1) * pdf, x))


# Phi^n below 2^-1200 rounds to 0 in float64 (whose smallest subnormal is 2^-1074), with room for pow's last-bit error
_POWER_FLOOR_LOG2 = -1200.0


def _cdf_power(cdf: np.ndarray, n: int) -> np.ndarray:
    """`cdf ** n`, the same array float for float, with pow run only where the power is not 0: below
    Phi = 2^(-1200 / n) it is under 2^-1200, which pow returns as 0 (`cdf` rises along the grid). Those powers,
    of numbers that underflow, were most of `expected_max_std_normal`'s time (16,384 GPUs x 3 pools ask ~1,600
    replica counts)."""
    out = np.zeros_like(cdf)
    lo = int(np.searchsorted(cdf, 2.0 ** (_POWER_FLOOR_LOG2 / n)))
    out[lo:] = cdf[lo:] ** n
    return out


@lru_cache(maxsize=1024)
def attention_len(prompt_len: float, response_mean: float, response_max: float, clip: float | None) -> float:
    """Attention-effective tokens per sequence of a batch whose sequences run attention on their own
    lengths L = prompt + response (flash attention over packed or unpadded sequences, per-sequence
    cu_seqlens): the causal attention of a sequence costs ~L^2 / 2, so a batch of N sequences costs
    N E[L^2] / 2, and as a length per token (the figure the attention term multiplies the tokens by)
    that is E[L^2] / E[L] = E[L] (1 + CV^2), not E[L]. Responses follow `length_quantiles`' distribution;
    constant lengths (mean at the cap) give the length itself."""
    x = prompt_len + length_quantiles(response_mean, response_max, (np.arange(4096) + 0.5) / 4096, clip)
    return float((x * x).mean() / x.mean())


@lru_cache(maxsize=4096)
def _length_std(mean: float, max_len: float, clip: float | None) -> float:
    """Standard deviation of one response's length under `length_quantiles`' distribution."""
    x = length_quantiles(mean, max_len, (np.arange(4096) + 0.5) / 4096, clip)
    return float(x.std())


def slowest_replica_mean(n_requests: float, mean_len: float, max_len: float, n_total: float,
                         clip: float | None = None, fixed_shares: bool = True) -> float:
    """Mean response length of the replica that finishes last. The frameworks split a step's
    samples over the engines in fixed shares before any is decoded (NeMo-RL
    BatchedDataDict.shard_by_batch_size in VllmGeneration.generate, v0.7.0; verl and OpenRLHF
    chunk the batch per engine alike, verl#658, OpenRLHF#511), and the step waits for the last
    engine: of dp = n_total / n_requests replicas, each decoding n_requests independent
    responses, the slowest holds about the largest of dp sample means, mean + sd / sqrt(n) x
    E[max of dp standard normals]. Independent draws are the floor: the responses of one
    prompt, which go to one engine together, are alike in length (Seer, arXiv 2511.14617),
    which only widens the spread. Where the framework does not fix the shares (`fixed_shares`
    False: frameworks/runtime.yaml fixed_engine_shares, e.g. NeMo-RL's and verl's asynchronous
    modes, whose engines take the next requests as they free up, with no barrier per step at
    each engine) no replica is slower than the step's mean: the mean itself (the step's longest
    response still ends the run, `_representatives`)."""
    dp = int(round(n_total / n_requests)) if n_requests > 0 else 1
    if not fixed_shares or dp <= 1 or n_requests <= 1 or mean_len >= max_len:
        return mean_len
    shifted = mean_len + _length_std(mean_len, max_len, clip) / math.sqrt(n_requests) * expected_max_std_normal(dp)
    return min(shifted, max_len)


@lru_cache(maxsize=8192)
def _representatives(n_requests: float, mean_len: float, max_len: float, n_total: float, g: int,
                     clip: float | None = None, fixed_shares: bool = True):
    """(lengths, weights) of the g representative requests (cached: the search asks for the
    same replica sizes many times; callers never modify the arrays): the slowest replica's
    (`slowest_replica_mean`), with one request at the longest response among all n_total (a
    quantile of the step's own distribution: it is the step's longest, whichever engine holds it)."""
    u = (np.arange(g - 1) + 0.5) / (g - 1)
    top = 1.0 - 1.0 / (n_total + 1.0)
    slow = slowest_replica_mean(n_requests, mean_len, max_len, n_total, clip, fixed_shares)
    longest = length_quantiles(mean_len, max_len, np.array([top]), clip)
    groups = length_quantiles(mean_len, max_len, u, clip)
    if slow > mean_len:  # the slowest replica's quantiles, none lengthened past the step's longest
        groups = np.maximum(groups, np.minimum(length_quantiles(slow, max_len, u, clip), longest[0]))
    lengths = np.concatenate([groups, longest])
    if n_requests > 1:
        weight = np.concatenate([np.full(g - 1, (n_requests - 1) / (g - 1)), [1.0]])
    else:
        weight = np.concatenate([np.zeros(g - 1), [1.0]])
    lengths.flags.writeable = weight.flags.writeable = False
    return lengths, weight


def _decode_all_admitted(step: StepModel, n_requests: float, prompt_len: float, mean_len: float,
                         max_len: float, kv_capacity_tokens: float, max_num_seqs: float, n_total: float,
                         g: int, clip: float | None = None, fixed_shares: bool = True) -> DecodeResult | None:
    """Closed form when every request runs from the start: between consecutive finish
    lengths the batch is constant and the context grows linearly. None when the KV memory
    or max_num_seqs would force queueing (then the event simulation runs)."""
    if n_requests > max_num_seqs + 1e-9:
        return None  # (asked before the segments: most of the search's runs have a cap below their requests)
    alive, ctx, seg, need, steps, area, peak = _all_admitted_segments(n_requests, prompt_len, mean_len, max_len,
                                                                       n_total, g, clip, fixed_shares)
    if need > kv_capacity_tokens:
        return None
    st = step.step_time(alive, ctx)
    time = float(np.sum(seg * st))
    return DecodeResult(time=time, steps=steps, peak_batch=peak,
                        mean_batch=area / steps if steps else 0.0, kv_limited=False, reprefill_tokens=0.0,
                        kv_need=need)


@lru_cache(maxsize=8192)
def _all_admitted_segments(n_requests: float, prompt_len: float, mean_len: float, max_len: float, n_total: float,
                           g: int, clip: float | None, fixed_shares: bool) -> tuple:
    """What `_decode_all_admitted` reads of the representative requests, none of it of the StepModel (cached: the
    search re-times the same requests for many engines): the batch, mean context and length of each segment
    between finishes (those of positive length), the KV held at the busiest segment's end, the steps, the
    batch-steps and the first segment's batch."""
    lengths, weight = _representatives(n_requests, mean_len, max_len, n_total, g, clip, fixed_shares)
    order = np.argsort(lengths, kind="stable")
    L, w = lengths[order], weight[order]
    edges = np.concatenate([[0.0], L])
    seg = np.diff(edges)
    alive = np.cumsum(w[::-1])[::-1]                 # requests still decoding in each segment
    # KV held at the end of each segment: finished requests free theirs
    kv_end = alive * (prompt_len + edges[1:])
    ctx = prompt_len + (edges[:-1] + edges[1:]) / 2
    mask = seg > 0
    out = (alive[mask], ctx[mask], seg[mask])
    for a in out:
        a.flags.writeable = False
    return out + (float(np.max(kv_end)), float(L[-1]), float(np.sum(seg * alive)), float(alive[0]))
