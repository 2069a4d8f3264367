"""Score the performance model on published measurements (`rlsolve cases FILE`).

Reads the reference-case format (see ../shared/reference_cases.yaml: kind train | generate |
rl_step, hardware, model, precision, layout, measured) and predicts each row with the same
functions the solver uses. A row the model cannot represent is reported with the reason,
never skipped. Pure: no printing, no files."""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import numpy as np
from pydantic import ValidationError

from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.frameworks.runtime import (FrameworkRuntime, engine_default_max_num_seqs, framework_costs, release,
                                       runtime)
from rlsolve.hardware_db import find_gpu, find_network
from rlsolve.hardware_db.schema import AttentionKernel
from rlsolve.models import Architecture, resolve_model
from rlsolve.perf.generate import GenLayout, StepModel, decode_kv_reads, prefill_time, simulate_decode, \
    random_weight_experts_reached, trtllm_experts_16bit, trtllm_moe_gemm_fraction, weight_bytes_per_gpu, \
    kv_bytes_per_token_per_gpu, gen_other_bytes
from rlsolve.perf.hw import GB, Device, constants, device
from rlsolve.perf.train import (BF16, BF16_MAIN_GRAD_BYTES, CUDA_GRAPHS, FP32_ADAM_MOMENT_BYTES, FP32_MAIN_GRAD_BYTES,
                                FP32_MASTER_BYTES, MASTER_REMAINDER_BYTES,
                                MOE_DISPATCHERS, OFFLOADS, TrainLayout, model_flops,
                                RECOMPUTED_MODULES, dynamic_batches, packed_sequences_per_bin, train_memory,
                                train_time)
from rlsolve.resolve import PoolHW, resolve
from rlsolve.runlogs.phases import TIMERS
from rlsolve.spec import load_spec

# Rows of kind rl_step give the mean generated length (NeMo-RL's "G-average seq len": its
# tokens/s/GPU x step time x GPUs / samples exceeds it by the prompt, ~100 tokens) and the
# maximum total length. The prompt length comes from the row (`prompt_len`), else from those
# measured totals, else this assumption.
DEFAULT_RL_PROMPT_LEN = 256
KV_FREE_FRACTION = 0.9
# Engines' default cap on concurrent sequences for >=70 GiB GPUs (vLLM get_batch_defaults).
DEFAULT_MAX_NUM_SEQS = 1024
# A colocated engine's share of GPU memory when the row does not state it: the RL frameworks'
# default (NeMo-RL examples/configs/grpo_math_1B.yaml vllm_cfg.gpu_memory_utilization 0.6, which
# every performance recipe inherits; verl's example scripts pass rollout.gpu_memory_utilization=0.6).
DEFAULT_COLOCATED_GPU_MEMORY_UTILIZATION = 0.6


@dataclass
class CaseResult:
    id: str
    kind: str
    metric: str = ""
    measured: float | None = None
    predicted: float | None = None
    error: float | None = None          # predicted / measured - 1
    note: str = ""
    modelled: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseReport:
    rows: list[CaseResult]

    def median_abs_error(self, kind: str | None = None) -> float | None:
        errs = [abs(r.error) for r in self.rows if r.error is not None and (kind is None or r.kind == kind)]
        return statistics.median(errs) if errs else None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in ("train", "generate", "rl_step"):
            rows = [r for r in self.rows if r.kind == kind]
            if rows:
                m = self.median_abs_error(kind)
                out[kind] = {"rows": len(rows), "modelled": sum(r.error is not None for r in rows),
                             "median_abs_error": None if m is None else round(m, 4),
                             "max_abs_error": _max_abs([r for r in rows if r.error is not None])}
        phases: dict[str, list[float]] = {}
        for r in self.rows:
            for k, e in (r.extra.get("phase_errors") or {}).items():
                phases.setdefault(k, []).append(abs(e))
        if phases:  # per phase of the RL rows that publish their breakdown
            out["rl_phases"] = {k: {"rows": len(v), "median_abs_error": round(statistics.median(v), 4),
                                    "max_abs_error": round(max(v), 4)} for k, v in sorted(phases.items())}
        m = self.median_abs_error()
        out["overall"] = {"rows": len(self.rows), "modelled": sum(r.error is not None for r in self.rows),
                          "median_abs_error": None if m is None else round(m, 4),
                          "max_abs_error": _max_abs([r for r in self.rows if r.error is not None])}
        return out


def _max_abs(rows: list[CaseResult]) -> float | None:
    return round(max(abs(r.error) for r in rows), 4) if rows else None


# --- inputs -------------------------------------------------------------------------------

def _arch(row: dict) -> Architecture:
    m = dict(row.get("model") or {})
    if set(m) <= {"name", "params_b"} and "name" in m:
        return resolve_model(m["name"], field=f"{row['id']}.model.name")
    shape = {k: v for k, v in m.items() if k != "name"}
    if "name" in m:
        shape["name"] = str(m["name"])
    return resolve_model(shape, field=f"{row['id']}.model")


def _pool(row: dict) -> PoolHW:
    hw = row.get("hardware") or {}
    gpu = find_gpu(hw["gpu"], field=f"{row['id']}.hardware.gpu")
    gpn = int(hw.get("gpus_per_node") or gpu.default_gpus_per_node)
    gpus = int(hw.get("gpus", gpn))
    net = find_network(hw.get("network", "IB-NDR-400"), field=f"{row['id']}.hardware.network")
    nodes = max(1, math.ceil(gpus / gpn))
    return PoolHW("case", gpu, nodes, gpn, net, gpn, gpu.price_per_gpu_hour_usd)


# Techniques by the arXiv id that introduced them. A row that leaves the choice open and whose
# cited papers all predate the technique cannot have used it (Megatron-LM 2021 ran without
# either); rows citing no arXiv paper (framework docs) are taken to use both.
INTRODUCED = {"flash_attention": (22, 5, 14135),       # Dao et al., FlashAttention
              "sequence_parallel": (22, 5, 5198)}      # Korthikanti et al., sequence parallelism
_ARXIV_ID = re.compile(r"arXiv[:\s]*(\d{2})(\d{2})\.(\d{4,5})", re.IGNORECASE)


def _predates(row: dict, technique: str) -> bool:
    ids = [tuple(int(g) for g in m) for m in _ARXIV_ID.findall(str(row.get("source", "")))]
    return bool(ids) and max(ids) < INTRODUCED[technique]


def _attention(row: dict) -> str:
    """`layout.attention` (flash | unfused) when the row gives it, else by the source's date."""
    given = (row.get("layout") or {}).get("attention")
    if given is not None:
        if given not in ("flash", "unfused"):
            raise ValueError(f"layout.attention must be flash or unfused, got {given!r}")
        return given
    return "unfused" if _predates(row, "flash_attention") else "flash"


def _attention_kernel(row: dict) -> str:
    """`layout.attention_kernel` of a train row: the fused attention kernel its stack runs where that is not its
    backend's (frameworks/runtime.yaml train_attention_kernel), one of hardware_db's AttentionKernel names, with
    flash attention; absent: "" (the backend's)."""
    given = (row.get("layout") or {}).get("attention_kernel")
    if given is None:
        return ""
    if given not in get_args(AttentionKernel):
        raise ValueError(f"layout.attention_kernel must be one of {', '.join(get_args(AttentionKernel))}, got {given!r}")
    if _attention(row) != "flash":
        raise ValueError("layout.attention_kernel names a fused kernel: it needs layout.attention flash")
    return str(given)


