"""`python -m rlsolve.service [options]`: serve the HTTP API until SIGTERM. `rlsolve serve`
runs this program (the CLI and the service never import each other). FastAPI and uvicorn
are the optional extra `serve`: without them it exits 2 naming the install command."""
from __future__ import annotations

import sys

import click

from rlsolve.service.config import ServiceConfig

EXIT_INVALID = 2


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback needs a bearer token.")
@click.option("--port", default=8000, show_default=True, type=int, help="TCP port (0: any free port).")
@click.option("--workers", default=2, show_default=True, type=int, help="Solves running at once (worker processes).")
@click.option("--queue", "max_queue", default=32, show_default=True, type=int,
              help="Requests that may wait for a worker; beyond that the answer is 503 with Retry-After.")
@click.option("--token", default=None, envvar="RLSOLVE_TOKEN", show_envvar=True,
              help="Bearer token clients must send (Authorization: Bearer TOKEN); required off loopback.")
@click.option("--time-limit", "default_time_limit", default=10.0, show_default=True, type=float,
              help="CP-SAT time limit of a request that sets none, seconds.")
@click.option("--max-time-limit", default=60.0, show_default=True, type=float,
              help="Cap on a request's time limit, seconds.")
@click.option("--grace", "grace_s", default=60.0, show_default=True, type=float,
              help="Wall-clock seconds a request may run beyond its CP-SAT time limits (enumeration, "
                   "explanations) before its worker is stopped and the answer is 504.")
@click.option("--max-gpus", default=16384, show_default=True, type=int,
              help="Largest cluster (GPUs in all) a request may describe; larger ones get 422.")
@click.option("--executor", type=click.Choice(["process", "thread"]), default="process", show_default=True,
              help="process: workers are processes, a runaway solve is stopped at its budget; thread: in-process.")
def serve(host: str, port: int, workers: int, max_queue: int, token: str | None, default_time_limit: float,
          max_time_limit: float, grace_s: float, max_gpus: int, executor: str) -> None:
    """Serve the HTTP API (POST /v1/solve, /v1/estimate, /v1/explain, /v1/compare, /v1/export;
    GET /v1/gpus, /v1/models, /healthz, /docs) until SIGTERM or Ctrl-C."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        click.echo(f"error: serve needs FastAPI and uvicorn ({e.name} is missing); install them with "
                   f"pip install \"rlsolve[serve]\"", err=True)
        sys.exit(EXIT_INVALID)
    from rlsolve.service.server import run  # the serve extra, checked above
    config = ServiceConfig(host=host, port=port, workers=workers, max_queue=max_queue, token=token or None,
                           executor=executor, default_time_limit_s=default_time_limit,
                           max_time_limit_s=max_time_limit, grace_s=grace_s,
                           max_gpus=max_gpus)
    try:
        config.check()
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_INVALID)
    run(config)


if __name__ == "__main__":
    serve(prog_name="rlsolve serve")
