"""Load and validate capabilities.yaml (pydantic, extra="forbid": a misspelt key fails loudly)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsolve.errors import SpecError
from rlsolve.reader import parse_yaml

FRAMEWORKS = ("verl", "openrlhf", "nemo-rl")
Mode = Literal["colocated", "sync", "async"]
Placement = Literal["training", "generation", "cpu_offload", "auxiliary", "cpu", "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sourced(_Strict):
    source: str = Field(min_length=10, description="Where the fact is read: the release and its file.")


class PlacementSet(_Strict):
    reference: list[Placement]
    reward: list[Placement]
    value: list[Placement]


class Placements(_Sourced):
    value: PlacementSet


class Engine(_Strict):
    tp: bool
    pp: bool
    ep: Literal["none", "tp_x_dp", "multiple_of_tp"] = Field(description="none: no expert parallelism; tp_x_dp: "
                                                             "EP = TP x replicas per server; multiple_of_tp: any "
                                                             "multiple of TP (vLLM EP = DP x TP)")
    max_num_seqs: bool = Field(description="The engine's concurrent-sequence cap can be set.")
    pp_needs_async_engine: bool = Field(False, description="pp > 1 runs only on the async engine, which refuses "
                                        "data parallelism inside vLLM (ep other than tp).")


class Engines(_Sourced):
    value: dict[Literal["vllm", "sglang"], Engine]


class Strategy(_Strict):
    tp: bool
    pp: bool
    cp: bool
    ep: bool
    vp: bool
    zero_stages: list[int]
    recompute: list[Literal["none", "selective", "full"]]


class Training(_Sourced):
    value: dict[Literal["fsdp", "megatron", "deepspeed"], Strategy]


class CriticTraining(Training):
    own_engine: bool = Field(description="The critic's training backend is chosen apart from the policy's (each "
                             "may run on a strategy the other does not use).")


class Modes(_Sourced):
    value: list[Mode]


class Quant(_Sourced):
    value: list[Literal["none", "int8", "int4"]]


class Flag(_Sourced):
    value: bool


class Text(_Sourced):
    value: str


class AuxModels(_Sourced):
    value: list[Literal["reference", "reward"]]
    max_models: int = Field(2, ge=1, le=2, description="Models one auxiliary group may host together.")


class Algorithms(_Sourced):
    value: list[Literal["grpo", "ppo"]]


class ShapeSet(_Strict):
    per_model_placement: bool = Field(description="Each model (actor, critic, reference, reward) on its own group.")
    critic_own_layout: bool = Field(description="The critic's parallel degrees differ from the actor's.")
    auxiliary_own_layout: bool = Field(description="An auxiliary group (reference/reward on GPUs of their own) "
                                       "picks its own tensor-parallel degree; false: the actor's tp and cp "
                                       "(GPUs per replica), its GPU count a multiple of tp x cp.")
    multi_pool_generation: bool = Field(description="Rollout engines on several pools at once.")
    rollout_ep: bool = Field(description="Expert parallelism in the rollout engine.")


class Shapes(_Sourced):
    value: ShapeSet


class FrameworkCaps(_Strict):
    release: str = Field(description="The PyPI release (or git tag) the entries were read from.")
    series: str
    modes: Modes
    placements: dict[Mode, Placements]
    engines: Engines
    training: Training
    reward_quantization: Quant
    reference_offload: Flag
    train_offload_during_rollout: Flag
    auxiliary_models: AuxModels
    heterogeneous_pools: Flag
    refit: Text
    critic_group_concurrent: Flag = Field(description="A critic on GPUs of its own (placements value: "
                                          "auxiliary) trains while the actor trains, so the training term is the "
                                          "longer of the two; false: one after the other.")
    critic_training: CriticTraining | None = Field(None, description="The strategies that train the critic (PPO's "
                                             "value model) with its degrees, where they differ from the "
                                             "policy's (`training`); absent: the policy's.")
    lora: Flag
    algorithms: Algorithms
    shapes: Shapes


class Catalog(_Strict):
    frameworks: dict[Literal["verl", "openrlhf", "nemo-rl"], FrameworkCaps]


@lru_cache(maxsize=1)
def _catalog() -> Catalog:
    data = parse_yaml(Path(__file__).with_name("capabilities.yaml").read_text(encoding="utf-8"), "capabilities.yaml",
                      "framework catalog")
    return Catalog.model_validate(data)


def capabilities(framework: str, version: str | None = None) -> FrameworkCaps | None:
    """The capabilities of `framework` (None for `any`). `version`, when given, must be the release
    the catalog describes (or its series): a plan for another release would be checked against
    facts read from a different one."""
    if framework == "any":
        return None
    caps = _catalog().frameworks.get(framework)
    if caps is None:
        raise SpecError(f"unknown framework {framework!r}; use one of any, {', '.join(FRAMEWORKS)}",
                        field="target.framework")
    if version is not None and version not in (caps.release, caps.series):
        raise SpecError(f"{framework} {version} is not in the capability catalog; use {caps.release} "
                        f"(or omit target.version)", field="target.version")
    return caps
