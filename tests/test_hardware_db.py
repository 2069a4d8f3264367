"""The hardware catalog: every entry sourced, units per direction, dense numbers, lookups."""
from __future__ import annotations

import textwrap

import pytest
import yaml

from rlsolve.errors import SpecError
from rlsolve.hardware_db import (
    GPU, Catalog, Network, find_gpu, find_network, inline_network, list_gpus, list_networks,
    load_catalog,
)

GPU_NAMES = {
    "A100-SXM-40GB", "A100-SXM-80GB", "A800-SXM-80GB", "H100-SXM-80GB", "H100-PCIe-80GB",
    "H800-SXM-80GB", "H20-96GB", "H200-SXM-141GB", "B200-SXM-180GB", "GB200-NVL72", "B300-SXM-288GB",
    "GB300-NVL72", "L40S", "L4", "MI300X", "MI325X",
}
NETWORK_NAMES = {"IB-HDR-200", "IB-NDR-400", "IB-XDR-800", "RoCE-200", "RoCE-400", "Eth-100"}


@pytest.fixture(autouse=True)
def fresh_catalog(monkeypatch):
    """Each test sees the built-in catalog unless it sets its own overlay."""
    monkeypatch.delenv("RLSOLVE_CATALOG_DIR", raising=False)
    load_catalog.cache_clear()
    yield
    load_catalog.cache_clear()


def _efficiencies(gpu: GPU):
    eff = gpu.efficiency
    items = [eff.gemm_fraction, eff.gemm_half_size_flops, eff.attention_fraction,
             eff.hbm_fraction, eff.nvlink_busbw_fraction, eff.kernel_launch_us]
    return items + ([eff.gemm_fp8_fraction] if eff.gemm_fp8_fraction else [])


def test_catalog_has_the_expected_entries():
    catalog = load_catalog()
    assert isinstance(catalog, Catalog)
    assert {g.name for g in list_gpus()} == GPU_NAMES
    assert {n.name for n in list_networks()} == NETWORK_NAMES


@pytest.mark.parametrize("name", sorted(GPU_NAMES))
def test_every_gpu_number_is_sourced(name):
    gpu = find_gpu(name)
    assert gpu.source.strip() and gpu.price_source.strip()
    assert len(gpu.price_date) == 7 and gpu.price_date.startswith("20")  # YYYY-MM
    for sourced in _efficiencies(gpu):
        assert sourced.source.strip()


@pytest.mark.parametrize("name", sorted(GPU_NAMES))
def test_device_memory_is_what_the_runtime_reports(name):
    """Capacity is the runtime's total (sourced), not the marketed GB x 1e9: within a few percent of it, above it
    on the HBM parts whose GB are GiB-sized stacks (80 GB H100: 79.1 GiB = 84.9e9 B), and never the marketed
    figure copied (a copy would under-state vLLM's gpu_memory_utilization share by ~6% on an H100)."""
    gpu = find_gpu(name)
    assert gpu.device_memory_bytes.source.strip() and "PROVISIONAL" not in gpu.device_memory_bytes.source
    assert gpu.memory_bytes == gpu.device_memory_bytes.value != gpu.memory_gb * 1e9
    assert 0.95 < gpu.memory_bytes / (gpu.memory_gb * 1e9) < 1.1, gpu.memory_bytes


@pytest.mark.parametrize("name", sorted(NETWORK_NAMES))
def test_every_network_is_sourced(name):
    net = find_network(name)
    assert net.source.strip() and net.busbw_fraction.source.strip()
    assert 0 < net.busbw_fraction.value < 1


def test_rdma_networks_share_nccls_per_nic_efficiency_and_sockets_fall_below():
    """NCCL drives InfiniBand and RoCE with one IB-verbs transport and one NET hop latency in its
    cost model, so every RDMA network carries IB-NDR-400's fraction and latency; the socket
    transport (no RDMA) reaches less of its line rate and pays at least that latency."""
    ndr = find_network("IB-NDR-400")
    rdma = [n for n in list_networks() if n.name.startswith(("IB-", "RoCE-"))]
    assert {n.name for n in rdma} >= {"RoCE-200", "RoCE-400"}
    for net in rdma:
        assert net.busbw_fraction.value == ndr.busbw_fraction.value, net.name
        assert net.latency_us == ndr.latency_us, net.name
        assert not net.busbw_fraction.source.lstrip().startswith("estimate"), net.name
    eth = find_network("Eth-100")
    assert eth.busbw_fraction.value < ndr.busbw_fraction.value and eth.latency_us >= ndr.latency_us
    assert "nccl#450" in eth.busbw_fraction.source


