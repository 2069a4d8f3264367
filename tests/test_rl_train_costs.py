"""RL-specific costs of the training and log-prob passes (issue #15): each framework fact against
what it claims, with expected values worked out by hand from the mechanism, not from the code."""
import math
from dataclasses import replace

import pytest

from rlsolve.frameworks.runtime import framework_costs, runtime
from rlsolve.perf.hw import device
from rlsolve.perf.step import seq_attention, train_aux, train_core
from rlsolve.perf.train import (LOGIT_FP32_BYTES_FWD, TrainLayout, forward_time, fsdp_copy_time, logit_extra_bwd,
                                logit_extra_fwd, micro_batch_lengths, packed_busiest_share, packed_pad_factor,
                                stage_times)
from rlsolve.resolve import resolve
from rlsolve.spec import load_spec

SPEC = {"cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 8},
        "model": {"policy": "llama-3.1-8b"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 256,
               "response_len": {"max": 2048, "mean": 800}},
        "solver": {"top_k": 0}}


def micro_batch_seq_len(seq_mean: float, pp: int, dp: int, **kw) -> float:
    """Tokens per sequence of the micro-batches (`micro_batch_lengths`' first figure)."""
    return micro_batch_lengths(seq_mean, pp, dp, **kw)[0]


def _with_costs(problem, **costs):
    """The problem with some of its framework's costs (Workload.framework) changed."""
    return replace(problem, workload=replace(problem.workload, framework=replace(problem.workload.framework, **costs)))

def _problem(framework: str = "any"):
    return resolve(load_spec({**SPEC, "target": {"framework": framework}}))


def test_nemo_rl_costs_are_read_and_any_never_charges_them():
    nemo, anyc = framework_costs("nemo-rl"), framework_costs("any")
    assert (nemo.reference_swap_copies, nemo.logit_fp32_bytes_forward, nemo.pipeline_pads_packed) == (3, 46.0, True)
    # verl and OpenRLHF were not read for these: `any` takes the model's own physics
    assert (anyc.reference_swap_copies, anyc.logit_fp32_bytes_forward, anyc.pipeline_pads_packed) == (1, None, False)
    for fw in runtime().frameworks.values():
        for entry in (fw.reference_swap_copies, fw.logit_fp32_bytes_forward, fw.pipeline_pads_packed_micro_batches,
                      fw.fsdp_grad_reduce_bytes_per_param):
            assert entry is None or len(entry.source) > 40
    wl = _problem("nemo-rl").workload
    assert (wl.framework.reference_swap_copies, wl.framework.logit_fp32_bytes_forward,
            wl.framework.pipeline_pads_packed) == (3, 46.0, True)


def test_logit_traffic_beyond_the_models_own_count_is_charged_per_fp32_logit():
    p = _problem()
    dev = device(p.pool)
    lay = TrainLayout(tp=2, dp=4, micro_batch=2)
    assert logit_extra_fwd(p.policy, dev, lay, 1000, None) == 0.0
    assert logit_extra_fwd(p.policy, dev, lay, 1000, LOGIT_FP32_BYTES_FWD) == 0.0
    # 2 sequences x 1000 tokens x vocab/tp logits x (46 - 12) bytes at the device's stream rate
    nbytes = 2 * 1000 * p.policy.vocab / 2 * (46 - 12)
    assert logit_extra_fwd(p.policy, dev, lay, 1000, 46) == pytest.approx(dev.stream_time(nbytes))
    st = stage_times(p.policy, dev, lay, 1000)
    base = forward_time(p.policy, dev, lay, 64, 1000, st=st)
    more = forward_time(p.policy, dev, lay, 64, 1000, st=st, logit_bytes_fwd=46)
    m = 64 / (4 * 2)  # micro-batches per rank
    assert more - base == pytest.approx(m * dev.stream_time(nbytes) / dev.logprob_efficiency)


def test_packing_pads_every_bin_to_the_longest_and_the_busiest_rank_sets_the_pace():
    # 8 sequences of 100 tokens, bins of 201: two per bin, 4 bins dealt to 3 ranks -> the busiest
    # rank computes 2 bins of 200 = 400 tokens where its share is 800/3
    assert packed_pad_factor(8, 0, 100, 100, None, 201, 3) == pytest.approx(400 / (800 / 3))
    # an even deal with full bins pads nothing
    assert packed_pad_factor(8, 0, 100, 100, None, 200, 4) == pytest.approx(1.0)
    # pipeline-parallel layouts of a framework that pads them pay the padding; the others pace at
    # the busiest rank's real tokens, here (equal bins) the same 400 over 800/3
    kw = dict(packed_tokens=201, global_batch=8, prompt_len=0, response_mean=100, response_max=100, clip=None)
    assert micro_batch_seq_len(100, 2, 3, pads_packed=True, **kw) == pytest.approx(150)
    assert micro_batch_seq_len(100, 1, 3, pads_packed=True, **kw) == pytest.approx(150)
    assert micro_batch_seq_len(100, 2, 3, pads_packed=False, **kw) == pytest.approx(150)
    # unequal bins: padded to the longest (2 x 200) against the busiest's real 200 + 100 over 500/2
    uneven = dict(kw, global_batch=5)
    assert micro_batch_seq_len(100, 2, 2, pads_packed=True, **uneven) == pytest.approx(100 * 400 / 250)
    assert micro_batch_seq_len(100, 1, 2, pads_packed=True, **uneven) == pytest.approx(100 * 300 / 250)
    assert micro_batch_seq_len(100, 2, 3, pads_packed=True, **{**kw, "packed_tokens": None}) == 100


