"""Write a picture to a file, choosing the format by the file name: .svg is written with the
standard library only; .png needs matplotlib (`pip install 'rlsolve[plot]'`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rlsolve.errors import SpecError
from rlsolve.plan import Plan

INSTALL = "pip install 'rlsolve[plot]'"


def _kind(path: "str | os.PathLike", field: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".svg", ".png"):
        return suffix[1:]
    raise SpecError(f"{path}: name the picture .svg or .png (.svg needs nothing, .png needs matplotlib)", field=field)


def _png_module(field: str):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecError(f"PNG output needs matplotlib: {INSTALL} (or write .svg, which needs nothing)",
                        field=field) from None
    from rlsolve.whatif import png
    return png


def check_picture_path(path: "str | os.PathLike", field: str) -> None:
    """Refuse, before any work is done, a picture name the writers below cannot serve: a
    suffix other than .svg/.png, or .png without matplotlib."""
    if _kind(path, field) == "png":
        _png_module(field)


def _write_text(path: "str | os.PathLike", text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


def write_sweep_plot(rows: Sequence, path: "str | os.PathLike", field: str = "--plot") -> None:
    """Throughput and cost against cluster size per GPU type, Pareto front marked."""
    if _kind(path, field) == "png":
        _png_module(field).sweep_png(rows, str(path))
    else:
        from rlsolve.whatif.svg import sweep_svg
        _write_text(path, sweep_svg(rows))


def write_timeline(plan: Plan, path: "str | os.PathLike", with_memory: bool = True, field: str = "--timeline") -> None:
    """One RL step per GPU group (and, by default, the per-GPU memory below it)."""
    if _kind(path, field) == "png":
        _png_module(field).timeline_png(plan, str(path), with_memory=with_memory)
    else:
        from rlsolve.whatif.svg import timeline_svg
        _write_text(path, timeline_svg(plan, with_memory=with_memory))


def write_memory(plan: Plan, path: "str | os.PathLike", field: str = "--memory") -> None:
    """Per-GPU memory as stacked bars per role."""
    if _kind(path, field) == "png":
        _png_module(field).memory_png(plan, str(path))
    else:
        from rlsolve.whatif.svg import memory_svg
        _write_text(path, memory_svg(plan))
