"""The rollout and framework mechanisms of issue #15, each against what it claims."""
import numpy as np
import pytest

from rlsolve.frameworks.runtime import framework_costs, runtime
from rlsolve.perf.generate import GenLayout, StepModel, decode_lower_bound, length_quantiles, simulate_decode
from rlsolve.perf.hw import constants, device
from rlsolve.resolve import resolve
from rlsolve.spec import load_spec
from rlsolve import estimate, solve

SPEC = {"cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 8},
        "model": {"policy": "llama-3.1-8b"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 256,
               "response_len": {"max": 2048, "mean": 800}},
        "solver": {"top_k": 0}}


@pytest.mark.parametrize("clip", [0.0, 0.05, 0.2, 0.35])
def test_clipped_lengths_keep_the_mean_and_put_the_share_at_max(clip):
    u = (np.arange(20000) + 0.5) / 20000
    x = length_quantiles(800, 2048, u, clip or None)
    assert x.mean() == pytest.approx(800, rel=0.01)
    assert np.mean(x >= 2048 - 1e-9) == pytest.approx(clip, abs=0.002)


def test_more_clipped_responses_make_the_rollout_slower_at_the_same_mean():
    """The same mean with more mass at the cap leaves more requests decoding at the end."""
    pool = resolve(load_spec(SPEC)).pool
    step = StepModel(resolve(load_spec(SPEC)).policy, device(pool), GenLayout(tp=1), 2.0, 2.0)
    t = [simulate_decode(step, 512, 256, 800, 2048, 3e5, 1024, 512, clip=c).time for c in (None, 0.1, 0.3)]
    assert t[0] < t[1] < t[2]


def test_host_time_per_sequence_grows_the_step_with_the_batch_and_keeps_the_bound_below():
    p = resolve(load_spec(SPEC))
    dev = device(p.pool)
    plain = StepModel(p.policy, dev, GenLayout(tp=1), 2.0, 2.0)
    asked = StepModel(p.policy, dev, GenLayout(tp=1), 2.0, 2.0, host_per_seq=dev.decode_host_per_seq_s)
    for b in (1, 64, 512):
        extra = asked.scalar_step_time(b, 500) - plain.scalar_step_time(b, 500)
        assert extra == pytest.approx(b * constants()["decode_host_us_per_seq"] * 1e-6)
    for cap in (2e4, 3e5):
        sim = simulate_decode(asked, 512, 256, 800, 2048, cap, 1024, 512, clip=0.1).time
        assert decode_lower_bound(asked, 512, 256, 800, 2048, cap, 512, clip=0.1) <= sim * (1 + 1e-9)


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
def test_pipeline_stages_cost_one_engine_host_pass_per_micro_batch_and_keep_the_bound_below(pp):
    """vLLM keeps pp micro-batches in flight and its engine core (one host thread) schedules and updates each:
    a token round takes at least pp host passes plus every sequence's host work, overlapped with the GPUs (a
    floor, not an added term); with pp = 1 the step is as before. The bound stays below the simulation."""
    p = resolve(load_spec(SPEC))
    dev = device(p.pool)
    step = StepModel(p.policy, dev, GenLayout(tp=1, pp=pp), 2.0, 2.0, host_per_seq=dev.decode_host_per_seq_s)
    assert (step.host_round == 0.0) == (pp == 1)
    for b in (1, 8, 64, 512):
        t = step.scalar_step_time(b, 500)
        assert t >= (pp * dev.decode_step_overhead_s + b * dev.decode_host_per_seq_s) * (1 - 1e-12)
        assert step.step_time(np.array([b]), np.array([500.0]))[0] == pytest.approx(t, rel=1e-12)
    if pp == 8:  # an 8B model over 8 stages: the host passes, not the GPUs, set a small batch's round
        assert step.scalar_step_time(1, 500) == pytest.approx(8 * dev.decode_step_overhead_s + dev.decode_host_per_seq_s)
    for cap in (2e4, 3e5):
        sim = simulate_decode(step, 512, 256, 800, 2048, cap, 1024, 512, clip=0.1).time
        assert decode_lower_bound(step, 512, 256, 800, 2048, cap, 512, clip=0.1) <= sim * (1 + 1e-9)