def test_a_swapped_reference_pays_three_copies_of_its_weights():
    """NeMo-RL swaps the reference into the policy's model: policy out, reference in, policy back. The
    policy's weights go out into pinned host memory allocated for them each step (megatron_policy_worker.py
    use_reference_model: .to('cpu', non_blocking=True, copy=True); dtensor_policy_worker.py:
    get_cpu_state_dict(pin_memory=True)), at the 2.4 GB/s per GPU measured for such a copy (vLLM's level-1
    sleep backing up its weights, constants.yaml engine_sleep_offload_gbps_per_gpu); the other two at PCIe."""
    p = _problem("nemo-rl")
    assert p.workload.framework.reference_swap_fresh_copies == 1
    assert framework_costs("any").reference_swap_fresh_copies == 0
    lay = TrainLayout(tp=1, pp=1, dp=8, zero_stage=1, micro_batch=1)
    one = _with_costs(p, reference_swap_copies=1, reference_swap_fresh_copies=0)
    pcie_only = _with_costs(p, reference_swap_fresh_copies=0)
    r3 = train_aux(p, p.pool, lay, reference="cpu_offload", reward="elsewhere", reward_quant="none")[0]
    r1 = train_aux(one, p.pool, lay, reference="cpu_offload", reward="elsewhere", reward_quant="none")[0]
    r3_pcie = train_aux(pcie_only, p.pool, lay, reference="cpu_offload", reward="elsewhere", reward_quant="none")[0]
    resident = train_aux(p, p.pool, lay, reference="training", reward="elsewhere", reward_quant="none")
    dev = device(p.pool)
    copy = dev.pcie_time(resident[3])  # the reference's weights on one GPU
    assert r1 - resident[0] == pytest.approx(copy)
    assert r3_pcie - resident[0] == pytest.approx(3 * copy)
    # Llama-3.1-8B's 16-bit weights on one GPU (~16 GB) copied out at 2.4 GB/s: ~6.7 s, not ~0.6 s at PCIe
    out = 2 * p.policy.total_params / 2.4e9
    assert 6.0 < out < 7.5
    assert r3 - resident[0] == pytest.approx(2 * copy + out)


def test_a_reference_swapped_into_a_zero3_policy_runs_the_policys_sharded_pass():
    """NeMo-RL 0.3's DTensor worker runs the reference in the FSDP policy model itself: each reference
    micro-batch gathers the layers as the policy's own log-prob pass does, and the three swap copies
    move the rank's fp32 shard (4 bytes a parameter over the 8 ranks), not the whole 16-bit model."""
    p = resolve(load_spec({**SPEC, "target": {"framework": "nemo-rl"}}))
    v03 = _with_costs(p, **{k: getattr(framework_costs("nemo-rl", "0.3.0"), k)
                            for k in ("fsdp_reference_swap_bytes", "fsdp_copy_bytes", "fsdp_elementwise_bytes")})
    assert v03.workload.framework.fsdp_reference_swap_bytes == 4
    assert framework_costs("nemo-rl", "0.4.0").fsdp_reference_swap_bytes is None
    lay = TrainLayout(tp=1, pp=1, dp=8, zero_stage=3, micro_batch=1)
    ref = train_aux(v03, p.pool, lay, reference="cpu_offload", reward="elsewhere", reward_quant="none")[0]
    dev = device(p.pool)
    shard = 4 * p.policy.total_params / 8
    swaps = 2 * dev.pcie_time(shard) + shard / 2.4e9  # the policy's shard out into fresh pinned memory
    # the pass itself is the policy's old log-prob pass on the same micro-batches (ZeRO-3 gathers included)
    old = train_core(v03, p.pool, lay)[2]
    assert ref - swaps == pytest.approx(old, rel=0.02)
    # a framework that keeps a reference model of its own runs it unsharded, without the gathers, and streams
    # its weights in (no copy out, whatever the swap's facts say)
    apart = _with_costs(v03, reference_swap_copies=1)
    own = train_aux(apart, p.pool, lay, reference="cpu_offload", reward="elsewhere", reward_quant="none")[0]
    assert own - dev.pcie_time(2 * p.policy.total_params) < ref - swaps


def test_pipeline_padding_and_logit_traffic_slow_the_policy_passes_only_where_they_apply():
    p = _problem("nemo-rl")
    plain = _with_costs(replace(p, workload=replace(p.workload, packed_tokens=2304)), logit_fp32_bytes_forward=None)
    packed = _with_costs(plain, pipeline_pads_packed=True)
    pp2 = TrainLayout(tp=1, pp=2, dp=4, zero_stage=1, micro_batch=2)
    t0, _, old0 = train_core(_with_costs(packed, pipeline_pads_packed=False), p.pool, pp2)
    t1, _, old1 = train_core(packed, p.pool, pp2)
    assert t1.total > t0.total and old1 > old0
    pp1 = TrainLayout(tp=1, pp=1, dp=8, zero_stage=1, micro_batch=2)
    assert train_core(packed, p.pool, pp1)[0].total == pytest.approx(train_core(plain, p.pool, pp1)[0].total)
    logits = _with_costs(plain, logit_fp32_bytes_forward=46.0)
    assert train_core(logits, p.pool, pp1)[2] > train_core(plain, p.pool, pp1)[2]
    assert math.isfinite(t1.total)


def test_fsdp_reducing_gradients_in_fp32_moves_twice_the_bytes_of_bf16():
    """NeMo-RL's DTensor and verl's FSDP reduce-scatter gradients in fp32: on a ZeRO-3 layout the
    exposed data-parallel time grows; other ZeRO stages reduce as before."""
    from rlsolve.perf.train import train_time
    p = _problem()
    dev = device(p.pool)
    z3 = TrainLayout(tp=1, dp=8, zero_stage=3, micro_batch=1)
    bf16 = train_time(p.policy, dev, z3, 64, 256)
    fp32 = train_time(p.policy, dev, z3, 64, 256, fsdp_reduce_bytes=4.0)
    assert fp32.dp_comm > bf16.dp_comm and fp32.compute == pytest.approx(bf16.compute)
    assert train_time(p.policy, dev, z3, 64, 256, fsdp_reduce_bytes=2.0).total == pytest.approx(bf16.total)
    z1 = replace(z3, zero_stage=1)
    assert train_time(p.policy, dev, z1, 64, 256, fsdp_reduce_bytes=4.0).total == pytest.approx(
        train_time(p.policy, dev, z1, 64, 256).total)
    assert framework_costs("nemo-rl").fsdp_grad_reduce_bytes == 4.0 == framework_costs("verl").fsdp_grad_reduce_bytes
    assert framework_costs("any").fsdp_grad_reduce_bytes is None  # OpenRLHF's was not read


