"""The work a request hands to the pool: plain functions of JSON-able payloads that call the
public API (`rlsolve.solve`, `rlsolve.estimate`, `rlsolve.whatif.compare`,
`rlsolve.export.export_plan`) and return JSON-able outcomes. They run in a worker process
(or thread), so they never raise: every outcome is a dict with a `status`:

- ``ok``: ``result`` is the answer body;
- ``spec_error``: ``field`` and ``message`` (SpecError: HTTP 422);
- ``infeasible``: ``reasons`` (InfeasibleError: HTTP 409);
- ``not_implemented``: ``message`` (an optional module is missing: HTTP 501);
- ``internal``: ``message`` and ``traceback`` (a bug: HTTP 500, logged in full).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import traceback
from typing import Any, Callable

# The time terms of a plan, in the order `rlsolve explain` prints them.
TIME_TERMS = ("step", "prefill", "decode", "old_logprob", "reference", "reward", "value", "train", "weight_sync",
              "switch")


def plan_json(plan: Any) -> dict[str, Any]:
    """The plan exactly as `rlsolve solve --format json` prints it."""
    from rlsolve.cli.render import plan_dict
    return plan_dict(plan)


def jsonable(value: Any) -> Any:
    """Best-effort conversion of whatever an optional module returns into JSON data."""
    from pydantic import BaseModel
    if isinstance(value, BaseModel):
        from rlsolve.plan import Plan
        return plan_json(value) if isinstance(value, Plan) else value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    for attr in ("to_dict", "as_dict", "model_dump"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return jsonable(fn())
    if hasattr(value, "__fspath__"):
        return str(value)
    return str(value)


def optional_function(module: str, name: str) -> tuple[Callable | None, str]:
    """(function, "") when `module.name` imports, else (None, why)."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        return None, f"{module} is not available in this installation ({e}); this endpoint answers 501 until it is"
    fn = getattr(mod, name, None)
    if not callable(fn):
        return None, f"{module} has no function {name}(); this endpoint answers 501 until it does"
    return fn, ""


# --- tasks ------------------------------------------------------------------------------------

def _solve(p: dict[str, Any]) -> dict[str, Any]:
    import rlsolve
    plan = rlsolve.solve(rlsolve.load_spec(p["spec"]), objective=p.get("objective"), **p.get("options", {}))
    return plan_json(plan)


def _estimate(p: dict[str, Any]) -> dict[str, Any]:
    import rlsolve
    return plan_json(rlsolve.estimate(rlsolve.load_spec(p["spec"]), p["layout"]))


def differences(best: Any, other: Any) -> list[dict[str, Any]]:
    """Term-by-term comparison: your layout minus the optimal plan (seconds, tokens/s, GB).

    `significant` marks a time term that differs by more than 0.5 % of the optimal step
    (the threshold `rlsolve explain` prints at)."""
    rows: list[dict[str, Any]] = []
    step = max(best.time_s.step, 1e-9)
    for k in TIME_TERMS:
        a, b = getattr(other.time_s, k), getattr(best.time_s, k)
        rows.append({"term": f"time_s.{k}", "unit": "s", "plan": b, "layout": a, "delta": round(a - b, 6),
                     "significant": abs(a - b) > 0.005 * step})
    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s"):
        a, b = getattr(other.throughput, k), getattr(best.throughput, k)
        rows.append({"term": f"throughput.{k}", "unit": k.split("_per_")[0] + "/s", "plan": b, "layout": a,
                     "delta": round(a - b, 6), "significant": abs(a - b) > 0.005 * max(abs(b), 1e-9)})
    for role in ("generation", "training"):
        a = getattr(other.memory_gb_per_gpu, role).total
        b = getattr(best.memory_gb_per_gpu, role).total
        rows.append({"term": f"memory_gb_per_gpu.{role}.total", "unit": "GB", "plan": b, "layout": a,
                     "delta": round(a - b, 6), "significant": abs(a - b) > 0.005 * max(abs(b), 1e-9)})
    return rows


def _explain(p: dict[str, Any]) -> dict[str, Any]:
    import rlsolve
    spec = rlsolve.load_spec(p["spec"])
    best = rlsolve.solve(spec, objective=p.get("objective"), **p.get("options", {}))
    out: dict[str, Any] = {"plan": plan_json(best), "explanation": list(best.explanation), "layout": None,
                           "layout_fits": None, "layout_reasons": [], "differences": [], "summary": ""}
    if p.get("layout") is None:
        out["summary"] = (f"optimal: {best.throughput.tokens_per_s:,.0f} tokens/s, step {best.time_s.step:,.1f} s, "
                          f"{best.pipeline.mode}")
        return out
    try:
        other = rlsolve.estimate(spec, p["layout"])
    except rlsolve.InfeasibleError as e:
        out["layout_fits"] = False
        out["layout_reasons"] = list(e.reasons)
        out["summary"] = "your layout does not fit: " + "; ".join(e.reasons)
        return out
    out.update(layout=plan_json(other), layout_fits=True, differences=differences(best, other),
               summary=(f"your layout: {other.throughput.tokens_per_s:,.0f} tokens/s, step {other.time_s.step:,.1f} s "
                        f"vs {best.time_s.step:,.1f} s"))
    return out


