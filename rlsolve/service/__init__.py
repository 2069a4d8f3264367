"""The HTTP API for schedulers (FastAPI + uvicorn, the `serve` extra).

    from rlsolve.service.app import create_app      # an ASGI app; the worker pool starts with it
    from rlsolve.service.server import run          # serve until SIGTERM (`rlsolve serve`)
    app = create_app(ServiceConfig(workers=2))
    run(ServiceConfig(host="127.0.0.1", port=8000))

`python -m rlsolve.service` is the server program (`rlsolve serve` runs it). The routes call
the same functions as the library (`rlsolve.solve`, `rlsolve.estimate`, ...); see
docs/service.md for the endpoints and the status-code contract. Only the FastAPI-free
settings are re-exported here, so the package imports without the extra."""
from rlsolve.service.config import TOKEN_ENV, ServiceConfig, is_loopback

__all__ = ["ServiceConfig", "TOKEN_ENV", "is_loopback"]