def test_unfused_modeling_code_charges_its_elementwise_bytes_on_fsdp_layouts_only():
    """verl's FSDP trains the Hugging Face modeling code op by op: per token and layer, two
    RMSNorms of 36 bytes per element where the fused count has 4, rotary on q and k at 20 instead
    of 4, the gated activation at 10 instead of 6."""
    from rlsolve.perf.train import unfused_elementwise_fwd
    p = _problem("verl")
    a, dev = p.policy, device(p.pool)
    lay = TrainLayout(tp=1, dp=8, zero_stage=3, micro_batch=2)
    per_token_layer = 2 * 32 * a.hidden + 16 * (a.q_width + a.n_kv_heads * a.d_head) + 4 * a.d_ffn
    want = dev.stream_time(per_token_layer * 2 * 1000 * a.layers)
    assert unfused_elementwise_fwd(a, dev, lay, 1000, (36, 20, 10)) == pytest.approx(want)
    assert unfused_elementwise_fwd(a, dev, lay, 1000, None) == 0.0
    assert p.workload.framework.fsdp_elementwise_bytes == (36.0, 20.0, 10.0)
    plain = _with_costs(p, fsdp_elementwise_bytes=None)
    t_fsdp, _, old_fsdp = train_core(p, p.pool, lay)
    t_base, _, old_base = train_core(plain, p.pool, lay)
    # forward, backward (twice the forward's bytes), no recompute: 3 forwards' worth per micro-batch
    m = p.workload.global_batch / (8 * 2)  # sequences per optimizer step / (dp x micro-batch)
    steps = p.workload.optimizer_steps
    extra = m * steps * 3 * unfused_elementwise_fwd(a, dev, lay, p.workload.seq_mean, (36, 20, 10))
    assert t_fsdp.total - t_base.total == pytest.approx(extra / dev.train_efficiency, rel=1e-6)
    assert old_fsdp > old_base
    z1 = replace(lay, zero_stage=1)  # Megatron's fused path: untouched
    assert train_core(p, p.pool, z1)[0].total == pytest.approx(train_core(plain, p.pool, z1)[0].total)


def test_a_verl_plan_re_scored_by_estimate_gives_the_solvers_numbers():
    """The new terms sit where solver and estimate both read them (the aux passes' memo keys know
    the ZeRO stage they now depend on)."""
    from rlsolve import estimate, solve
    spec = {**SPEC, "target": {"framework": "verl"}}
    plan = solve(spec)
    assert estimate(spec, plan).time_s.step == pytest.approx(plan.time_s.step, rel=1e-6)


def test_packed_micro_batches_are_the_batchs_bins_not_a_divisor_of_it():
    """NeMo-RL runs one micro-batch per first-fit-decreasing bin: 8 sequences of 100 tokens in bins
    of 201 make 4 bins of 2 sequences; 9 sequences of 100 in bins of 300 make 3 bins of 3 (a
    divisor-of-the-batch rule would have given 1 per micro-batch for 9 = 3 x 3 on 3 ranks too,
    but 7 sequences in bins of 300 are 3 bins, 7/3 sequences each, which no divisor of 7 gives)."""
    from rlsolve.perf.train import packed_sequences_per_bin
    assert packed_sequences_per_bin(8, 0, 100, 100, None, 201) == pytest.approx(2.0)
    assert packed_sequences_per_bin(9, 0, 100, 100, None, 300) == pytest.approx(3.0)
    assert packed_sequences_per_bin(7, 0, 100, 100, None, 300) == pytest.approx(7 / 3)


def test_the_log_prob_passes_run_their_own_micro_batches():
    """Old log-probs and the reference run NeMo-RL's logprob_batch_size micro-batches, not the
    training ones: with larger ones the pass runs fewer micro-batches (pipeline of 2: one bubble of
    (pp - 1) micro-batches either way), the training pass is unchanged."""
    p = _problem("nemo-rl")
    assert runtime().frameworks["nemo-rl"].logprob_micro_batch.value == 4
    lay = TrainLayout(tp=1, pp=2, dp=4, zero_stage=1, micro_batch=1)
    base = train_core(p, p.pool, lay)
    lp4 = replace(p, workload=replace(p.workload, logprob_micro_batch=4.0))
    got = train_core(lp4, p.pool, lay)
    assert got[0].total == pytest.approx(base[0].total)
    dev = device(p.pool)
    seq, lp = p.workload.seq_mean, replace(lay, micro_batch=4)
    # the sequences run attention on their own lengths: the lengths' second moment (perf.step.seq_attention)
    st = stage_times(p.policy, dev, lp, seq, attn_len=seq_attention(p.workload))
    want = forward_time(p.policy, dev, lp, p.workload.samples, seq, st=st,
                        logit_bytes_fwd=p.workload.framework.logit_fp32_bytes_forward)
    assert got[2] == pytest.approx(want) and got[2] != pytest.approx(base[2])
    ref = train_aux(lp4, p.pool, lay, reference="training", reward="elsewhere", reward_quant="none")[0]
    assert ref == pytest.approx(want, rel=0.02)  # the reference: the same forward on the same micro-batches


def test_nemo_rl_dynamic_batches_are_sorted_padded_micro_batches():
    """NeMo-RL's dynamic batching (not packing): 8 sequences of 100 tokens over 2 ranks, 4 each;
    micro-batches of count x longest <= 250 tokens hold 2, so 2 micro-batches of 2 and no padding.
    With the rollout's spread of lengths the sorted micro-batches pad each sequence to its
    micro-batch's longest (rounded to 64): more tokens than the real ones, and every rank runs the
    same number of micro-batches."""
    from rlsolve.perf.train import dynamic_batches
    # (every row 100 tokens wide: the attention figure is the width itself)
    assert dynamic_batches(8, 0, 100, 100, None, 250, 2, 64) == pytest.approx((2.0, 1.0, 100.0))
    per_mb, stretch, attn = dynamic_batches(512, 256, 400, 3840, None, 4096, 8, 64)
    assert stretch > 1.0 and 1.0 <= per_mb <= 4096 / 256
    # rows of different widths: sum of count x width^2 over the tokens exceeds the mean row width
    assert attn > (256 + 400) * stretch
    # a larger budget holds more sequences per micro-batch
    assert dynamic_batches(512, 256, 400, 3840, None, 8192, 8, 64)[0] > per_mb
    assert runtime().frameworks["nemo-rl"].dynamic_batching_round.value == 64


def test_a_fact_that_holds_until_a_release_applies_to_rows_of_earlier_releases_only():
    """NeMo-RL's DTensor (v1) worker trained transformers' modeling code op by op until v0.4.0
    made the Automodel worker the default: a v0.3.0 row is charged its unfused elementwise bytes,
    a v0.4.0 row and a plan (no release named) are not; verl's fact holds for every release."""
    assert framework_costs("nemo-rl", "0.3.0").fsdp_elementwise_bytes == (36.0, 20.0, 10.0)
    assert framework_costs("nemo-rl", "0.3.1").fsdp_elementwise_bytes == (36.0, 20.0, 10.0)
    assert framework_costs("nemo-rl", "0.4.0").fsdp_elementwise_bytes is None
    assert framework_costs("nemo-rl").fsdp_elementwise_bytes is None
    assert framework_costs("verl").fsdp_elementwise_bytes == framework_costs("verl", "0.3.0").fsdp_elementwise_bytes
    assert framework_costs("any", "0.3.0").fsdp_elementwise_bytes is None  # OpenRLHF's was not read


