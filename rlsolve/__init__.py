"""rlsolve: plan the GPU layout of an LLM reinforcement-learning job with CP-SAT."""
from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.spec import Spec, load_spec

__version__ = "0.1.0"


def solve(spec, objective: str | None = None, **solver_options):
    """Solve a spec (path, dict or Spec) and return the optimal Plan. Pure."""
    from rlsolve.solver import solve as _solve
    return _solve(spec, objective=objective, **solver_options)


def estimate(spec, layout):
    """Score a given layout (a Plan, a Layout, or a dict/path with its layout sections)."""
    from rlsolve.solver.estimate import estimate as _estimate
    return _estimate(spec, layout)


__all__ = ["InfeasibleError", "NoAnswerError", "SpecError", "Spec", "load_spec", "solve", "estimate", "__version__"]