def test_every_framework_entry_has_a_source_and_any_takes_the_cheapest():
    rt = runtime()
    for name, fw in rt.frameworks.items():
        for field, entry in fw:
            assert entry is None or len(entry.source) > 20, (name, field)  # None: not read for it
    costs = {n: framework_costs(n) for n in rt.frameworks}
    anyc = framework_costs("any")
    assert anyc.orchestration_s == min(c.orchestration_s for c in costs.values())
    assert anyc.rollout_logprobs is False and costs["nemo-rl"].rollout_logprobs is True


def test_the_targets_costs_enter_the_plan():
    """A NeMo-RL plan carries NeMo-RL's orchestration as its own time term and its engines
    return log-probs; re-scoring the same layout for `any` is faster by at least that term."""
    nemo = solve({**SPEC, "target": {"framework": "nemo-rl"}})
    assert nemo.time_s.orchestration == pytest.approx(framework_costs("nemo-rl").orchestration_s, abs=0.01)
    loose = estimate(SPEC, nemo)
    assert loose.time_s.orchestration == pytest.approx(framework_costs("any").orchestration_s, abs=0.01)
    assert loose.time_s.step <= nemo.time_s.step - (nemo.time_s.orchestration - loose.time_s.orchestration) + 0.01
    assert loose.time_s.decode < nemo.time_s.decode  # no log-prob returns


def test_an_eager_engine_pays_a_launch_for_every_kernel_the_graph_would_replay():
    """enforce_eager: per decode step and layer, the 6 kernels beyond the 4 small ones already at
    their launch floor (10 in vLLM's LlamaDecoderLayer), plus the 2 TP all-reduces when tp > 1, each
    cost the GPU's kernel_launch_us, whatever the batch."""
    p = resolve(load_spec(SPEC))
    dev = device(p.pool)
    for tp, per_layer in ((1, 6), (2, 8)):
        graph = StepModel(p.policy, dev, GenLayout(tp=tp), 2.0, 2.0)
        eager = StepModel(p.policy, dev, GenLayout(tp=tp), 2.0, 2.0, eager=True)
        for b in (1, 256):
            extra = eager.scalar_step_time(b, 500) - graph.scalar_step_time(b, 500)
            assert extra == pytest.approx(per_layer * p.policy.layers * dev.launch_s)


def test_a_v0_engine_run_eagerly_processes_its_outputs_between_steps():
    """A case row with enforce_eager on vLLM before 0.8.0 (V0, async output processor off) pays
    decode_v0_sync_output_us_per_seq per running sequence per step; the same engine from 0.8.0 (V1)
    pays the launches only, and a CUDA-graph engine neither."""
    from dataclasses import replace as _replace
    from rlsolve.perf.step import gen_side
    from rlsolve.perf.generate import GenLayout as GL
    from rlsolve.cases import _recipe_layout
    assert constants()["decode_v0_sync_output_us_per_seq"] == pytest.approx(3400 / 32, rel=0.01)
    p = resolve(load_spec(SPEC))
    row = {"id": "x", "hardware": {"gpu": "H100-SXM-80GB", "gpus": 8},
           "layout": {"framework": "verl", "engine": "vllm", "generation": {"tp": 1, "enforce_eager": True},
                      "training": {"micro_batch": 1}, "max_seq_len": 2304}}
    flags = {}
    for version in ("0.6.3", "0.8.0"):
        row["layout"]["engine_version"] = version
        micro = _recipe_layout(row, p.workload)[3]
        flags[version] = (micro["engine_eager"], micro["engine_sync_output"])
    assert flags == {"0.6.3": (True, True), "0.8.0": (True, False)}
    lay = GL(tp=1, dp=8)
    times = [gen_side(_replace(p, workload=_replace(p.workload, engine_eager=e, engine_sync_output=s)), p.pool, lay).time
             for e, s in ((False, False), (True, False), (True, True))]
    assert times[0] < times[1] < times[2]


