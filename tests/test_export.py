"""Export: every target for every example plan (and hand-written layouts that reach the other code
paths) round-trips to the plan's values, states its framework version, keeps every warning in the
output. The frameworks' own validators run on these exports in tests/test_framework_targets.py."""
from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import rlsolve
from rlsolve.cli.main import main
from rlsolve.errors import InfeasibleError, SpecError
from rlsolve.export import PINS, TARGETS, ExportResult, export_plan, prepare
from rlsolve.frameworks.runtime import engine_default_max_num_seqs
from rlsolve.plan import LAYOUT_KEYS, Layout
from rlsolve.solver.rules import pool_named

from conftest import EXAMPLES

# --- cases: the example plans (solved once) and hand-written layouts ----------------------------

_plans: dict[str, dict] = {}


def engine_cap_as_planned(cap: int, job) -> bool:
    """An exported max_num_seqs is the plan's cap; without one, a cap that never binds (at least a step's
    requests per replica, staleness+1 steps in flight) and, where that many fit in it, vLLM's default for the
    GPU, the cap the plan's engine reserved its profile run for (perf.step.gen_side)."""
    if job.opt.max_num_seqs:
        return cap == job.opt.max_num_seqs
    pool = pool_named(job.problem, job.gen.pool, "generation pool")
    default = engine_default_max_num_seqs(pool.gpu.memory_bytes, pool.gpu.name)
    requests = math.ceil(job.samples * (job.staleness + 1) / job.g.dp)
    return cap >= requests and (cap == default or default < requests)


def example_case(path: Path) -> tuple[dict, dict]:
    if path.stem not in _plans:
        _plans[path.stem] = rlsolve.solve(str(path)).model_dump(mode="json")
    return _plans[path.stem], yaml.safe_load(path.read_text())


def _layout(mode, gen, train, gen_par, train_par, placement, opt, staleness=0, engine="vllm", framework="megatron"):
    return {"pipeline": {"mode": mode, "staleness": staleness},
            "resource_allocation": {"generation": {"gpus": gen, "engine": engine},
                                    "training": {"gpus": train, "framework": framework}},
            "placement": placement,
            "parallelism": {"generation": gen_par, "training": train_par},
            "optimization": opt}


def _spec(cluster, model, rl):
    base_rl = {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 512,
               "response_len": {"max": 4096, "mean": 1024}, "mini_batches": 2, "max_staleness": 1}
    return {"cluster": cluster, "model": model, "rl": {**base_rl, **rl}}


