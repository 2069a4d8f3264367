"""NeMo-RL's per-step console block (GRPO, sync and async):

    ========================= Step 3/100 =========================
    ...
      • Mean Generation Length: 795.1234
    ⏱️  Timing:
      • Total step time: 112.35s
      • generation: 58.01s (51.6%)
      • policy_training: 28.40s (25.3%)
      ...

Format: nemo_rl/algorithms/grpo.py (the "Step {n}/{total}" banner; "  • Total step time:
{total_time:.2f}s", then every other timer as "  • {k}: {v:.2f}s ({percent:.1f}%)", sorted by
time; timers from `timer.time(...)`: generation, policy_and_reference_logprobs,
policy_training, prepare_for_generation/total (refit, engine wake-up; plain prepare_for_generation in
v0.2.1-v0.3.1) and its nested prepare_for_generation/transfer_and_update_weights, data_processing, reward_calculation,
advantage_calculation, logprob_inference_prep, training_prep, checkpointing; async GRPO:
exposed_generation, weight_sync, buffer_sampling, idle/*). A published example of the block:
NVIDIA-NeMo/RL#1052.

A validation step runs validate() inside its total_step_time (v0.3.0 grpo.py lines 675-691 inside the
timer of line 525; v0.7.0 lines 2758-2787 inside line 2258, async_grpo_train lines 4011-4033 inside line
3658) and validate() prints its own "Validation Timing" block ("• Total validation time: {t:.2f}s",
v0.3.0 lines 913-915, v0.7.0 3270-3272) before the step's Timing block: it is read as the step's
timer total_validation_time, which the phase table takes out of the step (phases.py NEMO_RL.excluded).
The engine refit that precedes a validation is timed by nothing and stays in the step. A validation
before the first step (val_at_start) belongs to no step."""
from __future__ import annotations

import re

from rlsolve.runlogs.common import LogStep, clean, to_float

BANNER = re.compile(r"=+\s*Step\s+(\d+)\s*/\s*\d+\s*=+")
TOTAL = re.compile(r"•\s*Total step time:\s*([0-9.]+)s\s*$")
TIMER = re.compile(r"•\s*([A-Za-z_][\w/.\-]*):\s*([0-9.]+)s\s*\(\s*[0-9.]+%\)\s*$")
GEN_LEN = re.compile(r"•\s*Mean Generation Length:\s*([0-9.]+)")
VAL_TOTAL = re.compile(r"•\s*Total validation time:\s*([0-9.]+)s\s*$")


def looks_like(text: str) -> bool:
    return "Total step time:" in text and bool(TIMER.search(text))


def parse(text: str) -> list[LogStep]:
    steps: list[LogStep] = []
    current: int | None = None
    metrics: dict[str, float] = {}
    timers: dict[str, float] | None = None
    validation: float | None = None  # the current step's validation, printed before its Timing block
    counter = 0

    def close() -> None:
        if timers and "total_step_time" in timers:
            steps.append(LogStep(step=current if current is not None else counter, timers=dict(timers),
                                 metrics=dict(metrics)))

    for raw in text.splitlines():
        line = clean(raw)
        if "Validation Timing" in line:
            close()
            timers = None  # validation's own block is not a step's
            continue
        m = VAL_TOTAL.search(line)
        if m:
            if current is not None:  # inside a step: part of its total_step_time
                validation = to_float(m.group(1))
            continue
        m = BANNER.search(line)
        if m:
            close()
            current, metrics, timers, validation = int(m.group(1)), {}, None, None
            counter += 1
            continue
        m = GEN_LEN.search(line)
        if m and (v := to_float(m.group(1))) is not None:
            metrics["mean_generation_length"] = v
            continue
        m = TOTAL.search(line)
        if m:
            close()
            v = to_float(m.group(1))
            timers = {"total_step_time": v} if v is not None else None
            if timers is not None and validation is not None:
                timers["total_validation_time"] = validation
            validation = None
            continue
        if timers is not None:
            m = TIMER.search(line)
            if m and (v := to_float(m.group(2))) is not None:
                timers[m.group(1)] = v
    close()
    # a step printed twice (a block closed by the next banner) is kept once, the last one
    unique: dict[int, LogStep] = {s.step: s for s in steps}
    return [unique[k] for k in sorted(unique)]
