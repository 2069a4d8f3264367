"""The input schema: the cluster.yaml a user writes (SPEC section 3).

Every field has a description: it feeds `--help`, `rlsolve schema` and the docs. Names of
GPUs, networks and models are resolved against the catalogs by `load_spec`, which raises
`SpecError` naming the field and the fix.
"""
from __future__ import annotations

import math
import os
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlsolve.errors import SpecError
from rlsolve.frameworks import capabilities
from rlsolve.frameworks.rules import algorithm_ok
from rlsolve.linear import parse_linear
from rlsolve.reader import read_yaml  # noqa: F401  (the one reader; re-exported for callers)
from rlsolve.resolve import resolve


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InlineNetwork(_Strict):
    gbps: float = Field(ge=0.1, le=100_000, description="Per-GPU NIC line rate in Gbit/s (0.1 to 100,000).")
    latency_us: float | None = Field(None, ge=0.01, le=1_000_000, description="One-way latency; default as IB-NDR-400.")


class Pool(_Strict):
    """One homogeneous group of nodes."""

    name: str = Field("main", description="Pool name (used by heterogeneous clusters).")
    gpu: str = Field(description="GPU catalog name (see `rlsolve gpus`), e.g. H100-SXM-80GB.")
    nodes: int = Field(gt=0, le=100_000, description="Number of nodes.")
    gpus_per_node: int | None = Field(None, gt=0, le=1024, description="GPUs per node; default: the GPU's usual server size.")
    network: Union[str, InlineNetwork] = Field("IB-NDR-400", description="Inter-node fabric per GPU: a catalog "
                                               "name (IB-NDR-400, ...) or {gbps: 400}.")
    nics_per_node: int | None = Field(None, gt=0, le=1024, description="NICs per node; default one per GPU.")
    price_per_gpu_hour_usd: float | None = Field(None, gt=0, le=1_000_000, description="Override the catalog price.")


class Cluster(_Strict):
    gpu: str | None = Field(None, description="GPU catalog name for a single-pool cluster.")
    nodes: int | None = Field(None, gt=0, le=100_000, description="Nodes in a single-pool cluster.")
    gpus_per_node: int | None = Field(None, gt=0, le=1024, description="GPUs per node; default: the GPU's usual server size.")
    network: Union[str, InlineNetwork] = Field("IB-NDR-400", description="Inter-node fabric per GPU (catalog name or {gbps: N}).")
    nics_per_node: int | None = Field(None, gt=0, le=1024, description="NICs per node; default one per GPU.")
    price_per_gpu_hour_usd: float | None = Field(None, gt=0, le=1_000_000, description="Override the catalog price "
                                                 "per GPU-hour (the same bound as a pool's).")
    pools: list[Pool] | None = Field(None, description="Heterogeneous cluster: one entry per pool "
                                     "(instead of gpu/nodes at this level).")

    @model_validator(mode="after")
    def _one_form(self) -> "Cluster":
        if self.pools:
            if self.gpu or self.nodes:
                raise ValueError("give either gpu/nodes or pools, not both")
            names = [p.name for p in self.pools]
            if len(set(names)) != len(names):
                raise ValueError(f"pool names must be unique, got {names}")
        elif not (self.gpu and self.nodes):
            raise ValueError("give gpu and nodes (or a list of pools)")
        return self

    def pool_list(self) -> list[Pool]:
        if self.pools:
            return list(self.pools)
        return [Pool(name="main", gpu=self.gpu, nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                     network=self.network, nics_per_node=self.nics_per_node,
                     price_per_gpu_hour_usd=self.price_per_gpu_hour_usd)]


ModelRef = Union[str, dict[str, Any], None]


