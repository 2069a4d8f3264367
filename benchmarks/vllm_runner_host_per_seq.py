"""Host time vLLM V1's GPU model runner (GPUModelRunner, the class GPU workers run) spends per running sequence
per decode step, measured by running vLLM's own GPUModelRunner methods on this CPU (no GPU).

The sibling of benchmarks/vllm_host_per_seq.py (engine core and output processor), with the same scheduler
(vLLM's Scheduler, one new token per request, prefix caching on) feeding a GPUModelRunner built the way vLLM's
own CPUModelRunner builds it (vllm/v1/worker/cpu_model_runner.py: GPUModelRunner.__init__ under its
_torch_cuda_wrapper, which stands CUDA events and streams in by no-ops, then each CpuGpuBuffer's device half
pointed at its CPU half by CPUModelRunner._postprocess_tensors). No model is loaded and no kernel runs.
Per decode step of b running requests it times these GPUModelRunner methods, unchanged:
  - _update_states(scheduler_output): the cached request states and the persistent InputBatch (Python per
    request: num_computed_tokens, new block ids appended to the block table);
  - _prepare_inputs(scheduler_output): numpy over the batch (positions, token indices, slot mapping,
    query_start_loc, seq_lens) and the per-request list of num_tokens; on a GPU each CpuGpuBuffer.copy_to_gpu
    is an asynchronous host-to-device copy (a fixed launch cost per buffer), here a CPU copy onto itself. What
    does not run here: each attention group's metadata builder (backend code: FlashAttention/FlashInfer build
    their metadata from these tensors on the GPU; no attention group exists without a model), and from 0.17.1
    (read in 0.17.1 and 0.20.0) the slot mapping, a Triton kernel over the device block table launched once a
    step (BlockTable.compute_slot_mapping: replaced by a no-op here) - not timed;
  - _bookkeeping_sync(...): the sampled ids to Python lists (GPUModelRunner._to_list: on a GPU a
    non-blocking copy into pinned memory, an event wait, then .tolist(); here the copy is CPU to CPU and the
    wait is vLLM's no-op placeholder), the sampled token's log-prob tensors' .tolists() where asked
    (logprobs=0, as NeMo-RL asks), and per request the InputBatch token row and output_token_ids.extend;
    then the ModelRunnerOutput built from them as execute_model builds it;
  - the pickle round trip the multiprocess executor does each step (MultiprocExecutor over shared memory:
    vllm/distributed/device_communicators/shm_broadcast.py MessageQueue.enqueue/dequeue, pickle.dumps with
    HIGHEST_PROTOCOL): SchedulerOutput to the workers, ModelRunnerOutput back. Only engines over several GPUs
    (tp*pp > 1) on the mp executor pay it; the uni executor (one GPU) calls the worker in-process.
The sampler's logits, top-k/top-p and sampling are GPU kernels over the whole batch (no Python per request):
not here. The SamplerOutput handed to _bookkeeping_sync is a CPU tensor of random ids (and log-prob tensors
of one column, as logprobs=0 gives).

The engine core's Scheduler.schedule + update_from_output run in the same steps and are timed too, so the runner
can be told as a multiple of them: on a CPU shared with other processes (this machine's speed varied 1.7x between
windows) that ratio holds where absolute times do not. Prints the median (or, --stat min, the least) ms per step
at each batch size and the slope, us per sequence per step, raw, divided by the host ratio (this CPU to vLLM PR
#46112's host: `--ratio`, default 4.10 as benchmarks/vllm_host_per_seq.py --calibrate printed with vLLM 0.33.0's
code in its window), and as that multiple of `--core-us`, the release's engine core on PR #46112's host.

Where the cost sits: with synchronous scheduling (vLLM V1 before 0.14.0; the ray executor before 0.33.0) the
engine core runs schedule(), execute_model (this work, then the GPU step, then .tolist() waits for it) and
update_from_output one after another: serial with the GPU. With async scheduling (EngineCore.
step_with_batch_queue, read in 0.20.0 vllm/v1/engine/core.py) step N+1 is scheduled and its inputs prepared
while the GPU runs step N, and the ids come back through AsyncGPUModelRunnerOutput: overlapped, a floor
max(GPU step, host work), not an added term.

Usage: python benchmarks/vllm_runner_host_per_seq.py --model DIR [--batches 16 64 256 1024] [--steps 64]
    [--stat median|min] [--core-us US]
DIR as for vllm_host_per_seq.py (config.json and tokenizer.json). Runs with vLLM 0.11.0, 0.17.1 and 0.20.0 (each
wheel's Python files ahead on PYTHONPATH; 0.11.0 also imports numba, setproctitle, blake3, diskcache, gguf). Not
with 0.9.0 (no _bookkeeping_sync; its _prepare_inputs needs an attention backend's metadata builder) nor 0.33.0
(its pinned-memory helpers ask for CUDA; it schedules asynchronously and runs Model Runner V2 by default).
The arithmetic (per_seq_us, calibrated, relative) is importable without vLLM.
"""
from __future__ import annotations