def test_nemo_rl_v030_loss_backward_and_per_sequence_slices_are_charged_per_logit():
    """NeMo-RL v0.3.0's vocab-parallel log-prob backward builds an int64 one-hot over the vocabulary
    (62 bytes per fp32 logit with the cast back, against the model's own 2 x 12); v0.3.1 dropped it.
    Its loss runs once per packed sequence on a slice of the micro-batch's bf16 logits: with k
    sequences, k zeroed full-size gradients (2 B each), the slices' copies (2 + 2 B) and k - 1 sums
    (2 + 2 read, 2 written) per logit."""
    assert framework_costs("nemo-rl", "0.3.0").logit_fp32_bytes_backward == 62.0
    assert framework_costs("nemo-rl", "0.3.1").logit_fp32_bytes_backward is None
    assert framework_costs("nemo-rl").loss_per_packed_sequence is True
    assert framework_costs("verl").loss_per_packed_sequence is False
    assert framework_costs("any", "0.3.0").logit_fp32_bytes_backward is None
    p = _problem()
    dev = device(p.pool)
    lay = TrainLayout(tp=2, dp=4, micro_batch=4)
    logits = 4 * 1000 * p.policy.vocab / 2
    assert logit_extra_bwd(p.policy, dev, lay, 1000, None, False) == 0.0
    assert logit_extra_bwd(p.policy, dev, lay, 1000, 62, False) == pytest.approx(dev.stream_time(logits * (62 - 24)))
    slices = 4 * 2 + 4 + 3 * 6  # 4 zero fills, one copy, 3 sums
    assert logit_extra_bwd(p.policy, dev, lay, 1000, None, True) == pytest.approx(dev.stream_time(logits * slices))
    # the training step pays it once per micro-batch; a v0.3.1 row only the slices
    wl030 = _with_costs(_problem("nemo-rl"), logit_fp32_bytes_backward=62.0, loss_per_packed_sequence=False)
    wl031 = _with_costs(_problem("nemo-rl"), logit_fp32_bytes_backward=None, loss_per_packed_sequence=False)
    megatron = TrainLayout(tp=1, dp=8, micro_batch=4)
    t030 = train_core(wl030, wl030.pool, megatron)[0].total
    t031 = train_core(wl031, wl031.pool, megatron)[0].total
    assert t030 > t031
    # the FSDP path without TP takes torch's log_softmax: not charged the vocab-parallel backward
    fsdp = TrainLayout(tp=1, dp=8, micro_batch=4, zero_stage=3)
    assert train_core(wl030, wl030.pool, fsdp)[0].total == pytest.approx(train_core(wl031, wl031.pool, fsdp)[0].total)


def test_nemo_rl_fsdp2_copies_on_the_compute_stream_are_charged_per_parameter():
    """FSDP2 copies each gathered 16-bit buffer out into the parameters (2 read + 2 written per
    parameter) at every unshard, a forward's and the backward's re-gather, and copies the bf16
    gradients into the fp32 reduce-scatter buffer (2 read + 4 written), all on the compute stream."""
    assert framework_costs("nemo-rl").fsdp_copy_bytes == (4.0, 10.0)
    assert framework_costs("verl").fsdp_copy_bytes is None  # verl's FSDP (v1) path was not read for it
    p = _problem()
    dev = device(p.pool)
    assert fsdp_copy_time(dev, 1e9, 1e9, None, backward=True) == 0.0
    assert fsdp_copy_time(dev, 1e9, 1e9, (4.0, 10.0), backward=False) == pytest.approx(dev.stream_time(4e9))
    # a training micro-batch: two copy-outs of every parameter, one gradient copy-in of the trained ones
    assert fsdp_copy_time(dev, 1e9, 1e9, (4.0, 10.0), backward=True) == pytest.approx(dev.stream_time(14e9))
    assert fsdp_copy_time(dev, 1e9, 1e7, (4.0, 10.0), backward=True) == pytest.approx(dev.stream_time(8e9 + 6e7))
    # charged on FSDP layouts only, in the update and in the log-prob pass
    with_ = _with_costs(_problem("nemo-rl"), fsdp_copy_bytes=(4.0, 10.0))
    without = _with_costs(_problem("nemo-rl"), fsdp_copy_bytes=None)
    fsdp, megatron = TrainLayout(tp=1, dp=8, micro_batch=4, zero_stage=3), TrainLayout(tp=1, dp=8, micro_batch=4)
    a, b = train_core(with_, with_.pool, fsdp), train_core(without, without.pool, fsdp)
    assert a[0].total > b[0].total and a[2] > b[2]
    assert train_core(with_, with_.pool, megatron)[0].total == pytest.approx(
        train_core(without, without.pool, megatron)[0].total)


def test_unpadded_packed_bins_pace_at_the_busiest_ranks_tokens():
    """Without pipeline padding the bins keep their own lengths, but the ranks meet at the end of the
    pass: 6 sequences of 100 tokens in bins of 201 make 3 bins of 200, dealt to 2 ranks: one computes
    400 tokens where the mean is 300."""
    assert packed_busiest_share(6, 0, 100, 100, None, 201, 2) == pytest.approx(400 / 300)
    assert packed_busiest_share(8, 0, 100, 100, None, 201, 4) == pytest.approx(1.0)
    kw = dict(packed_tokens=201, global_batch=6, prompt_len=0, response_mean=100, response_max=100, clip=None)
    assert micro_batch_seq_len(100, 1, 2, pads_packed=False, **kw) == pytest.approx(100 * 4 / 3)
    assert micro_batch_seq_len(100, 1, 1, pads_packed=False, **kw) == pytest.approx(100)  # one rank: no wait
    assert micro_batch_seq_len(100, 1, 2, pads_packed=False, **{**kw, "packed_tokens": None}) == 100


