"""Write a picture to a file, the format chosen by the file name: .svg, .png or .pdf. Every
format is the same matplotlib drawing (figures.py); matplotlib is the optional extra `plot`
(`pip install 'rlsolve[plot]'`), and without it a picture is refused with that command
(SpecError, CLI exit 2) before anything is written."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from rlsolve.errors import SpecError
from rlsolve.hardware_db import find_gpu
from rlsolve.plan import Plan
from rlsolve.spec import load_spec

INSTALL = "pip install 'rlsolve[plot]'"
FORMATS = ("svg", "png", "pdf")
NO_DATE = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


def picture_format(path: "str | os.PathLike", field: str) -> str:
    """svg | png | pdf from the file name; anything else is a SpecError naming `field`."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in FORMATS:
        return suffix
    raise SpecError(f"{path}: name the picture .svg, .png or .pdf", field=field)


def _figures(field: str):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecError(f"pictures need matplotlib: {INSTALL}", field=field) from None
    from rlsolve.whatif import figures
    return figures


def check_picture_path(path: "str | os.PathLike", field: str) -> None:
    """Refuse, before any work is done, a picture the writers below cannot serve: a name
    other than .svg/.png/.pdf, or any picture without matplotlib."""
    picture_format(path, field)
    _figures(field)


def _save(fig: Any, path: "str | os.PathLike", fmt: str) -> None:
    # Text stays text in the SVG (searchable, and the tests read it); no timestamps or random
    # ids, so the same plan gives the same file.
    from matplotlib import rc_context
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "rlsolve"}):
        fig.savefig(path, format=fmt, metadata=NO_DATE.get(fmt))


def pool_gpus(spec: Any) -> dict[str, str]:
    """Pool name -> GPU catalog name of a spec (path, dict or Spec), to name the GPU types in
    the pictures; {} without a spec."""
    if spec is None:
        return {}
    s = load_spec(spec)
    if s.cluster.pools:
        return {p.name: find_gpu(p.gpu).name for p in s.cluster.pools}
    return {"main": find_gpu(s.cluster.gpu).name}


def write_sweep_plot(rows: Sequence, path: "str | os.PathLike", field: str = "--plot") -> None:
    """Throughput and cost against cluster size per GPU type and network, Pareto front marked."""
    fmt = picture_format(path, field)
    _save(_figures(field).sweep_figure(rows), path, fmt)


def write_timeline(plan: Plan, path: "str | os.PathLike", with_memory: bool = True, field: str = "--timeline",
                   spec: Any = None) -> None:
    """One RL step per GPU group (and, by default, the per-GPU memory below it). With the
    spec, each group names its pool's GPU type."""
    fmt = picture_format(path, field)
    figures = _figures(field)
    _save(figures.timeline_figure(plan, with_memory=with_memory, gpu_names=pool_gpus(spec)), path, fmt)


def write_memory(plan: Plan, path: "str | os.PathLike", field: str = "--memory", spec: Any = None) -> None:
    """Per-GPU memory as stacked bars per role under each GPU's capacity."""
    fmt = picture_format(path, field)
    figures = _figures(field)
    _save(figures.memory_figure(plan, gpu_names=pool_gpus(spec)), path, fmt)
