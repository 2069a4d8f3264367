"""`rlsolve calibrate --from-log` and `rlsolve explain --log`: learn from the user's own
run. The commands themselves stay where users look for them (bench.py's calibrate, main.py's
explain); this module holds what they do with a log."""
from __future__ import annotations

import click

from rlsolve.errors import SpecError
from rlsolve.writer import Outputs

LOG_FORMAT = click.option("--log-format", "log_format", default=None,
                          type=click.Choice(["verl-console", "verl-jsonl", "wandb-csv", "nemo-rl", "openrlhf"]),
                          help="The log's format (default: detected).")
WARMUP = click.option("--warmup", type=int, default=1, show_default=True,
                      help="Steps at the start of the log left out of the fit (compilation, cache warm-up).")


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _fit(spec: str, layout: str | None, log: str, log_format: str | None, warmup: int, base: dict | None = None):
    from rlsolve.logfit import fit_log
    from rlsolve.runlogs import read_log
    if warmup < 0:
        raise SpecError("give 0 or more steps to leave out", field="--warmup")
    run = read_log(log, log_format)
    return fit_log(spec, layout, run, warmup=warmup, base_profile=base)


def phase_rows(fit) -> str:
    from rlsolve.present import table
    step = fit.measured_step
    rows = []
    for p in [*fit.measured, "step"]:
        m = fit.measured_step if p == "step" else fit.measured[p]
        b, a = fit.before[p], fit.after[p]
        rows.append({"phase": p, "measured s": f"{m:,.2f}", "share": f"{m / step:.0%}" if step else "",
                     "model s": f"{b:,.2f}", "model err": _pct(b / m - 1) if m > 0 else "",
                     "calibrated s": f"{a:,.2f}", "residual": _pct(a / m - 1) if m > 0 else "",
                     "spread": f"{fit.spread.get(p, 0):.0%}" if p != "step" else ""})
    return table(rows, list(rows[0]))


def factor_lines(fit) -> list[str]:
    from rlsolve.logfit import FACTORS
    out = ["fitted factors (profile keys):"]
    for k, f in fit.factors.items():
        bound = "  (at its bound)" if f.at_bound else ""
        out.append(f"  {k:30s} {f.value:>10.4g}   model {f.model_value:.4g}; {FACTORS[k][2]}{bound}")
    out.append("not identified by this log (model value kept):")
    out += [f"  {k:30s} {why}" for k, why in fit.unidentified.items()]
    if fit.not_modelled:
        out.append("framework timers the model has no term for (counted in `other`, fitted as step_overhead_s):")
        out += [f"  {k:30s} {v:,.2f} s" for k, v in sorted(fit.not_modelled.items(), key=lambda kv: -kv[1])]
    if fit.excluded:
        out.append("timers left out of the step (validation, checkpoints): "
                   + ", ".join(f"{k} {v:,.2f} s" for k, v in fit.excluded.items()))
    out += [f"note: {n}" for n in fit.notes]
    return out


def calibrate_from_log(spec: str | None, layout: str | None, log: str, log_format: str | None, warmup: int,
                       out: str, base_profile: str | None = None) -> None:
    from rlsolve.cli.profiles import load_profile
    from rlsolve.logfit import profile_document
    from rlsolve.present import dump
    if spec is None:
        raise SpecError("calibrating from a log needs the cluster it ran on: pass --spec cluster.yaml", field="--spec")
    outputs = Outputs(inputs=[spec, layout, log, base_profile])
    outputs.add(out, "--out")  # checked before the fit: never over an input, never into a missing folder
    fit = _fit(spec, layout, log, log_format, warmup, load_profile(base_profile))
    doc = profile_document(fit, log_path=log, spec_path=spec, layout_path=layout or "")
    with outputs:  # written before the report, so a failed write prints no report of a profile
        outputs.write_text(out, dump(doc, "json" if out.endswith(".json") else "yaml"))
    click.echo(f"log     {log}: {fit.framework} ({fit.log_format}), steps {fit.steps_used[0]}-{fit.steps_used[-1]} "
               f"used ({len(fit.steps_used)}; {fit.warmup_steps} warm-up left out), mode {fit.mode}, GPU {fit.gpu}\n")
    click.echo(phase_rows(fit), nl=False)
    click.echo("\n".join(factor_lines(fit)))
    click.echo(f"wrote   {out} (for rlsolve solve --profile / rlsolve cases --profile)")


def explain_log(spec: str, layout: str | None, log: str, log_format: str | None, warmup: int) -> None:
    """Measured vs predicted per phase for the layout that ran, where the time went, and the
    re-plan under the calibrated profile with its predicted gain."""
    from rlsolve.errors import InfeasibleError
    from rlsolve.present import plan_table
    from rlsolve.solver import solve
    fit = _fit(spec, layout, log, log_format, warmup)
    click.echo(f"the run ({fit.framework}, {len(fit.steps_used)} steps after {fit.warmup_steps} warm-up, "
               f"layout {layout}): measured vs predicted per phase\n")
    click.echo(phase_rows(fit), nl=False)
    shares = sorted(((p, v / fit.measured_step) for p, v in fit.measured.items()), key=lambda kv: -kv[1])
    click.echo("where the time went: " + ", ".join(f"{p} {s:.0%}" for p, s in shares))
    click.echo("\n".join(factor_lines(fit)))
    try:
        best = solve(spec, profile=fit.profile)
    except InfeasibleError as e:
        click.echo("\nre-plan under the calibrated profile: no layout fits: " + "; ".join(e.reasons))
        return
    ran = fit.after["step"]
    gain = ran / best.time_s.step - 1 if best.time_s.step > 0 else 0.0
    click.echo(f"\nre-plan under the calibrated profile: step {best.time_s.step:,.1f} s vs {ran:,.1f} s for the "
               f"layout that ran (calibrated), {_pct(gain)} tokens/s predicted")
    click.echo(plan_table(best), nl=False)


COMMANDS: list = []
