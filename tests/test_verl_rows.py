"""verl rows of the case files (issue 15): what `rlsolve cases` reads from a verl run's layout
beyond the shared fields, each tied to the verl behaviour it stands for."""
from __future__ import annotations

import copy

import pytest

from rlsolve.cases import predict_rl_step, rl_step_spec


def _row(**training) -> dict:
    """deepseek-llm-7b GRPO on one node of 8 H100 as verl's GSM8K example runs it (the ROCm blog's
    H100 row: 5120 samples, 80-sequence training micro-batches, 110 for the log-probs)."""
    return {
        "id": "verl-grpo", "kind": "rl_step", "source": "test",
        "hardware": {"gpu": "H100-SXM-80GB", "gpus": 8, "gpus_per_node": 8},
        "model": {"name": "deepseek-llm-7b-chat", "layers": 30, "hidden": 4096, "heads": 32, "kv_heads": 32,
                  "ffn": 11008, "vocab": 102400, "activation": "swiglu"},
        "precision": "bf16",
        "layout": {"algorithm": "grpo", "mode": "colocated", "staleness": 0,
                   "generation": {"tp": 2, "pp": 1, "gpus": 8, "enforce_eager": True, "max_num_seqs": 1024},
                   "training": {"tp": 1, "cp": 1, "pp": 1, "gpus": 8, "zero_stage": 3, "micro_batch": 80,
                                "logprob_micro_batch": 110, "recompute": "full", "sequence_packing": False,
                                **training},
                   "samples_per_step": 5120, "train_global_batch": 1280, "avg_seq_len": 133, "prompt_len": 83,
                   "max_seq_len": 1107, "clip_ratio": 0.0, "framework": "verl", "engine": "vllm",
                   "engine_version": "0.6.3", "train_strategy": "fsdp", "gpu_memory_utilization": 0.4,
                   "offload": "none"},
        "measured": {"step_s": 100.0, "phases_measured_s": {"generation": 50.0, "train": 30.0}},
    }


@pytest.fixture(scope="module")
def unpadded():
    return predict_rl_step(_row(remove_padding=True), headroom=False)


def test_padded_micro_batches_of_80_do_not_fit_an_h100(unpadded):
    # 80 sequences sized at the 1107-token cap: the activations alone pass 80 GB
    padded = predict_rl_step(_row(), headroom=False)
    assert not padded.modelled and "does not fit in GPU memory" in padded.note


def test_remove_padding_sizes_memory_for_the_real_tokens_and_leaves_the_time(unpadded):
    """verl's use_remove_padding runs each fixed micro-batch on its sequences' own tokens (flash-attn
    varlen), so the same run fits; the time model already computes mean-length sequences."""
    assert unpadded.modelled and unpadded.error is not None
    # the time terms do not depend on the memory sizing: the same row with a micro-batch small
    # enough to fit padded trains in the same time per token within the micro-batch effect
    small = predict_rl_step(_row(micro_batch=8, logprob_micro_batch=8), headroom=False)
    assert small.modelled
    assert unpadded.extra["phases_s"]["generation"] == pytest.approx(small.extra["phases_s"]["generation"], rel=1e-6)


def test_verl_generation_is_compared_with_the_refit_inside_it(unpadded):
    """verl's `gen` timer holds the hybrid engine's weight load: without a measured weight_sync the
    row's generation is scored against the plan's generation + weight_sync."""
    ph = unpadded.extra["phases_s"]
    assert ph["weight_sync"] == 0.0 and ph["generation"] > 0
    assert any("weight_sync" in a for a in unpadded.extra["assumed"])
    row = _row(remove_padding=True)
    row["measured"]["phases_measured_s"]["weight_sync"] = 2.0
    apart = predict_rl_step(row, headroom=False)
    assert apart.extra["phases_s"]["weight_sync"] > 0
    assert ph["generation"] == pytest.approx(apart.extra["phases_s"]["generation"]
                                             + apart.extra["phases_s"]["weight_sync"], rel=1e-6)
    assert not any("weight_sync" in a for a in apart.extra["assumed"])


def test_a_run_without_reference_policy_has_no_reference_pass(unpadded):
    row = _row(remove_padding=True)
    row["layout"]["reference"] = "none"
    assert rl_step_spec(row)["model"]["reference"] is None
    bare = predict_rl_step(row, headroom=False)
    assert unpadded.extra["phases_s"]["reference"] > 0
    assert bare.extra["phases_s"]["reference"] == 0.0
    assert bare.predicted < unpadded.predicted
    # a row that says nothing keeps the framework's reference
    kept = copy.deepcopy(_row(remove_padding=True))
    assert rl_step_spec(kept)["model"]["reference"] == "policy"


