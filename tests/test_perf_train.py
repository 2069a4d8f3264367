"""Training-side mechanisms of perf/train.py against hand-worked counts."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from rlsolve.cases import predict_train
from rlsolve.hardware_db import find_gpu, find_network
from rlsolve.models import find_model
from rlsolve.perf.hw import Device
from rlsolve.perf.train import (TrainLayout, first_stage_in_flight_share, first_stage_layers, stage_times,
                                train_memory, train_time)
from rlsolve.resolve import PoolHW


def gb200() -> Device:
    gpu = find_gpu("GB200-NVL72")
    return Device(PoolHW("main", gpu, 64, 4, find_network("IB-NDR-400"), 4, gpu.price_per_gpu_hour_usd), "fp8")


def test_first_stage_in_flight_share_counts_the_interleaved_warmup_by_chunk():
    # 1F1B (vp = 1): pp micro-batches in flight, all on the one chunk of slots - 1 layers
    assert first_stage_in_flight_share(TrainLayout(pp=8, vp=1), 12) == pytest.approx(11 / 12)
    # pp 16, vp 4, 2 slots per chunk: 15 * 2 + 3 * 16 + 1 = 79 chunk-micro-batches in flight, the
    # k-th on chunk (k // 16) % 4: 16 + 15 on chunk 0 (1 layer), 48 on the others (2 layers)
    assert first_stage_in_flight_share(TrainLayout(pp=16, vp=4), 2) == pytest.approx((31 * 1 + 48 * 2) / (79 * 2))


def test_the_embedding_and_loss_slots_take_a_layer_off_the_first_stage():
    """Llama 3.1 405B (126 layers) on pp 16 x vp 4 as Megatron-Bridge's recipe splits it: (126 + 2) /
    64 = 2 slots per chunk, so the first stage builds 7 layers beside the embedding, and holds less
    in flight than an even split of 8; the busiest stage for time is a middle one (8 layers, no
    output layer) against the even split's 8 layers plus the output layer."""
    arch, dev = find_model("llama-3.1-405b"), gb200()
    even = TrainLayout(tp=4, pp=16, dp=4, vp=4, micro_batch=1)
    split = TrainLayout(tp=4, pp=16, dp=4, vp=4, micro_batch=1, pipeline_split_embedding_loss=True)
    assert first_stage_layers(arch, split) == 7 and first_stage_layers(arch, even) is None
    m_even, m_split = (train_memory(arch, lay, 8192, fp8=True) for lay in (even, split))
    assert m_split.activations == pytest.approx(m_even.activations * 127 / 158, rel=0.02)
    assert m_split.weights < m_even.weights
    t_even, t_split = (stage_times(arch, dev, lay, 8192) for lay in (even, split))
    assert t_split["fwd_compute"] < t_even["fwd_compute"]
    # what it takes off is the output layer: its GEMM at the 16-bit rate
    head = Device(dev.pool, "bf16").gemm_time(2 * 8192 * arch.hidden * arch.vocab / 4)
    assert t_even["fwd_compute"] - t_split["fwd_compute"] == pytest.approx(head, rel=0.1)



def test_the_states_memo_tells_virtual_stages_apart_where_the_split_reads_them():
    """With the embedding and loss slots the first stage's layers depend on vp (60 layers over pp 4: 14 at vp 1,
    13 at vp 2), so a memo shared by both layouts gives each its own weights, as without a memo."""
    arch = find_model("deepseek-v2")
    one, two = (TrainLayout(tp=1, pp=4, dp=2, vp=vp, micro_batch=1, pipeline_split_embedding_loss=True)
                for vp in (1, 2))
    assert (first_stage_layers(arch, one), first_stage_layers(arch, two)) == (14, 13)
    memo: dict = {}
    for lay in (one, two):
        assert train_memory(arch, lay, 4096, memo=memo).weights == train_memory(arch, lay, 4096).weights

