"""benchmarks/rl_train_terms.py: the model's update and log-prob phases of RL rows, term by term
(issue #15, phase train)."""
from __future__ import annotations

import pytest
import yaml

from conftest import ROOT, load_benchmark
from rlsolve.cases import predict_rl_step


@pytest.fixture(scope="module")
def terms():
    mod = load_benchmark("rl_train_terms")
    data = yaml.safe_load((ROOT / "benchmarks" / "data" / "extra_cases.yaml").read_text())
    rows = [c for c in data["cases"] if c["id"].startswith("nemorl03-")]
    return mod, rows


def test_terms_sum_to_the_scored_phases(terms):
    """The decomposition is the estimate `rlsolve cases` scores: its terms add up to the row's
    predicted train phase, its two log-prob passes to the logprob phase."""
    mod, rows = terms
    assert len(rows) >= 9
    for row in rows:
        r = mod.row_terms(row)
        assert r is not None, row["id"]
        phases = predict_rl_step(row, headroom=False).extra["phases_s"]
        assert sum(r["terms"].values()) == pytest.approx(r["train"], rel=1e-9)
        # (the plan's phases are printed to the millisecond)
        assert r["train"] == pytest.approx(phases["train"], abs=1e-3)
        assert r["old_logprob"] + r["reference"] == pytest.approx(phases["logprob"], abs=2e-3)


def test_slots_count_the_pipeline_fill(terms):
    """Per optimizer step the update runs m + pp - 1 slots; a pipeline of more stages runs more
    slots for the same micro-batches, and the per-slot figures divide the phase by them."""
    mod, rows = terms
    for row in rows:
        r = mod.row_terms(row)
        pp = int(r["layout"].split("pp")[1].split()[0])
        steps = row["layout"]["samples_per_step"] // row["layout"]["train_global_batch"]
        assert r["slots"]["train"] >= steps * pp
        model_ms, measured_ms = r["per_slot_ms"]["train"]
        assert model_ms * r["slots"]["train"] == pytest.approx(1e3 * r["train"])
        assert measured_ms * r["slots"]["train"] == pytest.approx(1e3 * r["measured"]["train"])


def test_rows_without_measured_phases_are_left_out(terms):
    mod, rows = terms
    row = {**rows[0], "measured": {"step_s": rows[0]["measured"]["step_s"]}}
    assert mod.row_terms(row) is None


def test_forward_rate_sets_the_reference_swap_apart(terms):
    """The forward rate is the measured log-prob timer less the modelled swap (reference pass less old
    pass) over twice the old pass: old 5 s, reference 9 s (swap 4 s), timer 20 s -> (20 - 4) / 10 = 1.6;
    none without the combined timer, a train phase or an old pass."""
    mod, rows = terms
    assert mod.forward_rate(5.0, 9.0, {"logprob": 20, "train": 30}) == pytest.approx(1.6)
    assert mod.forward_rate(5.0, 9.0, {"old_logprob": 8, "train": 30}) is None
    assert mod.forward_rate(5.0, 9.0, {"logprob": 20}) is None
    assert mod.forward_rate(0.0, 9.0, {"logprob": 20, "train": 30}) is None


def test_nemo_rl_rows_give_the_forward_rate(terms):
    """Every NeMo-RL v0.3 row measures the combined log-prob timer and a train phase, so each gets the
    rate, computed from its own modelled passes and measured timer."""
    mod, rows = terms
    for row in rows:
        r = mod.row_terms(row)
        assert r["forward_rate"] == pytest.approx(
            (float(r["measured"]["logprob"]) - (r["reference"] - r["old_logprob"])) / (2 * r["old_logprob"]))
