"""The model's formulas against hand-worked numbers."""
from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import rlsolve
from rlsolve.hardware_db import find_gpu, find_network
from rlsolve.models import find_model, resolve_model
from rlsolve.perf.generate import GenLayout, StepModel, length_quantiles, simulate_decode, _decode_all_admitted
from rlsolve.perf.hw import Device
from rlsolve.perf.nccl import affine_lower_bound, collective_time
from rlsolve.perf.train import FP32_MAIN_GRAD_BYTES, TrainLayout, params_per_gpu, stage_times, train_memory, train_time
from rlsolve.resolve import PoolHW


def h100_pool(nodes: int = 1) -> PoolHW:
    gpu = find_gpu("H100-SXM-80GB")
    return PoolHW("main", gpu, nodes, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd)


def test_bf16_params_with_fp32_main_grads_take_18_bytes_per_param():
    # Megatron-Core's distributed-optimizer guide: bf16 parameters with fp32 gradients take 18
    # bytes per parameter without the distributed optimizer (2 + 4 + 12), 6 + 12/d with it
    a = find_model("llama-3.1-70b")
    fp32 = FP32_MAIN_GRAD_BYTES
    mem = train_memory(a, TrainLayout(zero_stage=0, main_grad_bytes=fp32), seq_len=1)
    assert (mem.weights + mem.grads + mem.optimizer) / 1e9 == pytest.approx(a.total_params * 18 / 1e9, rel=1e-6)
    d = 8
    dist = train_memory(a, TrainLayout(dp=d, zero_stage=1, main_grad_bytes=fp32), seq_len=1)
    assert (dist.weights + dist.grads + dist.optimizer) == pytest.approx(a.total_params * (6 + 12 / d), rel=1e-6)
    # gradients kept in bf16 (Megatron-Core grad_reduce_in_fp32 off, NeMo-RL's recipes): the seed's 16
    bf16 = train_memory(a, TrainLayout(zero_stage=0), seq_len=1)
    assert (bf16.weights + bf16.grads + bf16.optimizer) == pytest.approx(a.total_params * 16, rel=1e-6)


def test_zero_sharding_divides_state():
    a = find_model("llama-3.1-8b")
    z0 = train_memory(a, TrainLayout(dp=8, zero_stage=0), 1024)
    z1 = train_memory(a, TrainLayout(dp=8, zero_stage=1), 1024)
    z3 = train_memory(a, TrainLayout(dp=8, zero_stage=3), 1024)
    assert z1.optimizer == pytest.approx(z0.optimizer / 8)
    assert z1.grads == pytest.approx(z0.grads)
    assert z3.weights == pytest.approx(z0.weights / 8)


def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1():
    # PP=4 with 16 micro-batches: bubble fraction 3/19 of the pipeline time
    dev = Device(h100_pool())
    a = find_model("llama-3.1-8b")
    lay = TrainLayout(pp=4, dp=1, micro_batch=1, zero_stage=0)
    t = train_time(a, dev, lay, global_batch=16, seq_len=2048, overlap_grad_reduce=False)
    pipeline = t.compute + t.tp_comm + t.cp_comm + t.ep_comm + t.bubble
    assert t.bubble / pipeline == pytest.approx(3 / 19, rel=1e-6)


def test_interleaving_divides_bubble():
    dev = Device(h100_pool())
    a = find_model("llama-3.1-8b")
    t1 = train_time(a, dev, TrainLayout(pp=4, vp=1), 16, 2048)
    t2 = train_time(a, dev, TrainLayout(pp=4, vp=2), 16, 2048)
    assert t2.bubble == pytest.approx(t1.bubble / 2)


def test_ring_all_reduce_volume():
    dev = Device(h100_pool())
    bw, lat = dev.link(8)
    n, nbytes = 8, 1e9
    assert dev.all_reduce(nbytes, n, n) == pytest.approx(2 * (n - 1) / n * nbytes / bw + 3 * lat)  # log2(8) steps
    assert dev.all_reduce(nbytes, 1, 1) == 0.0


def test_tiers_nvlink_inside_node_network_across():
    pool = h100_pool(nodes=2)
    dev = Device(pool)
    nv, _ = dev.link(8)
    net, _ = dev.link(16)
    assert nv == pytest.approx(450e9 * pool.gpu.efficiency.nvlink_busbw_fraction.value)
    assert net == pytest.approx(50e9 * pool.network.busbw_fraction.value)
    assert nv > 5 * net


def test_rings_across_nodes_aggregate_the_nics_all_to_all_does_not():
    """NCCL runs a ring channel per NIC: a group with 8 ranks in each of 2 nodes crosses the
    node boundary through 8 NICs at once (bus bandwidth capped by NVLink), one with a rank
    per node through one NIC; an all-to-all gets one NIC whatever the group."""
    dev = Device(h100_pool(nodes=2))
    nv, _ = dev.link(8)
    net, lat = dev.link(16)
    assert dev.ring_link(16, 16) == (pytest.approx(min(nv, 8 * net)), lat)   # TP 1: 8 ranks per node
    assert dev.ring_link(4, 16) == (pytest.approx(2 * net), lat)             # TP 4: 2 ranks per node
    assert dev.ring_link(2, 16) == (pytest.approx(net), lat)                 # TP 8: 1 rank per node
    n, nbytes = 16, 1e9
    # across nodes NCCL prices it (perf/nccl.py): a 1 GB buffer is bandwidth-bound on the ring
    ring = 2 * (n - 1) / n * nbytes / min(nv, 8 * net)
    assert ring < dev.all_reduce(nbytes, n, 16) < ring * 1.03  # + the ring's Simple latency, 0.13 ms
    assert dev.all_to_all(nbytes, n, 16) == pytest.approx((n - 1) / n * nbytes / net + 4 * lat)


