"""rlsolve: plan the GPU layout of an LLM reinforcement-learning job with CP-SAT.

The public API: `load_spec`, `solve`, `estimate`, `Spec` and the three errors. The schema
and the solver load on first use (PEP 562), so `rlsolve --help` and the catalog commands
start without building the pydantic models or importing OR-Tools."""
from importlib import import_module

from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError

__version__ = "0.1.0"

_LAZY = {"Spec": "rlsolve.spec", "load_spec": "rlsolve.spec", "solve": "rlsolve.solver",
         "estimate": "rlsolve.solver.estimate"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlsolve' has no attribute {name!r}")


__all__ = ["InfeasibleError", "NoAnswerError", "SpecError", "Spec", "load_spec", "solve", "estimate", "__version__"]
