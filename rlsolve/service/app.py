"""The FastAPI application: `create_app(ServiceConfig(...))`.

Endpoints (JSON in, JSON out; bodies use the file schemas of SPEC sections 3-4):

    POST /v1/solve      Spec                        -> Plan
    POST /v1/estimate   {spec, layout}              -> Plan (status: estimate)
    POST /v1/explain    {spec, layout?}             -> {plan, layout, differences, ...}
    POST /v1/compare    {spec, gpus, nodes, ...}    -> rlsolve.whatif.compare (501 when absent)
    POST /v1/export     {spec, plan?, target}       -> rlsolve.export.export_plan (501 when absent)
    GET  /v1/gpus, /v1/models, /healthz, /openapi.json, /docs

Status codes: 200 answer; 401 bearer token missing or wrong; 404/405 unknown path or
method; 409 infeasible (with `reasons`); 413 body over the limit (1 MiB); 415 body not
JSON; 422 invalid input (with `detail[].field`); 501 optional module not installed; 503
overloaded (Retry-After); 504 a solve overran its wall-clock budget. A 500 is a bug.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import time
import traceback
import uuid
from typing import Any, Literal

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

import rlsolve
from rlsolve.plan import Plan
from rlsolve.spec import clean_loc, order_errors
from rlsolve.service import examples as ex
from rlsolve.service import jsonlog
from rlsolve.service.config import ServiceConfig
from rlsolve.service.limits import check_numbers, check_size
from rlsolve.service.pool import DeadlineExceeded, Overloaded, SolverPool, WorkerLost
from rlsolve.service.schemas import (CompareRequest, CompareResponse, ErrorResponse, EstimateRequest,
                                     ExplainRequest, ExplainResponse, ExportRequest, ExportResponse, GPUList, Health,
                                     ModelList)
from rlsolve.service.worker import optional_function, precheck, warm
from rlsolve.spec import Spec

ERROR_NAMES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               409: "infeasible", 413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_input",
               501: "not_implemented", 503: "overloaded", 504: "deadline_exceeded"}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class SafeJSONResponse(JSONResponse):
    """JSON that is always valid: a non-finite float (an infinite $/Mtok) becomes null."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        except ValueError:
            return json.dumps(_finite(content), ensure_ascii=False, separators=(",", ":")).encode()


def error(status: int, message: str, *, headers: dict[str, str] | None = None, request_id: str | None = None,
          **extra: Any) -> JSONResponse:
    body = ErrorResponse(error=ERROR_NAMES.get(status, "internal"), message=message, request_id=request_id, **extra)
    return SafeJSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _err(description: str, headers: dict | None = None) -> dict:
    out: dict[str, Any] = {"model": ErrorResponse, "description": description}
    if headers:
        out["headers"] = headers
    return out


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}
WWW_AUTH = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
R_AUTH = {401: _err("Missing or wrong bearer token (only when the server has a token).", WWW_AUTH)}
R_LIMIT = {413: _err("Body larger than the limit (1 MiB by default)."),
           415: _err("The body is not JSON (send Content-Type: application/json).")}
R_422 = {422: _err("Invalid input: `detail` names every bad field (`field`, dotted, relative to the body) and "
                   "the fix. Also numbers outside the service's envelope (non-finite, |x| < 1e-9 or > 1e15, "
                   "integers over 10^9) and clusters over the server's GPU limit.")}
R_WORK = {409: _err("Infeasible: no layout satisfies the constraints; `reasons` says why, in numbers."),
          503: _err("Overloaded: every worker is busy and the queue is full, or no worker became free in "
                    "time. Retry after Retry-After seconds.", RETRY_AFTER),
          504: _err("The solve ran past its wall-clock budget (time limit + grace) and was stopped; lower the "
                    "problem size or raise time_limit_s.")}
R_501 = {501: _err("The optional module behind this endpoint is not installed in this build.")}


class OutOfRange(Exception):
    """A request outside the service's envelope (limits.py): 422."""

    def __init__(self, detail: dict):
        super().__init__(detail["msg"])
        self.detail = detail


def _checked_layout(layout: Any, prefix: tuple = ("layout",)) -> dict | None:
    if layout is None:
        return None
    data = layout.model_dump(mode="json", exclude_unset=True)
    if (problem := check_numbers(data, prefix)) is not None:
        raise OutOfRange(problem)
    return data


