"""What-if studies for buying hardware: solve one RL job on many clusters and compare.

    rows = rlsolve.whatif.compare(spec, gpus=["H100-SXM-80GB", "B200-SXM-180GB"], nodes=[4, 8])

Each Row has the cluster, throughput, tokens/s per GPU, step time, the chosen mode and
degrees, dollars per million trained tokens, tokens/s per kW, and whether it is on the
throughput-cost Pareto front. `report.render(rows, fmt)` prints it; `pictures` draws it
(SVG, PNG or PDF, all drawn by matplotlib: the `plot` extra)."""
from rlsolve.whatif.pictures import (check_picture_path, picture_format, pool_gpus, write_memory, write_sweep_plot,
                                     write_timeline)
from rlsolve.whatif.report import FORMATS, render
from rlsolve.whatif.sweep import ClickProgress, Row, cache_key, compare, default_cache_dir, mark_pareto

__all__ = ["compare", "Row", "render", "FORMATS", "mark_pareto", "cache_key", "default_cache_dir", "ClickProgress",
           "write_sweep_plot", "write_timeline", "write_memory", "picture_format", "check_picture_path",
           "pool_gpus"]

