"""`rlsolve serve`: runs the service's own program, `python -m rlsolve.service`, with the same
arguments. A process boundary rather than an import: the CLI and the service never import
each other, and the server gets the process (signals, exit code) to itself."""
from __future__ import annotations

import os
import subprocess
import sys

import click


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
               add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Serve the HTTP API (POST /v1/solve, /v1/estimate, /v1/explain, /v1/compare, /v1/export;
    GET /v1/gpus, /v1/models, /healthz, /docs) until SIGTERM. `rlsolve serve --help` lists the
    options (--host, --port, --workers, --queue, --token, --time-limit, ...)."""
    argv = [sys.executable, "-m", "rlsolve.service", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(sys.executable, argv)  # the server replaces this process: SIGTERM reaches it directly
    sys.exit(subprocess.call(argv))


COMMANDS = [serve]