def test_busiest_rank_share_follows_order_statistics():
    """verl's fixed-count unpadded micro-batches: the busiest of dp ranks' micro-batch token sums."""
    from rlsolve.perf.generate import expected_max_std_normal
    from rlsolve.perf.train import unpadded_busiest_share
    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / 3.141592653589793 ** 0.5, rel=1e-6)
    assert expected_max_std_normal(8) == pytest.approx(1.42360, rel=1e-5)  # tabulated order statistic
    args = (83, 133, 1107 - 83, 0.0)
    assert unpadded_busiest_share(80, 640, *args, 1) == 1.0           # one rank waits for nobody
    assert unpadded_busiest_share(640, 640, *args, 8) == 1.0          # a rank's whole (balanced) share
    small, large = unpadded_busiest_share(8, 640, *args, 8), unpadded_busiest_share(80, 640, *args, 8)
    assert small > large > 1.0                                         # fewer sequences: wider spread
    assert unpadded_busiest_share(80, 640, *args, 16) > large          # more ranks: a slower busiest one


def test_unpadded_zero3_passes_run_at_the_busiest_rank(unpadded):
    """FSDP gathers every layer over the ranks, so the unpadded row's passes run at the busiest
    rank's micro-batch; Megatron-style ZeRO-1 ranks meet only at the gradient reduction."""
    from dataclasses import replace as _replace
    from types import SimpleNamespace

    from rlsolve.perf import step as S
    from rlsolve.perf.train import TrainLayout
    wl = dict(samples=5120, prompt_len=83, response_mean=133, response_max=1024, clip_ratio=0.0, packed_tokens=None)
    lay = TrainLayout(tp=1, pp=1, dp=8, micro_batch=80, zero_stage=3)
    seq, attn = S._unpadded_busiest(SimpleNamespace(**wl, unpadded=True), lay, 216.0, 300.0)
    assert seq > 216.0 and attn / 300.0 == pytest.approx(seq / 216.0)  # its sequences longer, attention with them
    assert S._unpadded_busiest(SimpleNamespace(**wl, unpadded=True), _replace(lay, zero_stage=1), 216.0, 300.0) == \
        (216.0, 300.0)
    assert S._unpadded_busiest(SimpleNamespace(**wl, unpadded=False), lay, 216.0, 300.0) == (216.0, 300.0)


def test_fsdp2_copies_are_charged_to_verl_fsdp2_only():
    """verl's fsdp2 strategy runs torch FSDP2 (copy-out of every unshard, fp32 reduce-scatter copy-in on
    the compute stream); its default fsdp (FSDP1) uses views of the gathered flat parameter."""
    from rlsolve.frameworks.runtime import framework_costs
    assert framework_costs("verl", strategy="fsdp2").fsdp_copy_bytes == (4, 10)
    assert framework_costs("verl", strategy="fsdp").fsdp_copy_bytes is None
    assert framework_costs("verl").fsdp_copy_bytes is None                     # default strategy: fsdp
    assert framework_costs("nemo-rl").fsdp_copy_bytes == framework_costs("nemo-rl", strategy="megatron").fsdp_copy_bytes
    fsdp1 = predict_rl_step(_row(remove_padding=True), headroom=False)
    row = _row(remove_padding=True)
    row["layout"]["train_strategy"] = "fsdp2"
    fsdp2 = predict_rl_step(row, headroom=False)
    for phase in ("old_logprob", "train"):
        assert fsdp2.extra["phases_s"][phase] > fsdp1.extra["phases_s"][phase]
    assert fsdp2.extra["phases_s"]["generation"] == pytest.approx(fsdp1.extra["phases_s"]["generation"], rel=1e-9)


def test_verl_before_0_7_asks_its_rollout_for_log_probs():
    """verl's synchronous vLLM rollout built SamplingParams(logprobs=0) up to v0.6.1 (vllm_rollout.py
    v0.3.0.post0 lines 120-123); v0.7.0's async rollout asks only with calculate_log_probs. A row that
    states an earlier release pays the engine's host work per sequence for them; one that names none
    gets the current release's."""
    from rlsolve.frameworks.runtime import framework_costs
    assert framework_costs("verl", "0.3.0.post0").rollout_logprobs is True
    assert framework_costs("verl", "0.2.0.dev").rollout_logprobs is True
    assert framework_costs("verl", "0.6.1").rollout_logprobs is True
    assert framework_costs("verl", "0.7.0").rollout_logprobs is False
    assert framework_costs("verl").rollout_logprobs is False
    old, new = _row(remove_padding=True), _row(remove_padding=True)
    old["layout"]["framework_version"], new["layout"]["framework_version"] = "0.3.0.post0", "0.7.0"
    p_old, p_new = predict_rl_step(old, headroom=False), predict_rl_step(new, headroom=False)
    from rlsolve.perf.hw import constants
    # the extra host time is per running sequence and step: at least the rollout's response tokens per
    # engine (5120 x 133 over 4 engines) x decode_host_us_per_seq
    floor = 5120 * 133 / 4 * constants()["decode_host_us_per_seq"] * 1e-6
    extra = p_old.extra["phases_s"]["generation"] - p_new.extra["phases_s"]["generation"]
    assert extra >= floor * 0.99 and extra < floor * 1.5
    for phase in ("old_logprob", "reference", "train"):
        assert p_old.extra["phases_s"][phase] == pytest.approx(p_new.extra["phases_s"][phase], rel=1e-9)