VARIANTS = {
    # MoE, sync disaggregated, engine EP = TP x DP, training EP and virtual pipeline, selective recompute
    "moe-sync": (
        _layout("sync", 8, 8, {"tp": 2, "pp": 1, "dp": 4, "ep": 8},
                {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 2, "vp": 2, "zero_stage": 1, "micro_batch": 1,
                 "grad_accum": 128, "recompute": "selective", "sequence_parallel": True},
                {"reference": "training", "reward": "cpu", "value": "none"},
                {"kv_cache_gb": 40.0, "gpu_memory_utilization": 0.85, "max_num_seqs": 256}),
        _spec({"gpu": "H100-SXM-80GB", "nodes": 2},
              {"policy": "qwen3-30b-a3b", "reference": "policy", "reward": "rule"}, {})),
    # PPO colocated on SGLang with the DeepSpeed framework, ZeRO-2, full recompute, no reference
    "ppo-sglang-deepspeed": (
        _layout("colocated", 8, 8, {"tp": 1, "pp": 1, "dp": 8, "ep": 1},
                {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vp": 1, "zero_stage": 2, "micro_batch": 2,
                 "grad_accum": 16, "recompute": "full", "sequence_parallel": False},
                {"reference": "none", "reward": "cpu", "value": "training"},
                {"kv_cache_gb": 30.0, "gpu_memory_utilization": 0.5, "train_offload_during_rollout": True},
                engine="sglang", framework="deepspeed"),
        _spec({"gpu": "H100-SXM-80GB", "nodes": 1},
              {"policy": "qwen2.5-1.5b", "reference": None, "reward": "rule", "value": "policy"},
              {"algorithm": "ppo", "prompts_per_step": 128, "samples_per_prompt": 4, "mini_batches": 2})),
    # async, staleness 2, an engine replica spanning two nodes, reward and reference on the generation side
    "async-spanning": (
        _layout("async", 16, 16, {"tp": 8, "pp": 2, "dp": 1, "ep": 1},
                {"tp": 8, "pp": 2, "dp": 1, "cp": 1, "ep": 1, "vp": 1, "zero_stage": 0, "micro_batch": 1,
                 "grad_accum": 256, "recompute": "full", "sequence_parallel": True},
                {"reference": "generation", "reward": "generation", "value": "none"},
                {"kv_cache_gb": 20.0, "gpu_memory_utilization": 0.9, "reward_quantization": "int8"},
                staleness=2),
        _spec({"gpu": "H100-SXM-80GB", "nodes": 4},
              {"policy": "llama-3.1-70b", "reference": "policy", "reward": "llama-3.1-8b"}, {"max_staleness": 2})),
    # an inline model without a Hugging Face id, FSDP-sharded Megatron (ZeRO-3), CP 2
    "inline-fsdp": (
        _layout("colocated", 8, 8, {"tp": 2, "pp": 1, "dp": 4, "ep": 1},
                {"tp": 2, "pp": 1, "dp": 2, "cp": 2, "ep": 1, "vp": 1, "zero_stage": 3, "micro_batch": 2,
                 "grad_accum": 64, "recompute": "none", "sequence_parallel": True},
                {"reference": "cpu_offload", "reward": "cpu", "value": "none"},
                {"kv_cache_gb": 25.0, "gpu_memory_utilization": 0.6, "reference_offload": True}),
        _spec({"gpu": "A100-SXM-80GB", "nodes": 1},
              {"policy": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "vocab": 128256},
               "reference": "policy", "reward": "rule"}, {"response_len": {"max": 8192, "mean": 2048}})),
}

CASES = [f"example:{p.stem}" for p in EXAMPLES] + [f"variant:{k}" for k in VARIANTS]


def case(name: str) -> tuple[dict, dict]:
    kind, key = name.split(":", 1)
    if kind == "example":
        return example_case(next(p for p in EXAMPLES if p.stem == key))
    return VARIANTS[key]


# --- parsing the outputs back --------------------------------------------------------------------

def bash_array(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"{name}=(")
    end = start + lines[start:].index(")")
    return shlex.split("\n".join(lines[start + 1:end]), comments=True)


def scalar(v: str):
    return yaml.safe_load(v)


def argv(words: list[str]) -> dict:
    out, i = {}, 0
    while i < len(words):
        key = words[i]
        assert key.startswith("-"), f"stray word {key!r}"
        vals, i = [], i + 1
        while i < len(words) and not words[i].startswith("--"):
            vals.append(words[i])
            i += 1
        out[key] = True if not vals else scalar(vals[0]) if len(vals) == 1 else [scalar(v) for v in vals]
    return out


def hydra(words: list[str]) -> dict:
    return {k: scalar(v) for k, v in (w.split("=", 1) for w in words)}


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def script_flags(text: str) -> set[str]:
    """Every --flag on a non-comment line of a shell script (arrays and launch lines)."""
    flags = set()
    for line in text.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9_.-]*)", code))
    return flags


def verl_values(res: ExportResult) -> dict:
    if res.target == "verl":
        return hydra(bash_array(res.text, "VERL_ARGS"))
    doc = yaml.safe_load(res.text)
    vals = {k: v for k, v in flatten(doc).items() if not k.startswith(("hydra.", "defaults"))}
    vals["model_engine"] = next(d["override /model_engine"] for d in doc["defaults"] if isinstance(d, dict))
    return vals


# --- round trip: the export says what the plan says ----------------------------------------------