def test_kv_bytes_gqa_and_mla():
    assert find_model("llama-3.1-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2  # 320 KiB
    ds = find_model("deepseek-v3")
    assert ds.kv_bytes_per_token(2) == 61 * (512 + 64) * 2


def test_vllm_replicates_kv_heads_beyond_tp():
    from rlsolve.perf.generate import kv_bytes_per_token_per_gpu
    a = find_model("llama-3.1-8b")  # 8 KV heads
    full = a.kv_bytes_per_token(2)
    assert kv_bytes_per_token_per_gpu(a, GenLayout(tp=8), 2) == pytest.approx(full / 8)
    # 16 ranks hold 8 heads: each rank still stores one head -> 1/8 of the cache, not 1/16
    assert kv_bytes_per_token_per_gpu(a, GenLayout(tp=16), 2) == pytest.approx(full / 8)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4, 8, 29]), st.sampled_from([64, 128, 256]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1.0, 16.0, 1024.0]),
       st.sampled_from(["0.5.0", "0.6.1", "0.7.1", "0.8.0", "0.9.0"]), st.sampled_from([None, 132.0]))
def test_trtllm_masked_mha_reads_each_kv_head_once_per_query_head(kv, group, d, tp, batch, version, sms):
    """TensorRT-LLM's masked MHA kernel runs a block per query head, each reading its KV head's cache
    (runtime.yaml trtllm_decode_attention): heads / max(kv_heads, tp) reads a step, unless XQA runs
    (from 0.8.0, 8 query heads per KV head, head 128 or 256, kv heads per GPU x batch x 4 >= SMs).
    Other engines, and a row that names no release, read the cache once."""
    from rlsolve.models import Architecture
    from rlsolve.perf.generate import decode_kv_reads
    heads = kv * group
    a = Architecture(layers=2, hidden=heads * d, heads=heads, kv_heads=kv, head_dim=d)
    lay = GenLayout(tp=tp)
    ratio = heads / max(kv, tp)
    xqa = (version >= "0.8.0" and ratio == 8 and d in (128, 256)
           and (sms is None or max(kv / tp, 1) * batch * 4 >= sms))
    assert decode_kv_reads(a, lay, batch, sms, "tensorrt-llm", version) == (1.0 if xqa or ratio <= 1 else ratio)
    assert decode_kv_reads(a, lay, batch, sms, "vllm", version) == 1.0
    assert decode_kv_reads(a, lay, batch, sms, "tensorrt-llm", None) == 1.0


def test_kv_reads_scale_the_attention_time_only():
    """StepModel(kv_reads=g) reads the KV cache g times: the memory-bound attention term grows g-fold,
    the weight GEMMs and fixed costs do not."""
    dev = Device(h100_pool())
    a = find_model("llama-3.1-70b")
    once = StepModel(a, dev, GenLayout(tp=4), 2.0, 2.0)
    eight = StepModel(a, dev, GenLayout(tp=4), 2.0, 2.0, kv_reads=8.0)
    b, ctx = 64.0, 2048.0
    grow = eight.scalar_step_time(b, ctx) - once.scalar_step_time(b, ctx)
    assert grow == pytest.approx(7 * b * ctx * once.kv_tok / once.hbm, rel=1e-9)
    assert eight.scalar_step_time(b, 0.0) == pytest.approx(once.scalar_step_time(b, 0.0), rel=1e-12)


def test_truncated_exponential_has_the_requested_mean():
    u = (np.arange(20000) + 0.5) / 20000
    for mean, mx in ((1024, 4096), (3000, 4096), (2048, 4096), (9000, 32768)):
        assert length_quantiles(mean, mx, u).mean() == pytest.approx(mean, rel=0.01)
    assert length_quantiles(4096, 4096, u).min() == 4096


def test_decode_fast_path_matches_event_simulation():
    dev = Device(h100_pool())
    a = find_model("llama-3.1-8b")
    step = StepModel(a, dev, GenLayout(tp=1), 2.0, 2.0)
    args = (step, 256.0, 512.0, 1024.0, 4096.0, 5e6, 1e9, 2048.0, 32)
    fast = _decode_all_admitted(*args)
    assert fast is not None
    # force the event loop by calling it with the fast path unavailable: same numbers
    from rlsolve.perf import generate
    orig = generate._decode_all_admitted
    generate._decode_all_admitted = lambda *a, **k: None
    try:
        slow = simulate_decode(*args)
    finally:
        generate._decode_all_admitted = orig
    assert slow.time == pytest.approx(fast.time, rel=0.02)
    assert slow.steps == pytest.approx(fast.steps, rel=1e-6)


def test_decode_slower_when_kv_limited():
    dev = Device(h100_pool())
    a = find_model("llama-3.1-8b")
    step = StepModel(a, dev, GenLayout(tp=1), 2.0, 2.0)
    roomy = simulate_decode(step, 512, 512, 1024, 4096, 1e7, float("inf"), 4096)
    tight = simulate_decode(step, 512, 512, 1024, 4096, 1.5e5, float("inf"), 4096)
    assert tight.kv_limited and not roomy.kv_limited
    assert tight.time > roomy.time
    assert tight.peak_batch < roomy.peak_batch


def test_decode_is_memory_bound_at_small_batch():
    # one sequence: the step reads every weight once -> bytes / achievable HBM bandwidth
    dev = Device(h100_pool())
    a = find_model("llama-3.1-70b")
    step = StepModel(a, dev, GenLayout(tp=8), 2.0, 2.0)
    t = float(step.step_time(np.array([1.0]), np.array([1.0]))[0])
    weights_only = a.total_params * 2 / 8 / dev.hbm_bytes_per_s
    assert t > weights_only
    assert t < weights_only + 0.01  # plus all-reduce latency and the engine's per-step overhead


def test_params_per_gpu_expert_parallel():
    a = find_model("qwen3-30b-a3b")
    dense1, exp1 = params_per_gpu(a, 1, 1, 1)
    dense8, exp8 = params_per_gpu(a, 1, 1, 8)
    assert dense1 == dense8
    assert exp8 == pytest.approx(exp1 / 8)
    assert dense1 + exp1 == pytest.approx(a.total_params - a.hidden, rel=1e-6)


