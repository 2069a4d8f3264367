"""`export_plan` and the targets (see the package docstring)."""
from __future__ import annotations

import importlib
from typing import Any

from rlsolve.errors import SpecError, did_you_mean
from rlsolve.export.common import PINS, ExportResult, Job, build_job

TARGETS: dict[str, str] = {
    "verl": "verl 0.9: Hydra overrides as a launch script (python3 -m verl.trainer.main_ppo)",
    "verl-yaml": "verl 0.9: the same keys as a Hydra config YAML",
    "openrlhf": "OpenRLHF 0.11: dotted flags of python3 -m openrlhf.cli.train_ppo_ray",
    "megatron": "Megatron-LM / Megatron-Core 0.19: training arguments (+ the GRPO loop's RL arguments)",
    "vllm": "vLLM 0.33: vllm serve arguments for the rollout engines",
    "sglang": "SGLang 0.5: sglang.launch_server arguments for the rollout engines",
    "deepspeed": "DeepSpeed 0.19: config JSON of the training side",
    "nemo-rl": "NeMo-RL 0.7: GRPO config YAML inheriting its examples/configs/grpo_math_1B.yaml",
    "yaml": "framework-neutral YAML: the layout plus the job from the spec",
}

# targets whose exporter module is named otherwise
MODULES = {"verl-yaml": "verl", "nemo-rl": "nemo_rl", "yaml": "yaml_"}


def prepare(plan: Any, spec: Any) -> Job:
    """Validate the plan against the spec and join them. SpecError names the field and the fix."""
    from rlsolve.resolve import resolve
    from rlsolve.solver.estimate import check_layout, to_layout
    from rlsolve.spec import load_spec
    if spec is None:
        raise SpecError("an export needs the spec the plan was solved for (model ids, batch sizes, lengths, "
                        "node size); pass it with --spec cluster.yaml", field="--spec")
    s = load_spec(spec)
    problem = resolve(s)
    lay = to_layout(plan)
    check_layout(problem, lay)
    return build_job(lay, s, problem)


def export_plan(plan: Any, spec: Any, target: str) -> ExportResult:
    """Translate `plan` (solved for `spec`) into `target`'s own config; see TARGETS."""
    key = (target or "").strip().lower()
    if key not in TARGETS:
        raise SpecError(f"unknown export target {target!r}; {did_you_mean(key, TARGETS)}", field="--to")
    job = prepare(plan, spec)
    # each exporter is imported only when its target is asked for (the CLI starts fast)
    module = importlib.import_module(f"rlsolve.export.{MODULES.get(key, key)}")
    if key == "verl-yaml":
        return module.export(job, style="yaml")
    return module.export(job)
