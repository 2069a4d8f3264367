"""The RL step's derived quantities, computed once from the spec.

`perf/` reads these (with the architectures and the device), never the spec itself, and the
solver, the exports and the reports read the same numbers, so a quantity such as "samples
per mini-batch" has one definition."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rlsolve.frameworks.runtime import FrameworkCosts, framework_costs


@dataclass(frozen=True)
class Workload:
    prompts: int              # prompts per step
    samples: int              # responses per step (prompts x samples_per_prompt)
    prompt_len: int           # tokens
    response_mean: float      # tokens, mean generated length
    response_max: int         # tokens, the length cap
    clip_ratio: float | None  # share of responses cut at the cap (None: the length distribution's own)
    mini_batches: int         # optimizer steps per epoch
    ppo_epochs: int
    max_staleness: int
    lora_rank: int            # 0: full fine-tuning
    precision: str            # bf16 | fp8
    headroom: float           # fraction of each GPU's memory kept free
    engine_share: float | None  # the engine's gpu_memory_utilization (None: what fits)
    framework: FrameworkCosts  # what the target framework adds to the physics (frameworks/runtime.yaml)
    packed_tokens: int | None = None  # training micro-batches packed to this many tokens (memory is sized
                                      # for it); None: micro-batches of max-length sequences
    packed_micro_batch: float | None = None  # sequences per packed training micro-batch (the batch over its
                                             # bins); None: the layout's micro_batch
    dynamic_round: int | None = None  # micro-batches are NeMo-RL's dynamic batches (sorted, padded to their
                                      # longest, rounded to this), not packed bins; None: packed or fixed
    engine_eager: bool = False        # the rollout engine runs without CUDA graphs (vLLM enforce_eager)
    engine_sync_output: bool = False  # ... and processes its outputs on the host between steps (vLLM V0)
    engine_version: str | None = None  # the rollout engine's (vLLM's) release, where known; None: the newest read
    engine_inproc_output: bool = False  # its output processor runs in the engine core's thread between steps
                                        # (vLLM's LLM class under VLLM_ENABLE_V1_MULTIPROCESSING=0)
    # the log-prob passes' own micro-batches (NeMo-RL logprob_batch_size, packed to logprob_mb_tokens;
    # verl log_prob_micro_batch_size_per_gpu): sequences per micro-batch and the token budget they are
    # packed to; None: the training micro-batches
    logprob_micro_batch: float | None = None
    logprob_packed_tokens: int | None = None
    # fixed-size micro-batches that carry only their sequences' own tokens (verl use_remove_padding:
    # flash-attn varlen on the unpadded tokens, verl/workers/actor/dp_actor.py _forward_micro_batch
    # unpad_input at v0.3.0.post1): memory is sized for mean-length sequences, not the cap
    unpadded: bool = False
    # the policy's behaviour log-prob forward runs before the update; False where the framework forces the
    # importance ratio to 1 and skips it (NeMo-RL loss_fn.force_on_policy_ratio without
    # grpo.seq_logprob_error_threshold: nemo_rl/algorithms/opd.py _skip_prev_logprobs and grpo.py grpo_train /
    # async_grpo_train 'Skipping prev_logprobs' at v0.7.0; the reference pass still runs)
    old_logprob_pass: bool = True

    @cached_property  # (read in the solver's hot loops: once per workload)
    def seq_mean(self) -> float:
        """Mean trained sequence: prompt plus mean response (times and throughput)."""
        return self.prompt_len + self.response_mean

    @cached_property
    def seq_max(self) -> int:
        """Longest sequence: prompt plus the response cap (memory is sized for it)."""
        return self.prompt_len + self.response_max

    @cached_property
    def global_batch(self) -> int:
        """Sequences per optimizer step (samples per mini-batch)."""
        return max(1, self.samples // self.mini_batches)

    @cached_property
    def optimizer_steps(self) -> int:
        return self.mini_batches * self.ppo_epochs

    @property
    def tokens_per_step(self) -> float:
        """Trained tokens per step (SPEC section 4)."""
        return self.samples * self.seq_mean

    @property
    def gen_bytes(self) -> float:
        """Rollout weights and KV cache: FP8 when the spec asks for fp8, else 16-bit."""
        return 1.0 if self.precision == "fp8" else 2.0


def workload_of(spec) -> Workload:
    rl, model, cons = spec.rl, spec.model, spec.constraints
    return Workload(prompts=rl.prompts_per_step, samples=rl.samples, prompt_len=rl.prompt_len,
                    response_mean=rl.response_len.mean_tokens, response_max=rl.response_len.max,
                    clip_ratio=rl.response_len.clip_ratio,
                    mini_batches=rl.mini_batches, ppo_epochs=rl.ppo_epochs, max_staleness=rl.max_staleness,
                    lora_rank=model.lora_rank, precision=model.precision, headroom=cons.min_headroom,
                    engine_share=cons.generation.get("gpu_memory_utilization"),
                    framework=framework_costs(spec.target.framework, samples=rl.samples))