def test_unfused_attention_moves_the_score_matrix_and_stores_it():
    """Pre-FlashAttention kernels write the s x s scores to HBM: slower, and (without
    selective recompute) Korthikanti et al.'s 5as^2b bytes per layer are stored."""
    arch = resolve_model({"layers": 24, "hidden": 2304, "heads": 24, "ffn": 9216, "vocab": 51200,
                          "activation": "gelu"})
    gpu = find_gpu("A100-SXM-80GB")
    dev = Device(PoolHW("main", gpu, 1, 8, find_network("IB-HDR-200"), 8, gpu.price_per_gpu_hour_usd))
    flash = TrainLayout(micro_batch=1)
    unfused = TrainLayout(micro_batch=1, attention="unfused")
    t_flash = stage_times(arch, dev, flash, 2048.0)
    t_unfused = stage_times(arch, dev, unfused, 2048.0)
    assert t_unfused["fwd_compute"] > 1.2 * t_flash["fwd_compute"]
    extra = train_memory(arch, unfused, 2048.0).activations - train_memory(arch, flash, 2048.0).activations
    assert extra == pytest.approx(5.0 * arch.heads * 2048 * 2048 * arch.layers, rel=1e-9)
    sel = TrainLayout(micro_batch=1, attention="unfused", recompute="selective")
    assert train_memory(arch, sel, 2048.0).activations == train_memory(arch, flash, 2048.0).activations


def test_moe_routed_block_runs_at_the_host_bound_efficiency():
    """The routed block (expert GEMMs, router, permutes, an all-to-all inside the NVLink domain)
    takes 1/eff of its kernel time in Megatron-Core's default stack; attention does not."""
    from rlsolve.perf import train as T
    from rlsolve.perf.hw import constants
    arch = find_model("qwen3-30b-a3b")
    dev = Device(h100_pool(2))
    lay = TrainLayout(ep=8, dp=8, micro_batch=1)
    with_host = T._layer_fwd(arch, dev, lay, 4096.0, 4096.0, moe=True)
    eff = constants()["moe_block_host_efficiency"]
    assert 0 < eff < 1
    constants()["moe_block_host_efficiency"] = 1.0
    try:
        kernels_only = T._layer_fwd(arch, dev, lay, 4096.0, 4096.0, moe=True)
    finally:
        constants()["moe_block_host_efficiency"] = eff
    gemm, attn, ep = with_host[0], with_host[1], with_host[5]
    assert attn == kernels_only[1]
    assert ep == pytest.approx(kernels_only[5] / eff)  # inside the NVLink domain: host-bound too
    wide = TrainLayout(ep=16, dp=16, micro_batch=1)  # the all-to-all crosses nodes: bandwidth-bound
    constants()["moe_block_host_efficiency"] = 1.0
    try:
        wide_kernels = T._layer_fwd(arch, dev, wide, 4096.0, 4096.0, moe=True)
    finally:
        constants()["moe_block_host_efficiency"] = eff
    assert T._layer_fwd(arch, dev, wide, 4096.0, 4096.0, moe=True)[5] == wide_kernels[5]
    assert gemm > kernels_only[0] * 1.3


def test_moe_decode_reads_every_touched_expert_once():
    """At a batch that touches every expert the step streams all the weights (one GPU, no
    sharding); at batch 1 only top-k experts plus the dense part."""
    arch = find_model("qwen3-30b-a3b")
    dev = Device(h100_pool())
    sm = StepModel(arch, dev, GenLayout(tp=1, pp=1, dp=1), 2.0, 2.0)
    all_bytes = 2.0 * arch.total_params
    big = sm.scalar_step_time(4096.0, 1.0)
    assert big >= all_bytes / dev.hbm_bytes_per_s
    one = sm.scalar_step_time(1.0, 1.0) - sm.overhead
    active = 2.0 * (arch.non_expert_params + arch.experts_per_token * arch.expert_params * arch.moe_layers)
    assert one == pytest.approx(active / dev.hbm_bytes_per_s, rel=0.02)


def test_expert_parallel_folds_over_tp_when_larger_than_dp_cp():
    """ep beyond dp*cp folds over the TP ranks (MoE parallel folding): experts stay whole
    (expert TP 1), each GPU holds E/ep of them, and tp*dp*cp/ep ranks share each shard."""
    from rlsolve.perf.train import expert_tp
    arch = find_model("qwen3-235b-a22b")
    classic = TrainLayout(tp=2, pp=8, dp=8, cp=1, ep=8)
    folded = TrainLayout(tp=2, pp=8, dp=4, cp=2, ep=16)
    assert expert_tp(2, 8, 1, 8) == 2 and classic.expert_dp == 1
    assert folded.etp == 1 and folded.expert_dp == 1
    _, e_classic = params_per_gpu(arch, 2, 8, 8, classic.etp)
    _, e_folded = params_per_gpu(arch, 2, 8, 16, folded.etp)
    assert e_folded == pytest.approx(e_classic)  # E/16 whole experts = E/8 experts split in two


