"""Add every sub-command module's `COMMANDS` to the `rlsolve` group."""
from __future__ import annotations

import importlib
import pkgutil

import click

from rlsolve.cli import commands


def register(group: click.Group) -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            group.add_command(command)