import argparse
import inspect
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from vllm_host_per_seq import PR46112_UPDATE_MS_B256, _setup, measure as core_measure, per_seq_us  # noqa: E402

from rlsolve.perf.hw import constants  # noqa: E402

HOST_RATIO = 4.10  # this CPU vs PR #46112's host: vllm_host_per_seq.py --calibrate with vLLM 0.33.0 (1.177 ms)

STAGES = ("update_states", "prepare_inputs", "bookkeeping", "runner_output", "mp_pickle", "engine_core")
RUNNER = STAGES[:4]  # the model runner's own work; mp_pickle the executor's; engine_core schedule + update_from_output
# vLLM 0.11.0's engine core on PR #46112's host: the catalog's figure, read, not restated
CORE_US_CALIBRATED = constants()["decode_v1_core_us_per_seq"]
# (10.75 us measured by vllm_host_per_seq.py / 4.10); other releases' in that source: 0.20.0 11.72, 0.25.1 13.45,
# 0.33.0 16.0 us here, so 2.86, 3.28, 3.90 us there (--core-us)


def calibrated(us_here: float, ratio: float = HOST_RATIO) -> float:
    """Microseconds on the calibration host (PR #46112's) for `us_here` measured on this CPU."""
    if ratio <= 0:
        raise ValueError("host ratio must be positive")
    return us_here / ratio


def relative(us_here: float, core_here: float, core_calibrated: float = CORE_US_CALIBRATED) -> float:
    """`us_here` on the calibration host, scaled by the engine core measured in the same steps (the machine's speed
    in that window cancels): us_here / core_here x the engine core's calibrated figure."""
    if core_here <= 0:
        raise ValueError("the engine core's slope must be positive")
    return us_here / core_here * core_calibrated


def make_runner(vllm_config, kv_cache_config):
    """A GPUModelRunner on the CPU, built as vLLM's CPUModelRunner builds its parent (no model, no attention
    group: _prepare_inputs builds the common metadata but no backend's)."""
    import torch
    from vllm.v1.worker import cpu_model_runner as cmr
    from vllm.v1.worker import gpu_model_runner as gmr

    class Runner(gmr.GPUModelRunner):
        """GPUModelRunner with only the two device queries CPUModelRunner also stubs (the GPU's properties, a
        device synchronize); every method timed is GPUModelRunner's."""

        def _init_device_properties(self) -> None:
            pass

        def _sync_device(self) -> None:
            pass

    pinned = getattr(gmr, "is_pin_memory_available", None)
    try:  # no CUDA allocator for pinned memory here (the platform is unspecified, which reports it available)
        gmr.is_pin_memory_available = lambda: False
        with cmr._torch_cuda_wrapper():
            runner = Runner(vllm_config, torch.device("cpu"))
    finally:
        if pinned is not None:
            gmr.is_pin_memory_available = pinned
    cmr.CPUModelRunner._postprocess_tensors(runner)
    _one_rank_groups(vllm_config)
    from vllm.v1.worker import block_table as bt_mod
    if hasattr(bt_mod, "_compute_slot_mapping_kernel"):  # vLLM >= 0.12 (read in 0.20.0): the slot mapping is a
        # Triton kernel over the device block table, launched once per step (no per-request host work): not run
        for table in runner.input_batch.block_table.block_tables:
            table.compute_slot_mapping = lambda *args, **kwargs: None
    runner.kv_cache_config = kv_cache_config
    runner.attn_groups = [[] for _ in kv_cache_config.kv_cache_groups]
    return runner