def check_verl(job, d: dict) -> None:
    t, g, opt = job.t, job.g, job.opt
    d = {k.lstrip("+"): v for k, v in d.items()}
    ar = "actor_rollout_ref"
    mega = d["model_engine"] == "megatron"
    # verl's FSDP engine runs only layouts without model parallelism, with ZeRO-2/3
    assert mega or (d["model_engine"] == "dp" and t.tp == t.pp == t.ep == t.vp == 1 and t.zero_stage >= 2)
    assert not mega or job.framework == "megatron"
    assert d["trainer.nnodes"] * d["trainer.n_gpus_per_node"] == job.train.gpus
    if job.colocated:
        assert d["trainer.v1.trainer_mode"] == "sync" and d[f"{ar}.hybrid_engine"] is True
    else:
        assert d["trainer.v1.trainer_mode"] == "separate_async" and d[f"{ar}.hybrid_engine"] is False
        assert d[f"{ar}.rollout.nnodes"] * d[f"{ar}.rollout.n_gpus_per_node"] == job.gen.gpus
        assert d["trainer.v1.separate_async.parameter_sync_step"] * d[f"{ar}.actor.ppo_mini_batch_size"] == \
            d["data.train_batch_size"]
        assert d["trainer.v1.sampler.max_off_policy_threshold"] == max(1, job.staleness)
    assert d["data.train_batch_size"] == job.prompts
    assert d[f"{ar}.rollout.n"] == job.n
    assert d[f"{ar}.actor.ppo_mini_batch_size"] * job.n == job.mini_batch_samples
    assert d[f"{ar}.actor.ppo_micro_batch_size_per_gpu"] == t.micro_batch
    assert d[f"{ar}.actor.ppo_epochs"] == job.epochs
    assert d["data.max_prompt_length"] == job.prompt_len and d["data.max_response_length"] == job.response_max
    assert d[f"{ar}.rollout.name"] == job.engine
    assert d[f"{ar}.rollout.tensor_model_parallel_size"] == g.tp
    assert d[f"{ar}.rollout.pipeline_model_parallel_size"] == g.pp
    dp_size = d[f"{ar}.rollout.data_parallel_size"]
    assert job.gen.gpus // (g.tp * g.pp * dp_size) * dp_size == g.dp  # servers x replicas per server
    assert d.get(f"{ar}.rollout.expert_parallel_size", 1) == g.ep
    assert d[f"{ar}.rollout.gpu_memory_utilization"] == opt.gpu_memory_utilization
    assert engine_cap_as_planned(d[f"{ar}.rollout.max_num_seqs"], job)
    offload = opt.train_offload_during_rollout
    if mega:
        m = f"{ar}.actor.megatron."
        assert (d[m + "tensor_model_parallel_size"], d[m + "pipeline_model_parallel_size"],
                d[m + "context_parallel_size"], d[m + "expert_model_parallel_size"]) == (t.tp, t.pp, t.cp, t.ep)
        assert d[m + "virtual_pipeline_model_parallel_size"] == (t.vp if t.vp > 1 else None)
        assert d[m + "use_distributed_optimizer"] == (t.zero_stage >= 1)
        assert d[m + "use_megatron_fsdp"] == (t.zero_stage >= 2)
        if t.zero_stage >= 2:
            assert d[m + "override_ddp_config.data_parallel_sharding_strategy"] == \
                ("optim_grads" if t.zero_stage == 2 else "optim_grads_params")
        assert d[m + "param_offload"] == d[m + "optimizer_offload"] == offload
        assert d[m + "override_transformer_config.recompute_granularity"] == \
            (None if t.recompute == "none" else t.recompute)
    else:
        f = f"{ar}.actor.fsdp_config."
        assert d[f + "ulysses_sequence_parallel_size"] == t.cp
        assert d[f + "reshard_after_forward"] == (t.zero_stage >= 3)
        assert d[f + "param_offload"] == d[f + "optimizer_offload"] == offload
        assert d[f"{ar}.model.enable_gradient_checkpointing"] == (t.recompute != "none")
    if job.has_reference:
        key = f"{ar}.ref.megatron.param_offload" if mega else f"{ar}.ref.fsdp_config.param_offload"
        assert d[key] == opt.reference_offload
        assert d[f"{ar}.actor.use_kl_loss"] or d["algorithm.use_kl_in_reward"]
    else:
        assert not d[f"{ar}.actor.use_kl_loss"] and not d["algorithm.use_kl_in_reward"]
    assert d["algorithm.adv_estimator"] == ("grpo" if job.algorithm == "grpo" else "gae")
    assert ("critic.enable" in d) == (job.critic is not None)
    assert d["reward.reward_model.enable"] == (job.reward_model is not None)
    if job.policy.hf_id:
        assert d[f"{ar}.model.path"] == job.policy.hf_id