def test_a_split_that_megatron_would_reject_is_reported_with_the_field():
    row = {"id": "x", "kind": "train", "hardware": {"gpu": "H100-SXM-80GB", "gpus": 64, "gpus_per_node": 8},
           "model": {"name": "llama-3.1-70b"}, "precision": "bf16",
           "layout": {"tp": 4, "pp": 4, "vp": 5, "micro_batch": 1, "global_batch": 64, "seq_len": 4096,
                      "pipeline_split_embedding_loss": True},
           "measured": {"tokens_per_s_per_gpu": 1000}}
    with pytest.raises(ValueError, match="pipeline_split_embedding_loss"):
        predict_train(row)  # 80 + 2 layers do not split into 4 x 5 chunks
    ok = {**row, "layout": {**row["layout"], "pp": 2, "vp": 1}}  # 82 / 2 = 41 per stage
    assert predict_train(ok).error is not None


def test_the_moe_stack_raises_the_routed_blocks_host_efficiency_step_by_step():
    """The default stack (NCCL all-to-all, no graphs) runs the routed block host-bound at
    moe_block_host_efficiency; a flex dispatcher, its HybridEP backend and per-layer CUDA graphs each
    add their measured step; a full-iteration graph launches nothing from the host."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import moe_host_efficiency
    c = constants()
    base = c["moe_block_host_efficiency"]
    assert moe_host_efficiency(TrainLayout()) == base
    assert moe_host_efficiency(TrainLayout(cuda_graphs="partial")) == base  # measured only on top of flex
    deepep = TrainLayout(moe_dispatcher="deepep")
    assert moe_host_efficiency(deepep) == pytest.approx(base * c["moe_flex_dispatcher_gain"])
    hybrid = TrainLayout(moe_dispatcher="hybridep", cuda_graphs="partial")
    assert moe_host_efficiency(hybrid) == pytest.approx(base * c["moe_flex_dispatcher_gain"] * c["moe_hybridep_gain"]
                                                        * c["moe_partial_cuda_graph_gain"])
    assert moe_host_efficiency(TrainLayout(cuda_graphs="full_iteration")) == 1.0
    # the EP all-to-all overlap's extra host work lowers every host-launched stack by its measured step
    for lay in (TrainLayout(), deepep, hybrid):
        overlapped = replace(lay, ep=8, moe_a2a_overlap=True)
        assert moe_host_efficiency(overlapped) == pytest.approx(moe_host_efficiency(lay) * c["moe_a2a_overlap_host_gain"])
    assert moe_host_efficiency(TrainLayout(ep=8, cuda_graphs="full_iteration", moe_a2a_overlap=True)) == 1.0
    assert 0.0 < c["moe_a2a_overlap_host_gain"] < 1.0
    arch, dev = find_model("qwen3-30b-a3b"), gb200()
    times = [stage_times(arch, dev, TrainLayout(ep=8, dp=8, moe_dispatcher=d, cuda_graphs=g), 4096)["fwd"]
             for d, g in (("alltoall", "none"), ("hybridep", "partial"), ("hybridep", "full_iteration"))]
    assert times[0] > times[1] > times[2]
    dense = find_model("llama-3.1-8b")  # a dense model has no routed block to speed up
    graphed = TrainLayout(cuda_graphs="full_iteration")
    assert stage_times(dense, dev, TrainLayout(), 4096) == stage_times(dense, dev, graphed, 4096)


@pytest.mark.parametrize("dispatcher,graphs", [("alltoall", "none"), ("deepep", "none"), ("hybridep", "partial")])
@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])
def test_drop_and_pad_routing_saves_exactly_the_host_sync_of_each_moe_layer_pass(model, dispatcher, graphs):
    """Drop-and-pad routing (moe_token_drop) has static shapes: no dispatcher copies the token counts
    to the host, so each MoE layer's forward and backward lose one moe_host_sync_us each and nothing
    else changes; dense layers and a full-iteration graph (already sync-free) are untouched."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import _layer_fwd, expert_gemm_issue_time
    arch, dev = find_model(model), gb200()
    sync = constants()["moe_host_sync_us"] * 1e-6
    for mb in (1, 4):
        lay = TrainLayout(ep=8, dp=8, micro_batch=mb, moe_dispatcher=dispatcher, cuda_graphs=graphs)
        dropless, drop = (stage_times(arch, dev, replace(lay, moe_token_drop=d), 4096) for d in (False, True))
        moe_layers = math.ceil(arch.layers / lay.pp) * arch.moe_layers / arch.layers
        # and, after the sync, whatever the routed experts' GEMM issue outlasts their kernels
        # (expert_gemm_issue_time; twice in the backward's dgrad and wgrad)
        kernels = _layer_fwd(arch, dev, replace(lay, moe_token_drop=True), 4096.0 * mb, 4096.0, moe=True)[6]
        excess = max(0.0, expert_gemm_issue_time(dev, arch.experts / lay.ep) - kernels)
        assert dropless["fwd"] - drop["fwd"] == pytest.approx(moe_layers * (sync + excess))
        assert dropless["bwd"] - drop["bwd"] == pytest.approx(moe_layers * (sync + 2 * excess))
        assert {k: v for k, v in dropless.items() if k not in ("fwd", "bwd", "fwd_compute", "bwd_compute")} == \
            {k: v for k, v in drop.items() if k not in ("fwd", "bwd", "fwd_compute", "bwd_compute")}
    graphed = TrainLayout(ep=8, dp=8, cuda_graphs="full_iteration")
    assert stage_times(arch, dev, graphed, 4096) == stage_times(arch, dev, replace(graphed, moe_token_drop=True), 4096)
    dense = find_model("llama-3.1-8b")
    assert stage_times(dense, dev, TrainLayout(), 4096) == stage_times(dense, dev, TrainLayout(moe_token_drop=True), 4096)


