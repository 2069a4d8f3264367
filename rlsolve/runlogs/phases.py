"""Which framework timer is which phase of the model (docs/model.md section 5).

Canonical phases, each a sum of the model's time terms (Plan.time_s):
  generation  prefill + decode + switch (the engine's sleep: verl and NeMo-RL time it inside
              their generation timer), + weight_sync where the framework refits inside it
  logprob     old_logprob + reference + reward (forward passes on the training GPUs)
  train       train (the policy update over every mini-batch and epoch)
  critic      value (PPO critic forward and update)
  refit       weight_sync (new weights into the engines; NeMo-RL's also wakes the engine)
  other       named framework timers the model has no term for (data preparation, reward
              scoring, advantages, ...); the profile's per-step overhead is fitted to them.

A timer in `EXCLUDED` (validation, checkpointing, profiling) is not part of a training
step's cost and is taken out of the step total; a nested timer (inside one counted already)
is ignored; any other name is reported as not placed."""
from __future__ import annotations

from dataclasses import dataclass, field

from rlsolve.runlogs.common import LogStep, RunLog

PHASES = ("generation", "logprob", "train", "critic", "refit", "other")


@dataclass(frozen=True)
class FrameworkTimers:
    step: str                                   # the step total's timer
    phase_of: dict[str, str]                    # timer -> canonical phase
    excluded: frozenset[str]                    # taken out of the step
    nested: tuple[str, ...] = ()                # prefixes of timers inside a counted one
    response_len: tuple[str, ...] = ()          # metric keys of the mean response length
    refit_in_generation_unless: str | None = None  # the refit timer; absent -> refit is inside generation
    other_prefixes: tuple[str, ...] = ()        # families of timers of the `other` phase (waits)


VERL = FrameworkTimers(
    step="step",
    # verl/trainer/ppo/ray_trainer.py marked_timer names ("ref" is str(Role.RefPolicy))
    phase_of={"gen": "generation", "gen_max": "generation", "old_log_prob": "logprob", "ref": "logprob",
              "values": "critic", "update_critic": "critic", "update_actor": "train", "update_weights": "refit",
              "reward": "other", "adv": "other"},
    excluded=frozenset({"testing", "save_checkpoint", "start_profile", "stop_profile", "dump_rollout_generations"}),
    # timers the rollout returns in meta_info["timing"] run inside `gen`
    nested=("generate_sequences", "generation_timing/", "agent_loop/", "gen_"),
    response_len=("response_length/mean",),
    # older verl loads new weights inside generate_sequences (the sharding manager's enter)
    refit_in_generation_unless="update_weights",
)

NEMO_RL = FrameworkTimers(
    step="total_step_time",
    phase_of={"generation": "generation", "exposed_generation": "generation",
              "policy_and_reference_logprobs": "logprob", "policy_training": "train",
              # the refit: "prepare_for_generation" in v0.2.1-v0.3.1 (v0.3.0 nemo_rl/algorithms/grpo.py line 542),
              # "prepare_for_generation/total" from v0.4.0 (v0.4.0 line 949), "weight_sync" in async GRPO
              "prepare_for_generation": "refit", "prepare_for_generation/total": "refit", "weight_sync": "refit",
              "data_processing": "other", "reward_calculation": "other", "advantage_calculation": "other",
              "logprob_inference_prep": "other", "training_prep": "other", "dynamic_sampling": "other",
              "buffer_sampling": "other", "offload_before_refit": "other", "recompute_kv_scales": "other"},
    excluded=frozenset({"checkpointing", "total_validation_time"}),
    nested=("prepare_for_generation/", "overlong_filter", "mask_sample_filter"),
    other_prefixes=("idle/",),  # async GRPO's waits (buffer starvation, refit bubble), timed on their own
    response_len=("mean_generation_length",),
)

OPENRLHF = FrameworkTimers(
    step="step_total",
    # make_experience runs the actor's old log-probs, the reference, reward and critic forwards
    phase_of={"generation": "generation", "make_experience": "logprob", "ppo_train": "train", "broadcast": "refit"},
    excluded=frozenset(),
    response_len=("rollout/response_length_mean",),
)

TIMERS = {"verl": VERL, "nemo-rl": NEMO_RL, "openrlhf": OPENRLHF}


@dataclass
class StepPhases:
    step: int
    total: float                               # the step less its excluded timers, s
    phases: dict[str, float]                   # canonical phase -> s (only those the log shows)
    response_len: float | None = None


@dataclass
class PhaseTable:
    framework: str
    steps: list[StepPhases]
    unplaced: dict[str, float] = field(default_factory=dict)   # timer -> mean s: no phase, not counted
    other_named: dict[str, float] = field(default_factory=dict)  # timer -> mean s of the `other` phase
    excluded: dict[str, float] = field(default_factory=dict)   # timer -> mean s taken out of the step
    refit_inside_generation: bool = False


def _phase(name: str, t: FrameworkTimers) -> str | None:
    if name in t.phase_of:
        return t.phase_of[name]
    return "other" if name.startswith(t.other_prefixes) else None


def _nested(name: str, t: FrameworkTimers) -> bool:
    return name not in t.phase_of and any(name.startswith(p) for p in t.nested)


def phase_table(run: RunLog) -> PhaseTable:
    t = TIMERS[run.framework]
    steps, unplaced, excluded, other = [], {}, {}, {}
    refit_inside = bool(t.refit_in_generation_unless) and not any(
        t.refit_in_generation_unless in s.timers for s in run.steps)
    for s in run.steps:
        total = s.timers.get(t.step)
        if total is None:
            continue
        phases: dict[str, float] = {}
        for name, v in s.timers.items():
            if name == t.step or _nested(name, t):
                continue
            if name in t.excluded:
                total -= v
                excluded[name] = excluded.get(name, 0.0) + v
            elif (phase := _phase(name, t)) is not None:
                if phase == "other":
                    other[name] = other.get(name, 0.0) + v
                phases[phase] = phases.get(phase, 0.0) + v
            else:
                unplaced[name] = unplaced.get(name, 0.0) + v
        rl = next((s.metrics[k] for k in t.response_len if k in s.metrics), None)
        steps.append(StepPhases(step=s.step, total=total, phases=phases, response_len=rl))
    n = max(1, len(steps))
    return PhaseTable(framework=run.framework, steps=steps, unplaced={k: v / n for k, v in unplaced.items()},
                      excluded={k: v / n for k, v in excluded.items()}, refit_inside_generation=refit_inside,
                      other_named={k: v / n for k, v in other.items()})


def averaged(framework: str, timers: dict[str, float], response_len: float | None = None) -> PhaseTable:
    """A table of one step from published per-phase means (a source that prints no log)."""
    run = RunLog(framework=framework, format="published-means", steps=[LogStep(0, dict(timers))])
    table = phase_table(run)
    table.steps[0].response_len = response_len
    return table
