"""Pydantic schema of the hardware catalog. Units are in the field names.

Bandwidths are GB/s (10^9 bytes/s) **per direction** unless the name says otherwise; NVIDIA's
marketing NVLink figures are both directions added, so they are halved here.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(_Strict):
    value: float = Field(description="The number.")
    source: str = Field(description="Where the number comes from (paper, datasheet, benchmark).")


AttentionKernel = Literal["flash_attn_2", "transformer_engine", "flash_attn_triton"]


class KernelRate(_Strict):
    """A training attention kernel's measured rates on one GPU: fractions of the dense 16-bit peak (causal,
    head dim 128 where the source gives it), the forward's and the backward's (whose FLOPs are
    perf/train.py FA_BWD_OVER_FWD times the forward's)."""

    forward: Sourced
    backward: Sourced


class Efficiency(_Strict):
    """Achievable fractions of the datasheet peaks, with their sources (never a silent 1.0)."""

    gemm_fraction: Sourced = Field(description="Fraction of dense 16-bit peak reached by large GEMMs.")
    gemm_fp8_fraction: Sourced | None = Field(None, description="Same for FP8 GEMMs (None: no FP8).")
    gemm_half_size_flops: Sourced = Field(
        description="GEMM size (FLOPs of one GEMM) at which the achieved fraction falls to half of "
        "gemm_fraction; models the lower efficiency of small per-shard GEMMs.")
    attention_fraction: Sourced = Field(description="Fraction of 16-bit peak reached by fused "
                                        "(flash) attention kernels, forward+backward average; the rate of every "
                                        "attention pass no `attention_kernels` entry gives (prefill, and a training "
                                        "kernel without a published figure on this GPU).")
    attention_kernels: dict[AttentionKernel, KernelRate] = Field(
        default_factory=dict, description="Measured forward and backward rates of the attention kernel each training "
        "backend runs (frameworks/runtime.yaml train_attention_kernel): flash_attn_2, the flash-attn package's "
        "FlashAttention-2 (Hugging Face modeling code: FSDP, DeepSpeed); transformer_engine, the backend Transformer "
        "Engine's DotProductAttention selects (Megatron-Core); flash_attn_triton, the Triton FlashAttention a published "
        "row's stack names (cases.py layout.attention_kernel: MosaicML llm-foundry's attn_impl triton). A kernel not "
        "listed runs at attention_fraction.")
    sm80_kernel_fraction: Sourced | None = Field(
        None, description="Fraction of the dense 16-bit peak that a kernel built on Ampere's (sm80) tensor-core "
        "path (warp-level mma.sync, cp.async) reaches on this GPU, where that path cannot reach the GPU's own "
        "tensor-core rate (Hopper: only wgmma can); None where the sm80 path is the GPU's own or none is known.")
    hbm_fraction: Sourced = Field(description="Fraction of HBM bandwidth reached by streaming "
                                  "kernels such as decode GEMV and paged attention.")
    nvlink_busbw_fraction: Sourced = Field(description="NCCL all-reduce bus bandwidth over the "
                                           "scale-up link divided by nvlink_gbps_per_dir.")
    kernel_launch_us: Sourced = Field(description="Fixed per-kernel overhead in microseconds.")
    host_cpu_slowdown: Sourced | None = Field(
        None, description="How many times longer the system's host CPU takes for the same PyTorch/Python "
        "host work than the x86 servers the model's host-time constants were measured on (None: 1.0).")


class GPU(_Strict):
    name: str = Field(description="Catalog name, e.g. H100-SXM-80GB.")
    aliases: list[str] = Field(default_factory=list, description="Other accepted names.")
    vendor: str
    bf16_tflops: float = Field(gt=0, description="Dense BF16/FP16 tensor TFLOP/s (not sparse).")
    fp8_tflops: float | None = Field(None, description="Dense FP8 tensor TFLOP/s; None if unsupported.")
    memory_gb: float = Field(gt=0, description="Device memory as marketed, GB (10^9 bytes); for display.")
    device_memory_bytes: Sourced = Field(
        description="Device memory as the runtime reports it, bytes (torch total_memory, cudaMemGetInfo's total; "
        "hipMemGetInfo on ROCm): what PyTorch's allocator can fill and what vLLM's gpu_memory_utilization is a "
        "share of. Every capacity in the model is this figure, not memory_gb (80 GB H100s report 79.1 GiB).")
    hbm_gbps: float = Field(gt=0, description="Device memory bandwidth, GB/s.")
    nvlink_gbps_per_dir: float = Field(ge=0, description="Scale-up bandwidth per GPU per direction, "
                                       "GB/s; 0 when GPUs talk over PCIe only.")
    nvlink_domain: int = Field(ge=1, description="GPUs in one scale-up (NVLink) domain.")
    default_gpus_per_node: int = Field(ge=1, description="Usual GPUs per server.")
    pcie_gbps_per_dir: float = Field(gt=0, description="Host link bandwidth per direction, GB/s.")
    tdp_w: float = Field(gt=0, description="Board power, W.")
    price_per_gpu_hour_usd: float = Field(gt=0, description="Default on-demand price per GPU-hour.")
    price_date: str = Field(description="When the price was read (YYYY-MM).")
    price_source: str
    efficiency: Efficiency
    sm_count: Sourced | None = Field(None, description="Streaming multiprocessors the GPU runs kernels on, where "
                                     "a model term needs them (None: not recorded; the terms that read it then "
                                     "take no share of the GPU for a communication kernel).")
    source: str = Field(description="Datasheet or page the specs come from.")

    @property
    def memory_bytes(self) -> float:
        """The device memory every capacity check uses (device_memory_bytes)."""
        return self.device_memory_bytes.value

    def peak_tflops(self, precision: str = "bf16") -> float:
        if precision == "fp8":
            return self.fp8_tflops if self.fp8_tflops else self.bf16_tflops
        return self.bf16_tflops


class Network(_Strict):
    name: str = Field(description="Catalog name, e.g. IB-NDR-400.")
    aliases: list[str] = Field(default_factory=list)
    gbps_per_nic: float = Field(gt=0, description="NIC line rate, Gbit/s, per direction.")
    latency_us: float = Field(gt=0, description="One-way small-message latency, microseconds.")
    busbw_fraction: Sourced = Field(description="NCCL bus bandwidth across nodes divided by line rate.")
    source: str

    @property
    def gbytes_per_s(self) -> float:
        """Line rate per NIC per direction in GB/s."""
        return self.gbps_per_nic / 8.0


class Catalog(_Strict):
    gpus: list[GPU]
    networks: list[Network]