def test_backward_pays_the_fp32_main_grad_accumulation_per_micro_batch():
    """Each micro-batch's weight gradients are added into fp32 main_grad: 8 bytes per
    parameter on the GPU, at HBM speed; LoRA (frozen weights) pays none."""
    arch = find_model("llama-3.1-8b")
    dev = Device(h100_pool())
    fp32 = FP32_MAIN_GRAD_BYTES
    lay = TrainLayout(micro_batch=1, main_grad_bytes=fp32)
    full = stage_times(arch, dev, lay, 1024.0)["bwd_compute"]
    lora = stage_times(arch, dev, lay, 1024.0, lora=True)["bwd_compute"]
    dense, expert = params_per_gpu(arch, 1, 1, 1)
    accum = 2 * fp32 * (dense + expert) / dev.hbm_bytes_per_s
    assert accum > 0.005  # ~64 GB of fp32 traffic for 8B on one GPU
    assert full - lora > accum  # full also pays the weight-gradient GEMMs
    # ZeRO-2/3 shard the gradients: each of the 8 ranks accumulates an eighth (one backend for both, so that
    # the attention kernel, which the strategy sets, is the same)
    z1 = stage_times(arch, dev, TrainLayout(dp=8, zero_stage=1, main_grad_bytes=fp32, strategy="megatron"),
                     1024.0)["bwd_compute"]
    z3 = stage_times(arch, dev, TrainLayout(dp=8, zero_stage=3, main_grad_bytes=fp32, strategy="megatron"),
                     1024.0)["bwd_compute"]
    assert z1 - z3 == pytest.approx(accum * 7 / 8, rel=1e-6)


def test_interleaving_keeps_1_plus_p_minus_1_over_pv_more_activations_in_flight():
    # Korthikanti et al. 2022: the first stage of an interleaved 1F1B schedule holds
    # (1 + (p-1)/(p*v)) x the activations of the plain schedule (no clamp back to p)
    a = find_model("llama-3.1-70b")
    plain = train_memory(a, TrainLayout(tp=4, pp=4, micro_batch=1), 4096.0).activations
    inter = train_memory(a, TrainLayout(tp=4, pp=4, vp=2, micro_batch=1), 4096.0).activations
    assert inter / plain == pytest.approx(1 + 3 / 8, rel=1e-9)


def test_fp8_training_stores_linear_inputs_in_one_byte():
    # Transformer Engine keeps the FP8 copy of each linear layer's input for the backward:
    # QKV input, MLP input and the second MLP GEMM's input at 1 byte instead of 2, plus an
    # FP8 copy of the attention output beside flash attention's own
    from rlsolve.perf.train import fp8_saved_input_bytes_saved
    a = find_model("llama-3.1-8b")
    assert fp8_saved_input_bytes_saved(a) == 2 * a.hidden + a.d_ffn - a.v_width
    bf16 = train_memory(a, TrainLayout(micro_batch=1), 4096.0).activations
    fp8 = train_memory(a, TrainLayout(micro_batch=1), 4096.0, fp8=True).activations
    assert bf16 - fp8 == pytest.approx(4096 * a.layers * fp8_saved_input_bytes_saved(a), rel=1e-9)


def test_partial_full_recompute_lies_between_none_and_all_layers():
    # Megatron --recompute-method block --recompute-num-layers n: n layers of each stage
    # recompute, the rest keep their activations; time and memory in proportion
    a = find_model("llama-3.1-8b")
    dev = Device(h100_pool())
    lays = [TrainLayout(micro_batch=1, recompute="none"),
            TrainLayout(micro_batch=1, recompute="full", recompute_layers=8),
            TrainLayout(micro_batch=1, recompute="full")]
    bwd = [stage_times(a, dev, lay, 4096.0)["bwd"] for lay in lays]
    act = [train_memory(a, lay, 4096.0).activations for lay in lays]
    assert bwd[0] < bwd[1] < bwd[2] and act[0] > act[1] > act[2]
    assert (bwd[1] - bwd[0]) == pytest.approx((bwd[2] - bwd[0]) * 8 / a.layers, rel=1e-6)


def test_zero3_pays_a_gather_per_layer_that_compute_cannot_hide():
    """FSDP / ZeRO-3 gathers each layer before its forward and its backward and scatters its
    gradients: 3 collectives per layer and micro-batch. With a long micro-batch the prefetch
    hides all but the first gather; with a short one over a slow network every layer's
    collectives show, latency included."""
    from rlsolve.perf.train import overlap_contention_share, zero3_exposed
    a = find_model("llama-3.1-8b")
    dev = Device(h100_pool(nodes=4))
    lay = TrainLayout(dp=32, zero_stage=3, micro_batch=1)
    dense, expert = params_per_gpu(a, 1, 1, 1)
    w = (2 * dense, 2 * expert)
    per_layer = dev.all_gather(w[0] / a.layers, 32, 32) + dev.all_gather(0.0, 32, 32)
    scatter = dev.reduce_scatter(w[0] / a.layers, 32, 32) + dev.reduce_scatter(0.0, 32, 32)
    long_st = stage_times(a, dev, lay, 32768.0)
    short_st = stage_times(a, dev, lay, 64.0)
    # hidden collectives still hold NCCL's SMs and HBM: each layer's gathers and scatter add that share of themselves
    hidden = a.layers * overlap_contention_share(dev, 32, 32) * (2 * per_layer + scatter)
    assert zero3_exposed(dev, lay, long_st, a.layers, w, w) == pytest.approx(per_layer + hidden, rel=1e-9)
    short = zero3_exposed(dev, lay, short_st, a.layers, w, w)
    assert short > a.layers * 3 * per_layer - (short_st["fwd_compute"] + short_st["bwd_compute"])
    assert short > 10 * per_layer
    # the whole step: ZeRO-3's exposed traffic is paid every micro-batch, ZeRO-1's once a step
    z1 = train_time(a, dev, TrainLayout(dp=32, zero_stage=1, micro_batch=1), 256, 64.0)
    z3 = train_time(a, dev, lay, 256, 64.0)
    assert z3.dp_comm > 8 * z1.dp_comm


def test_forward_passes_gather_zero3_weights_too():
    from rlsolve.perf.train import forward_time
    a = find_model("llama-3.1-8b")
    dev = Device(h100_pool(nodes=4))
    z1 = forward_time(a, dev, TrainLayout(dp=32, zero_stage=1, micro_batch=1), 256, 256.0)
    z3 = forward_time(a, dev, TrainLayout(dp=32, zero_stage=3, micro_batch=1), 256, 256.0)
    assert z3 > z1