def test_nemo_rl_dtensor_pads_every_packed_training_bin_to_the_budget():
    """NeMo-RL's DTensor worker packs each training micro-batch with min_seq_len = train_mb_tokens: 8
    sequences of 100 tokens in bins of 201 make 4 bins of 200 tokens, each run as 201; dealt to 3 ranks
    the busiest (and, with the dummy micro-batches, every) rank runs 2 of them, 402 tokens against its
    share of 800 / 3. 5 sequences in bins of 250 make bins of 2, 2 and 1: two ranks run 2 x 250 where the
    mean is 250. Only the training pass pads, only on the FSDP (DTensor) path."""
    from rlsolve.perf.train import packed_budget_pad_factor
    assert packed_budget_pad_factor(8, 0, 100, 100, None, 201, 3) == pytest.approx(402 / (800 / 3))
    assert packed_budget_pad_factor(5, 0, 100, 100, None, 250, 2) == pytest.approx(500 / 250)
    kw = dict(packed_tokens=201, global_batch=8, prompt_len=0, response_mean=100, response_max=100, clip=None)
    assert micro_batch_seq_len(100, 1, 3, pads_packed=False, pads_to_budget=True, **kw) == pytest.approx(150.75)
    assert micro_batch_seq_len(100, 1, 3, pads_packed=False, **kw) == pytest.approx(150)  # the bins' own lengths
    assert micro_batch_seq_len(100, 1, 3, pads_packed=False, pads_to_budget=True,
                               **{**kw, "packed_tokens": None}) == 100  # nothing packed: nothing padded
    # read for NeMo-RL's DTensor (fsdp2) workers only
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_pads_packed_to_budget
    assert not framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_pads_packed_to_budget
    assert not framework_costs("verl", None, "fsdp2").fsdp_pads_packed_to_budget
    assert not framework_costs("any").fsdp_pads_packed_to_budget
    p = _problem("nemo-rl")
    packed = replace(p, workload=replace(p.workload, packed_tokens=3072, packed_micro_batch=2.0))
    on, off = (_with_costs(packed, fsdp_pads_packed_to_budget=v) for v in (True, False))
    fsdp, megatron = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3), TrainLayout(tp=1, dp=8, micro_batch=2)
    a, b = train_core(on, on.pool, fsdp), train_core(off, off.pool, fsdp)
    assert a[0].total > b[0].total
    assert a[2] == pytest.approx(b[2])  # the log-prob pass keeps its bins' lengths
    assert train_core(on, on.pool, megatron)[0].total == pytest.approx(train_core(off, off.pool, megatron)[0].total)


def test_the_fsdp_root_unit_opens_and_closes_every_pass_exposed():
    """NeMo-RL's DTensor worker keeps the embedding, final norm and output layer in FSDP2's root unit:
    each pass starts with the root's all-gather and the first layer's, nothing to hide them under, and
    each backward ends waiting for the first layer's reduce-scatter and the root's. With compute long
    enough to hide every other layer's collectives that is all that shows; the layers share the rest."""
    from rlsolve.perf.train import fsdp_root_params, overlap_contention_share, zero3_exposed
    p = _problem()
    dev = device(p.pool)
    arch = p.policy
    lay = TrainLayout(tp=1, dp=8, micro_batch=1, zero_stage=3)
    # Llama-3.1-8B: untied embedding and output layer of 128256 x 4096 each, and the final norm
    assert fsdp_root_params(arch, lay) == pytest.approx(2 * 128256 * 4096 + 4096)
    assert fsdp_root_params(arch, replace(lay, tp=2)) == pytest.approx((2 * 128256 * 4096 + 4096) / 2)
    long = {"fwd_compute": 1e3, "bwd_compute": 1e3}
    weights, grads, root = (8e9, 0.0), (16e9, 0.0), (2e9, 4e9)
    layers = 32
    ag = lambda b: dev.all_gather(b, 8, 8)  # noqa: E731
    rs = lambda b: dev.reduce_scatter(b, 8, 8)  # noqa: E731
    none_ag, none_rs = ag(0.0), rs(0.0)  # the expert share (no experts here) still pays its latency
    # opening: the root's 2e9 bytes and the first layer's share of the other 6e9; closing: the first
    # layer's share of the other 12e9 gradient bytes and the root's 4e9
    # every layer's collectives, hidden under the compute, still slow it by their share of the SMs and HBM
    f = overlap_contention_share(dev, 8, 8)
    g, sc = ag(6e9 / layers) + none_ag, rs(12e9 / layers) + none_rs
    want = ag(2e9) + g + sc + rs(4e9) + layers * f * (2 * g + sc)
    assert zero3_exposed(dev, lay, long, layers, weights, grads, root) == pytest.approx(want)
    # without the root fact: the first (average) layer's gather only
    g, sc = ag(8e9 / layers) + none_ag, rs(16e9 / layers) + none_rs
    assert zero3_exposed(dev, lay, long, layers, weights, grads) == pytest.approx(g + layers * f * (2 * g + sc))
    # forward only: the opening
    g = ag(6e9 / layers) + none_ag
    assert zero3_exposed(dev, lay, long, layers, weights, None, root) == pytest.approx(
        ag(2e9) + g + layers * f * g)
    # read for NeMo-RL's DTensor workers; charged on ZeRO-3 layouts only
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_root_embeddings
    assert not framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_root_embeddings
    # and for verl's FSDP1 and FSDP2 actors (decoder layers wrapped, the rest in the root, not resharded after
    # the forward)
    assert framework_costs("verl", "0.2.0.dev", "fsdp").fsdp_root_embeddings
    assert framework_costs("verl", None, "fsdp2").fsdp_root_embeddings
    assert not framework_costs("any").fsdp_root_embeddings
    q = _problem("nemo-rl")
    on, off = (_with_costs(q, fsdp_root_embeddings=v) for v in (True, False))
    fsdp, megatron = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3), TrainLayout(tp=1, dp=8, micro_batch=2)
    assert train_core(on, on.pool, fsdp)[0].dp_comm > train_core(off, off.pool, fsdp)[0].dp_comm
    assert train_core(on, on.pool, megatron)[0].total == pytest.approx(train_core(off, off.pool, megatron)[0].total)


