"""benchmarks/prompt_grouped_rollout.py: the rollout when an engine's responses come in prompt groups
(issue #15, the 40k-token NeMo-RL Qwen3-30B-A3B row)."""
from __future__ import annotations

import math

import pytest
import yaml

from conftest import ROOT, load_benchmark
from rlsolve.perf import generate as G

ROW = "nemorl07-qwen3-30b-a3b-grpo-onpolicy-bf16-32g-seq40k"


@pytest.fixture(scope="module")
def mod():
    return load_benchmark("prompt_grouped_rollout")


def test_one_response_per_group_is_the_models_floor(mod):
    """With groups of one response the bound is the model's own slowest engine (independent draws)."""
    slowest = mod.grouped_slowest_mean(1)
    for args in [(128, 8170, 40852, 2048), (128, 3198, 4002, 2048), (64, 500, 2048, 1024), (2048, 700, 1536, 2048)]:
        assert slowest(*args) == pytest.approx(G.slowest_replica_mean(*args), rel=1e-12)


def test_the_40k_recipe_gives_each_engine_four_prompts(mod):
    """The recipe's numbers (NeMo-RL v0.7.0 grpo-qwen3-30ba3b-4n8g-40K.yaml: 64 prompts x 32 generations,
    vLLM TP 2 on 32 GPUs): 16 engines of 128 requests each hold 128 / 32 = 4 prompts, so under the bound the
    slowest engine's mean response is the mean plus sd / sqrt(4) x E[max of 16 standard normals], against
    sd / sqrt(128) x that for independent responses: the row's step rises, and the model's floor is scored."""
    data = yaml.safe_load((ROOT / "benchmarks" / "data" / "extra_cases.yaml").read_text())
    row = next(c for c in data["cases"] if c["id"] == ROW)
    floor = mod.score([row])[0]
    assert floor["engines"] == 32 // 2
    n = 64 * 32 / floor["engines"]
    mean, top = 8170, 40960 - 108  # avg_seq_len; max_seq_len less the prompt the row's token total implies
    sd = G._length_std(mean, top, None)
    e16 = G.expected_max_std_normal(16)
    assert floor["slowest_mean"] == pytest.approx(mean + sd / math.sqrt(n) * e16, rel=1e-9)
    assert mod.grouped_slowest_mean(32)(n, mean, top, 2048) == pytest.approx(mean + sd / math.sqrt(n / 32) * e16,
                                                                           rel=1e-9)
    assert floor["step"] < floor["measured"]
