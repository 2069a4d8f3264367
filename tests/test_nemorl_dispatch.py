"""benchmarks/nemorl_dispatch.py: the bytes NeMo-RL's controller sends and gathers per policy call
(issue #15 lead)."""
from __future__ import annotations

import pytest
import yaml

from conftest import ROOT, load_benchmark


@pytest.fixture(scope="module")
def mod():
    return load_benchmark("nemorl_dispatch")


@pytest.mark.parametrize("replicas", [1, 2, 8, 16])
@pytest.mark.parametrize("dp", [1, 4, 8])
def test_each_worker_gets_its_own_copy_before_0_7(mod, dp, replicas):
    """Before v0.7.0 the bytes sent grow with the replicas of a shard; from v0.7.0 (one put per shard)
    they are the batch's bytes once, whatever the layout; every replica's log-probs come back in both."""
    samples, seq = 2048, 4096
    old = mod.dispatch_bytes(samples, seq, dp, replicas, "0.6.0")
    new = mod.dispatch_bytes(samples, seq, dp, replicas, "0.7.0")
    once = samples * seq
    assert old["out_logprob"] == pytest.approx(replicas * once * mod.LOGPROB_BYTES)
    assert old["out_train"] == pytest.approx(replicas * once * mod.TRAIN_BYTES)
    assert new["out_logprob"] == pytest.approx(once * mod.LOGPROB_BYTES)
    assert old["in_logprob"] == new["in_logprob"] == pytest.approx(replicas * once * mod.RESULT_BYTES)
    assert old["workers"] == new["workers"] == dp * replicas


def test_the_70b_megatron_rows_send_eight_times_the_8b_rows(mod):
    """The v0.3 Llama rows: 70B Megatron (TP4 PP4 on 64 GPUs) replicates each shard on 16 workers,
    8B Megatron (PP2 on 8 GPUs) on 2, at the same samples and max_seq_len."""
    rows = {r["id"]: r for r in yaml.safe_load((ROOT / "benchmarks" / "data" / "extra_cases.yaml").read_text())["cases"]}
    big = mod.row_dispatch(rows["nemorl03-blog-llama3p1-70b-grpo-megatron-64g"])
    small = mod.row_dispatch(rows["nemorl03-blog-llama3p1-8b-grpo-megatron-8g"])
    assert big["workers"] == 64 and small["workers"] == 8
    assert big["out_logprob"] == pytest.approx(8 * small["out_logprob"])
    assert mod.row_dispatch({"id": "x", "kind": "train"}) is None
