"""Brute-force oracle: try every (generation, training, mode) triple of the candidate sets
directly, scoring each with the performance model's `combine` (not with the CP-SAT
formulation). Used by the tests and the oracle benchmark on small instances."""
from __future__ import annotations

from rlsolve.perf.step import combine
from rlsolve.resolve import Problem
from rlsolve.solver.candidates import Candidates, modes_allowed
from rlsolve.solver.scale import time_units


def legal_triples(problem: Problem, cands: Candidates):
    """Every (generation, training, mode, auxiliary-or-None) choice the rules allow, checked
    in plain Python."""
    aux = [x for x in ("reference", "reward") if getattr(problem, x) is not None]
    for mode in modes_allowed(problem):
        kind = "colocated" if mode == "colocated" else "disagg"
        for g in cands.gen:
            if g.mode != kind:
                continue
            for t in cands.train:
                if t.mode != kind:
                    continue
                if kind == "colocated" and (t.reserved_gb > g.reserved_gb or t.pool != g.pool or t.gpus != g.gpus):
                    continue
                for a in [None, *cands.aux]:
                    hosts = a.hosts if a is not None else frozenset()
                    if any((m in g.hosts) + (m in t.hosts) + (m in hosts) != 1 for m in aux):
                        continue
                    if not _fits_pools(problem, g, t, a, kind):
                        continue
                    yield g, t, mode, a


def brute_force(problem: Problem, cands: Candidates, objective: str = "throughput") -> tuple[int, tuple | None]:
    """(best objective in the program's integer units, (gen id, train id, mode, aux)) over all
    legal triples: step in ms for throughput, (milli-dollars per hour) x ms for cost."""
    best: tuple[int, tuple | None] = (2**62, None)
    budget = problem.spec.constraints.max_price_per_hour_usd
    for g, t, mode, a in legal_triples(problem, cands):
        rate = rate_milli(problem, g, t, mode, a)
        if budget is not None and rate > int(budget * 1000):
            continue
        step = _step_ms(problem, mode, g, t, a)
        value = step * rate if objective == "cost" else step
        if value < best[0]:
            best = (value, (g.id, t.id, mode, a.id if a is not None else None))
    return best


def rate_milli(problem: Problem, g, t, mode: str, a=None) -> int:
    price = [round(p.price_per_gpu_hour_usd * 1000) for p in problem.pools]
    return (price[g.pool] * g.gpus + (0 if mode == "colocated" else price[t.pool] * t.gpus)
            + (price[a.pool] * a.gpus if a is not None else 0))


def _fits_pools(problem: Problem, g, t, a=None, kind: str = "disagg") -> bool:
    used = [0] * len(problem.pools)
    used[g.pool] += g.gpus
    if kind == "disagg":
        used[t.pool] += t.gpus
    if a is not None:
        used[a.pool] += a.gpus
    return all(u <= p.n_gpus for u, p in zip(used, problem.pools))


def _step_ms(problem: Problem, mode: str, g, t, a=None) -> int:
    """The step of a choice in the program's integer units, term by term, from the rounded
    times the program sees (so ties and rounding match exactly)."""
    tg, tt = time_units(g.time), time_units(t.time) + (time_units(a.time) if a is not None else 0)
    if mode == "colocated":
        return tg + tt
    recv, send = time_units(g.sync), time_units(t.send)
    if mode == "sync":
        return tg + max(recv, send) + tt
    return max(tg + recv, tt + send - recv, tt)


def combine_step(problem: Problem, mode: str, g, t, a=None) -> float:
    """The same choice scored in floats by perf.step.combine (checks the integer program's terms)."""
    return combine(problem, mode, g.side, t.side, offload_states=t.offload_states,
                   pool_train=problem.pools[t.pool], pool_gen=problem.pools[g.pool],
                   aux=a.side if a is not None else None).step
