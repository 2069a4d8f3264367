"""Brute-force oracle: try every (generation, training, mode) triple of the candidate sets
directly, scoring each with the performance model's `combine` (not with the CP-SAT
formulation). Used by the tests and the oracle benchmark on small instances."""
from __future__ import annotations

from rlsolve.perf.step import combine
from rlsolve.resolve import Problem
from rlsolve.solver.candidates import Candidates, modes_allowed
from rlsolve.solver.scale import time_units


def brute_force(problem: Problem, cands: Candidates) -> tuple[int, tuple | None]:
    """(best step in ms, (gen id, train id, mode)) over all legal triples."""
    n = problem.pool.n_gpus
    aux = [x for x in ("reference", "reward") if getattr(problem, x) is not None]
    best: tuple[int, tuple | None] = (2**62, None)
    for mode in modes_allowed(problem):
        kind = "colocated" if mode == "colocated" else "disagg"
        for g in cands.gen:
            if g.mode != kind:
                continue
            for t in cands.train:
                if t.mode != kind:
                    continue
                if kind == "colocated" and t.reserved_gb > g.reserved_gb:
                    continue
                if kind == "disagg" and g.gpus + t.gpus > n:
                    continue
                if any((a in g.hosts) + (a in t.hosts) != 1 for a in aux):
                    continue
                step = _step_ms(problem, mode, g, t)
                if step < best[0]:
                    best = (step, (g.id, t.id, mode))
    return best


def _step_ms(problem: Problem, mode: str, g, t) -> int:
    """The step of a candidate pair in the program's integer units, term by term, from the
    rounded times the program sees (so ties and rounding match exactly)."""
    tg, tt = time_units(g.time), time_units(t.time)
    if mode == "colocated":
        return tg + tt
    recv, send = time_units(g.sync), time_units(t.send)
    if mode == "sync":
        return tg + max(recv, send) + tt
    return max(tg + recv, tt + send - recv, tt)


def combine_step(problem: Problem, mode: str, g, t) -> float:
    """The same pair scored in floats by perf.step.combine (checks the integer program's terms)."""
    return combine(problem, mode, g.side, t.side, offload_states=t.offload_states).step
