"""NCCL's own cost model for collectives that cross servers (nccl_tuning.yaml says where each
number comes from). NCCL picks, per call, the algorithm (tree or ring) and protocol (LL, LL128,
Simple) its model says is fastest; a small message across nodes pays a latency of tens of
microseconds and, on LL, a bandwidth far below the NICs'. rlsolve's bus bandwidth (the NICs a
group crosses, capped by NVLink) stands for NCCL's nChannels x per-channel bandwidth."""
from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

class _PerAlgo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tree: tuple[float, float, float]
    ring: tuple[float, float, float]


class _Hops(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nvlink: _PerAlgo
    pci: _PerAlgo
    net: _PerAlgo


class NcclTuning(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    version: str
    protocols: tuple[str, str, str]
    base_latency_us: _PerAlgo
    hop_latency_us: _Hops
    net_overhead_us: float
    ll_max_gbps: tuple[float, float, float]
    tree_correction: dict[str, list[float]]


@lru_cache(maxsize=1)
def tuning() -> NcclTuning:
    raw = yaml.safe_load(resources.files("rlsolve.perf").joinpath("nccl_tuning.yaml").read_text())
    return NcclTuning.model_validate(raw)


def _log2i(x: float) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else -1


@lru_cache(maxsize=4096)
def _choices(coll: str, n_ranks: int, n_nodes: int, busbw_bytes_per_s: float, nvlink: bool
             ) -> tuple[tuple[float, float, tuple[float, ...]], ...]:
    """(latency s, algorithm bandwidth bytes/s, tree correction by log2(bytes/64) or ()) of each
    algorithm x protocol NCCL may pick for this group."""
    t = tuning()
    ppn = n_ranks / n_nodes
    intra = t.hop_latency_us.nvlink if nvlink else t.hop_latency_us.pci
    net = t.hop_latency_us.net
    busbw = busbw_bytes_per_s / 1e9                       # GB/s, NCCL's unit
    ll_max = t.ll_max_gbps[min(n_nodes - 1, 2)]
    all_reduce = coll == "all_reduce"
    nsteps = 2 * (n_ranks - 1) if all_reduce else n_ranks - 1
    n_inter = 2 * (n_nodes - 1) if all_reduce else n_nodes - 1
    out = []
    for algo in (("tree", "ring") if all_reduce else ("ring",)):
        for p, proto in enumerate(t.protocols):
            base = getattr(t.base_latency_us, algo)[p]
            intra_lat = getattr(intra, algo)[p]
            # with one rank per node NCCL charges the tree's network hop
            inter_lat = (net.tree if ppn == 1 else getattr(net, algo))[p]
            if algo == "ring":
                overhead = t.net_overhead_us * (3 if proto == "Simple" else 1)
                lat = base + (nsteps - n_inter) * max(intra_lat, overhead) + n_inter * inter_lat
                bw = {"LL": min(ll_max, busbw * 0.5), "LL128": busbw * 0.92, "Simple": busbw}[proto]
                out.append((lat * 1e-6, bw * n_ranks / nsteps * 1e9, ()))
            else:
                lat = base + 2 * ((ppn - 1) * intra_lat + _log2i(n_nodes) * inter_lat)
                tree_bw = busbw * 0.92
                bw = {"LL": min(tree_bw / 3.8, ll_max), "LL128": tree_bw * 120 / 128, "Simple": tree_bw}[proto]
                out.append((lat * 1e-6, bw * 0.5 * 1e9, tuple(t.tree_correction[proto])))
    return tuple(out)


def collective_time(coll: str, nbytes: float, n_ranks: int, n_nodes: int, busbw_bytes_per_s: float,
                    nvlink: bool = True) -> float:
    """Seconds NCCL's model gives a collective of `nbytes` (the all-reduce's buffer, or the
    gathered result) over `n_ranks` ranks on `n_nodes` nodes (n_nodes > 1), the fastest of its
    algorithms and protocols. coll: "all_reduce" (tree or ring) or "all_gather" (ring; reduce-
    scatter is costed the same)."""
    log_size = _log2i(nbytes / 64)
    best = math.inf
    for lat, bw, correction in _choices(coll, n_ranks, n_nodes, busbw_bytes_per_s, nvlink):
        if correction and 0 <= log_size < len(correction):
            bw *= correction[log_size]
        best = min(best, lat + nbytes / bw)
    return best


@lru_cache(maxsize=4096)
def affine_lower_bound(coll: str, n_ranks: int, n_nodes: int, busbw_bytes_per_s: float,
                       nvlink: bool = True) -> tuple[float, float]:
    """(seconds, seconds per byte) with collective_time >= a + b * bytes for every size: the
    smallest latency of any algorithm/protocol and the largest bandwidth (the correction
    factors only lower it). The search prunes with it."""
    choices = _choices(coll, n_ranks, n_nodes, busbw_bytes_per_s, nvlink)
    return min(lat for lat, _, _ in choices), 1.0 / max(bw for _, bw, _ in choices)
