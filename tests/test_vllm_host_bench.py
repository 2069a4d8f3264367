"""benchmarks/vllm_host_per_seq.py: the arithmetic runs without vLLM; the measurement only where vLLM imports
and a tokenizer directory is named (RLSOLVE_VLLM_BENCH_MODEL)."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

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


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not os.environ.get("RLSOLVE_VLLM_BENCH_MODEL"),
                    reason="needs vLLM and a tokenizer directory (RLSOLVE_VLLM_BENCH_MODEL)")
def test_measurement_runs_and_grows_with_the_batch():
    model = os.environ["RLSOLVE_VLLM_BENCH_MODEL"]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    small = bench.measure(model, 8, 4, tokenizer=tok)
    large = bench.measure(model, 64, 4, tokenizer=tok)
    assert large["update_from_output"] > small["update_from_output"] > 0