def _sequence_parallel(row: dict, tp: int) -> bool:
    given = (row.get("layout") or {}).get("sequence_parallel")
    if given is not None:
        return bool(given)
    return tp > 1 and not _predates(row, "sequence_parallel")


def _precision(row: dict) -> str:
    return "fp8" if row.get("precision") == "fp8" else "bf16"


# --- predictions --------------------------------------------------------------------------

# Recompute choices from least to most recomputation: a row that does not state one ran the
# least that fits in memory (what a recipe's author would pick).
RECOMPUTE_ORDER = ("none", "selective", "full")
# Strategies the case format names; FSDP is ZeRO-3 unless the row gives `zero_stage`.
TRAIN_STRATEGIES = {"megatron": 1, "fsdp": 3, "fsdp2": 3, "deepspeed": 1}
# `layout.main_grad_dtype` of a train row; without it fp32, Megatron-LM's choice for bf16
# training (perf/train.py FP32_MAIN_GRAD_BYTES), which the published train rows ran.
DEFAULT_MAIN_GRAD_DTYPE = "fp32"
MAIN_GRAD_DTYPES = {"fp32": FP32_MAIN_GRAD_BYTES, "bf16": BF16_MAIN_GRAD_BYTES}
ADAM_MOMENT_DTYPES = {"fp32": FP32_ADAM_MOMENT_BYTES, "bf16": BF16}
# `layout.fsdp_reduce_dtype` of a ZeRO-3 train row: the dtype its FSDP mixed-precision policy reduce-scatters
# gradients in (torch MixedPrecision reduce_dtype); bytes per parameter for perf/train.py train_time's
# fsdp_reduce_bytes. Absent: the parameters' bf16 (None).
FSDP_REDUCE_DTYPES = {"fp32": 4.0, "bf16": None}
# `layout.master_param_dtype` of a train row (perf/train.py FP32_MASTER_BYTES): fp32, the default; remainders, the
# fp32 master weights' low 16 bits kept beside the bf16 parameters (Transformer Engine FusedAdam under Megatron-Core's
# precision-aware optimizer, Apex DistributedFusedAdam under NeMo 1.x bf16 O2); none, the optimizer steps the
# 16-bit parameters in place (its own dtype is theirs)
MASTER_PARAM_DTYPES = {"fp32": FP32_MASTER_BYTES, "remainders": MASTER_REMAINDER_BYTES, "none": 0.0}


def _train_layout(row: dict, gpus: int) -> TrainLayout:
    """A train row's layout. Case format v2 adds to version 1's fields: `train_strategy`
    (megatron | fsdp | fsdp2 | deepspeed; FSDP means ZeRO-3 unless `zero_stage` says otherwise),
    `offload` (none | optimizer | params_optimizer), `lora_rank`, `global_batch_tokens` (read in
    predict_train), and, read here beyond the agreed list, `main_grad_dtype` (fp32 | bf16),
    `recompute_layers` (with recompute full: layers per virtual stage, Megatron's
    --recompute-num-layers) and `pipeline_split_embedding_loss` (true: Megatron-Core's
    account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split, checked in
    predict_train), `moe_dispatcher` (alltoall | deepep | hybridep) and `cuda_graphs` (none | partial |
    full_iteration), the MoE stack of perf/train.py moe_host_efficiency, `moe_a2a_overlap` (true: Megatron-Core
    overlap_moe_expert_parallel_comm, perf/train.py ep_overlap_exposed), `moe_token_drop` (true: Megatron-Core
    drop-and-pad routing, no host sync per MoE layer: perf/train.py TrainLayout.moe_token_drop), `adam_moment_dtype` (fp32 | bf16:
    Megatron-Core's precision-aware optimizer exp_avg_dtype / exp_avg_sq_dtype), `master_param_dtype` (fp32 |
    remainders | none: the optimizer's master weights, MASTER_PARAM_DTYPES), `etp` (Megatron-Core
    expert_tensor_parallel_size where the recipe sets it; absent: Megatron's default, perf/train.py
    expert_tp); `recompute_modules` and `activation_offload_layers` are read in _fit_recompute,
    `overlap_grad_reduce` and `fsdp_reduce_dtype` (fp32 | bf16: the FSDP policy's reduce_dtype, ZeRO-3) in
    predict_train; `attention_kernel` (_attention_kernel)."""
    lay_in = row.get("layout") or {}
    tp, pp, cp = int(lay_in.get("tp", 1)), int(lay_in.get("pp", 1)), int(lay_in.get("cp", 1))
    strategy = str(lay_in.get("train_strategy", "megatron"))
    if strategy not in TRAIN_STRATEGIES:
        raise ValueError(f"layout.train_strategy must be one of {', '.join(TRAIN_STRATEGIES)}, got {strategy!r}")
    offload = str(lay_in.get("offload", "none"))
    if offload not in OFFLOADS:
        raise ValueError(f"layout.offload must be one of {', '.join(OFFLOADS)}, got {offload!r}")
    grad_dtype = str(lay_in.get("main_grad_dtype", DEFAULT_MAIN_GRAD_DTYPE))
    if grad_dtype not in MAIN_GRAD_DTYPES:
        raise ValueError(f"layout.main_grad_dtype must be fp32 or bf16, got {grad_dtype!r}")
    dispatcher, graphs = str(lay_in.get("moe_dispatcher", "alltoall")), str(lay_in.get("cuda_graphs", "none"))
    if dispatcher not in MOE_DISPATCHERS:
        raise ValueError(f"layout.moe_dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got {dispatcher!r}")
    if graphs not in CUDA_GRAPHS:
        raise ValueError(f"layout.cuda_graphs must be one of {', '.join(CUDA_GRAPHS)}, got {graphs!r}")
    moments = str(lay_in.get("adam_moment_dtype", "fp32"))
    if moments not in ADAM_MOMENT_DTYPES:
        raise ValueError(f"layout.adam_moment_dtype must be fp32 or bf16, got {moments!r}")
    master = str(lay_in.get("master_param_dtype", "fp32"))
    if master not in MASTER_PARAM_DTYPES:
        raise ValueError(f"layout.master_param_dtype must be one of {', '.join(MASTER_PARAM_DTYPES)}, got {master!r}")
    split = _layout_flag(lay_in, "pipeline_split_embedding_loss", False)
    recompute = str(lay_in.get("recompute", "none"))
    if recompute not in RECOMPUTE_ORDER:
        raise ValueError(f"layout.recompute must be one of {', '.join(RECOMPUTE_ORDER)}, got {recompute!r}")
    a2a_overlap = _layout_flag(lay_in, "moe_a2a_overlap", False)
    if a2a_overlap:  # Megatron-Core's own checks (transformer_config.py, commit 2edffadb, L2094-2124)
        if int(lay_in.get("ep", 1)) <= 1:
            raise ValueError("layout.moe_a2a_overlap needs expert parallelism (layout.ep > 1)")
        if pp > 1 and int(lay_in.get("vp") or 1) <= 1:
            raise ValueError("layout.moe_a2a_overlap with layout.pp > 1 needs a virtual pipeline (layout.vp > 1)")
        if recompute == "full":
            raise ValueError("layout.moe_a2a_overlap cannot run with layout.recompute full")
    token_drop = _layout_flag(lay_in, "moe_token_drop", False)
    dp, ep = int(lay_in.get("dp") or gpus // (tp * pp * cp)), int(lay_in.get("ep", 1))
    modules = _recompute_modules(lay_in)
    etp = lay_in.get("etp")
    if etp is not None:
        if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
            raise ValueError(f"layout.etp must be a positive integer, got {etp!r}")
        if (tp * cp * dp) % (etp * ep):  # Megatron-Core parallel_state.py (commit 2edffadb) lines 792-799
            raise ValueError(f"layout.etp: etp * ep = {etp * ep} does not divide a pipeline stage's "
                             f"tp * cp * dp = {tp * cp * dp} ranks")
    return TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=int(lay_in.get("vp") or 1),
                       expert_tp_size=int(etp or 0),
                       zero_stage=int(lay_in.get("zero_stage", TRAIN_STRATEGIES[strategy])), strategy=strategy,
                       micro_batch=int(lay_in.get("micro_batch") or 1), recompute=recompute,
                       sequence_parallel=_sequence_parallel(row, tp), attention=_attention(row),
                       attn_kernel=_attention_kernel(row), offload=offload,
                       main_grad_bytes=MAIN_GRAD_DTYPES[grad_dtype],
                       recompute_layers=int(lay_in.get("recompute_layers") or 0) if recompute == "full" else 0,
                       recompute_modules=tuple(m for m in modules if m in RECOMPUTED_MODULES),
                       # a stated list replaces Megatron-Core's default ["core_attn"] (TrainLayout.recompute_core_attn)
                       recompute_core_attn="core_attn" in modules if "recompute_modules" in lay_in else True,
                       pipeline_split_embedding_loss=split, moe_dispatcher=dispatcher, cuda_graphs=graphs,
                       moe_a2a_overlap=a2a_overlap, moe_token_drop=token_drop,
                       adam_moment_bytes=ADAM_MOMENT_DTYPES[moments], master_param_bytes=MASTER_PARAM_DTYPES[master])


