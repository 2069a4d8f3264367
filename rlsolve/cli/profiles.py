"""`--profile` files (rlsolve calibrate, calibrate --from-log): read and checked once for every
command that takes one (solve, cases, calibrate --from-log --profile). Its own module so the
log commands (cli/commands/logs.py), which `explain --log` in cli/main.py calls, need not
import cli/main.py back."""
from __future__ import annotations

import math

from rlsolve.errors import SpecError, did_you_mean
from rlsolve.reader import read_yaml

# what a profile may override: the catalog's efficiency fields, plus the network's bus bandwidth;
# a profile fitted on a run's log (calibrate --from-log) adds the framework factors of rlsolve.logfit.FACTORS
PROFILE_KEYS = ("gemm_fraction", "gemm_fp8_fraction", "gemm_half_size_flops", "attention_fraction", "hbm_fraction",
                "nvlink_busbw_fraction", "network_busbw_fraction", "kernel_launch_us", "decode_host_us_per_seq")


def load_profile(path: str | None) -> dict | None:
    """A calibrated profile: {profile: {GPU name: {efficiency key: positive number}}} (or the
    inner mapping alone). Anything else, such as a spec file, is refused naming the fix."""
    if not path:
        return None
    # inside, as the CLI's commands import the catalogs and the model: `rlsolve --help` stays fast
    from rlsolve.hardware_db import find_gpu
    from rlsolve.logfit import FACTORS
    keys = PROFILE_KEYS + tuple(FACTORS)
    may_be_zero = {k for k, (low, _, _) in FACTORS.items() if low == 0}  # step_overhead_s: a run with none
    data = read_yaml(path, what="--profile")
    prof = data.get("profile", data)
    fix = "a profile maps GPU names to measured efficiencies; write one with rlsolve calibrate --out profile.yaml"
    if {"cluster", "model", "rl"} & set(data):
        raise SpecError(f"{path} is a spec (it has {', '.join(sorted({'cluster', 'model', 'rl'} & set(data)))}), "
                        f"not a profile; {fix}", field="--profile")
    if not isinstance(prof, dict) or not prof:
        raise SpecError(f"{path} is not a profile; {fix}", field="--profile")
    out: dict[str, dict[str, float]] = {}
    for gpu, values in prof.items():
        where = f"--profile: {gpu}"
        if not isinstance(gpu, str) or not isinstance(values, dict):
            raise SpecError(f"{path} is not a profile: {gpu!r} is not a GPU with its efficiencies; {fix}",
                            field="--profile")
        name = find_gpu(gpu, field=where).name
        for key, value in values.items():
            if key not in keys:
                raise SpecError(f"unknown efficiency {key!r}; {did_you_mean(str(key), keys)}", field=where)
            zero_ok = key in may_be_zero
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
                raise SpecError(f"{key} must be a {'non-negative' if zero_ok else 'positive'} number, got {value!r}",
                                field=where)
        out[name] = {k: float(v) for k, v in values.items()}
    return out
