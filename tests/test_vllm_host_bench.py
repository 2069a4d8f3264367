"""benchmarks/vllm_host_per_seq.py (the source of perf/constants.yaml decode_v1_core_us_per_seq) and the rule
that charges it: the arithmetic runs without vLLM; the measurement only where vLLM imports and a tokenizer
directory is named (RLSOLVE_VLLM_BENCH_MODEL)."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

from rlsolve.frameworks.runtime import release, runtime
from rlsolve.perf.step import inproc_output_us_per_seq, v1_serial_engine_core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import vllm_host_per_seq as bench  # noqa: E402


@pytest.mark.parametrize("fixed,per_seq_us", [(0.0, 10.0), (0.5, 2.6), (3.0, 0.0)])
def test_slope_is_the_per_sequence_cost_without_the_fixed_part(fixed, per_seq_us):
    batches = [16, 64, 256, 1024]
    step_ms = [fixed + b * per_seq_us * 1e-3 for b in batches]
    assert bench.per_seq_us(batches, step_ms) == pytest.approx(per_seq_us, abs=1e-9)


def test_slope_needs_two_batches():
    with pytest.raises(ValueError):
        bench.per_seq_us([256], [1.0])


def test_serial_engine_core_only_for_v1_releases_that_schedule_synchronously():
    rt = runtime()
    v1, asynch = rt.engine_v1_default_from.value, rt.engine_async_scheduling_default_from.value
    assert release(v1) < release(asynch)
    for v in ("0.6.3", "0.7.3"):  # V0: its own per-sequence output processing (decode_v0_sync_output_us_per_seq)
        assert not v1_serial_engine_core(v)
    for v in (v1, "0.9.0", "0.10.0", "0.11.0", "0.11.2", "0.13.0"):
        assert v1_serial_engine_core(v)
    for v in (asynch, "0.17.1", "0.20.0", "0.33.0", None):  # the scheduler runs one step ahead, beside the GPU
        assert not v1_serial_engine_core(v)


def test_ray_executor_schedules_synchronously_until_its_async_release():
    rt = runtime()
    ray_from = rt.engine_ray_async_scheduling_from.value
    assert release(ray_from) >= release(rt.engine_async_scheduling_default_from.value)
    for v in ("0.6.3", ray_from, "0.40.0", None):
        assert not v1_serial_engine_core(v, ray_executor=True)
    for v in ("0.9.0", "0.11.2", "0.17.1", "0.20.0", "0.25.1"):
        assert v1_serial_engine_core(v, ray_executor=True)
    # the ray backend never schedules asynchronously where the uni executor does not
    for v in ("0.7.0", "0.8.0", "0.13.0", "0.14.0", "0.20.0", "0.33.0", "0.40.0"):
        assert v1_serial_engine_core(v, ray_executor=True) >= v1_serial_engine_core(v)


def test_nemo_rl_engines_over_several_gpus_run_on_ray():
    from rlsolve.frameworks.runtime import framework_costs
    assert framework_costs("nemo-rl").engine_ray_multi_gpu
    assert not framework_costs("verl").engine_ray_multi_gpu
    assert not framework_costs("any").engine_ray_multi_gpu


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not os.environ.get("RLSOLVE_VLLM_BENCH_MODEL"),
                    reason="needs vLLM and a tokenizer directory (RLSOLVE_VLLM_BENCH_MODEL)")
def test_measurement_runs_and_grows_with_the_batch():
    model = os.environ["RLSOLVE_VLLM_BENCH_MODEL"]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    small = bench.measure(model, 8, 4, tokenizer=tok)
    large = bench.measure(model, 64, 4, tokenizer=tok)
    assert large["update_from_output"] > small["update_from_output"] > 0


def test_inproc_output_cost_is_the_last_measured_release_at_or_before():
    table = runtime().engine_inproc_output_us_per_seq.value
    firsts = sorted(table, key=release)
    for k in firsts:
        assert inproc_output_us_per_seq(k) == table[k]
    assert inproc_output_us_per_seq("0.10.0") == table[firsts[0]]  # 0.11.0's figure from the first V1 release
    assert inproc_output_us_per_seq("0.25.1") == table[firsts[-1]]
    assert all(v > 0 for v in table.values())


def test_only_nemo_rl_llm_engines_process_outputs_in_the_engine_thread():
    from rlsolve.frameworks.runtime import runtime as rt
    fws = rt().frameworks
    assert fws["nemo-rl"].engine_inproc_llm.value
    assert all(f.engine_inproc_llm is None for n, f in fws.items() if n != "nemo-rl")


def test_a_nemo_rl_row_processes_outputs_in_the_engine_thread_only_without_async_engine():
    import yaml

    from rlsolve.cases import recipe_estimate
    rows = {r["id"]: r for r in yaml.safe_load((Path(__file__).resolve().parents[1] / "benchmarks" / "data"
                                                 / "extra_cases.yaml").read_text())["cases"]}
    sync = recipe_estimate(rows["nemorl04-llama3p1-8b-grpo-onpolicy-bf16-16g"])[0]
    asynch = recipe_estimate(rows["nemorl04-llama3p1-8b-grpo-1stepoff-bf16-16g"])[0]
    assert sync.workload.engine_inproc_output and not asynch.workload.engine_inproc_output


runner_bench = load_benchmark("vllm_runner_host_per_seq")


@pytest.mark.parametrize("core_here,core_there", [(10.75, 2.6), (18.55, 2.6), (12.74, 2.86)])
def test_runner_cost_scales_with_the_engine_core_timed_in_the_same_steps(core_here, core_there):
    # a machine k times slower (or busier) times both k times longer: the calibrated figure does not move
    for runner_here in (0.0, 3.0, 13.97):
        base = runner_bench.relative(runner_here, core_here, core_there)
        assert base == pytest.approx(runner_here / core_here * core_there)
        for k in (0.5, 1.7, 3.0):
            assert runner_bench.relative(k * runner_here, k * core_here, core_there) == pytest.approx(base)
    with pytest.raises(ValueError):
        runner_bench.relative(1.0, 0.0)


def test_calibrated_divides_by_the_host_ratio():
    assert runner_bench.calibrated(41.0, 4.10) == pytest.approx(10.0)
    assert runner_bench.calibrated(4.10) == pytest.approx(1.0)  # the default ratio: vllm_host_per_seq.py's 4.10
    with pytest.raises(ValueError):
        runner_bench.calibrated(1.0, 0.0)


def test_runner_cost_is_the_last_measured_release_at_or_before():
    from rlsolve.perf.step import runner_us_per_seq
    table = runtime().engine_runner_us_per_seq.value
    firsts = sorted(table, key=release)
    assert firsts[0] == runtime().engine_v1_default_from.value  # V1's first release: 0.17.1's figure as a proxy
    assert runner_us_per_seq("0.9.0") == runner_us_per_seq("0.10.0") == table["0.17.1"] > 0
    for k in firsts:
        assert runner_us_per_seq(k) == table[k] >= 0
    assert runner_us_per_seq("0.11.2") == table["0.11.0"] > 0
    assert runner_us_per_seq("0.20.0") == runner_us_per_seq("0.25.1") == table[firsts[-1]] > 0


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not os.environ.get("RLSOLVE_VLLM_BENCH_MODEL"),
                    reason="needs vLLM and a tokenizer directory (RLSOLVE_VLLM_BENCH_MODEL)")
def test_runner_measurement_runs_and_grows_with_the_batch():
    model = os.environ["RLSOLVE_VLLM_BENCH_MODEL"]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    small = runner_bench.measure(model, 8, 4, tokenizer=tok, stat=min)
    large = runner_bench.measure(model, 128, 4, tokenizer=tok, stat=min)
    assert large["bookkeeping"] > small["bookkeeping"] > 0
    assert large["engine_core"] > small["engine_core"] > 0


def test_a_synchronous_engine_pays_the_model_runner_and_its_decode_bound_stays_below(monkeypatch):
    import yaml

    import rlsolve.perf.step as step_mod
    from rlsolve.cases import recipe_estimate
    rows = {r["id"]: r for r in yaml.safe_load((Path(__file__).resolve().parents[1] / "benchmarks" / "data"
                                                 / "extra_cases.yaml").read_text())["cases"]}
    row = rows["nemorl05-llama3p1-8b-grpo-onpolicy-bf16-gb200-8g"]  # vLLM 0.11.2, synchronous
    charged = recipe_estimate(row)
    problem, gen = charged[0], charged[2].gen
    assert step_mod.v1_serial_engine_core(problem.workload.engine_version)
    pool = problem.pools[0]
    for cap in (gen.max_num_seqs, 64, None):
        exact = step_mod.gen_side(problem, pool, gen.layout, max_num_seqs=cap)
        bound = step_mod.gen_side(problem, pool, gen.layout, max_num_seqs=cap, lower_bound=True)
        assert bound.time <= exact.time * (1 + 1e-9)
    monkeypatch.setattr(step_mod, "runner_us_per_seq", lambda version: 0.0)
    free = recipe_estimate(row)  # a new problem: the engine memo is keyed by its identity
    assert free[0] is not problem
    assert free[2].gen.decode < gen.decode
