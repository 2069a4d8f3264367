"""Export a plan as ready configs for the frameworks that run RL.

    result = export_plan(plan, spec, "verl")     # -> ExportResult(text, warnings, filename)

`plan` is a Plan, a Layout, a dict or a plan/layout YAML path; `spec` is the cluster spec it was
solved for (a path, a dict or a Spec): the plan does not carry the model ids, the batch sizes,
the lengths or the node size, so an export needs both. Targets and the releases whose own files
the tests check every exported key against: see `TARGETS` and `PINS`. Pure: no printing, no files.
"""
from rlsolve.export.api import TARGETS, export_plan, prepare
from rlsolve.export.common import PINS, ExportResult

__all__ = ["TARGETS", "PINS", "ExportResult", "export_plan", "prepare"]
