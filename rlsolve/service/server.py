"""Run the service with uvicorn: `rlsolve serve` calls `run(config)`.

Shutdown: on SIGTERM or SIGINT uvicorn stops accepting connections, lets in-flight requests
finish (at most `graceful_timeout_s`), then the app's lifespan drains the worker pool."""
from __future__ import annotations

import logging
import signal

from rlsolve.service.config import ServiceConfig


def run(config: ServiceConfig) -> None:
    """Serve until SIGTERM/SIGINT. Raises ValueError for an unsafe configuration."""
    import uvicorn

    from rlsolve.service import jsonlog
    from rlsolve.service.app import create_app

    config.check()
    jsonlog.setup(logging.INFO)
    app = create_app(config)
    uv = uvicorn.Config(app, host=config.host, port=config.port, log_config=None, access_log=False,
                        timeout_graceful_shutdown=config.graceful_timeout_s, lifespan="on",
                        proxy_headers=False, server_header=False, limit_concurrency=None)
    class _Server(uvicorn.Server):
        """uvicorn re-raises the signal after its graceful shutdown (the process then dies by
        SIGTERM); a drained server exits 0 instead, which is what supervisors expect."""

        def handle_exit(self, sig, frame):  # type: ignore[override]
            if not self.should_exit:
                jsonlog.event("signal received; draining", signal=signal.Signals(sig).name,
                              graceful_timeout_s=config.graceful_timeout_s)
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    server = _Server(uv)
    jsonlog.event("starting", host=config.host, port=config.port, workers=config.workers,
                  executor=config.executor, auth=bool(config.token))
    server.run()