# Megatron-Core's selective-recompute modules (TransformerConfig.recompute_modules). core_attn: the
# attention core re-runs in the backward (and, unfused, stores no scores) only where the row's list
# names it; a row without the list ran Megatron-Core's default ["core_attn"] (perf/train.py
# TrainLayout.recompute_core_attn, checkpoints_core_attn). Of the others the model
# counts (perf/train.py RECOMPUTED_MODULES: the memory they free and their re-run) the output-discarding
# layernorm, moe_act, mla_up_proj and the normal checkpoints mlp (dense layers only) and shared_experts;
# a row naming moe (the whole MoE layer, its dispatch re-run too) is scored without it, and its note says so.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")


def _recompute_modules(lay_in: dict) -> list[str]:
    """`layout.recompute_modules` of a train row (with recompute selective), checked."""
    mods = lay_in.get("recompute_modules")
    if mods is None:
        return []
    if lay_in.get("recompute") != "selective" or not isinstance(mods, list) or \
            any(m not in RECOMPUTE_MODULES for m in mods):
        raise ValueError(f"layout.recompute_modules must be a list of {', '.join(RECOMPUTE_MODULES)} with "
                         f"recompute: selective, got {mods!r}")
    return [str(m) for m in mods]


def _offloaded_activations(arch: Architecture, lay: TrainLayout, seq: float, activations: float,
                           offload_layers: int) -> float:
    """Bytes of stored activations that `layout.activation_offload_layers` (Megatron-Core
    cpu_offloading_num_layers with cpu_offloading_weights off) keeps in host memory: that many of
    a stage's layers, each an equal share of the stage's activations less the last stage's fp32
    logits, which stay on the GPU."""
    if offload_layers <= 0:
        return 0.0
    layers_stage = math.ceil(arch.layers / lay.pp)
    logits = lay.micro_batch * seq / lay.cp * arch.d_out / lay.tp * 4.0 if lay.pp == 1 else 0.0
    return max(0.0, activations - logits) * min(offload_layers, layers_stage) / layers_stage


def _recompute_ladder(arch: Architecture, lay: TrainLayout):
    """Layouts from the least recomputation to the most: none, selective, then full recompute
    of 1, 2, ... layers per (virtual) stage up to all of them (Megatron's block method)."""
    yield replace(lay, recompute="none")
    yield replace(lay, recompute="selective")
    per_chunk = math.ceil(math.ceil(arch.layers / lay.pp) / lay.vp)
    for n in range(1, per_chunk + 1):
        yield replace(lay, recompute="full", recompute_layers=0 if n == per_chunk else n)


def _fit_recompute(row: dict, arch: Architecture, lay: TrainLayout, seq: float, capacity: float,
                   lora_rank: int, fp8: bool) -> tuple[TrainLayout, dict, str]:
    """The layout with the row's recompute, or with the least recompute that fits when the row
    states none; the memory it needs, and a note when the layout does not fit."""
    lay_in = row.get("layout") or {}
    stated = "recompute" in lay_in
    modules = _recompute_modules(lay_in)
    offload_layers = int(lay_in.get("activation_offload_layers") or 0)
    for cand in ([lay] if stated else _recompute_ladder(arch, lay)):
        tm = train_memory(arch, cand, seq, lora_rank=lora_rank, fp8=fp8)
        # activations kept in host memory take neither GPU memory nor the allocator's fragmentation on it
        # (perf/train.py _other charges fragmentation_fraction on every tracked byte)
        need = tm.total - (1.0 + constants()["fragmentation_fraction"]) * _offloaded_activations(
            arch, cand, seq, tm.activations, offload_layers)
        if need <= capacity:
            break
    chosen = cand.recompute + (f" of {cand.recompute_layers} layers per stage" if cand.recompute_layers else "")
    mem = {"memory_gb": round(need / GB, 1), "capacity_gb": round(capacity / GB, 1), "fits": need <= capacity,
           "recompute": chosen, "recompute_stated": stated}
    if modules:
        mem["recompute_modules"] = modules
    if offload_layers:
        mem["activation_offload_layers"] = offload_layers
    unmodelled = [m for m in modules if m != "core_attn" and m not in RECOMPUTED_MODULES]
    aside = (f"; selective recompute of {', '.join(unmodelled)} is not in the model (neither the memory it "
             "saves nor its re-run)") if unmodelled else ""
    if need <= capacity:
        return cand, mem, ("" if stated or cand.recompute == "none" else
                           f"recompute {chosen} assumed: the least that fits in memory") + aside
    what = f"recompute {chosen}" + ("" if stated else " (the most there is)")
    return cand, mem, (f"does not fit: the layout with {what} needs {need / GB:.1f} GB per GPU of "
                       f"{capacity / GB:.0f} GB in the model; scored as stated") + aside