def test_optimizer_offload_moves_state_to_the_host_and_pays_pcie():
    a = find_model("llama-3.1-8b")
    dev = Device(h100_pool())
    on_gpu = TrainLayout(dp=8, zero_stage=1)
    off = TrainLayout(dp=8, zero_stage=1, offload="optimizer")
    assert train_memory(a, off, 1024.0).optimizer == 0.0 < train_memory(a, on_gpu, 1024.0).optimizer
    dense, _ = params_per_gpu(a, 1, 1, 1)
    assert train_time(a, dev, off, 64, 1024.0).optimizer == pytest.approx(dev.pcie_time(2 * 2 * dense / 8))


def test_expert_all_to_all_sends_only_the_off_node_share_over_the_nics():
    # EP 32 over four 8-GPU H100 nodes: 24 of a rank's 32 equal shares leave the node through
    # its NIC, 7 go to node peers over NVLink at the same time, 1 stays
    from rlsolve.perf.train import expert_all_to_all
    dev = Device(h100_pool(nodes=4))
    nbytes = 256e6
    bw, lat = dev.link(32)
    t = expert_all_to_all(dev, nbytes, 8, 256, 32, 32)
    assert t == pytest.approx(24 / 32 * nbytes / bw + dev._steps(32) * lat, rel=1e-9)
    assert t < dev.all_to_all(nbytes, 32, 32)
    # inside one node nothing changes
    assert expert_all_to_all(dev, nbytes, 8, 256, 8, 8) == dev.all_to_all(nbytes, 8, 8)


def test_expert_destinations_by_hand():
    """Balanced top-k routing: the chance a unit holding E/u of the E experts gets none of a
    token's k is C(E - E/u, k) / C(E, k)."""
    from math import comb
    from rlsolve.perf.train import expert_destinations
    assert expert_destinations(256, 8, 4) == pytest.approx(4 * (1 - comb(192, 8) / comb(256, 8)), rel=1e-12)
    assert expert_destinations(256, 8, 1) == 1.0
    assert expert_destinations(8, 8, 4) == pytest.approx(4.0)  # every expert is picked
    assert expert_destinations(256, 1, 32) == pytest.approx(1.0)  # one expert, one unit


def test_flex_dispatcher_sends_a_token_once_per_remote_server():
    """DeepEP / HybridEP across servers: one RDMA copy per destination server (DeepSeek-V3's
    256 experts, top 8, EP 32 over four 8-GPU nodes: ~2.7 remote servers a token against the NCCL
    dispatcher's 6 remote expert copies); inside one server every dispatcher moves the NCCL count."""
    from math import comb
    from rlsolve.perf.train import expert_all_to_all
    dev = Device(h100_pool(nodes=4))
    token, k = 4096 * 7168 * 2.0, 8
    bw, lat = dev.link(32)
    nccl = expert_all_to_all(dev, token * k, k, 256, 32, 32)
    flex = expert_all_to_all(dev, token * k, k, 256, 32, 32, dedup=True)
    remote = 3 * (1 - comb(192, 8) / comb(256, 8))
    assert flex == pytest.approx(token * remote / bw + dev._steps(32) * lat, rel=1e-9)
    assert nccl / flex == pytest.approx(6 / remote, rel=0.01)
    inside = expert_all_to_all(dev, token * k, k, 256, 8, 8)
    assert expert_all_to_all(dev, token * k, k, 256, 8, 8, dedup=True) == inside


def test_ep_a2a_overlap_hides_a_nic_all_to_all_under_the_other_micro_batch():
    """Megatron-Core's EP A2A overlap: each of a layer's four all-to-alls shows only what exceeds
    the compute it runs beside; a transfer shorter than every slot hides whole, a longer one
    shows the excess; an in-domain (host-bound) all-to-all does not hide."""
    from rlsolve.perf.train import ep_overlap_exposed, ep_overlap_paired_share
    # (gemm, attn, attn_bwd, elem, elem_bwd, ep, moe_block, ep_kernel): attention side 3 fwd / 6 bwd,
    # MoE block 2 fwd (6 fwd+bwd)
    layer = (4.0, 1.0, 2.0, 0.0, 0.0, 2.0, 2.0, 2.0)  # one all-to-all = 1
    assert ep_overlap_exposed(layer) == 0.0
    slow = (4.0, 1.0, 2.0, 0.0, 0.0, 10.0, 2.0, 10.0)  # one all-to-all = 5
    assert ep_overlap_exposed(slow) == pytest.approx((5 - 3) + (10 - 6) + 0.0)
    in_domain = (4.0, 1.0, 2.0, 0.0, 0.0, 2.0, 2.0, 0.0)
    assert ep_overlap_exposed(in_domain) == pytest.approx(2 * 2.0)  # all of fwd + bwd ep shows
    # the warmup forwards and cooldown backwards run unpaired: pp 8, vp 2 -> 7 + 8 + 1 of 2 x 128
    lay = TrainLayout(pp=8, vp=2, ep=32, dp=32, moe_a2a_overlap=True)
    assert ep_overlap_paired_share(lay, 128) == pytest.approx(1 - 16 / 256)
    assert ep_overlap_paired_share(TrainLayout(ep=8, dp=8, moe_a2a_overlap=True), 16) == pytest.approx(15 / 16)
    assert ep_overlap_paired_share(TrainLayout(pp=8, vp=2, ep=32, dp=32), 128) == 0.0


