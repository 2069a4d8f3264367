"""Host time a V1 vLLM engine spends per running sequence per decode step, measured by running vLLM's own code
on this CPU (no GPU: the model runner is replaced by a synthetic ModelRunnerOutput of one new token per request).

Per decode step of a batch of b running requests it times, with vLLM's classes:
  - engine core: Scheduler.schedule() and Scheduler.update_from_output() (serial with the GPU step);
  - the EngineCoreOutputs' msgpack round trip (vLLM's MsgpackEncoder/Decoder: the engine core process sends them
    to the frontend over ZMQ when VLLM_ENABLE_V1_MULTIPROCESSING is on);
  - frontend: OutputProcessor.process_outputs() (detokenize on/off, the sampled token's log-prob on/off,
    RequestOutputKind FINAL_ONLY as LLM.generate asks, CUMULATIVE as AsyncLLM's default SamplingParams has).
and prints the microseconds per sequence per step (the slope between two batch sizes, so a step's fixed cost is
not counted per sequence).

Calibration: vLLM PR #46112 (benchmarks/overheads/benchmark_scheduler_update_from_output.py, decode-only batch of
256, prefix caching off, no logprobs) measured update_from_output at 0.287 ms on its host; the same setup here gives
this CPU's ratio to theirs (`--calibrate` prints it).

The tokenizer: a directory with a Hugging Face tokenizer.json and a config.json (--model). None ships with vLLM;
the figures in the commit that added this script used Mistral-7B v0.3's SentencePiece vocabulary
(mistral_common 1.13.1 wheel, mistral_common/data/mistral_instruct_tokenizer_240323.model.v3) converted to a
tokenizers BPE (the same ids as sentencepiece on a test string) beside a MistralForCausalLM config.json.

Usage: python benchmarks/vllm_host_per_seq.py --model DIR [--batches 16 64 256 1024] [--steps 64] [--calibrate]
Another release's classes: its wheel's Python files unpacked (no compiled extension is imported) ahead on
PYTHONPATH, with the pure-Python packages it asks for (0.11.0: setproctitle, blake3, diskcache, gguf).
The arithmetic (per_seq_us) is importable without vLLM.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def per_seq_us(batches: list[int], step_ms: list[float]) -> float:
    """Least-squares slope of a step's time (ms) against its batch size, in microseconds per sequence: the cost
    each running sequence adds to a step, the fixed per-step part left out."""
    if len(set(batches)) < 2:
        raise ValueError("need two batch sizes or more for a slope")
    return 1000.0 * float(np.polyfit(batches, step_ms, 1)[0])


PR46112_UPDATE_MS_B256 = 0.287  # vLLM PR #46112 description, merge-base 55c98e370, batch 256 median


def _setup(model: str, b: int, prompt_len: int, max_tokens: int, prefix_caching: bool, logprobs: bool,
           detokenize: bool, kind, tokenizer):
    import torch
    import inspect

    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    try:
        from vllm.utils.hashing import sha256
    except ImportError:  # vLLM <= 0.11
        from vllm.utils import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    block = 16
    sched_kw = dict(max_num_seqs=b, max_num_batched_tokens=max(b * prompt_len, 8192),
                    max_model_len=prompt_len + max_tokens + 16, enable_chunked_prefill=True)
    if "is_encoder_decoder" in inspect.signature(SchedulerConfig).parameters:
        sched_kw["is_encoder_decoder"] = False
    sched_cfg = SchedulerConfig(**sched_kw)
    model_cfg = ModelConfig(model=model, tokenizer=model, dtype="bfloat16", seed=0, skip_tokenizer_init=True,
                            max_model_len=prompt_len + max_tokens + 16)
    cache_cfg = CacheConfig(block_size=block, enable_prefix_caching=prefix_caching)
    vcfg = VllmConfig(scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg,
                      device_config=DeviceConfig(device="cpu"))
    blocks = b * ((prompt_len + max_tokens) // block + 2) + 16
    kv_cfg = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    cache_cfg.num_gpu_blocks = blocks
    extra = {"block_size": block} if "block_size" in inspect.signature(Scheduler.__init__).parameters else {}
    sched = Scheduler(vllm_config=vcfg, kv_cache_config=kv_cfg,
                      structured_output_manager=StructuredOutputManager(vcfg), log_stats=True, **extra)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block, sha256) if prefix_caching else None
    proc = OutputProcessor(tokenizer, log_stats=True)
    rng = np.random.default_rng(0)
    vocab = len(tokenizer) if tokenizer is not None else 32000
    for i in range(b):
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, logprobs=0 if logprobs else None,
                            detokenize=detokenize, output_kind=kind)
        prompt = rng.integers(100, vocab - 1, prompt_len).tolist()
        fields = EngineCoreRequest.__struct_fields__
        kw = {"external_req_id": f"r{i}"} if "external_req_id" in fields else {}
        if "eos_token_id" in fields:  # vLLM <= 0.11
            kw["eos_token_id"] = 2
        ecr = EngineCoreRequest(request_id=f"r{i}", prompt_token_ids=prompt, mm_features=None, sampling_params=sp,
                                pooling_params=None, arrival_time=time.time(), lora_request=None,
                                cache_salt=None, data_parallel_rank=None, **kw)
        proc.add_request(ecr, prompt=None)
        sched.add_request(Request.from_engine_core_request(ecr, hasher))
    return sched, proc, rng, vocab


def _runner_output(sched_out, rng, vocab, logprobs: bool):
    from vllm.v1.outputs import LogprobsLists, ModelRunnerOutput
    ids = list(sched_out.num_scheduled_tokens.keys())
    tok = rng.integers(100, vocab - 1, len(ids))
    lp = None
    if logprobs:  # what the model runner hands over: LogprobsTensors.tolists() (numpy arrays from vLLM 0.12 on,
        # Python lists before: the NamedTuple's annotations say which)
        lp = (tok.reshape(-1, 1).astype(np.int32), -rng.random((len(ids), 1), dtype=np.float32),
              np.zeros(len(ids), dtype=np.int32))
        if "list" in str(LogprobsLists.__annotations__["sampled_token_ranks"]):
            lp = tuple(a.tolist() for a in lp)
        lp = LogprobsLists(*lp)
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=[[int(t)] for t in tok], logprobs=lp, prompt_logprobs_dict={},
                             pooler_output=[])


def measure(model: str, b: int, steps: int, prefix_caching=True, logprobs=False, detokenize=True, kind="FINAL_ONLY",
            prompt_len=128, tokenizer=None) -> dict[str, float]:
    """Median ms per decode step of each host stage for b running requests."""
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
    from vllm.v1.engine import EngineCoreOutputs
    warm = 8
    sched, proc, rng, vocab = _setup(model, b, prompt_len, warm + steps + 4, prefix_caching, logprobs, detokenize,
                                     RequestOutputKind[kind], tokenizer)
    enc, dec = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
    # prefill step
    so = sched.schedule()
    outs = sched.update_from_output(so, _runner_output(so, rng, vocab, logprobs))
    proc.process_outputs(outs[0].outputs)
    t = {"schedule": [], "update_from_output": [], "msgpack": [], "process_outputs": []}
    for i in range(warm + steps):
        t0 = time.perf_counter()
        so = sched.schedule()
        t1 = time.perf_counter()
        mro = _runner_output(so, rng, vocab, logprobs)
        t2 = time.perf_counter()
        outs = sched.update_from_output(so, mro)
        t3 = time.perf_counter()
        eco = dec.decode(enc.encode(outs[0]))
        t4 = time.perf_counter()
        proc.process_outputs(eco.outputs)
        t5 = time.perf_counter()
        if len(so.num_scheduled_tokens) != b:
            raise RuntimeError(f"{len(so.num_scheduled_tokens)} scheduled, expected {b}")
        if i >= warm:
            for k, dt in (("schedule", t1 - t0), ("update_from_output", t3 - t2), ("msgpack", t4 - t3),
                          ("process_outputs", t5 - t4)):
                t[k].append(dt * 1e3)
    return {k: statistics.median(v) for k, v in t.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="directory with config.json and tokenizer.json")
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--calibrate", action="store_true")
    a = ap.parse_args()
    import vllm
    try:
        from vllm.tokenizers import get_tokenizer
    except ImportError:  # vLLM <= 0.11
        from vllm.transformers_utils.tokenizer import get_tokenizer
    try:
        tok = get_tokenizer(a.model)
    except AttributeError:  # an older vLLM's tokenizer cache wrapper on transformers 5: the tokenizer unwrapped
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(a.model)
    print(f"vllm {vllm.__version__}; tokenizer {type(tok).__name__} vocab {len(tok)}")
    if a.calibrate:
        r = measure(a.model, 256, max(a.steps, 100), prefix_caching=False, logprobs=False, tokenizer=tok, prompt_len=32)
        ms = r["update_from_output"]
        print(f"calibration: update_from_output b=256 (prefix caching off, no logprobs) {ms:.3f} ms here vs "
              f"{PR46112_UPDATE_MS_B256} ms in PR #46112: host ratio {ms / PR46112_UPDATE_MS_B256:.2f}")
    configs = [("FINAL_ONLY detok logprobs=None (LLM.generate, verl/OpenRLHF)", dict(kind="FINAL_ONLY")),
               ("FINAL_ONLY detok logprobs=0 (NeMo-RL)", dict(kind="FINAL_ONLY", logprobs=True)),
               ("FINAL_ONLY no-detok logprobs=None", dict(kind="FINAL_ONLY", detokenize=False)),
               ("CUMULATIVE detok logprobs=None (AsyncLLM default)", dict(kind="CUMULATIVE")),
               ("CUMULATIVE detok logprobs=0", dict(kind="CUMULATIVE", logprobs=True))]
    for name, kw in configs:
        rows = [measure(a.model, b, a.steps, tokenizer=tok, **kw) for b in a.batches]
        print(f"\n{name}")
        print(f"{'batch':>6} " + " ".join(f"{k:>19}" for k in rows[0]) + "   (median ms per step)")
        for b, r in zip(a.batches, rows):
            print(f"{b:>6} " + " ".join(f"{v:>19.3f}" for v in r.values()))
        slopes = {k: per_seq_us(a.batches, [r[k] for r in rows]) for k in rows[0]}
        print("us/seq " + " ".join(f"{v:>19.2f}" for v in slopes.values()))
        core = slopes["schedule"] + slopes["update_from_output"]
        front = slopes["msgpack"] + slopes["process_outputs"]
        print(f"per sequence per step: engine core {core:.2f} us, frontend (msgpack + process_outputs) {front:.2f} us")


if __name__ == "__main__":
    main()
