"""Megatron-LM / Megatron-Core 0.19: arguments of `megatron/training/arguments.py` for the policy's
training layout, plus Megatron-LM's own GRPO loop (`train_rl.py`, `--perform-rl-step`).

Units: `--micro-batch-size` is samples per model replica, `--global-batch-size` samples per
optimizer step (a multiple of micro x DP; the quotient is the plan's grad_accum). ZeRO-1 is the
distributed optimizer; ZeRO-2/3 are Megatron-FSDP sharding strategies. Megatron-LM's RL loop runs
inference inside the training processes (colocated), so the rollout layout maps to its
`--rl-inference-*` degrees. Every flag exists in megatron-core 0.19.2's
`megatron/training/arguments.py`, literally or generated from a config dataclass field name
(`ArgumentGroupFactory`: `--` + field name with `-`, `--no-`/`--disable-` for default-true booleans).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsolve.export.common import (PINS, ExportResult, Job, Section, comment_block, header_lines, render_array,
                                   warning_lines)
from rlsolve.perf.train import expert_tp
from rlsolve.reader import parse_yaml
from rlsolve.solver.rules import pipeline_ends

PIN = PINS["megatron"]


class RopeScaling(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["llama3", "yarn"]
    factor: float = Field(gt=0)
    mscale: float = 1.0
    mscale_all_dim: float = 0.0


class Family(BaseModel):
    """A checkpoint family's facts beyond the architecture catalog (model_shapes.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    normalization: Literal["RMSNorm", "LayerNorm"]
    norm_epsilon: float = Field(gt=0)
    rope_theta: int = Field(gt=0)
    rope_scaling: RopeScaling | None = None
    qk_layernorm: bool = False
    source: str = Field(min_length=10)


@lru_cache(maxsize=1)
def _families() -> dict[str, Family]:
    data = parse_yaml(Path(__file__).with_name("model_shapes.yaml").read_text(encoding="utf-8"), "model_shapes.yaml",
                      "export model shapes")["families"]
    return {k: Family.model_validate(v) for k, v in data.items()}


def family_of(name: str) -> Family | None:
    """The family whose prefix matches the catalog name (the longest prefix wins)."""
    fams = _families()
    for prefix in sorted(fams, key=len, reverse=True):
        if name.startswith(prefix):
            return fams[prefix]
    return None


def padded_vocab_divisor(vocab: int, tp: int) -> int:
    """--make-vocab-size-divisible-by such that Megatron's padding (to a multiple of it x TP) keeps
    the checkpoint's vocabulary size."""
    return vocab // tp if vocab % tp == 0 else 1


def _model_shape(job: Job, s: Section) -> None:
    a = job.policy
    s.add("--num-layers", a.layers)
    s.add("--hidden-size", a.hidden)
    s.add("--ffn-hidden-size", a.d_ffn)
    s.add("--num-attention-heads", a.heads)
    if a.is_mla:
        s.flag("--multi-latent-attention")
        if a.q_lora_rank:
            s.add("--q-lora-rank", a.q_lora_rank)
        s.add("--kv-lora-rank", a.kv_lora_rank)
        s.add("--qk-head-dim", a.qk_nope_head_dim)
        s.add("--qk-pos-emb-head-dim", a.qk_rope_head_dim)
        s.add("--v-head-dim", a.v_head_dim)
    else:
        if a.n_kv_heads < a.heads:
            s.flag("--group-query-attention")
            s.add("--num-query-groups", a.n_kv_heads)
        s.add("--kv-channels", a.d_head)
    if a.activation == "swiglu":
        s.flag("--swiglu")
    if not a.tied_embeddings:
        s.flag("--untie-embeddings-and-output-weights")
    if a.qkv_bias:
        s.flag("--add-qkv-bias")
    if a.is_moe:
        s.add("--num-experts", a.experts)
        s.add("--moe-router-topk", a.experts_per_token)
        s.add("--moe-ffn-hidden-size", a.d_moe_ffn)
        if a.shared_experts:
            s.add("--moe-shared-expert-intermediate-size", a.shared_experts * a.d_moe_ffn)
        if a.dense_layers:
            s.add("--moe-layer-freq", f"([0]*{a.dense_layers}+[1]*{a.layers - a.dense_layers})")
    s.flag("--disable-bias-linear", comment="no biases on the linear layers (q/k/v: see --add-qkv-bias)")
    s.add("--position-embedding-type", "rope")
    fam = family_of(a.name)
    if fam is None:
        job.notes.warn(f"no normalization/RoPE facts for {a.name} in rlsolve/export/model_shapes.yaml: Megatron's "
                       f"defaults (LayerNorm, RoPE base 10000) apply; add its family there")
    else:
        s.add("--normalization", fam.normalization, fam.source.split(":")[0])
        s.add("--norm-epsilon", fam.norm_epsilon)
        s.add("--rotary-base", fam.rope_theta)
        sc = fam.rope_scaling
        if sc is not None and sc.type == "llama3":
            s.flag("--use-rope-scaling", comment="Llama 3.x frequency scaling")
            s.add("--rope-scaling-factor", sc.factor)
        elif sc is not None:
            s.add("--rope-type", "yarn")
            s.add("--rotary-scaling-factor", sc.factor)
            s.add("--mscale", sc.mscale)
            s.add("--mscale-all-dim", sc.mscale_all_dim)
        if fam.qk_layernorm:
            s.flag("--qk-layernorm")
    if a.hf_id:
        s.add("--tokenizer-type", "HuggingFaceTokenizer")
        s.add("--tokenizer-model", a.hf_id)
    else:
        s.add("--tokenizer-type", "HuggingFaceTokenizer")
        s.add("--tokenizer-model", job.model_id("policy"))
    s.add("--make-vocab-size-divisible-by", padded_vocab_divisor(a.vocab, job.t.tp),
          f"keeps the checkpoint's {a.vocab}-token vocabulary at tp={job.t.tp}")
    s.add("--seq-length", job.max_len, "prompt + response")
    s.add("--max-position-embeddings", job.max_len)
    s.flag("--bf16")