def test_the_flex_dispatchers_sms_slow_the_compute_they_overlap():
    """Under the EP A2A overlap DeepEP's and HybridEP's kernels hold a set number of SMs (Megatron-Core
    moe_deepep_num_sms 20, the Megatron-Bridge recipes' moe_hybridep_num_sms 32) while the compute
    beside them runs on the rest: a hidden all-to-all of a seconds costs a * share, one longer than the
    compute its excess; NCCL's all-to-all and a GPU without a recorded SM count take no share."""
    from dataclasses import replace as _replace
    from rlsolve.perf.train import ep_comm_sm_share, ep_overlap_exposed
    dev = Device(h100_pool(4), "bf16")
    assert ep_comm_sm_share(dev, TrainLayout(ep=32, dp=32, moe_dispatcher="deepep")) == pytest.approx(20 / 132)
    assert ep_comm_sm_share(dev, TrainLayout(ep=32, dp=32, moe_dispatcher="hybridep")) == pytest.approx(32 / 132)
    assert ep_comm_sm_share(dev, TrainLayout(ep=32, dp=32)) == 0.0
    a800 = Device(_replace(h100_pool(4), gpu=find_gpu("A800-SXM-80GB")), "bf16")
    assert a800.pool.gpu.sm_count is None
    assert ep_comm_sm_share(a800, TrainLayout(ep=32, dp=32, moe_dispatcher="deepep")) == 0.0
    layer = (4.0, 1.0, 2.0, 0.0, 0.0, 2.0, 2.0, 2.0)  # one all-to-all = 1 beside 3 | 6 | 6
    assert ep_overlap_exposed(layer, sm_share=0.25) == pytest.approx(0.25 + 0.5 + 0.25)
    slow = (4.0, 1.0, 2.0, 0.0, 0.0, 10.0, 2.0, 10.0)  # one all-to-all = 5
    assert ep_overlap_exposed(slow, sm_share=0.25) == pytest.approx((5 - 3) + (10 - 6) + 5 * 0.25)
    assert ep_overlap_exposed(slow, sm_share=0.0) == ep_overlap_exposed(slow)


def test_a_small_all_reduce_never_gets_cheaper_by_leaving_the_server():
    """Spreading a tensor-parallel group over more nodes adds network hops to the hops inside
    each node; it never replaces them."""
    dev = Device(h100_pool(nodes=8))
    tiny = 1.0
    by_size = [dev.all_reduce(tiny, n, n) for n in (2, 4, 8, 16, 32, 64)]
    assert by_size == sorted(by_size)
    assert dev.all_reduce(tiny, 16, 16) > dev.all_reduce(tiny, 8, 8)
    assert dev.all_reduce(tiny, 16, 64) >= dev.all_reduce(tiny, 8, 8)


def test_nccl_model_by_hand_for_a_decode_all_reduce_over_two_nodes():
    """NCCL 2.30's tuning model (src/graph/tuning.cc), worked by hand for 16 ranks on 2 nodes
    (8 per node, NVLink inside, Intel hosts) and a 512 kB buffer (batch 64 x hidden 4096 x 2 B),
    with 368 GB/s of bus bandwidth: tree/LL128 wins.
      tree LL:     6.8 + 2*(7*0.6 + 1*5.0) = 25.2 us;  bw min(368*.92/3.8, 39) * .5 * 0.4 (correction
                   for 2^13 x 64 B) = 7.8 GB/s -> 25.2 + 512000/7800 = 90.8 us
      tree LL128: 14 + 2*(7*1.25 + 1*8.5) = 48.5 us; bw 368*.92*120/128 * .5 * 0.6 = 95.2 GB/s -> 53.9 us
      ring LL128: 14 + 28*1.9 + 2*4.0 = 75.2 us -> more
    """
    got = collective_time("all_reduce", 512e3, 16, 2, 368e9) * 1e6
    tree_ll128 = 14 + 2 * (7 * 1.25 + 8.5) + 512e3 / (1000 * 368 * 0.92 * 120 / 128 * 0.5 * 0.6)
    assert got == pytest.approx(tree_ll128, rel=1e-6)
    # a 1-byte message pays the tree/LL latency
    assert collective_time("all_reduce", 1.0, 16, 2, 368e9) * 1e6 == pytest.approx(25.2, abs=0.01)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([2, 4, 8, 16, 32, 64, 128]), st.sampled_from([2, 3, 4, 8, 16]),
       st.floats(1e9, 1e12), st.floats(0, 1e9), st.sampled_from(["all_reduce", "all_gather"]))
def test_nccl_affine_bound_stays_below_the_model_and_time_grows_with_size(n, nodes, bw, nbytes, coll):
    """The search's decode lower bound uses a + b * bytes; it must never exceed NCCL's time."""
    nodes = min(nodes, n)
    a, b = affine_lower_bound(coll, n, nodes, bw)
    t = collective_time(coll, nbytes, n, nodes, bw)
    assert a + b * nbytes <= t * (1 + 1e-9)
    assert collective_time(coll, 2 * nbytes + 64, n, nodes, bw) >= t


