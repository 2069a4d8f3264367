"""NeMo-RL 0.7: a GRPO or PPO config YAML (`uv run examples/run_grpo.py --config nemo_rl_plan.yaml`, or
run_ppo.py) that inherits NeMo-RL's own `examples/configs/grpo_math_1B.yaml` (`grpo_rm_1B.yaml`, which
inherits it, when a reward model scores the samples), or for PPO `examples/configs/ppo_math_1B.yaml`,
through its `defaults` key and overrides the plan's decisions: the policy's training layout
(`policy.dtensor_cfg` for FSDP2, or `policy.megatron_cfg`), the critic's (`value.*`, PPO), the vLLM
generation layout (`policy.generation.vllm_cfg`), colocation and the generation resources, async GRPO, the
reward model's environment (`env.reward_model`: its GPUs and tensor-parallel degree), and the cluster.

Units: `grpo.num_prompts_per_step` / `ppo.num_prompts_per_step` count prompts;
`policy.train_global_batch_size`, `policy.train_micro_batch_size` and the value model's count samples.
`vllm_cfg.gpu_memory_utilization` is vLLM's own fraction (weights + KV cache + engine overhead), the plan's.
Keys: NeMo-RL v0.7.0 `examples/configs/grpo_math_1B.yaml`, `examples/configs/ppo_math_1B.yaml`.
"""
from __future__ import annotations

from typing import Any

from rlsolve.export.common import ExportResult, Job, comment_block, dump_yaml, header_lines, nest, warning_lines, Pin
from rlsolve.frameworks import capabilities
from rlsolve.frameworks.rules import strategies, strategy_for, training_ok
from rlsolve.solver.rules import pipeline_ends

PIN = Pin("NeMo-RL", "0.7", "0.7.0", "nemo-rl (git tag v0.7.0; the PyPI name holds a placeholder)")
BASE = "examples/configs/grpo_math_1B.yaml"
RM_BASE = "examples/configs/grpo_rm_1B.yaml"
PPO_BASE = "examples/configs/ppo_math_1B.yaml"


def strategy(job: Job) -> str:
    t = job.t
    return strategy_for(capabilities("nemo-rl"), job.framework, t.tp, t.pp, t.cp, t.ep, t.vp, t.zero_stage,
                        t.recompute)


def megatron_pad(t) -> int:
    """NeMo-RL's minimum pad factor of a Megatron layout (v0.7.0 nemo_rl/models/megatron/data.py L1126-1131):
    2cp with context parallelism, times tp with sequence parallelism (which the export turns on with tp > 1)."""
    return (2 * t.cp if t.cp > 1 else 1) * (t.tp if t.tp > 1 else 1)


def critic_strategy(job: Job) -> str:
    """The value model's backend (PPO): the policy's when it trains the critic's degrees, else the first of
    NeMo-RL's value backends that does (capabilities.yaml critic_training)."""
    c = job.critic_t
    return strategy_for(capabilities("nemo-rl"), strategy(job), c.tp, c.pp, c.cp, c.ep, c.vp, c.zero_stage,
                        c.recompute, critic=True)


def values(job: Job) -> dict[str, Any]:
    t, g, opt = job.t, job.g, job.opt
    algo = "ppo" if job.algorithm == "ppo" else "grpo"
    v: dict[str, Any] = {
        algo + ".num_prompts_per_step": job.prompts,
        algo + ".num_generations_per_prompt": job.n,
        "policy.model_name": job.model_id("policy"),
        "policy.train_global_batch_size": job.mini_batch_samples,
        "policy.train_micro_batch_size": t.micro_batch,
        "policy.logprob_batch_size": t.micro_batch,
        "policy.max_total_sequence_length": job.max_len,
        "loss_fn.reference_policy_kl_penalty": 0.01 if job.has_reference else 0.0,
    }
    if algo == "grpo":
        v["grpo.async_grpo.enabled"] = job.mode == "async"
        if job.mode == "async":
            v["grpo.async_grpo.max_trajectory_age_steps"] = job.staleness
            # async_grpo_train's own checks (v0.7.0 grpo.py L3364-3373): rollouts on vLLM's async engine, and
            # importance-sampling correction of the off-policy samples (grpo_math_1B.yaml has both off)
            v["policy.generation.vllm_cfg.async_engine"] = True
            v["loss_fn.use_importance_sampling_correction"] = True
    else:
        v.update(_ppo(job))
    v.update(_backend("policy", t, job.policy, strategy(job) == "megatron", opt.train_offload_during_rollout))
    gv = "policy.generation.vllm_cfg."
    v.update({gv + "tensor_parallel_size": g.tp, gv + "pipeline_parallel_size": g.pp,
              gv + "expert_parallel_size": g.ep, gv + "max_model_len": job.max_len})
    if g.pp > 1:  # NeMo-RL v0.7.0 vllm_generation.py L117-121: rollout PP runs only on vLLM's async engine
        v[gv + "async_engine"] = True
    # the engine's cap, the plan's (or one that never binds: the engine the plan scored holds every request),
    # passed to vllm.LLM / AsyncEngineArgs through vllm_kwargs (vllm_worker.py L271, L456): without it vLLM
    # caps the engine at its own default (1024 or 256 sequences; an async engine's AsyncLLM at 128)
    v["policy.generation.vllm_kwargs.max_num_seqs"] = job.max_num_seqs()
    util = job.memory_fraction("NeMo-RL", "0.6")
    if util is not None:
        v[gv + "gpu_memory_utilization"] = util
    col = "policy.generation.colocated."
    v[col + "enabled"] = job.colocated
    v.update(_cluster(job))
    if job.reward_model is not None:
        v.update(_reward_model(job))
    return v