@pytest.mark.parametrize("name", sorted(GPU_NAMES))
def test_efficiency_fractions_are_strictly_between_0_and_1(name):
    eff = find_gpu(name).efficiency
    fractions = [eff.gemm_fraction, eff.attention_fraction, eff.hbm_fraction,
                 eff.nvlink_busbw_fraction]
    if eff.gemm_fp8_fraction:
        fractions.append(eff.gemm_fp8_fraction)
    for f in fractions:
        assert 0 < f.value < 1, f.source
    assert eff.gemm_half_size_flops.value > 1e8
    assert 1 <= eff.kernel_launch_us.value <= 20


@pytest.mark.parametrize("name", ["H100-SXM-80GB", "H200-SXM-141GB", "H800-SXM-80GB"])
def test_hopper_700w_gemm_rates_are_the_sustained_ones(name):
    """A training step is one long run at the power cap, so the 700 W Hopper GPUs take the
    sustained GEMM rates: BF16 the H200's MSMF (744.8 of 989.4 TFLOPS, ml-engineering), FP8
    cuBLASLt after 10,000 warmup iterations (Azure ND_H100_v5 1377.3 / ND_H200_v5 1366.3 of
    1978.9), each below its best-shape short-run MAMF (BF16 794.5, FP8 1402.6 / 1453.4)."""
    gpu = find_gpu(name)
    eff = gpu.efficiency
    assert eff.gemm_fraction.value * gpu.bf16_tflops == pytest.approx(744.8, abs=0.6)
    assert eff.gemm_fraction.value < 794.5 / 989.4
    assert "MSMF" in eff.gemm_fraction.source
    fp8 = eff.gemm_fp8_fraction.value * gpu.fp8_tflops
    assert fp8 == pytest.approx(1366.3 if name.startswith("H200") else 1377.3, abs=1.0)
    assert fp8 < 1402.6


def test_mi300x_bf16_rate_is_pytorchs_untuned_default_at_training_shapes():
    """PyTorch runs MI300X GEMMs untuned unless PYTORCH_TUNABLEOP_ENABLED is set (verl's v0.3 ROCm image
    sets none), so MI300X takes the untuned BF16 rate measured at Llama 2 70B training shapes
    (ROCm/TransformerEngine#73: 493.0 and 546.4 TFLOPS): read back through the catalog's size curve at
    those shapes it gives their mean, below the TunableOp-tuned best-shape MAMF (668.4)."""
    gpu = find_gpu("MI300X")
    eff = gpu.efficiency
    large = eff.gemm_fraction.value * gpu.bf16_tflops
    half = eff.gemm_half_size_flops.value
    at_shapes = [large * f / (f + half) for f in (2 * 16384 * 8192 * 1280, 2 * 16384 * 1024 * 8192)]
    assert sum(at_shapes) / 2 == pytest.approx((493.0 + 546.4) / 2, rel=0.01)
    assert large < 668.4
    assert "TunableOp" in eff.gemm_fraction.source and "TransformerEngine#73" in eff.gemm_fraction.source


def test_b200_gemm_rates_are_the_sustained_ones():
    """B200 takes its own sustained GEMM rates as the Hopper GPUs do (ml-engineering mamf-finder
    v4, torch 2.14.0+cu130): BF16 MSMF 1423.8 of 2250 TFLOPS (GPU0 alone, as the H200's 744.8),
    FP8 MSMF 2788 of 4500 (node median with busy siblings), each below its boost-burst MAMF
    (BF16 1697.6-1745.0, FP8 3350-3432.5)."""
    gpu = find_gpu("B200-SXM-180GB")
    eff = gpu.efficiency
    assert eff.gemm_fraction.value * gpu.bf16_tflops == pytest.approx(1423.8, abs=1.2)
    assert eff.gemm_fraction.value * gpu.bf16_tflops < 1697.6
    assert "MSMF" in eff.gemm_fraction.source
    assert eff.gemm_fp8_fraction.value * gpu.fp8_tflops == pytest.approx(2788, abs=2.5)
    assert eff.gemm_fp8_fraction.value * gpu.fp8_tflops < 3350


