"""NeMo-RL 0.7: a GRPO config YAML (`uv run examples/run_grpo.py --config nemo_rl_plan.yaml`) that
inherits NeMo-RL's own `examples/configs/grpo_math_1B.yaml` (`grpo_rm_1B.yaml`, which inherits it, when a
reward model scores the samples) through its `defaults` key and overrides the plan's decisions: the
policy's training layout (`policy.dtensor_cfg` for FSDP2, or `policy.megatron_cfg`), the vLLM generation
layout (`policy.generation.vllm_cfg`), colocation and the generation resources, async GRPO, the reward
model's environment (`env.reward_model`: its GPUs and tensor-parallel degree), and the cluster.

Units: `grpo.num_prompts_per_step` counts prompts; `policy.train_global_batch_size` and
`policy.train_micro_batch_size` count samples. `vllm_cfg.gpu_memory_utilization` is vLLM's own fraction
(weights + KV cache + engine overhead), the plan's. Keys: NeMo-RL v0.7.0 `examples/configs/grpo_math_1B.yaml`.
"""
from __future__ import annotations

from typing import Any

from rlsolve.export.common import ExportResult, Job, comment_block, dump_yaml, header_lines, nest, warning_lines, Pin
from rlsolve.frameworks import capabilities
from rlsolve.frameworks.rules import strategy_for

PIN = Pin("NeMo-RL", "0.7", "0.7.0", "nemo-rl (git tag v0.7.0; the PyPI name holds a placeholder)")
BASE = "examples/configs/grpo_math_1B.yaml"
RM_BASE = "examples/configs/grpo_rm_1B.yaml"


def strategy(job: Job) -> str:
    t = job.t
    return strategy_for(capabilities("nemo-rl"), job.framework, t.tp, t.pp, t.cp, t.ep, t.vp, t.zero_stage,
                        t.recompute)


def values(job: Job) -> dict[str, Any]:
    notes, t, g, opt = job.notes, job.t, job.g, job.opt
    if job.algorithm != "grpo":
        notes.warn("PPO is not exported for NeMo-RL yet (its examples/configs/ppo_math_1B.yaml value section): "
                   "use --to verl or --to openrlhf")
    v: dict[str, Any] = {
        "grpo.num_prompts_per_step": job.prompts,
        "grpo.num_generations_per_prompt": job.n,
        "grpo.async_grpo.enabled": job.mode == "async",
        "policy.model_name": job.model_id("policy"),
        "policy.train_global_batch_size": job.mini_batch_samples,
        "policy.train_micro_batch_size": t.micro_batch,
        "policy.logprob_batch_size": t.micro_batch,
        "policy.max_total_sequence_length": job.max_len,
        "loss_fn.reference_policy_kl_penalty": 0.01 if job.has_reference else 0.0,
    }
    if job.mode == "async":
        v["grpo.async_grpo.max_trajectory_age_steps"] = job.staleness
    offload = opt.train_offload_during_rollout
    if strategy(job) == "megatron":
        m = "policy.megatron_cfg."
        v.update({"policy.dtensor_cfg.enabled": False, m + "enabled": True,
                  m + "tensor_model_parallel_size": t.tp, m + "pipeline_model_parallel_size": t.pp,
                  m + "context_parallel_size": t.cp, m + "expert_model_parallel_size": t.ep,
                  m + "sequence_parallel": bool(t.sequence_parallel and t.tp > 1),
                  m + "activation_checkpointing": t.recompute != "none",
                  m + "optimizer.use_distributed_optimizer": t.zero_stage >= 1,
                  m + "optimizer.optimizer_cpu_offload": offload})
        if t.recompute != "none":
            v[m + "recompute_granularity"] = t.recompute
    else:
        d = "policy.dtensor_cfg."
        v.update({d + "enabled": True, "policy.megatron_cfg.enabled": False,
                  d + "tensor_parallel_size": t.tp, d + "context_parallel_size": t.cp,
                  d + "sequence_parallel": bool(t.sequence_parallel and t.tp > 1),
                  d + "activation_checkpointing": t.recompute != "none", d + "cpu_offload": offload})
    gv = "policy.generation.vllm_cfg."
    v.update({gv + "tensor_parallel_size": g.tp, gv + "pipeline_parallel_size": g.pp,
              gv + "expert_parallel_size": g.ep, gv + "max_model_len": job.max_len})
    if g.pp > 1:
        # NeMo-RL v0.7.0 vllm_generation.py L117-121: rollout PP runs only on vLLM's async engine, whose
        # AsyncLLM caps an engine at 128 sequences unless told (engine context): pass the plan's cap through
        # vllm_kwargs (vllm_worker.py L271, L456), as the engine the plan scored holds them all
        v[gv + "async_engine"] = True
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


def _reward_model(job: Job) -> dict[str, Any]:
    """env.reward_model (NeMo-RL v0.7.0 examples/configs/grpo_rm_1B.yaml, which the export then inherits, with
    data.default.env_name: reward_model): the plan's reward model on its auxiliary group, GPUs of its own
    (RewardModelEnvironment's RayVirtualCluster of resources.num_nodes x gpus_per_node) at the group's
    tensor-parallel degree (DTensor: the only path RewardModelEnvironment runs)."""
    rm = job.aux if "reward" in job.aux_hosts() else None
    if rm is None:  # the capability catalog places NeMo-RL's reward model on a group of its own only
        job.notes.warn(f"NeMo-RL runs a reward model only as env.reward_model on GPUs of its own; the plan places "
                       f"it on {job.placement.reward}, so the export scores with grpo_math_1B.yaml's math environment")
        return {}
    if job.opt.reward_quantization != "none":
        job.reward_quant_note("NeMo-RL")
    e = "env.reward_model."
    return {e + "model_name": job.model_id("reward"), e + "precision": "bfloat16", e + "max_model_len": job.max_len,
            e + "resources.num_nodes": rm.nodes, e + "resources.gpus_per_node": rm.per_node,
            e + "dtensor_cfg.tensor_parallel_size": job.aux_group().tp, e + "dtensor_cfg.context_parallel_size": 1}


def base(job: Job) -> str:
    """The NeMo-RL example config the export inherits: grpo_rm_1B.yaml (itself on grpo_math_1B.yaml) when a
    reward model runs as an environment, for its env.reward_model section and data.default.env_name."""
    return RM_BASE if job.reward_model is not None and "reward" in job.aux_hosts() else BASE


def export(job: Job) -> ExportResult:
    vals = values(job)
    head = header_lines(PIN, job, "a GRPO config YAML inheriting NeMo-RL's " + base(job))
    head += ["Put this file at the root of a NeMo-RL v0.7.0 checkout (defaults: resolves from there) and run",
             "uv run examples/run_grpo.py --config nemo_rl_plan.yaml",
             "Units: grpo.num_prompts_per_step counts prompts; policy.train_*_batch_size count samples."]
    doc = {"defaults": base(job)}
    doc.update(nest(vals))
    text = comment_block(head + warning_lines(job.notes)) + dump_yaml(doc)
    return ExportResult(text=text, warnings=list(job.notes.warnings), filename="nemo_rl_plan.yaml", target="nemo-rl",
                        framework=PIN.label)
