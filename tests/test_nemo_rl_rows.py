"""NeMo-RL rows of the case files (issue 15): what `rlsolve cases` reads from a NeMo-RL run's layout
beyond the shared fields, each tied to the NeMo-RL behaviour it stands for."""
from __future__ import annotations

import copy

import pytest
import yaml

from rlsolve.cases import predict_rl_step

from conftest import ROOT

EXTRA = ROOT / "benchmarks" / "data" / "extra_cases.yaml"


@pytest.fixture(scope="module")
def rows() -> dict:
    return {c["id"]: c for c in yaml.safe_load(EXTRA.read_text())["cases"]}


def test_a_skipped_old_logprob_pass_costs_nothing_and_leaves_the_other_phases(rows):
    """NeMo-RL's force_on_policy_ratio (v0.7.0 grpo.py grpo_train and async_grpo_train, opd.py
    _skip_prev_logprobs) skips the policy's prev_logprobs forward and keeps the reference one: on a
    colocated (additive) step the time saved is the old log-prob pass, every other phase as it was."""
    row = rows["nemorl07-qwen3-32b-grpo-onpolicy-bf16-32g"]
    assert row["layout"]["training"]["old_logprob_pass"] is False
    ran = copy.deepcopy(row)
    del ran["layout"]["training"]["old_logprob_pass"]
    skip, full = (predict_rl_step(r, headroom=False) for r in (row, ran))
    ps, pf = skip.extra["phases_s"], full.extra["phases_s"]
    assert ps["old_logprob"] == 0.0 < pf["old_logprob"]
    for phase in ("generation", "reference", "train", "weight_sync"):
        assert ps[phase] == pytest.approx(pf[phase], rel=1e-9), phase
    # (the steps and the phase are each rounded to the millisecond: three roundings of at most 0.5 ms)
    assert full.predicted - skip.predicted == pytest.approx(pf["old_logprob"], abs=1.5e-3)


def test_rows_that_skip_the_old_logprob_pass_train_once_per_rollout(rows):
    """force_on_policy_ratio requires train_global_batch_size == num_prompts_per_step x
    num_generations_per_prompt (NeMo-RL v0.7.0 grpo.py setup assertion): one optimizer step per
    rollout batch, so the policy that generated is the one that trains."""
    flagged = [r for r in rows.values() if r["kind"] == "rl_step"
               and (r["layout"].get("training") or {}).get("old_logprob_pass") is False]
    assert flagged
    for r in flagged:
        assert r["layout"]["train_global_batch"] == r["layout"]["samples_per_step"], r["id"]
        assert r["layout"]["framework"] == "nemo-rl" and "force_on_policy_ratio" in r["notes"], r["id"]


def _at_release(row: dict, version: str) -> dict:
    other = copy.deepcopy(row)
    other["layout"]["framework_version"] = version
    return other


def test_before_0_5_a_disaggregated_trainer_sends_its_optimizer_to_host_and_back_every_step(rows):
    """NeMo-RL before 0.5.0 (runtime.yaml logprob_prep_offloads_optimizer) moves the optimizer states to host
    memory in prepare_for_lp_inference and back in prepare_for_training every step; 0.5.0 keeps them on the GPUs
    unless offload_optimizer_for_logprob. On a disaggregated (async) row whose trainers bound the step, the
    round trip is the step's difference between the two releases, shown in `other` (NeMo-RL's
    logprob_inference_prep + training_prep), and it is the optimizer's bytes out at the fresh-host-memory rate and
    back over PCIe (what trainer_offload_time charges the optimizer)."""
    row = rows["nemorl04-llama3p1-8b-grpo-1stepoff-bf16-16g"]
    assert row["layout"]["mode"] == "async" and row["layout"]["framework_version"] == "0.4.0"
    old, new = (predict_rl_step(_at_release(row, v), headroom=False) for v in ("0.4.0", "0.5.0"))
    trip = old.extra["phases_s"]["other"]
    assert new.extra["phases_s"]["other"] == 0.0 < trip
    # the trainers bound this step (the two steps and the phase are each rounded to the millisecond: three
    # roundings of at most 0.5 ms)
    assert old.predicted - new.predicted == pytest.approx(trip, abs=1.5e-3)
    for phase in ("generation", "logprob", "train", "weight_sync"):
        assert old.extra["phases_s"][phase] == pytest.approx(new.extra["phases_s"][phase], rel=1e-9), phase
    # PR #1404 measured the two timers at 10 -> 1 s (Qwen3-235B) and 13 -> ~1 s (Qwen3-30B): seconds, not noise
    assert trip > 1.0


def test_a_colocated_refit_already_moves_the_optimizer_so_the_release_changes_nothing(rows):
    """Colocated, the refit's offload_before_refit has put the optimizer on the host before the log-prob
    passes (runtime.yaml refit_offloads_trainer_states), so the 0.4.0 prepare_for_lp_inference finds nothing
    to move: the step and every phase are the same at 0.4.0 and 0.5.0."""
    row = rows["nemorl04-llama3p1-8b-grpo-onpolicy-bf16-16g"]
    assert row["layout"]["mode"] == "colocated" and row["layout"]["offload"] != "none"
    old, new = (predict_rl_step(_at_release(row, v), headroom=False) for v in ("0.4.0", "0.5.0"))
    assert old.predicted == pytest.approx(new.predicted, rel=1e-12)
    for phase, t in old.extra["phases_s"].items():
        assert t == pytest.approx(new.extra["phases_s"][phase], rel=1e-12), phase