def h100() -> Device:
    gpu = find_gpu("H100-SXM-80GB")
    return Device(PoolHW("main", gpu, 16, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd), "bf16")


@pytest.mark.parametrize("dev", [h100(), gb200()], ids=["x86", "grace"])
@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"])
def test_a_dropless_routed_block_takes_the_longer_of_its_kernels_and_its_expert_gemm_issue(model, dev):
    """After the dropless dispatcher's host sync the host issues one cuBLASLt call per local expert
    for fc1 and fc2 (Transformer Engine's grouped GEMM loop): the routed block is max(its kernels at
    the stack's host efficiency, that issue time). The issue time grows with the local experts
    (fewer EP ranks), with the host (Grace: host_cpu_slowdown), not with the tokens; so it binds for
    few tokens per expert and not for many, never where the shapes are static (drop-and-pad) or
    nothing is launched from the host (full-iteration graph)."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import _layer_fwd, expert_gemm_issue_time
    arch = find_model(model)
    t_call = constants()["expert_gemm_host_us"] * 1e-6
    bound = []
    for ep in (4, 8, 16, 32):
        local = arch.experts / ep
        issue = expert_gemm_issue_time(dev, local)
        assert issue == pytest.approx(2 * local * t_call * dev.host_slowdown)
        for mb in (1, 4, 64):
            lay = TrainLayout(ep=ep, dp=ep, micro_batch=mb)
            block = _layer_fwd(arch, dev, lay, 4096.0 * mb, 4096.0, moe=True)[6]
            kernels = _layer_fwd(arch, dev, replace(lay, moe_token_drop=True), 4096.0 * mb, 4096.0, moe=True)[6]
            assert block == pytest.approx(max(kernels, issue))
            bound.append(issue > kernels)
            graphed = replace(lay, cuda_graphs="full_iteration")
            g = _layer_fwd(arch, dev, graphed, 4096.0 * mb, 4096.0, moe=True)
            assert g[6] < block and g[6] == pytest.approx(
                _layer_fwd(arch, dev, replace(graphed, moe_token_drop=True), 4096.0 * mb, 4096.0, moe=True)[6])
    if model == "qwen3-30b-a3b" and dev.host_slowdown > 1.0:
        assert any(bound)  # 768-wide experts on Grace's host: issue-bound for few tokens
    assert not bound[-1]  # 64 sequences of 4k tokens over 4 local experts: the kernels outlast the issue
    if dev.host_slowdown == 1.0:
        grace = gb200()
        assert expert_gemm_issue_time(grace, 16) == pytest.approx(expert_gemm_issue_time(dev, 16) * grace.host_slowdown)


def test_bf16_adam_moments_take_8_optimizer_bytes_per_parameter():
    """Megatron-Core's precision-aware optimizer with bf16 exp_avg / exp_avg_sq (DeepSeek-V3's
    Megatron-Bridge recipe): fp32 master 4 + 2 + 2 bytes per parameter instead of 12, sharded alike."""
    arch = find_model("llama-3.1-8b")
    fp32, bf16 = TrainLayout(dp=8), TrainLayout(dp=8, adam_moment_bytes=2.0)
    assert fp32.optimizer_bytes == 12.0 and bf16.optimizer_bytes == 8.0
    m32, m16 = (train_memory(arch, lay, 4096) for lay in (fp32, bf16))
    assert m16.optimizer == pytest.approx(m32.optimizer * 8 / 12)
    assert m16.weights == m32.weights and m16.grads == m32.grads


@pytest.mark.parametrize("moments", [4.0, 2.0])
@pytest.mark.parametrize("dp", [1, 2, 8, 64])
def test_master_weights_take_their_stored_bytes_and_only_the_optimizer_changes(moments, dp):
    """The optimizer's master weights (TrainLayout.master_param_bytes): an fp32 copy 4 bytes a parameter, its
    low 16 bits beside the bf16 parameter 2 (Transformer Engine FusedAdam / Apex DistributedFusedAdam
    store_param_remainders), none 0 (the optimizer steps the 16-bit parameters in place). The optimizer state
    is master + 2 moments, sharded over the distributed optimizer's ranks like the rest; weights, gradients and
    activations do not move, and the fused step moves fewer bytes the smaller the master."""
    arch = find_model("llama-3.1-8b")
    gpu = find_gpu("H100-SXM-80GB")
    dev = Device(PoolHW("main", gpu, 64, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd), "bf16")
    mems, steps = [], []
    for master in (4.0, 2.0, 0.0):
        lay = TrainLayout(dp=dp, adam_moment_bytes=moments, master_param_bytes=master)
        assert lay.optimizer_bytes == master + 2 * moments
        mems.append(train_memory(arch, lay, 4096))
        steps.append(train_time(arch, dev, lay, 8 * dp, 4096).optimizer)
    full = mems[0]
    for master, m in zip((4.0, 2.0, 0.0), mems):
        assert m.optimizer == pytest.approx(full.optimizer * (master + 2 * moments) / (4.0 + 2 * moments))
        assert (m.weights, m.grads, m.activations) == (full.weights, full.grads, full.activations)
    assert mems[0].total > mems[1].total > mems[2].total
    assert steps[0] > steps[1] > steps[2] > 0


def test_mlp_and_shared_experts_checkpoints_free_their_internals_and_rerun_their_gemms():
    """Megatron-Core's "mlp" / "shared_experts" selective recompute (normal checkpoints,
    transformer_config.py 60e039626 lines 573-574): the MLP keeps only its input, so its first
    GEMM's output (gate+up, 16-bit) and activation output (16-bit, FP8 under FP8) are freed,
    and the backward re-runs both GEMMs. "mlp" covers dense layers only
    (transformer_layer.py lines 537-539: not for a MoELayer): on DeepSeek-V3 the 3 dense layers
    of 61; "shared_experts" the shared experts of the MoE layers."""
    from rlsolve.perf.train import recompute_module_bytes_saved, train_memory
    dense, v3 = find_model("llama-3.1-8b"), find_model("deepseek-v3")
    f = dense.d_ffn  # SwiGLU
    assert recompute_module_bytes_saved(dense, ("mlp",), False) == (pytest.approx(2.0 * 3 * f), 0.0)
    assert recompute_module_bytes_saved(dense, ("mlp",), True)[0] == pytest.approx(2.0 * 2 * f + f)
    share = (v3.layers - v3.moe_layers) / v3.layers
    assert v3.layers - v3.moe_layers == 3
    assert recompute_module_bytes_saved(v3, ("mlp",), False)[0] == pytest.approx(2.0 * 3 * v3.d_ffn * share)
    sw = v3.shared_experts * v3.d_moe_ffn * v3.moe_layers / v3.layers
    assert recompute_module_bytes_saved(v3, ("shared_experts",), False)[0] == pytest.approx(2.0 * 3 * sw)
    lay = TrainLayout(tp=1, pp=1, dp=8, recompute="selective", micro_batch=1)
    with_mlp = TrainLayout(**{**lay.__dict__, "recompute_modules": ("mlp",)})
    assert train_memory(dense, lay, 4096).activations - train_memory(dense, with_mlp, 4096).activations == \
        pytest.approx(4096 * dense.layers * 2.0 * 3 * f)
    dev = gb200()
    st0, st1 = stage_times(dense, dev, lay, 4096), stage_times(dense, dev, with_mlp, 4096)
    assert st1["fwd"] == pytest.approx(st0["fwd"])
    # the re-run: both GEMMs (3 f x h multiply-adds per token) and the activation, on every layer
    rerun = dev.gemm_time(2 * 4096 * dense.hidden * 3 * f) + dev.stream_time(4096 * 6.0 * f)
    assert st1["bwd_compute"] - st0["bwd_compute"] == pytest.approx(dense.layers * rerun)


def test_selective_recompute_reruns_the_core_attention_only_when_core_attn_is_listed():
    """Megatron-Core checkpoints the core attention only with "core_attn" in recompute_modules
    (attention.py, commit 2edffadb, lines 328-331); its default list is ["core_attn"]
    (transformer_config.py lines 1373-1374). A recipe's list without it (e.g. layernorm, moe_act)
    re-runs no attention forward in the backward, and with unfused attention keeps the scores."""
    from rlsolve.perf.train import UNFUSED_SCORE_BYTES_STORED, _layer_fwd, train_memory
    dense, dev, seq = find_model("llama-3.1-8b"), gb200(), 4096
    none = TrainLayout(tp=1, pp=1, dp=8, recompute="none", micro_batch=1)
    default = TrainLayout(**{**none.__dict__, "recompute": "selective"})
    no_attn = TrainLayout(**{**default.__dict__, "recompute_core_attn": False})
    st_none, st_def, st_no = (stage_times(dense, dev, x, seq) for x in (none, default, no_attn))
    attn_fwd = dense.layers * _layer_fwd(dense, dev, none, seq, seq, moe=False)[1]
    assert attn_fwd > 0
    assert st_def["bwd_compute"] - st_none["bwd_compute"] == pytest.approx(attn_fwd)
    assert st_no["bwd_compute"] == pytest.approx(st_none["bwd_compute"])
    assert st_no["fwd"] == pytest.approx(st_def["fwd"])
    # flash attention: the same tensors stored either way (q, k, v and the output are kept)
    assert train_memory(dense, no_attn, seq).activations == pytest.approx(train_memory(dense, default, seq).activations)
    # unfused: the score matrix, softmax output and dropout mask stay without the core_attn checkpoint
    unf = {x: TrainLayout(**{**x.__dict__, "attention": "unfused"}) for x in (none, default, no_attn)}
    scores = seq * dense.layers * UNFUSED_SCORE_BYTES_STORED * dense.heads * seq
    assert train_memory(dense, unf[no_attn], seq).activations - train_memory(dense, unf[default], seq).activations \
        == pytest.approx(scores)
    assert train_memory(dense, unf[no_attn], seq).activations == pytest.approx(
        train_memory(dense, unf[none], seq).activations)


@pytest.mark.parametrize("name", ["B200-SXM-180GB", "H100-SXM-80GB", "GB200-NVL72"])
def test_an_fp8_gemm_keeps_the_bf16_gemms_fixed_time(name):
    """The size curve f / (R (f + f_half)) is f / R plus a fixed t0 = f_half / R per GEMM. FP8 runs
    the large GEMM at its own R but keeps BF16's t0 (OpenXLA sm_100: FP8 2048x2048x256 at 294 TFLOPS
    against BF16's 276, while 4096^3 runs at 2765 against 1417), so a small FP8 GEMM gains far
    less than the rate ratio and a large one gains nearly all of it."""
    gpu = find_gpu(name)
    pool = PoolHW("main", gpu, 8, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd)
    bf16, fp8 = Device(pool, "bf16"), Device(pool, "fp8")
    r_bf16, r_fp8 = bf16.peak_flops * bf16.gemm_fraction, fp8.peak_flops * fp8.gemm_fraction
    t0 = gpu.efficiency.gemm_half_size_flops.value / r_bf16
    for f in (1e9, 1e10, 1e12):
        assert bf16.gemm_time(f) == pytest.approx(f / r_bf16 + t0)
        assert fp8.gemm_time(f) == pytest.approx(f / r_fp8 + t0)
    assert bf16.gemm_time(1e9) / fp8.gemm_time(1e9) < 1.15 < r_fp8 / r_bf16
    assert bf16.gemm_time(1e13) / fp8.gemm_time(1e13) == pytest.approx(r_fp8 / r_bf16, rel=0.01)


def _pool(name: str, precision: str = "bf16") -> Device:
    gpu = find_gpu(name)
    return Device(PoolHW("main", gpu, 1, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd), precision)


def _attention_s(dev: Device, lay: TrainLayout) -> tuple[float, float]:
    """(forward, backward) attention seconds of one layer (train._layer_fwd's attention terms)."""
    from rlsolve.perf.train import _layer_fwd
    t = _layer_fwd(find_model("llama-3.1-8b"), dev, lay, 8192.0, 8192.0, moe=False)
    return t[1], t[2]


@pytest.mark.parametrize("gpu", ["H100-SXM-80GB", "H200-SXM-141GB", "GB200-NVL72", "A100-SXM-80GB", "H20-96GB"])
def test_each_backend_runs_its_attention_kernel_at_the_catalogs_rates(gpu):
    """The Hugging Face trainers (FSDP, FSDP2, DeepSpeed) run FlashAttention-2, Megatron-Core Transformer Engine's
    attention (frameworks/runtime.yaml train_attention_kernel); each at the catalog's forward and backward rates of
    that kernel on the GPU (hardware_db attention_kernels), a kernel the catalog gives no figure for at the GPU's
    attention_fraction. Megatron-FSDP (ZeRO-3 under Megatron-Core) is Transformer Engine's."""
    from rlsolve.perf.train import FA_BWD_OVER_FWD
    dev = _pool(gpu)
    eff = dev.pool.gpu.efficiency
    peak = dev.pool.gpu.bf16_tflops * 1e12
    base = _attention_s(dev, TrainLayout(strategy="megatron"))
    for strategy, kernel in (("fsdp", "flash_attn_2"), ("fsdp2", "flash_attn_2"), ("deepspeed", "flash_attn_2"),
                             ("megatron", "transformer_engine")):
        for zero in (1, 3):
            fwd, bwd = _attention_s(dev, TrainLayout(strategy=strategy, zero_stage=zero))
            rate = eff.attention_kernels.get(kernel)
            f_frac, b_frac = ((rate.forward.value, rate.backward.value) if rate is not None
                              else (eff.attention_fraction.value,) * 2)
            # the same FLOPs at the kernel's rates: the time ratio to the Megatron run is the rates' inverse ratio
            assert fwd * f_frac * peak == pytest.approx(base[0] * dev.attention_rates("transformer_engine")[0])
            assert bwd / fwd == pytest.approx(FA_BWD_OVER_FWD * f_frac / b_frac)
    if not eff.attention_kernels:  # no kernel figure: every backend at attention_fraction, as before
        assert _attention_s(dev, TrainLayout(strategy="fsdp")) == pytest.approx(base)


def test_hopper_flash_attention_2_runs_below_transformer_engines_cudnn_attention():
    """On H100 the FA3 paper's figures put FlashAttention-2 at 0.34 / 0.33 of the peak (forward / backward) and
    cuDNN's fused attention, which Transformer Engine picks on sm90+, at 0.55 / 0.52: an FSDP trainer's attention
    takes 1.6x a Megatron trainer's; a profile's measured attention_fraction sets both kernels alike."""
    dev = _pool("H100-SXM-80GB")
    fa2, te = (sum(_attention_s(dev, TrainLayout(strategy=s))) for s in ("fsdp", "megatron"))
    assert 1.5 < fa2 / te < 1.7
    prof = replace(dev, overrides=(("attention_fraction", 0.42),))
    assert _attention_s(prof, TrainLayout(strategy="fsdp")) == pytest.approx(
        _attention_s(prof, TrainLayout(strategy="megatron")))
    assert prof.attention_rates("flash_attn_2") == (prof.attention_flops,) * 2


def test_a_layout_without_a_strategy_runs_the_backend_the_plan_exports():
    """The solver's layouts name no strategy: FSDP for ZeRO-3 without model parallelism, Megatron-Core otherwise
    (frameworks.runtime.layout_strategy, which solver/api.py framework_for prefers too); the forward-only models
    beside the trainer (zero_stage 0) run their trainer's backend."""
    from rlsolve.perf.step import _aux_layout
    assert TrainLayout(zero_stage=3).backend == "fsdp"
    assert TrainLayout(zero_stage=3).attention_kernel == "flash_attn_2"
    for lay in (TrainLayout(zero_stage=3, cp=2), TrainLayout(zero_stage=3, tp=2), TrainLayout(zero_stage=2),
                TrainLayout(zero_stage=1)):
        assert lay.backend == "megatron" and lay.attention_kernel == "transformer_engine"
    arch = find_model("llama-3.1-8b")
    for lay in (TrainLayout(zero_stage=3), TrainLayout(zero_stage=1, tp=2), TrainLayout(strategy="fsdp2", tp=2)):
        assert _aux_layout(arch, lay).attention_kernel == lay.attention_kernel


def test_every_strategy_names_a_kernel_with_a_source():
    from typing import get_args
    from rlsolve.frameworks.runtime import Strategy, runtime
    entry = runtime().train_attention_kernel
    assert set(entry.value) == set(get_args(Strategy))
    assert "fsdp_workers.py" in entry.source and "FusedAttention" in entry.source


def test_the_model_times_a_plans_trainer_with_the_kernel_of_the_framework_it_exports_to():
    """A ZeRO-2 layout without model parallelism is Megatron-Core's for a plan with no target but verl runs it on its
    FSDP workers (frameworks.rules.plan_strategy, which solver/api.py framework_for names in the plan too): the
    update of the same layout takes longer for the verl target on H100, at FlashAttention-2's rates."""
    import yaml
    from pathlib import Path
    from rlsolve.frameworks.rules import plan_strategy
    from rlsolve.perf.step import train_core, trainer_layout
    from rlsolve.resolve import resolve
    from rlsolve.spec import load_spec
    assert plan_strategy("any", None, 1, 1, 2, 1, 1, 2, "none") == "megatron"
    assert plan_strategy("verl", None, 1, 1, 2, 1, 1, 2, "none") == "fsdp"
    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples/ppo-7b-8xh100.yaml").read_text())
    times = {}
    for target in ("any", "verl"):
        problem = resolve(load_spec({**raw, "target": {"framework": target}}))
        lay = TrainLayout(cp=2, dp=4, zero_stage=2, micro_batch=1)
        assert trainer_layout(problem, lay).attention_kernel == ("flash_attn_2" if target == "verl" else
                                                                 "transformer_engine")
        times[target] = train_core(problem, problem.pools[0], lay)[0].total
    assert times["verl"] > times["any"]


def test_fsdp_trainer_bytes_per_framework_by_hand():
    """Qwen2.5-7B (28 layers, hidden 3584, vocab 152064, untied: 7,615,612,928 parameters without the final
    norm, 1,089,994,752 in the embedding and output layer) on 8 GPUs, ZeRO-3. NeMo-RL's DTensor worker and
    verl's FSDP worker (runtime.yaml fsdp_trainer_bytes_per_param): fp32 weights 4, fp32 gradients 4, Adam
    moments 8 per parameter, over 8; in flight 10 x one layer's 233,057,792 parameters + 2 x the root's
    (1,089,994,752 + the final norm's 3,584) + 2 x the output layer's 544,997,376. OpenRLHF (DeepSpeed
    ZeRO-3, bf16: no entry) keeps the model's count: 2 + 2 + 12 per parameter over 8, nothing in flight."""
    from rlsolve.frameworks.runtime import framework_costs
    arch, lay, n = find_model("qwen2.5-7b"), TrainLayout(dp=8, zero_stage=3), 7_615_612_928
    for fw in ("nemo-rl", "verl"):
        m = train_memory(arch, lay, 4096, fsdp=framework_costs(fw).fsdp_trainer_bytes)
        assert (m.weights, m.grads, m.optimizer) == pytest.approx((4 * n / 8, 4 * n / 8, 8 * n / 8))
        assert m.gathered == pytest.approx(10 * 233_057_792 + 2 * (1_089_994_752 + 3584) + 2 * 544_997_376)
        assert m.states == pytest.approx(16 * n / 8)  # the same sharded total as the model's own count
    assert framework_costs("openrlhf").fsdp_trainer_bytes is None
    m = train_memory(arch, lay, 4096, fsdp=framework_costs("openrlhf").fsdp_trainer_bytes)
    assert (m.weights, m.grads, m.optimizer, m.gathered) == pytest.approx((2 * n / 8, 2 * n / 8, 12 * n / 8, 0.0))
    # a Megatron layout (ZeRO-1) of the same framework keeps the model's count
    m = train_memory(arch, TrainLayout(dp=8, zero_stage=1), 4096, fsdp=framework_costs("nemo-rl").fsdp_trainer_bytes)
    assert (m.weights, m.gathered) == pytest.approx((2 * n, 0.0))


@pytest.mark.parametrize("model", ["qwen2.5-7b", "qwen3-30b-a3b", "llama-3.1-8b"])
def test_fsdp_sharded_states_fall_as_one_over_dp_and_the_in_flight_part_does_not(model):
    from rlsolve.frameworks.runtime import framework_costs
    arch, fsdp = find_model(model), framework_costs("nemo-rl").fsdp_trainer_bytes
    ep = 8 if arch.is_moe else 1
    base = train_memory(arch, TrainLayout(dp=8, ep=ep, zero_stage=3), 4096, fsdp=fsdp)
    for dp in (16, 32, 64):
        m = train_memory(arch, TrainLayout(dp=dp, ep=ep, zero_stage=3), 4096, fsdp=fsdp)
        assert m.states == pytest.approx(base.states * 8 / dp)
        assert m.gathered == pytest.approx(base.gathered) and m.gathered > 0
        assert m.total == pytest.approx(m.states + m.gathered + m.activations + m.other)


def test_the_triton_flash_attention_runs_at_its_published_share_of_flash_attention_2():
    """The Triton FlashAttention (MosaicML llm-foundry's attn_impl triton) has no published H100 figure; the
    FlashAttention-2 paper measures it beside FA2 on A100 (Figure 4(d), causal, head dim 128, 16k: 80 against 189
    TFLOPs/s), both on the sm80 mma.sync path, so where the catalog lists it its rates are FA2's times 80/189 in
    both passes. A layout that names it runs it whatever its backend; one that names none runs its backend's."""
    from rlsolve.hardware_db import list_gpus
    seen = 0
    for gpu in list_gpus():
        kernels = gpu.efficiency.attention_kernels
        if "flash_attn_triton" in kernels:
            seen += 1
            tri, fa2 = kernels["flash_attn_triton"], kernels["flash_attn_2"]
            assert tri.forward.value == pytest.approx(fa2.forward.value * 80 / 189, abs=5e-4)
            assert tri.backward.value == pytest.approx(fa2.backward.value * 80 / 189, abs=5e-4)
    assert seen >= 1
    dev = _pool("H100-SXM-80GB")
    for strategy in ("fsdp", "megatron"):
        lay = TrainLayout(strategy=strategy, attn_kernel="flash_attn_triton")
        assert lay.attention_kernel == "flash_attn_triton"
        fwd, bwd = _attention_s(dev, lay)
        fa2_fwd, fa2_bwd = _attention_s(dev, TrainLayout(strategy="fsdp"))
        assert fwd / fa2_fwd == pytest.approx(189 / 80, rel=2e-3) and bwd / fa2_bwd == pytest.approx(189 / 80, rel=2e-3)
    assert TrainLayout(strategy="fsdp").attention_kernel == "flash_attn_2"
