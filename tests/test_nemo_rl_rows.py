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
    # (the step and each phase are printed to the millisecond: their difference is within two roundings)
    assert full.predicted - skip.predicted == pytest.approx(pf["old_logprob"], abs=1e-3)


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
