"""`rlsolve` command line. Exit codes: 0 ok, 2 invalid input, 3 infeasible (proven), 4 no
answer within the time limit (status unknown)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from rlsolve.cli.profiles import PROFILE_KEYS, load_profile  # noqa: F401  (solve, cases, calibrate --profile)
from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.writer import Outputs

EXIT_INVALID, EXIT_INFEASIBLE, EXIT_NO_ANSWER = 2, 3, 4


def guarded(fn: Callable) -> Callable:
    """Map the API's errors to one clear line and an exit code; never a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_INVALID)
        except InfeasibleError as e:
            click.echo("infeasible: " + "; ".join(e.reasons), err=True)
            sys.exit(EXIT_INFEASIBLE)
        except NoAnswerError as e:
            click.echo(f"unknown: {e}", err=True)
            sys.exit(EXIT_NO_ANSWER)
    return wrapper


# where each model's fields sit in a spec, for messages
_SPEC_PATH = {"SolverOptions": "solver", "Pool": "cluster", "Cluster": "cluster"}


def checked_flag(model: "type | str", field: str, value: Any, flag: str) -> Any:
    """A flag's value checked by the rule of the spec field it overrides (the same bounds, the
    same strict types), so `--time-limit 0` is refused as `solver.time_limit_s: 0` is.
    `model`: the schema class, or its name in rlsolve.spec (loaded here, not when the
    command's module is imported, so `rlsolve --help` need not build the schema)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError
    if value is None:
        return None
    if isinstance(model, str):
        import rlsolve.spec
        model = getattr(rlsolve.spec, model)
    info = model.model_fields[field]
    try:
        return TypeAdapter(Annotated[info.annotation, info]).validate_python(value, strict=True)
    except ValidationError as e:
        msg = e.errors()[0]["msg"]
        where = f"{_SPEC_PATH.get(model.__name__, model.__name__)}.{field}"
        raise SpecError(f"{msg}, got {value!r} (the rule of {where}, which it overrides)", field=flag) from None


class DefaultGroup(click.Group):
    """`rlsolve cluster.yaml` runs `rlsolve solve cluster.yaml`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["solve"] + args
        return super().parse_args(ctx, args)


def _fmt_default() -> str:
    return "table" if sys.stdout.isatty() else "yaml"


def plan_file_text(plan, path: str) -> str:
    """The plan as the file `path` holds it: JSON for .json, else YAML."""
    from rlsolve.present import dump, plan_dict
    return dump(plan_dict(plan), "json" if str(path).endswith(".json") else "yaml")


def emit_plan(plan, fmt: str | None) -> None:
    """The plan on stdout; after the files, so a failed write prints no plan."""
    from rlsolve.present import dump, plan_dict, plan_table
    fmt = fmt or _fmt_default()
    if fmt == "table":
        click.echo(plan_table(plan), nl=False)
    else:
        click.echo(dump(plan_dict(plan), fmt), nl=False)


FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default=None,
                      help="Output format (default: table on a terminal, yaml otherwise).")
OUTPUT = click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
                      help="Also write the plan to this file (.json or .yaml).")


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rlsolve")
def main() -> None:
    """Plan the GPU layout of an LLM RL job (PPO/GRPO) with a CP-SAT integer program.

    `rlsolve cluster.yaml` is the same as `rlsolve solve cluster.yaml`."""


@main.command()
@click.argument("spec", type=click.Path())
@click.option("--objective", type=click.Choice(["throughput", "cost"]), default=None,
              help="Overrides the spec's objective.")
@click.option("--time-limit", type=float, default=None, help="CP-SAT time limit in seconds.")
@click.option("--top", "top_k", type=int, default=None, help="Runner-up plans to report.")
@click.option("--profile", type=click.Path(), default=None, help="Calibrated GPU profile (rlsolve calibrate).")
@click.option("--timeline", type=click.Path(dir_okay=False), default=None,
              help="Also draw one RL step per GPU group and the per-GPU memory (.svg, .png or .pdf; needs rlsolve[plot]).")
@click.option("--framework", type=click.Choice(["any", "verl", "openrlhf", "nemo-rl"]), default=None,
              help="Overrides the spec's target.framework: plan only what that framework runs.")
