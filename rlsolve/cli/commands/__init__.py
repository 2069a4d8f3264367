"""Sub-commands that live in their own modules (export, validate, serve, compare, cases ...).

Each module here defines `COMMANDS`, a list of click commands; `rlsolve.cli.main` registers
them all. Modules import their heavy dependencies inside the command functions, so
`rlsolve --help` stays fast and works without the optional extras."""
from __future__ import annotations

import importlib
import pkgutil

import click


def register(group: click.Group) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            group.add_command(command)
