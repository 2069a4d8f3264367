"""A framework-neutral launch description: the plan's layout sections verbatim (so
`rlsolve estimate cluster.yaml this.yaml` re-scores it) plus the job from the spec (model ids,
workload, batch units) and each role's nodes. Nothing is lost, so it carries no warnings.
"""
from __future__ import annotations

from rlsolve.export.common import ExportResult, Job, comment_block, dump_yaml, warning_lines
from rlsolve.plan import LAYOUT_KEYS


def document(job: Job) -> dict:
    a = job.policy
    models = {"policy": {"name": a.name, "hf_id": a.hf_id}}
    for which, arch in (("reference", job.problem.reference), ("reward", job.reward_model), ("value", job.critic)):
        models[which] = None if arch is None else {"name": arch.name, "hf_id": arch.hf_id}
    if job.reward_model is None:
        models["reward"] = "rule"
    job_doc = {
        "models": models,
        "algorithm": job.algorithm,
        "prompts_per_step": job.prompts,
        "samples_per_prompt": job.n,
        "samples_per_step": job.samples,
        "mini_batches": job.mini_batches,
        "samples_per_optimizer_step": job.mini_batch_samples,
        "ppo_epochs": job.epochs,
        "prompt_len": job.prompt_len,
        "response_len_max": job.response_max,
        "max_len": job.max_len,
    }
    roles = {name: {"pool": r.pool, "gpus": r.gpus, "nodes": r.nodes, "gpus_per_node": r.per_node}
             for name, r in (("generation", job.gen), ("training", job.train), ("auxiliary", job.aux),
                             ("critic", job.critic_group)) if r is not None}
    layout = job.lay.model_dump(mode="json")
    doc = {"rlsolve_export": 1, "job": job_doc, "roles": roles}
    doc.update({k: layout[k] for k in LAYOUT_KEYS})
    return doc


def export(job: Job) -> ExportResult:
    doc = document(job)
    head = ["rlsolve export -> yaml: the plan's layout and the job it was solved for (framework-neutral)",
            "The layout sections re-score with `rlsolve estimate cluster.yaml THIS_FILE`."]
    head += job.summary()
    text = comment_block(head + warning_lines(job.notes)) + dump_yaml(doc)
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="plan_export.yaml", target="yaml",
                        framework="rlsolve")
