"""benchmarks/moe_pairs.py: the MoE train rows of the holdout file and the pairs that isolate one
stack change (issue #15's MoE training rows)."""
from __future__ import annotations

import pytest
import yaml

from conftest import ROOT, load_benchmark


@pytest.fixture(scope="module")
def moe():
    mod = load_benchmark("moe_pairs")
    data = yaml.safe_load((ROOT / "benchmarks" / "data" / "extra_cases.yaml").read_text())
    rows = mod.moe_rows(data)
    return mod, data, rows


def test_every_scored_moe_train_row_is_listed_with_its_stack(moe):
    mod, data, rows = moe
    ids = {r.id for r in rows}
    moe_train = [c["id"] for c in data["cases"] if c["kind"] == "train" and mod._arch(c).is_moe]
    assert ids == set(moe_train) and len(ids) == len(rows)
    by_id = {r.id: r for r in rows}
    # Qwen3-30B-A3B (128 experts, top-8) at EP 8, micro-batch 1 of 4096 tokens: 16 local experts,
    # each sees 4096 * 8 / 128 * 8 = 2048 tokens (balanced routing)
    r = by_id["mbridge2511-qwen3-30b-a3b-b200-fp8mx-8g"]
    assert (r.local_experts, r.tokens_per_expert) == (16, 2048)
    assert r.fields["cuda_graphs"] == "partial" and r.fields["moe_dispatcher"] == "alltoall"
    # the '(tokendrop)' rows state drop-and-pad routing in their layout; the others ran dropless
    assert all(x.fields["moe_token_drop"] == x.id.endswith("-tokendrop") for x in rows)
    assert by_id["mbridge2509-qwen3-30b-a3b-b200-fp8-8g-tokendrop"].fields["moe_token_drop"]
    assert not r.fields["moe_token_drop"]


def test_pairs_differ_in_one_field_and_same_pairs_are_predicted_alike(moe):
    mod, data, rows = moe
    pairs = mod.one_change_pairs(rows)
    assert pairs
    for change, a, b in pairs:
        assert (a.model, a.gpu, a.gpus, a.precision) == (b.model, b.gpu, b.gpus, b.precision)
        diff = [k for k in set(a.fields) | set(b.fields) if a.fields.get(k) != b.fields.get(k)]
        assert diff == ([] if change == "same" else [change])
        if change == "same" and a.schedule == b.schedule:
            # nothing the time model reads differs: it cannot tell the two rows apart
            assert a.predicted == pytest.approx(b.predicted, rel=1e-9)
    found = {(c, a.id, b.id): a.measured / b.measured for c, a, b in pairs}
    # the same GB200 gpt-oss-120b layout, HybridEP (26.04) against the all-to-all dispatcher (26.04.01)
    key = ("moe_dispatcher", "mbridge2604-gpt-oss-120b-gb200-bf16-64g", "mbridge260401-gpt-oss-120b-gb200-bf16-64g")
    assert found[key] == pytest.approx(15938 / 16640)
    # the H100 Qwen3-30B-A3B layout with DeepEP (26.02) and HybridEP (26.02.01) is no one-field pair: the
    # 26.02 row also ran the EP A2A overlap (moe_a2a_overlap; a row that does not state it ran without)
    by_id = {r.id: r for r in rows}
    a, b = by_id["mbridge2602-qwen3-30b-a3b-h100-fp8-16g"], by_id["mbridge260201-qwen3-30b-a3b-h100-fp8-16g"]
    assert sorted(k for k in set(a.fields) | set(b.fields) if a.fields.get(k) != b.fields.get(k)) == [
        "moe_a2a_overlap", "moe_dispatcher"]
    assert not any({x.id, y.id} == {a.id, b.id} for _, x, y in pairs)


def test_missed_time_per_moe_layer_is_the_step_gap_over_layer_passes(moe):
    mod, data, rows = moe
    by_id = {r.id: r for r in rows}
    # B200 Qwen3-30B-A3B, 8 GPUs (tp 1, pp 1: dp 8), global batch 512 of 4096 tokens, micro-batch 1:
    # 64 micro-batches of 48 MoE layers; step time = 512 * 4096 / 8 / (tokens/s per GPU)
    r = by_id["mbridge2511-qwen3-30b-a3b-b200-fp8mx-8g"]
    step = 512 * 4096 / 8
    assert r.missed_s == pytest.approx((step / r.measured - step / r.predicted) / (64 * 48), rel=1e-9)
    assert r.tokens == 4096
    throughput = {c["id"] for c in data["cases"] if "tokens_per_s_per_gpu" in (c.get("measured") or {})}
    for x in rows:
        if x.id in throughput:  # a throughput row predicted too fast (error > 0) misses time
            assert (x.missed_s > 0) == (x.error > 0)
