"""RL-specific physics: length distribution, prefix sharing, staleness, offload, quantization, LoRA."""
from __future__ import annotations

import pytest

from rlsolve.perf.generate import GenLayout
from rlsolve.frameworks.runtime import framework_costs
from rlsolve.perf.step import (combine, engine_shares_fixed, gen_side, rollout_steps_in_flight, sync_time, train_aux,
                               train_side)
from rlsolve.perf.train import TrainLayout
from rlsolve.resolve import resolve
from rlsolve.solver import solve
from rlsolve.solver.oracle import oracle
from rlsolve.spec import load_spec

from conftest import small_spec


def problem(**over):
    return resolve(load_spec(small_spec(**over)))


def test_long_tail_costs_more_than_the_mean_suggests():
    # same mean response, longer cap: the tail decodes at low batch for longer
    short = problem(rl={"response_len": {"max": 1024, "mean": 1024}})
    tail = problem(rl={"response_len": {"max": 8192, "mean": 1024}})
    lay = GenLayout(tp=1, dp=8)
    a, b = gen_side(short, short.pool, lay), gen_side(tail, tail.pool, lay)
    assert b.decode > 1.5 * a.decode


def test_steps_in_flight_pay_the_long_tail_once_per_stream():
    """An async engine that may run k steps ahead decodes their rollouts as one stream: the batch
    stays full while a step's longest responses finish, and it is k times larger. A step costs
    less than alone, and the gain is larger when responses have a long tail (paid once per k
    steps) than when every response has the same length (only the larger batch helps)."""
    tail = problem(rl={"response_len": {"max": 8192, "mean": 1024}})
    flat = problem(rl={"response_len": {"max": 1024, "mean": 1024}})
    lay = GenLayout(tp=1, dp=8)
    one, four = (gen_side(tail, tail.pool, lay, in_flight=k) for k in (1, 4))
    flat_one, flat_four = (gen_side(flat, flat.pool, lay, in_flight=k) for k in (1, 4))
    assert four.decode < one.decode and flat_four.decode < flat_one.decode
    assert four.decode / one.decode < flat_four.decode / flat_one.decode
    # on-policy modes never have more than one step in flight
    assert rollout_steps_in_flight("sync", 4) == rollout_steps_in_flight("colocated", 4) == 1
    assert rollout_steps_in_flight("async", 4) == 4 and rollout_steps_in_flight("async", 1) == 1


def test_engines_that_take_requests_as_they_free_up_wait_for_no_slowest_share():
    """Where the target splits a step's samples over the engines in fixed shares (every synchronous mode,
    OpenRLHF's async trainer) the step waits for the engine whose share came out longest; NeMo-RL's and
    verl's async modes send requests to the engines as they free up (frameworks/runtime.yaml
    fixed_engine_shares): only the step's longest response is left, so the same engines decode faster.
    One replica has no other to wait for; `any` takes the fact only where every framework holds it."""
    nemo, verl, orl, any_ = (framework_costs(f) for f in ("nemo-rl", "verl", "openrlhf", "any"))
    assert engine_shares_fixed("sync", nemo) and engine_shares_fixed("colocated", verl)
    assert not engine_shares_fixed("async", nemo) and not engine_shares_fixed("async", verl)
    assert engine_shares_fixed("async", orl) and not engine_shares_fixed("async", any_)
    tail = problem(rl={"response_len": {"max": 8192, "mean": 1024}})
    fixed, free = (gen_side(tail, tail.pool, GenLayout(tp=1, dp=8), fixed_shares=f) for f in (True, False))
    assert free.decode < fixed.decode
    one = [gen_side(tail, tail.pool, GenLayout(tp=1, dp=1), fixed_shares=f).decode for f in (True, False)]
    assert one[0] == one[1]


def test_deeper_staleness_gives_an_async_plan_a_shorter_rollout():
    """The solver prices an async engine with the staleness it is allowed (and the plan says so)."""
    spec = small_spec(rl={"response_len": {"max": 8192, "mean": 1024}}, constraints={"modes": ["async"]})
    shallow = solve(spec)
    deep = solve(small_spec(rl={"response_len": {"max": 8192, "mean": 1024}, "max_staleness": 4},
                            constraints={"modes": ["async"]}))
    assert deep.pipeline.staleness == 4
    assert deep.time_s.decode < shallow.time_s.decode
    assert deep.throughput.tokens_per_s >= shallow.throughput.tokens_per_s
    assert any("4 steps' rollouts as one stream" in line for line in deep.explanation)


def test_prefix_sharing_prefills_each_prompt_once():
    one = problem(rl={"prompts_per_step": 64, "samples_per_prompt": 1})
    many = problem(rl={"prompts_per_step": 64, "samples_per_prompt": 16})
    lay = GenLayout(tp=1, dp=8)
    assert gen_side(many, many.pool, lay).prefill == pytest.approx(gen_side(one, one.pool, lay).prefill, rel=0.05)


