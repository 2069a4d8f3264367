"""Calibrate the model on a run the user already made: fit a few interpretable factors to
the per-step phase timings a framework printed (`rlsolve calibrate --from-log`), and write
them as a profile that `solve --profile` and `cases --profile` read.

Every factor acts through one hook of the model (rlsolve/perf/hw.py `Device`), is fitted by
least squares over the steps after warm-up (each phase's model time is linear in its own
factor, or in its inverse, so the least-squares fit of one phase is closed form) and is
clipped to physical bounds. A factor the log cannot identify is kept at the model's value
and listed with the reason. Pure: no printing, no files."""
from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsolve.errors import SpecError
from rlsolve.perf.hw import GB, device
from rlsolve.resolve import resolve
from rlsolve.runlogs import RunLog
from rlsolve.runlogs.config import layout_from_config
from rlsolve.runlogs.phases import PHASES, PhaseTable, phase_table
from rlsolve.reader import read_yaml
from rlsolve.spec import load_spec

# factor -> (profile key, lower bound, upper bound, what it is)
FACTORS = {
    "decode_step_overhead_us": (100.0, 500_000.0, "engine host time per decode step, us (generation)"),
    "train_efficiency": (0.05, 2.0, "share of the model's training speed reached (policy update)"),
    "logprob_efficiency": (0.05, 2.0, "share of the model's forward speed reached (log-prob passes)"),
    "colocated_refit_gbps_per_gpu": (0.05, 1000.0, "colocated refit: rate of the engine's wake per GPU, GB/s"),
    "step_overhead_s": (0.0, 3600.0, "framework time per step outside the modelled phases, s"),
}
MIN_STEPS = 2


@dataclass
class FactorFit:
    value: float
    model_value: float          # the model's value before the fit
    at_bound: bool
    phase: str                  # the phase it was fitted to


@dataclass
class LogFit:
    gpu: str
    framework: str
    log_format: str
    steps_used: list[int]
    warmup_steps: int
    mode: str
    measured: dict[str, float]            # canonical phase -> mean s over the steps used
    measured_step: float
    spread: dict[str, float]              # phase -> coefficient of variation over the steps
    before: dict[str, float]              # predicted by the model as it was
    after: dict[str, float]               # predicted with the fitted profile
    factors: dict[str, FactorFit]
    unidentified: dict[str, str]          # factor -> why the log cannot fit it
    not_modelled: dict[str, float]        # framework timer -> mean s the model has no term for
    excluded: dict[str, float]            # timer -> mean s taken out of the step (validation, checkpoints)
    response_len_mean: float | None
    profile: dict[str, dict[str, float]]  # the profile: GPU name -> overrides
    notes: list[str] = field(default_factory=list)
    layout_from_log: dict | None = None   # the layout read from the printed config (no --layout given)

    def residuals(self) -> dict[str, float]:
        """predicted / measured - 1 per phase the log shows, after the fit (and the step)."""
        out = {p: self.after[p] / m - 1.0 for p, m in self.measured.items() if m > 0}
        out["step"] = self.after["step"] / self.measured_step - 1.0
        return out

    def residuals_before(self) -> dict[str, float]:
        out = {p: self.before[p] / m - 1.0 for p, m in self.measured.items() if m > 0}
        out["step"] = self.before["step"] / self.measured_step - 1.0
        return out


def model_phases(plan, refit_inside_generation: bool) -> dict[str, float]:
    """A plan's time terms summed into the canonical phases of rlsolve.runlogs.phases."""
    t = plan.time_s
    # colocated, the switch is the engine's sleep (timed inside the rollout) and the trainers' offload; disaggregated,
    # the trainers' own state round trip (perf.step.trainer_switch_time), outside every named phase
    colocated = plan.pipeline.mode == "colocated"
    gen = t.prefill + t.decode + (t.switch if colocated else 0.0) + (t.weight_sync if refit_inside_generation else 0.0)
    out = {"generation": gen, "logprob": t.old_logprob + t.reference + t.reward, "train": t.train,
           "critic": t.value, "refit": 0.0 if refit_inside_generation else t.weight_sync}
    out["other"] = max(0.0, t.step - sum(out.values())) if plan.pipeline.mode != "async" else t.switch
    out["step"] = t.step
    return out


