"""The rollout engine's memory besides weights and KV cache: what vLLM's profile run peaks at
(rlsolve/perf/generate.py gen_other_bytes; frameworks/runtime.yaml engine_profile_sampler_bytes_per_logit)."""
from dataclasses import replace

import pytest

from rlsolve.frameworks.runtime import runtime
from rlsolve.models import find_model
from rlsolve.perf.generate import GenLayout, gen_other_bytes, profile_sampler_bytes_per_logit
from rlsolve.perf.hw import GB, constants
from rlsolve.perf.step import gen_side
from rlsolve.resolve import resolve
from rlsolve.spec import load_spec

SPEC = {"cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 8},
        "model": {"policy": "qwen2.5-7b"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 256,
               "response_len": {"max": 2048, "mean": 800}},
        "solver": {"top_k": 0}}


def test_reserve_of_a_small_model_by_hand():
    """Qwen2.5-0.5B (hidden 896, d_ffn 4864, vocab 151936) on one GPU of vLLM 0.11.2 with max_num_seqs 256:
    CUDA context, no NCCL communicator, and the larger of the activations of an 8192-token prefill chunk
    (8192 x (4 x 896 + 3 x 4864) x 2 bytes) and the sampler warm-up: the forward's bf16 hidden states
    (8192 x 896 x 2) beside 256 rows of the full vocabulary at 28 bytes per element (bf16 logits 2, fp32
    copy 4, sort values 4 and int64 indices 8, top-k mask 1, probs/cumsum 4, top-p mask 1, scattered
    result 4)."""
    a = find_model("qwen2.5-0.5b")
    assert (a.hidden, a.d_ffn, a.vocab) == (896, 4864, 151936)
    c = constants()
    assert c["prefill_chunk_tokens"] == 8192
    act = 8192 * (4 * 896 + 3 * 4864) * 2.0
    sampler = 8192 * 896 * 2.0 + 256 * 151936 * 28.0
    by_hand = c["cuda_context_gb"] * GB + max(act, sampler)
    assert gen_other_bytes(a, GenLayout(tp=1), 256, "0.11.2") == pytest.approx(by_hand, rel=1e-12)
    # 0.6 GB + max(0.298, 0.015 + 1.089) GB: the sampler warm-up is the profile run's peak
    assert (act / GB, sampler / GB) == pytest.approx((0.2978, 1.1038), abs=1e-4)
    # with 16 sequences the forward's activations are the peak
    assert gen_other_bytes(a, GenLayout(tp=1), 16, "0.11.2") == pytest.approx(c["cuda_context_gb"] * GB + act)


def test_reserve_grows_with_max_num_seqs_until_the_batched_token_budget():
    """vLLM V1 _dummy_run schedules min(max_num_seqs, max_num_batched_tokens) requests, each sampled once."""
    a = find_model("qwen3-8b")
    lay = GenLayout(tp=2)
    seqs = [1, 32, 256, 1024, 4096, 8192]
    r = [gen_other_bytes(a, lay, s) for s in seqs]
    assert all(x <= y for x, y in zip(r, r[1:]))
    assert all(x < y for x, y in zip(r[2:], r[3:]))  # from 256 rows on the sampler warm-up is the peak
    per_row = a.vocab * profile_sampler_bytes_per_logit(None)
    assert r[3] - r[2] == pytest.approx((1024 - 256) * per_row)
    assert gen_other_bytes(a, lay, 20000) == pytest.approx(r[-1])  # capped at max_num_batched_tokens


def test_the_sampler_term_is_not_divided_by_tp():
    """V1 all-gathers the logits to every TP rank; the activations of the MLP are split by tp."""
    a = find_model("qwen3-8b")
    d = {tp: gen_other_bytes(a, GenLayout(tp=tp), 4096) - gen_other_bytes(a, GenLayout(tp=tp), 2048)
         for tp in (1, 2, 8)}
    assert d[1] == pytest.approx(d[2]) == pytest.approx(d[8]) == pytest.approx(2048 * a.vocab * 14.0)


@pytest.mark.parametrize("version,expected", [("0.6.3", 32), ("0.8.0", 28), ("0.9.0", 28), ("0.10.0", 28),
                                              ("0.11.2", 28), ("0.17.1", 14), ("0.20.0", 14), (None, 14),
                                              ("0.5.4", 32)])
