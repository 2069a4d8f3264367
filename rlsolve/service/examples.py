"""Request examples shown in the OpenAPI document (and the seeds of schemathesis' example and
coverage phases). Small on purpose: each solves in about 0.1 s on two cores."""
from __future__ import annotations

TINY_SPEC = {
    "cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 2, "network": "IB-NDR-400"},
    "model": {"policy": "qwen2.5-0.5b", "reference": "policy", "reward": "rule"},
    "rl": {"algorithm": "grpo", "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 256,
           "response_len": {"max": 512, "mean": 256}, "mini_batches": 2},
    "solver": {"time_limit_s": 1, "top_k": 0},
}

INFEASIBLE_SPEC = {
    "cluster": {"gpu": "L4", "nodes": 1, "gpus_per_node": 8},
    "model": {"policy": "llama-3.1-70b"},
    "rl": {"prompts_per_step": 16, "samples_per_prompt": 4, "prompt_len": 256, "response_len": 512},
    "solver": {"time_limit_s": 1, "top_k": 0},
}

TINY_LAYOUT = {
    "pipeline": {"mode": "colocated"},
    "resource_allocation": {"generation": {"gpus": 2, "engine": "vllm"}, "training": {"gpus": 2, "framework": "fsdp"}},
    "placement": {"reference": "training", "reward": "cpu", "value": "none"},
    "parallelism": {"generation": {"tp": 1, "pp": 1, "dp": 2},
                    "training": {"tp": 1, "pp": 1, "dp": 2, "zero_stage": 3, "micro_batch": 1}},
}

SOLVE = {"tiny": {"summary": "0.5B GRPO on two H100s", "value": TINY_SPEC},
         "infeasible": {"summary": "70B on eight L4 (answers 409 with the reasons)", "value": INFEASIBLE_SPEC}}
ESTIMATE = {"tiny": {"summary": "Score a colocated FSDP layout", "value": {"spec": TINY_SPEC, "layout": TINY_LAYOUT}}}
EXPLAIN = {"tiny": {"summary": "Optimum vs a colocated FSDP layout", "value": {"spec": TINY_SPEC,
                                                                               "layout": TINY_LAYOUT}},
           "plain": {"summary": "Why the optimum wins", "value": {"spec": TINY_SPEC}}}
COMPARE = {"tiny": {"summary": "The tiny job on H200 instead", "value": {
    "spec": TINY_SPEC, "gpus": ["H200-SXM-141GB"], "nodes": [1]}}}
EXPORT = {"tiny": {"summary": "Solve, then export for verl", "value": {"spec": TINY_SPEC, "target": "verl"}}}
