"""The routes, one APIRouter per group, each a thin call into the Python API through the
worker pool (plans, what-if) or straight to the catalogs. Auth and the query check are
router dependencies; the body is a `json_body(Model)` dependency (one read, one parse).

    plans     POST /v1/solve, /v1/estimate, /v1/explain, /v1/export
    what-if   POST /v1/compare
    catalogs  GET  /v1/gpus, /v1/models
    service   GET  /healthz
"""
from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

import rlsolve
from rlsolve.present import gpu_rows, model_rows, network_rows
from rlsolve.service import examples as ex
from rlsolve.service import jsonlog
from rlsolve.service.config import ServiceConfig
from rlsolve.service.deps import config, json_body, known_query_only, pool, require_token
from rlsolve.service.errors import ApiError, JSONBody
from rlsolve.service.limits import check_numbers, check_size
from rlsolve.service.pool import DeadlineExceeded, Overloaded, SolverPool, WorkerLost
from rlsolve.service.schemas import (CompareRequest, CompareResponse, ErrorResponse, EstimateRequest, ExplainRequest,
                                     ExplainResponse, ExportRequest, ExportResponse, GPUList, Health, ModelList)
from rlsolve.service.worker import precheck
from rlsolve.plan import Plan
from rlsolve.spec import Spec


def _err(description: str, headers: dict | None = None) -> dict:
    return {"model": ErrorResponse, "description": description, **({"headers": headers} if headers else {})}


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}
WWW_AUTH = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
R_AUTH = {401: _err("Missing or wrong bearer token (only when the server has a token).", WWW_AUTH)}
R_BODY = {413: _err("Body larger than the limit (1 MiB by default)."),
          415: _err("The body is not JSON (send Content-Type: application/json)."),
          422: _err("Invalid input: `detail` names every bad field (`field`, dotted, relative to the body) and "
                    "the fix. Also numbers outside the service's envelope (non-finite, |x| < 1e-9 or > 1e15, "
                    "integers over 10^9) and clusters over the server's GPU limit.")}
R_WORK = {409: _err("Infeasible: no layout satisfies the constraints; `reasons` says why, in numbers."),
          503: _err("Overloaded: every worker is busy and the queue is full, or no worker became free in "
                    "time. Retry after Retry-After seconds.", RETRY_AFTER),
          504: _err("No answer in time: the search ran out of its CP-SAT time limit without a plan or a proof "
                    "(status unknown, not infeasible), or the work overran its wall-clock budget and its worker "
                    "was stopped. The message names the limit; raise time_limit_s or shrink the problem.")}

# Request bodies are parsed by json_body(), not by FastAPI, so the OpenAPI document gets them
# here; app.py adds the models' schemas to the document's components.
REQUEST_MODELS = (Spec, EstimateRequest, ExplainRequest, CompareRequest, ExportRequest)


def body_doc(model: type, examples: dict, description: str | None = None) -> dict:
    content = {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}, "examples": examples}
    return {"requestBody": {"required": True, "content": {"application/json": content},
                            **({"description": description} if description else {})}}


TIME_LIMIT = Query(None, gt=0, description="CP-SAT time limit in seconds (default: the body's solver.time_limit_s "
                   "if set, else the server's --time-limit; at most its --max-time-limit).")
OBJECTIVE = Query(None, description="Overrides the spec's objective (as the CLI flag does).")

# SpecError fields named after CLI flags (rlsolve.whatif, rlsolve.export) -> the body's field
CLI_FIELDS = {"--gpu": "gpus", "--nodes": "nodes", "--network": "networks", "--objective": "objective",
              "--to": "target"}


# --- from a request to a task and back ----------------------------------------------------------

def _time_limit(cfg: ServiceConfig, spec: Spec, query: float | None) -> float:
    if query is not None:
        if query > cfg.max_time_limit_s:
            raise ApiError(422, f"time_limit_s: at most {cfg.max_time_limit_s:g} s on this server",
                           detail=[{"loc": ["query", "time_limit_s"], "field": "time_limit_s", "type": "less_than_equal",
                                    "msg": f"Input should be less than or equal to {cfg.max_time_limit_s:g}"}])
        return query
    if "time_limit_s" in spec.solver.model_fields_set:
        return min(spec.solver.time_limit_s, cfg.max_time_limit_s)
    return cfg.default_time_limit_s


def _envelope(data: Any, prefix: tuple = ()) -> None:
    if (problem := check_numbers(data, prefix)) is not None:
        raise ApiError(422, f"{problem['field']}: {problem['msg']}", detail=[problem])


def spec_payload(cfg: ServiceConfig, spec: Spec, query_limit: float | None, prefix: tuple = ()) -> tuple[dict, float]:
    """The spec as sent (unset fields stay unset), checked against the service's envelope
    (limits.py), with the service's time and worker limits applied."""
    limit = _time_limit(cfg, spec, query_limit)
    data = spec.model_dump(mode="json", exclude_unset=True)
    _envelope(data, prefix)
    if (problem := check_size(data.get("cluster") or {}, cfg.max_gpus, prefix)) is not None:
        raise ApiError(422, f"{problem['field']}: {problem['msg']}", detail=[problem])
    solver = dict(data.get("solver") or {})
    solver["time_limit_s"] = limit
    if spec.solver.workers > cfg.max_solver_workers:
        solver["workers"] = cfg.max_solver_workers
    data["solver"] = solver
    return data, limit


