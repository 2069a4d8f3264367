"""DeepSpeed 0.19: the config JSON of the policy's training side.

Units: `train_batch_size` is samples per optimizer step = `train_micro_batch_size_per_gpu` x
`gradient_accumulation_steps` x the data-parallel size. JSON holds no comments, so the header,
the launch size and every warning go into a `_comment` list, a key DeepSpeed does not read (its
config parser reads known keys and rejects only a list of removed ones). Every other key exists in
DeepSpeed 0.19.8's config schema (`deepspeed/runtime/constants.py` and the pydantic config models).
"""
from __future__ import annotations

from typing import Any

from rlsolve.export.common import PINS, ExportResult, Job, dump_json, header_lines, warning_lines

PIN = PINS["deepspeed"]
COMMENT_KEY = "_comment"


def config(job: Job) -> dict[str, Any]:
    notes, t, opt = job.notes, job.t, job.opt
    # DeepSpeedConfig checks train_batch_size == micro x grad_accum x world size / sequence_parallel_size,
    # and the world it launches on includes every AutoTP rank (they see the same samples)
    replicas = job.train.gpus // max(1, t.cp)
    cfg: dict[str, Any] = {
        "train_batch_size": t.micro_batch * t.grad_accum * replicas,
        "train_micro_batch_size_per_gpu": t.micro_batch,
        "gradient_accumulation_steps": t.grad_accum,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": t.zero_stage},
    }
    if t.zero_stage >= 2:
        cfg["zero_optimization"]["overlap_comm"] = True
        cfg["zero_optimization"]["contiguous_gradients"] = True
    if t.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": t.tp}
    if t.cp > 1:
        cfg["sequence_parallel_size"] = t.cp
        notes.note(f"context parallel cp={t.cp} as Ulysses sequence parallelism: sequence_parallel_size sets the "
                   f"data-parallel size DeepSpeed divides the batch by; the model registers Ulysses attention in code")
    if t.ep > 1:
        cfg["expert_parallel"] = {"enabled": True, "autoep_size": t.ep}
    if t.pp > 1:
        notes.warn(f"pipeline parallelism pp={t.pp} is not expressible in the DeepSpeed JSON: build the model as "
                   f"deepspeed.pipe.PipelineModule(num_stages={t.pp}) in code")
    if t.vp > 1:
        notes.warn(f"virtual pipeline stages vp={t.vp} are not expressible in DeepSpeed (no interleaved 1F1B)")
    if t.recompute != "none":
        notes.warn(f"{t.recompute} activation recompute is not a DeepSpeed JSON setting: enable it in the model "
                   f"(HF gradient_checkpointing_enable(), whole-layer)")
    if opt.train_offload_during_rollout:
        notes.warn("train_offload_during_rollout is not expressible in the DeepSpeed JSON (offload_optimizer would "
                   "keep Adam on the CPU during training too): the RL framework offloads between phases "
                   "(OpenRLHF --ds.enable_sleep)")
    if opt.reference_offload and job.has_reference:
        notes.warn("reference_offload concerns the reference model's engine, not this training config")
    if job.framework != "deepspeed":
        notes.note(f"the plan trains with {job.framework}; this is the DeepSpeed config of the same layout")
    return cfg


def export(job: Job) -> ExportResult:
    cfg = config(job)
    head = header_lines(PIN, job, "config JSON of the policy's training side")
    head += [f"Launch on {job.train.nodes} node(s) x {job.train.per_node} GPUs "
             f"(deepspeed --num_nodes {job.train.nodes} --num_gpus {job.train.per_node} ...).",
             f"train_batch_size = micro {job.t.micro_batch} x grad_accum {job.t.grad_accum} x {job.train.gpus // max(1, job.t.cp)} "
             f"ranks (GPUs / sequence_parallel_size; each of the dp {job.t.dp} replicas' {job.train.gpus // max(1, job.t.cp) // job.t.dp} "
             f"AutoTP/pipeline ranks counts the same samples): {job.mini_batch_samples} distinct samples per step.",
             "The generation side is not part of this file: export it with --to vllm or --to sglang."]
    doc = {COMMENT_KEY: head + warning_lines(job.notes)}
    doc.update(cfg)
    return ExportResult(text=dump_json(doc), warnings=list(job.notes.warnings), filename="ds_config.json",
                        target="deepspeed", framework=PIN.label)