def _async_row(**gen):
    return {"id": "a", "kind": "rl_step", "hardware": {"gpu": "GB200-NVL72", "gpus": 16, "gpus_per_node": 4},
            "model": {"name": "qwen3-30b-a3b"},
            "layout": {"algorithm": "grpo", "mode": "async", "staleness": 1, "framework": "nemo-rl",
                       "framework_version": "0.6.0", "engine": "vllm", "train_strategy": "megatron",
                       "generation": {"tp": 1, "gpus": 8, **gen},
                       "training": {"ep": 8, "gpus": 8, "micro_batch": 1, "sequence_packing": True},
                       "samples_per_step": 2048, "train_global_batch": 512, "avg_seq_len": 3000,
                       "max_seq_len": 4096, "gpu_memory_utilization": 0.8},
            "measured": {"step_s": 100.0}}


def test_an_async_engine_built_without_max_num_seqs_runs_vllms_engine_context_cap():
    """NeMo-RL's async GRPO drives vLLM's AsyncLLM (vllm_cfg.async_engine), built by
    from_engine_args without max_num_seqs: vLLM's usage context is then ENGINE_CONTEXT, absent from
    its batch-default tables, so the scheduler default of 128 sequences applies, not the LLM class's
    1024. A row (or the framework's async mode) with the async engine is read with that cap; a stated
    max_num_seqs wins; the cap makes a rollout of more sequences per engine longer."""
    from rlsolve.cases import _recipe_layout, predict_rl_step, rl_step_spec
    from rlsolve.frameworks.runtime import runtime
    cap = runtime().engine_context_max_num_seqs.value
    assert cap == 128

    def seqs(row):
        p = resolve(load_spec(rl_step_spec(row)))
        return _recipe_layout(row, p.workload)[0]["optimization"]["max_num_seqs"]

    assert seqs(_async_row()) == cap  # NeMo-RL's async mode: async_engine (framework fact)
    assert seqs(_async_row(async_engine=True)) == cap
    assert seqs(_async_row(async_engine=False)) == runtime().engine_max_num_seqs.value["large"]  # 186 GB GPU
    assert seqs(_async_row(async_engine=True, max_num_seqs=32)) == 32
    capped, free = (predict_rl_step(_async_row(async_engine=a), headroom=False) for a in (True, False))
    # 2048 samples on 8 engines: 256 per engine, twice the cap
    assert capped.extra["phases_s"]["generation"] > 1.2 * free.extra["phases_s"]["generation"]


def test_vllms_engine_context_default_is_the_one_runtime_yaml_states():
    """Read in the installed vLLM (tests/frameworks.txt): AsyncLLM.from_engine_args defaults to the
    ENGINE_CONTEXT usage context, which get_batch_defaults does not list, so max_num_seqs falls back
    to SchedulerConfig.DEFAULT_MAX_NUM_SEQS."""
    pytest.importorskip("vllm")
    import inspect
    from vllm.config.scheduler import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM
    from rlsolve.frameworks.runtime import runtime
    assert inspect.signature(AsyncLLM.from_engine_args).parameters["usage_context"].default is \
        UsageContext.ENGINE_CONTEXT
    assert UsageContext.ENGINE_CONTEXT not in EngineArgs.get_batch_defaults(1)[1]
    assert SchedulerConfig.DEFAULT_MAX_NUM_SEQS == runtime().engine_context_max_num_seqs.value


