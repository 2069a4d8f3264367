"""Learning from the user's own runs (issue 16): the framework log readers on fixtures built
from each framework's logging code and published logs (sources in each fixture's header),
the fit `calibrate --from-log` runs, the profile it writes and that solve/cases read, and
every bad log (one line, exit 2, nothing written)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rlsolve.cases import score_cases
from rlsolve.cli.main import main
from rlsolve.errors import SpecError
from rlsolve.logfit import fit_log
from rlsolve.runlogs import parse_log_text, read_log
from rlsolve.runlogs.phases import phase_table
from rlsolve.solver.estimate import estimate

from conftest import ROOT

LOGS = ROOT / "tests" / "data" / "logs"
SPEC8B, LAY8B = str(LOGS / "llama8b_1n8g_spec.yaml"), str(LOGS / "llama8b_megatron_layout.yaml")
SPEC7B, LAY7B = str(LOGS / "qwen7b_8xh100_spec.yaml"), str(LOGS / "qwen7b_fsdp_layout.yaml")


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name, fmt, steps, last_total", [
    ("verl_console.log", "verl-console", [1, 2, 3, 4], 95.912),
    ("verl.jsonl", "verl-jsonl", [1, 2, 3, 4], 95.912),
    ("wandb_history.csv", "wandb-csv", [1, 2, 3, 4], 95.912),
    ("nemo_rl_grpo.log", "nemo-rl", [1, 2, 3], 111.63),
    ("nemo_rl_async_pr1052.log", "nemo-rl", [7, 8], 66.55),
    ("openrlhf.log", "openrlhf", [1, 2, 3], 149.6),
])
def test_each_format_is_detected_and_read_without_its_truncated_line(name, fmt, steps, last_total):
    log = read_log(str(LOGS / name))
    assert log.format == fmt
    assert [s.step for s in log.steps] == steps        # validation-only and truncated lines are not steps
    table = phase_table(log)
    assert table.steps[-1].total == pytest.approx(last_total)
    assert "generation" in table.steps[-1].phases and "train" in table.steps[-1].phases


def test_verl_timers_map_to_phases_and_the_quoted_step_is_read_exactly():
    log = read_log(str(LOGS / "verl_console.log"))
    step3 = next(s for s in phase_table(log).steps if s.step == 3)
    # the example step quoted in the issue: gen 74.020, old_log_prob 3.566 + ref 3.420, update_actor 14.302
    assert step3.phases["generation"] == pytest.approx(74.020)
    assert step3.phases["logprob"] == pytest.approx(3.566 + 3.420)
    assert step3.phases["train"] == pytest.approx(14.302)
    assert step3.phases["other"] == pytest.approx(0.811 + 0.245)   # reward, adv: no model term
    assert step3.response_len == pytest.approx(324.958)
    assert phase_table(log).refit_inside_generation  # no update_weights timer: refit happens inside gen


def test_nemo_rl_nested_refit_timer_is_not_counted_twice():
    t = phase_table(read_log(str(LOGS / "nemo_rl_grpo.log")))
    s = t.steps[1]
    assert s.phases["refit"] == pytest.approx(5.10)          # prepare_for_generation/total only
    assert s.response_len == pytest.approx(795.2)
    assert not t.unplaced


def test_nemo_rl_v03_refit_timer_is_the_refit_and_the_rest_is_other():
    # NeMo-RL v0.2.1-v0.3.1 time the refit as plain "prepare_for_generation" (v0.3.0 nemo_rl/algorithms/grpo.py
    # line 542, the blog's "Refit" column; "prepare_for_generation/total" from v0.4.0); the step's other timers
    # there are data_processing (twice, lines 528 and 606), reward_calculation (584), logprob_inference_prep (649)
    # and training_prep (662); the environment's reward runs inside `generation` (experience/rollouts.py line 399)
    def block(n: int) -> str:
        return "\n".join([
            f"========================= Step {n}/30 =========================",
            "  \u2022 Mean Generation Length: 795.0000",
            "\u23f1\ufe0f  Timing:",
            "  \u2022 Total step time: 112.00s",
            "  \u2022 generation: 58.00s (51.8%)",
            "  \u2022 policy_training: 28.00s (25.0%)",
            "  \u2022 policy_and_reference_logprobs: 18.00s (16.1%)",
            "  \u2022 prepare_for_generation: 5.00s (4.5%)",
            "  \u2022 training_prep: 1.20s (1.1%)",
            "  \u2022 logprob_inference_prep: 0.90s (0.8%)",
            "  \u2022 data_processing: 0.60s (0.5%)",
            "  \u2022 reward_calculation: 0.05s (0.0%)"])
    t = phase_table(parse_log_text("\n\n".join(block(n) for n in (22, 23))))
    assert not t.unplaced
    s = t.steps[-1]
    assert s.phases["refit"] == pytest.approx(5.00)
    assert s.phases["other"] == pytest.approx(1.20 + 0.90 + 0.60 + 0.05)
    # every timer of the step is placed, so the phases leave only the untimed remainder of the step
    assert s.total - sum(s.phases.values()) == pytest.approx(112.00 - 58 - 28 - 18 - 5 - 2.75)


def test_nemo_rl_validation_inside_a_step_is_taken_out_of_it():
    # validate() runs inside the step's total_step_time and prints its own block before the step's Timing
    # (v0.3.0 grpo.py lines 675-691 and 913-915; v0.7.0 lines 2758-2787 and 3270-3272); a validation before
    # the first step (val_at_start) belongs to no step
    def validation(t: float) -> list[str]:
        return ["\U0001f4ca Validation Results:", "    \u2022 Accuracy: 0.5000",
                "  \u23f1\ufe0f  Validation Timing:", f"    \u2022 Total validation time: {t:.2f}s"]

    def block(n: int, total: float, val: float | None = None) -> str:
        return "\n".join([f"========================= Step {n}/30 =========================",
                          *(validation(val) if val is not None else []),
                          "\u23f1\ufe0f  Timing:",
                          f"  \u2022 Total step time: {total:.2f}s",
                          "  \u2022 generation: 58.00s (50.0%)",
                          "  \u2022 policy_training: 28.00s (25.0%)",
                          "  \u2022 data_processing: 1.00s (1.0%)"])
    text = "\n\n".join(["\n".join(validation(40.0)), block(9, 90.0), block(10, 125.0, 35.0), block(11, 90.0)])
    log = parse_log_text(text)
    t = phase_table(log)
    assert [s.step for s in t.steps] == [9, 10, 11]
    assert [s.total for s in t.steps] == pytest.approx([90.0, 90.0, 90.0])  # step 10 less its validation
    assert t.excluded == {"total_validation_time": pytest.approx(35.0 / 3)}
    assert "total_validation_time" not in log.steps[0].timers  # val_at_start's 40 s is no step's


def test_a_timer_of_no_known_phase_is_reported_not_folded():
    text = "\n".join(f"step:{i} - timing_s/gen:10.0 - timing_s/update_actor:5.0 - timing_s/mystery:2.0 - "
                     f"timing_s/step:18.0" for i in (1, 2, 3))
    t = phase_table(parse_log_text(text))
    assert t.unplaced == {"mystery": pytest.approx(2.0)}
    assert "mystery" not in t.steps[0].phases


def test_fit_reproduces_the_run_and_sets_only_identifiable_factors():
    fit = fit_log(SPEC8B, LAY8B, read_log(str(LOGS / "nemo_rl_grpo.log")))
    assert fit.steps_used == [2, 3]
    for phase, r in fit.residuals().items():
        assert abs(r) < 0.01, phase
    assert set(fit.factors) == {"train_efficiency", "logprob_efficiency", "colocated_refit_gbps_per_gpu",
                                "step_overhead_s", "decode_step_overhead_us"}
    assert "hbm_fraction" in fit.unidentified
    # generation took longer than the model said, so the host time per decode step went up
    assert fit.factors["decode_step_overhead_us"].value > fit.factors["decode_step_overhead_us"].model_value
    assert fit.not_modelled["data_processing"] == pytest.approx(0.9)


def test_async_log_leaves_generation_unidentified():
    spec = yaml.safe_load(Path(SPEC8B).read_text())
    spec["constraints"]["modes"] = ["async"]
    spec["rl"]["max_staleness"] = 1
    lay = yaml.safe_load(Path(LAY8B).read_text())
    lay["pipeline"] = {"mode": "async", "staleness": 1}
    lay["resource_allocation"] = {"generation": {"gpus": 4}, "training": {"gpus": 4}}
    lay["parallelism"]["generation"]["dp"] = 4
    lay["parallelism"]["training"].update(dp=2)
    fit = fit_log(spec, lay, read_log(str(LOGS / "nemo_rl_async_pr1052.log")), warmup=0)
    assert "decode_step_overhead_us" in fit.unidentified and "step_overhead_s" in fit.unidentified
    assert "train_efficiency" in fit.factors


@pytest.mark.parametrize("key, value, term", [
    ("train_efficiency", 0.5, "train"), ("logprob_efficiency", 0.5, "old_logprob")])
def test_each_factor_acts_on_its_own_term(key, value, term):
    base = estimate(SPEC8B, LAY8B).time_s
    got = estimate(SPEC8B, LAY8B, profile={"H100-SXM-80GB": {key: value}}).time_s
    assert getattr(got, term) == pytest.approx(2 * getattr(base, term), rel=0.02)
    assert got.decode == pytest.approx(base.decode)


def test_refit_factor_scales_the_engines_wake_alone():
    """colocated_refit_gbps_per_gpu is the rate of the refit's wake of the engine's weights: half the
    rate adds one more wake to weight_sync, and nothing else moves."""
    from rlsolve.perf.hw import constants
    rate = constants()["engine_wake_gbps_per_gpu"]
    plan = estimate(SPEC8B, LAY8B)
    base = plan.time_s
    got = estimate(SPEC8B, LAY8B, profile={"H100-SXM-80GB": {"colocated_refit_gbps_per_gpu": rate / 2}}).time_s
    wake = plan.memory_gb_per_gpu.generation.weights / rate
    assert got.weight_sync - base.weight_sync == pytest.approx(wake, rel=0.02, abs=0.002)
    assert (got.decode, got.train, got.switch) == pytest.approx((base.decode, base.train, base.switch))


def test_overhead_factors_add_their_time():
    base = estimate(SPEC8B, LAY8B).time_s
    got = estimate(SPEC8B, LAY8B, profile={"H100-SXM-80GB": {"step_overhead_s": 7.0,
                                                               "decode_step_overhead_us": 11500.0}}).time_s
    assert got.decode > base.decode + 1.0
    assert got.step - base.step == pytest.approx(7.0 + got.decode - base.decode, abs=0.01)


def test_cli_calibrate_writes_the_profile_solve_and_cases_read(tmp_path):
    out = tmp_path / "profile.yaml"
    r = run("calibrate", "--from-log", str(LOGS / "nemo_rl_grpo.log"), "--spec", SPEC8B, "--layout", LAY8B,
            "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "decode_step_overhead_us" in r.output and "not identified" in r.output
    doc = yaml.safe_load(out.read_text())
    meta = doc["calibrated_from_log"]
    assert meta["framework"] == "nemo-rl" and meta["steps_used"] == [2, 3]
    assert "hbm_fraction" in meta["not_identified"] and "data_processing" in meta["not_modelled_timers_s"]
    assert all(abs(v) < 0.01 for v in meta["residual"].values())
    r = run("solve", SPEC8B, "--profile", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    # starting from another profile (a torch calibrate's): its keys stay, the fitted ones are added
    base = tmp_path / "torch.yaml"
    base.write_text(yaml.safe_dump({"profile": {"H100-SXM-80GB": {"gemm_fraction": 0.7}}}))
    both = tmp_path / "both.yaml"
    r = run("calibrate", "--from-log", str(LOGS / "nemo_rl_grpo.log"), "--spec", SPEC8B, "--profile", str(base),
            "--out", str(both))
    assert r.exit_code == 0, r.output
    merged = yaml.safe_load(both.read_text())["profile"]["H100-SXM-80GB"]
    assert merged["gemm_fraction"] == 0.7 and "train_efficiency" in merged
    # cases --profile: a train row on the profile's GPU gets the fitted training efficiency
    row = {"id": "t", "kind": "train", "hardware": {"gpu": "H100-SXM-80GB", "gpus": 8},
           "model": {"name": "llama-3.1-8b"}, "precision": "bf16",
           "layout": {"tp": 1, "pp": 1, "dp": 8, "global_batch": 64, "seq_len": 4096},
           "measured": {"tokens_per_s_per_gpu": 1000}}
    eff = doc["profile"]["H100-SXM-80GB"]["train_efficiency"]
    plain = score_cases({"cases": [row]}).rows[0].predicted
    calibrated = score_cases({"cases": [row]}, profile=doc["profile"]).rows[0].predicted
    assert calibrated == pytest.approx(plain * eff, rel=1e-6)
    cases_file = tmp_path / "cases.yaml"
    cases_file.write_text(yaml.safe_dump({"version": 1, "cases": [row]}))
    r = run("cases", str(cases_file), "--profile", str(out))
    assert r.exit_code == 0 and f"{calibrated:,.4g}" in r.output


def test_profile_check_knows_the_log_factors(tmp_path):
    """The --profile check (issue 17) accepts what calibrate --from-log writes: its factor keys,
    and a per-step overhead of 0 (a run with no framework time outside the phases)."""
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"profile": {"H100-SXM-80GB": {"step_overhead_s": 0.0, "train_efficiency": 0.8}}}))
    assert run("solve", SPEC8B, "--profile", str(prof), "--format", "json").exit_code == 0
    prof.write_text(yaml.safe_dump({"profile": {"H100-SXM-80GB": {"train_efficiency": 0.0}}}))
    r = run("solve", SPEC8B, "--profile", str(prof))
    assert r.exit_code == 2 and "train_efficiency must be a positive number" in r.output
    prof.write_text(yaml.safe_dump({"profile": {"H100-SXM-80GB": {"step_overhead_s": -1.0}}}))
    r = run("solve", SPEC8B, "--profile", str(prof))
    assert r.exit_code == 2 and "non-negative" in r.output


def test_calibrate_from_log_never_writes_over_its_inputs(tmp_path):
    log = tmp_path / "run.log"
    log.write_text((LOGS / "nemo_rl_grpo.log").read_text())
    r = run("calibrate", "--from-log", str(log), "--spec", SPEC8B, "--layout", LAY8B, "--out", str(log))
    assert r.exit_code == 2 and "input" in r.output
    assert log.read_text() == (LOGS / "nemo_rl_grpo.log").read_text()


def test_cli_explain_log_shows_phases_and_the_replan():
    r = run("explain", SPEC8B, LAY8B, "--log", str(LOGS / "nemo_rl_grpo.log"))
    assert r.exit_code == 0, r.output
    assert "measured vs predicted" in r.output and "where the time went" in r.output
    assert "re-plan under the calibrated profile" in r.output and "tokens/s predicted" in r.output


BAD = {
    "empty": "",
    "truncated": "step:1 - timing_s/gen:10.0 - timing_s/upd\nstep:2 - timing_s/gen:1",
    "another program's": "epoch 1 loss 0.3\nepoch 2 loss 0.2\n",
    "one step": "step:1 - timing_s/gen:10.0 - timing_s/update_actor:5.0 - timing_s/step:16.0\n",
    "no training timer": "\n".join(f"step:{i} - timing_s/gen:10.0 - timing_s/step:11.0" for i in (1, 2, 3)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_logs_exit_2_with_one_line_and_write_nothing(tmp_path, case):
    log = tmp_path / "run.log"
    log.write_text(BAD[case])
    out = tmp_path / "profile.yaml"
    r = run("calibrate", "--from-log", str(log), "--spec", SPEC7B, "--layout", LAY7B, "--out", str(out))
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: --")
    assert not out.exists()


def test_binary_wrong_format_and_missing_inputs_exit_2(tmp_path):
    out = tmp_path / "p.yaml"
    binary = tmp_path / "run.bin"
    binary.write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    nemo = str(LOGS / "nemo_rl_grpo.log")
    for args in (["--from-log", str(binary), "--spec", SPEC7B, "--layout", LAY7B],
                 ["--from-log", nemo, "--log-format", "openrlhf", "--spec", SPEC8B, "--layout", LAY8B],
                 ["--from-log", str(LOGS / "openrlhf.log"), "--spec", SPEC8B],  # no layout, none printed
                 ["--from-log", nemo, "--layout", LAY8B],                    # no spec
                 ["--from-log", str(tmp_path / "missing.log"), "--spec", SPEC8B, "--layout", LAY8B]):
        r = run("calibrate", *args, "--out", str(out))
        assert r.exit_code == 2, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1
        assert not out.exists()
    with pytest.raises(SpecError, match="--log-format"):
        parse_log_text("x", "nope")


def test_layout_is_read_from_the_config_the_framework_printed():
    nemo = read_log(str(LOGS / "nemo_rl_grpo.log"))
    from_log = fit_log(SPEC8B, None, nemo)
    given = fit_log(SPEC8B, LAY8B, nemo)
    assert from_log.after == pytest.approx(given.after)
    assert from_log.notes[0].startswith("layout read from the config NeMo-RL printed")
    verl = read_log(str(LOGS / "verl_console.log"))
    from rlsolve.runlogs.config import layout_from_config
    lay, how = layout_from_config(verl.config, "verl")
    assert lay["parallelism"]["generation"] == {"tp": 2, "pp": 1, "dp": 4}
    t = lay["parallelism"]["training"]
    assert (t["dp"], t["zero_stage"], t["micro_batch"], t["recompute"]) == (8, 3, 40, "full")
    assert read_log(str(LOGS / "openrlhf.log")).config is None   # OpenRLHF prints none: --layout is needed