def _spec_dict(spec: Any) -> dict:
    if isinstance(spec, dict):
        return copy.deepcopy(spec)
    if isinstance(spec, (str, Path)):
        return read_yaml(spec, what="--spec")
    return spec.model_dump(exclude_none=True)


def _layout(layout: Any) -> Any:
    if isinstance(layout, (str, Path)):
        return read_yaml(layout, what="--layout")
    return layout


def _estimate(spec: dict, layout: Any, profile: dict) -> Any:
    from rlsolve.solver.estimate import estimate
    return estimate(spec, layout, profile=profile)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _clip(name: str, v: float) -> tuple[float, bool]:
    lo, hi, _ = FACTORS[name]
    c = min(max(v, lo), hi)
    return c, abs(c - v) > 1e-12 * max(1.0, abs(v))


def fit_log(spec: Any, layout: Any, run: RunLog, *, warmup: int = 1, base_profile: dict | None = None) -> LogFit:
    """Fit the factors to `run` for `layout` (the layout that ran) on `spec`'s cluster; the
    first `warmup` steps are left out."""
    how = ""
    if layout is None:
        why = "it prints no configuration"
        if run.config is not None:
            layout, why = layout_from_config(run.config, run.framework)
            how = why
        if layout is None:
            raise SpecError(f"the log does not say which layout ran ({why}); give it (calibrate: --layout "
                            "layout.yaml; explain: the LAYOUT argument), a plan file or its layout sections",
                            field="--layout")
        layout = with_placement(spec, layout)
    table = phase_table(run)
    if len(table.steps) < MIN_STEPS:
        raise SpecError(f"the log has {len(table.steps)} step(s) with timings; at least {MIN_STEPS} are needed "
                        f"(the first is warm-up)", field="--from-log")
    warmup = max(0, min(warmup, len(table.steps) - 1))
    fit = fit_table(spec, layout, table, log_format=run.format, warmup=warmup, base_profile=base_profile)
    if how:
        fit.notes.insert(0, "layout " + how + ": " + _describe(layout))
        fit.layout_from_log = layout
    return fit


def with_placement(spec: Any, layout: dict) -> dict:
    """Where the spec's reference and critic run, for a layout read from a log (the
    frameworks keep them on the training GPUs)."""
    s = load_spec(_spec_dict(spec))
    return {**layout, "placement": {"reference": "training" if s.model.reference is not None else "none",
                                    "reward": "cpu" if s.model.reward in (None, "rule") else "training",
                                    "value": "training" if s.model.value is not None else "none"}}


def _describe(layout: dict) -> str:
    g, t = layout["parallelism"]["generation"], layout["parallelism"]["training"]
    return (f"generation tp {g['tp']} x {g['dp']} replicas; training tp {t['tp']} pp {t['pp']} cp {t['cp']} "
            f"dp {t['dp']} ZeRO-{t['zero_stage']} micro-batch {t['micro_batch']} recompute {t['recompute']}")


