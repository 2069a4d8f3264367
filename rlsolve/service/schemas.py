"""Request and response bodies of the HTTP API. The spec and the plan are the file schemas
(`rlsolve.spec.Spec`, `rlsolve.plan.Plan`) unchanged; these models only wrap them."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsolve.export import TARGETS
from rlsolve.plan import Layout, Plan
from rlsolve.spec import InlineNetwork, Spec
from rlsolve.whatif import Row

ErrorCode = Literal["invalid_input", "infeasible", "unauthorized", "payload_too_large", "overloaded",
                    "deadline_exceeded", "not_found", "method_not_allowed", "unsupported_media_type", "bad_request",
                    "internal"]


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="Where the problem is: 'body', 'query', then the path in the body.")
    field: str = Field(description="The same path, dotted and relative to the body (or the query parameter).")
    msg: str = Field(description="What is wrong, and the fix where one is known.")
    type: str = Field(description="Error kind: pydantic's type, or 'spec_error' for catalog and layout checks.")


class ErrorResponse(BaseModel):
    """Every non-2xx answer has this shape."""

    error: ErrorCode = Field(description="Machine-readable error kind.")
    message: str = Field(description="One line for a person.")
    detail: list[FieldError] = Field(default_factory=list, description="422: every invalid field.")
    reasons: list[str] = Field(default_factory=list, description="409: why no layout fits, in numbers.")
    retry_after_s: int | None = Field(None, description="503: seconds to wait (also the Retry-After header).")
    request_id: str | None = Field(None, description="The X-Request-ID of the request (logged with it).")


class LayoutInput(Layout):
    """The layout sections of a plan (pipeline, resource_allocation, placement, parallelism,
    optimization). A whole plan is accepted: its other keys are ignored."""

    model_config = ConfigDict(extra="ignore", title="LayoutInput")


class EstimateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: Spec = Field(description="The cluster and workload (the cluster.yaml schema).")
    layout: LayoutInput = Field(description="The layout to score: a plan, or its layout sections.")


class ExplainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: Spec = Field(description="The cluster and workload (the cluster.yaml schema).")
    layout: LayoutInput | None = Field(None, description="Optional: your layout, compared with the optimum term "
                                       "by term.")


class Difference(BaseModel):
    term: str = Field(description="Plan field, e.g. time_s.decode.")
    unit: str
    plan: float | None = Field(description="The optimal plan's value.")
    layout: float | None = Field(description="Your layout's value.")
    delta: float | None = Field(description="layout - plan.")
    significant: bool = Field(description="Differs by more than 0.5 % (of the step time for time terms).")


class ExplainResponse(BaseModel):
    plan: Plan = Field(description="The optimal plan (as /v1/solve returns it).")
    explanation: list[str] = Field(description="Why it wins: binding constraints, bottleneck phase.")
    layout: Plan | None = Field(None, description="Your layout scored by the model (as /v1/estimate returns it).")
    layout_fits: bool | None = Field(None, description="null without a layout; false when it does not fit memory.")
    layout_reasons: list[str] = Field(default_factory=list, description="Why your layout does not fit.")
    differences: list[Difference] = Field(default_factory=list, description="Term by term, your layout minus the "
                                          "optimum.")
    summary: str


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: Spec = Field(description="The base spec; each point replaces its GPU, node count and network.")
    gpus: list[str] | None = Field(None, min_length=1, max_length=16, description="GPU catalog names to try.")
    nodes: list[int] | None = Field(None, min_length=1, max_length=16, description="Node counts to try.")
    networks: list[str | InlineNetwork] | None = Field(None, min_length=1, max_length=8,
                                                       description="Networks to try: catalog names or {gbps: N}.")
    objective: Literal["throughput", "cost"] | None = Field(None, description="Overrides the spec's objective.")


class CompareResponse(BaseModel):
    result: list[Row] = Field(description="One row per cluster, in the order gpus x nodes x networks: what "
                              "`rlsolve compare --format json` prints (degrees as numbers; an infinite cost as null).")


ExportTarget = Literal[tuple(TARGETS)]  # type: ignore[valid-type]


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: Spec = Field(description="The spec the plan was solved for.")
    plan: LayoutInput | None = Field(None, description="The plan to export (as /v1/solve returns it, or just its "
                                     "layout sections); omitted: solve the spec first.")
    target: ExportTarget = Field(description="Framework to export to (see `rlsolve export --help`).")


class ExportResponse(BaseModel):
    target: str
    content: str = Field(description="The exported file or launch command.")
    filename: str | None = Field(None, description="Suggested file name.")
    framework: str | None = Field(None, description="Framework and version the output targets.")
    warnings: list[str] = Field(default_factory=list, description="Plan decisions the framework cannot express "
                                "(also written as comments in `content`).")
    plan: Plan | None = Field(None, description="The plan that was solved and exported, when the request had none.")


class GPUList(BaseModel):
    gpus: list[dict[str, Any]] = Field(description="GPU catalog entries with their sources (see `rlsolve gpus`).")
    networks: list[dict[str, Any]] = Field(description="Network catalog entries.")


class ModelList(BaseModel):
    models: list[dict[str, Any]] = Field(description="Architecture catalog entries, with total and active "
                                         "parameters in billions and KV-cache KiB per token (bf16).")


class Health(BaseModel):
    status: Literal["ok", "starting", "stopping"]
    version: str
    pool: dict[str, Any]