def _ppo(job: Job) -> dict[str, Any]:
    """PPO (nemo_rl/algorithms/ppo.py, examples/run_ppo.py) on ppo_math_1B.yaml: its epochs, whether the
    reference's log-probs are computed (ppo_train L903-905 asserts a zero KL penalty when they are skipped), and
    the critic: `value.*` with the plan's critic degrees and batch sizes on the policy's GPUs (setup L484-496
    builds the Value workers on the policy's cluster). NeMo-RL runs PPO only with colocated generation
    (setup L370-375): the rule table plans nothing else for it."""
    if not job.colocated:
        job.notes.warn(f"NeMo-RL 0.7 runs PPO only with colocated generation (ppo.py setup asserts it); the plan is "
                       f"{job.mode}")
    if job.placement.value != "training":
        job.notes.warn(f"NeMo-RL 0.7 trains the value model on the policy's GPUs; the plan places it on "
                       f"{job.placement.value}")
    c = job.critic_t
    caps = capabilities("nemo-rl")
    if not strategies(caps, c.tp, c.pp, c.cp, c.ep, c.vp, c.zero_stage, c.recompute, critic=True):
        why = training_ok(caps, c.tp, c.pp, c.cp, c.ep, c.vp, c.zero_stage, c.recompute, critic=True).reason
        job.notes.warn(f"{why}: NeMo-RL 0.7 refuses the plan's critic layout; solve with --framework nemo-rl")
    v: dict[str, Any] = {"ppo.ppo_epochs": job.epochs,
                         "ppo.skip_reference_policy_logprobs_calculation": not job.has_reference,
                         "ppo.adv_estimator.name": "gae",
                         "value.model_name": job.model_id("value"),
                         "value.train_global_batch_size": job.mini_batch_samples,
                         "value.train_micro_batch_size": c.micro_batch,
                         "value.max_total_sequence_length": job.max_len}
    megatron = critic_strategy(job) == "megatron"
    v.update(_backend("value", c, job.critic, megatron))
    if megatron:
        # ppo_math_1B_megatron.yaml's value overrides; ppo.py setup L251-258: the Megatron value model's CP > 1
        # runs on packed sequences only
        v.update({"value.reward_model_cfg.enabled": False, "value.optimizer": None, "value.scheduler": None,
                  "value.sequence_packing.enabled": c.cp > 1})
    return v


