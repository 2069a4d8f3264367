"""`rlsolve serve`: the HTTP API for schedulers (FastAPI + uvicorn, the `serve` extra).

    from rlsolve.service import ServiceConfig, create_app, run
    app = create_app(ServiceConfig(workers=2))      # an ASGI app; the pool starts with it
    run(ServiceConfig(host="127.0.0.1", port=8000))  # serve until SIGTERM

The service calls the same functions as the library (`rlsolve.solve`, `rlsolve.estimate`);
see docs/service.md for the endpoints and the status-code contract."""
from __future__ import annotations

from typing import Any

from rlsolve.service.config import TOKEN_ENV, ServiceConfig, is_loopback

__all__ = ["ServiceConfig", "TOKEN_ENV", "create_app", "is_loopback", "run"]


def create_app(config: ServiceConfig | None = None, **kwargs: Any):
    from rlsolve.service.app import create_app as _create_app
    return _create_app(config, **kwargs)


def run(config: ServiceConfig) -> None:
    from rlsolve.service.server import run as _run
    _run(config)