def fit_table(spec: Any, layout: Any, table: PhaseTable, *, log_format: str, warmup: int = 0,
              base_profile: dict | None = None) -> LogFit:
    """The fit itself, on a table of steps (from a log, or a source's published means)."""
    steps = table.steps[warmup:]
    for need in ("generation", "train"):
        if not any(need in s.phases for s in steps):
            raise SpecError(f"the log shows no {need} timer in its steps (missing phases: is it a partial or "
                            f"validation-only log?)", field="--from-log")
    spec_d = _spec_dict(spec)
    lay = _layout(layout)
    rlen = [s.response_len for s in steps if s.response_len is not None]
    notes: list[str] = []
    if rlen:
        mean_len = int(round(_mean(rlen)))
        resp = spec_d.setdefault("rl", {}).setdefault("response_len", {})
        if isinstance(resp, dict) and mean_len >= 1:
            resp["mean"] = min(mean_len, int(resp.get("max", mean_len)))
            notes.append(f"response length: the run's mean over the steps used ({mean_len} tokens) replaces the spec's")
    problem = resolve(load_spec(spec_d))
    base = copy.deepcopy(base_profile or {})

    measured = {p: _mean([s.phases.get(p, 0.0) for s in steps]) for p in PHASES if p != "other"}
    measured_step = _mean([s.total for s in steps])
    measured["other"] = max(0.0, measured_step - sum(measured.values()))
    measured = {p: v for p, v in measured.items() if v > 0 or p in ("generation", "train")}
    spread = {}
    for p in measured:
        xs = [s.phases.get(p, 0.0) for s in steps] if p != "other" else \
            [max(0.0, s.total - sum(v for k, v in s.phases.items() if k != "other")) for s in steps]
        m = _mean(xs)
        spread[p] = (statistics.pstdev(xs) / m) if m > 0 and len(xs) > 1 else 0.0

    plan0 = _estimate(spec_d, lay, base)
    before = model_phases(plan0, table.refit_inside_generation)
    mode = plan0.pipeline.mode
    pools = {p.name: p for p in problem.pools}
    gen_pool = pools.get(plan0.resource_allocation.generation.pool, problem.pool)
    train_pool = pools.get(plan0.resource_allocation.training.pool, problem.pool)
    prec = problem.spec.model.precision
    dev_gen = device(gen_pool, prec, base)
    dev_train = device(train_pool, prec, base)
    prof = copy.deepcopy(base)
    gen_over, train_over = prof.setdefault(gen_pool.gpu.name, {}), prof.setdefault(train_pool.gpu.name, {})
    factors: dict[str, FactorFit] = {}
    unidentified: dict[str, str] = {
        "hbm_fraction": "one generation timer per step gives one equation; the engine's host time per decode "
                        "step takes it (the bandwidth fraction needs runs at different batch sizes)",
        "engine_sleep_offload_gbps_per_gpu": "the engine's sleep is timed inside the generation timer",
    }

    def set_factor(name: str, target: dict, value: float, model_value: float, phase: str) -> None:
        v, hit = _clip(name, value)
        target[name] = v
        factors[name] = FactorFit(value=v, model_value=model_value, at_bound=hit, phase=phase)

    if before["train"] > 0:
        eff = dev_train.train_efficiency
        set_factor("train_efficiency", train_over, eff * before["train"] / measured["train"], eff, "train")
    if measured.get("logprob", 0) > 0 and before["logprob"] > 0:
        eff = dev_train.logprob_efficiency
        set_factor("logprob_efficiency", train_over, eff * before["logprob"] / measured["logprob"], eff, "logprob")
    else:
        unidentified["logprob_efficiency"] = "the log shows no log-prob timer" if before["logprob"] > 0 else \
            "the layout runs no log-prob pass on the training GPUs"
    if table.refit_inside_generation:
        unidentified["colocated_refit_gbps_per_gpu"] = "this framework version refits inside its generation timer"
    elif mode != "colocated":
        unidentified["colocated_refit_gbps_per_gpu"] = f"mode {mode}: the refit is a broadcast over the NICs, " \
                                                       "which no factor scales"
    elif measured.get("refit", 0) > 0 and before["refit"] > 0:
        # the rate scales the refit's wake of the engine's weights (perf/step.py colocated_wake_time);
        # the rest of the refit (reshard, load, gathers, the trainers' offload) stays as modelled
        rate = dev_gen.engine_wake_bytes_per_s / GB
        wake_gb = plan0.memory_gb_per_gpu.generation.weights
        rest = before["refit"] - max(wake_gb / rate, dev_gen.pcie_time(wake_gb * GB))
        if measured["refit"] > rest > -1.0 and wake_gb > 0:
            set_factor("colocated_refit_gbps_per_gpu", gen_over, wake_gb / (measured["refit"] - rest), rate, "refit")
        else:
            unidentified["colocated_refit_gbps_per_gpu"] = "the refit's terms besides the engine's wake already " \
                                                           "take the measured refit"
    else:
        unidentified["colocated_refit_gbps_per_gpu"] = "the log shows no refit timer"
    if mode == "async":
        unidentified["step_overhead_s"] = "async steps overlap generation and training; the remainder is not " \
                                          "a per-step cost"
    else:
        # the model's own "other" (the target framework's orchestration) stays; the profile adds the rest
        extra = dev_gen.step_overhead_s + measured.get("other", 0.0) - before["other"]
        set_factor("step_overhead_s", gen_over, max(0.0, extra), dev_gen.step_overhead_s, "other")

    # generation: linear in the host time per decode step (the decode-step count does not
    # depend on it), so two evaluations give the least-squares value exactly
    if mode == "async":
        unidentified["decode_step_overhead_us"] = "async generation is overlapped; its exposed part is not the " \
                                                  "model's generation time"
    else:
        o1 = dev_gen.decode_step_overhead_s * 1e6
        gen_over["decode_step_overhead_us"] = o1
        g1 = model_phases(_estimate(spec_d, lay, prof), table.refit_inside_generation)["generation"]
        o2 = o1 + 5000.0
        gen_over["decode_step_overhead_us"] = o2
        g2 = model_phases(_estimate(spec_d, lay, prof), table.refit_inside_generation)["generation"]
        slope = (g2 - g1) / (o2 - o1)
        value = o1 + (measured["generation"] - g1) / slope if slope > 0 else o1
        set_factor("decode_step_overhead_us", gen_over, value, o1, "generation")
    after = model_phases(_estimate(spec_d, lay, prof), table.refit_inside_generation)
    return LogFit(gpu=gen_pool.gpu.name, framework=table.framework, log_format=log_format,
                  steps_used=[s.step for s in steps], warmup_steps=warmup, mode=mode, measured=measured,
                  measured_step=measured_step, spread=spread, before=before, after=after, factors=factors,
                  unidentified=unidentified, not_modelled={**table.unplaced, **table.other_named},
                  excluded=table.excluded, response_len_mean=_mean(rlen) if rlen else None,
                  profile={k: v for k, v in prof.items() if v}, notes=notes)


