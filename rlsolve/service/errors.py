"""Every non-2xx answer of the service: one shape (`ErrorResponse`), raised as `ApiError`
anywhere in a request and turned into JSON by the handlers `install(app)` registers."""
from __future__ import annotations

import traceback
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlsolve.present import to_json
from rlsolve.service import jsonlog
from rlsolve.service.schemas import ErrorResponse
from rlsolve.spec import clean_loc, order_errors

ERROR_NAMES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
               409: "infeasible", 413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_input",
               503: "overloaded", 504: "deadline_exceeded"}


class JSONBody(JSONResponse):
    """JSON exactly as the CLI prints it (`rlsolve.present.to_json`: indented, a non-finite
    number such as an infinite $/Mtok as null), so a plan from the service is byte for byte
    the output of `rlsolve solve --format json`."""

    def render(self, content: Any) -> bytes:
        return to_json(content).encode()


class ApiError(Exception):
    """An answer other than 200: status, one line for a person, and the ErrorResponse extras
    (detail, reasons, retry_after_s) and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


def request_id(request: Request) -> str | None:
    return request.scope.get("state", {}).get("request_id")


def error_response(status: int, message: str, request_id: str | None = None, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONBody:
    body = ErrorResponse(error=ERROR_NAMES.get(status, "internal"), message=message, request_id=request_id, **extra)
    return JSONBody(body.model_dump(mode="json"), status_code=status, headers=headers)


def field_error(err: dict) -> dict:
    """A pydantic error as a FieldError: `loc` from 'body'/'query', `field` dotted relative to it."""
    if err.get("type") == "json_invalid":
        return {"loc": ["body"], "field": "", "msg": str(err.get("msg", "JSON decode error")), "type": "json_invalid"}
    loc = clean_loc(p if isinstance(p, (str, int)) else str(p) for p in err.get("loc", ()))
    rel = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
    return {"loc": loc, "field": ".".join(str(p) for p in rel) or (loc[0] if loc else ""),
            "msg": str(err.get("msg", "invalid")), "type": str(err.get("type", "value_error"))}


def invalid(errors: list[dict]) -> ApiError:
    """422 for pydantic-style errors (loc from 'body' or 'query'), the first named in the message."""
    errs = [field_error(e) for e in order_errors(jsonable_encoder(errors, custom_encoder={bytes: lambda b: ""}))]
    first = errs[0] if errs else {"field": "", "msg": "invalid", "type": ""}
    if first["type"] == "json_invalid":
        msg = f"the body is not valid JSON: {first['msg']}"
    else:
        msg = f"{first['field'] or 'body'}: {first['msg']}" + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
    return ApiError(422, msg, detail=errs[:50])


def install(app: FastAPI) -> None:
    """The handlers that give every error the ErrorResponse shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        if exc.status == 422:
            request.scope.setdefault("state", {})["outcome"] = "invalid"
        return error_response(exc.status, exc.message, request_id(request), exc.headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):  # query parameters
        return await _api_error(request, invalid(list(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):  # 404, 405
        return error_response(exc.status_code, str(exc.detail), request_id(request), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        request.scope.setdefault("state", {})["error"] = f"{type(exc).__name__}: {exc}"
        jsonlog.event("unhandled exception", level=40, error=f"{type(exc).__name__}: {exc}",
                      traceback="".join(traceback.format_exception(exc)))
        return error_response(500, "internal error; the server log has the details", request_id(request))