def test_a_grace_host_runs_the_engines_host_work_slower_and_a_profile_still_wins():
    """GB200's host CPU (Grace) takes host_cpu_slowdown x the x86 time for the engine's per-step and
    per-sequence host work (TransformerEngine#2053: 37.08 vs 13.48 us per PyTorch op); an x86
    system keeps the constants; a profile measured on the host replaces the product."""
    from rlsolve.cases import _pool
    from rlsolve.hardware_db import find_gpu
    assert find_gpu("GB200-NVL72").efficiency.host_cpu_slowdown.value == pytest.approx(37.08 / 13.48, rel=0.01)
    assert find_gpu("H100-SXM-80GB").efficiency.host_cpu_slowdown is None
    h100 = device(_pool({"id": "h", "hardware": {"gpu": "H100-SXM-80GB", "gpus": 8}}))
    gb200 = device(_pool({"id": "g", "hardware": {"gpu": "GB200-NVL72", "gpus": 4}}))
    c = constants()
    assert h100.decode_step_overhead_s == pytest.approx(c["decode_step_overhead_us"] * 1e-6)
    assert gb200.decode_step_overhead_s == pytest.approx(2.75 * c["decode_step_overhead_us"] * 1e-6, rel=0.01)
    assert gb200.decode_host_per_seq_s == pytest.approx(2.75 * c["decode_host_us_per_seq"] * 1e-6, rel=0.01)
    prof = {"GB200-NVL72": {"decode_step_overhead_us": 2000.0}}
    pool = _pool({"id": "g", "hardware": {"gpu": "GB200-NVL72", "gpus": 4}})
    assert device(pool, profile=prof).decode_step_overhead_s == pytest.approx(2e-3)


def test_a_refit_pays_the_engines_load_call_for_every_checkpoint_tensor():
    """An MoE checkpoint hands the engine ~18.8k tensors (Qwen3-30B-A3B: 48 layers x 128 experts x 3)
    against 291 for Llama-3.1-8B; each costs refit_engine_load_us_per_tensor of host time (vime#175/#176),
    colocated or over the network, and LoRA adapters are not counted."""
    from dataclasses import replace as _replace
    from rlsolve.models.catalog import find_model
    from rlsolve.perf.step import checkpoint_tensors, engine_load_time, sync_time
    assert checkpoint_tensors(find_model("llama-3.1-8b")) == 32 * 6 + 32 * 3 + 3
    assert checkpoint_tensors(find_model("qwen3-30b-a3b")) == 48 * (6 + 1 + 128 * 3) + 3
    assert checkpoint_tensors(find_model("deepseek-v3")) > 44_000
    p = resolve(load_spec(SPEC))
    dev = device(p.pool)
    per = constants()["refit_engine_load_us_per_tensor"] * 1e-6
    assert engine_load_time(p, dev) == pytest.approx(291 * per)
    moe = resolve(load_spec({**SPEC, "model": {"policy": "qwen3-30b-a3b"}}))
    lay = GenLayout(tp=4, dp=2)
    with_load = sync_time(moe, moe.pool, moe.pool, lay, 8, True)[0]
    assert engine_load_time(moe, dev) == pytest.approx(18771 * per)
    base = with_load - engine_load_time(moe, dev)
    assert base > 0 and with_load > base + 1.0
    lora = _replace(moe, workload=_replace(moe.workload, lora_rank=16))
    assert engine_load_time(lora, dev) == 0.0


def test_an_fsdp_trainer_gathers_its_fp32_masters_for_every_refit_where_the_framework_does():
    """NeMo-RL's DTensor worker builds each full fp32 parameter (full_tensor) for the engine at every
    refit: an all-gather of 4 bytes per parameter over the FSDP mesh, charged to the trainers and shown
    in weight_sync (verl's vLLM loader the same: full_tensor() of its fp32 actor's shards); Megatron (ZeRO-1)
    trainers and frameworks whose refit was not read pay none."""
    from dataclasses import replace as _replace
    from rlsolve.frameworks.runtime import framework_costs
    from rlsolve.perf.step import refit_gather_time
    from rlsolve.perf.train import TrainLayout
    assert framework_costs("nemo-rl").fsdp_refit_gather_bytes == 4
    assert framework_costs("verl").fsdp_refit_gather_bytes == 4  # verl's dtensor loader: full_tensor() of fp32
    assert framework_costs("openrlhf").fsdp_refit_gather_bytes is None
    assert framework_costs("any").fsdp_refit_gather_bytes is None
    p = resolve(load_spec({**SPEC, "cluster": {"gpu": "H100-SXM-80GB", "nodes": 2, "gpus_per_node": 8}}))
    nemo = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl")))
    fsdp = TrainLayout(tp=1, dp=16, zero_stage=3, micro_batch=1)
    t = refit_gather_time(nemo, p.pool, fsdp)
    # 8B x 4 bytes gathered to every GPU, half of it from the other node through that node's 8 NICs
    assert t > p.policy.total_params * 4 / 2 / (8 * p.pool.nic_gbytes_per_gpu * 1e9)
    assert refit_gather_time(nemo, p.pool, _replace(fsdp, zero_stage=1)) == 0.0
    unread = _replace(p, workload=_replace(p.workload, framework=framework_costs("openrlhf")))
    assert refit_gather_time(unread, p.pool, fsdp) == 0.0
    # with TP the cross-node part shrinks to the TP shard; the full tensor is then gathered over NVLink
    tp8 = refit_gather_time(nemo, p.pool, TrainLayout(tp=8, dp=2, zero_stage=3, micro_batch=1))
    assert tp8 > p.policy.total_params * 4 * 7 / 8 / (p.pool.gpu.nvlink_gbps_per_dir * 1e9)


