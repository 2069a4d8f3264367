"""The FastAPI dependencies every /v1/ route shares: the bearer token, known query parameters
only, and the body: at most `max_body_bytes`, JSON, decoded once and validated once (strict
types) into the route's model."""
from __future__ import annotations

import math
import secrets
from typing import Any, Callable

import pydantic_core
from fastapi import Request
from pydantic import BaseModel, ValidationError

from rlsolve.service.config import ServiceConfig
from rlsolve.service.errors import ApiError, invalid
from rlsolve.service.pool import SolverPool

DRAIN_BYTES = 16 * 1024 * 1024  # refused bodies up to this size are read to the end before the 413


def config(request: Request) -> ServiceConfig:
    return request.app.state.config


def pool(request: Request) -> SolverPool:
    return request.app.state.pool


async def require_token(request: Request) -> None:
    """With a token configured, `Authorization: Bearer <token>` (compared in constant time)."""
    token = config(request).token
    if not token:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode()):
        return
    raise ApiError(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
                   headers={"WWW-Authenticate": "Bearer"})


async def known_query_only(request: Request) -> None:
    """A misspelt query parameter (`?time_limit=5`) is an error, not silently ignored."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    allowed = {p.alias for p in dependant.query_params} if dependant is not None else set()
    unknown = [k for k in request.query_params if k not in allowed]
    if unknown:
        hint = f"allowed: {', '.join(sorted(allowed))}" if allowed else "this endpoint takes none"
        raise invalid([{"loc": ("query", k), "msg": f"unknown query parameter; {hint}", "type": "extra_forbidden"}
                       for k in unknown])


# --- the body ---------------------------------------------------------------------------------

async def _too_large(request: Request, limit: int, drain: bool) -> ApiError:
    # Read (and drop) the rest of a moderately large body first: a client still sending when
    # the connection closes sees a reset instead of this answer.
    drained = 0
    if drain:
        async for chunk in request.stream():
            drained += len(chunk)
            if drained > DRAIN_BYTES:
                break
    return ApiError(413, f"body larger than {limit:,} bytes", headers={"Connection": "close"})


async def read_body(request: Request, limit: int) -> bytes:
    """The body, at most `limit` bytes (413 at once from Content-Length, else while reading),
    sent as JSON (415 otherwise; no Content-Type is taken as JSON)."""
    length = request.headers.get("content-length")
    if length is not None:
        declared = int(length) if length.isdigit() else limit + 1
        if declared > limit:
            raise await _too_large(request, limit, drain=declared <= DRAIN_BYTES)
    ctype = request.headers.get("content-type", "")
    main_type = ctype.split(";")[0].strip().lower()
    if main_type and not (main_type == "application/json" or main_type.endswith("+json")):
        raise ApiError(415, f"send the body as JSON (Content-Type: application/json), not {ctype[:60]!r}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise await _too_large(request, limit, drain=True)
        chunks.append(chunk)
    request.scope.setdefault("state", {})["bytes_in"] = size
    return b"".join(chunks)


def _overflow(value: Any, path: tuple) -> tuple | None:
    """The path of a float that overflowed while decoding (1e400 -> inf), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        if (hit := _overflow(v, (*path, k))) is not None:
            return hit
    return None


def decode(data: bytes) -> Any:
    """JSON as RFC 8259 has it: NaN, Infinity and numbers beyond a double (1e400) are refused
    (422, json_invalid), though Python's and pydantic's parsers would take them."""
    try:
        value = pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as e:
        raise invalid([{"type": "json_invalid", "loc": ("body",), "msg": str(e)}]) from None
    if (path := _overflow(value, ())) is not None:
        where = ".".join(map(str, path)) or "the body"
        raise invalid([{"type": "json_invalid", "loc": ("body",),
                        "msg": f"{where}: a number beyond the range of a double is not a JSON number (RFC 8259)"}])
    return value


def json_body(model: type[BaseModel]) -> Callable:
    """A dependency giving the body as `model`: one read, one decode, one strict validation
    (JSON types are not coerced: true is not 1, "8" is not 8, 2.5 is not an integer)."""

    async def parse(request: Request) -> BaseModel:
        value = decode(await read_body(request, config(request).max_body_bytes))
        try:
            return model.model_validate(value, strict=True)
        except ValidationError as e:
            raise invalid([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None

    parse.__name__ = f"{model.__name__}_body"
    return parse