def _backend(section: str, t, arch, megatron: bool, offload: bool | None = None) -> dict[str, Any]:
    """`section`'s training backend (policy or value): Megatron's degrees in megatron_cfg, or FSDP2's in
    dtensor_cfg, the other disabled; `offload`: the policy's optimizer (Megatron) or whole state (DTensor)
    in host memory during the rollout (None: not set)."""
    if megatron:
        m = section + ".megatron_cfg."
        v = {section + ".dtensor_cfg.enabled": False, m + "enabled": True,
             m + "tensor_model_parallel_size": t.tp, m + "pipeline_model_parallel_size": t.pp,
             m + "context_parallel_size": t.cp, m + "expert_model_parallel_size": t.ep,
             m + "sequence_parallel": bool(t.sequence_parallel and t.tp > 1),
             m + "activation_checkpointing": t.recompute != "none",
             m + "optimizer.use_distributed_optimizer": t.zero_stage >= 1}
        if ends := pipeline_ends(arch.layers, t.pp):  # Megatron-Core's uneven split: the ends set apart
            first, last = ends
            v.update({m + "num_layers_in_first_pipeline_stage": first, m + "num_layers_in_last_pipeline_stage": last})
        if offload is not None:
            v[m + "optimizer.optimizer_cpu_offload"] = offload
        if t.recompute != "none":
            v[m + "recompute_granularity"] = t.recompute
        # the base's ${policy.dtensor_cfg.tensor_parallel_size} is not the Megatron degrees': packed sequences are
        # split over 2cp and, with sequence parallelism, tp (NeMo-RL v0.7.0 nemo_rl/models/megatron/data.py
        # L1126-1138 asserts make_sequence_length_divisible_by is a multiple of that)
        v[section + ".make_sequence_length_divisible_by"] = megatron_pad(t)
        return v
    d = section + ".dtensor_cfg."
    v = {d + "enabled": True, section + ".megatron_cfg.enabled": False,
         d + "tensor_parallel_size": t.tp, d + "context_parallel_size": t.cp,
         d + "sequence_parallel": bool(t.sequence_parallel and t.tp > 1),
         d + "activation_checkpointing": t.recompute != "none"}
    if offload is not None:
        v[d + "cpu_offload"] = offload
    return v


def _cluster(job: Job) -> dict[str, Any]:
    """cluster.* and the generation resources, so that NeMo-RL's own split (grpo.py setup L525-660) gives each
    role the plan's GPUs: on one node (cluster.num_nodes 1) the reward model's and the engines'
    gpus_per_node come out of cluster.gpus_per_node; on several, the reward model's num_nodes and the
    engines' num_nodes come out of cluster.num_nodes and training takes the rest."""
    col = "policy.generation.colocated."
    g_per_node = job.train.gpus_per_node
    rm = job.aux if "reward" in job.aux_hosts() else None
    rm_gpus = rm.gpus if rm is not None else 0
    v: dict[str, Any] = {}
    if job.colocated:
        if job.train.gpus + rm_gpus <= g_per_node:  # one node: the reward model's GPUs are taken from it
            v.update({"cluster.num_nodes": 1, "cluster.gpus_per_node": job.train.gpus + rm_gpus})
        else:
            v.update({"cluster.num_nodes": job.train.nodes + (rm.nodes if rm else 0),
                      "cluster.gpus_per_node": job.train.per_node})
    elif job.train.gpus + job.gen.gpus + rm_gpus <= g_per_node:  # one node: generation (and the reward model) take
        v.update({"cluster.num_nodes": 1, "cluster.gpus_per_node": job.train.gpus + job.gen.gpus + rm_gpus,
                  col + "resources.num_nodes": 1, col + "resources.gpus_per_node": job.gen.gpus})
    elif job.train.gpus + job.gen.gpus <= g_per_node:  # the policy on one node, the reward model on node(s) of its own
        v.update({"cluster.num_nodes": 1 + rm.nodes, "cluster.gpus_per_node": job.train.gpus + job.gen.gpus,
                  col + "resources.num_nodes": 1, col + "resources.gpus_per_node": job.gen.gpus})
    else:  # several nodes: generation takes resources.num_nodes whole nodes
        v.update({"cluster.num_nodes": job.train.nodes + job.gen.nodes + (rm.nodes if rm else 0),
                  "cluster.gpus_per_node": g_per_node,
                  col + "resources.num_nodes": job.gen.nodes, col + "resources.gpus_per_node": g_per_node})
    return v


# NeMo-RL v0.7.0 examples/configs/grpo_rm_1B.yaml env.reward_model, which a PPO export (on ppo_math_1B.yaml, which
# has none) carries itself; the plan's values are set over it in _reward_model
RM_ENV = {"processor": "math_hf_data_processor", "tokenizer.name": "${env.reward_model.model_name}",
          "batch_size": "${policy.train_micro_batch_size}", "checkpoint_path": None,
          "offload_optimizer_for_logprob": False, "dtensor_cfg._v2": True, "dtensor_cfg.enabled": True,
          "dtensor_cfg.sequence_parallel": False, "dtensor_cfg.custom_parallel_plan": None,
          "dtensor_cfg.cpu_offload": False, "dtensor_cfg.activation_checkpointing": False,
          "reward_model_cfg.enabled": True, "reward_model_cfg.reward_model_type": "bradley_terry",
          "dynamic_batching.enabled": False, "sequence_packing.enabled": False, "max_grad_norm": None}


