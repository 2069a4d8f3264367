"""Measure on the target device what a plan assumes (SPEC section 8).

`validate_plan` runs torch microbenchmarks at the plan's per-GPU shapes (training and
prefill GEMMs, training attention, a decode step, kernel launch, the peak memory, the
all-reduces), compares each with the model's assumption, re-scores the plan with the
measured efficiencies and returns it with a `validation` section. `calibrate` measures a
fixed set of shapes and returns the profile `solve(..., profile=...)` takes. Without a GPU
both run on the CPU at small shapes and say so. torch is imported lazily (rlsolve[bench])."""
from rlsolve.bench.api import calibrate, validate_plan

__all__ = ["validate_plan", "calibrate"]