# SpecError fields named after CLI flags (rlsolve.whatif) -> the request body's field
CLI_FIELDS = {"--gpu": "gpus", "--nodes": "nodes", "--network": "networks", "--objective": "objective",
              "--to": "target"}


def _field_error(err: dict) -> dict:
    if err.get("type") == "json_invalid":  # loc holds a character offset, not a field
        pos = err.get("loc", ("body", 0))[-1]
        return {"loc": ["body"], "field": "", "msg": f"{err.get('msg', 'JSON decode error')} at character {pos}",
                "type": "json_invalid"}
    loc = clean_loc(p if isinstance(p, (str, int)) else str(p) for p in err.get("loc", ()))
    rel = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
    return {"loc": loc, "field": ".".join(str(p) for p in rel) or (loc[0] if loc else ""),
            "msg": str(err.get("msg", "invalid")), "type": str(err.get("type", "value_error"))}


def _spec_error_detail(field: str | None, message: str, prefix: tuple[str, ...]) -> dict:
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in (field or "").split(".") if p]
    loc = ["body", *prefix, *parts] if parts else ["body", *prefix]
    return {"loc": loc, "field": ".".join(str(p) for p in loc[1:]), "msg": message, "type": "spec_error"}


# --- ASGI middlewares (outermost first: access log, auth, body limit) ----------------------

class AccessLogMiddleware:
    """Request id, one JSON log line per request, and a JSON 500 if anything escapes."""

    def __init__(self, app: Any, enabled: bool = True):
        self.app, self.enabled = app, enabled

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        rid = headers.get(b"x-request-id", b"").decode("latin-1")[:64] or uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        info: dict[str, Any] = {"status": None, "bytes_out": 0, "started": False}  # None: client left first

        async def _send(message: dict) -> None:
            if message["type"] == "http.response.start":
                info["status"] = message["status"]
                info["started"] = True
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            elif message["type"] == "http.response.body":
                info["bytes_out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, _send)
        except Exception as e:  # a bug below: answer a JSON 500, log the traceback
            info["error"] = f"{type(e).__name__}: {e}"
            jsonlog.event("unhandled exception", level=40, request_id=rid, error=info["error"],
                          traceback="".join(traceback.format_exception(e)))
            if not info["started"]:
                resp = error(500, "internal error; the server log has the details", request_id=rid)
                await resp(scope, receive, _send)
        finally:
            if self.enabled:
                state = scope.get("state", {})
                client = scope.get("client")
                jsonlog.access(request_id=rid, method=scope.get("method"), path=scope.get("path"),
                               query=scope.get("query_string", b"").decode("latin-1")[:200] or None,
                               status=info["status"], ms=round((time.perf_counter() - t0) * 1000, 2),
                               bytes_in=state.get("bytes_in", 0), bytes_out=info["bytes_out"],
                               client=client[0] if client else None, task=state.get("task"),
                               outcome=state.get("outcome"), error=info.get("error") or state.get("error"))


class BearerAuthMiddleware:
    """With a token configured, every /v1/ request needs `Authorization: Bearer <token>`.
    /healthz and the OpenAPI document stay open (probes and code generators)."""

    def __init__(self, app: Any, token: str | None):
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.token is None or not scope.get("path", "").startswith("/v1/"):
            return await self.app(scope, receive, send)
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), self.token):
            return await self.app(scope, receive, send)
        rid = scope.get("state", {}).get("request_id")
        resp = error(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
                     headers={"WWW-Authenticate": "Bearer"}, request_id=rid)
        await resp(scope, receive, send)


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _non_finite(data: bytes) -> str | None:
    """NaN, Infinity and numbers that overflow a double (1e400) are not JSON numbers, though
    Python's parser takes them; they are refused here, before any validator sees them."""
    try:
        json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFinite as e:
        return str(e)
    except (ValueError, RecursionError):  # not JSON at all: FastAPI answers 422 itself
        return None
    return None


DRAIN_BYTES = 16 * 1024 * 1024  # refused bodies up to this size are read to the end before the 413


