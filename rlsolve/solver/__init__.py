"""The solver: the rule table (rules.py), the scored candidate tables (candidates.py), the
CP-SAT program (program.py), and `solve` / `search` (api.py) that put them together."""
from rlsolve.solver.api import Search, cand_layout, make_program, search, solve

__all__ = ["Search", "cand_layout", "make_program", "search", "solve"]
