"""The run's configuration where the framework prints it at start-up, and the layout it
implies (so `calibrate --from-log` needs no --layout for such a log).

- verl: verl/trainer/main_ppo.py `pprint(OmegaConf.to_container(config, resolve=True))`, a
  Python dict over many lines (under Ray each line carries the "(TaskRunner pid=N)" prefix);
  keys from verl/trainer/config/ppo_trainer.yaml.
- NeMo-RL: examples/run_grpo.py prints "Final config:" then `pprint.pprint(config)`; keys
  from examples/configs/grpo_math_1B*.yaml.
OpenRLHF prints no config block, so its logs need --layout."""
from __future__ import annotations

import ast
import re
from typing import Any

RAY_PREFIX = re.compile(r"^\s*\([A-Za-z_]\w*(?: pid=\d+)?(?:, ip=[\d.]+)?\)\s?")
MAX_LINES = 20000


def _dict_from(lines: list[str], start: int) -> dict | None:
    """The dict literal starting at lines[start]: lines are added until it parses."""
    buf: list[str] = []
    depth = 0
    for line in lines[start:start + MAX_LINES]:
        body = RAY_PREFIX.sub("", line)
        buf.append(body)
        depth += body.count("{") - body.count("}")
        if depth <= 0:
            try:
                value = ast.literal_eval("\n".join(buf).strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            return value if isinstance(value, dict) else None
    return None


def printed_config(text: str, framework: str) -> dict | None:
    lines = [RAY_PREFIX.sub("", ln) for ln in text.splitlines()]
    for i, line in enumerate(lines):
        s = line.lstrip()
        if framework == "verl" and s.startswith("{'actor_rollout_ref'"):
            return _dict_from(lines, i)
        if framework == "nemo-rl" and s.startswith("Final config:") and i + 1 < len(lines):
            return _dict_from(lines, i + 1)
    return None


def _get(cfg: dict, path: str, default: Any = None) -> Any:
    cur: Any = cfg
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return default if cur is None else cur


def _layout(gpus: int, gen_tp: int, gen_pp: int, train: dict) -> dict:
    t = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "zero_stage": 1, "recompute": "none",
         "sequence_parallel": False, **train}
    t["dp"] = max(1, gpus // (t["tp"] * t["pp"] * t["cp"]))
    return {"pipeline": {"mode": "colocated"},
            "resource_allocation": {"generation": {"gpus": gpus}, "training": {"gpus": gpus}},
            "parallelism": {"generation": {"tp": gen_tp, "pp": gen_pp, "dp": max(1, gpus // (gen_tp * gen_pp))},
                            "training": t}}


def layout_from_config(cfg: dict, framework: str) -> tuple[dict | None, str]:
    """(layout sections, how they were read) or (None, why not)."""
    if framework == "verl":
        gpus = int(_get(cfg, "trainer.n_gpus_per_node", 0)) * int(_get(cfg, "trainer.nnodes", 0))
        gen_tp = int(_get(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1))
        if gpus <= 0:
            return None, "the printed config lacks trainer.n_gpus_per_node / trainer.nnodes"
        actor = _get(cfg, "actor_rollout_ref.actor", {})
        recompute = "full" if _get(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", False) else "none"
        mb = int(actor.get("ppo_micro_batch_size_per_gpu") or 1)
        if str(actor.get("strategy", "fsdp")).startswith("fsdp"):
            sp = int(actor.get("ulysses_sequence_parallel_size") or 1)
            train = {"cp": sp, "zero_stage": 3, "micro_batch": mb, "recompute": recompute}
            how = "verl FSDP actor: ZeRO-3 over every GPU (Ulysses degree as cp)"
        else:
            meg = actor.get("megatron") or {}
            train = {"tp": int(meg.get("tensor_model_parallel_size") or 1),
                     "pp": int(meg.get("pipeline_model_parallel_size") or 1),
                     "cp": int(meg.get("context_parallel_size") or 1),
                     "ep": int(meg.get("expert_model_parallel_size") or 1),
                     "micro_batch": mb, "recompute": recompute, "sequence_parallel": bool(meg.get("sequence_parallel"))}
            how = "verl Megatron actor degrees"
        return _layout(gpus, gen_tp, 1, train), f"read from the config verl printed ({how}; colocated hybrid engine)"
    if framework == "nemo-rl":
        gpus = int(_get(cfg, "cluster.num_nodes", 0)) * int(_get(cfg, "cluster.gpus_per_node", 0))
        if gpus <= 0:
            return None, "the printed config lacks cluster.num_nodes / cluster.gpus_per_node"
        if not _get(cfg, "policy.generation.colocated.enabled", True):
            return None, "a non-colocated NeMo-RL run: pass --layout with the GPU split"
        vllm = _get(cfg, "policy.generation.vllm_cfg", {})
        gen_tp, gen_pp = int(vllm.get("tensor_parallel_size") or 1), int(vllm.get("pipeline_parallel_size") or 1)
        mb = int(_get(cfg, "policy.train_micro_batch_size", 1))
        meg = _get(cfg, "policy.megatron_cfg", {})
        if meg.get("enabled"):
            train = {"tp": int(meg.get("tensor_model_parallel_size") or 1),
                     "pp": int(meg.get("pipeline_model_parallel_size") or 1),
                     "cp": int(meg.get("context_parallel_size") or 1),
                     "ep": int(meg.get("expert_model_parallel_size") or 1), "micro_batch": mb,
                     "recompute": "full" if meg.get("activation_checkpointing") else "none",
                     "sequence_parallel": bool(meg.get("sequence_parallel"))}
            how = "NeMo-RL Megatron degrees"
        else:
            dt = _get(cfg, "policy.dtensor_cfg", {})
            train = {"tp": int(dt.get("tensor_parallel_size") or 1), "cp": int(dt.get("context_parallel_size") or 1),
                     "zero_stage": 3, "micro_batch": mb,
                     "recompute": "full" if dt.get("activation_checkpointing") else "none",
                     "sequence_parallel": bool(dt.get("sequence_parallel"))}
            how = "NeMo-RL DTensor (FSDP2): ZeRO-3"
        return _layout(gpus, gen_tp, gen_pp, train), f"read from the config NeMo-RL printed ({how}; colocated)"
    return None, f"{framework} prints no configuration block"