def test_a_megatron_trainer_gathers_every_full_tensor_over_tp_pp_and_ep_for_a_refit():
    """NeMo-RL's Megatron refit gives every trainer GPU every full tensor in bf16: 0.3's gather_params
    all-gathers each tensor over TP, broadcasts it from its stage over the PP group and all-gathers a routed
    expert's over the EP group; from 0.4 Megatron-Bridge's export does the same (broadcast_from_pp_rank,
    the TP all-gather, gather_from_ep_ranks). Plans without a release get the current release's facts;
    a framework whose refit was not read, and LoRA refits, pay none."""
    from dataclasses import replace as _replace
    from rlsolve.perf.step import refit_gather_time
    from rlsolve.perf.train import TrainLayout
    for version in ("0.3.0", "0.4.0", "0.7.0", None):
        assert framework_costs("nemo-rl", version).megatron_refit_gather_bytes == 2
    assert framework_costs("verl", "0.3.0").megatron_refit_gather_bytes is None
    p = resolve(load_spec({**SPEC, "model": {"policy": "llama-3.1-70b"},
                           "cluster": {"gpu": "H100-SXM-80GB", "nodes": 8, "gpus_per_node": 8}}))
    v03 = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl", "0.3.0")))
    lay = TrainLayout(tp=4, pp=4, dp=4, zero_stage=1, micro_batch=1)
    t = refit_gather_time(v03, p.pool, lay)
    # three of the four stages' bf16 tensors reach every GPU, through its own NIC at best
    assert t > p.policy.total_params * 2 * 3 / 4 / (p.pool.nic_gbytes_per_gpu * 1e9)
    # the Megatron-Bridge export of later releases moves the same
    v07 = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl", "0.7.0")))
    assert refit_gather_time(v07, p.pool, lay) == pytest.approx(t)
    # a pipeline inside one server gathers over NVLink: far less
    small = resolve(load_spec({**SPEC, "model": {"policy": "llama-3.1-8b"}}))
    small03 = _replace(small, workload=_replace(small.workload, framework=framework_costs("nemo-rl", "0.3.0")))
    inside = refit_gather_time(small03, small.pool, TrainLayout(tp=1, pp=2, dp=4, zero_stage=1, micro_batch=1))
    assert 0 < inside < small.policy.total_params * 2 / (small.pool.nic_gbytes_per_gpu * 1e9)
    verl = _replace(p, workload=_replace(p.workload, framework=framework_costs("verl", "0.3.0")))
    assert refit_gather_time(verl, p.pool, lay) == 0.0
    lora = _replace(v03, workload=_replace(v03.workload, lora_rank=16))
    assert refit_gather_time(lora, p.pool, lay) == 0.0


