"""The seed design note's rule-of-thumb baseline (rlsolve/baseline.py): its worked examples,
that every example's seed layout is scored or rejected with a reason, and that rlsolve's
optimum is never worse than a seed layout that fits."""
from __future__ import annotations

import pytest

import rlsolve
from rlsolve.baseline import (BaselineError, derive_parallelism, optimize_resource_ratio, resource_ratio_terms,
                              round_to_valid_parallelism, search_space_escapes, seed_layout, seed_plan,
                              tree_parallelism)
from rlsolve.resolve import resolve
from rlsolve.solver.estimate import check_layout

from conftest import EXAMPLES, small_spec

H100 = dict(gpus_per_node=8, gpu_memory=80, gpu_compute=989, nvlink_bw=900, ib_bw=50)


# --- the seed's worked examples (section 3.4) -------------------------------------------------

def test_70b_on_64_h100_gives_tp8():
    d = derive_parallelism(model_params=70e9, num_layers=80, hidden_dim=8192, num_heads=64, num_experts=0,
                           seq_len=2048, total_gpus=64, **H100)
    assert d["tp"] == 8
    assert d["total"] == 64
    # The seed's own algorithm gives PP=1 DP=8 (as its 7.2 template), not the PP=2 DP=4 its
    # section 3.4 text claims: with TP=8 a node holds one TP group, so pp_max_per_node = 1.
    assert (d["pp"], d["dp"]) == (1, 8)


def test_15b_on_8_h100_gives_tp1_pp1_dp8():
    args = dict(model_params=1.5e9, num_layers=24, hidden_dim=2048, num_heads=16, num_experts=0, seq_len=4096,
                total_gpus=8, **H100)
    d = tree_parallelism(**args)
    assert (d["tp"], d["pp"], d["dp"], d["total"]) == (1, 1, 8, 8)
    # derive_parallelism alone keeps the last TP candidate whose layer fits in 30% of HBM,
    # so it gives the 1.5B model TP=8 -- a mistake of the seed, kept as written.
    assert derive_parallelism(**args)["tp"] == 8


def test_resource_ratio_by_hand():
    # 7B, seq 4096, 4 samples per prompt, 989 TFLOP/s, worked by hand:
    #   prefill = 6*7e9*4096 / (989e12*0.5)          = 1.72032e14 / 4.945e14  = 0.347891 s
    #   decode  = 2*7e9 / (989e12*0.1) * 4096 * 4    = 1.41557e-4 * 16384     = 2.319272 s
    #   train   = 6*7e9*4096*4 / (989e12*0.4)        = 6.88128e14 / 3.956e14  = 1.739454 s
    #   gen_ratio = (0.347891 + 2.319272) / (0.347891 + 2.319272 + 1.739454) = 0.605263
    #   (= (12 + 20n) / (12 + 35n) = 92/152 for n = 4: P, s and the GPU cancel)
    r = resource_ratio_terms(7e9, 4096, 4, 989)
    assert r["prefill_time"] == pytest.approx(0.347891, rel=1e-5)
    assert r["decode_time"] == pytest.approx(2.319272, rel=1e-5)
    assert r["train_time"] == pytest.approx(1.739454, rel=1e-5)
    assert r["gen_ratio"] == pytest.approx(92 / 152, rel=1e-9)
    # N_gen = int(8 * 0.605) = 4, N_train = 4: the 7.1 template's 4:4
    assert optimize_resource_ratio(7e9, 4096, 4, 989, 80, 8) == (4, 4)


@pytest.mark.parametrize("total,n,split", [(8, 4, (4, 4)), (64, 16, (32, 32)), (256, 8, (128, 128))])
def test_split_reproduces_the_templates(total, n, split):
    """7.1: 8 GPUs -> 4:4; 7.2: 64 -> 32:32; 7.3: 256 -> 128:128."""
    assert optimize_resource_ratio(70e9, 9216, n, 989, 80, total) == split


def test_round_to_valid_parallelism():
    assert [round_to_valid_parallelism(x, 8, 8) for x in (1, 3, 5, 6, 12, 27, 37, 49)] == \
        [1, 2, 4, 4, 8, 32, 32, 64]
    assert round_to_valid_parallelism(24, 8, 2) == 16  # capped by the cluster's legal role sizes


# --- every example: scored, or rejected with a reason -----------------------------------------

@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_seed_layout_scored_or_reported(path):
    plan, reason = seed_plan(str(path))
    if plan is None:
        assert reason.startswith(("does not fit: ", "breaks a rule: ")) and len(reason) > 40, reason
    else:
        assert plan.throughput.tokens_per_s > 0
        problem = resolve(rlsolve.load_spec(str(path)))
        lay = seed_layout(problem)
        check_layout(problem, lay)
        ra, g, t = lay.resource_allocation, lay.parallelism.generation, lay.parallelism.training
        assert g.tp * g.pp * g.dp == ra.generation.gpus and t.tp * t.pp * t.cp * t.dp == ra.training.gpus
        assert lay.pipeline.mode == ("async" if problem.spec.rl.max_staleness >= 1 else "sync")
        assert lay.placement.reference == "cpu_offload" and lay.optimization.reference_offload
        if problem.reward is not None:
            assert lay.optimization.reward_quantization in ("int8", "int4")


def test_known_examples_that_do_not_fit():
    plan, reason = seed_plan(str(next(p for p in EXAMPLES if p.stem == "ppo-7b-8xh100")))
    assert plan is None and reason.startswith("does not fit: ") and "GB" in reason


def test_divisibility_break_is_reported_not_raised():
    # 63 prompts x 8 samples / 2 mini-batches = 252 sequences; the seed's DP=8 does not divide them
    plan, reason = seed_plan(small_spec(rl={"prompts_per_step": 63}))
    assert plan is None and reason.startswith("breaks a rule: ") and "252" in reason


def test_one_gpu_cannot_be_split():
    plan, reason = seed_plan(small_spec(cluster={"gpu": "H100-SXM-80GB", "nodes": 1, "gpus_per_node": 1,
                                                 "network": "IB-NDR-400"}))
    assert plan is None and reason.startswith("breaks a rule: ")


# --- rlsolve is never worse than the seed -----------------------------------------------------

@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_rlsolve_never_worse_than_seed(path):
    seed, reason = seed_plan(str(path))
    problem = resolve(rlsolve.load_spec(str(path)))
    try:
        lay = seed_layout(problem)
    except BaselineError:
        lay = None
    if lay is not None:
        # Where the seed's layout leaves the solver's space, it must be only in ways the model
        # scores the same or worse; anything else is a search-space bug to fix in the solver.
        for e in search_space_escapes(problem, lay):
            assert "dominated" in e or "nothing is lost" in e, e
    if seed is None:
        pytest.skip(reason)
    plan = rlsolve.solve(str(path))
    # the program works in integer milliseconds: allow that rounding, nothing more
    assert plan.time_s.step <= seed.time_s.step + 2e-3, (plan.time_s.step, seed.time_s.step)
    assert plan.throughput.tokens_per_s >= seed.throughput.tokens_per_s * (1 - 1e-4)