def layout_payload(layout: Any, prefix: tuple = ("layout",)) -> dict | None:
    if layout is None:
        return None
    data = layout.model_dump(mode="json", exclude_unset=True)
    _envelope(data, prefix)
    return data


def _spec_error(kind: str, out: dict, prefix: tuple[str, ...]) -> ApiError:
    field, msg = out.get("field"), out.get("message", "")
    field = CLI_FIELDS.get(field or "", field)
    if kind == "export" and field and field.split(".")[0] == "layout":  # the body calls it `plan`
        field = "plan" + field[len("layout"):]
    spec_like = field and not field.startswith(("layout", "plan", "--", "RLSOLVE", "spec file", "layout file",
                                                *CLI_FIELDS.values()))
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in (field or "").split(".") if p]
    loc = ["body", *(prefix if spec_like else ()), *parts]
    name = ".".join(str(p) for p in loc[1:])
    return ApiError(422, f"{name}: {msg}" if name else msg,
                    detail=[{"loc": loc, "field": name, "msg": msg, "type": "spec_error"}])


async def run(request: Request, kind: str, payload: dict, limit: float, prefix: tuple[str, ...] = (),
              points: int = 1) -> JSONBody:
    """Precheck on a server thread, then the task in the pool; the outcome as the answer."""
    cfg: ServiceConfig = config(request)
    workers: SolverPool = pool(request)
    state = request.scope.setdefault("state", {})
    state["task"] = kind
    top_k = int(((payload.get("spec") or {}).get("solver") or {}).get("top_k", 3))
    budget = cfg.budget_s(limit, top_k, points)
    out = await asyncio.to_thread(precheck, kind, payload)
    try:
        if out is None:
            out = await workers.submit(kind, payload, budget)
    except Overloaded as e:
        state["outcome"] = "overloaded"
        raise ApiError(503, str(e), headers={"Retry-After": str(e.retry_after)}, retry_after_s=e.retry_after)
    except WorkerLost as e:
        state["outcome"] = "worker_lost"
        raise ApiError(503, f"{e}; retry", headers={"Retry-After": "1"}, retry_after_s=1)
    except DeadlineExceeded as e:
        state["outcome"] = "deadline"
        raise ApiError(504, f"{e} (CP-SAT time limit {limit:g} s, cap {cfg.max_time_limit_s:g} s, grace "
                       f"{cfg.grace_s:g} s); the worker was stopped")
    status = out.get("status")
    state["outcome"] = status
    if status == "ok":
        return JSONBody(out["result"])
    if status == "spec_error":
        raise _spec_error(kind, out, prefix)
    if status == "infeasible":
        raise ApiError(409, "infeasible: no layout satisfies the constraints", reasons=out.get("reasons", []))
    if status == "no_answer":
        raise ApiError(504, out["message"])
    state["error"] = out.get("message")
    jsonlog.event("task failed", level=40, request_id=state.get("request_id"), task=kind, error=out.get("message"),
                  traceback=out.get("traceback"))
    raise ApiError(500, "internal error; the server log has the details")


V1 = [Depends(require_token), Depends(known_query_only)]


# --- plans ----------------------------------------------------------------------------------------

plans = APIRouter(prefix="/v1", tags=["plans"], dependencies=V1,
                  responses={**R_AUTH, **R_BODY, **R_WORK})


@plans.post("/solve", summary="Solve a spec: the optimal plan", response_model=Plan,
            responses={200: {"description": "The plan, byte for byte as `rlsolve solve --format json` prints it."}},
            openapi_extra=body_doc(Spec, ex.SOLVE, "A spec (the cluster.yaml schema) as JSON."))
async def solve(request: Request, spec: Spec = Depends(json_body(Spec)),
                objective: Literal["throughput", "cost"] | None = OBJECTIVE, time_limit_s: float | None = TIME_LIMIT):
    """The optimal plan for the spec: `rlsolve.solve(spec)` in a worker."""
    data, limit = spec_payload(config(request), spec, time_limit_s)
    return await run(request, "solve", {"spec": data, "objective": objective}, limit)


@plans.post("/estimate", summary="Score a layout", response_model=Plan,
            responses={200: {"description": "The layout scored (status: estimate)."}},
            openapi_extra=body_doc(EstimateRequest, ex.ESTIMATE))
async def estimate(request: Request, body: EstimateRequest = Depends(json_body(EstimateRequest))):
    """`rlsolve.estimate(spec, layout)`: the plan's numbers for a given (e.g. current) layout."""
    data, limit = spec_payload(config(request), body.spec, None, ("spec",))
    return await run(request, "estimate", {"spec": data, "layout": layout_payload(body.layout)}, limit,
                     prefix=("spec",))