def test_the_megatron_refits_pipeline_step_is_a_broadcast_per_tensor_not_an_all_gather():
    """NeMo-RL 0.3's gather_params broadcasts each full tensor from the stage that holds it over the PP
    group (refit_utils.py line 127; Megatron-Bridge's broadcast_from_pp_rank later): NCCL runs a broadcast
    as a ring of nRanks steps (tuning.cc: nsteps = nRanks, ring only), so each broadcast takes its bytes /
    bus bandwidth and the four stages' broadcasts in turn take the whole model's bf16 bytes over the NICs,
    where an all-gather of the same result takes 3/4 of them."""
    from dataclasses import replace as _replace
    from rlsolve.perf.hw import device as _device
    from rlsolve.perf.step import refit_gather_time
    from rlsolve.perf.train import TrainLayout
    p = resolve(load_spec({**SPEC, "model": {"policy": "llama-3.1-70b"},
                           "cluster": {"gpu": "H100-SXM-80GB", "nodes": 8, "gpus_per_node": 8}}))
    dev = _device(p.pool, p.workload.precision, p.profile)
    nic = p.pool.nic_gbytes_per_gpu * 1e9 * p.pool.network.busbw_fraction.value
    full = p.policy.total_params * 2  # 141 GB of bf16 tensors
    # inside one server the ring formulas: a broadcast moves the whole buffer, an all-gather (n-1)/n of it
    nv = dev.broadcast(1e10, 4, 4) - dev.all_gather(1e10, 4, 4)
    assert nv == pytest.approx(1e10 / 4 / dev.link(4)[0], rel=1e-9)
    # across the servers NCCL's own model: the broadcast's algorithm bandwidth is the NICs' bus bandwidth
    assert dev.broadcast(full, 4, 64) == pytest.approx(full / nic, rel=0.01)
    assert dev.broadcast(full, 4, 64) / dev.all_gather(full, 4, 64) == pytest.approx(4 / 3, rel=0.01)
    v03 = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl", "0.3.0")))
    t = refit_gather_time(v03, p.pool, TrainLayout(tp=4, pp=4, dp=4, zero_stage=1, micro_batch=1))
    # the whole model through every GPU's own NIC (each stage's tensors too: the ring passes them on)
    assert t >= full / nic


def test_a_moe_refit_gathers_the_routed_experts_over_the_expert_parallel_group():
    """The PP step of a MoE refit moves only the rank's own experts; every GPU then receives the other EP
    ranks' experts of every layer: an EP group that spans two servers takes at least what crosses into a
    server through its NICs, one inside a server far less."""
    from dataclasses import replace as _replace
    from rlsolve.perf.step import _expert_refit_gather, refit_gather_time
    from rlsolve.perf.train import TrainLayout
    p = resolve(load_spec({**SPEC, "model": {"policy": "deepseek-v3"},
                           "cluster": {"gpu": "H100-SXM-80GB", "nodes": 32, "gpus_per_node": 8}}))
    nemo = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl", "0.4.0")))
    experts = p.policy.routed_expert_params_total * 2
    ep16 = refit_gather_time(nemo, p.pool, TrainLayout(tp=1, pp=16, dp=16, ep=16, zero_stage=1, micro_batch=1))
    no_ep = refit_gather_time(nemo, p.pool, TrainLayout(tp=1, pp=16, dp=16, ep=1, zero_stage=1, micro_batch=1))
    # half of the experts sit on the other server of the EP group: they enter through its 8 NICs
    assert ep16 > experts / 2 / (8 * p.pool.nic_gbytes_per_gpu * 1e9)
    # an EP group inside one server gathers over NVLink
    dev = device(p.pool)
    inside = _expert_refit_gather(dev, p.policy, TrainLayout(tp=1, pp=16, dp=16, ep=8, zero_stage=1, micro_batch=1), 2)
    across = _expert_refit_gather(dev, p.policy, TrainLayout(tp=1, pp=16, dp=16, ep=16, zero_stage=1, micro_batch=1), 2)
    assert 0 < inside < across
    # without EP the PP step carries every expert: the whole model crosses the pipeline's nodes
    assert no_ep > ep16


