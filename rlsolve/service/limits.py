"""The service's input envelope: limits a request must satisfy on top of the spec schema.

The library takes any number the schema allows; a shared server should not. Values far
outside anything physical (a 5e-324 Gbit/s network, 10^18 nodes, `Infinity`) cannot describe
a real job and only reach corners of the arithmetic (underflow, unbounded enumeration), so
the service answers them 422 with the field path before any work starts:

- every number finite; a non-zero float at least 1e-9 and at most 1e15 in magnitude;
- every integer at most 10^9 in magnitude;
- the cluster at most `max_gpus` GPUs in all (ServiceConfig.max_gpus, `rlsolve serve --max-gpus`).
"""
from __future__ import annotations

import math
from typing import Any

MIN_FLOAT, MAX_FLOAT, MAX_INT = 1e-9, 1e15, 10**9


def _walk(value: Any, path: tuple) -> tuple[tuple, str] | None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return (path, f"{value} is outside the accepted range of integers (|n| <= {MAX_INT:,})") \
            if abs(value) > MAX_INT else None
    if isinstance(value, float):
        if not math.isfinite(value):
            return path, f"{value} is not a finite number"
        if value != 0 and not (MIN_FLOAT <= abs(value) <= MAX_FLOAT):
            return path, f"{value!r} is outside the accepted range ({MIN_FLOAT:g} <= |x| <= {MAX_FLOAT:g}, or 0)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if (hit := _walk(v, (*path, k))) is not None:
                return hit
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if (hit := _walk(v, (*path, i))) is not None:
                return hit
    return None


def check_numbers(data: Any, prefix: tuple = ()) -> dict | None:
    """The first number outside the envelope, as a FieldError dict (None: all fine)."""
    hit = _walk(data, prefix)
    if hit is None:
        return None
    path, msg = hit
    return {"loc": ["body", *path], "field": ".".join(map(str, path)), "msg": msg, "type": "out_of_service_range"}


def check_size(cluster: dict, max_gpus: int, prefix: tuple = ()) -> dict | None:
    """GPUs in the cluster (a missing gpus_per_node counts as 8, the usual server) <= max_gpus."""
    pools = cluster.get("pools") or [cluster]
    total = sum(int(p.get("nodes") or 0) * int(p.get("gpus_per_node") or 8) for p in pools)
    if total <= max_gpus:
        return None
    path = (*prefix, "cluster", "pools" if cluster.get("pools") else "nodes")
    return {"loc": ["body", *path], "field": ".".join(map(str, path)), "type": "out_of_service_range",
            "msg": f"the cluster has {total:,} GPUs; this server plans at most {max_gpus:,} (rlsolve serve --max-gpus)"}