def test_sampler_bytes_follow_the_engine_release(version, expected):
    assert profile_sampler_bytes_per_logit(version) == expected
    assert runtime().engine_profile_sampler_bytes_per_logit.source  # a source is required by the schema


def test_a_smaller_cap_leaves_more_kv_cache():
    """gen_side sizes the KV cache after the profile run's reserve for the cap it runs with."""
    p = resolve(load_spec(SPEC))
    lay = GenLayout(tp=1, dp=8)
    small, large = (gen_side(p, p.pool, lay, max_num_seqs=s) for s in (32, 1024))
    assert small.other < large.other
    assert small.kv_tokens > large.kv_tokens
    assert large.other - small.other == pytest.approx(gen_other_bytes(p.policy, lay, 1024)
                                                       - gen_other_bytes(p.policy, lay, 32))
    # the engine release the row names picks the figure
    old = replace(p, workload=replace(p.workload, engine_version="0.11.2"))
    assert gen_side(old, old.pool, lay, max_num_seqs=1024).other - large.other == pytest.approx(
        1024 * p.policy.vocab * (28.0 - 14.0))


def test_without_a_cap_the_reserve_is_the_engine_defaults_and_a_chosen_cap_reserves_for_itself():
    """No cap: the reserve is for vLLM's default max_num_seqs (1024 on an H100), whatever the replica
    count (the engine search's count loop needs fitting independent of dp). When the engine's own search
    picks a cap (KV memory oversubscribed), the plan exports that cap, and the reserve is the cap's."""
    spec = {**SPEC, "rl": {**SPEC["rl"], "prompts_per_step": 512, "samples_per_prompt": 16, "prompt_len": 1024,
                           "response_len": {"max": 8192, "mean": 3000}}}
    p = resolve(load_spec(spec))
    lay = GenLayout(tp=1, dp=8)
    side = gen_side(p, p.pool, lay)
    assert side.max_num_seqs is not None and side.max_num_seqs < 512 * 16 / 8
    assert side.other == pytest.approx(gen_other_bytes(p.policy, lay, side.max_num_seqs))
    few = resolve(load_spec(SPEC))  # 64 prompts x 8 samples: 64 requests per replica, all in KV memory at once
    uncapped = gen_side(few, few.pool, lay)
    assert uncapped.max_num_seqs is None
    assert uncapped.other == pytest.approx(gen_other_bytes(few.policy, lay, 1024))
    assert gen_side(few, few.pool, GenLayout(tp=1, dp=1)).other == pytest.approx(uncapped.other)


def test_an_engine_whose_target_cannot_cap_it_runs_at_the_cap_its_framework_builds_it_with():
    """OpenRLHF has no max_num_seqs flag and builds every engine as vLLM's AsyncLLMEngine from engine args
    without it (runtime.yaml async_engine_always), so its engines run at most the scheduler's engine-context
    default (128): a plan without a cap is scored, and reserves its profile run, as one capped there, not as
    an engine holding every request. A target that can set the cap exports one that never binds."""
    spec = {**SPEC, "rl": {**SPEC["rl"], "prompts_per_step": 256, "samples_per_prompt": 8}}
    capped_at = runtime().engine_context_max_num_seqs.value
    assert capped_at == 128
    lay = GenLayout(tp=1, dp=8)  # 256 requests per replica: the cap binds
    openrlhf = resolve(load_spec({**spec, "target": {"framework": "openrlhf"}}))
    side = gen_side(openrlhf, openrlhf.pool, lay, cap_search=False)
    as_capped = gen_side(openrlhf, openrlhf.pool, lay, max_num_seqs=capped_at, cap_search=False)
    assert side.max_num_seqs is None and side.peak_batch <= capped_at + 1
    assert (side.decode, side.other, side.kv_tokens) == (as_capped.decode, as_capped.other, as_capped.kv_tokens)
    # at vLLM's LLM-class default (1024 on an H100, frameworks whose engines differ: none) all 256 run at once
    llm_class = resolve(load_spec(spec))
    uncapped = gen_side(llm_class, llm_class.pool, lay, cap_search=False)
    assert uncapped.peak_batch > capped_at + 1 and uncapped.decode < side.decode