def check_openrlhf(job, text: str) -> None:
    d = argv(bash_array(text, "OPENRLHF_ARGS"))
    t, g, opt = job.t, job.g, job.opt
    assert d["--actor.num_nodes"] * d["--actor.num_gpus_per_node"] == job.train.gpus
    assert d["--vllm.num_engines"] == g.dp
    assert d["--vllm.tensor_parallel_size"] == g.tp * g.pp
    assert d["--vllm.num_engines"] * d["--vllm.tensor_parallel_size"] == job.gen.gpus
    assert ("--train.colocate_all" in d) >= job.colocated
    assert ("--vllm.enable_sleep" in d) == job.colocated
    assert ("--train.async_enable" in d) == (job.mode == "async")
    if job.mode == "async":
        assert d["--train.async_queue_size"] == job.staleness
    assert d["--rollout.batch_size"] == job.prompts
    assert d["--rollout.n_samples_per_prompt"] == job.n
    assert d["--train.batch_size"] == job.mini_batch_samples
    assert d["--train.batch_size"] * job.mini_batches == job.samples
    assert d["--train.micro_batch_size"] == t.micro_batch
    assert d["--train.max_epochs"] == job.epochs
    assert (d["--ds.zero_stage"], d["--ds.tensor_parallel_size"], d["--ds.ring_attn_size"]) == \
        (t.zero_stage, t.tp, t.cp)
    assert d["--vllm.gpu_memory_utilization"] == opt.gpu_memory_utilization
    assert ("--ref.offload" in d) == (opt.reference_offload and job.has_reference)
    assert ("--ds.enable_sleep" in d) == (job.colocated and opt.train_offload_during_rollout)
    assert ("--actor.gradient_checkpointing_enable" in d) == (t.recompute != "none")
    assert d["--data.max_len"] == job.max_len and d["--rollout.max_new_tokens"] == job.response_max
    assert ("--critic.model_name_or_path" in d) == (job.critic is not None)
    if job.critic_group is not None:  # the plan's critic on GPUs of its own: its --critic.* group, apart
        assert d["--critic.num_nodes"] * d["--critic.num_gpus_per_node"] == job.critic_group.gpus
        assert "--train.colocate_all" not in d and "--train.colocate_critic_reward" not in d
    assert d.get("--algo.kl.init_coef", 0.01) == (0.01 if job.has_reference else 0)


