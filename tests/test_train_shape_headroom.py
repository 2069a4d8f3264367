"""benchmarks/train_shape_headroom.py: the most a shape-level skip of the training enumeration could save
(issue #13 analysis): the solve told which shapes score nothing must find the same plan, score the same layouts
and ask no more floors."""
from __future__ import annotations

from conftest import ROOT, load_benchmark
from rlsolve.solver import candidates as cand_mod
from rlsolve.solver import rules


def test_skipping_the_shapes_that_score_nothing_leaves_the_plan_and_the_scored_layouts():
    mod = load_benchmark("train_shape_headroom")
    h = mod.headroom(str(ROOT / "examples" / "grpo-8b-16xa100.yaml"), repeat=1, rounds=1)
    assert h["same_plan"]
    assert 0 < h["scoring"] < h["shapes"]
    assert h["scored"][0] == h["scored"][1] > 0  # (a shape that scores nothing adds nothing the others read)
    assert h["floors"][1] <= h["floors"][0]
    # the solver's own functions are back in place
    assert cand_mod.train_shapes is rules.train_shapes
    assert cand_mod.train_core.__module__ == "rlsolve.perf.step"
    assert cand_mod.train_core_floor.__module__ == "rlsolve.perf.step"
