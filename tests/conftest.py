from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module, registered in sys.modules (a dataclass there looks its module up)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def small_spec(**over):
    """A small, fast spec: 8B GRPO on two 8xH100 nodes."""
    spec = {
        "cluster": {"gpu": "H100-SXM-80GB", "nodes": 2, "network": "IB-NDR-400"},
        "model": {"policy": "llama-3.1-8b", "reference": "policy", "reward": "rule"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 512,
               "response_len": {"max": 4096, "mean": 1024}, "mini_batches": 2, "max_staleness": 1},
        "solver": {"top_k": 2},
    }
    for k, v in over.items():
        spec[k] = {**spec.get(k, {}), **v} if isinstance(v, dict) else v
    return spec


@pytest.fixture
def small():
    return small_spec()
