"""`rlsolve cases FILE`: predicted vs measured on published figures."""
from __future__ import annotations

import json

import click

from rlsolve.cli.main import guarded


@click.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table")
@click.option("--profile", type=click.Path(), default=None,
              help="A profile (rlsolve calibrate, or calibrate --from-log) applied to every row on its GPUs.")
@guarded
def cases(path: str, fmt: str, profile: str | None) -> None:
    """Predict every row of a reference-case FILE and print the error per row and the medians."""
    from rlsolve.cases import score_cases
    from rlsolve.cli.profiles import load_profile
    from rlsolve.present import table
    from rlsolve.reader import read_yaml
    report = score_cases(read_yaml(path, what="cases file"), profile=load_profile(profile))
    if fmt == "json":
        click.echo(json.dumps({"rows": [r.__dict__ for r in report.rows], "summary": report.summary()}, indent=2))
        return
    if fmt == "markdown":
        click.echo(markdown(report), nl=False)
        return
    rows = [{"id": r.id, "kind": r.kind, "metric": r.metric, "measured": _n(r.measured), "predicted": _n(r.predicted),
             "error": _error(r)} for r in report.rows]
    click.echo(table(rows, ["id", "kind", "metric", "measured", "predicted", "error"]), nl=False)
    phases = phase_rows(report)
    if phases:
        click.echo("\nRL steps, phase by phase (seconds; rows that publish their breakdown):")
        click.echo(table(phases, ["id", "phase", "measured", "predicted", "error"]), nl=False)
    rl = [r for r in report.rows if r.kind == "rl_step" and r.error is not None]
    if rl:
        click.echo("\nRL steps: the layout each was scored on, and the solver's best plan for the same job:")
        click.echo(table([{"id": r.id, "scored on": r.extra["scored_on"], "best plan step s": _n(r.extra["best_plan_step_s"]),
                           "assumed": "; ".join(r.extra["assumed"])} for r in rl],
                         ["id", "scored on", "best plan step s", "assumed"]), nl=False)
    click.echo("")
    summary = report.summary()
    for kind, s in summary.items():
        if kind == "rl_phases":
            continue
        med = "n/a" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
        mx = "n/a" if s["max_abs_error"] is None else f"{s['max_abs_error']:.1%}"
        click.echo(f"{kind:8s} rows {s['rows']:3d}  modelled {s['modelled']:3d}  median |error| {med:>6s}  max {mx}")
    for phase, s in summary.get("rl_phases", {}).items():
        click.echo(f"phase {phase:12s} rows {s['rows']:3d}  median |error| {s['median_abs_error']:.1%}  "
                   f"max {s['max_abs_error']:.1%}")


def phase_rows(report) -> list[dict]:
    return [{"id": r.id, "phase": k, "measured": _n(float(r.extra["phases_measured_s"][k])),
             "predicted": _n(r.extra["phases_s"][k]), "error": f"{e:+.1%}"}
            for r in report.rows for k, e in (r.extra.get("phase_errors") or {}).items()]


def markdown(report) -> str:
    out = ["| id | kind | metric | measured | predicted | error |", "|---|---|---|---:|---:|---:|"]
    for r in report.rows:
        err = _error(r)
        out.append(f"| {r.id} | {r.kind} | {r.metric} | {_n(r.measured)} | {_n(r.predicted)} | {err} |")
    phases = phase_rows(report)
    if phases:
        out += ["", "| id | phase | measured s | predicted s | error |", "|---|---|---:|---:|---:|"]
        out += [f"| {p['id']} | {p['phase']} | {p['measured']} | {p['predicted']} | {p['error']} |" for p in phases]
    out += ["", "| kind | rows | modelled | median abs error | max abs error |", "|---|---:|---:|---:|---:|"]
    summary = report.summary()
    for phase, s in summary.pop("rl_phases", {}).items():
        out.append(f"| phase {phase} | {s['rows']} | {s['rows']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} |")
    for kind, s in summary.items():
        med = "n/a" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
        mx = "n/a" if s["max_abs_error"] is None else f"{s['max_abs_error']:.1%}"
        out.append(f"| {kind} | {s['rows']} | {s['modelled']} | {med} | {mx} |")
    return "\n".join(out) + "\n"


def _error(r) -> str:
    """The error, with the row's note when it has one (a layout that does not fit, an
    assumed recompute); or why the row is not modelled."""
    if r.error is None:
        return "not modelled: " + r.note
    if r.kind == "rl_step":  # its note (layout and assumptions) has its own table below
        return f"{r.error:+.1%}"
    return f"{r.error:+.1%}" + (f" ({r.note})" if r.note else "")


def _n(x: float | None) -> str:
    return "" if x is None else f"{x:,.4g}"


COMMANDS = [cases]