class BodyLimitMiddleware:
    """Refuse bodies over `limit` bytes with 413: at once from Content-Length, else while
    reading. The body (at most `limit` bytes) is buffered and replayed to the app."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def _too_large(self, scope: dict, receive: Any, send: Any, drain: bool = True) -> None:
        # Read (and drop) the rest of a moderately large body first: a client still sending
        # when the connection closes sees a reset instead of this answer.
        drained = 0
        while drain and drained <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                break
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        rid = scope.get("state", {}).get("request_id")
        resp = error(413, f"body larger than {self.limit:,} bytes", request_id=rid, headers={"Connection": "close"})
        await resp(scope, receive, send)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = self.limit + 1
            if declared > self.limit:
                return await self._too_large(scope, receive, send, drain=declared <= DRAIN_BYTES)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                return await self._too_large(scope, receive, send)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        scope.setdefault("state", {})["bytes_in"] = size
        data = b"".join(chunks)
        if data and (bad := _non_finite(data)) is not None:
            rid = scope.get("state", {}).get("request_id")
            resp = error(422, f"the body is not valid JSON: {bad} is not a JSON number (RFC 8259)", request_id=rid,
                         detail=[{"loc": ["body"], "field": "", "msg": f"{bad} is not a JSON number",
                                  "type": "json_invalid"}])
            return await resp(scope, receive, send)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# --- the application -----------------------------------------------------------------------

def create_app(config: ServiceConfig | None = None, pool: SolverPool | None = None) -> FastAPI:
    """Build the app. The worker pool starts with the app (lifespan) and drains on shutdown."""
    cfg = config or ServiceConfig()
    pool = pool or SolverPool(workers=cfg.workers, max_queue=cfg.max_queue, queue_timeout_s=cfg.queue_timeout_s,
                              executor=cfg.executor)
    cap = cfg.max_time_limit_s

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        t0 = time.perf_counter()
        await asyncio.gather(pool.start(), asyncio.to_thread(warm))  # the server itself runs the prechecks
        jsonlog.event("ready", workers=cfg.workers, executor=cfg.executor, max_queue=cfg.max_queue,
                      startup_s=round(time.perf_counter() - t0, 2), auth=bool(cfg.token))
        try:
            yield
        finally:
            jsonlog.event("stopping", **pool.stats())
            await pool.close()
            jsonlog.event("stopped")

    async def known_query_only(request: Request) -> None:
        """A misspelt query parameter (`?time_limit=5`) is an error, not silently ignored."""
        route = request.scope.get("route")
        dependant = getattr(route, "dependant", None)
        allowed = {p.alias for p in dependant.query_params} if dependant is not None else set()
        unknown = [k for k in request.query_params if k not in allowed]
        if unknown:
            hint = f"allowed: {', '.join(sorted(allowed))}" if allowed else "this endpoint takes none"
            raise RequestValidationError([{"loc": ("query", k), "msg": f"unknown query parameter; {hint}",
                                           "type": "extra_forbidden"} for k in unknown])

    app = FastAPI(title="rlsolve", version=rlsolve.__version__, lifespan=lifespan,
                  dependencies=[Depends(known_query_only)],
                  default_response_class=SafeJSONResponse,
                  description=(__doc__ or "").split("\n\n", 1)[1] if __doc__ else None)
    app.state.config, app.state.pool = cfg, pool

    # --- errors -----------------------------------------------------------------------------
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        ctype = request.headers.get("content-type", "")
        main_type = ctype.split(";")[0].strip().lower()
        if request.method == "POST" and main_type and not (main_type == "application/json"
                                                            or main_type.endswith("+json")):
            return error(415, f"send the body as JSON (Content-Type: application/json), not {ctype[:60]!r}",
                         request_id=request.scope.get("state", {}).get("request_id"))
        errs = [_field_error(e) for e in order_errors(jsonable_encoder(exc.errors(), custom_encoder={bytes: lambda b: ""}))]
        if any(e["type"] == "json_invalid" for e in errs):
            first = next(e for e in errs if e["type"] == "json_invalid")
            msg = f"the body is not valid JSON: {first['msg']}"
        else:
            first = errs[0] if errs else {"field": "", "msg": "invalid"}
            msg = f"{first['field'] or 'body'}: {first['msg']}" + (f" (and {len(errs) - 1} more)" if len(errs) > 1
                                                                     else "")
        request.scope.setdefault("state", {})["outcome"] = "invalid"
        return error(422, msg, detail=errs[:50], request_id=request.scope.get("state", {}).get("request_id"))

    @app.exception_handler(OutOfRange)
    async def _out_of_range(request: Request, exc: OutOfRange):
        request.scope.setdefault("state", {})["outcome"] = "invalid"
        return error(422, f"{exc.detail['field']}: {exc.detail['msg']}", detail=[exc.detail],
                     request_id=request.scope.get("state", {}).get("request_id"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400:  # FastAPI: a body it cannot decode (not UTF-8): invalid input like any other
            return error(422, f"the body is not valid JSON: {exc.detail}", request_id=request.scope.get(
                "state", {}).get("request_id"), detail=[{"loc": ["body"], "field": "", "msg": str(exc.detail),
                                                         "type": "json_invalid"}])
        return error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None),
                     request_id=request.scope.get("state", {}).get("request_id"))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        request.scope.setdefault("state", {})["error"] = f"{type(exc).__name__}: {exc}"
        jsonlog.event("unhandled exception", level=40, error=f"{type(exc).__name__}: {exc}",
                      traceback="".join(traceback.format_exception(exc)))
        return error(500, "internal error; the server log has the details",
                     request_id=request.scope.get("state", {}).get("request_id"))

    # --- helpers ----------------------------------------------------------------------------
    async def _strict(request: Request, model: type) -> Any:
        """Validate the body again in pydantic's strict JSON mode: JSON types are not coerced
        (true is not 1, "8" is not 8, 2.5 is not an integer). FastAPI's own (lax) validation
        has already run, so its 422 comes first for anything both reject."""
        try:
            return model.model_validate_json(await request.body(), strict=True)
        except ValidationError as e:
            raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None

    def _time_limit(spec: Spec, query: float | None) -> float:
        if query is not None:
            return min(query, cap)
        if "time_limit_s" in spec.solver.model_fields_set:
            return min(spec.solver.time_limit_s, cap)
        return cfg.default_time_limit_s

    def _spec_payload(spec: Spec, query_limit: float | None, prefix: tuple = ()) -> tuple[dict, float]:
        """The spec as sent (unset fields stay unset), checked against the service's envelope
        (limits.py), with the service's time and worker limits applied."""
        limit = _time_limit(spec, query_limit)
        data = spec.model_dump(mode="json", exclude_unset=True)
        for problem in (check_numbers(data, prefix), check_size(data.get("cluster") or {}, cfg.max_gpus, prefix)):
            if problem is not None:
                raise OutOfRange(problem)
        solver = dict(data.get("solver") or {})
        solver["time_limit_s"] = limit
        if spec.solver.workers > cfg.max_solver_workers:
            solver["workers"] = cfg.max_solver_workers
        data["solver"] = solver
        return data, limit

    async def _run(request: Request, kind: str, payload: dict, limit: float, prefix: tuple[str, ...] = (),
                   points: int = 1):
        state = request.scope.setdefault("state", {})
        rid = state.get("request_id")
        state["task"] = kind
        top_k = int(((payload.get("spec") or {}).get("solver") or {}).get("top_k", 3))
        budget = cfg.budget_s(limit, top_k, points)
        out = await asyncio.to_thread(precheck, kind, payload)
        try:
            if out is None:
                out = await pool.submit(kind, payload, budget)
        except Overloaded as e:
            state["outcome"] = "overloaded"
            return error(503, str(e), headers={"Retry-After": str(e.retry_after)}, retry_after_s=e.retry_after,
                         request_id=rid)
        except WorkerLost as e:
            state["outcome"] = "worker_lost"
            return error(503, f"{e}; retry", headers={"Retry-After": "1"}, retry_after_s=1, request_id=rid)
        except DeadlineExceeded as e:
            state["outcome"] = "deadline"
            return error(504, f"{e} (CP-SAT time limit {limit:g} s, cap {cap:g} s, grace {cfg.grace_s:g} s); the "
                         "worker was stopped", request_id=rid)
        status = out.get("status")
        state["outcome"] = status
        if status == "ok":
            return SafeJSONResponse(out["result"])
        if status == "spec_error":
            field, msg = out.get("field"), out.get("message", "")
            field = CLI_FIELDS.get(field or "", field)
            if kind == "export" and field and field.split(".")[0] == "layout":  # the body calls it `plan`
                field = "plan" + field[len("layout"):]
            spec_like = field and not field.startswith(("layout", "plan", "--", "RLSOLVE", "spec file", "layout file",
                                                        *CLI_FIELDS.values()))
            pre = prefix if spec_like else ()
            d = _spec_error_detail(field, msg, pre)
            return error(422, f"{d['field']}: {msg}" if d["field"] else msg, detail=[d], request_id=rid)
        if status == "infeasible":
            return error(409, "infeasible: no layout satisfies the constraints", reasons=out.get("reasons", []),
                         request_id=rid)
        if status == "not_implemented":
            return error(501, out.get("message", "not implemented"), request_id=rid)
        state["error"] = out.get("message")
        jsonlog.event("task failed", level=40, request_id=rid, task=kind, error=out.get("message"),
                      traceback=out.get("traceback"))
        return error(500, "internal error; the server log has the details", request_id=rid)

    TL = Query(None, ge=0.01, le=cap, description=f"CP-SAT time limit in seconds (default: the body's "
               f"solver.time_limit_s if set, else {cfg.default_time_limit_s:g}; at most {cap:g}).")
    OBJ = Query(None, description="Overrides the spec's objective (as the CLI flag does).")

    # --- routes -----------------------------------------------------------------------------
    @app.post("/v1/solve", tags=["plans"], summary="Solve a spec: the optimal plan",
              response_model=None, responses={200: {"model": Plan, "description": "The plan (as `rlsolve solve "
                                                     "--format json` prints it)."},
                                              **R_AUTH, **R_LIMIT, **R_422, **R_WORK})
    async def solve(request: Request, spec: Spec = Body(..., description="A spec (the cluster.yaml schema) as JSON.",
                                                        openapi_examples=ex.SOLVE),
                    objective: Literal["throughput", "cost"] | None = OBJ, time_limit_s: float | None = TL):
        """The optimal plan for the spec: `rlsolve.solve(spec)` in a worker."""
        spec = await _strict(request, Spec)
        data, limit = _spec_payload(spec, time_limit_s)
        return await _run(request, "solve", {"spec": data, "objective": objective}, limit)

    @app.post("/v1/estimate", tags=["plans"], summary="Score a layout", response_model=None,
              responses={200: {"model": Plan, "description": "The layout scored (status: estimate)."},
                         **R_AUTH, **R_LIMIT, **R_422, **R_WORK})
    async def estimate(request: Request, body: EstimateRequest = Body(..., openapi_examples=ex.ESTIMATE)):
        """`rlsolve.estimate(spec, layout)`: the plan's numbers for a given (e.g. current) layout."""
        body = await _strict(request, EstimateRequest)
        data, limit = _spec_payload(body.spec, None, ("spec",))
        layout = _checked_layout(body.layout)
        return await _run(request, "estimate", {"spec": data, "layout": layout}, limit, prefix=("spec",))

    @app.post("/v1/explain", tags=["plans"], summary="Why the optimal plan wins (against your layout)",
              response_model=None, responses={200: {"model": ExplainResponse, "description": "Both plans and the "
                                                     "per-term differences."},
                                              **R_AUTH, **R_LIMIT, **R_422, **R_WORK})
    async def explain(request: Request, body: ExplainRequest = Body(..., openapi_examples=ex.EXPLAIN),
                      objective: Literal["throughput", "cost"] | None = OBJ,
                      time_limit_s: float | None = TL):
        """Solve, and with a layout also estimate it: both plans and the differences term by term
        (your layout minus the optimum). A layout that does not fit memory answers 200 with
        `layout_fits: false` and the reasons; an infeasible spec answers 409."""
        body = await _strict(request, ExplainRequest)
        data, limit = _spec_payload(body.spec, time_limit_s, ("spec",))
        layout = _checked_layout(body.layout)
        return await _run(request, "explain", {"spec": data, "layout": layout, "objective": objective}, limit,
                          prefix=("spec",))

    @app.post("/v1/compare", tags=["what-if"], summary="What-if: solve the spec for several clusters",
              response_model=None, responses={200: {"model": CompareResponse}, **R_AUTH, **R_LIMIT, **R_422,
                                              **R_WORK, **R_501})
    async def compare(request: Request, body: CompareRequest = Body(..., openapi_examples=ex.COMPARE),
                      time_limit_s: float | None = TL):
        """Calls `rlsolve.whatif.compare(spec, gpus=..., nodes=..., networks=..., objective=...)`.
        Answers 501 while that module is not part of the installation."""
        body = await _strict(request, CompareRequest)
        fn, why = optional_function("rlsolve.whatif", "compare")
        if fn is None:
            return error(501, why, request_id=request.scope.get("state", {}).get("request_id"))
        points = max(1, len(body.gpus or [1])) * max(1, len(body.nodes or [1])) * max(1, len(body.networks or [1]))
        if points > cfg.max_compare_points:
            return error(422, f"{points} points requested; this server solves at most {cfg.max_compare_points} per "
                         "request", detail=[{"loc": ["body"], "field": "", "msg": "too many points",
                                             "type": "too_many_points"}])
        data, limit = _spec_payload(body.spec, time_limit_s, ("spec",))
        sweep = body.model_dump(mode="json", include={"nodes", "networks"}, exclude_none=True)
        if (problem := check_numbers(sweep)) is not None:
            raise OutOfRange(problem)
        for i, n in enumerate(body.nodes or []):
            if (problem := check_size({**data["cluster"], "nodes": n}, cfg.max_gpus, ("nodes", i))) is not None:
                raise OutOfRange({**problem, "loc": ["body", "nodes", i], "field": f"nodes.{i}"})
        payload = {"spec": data, "gpus": body.gpus, "nodes": body.nodes, "networks": None if body.networks is None else [
                   n if isinstance(n, str) else n.model_dump(mode="json", exclude_none=True) for n in body.networks],
                   "objective": body.objective}
        return await _run(request, "compare", payload, limit, prefix=("spec",), points=points)

    @app.post("/v1/export", tags=["plans"], summary="Export a plan as a framework config", response_model=None,
              responses={200: {"model": ExportResponse}, **R_AUTH, **R_LIMIT, **R_422, **R_WORK, **R_501})
    async def export(request: Request, body: ExportRequest = Body(..., openapi_examples=ex.EXPORT),
                     time_limit_s: float | None = TL):
        """Calls `rlsolve.export.export_plan(plan, spec, target)` (solving the spec first when no plan
        is given). Answers 501 while that module is not part of the installation."""
        body = await _strict(request, ExportRequest)
        fn, why = optional_function("rlsolve.export", "export_plan")
        if fn is None:
            return error(501, why, request_id=request.scope.get("state", {}).get("request_id"))
        data, limit = _spec_payload(body.spec, time_limit_s, ("spec",))
        plan = _checked_layout(body.plan, ("plan",))
        return await _run(request, "export", {"spec": data, "plan": plan, "target": body.target}, limit,
                          prefix=("spec",))

    @app.get("/v1/gpus", tags=["catalogs"], summary="The GPU and network catalog", response_model=GPUList,
             responses={**R_AUTH})
    async def gpus():
        from rlsolve.hardware_db import list_gpus, list_networks
        return {"gpus": [g.model_dump(mode="json") for g in list_gpus()],
                "networks": [n.model_dump(mode="json") for n in list_networks()]}

    @app.get("/v1/models", tags=["catalogs"], summary="The model catalog", response_model=ModelList,
             responses={**R_AUTH})
    async def models():
        from rlsolve.models import list_models
        rows = []
        for m in list_models():
            row = m.model_dump(mode="json")
            row.update(total_params_b=round(m.total_params / 1e9, 3), active_params_b=round(m.active_params / 1e9, 3),
                       kv_kib_per_token=round(m.kv_bytes_per_token(2.0) / 1024, 2))
            rows.append(row)
        return {"models": rows}

    @app.get("/healthz", tags=["service"], summary="Liveness and pool state", response_model=Health,
             responses={503: _err("The worker pool is not running (starting or shutting down).")})
    async def healthz():
        status = "stopping" if pool.closed else "ok"
        body = {"status": status, "version": rlsolve.__version__, "pool": pool.stats()}
        return SafeJSONResponse(body, status_code=503 if pool.closed else 200)

    def custom_openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        if cfg.token:
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer"}
            for path, ops in schema.get("paths", {}).items():
                if path.startswith("/v1/"):
                    for op in ops.values():
                        op["security"] = [{"bearer": []}]
        else:  # no token: no 401 can happen
            for ops in schema.get("paths", {}).values():
                for op in ops.values():
                    op.get("responses", {}).pop("401", None)
        app.openapi_schema = schema
        return schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    app.add_middleware(BodyLimitMiddleware, limit=cfg.max_body_bytes)
    app.add_middleware(BearerAuthMiddleware, token=cfg.token)
    app.add_middleware(AccessLogMiddleware, enabled=cfg.log_requests)
    return app
