"""The value and reward models' scalar head (resolve.scalar_head): a 1-wide output layer in place of
the LM head, the input embedding kept. Everything the output layer costs (its GEMM, its fp32
log-softmax, its parameters and their states, the logits' memory) shrinks by exactly the head's terms
and nothing else moves."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsolve.hardware_db import find_gpu, find_network
from rlsolve.models import Architecture, find_model
from rlsolve.perf.hw import Device
from rlsolve.perf.step import critic_pass, train_aux
from rlsolve.perf.train import (LOGIT_FP32_BYTES_FWD, TrainLayout, forward_time, fsdp_root_params, model_flops,
                                params_per_gpu, stage_times, train_memory)
from rlsolve.resolve import SCALAR_HEAD_WIDTH, PoolHW, resolve, scalar_head
from rlsolve.spec import load_spec

MODELS = ["llama-3.1-8b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen3-30b-a3b"]


def h100() -> Device:
    gpu = find_gpu("H100-SXM-80GB")
    return Device(PoolHW("main", gpu, 1, 8, find_network("IB-NDR-400"), 8, gpu.price_per_gpu_hour_usd), "bf16")


def test_a_scalar_head_keeps_the_embedding_and_drops_the_vocabulary_head():
    for name in MODELS:
        lm = find_model(name)
        sc = scalar_head(lm)
        assert (sc.d_out, sc.tied_embeddings, lm.d_out) == (SCALAR_HEAD_WIDTH, False, lm.vocab)
        h = lm.hidden
        # the head's forward GEMM: 2 x hidden x width FLOPs per token
        assert lm.matmul_flops_per_token - sc.matmul_flops_per_token == 2.0 * h * (lm.vocab - 1)
        # parameters: untied, the vocab x hidden head becomes 1 x hidden; tied, the shared matrix stays the
        # input embedding and the 1-wide head is added
        want = -h if lm.tied_embeddings else (lm.vocab - 1) * h
        assert lm.total_params - sc.total_params == want
        assert sc.embedding_params == lm.vocab * h + h
        # the layers are the same
        assert lm.total_params - lm.embedding_params == sc.total_params - sc.embedding_params


def test_a_scalar_head_cannot_be_tied():
    with pytest.raises(ValueError, match="cannot be tied"):
        Architecture(layers=2, hidden=64, heads=4, vocab=1000, tied_embeddings=True, output_width=1)


def test_resolve_gives_the_value_and_reward_models_a_scalar_head_and_the_reference_the_lm_head():
    p = resolve(load_spec("examples/ppo-1.5b-8xh100.yaml"))
    assert p.policy.d_out == p.reference.d_out == p.policy.vocab
    assert p.value.d_out == p.reward.d_out == 1
    assert p.policy.tied_embeddings and not p.value.tied_embeddings  # qwen2.5-1.5b ties its head
    assert (p.value.layers, p.value.hidden, p.value.vocab) == (p.policy.layers, p.policy.hidden, p.policy.vocab)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 4]),
       st.sampled_from([0, 1, 3]), st.sampled_from(["none", "full"]), st.sampled_from([512.0, 2048.0]))
def test_the_pass_and_memory_shrink_by_exactly_the_heads_terms(name, tp, pp, mb, zero, recompute, seq):
    lm = find_model(name)
    sc = scalar_head(lm)
    dev = h100()
    lay = TrainLayout(tp=tp, pp=pp, dp=8 // (tp * pp) or 1, micro_batch=mb, zero_stage=zero, recompute=recompute)
    tokens = mb * seq
    bf16 = Device(dev.pool, "bf16")

    def head_terms(width: int) -> float:  # the output layer's GEMM and its fp32 log-softmax, one forward
        return (bf16.gemm_time(2 * tokens * lm.hidden * width / tp)
                + dev.stream_time(tokens * width / tp * LOGIT_FP32_BYTES_FWD))

    a, b = stage_times(lm, dev, lay, seq), stage_times(sc, dev, lay, seq)
    assert a["fwd_compute"] - b["fwd_compute"] == pytest.approx(head_terms(lm.vocab) - head_terms(1), rel=1e-9)
    assert b["fwd_compute"] < a["fwd_compute"] and b["bwd_compute"] < a["bwd_compute"]
    for k in ("tp", "ep", "cp", "p2p"):
        assert a[k] == b[k]
    f_lm, f_sc = forward_time(lm, dev, lay, 64, seq), forward_time(sc, dev, lay, 64, seq)
    if zero < 3:
        assert f_sc < f_lm
    elif not lm.tied_embeddings:
        # ZeRO-3: the layer gathers the compute hides may set the pace either way (a tied model's scalar head
        # adds hidden parameters to gather, so it is left out)
        assert f_sc <= f_lm
    # training FLOPs: the head's 3 passes
    assert model_flops(lm, tokens, seq) - model_flops(sc, tokens, seq) == pytest.approx(
        tokens * 3 * 2.0 * lm.hidden * (lm.vocab - 1), rel=1e-12)
    # parameters per GPU: at pp 1 the head's share; at pp > 1 the first stage's embedding is the larger
    dense_lm, exp_lm = params_per_gpu(lm, tp, pp, 1)
    dense_sc, exp_sc = params_per_gpu(sc, tp, pp, 1)
    assert exp_lm == exp_sc
    assert dense_lm - dense_sc == pytest.approx(
        (lm.embedding_params - sc.embedding_params) / tp if pp == 1 else 0.0, abs=1e-6)
    assert fsdp_root_params(lm, lay) - fsdp_root_params(sc, lay) == pytest.approx(
        (lm.embedding_params - sc.embedding_params) / tp)
    # memory: the logits of the last stage (fp32, vocab-parallel) go, the layers' activations stay
    ma, mb_ = train_memory(lm, lay, seq), train_memory(sc, lay, seq)
    if pp == 1:
        assert ma.activations - mb_.activations == pytest.approx(tokens * (lm.vocab - 1) / tp * 4.0, rel=1e-9)
        if not lm.tied_embeddings:
            assert mb_.total < ma.total
    fa, fb = (train_memory(x, lay, seq, trainable=False) for x in (lm, sc))
    assert fa.activations - fb.activations == pytest.approx(tokens * (lm.vocab - 1) / tp * 4.0, rel=1e-9)


def test_the_ppo_critic_and_reward_model_cost_less_than_the_same_models_with_an_lm_head():
    """The step's value and reward terms on a PPO example: the scalar-head models' against the policy's own
    architecture (vocabulary head) in their place."""
    p = resolve(load_spec("examples/ppo-7b-8xh100.yaml"))
    lm = replace(p, value=p.policy, reward=p.policy)
    pool = p.pool
    lay = TrainLayout(tp=2, pp=1, dp=4, micro_batch=2, zero_stage=1)
    sc_pass, lm_pass = critic_pass(p, pool, lay, {}), critic_pass(lm, pool, lay, {})
    assert sc_pass[0] < lm_pass[0] and sc_pass[1] < lm_pass[1] and sc_pass[2] < lm_pass[2]
    _, rew_sc, _, res_sc = train_aux(p, pool, lay, reference="cpu_offload", reward="training", reward_quant="none",
                                     cache={}, critic_apart=True)
    _, rew_lm, _, res_lm = train_aux(lm, pool, lay, reference="cpu_offload", reward="training", reward_quant="none",
                                     cache={}, critic_apart=True)
    assert rew_sc < rew_lm
    # the reward model's weights resident on the trainers: its untied vocabulary head's, sharded by tp
    assert res_lm - res_sc == pytest.approx(2.0 * (p.policy.vocab - 1) * p.policy.hidden / lay.tp, rel=1e-9)