def _reward_model(job: Job) -> dict[str, Any]:
    """env.reward_model (NeMo-RL v0.7.0 examples/configs/grpo_rm_1B.yaml, which the export then inherits, with
    data.default.env_name: reward_model): the plan's reward model on its auxiliary group, GPUs of its own
    (RewardModelEnvironment's RayVirtualCluster of resources.num_nodes x gpus_per_node) at the group's
    tensor-parallel degree (DTensor: the only path RewardModelEnvironment runs)."""
    rm = job.aux if "reward" in job.aux_hosts() else None
    if rm is None:  # the capability catalog places NeMo-RL's reward model on a group of its own only
        job.notes.warn(f"NeMo-RL runs a reward model only as env.reward_model on GPUs of its own; the plan places "
                       f"it on {job.placement.reward}, so the export scores with {base(job).rsplit('/', 1)[-1]}'s math "
                       f"environment")
        return {}
    if job.opt.reward_quantization != "none":
        job.reward_quant_note("NeMo-RL")
    e = "env.reward_model."
    v: dict[str, Any] = {}
    if job.algorithm == "ppo":
        # ppo.py setup L376-406 takes the reward model's GPUs out of cluster.* only when data.env_name (top level,
        # which MasterConfig keeps) is reward_model; data.default.env_name makes the data sets use its environment
        v.update({e + k: x for k, x in RM_ENV.items()})
        v.update({"data.env_name": "reward_model", "data.default.env_name": "reward_model"})
    v.update({e + "model_name": job.model_id("reward"), e + "precision": "bfloat16", e + "max_model_len": job.max_len,
              e + "resources.num_nodes": rm.nodes, e + "resources.gpus_per_node": rm.per_node,
              e + "dtensor_cfg.tensor_parallel_size": job.aux_group().tp, e + "dtensor_cfg.context_parallel_size": 1})
    return v


def base(job: Job) -> str:
    """The NeMo-RL example config the export inherits: grpo_rm_1B.yaml (itself on grpo_math_1B.yaml) when a
    reward model runs as an environment, for its env.reward_model section and data.default.env_name; for PPO
    ppo_math_1B.yaml (the export then carries env.reward_model itself)."""
    if job.algorithm == "ppo":
        return PPO_BASE
    return RM_BASE if job.reward_model is not None and "reward" in job.aux_hosts() else BASE


def _pools_note(job: Job) -> None:
    """A cluster of several pools: NeMo-RL places its GPU bundles on any node of its Ray cluster
    (virtual_cluster.py L802-809), so the plan runs every role on one pool (capabilities.yaml
    heterogeneous_pools) and the Ray cluster is started on that pool's nodes only."""
    if len(job.problem.pools) < 2:
        return
    if job.heterogeneous or (job.aux is not None and job.aux.pool != job.train.pool):
        job.notes.warn("NeMo-RL cannot pin roles to pools (its bundles ask for any GPU): the plan's roles on "
                       "several pools are not expressible; solve with --framework nemo-rl")
        return
    idle = [p for p in job.problem.pools if p.name != job.train.pool]
    job.notes.note(f"start the Ray cluster on pool {job.train.pool!r}'s nodes only ({job.train.gpus} "
                   f"{job.train.gpu}); NeMo-RL places its GPU bundles on any node of its Ray cluster, so the plan "
                   f"leaves " + ", ".join(f"{p.name!r} ({p.n_gpus} {p.gpu.name})" for p in idle) + " idle")


def export(job: Job) -> ExportResult:
    _pools_note(job)
    vals = values(job)
    algo = "ppo" if job.algorithm == "ppo" else "grpo"
    head = header_lines(PIN, job, f"a {algo.upper()} config YAML inheriting NeMo-RL's " + base(job))
    head += ["Put this file at the root of a NeMo-RL v0.7.0 checkout (defaults: resolves from there) and run",
             f"uv run examples/run_{algo}.py --config nemo_rl_plan.yaml",
             f"Units: {algo}.num_prompts_per_step counts prompts; policy.train_*_batch_size and "
             f"value.train_*_batch_size count samples." if algo == "ppo" else
             "Units: grpo.num_prompts_per_step counts prompts; policy.train_*_batch_size count samples."]
    if algo == "ppo":
        head += ["The other PPO choices (DAPO-style clipping, reward shaping and scaling, GAE lambda) are "
                 "ppo_math_1B.yaml's."]
    doc = {"defaults": base(job)}
    doc.update(nest(vals))
    text = comment_block(head + warning_lines(job.notes)) + dump_yaml(doc)
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="nemo_rl_plan.yaml", target="nemo-rl",
                        framework=PIN.label)