def test_only_nemo_rl_releases_before_0_5_make_the_round_trip():
    """The fact is read for NeMo-RL alone and held before 0.5.0; a plan for any framework (the cheapest
    framework's costs) and a plan that names no release (the current one's facts) never pay it."""
    from rlsolve.frameworks.runtime import framework_costs
    assert framework_costs("nemo-rl", "0.4.0").logprob_prep_offloads_optimizer
    assert framework_costs("nemo-rl", "0.3.0").logprob_prep_offloads_optimizer
    for fw, version in (("nemo-rl", "0.5.0"), ("nemo-rl", None), ("any", "0.4.0"), ("verl", "0.4.0"),
                        ("openrlhf", None)):
        assert not framework_costs(fw, version).logprob_prep_offloads_optimizer, (fw, version)


def test_the_round_trip_sits_on_the_training_side_outside_every_named_phase(rows):
    """Disaggregated, the trainers' optimizer round trip (the plan's switch) is NeMo-RL's logprob_inference_prep +
    training_prep: a log's `other`, not its generation, and a segment of the training lane of the step's figure,
    which then ends where the step does (the trainers bound this 1-step-off row)."""
    from rlsolve.cases import _score_recipe
    from rlsolve.logfit import model_phases
    from rlsolve.whatif.figdata import timeline_lanes
    plan, how, _ = _score_recipe(rows["nemorl04-llama3p1-8b-grpo-1stepoff-bf16-16g"], None)
    t = plan.time_s
    assert how == "recipe layout" and plan.pipeline.mode == "async" and t.switch > 1.0
    phases = model_phases(plan, refit_inside_generation=False)
    assert phases["other"] == t.switch
    assert phases["generation"] == pytest.approx(t.prefill + t.decode)
    lanes = timeline_lanes(plan).lanes
    training = lanes[1]
    assert [s.phase for s in training.segments].count("switch") == 1
    work = [s for s in training.segments if s.phase != "idle"]
    assert work[-1].end == pytest.approx(t.step, abs=0.01)


def test_the_reference_pass_runs_with_the_policys_sequence_parallelism(rows):
    """NeMo-RL swaps the reference's weights into the policy's own model (use_reference_model,
    runtime.yaml reference_swap_copies), so the reference pass is the old log-prob pass plus the weight
    copies, whatever the trainer's sequence parallelism: v0.3.0's Megatron recipes run TP without it
    (grpo_math_1B_megatron.yaml sequence_parallel: false) and their reference too."""
    row = rows["nemorl03-blog-llama3p1-70b-grpo-megatron-64g"]
    assert row["layout"]["training"]["tp"] > 1 and row["layout"]["training"]["sequence_parallel"] is False
    with_sp = copy.deepcopy(row)
    with_sp["layout"]["training"]["sequence_parallel"] = True
    off, on = (predict_rl_step(r, headroom=False).extra["phases_s"] for r in (row, with_sp))
    assert off["old_logprob"] > on["old_logprob"]  # the pass itself depends on it (unsharded elementwise work)
    swap = off["reference"] - off["old_logprob"]
    assert swap > 0.0
    # (phases are printed to the millisecond)
    assert on["reference"] - on["old_logprob"] == pytest.approx(swap, abs=2e-3)


def test_the_reference_swap_copies_the_policy_out_into_fresh_pinned_memory(rows):
    """NeMo-RL v0.3.0 megatron_policy_worker.py use_reference_model (lines 1142-1160) copies the policy's state
    dict out with .to('cpu', non_blocking=True, copy=True) into pinned host memory that PyTorch allocates for it
    every step, loads the reference's pinned copy in, and loads the policy's back: for the 70B TP4 PP4 row the
    reference pass is the old log-prob pass plus the busiest stage's 16-bit weights (20 of the 80 layers and the
    embedding or output layer, over TP 4) once at the 2.4 GB/s measured for such a copy (vLLM#48337's level-1
    sleep, constants.yaml engine_sleep_offload_gbps_per_gpu) and twice at H100 PCIe Gen5 (64 GB/s a direction
    at the 0.8 of line rate pinned copies reach, constants.yaml pcie_fraction)."""
    from rlsolve.models.catalog import find_model
    row = rows["nemorl03-blog-llama3p1-70b-grpo-megatron-64g"]
    assert (row["layout"]["training"]["tp"], row["layout"]["training"]["pp"]) == (4, 4)
    a = find_model("llama-3.1-70b")
    embedding = a.vocab * a.hidden
    per_layer = (a.total_params - 2 * embedding) / a.layers
    stage_bytes = 2 * (a.layers / 4 * per_layer + embedding) / 4
    assert 9.0e9 < stage_bytes < 9.2e9
    want = stage_bytes / 2.4e9 + 2 * stage_bytes / (0.8 * 64e9)  # ~3.78 + 0.35 s
    phases = predict_rl_step(row, headroom=False).extra["phases_s"]
    # (phases are printed to the millisecond)
    assert phases["reference"] - phases["old_logprob"] == pytest.approx(want, abs=2e-3)
