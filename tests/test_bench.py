"""`rlsolve validate` / `calibrate` on the CPU test path (SPEC section 8), and the arithmetic
that turns timings into a profile. The CPU figures themselves are not checked: they are
not GPU figures; what is checked is that every item is measured, priced and reported."""
from __future__ import annotations

import sys

import pytest
import yaml
from click.testing import CliRunner

from rlsolve.bench import suite
from rlsolve.cli.main import main
from rlsolve.errors import SpecError

from conftest import ROOT

EX = str(ROOT / "examples" / "ppo-1.5b-8xh100.yaml")
# tp=2 on both sides so the plan has TP all-reduces for the two-process run to measure
LAYOUT = {"pipeline": {"mode": "sync"},
          "resource_allocation": {"generation": {"gpus": 4}, "training": {"gpus": 4}},
          "placement": {"reference": "training", "reward": "training", "value": "training"},
          "parallelism": {"generation": {"tp": 2, "dp": 2},
                          "training": {"tp": 2, "dp": 2, "zero_stage": 1, "micro_batch": 2}}}
KEYS = {"gemm_fraction", "gemm_fp8_fraction", "gemm_half_size_flops", "attention_fraction", "hbm_fraction",
        "nvlink_busbw_fraction", "network_busbw_fraction", "kernel_launch_us"}


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    from rlsolve.present import dump, plan_dict
    from rlsolve.solver.estimate import estimate
    p = tmp_path_factory.mktemp("bench") / "plan.yaml"
    p.write_text(dump(plan_dict(estimate(EX, LAYOUT)), "yaml"))
    return p