def test_nemo_rls_disaggregated_refit_broadcasts_the_whole_model_to_every_engine_gpu():
    """NeMo-RL broadcasts every full tensor from training rank 0 over one communicator of all trainers
    and engines: each engine GPU receives the whole model whatever its TP shard, through its server's
    NICs; a framework whose refit was not read receives its shard only."""
    from dataclasses import replace as _replace
    from rlsolve.frameworks.runtime import framework_costs
    from rlsolve.perf.step import engine_load_time, recv_time
    assert framework_costs("nemo-rl").refit_full_broadcast
    assert not framework_costs("verl").refit_full_broadcast and not framework_costs("any").refit_full_broadcast
    p = resolve(load_spec({**SPEC, "model": {"policy": "llama-3.1-70b"},
                           "cluster": {"gpu": "H100-SXM-80GB", "nodes": 4, "gpus_per_node": 8}}))
    nemo = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl")))
    verl = _replace(p, workload=_replace(p.workload, framework=framework_costs("verl")))
    dev = device(p.pool)
    full = p.policy.total_params * 2.0
    t4, t8 = (recv_time(nemo, p.pool, GenLayout(tp=tp, dp=16 // tp)) for tp in (4, 8))
    assert t4 == pytest.approx(t8)  # the whole model, whatever the shard
    assert t4 - engine_load_time(nemo, dev) >= full / (8 * p.pool.nic_gbytes_per_gpu * 1e9)
    v4, v8 = (recv_time(verl, p.pool, GenLayout(tp=tp, dp=16 // tp)) for tp in (4, 8))
    assert v8 < v4  # the shard only


def test_nemo_rls_fp8_engine_quantizes_every_refit_itself():
    """NeMo-RL's FP8 generation receives bf16 weights and quantizes each full linear weight on every
    engine GPU (fp8.load_weights: 49 bytes of HBM traffic a parameter) and loads the scales as tensors
    of their own; a bf16 engine, or a framework whose FP8 path was not read, pays neither."""
    from dataclasses import replace as _replace
    from rlsolve.frameworks.runtime import framework_costs
    from rlsolve.perf.step import engine_load_time, linear_weight_tensors
    assert framework_costs("nemo-rl").fp8_refit_quantize_bytes == 49
    assert framework_costs("verl").fp8_refit_quantize_bytes is None
    p = resolve(load_spec({**SPEC, "model": {"policy": "qwen3-30b-a3b"}}))
    dev = device(p.pool)
    nemo = _replace(p, workload=_replace(p.workload, framework=framework_costs("nemo-rl")))
    fp8 = _replace(nemo, workload=_replace(nemo.workload, precision="fp8"))
    assert linear_weight_tensors(p.policy) == 48 * (4 + 1 + 128 * 3)
    extra = engine_load_time(fp8, dev) - engine_load_time(nemo, dev)
    quant = (p.policy.total_params - p.policy.embedding_params) * 49 / dev.hbm_bytes_per_s
    calls = linear_weight_tensors(p.policy) * constants()["refit_engine_load_us_per_tensor"] * 1e-6
    assert extra == pytest.approx(quant + calls)
    verl8 = _replace(fp8, workload=_replace(fp8.workload, framework=framework_costs("verl")))
    assert engine_load_time(verl8, dev) == pytest.approx(engine_load_time(nemo, dev))


def test_an_async_nemo_rl_engine_waits_for_the_trainers_refit_gathers():
    """NeMo-RL's collective refit streams the trainers' export (its PP/TP/EP gathers) into the broadcast
    while the engines sit in update_weights_from_collective: a 1-step-off DeepSeek-V3 step whose generation
    outlasts training is generation + the whole refit, gathers included, not generation + the receive."""
    import yaml
    from pathlib import Path
    from rlsolve.cases import _score_recipe
    rows = yaml.safe_load((Path(__file__).resolve().parents[1] / "benchmarks/data/extra_cases.yaml").read_text())
    row = next(r for r in rows["cases"] if r["id"] == "nemorl04-deepseek-v3-grpo-1stepoff-bf16-512g")
    plan, how, _ = _score_recipe(row, None)
    t = plan.time_s
    assert how == "recipe layout" and plan.pipeline.mode == "async"
    trainer = t.old_logprob + t.reference + t.train + t.weight_sync
    assert t.prefill + t.decode > t.old_logprob + t.reference + t.train
    assert t.step == pytest.approx(t.prefill + t.decode + t.weight_sync, abs=0.01)
    assert t.step < trainer + t.prefill + t.decode  # still overlapped: training hides under generation