@plans.post("/explain", summary="Why the optimal plan wins (against your layout)", response_model=ExplainResponse,
            openapi_extra=body_doc(ExplainRequest, ex.EXPLAIN))
async def explain(request: Request, body: ExplainRequest = Depends(json_body(ExplainRequest)),
                  objective: Literal["throughput", "cost"] | None = OBJECTIVE,
                  time_limit_s: float | None = TIME_LIMIT):
    """Solve, and with a layout also estimate it: both plans and the differences term by term
    (your layout minus the optimum), as `rlsolve explain SPEC LAYOUT` prints them. A layout
    that does not fit memory answers 200 with `layout_fits: false` and the reasons; an
    infeasible spec answers 409."""
    data, limit = spec_payload(config(request), body.spec, time_limit_s, ("spec",))
    payload = {"spec": data, "layout": layout_payload(body.layout), "objective": objective}
    return await run(request, "explain", payload, limit, prefix=("spec",))


@plans.post("/export", summary="Export a plan as a framework config", response_model=ExportResponse,
            openapi_extra=body_doc(ExportRequest, ex.EXPORT))
async def export(request: Request, body: ExportRequest = Depends(json_body(ExportRequest)),
                 time_limit_s: float | None = TIME_LIMIT):
    """`rlsolve.export.export_plan(plan, spec, target)`, solving the spec first when no plan
    is given (that plan is returned too)."""
    data, limit = spec_payload(config(request), body.spec, time_limit_s, ("spec",))
    payload = {"spec": data, "plan": layout_payload(body.plan, ("plan",)), "target": body.target}
    return await run(request, "export", payload, limit, prefix=("spec",))


# --- what-if --------------------------------------------------------------------------------------

whatif = APIRouter(prefix="/v1", tags=["what-if"], dependencies=V1, responses={**R_AUTH, **R_BODY, **R_WORK})


@whatif.post("/compare", summary="What-if: solve the spec for several clusters", response_model=CompareResponse,
             openapi_extra=body_doc(CompareRequest, ex.COMPARE))
async def compare(request: Request, body: CompareRequest = Depends(json_body(CompareRequest)),
                  time_limit_s: float | None = TIME_LIMIT):
    """`rlsolve.whatif.compare(spec, gpus=..., nodes=..., networks=..., objective=...)`: one row
    per cluster, as `rlsolve compare --format json` prints them."""
    cfg = config(request)
    points = max(1, len(body.gpus or [1])) * max(1, len(body.nodes or [1])) * max(1, len(body.networks or [1]))
    if points > cfg.max_compare_points:
        raise ApiError(422, f"{points} points requested; this server solves at most {cfg.max_compare_points} per "
                       "request", detail=[{"loc": ["body"], "field": "", "msg": "too many points",
                                           "type": "too_many_points"}])
    data, limit = spec_payload(cfg, body.spec, time_limit_s, ("spec",))
    _envelope(body.model_dump(mode="json", include={"nodes", "networks"}, exclude_none=True))
    for i, n in enumerate(body.nodes or []):
        if (problem := check_size({**data["cluster"], "nodes": n}, cfg.max_gpus, ("nodes", i))) is not None:
            problem = {**problem, "loc": ["body", "nodes", i], "field": f"nodes.{i}"}
            raise ApiError(422, f"{problem['field']}: {problem['msg']}", detail=[problem])
    networks = None if body.networks is None else [
        n if isinstance(n, str) else n.model_dump(mode="json", exclude_none=True) for n in body.networks]
    payload = {"spec": data, "gpus": body.gpus, "nodes": body.nodes, "networks": networks, "objective": body.objective}
    return await run(request, "compare", payload, limit, prefix=("spec",), points=points)


# --- catalogs and health --------------------------------------------------------------------------

catalogs = APIRouter(prefix="/v1", tags=["catalogs"], dependencies=V1, responses={**R_AUTH})


@catalogs.get("/gpus", summary="The GPU and network catalog", response_model=GPUList)
async def gpus():
    """Every GPU and network entry with its sources (`rlsolve gpus --format json`)."""
    return JSONBody({"gpus": gpu_rows(), "networks": network_rows()})


@catalogs.get("/models", summary="The model catalog", response_model=ModelList)
async def models():
    """Every architecture (`rlsolve models --format json`)."""
    return JSONBody({"models": model_rows()})


service = APIRouter(tags=["service"], dependencies=[Depends(known_query_only)])


@service.get("/healthz", summary="Liveness and pool state", response_model=Health,
             responses={503: _err("The worker pool is not running (starting or shutting down).")})
async def healthz(request: Request):
    workers = pool(request)
    body = {"status": "stopping" if workers.closed else "ok", "version": rlsolve.__version__, "pool": workers.stats()}
    return JSONBody(body, status_code=503 if workers.closed else 200)


ROUTERS = (plans, whatif, catalogs, service)
