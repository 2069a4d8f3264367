"""What each RL framework release can run: the capability catalog (capabilities.yaml, every entry
with its source) and the predicates over it (rules.py) that the solver and the exporters share."""
from rlsolve.frameworks.catalog import FRAMEWORKS, FrameworkCaps, capabilities
from rlsolve.frameworks.rules import Verdict, generation_ok, hosting_ok, mode_ok, placement_ok, training_ok

__all__ = ["FRAMEWORKS", "FrameworkCaps", "capabilities", "Verdict", "generation_ok", "hosting_ok", "mode_ok", "placement_ok",
           "training_ok"]