# rlsolve.whatif.compare keyword names, matched against its signature (a mismatch answers 501, not 500).
_COMPARE_ALIASES = {"gpus": ("gpus", "gpu"), "nodes": ("nodes", "node_counts"),
                    "networks": ("networks", "network"), "objective": ("objective",)}
_COMPARE_FIXED = {"executor": "local", "workers": 1, "cache_dir": False, "progress": None}


def _compare(p: dict[str, Any]) -> dict[str, Any]:
    import rlsolve
    fn, why = optional_function("rlsolve.whatif", "compare")
    if fn is None:
        return {"status": "not_implemented", "message": why}
    spec = rlsolve.load_spec(p["spec"])
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    var_kw = any(x.kind is inspect.Parameter.VAR_KEYWORD for x in params.values())
    kwargs: dict[str, Any] = {}
    for key, names in _COMPARE_ALIASES.items():
        value = p.get(key)
        if value is None:
            continue
        name = next((n for n in names if n in params), names[0] if var_kw else None)
        if name is None:
            return {"status": "not_implemented",
                    "message": f"rlsolve.whatif.compare() takes no {key!r} argument in this installation"}
        kwargs[name] = value
    # one request, one worker: no nested process pool, no cache files, no progress bar
    for name, value in _COMPARE_FIXED.items():
        if name in params:
            kwargs[name] = value
    return {"status": "ok", "result": {"result": jsonable(fn(spec, **kwargs))}}


def _export(p: dict[str, Any]) -> dict[str, Any]:
    import rlsolve
    fn, why = optional_function("rlsolve.export", "export_plan")
    if fn is None:
        return {"status": "not_implemented", "message": why}
    spec = rlsolve.load_spec(p["spec"])
    solved = None
    if p.get("plan") is not None:
        plan: Any = p["plan"]  # the layout sections of a plan (export_plan validates them against the spec)
    else:
        plan = solved = rlsolve.solve(spec, objective=p.get("objective"), **p.get("options", {}))
    out = fn(plan, spec, p["target"])
    # rlsolve.export returns ExportResult(text, warnings, filename, target, framework); be lenient
    warnings: list[str] = []
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], (list, tuple)):
        out, warnings = out[0], [str(w) for w in out[1]]
    text = out if isinstance(out, str) else getattr(out, "text", None)
    if not isinstance(out, (str, dict)):
        warnings = warnings or [str(w) for w in (getattr(out, "warnings", None) or [])]
    return {"status": "ok", "result": {
        "target": p["target"], "content": text if isinstance(text, str) else None,
        "data": None if isinstance(text, str) else jsonable(out),
        "filename": getattr(out, "filename", None) or None, "framework": getattr(out, "framework", None) or None,
        "warnings": warnings, "plan": None if solved is None else plan_json(solved)}}


TASKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "solve": _solve, "estimate": _estimate, "explain": _explain, "compare": _compare, "export": _export,
}


def run_task(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run one task; map the API's errors to outcomes. Never raises."""
    from rlsolve.errors import InfeasibleError, SpecError
    try:
        result = TASKS[kind](payload)
    except SpecError as e:
        full = str(e)
        msg = full[len(e.field) + 2:] if e.field and full.startswith(f"{e.field}: ") else full
        return {"status": "spec_error", "field": e.field, "message": msg}
    except InfeasibleError as e:
        return {"status": "infeasible", "reasons": list(e.reasons)}
    except Exception as e:  # a bug: the HTTP layer answers 500 and logs the traceback
        return {"status": "internal", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    if isinstance(result, dict) and result.get("status") in ("ok", "not_implemented"):
        return result
    return {"status": "ok", "result": result}


def precheck(kind: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The cheap part of the input checks (catalog names, layout rules: milliseconds), run on a
    server thread before a request takes a worker, so invalid input never waits behind solves
    nor occupies a solver slot. A SpecError outcome, or None (let the worker decide: anything
    unexpected here is left to the full run, which reports it)."""
    from rlsolve.errors import SpecError
    try:
        import rlsolve
        spec = rlsolve.load_spec(payload["spec"])
        layout = payload.get("plan") if kind == "export" else payload.get("layout")
        if layout is not None and kind in ("estimate", "explain", "export"):
            from rlsolve.resolve import resolve
            from rlsolve.solver.estimate import check_layout, to_layout
            check_layout(resolve(spec), to_layout(layout))
    except SpecError as e:
        full = str(e)
        msg = full[len(e.field) + 2:] if e.field and full.startswith(f"{e.field}: ") else full
        return {"status": "spec_error", "field": e.field, "message": msg}
    except Exception:  # noqa: BLE001 - not ours to judge here
        return None
    return None


def warm() -> None:
    """Import the solver and load the catalogs so the first request is not slower."""
    import rlsolve
    import rlsolve.solver  # noqa: F401
    import rlsolve.solver.estimate  # noqa: F401
    from rlsolve.hardware_db import list_gpus
    from rlsolve.models import list_models
    list_gpus()
    list_models()
    _ = rlsolve.__version__