def test_gb200_bf16_rate_is_its_mamf_at_the_b200_sustained_ratio():
    """No sustained GB200 BF16 rate is published: its MAMF (1822.0) times the MSMF/MAMF ratio the
    same Blackwell die showed in one set of runs on B200 (1423.8 / 1697.6)."""
    gpu = find_gpu("GB200-NVL72")
    assert gpu.efficiency.gemm_fraction.value * gpu.bf16_tflops == pytest.approx(1822.0 * 1423.8 / 1697.6, abs=2.0)
    assert "derived" in gpu.efficiency.gemm_fraction.source


def test_blackwell_ultra_takes_its_siblings_sustained_ratios():
    """No sustained B300 or GB300 GEMM rate is published. B300's is its own MAMF (1769.0 BF16, 3353.3 FP8,
    ml-engineering) at the B200's sustained/burst ratios (1423.8 / 1697.6, 2788 / 3350); GB300 has no MAMF
    either, so it takes GB200's fractions and says so: a copied figure is named, never a silent 1.0."""
    b300, b200 = find_gpu("B300-SXM-288GB"), find_gpu("B200-SXM-180GB")
    assert b300.efficiency.gemm_fraction.value * b300.bf16_tflops == pytest.approx(1769.0 * 1423.8 / 1697.6, abs=1.5)
    assert b300.efficiency.gemm_fp8_fraction.value * b300.fp8_tflops == pytest.approx(3353.3 * 2788 / 3350, abs=3.0)
    assert "derived" in b300.efficiency.gemm_fraction.source
    assert (b300.bf16_tflops, b300.fp8_tflops, b300.sm_count.value) == (b200.bf16_tflops, b200.fp8_tflops, 148)
    gb300, gb200 = find_gpu("GB300-NVL72"), find_gpu("GB200-NVL72")
    assert (gb300.bf16_tflops, gb300.fp8_tflops) == (gb200.bf16_tflops, gb200.fp8_tflops) == (2500, 5000)
    for field in ("gemm_fraction", "gemm_fp8_fraction", "nvlink_busbw_fraction", "host_cpu_slowdown"):
        mine, theirs = getattr(gb300.efficiency, field), getattr(gb200.efficiency, field)
        assert mine.value == theirs.value and "as GB200-NVL72" in mine.source, field
    # Blackwell Ultra's gain is memory (12-high HBM3e stacks), not dense BF16/FP8 throughput
    assert b300.memory_gb > 1.4 * b200.memory_gb and gb300.memory_gb > 1.4 * gb200.memory_gb


def test_fp8_fraction_only_where_fp8_exists():
    for gpu in list_gpus():
        assert (gpu.fp8_tflops is None) == (gpu.efficiency.gemm_fp8_fraction is None), gpu.name


@pytest.mark.parametrize("name, per_dir", [
    ("H100-SXM-80GB", 450), ("H200-SXM-141GB", 450), ("H20-96GB", 450), ("A100-SXM-80GB", 300),
    ("A100-SXM-40GB", 300), ("A800-SXM-80GB", 200), ("H800-SXM-80GB", 200),
    ("B200-SXM-180GB", 900), ("GB200-NVL72", 900), ("B300-SXM-288GB", 900), ("GB300-NVL72", 900),
    ("H100-PCIe-80GB", 300), ("L40S", 0), ("L4", 0),
])
def test_nvlink_is_per_direction(name, per_dir):
    assert find_gpu(name).nvlink_gbps_per_dir == per_dir


def test_scale_up_domains_and_node_sizes():
    for name in ("GB200-NVL72", "GB300-NVL72"):
        rack = find_gpu(name)
        assert (rack.nvlink_domain, rack.default_gpus_per_node) == (72, 4)
    assert find_gpu("H100-PCIe-80GB").nvlink_domain == 2
    for name in ("L40S", "L4"):
        assert find_gpu(name).nvlink_domain == 1
    for gpu in list_gpus():
        if not gpu.name.endswith("-NVL72"):
            assert gpu.default_gpus_per_node == 8, gpu.name