class ModelSpec(_Strict):
    policy: Union[str, dict[str, Any]] = Field(description="Policy model: catalog name, HF id, inline "
                                               "architecture {layers, hidden, heads, ...} or {params_b: N}.")
    reference: ModelRef = Field("policy", description="Reference model for the KL term: policy | catalog name | "
                                "inline | null (no KL term).")
    reward: ModelRef = Field("rule", description="rule (CPU verifier) | policy | catalog name | inline (a reward model).")
    value: ModelRef = Field(None, description="PPO critic: policy | catalog name | inline | null (GRPO).")
    lora_rank: int = Field(0, ge=0, le=65536, description="LoRA rank for the policy (0: full fine-tuning). Only adapters "
                           "train and sync.")
    precision: Literal["bf16", "fp8"] = Field("bf16", description="Training/generation GEMM precision.")


class ResponseLen(_Strict):
    max: int = Field(gt=0, le=10_000_000, description="Maximum response tokens (the generation cap).")
    mean: int | None = Field(None, gt=0, le=10_000_000, description="Mean response tokens; default = max (every response that long).")
    clip_ratio: float | None = Field(None, ge=0, le=1, description="Share of responses cut at max (verl logs it as "
                                     "response_length/clip_ratio); default: what an exponential length "
                                     "distribution with this mean puts at max.")

    @model_validator(mode="after")
    def _mean_le_max(self) -> "ResponseLen":
        if self.mean is not None and self.mean > self.max:
            raise ValueError(f"mean ({self.mean}) cannot exceed max ({self.max})")
        if self.clip_ratio is not None and self.clip_ratio * self.max > self.mean_tokens + 1e-9:
            raise ValueError(f"clip_ratio {self.clip_ratio} puts {self.clip_ratio * self.max:.0f} tokens per response at "
                             f"max alone, more than the mean {self.mean_tokens}; lower clip_ratio or raise mean")
        return self

    @property
    def mean_tokens(self) -> int:
        return self.mean or self.max