def test_fsdp2_mixed_precision_casts_every_layer_boundary():
    """NeMo-RL's DTensor worker gives every fully_shard output_dtype=float32: each decoder layer's output
    is cast to fp32 (2 read + 4 written per hidden element) and the next layer's input back to bf16 (4 + 2),
    12 bytes per hidden element per layer in a forward and again in the backward, on ZeRO-3 layouts only."""
    from rlsolve.perf.train import fsdp_layer_cast_time
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_layer_cast_bytes == 12
    assert framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_layer_cast_bytes is None
    assert framework_costs("verl", None, "fsdp2").fsdp_layer_cast_bytes is None  # verl sets no output_dtype
    assert framework_costs("any").fsdp_layer_cast_bytes is None
    p = _problem()
    dev = device(p.pool)
    arch = p.policy
    lay = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3)
    # 2 sequences x 1000 tokens x hidden 4096 x 12 bytes x 32 layers
    assert fsdp_layer_cast_time(arch, dev, lay, 1000, 12) == pytest.approx(dev.stream_time(2000 * 4096 * 12 * 32))
    assert fsdp_layer_cast_time(arch, dev, lay, 1000, None) == 0.0
    # without sequence parallelism the hidden states are whole on every TP rank; with it, split
    tp2 = replace(lay, tp=2, sequence_parallel=False)
    assert fsdp_layer_cast_time(arch, dev, tp2, 1000, 12) == pytest.approx(fsdp_layer_cast_time(arch, dev, lay, 1000, 12))
    assert fsdp_layer_cast_time(arch, dev, replace(tp2, sequence_parallel=True), 1000, 12) == pytest.approx(
        fsdp_layer_cast_time(arch, dev, lay, 1000, 12) / 2)
    q = _problem("nemo-rl")
    on, off = (_with_costs(q, fsdp_layer_cast_bytes=v) for v in (12.0, None))
    fsdp, megatron = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3), TrainLayout(tp=1, dp=8, micro_batch=2)
    a, b = train_core(on, on.pool, fsdp), train_core(off, off.pool, fsdp)
    seq = q.workload.seq_mean
    m = q.workload.global_batch / (8 * 2)
    cast = fsdp_layer_cast_time(arch, dev, fsdp, seq, 12)
    assert a[0].compute - b[0].compute == pytest.approx(m * 2 * cast * q.workload.optimizer_steps, rel=1e-6)
    assert a[2] > b[2]  # the old log-prob pass runs the same casts in its forward
    assert train_core(on, on.pool, megatron)[0].total == pytest.approx(train_core(off, off.pool, megatron)[0].total)


