"""`rlsolve compare` (what-if studies) and `rlsolve timeline` (pictures of one plan). Thin:
the work is in rlsolve.whatif."""
from __future__ import annotations

import sys

import click

from rlsolve.cli.main import EXIT_INFEASIBLE, EXIT_NO_ANSWER, checked_flag, guarded
from rlsolve.errors import SpecError
from rlsolve.writer import Outputs


def _split(values: tuple[str, ...]) -> list[str]:
    """--gpu A,B --gpu C -> [A, B, C]."""
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _nodes(values: tuple[str, ...]) -> list[int]:
    out = []
    for v in _split(values):
        try:
            n = int(v)
        except ValueError:
            raise SpecError(f"node counts are whole numbers, got {v!r}; e.g. --nodes 4,8,16", field="--nodes") from None
        out.append(checked_flag("Pool", "nodes", n, "--nodes"))
    return out


def _prices(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for v in _split(values):
        name, sep, usd = v.partition("=")
        try:
            value = float(usd) if sep else 0.0
        except ValueError:
            value = 0.0
        if not name.strip() or not value > 0:
            raise SpecError(f"give GPU=USD_PER_GPU_HOUR, e.g. --price H100-SXM-80GB=2.49; got {v!r}", field="--price")
        out[name.strip()] = checked_flag("Pool", "price_per_gpu_hour_usd", value, "--price")
    return out


@click.command()
@click.argument("spec", type=click.Path())
@click.option("--gpu", "gpus", multiple=True, help="GPU types, comma-separated (default: the spec's), "
              "e.g. H100-SXM-80GB,H200-SXM-141GB,B200-SXM-180GB.")
@click.option("--nodes", "nodes", multiple=True, help="Node counts, comma-separated (default: the spec's), e.g. 4,8,16.")
@click.option("--network", "networks", multiple=True, help="Networks, comma-separated (default: the spec's), "
              "e.g. IB-NDR-400,IB-XDR-800; a number is an inline fabric of that many Gbit/s per GPU.")
@click.option("--objective", type=click.Choice(["throughput", "cost"]), default=None, help="Overrides the spec's.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "markdown"]), default="table",
              help="Output format.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also draw throughput and cost against cluster size (.svg, .png or .pdf; needs rlsolve[plot]).")
@click.option("--price", "prices", multiple=True, help="Override a GPU's price for this run: GPU=USD per GPU-hour.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
              help="local: a process pool on this machine; ray: tasks on a Ray cluster.")
@click.option("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or a local Ray).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local worker processes (default: CPUs).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Result cache (default ~/.cache/rlsolve/sweeps); an interrupted sweep resumes from it.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--time-limit", type=float, default=None, help="Each solve's time limit in seconds (default: the spec's).")
@guarded
def compare(spec: str, gpus: tuple[str, ...], nodes: tuple[str, ...], networks: tuple[str, ...], objective: str | None,
            fmt: str, plot: str | None, prices: tuple[str, ...], executor: str, address: str | None,
            workers: int | None, cache_dir: str | None, no_cache: bool, time_limit: float | None) -> None:
    """What-if study: solve SPEC on every GPU x nodes x network combination and compare.

    One row per cluster: GPUs, throughput, tokens/s per GPU, step time, the chosen mode and
    degrees, USD per million trained tokens, tokens/s per kW of GPU power, and whether it is
    on the throughput-cost Pareto front. Exit code 3 when no combination is feasible."""
    from rlsolve.whatif import check_picture_path, render, write_sweep_plot
    from rlsolve.whatif import compare as _compare
    outputs = Outputs(inputs=[spec])
    if plot:
        check_picture_path(plot, "--plot")
        outputs.add(plot, "--plot")
    rows = _compare(spec, gpus=_split(gpus) or None, nodes=_nodes(nodes) or None, networks=_split(networks) or None,
                    objective=objective, executor=executor, address=address, workers=workers,
                    cache_dir=False if no_cache else cache_dir, progress=True, prices=_prices(prices),
                    time_limit_s=checked_flag("SolverOptions", "time_limit_s", time_limit, "--time-limit"))
    if plot:
        with outputs:
            write_sweep_plot(rows, outputs.stage(plot))
    click.echo(render(rows, fmt), nl=False)
    if plot:
        click.echo(f"wrote {plot}", err=True)
    if not any(r.feasible for r in rows):
        unknown = sum(r.status == "unknown" for r in rows)
        if unknown:  # some combination may fit: it was not proven either way in time
            click.echo(f"unknown: no combination solved; {unknown} of {len(rows)} got no answer within the time "
                       f"limit (raise solver.time_limit_s)", err=True)
            sys.exit(EXIT_NO_ANSWER)
        click.echo("infeasible: no combination fits", err=True)
        sys.exit(EXIT_INFEASIBLE)


@click.command()
@click.argument("spec", type=click.Path())
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--memory", type=click.Path(dir_okay=False), default=None,
              help="Also draw the per-GPU memory per role on its own (.svg, .png or .pdf).")
@click.option("--plan", "plan_path", type=click.Path(), default=None,
              help="Draw this plan (or hand-written layout) re-scored on SPEC instead of solving.")
@click.option("--objective", type=click.Choice(["throughput", "cost"]), default=None, help="Overrides the spec's.")
@click.option("--no-memory-panel", is_flag=True, help="Leave the memory bars out of OUT.")
@guarded
def timeline(spec: str, out: str, memory: str | None, plan_path: str | None, objective: str | None,
             no_memory_panel: bool) -> None:
    """Draw one RL step of SPEC's plan as a timeline per GPU group, to OUT (.svg, .png or .pdf).

    Phases: prefill, decode, reward, reference, value, old log-probs, train, weight sync;
    async overlap is shaded. Below it, the per-GPU memory of each role as stacked bars."""
    from rlsolve.whatif import check_picture_path, write_memory, write_timeline
    outputs = Outputs(inputs=[spec, plan_path])
    for path, field in ((out, "out"), (memory, "--memory")):
        if path:
            check_picture_path(path, field)
            outputs.add(path, field)
    from rlsolve.spec import load_spec  # the schema loads with the command, not with `rlsolve --help`
    source = load_spec(spec)  # read once (`-` is stdin): the plan and the pictures' GPU names come from it
    if plan_path:
        from rlsolve.solver.estimate import estimate
        plan = estimate(source, plan_path)
    else:
        from rlsolve.solver import solve
        plan = solve(source, objective=objective, top_k=0)
    with outputs:
        write_timeline(plan, outputs.stage(out), with_memory=not no_memory_panel, field="out", spec=source)
        if memory:
            write_memory(plan, outputs.stage(memory), field="--memory", spec=source)
    click.echo(f"wrote {out}", err=True)
    if memory:
        click.echo(f"wrote {memory}", err=True)


COMMANDS = [compare, timeline]