def _one_rank_groups(vllm_config) -> None:
    """vLLM's process groups for one rank (gloo on this CPU): _update_states asks the pipeline group whether
    this is the last rank."""
    import socket
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    if ps.model_parallel_is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(vllm_config):
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.ensure_model_parallel_initialized(1, 1)


def _sampler_output(runner, so, rng, vocab: int, logprobs: bool):
    import torch
    from vllm.v1.outputs import LogprobsTensors, SamplerOutput
    n = runner.input_batch.num_reqs
    ids = torch.from_numpy(rng.integers(100, vocab - 1, (n, 1))).to(torch.int32)
    lp = None
    if logprobs:  # logprobs=0: the sampled token's id, log-prob and rank, one column (Sampler.gather_logprobs)
        lp = LogprobsTensors(ids.clone(), -torch.rand((n, 1)), torch.zeros(n, dtype=torch.int32))
    return SamplerOutput(sampled_token_ids=ids, logprobs_tensors=lp)


def _bookkeeping(runner, so, sout):
    """_bookkeeping_sync with the arguments execute_model passes at this release; the ModelRunnerOutput it builds
    from the result (timed apart)."""
    import torch
    params = inspect.signature(runner._bookkeeping_sync).parameters
    n = so.total_num_scheduled_tokens
    kw = {}
    if "logits" in params:
        kw["logits"] = None
    if "hidden_states" in params:
        kw["hidden_states"] = torch.empty((n, 1))
    if "num_scheduled_tokens" in params:
        kw["num_scheduled_tokens"] = n
    for p in params:  # later releases' extra arguments, none of them per request
        if p not in kw and p not in ("self", "scheduler_output", "sampler_output"):
            kw[p] = None if params[p].default is inspect.Parameter.empty else params[p].default
    return runner._bookkeeping_sync(so, sout, **kw)


def _runner_output(res):
    from vllm.v1.outputs import ModelRunnerOutput
    fields = set(inspect.signature(ModelRunnerOutput).parameters)
    nans, lp_lists, valid, prompt_lp, req_ids, req_id_to_index = res[:6]
    kw = dict(req_ids=req_ids, req_id_to_index=req_id_to_index, sampled_token_ids=valid, logprobs=lp_lists,
              prompt_logprobs_dict=prompt_lp, pooler_output=[])
    if "num_nans_in_logits" in fields:
        kw["num_nans_in_logits"] = nans
    return ModelRunnerOutput(**kw)


def measure(model: str, b: int, steps: int, logprobs=False, tokenizer=None, prompt_len=128,
            stat=statistics.median) -> dict[str, float]:
    """ms per decode step of each model-runner stage for b running requests: `stat` (the median, or min where
    other processes share the CPU) over the steps."""
    warm = 8
    sched, _proc, rng, vocab = _setup(model, b, prompt_len, warm + steps + 4, True, logprobs, False,
                                      _kind("FINAL_ONLY"), tokenizer)
    if getattr(sched.vllm_config.scheduler_config, "async_scheduling", None):
        # the synchronous path (the default before vLLM 0.14.0, and on the ray executor): the sampled ids come
        # back as lists in this step's output, not a step later
        sched.vllm_config.scheduler_config.async_scheduling = False
    runner = make_runner(sched.vllm_config, sched.kv_cache_config)
    assert not getattr(runner, "use_async_scheduling", False)
    buf = getattr(runner, "sampled_token_ids_pinned_cpu", None)
    if buf is not None and buf.shape[0] < b:  # vLLM 0.11.0 sizes it by max_model_len (thousands in a real engine,
        # prompt_len + steps here): as large as the batch, as there
        import torch
        runner.sampled_token_ids_pinned_cpu = torch.empty((b, 1), dtype=buf.dtype)

    with_counts = "num_scheduled_tokens" in inspect.signature(runner._prepare_inputs).parameters

    def prepare(so):
        if with_counts:  # vLLM >= 0.12: execute_model builds the counts array, then _prepare_inputs
            counts = np.array([so.num_scheduled_tokens[i] for i in runner.input_batch.req_ids], dtype=np.int32)
            runner._prepare_inputs(so, counts)
        else:
            runner._prepare_inputs(so)

    def step():
        c0 = time.perf_counter()
        so = sched.schedule()
        t0 = time.perf_counter()
        runner._update_states(so)
        t1 = time.perf_counter()
        prepare(so)
        t2 = time.perf_counter()
        sout = _sampler_output(runner, so, rng, vocab, logprobs)
        t3 = time.perf_counter()
        res = _bookkeeping(runner, so, sout)
        t4 = time.perf_counter()
        mro = _runner_output(res)
        t5 = time.perf_counter()
        pickle.loads(pickle.dumps(so, protocol=pickle.HIGHEST_PROTOCOL))
        pickle.loads(pickle.dumps(mro, protocol=pickle.HIGHEST_PROTOCOL))
        t6 = time.perf_counter()
        sched.update_from_output(so, mro)
        t7 = time.perf_counter()
        return so, (t1 - t0, t2 - t1, t4 - t3, t5 - t4, t6 - t5, (t0 - c0) + (t7 - t6))

    step()  # prefill
    t = {k: [] for k in STAGES}
    for i in range(warm + steps):
        so, dts = step()
        if len(so.num_scheduled_tokens) != b or so.total_num_scheduled_tokens != b:
            raise RuntimeError(f"{len(so.num_scheduled_tokens)} scheduled, expected a decode step of {b}")
        if i >= warm:
            for k, dt in zip(STAGES, dts):
                t[k].append(dt * 1e3)
    return {k: stat(v) for k, v in t.items()}