def test_nemo_rl_dtensor_adam_steps_parameter_by_parameter():
    """NeMo-RL's DTensor recipes before 0.7.0 build torch's AdamW with foreach and fused off over the FSDP2
    DTensor parameters: 8 ops per parameter tensor, each a DTensor dispatch on the host. The step is charged
    the longer of those dispatches and its kernels' traffic, for every optimizer step; not on Megatron layouts,
    not from 0.7.0, not for frameworks where it was not read."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.step import checkpoint_tensors, fsdp_single_tensor_adam_time
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_optimizer_tensor_ops == 8
    assert framework_costs("nemo-rl", "0.6.0", "fsdp2").fsdp_optimizer_tensor_ops == 8
    assert framework_costs("nemo-rl", "0.7.0", "fsdp2").fsdp_optimizer_tensor_ops is None
    assert framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_optimizer_tensor_ops is None
    assert framework_costs("verl").fsdp_optimizer_tensor_ops is None
    assert framework_costs("any").fsdp_optimizer_tensor_ops is None
    q = _with_costs(_problem("nemo-rl"), fsdp_optimizer_tensor_ops=8)
    dev = device(q.pool)
    fsdp = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3)
    # Llama-3.1-8B: 291 parameter tensors, 8 dispatches each
    host = checkpoint_tensors(q.policy) * 8 * constants()["dtensor_op_dispatch_us"] * 1e-6
    assert checkpoint_tensors(q.policy) == 291
    assert fsdp_single_tensor_adam_time(q, dev, fsdp) == pytest.approx(max(host, dev.stream_time(
        84.0 * q.policy.total_params / 8)), rel=1e-6)
    assert fsdp_single_tensor_adam_time(q, dev, TrainLayout(tp=1, dp=8, micro_batch=2)) is None
    off = _with_costs(q, fsdp_optimizer_tensor_ops=None)
    on_t, off_t = train_core(q, q.pool, fsdp)[0], train_core(off, off.pool, fsdp)[0]
    steps = q.workload.optimizer_steps
    assert on_t.optimizer == pytest.approx(max(off_t.optimizer, steps * fsdp_single_tensor_adam_time(q, dev, fsdp)))
    assert on_t.optimizer > off_t.optimizer


def test_nemo_rl_dtensor_grad_norm_dispatches_before_the_step():
    """NeMo-RL before 0.5.0 runs get_grad_norm and clip_grad_by_total_norm_ over the FSDP2 DTensor gradients before
    every optimizer step, each pass detaching every parameter's gradient (a DTensor op dispatch on the host): 2
    dispatches per parameter tensor per step, added in full to the single-tensor Adam's step, whatever the shard
    (host time does not shrink with more GPUs); not on Megatron layouts, not from 0.5.0, not where it was not read."""
    from rlsolve.perf.hw import constants
    from rlsolve.perf.step import checkpoint_tensors, fsdp_single_tensor_adam_time
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_grad_norm_tensor_ops == 2
    assert framework_costs("nemo-rl", "0.4.0", "fsdp2").fsdp_grad_norm_tensor_ops == 2
    assert framework_costs("nemo-rl", "0.5.0", "fsdp2").fsdp_grad_norm_tensor_ops is None
    assert framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_grad_norm_tensor_ops is None
    assert framework_costs("verl").fsdp_grad_norm_tensor_ops is None
    assert framework_costs("any").fsdp_grad_norm_tensor_ops is None
    entry = runtime().frameworks["nemo-rl"].fsdp_grad_norm_tensor_ops
    assert "parallelize.py" in entry.source and "p.grad.detach()" in entry.source
    q = _with_costs(_problem("nemo-rl"), fsdp_optimizer_tensor_ops=8, fsdp_grad_norm_tensor_ops=None)
    n = _with_costs(q, fsdp_grad_norm_tensor_ops=2)
    dev = device(q.pool)
    per_op = checkpoint_tensors(q.policy) * constants()["dtensor_op_dispatch_us"] * 1e-6 * dev.host_slowdown
    for dp in (2, 8, 64):
        lay = TrainLayout(tp=1, dp=dp, micro_batch=2, zero_stage=3)
        assert fsdp_single_tensor_adam_time(n, dev, lay) - fsdp_single_tensor_adam_time(q, dev, lay) == pytest.approx(
            2 * per_op, rel=1e-9)
    fsdp = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3)
    steps = q.workload.optimizer_steps
    assert (train_core(n, n.pool, fsdp)[0].optimizer - train_core(q, q.pool, fsdp)[0].optimizer
            == pytest.approx(steps * 2 * per_op / dev.train_efficiency, rel=1e-6))
    # without the single-tensor step's fact (a fused or foreach step) nothing is charged here, nor on ZeRO-1
    assert fsdp_single_tensor_adam_time(_with_costs(n, fsdp_optimizer_tensor_ops=None), dev, fsdp) is None
    assert fsdp_single_tensor_adam_time(n, dev, TrainLayout(tp=1, dp=8, micro_batch=2)) is None


def test_host_syncs_in_packed_attention_expose_the_next_layers_gather_and_idle_the_gpu():
    """verl's remove-padding forward hands transformers' flash attention one flattened row told apart by
    position ids; deriving the varlen arguments waits for the GPU 3 times per layer, after the q/k/v
    projections are queued. FSDP's implicit prefetch issues the next layer's gather only when the host gets
    there, so the q/k/v share of each layer no longer hides it, and the GPU idles a launch at each wait."""
    from rlsolve.perf.step import _packed_host_syncs
    from rlsolve.perf.train import host_sync_time, host_synced_issue_share, zero3_exposed
    assert framework_costs("verl").packed_attention_syncs == 3
    assert framework_costs("any").packed_attention_syncs == 0  # a plan for any framework is never charged
    assert framework_costs("nemo-rl").packed_attention_syncs == 0
    p = _problem()
    dev, arch = device(p.pool), p.policy
    share = host_synced_issue_share(arch, 1000, 3)
    assert host_synced_issue_share(arch, 1000, 0) == 1.0
    # llama-3.1-8b: q 4096x4096 and k, v 4096x1024 of a layer's 218M matmul parameters (plus attention)
    assert 0.85 < share < 0.95
    assert host_synced_issue_share(arch, 100_000, 3) > share  # the attention core, after the waits, grows with context
    lay = TrainLayout(tp=1, dp=8, micro_batch=2, zero_stage=3)
    assert host_sync_time(arch, dev, lay, 3) == pytest.approx(3 * 32 * dev.launch_s)
    assert host_sync_time(arch, dev, lay, 0) == 0.0
    # the exposed gather grows by what the q/k/v share no longer hides, never beyond the whole gather
    gb = (2.0 * 8e9, 0.0)  # bf16 weights of 8B parameters, 32 layers over 8 ranks
    gather = dev.all_gather(gb[0] / 32, 8, 8)
    st = {"fwd_compute": 32 * gather / 2}  # each layer's compute half its gather: the gather paces the pass
    free, synced, whole = (zero3_exposed(dev, lay, st, 32, gb, None, issue_share=s) for s in (1.0, share, 0.0))
    assert free < synced < whole
    # past the opening gather, each layer exposes what the compute queued after its waits leaves uncovered
    assert synced - gather == pytest.approx(32 * (gather - gather / 2 * share), rel=1e-6)
    assert whole - gather == pytest.approx(32 * gather, rel=1e-6)
    # only the FSDP path (ZeRO-3) on unpadded fixed micro-batches of a framework that read it
    wl = replace(_problem("verl").workload, unpadded=True)
    assert _packed_host_syncs(wl, lay) == 3
    assert _packed_host_syncs(wl, replace(lay, zero_stage=1)) == 0
    assert _packed_host_syncs(replace(wl, unpadded=False), lay) == 0
    a = forward_time(arch, dev, lay, 512, 1000, host_syncs=3)
    b = forward_time(arch, dev, lay, 512, 1000)
    assert a > b


def test_attention_runs_on_the_lengths_second_moment():
    """Flash attention over sequences of their own lengths costs sum L^2 (causal: / 2), so per computed token
    the attention-effective length is E[L^2] / E[L] (generate.attention_len): the mean itself where every
    sequence has one length, more than the mean otherwise, and for an (untruncated) exponential response of
    mean m after a prompt P: (P^2 + 2 P m + 2 m^2) / (P + m), since E[R^2] = 2 m^2."""
    from rlsolve.perf.generate import attention_len
    assert attention_len(256, 4096, 4096, None) == 256 + 4096  # mean == max: one length, exactly
    assert attention_len(256, 4096, 4096, 1.0) == 256 + 4096   # every response clipped at the cap
    for prompt in (0, 128, 2048):
        for mean, cap, clip in ((100, 1000, None), (800, 2048, None), (3000, 8192, 0.2), (500, 600, None)):
            assert attention_len(prompt, mean, cap, clip) >= prompt + mean
    # a cap 200 means away truncates nothing that matters (e^-200)
    assert attention_len(100, 100, 20000, None) == pytest.approx((100 ** 2 + 2 * 100 * 100 + 2 * 100 ** 2) / 200,
                                                                 rel=1e-2)  # 250


def test_packed_attention_counts_each_sequence_and_where_the_padding_goes():
    """Sequences of 100 tokens (prompt 0, mean = cap) packed into 250-token bins on one rank. Four: two bins of
    200, each attends 2 x 100^2: 100 per computed token unpadded and padded to the longest bin (no padding),
    80 padded to the budget with the padding in no sequence (40000 over 2 x 250). Three: bins of 200 and 100;
    padded to the longest, the second bin's 100 padding tokens join its sequence, (100 + 100)^2 beside the
    first bin's 2 x 100^2: 60000 over 2 x 200 = 150."""
    from rlsolve.perf.train import packed_attention_len
    lengths = (0, 100, 100, None, 250)
    assert packed_attention_len(4, *lengths, 1, "none") == pytest.approx(100)
    assert packed_attention_len(4, *lengths, 1, "longest") == pytest.approx(100)
    assert packed_attention_len(4, *lengths, 1, "budget") == pytest.approx(80)
    assert packed_attention_len(3, *lengths, 1, "longest") == pytest.approx(150)
    assert packed_attention_len(3, *lengths, 1, "none") == pytest.approx(100)


def test_micro_batches_of_one_length_attend_over_the_tokens_per_sequence():
    """Every branch of micro_batch_lengths gives the attention figure equal to the sequences' length when
    every sequence has the cap's length (nothing to pad; the busiest rank's extra bins stretch its tokens, not
    the length each token attends over), and more than the mean sequence over a spread of lengths."""
    from rlsolve.perf.train import micro_batch_lengths
    one = dict(global_batch=64, prompt_len=256, response_mean=1024, response_max=1024, clip=None)
    spread = {**one, "response_mean": 300}
    for kw in (dict(packed_tokens=None, pads_packed=False), dict(packed_tokens=4096, pads_packed=False),
               dict(packed_tokens=4096, pads_packed=False, dynamic_round=64)):
        seq, attn = micro_batch_lengths(1280, 1, 4, **kw, **one)
        assert attn == pytest.approx(1280) and seq >= 1280
        seq, attn = micro_batch_lengths(556, 1, 4, **kw, **spread)
        assert attn > 556