def test_validate_on_cpu_writes_the_validation_section(plan_file, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "validated.yaml"
    r = run("validate", str(plan_file), "--spec", EX, "--device", "cpu", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "verdict cpu test mode" in r.output and "training GEMM MLP-up" in r.output
    v = yaml.safe_load(out.read_text())["validation"]
    assert v["verdict"].startswith("cpu test mode") and "not GPU figures" in v["verdict"]
    assert v["device"]["type"] == "cpu" and v["device"]["torch"] and v["device"]["catalog_gpu"] == "H100-SXM-80GB"
    measured = {r["item"]: r for r in v["items"] if r["measured_s"] is not None}
    for name in ("training GEMM attention-out", "training GEMM MLP-up", "prefill GEMM attention-out",
                 "prefill GEMM MLP-up", "training attention fwd+bwd", "decode step", "kernel launch"):
        row = measured[name]
        assert row["measured_s"] > 0 and row["assumed_s"] > 0 and "efficiency" in row
        assert row["run_shape"] if name != "kernel launch" else True  # CPU test mode shrinks every shape
    # one process: the plan's all-reduces are listed, not measured, and the notes say why
    assert any(r["key"] == "nvlink_busbw_fraction" and r["measured_s"] is None for r in v["items"])
    assert any("one device visible" in n for n in v["notes"])
    plan_step = yaml.safe_load(plan_file.read_text())["time_s"]["step"]  # the catalog's figures re-score the plan's step
    mem = yaml.safe_load(plan_file.read_text())["memory_gb_per_gpu"]  # the plan's peak per GPU, both roles on one pool
    assert v["memory"]["needed_gb"] == max(mem["generation"]["total"], mem["training"]["total"]) > 70
    assert v["memory"]["fits"] is None
    prof = v["profile"]["H100-SXM-80GB"]
    assert set(prof) <= KEYS and {"gemm_fraction", "gemm_half_size_flops", "attention_fraction",
                                  "hbm_fraction", "kernel_launch_us"} <= set(prof)
    # re-scored with the (CPU) profile: slower than the catalog H100, by construction
    assert v["rescored"]["step"]["measured"] > v["rescored"]["step"]["assumed"] == plan_step
    # the plan itself is untouched apart from the new section
    assert yaml.safe_load(out.read_text())["time_s"] == yaml.safe_load(plan_file.read_text())["time_s"]


def test_validate_all_reduce_over_two_processes():
    pytest.importorskip("torch")
    from rlsolve.bench import validate_plan
    plan = validate_plan(EX, LAYOUT, device="cpu", nproc=2)  # a bare layout is scored first
    rows = {r["item"]: r for r in plan.validation["items"]}
    for name in ("training TP all-reduce", "decode TP all-reduce", "training DP gradients"):
        assert rows[name]["measured_s"] > 0 and rows[name].get("run_shape", rows[name]["shape"])["ranks"] == 2
    assert "nvlink_busbw_fraction" in plan.validation["profile"]["H100-SXM-80GB"]
    assert plan.validation["device"]["nproc"] == 2


def test_calibrate_writes_a_profile_that_solve_reads(tmp_path):
    pytest.importorskip("torch")
    from rlsolve.cli.main import load_profile
    from rlsolve.perf.hw import device
    from rlsolve.resolve import resolve
    from rlsolve.solver.estimate import estimate
    from rlsolve.spec import load_spec
    out = tmp_path / "profile.yaml"
    r = run("calibrate", "--device", "cpu", "--gpu", "H100", "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(out.read_text())
    assert doc["measured"]["test_mode"] is True and doc["measured"]["device"]["date"]
    prof = load_profile(str(out))
    assert set(prof) == {"H100-SXM-80GB"} and set(prof["H100-SXM-80GB"]) <= KEYS
    pool = resolve(load_spec(EX), prof).pool
    assert device(pool, profile=prof).gemm_fraction == prof["H100-SXM-80GB"]["gemm_fraction"]
    slow = estimate(EX, LAYOUT, profile=prof)
    assert slow.time_s.step > estimate(EX, LAYOUT).time_s.step
    r = run("calibrate", "--device", "cpu", "--out", str(out))  # the CPU is no catalog GPU
    assert r.exit_code == 2 and "--gpu" in r.output


def test_input_errors_exit_2(plan_file, monkeypatch):
    r = run("validate", str(plan_file))
    assert r.exit_code == 2 and "--spec" in r.output
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        r = run("validate", str(plan_file), "--spec", EX, "--device", "cuda")
        assert r.exit_code == 2 and "--device" in r.output
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    for args in (("validate", str(plan_file), "--spec", EX), ("calibrate", "--out", "p.yaml")):
        r = run(*args)
        assert r.exit_code == 2 and 'pip install "rlsolve[bench]"' in r.output


# --- the arithmetic -------------------------------------------------------------------------

def test_gemm_curve_fit_recovers_the_model_curve():
    g, h = 0.8, 3e9
    pts = [(f, g * f / (f + h)) for f in (1e9, 1e10, 1e11, 1e12)]
    fg, fh = suite.fit_gemm(pts, half_default=5e9)
    assert fg == pytest.approx(g) and fh == pytest.approx(h)
    # one size cannot separate the two: keep the catalog's half size, match the point
    fg, fh = suite.fit_gemm([(1e10, g * 1e10 / (1e10 + h))], half_default=5e9)
    assert fh == 5e9 and fg * 1e10 / (1e10 + 5e9) == pytest.approx(g * 1e10 / (1e10 + h))


def test_hbm_fraction_inverts_the_decode_step_model():
    s = {"batch": 32, "hidden": 4096, "cols": 6144, "kv_heads": 1, "group": 4, "d": 128, "ctx": 2048, "layers": 8}
    peak, gemm, attn, fill = 3.35e12, 700e12, 400e12, 5e-6
    t = suite.decode_time(s, 2.0, 0.7 * peak, gemm, attn, fill)
    assert suite.solve_hbm(s, 2.0, t, peak, gemm, attn, fill) == pytest.approx(0.7, rel=1e-6)
    # faster than the compute terms allow: bandwidth cannot be read from it
    assert suite.solve_hbm(s, 2.0, 1e-12, peak, gemm, attn, fill) is None
    # each of the step's GEMMs (one a layer) pays the size curve's fill time beside its FLOPs, as
    # perf/generate.py charges a decode step's GEMMs; attention keeps its own max
    s2 = dict(s, batch=1024)
    free = suite.decode_time(s2, 2.0, peak, gemm, attn, 0.0)
    filled = suite.decode_time(s2, 2.0, peak, gemm, attn, fill)
    kv = 2.0 * 1024 * 1 * 2048 * 128 * 2.0 * 8 / peak
    assert filled - kv == pytest.approx(max(4096 * 6144 * 2.0 * 8 / peak, 2.0 * 1024 * 4096 * 6144 * 8 / gemm + 8 * fill))
    assert filled > free


def test_shrink_keeps_small_dimensions():
    s = suite.shrink({"m": 8, "k": 8192, "n": 28672}, lambda r: r["m"] * r["k"] * r["n"], 1e6)
    assert s["m"] == 8 and s["k"] * s["n"] * 8 <= 1e6
    s = suite.shrink({"layers": 80, "cols": 100}, lambda r: r["layers"] * r["cols"], 1000, first="layers")
    assert s == {"layers": 10, "cols": 100}


@pytest.mark.parametrize("name,mem,want", [
    ("NVIDIA H100 80GB HBM3", 85.0, "H100-SXM-80GB"), ("NVIDIA H100 PCIe", 85.0, "H100-PCIe-80GB"),
    ("NVIDIA A100-SXM4-40GB", 42.4, "A100-SXM-40GB"), ("NVIDIA A100-SXM4-80GB", 85.1, "A100-SXM-80GB"),
    ("NVIDIA H200", 150.0, "H200-SXM-141GB"), ("NVIDIA L4", 23.8, "L4"), ("NVIDIA L40S", 47.7, "L40S"),
    ("AMD Instinct MI300X", 205.8, "MI300X")])
def test_cuda_device_names_map_to_the_catalog(name, mem, want):
    assert suite.catalog_gpu(None, {"type": "cuda", "name": name, "memory_gb": mem}).name == want


def test_unknown_device_needs_gpu_option():
    with pytest.raises(SpecError, match="--gpu"):
        suite.catalog_gpu(None, {"type": "cuda", "name": "Tesla T4", "memory_gb": 16.0})


def test_median_time_warms_up_and_takes_the_median():
    torch = pytest.importorskip("torch")
    from rlsolve.bench.timing import median_time
    calls = []
    t = median_time(lambda: calls.append(1), torch.device("cpu"), warmup=2, reps=5, inner=3)
    assert len(calls) == 2 + 5 * 3 and t >= 0