def predict_train(row: dict, profile: dict | None = None) -> CaseResult:
    arch, pool = _arch(row), _pool(row)
    lay_in = row.get("layout") or {}
    gpus = int(row["hardware"]["gpus"])
    lay = _train_layout(row, gpus)
    if lay.gpus != gpus:
        return CaseResult(row["id"], "train", modelled=False,
                          note=f"tp*pp*cp*dp = {lay.gpus} does not match hardware.gpus = {gpus}")
    dev = device(pool, _precision(row), profile)
    if lay.pipeline_split_embedding_loss and lay.pp > 1 and (arch.layers + 2) % (lay.pp * lay.vp):
        # Megatron-Core asserts the same (transformer_block.get_num_layers_to_build)
        raise ValueError(f"layout.pipeline_split_embedding_loss: layers + 2 = {arch.layers + 2} (the embedding and "
                         f"the loss take a slot each) does not divide into pp * vp = {lay.pp * lay.vp} chunks")
    # tokens per optimizer step: global_batch_tokens when the source counts tokens, else
    # global_batch sequences of seq_len
    batch = float(lay_in["global_batch_tokens"]) if "global_batch_tokens" in lay_in else int(lay_in["global_batch"])
    seq = float(lay_in["seq_len"])
    tokens = batch if "global_batch_tokens" in lay_in else batch * seq
    gb = tokens / seq
    lora_rank = int(lay_in.get("lora_rank") or 0)
    lay, mem, note = _fit_recompute(row, arch, lay, seq, pool.gpu.memory_bytes, lora_rank,
                                    _precision(row) == "fp8")
    reduce_dtype = str(lay_in.get("fsdp_reduce_dtype", "bf16"))
    if reduce_dtype not in FSDP_REDUCE_DTYPES:
        raise ValueError(f"layout.fsdp_reduce_dtype must be fp32 or bf16, got {reduce_dtype!r}")
    t = train_time(arch, dev, lay, gb, seq, lora_rank=lora_rank, overlap_grad_reduce=_overlap_grad_reduce(lay_in),
                   fsdp_reduce_bytes=FSDP_REDUCE_DTYPES[reduce_dtype]).total
    meas = row.get("measured") or {}
    r = _train_metric(row, meas, lay, arch, dev, tokens, seq, t, gpus)
    if r.error is not None:
        r.note, r.extra = note, {**r.extra, **mem}
    return r


def _overlap_grad_reduce(lay_in: dict) -> bool:
    """`layout.overlap_grad_reduce` of a train row: false where the recipe turns off Megatron-Core's
    DDP overlap_grad_reduce (the gradient reduce-scatter then runs after the backward, exposed:
    perf/train.py train_time); absent: true, the recipes' default."""
    return _layout_flag(lay_in, "overlap_grad_reduce", True)


def _layout_flag(lay_in: dict, name: str, default: bool) -> bool:
    """`layout.<name>` of a row, a YAML boolean (absent: `default`)."""
    v = lay_in.get(name, default)
    if not isinstance(v, bool):
        raise ValueError(f"layout.{name} must be true or false, got {v!r}")
    return v


def _train_metric(row: dict, meas: dict, lay: TrainLayout, arch: Architecture, dev, tokens: float, seq: float,
                  t: float, gpus: int) -> CaseResult:
    if "iteration_s" in meas:
        return _result(row, "iteration_s", meas["iteration_s"], t)
    if "tokens_per_s_per_gpu" in meas:
        return _result(row, "tokens_per_s_per_gpu", meas["tokens_per_s_per_gpu"], tokens / t / gpus)
    if "tokens_per_s" in meas:
        return _result(row, "tokens_per_s", meas["tokens_per_s"], tokens / t)
    if "tflops_per_gpu" in meas or "mfu" in meas:
        hardware = meas.get("flops_convention") == "hardware" and lay.recompute == "full"
        per_gpu = model_flops(arch, tokens, seq, recompute=hardware) / t / gpus
        if "tflops_per_gpu" in meas:
            return _result(row, "tflops_per_gpu", meas["tflops_per_gpu"], per_gpu / 1e12)
        # MFU against the dense peak of the row's precision
        return _result(row, "mfu", meas["mfu"], per_gpu / dev.peak_flops)
    return CaseResult(row["id"], "train", modelled=False, note="no train metric the model predicts in `measured` "
                      "(iteration_s, tokens_per_s_per_gpu, tokens_per_s, tflops_per_gpu, mfu)")


def _gen_setup(row: dict, profile: dict | None = None):
    arch, pool = _arch(row), _pool(row)
    lay_in = row.get("layout") or {}
    prec = _precision(row)
    dev = device(pool, prec, profile)
    tp, pp = int(lay_in.get("tp", 1)), int(lay_in.get("pp", 1))
    lay = GenLayout(tp=tp, pp=pp, dp=1)
    wb = 1.0 if prec == "fp8" else 2.0
    return arch, pool, dev, lay, wb, lay_in


def _trtllm_contiguous_kv(lay: dict) -> bool:
    """A TensorRT-LLM row whose engine keeps a contiguous KV cache: layout.paged_kv_cache false, or not stated
    at a release before paged caches became the build default."""
    if lay.get("engine") != "tensorrt-llm" or "engine_version" not in lay:
        return False
    if "paged_kv_cache" in lay:
        return not _layout_flag(lay, "paged_kv_cache", True)
    return release(str(lay["engine_version"])) < release(runtime().trtllm_paged_kv_cache_default_from.value)


def _expert_device(arch: Architecture, pool: PoolHW, dev: Device, engine: str | None, version: str | None, x16: bool,
                   profile: dict | None) -> Device | None:
    """The device (precision, GEMM fraction) the routed experts' GEMMs of a TensorRT-LLM row run at, where it is not
    `dev`: 16-bit in an FP8 engine before the FP8 MoE plugin (`trtllm_experts_16bit`), and at the sm80 kernel's
    fraction on Hopper before the Hopper grouped GEMM (`trtllm_moe_gemm_fraction`). None: as the rest of the model."""
    frac = trtllm_moe_gemm_fraction(arch, pool.gpu, engine, version)
    if frac is None:
        return device(pool, "bf16", profile) if x16 else None
    base = device(pool, "bf16", profile) if x16 or dev.precision == "fp8" else dev
    return Device(pool=pool, precision=base.precision, overrides=(("gemm_fraction", frac),) + base.overrides)