def profile_document(fit: LogFit, log_path: str = "", spec_path: str = "", layout_path: str = "") -> dict:
    """The profile file: `profile` (what solve/cases read) and what it was fitted on."""
    r = fit.residuals()
    return {
        "profile": fit.profile,
        "calibrated_from_log": {
            "log": log_path, "format": fit.log_format, "framework": fit.framework, "spec": spec_path,
            "layout": layout_path, "mode": fit.mode, "gpu": fit.gpu,
            "steps_used": fit.steps_used, "warmup_steps": fit.warmup_steps,
            "response_len_mean": None if fit.response_len_mean is None else round(fit.response_len_mean, 1),
            "factors": {k: {"value": _r(f.value), "model_value": _r(f.model_value), "fitted_to": f.phase,
                            "at_bound": f.at_bound, "meaning": FACTORS[k][2], "bounds": list(FACTORS[k][:2])}
                        for k, f in fit.factors.items()},
            "not_identified": fit.unidentified,
            "measured_s": {k: _r(v) for k, v in {**fit.measured, "step": fit.measured_step}.items()},
            "predicted_before_s": {k: _r(fit.before[k]) for k in [*fit.measured, "step"]},
            "predicted_after_s": {k: _r(fit.after[k]) for k in [*fit.measured, "step"]},
            "residual": {k: round(v, 4) for k, v in r.items()},
            "not_modelled_timers_s": {k: _r(v) for k, v in fit.not_modelled.items()},
            "excluded_timers_s": {k: _r(v) for k, v in fit.excluded.items()},
            "notes": fit.notes,
        },
    }


def _r(x: float) -> float:
    return float(f"{x:.6g}")