def sections(job: Job) -> list[Section]:
    notes, t, g, opt = job.notes, job.t, job.g, job.opt
    out: list[Section] = []
    if job.framework != "megatron":
        notes.note(f"the plan trains with {job.framework}; these are the Megatron arguments of the same layout")

    s = Section(f"model shape: {job.policy.name} ({job.policy.hf_id or 'no HF id'}), from the rlsolve catalog")
    _model_shape(job, s)
    out.append(s)

    s = Section("training parallelism")
    s.add("--tensor-model-parallel-size", t.tp)
    s.add("--pipeline-model-parallel-size", t.pp)
    if ends := pipeline_ends(job.policy.layers, t.pp):  # Megatron-Core's uneven split: the ends set apart
        first, last = ends
        s.add("--decoder-first-pipeline-num-layers", first,
              f"{job.policy.layers} layers over pp={t.pp}: no stage above {-(-job.policy.layers // t.pp)}")
        s.add("--decoder-last-pipeline-num-layers", last)
    if t.vp > 1:
        s.add("--num-virtual-stages-per-pipeline-rank", t.vp, "interleaved 1F1B")
    s.add("--context-parallel-size", t.cp)
    s.add("--expert-model-parallel-size", t.ep, "carves the dp*cp ranks")
    if t.ep > 1 and expert_tp(t.tp, t.dp, t.cp, t.ep) != t.tp:
        s.add("--expert-tensor-parallel-size", 1, "EP folds over the TP ranks: experts stay whole")
    s.flag("--sequence-parallel", t.sequence_parallel and t.tp > 1)
    out.append(s)

    s = Section("batch (samples)")
    s.add("--micro-batch-size", t.micro_batch, "samples per model replica")
    s.add("--global-batch-size", job.mini_batch_samples,
          f"samples per optimizer step = micro {t.micro_batch} x dp {t.dp} x grad_accum {t.grad_accum}")
    out.append(s)

    s = Section("memory: ZeRO and recompute")
    if t.zero_stage >= 1:
        s.flag("--use-distributed-optimizer", comment="ZeRO-1: optimizer states sharded over DP")
    if t.zero_stage >= 2:
        s.flag("--use-megatron-fsdp", comment=f"ZeRO-{t.zero_stage} as Megatron-FSDP")
        s.add("--data-parallel-sharding-strategy", "optim_grads" if t.zero_stage == 2 else "optim_grads_params")
        s.add("--ckpt-format", "fsdp_dtensor", "Megatron-FSDP saves only this format (validate_args)")
    if t.recompute != "none":
        s.add("--recompute-granularity", t.recompute)
    if t.recompute == "full":
        s.add("--recompute-method", "uniform")
        s.add("--recompute-num-layers", 1)
    out.append(s)

    s = Section("RL: Megatron-LM's GRPO loop (train_rl.py); rollout runs inside the training processes")
    if job.algorithm != "grpo":
        notes.warn("Megatron-LM's RL loop implements GRPO only: PPO (critic, GAE) is not expressible; these are "
                   "the actor's training arguments (pair them with --to verl for the PPO loop)")
    else:
        s.flag("--perform-rl-step")
        s.add("--grpo-prompts-per-step", job.prompts, "prompts per RL step")
        s.add("--grpo-group-size", job.n, "samples per prompt")
        s.add("--grpo-iterations", job.epochs, "passes over the batch")
        if not job.has_reference:
            s.add("--grpo-kl-beta", 0.0, "no reference model")
        s.add("--rl-inference-tensor-model-parallel-size", g.tp)
        s.add("--rl-inference-pipeline-model-parallel-size", g.pp)
        if g.ep > 1:
            s.add("--rl-inference-expert-model-parallel-size", g.ep)
            s.add("--rl-inference-expert-tensor-model-parallel-size", 1, "experts EP-sharded, not TP-sharded")
        s.add("--inference-max-seq-length", job.max_len)
        if opt.kv_cache_gb is not None:
            s.add("--inference-dynamic-batching-buffer-size-gb", round(opt.kv_cache_gb, 2), "KV cache per GPU")
        else:
            notes.warn("the plan gives no kv_cache_gb: Megatron's default KV buffer (40 GB) applies")
        if opt.max_num_seqs:
            s.add("--inference-dynamic-batching-max-requests", opt.max_num_seqs)
        if opt.train_offload_during_rollout:
            s.flag("--rl-offload-optimizer-during-inference", comment="optimizer states to the CPU while generating")
        if job.mode == "async":
            s.flag("--rl-partial-rollouts", comment="generation continues while the policy updates")
            s.add("--rl-generation-lag", job.staleness, "staleness")
        if not job.colocated:
            notes.warn(f"Megatron-LM's RL loop runs inference inside the training processes: the plan's separate "
                       f"{job.gen.gpus}-GPU generation pool ({job.mode}) is not expressible; rollout runs on the "
                       f"{job.train.gpus} training GPUs (or serve it with --to vllm / --to sglang)")
        if opt.reference_offload:
            notes.warn("reference_offload is not expressible in Megatron-LM's RL loop (the reference stays on GPU)")
        if job.reward_model is not None:
            notes.warn("a reward model is not expressible in Megatron-LM's RL loop (rewards come from the "
                       "environments of --langrl-env-config)")
        if job.critic is not None:
            notes.warn("a critic is not expressible in Megatron-LM's RL loop (GRPO)")
    out.append(s)
    return out