def predict_generate(row: dict, profile: dict | None = None) -> CaseResult:
    arch, pool, dev, lay, wb, lay_in = _gen_setup(row, profile)
    gpus = lay.tp * lay.pp
    meas = row.get("measured") or {}
    inp = float(lay_in["input_len"])
    engine, version = lay_in.get("engine"), str(lay_in["engine_version"]) if "engine_version" in lay_in else None
    # an FP8 TensorRT-LLM engine before its FP8 MoE plugin keeps the routed experts at 16 bits, weights and GEMMs;
    # before its Hopper grouped GEMM the experts' GEMMs run the sm80 kernel, at that path's rate on Hopper
    x16 = trtllm_experts_16bit(arch, _precision(row), engine, version)
    expert_dev = _expert_device(arch, pool, dev, engine, version, x16, profile)
    expert_bytes = 2.0 if x16 else None
    if "output_len" not in lay_in:  # case format v2: a prefill-only row, scored on its time to first token
        if "ttft_ms" not in meas:
            raise ValueError("layout.output_len is missing and measured has no ttft_ms to score without it")
        b = float(lay_in.get("batch", 1)) if lay_in.get("batch", 1) != "auto" else 1.0
        return _result(row, "ttft_ms", meas["ttft_ms"], prefill_time(arch, dev, lay, b * inp, inp / 2, expert_dev) * 1e3)
    out = float(lay_in["output_len"])
    batch = lay_in.get("batch", 1)
    # the engine's decode kernel may read each KV head once per query head (TensorRT-LLM's masked MHA);
    # its choice of kernel is taken at the running batch (at maximum load: the engine's cap)
    sm = pool.gpu.sm_count.value if pool.gpu.sm_count is not None else None
    reads = decode_kv_reads(arch, lay, float(DEFAULT_MAX_NUM_SEQS if batch == "auto" else batch), sm, engine, version)
    # an engine built from a model config without a checkpoint (layout.random_weights) routes all its tokens to
    # the same experts: TensorRT-LLM's random weights overflow fp16 in the first MoE layer (runtime.yaml trtllm_moe)
    reached = (random_weight_experts_reached(arch, engine) if _layout_flag(lay_in, "random_weights", False)
               else None)
    step = StepModel(arch, dev, lay, wb, wb, kv_reads=reads, expert_bytes=expert_bytes,
                     expert_dev=expert_dev, experts_reached=reached)
    # engines give the KV cache a fraction of what the weights leave (TensorRT-LLM's
    # kv_cache_free_gpu_mem_fraction default 0.9); a TensorRT-LLM engine without a paged cache allocates the
    # run's cache whole, in what the weights leave (runtime.yaml trtllm_paged_kv_cache_default_from)
    share = 1.0 if _trtllm_contiguous_kv(lay_in) else KV_FREE_FRACTION
    cap = share * (pool.gpu.memory_bytes - weight_bytes_per_gpu(arch, lay, wb, expert_bytes)
                   - gen_other_bytes(arch, lay, DEFAULT_MAX_NUM_SEQS))
    kv_tokens = cap / kv_bytes_per_token_per_gpu(arch, lay, wb)
    if batch == "auto":  # in-flight batching at maximum load: as many requests as memory allows
        n_req = float(lay_in.get("requests") or max(1, min(DEFAULT_MAX_NUM_SEQS * 4, kv_tokens / (inp + out) * 4)))
        res = simulate_decode(step, n_req, inp, out, out, kv_tokens, DEFAULT_MAX_NUM_SEQS, n_req)
        t = res.time + prefill_time(arch, dev, lay, n_req * inp + res.reprefill_tokens, inp / 2, expert_dev)
        total_out = n_req * out
    else:
        b = float(batch)
        if b * (inp + out) > kv_tokens:
            return CaseResult(row["id"], "generate", modelled=False,
                              note=f"batch {b:.0f} x {inp + out:.0f} tokens exceeds the {kv_tokens:,.0f}-token KV memory")
        # static batch: every sequence runs the whole output length; context grows linearly
        steps = np.linspace(0, out, 65)
        mid = (steps[:-1] + steps[1:]) / 2
        decode = float(np.sum(np.diff(steps) * step.step_time(np.full(64, b), inp + mid)))
        ttft = prefill_time(arch, dev, lay, b * inp, inp / 2, expert_dev)
        t = ttft + decode
        total_out = b * out
        if "itl_ms" in meas and "output_tokens_per_s" not in meas and "output_tokens_per_s_per_gpu" not in meas:
            return _result(row, "itl_ms", meas["itl_ms"], decode / out * 1e3)
    if "output_tokens_per_s_per_gpu" in meas:
        return _result(row, "output_tokens_per_s_per_gpu", meas["output_tokens_per_s_per_gpu"], total_out / t / gpus)
    if "output_tokens_per_s" in meas:
        return _result(row, "output_tokens_per_s", meas["output_tokens_per_s"], total_out / t)
    if "itl_ms" in meas:
        return _result(row, "itl_ms", meas["itl_ms"], (t / out) * 1e3)
    if "ttft_ms" in meas and batch != "auto":
        return _result(row, "ttft_ms", meas["ttft_ms"], ttft * 1e3)
    return CaseResult(row["id"], "generate", modelled=False, note="no generation metric the model predicts "
                      "(output_tokens_per_s_per_gpu, output_tokens_per_s, itl_ms, ttft_ms)")


def _prompt_len(row: dict) -> int:
    """Prompt tokens per sample: the row's, else what its measured token total implies
    (tokens/s/GPU x step_s x GPUs = prompt + response tokens of all samples), else assumed."""
    lay, meas = row.get("layout") or {}, row.get("measured") or {}
    cap = int(lay["max_seq_len"]) - int(lay["avg_seq_len"]) - 1
    if "prompt_len" in lay:
        return int(lay["prompt_len"])
    if "tokens_per_s_per_gpu" in meas and "step_s" in meas:
        per_sample = meas["tokens_per_s_per_gpu"] * meas["step_s"] * row["hardware"]["gpus"] / lay["samples_per_step"]
        implied = per_sample - lay["avg_seq_len"]
        if implied >= 1:
            return int(min(round(implied), cap))
    return int(max(1, min(DEFAULT_RL_PROMPT_LEN, cap)))


def _engine_share(row: dict) -> float | None:
    """The engine's memory fraction: the row's, else its framework's default, else (colocated)
    the common default of the RL frameworks; a disaggregated engine without one takes what fits."""
    lay = row.get("layout") or {}
    if "gpu_memory_utilization" in lay:
        return float(lay["gpu_memory_utilization"])
    fw = _framework(row)
    if fw is not None:
        return fw.gpu_memory_utilization.value
    return DEFAULT_COLOCATED_GPU_MEMORY_UTILIZATION if lay.get("mode", "colocated") == "colocated" else None


# A v1 row names its framework and training backend only in its prose; read the same way for
# every row: a name that appears alone in the source (framework) or source + notes (backend).
_FRAMEWORK_NAMES = {"nemo-rl": re.compile(r"nemo[- _]?rl", re.I), "verl": re.compile(r"\bverl\b", re.I),
                    "openrlhf": re.compile(r"openrlhf", re.I)}
_STRATEGY_NAMES = {"megatron": re.compile(r"megatron", re.I), "fsdp2": re.compile(r"dtensor|fsdp", re.I),
                   "deepspeed": re.compile(r"deepspeed", re.I)}


def _named_once(text: str, names: dict) -> str | None:
    hits = [k for k, pat in names.items() if pat.search(text)]
    return hits[0] if len(hits) == 1 else None


def framework_name(row: dict) -> str | None:
    """The row's `layout.framework`, else the one framework its source names."""
    name = (row.get("layout") or {}).get("framework")
    if name is None:
        return _named_once(str(row.get("source", "")), _FRAMEWORK_NAMES)
    if name not in runtime().frameworks:
        raise ValueError(f"layout.framework must be one of {sorted(runtime().frameworks)}, got {name!r}")
    return name


def _framework(row: dict) -> FrameworkRuntime | None:
    name = framework_name(row)
    return None if name is None else runtime().frameworks[name]


def _train_strategy(row: dict) -> str | None:
    """`layout.train_strategy`, else the one training backend the source and notes name."""
    lay = row.get("layout") or {}
    if "train_strategy" in lay:
        return lay["train_strategy"]
    return _named_once(f"{row.get('source', '')} {row.get('notes', '')}", _STRATEGY_NAMES)