def check_megatron(job, text: str) -> None:
    d = argv(bash_array(text, "MEGATRON_ARGS"))
    t, g, opt, a = job.t, job.g, job.opt, job.policy
    assert (d["--tensor-model-parallel-size"], d["--pipeline-model-parallel-size"], d["--context-parallel-size"],
            d["--expert-model-parallel-size"]) == (t.tp, t.pp, t.cp, t.ep)
    assert d.get("--num-virtual-stages-per-pipeline-rank", 1) == t.vp
    assert ("--sequence-parallel" in d) == (t.sequence_parallel and t.tp > 1)
    assert d["--micro-batch-size"] == t.micro_batch
    assert d["--global-batch-size"] == job.mini_batch_samples
    assert d["--global-batch-size"] // (t.micro_batch * t.dp) == t.grad_accum
    assert ("--use-distributed-optimizer" in d) == (t.zero_stage >= 1)
    assert ("--use-megatron-fsdp" in d) == (t.zero_stage >= 2)
    assert d.get("--recompute-granularity", "none") == t.recompute
    assert (d["--num-layers"], d["--hidden-size"], d["--num-attention-heads"]) == (a.layers, a.hidden, a.heads)
    assert d["--seq-length"] == job.max_len
    if a.is_moe:
        assert (d["--num-experts"], d["--moe-router-topk"]) == (a.experts, a.experts_per_token)
    m = re.search(r"torchrun --nnodes (\d+) --nproc-per-node (\d+)", text)
    assert int(m.group(1)) * int(m.group(2)) == job.train.gpus
    if job.algorithm == "grpo":
        assert d["--perform-rl-step"] is True
        assert (d["--grpo-prompts-per-step"], d["--grpo-group-size"], d["--grpo-iterations"]) == \
            (job.prompts, job.n, job.epochs)
        assert d["--rl-inference-tensor-model-parallel-size"] == g.tp
        assert d["--rl-inference-pipeline-model-parallel-size"] == g.pp
        assert d["--inference-dynamic-batching-buffer-size-gb"] == round(opt.kv_cache_gb, 2)
        assert ("--rl-offload-optimizer-during-inference" in d) == opt.train_offload_during_rollout
        assert d.get("--rl-generation-lag", 0) == (job.staleness if job.mode == "async" else 0)
    else:
        assert "--perform-rl-step" not in d


def check_vllm(job, text: str) -> None:
    d = argv(bash_array(text, "VLLM_ARGS"))
    g, opt = job.g, job.opt
    servers = int(re.search(r"^SERVERS=(\d+)", text, re.M).group(1))
    assert (d["--tensor-parallel-size"], d["--pipeline-parallel-size"]) == (g.tp, g.pp)
    assert d["--data-parallel-size"] * servers == g.dp
    assert g.tp * g.pp * d["--data-parallel-size"] * servers == job.gen.gpus
    assert d["--gpu-memory-utilization"] == opt.gpu_memory_utilization
    assert engine_cap_as_planned(d["--max-num-seqs"], job)
    assert d["--max-model-len"] == job.max_len
    assert ("--enable-sleep-mode" in d) == job.colocated
    assert ("--enable-expert-parallel" in d) == (g.ep > 1)
    if g.tp * g.pp > job.gen.gpus_per_node:
        assert d["--nnodes"] * job.gen.gpus_per_node >= g.tp * g.pp
    if job.policy.hf_id:
        assert f"vllm serve {job.policy.hf_id} " in text