def test_verl_reference_is_an_fsdp_shard_in_host_memory_copied_in_every_micro_batch(unpadded):
    """verl forces CPUOffload on its FSDP reference (fsdp_workers.py v0.3.0.post0 lines 251-253, main
    b178a3cd5 lines 523-526): a row that says nothing runs it there, sharded as the policy is, and each
    of a rank's log-prob micro-batches copies the rank's bf16 shard in again over PCIe."""
    import math

    from rlsolve.cases import _recipe_layout
    from rlsolve.perf.hw import device
    from rlsolve.perf.step import reference_micro_batches
    from rlsolve.resolve import resolve
    from rlsolve.spec import load_spec
    assert any("reference placement = cpu_offload" in a for a in unpadded.extra["assumed"])
    row = _row(remove_padding=True)
    problem = resolve(load_spec(rl_step_spec(row)))
    _, _, _, micro = _recipe_layout(row, problem.workload)
    from dataclasses import replace as _replace
    wl = _replace(problem.workload, **micro)
    from rlsolve.perf.train import TrainLayout
    lay = TrainLayout(tp=1, pp=1, dp=8, micro_batch=80, zero_stage=3)
    assert reference_micro_batches(wl, lay) == math.ceil(640 / 110) == 6
    ph = unpadded.extra["phases_s"]
    dev = device(problem.pool, problem.workload.precision, problem.profile)
    shard = problem.policy.total_params * 2 / 8
    # the reference pass is the old log-prob pass (same sharding, micro-batches and bf16 compute)
    # plus six copies of the shard; nothing else separates them
    assert ph["reference"] - ph["old_logprob"] == pytest.approx(6 * dev.pcie_time(shard), rel=0.02)


def test_the_per_micro_batch_reference_copies_hold_for_fsdp_layouts_only():
    """The fact is read in verl's FSDP workers: a Megatron-style (ZeRO-1) layout keeps the plain host-memory
    reference (one copy of its weights per step), an FSDP (ZeRO-3) layout copies its shard per micro-batch."""
    from dataclasses import replace as _replace

    from rlsolve.cases import _recipe_layout
    from rlsolve.perf.step import train_aux
    from rlsolve.perf.train import TrainLayout
    from rlsolve.resolve import resolve
    from rlsolve.spec import load_spec
    row = _row(remove_padding=True)
    problem = resolve(load_spec(rl_step_spec(row)))
    _, _, _, micro = _recipe_layout(row, problem.workload)
    verl = _replace(problem, workload=_replace(problem.workload, **micro))
    assert verl.workload.framework.reference_fsdp_cpu_offload
    plain = _replace(verl, workload=_replace(verl.workload, framework=_replace(verl.workload.framework,
                                                                              reference_fsdp_cpu_offload=False)))
    for zero, same in ((1, True), (3, False)):
        lay = TrainLayout(tp=1, pp=1, dp=8, micro_batch=80, zero_stage=zero)
        a = train_aux(verl, verl.pool, lay, reference="cpu_offload", reward="cpu", reward_quant="none")[0]
        b = train_aux(plain, plain.pool, lay, reference="cpu_offload", reward="cpu", reward_quant="none")[0]
        assert (a == pytest.approx(b, rel=1e-12)) is same


def test_verl_before_0_4_drivers_work_grows_with_the_samples():
    """verl 0.2-0.3's driver scores the batch sample by sample (NaiveRewardManager) and reshuffles it outside the
    named timers: its published AMD console logs (yushengsu-thu/verl_training_log deb1507ca074, 1,007 steps
    each) give timing_s/step minus the named timers 0.893 s at 5,120 samples (GRPO) and 0.184 s at 1,024
    (PPO). A stated release before 0.4.0 is charged that per sample and nothing per step; the current release
    (a plan names none) keeps verl#7412's 0.35 s per step whatever the batch."""
    from rlsolve.frameworks.runtime import framework_costs
    old = lambda n: framework_costs("verl", "0.3.0.post0", samples=n).orchestration_s  # noqa: E731
    assert old(5120) == pytest.approx(0.893, rel=0.01)
    assert old(1024) == pytest.approx(0.184, rel=0.05)
    assert framework_costs("verl", "0.2.0.dev", samples=5120).orchestration_s == pytest.approx(old(5120))
    for version in (None, "0.4.0", "0.9.1"):
        assert framework_costs("verl", version, samples=5120).orchestration_s == pytest.approx(0.35)
        assert framework_costs("verl", version, samples=64).orchestration_s == pytest.approx(0.35)


def test_the_verl_row_scores_its_drivers_work_as_other(unpadded):
    """The row states verl 0.3.0.post0 and 5,120 samples: its `other` phase is the driver's per-sample work
    (0.893 s in the same script's MI300 log), where the current release's 0.35 s would be charged otherwise."""
    row = _row(remove_padding=True)
    row["layout"]["framework_version"] = "0.3.0.post0"
    ph = predict_rl_step(row, headroom=False).extra["phases_s"]
    assert ph["other"] == pytest.approx(0.893, rel=0.02)
    assert unpadded.extra["phases_s"]["other"] == pytest.approx(0.35, abs=0.01)  # no release stated