def test_output_discarding_recompute_modules_free_their_outputs_and_rerun_them():
    """Megatron-Core's layernorm / moe_act / mla_up_proj modules (output-discarding checkpoints):
    layernorm frees the two norms' 16-bit outputs (2 x 2h bytes per token and layer), nothing for
    a dense model under FP8 (the Linear keeps its own FP8 copy) and a MoE's 16-bit router input;
    moe_act frees the experts' activation outputs (k x w x 2 bytes on MoE layers), none under FP8;
    mla_up_proj frees MLA's up-projected q and per-head k/v less the query latent. The backward
    re-runs them, so a micro-batch takes longer."""
    from rlsolve.perf.train import recompute_module_bytes_saved
    dense, moe, mla = find_model("llama-3.1-8b"), find_model("qwen3-30b-a3b"), find_model("deepseek-v3")
    h = dense.hidden
    assert recompute_module_bytes_saved(dense, ("layernorm",), False) == (4.0 * h, 4.0 * h)
    assert recompute_module_bytes_saved(dense, ("layernorm",), True) == (0.0, 0.0)
    assert recompute_module_bytes_saved(moe, ("layernorm",), True) == (2.0 * moe.hidden, 2.0 * moe.hidden)
    k, w = moe.experts_per_token, moe.d_moe_ffn
    assert recompute_module_bytes_saved(moe, ("moe_act",), False)[0] == pytest.approx(2.0 * k * w)
    assert recompute_module_bytes_saved(moe, ("moe_act",), True)[0] == 0.0
    freed = 2.0 * (mla.q_width + mla.heads * (mla.qk_nope_head_dim + mla.v_head_dim) - mla.q_lora_rank)
    assert recompute_module_bytes_saved(mla, ("mla_up_proj",), False)[0] == pytest.approx(freed)
    # memory: tp 1, pp 1: the stage's layers x tokens x the freed bytes
    lay = TrainLayout(tp=1, pp=1, dp=8, recompute="selective", micro_batch=1)
    plain = train_memory(dense, lay, 4096).activations
    with_ln = train_memory(dense, TrainLayout(**{**lay.__dict__, "recompute_modules": ("layernorm",)}), 4096)
    assert plain - with_ln.activations == pytest.approx(4096 * dense.layers * 4.0 * h)
    dev = Device(h100_pool())
    st0 = stage_times(dense, dev, lay, 4096)
    st1 = stage_times(dense, dev, TrainLayout(**{**lay.__dict__, "recompute_modules": ("layernorm",)}), 4096)
    assert st1["bwd_compute"] > st0["bwd_compute"] and st1["fwd"] == pytest.approx(st0["fwd"])
    assert st1["bwd_compute"] - st0["bwd_compute"] == pytest.approx(
        dense.layers * dev.stream_time(4096 * 2 * 4.0 * h))


def test_nccl_kernels_beside_compute_hold_their_sms():
    """An NCCL collective overlapped with compute keeps one CTA per channel on an SM until it ends
    (constants.yaml nccl_collective_ctas, measured on H100): the compute beside it runs on the rest, so a
    hidden collective still adds that share of its own time; one longer than the compute shows whole
    beyond it. On MI300X RCCL's workgroups (rccl_collective_ctas) over its CUs."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import nccl_sm_share, overlapped_exposed
    h100 = Device(h100_pool(nodes=1))
    assert nccl_sm_share(h100, 8, 8) == pytest.approx(constants()["nccl_collective_ctas"] / 132)
    assert overlapped_exposed(1.0, 10.0, 0.25) == pytest.approx(0.25)   # hidden: its SM share
    assert overlapped_exposed(10.0, 1.0, 0.25) == pytest.approx(9.0)    # longer than the compute
    assert overlapped_exposed(1.0, 10.0, 0.0) == 0.0
    gpu = find_gpu("MI300X")
    mi300 = Device(PoolHW("main", gpu, 1, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd))
    assert nccl_sm_share(mi300, 8, 8) == pytest.approx(constants()["rccl_collective_ctas"] / 304)
    # the data-parallel reduction overlapped with the last backward (ZeRO-1, Megatron's overlap_grad_reduce)
    a = find_model("llama-3.1-8b")
    t = train_time(a, h100, TrainLayout(dp=8, zero_stage=1, micro_batch=1), 64, 4096.0)
    assert t.dp_comm > 0.0


def test_overlapped_collectives_slow_compute_by_their_sms_and_hbm_traffic():
    """The compute beside an overlapped collective loses the SMs NCCL holds plus the share of the HBM bandwidth the
    collective's traffic takes (nccl_hbm_bytes_per_bus_byte HBM bytes per byte at its bus bandwidth): a share in
    [0, 1] on every GPU and group, rising with the link rate, larger inside an NVLink domain than across the NICs,
    and the HBM part alone where the SM count is not recorded (A800)."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import nccl_sm_share, overlap_contention_share
    k = constants()["nccl_hbm_bytes_per_bus_byte"]
    for name in ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM-80GB", "MI300X", "L40S"):
        gpu = find_gpu(name)
        for nodes in (1, 4):
            dev = Device(PoolHW("main", gpu, nodes, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd))
            assert overlap_contention_share(dev, 1, 8) == 0.0
            for n, span in ((2, 2), (8, 8), (8 * nodes, 8 * nodes), (nodes, 8 * nodes)):
                share = overlap_contention_share(dev, n, span)
                assert 0.0 <= share <= 1.0
                if n > 1:
                    bw = dev.ring_link(n, span)[0]
                    assert share == pytest.approx(min(1.0, nccl_sm_share(dev, n, span) + k * bw / dev.hbm_bytes_per_s))
    # monotone in the link rate: a faster NVLink (a profile's busbw fraction) takes more of the HBM
    gpu = find_gpu("H100-SXM-80GB")
    pool = PoolHW("main", gpu, 2, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd)
    shares = [overlap_contention_share(Device(pool, overrides=(("nvlink_busbw_fraction", f),)), 8, 8)
              for f in (0.2, 0.4, 0.6, 0.8, 1.0)]
    assert shares == sorted(shares) and shares[0] < shares[-1]
    # H100: 24 / 132 of the SMs plus 2 x 369 / 2982 of the HBM inside the node; across two nodes' NICs less
    dev = Device(pool)
    assert overlap_contention_share(dev, 8, 8) == pytest.approx(24 / 132 + k * 450 * 0.82 / (3350 * 0.89), rel=1e-3)
    assert nccl_sm_share(dev, 16, 16) < overlap_contention_share(dev, 16, 16) < overlap_contention_share(dev, 8, 8)
    gpu = find_gpu("A800-SXM-80GB")
    a800 = Device(PoolHW("main", gpu, 1, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd))
    assert gpu.sm_count is None
    assert overlap_contention_share(a800, 8, 8) == pytest.approx(k * a800.ring_link(8, 8)[0] / a800.hbm_bytes_per_s)


