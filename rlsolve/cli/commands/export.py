"""`rlsolve export plan.yaml --to TARGET --spec cluster.yaml [-o FILE]`."""
from __future__ import annotations

import click

from rlsolve.cli.main import guarded
from rlsolve.errors import SpecError
from rlsolve.writer import Outputs

_TARGETS = ("verl", "verl-yaml", "openrlhf", "megatron", "vllm", "sglang", "deepspeed", "nemo-rl", "yaml")


@click.command("export")
@click.argument("plan", type=click.Path())
@click.option("--to", "target", required=True, type=click.Choice(_TARGETS, case_sensitive=False),
              help="verl (launch script) | verl-yaml (Hydra config) | openrlhf | megatron | vllm | sglang | "
                   "deepspeed (JSON) | yaml (framework-neutral).")
@click.option("--spec", "spec", type=click.Path(), default=None,
              help="The cluster spec the plan was solved for (required: model ids, batch sizes, lengths, "
                   "node size are not in the plan).")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the config to this file instead of stdout.")
@guarded
def export(plan: str, target: str, spec: str | None, out: str | None) -> None:
    """Export PLAN (a plan or layout YAML) as a ready config for TARGET.

    What TARGET cannot express is printed on stderr and written as a comment in the output."""
    from rlsolve.export import export_plan
    if spec is None:
        raise SpecError("an export needs the spec the plan was solved for (model ids, batch sizes, lengths, "
                        "node size); pass it with --spec cluster.yaml", field="--spec")
    outputs = Outputs(inputs=[plan, spec])
    outputs.add(out, "-o")
    result = export_plan(plan, spec, target)
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if out:
        with outputs:
            outputs.write_text(out, result.text)
        click.echo(f"wrote {out} ({result.framework})", err=True)
    else:
        click.echo(result.text, nl=False)


COMMANDS = [export]