def check_sglang(job, text: str) -> None:
    d = argv(bash_array(text, "SGLANG_ARGS"))
    g, opt = job.g, job.opt
    servers = int(re.search(r"^SERVERS=(\d+)", text, re.M).group(1))
    attn = d.get("--attn-dp-size", 1)
    assert (d["--tp-size"] // attn, d["--pp-size"]) == (g.tp, g.pp)
    assert d["--dp-size"] * attn * servers == g.dp
    assert d["--tp-size"] * d["--pp-size"] * d["--dp-size"] * servers == job.gen.gpus
    assert d.get("--ep-size", 1) == g.ep
    assert d.get("--nnodes", 1) * job.gen.gpus_per_node >= d["--tp-size"] * d["--pp-size"]
    try:
        mem = rlsolve.estimate(job.spec, job.lay).memory_gb_per_gpu.generation  # SGLang's pool: weights + KV only
    except InfeasibleError:  # a hand-written layout that does not fit: said, and the plan's fraction kept
        assert "does not fit" in text and d["--mem-fraction-static"] == opt.gpu_memory_utilization
    else:
        assert d["--mem-fraction-static"] == round((mem.weights + mem.kv_cache) / mem.capacity, 3)
        assert d["--mem-fraction-static"] < opt.gpu_memory_utilization
    assert d["--max-running-requests"] % attn == 0 and engine_cap_as_planned(d["--max-running-requests"] // attn, job)
    assert d["--context-length"] == job.max_len
    assert ("--enable-memory-saver" in d) == job.colocated


def check_deepspeed(job, text: str) -> None:
    d = json.loads(text)
    t = job.t
    # DeepSpeed counts every rank it launches on (GPUs / sequence_parallel_size): AutoTP ranks repeat samples
    assert d["train_batch_size"] == d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"] * \
        (job.train.gpus // t.cp)
    assert d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"] * t.dp == job.mini_batch_samples
    assert (d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"]) == (t.micro_batch, t.grad_accum)
    assert d["zero_optimization"]["stage"] == t.zero_stage
    assert d.get("tensor_parallel", {}).get("autotp_size", 1) == t.tp
    assert d.get("sequence_parallel_size", 1) == t.cp
    assert d.get("expert_parallel", {}).get("autoep_size", 1) == t.ep
    assert d["bf16"]["enabled"] is True


def check_yaml(job, text: str) -> None:
    d = yaml.safe_load(text)
    assert Layout.model_validate({k: d[k] for k in LAYOUT_KEYS}) == job.lay
    assert d["job"]["prompts_per_step"] == job.prompts and d["job"]["samples_per_prompt"] == job.n
    assert d["job"]["samples_per_optimizer_step"] == job.mini_batch_samples
    assert d["roles"]["generation"]["gpus"] == job.gen.gpus and d["roles"]["training"]["gpus"] == job.train.gpus
    assert d["job"]["models"]["policy"]["hf_id"] == job.policy.hf_id


def check_nemo_rl(job, text: str) -> None:
    d = flatten(yaml.safe_load(text))
    t, g, opt = job.t, job.g, job.opt
    rm = job.reward_model is not None and "reward" in job.aux_hosts()  # else warned: NeMo-RL runs it there only
    ppo = job.algorithm == "ppo"
    algo = "ppo" if ppo else "grpo"
    assert d["defaults"] == ("examples/configs/ppo_math_1B.yaml" if ppo else
                             "examples/configs/grpo_" + ("rm_1B" if rm else "math_1B") + ".yaml")
    assert (d[algo + ".num_prompts_per_step"], d[algo + ".num_generations_per_prompt"]) == (job.prompts, job.n)
    assert d["policy.train_global_batch_size"] == job.mini_batch_samples
    assert d["policy.train_micro_batch_size"] == t.micro_batch
    assert d["policy.max_total_sequence_length"] == job.max_len
    mega = d["policy.megatron_cfg.enabled"]
    assert mega != d["policy.dtensor_cfg.enabled"]
    if mega:
        m = "policy.megatron_cfg."
        assert (d[m + "tensor_model_parallel_size"], d[m + "pipeline_model_parallel_size"],
                d[m + "context_parallel_size"], d[m + "expert_model_parallel_size"]) == (t.tp, t.pp, t.cp, t.ep)
        # NeMo-RL's pad factor for packed sequences (megatron/data.py): 2cp, times tp with sequence parallelism
        pad = (2 * t.cp if t.cp > 1 else 1) * (t.tp if d[m + "sequence_parallel"] else 1)
        assert d["policy.make_sequence_length_divisible_by"] % pad == 0
    else:
        assert (d["policy.dtensor_cfg.tensor_parallel_size"], d["policy.dtensor_cfg.context_parallel_size"]) == \
            (t.tp, t.cp) and t.pp == t.ep == 1
    v = "policy.generation.vllm_cfg."
    assert (d[v + "tensor_parallel_size"], d[v + "pipeline_parallel_size"], d[v + "expert_parallel_size"]) == \
        (g.tp, g.pp, g.ep)
    assert d[v + "gpu_memory_utilization"] == opt.gpu_memory_utilization
    assert d["policy.generation.colocated.enabled"] == job.colocated
    if ppo:  # NeMo-RL's PPO: colocated, the critic's own degrees and batch sizes in value.* (the plan's)
        c = job.critic_t
        assert d["ppo.ppo_epochs"] == job.epochs  # colocated: a plan of another mode is warned about
        assert d["ppo.skip_reference_policy_logprobs_calculation"] == (not job.has_reference)
        assert d["value.model_name"] == job.model_id("value")
        assert (d["value.train_global_batch_size"], d["value.train_micro_batch_size"]) == \
            (job.mini_batch_samples, c.micro_batch)
        assert d["value.megatron_cfg.enabled"] != d["value.dtensor_cfg.enabled"]
        if d["value.megatron_cfg.enabled"]:
            m = "value.megatron_cfg."
            assert (d[m + "tensor_model_parallel_size"], d[m + "pipeline_model_parallel_size"],
                    d[m + "context_parallel_size"], d[m + "expert_model_parallel_size"]) == (c.tp, c.pp, c.cp, c.ep)
            assert d["value.sequence_packing.enabled"] == (c.cp > 1)
            pad = (2 * c.cp if c.cp > 1 else 1) * (c.tp if d[m + "sequence_parallel"] else 1)
            assert d["value.make_sequence_length_divisible_by"] % pad == 0
        else:
            assert (d["value.dtensor_cfg.tensor_parallel_size"], d["value.dtensor_cfg.context_parallel_size"]) == \
                (c.tp, c.cp) and c.pp == c.ep == 1
        assert (d.get("data.env_name") == "reward_model") == rm  # ppo.py setup's reward-model split
    else:
        assert d["grpo.async_grpo.enabled"] == (job.mode == "async")
    # NeMo-RL's split (grpo.py setup): on one node the reward model's gpus_per_node, on several its nodes,
    # come out of cluster.*; the engines' resources likewise; training takes the rest
    nodes, per = d["cluster.num_nodes"], d["cluster.gpus_per_node"]
    rm_nodes, rm_per = (d["env.reward_model.resources.num_nodes"], d["env.reward_model.resources.gpus_per_node"]) \
        if rm else (0, 0)
    assert rm == any(k.startswith("env.reward_model.") for k in d)
    if rm:
        assert rm_nodes * rm_per == job.aux.gpus
        assert d["env.reward_model.model_name"] == job.model_id("reward")
        assert d["env.reward_model.dtensor_cfg.tensor_parallel_size"] == job.aux_group().tp
    policy_nodes = 1 if nodes == 1 else nodes - rm_nodes
    policy = per - rm_per if nodes == 1 else policy_nodes * per
    if job.colocated:
        assert policy == job.train.gpus
    else:
        res = "policy.generation.colocated.resources."
        gen = d[res + "num_nodes"] * d[res + "gpus_per_node"] if policy_nodes > 1 else d[res + "gpus_per_node"]
        assert gen == job.gen.gpus and policy - gen == job.train.gpus


CHECKS = {"verl": lambda job, res: check_verl(job, verl_values(res)),
          "verl-yaml": lambda job, res: check_verl(job, verl_values(res)),
          "openrlhf": lambda job, res: check_openrlhf(job, res.text),
          "megatron": lambda job, res: check_megatron(job, res.text),
          "vllm": lambda job, res: check_vllm(job, res.text),
          "sglang": lambda job, res: check_sglang(job, res.text),
          "deepspeed": lambda job, res: check_deepspeed(job, res.text),
          "nemo-rl": lambda job, res: check_nemo_rl(job, res.text),
          "yaml": lambda job, res: check_yaml(job, res.text)}


def test_every_target_has_a_check_and_a_cli_choice():
    from rlsolve.cli.commands.export import _TARGETS
    assert set(CHECKS) == set(TARGETS) == set(_TARGETS)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", CASES)
def test_round_trip(name, target):
    plan, spec = case(name)
    res = export_plan(plan, spec, target)
    job = prepare(plan, spec)
    CHECKS[target](job, res)
    # every warning is in the output too, as a comment
    for w in res.warnings:
        assert f"WARNING: {w}" in res.text
    if target in ("verl", "openrlhf", "megatron", "vllm", "sglang"):
        assert res.text.startswith("#!/usr/bin/env bash\n")
    if target == "deepspeed":
        assert json.loads(res.text)["_comment"][0].startswith("rlsolve export -> DeepSpeed 0.19")


@pytest.mark.parametrize("target,label", [("verl", "verl 0.9"), ("verl-yaml", "verl 0.9"),
                                          ("openrlhf", "OpenRLHF 0.11"), ("megatron", "Megatron-Core 0.19"),
                                          ("vllm", "vLLM 0.33"), ("sglang", "SGLang 0.5"),
                                          ("deepspeed", "DeepSpeed 0.19")])
def test_each_output_states_its_framework_version(target, label):
    plan, spec = case("variant:moe-sync")
    res = export_plan(plan, spec, target)
    assert f"rlsolve export -> {label}" in res.text and res.framework == label


def test_what_a_framework_cannot_express_is_warned():
    plan, spec = case("variant:async-spanning")
    warned = {t: " | ".join(export_plan(plan, spec, t).warnings) for t in TARGETS}
    assert "int8" in warned["openrlhf"] and "pipeline parallelism" in warned["openrlhf"]
    assert "reference placement 'generation'" in warned["verl"]
    assert "separate" in warned["megatron"]  # Megatron-LM's RL loop is colocated only
    assert warned["yaml"] == ""
    plan, spec = case("variant:moe-sync")
    verl_warn = export_plan(plan, spec, "verl").warnings
    assert any("no synchronous trainer" in w for w in verl_warn)
    assert any("selective recompute" in w for w in export_plan(plan, spec, "openrlhf").warnings)
    plan, spec = case("variant:inline-fsdp")
    assert any("POLICY_MODEL_PATH" in w for w in export_plan(plan, spec, "verl").warnings)


def test_api_needs_the_spec_and_a_known_target():
    plan, spec = case("variant:moe-sync")
    with pytest.raises(SpecError, match="--spec"):
        export_plan(plan, None, "verl")
    with pytest.raises(SpecError, match="did you mean 'openrlhf'"):
        export_plan(plan, spec, "openrlfh")


def test_a_plan_that_does_not_fit_the_spec_is_an_input_error():
    plan, _ = case("variant:async-spanning")  # 32 GPUs
    _, small = case("variant:moe-sync")       # a 16-GPU cluster, another model
    with pytest.raises(SpecError):
        export_plan(plan, small, "vllm")


def _write(tmp_path: Path, name: str, data) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_cli_export(tmp_path):
    plan, spec = case("variant:async-spanning")
    plan_path, spec_path = _write(tmp_path, "plan.yaml", plan), _write(tmp_path, "cluster.yaml", spec)
    runner = CliRunner()
    r = runner.invoke(main, ["export", plan_path, "--to", "openrlhf", "--spec", spec_path])
    assert r.exit_code == 0
    assert "python3 -m openrlhf.cli.train_ppo_ray" in r.stdout
    assert "warning: " in r.stderr and "# WARNING: " in r.stdout
    out = tmp_path / "ds.json"
    r = runner.invoke(main, ["export", plan_path, "--to", "deepspeed", "--spec", spec_path, "-o", str(out)])
    assert r.exit_code == 0 and json.loads(out.read_text())["zero_optimization"]["stage"] == 0
    assert r.stdout == "" and "wrote" in r.stderr


def test_cli_export_errors(tmp_path):
    plan, spec = case("variant:moe-sync")
    plan_path, spec_path = _write(tmp_path, "plan.yaml", plan), _write(tmp_path, "cluster.yaml", spec)
    runner = CliRunner()
    r = runner.invoke(main, ["export", plan_path, "--to", "verl"])
    assert r.exit_code == 2 and "--spec" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(main, ["export", plan_path, "--to", "nemo", "--spec", spec_path])
    assert r.exit_code == 2
    r = runner.invoke(main, ["export", str(tmp_path / "missing.yaml"), "--to", "verl", "--spec", spec_path])
    assert r.exit_code == 2 and "not found" in r.stderr