def test_async_overlaps_the_sides_sync_adds_them():
    p = problem()
    g = gen_side(p, p.pool, GenLayout(tp=1, dp=8))
    t = train_side(p, p.pool, TrainLayout(dp=8, zero_stage=3))
    s, a = combine(p, "sync", g, t), combine(p, "async", g, t)
    assert s.step == pytest.approx(g.time + s.sync + t.time)
    assert a.step < s.step and a.step >= max(g.time, t.time)


def test_reference_offload_trades_pcie_time_for_memory():
    p = problem()
    lay = TrainLayout(dp=8, zero_stage=3)
    on = train_aux(p, p.pool, lay, reference="training", reward="cpu", reward_quant="none")
    off = train_aux(p, p.pool, lay, reference="cpu_offload", reward="cpu", reward_quant="none")
    assert off[3] < on[3]             # less resident memory
    assert off[0] > on[0]             # more time: weights stream over PCIe


def test_reward_quantization_shrinks_reward_weights():
    p = problem(model={"reward": "llama-3.1-8b"})
    lay = TrainLayout(dp=8, zero_stage=3)
    full = train_aux(p, p.pool, lay, reference="cpu_offload", reward="training", reward_quant="none")[3]
    int8 = train_aux(p, p.pool, lay, reference="cpu_offload", reward="training", reward_quant="int8")[3]
    int4 = train_aux(p, p.pool, lay, reference="cpu_offload", reward="training", reward_quant="int4")[3]
    assert int8 == pytest.approx(full / 2, rel=0.01) and int4 == pytest.approx(full / 4, rel=0.01)


def test_lora_trains_and_syncs_only_adapters():
    full = problem()
    lora = problem(model={"lora_rank": 16})
    lay = TrainLayout(dp=8, zero_stage=1)
    tf, tl = train_side(full, full.pool, lay), train_side(lora, lora.pool, lay)
    assert tl.mem.optimizer < 0.02 * tf.mem.optimizer
    assert tl.train.total < tf.train.total
    g = GenLayout(tp=1, dp=8)
    assert sync_time(lora, lora.pool, lora.pool, g, 8, False)[0] < 0.05 * sync_time(full, full.pool, full.pool, g, 8, False)[0]


def test_full_space_oracle_agrees_with_pruned_cpsat():
    p = problem(cluster={"nodes": 1})
    plan = solve(small_spec(cluster={"nodes": 1}))
    assert round(plan.time_s.step * 1000) == pytest.approx(oracle(p), abs=2)


def test_colocated_refit_is_the_sum_of_its_mechanisms():
    """A colocated refit wakes the sleeping engine's weights from host memory (the measured wake
    rate, never above PCIe), reshards the new weights over NVLink, copies them into the engine's
    tensors and calls the weight loader per checkpoint tensor: one term each, no fitted floor. The
    wake dwarfs the NVLink reshard."""
    from rlsolve.perf.generate import GenLayout, weight_bytes_per_gpu
    from rlsolve.perf.hw import GB, constants
    from rlsolve.perf.hw import device
    from rlsolve.perf.step import colocated_wake_time, engine_load_time, sync_time
    from rlsolve.resolve import resolve
    from rlsolve.spec import Spec
    spec = Spec.model_validate({"cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 8},
                                "model": {"policy": "llama-3.1-8b"},
                                "rl": {"prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 256,
                                       "response_len": {"max": 2048, "mean": 512}}})
    prob = resolve(spec)
    lay = GenLayout(tp=1, pp=1, dp=8)
    dev = device(prob.pool)
    t, exposed = sync_time(prob, prob.pool, prob.pool, lay, 8, colocated=True)
    recv = weight_bytes_per_gpu(prob.policy, lay, 2.0)
    load = engine_load_time(prob, dev)  # 291 checkpoint tensors handed to the loader
    assert 0 < load < 0.05
    wake = colocated_wake_time(prob, dev, recv)
    assert wake == pytest.approx(max(recv / (constants()["engine_wake_gbps_per_gpu"] * GB), dev.pcie_time(recv)))
    assert wake >= dev.pcie_time(recv)
    bw, lat = dev.link(2)
    reshard = recv / bw + lat + dev.stream_time(2 * recv)
    assert t == exposed == pytest.approx(wake + reshard + load)
    assert reshard < 0.1 * wake
    assert 1.0 < t < 2.5  # 16 GB of BF16 Llama-3.1-8B per GPU woken at ~11 GB/s


