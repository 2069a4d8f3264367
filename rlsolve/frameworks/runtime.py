"""Load runtime.yaml: how each framework runs a step where its config leaves a choice open (the
defaults `rlsolve cases` uses to rebuild a published run's layout). Pydantic, extra="forbid"."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsolve.reader import parse_yaml

Strategy = Literal["megatron", "fsdp", "fsdp2", "deepspeed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sourced(_Strict):
    source: str = Field(min_length=10, description="Where the fact is read: the release and its file.")


class _Str(_Sourced):
    value: str


class _Int(_Sourced):
    value: int


class _OptInt(_Sourced):
    value: int | None


class _Bool(_Sourced):
    value: bool


class _Float(_Sourced):
    value: float


class FrameworkRuntime(_Strict):
    train_strategy: _Str
    micro_batch: _Int
    sequence_packing: _Bool
    reference: _Str
    train_offload_during_rollout: _Bool
    gpu_memory_utilization: _Float
    max_num_seqs: _OptInt
    orchestration_s_per_step: _Float
    rollout_logprobs: _Bool


class _ZeroByStrategy(_Sourced):
    value: dict[Strategy, int]


class _EngineCap(_Sourced):
    value: dict[Literal["large", "small"], int]


class Runtime(_Strict):
    frameworks: dict[Literal["verl", "openrlhf", "nemo-rl"], FrameworkRuntime]
    zero_stage_by_strategy: _ZeroByStrategy
    engine_max_num_seqs: _EngineCap


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    text = resources.files("rlsolve.frameworks").joinpath("runtime.yaml").read_text()
    return Runtime.model_validate(parse_yaml(text, what="rlsolve/frameworks/runtime.yaml"))


@dataclass(frozen=True)
class FrameworkCosts:
    """What a target framework adds to every step the physics does not: its own orchestration
    and the engine's log-prob returns."""

    orchestration_s: float
    rollout_logprobs: bool


def framework_costs(framework: str) -> FrameworkCosts:
    """The target's costs; `any` (no framework chosen) takes the cheapest framework's, so a plan
    for any framework is never charged for one it may not run on."""
    fws = runtime().frameworks
    chosen = list(fws.values()) if framework not in fws else [fws[framework]]
    return FrameworkCosts(orchestration_s=min(f.orchestration_s_per_step.value for f in chosen),
                          rollout_logprobs=all(f.rollout_logprobs.value for f in chosen))
