"""`rlsolve validate` and `rlsolve calibrate`: torch microbenchmarks of a plan's assumptions
(SPEC section 8). torch is imported inside rlsolve.bench only when a command runs."""
from __future__ import annotations

from typing import Any

import click

from rlsolve.cli.commands.logs import LOG_FORMAT, WARMUP, calibrate_from_log
from rlsolve.cli.main import checked_flag, guarded
from rlsolve.errors import SpecError
from rlsolve.reader import STDIN
from rlsolve.writer import Outputs

DEVICE = click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
                      help="Where to measure; auto = cuda when torch sees a GPU (CPU: small shapes, test mode).")
NPROC = click.option("--nproc", type=int, default=None,
                     help="Processes (one GPU each) for the all-reduce; default: every visible GPU, 1 on the CPU.")


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    for scale, unit in ((1e-6, "ns"), (1e-3, "us"), (1, "ms")):
        if x < scale:
            return f"{x / scale * 1e3:.3g} {unit}"
    return f"{x:.3g} s"


def _rate(row: dict[str, Any]) -> str:
    for key, unit in (("tflops", "TFLOP/s"), ("gb_per_s", "GB/s"), ("busbw_gb_per_s", "GB/s busbw")):
        if key in row:
            return f"{row[key]:g} {unit}"
    return ""


def _eff(row: dict[str, Any]) -> str:
    e = row.get("efficiency") or {}
    if e.get("measured") is None or e.get("assumed") is None:
        return ""
    return f"{e['measured']:.3g} vs {e['assumed']:.3g}"


def _report(items: list[dict[str, Any]], info: dict[str, Any], profile: dict[str, Any]) -> str:
    from rlsolve.present import table
    rows = [{"item": r["item"], "measured": _secs(r.get("measured_s")), "assumed": _secs(r.get("assumed_s")),
             "meas/assumed": f"{r['measured_over_assumed']:.2f}x" if "measured_over_assumed" in r else "-",
             "rate": _rate(r), "profile key": r["key"], "measured vs assumed": _eff(r)} for r in items]
    head = (f"device  {info['name']} ({info['type']}), torch {info['torch']}, CUDA {info['cuda'] or '-'}, "
            f"{info['nproc']} process(es); catalog GPU {info['catalog_gpu']}\n\n")
    prof = "\n".join(f"  {k:24s} {v:g}" for gpu in profile.values() for k, v in gpu.items())
    return head + table(rows, list(rows[0])) + "\nmeasured profile:\n" + prof + "\n"


@click.command()
@click.argument("plan", type=click.Path())
@click.option("--spec", type=click.Path(), default=None,
              help="The cluster spec the plan was solved for (required: a plan does not carry it).")
@DEVICE
@NPROC
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the validated plan here instead of back into PLAN (.json or .yaml).")
@guarded
def validate(plan: str, spec: str | None, device: str, nproc: int | None, out: str | None) -> None:
    """Measure what PLAN assumes on this machine's GPU and write PLAN back with a
    `validation` section (verdict, every figure, the re-scored step)."""
    if spec is None:
        raise SpecError("the plan does not carry its cluster spec; pass --spec cluster.yaml (the file it was "
                        "solved from)", field="--spec")
    from rlsolve.bench import validate_plan
    from rlsolve.cli.main import plan_file_text
    nproc = checked_flag("Pool", "gpus_per_node", nproc, "--nproc")
    target = out or plan
    if target == STDIN:
        raise SpecError("a plan read from standard input cannot be written back; give -o validated.yaml", field="-o")
    outputs = Outputs(inputs=[spec, plan], overwrite_ok=[plan])  # PLAN is written back by design; the spec never
    outputs.add(target, "-o" if out else "PLAN")
    result = validate_plan(spec, plan, device=device, nproc=nproc)
    v = result.validation
    with outputs:
        outputs.write_text(target, plan_file_text(result, target))
    r = v["rescored"]
    click.echo(_report(v["items"], v["device"], v["profile"]), nl=False)
    mem = v["memory"]
    click.echo(f"memory  {mem['needed_gb']:.1f} GB per GPU needed, {mem['allocated_gb']:.2f} GB allocated"
               + (f" of {mem['device_gb']:.1f} GB" if "device_gb" in mem else "")
               + (f" ({mem['note']})" if "note" in mem else ""))
    click.echo(f"step    {r['step']['assumed']:,.2f} s assumed, {r['step']['measured']:,.2f} s with the measured "
               f"profile ({r['step_change']:+.1%})")
    for note in v["notes"]:
        click.echo(f"note    {note}")
    click.echo(f"verdict {v['verdict']}  ({v['wall_s']:.1f} s; written to {target})")


@click.command()
@DEVICE
@NPROC
@click.option("--from-log", "from_log", type=click.Path(), default=None,
              help="Fit the profile to a run's log (verl, NeMo-RL, OpenRLHF) instead of measuring; needs --spec.")
@click.option("--spec", type=click.Path(), default=None, help="With --from-log: the cluster spec the run used.")
@click.option("--layout", type=click.Path(), default=None,
              help="With --from-log: the layout that ran (a plan file or its layout sections).")
@LOG_FORMAT
@WARMUP
@click.option("--profile", "base_profile", type=click.Path(), default=None,
              help="With --from-log: a profile to start from (say a torch calibrate's); the fitted factors are added.")
@click.option("--gpu", default=None, help="Catalog GPU the profile is for (default: the one the device name "
              "names; required on the CPU).")
@click.option("--out", "out", type=click.Path(dir_okay=False), required=True,
              help="Profile file to write, for `rlsolve solve --profile`.")
@guarded
def calibrate(device: str, nproc: int | None, from_log: str | None, spec: str | None, layout: str | None,
              log_format: str | None, warmup: int, base_profile: str | None, gpu: str | None, out: str) -> None:
    """Measure this machine's GPU and write a profile (efficiencies that replace the
    catalog's) for `rlsolve solve --profile`; with --from-log, fit it to a run's log."""
    if from_log is not None:
        calibrate_from_log(spec, layout, from_log, log_format, warmup, out, base_profile)
        return
    from rlsolve.bench import calibrate as _calibrate
    from rlsolve.present import dump
    nproc = checked_flag("Pool", "gpus_per_node", nproc, "--nproc")
    with Outputs() as outputs:
        outputs.add(out, "--out")
        doc = _calibrate(device=device, gpu=gpu, nproc=nproc)
        outputs.write_text(out, dump(doc, "json" if out.endswith(".json") else "yaml"))
    m = doc["measured"]
    click.echo(_report(m["items"], m["device"], doc["profile"]), nl=False)
    for note in m["notes"]:
        click.echo(f"note    {note}")
    click.echo(f"wrote   {out} ({m['wall_s']:.1f} s)")


COMMANDS = [validate, calibrate]
