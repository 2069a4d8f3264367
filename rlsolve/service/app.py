"""The FastAPI application: `create_app(ServiceConfig(...))`.

Endpoints (JSON in, JSON out; bodies use the file schemas of SPEC sections 3-4):

    POST /v1/solve      Spec                        -> Plan
    POST /v1/estimate   {spec, layout}              -> Plan (status: estimate)
    POST /v1/explain    {spec, layout?}             -> {plan, layout, differences, ...}
    POST /v1/compare    {spec, gpus, nodes, ...}    -> {result: [one row per cluster]}
    POST /v1/export     {spec, plan?, target}       -> {target, content, filename, ...}
    GET  /v1/gpus, /v1/models, /healthz, /openapi.json, /docs

Status codes: 200 answer; 401 bearer token missing or wrong; 404/405 unknown path or
method; 409 infeasible (with `reasons`); 413 body over the limit (1 MiB); 415 body not
JSON; 422 invalid input (with `detail[].field`); 503 overloaded (Retry-After); 504 no
answer in time (the CP-SAT limit ran out with the status unknown, or the work overran its
wall-clock budget). A 500 is a bug.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
import traceback
import uuid
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

import rlsolve
from rlsolve.service import errors, jsonlog
from rlsolve.service.config import ServiceConfig
from rlsolve.service.errors import JSONBody, error_response
from rlsolve.service.pool import SolverPool
from rlsolve.service.routes import REQUEST_MODELS, ROUTERS
from rlsolve.service.worker import warm


class AccessLog:
    """ASGI middleware: a request id, one JSON log line per request (404s and refused bodies
    included), and a JSON 500 if anything escapes below."""

    def __init__(self, app: Any, enabled: bool = True):
        self.app, self.enabled = app, enabled

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        rid = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")[:64] or uuid.uuid4().hex[:16]
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        info: dict[str, Any] = {"status": None, "bytes_out": 0, "started": False}  # None: the client left first

        async def _send(message: dict) -> None:
            if message["type"] == "http.response.start":
                info.update(status=message["status"], started=True)
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
                await error_response(500, "internal error; the server log has the details", rid)(scope, receive, _send)
        finally:
            if self.enabled:
                client = scope.get("client")
                jsonlog.access(request_id=rid, method=scope.get("method"), path=scope.get("path"),
                               query=scope.get("query_string", b"").decode("latin-1")[:200] or None,
                               status=info["status"], ms=round((time.perf_counter() - t0) * 1000, 2),
                               bytes_in=state.get("bytes_in", 0), bytes_out=info["bytes_out"],
                               client=client[0] if client else None, task=state.get("task"),
                               outcome=state.get("outcome"), error=info.get("error") or state.get("error"))


def openapi_document(app: FastAPI, cfg: ServiceConfig) -> dict:
    """FastAPI's document plus what it cannot see: the request bodies' schemas (the routes
    parse their bodies themselves), the time-limit cap, and the bearer scheme when a token is
    set (no 401 without one)."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _, defs = models_json_schema([(m, "validation") for m in REQUEST_MODELS],
                                 ref_template="#/components/schemas/{model}")
    defs = defs.get("$defs", {})
    # a model whose input schema differs from the output one FastAPI already holds gets its own name
    renamed = {n: f"{n}-Input" for n, d in defs.items() if n in components and components[n] != d}
    text = json.dumps(defs)
    for old, new in renamed.items():
        text = text.replace(f'"#/components/schemas/{old}"', f'"#/components/schemas/{new}"')
    for name, d in json.loads(text).items():
        components.setdefault(renamed.get(name, name), d)
    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param.get("name") == "time_limit_s":
                    for option in param["schema"].get("anyOf", [param["schema"]]):
                        if option.get("type") == "number":
                            option["maximum"] = cfg.max_time_limit_s
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
            if ref in renamed:
                body["schema"]["$ref"] = f"#/components/schemas/{renamed[ref]}"
    if cfg.token:
        schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, ops in schema.get("paths", {}).items():
            if path.startswith("/v1/"):
                for op in ops.values():
                    op["security"] = [{"bearer": []}]
    else:
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                op.get("responses", {}).pop("401", None)
    return schema


def create_app(config: ServiceConfig | None = None, pool: SolverPool | None = None) -> FastAPI:
    """Build the app. The worker pool starts with the app (lifespan) and drains on shutdown."""
    cfg = config or ServiceConfig()
    pool = pool or SolverPool(workers=cfg.workers, max_queue=cfg.max_queue, queue_timeout_s=cfg.queue_timeout_s,
                              executor=cfg.executor)

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

    app = FastAPI(title="rlsolve", version=rlsolve.__version__, lifespan=lifespan, default_response_class=JSONBody,
                  description=(__doc__ or "").split("\n\n", 1)[1])
    app.state.config, app.state.pool = cfg, pool
    for router in ROUTERS:
        app.include_router(router)
    errors.install(app)

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, cfg)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(AccessLog, enabled=cfg.log_requests)
    return app