def export(job: Job) -> ExportResult:
    secs = sections(job)
    world = job.train
    head = header_lines(PIN, job, "arguments of Megatron-LM (megatron/training/arguments.py)")
    head += ["Units: --micro-batch-size and --global-batch-size count samples.",
             f"Launch on {world.nodes} node(s) x {world.per_node} GPUs; set MASTER_ADDR and NODE_RANK per node."]
    text = "#!/usr/bin/env bash\n" + comment_block(head + warning_lines(job.notes)) + "set -euo pipefail\n"
    if (job.t.tp > 1 or job.t.cp > 1) and job.t.zero_stage < 2:
        text += "export CUDA_DEVICE_MAX_CONNECTIONS=1  # validate_args: TP/CP overlap needs one hardware queue (pre-Blackwell)\n"
    text += render_array("MEGATRON_ARGS", secs, "argparse")
    launch = (f"torchrun --nnodes {world.nodes} --nproc-per-node {world.per_node} --node-rank ${{NODE_RANK:-0}} "
              f"--master-addr ${{MASTER_ADDR:-127.0.0.1}} --master-port ${{MASTER_PORT:-6000}}")
    if job.algorithm == "grpo":
        text += f'{launch} train_rl.py "${{MEGATRON_ARGS[@]}}" "$@"\n'
    else:
        text += f'# {launch} <your PPO trainer> "${{MEGATRON_ARGS[@]}}"\n'
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="megatron_args.sh",
                        target="megatron", framework=PIN.label)