class RL(_Strict):
    algorithm: Literal["grpo", "ppo"] = Field("grpo", description="grpo (no critic) | ppo (critic, GAE).")
    prompts_per_step: int = Field(gt=0, le=10_000_000, description="Prompts sampled per RL step.")
    samples_per_prompt: int = Field(1, gt=0, le=100_000, description="Responses per prompt (GRPO group size).")
    prompt_len: int = Field(gt=0, le=10_000_000, description="Prompt tokens.")
    response_len: ResponseLen = Field(description="Response tokens: {max, mean} or one number.")
    ppo_epochs: int = Field(1, gt=0, le=1000, description="Passes over the batch per step.")
    mini_batches: int = Field(1, gt=0, le=1_000_000, description="Optimizer steps per RL step (per epoch).")
    max_staleness: int = Field(1, ge=0, le=1000, description="How many steps generation may run ahead; 0 = strictly on-policy "
                               "(forbids async overlap).")

    @field_validator("response_len", mode="before")
    @classmethod
    def _one_number(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not math.isfinite(v):
                raise ValueError("must be a finite number of tokens")
            return {"max": v}
        return v

    @property
    def samples(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def tokens_per_step(self) -> int:
        """Trained tokens per step (SPEC section 4)."""
        return self.samples * (self.prompt_len + self.response_len.mean_tokens)


Mode = Literal["colocated", "sync", "async"]


def _pos_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1_000_000


def _zero(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 3


def _recompute(x: Any) -> bool:
    return x in ("none", "selective", "full")


def _fraction(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.05 <= x <= 1


_HINTS = {_pos_int: "a positive integer", _zero: "a ZeRO stage 0-3", _recompute: "none, selective or full",
          _fraction: "a fraction of GPU memory from 0.05 to 1"}
# settings that take one value, not a list of allowed ones
SCALAR_CONSTRAINTS = ("max_gpus", "gpu_memory_utilization")
ROLE_CONSTRAINTS = {
    "generation": {**{k: _pos_int for k in ("tp", "pp", "dp", "ep", "gpus", "max_gpus")},
                   "gpu_memory_utilization": _fraction},
    "training": {**{k: _pos_int for k in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "gpus", "max_gpus")},
                 "zero_stage": _zero, "recompute": _recompute},
}


class Constraints(_Strict):
    modes: list[Mode] | None = Field(None, description="Pipeline modes allowed (default all).")
    min_headroom: float = Field(0.05, ge=0, lt=0.9, description="Fraction of each GPU's memory kept free.")
    generation: dict[str, Any] = Field(default_factory=dict, description="Fixed or allowed generation degrees, "
                                       "e.g. {tp: 4} or {tp: [2, 4]}; also max_gpus, and gpu_memory_utilization "
                                       "(the engine's share of GPU memory, as vLLM's flag; default: what fits).")
    training: dict[str, Any] = Field(default_factory=dict, description="Fixed or allowed training settings, "
                                     "e.g. {tp: [4, 8], zero_stage: 1}; also max_gpus.")
    max_price_per_hour_usd: float | None = Field(None, gt=0, le=1e12, description="Budget for the GPUs used, $/hour.")
    linear: list[str] = Field(default_factory=list, max_length=64, description="Linear constraints over the plan's "
                              "integer decisions, e.g. 'generation.gpus >= 2 * training.gpus' or 'training.tp <= 4'; "
                              "variables: generation.{gpus,tp,pp,dp,ep}, training.{gpus,tp,pp,dp,cp,ep,vp,zero_stage,"
                              "micro_batch}, gpus (all used).")

    @field_validator("linear")
    @classmethod
    def _linear(cls, v: list[str]) -> list[str]:
        for text in v:
            parse_linear(text)  # ValueError names the term and the fix
        return v

    @field_validator("generation", "training")
    @classmethod
    def _role(cls, v: dict[str, Any], info) -> dict[str, Any]:
        """Each key a known setting, each value one allowed value or a list of them."""
        kinds = ROLE_CONSTRAINTS[info.field_name]
        out: dict[str, Any] = {}
        for key, val in v.items():
            if key not in kinds:
                raise ValueError(f"unknown key {key!r}; allowed: {', '.join(sorted(kinds))}")
            check = kinds[key]
            scalar = key in SCALAR_CONSTRAINTS
            vals = val if isinstance(val, list) and not scalar else [val]
            if not vals or not all(check(x) for x in vals):
                raise ValueError(f"{key}: {val!r} is not {_HINTS[check]}" + ("" if scalar else " (or a list of them)"))
            out[key] = val
        return out


class SolverOptions(_Strict):
    time_limit_s: float = Field(10.0, gt=0, le=86_400, allow_inf_nan=False, description="CP-SAT wall-clock limit per solve; the best "
                                "plan found by then comes back with status feasible and its gap.")
    workers: int = Field(2, ge=1, le=256, description="CP-SAT search workers.")
    deterministic: bool = Field(True, description="Fixed seed and worker count; byte-identical plans across runs.")
    top_k: int = Field(3, ge=0, le=50, description="Runner-up plans to report, with why they lost.")


class Target(_Strict):
    """The RL framework the plan must run on (its capabilities: rlsolve/frameworks/capabilities.yaml)."""

    framework: Literal["any", "verl", "openrlhf", "nemo-rl"] = Field(
        "any", description="verl | openrlhf | nemo-rl: only layouts, placements and modes that framework runs; "
        "any: unrestricted (the CLI's --framework overrides).")
    version: str | None = Field(None, description="The framework release the catalog describes (e.g. 0.9.1); "
                                "default: the catalog's.")


class Spec(_Strict):
    """The whole input file."""

    cluster: Cluster = Field(description="The hardware.")
    model: ModelSpec = Field(description="Policy, reference, reward and value models.")
    rl: RL = Field(description="The RL workload per step.")
    objective: Literal["throughput", "cost"] = Field("throughput", description="throughput | cost; the CLI flag overrides.")
    constraints: Constraints = Field(default_factory=Constraints, description="Optional user restrictions.")
    solver: SolverOptions = Field(default_factory=SolverOptions, description="Solver settings.")
    target: Target = Field(default_factory=Target, description="The framework that will run the plan.")


# --- loading ------------------------------------------------------------------------------

def _fix_hint(err: dict) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add it"
    if kind == "extra_forbidden":
        return "remove it or check the spelling (see `rlsolve schema`)"
    if kind in ("greater_than", "greater_than_equal"):
        bound = next(iter(err.get("ctx", {}).values()), None)
        return "use a positive number" if bound == 0 else err["msg"]
    return err.get("msg", "fix the value")


# branch tags pydantic puts in an error's location when a field is a union (a name or a mapping)
_UNION_TAGS = {"str", "InlineNetwork", "dict[str,any]", "Architecture"}
_MISMATCH = {"string_type", "model_type", "dict_type", "model_attributes_type"}


def clean_loc(loc) -> list:
    """An error location without validator and union-branch tags: cluster.network.gbps, not
    cluster.network.InlineNetwork.gbps."""
    return [p for p in loc if not str(p).startswith("function-") and str(p) not in _UNION_TAGS]


def order_errors(errors: list[dict]) -> list[dict]:
    """With a union, the branch the user meant first: a bad number inside {gbps: ...}, not
    'not a string' from the name branch."""
    return sorted(errors, key=lambda e: e.get("type") in _MISMATCH)


def format_validation_error(exc: ValidationError, prefix: str = "") -> SpecError:
    """Turn pydantic's report into one SpecError naming the first bad field and the fix."""
    errors = order_errors(exc.errors())
    err = errors[0]
    loc = ".".join(str(p) for p in clean_loc(err["loc"]))
    field = f"{prefix}{loc}" if loc else prefix.rstrip(".") or None
    msg = err["msg"]
    hint = _fix_hint(err)
    text = msg if hint == msg else f"{msg}; {hint}"
    if err.get("type") == "extra_forbidden":
        text = f"unknown field; {hint}"
    return SpecError(text, field=field)


def load_spec(source: "str | os.PathLike | dict | Spec") -> Spec:
    """Read and validate a spec from a path, a dict or a Spec; resolve catalog names.

    Raises SpecError (naming the field and the fix) on any invalid input."""
    if isinstance(source, Spec):
        spec = source
    else:
        data = read_yaml(source) if not isinstance(source, dict) else source
        try:
            # strict, as the service: true is not 1, "8" is not 8, 2.5 is not an integer
            spec = Spec.model_validate(data, strict=True)
        except ValidationError as e:
            raise format_validation_error(e) from None
    resolve(spec)  # raises SpecError on unknown names
    check_target(spec)
    return spec


def check_target(spec: Spec) -> None:
    """The target framework exists in the catalog and runs this job at all (its algorithm); the solver's
    rules restrict the layouts (e.g. every role on one pool where the target runs no heterogeneous pools:
    solver.rules.one_pool)."""
    caps = capabilities(spec.target.framework, spec.target.version)
    name = spec.target.framework
    verdict = algorithm_ok(caps, spec.rl.algorithm)
    if not verdict:
        raise SpecError(f"target {name} cannot run this: {verdict.reason}; change rl.algorithm or target.framework",
                        field="rl.algorithm")
    if caps is None:
        return
    for model, ref in (("reward", spec.model.reward), ("reference", spec.model.reference)):
        if ref in (None, "rule"):
            continue
        where = {p for m in caps.modes.value for p in getattr(caps.placements[m].value, model)} - {"cpu", "none"}
        if model not in caps.auxiliary_models.value:  # a group of its own (in any pool) is planned where listed
            where.discard("auxiliary")
        if not where:
            src = caps.auxiliary_models.source
            raise SpecError(f"target {name} runs no {model} model that rlsolve can plan (source: {src}); change "
                            f"model.{model} or target.framework", field=f"model.{model}")