def test_nccl_sm_share_reads_each_gpu_s_own_sm_count():
    """The SM share is the CTAs over the GPU's own SM count (hardware_db sm_count): a GH100 board with 132 SMs
    (H200) takes H100's share, a GB200 GPU (152 SMs) less than a B200 (148); an MI300X RCCL's 56 workgroups over
    its 304 CUs, about H100's share."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import nccl_sm_share
    ctas = constants()["nccl_collective_ctas"]

    def share(name):
        gpu = find_gpu(name)
        return nccl_sm_share(Device(PoolHW("main", gpu, 1, 8, find_network("IB-NDR-400"), 8,
                                           gpu.price_per_gpu_hour_usd)), 8, 8)
    assert share("H200-SXM-141GB") == share("H100-SXM-80GB") == pytest.approx(ctas / 132)
    assert share("A100-SXM-80GB") == share("A100-SXM-40GB") == pytest.approx(ctas / 108)
    assert share("GB200-NVL72") == pytest.approx(ctas / 152) and share("B200-SXM-180GB") == pytest.approx(ctas / 148)
    assert share("GB200-NVL72") < share("B200-SXM-180GB")
    assert share("MI300X") == pytest.approx(constants()["rccl_collective_ctas"] / 304)
    assert share("MI300X") == pytest.approx(share("H100-SXM-80GB"), abs=0.01)


@pytest.mark.parametrize("net", ["IB-NDR-400", "IB-HDR-200"])
@pytest.mark.parametrize("gpu_name", ["H100-SXM-80GB", "B200-SXM-180GB", "A100-SXM-80GB"])
def test_nccl_runs_fewer_channels_across_nodes_one_search_channel_per_nic(gpu_name, net):
    """NCCL's channel count (perf/train.py nccl_collective_ctas): 24 inside an 8-GPU NVLink node; a ring that crosses
    nodes leaves each through the NICs of its ranks there, one search channel per NIC (doubled on >= 30 GB/s NICs when
    at most 4), each run as nccl_ctas_per_search_channel CTAs: never more than inside, never fewer with more ranks
    per node, 16 over whole 8-NIC nodes (the 'Channel 00/16' of a 3-node H100 log, NVIDIA/nccl#1453), and 4 per NIC
    on 400 Gb/s, 2 on 200 Gb/s NICs for a group with one rank per node."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.train import nccl_collective_ctas
    gpu, network = find_gpu(gpu_name), find_network(net)
    dev = Device(PoolHW("main", gpu, 8, 8, network, 8, gpu.price_per_gpu_hour_usd))
    inside = constants()["nccl_collective_ctas"]
    assert nccl_collective_ctas(dev, 8, 8) == nccl_collective_ctas(dev, 2, 4) == inside == 24
    across = [nccl_collective_ctas(dev, 8 * per_node, 64) for per_node in (1, 2, 4, 8)]
    assert all(0 < c <= inside for c in across) and across == sorted(across)
    assert across[-1] == 16
    assert across[0] == (4 if network.gbytes_per_s >= constants()["nccl_dup_nic_gbytes_per_s"] else 2)
    # fewer NICs than GPUs (4 per 8-GPU node): two ranks share one NIC, fewer channels
    half = Device(PoolHW("main", gpu, 8, 8, network, 4, gpu.price_per_gpu_hour_usd))
    assert nccl_collective_ctas(half, 64, 64) <= nccl_collective_ctas(dev, 64, 64)


def test_every_model_constant_is_sourced_and_read():
    """perf/constants.yaml holds data the model reads: each entry names its source, and a key no code
    reads is dead data that a reader would take for part of the model."""
    root = pathlib.Path(rlsolve.__file__).parent
    entries = yaml.safe_load((root / "perf" / "constants.yaml").read_text())
    code = "\n".join(p.read_text() for p in root.rglob("*.py"))
    for key, entry in entries.items():
        assert str(entry.get("source", "")).strip(), key
        assert f'"{key}"' in code or f"'{key}'" in code, f"{key} is read by no code"


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("model,tp", [("llama-3.1-8b", 1), ("llama-3.1-70b", 4)])
def test_decode_gemms_pay_the_gemm_size_curve(precision, model, tp):
    """A decode step's weight GEMMs cost what Device.gemm_time charges for its decode_gemms_per_step GEMMs of the
    step's FLOPs (the catalog's size curve: F/R + F_half/R each, whatever their split, the curve being affine),
    unless the weight bytes take longer: at batch 1 the step reads its weights, at a large batch it pays the curve."""
    from rlsolve.perf.generate import decode_gemms_per_step
    dev = Device(h100_pool(), precision)
    a = find_model(model)
    wb = 1.0 if precision == "fp8" else 2.0
    step = StepModel(a, dev, GenLayout(tp=tp), wb, wb)
    n = decode_gemms_per_step(a)
    fixed = step.scalar_step_time(1e-9, 0.0) - step.weight_bytes(0.0) / step.hbm  # all-reduce latency and overheads
    for b in (1.0, 64.0, 512.0, 4096.0):
        curve = dev.gemm_time(b * step.flops_tok / n, n)
        gemm = step.scalar_step_time(b, 0.0) - fixed - step.all_reduce(b) * step.tp_ar_per_token \
            + step.all_reduce(1e-9) * step.tp_ar_per_token
        assert gemm == pytest.approx(max(step.weight_bytes(b) / step.hbm, curve), rel=1e-9), b
        assert float(step.step_time(np.array([b]), np.array([0.0]))[0]) == pytest.approx(
            step.scalar_step_time(b, 0.0), rel=1e-12)
    assert step.weight_bytes(1.0) / step.hbm > dev.gemm_time(step.flops_tok / n, n)  # batch 1 reads its weights
    assert step.weight_bytes(4096.0) / step.hbm < dev.gemm_time(4096.0 * step.flops_tok / n, n)  # 4096 pays the curve
    # past the knee the fill is what the curve adds to the large-GEMM rate's time: n x F_half / R
    b = 4096.0
    assert dev.gemm_time(b * step.flops_tok / n, n) - step.gemm_compute(b) == pytest.approx(n * dev.gemm_fill_s, rel=1e-9)
