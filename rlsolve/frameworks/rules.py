"""Predicates over the capability catalog: may the target framework run this generation layout,
this training layout, this placement in this mode? Each answers a `Verdict` whose reason names the
capability and its source, so a rejected shape explains itself. `caps=None` (target `any`) allows
everything. Pure functions of their arguments: the solver's enumeration and the exporters call them."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping

from rlsolve.frameworks.catalog import FrameworkCaps, capabilities
from rlsolve.frameworks.runtime import layout_strategy

OK_REASON = "allowed"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = OK_REASON

    def __bool__(self) -> bool:
        return self.ok


ALLOWED = Verdict(True)


def _no(caps: FrameworkCaps, what: str, source: str) -> Verdict:
    return Verdict(False, f"{what} (source: {source})")


def mode_ok(caps: FrameworkCaps | None, mode: str) -> Verdict:
    if caps is None or mode in caps.modes.value:
        return ALLOWED
    return _no(caps, f"mode {mode} is not one of {caps.modes.value}", caps.modes.source)


def algorithm_ok(caps: FrameworkCaps | None, algorithm: str) -> Verdict:
    if caps is None or algorithm in caps.algorithms.value:
        return ALLOWED
    return _no(caps, f"algorithm {algorithm} is not run", caps.algorithms.source)


def pools_ok(caps: FrameworkCaps | None, pools_used: int) -> Verdict:
    """The roles of a plan on `pools_used` pools: a target without heterogeneous pools runs them all on
    one (the cluster's other pools left idle)."""
    if caps is None or pools_used <= 1 or caps.heterogeneous_pools.value:
        return ALLOWED
    return _no(caps, f"roles on {pools_used} pools cannot be expressed: every role runs on one pool, the others "
                     f"left idle", caps.heterogeneous_pools.source)


def generation_ok(caps: FrameworkCaps | None, engine: str, tp: int, pp: int, dp: int, ep: int = 1,
                  max_num_seqs: int | None = None) -> Verdict:
    """One engine replica of tp x pp GPUs, dp replicas, expert parallel degree ep."""
    if caps is None:
        return ALLOWED
    src = caps.engines.source
    eng = caps.engines.value.get(engine)
    if eng is None:
        return _no(caps, f"rollout engine {engine} is not one of {sorted(caps.engines.value)}", src)
    if tp > 1 and not eng.tp:
        return _no(caps, f"{engine} rollout tensor parallelism tp={tp} is not supported", src)
    if pp > 1 and not eng.pp:
        return _no(caps, f"{engine} rollout pipeline parallelism pp={pp} is not supported", src)
    if ep > 1:
        if eng.ep == "none":
            return _no(caps, f"{engine} rollout expert parallelism ep={ep} is not supported", src)
        if eng.ep == "tp_x_dp" and not (ep % tp == 0 and dp % (ep // tp) == 0):
            return _no(caps, f"rollout ep={ep} must be tp ({tp}) x replicas per server (dividing {dp})", src)
        if eng.ep == "multiple_of_tp" and ep % tp:
            return _no(caps, f"rollout ep={ep} must be a multiple of tp={tp}", src)
        if eng.pp_needs_async_engine and pp > 1 and ep != tp:
            return _no(caps, f"rollout pp={pp} needs {engine}'s async engine, which runs no ep={ep} other than "
                       f"tp={tp}", src)
    if max_num_seqs is not None and not eng.max_num_seqs:
        return _no(caps, f"{engine}'s concurrent-sequence cap (max_num_seqs={max_num_seqs}) cannot be set", src)
    return ALLOWED


def _training(caps: FrameworkCaps, critic: bool):
    return caps.critic_training if critic and caps.critic_training is not None else caps.training


def strategies(caps: FrameworkCaps | None, tp: int, pp: int, cp: int, ep: int, vp: int, zero_stage: int,
               recompute: str, *, critic: bool = False) -> list[str]:
    """The target's training strategies (fsdp, megatron, deepspeed) that run this layout, in the
    catalog's order; `critic`: that train the critic (PPO's value model) with it."""
    if caps is None:
        return ["megatron", "fsdp", "deepspeed"]
    out = []
    for name, s in _training(caps, critic).value.items():
        if ((tp == 1 or s.tp) and (pp == 1 or s.pp) and (cp == 1 or s.cp) and (ep == 1 or s.ep) and (vp == 1 or s.vp)
                and zero_stage in s.zero_stages and recompute in s.recompute):
            out.append(name)
    return out


def training_ok(caps: FrameworkCaps | None, tp: int, pp: int, cp: int, ep: int, vp: int, zero_stage: int,
                recompute: str, *, critic: bool = False) -> Verdict:
    if caps is None or strategies(caps, tp, pp, cp, ep, vp, zero_stage, recompute, critic=critic):
        return ALLOWED
    entry = _training(caps, critic)
    return _no(caps, f"no {'critic ' if critic else ''}training strategy of {sorted(entry.value)} runs tp={tp} pp={pp} "
                     f"cp={cp} ep={ep} vp={vp} ZeRO-{zero_stage} recompute={recompute}", entry.source)


def strategy_for(caps: FrameworkCaps | None, preferred: str, tp: int, pp: int, cp: int, ep: int, vp: int,
                 zero_stage: int, recompute: str, *, critic: bool = False) -> str:
    """The strategy an export uses: the plan's own when the target runs it, else the first that does
    (e.g. a ZeRO-2 layout without model parallelism runs on verl's FSDP engine)."""
    found = strategies(caps, tp, pp, cp, ep, vp, zero_stage, recompute, critic=critic)
    if preferred in found or not found:
        return preferred
    return found[0]


@lru_cache(maxsize=4096)
def plan_strategy(framework: str, version: str | None, tp: int, pp: int, cp: int, ep: int, vp: int, zero_stage: int,
                  recompute: str) -> str:
    """The training strategy a plan for the target `framework` (its release `version`) runs a layout on: the layout's
    own (frameworks.runtime.layout_strategy: FSDP for ZeRO-3 without model parallelism, else Megatron) where the
    target runs it, else the first of the target's that does (`strategy_for`). The plan's training framework
    (solver/api.py) and the kernels the model times it with (perf/step.py) both read it here."""
    return strategy_for(capabilities(framework, version), layout_strategy(tp, pp, cp, ep, zero_stage),
                        tp, pp, cp, ep, vp, zero_stage, recompute)


def placement_ok(caps: FrameworkCaps | None, mode: str, *, reference: str, reward: str, value: str,
                 reward_quantization: str = "none", train_offload: bool = False,
                 auxiliary: Iterable[str] = ()) -> Verdict:
    """Where the reference, reward and value models run in `mode` (the plan's placement names; the
    solver's `elsewhere` counts as allowed when generation or auxiliary is), the reward weight
    precision, offloading the training state during rollout, and the models on an auxiliary pool."""
    return hosting_ok(caps, mode, {"reference": reference, "reward": reward, "value": value},
                      reward_quantization=reward_quantization, train_offload=train_offload, auxiliary=auxiliary)


def hosting_ok(caps: FrameworkCaps | None, mode: str, places: Mapping[str, str], *, reward_quantization: str = "none",
               train_offload: bool = False, auxiliary: Iterable[str] = ()) -> Verdict:
    """`placement_ok` for the models `places` names only ({model: placement}). The target allows a
    placement per model and mode, independently of where the others run, so a plan is allowed in a
    mode exactly when every part of it is: the solver asks this of each candidate for the models
    that candidate hosts."""
    if caps is None:
        return ALLOWED
    v = mode_ok(caps, mode)
    if not v:
        return v
    allowed = caps.placements[mode]
    for model, where in places.items():
        ok = getattr(allowed.value, model)
        if where == "elsewhere":
            good = "generation" in ok or "auxiliary" in ok
        else:
            good = where in ok
        if not good:
            return _no(caps, f"{model} placement {where} in {mode} mode is not one of {ok}", allowed.source)
    if places.get("reward", "cpu") not in ("cpu", "none") and reward_quantization not in caps.reward_quantization.value:
        return _no(caps, f"reward quantization {reward_quantization} is not one of {caps.reward_quantization.value}",
                   caps.reward_quantization.source)
    if train_offload and not caps.train_offload_during_rollout.value:
        return _no(caps, "offloading the training state during rollout is not supported",
                   caps.train_offload_during_rollout.source)
    aux = sorted(set(auxiliary))
    if aux:
        am = caps.auxiliary_models
        if any(m not in am.value for m in aux):
            return _no(caps, f"models {aux} cannot run on GPUs of their own (only {am.value})", am.source)
        if len(aux) > am.max_models:
            return _no(caps, f"{len(aux)} models {aux} cannot share one auxiliary group", am.source)
    return ALLOWED
