"""The work a request hands to the pool: plain functions of JSON-able payloads that call the
public API (`rlsolve.solve`, `rlsolve.estimate`, `rlsolve.whatif.compare`,
`rlsolve.export.export_plan`) and present the answer with `rlsolve.present`, as the CLI
does. They run in a worker process (or thread), so they never raise: every outcome is a
dict with a `status`:

- ``ok``: ``result`` is the answer body;
- ``spec_error``: ``field`` and ``message`` (SpecError: HTTP 422);
- ``infeasible``: ``reasons`` (InfeasibleError: HTTP 409);
- ``no_answer``: ``message`` and ``limit_s`` (NoAnswerError, out of time with the status
  unknown: HTTP 504);
- ``internal``: ``message`` and ``traceback`` (a bug: HTTP 500, logged in full).
"""
from __future__ import annotations

import traceback
from typing import Any, Callable

import rlsolve
from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.export import export_plan
from rlsolve.hardware_db import list_gpus
from rlsolve.models import list_models
from rlsolve.present import differences, layout_summary, misfit_summary, optimum_summary, plan_dict
from rlsolve.resolve import resolve
from rlsolve.solver.estimate import check_layout, to_layout
from rlsolve.whatif import compare


def _solve(p: dict[str, Any]) -> dict[str, Any]:
    return plan_dict(rlsolve.solve(rlsolve.load_spec(p["spec"]), objective=p.get("objective")))


def _estimate(p: dict[str, Any]) -> dict[str, Any]:
    return plan_dict(rlsolve.estimate(rlsolve.load_spec(p["spec"]), p["layout"]))


def _explain(p: dict[str, Any]) -> dict[str, Any]:
    spec = rlsolve.load_spec(p["spec"])
    best = rlsolve.solve(spec, objective=p.get("objective"))
    out: dict[str, Any] = {"plan": plan_dict(best), "explanation": list(best.explanation), "layout": None,
                           "layout_fits": None, "layout_reasons": [], "differences": [],
                           "summary": optimum_summary(best)}
    if p.get("layout") is None:
        return out
    try:
        other = rlsolve.estimate(spec, p["layout"])
    except InfeasibleError as e:
        return {**out, "layout_fits": False, "layout_reasons": list(e.reasons), "summary": misfit_summary(e.reasons)}
    return {**out, "layout": plan_dict(other), "layout_fits": True, "differences": differences(best, other),
            "summary": layout_summary(best, other)}


def _compare(p: dict[str, Any]) -> dict[str, Any]:
    # one request, one worker: no nested process pool, no cache files, no progress bar
    rows = compare(rlsolve.load_spec(p["spec"]), gpus=p.get("gpus"), nodes=p.get("nodes"),
                   networks=p.get("networks"), objective=p.get("objective"), workers=1, cache_dir=False)
    return {"result": [r.to_dict() for r in rows]}


def _export(p: dict[str, Any]) -> dict[str, Any]:
    spec = rlsolve.load_spec(p["spec"])
    solved = None if p.get("plan") is not None else rlsolve.solve(spec, objective=p.get("objective"))
    # a given plan: its layout sections (export_plan validates them against the spec)
    out = export_plan(p["plan"] if solved is None else solved, spec, p["target"])
    return {"target": p["target"], "content": out.text, "filename": out.filename, "framework": out.framework,
            "warnings": list(out.warnings), "plan": None if solved is None else plan_dict(solved)}


TASKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "solve": _solve, "estimate": _estimate, "explain": _explain, "compare": _compare, "export": _export,
}


def _spec_error(e: SpecError) -> dict[str, Any]:
    full = str(e)
    msg = full[len(e.field) + 2:] if e.field and full.startswith(f"{e.field}: ") else full
    return {"status": "spec_error", "field": e.field, "message": msg}


def run_task(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run one task; map the API's errors to outcomes. Never raises."""
    try:
        return {"status": "ok", "result": TASKS[kind](payload)}
    except SpecError as e:
        return _spec_error(e)
    except InfeasibleError as e:
        return {"status": "infeasible", "reasons": list(e.reasons)}
    except NoAnswerError as e:
        return {"status": "no_answer", "message": str(e), "limit_s": e.limit_s}
    except Exception as e:  # a bug: the HTTP layer answers 500 and logs the traceback
        return {"status": "internal", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def precheck(kind: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The cheap part of the input checks (catalog names, layout rules: milliseconds), run on a
    server thread before a request takes a worker, so invalid input never waits behind solves
    nor occupies a solver slot. A SpecError outcome, or None (let the worker decide: anything
    unexpected here is left to the full run, which reports it)."""
    try:
        spec = rlsolve.load_spec(payload["spec"])
        layout = payload.get("plan") if kind == "export" else payload.get("layout")
        if layout is not None and kind in ("estimate", "explain", "export"):
            check_layout(resolve(spec), to_layout(layout))
    except SpecError as e:
        return _spec_error(e)
    except Exception:  # noqa: BLE001 - not ours to judge here
        return None
    return None


def warm() -> None:
    """Load the catalogs so the first request is not slower (the solver is imported above)."""
    list_gpus()
    list_models()