def test_pcie_generations():
    for name in ("A100-SXM-80GB", "A100-SXM-40GB", "L40S", "L4"):
        assert find_gpu(name).pcie_gbps_per_dir == 32
    for name in ("H100-SXM-80GB", "H200-SXM-141GB", "H20-96GB", "H800-SXM-80GB", "MI300X", "MI325X"):
        assert find_gpu(name).pcie_gbps_per_dir == 64


def test_throughput_is_dense_not_sparse():
    h100 = find_gpu("H100-SXM-80GB")
    assert (h100.bf16_tflops, h100.fp8_tflops) == (989.4, 1978.9)
    assert find_gpu("MI300X").bf16_tflops == 1307.4
    assert find_gpu("MI300X").fp8_tflops == 2614.9
    assert find_gpu("B200-SXM-180GB").bf16_tflops == 2250
    assert find_gpu("A100-SXM-80GB").fp8_tflops is None
    assert h100.peak_tflops("fp8") == 1978.9 and find_gpu("A100").peak_tflops("fp8") == 312


@pytest.mark.parametrize("alias, name", [
    ("H100", "H100-SXM-80GB"), ("h100", "H100-SXM-80GB"), ("h200", "H200-SXM-141GB"),
    ("B200", "B200-SXM-180GB"), ("a100", "A100-SXM-80GB"), ("H20", "H20-96GB"),
    ("a800", "A800-SXM-80GB"), ("H800", "H800-SXM-80GB"), ("gb200", "GB200-NVL72"),
    ("b300", "B300-SXM-288GB"), ("GB300", "GB300-NVL72"),
    ("  mi300x ", "MI300X"), ("h100-sxm-80gb", "H100-SXM-80GB"),
])
def test_aliases_are_case_insensitive(alias, name):
    assert find_gpu(alias).name == name


def test_network_aliases():
    assert find_network("ndr").name == "IB-NDR-400"
    assert find_network("roce").name == "RoCE-400"


def test_unknown_gpu_suggests_the_close_match():
    with pytest.raises(SpecError) as info:
        find_gpu("H100-SXM", field="rollout.gpu")
    message = str(info.value)
    assert info.value.field == "rollout.gpu"
    assert "did you mean" in message and "'H100-SXM-80GB'" in message
    assert "rlsolve gpus" in message


def test_unknown_network_suggests_the_close_match():
    with pytest.raises(SpecError) as info:
        find_network("IB-NDR")
    assert info.value.field == "cluster.network"
    assert "'IB-NDR-400'" in str(info.value) and "rlsolve gpus --networks" in str(info.value)


def test_inline_network_copies_ndr_efficiency():
    ndr = find_network("IB-NDR-400")
    net = inline_network(800)
    assert isinstance(net, Network)
    assert net.name == "custom-800G" and net.gbps_per_nic == 800 and net.gbytes_per_s == 100
    assert net.busbw_fraction.value == ndr.busbw_fraction.value
    assert net.latency_us == ndr.latency_us
    assert "IB-NDR-400" in net.source and "IB-NDR-400" in net.busbw_fraction.source
    assert inline_network(100, latency_us=12.5).latency_us == 12.5
    assert inline_network(12.5).name == "custom-12.5G"
    with pytest.raises(SpecError):
        inline_network(0)


def test_overlay_directory_replaces_and_adds_entries(tmp_path, monkeypatch):
    base = find_gpu("H100").model_dump()
    (tmp_path / "site.yaml").write_text(textwrap.dedent("""\
        networks:
          - name: IB-NDR-400
            aliases: [NDR]
            gbps_per_nic: 400
            latency_us: 2.0
            busbw_fraction: {value: 0.85, source: "site nccl-tests run"}
            source: "site fabric"
        """))
    cheap = dict(base, price_per_gpu_hour_usd=1.23, price_source="site contract", price_date="2026-05")
    new = dict(base, name="H100-Site", aliases=[])
    (tmp_path / "gpus.yml").write_text(yaml.safe_dump({"gpus": [cheap, new]}))
    monkeypatch.setenv("RLSOLVE_CATALOG_DIR", str(tmp_path))
    load_catalog.cache_clear()

    assert find_gpu("h100").price_per_gpu_hour_usd == 1.23  # replaced, aliases still work
    assert find_gpu("H100-Site").bf16_tflops == 989.4        # added
    assert len(list_gpus()) == len(GPU_NAMES) + 1
    assert find_network("NDR").busbw_fraction.value == 0.85
    assert inline_network(400).busbw_fraction.value == 0.85  # inline follows the overlay


