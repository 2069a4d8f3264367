"""`rlsolve` command line. Exit codes: 0 ok, 2 invalid input, 3 infeasible."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from rlsolve.errors import InfeasibleError, SpecError

EXIT_INVALID, EXIT_INFEASIBLE = 2, 3


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
    return wrapper


class DefaultGroup(click.Group):
    """`rlsolve cluster.yaml` runs `rlsolve solve cluster.yaml`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["solve"] + args
        return super().parse_args(ctx, args)


def _fmt_default() -> str:
    return "table" if sys.stdout.isatty() else "yaml"


def emit_plan(plan, fmt: str | None, out: str | None) -> None:
    from rlsolve.cli.render import dump, plan_dict, plan_table
    fmt = fmt or _fmt_default()
    if out:
        ofmt = "json" if out.endswith(".json") else "yaml"
        Path(out).write_text(dump(plan_dict(plan), ofmt))
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
              help="Also draw one RL step per GPU group and the per-GPU memory (.svg; .png needs rlsolve[plot]).")
@click.option("--framework", type=click.Choice(["any", "verl", "openrlhf", "nemo-rl"]), default=None,
              help="Overrides the spec's target.framework: plan only what that framework runs.")
@FORMAT
@OUTPUT
@guarded
def solve(spec: Any, objective: str | None, time_limit: float | None, top_k: int | None, profile: str | None,
          timeline: str | None, framework: str | None, fmt: str | None, out: str | None) -> None:
    """Find the best layout for SPEC (a cluster.yaml)."""
    from rlsolve.solver import solve as _solve
    from rlsolve.spec import read_yaml
    if framework is not None:
        data = read_yaml(spec)
        target = data.get("target") if isinstance(data.get("target"), dict) else {}
        keep = {"version": target["version"]} if target.get("framework") == framework and "version" in target else {}
        spec = {**data, "target": {"framework": framework, **keep}}
    opts: dict[str, Any] = {}
    if time_limit is not None:
        opts["time_limit_s"] = time_limit
    if top_k is not None:
        opts["top_k"] = top_k
    plan = _solve(spec, objective=objective, profile=_load_profile(profile), **opts)
    emit_plan(plan, fmt, out)
    if timeline:
        from rlsolve.whatif import write_timeline
        write_timeline(plan, timeline)


def _load_profile(path: str | None) -> dict | None:
    if not path:
        return None
    from rlsolve.spec import read_yaml
    data = read_yaml(path, what="--profile")
    prof = data.get("profile", data) if isinstance(data, dict) else None
    if not isinstance(prof, dict):
        raise SpecError("a profile maps GPU names to measured efficiencies (see rlsolve calibrate)", field="--profile")
    return prof


@main.command()
@click.argument("spec", type=click.Path())
@click.argument("layout", type=click.Path())
@FORMAT
@OUTPUT
@guarded
def estimate(spec: str, layout: str, fmt: str | None, out: str | None) -> None:
    """Score LAYOUT (a plan file or its layout sections) on SPEC's cluster."""
    from rlsolve.solver.estimate import estimate as _estimate
    emit_plan(_estimate(spec, layout), fmt, out)


@main.command()
@click.argument("spec", type=click.Path())
@click.argument("layout", type=click.Path(), required=False)
@guarded
def explain(spec: str, layout: str | None) -> None:
    """Why the optimal plan wins; with LAYOUT, why it beats that layout term by term."""
    from rlsolve.solver import solve as _solve
    from rlsolve.solver.estimate import estimate as _estimate
    from rlsolve.cli.render import plan_table
    best = _solve(spec)
    click.echo(plan_table(best), nl=False)
    if layout:
        try:
            other = _estimate(spec, layout)
        except InfeasibleError as e:
            click.echo("\nyour layout does not fit: " + "; ".join(e.reasons))
            return
        click.echo(f"\nyour layout: {other.throughput.tokens_per_s:,.0f} tokens/s, step {other.time_s.step:,.1f} s "
                   f"vs {best.time_s.step:,.1f} s")
        for k in ("prefill", "decode", "old_logprob", "reference", "reward", "value", "train", "weight_sync", "switch"):
            a, b = getattr(other.time_s, k), getattr(best.time_s, k)
            if abs(a - b) > 0.005 * best.time_s.step:
                click.echo(f"  {k:12s} {a:10,.1f} s  vs {b:10,.1f} s  ({a - b:+,.1f} s)")


@main.command()
@click.option("--networks", is_flag=True, help="List the network catalog instead.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table")
def gpus(networks: bool, fmt: str) -> None:
    """List the GPU (or network) catalog."""
    from rlsolve.cli.render import dump, table
    from rlsolve.hardware_db import list_gpus, list_networks
    if networks:
        rows = [{"name": n.name, "gbps_per_nic": n.gbps_per_nic, "latency_us": n.latency_us,
                 "busbw_fraction": n.busbw_fraction.value} for n in list_networks()]
    else:
        rows = [{"name": g.name, "bf16_tflops": g.bf16_tflops, "fp8_tflops": g.fp8_tflops, "memory_gb": g.memory_gb,
                 "hbm_gbps": g.hbm_gbps, "nvlink_gbps_per_dir": g.nvlink_gbps_per_dir, "nvlink_domain": g.nvlink_domain,
                 "usd_per_hour": g.price_per_gpu_hour_usd} for g in list_gpus()]
    click.echo(table(rows, list(rows[0])) if fmt == "table" else dump(rows, fmt), nl=False)


@main.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]), default="table")
def models(fmt: str) -> None:
    """List the model catalog."""
    from rlsolve.cli.render import dump, table
    from rlsolve.models import list_models
    rows = [{"name": m.name, "hf_id": m.hf_id or "", "params_b": round(m.total_params / 1e9, 2),
             "active_b": round(m.active_params / 1e9, 2), "layers": m.layers, "hidden": m.hidden,
             "kv_kib_per_token": round(m.kv_bytes_per_token(2.0) / 1024, 1)} for m in list_models()]
    click.echo(table(rows, list(rows[0])) if fmt == "table" else dump(rows, fmt), nl=False)


@main.command()
def schema() -> None:
    """Print the JSON schema of the input file."""
    from rlsolve.spec import Spec
    click.echo(json.dumps(Spec.model_json_schema(), indent=2))


def _register() -> None:
    from rlsolve.cli.commands import register
    register(main)


_register()

if __name__ == "__main__":
    main()