def _kind(name: str):
    from vllm.sampling_params import RequestOutputKind
    return RequestOutputKind[name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="directory with config.json and tokenizer.json")
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--ratio", type=float, default=HOST_RATIO, help="this CPU's ratio to PR #46112's host")
    ap.add_argument("--calibrate", action="store_true", help="measure the ratio with the installed release")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per-step statistic (min where other processes share the CPU)")
    ap.add_argument("--core-us", type=float, default=CORE_US_CALIBRATED,
                    help="the installed release's engine core per sequence on PR #46112's host")
    a = ap.parse_args()
    import vllm
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    print(f"vllm {vllm.__version__}; tokenizer {type(tok).__name__} vocab {len(tok)}")
    ratio = a.ratio
    stat = statistics.median if a.stat == "median" else min
    if a.calibrate:
        ms = core_measure(a.model, 256, max(a.steps, 100), prefix_caching=False, tokenizer=tok,
                          prompt_len=32)["update_from_output"]
        print(f"calibration: update_from_output b=256 {ms:.3f} ms here vs {PR46112_UPDATE_MS_B256} ms in "
              f"PR #46112: ratio {ms / PR46112_UPDATE_MS_B256:.2f} (dividing by --ratio {ratio:.2f})")
    for name, lp in (("logprobs=None (verl, OpenRLHF)", False), ("logprobs=0 (NeMo-RL)", True)):
        rows = [measure(a.model, b, a.steps, logprobs=lp, tokenizer=tok, stat=stat) for b in a.batches]
        print(f"\n{name}")
        print(f"{'batch':>6} " + " ".join(f"{k:>14}" for k in STAGES) + f"   ({a.stat} ms per step)")
        for b, r in zip(a.batches, rows):
            print(f"{b:>6} " + " ".join(f"{r[k]:>14.3f}" for k in STAGES))
        slopes = {k: per_seq_us(a.batches, [r[k] for r in rows]) for k in STAGES}
        print("us/seq " + " ".join(f"{slopes[k]:>14.2f}" for k in STAGES))
        runner = sum(slopes[k] for k in RUNNER)
        core = slopes["engine_core"]
        print(f"per sequence per step: model runner {runner:.2f} us here, {calibrated(runner, ratio):.2f} us "
              f"calibrated; + mp executor pickle {slopes['mp_pickle']:.2f} here, "
              f"{calibrated(slopes['mp_pickle'], ratio):.2f} calibrated")
        pickle_us = slopes["mp_pickle"]
        print(f"  against the engine core in the same steps ({core:.2f} us here): runner {runner / core:.2f}x, "
              f"pickle {pickle_us / core:.2f}x; x {a.core_us} us = runner "
              f"{relative(runner, core, a.core_us):.2f} us, pickle {relative(pickle_us, core, a.core_us):.2f} us")


if __name__ == "__main__":
    main()
