"""verl 0.9: Hydra overrides for `python3 -m verl.trainer.main_ppo` (a launch script), or the same
keys as a Hydra config YAML.

Units: `data.train_batch_size` and `actor.ppo_mini_batch_size` count prompts (verl multiplies
the mini-batch by `rollout.n`); `*_micro_batch_size_per_gpu` counts samples per model replica.
Modes: colocated -> the v1 `sync` trainer with the hybrid engine (rollout and training share the
GPUs); async -> the v1 `separate_async` trainer with `hybrid_engine=false` and a standalone
rollout pool; verl has no synchronous trainer with separate pools (see the warning).
Every key exists in verl 0.9.1's `_generated_ppo_trainer.yaml` (FSDP engine) or
`_generated_ppo_megatron_trainer.yaml` (Megatron engine); keys under Megatron's free-form
`override_*_config` dicts carry Hydra's `+` and are Megatron-Core config fields.
"""
from __future__ import annotations

from typing import Any

from rlsolve.frameworks import capabilities
from rlsolve.frameworks.rules import strategies, strategy_for
from rlsolve.perf.train import expert_tp
from rlsolve.solver.rules import pipeline_ends
from rlsolve.export.common import (PINS, ExportResult, Job, Section, comment_block, dump_yaml, header_lines,
                                   nest, render_array, warning_lines)

PIN = PINS["verl"]
AR = "actor_rollout_ref"


def engine_of(job: Job) -> str:
    """verl's model engine: `megatron` or `dp` (FSDP): the plan's own strategy when verl runs the
    layout with it, else the one that does (rlsolve/frameworks/capabilities.yaml)."""
    t, caps = job.t, capabilities("verl")
    strategy = strategy_for(caps, job.framework, t.tp, t.pp, t.cp, t.ep, t.vp, t.zero_stage, t.recompute)
    if job.critic is not None:  # one engine trains the actor and the critic: one that runs both layouts
        c = job.critic_t
        both = [x for x in strategies(caps, t.tp, t.pp, t.cp, t.ep, t.vp, t.zero_stage, t.recompute)
                if x in strategies(caps, c.tp, c.pp, c.cp, c.ep, c.vp, c.zero_stage, c.recompute)]
        if both and strategy not in both:
            strategy = both[0]
    return "megatron" if strategy == "megatron" else "dp"


def _megatron_layout(job: Job, s: Section, prefix: str, offload: bool, t=None, arch=None) -> None:
    t, arch = t or job.t, arch or job.policy
    s.add(f"{prefix}.tensor_model_parallel_size", t.tp)
    s.add(f"{prefix}.pipeline_model_parallel_size", t.pp)
    if ends := pipeline_ends(arch.layers, t.pp):  # Megatron-Core's uneven split: the ends set apart
        first, last = ends
        s.add(f"+{prefix}.override_transformer_config.num_layers_in_first_pipeline_stage", first,
              f"{arch.layers} layers over pp={t.pp}: no stage above {-(-arch.layers // t.pp)}")
        s.add(f"+{prefix}.override_transformer_config.num_layers_in_last_pipeline_stage", last)
    s.add(f"{prefix}.virtual_pipeline_model_parallel_size", t.vp if t.vp > 1 else None)
    s.add(f"{prefix}.context_parallel_size", t.cp)
    s.add(f"{prefix}.expert_model_parallel_size", t.ep)
    if t.ep > 1 and expert_tp(t.tp, t.dp, t.cp, t.ep) != t.tp:
        s.add(f"{prefix}.expert_tensor_parallel_size", 1, "EP folds over the TP ranks: experts stay whole")
    s.add(f"{prefix}.sequence_parallel", bool(t.sequence_parallel and t.tp > 1))
    s.add(f"{prefix}.use_distributed_optimizer", t.zero_stage >= 1, "ZeRO-1: Megatron's distributed optimizer")
    s.add(f"{prefix}.use_megatron_fsdp", t.zero_stage >= 2)
    if t.zero_stage >= 2:
        strategy = "optim_grads" if t.zero_stage == 2 else "optim_grads_params"
        s.add(f"+{prefix}.override_ddp_config.data_parallel_sharding_strategy", strategy,
              f"ZeRO-{t.zero_stage} as Megatron-FSDP")
    s.add(f"{prefix}.param_offload", offload)
    s.add(f"{prefix}.optimizer_offload", offload)
    gran = {"none": None, "selective": "selective", "full": "full"}[t.recompute]
    s.add(f"{prefix}.override_transformer_config.recompute_granularity", gran)
    if t.recompute == "full":
        s.add(f"{prefix}.override_transformer_config.recompute_method", "uniform")
        s.add(f"{prefix}.override_transformer_config.recompute_num_layers", 1)