@FORMAT
@OUTPUT
@guarded
def solve(spec: str, objective: str | None, time_limit: float | None, top_k: int | None, profile: str | None,
          timeline: str | None, framework: str | None, fmt: str | None, out: str | None) -> None:
    """Find the best layout for SPEC (a cluster.yaml; - reads it from standard input)."""
    from rlsolve.reader import read_yaml
    from rlsolve.solver import solve as _solve
    from rlsolve.spec import SolverOptions, load_spec
    opts: dict[str, Any] = {}
    if time_limit is not None:
        opts["time_limit_s"] = checked_flag(SolverOptions, "time_limit_s", time_limit, "--time-limit")
    if top_k is not None:
        opts["top_k"] = checked_flag(SolverOptions, "top_k", top_k, "--top")
    outputs = Outputs(inputs=[spec, profile])
    outputs.add(out, "-o")
    if timeline:
        from rlsolve.whatif import check_picture_path
        check_picture_path(timeline, "--timeline")
        outputs.add(timeline, "--timeline")
    calibrated = load_profile(profile)
    source: Any = spec
    if framework is not None:
        data = read_yaml(spec)
        target = data.get("target") if isinstance(data.get("target"), dict) else {}
        keep = {"version": target["version"]} if target.get("framework") == framework and "version" in target else {}
        source = {**data, "target": {"framework": framework, **keep}}
    # read once: the timeline names the pools' GPU types from the spec, and `-` (stdin) reads only once
    if timeline:
        source = load_spec(source)
    plan = _solve(source, objective=objective, profile=calibrated, **opts)
    with outputs:
        if out:
            outputs.write_text(out, plan_file_text(plan, out))
        if timeline:
            from rlsolve.whatif import write_timeline
            write_timeline(plan, outputs.stage(timeline), field="--timeline", spec=source)
    emit_plan(plan, fmt)


@main.command()
@click.argument("spec", type=click.Path())
@click.argument("layout", type=click.Path())
@FORMAT
@OUTPUT
@guarded
def estimate(spec: str, layout: str, fmt: str | None, out: str | None) -> None:
    """Score LAYOUT (a plan file or its layout sections) on SPEC's cluster."""
    from rlsolve.solver.estimate import estimate as _estimate
    with Outputs(inputs=[spec, layout]) as outputs:
        outputs.add(out, "-o")
        plan = _estimate(spec, layout)
        if out:
            outputs.write_text(out, plan_file_text(plan, out))
    emit_plan(plan, fmt)


@main.command()
@click.argument("spec", type=click.Path())
@click.argument("layout", type=click.Path(), required=False)
@click.option("--log", "log", type=click.Path(), default=None,
              help="A run's log (verl, NeMo-RL, OpenRLHF) of LAYOUT: measured vs predicted, and the re-plan.")
@click.option("--log-format", "log_format", default=None, help="The log's format (default: detected).")
@guarded
def explain(spec: str, layout: str | None, log: str | None, log_format: str | None) -> None:
    """Why the optimal plan wins; with LAYOUT, why it beats that layout term by term; with
    --log, how the run of LAYOUT went against the model and what a re-plan would gain."""
    if log is not None:
        from rlsolve.cli.commands.logs import explain_log
        explain_log(spec, layout, log, log_format, warmup=1)
        return
    from rlsolve.present import differences, differences_text, layout_summary, misfit_summary, plan_table
    from rlsolve.solver import solve as _solve
    from rlsolve.solver.estimate import estimate as _estimate
    best = _solve(spec)
    click.echo(plan_table(best), nl=False)
    if layout:
        try:
            other = _estimate(spec, layout)
        except InfeasibleError as e:
            click.echo("\n" + misfit_summary(e.reasons))
            return
        click.echo("\n" + layout_summary(best, other))
        click.echo(differences_text(differences(best, other)), nl=False)


@main.command()
@click.option("--networks", is_flag=True, help="List the network catalog instead.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table")
def gpus(networks: bool, fmt: str) -> None:
    """List the GPU (or network) catalog."""
    from rlsolve.present import GPU_COLUMNS, NETWORK_COLUMNS, dump, gpu_rows, network_rows, table
    rows, columns = (network_rows(), NETWORK_COLUMNS) if networks else (gpu_rows(), GPU_COLUMNS)
    click.echo(table(rows, columns) if fmt == "table" else dump(rows, fmt), nl=False)


@main.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table")
def models(fmt: str) -> None:
    """List the model catalog."""
    from rlsolve.present import MODEL_COLUMNS, dump, model_rows, table
    rows = model_rows()
    click.echo(table(rows, MODEL_COLUMNS) if fmt == "table" else dump(rows, fmt), nl=False)


@main.command()
@click.option("--plan", "output", is_flag=True, help="The output schema (the plan) instead of the input's.")
def schema(output: bool) -> None:
    """Print the JSON schema of the input file (with --plan: of the plan it produces)."""
    from rlsolve.plan import Plan
    from rlsolve.spec import Spec
    model = Plan if output else Spec
    click.echo(json.dumps(model.model_json_schema(mode="serialization" if output else "validation"), indent=2))


def _register() -> None:
    from rlsolve.cli.commands.registry import register
    register(main)


_register()

if __name__ == "__main__":
    main()