def _no_reference(row: dict) -> bool:
    """`layout.reference: none`: the run has no reference policy (no KL term; verl builds none unless
    use_kl_loss or use_kl_in_reward, verl/trainer/ppo/utils.py need_reference_policy at main b178a3cd5)."""
    return (row.get("layout") or {}).get("reference") == "none"


def rl_step_spec(row: dict, *, free: bool = False) -> dict:
    """The spec a published RL step implies. The row's layout choices become constraints, so the
    solver's best under them can stand in for a layout the row does not give; `free` leaves the
    layout to the solver (the headroom: the best plan for the same job on the same GPUs)."""
    lay = row.get("layout") or {}
    hw = row["hardware"]
    missing = [k for k in ("samples_per_step", "avg_seq_len", "max_seq_len") if k not in lay]
    if missing:
        raise ValueError(f"layout lacks {', '.join(missing)}: the step's token count and lengths are unknown")
    prompt = _prompt_len(row)
    samples = int(lay["samples_per_step"])
    tgb = int(lay.get("train_global_batch", samples))
    model = row["model"]
    policy: Any = model["name"] if set(model) <= {"name", "params_b"} else {k: v for k, v in model.items()}
    mode = lay.get("mode", "colocated")
    gen = {k: lay["generation"][k] for k in ("tp", "pp") if k in (lay.get("generation") or {})}
    share = _engine_share(row)
    if share is not None:
        gen["gpu_memory_utilization"] = share
    cons: dict[str, Any] = {"modes": [mode], "min_headroom": 0.05, "generation": gen,
                            "training": {k: v for k, v in (lay.get("training") or {}).items() if k in ("tp", "pp", "cp", "ep", "vp")}}
    if free:
        cons = {"min_headroom": 0.05}
    response = {"max": int(lay["max_seq_len"]) - prompt, "mean": int(lay["avg_seq_len"])}
    if "clip_ratio" in lay:
        response["clip_ratio"] = float(lay["clip_ratio"])
    return {
        "cluster": {"gpu": hw["gpu"], "nodes": max(1, math.ceil(hw["gpus"] / hw.get("gpus_per_node", 8))),
                    "gpus_per_node": min(hw["gpus"], hw.get("gpus_per_node", 8)),
                    "network": hw.get("network", "IB-NDR-400")},
        "model": {"policy": policy, "reference": None if _no_reference(row) else "policy", "reward": "rule", "value": None if
                  lay.get("algorithm", "grpo") == "grpo" else "policy", "precision": _precision(row),
                  "lora_rank": int(lay.get("lora_rank", 0))},
        "rl": {"algorithm": lay.get("algorithm", "grpo"), "prompts_per_step": samples, "samples_per_prompt": 1,
               "prompt_len": prompt, "response_len": response,
               "mini_batches": max(1, samples // tgb), "max_staleness": int(lay.get("staleness", 0))},
        "constraints": cons,
        "solver": {"top_k": 0, "time_limit_s": 10},
        "target": {"framework": framework_name(row) or "any"},
    }


def _recipe_layout(row: dict, wl) -> tuple[dict, list[str], str | None, dict]:
    """The layout the row ran: what it states, else its framework's defaults (each one named in
    the returned list), the recompute it states (None: the least that fits is chosen) and the
    workload's micro-batching (`packed_tokens`: the token budget training micro-batches are
    packed to, None: not packed; `logprob_micro_batch` and `logprob_packed_tokens`: the log-prob
    passes' own, None: the training ones). ValueError when neither gives a decision the step
    depends on."""
    global_batch = wl.global_batch
    lay, hw = row.get("layout") or {}, row["hardware"]
    fw = _framework(row)
    fw_name = framework_name(row)
    assumed: list[str] = []
    if fw_name is not None and "framework" not in lay:
        assumed.append(f"framework = {fw_name} (named in the source)")

    def default(what: str, entry) -> Any:
        if fw is None:
            raise ValueError(f"the row gives no {what} and no layout.framework whose default would set it")
        assumed.append(f"{what} = {entry.value} ({fw_name} default)")
        return entry.value

    mode = lay.get("mode", "colocated")
    gen, tr = dict(lay.get("generation") or {}), dict(lay.get("training") or {})
    gpus = int(hw["gpus"])
    if mode == "colocated":
        g_gpus = t_gpus = gpus
    else:
        g_gpus, t_gpus = gen.get("gpus"), tr.get("gpus")
        if g_gpus is None and t_gpus is None:
            raise ValueError(f"a {mode} row needs generation.gpus or training.gpus (the GPU split)")
        g_gpus = int(g_gpus if g_gpus is not None else gpus - int(t_gpus))
        t_gpus = int(t_gpus if t_gpus is not None else gpus - g_gpus)
    if "generation" not in lay:
        assumed.append("generation tp = pp = 1 (not given)")
    eager = bool(gen.get("enforce_eager"))
    v0 = (str(lay.get("engine", "vllm")) == "vllm" and lay.get("engine_version") is not None
          and release(lay["engine_version"]) < release(runtime().engine_v1_default_from.value))
    if eager:
        assumed.append("enforce_eager: every decode kernel launched from the host" + (
            f"; vLLM {lay['engine_version']} is a V0 engine: outputs processed between steps (no async output "
            "processor under enforce_eager)" if v0 else ""))
    if "training" not in lay:
        assumed.append("training tp = pp = cp = ep = 1 (not given)")
    g_tp, g_pp, g_ep = (int(gen.get(k, 1)) for k in ("tp", "pp", "ep"))
    t_tp, t_pp, t_cp, t_ep, t_vp = (int(tr.get(k, 1)) for k in ("tp", "pp", "cp", "ep", "vp"))
    if g_gpus % (g_tp * g_pp) or t_gpus % (t_tp * t_pp * t_cp):
        raise ValueError("the stated degrees do not divide the GPUs")
    t_dp = t_gpus // (t_tp * t_pp * t_cp)
    strategy = _train_strategy(row)
    if strategy is not None and "train_strategy" not in lay:
        assumed.append(f"train_strategy = {strategy} (named in the row's text)")
    elif strategy is None and fw is not None:
        strategy = default("train_strategy", fw.train_strategy)
    if "zero_stage" in tr:
        zero = int(tr["zero_stage"])
    elif strategy is not None:
        zero = runtime().zero_stage_by_strategy.value[strategy]
    else:
        raise ValueError("the row gives no training.zero_stage, train_strategy or framework")
    mb = int(tr["micro_batch"]) if "micro_batch" in tr else default("micro_batch", fw.micro_batch)
    packing = tr.get("sequence_packing")
    if packing is None and fw is not None:
        packing = default("sequence_packing", fw.sequence_packing)
    budget = None
    per_rank = max(1, global_batch // t_dp)
    lengths = (wl.prompt_len, wl.response_mean, wl.response_max, wl.clip_ratio)
    lp_mb = int(tr["logprob_micro_batch"]) if "logprob_micro_batch" in tr else (
        default("logprob_micro_batch", fw.logprob_micro_batch) if fw is not None and fw.logprob_micro_batch else None)
    lp_budget = dyn_round = None
    if packing or tr.get("dynamic_batch_tokens"):
        # micro-batches filled to a token budget (packed, or dynamic batching: verl use_dynamic_bsz,
        # NeMo-RL dynamic_batching), micro_batch x max length unless stated. The framework runs one
        # micro-batch per first-fit-decreasing bin, so the sequences per micro-batch are the
        # global batch over its bins (not budget / mean length rounded down to a divisor)
        budget = int(tr.get("dynamic_batch_tokens") or mb * int(lay["max_seq_len"]))
        if not packing and fw is not None and fw.dynamic_batching_round is not None:
            # the framework's dynamic batching: sorted, padded micro-batches, not packed bins
            dyn_round = fw.dynamic_batching_round.value
            assumed.append(f"dynamic batching as {fw_name} cuts it (sorted, padded to {dyn_round})")

        def per_mb(sequences: int, tokens: int) -> float:
            if dyn_round:
                return dynamic_batches(sequences, *lengths, tokens, t_dp, dyn_round)[0]
            return packed_sequences_per_bin(sequences, *lengths, tokens)
        packed_mb = per_mb(global_batch, budget)
        # the plan's micro_batch must divide the rank's share (solver/rules.py); the nearest divisor
        # is reported, the time runs the bins (workload.packed_micro_batch)
        mb = min((d for d in range(1, per_rank + 1) if per_rank % d == 0), key=lambda d: abs(d - packed_mb))
        if lp_mb is not None:
            # NeMo-RL packs log-probs to logprob_mb_tokens = max_total_sequence_length x logprob_batch_size
            # (examples/configs/grpo_math_1B.yaml at v0.3.1 and v0.5.0, sequence_packing and dynamic_batching)
            lp_budget = lp_mb * int(lay["max_seq_len"])
            lp_mb = per_mb(wl.samples, lp_budget)
    else:
        mb = max(d for d in range(1, min(mb, per_rank) + 1) if per_rank % d == 0)
    micro = {"packed_tokens": budget, "packed_micro_batch": None if budget is None else packed_mb,
             "logprob_micro_batch": None if lp_mb is None else float(lp_mb),
             "logprob_packed_tokens": lp_budget, "dynamic_round": dyn_round, "engine_eager": eager,
             "engine_sync_output": eager and v0,
             "engine_version": (str(lay["engine_version"]) if lay.get("engine_version") is not None
                                and str(lay.get("engine", "vllm")) == "vllm" else None),
             # fixed micro-batches without their padding (verl use_remove_padding): memory of the real tokens
             "unpadded": budget is None and bool(tr.get("remove_padding", False)),
             # the behaviour log-prob forward skipped (NeMo-RL force_on_policy_ratio): workload.old_logprob_pass
             "old_logprob_pass": bool(tr.get("old_logprob_pass", True))}
    if fw_name is not None and (lay.get("framework_version") is not None or strategy is not None):
        # the costs of the release the row ran, where a fact changed between releases, and of the
        # training strategy it ran, where a fact holds for one (FSDP2's copies)
        version = lay.get("framework_version")
        micro["framework"] = framework_costs(fw_name, None if version is None else str(version), strategy,
                                             samples=wl.samples)
    if _no_reference(row):
        reference = "none"
    else:
        reference = default("reference placement", fw.reference) if fw else "training"
    offload = lay.get("offload")
    if offload is None:
        offload = default("offload", fw.train_offload_during_rollout) if fw and mode == "colocated" else False
    else:
        offload = offload != "none"
    seqs = gen.get("max_num_seqs")
    if seqs is None and fw is not None and fw.max_num_seqs.value is not None:
        seqs = default("max_num_seqs", fw.max_num_seqs)
    async_engine = gen.get("async_engine")
    if async_engine is None and fw is not None and fw.async_engine_always is not None:
        async_engine = default("vLLM's AsyncLLM in every mode", fw.async_engine_always)
    if async_engine is None and mode == "async" and fw is not None and fw.async_engine_when_async is not None:
        async_engine = default("vLLM async_engine in async mode", fw.async_engine_when_async)
    if seqs is None and async_engine:
        # vLLM's AsyncLLM built from engine args without max_num_seqs: the ENGINE_CONTEXT default
        seqs = runtime().engine_context_max_num_seqs.value
        assumed.append(f"max_num_seqs = {seqs} (vLLM's AsyncLLM built without it: the engine-context default)")
    if seqs is None:
        gpu = find_gpu(hw["gpu"])
        seqs = engine_default_max_num_seqs(gpu.memory_bytes, gpu.name)
        assumed.append(f"max_num_seqs = {seqs} (the engine's default)")
    layout = {
        "pipeline": {"mode": mode, "staleness": int(lay.get("staleness", 0))},
        "resource_allocation": {"generation": {"gpus": g_gpus},
                                "training": {"gpus": t_gpus, **({"framework": strategy} if strategy else {})}},
        "placement": {"reference": reference, "reward": "cpu",
                      "value": "none" if lay.get("algorithm", "grpo") == "grpo" else "training"},
        "parallelism": {"generation": {"tp": g_tp, "pp": g_pp, "dp": g_gpus // (g_tp * g_pp), "ep": g_ep},
                        "training": {"tp": t_tp, "pp": t_pp, "dp": t_dp, "cp": t_cp, "ep": t_ep, "vp": t_vp,
                                     "zero_stage": zero, "micro_batch": mb,
                                     "grad_accum": max(1, per_rank // mb),
                                     "sequence_parallel": bool(tr.get("sequence_parallel", t_tp > 1))}},
        "optimization": {"train_offload_during_rollout": bool(offload and mode == "colocated"),
                         "max_num_seqs": int(seqs)},
    }
    # the engine's output processor shares the engine core's thread: the LLM class with the engine core in-process
    # (AsyncLLM always runs its engine core in another process)
    micro["engine_inproc_output"] = bool(fw is not None and fw.engine_inproc_llm is not None
                                         and fw.engine_inproc_llm.value and not async_engine)
    return layout, assumed, tr.get("recompute"), micro


# `logprob` is the policy's and the reference's log-prob passes together, for frameworks that
# time them as one (NeMo-RL's policy_and_reference_logprobs)
RL_PHASES = ("generation", "old_logprob", "reference", "logprob", "reward", "value", "train", "weight_sync", "other")


def plan_phases(plan) -> dict[str, float]:
    """A plan's step in the case format's phase names; `other` is what no named phase covers
    (the colocated switch, framework time outside the phases)."""
    t = plan.time_s
    # the engine's sleep ends the rollout (NeMo-RL times it inside generation: finish_generation)
    named = {"generation": t.prefill + t.decode + t.engine_release, "old_logprob": t.old_logprob, "reference": t.reference,
             "reward": t.reward, "value": t.value, "train": t.train, "weight_sync": t.weight_sync}
    named["other"] = max(0.0, t.step - sum(named.values())) if plan.pipeline.mode != "async" else t.switch
    named["logprob"] = t.old_logprob + t.reference
    return named


class NoRecipeLayout(ValueError):
    """The row leaves a layout decision open that no framework default fills."""


def recipe_estimate(row: dict, profile: dict | None = None):
    """(problem, layout, estimate, assumptions) of an rl_step row on its own layout: the row's
    workload with its packed micro-batches, and the least recompute that fits where the row gives
    none. Raises NoRecipeLayout where the row leaves a decision open (the caller solves instead)
    and ValueError where the row's layout breaks a rule."""
    from rlsolve.solver.estimate import evaluate_layout, to_layout
    spec = load_spec(rl_step_spec(row))
    problem = resolve(spec, profile)
    try:
        layout, assumed, recompute, micro = _recipe_layout(row, problem.workload)
    except ValueError as e:
        raise NoRecipeLayout(str(e)) from None
    # packed micro-batches: memory holds the token budget, not mb x max length; the log-prob
    # passes run their own micro-batches
    problem = replace(problem, workload=replace(problem.workload, **micro))
    est = lay = None
    for rc in [recompute] if recompute else ["none", "selective", "full"]:  # the least that fits
        layout["parallelism"]["training"]["recompute"] = rc
        try:
            lay = to_layout(layout)
            est = evaluate_layout(problem, lay)
        except SpecError as e:
            raise ValueError(f"the row's layout breaks a rule: {e}") from None
        if est.gen.fits and est.train.fits:
            break
    if not recompute:
        assumed.append(f"recompute = {layout['parallelism']['training']['recompute']} (the least that fits)")
    return problem, lay, est, assumed


def _score_recipe(row: dict, profile: dict | None):
    """(plan, how the layout was found, assumptions): estimate on the row's own layout; when the
    row leaves a decision open that no framework default fills, the solver's best under the
    row's stated choices, said so in the note."""
    # the solver (and OR-Tools) loads only when a file has RL rows
    from rlsolve.solver import solve
    from rlsolve.solver.report import build_plan
    spec = load_spec(rl_step_spec(row))
    try:
        problem, lay, est, assumed = recipe_estimate(row, profile)
    except NoRecipeLayout as e:
        plan = solve(spec, profile=profile)
        return plan, f"solver's best under the row's choices ({e})", []
    try:
        plan = build_plan(problem, lay, est, status="estimate", objective=spec.objective)
    except InfeasibleError as e:  # scored all the same, and said so
        raise ValueError("the row's layout does not fit in GPU memory in the model: " + "; ".join(e.reasons)) from None
    return plan, "recipe layout", assumed


def _refit_inside_generation(row: dict, measured_phases: dict) -> bool:
    """True where the row's measured generation holds the refit: its framework times the new weights'
    load inside its rollout timer unless it prints a refit timer of its own (runlogs/phases.py
    FrameworkTimers.refit_in_generation_unless, the one place that says so: verl's `gen` holds the
    hybrid engine's weight load until `update_weights` is timed apart), and the row gives no
    weight_sync of its own."""
    try:
        timers = TIMERS.get(framework_name(row) or "")
    except ValueError:
        return False
    return (timers is not None and bool(timers.refit_in_generation_unless)
            and "generation" in measured_phases and "weight_sync" not in measured_phases)


def predict_rl_step(row: dict, profile: dict | None = None, headroom: bool = True) -> CaseResult:
    from rlsolve.solver import solve
    try:
        plan, how, assumed = _score_recipe(row, profile)
    except ValueError as e:
        return CaseResult(row["id"], "rl_step", modelled=False, note=str(e))
    except InfeasibleError as e:
        return CaseResult(row["id"], "rl_step", modelled=False, note="no layout fits: " + "; ".join(e.reasons))
    meas = row.get("measured") or {}
    gpus = row["hardware"]["gpus"]
    best = None
    try:  # the headroom: the solver's best plan (within its 10 s) for the same job on the same GPUs
        if headroom:
            best = solve(rl_step_spec(row, free=True), profile=profile).time_s.step
    except (InfeasibleError, NoAnswerError):
        pass
    phases = plan_phases(plan)
    measured_phases = meas.get("phases_measured_s") or {}
    if _refit_inside_generation(row, measured_phases):
        phases = {**phases, "generation": phases["generation"] + phases["weight_sync"], "weight_sync": 0.0}
        assumed = [*assumed, "generation compared with the plan's generation + weight_sync (the framework's rollout "
                   "timer holds the hybrid engine's refit)"]
    unknown = sorted(set(measured_phases) - set(RL_PHASES))
    if unknown:
        return CaseResult(row["id"], "rl_step", modelled=False,
                          note=f"measured.phases_measured_s has unknown phases {unknown}; use {list(RL_PHASES)}")
    extra = {"scored_on": how, "assumed": assumed, "mode": plan.pipeline.mode, "phases_s": phases,
             "phase_errors": {k: phases[k] / float(v) - 1.0 for k, v in measured_phases.items() if float(v) > 0},
             "phases_measured_s": measured_phases, "best_plan_step_s": best,
             "generation": plan.parallelism.generation.model_dump(), "training": plan.parallelism.training.model_dump()}
    if "step_s" in meas:
        r = _result(row, "step_s", meas["step_s"], plan.time_s.step)
    elif "tokens_per_s_per_gpu" in meas:
        r = _result(row, "tokens_per_s_per_gpu", meas["tokens_per_s_per_gpu"], plan.throughput.tokens_per_s / gpus)
    elif "tokens_per_s" in meas:
        r = _result(row, "tokens_per_s", meas["tokens_per_s"], plan.throughput.tokens_per_s)
    else:
        return CaseResult(row["id"], "rl_step", modelled=False,
                          note="no RL-step metric the model predicts (step_s, tokens_per_s_per_gpu, tokens_per_s)")
    r.extra = extra
    r.note = how + ("; assumed " + "; ".join(assumed) if assumed else "")
    return r


def _result(row: dict, metric: str, measured: float, predicted: float) -> CaseResult:
    return CaseResult(row["id"], row["kind"], metric, float(measured), float(predicted),
                      float(predicted) / float(measured) - 1.0)


PREDICT = {"train": predict_train, "generate": predict_generate, "rl_step": predict_rl_step}


def score_cases(data: dict, profile: dict | None = None, headroom: bool = True) -> CaseReport:
    """Predict every row; `profile` (GPU name -> efficiency overrides, as `solve --profile`
    reads) applies to every row whose GPU it names. `headroom`: solve each RL row's job freely
    too, for the best plan beside the recipe's (one solve per row)."""
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise SpecError("a cases file holds `cases:`, a list of rows (see reference_cases.yaml)", field="cases")
    rows = []
    for i, row in enumerate(data["cases"]):
        rid = row.get("id", f"row {i}") if isinstance(row, dict) else f"row {i}"
        kind = row.get("kind") if isinstance(row, dict) else None
        if kind not in PREDICT:
            rows.append(CaseResult(rid, str(kind), modelled=False, note=f"unknown kind {kind!r}"))
            continue
        try:
            extra = {"headroom": headroom} if kind == "rl_step" else {}
            rows.append(PREDICT[kind]({**row, "id": rid}, profile, **extra))
        except (SpecError, InfeasibleError, NoAnswerError, KeyError, ValueError, TypeError, AttributeError,
                ArithmeticError, ValidationError) as e:  # a malformed row is reported, never a traceback
            msg = f"missing field {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
            rows.append(CaseResult(rid, kind, modelled=False, note=f"cannot model: {msg}"))
    return CaseReport(rows)