def test_the_attention_figure_moves_the_attention_term_only():
    """stage_times' attention figure changes the flash-attention time (forward, backward) and nothing else:
    the GEMMs and elementwise work stay on the tokens; the default is the tokens per sequence."""
    p = _problem()
    dev = device(p.pool)
    lay = TrainLayout(tp=2, dp=4, zero_stage=1, micro_batch=2)
    base = stage_times(p.policy, dev, lay, 1000)
    assert stage_times(p.policy, dev, lay, 1000, attn_len=1000) == base
    longer = stage_times(p.policy, dev, lay, 1000, attn_len=2000)
    attn_fwd = longer["fwd_compute"] - base["fwd_compute"]
    assert attn_fwd > 0 and longer["bwd_compute"] > base["bwd_compute"]
    # attention linear in the figure: doubling it again adds as much again
    assert stage_times(p.policy, dev, lay, 1000, attn_len=3000)["fwd_compute"] - longer["fwd_compute"] == \
        pytest.approx(attn_fwd)
    assert longer["tp"] == base["tp"] and longer["p2p"] == base["p2p"]


def test_nemo_rl_megatron_adds_each_weight_gradient_into_the_main_gradient_apart_from_its_gemm():
    """runtime.yaml megatron_wgrad_unfused: NeMo-RL's Megatron worker runs without gradient_accumulation_fusion, so
    each trained parameter's bf16 gradient is written by its GEMM and read back by the DDP hook (2 + 2 bytes) in every
    micro-batch's backward, beside the main-gradient read and write the fused GEMM moves too; nothing for a forward,
    for frameworks not read, or for an FSDP (ZeRO-3) layout."""
    from rlsolve.perf.train import params_per_gpu, train_time
    assert framework_costs("nemo-rl", "0.3.0", "megatron").megatron_wgrad_unfused is True
    assert framework_costs("nemo-rl").megatron_wgrad_unfused is True  # every release read (0.3.0 to 0.7.0)
    assert framework_costs("verl").megatron_wgrad_unfused is False
    assert framework_costs("any").megatron_wgrad_unfused is False
    p = _problem()
    dev = device(p.pool)
    lay = TrainLayout(tp=2, pp=2, dp=2, micro_batch=2, strategy="megatron")
    st = stage_times(p.policy, dev, lay, 1000)
    fused = train_time(p.policy, dev, lay, 64, 1000, st=st)
    unfused = train_time(p.policy, dev, lay, 64, 1000, st=st, unfused_wgrad=True)
    m = 64 / (2 * 2)  # micro-batches per data-parallel rank
    dense, expert = params_per_gpu(p.policy, 2, 2, 1)
    extra = m * dev.stream_time(4.0 * (dense + expert)) / dev.train_efficiency
    assert unfused.total - fused.total == pytest.approx(extra)
    assert unfused.compute - fused.compute == pytest.approx(extra)
    # the same 4 bytes per parameter whatever the micro-batch's tokens
    st2 = stage_times(p.policy, dev, lay, 2000)
    assert (train_time(p.policy, dev, lay, 64, 2000, st=st2, unfused_wgrad=True).total
            - train_time(p.policy, dev, lay, 64, 2000, st=st2).total) == pytest.approx(extra)
    zero3 = TrainLayout(dp=8, zero_stage=3, micro_batch=2, strategy="fsdp2")
    st3 = stage_times(p.policy, dev, zero3, 1000)
    assert (train_time(p.policy, dev, zero3, 64, 1000, st=st3, unfused_wgrad=True).total
            == train_time(p.policy, dev, zero3, 64, 1000, st=st3).total)
    # through the NeMo-RL problem: a Megatron layout's update pays it, its log-prob pass does not
    nemo = _problem("nemo-rl")
    off = _with_costs(nemo, megatron_wgrad_unfused=False)
    t_on, _, old_on = train_core(nemo, nemo.pool, lay)
    t_off, _, old_off = train_core(off, off.pool, lay)
    assert t_on.total > t_off.total
    assert old_on == pytest.approx(old_off)


def test_sequence_parallel_plan_that_gathers_per_projection():
    """NeMo-RL's DTensor SP plan (before 0.5.0) gives every column-parallel projection the sequence-sharded norm
    output: 5 all-gathers of the hidden states per layer forward where the model counts 2 (and 2 reduce-scatters),
    each half an all-reduce; the backward mirrors it. The extra is (5 - 2) / 4 of the pass's tensor-parallel
    time, charged only on a ZeRO-3 layout with tp > 1 and sequence parallelism, in the update and in every
    forward-only pass; nothing else moves."""
    from rlsolve.perf.train import sp_input_gather_share, stage_times
    assert framework_costs("nemo-rl", "0.3.0", "fsdp2").fsdp_sp_input_gathers == 5
    assert framework_costs("nemo-rl", "0.3.0", "megatron").fsdp_sp_input_gathers is None
    assert framework_costs("nemo-rl", "0.5.0", "fsdp2").fsdp_sp_input_gathers is None
    assert framework_costs("verl", None, "fsdp2").fsdp_sp_input_gathers is None
    assert framework_costs("any").fsdp_sp_input_gathers is None
    sp = TrainLayout(tp=4, dp=8, micro_batch=2, zero_stage=3, sequence_parallel=True)
    assert sp_input_gather_share(sp, 5) == pytest.approx(0.75)
    assert sp_input_gather_share(sp, 2) == 0.0 and sp_input_gather_share(sp, None) == 0.0
    for other in (replace(sp, sequence_parallel=False), replace(sp, tp=1), replace(sp, zero_stage=1)):
        assert sp_input_gather_share(other, 5) == 0.0
    q = _problem("nemo-rl")
    on, off = (_with_costs(q, fsdp_sp_input_gathers=v) for v in (5, None))
    a, b = train_core(on, on.pool, sp), train_core(off, off.pool, sp)
    assert a[0].tp_comm == pytest.approx(1.75 * b[0].tp_comm, rel=1e-9) and b[0].tp_comm > 0
    for k in ("compute", "dp_comm", "optimizer", "bubble"):
        assert getattr(a[0], k) == getattr(b[0], k)
    # the old log-prob pass: 0.75 of its forward's tensor-parallel time per micro-batch pass
    wl, dev = q.workload, device(q.pool)
    from rlsolve.perf.step import _logprob_pass
    lp, lp_seq, lp_attn = _logprob_pass(wl, sp)
    st = stage_times(q.policy, dev, lp, lp_seq, attn_len=lp_attn)
    passes = max(1.0, wl.samples / (lp.dp * lp.micro_batch)) + lp.pp - 1
    assert a[2] - b[2] == pytest.approx(0.75 * st["tp_fwd"] * passes / dev.logprob_efficiency, rel=1e-6)
    # a layout without sequence parallelism is left as it was
    nosp = replace(sp, sequence_parallel=False)
    assert train_core(on, on.pool, nosp)[0] == train_core(off, off.pool, nosp)[0]