def _fsdp_layout(job: Job, s: Section, prefix: str, offload: bool, t=None) -> None:
    t = t or job.t
    s.add(f"{prefix}.param_offload", offload)
    s.add(f"{prefix}.optimizer_offload", offload)
    s.add(f"{prefix}.reshard_after_forward", t.zero_stage >= 3,
          "ZeRO-3 (true) / ZeRO-2-like SHARD_GRAD_OP (false)")
    s.add(f"{prefix}.ulysses_sequence_parallel_size", t.cp, "context parallel as Ulysses sequence parallel")


def _check_fsdp(job: Job, t=None, role: str = "training") -> None:
    t, notes = t or job.t, job.notes
    if job.framework == "deepspeed" and role == "training":
        notes.note("verl 0.9 has no DeepSpeed engine: the training side is exported for verl's FSDP engine")
    if t.tp > 1 or t.pp > 1 or t.ep > 1 or t.vp > 1:
        notes.warn(f"verl's FSDP engine has no tensor/pipeline/expert/virtual-pipeline parallelism: {role} "
                   f"tp={t.tp} pp={t.pp} ep={t.ep} vp={t.vp} is not expressible (plan framework "
                   f"{job.framework}); it would run as FSDP over all {job.train.gpus} GPUs")
    if t.zero_stage < 2:
        notes.warn(f"ZeRO-{t.zero_stage} is not expressible with verl's FSDP engine (it always shards "
                   f"parameters between layers): exported as the ZeRO-2-like SHARD_GRAD_OP "
                   f"(reshard_after_forward=false)")
    if t.recompute == "selective":
        notes.warn("selective recompute is not expressible with verl's FSDP engine (HF gradient checkpointing "
                   "is whole-layer): exported as full recompute (enable_gradient_checkpointing=true)")


