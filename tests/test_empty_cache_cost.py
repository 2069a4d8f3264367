"""benchmarks/empty_cache_cost.py: the device check of one empty_cache() and the re-growth after it
(issue #15, phase train). Its working-set plan runs without a GPU."""
from __future__ import annotations

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def mod():
    return load_benchmark("empty_cache_cost")


@pytest.mark.parametrize("gib", [0.5, 1.0, 7.3, 40.0])
def test_plan_fills_the_working_set_with_whole_layers(mod, gib):
    """The plan is whole layers' tensors, as many as fit in `gib` GiB: one more layer would not."""
    sizes = mod.plan(gib)
    layer = mod.LAYER_TENSORS
    assert len(sizes) % len(layer) == 0
    assert sizes == list(layer) * (len(sizes) // len(layer))
    assert sum(sizes) <= gib * mod.GIB < sum(sizes) + sum(layer)


def test_layer_tensors_are_the_70b_tp4_activations(mod):
    """A 4096-token micro-batch of Llama-3.1-70B at TP4 without sequence parallelism, bf16: the
    hidden-sized tensors whole (8192), the q/k/v and MLP widths split four ways."""
    tokens, bf16 = 4096, 2
    assert mod.LAYER_TENSORS[0] == tokens * 8192 * bf16
    assert mod.LAYER_TENSORS[2] == tokens * (8192 + 2 * 8 * 128) // 4 * bf16
    assert mod.LAYER_TENSORS[3] == tokens * 2 * 28672 // 4 * bf16
