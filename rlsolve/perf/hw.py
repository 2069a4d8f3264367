"""Hardware primitives of the model: GEMM rate by shape, HBM streaming, collectives by tier.

Units: seconds, bytes, FLOPs. Every efficiency comes from the catalog (or a calibrated
profile) with its source; nothing here defaults to the datasheet peak.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from rlsolve.perf.nccl import affine_lower_bound, collective_time
from rlsolve.resolve import PoolHW

GB = 1e9


@lru_cache(maxsize=1)
def constants() -> dict[str, float]:
    raw = yaml.safe_load(resources.files("rlsolve.perf").joinpath("constants.yaml").read_text())
    return {k: float(v["value"]) for k, v in raw.items()}


@dataclass(frozen=True)
class Device:
    """The rates the model uses for one pool, with profile overrides applied."""

    pool: PoolHW
    precision: str = "bf16"
    overrides: tuple[tuple[str, float], ...] = ()

    def _ov(self, key: str, default: float) -> float:
        for k, v in self.overrides:
            if k == key:
                return v
        return default

    @property
    def peak_flops(self) -> float:
        return self.pool.gpu.peak_tflops(self.precision) * 1e12

    @property
    def gemm_fraction(self) -> float:
        eff = self.pool.gpu.efficiency
        if self.precision == "fp8" and eff.gemm_fp8_fraction is not None:
            return self._ov("gemm_fp8_fraction", eff.gemm_fp8_fraction.value)
        return self._ov("gemm_fraction", eff.gemm_fraction.value)

    @property
    def attention_flops(self) -> float:
        """Achieved FLOP/s of fused attention (always 16-bit math)."""
        eff = self.pool.gpu.efficiency
        return self.pool.gpu.bf16_tflops * 1e12 * self._ov("attention_fraction", eff.attention_fraction.value)

    def attention_rates(self, kernel: str) -> tuple[float, float]:
        """(forward, backward) achieved FLOP/s of the training attention kernel `kernel`
        (frameworks/runtime.yaml train_attention_kernel): the catalog's measured rates of that kernel on this
        GPU (attention_kernels), else `attention_flops` for both where the catalog gives none; a profile's
        attention_fraction (measured on the user's own GPU) sets both."""
        rate = self.pool.gpu.efficiency.attention_kernels.get(kernel)
        if rate is None or any(k == "attention_fraction" for k, _ in self.overrides):
            return self.attention_flops, self.attention_flops
        peak = self.pool.gpu.bf16_tflops * 1e12
        return peak * rate.forward.value, peak * rate.backward.value

    @property
    def fastest_attention_flops(self) -> float:
        """The fastest attention rate any pass or kernel reaches on this GPU (lower bounds' rate)."""
        kernels = self.pool.gpu.efficiency.attention_kernels
        return max([self.attention_flops] + [r for k in kernels for r in self.attention_rates(k)])

    @property
    def hbm_bytes_per_s(self) -> float:
        eff = self.pool.gpu.efficiency
        return self.pool.gpu.hbm_gbps * GB * self._ov("hbm_fraction", eff.hbm_fraction.value)

    @property
    def launch_s(self) -> float:
        return self._ov("kernel_launch_us", self.pool.gpu.efficiency.kernel_launch_us.value) * 1e-6

    # --- framework factors a profile fitted on a run's log may set (rlsolve calibrate --from-log);
    # without a profile each is the model's own value, so plans are unchanged ------------------
    @property
    def host_slowdown(self) -> float:
        """How many times longer this system's host CPU takes for the same Python/PyTorch host work
        than the x86 servers the host-time constants were measured on (catalog host_cpu_slowdown;
        1.0 when the catalog gives none)."""
        s = self.pool.gpu.efficiency.host_cpu_slowdown
        return 1.0 if s is None else s.value

    @property
    def decode_step_overhead_s(self) -> float:
        """Host time per decode step of the engine (scheduler, sampler, detokenizer):
        constants.yaml decode_step_overhead_us on this system's host (x host_slowdown) unless a
        profile sets `decode_step_overhead_us` (measured on the host itself)."""
        return self._ov("decode_step_overhead_us", constants()["decode_step_overhead_us"] * self.host_slowdown) * 1e-6

    @property
    def decode_host_per_seq_s(self) -> float:
        """Host time per running sequence in each decode step (sampling with log-probs, output
        processing): constants.yaml decode_host_us_per_seq on this system's host unless a profile sets it."""
        return self._ov("decode_host_us_per_seq", constants()["decode_host_us_per_seq"] * self.host_slowdown) * 1e-6

    @property
    def train_efficiency(self) -> float:
        """Share of the model's training speed a framework reaches (1.0 = the model as is);
        training times are divided by it. Profile key `train_efficiency`."""
        return self._ov("train_efficiency", 1.0)

    @property
    def logprob_efficiency(self) -> float:
        """The same for forward-only passes (old log-probs, reference, reward, value forward).
        Profile key `logprob_efficiency`."""
        return self._ov("logprob_efficiency", 1.0)

    @property
    def engine_wake_bytes_per_s(self) -> float:
        """Rate per engine GPU at which a colocated refit wakes the sleeping engine's weights back from
        host memory: constants.yaml engine_wake_gbps_per_gpu (measured in a vLLM issue), unless a
        profile fitted on the user's own log sets `colocated_refit_gbps_per_gpu`."""
        return self._ov("colocated_refit_gbps_per_gpu", constants()["engine_wake_gbps_per_gpu"]) * GB

    @property
    def step_overhead_s(self) -> float:
        """Framework time per RL step outside every modelled phase (data preparation, reward
        and advantage bookkeeping, Ray transfers): 0 unless a profile sets `step_overhead_s`."""
        return self._ov("step_overhead_s", 0.0)

    def gemm_time(self, flops: float, count: float = 1.0) -> float:
        """Time of `count` GEMMs of `flops` each. Small GEMMs fill fewer SMs and tiles: the
        achieved fraction is gemm_fraction * f / (f + f_half), f_half from the catalog.

        The curve is f / (R (f + f_half)) = f / R + f_half / R: a GEMM takes a fixed t0 = f_half / R
        beside its FLOPs at the large-GEMM rate R. The catalog's f_half is the BF16 one (fitted on
        BF16 GEMMs); an FP8 GEMM keeps the same t0 at its own R, so its f_half is f_half x
        R_fp8 / R_bf16 (fp8_half_size_scale). OpenXLA's sm_100 GEMM table shows it (tensorflow/tensorflow
        third_party/xla/xla/backends/gpu/cost_model/matmul_interpolator_data.h, commit a305421c):
        fitting rate = R f / (f + f_half) with R the table's 4096^3 rate (BF16 1417, FP8 2765
        TFLOPS) gives f_half 7.3e9-8.2e9 for BF16 and 1.55e10-1.75e10 for FP8 over 1024^3,
        2048x1024x2048, 2048^3 and 4096x2048x2048 (ratio 2.1 against the rates' 1.95): at
        2048x2048x256 FP8 runs at 294 TFLOPS against BF16's 276. On Hopper, Azure's sustained
        cuBLASLt FP8 sweep (Azure/AI-benchmarking-guide ND_H200_v5, R 1366.3 at 16384^3) gives
        f_half 6.0e9-1.06e10 from 1024^3 (290.8), 1024x2145x1024 (407.9) and 2048^3 (1013.4),
        against the BF16 5e9 of the catalog's sm_90 fit: 5e9 x 1377.3 / 744.8 = 9.2e9."""
        if flops <= 0 or count <= 0:
            return 0.0
        half = self._gemm_half_size_flops
        rate = self.peak_flops * self.gemm_fraction * flops / (flops + half)
        return count * flops / rate

    @property
    def _gemm_half_size_flops(self) -> float:
        """f_half of gemm_time at this device's precision (the catalog's BF16 one, x fp8_half_size_scale for FP8)."""
        half = self._ov("gemm_half_size_flops", self.pool.gpu.efficiency.gemm_half_size_flops.value)
        if self.precision == "fp8":
            half *= self.fp8_half_size_scale
        return half

    @property
    def gemm_fill_s(self) -> float:
        """The fixed time t0 = f_half / R every GEMM takes beside its FLOPs at the large-GEMM rate R
        (gemm_time's curve: time = f / R + t0): what a GEMM costs beyond its FLOPs at the peak rate."""
        return self._gemm_half_size_flops / (self.peak_flops * self.gemm_fraction)

    @property
    def fp8_half_size_scale(self) -> float:
        """R_fp8 / R_bf16: this GPU's large-GEMM FP8 rate over its BF16 one (gemm_time)."""
        eff = self.pool.gpu.efficiency
        bf16 = self.pool.gpu.bf16_tflops * self._ov("gemm_fraction", eff.gemm_fraction.value)
        return self.peak_flops * 1e-12 * self.gemm_fraction / bf16

    def stream_time(self, nbytes: float) -> float:
        return max(nbytes, 0.0) / self.hbm_bytes_per_s

    def pcie_time(self, nbytes: float) -> float:
        return nbytes / (self.pool.gpu.pcie_gbps_per_dir * GB * constants()["pcie_fraction"])

    # --- collectives -----------------------------------------------------------------------
    def link(self, span: int) -> tuple[float, float]:
        """(bus bandwidth bytes/s per GPU, latency s per latency step) for a group whose ranks
        span `span` consecutive GPUs. Inside the NVLink domain: NVLink; beyond it: the NICs.
        Memoized per device and span (a pure function of them: the solver asks ~10^5 times)."""
        links = self.__dict__.get("_links")
        if links is None:
            links = self.__dict__["_links"] = {}  # (not a field: equality and hash ignore it)
        hit = links.get(span)
        if hit is None:
            hit = links[span] = self._link(span)
        return hit

    def _link(self, span: int) -> tuple[float, float]:
        gpu = self.pool.gpu
        if span <= self.pool.scaleup_size and gpu.nvlink_gbps_per_dir > 0:
            frac = self._ov("nvlink_busbw_fraction", gpu.efficiency.nvlink_busbw_fraction.value)
            return gpu.nvlink_gbps_per_dir * GB * frac, constants()["nvlink_collective_latency_us"] * 1e-6
        if span <= self.pool.gpus_per_node:  # PCIe-only server: peers talk through the host
            return gpu.pcie_gbps_per_dir * GB * constants()["pcie_fraction"], 10e-6
        net = self.pool.network
        frac = self._ov("network_busbw_fraction", net.busbw_fraction.value)
        return self.pool.nic_gbytes_per_gpu * GB * frac, net.latency_us * 1e-6

    def ring_link(self, n: int, span: int) -> tuple[float, float]:
        """Bus bandwidth and latency of a ring collective (all-reduce, all-gather,
        reduce-scatter) of `n` ranks spread evenly over `span` consecutive GPUs. Beyond the
        server / NVLink domain NCCL runs a channel per NIC, so the ranks the group has in each
        domain cross it through that many NICs at once: the ring's bus bandwidth is the
        group's share of the domain's NICs, capped by the links inside the domain
        (NVIDIA/nccl-tests#267: all-reduce aggregates the NICs, all-to-all cannot; #119: 4 x
        HDR per 8 A100s gives 85-96 GB/s busbw, the node's 100 GB/s, not 12.5 GB/s per GPU)."""
        bw, lat = self.link(span)
        per_domain = self.ranks_per_domain(n, span)
        if per_domain is None:
            return bw, lat
        inside, _ = self.link(max(self.pool.scaleup_size, self.pool.gpus_per_node))
        return min(inside, per_domain * bw), lat

    def ranks_per_domain(self, n: int, span: int) -> int | None:
        """Ranks a group of `n` ranks spread evenly over `span` consecutive GPUs has in each server / NVLink
        domain it crosses; None when it stays inside one (or is a lone rank). Each of them reaches the
        network through its own share of the domain's NICs (ring_link, nodes_spanned,
        perf/train.py nccl_collective_ctas)."""
        domain = max(self.pool.scaleup_size, self.pool.gpus_per_node)
        if span <= domain or n <= 1:
            return None
        return max(1, min(n, round(n * domain / span)))

    def nodes_spanned(self, n: int, span: int) -> int:
        """Servers / NVLink domains a group of `n` ranks spread evenly over `span` GPUs touches
        (1 inside one): beyond one, NCCL's own cost model prices its collectives."""
        per_domain = self.ranks_per_domain(n, span)
        if per_domain is None:
            return 1
        return max(2, -(-n // per_domain))

    @staticmethod
    def _steps(n: int) -> int:
        """Latency steps of a small collective: NCCL switches to tree/LL algorithms whose
        latency grows with log2(n), not with the ring's n-1 hops."""
        return max(1, math.ceil(math.log2(n)))

    def all_reduce(self, nbytes: float, n: int, span: int) -> float:
        """Ring all-reduce bandwidth term 2(n-1)/n * bytes / busbw, plus the latency term."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, lat = self.ring_link(n, span)
        nodes = self.nodes_spanned(n, span)
        if nodes > 1:
            return collective_time("all_reduce", nbytes, n, nodes, bw, self.pool.gpu.nvlink_gbps_per_dir > 0)
        return 2 * (n - 1) / n * nbytes / bw + self._steps(n) * lat

    def all_reduce_bound(self, n: int, span: int) -> tuple[float, float]:
        """(seconds, seconds per byte) with all_reduce(bytes) >= a + b * bytes: exact inside one
        server (the ring formula is affine), NCCL's affine bound across servers (its protocols
        make it piecewise); the decode lower bound sums it over steps."""
        if n <= 1:
            return 0.0, 0.0
        bw, lat = self.ring_link(n, span)
        nodes = self.nodes_spanned(n, span)
        if nodes > 1:
            return affine_lower_bound("all_reduce", n, nodes, bw, self.pool.gpu.nvlink_gbps_per_dir > 0)
        return self._steps(n) * lat, 2 * (n - 1) / n / bw

    def all_gather(self, nbytes: float, n: int, span: int) -> float:
        """All-gather (or reduce-scatter) of a `nbytes` result: (n-1)/n * bytes."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, lat = self.ring_link(n, span)
        nodes = self.nodes_spanned(n, span)
        if nodes > 1:
            return collective_time("all_gather", nbytes, n, nodes, bw, self.pool.gpu.nvlink_gbps_per_dir > 0)
        return (n - 1) / n * nbytes / bw + self._steps(n) * lat

    reduce_scatter = all_gather

    def broadcast(self, nbytes: float, n: int, span: int) -> float:
        """Broadcast of `nbytes` from one rank to the other n-1. NCCL runs it as a pipelined ring of nRanks
        steps (tuning.cc ncclTopoTuneModel: nsteps = nRanks for a broadcast, nRanks-1 for an all-gather, ring
        only), which carries the whole buffer over every link: its algorithm bandwidth is the bus bandwidth,
        so it takes what an all-gather of n/(n-1) times the bytes takes (the ring's latency one hop short)."""
        return self.all_gather(nbytes * n / (n - 1), n, span) if n > 1 else 0.0

    def all_to_all(self, nbytes: float, n: int, span: int) -> float:
        """Each rank sends (n-1)/n of `nbytes` to the others."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, lat = self.link(span)
        return (n - 1) / n * nbytes / bw + self._steps(n) * lat

    def p2p(self, nbytes: float, span: int) -> float:
        if nbytes <= 0:
            return 0.0
        bw, lat = self.link(span)
        return nbytes / bw + lat


_DEVICES: dict[tuple, tuple] = {}


def device(pool: PoolHW, precision: str = "bf16", profile: dict | None = None) -> Device:
    """The Device of a pool (memoized: the enumeration asks for it thousands of times)."""
    key = (id(pool), precision, id(profile))
    hit = _DEVICES.get(key)
    if hit is not None and hit[0] is pool and hit[1] is profile:
        return hit[2]
    ov = tuple(sorted((profile or {}).get(pool.gpu.name, {}).items()))
    dev = Device(pool=pool, precision=precision, overrides=ov)
    if len(_DEVICES) > 256:
        _DEVICES.clear()
    _DEVICES[key] = (pool, profile, dev)
    return dev