def test_nemo_rl_refit_holds_the_trainers_offload():
    """NeMo-RL's colocated refit moves the trainer's states to host memory inside its refit timer
    (runtime.yaml refit_offloads_trainer_states): a Megatron trainer's parameters into their pinned
    host copy (PCIe), its optimizer state by .to('cpu') into fresh host memory (the measured
    host-offload rate; an FSDP trainer its weights, gradients and optimizer state that way); the way back stays PCIe in the switch. Frameworks without the fact keep the
    PCIe round trip in the switch. The step is the same sum either way, never below 2 x PCIe."""
    from rlsolve.perf.hw import GB, constants, device
    from rlsolve.perf.step import trainer_offload_time
    from rlsolve.perf.step import policy_memory
    for fw, expect_in_refit in (("nemo-rl", True), ("verl", False)):
        p = problem(target={"framework": fw})
        dev = device(p.pool)
        for lay in (TrainLayout(dp=8, zero_stage=1), TrainLayout(dp=8, zero_stage=3)):
            mem = policy_memory(p, lay)
            out, back = trainer_offload_time(p, dev, mem, 0.0, lay.zero_stage)
            pcie = dev.pcie_time(mem.states)
            assert back == pytest.approx(pcie if expect_in_refit else 2 * pcie)
            assert out + back >= 2 * pcie - 1e-12
            if not expect_in_refit:
                assert out == 0.0
                continue
            fresh = constants()["engine_sleep_offload_gbps_per_gpu"] * GB
            # an FSDP trainer's model.to('cpu') carries its gradients too where the framework's FSDP bytes
            # were read (runtime.yaml fsdp_trainer_bytes_per_param: NeMo-RL's DTensor worker)
            grads = mem.grads if p.workload.framework.fsdp_trainer_bytes is not None else 0.0
            moved = (dev.pcie_time(mem.weights) + mem.optimizer / fresh if lay.zero_stage < 3
                     else (mem.weights + grads + mem.optimizer) / fresh)
            assert out == pytest.approx(max(moved, pcie))
    p = problem(target={"framework": "nemo-rl"})
    g = gen_side(p, p.pool, GenLayout(tp=1, dp=8))
    t = train_side(p, p.pool, TrainLayout(dp=8, zero_stage=1))
    dev = device(p.pool)
    plain = combine(p, "colocated", g, t)
    off = combine(p, "colocated", g, t, offload_states=True)
    out, back = trainer_offload_time(p, dev, t.mem, t.states - t.mem.states, 1)
    assert off.sync == pytest.approx(plain.sync + out)
    assert off.switch == pytest.approx(plain.switch + back)
    assert off.step == pytest.approx(plain.step + out + back)


def test_colocated_engines_pay_their_sleep_every_step():
    """Colocated frameworks sleep the engine at level 1 after the rollout: its weights go to
    host memory at the measured rate. The switch term carries it; disaggregated engines keep
    their GPUs and pay nothing."""
    from rlsolve.perf.hw import GB, constants
    p = problem()
    g = gen_side(p, p.pool, GenLayout(tp=1, dp=16))
    t = train_side(p, p.pool, TrainLayout(dp=16, zero_stage=3))
    sleep = g.weights / (constants()["engine_sleep_offload_gbps_per_gpu"] * GB)
    assert 5.0 < sleep < 10.0  # 16 GB of BF16 Llama-3.1-8B per GPU at ~2.4 GB/s
    colo = combine(p, "colocated", g, t)
    assert colo.switch == pytest.approx(sleep)
    assert colo.step == pytest.approx(g.time + t.time + colo.sync + sleep)
    assert combine(p, "sync", g, t).switch == 0.0
    plan = solve(small_spec(constraints={"modes": ["colocated"]}))
    # (the plan prints both to 3 decimals: weights 2.01 GB, switch 0.836 s; compared within that rounding)
    assert plan.time_s.switch >= (plan.memory_gb_per_gpu.generation.weights - 0.005) / \
        constants()["engine_sleep_offload_gbps_per_gpu"] - 0.0005


def test_engine_memory_share_caps_the_kv_cache():
    """constraints.generation.gpu_memory_utilization is vLLM's flag: weights, KV cache and
    workspace stay within that share of the GPU (of what the device reports: vLLM multiplies the flag by
    torch's total memory), so less KV means a smaller running batch."""
    free = problem()
    capped = problem(constraints={"generation": {"gpu_memory_utilization": 0.4}})
    lay = GenLayout(tp=1, dp=16)
    a, b = gen_side(free, free.pool, lay), gen_side(capped, capped.pool, lay)
    assert b.weights + b.kv_cache + b.other == pytest.approx(0.4 * capped.pool.gpu.device_memory_bytes.value)
    assert b.kv_cache < a.kv_cache and b.decode >= a.decode
    plan = solve(small_spec(constraints={"modes": ["colocated"], "generation": {"gpu_memory_utilization": 0.4}}))
    assert plan.optimization.gpu_memory_utilization <= 0.4 + 1e-3
    g = plan.memory_gb_per_gpu.generation
    assert g.total - g.colocated_training <= 0.4 * g.capacity + 0.011


def test_engine_memory_share_too_small_is_infeasible_and_named():
    from rlsolve.errors import InfeasibleError
    with pytest.raises(InfeasibleError) as e:
        # 70B at TP 8 holds 17.6 GB of weights per GPU; a 0.1 share of 80 GB is 8 GB
        solve(small_spec(model={"policy": "llama-3.1-70b"}, constraints={"generation": {"gpu_memory_utilization": 0.1}}))
    assert "gpu_memory_utilization 0.1" in str(e.value)