def test_bad_overlay_is_a_spec_error(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text("gpus:\n  - name: X\n")
    monkeypatch.setenv("RLSOLVE_CATALOG_DIR", str(tmp_path))
    load_catalog.cache_clear()
    with pytest.raises(SpecError, match="bad.yaml"):
        load_catalog()

    monkeypatch.setenv("RLSOLVE_CATALOG_DIR", str(tmp_path / "missing"))
    load_catalog.cache_clear()
    with pytest.raises(SpecError, match="not a directory"):
        load_catalog()


def test_overlay_alias_clash_is_reported(tmp_path, monkeypatch):
    clash = dict(find_gpu("H200").model_dump(), name="H200-Other", aliases=["H100"])
    (tmp_path / "clash.yaml").write_text(yaml.safe_dump({"gpus": [clash]}))
    monkeypatch.setenv("RLSOLVE_CATALOG_DIR", str(tmp_path))
    load_catalog.cache_clear()
    with pytest.raises(SpecError, match="names both"):
        load_catalog()


def test_attention_kernel_rates_are_sourced_fractions_and_fa2_is_the_slower_on_hopper():
    """Every kernel rate is a sourced fraction of the peak; where a GPU lists both kernels (Hopper), FlashAttention-2
    (mma.sync) runs below Transformer Engine's cuDNN attention in both passes, and FA2's forward is the catalog's
    sm80_kernel_fraction's kernel (within the two sources' spread: Azure 0.331, FA3 paper 0.339)."""
    from rlsolve.hardware_db import list_gpus
    seen = 0
    for gpu in list_gpus():
        kernels = gpu.efficiency.attention_kernels
        for rate in kernels.values():
            for s in (rate.forward, rate.backward):
                assert 0 < s.value < 1 and len(s.source) > 20
        if {"flash_attn_2", "transformer_engine"} <= set(kernels):
            seen += 1
            fa2, te = kernels["flash_attn_2"], kernels["transformer_engine"]
            assert fa2.forward.value < te.forward.value and fa2.backward.value < te.backward.value
            if gpu.efficiency.sm80_kernel_fraction is not None:
                assert fa2.forward.value == pytest.approx(gpu.efficiency.sm80_kernel_fraction.value, abs=0.01)
    assert seen >= 4  # H100 SXM / PCIe, H800, H200


def test_sm_counts_are_sourced_and_agree_across_a_die():
    """Every recorded SM (NVIDIA) / CU (AMD) count is a positive integer with a quoted source; boards built
    on the same die with the same SMs enabled carry the same count (H100 SXM5, H800 SXM and H200 are 132-SM
    GH100 parts; a GB200 NVL72 GPU enables 152 of Blackwell's SMs where an HGX B200 enables 148), and a cut-down
    part has fewer (H100 PCIe 114, H20 78)."""
    counted = {g.name: g.sm_count for g in list_gpus() if g.sm_count is not None}
    for name, sm in counted.items():
        assert sm.value == int(sm.value) and sm.value > 0, name
        assert len(sm.source) > 40 and str(int(sm.value)) in sm.source, name
    sms = {name: int(sm.value) for name, sm in counted.items()}
    assert sms["H100-SXM-80GB"] == sms["H800-SXM-80GB"] == sms["H200-SXM-141GB"] == 132
    assert sms["H20-96GB"] < sms["H100-PCIe-80GB"] < sms["H100-SXM-80GB"]
    assert sms["GB200-NVL72"] > sms["B200-SXM-180GB"] == sms["B300-SXM-288GB"]
    assert sms["MI300X"] == sms["MI325X"] == 304