def sections(job: Job) -> list[Section]:
    notes, t, g, opt, pl = job.notes, job.t, job.g, job.opt, job.placement
    mega = engine_of(job) == "megatron"
    if not mega:
        _check_fsdp(job)
        if job.critic is not None and job.lay.parallelism.critic is not None:
            _check_fsdp(job, job.critic_t, "critic")
    job.pools_note("verl")
    out: list[Section] = []

    # --- resources and mode
    s = Section("engine, resources and pipeline mode")
    s.add("model_engine", engine_of(job), "verl 0.9 picks the training engine with this config group")
    s.add("trainer.nnodes", job.train.nodes)
    s.add("trainer.n_gpus_per_node", job.train.per_node)
    s.add("trainer.use_v1", True)
    if job.colocated:
        s.add("trainer.v1.trainer_mode", "sync", "colocated: rollout and training time-share the GPUs")
        s.add(f"{AR}.hybrid_engine", True)
        s.add(f"{AR}.rollout.nnodes", 0, "no standalone rollout pool")
    else:
        if job.mode == "sync":
            notes.warn("verl 0.9 has no synchronous trainer with separate rollout and training GPUs: exported as "
                       "the separate_async trainer with max_off_policy_threshold=1 (generation may run one step "
                       "ahead, off-policy by at most one version); use mode colocated for strictly on-policy")
        staleness = max(1, job.staleness)
        s.add("trainer.v1.trainer_mode", "separate_async",
              "disaggregated: standalone rollout pool, training on trainer.*")
        s.add(f"{AR}.hybrid_engine", False, "no rollout replicas on the training GPUs")
        s.add(f"{AR}.rollout.nnodes", job.gen.nodes)
        s.add(f"{AR}.rollout.n_gpus_per_node", job.gen.per_node)
        s.add(f"{AR}.rollout.checkpoint_engine.backend", "nccl", "trainer -> rollout weight sync")
        s.add("trainer.v1.separate_async.parameter_sync_step", job.mini_batches,
              "one weight sync per RL step: train_batch_size = parameter_sync_step * ppo_mini_batch_size")
        s.add("trainer.v1.separate_async.num_warmup_batches", staleness, "batches generation runs ahead")
        s.add("trainer.v1.sampler.max_off_policy_threshold", staleness, "staleness: model versions a sample may span")
    out.append(s)

    # --- data, batch and algorithm
    s = Section("workload and batch sizes (verl counts prompts; micro-batches count samples)")
    s.add("data.train_files", "$TRAIN_FILES")
    s.add("data.val_files", "$VAL_FILES")
    s.add("data.train_batch_size", job.prompts, "prompts per RL step")
    s.add("data.max_prompt_length", job.prompt_len)
    s.add("data.max_response_length", job.response_max)
    s.add(f"{AR}.rollout.n", job.n, "samples per prompt")
    if job.prompts % job.mini_batches:
        notes.warn(f"{job.prompts} prompts do not split into {job.mini_batches} mini-batches of whole prompts: "
                   f"ppo_mini_batch_size={job.mini_batch_prompts} prompts")
    s.add(f"{AR}.actor.ppo_mini_batch_size", job.mini_batch_prompts,
          f"prompts per optimizer step = {job.mini_batch_samples} samples / n")
    s.add(f"{AR}.actor.ppo_micro_batch_size_per_gpu", t.micro_batch, "samples per micro-batch per model replica")
    s.add(f"{AR}.actor.ppo_epochs", job.epochs)
    s.add("algorithm.adv_estimator", "grpo" if job.algorithm == "grpo" else "gae")
    s.add(f"{AR}.actor.use_kl_loss", job.has_reference and job.algorithm == "grpo",
          "verl builds the reference model only when a KL term uses it")
    s.add("algorithm.use_kl_in_reward", job.has_reference and job.algorithm == "ppo")
    s.add(f"{AR}.model.path", job.model_id("policy"))
    out.append(s)

    # --- actor training layout
    offload = opt.train_offload_during_rollout
    s = Section(f"actor training layout ({'Megatron' if mega else 'FSDP'} engine)")
    if mega:
        _megatron_layout(job, s, f"{AR}.actor.megatron", offload)
    else:
        _fsdp_layout(job, s, f"{AR}.actor.fsdp_config", offload)
        s.add(f"{AR}.model.enable_gradient_checkpointing", t.recompute != "none")
    if offload:
        notes.note("train_offload_during_rollout: verl's param_offload/optimizer_offload move the actor's weights, "
                   "gradients and optimizer states to the CPU between phases (the weights as well as what the "
                   "plan offloads)")
    out.append(s)

    # --- rollout engine
    s = Section(f"rollout engine ({job.engine})")
    s.add(f"{AR}.rollout.name", job.engine)
    s.add(f"{AR}.rollout.tensor_model_parallel_size", g.tp)
    s.add(f"{AR}.rollout.pipeline_model_parallel_size", g.pp)
    dp_size = 1
    if g.ep > 1:
        if g.ep % g.tp == 0 and g.dp % (g.ep // g.tp) == 0:
            dp_size = g.ep // g.tp
            notes.note(f"rollout ep={g.ep}: verl's expert_parallel_size must be tp x data_parallel_size, so each "
                       f"vLLM/SGLang server holds {dp_size} of the plan's {g.dp} replicas (data_parallel_size="
                       f"{dp_size}) with the experts spread over their {g.ep} GPUs")
        else:
            notes.warn(f"rollout ep={g.ep} is not expressible in verl (it must equal tp x data_parallel_size with "
                       f"tp={g.tp} and {g.dp} replicas): experts are sharded by TP")
        s.add(f"{AR}.rollout.expert_parallel_size", g.tp * dp_size if dp_size > 1 else 1)
    s.add(f"{AR}.rollout.data_parallel_size", dp_size,
          f"replicas per server; verl runs gpus/(tp*pp*dp) = {job.gen.gpus // (g.tp * g.pp * dp_size)} server(s)")
    util = job.memory_fraction("verl", "0.5")
    if util is not None:
        s.add(f"{AR}.rollout.gpu_memory_utilization", util, "weights + KV cache + engine overhead, from the plan")
    s.add(f"{AR}.rollout.max_num_seqs", job.max_num_seqs())
    s.add(f"{AR}.rollout.max_model_len", job.max_len)
    s.add(f"{AR}.rollout.log_prob_micro_batch_size_per_gpu", t.micro_batch)
    out.append(s)

    # --- reference
    s = Section("reference model")
    if job.has_reference:
        s.add(f"{AR}.ref.log_prob_micro_batch_size_per_gpu", t.micro_batch)
        key = f"{AR}.ref.megatron.param_offload" if mega else f"{AR}.ref.fsdp_config.param_offload"
        s.add(key, bool(opt.reference_offload), "reference weights live in CPU memory between uses")
        if not mega:  # (Megatron's ref.megatron.* follow the actor's degrees; FSDP's ref follows actor.ulysses_*,
            # not the actor's fsdp_config: _generated_ppo_trainer.yaml ref.ulysses_sequence_parallel_size)
            s.add(f"{AR}.ref.ulysses_sequence_parallel_size", t.cp, "the reference splits sequences as the actor does")
        if pl.reference == "generation":
            notes.warn("reference placement 'generation' is not expressible in verl: the reference model runs on "
                       "the training GPUs (global pool)")
    out.append(s)

    # --- critic
    s = Section("critic (value model)")
    if job.critic is not None:
        s.add("critic.enable", True)
        s.add("critic.model.path", job.model_id("value"))
        ct = job.critic_t
        s.add("critic.ppo_micro_batch_size_per_gpu", ct.micro_batch)
        if mega:
            _megatron_layout(job, s, "critic.megatron", offload, ct, job.critic)
        else:
            _fsdp_layout(job, s, "critic.fsdp", offload, ct)
            s.add("critic.model.enable_gradient_checkpointing", ct.recompute != "none")
        if pl.value == "generation":
            notes.warn("value placement 'generation' is not expressible in verl: the critic trains on the "
                       "training GPUs (global pool)")
        if job.critic_group is not None:
            notes.warn(f"the plan's critic group of {job.critic_group.gpus} GPUs of its own is not expressible in "
                       f"verl 0.9 (the critic trains in the trainer pool, one after the actor): solve with "
                       f"--framework verl")
    out.append(s)

    # --- reward
    s = Section("reward")
    if job.reward_model is None:
        s.add("reward.reward_model.enable", False, "rule-based reward: set reward.custom_reward_function.path")
    else:
        s.add("reward.reward_model.enable", True)
        s.add("reward.reward_model.model_path", job.model_id("reward"))
        s.add("reward.reward_model.rollout.name", job.engine)
        if pl.reward == "auxiliary":  # the plan's group of its own: verl's reward resource pool, exactly
            aux, side = job.aux, job.aux_group()
            s.add("reward.reward_model.enable_resource_pool", True, f"the plan's auxiliary group on pool {aux.pool!r}")
            s.add("reward.reward_model.nnodes", aux.nodes)
            s.add("reward.reward_model.n_gpus_per_node", aux.per_node)
            s.add("reward.reward_model.rollout.tensor_model_parallel_size", side.tp,
                  f"{aux.gpus // side.tp} server(s) of tp={side.tp}, as planned")
            s.add("reward.reward_model.rollout.gpu_memory_utilization", round(1 - job.problem.workload.headroom, 3),
                  "the group's GPUs hold only the reward model: all but the plan's headroom")
        else:
            if pl.reward == "generation" or not job.colocated:
                why = ("verl cannot place the reward model on the rollout GPUs" if pl.reward == "generation" else
                       "verl's separate_async trainer requires the reward model in its own resource pool")
                notes.warn(f"reward placement '{pl.reward}' is not expressible: {why}; solve with --framework verl "
                           f"for a plan that gives it a resource pool of its own inside the cluster")
            s.add("reward.reward_model.enable_resource_pool", False, "on the training GPUs (global pool)")
        q = opt.reward_quantization
        if q != "none":
            s.add("reward.reward_model.rollout.quantization", "fp8", f"closest to the plan's {q} weights")
            if q == "int4":
                notes.warn("reward quantization int4 is not expressible in verl (rollout quantization: fp8, torchao): "
                           "exported as fp8, twice the plan's reward weight memory")
            else:
                notes.note("reward quantization int8 exported as fp8 (same bytes per weight)")
    out.append(s)
    return out


def flat(secs: list[Section]) -> dict[str, Any]:
    return {a.key: a.value for sec in secs for a in sec.args}


def export(job: Job, style: str = "sh") -> ExportResult:
    secs = sections(job)
    if style == "yaml":
        return _yaml(job, secs)
    head = header_lines(PIN, job, "Hydra overrides for `python3 -m verl.trainer.main_ppo`")
    head += ["Units: data.train_batch_size and ppo_mini_batch_size count prompts; micro-batches count samples.",
             "Set TRAIN_FILES / VAL_FILES (parquet) before running; run on the Ray head node."]
    text = "#!/usr/bin/env bash\n" + comment_block(head + warning_lines(job.notes))
    text += "set -euo pipefail\n"
    text += 'TRAIN_FILES=${TRAIN_FILES:-$HOME/data/train.parquet}\nVAL_FILES=${VAL_FILES:-$HOME/data/test.parquet}\n'
    text += render_array("VERL_ARGS", secs, "hydra")
    text += 'python3 -m verl.trainer.main_ppo "${VERL_ARGS[@]}" "$@"\n'
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="run_verl.sh", target="verl",
                        framework=PIN.label)


def _yaml(job: Job, secs: list[Section]) -> ExportResult:
    values = flat(secs)
    engine = values.pop("model_engine")
    for k in ("data.train_files", "data.val_files"):
        values[k] = "${oc.env:" + k.split(".")[1].upper() + "}"
    head = header_lines(PIN, job, "a Hydra config for `python3 -m verl.trainer.main_ppo`")
    head += ["Run: python3 -m verl.trainer.main_ppo --config-path=$PWD --config-name=verl_plan",
             f"(the defaults list selects the {engine} model engine, as model_engine={engine} would on the command line)",
             "Units: data.train_batch_size and ppo_mini_batch_size count prompts; micro-batches count samples."]
    doc = {"hydra": {"searchpath": ["pkg://verl.trainer.config"]},
           "defaults": ["ppo_trainer", {"override /model_engine": engine}, "_self_"]}
    doc.update(nest(values))
    text = comment_block(head + warning_lines(job.notes)) + dump_yaml(doc)
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="verl_plan.yaml", target="verl-yaml",
                        framework=PIN.label)
