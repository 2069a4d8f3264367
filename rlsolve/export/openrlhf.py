"""OpenRLHF 0.11: the dotted flags of `python3 -m openrlhf.cli.train_ppo_ray` (a launch script).

Units: `--rollout.batch_size` counts prompts, `--train.batch_size` counts samples (one optimizer
step), `--train.micro_batch_size` is samples per GPU (per model replica with DeepSpeed TP or ring
attention). Modes: colocated -> `--train.colocate_all` with vLLM and DeepSpeed sleep modes (the
hybrid engine); async -> `--train.async_enable` with a queue of `staleness` batches; sync -> separate
actor and vLLM GPUs taking turns (OpenRLHF's default). Every flag exists in OpenRLHF 0.11.2's
`openrlhf/cli/train_ppo_ray.py` argparse definitions.
"""
from __future__ import annotations

from rlsolve.export.common import (PINS, ExportResult, Job, Section, comment_block, header_lines, render_array,
                                   warning_lines)

PIN = PINS["openrlhf"]


def sections(job: Job) -> list[Section]:
    notes, t, g, opt, pl = job.notes, job.t, job.g, job.opt, job.placement
    out: list[Section] = []
    train = job.train
    job.pools_note("OpenRLHF")

    if job.engine != "vllm":
        notes.warn(f"OpenRLHF generates with vLLM only: the plan's {job.engine} engine is exported as vLLM engines "
                   f"of the same size")

    # --- placement
    s = Section("placement: nodes and GPUs per role")
    s.add("--actor.num_nodes", train.nodes)
    s.add("--actor.num_gpus_per_node", train.per_node)
    # async: a reward model or critic on the trainers needs colocate_all (only the reference has its own flag,
    # --train.colocate_actor_ref), and a critic on GPUs of its own needs it off
    colocate_all = job.colocated or (job.mode == "async" and (
        "training" in (pl.reward, pl.value) or (pl.reference == "training" and job.critic_group is None)))
    if job.colocated:
        s.flag("--train.colocate_all", comment="hybrid engine: vLLM, actor, ref, critic and reward share the GPUs")
    elif colocate_all:
        s.flag("--train.colocate_all", comment="async: colocates the DeepSpeed models (actor/ref/critic/reward) on "
                                               "the training GPUs; vLLM keeps its own")
    aux = job.aux
    if aux is not None and len(job.aux_hosts()) > 1:
        notes.warn(f"OpenRLHF runs one model per actor group: the plan's shared auxiliary group of {aux.gpus} GPUs "
                   f"for the reference and reward models becomes two groups of {aux.gpus} GPUs each")
    if aux is not None and aux.gpus % (job.t.tp * job.t.cp):
        notes.warn(f"OpenRLHF runs every model with the actor's tp x ring = {job.t.tp * job.t.cp} GPUs per replica: "
                   f"the auxiliary group's {aux.gpus} GPUs do not hold whole replicas")
    if aux is not None and colocate_all:
        notes.warn("with --train.colocate_all OpenRLHF puts every DeepSpeed model in the actor's placement group: the "
                   f"plan's auxiliary group ({aux.gpus} GPUs for the {' and '.join(sorted(job.aux_hosts()))} "
                   f"model(s)) is not expressible with it; solve with --framework openrlhf")
    elif aux is not None:
        notes.note(f"the plan's auxiliary group: {aux.gpus} GPUs of pool {aux.pool!r} for the "
                   f"{' and '.join(sorted(job.aux_hosts()))} model(s), a Ray actor group of its own with the actor's "
                   f"--ds.tensor_parallel_size x --ds.ring_attn_size GPUs per replica")
    if job.has_reference:
        ref_group = aux if pl.reference == "auxiliary" else train
        s.add("--ref.num_nodes", ref_group.nodes)
        s.add("--ref.num_gpus_per_node", ref_group.per_node)
        if not colocate_all and pl.reference != "auxiliary":
            s.flag("--train.colocate_actor_ref", comment="the reference shares the actor's GPUs")
        if pl.reference == "generation":
            notes.warn("reference placement 'generation' is not expressible in OpenRLHF (the reference is a "
                       "DeepSpeed model): it runs on the training GPUs")
    if job.critic is not None:
        group = job.critic_group  # the plan's critic on GPUs of its own: its RayActorGroup (pg None without
        critic_gpus = group or train  # colocate_all / colocate_critic_reward), trained beside the actor
        s.add("--critic.num_nodes", critic_gpus.nodes, "the critic's own GPUs" if group else "")
        s.add("--critic.num_gpus_per_node", critic_gpus.per_node)
        if group is not None and colocate_all:
            notes.warn("with --train.colocate_all OpenRLHF puts the critic in the actor's placement group: the plan's "
                       f"critic group of {group.gpus} GPUs is not expressible with it; solve with --framework openrlhf")
        if group is not None and group.gpus % (job.t.tp * job.t.cp):
            notes.warn(f"OpenRLHF runs the critic with the actor's tp x ring = {job.t.tp * job.t.cp} GPUs per replica: "
                       f"the critic group's {group.gpus} GPUs do not hold whole replicas")
        if group is None and not colocate_all:
            notes.warn(f"OpenRLHF (mode {job.mode}) cannot put the critic on the actor's GPUs without colocate_all: "
                       f"it needs {train.gpus} more GPUs (critic.num_nodes x critic.num_gpus_per_node)")
        if pl.value == "generation":
            notes.warn("value placement 'generation' is not expressible in OpenRLHF: the critic trains on the "
                       "training GPUs")
        own, t = job.lay.parallelism.critic, job.t
        keys = ("tp", "pp", "cp", "zero_stage", "micro_batch", "recompute") + (() if group else ("dp",))
        if own is not None and any(getattr(own, k) != getattr(t, k) for k in keys):
            notes.warn("the critic's own degrees are not expressible in OpenRLHF 0.11 (one set of --ds.* and "
                       "--train.micro_batch_size flags for every model): it trains with the actor's "
                       + ", ".join(f"{k}={getattr(t, k)}" for k in keys))
    if job.reward_model is not None:
        reward_group = aux if pl.reward == "auxiliary" else train
        s.add("--reward.num_nodes", reward_group.nodes)
        s.add("--reward.num_gpus_per_node", reward_group.per_node)
        if pl.reward != "auxiliary" and not colocate_all:  # (auxiliary: its own group on the plan's GPUs)
            if job.critic is not None:
                s.flag("--train.colocate_critic_reward", comment="the reward model shares the critic's GPUs")
            else:
                notes.warn(f"OpenRLHF (mode {job.mode}) gives the reward model its own {train.gpus} GPUs; the plan "
                           f"places it on {pl.reward}")
        if pl.reward == "generation":
            notes.warn("reward placement 'generation' is not expressible in OpenRLHF (the reward model is a "
                       "DeepSpeed model): it runs with the training-side models")
        job.reward_quant_note("OpenRLHF")
    out.append(s)

    # --- vLLM engines
    s = Section("rollout engines (vLLM)")
    engine_tp = g.tp * g.pp
    if g.pp > 1:
        notes.warn(f"OpenRLHF's vLLM engines have no pipeline parallelism: engine pp={g.pp} is folded into "
                   f"tensor_parallel_size={engine_tp} (same GPUs per engine, TP across the stages)")
    if g.ep > 1:
        notes.warn(f"OpenRLHF has no flag for vLLM expert parallelism: engine ep={g.ep} is not expressible "
                   f"(experts are sharded by TP)")
    s.add("--vllm.num_engines", g.dp, "engine replicas")
    s.add("--vllm.tensor_parallel_size", engine_tp)
    util = job.memory_fraction("OpenRLHF", "0.95")
    if util is not None:
        s.add("--vllm.gpu_memory_utilization", util, "weights + KV cache + engine overhead, from the plan")
    s.flag("--vllm.enable_prefix_caching", comment="samples of a prompt share its prefill")
    if job.colocated:
        s.flag("--vllm.enable_sleep", comment="vLLM frees its memory while training runs")
    if opt.max_num_seqs:
        notes.warn(f"OpenRLHF has no flag for vLLM's max_num_seqs: the plan's cap of {opt.max_num_seqs} concurrent "
                   f"sequences per engine is not expressible (vLLM's default applies)")
    out.append(s)

    # --- workload and batches
    s = Section("workload and batch sizes (rollout.batch_size: prompts; train.batch_size: samples)")
    s.add("--actor.model_name_or_path", job.model_id("policy"))
    if job.reward_model is not None:
        s.add("--reward.model_name_or_path", job.model_id("reward"))
    else:
        s.add("--reward.remote_url", "$REWARD_FUNC", "rule-based reward: a reward_func .py file or an HTTP URL")
    if job.critic is not None:
        s.add("--critic.model_name_or_path", job.model_id("value"))
    s.add("--data.prompt_dataset", "$PROMPT_DATASET")
    s.add("--algo.advantage.estimator", "group_norm" if job.algorithm == "grpo" else "gae")
    if job.has_reference:
        if job.algorithm == "grpo":
            s.flag("--algo.kl.use_loss", comment="GRPO: KL to the reference as a loss term")
            s.add("--algo.kl.estimator", "k3")
    else:
        s.add("--algo.kl.init_coef", 0, "no reference model (OpenRLHF builds it only when the KL coefficient > 0)")
    s.add("--rollout.batch_size", job.prompts, "prompts per RL step")
    s.add("--rollout.n_samples_per_prompt", job.n)
    if job.samples % job.mini_batches:
        notes.warn(f"{job.samples} samples do not split into {job.mini_batches} equal mini-batches")
    s.add("--train.batch_size", job.mini_batch_samples, f"samples per optimizer step ({job.mini_batches} per RL step)")
    s.add("--train.micro_batch_size", t.micro_batch, "samples per GPU (model replica) per micro-batch")
    s.add("--train.max_epochs", job.epochs)
    s.add("--data.max_len", job.max_len, "prompt + response")
    s.add("--rollout.max_new_tokens", job.response_max)
    out.append(s)

    # --- training layout
    s = Section("training layout (DeepSpeed)")
    lost = [f"{k}={v}" for k, v in (("pp", t.pp), ("ep", t.ep), ("vp", t.vp)) if v > 1]
    if lost:
        ds_dp = max(1, job.train.gpus // (t.tp * t.cp))
        notes.warn(f"OpenRLHF trains with DeepSpeed, which has no pipeline/expert/virtual-pipeline parallelism: "
                   f"{' '.join(lost)} is not expressible; the {job.train.gpus} training GPUs run tp={t.tp} x "
                   f"ring={t.cp} x dp={ds_dp} under ZeRO-{t.zero_stage} instead (per-GPU memory differs from "
                   f"the plan)")
    if job.framework != "deepspeed":
        notes.note(f"the plan trains with {job.framework}; OpenRLHF trains with DeepSpeed ZeRO-{t.zero_stage} over "
                   f"the same GPUs")
    s.add("--ds.zero_stage", t.zero_stage)
    s.add("--ds.tensor_parallel_size", t.tp, "DeepSpeed AutoTP")
    s.add("--ds.ring_attn_size", t.cp, "context parallel as ring attention")
    if t.cp > 1:
        s.flag("--ds.packing_samples", comment="ring attention needs packed samples")
    s.add("--ds.param_dtype", "bf16")
    if t.recompute != "none":
        s.flag("--actor.gradient_checkpointing_enable")
        if t.recompute == "selective":
            notes.warn("selective recompute is not expressible in OpenRLHF (HF gradient checkpointing is "
                       "whole-layer): exported as full recompute")
    if job.colocated and opt.train_offload_during_rollout:
        s.flag("--ds.enable_sleep", comment="offload DeepSpeed states to the CPU while vLLM generates")
    elif opt.train_offload_during_rollout:
        notes.warn("train_offload_during_rollout is only expressible in colocated mode (--ds.enable_sleep)")
    if opt.reference_offload and job.has_reference:
        s.flag("--ref.offload", comment="reference weights in CPU memory")
    out.append(s)

    # --- pipeline mode
    s = Section(f"pipeline mode: {job.mode}")
    if job.mode == "async":
        s.flag("--train.async_enable", comment="generation overlaps training")
        s.add("--train.async_queue_size", max(1, job.staleness), "batches generation may run ahead (staleness)")
    out.append(s)
    return out


def export(job: Job) -> ExportResult:
    secs = sections(job)
    head = header_lines(PIN, job, "flags of `python3 -m openrlhf.cli.train_ppo_ray`")
    head += ["Units: rollout.batch_size counts prompts, train.batch_size counts samples.",
             "Start Ray on every node first (ray start --head / ray start --address ...), then run this script "
             "(or wrap the command in `ray job submit`).",
             "Set PROMPT_DATASET" + ("" if job.reward_model is not None else " and REWARD_FUNC") + "."]
    text = "#!/usr/bin/env bash\n" + comment_block(head + warning_lines(job.notes)) + "set -euo pipefail\n"
    text += "PROMPT_DATASET=${PROMPT_DATASET:?set PROMPT_DATASET}\n"
    if job.reward_model is None:
        text += "REWARD_FUNC=${REWARD_FUNC:?set REWARD_FUNC (reward_func.py or URL)}\n"
    text += render_array("OPENRLHF_ARGS", secs, "argparse")
    text += 'python3 -m openrlhf.cli.train_ppo_ray "${OPENRLHF_ARGS[@]}" "$@"\n'
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="train_ppo_ray.sh",
                        target="openrlhf", framework=PIN.label)
