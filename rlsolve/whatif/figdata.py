"""What the pictures show, computed once for the SVG and the matplotlib writers.

- timeline_lanes(plan): one RL step as bars per GPU group, laid out the way the
  performance model adds the phases up (rlsolve/perf/step.py `combine`):
  colocated = every phase in turn on all GPUs; sync = generation, then training, then the
  weight sync; async = generation of step k+1 overlaps training of step k, and the engines
  pause for the part of the weight sync they cannot hide.
- memory_stacks(plan): per-GPU memory of each role as stacked parts, with the capacity.
- sweep_series(rows): the what-if study's points per GPU type (and network).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from rlsolve.plan import Plan

# phase -> (label, colour). Colour-blind-safe palette (Okabe-Ito plus greys).
PHASES: dict[str, tuple[str, str]] = {
    "prefill": ("prefill", "#56B4E9"),
    "decode": ("decode", "#0072B2"),
    "reward": ("reward", "#CC79A7"),
    "reference": ("reference", "#E69F00"),
    "ref_reward": ("reference + reward", "#E69F00"),
    "old_logprob": ("old log-probs", "#F0E442"),
    "value": ("value (critic)", "#009E73"),
    "train": ("train (update)", "#D55E00"),
    "orchestration": ("framework orchestration", "#BBBBBB"),
    "weight_sync": ("weight sync", "#7F3C8D"),
    "switch": ("offload switch", "#999999"),
    "idle": ("idle", "#EEEEEE"),
}

MEMORY_PARTS: dict[str, tuple[str, str]] = {
    "weights": ("weights", "#0072B2"),
    "kv_cache": ("KV cache", "#56B4E9"),
    "activations": ("activations", "#E69F00"),
    "grads": ("gradients", "#CC79A7"),
    "optimizer": ("optimizer states", "#D55E00"),
    "colocated_training": ("training state kept (colocated)", "#F0E442"),
    "other_models": ("reference/reward/critic", "#009E73"),
    "other": ("other (CUDA, NCCL, workspace)", "#999999"),
}

# Series colours for GPU types in sweep plots, and dashes for networks.
SERIES_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
DASHES = ["", "6,3", "2,3", "8,3,2,3"]

_MIN = 1e-9


@dataclass
class Segment:
    phase: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Lane:
    name: str
    detail: str
    segments: list[Segment] = field(default_factory=list)

    def add(self, phase: str, duration: float) -> None:
        start = self.segments[-1].end if self.segments else 0.0
        if duration > _MIN:
            self.segments.append(Segment(phase, start, start + duration))

    def pad(self, until: float) -> None:
        end = self.segments[-1].end if self.segments else 0.0
        if until - end > _MIN:
            self.segments.append(Segment("idle", end, until))


@dataclass
class Timeline:
    title: str
    mode: str
    step: float
    lanes: list[Lane]
    overlap: tuple[float, float] | None = None   # async: the window where both sides run


def _gen_detail(plan: Plan) -> str:
    g = plan.parallelism.generation
    return (f"{plan.resource_allocation.generation.gpus} GPUs, tp={g.tp} pp={g.pp} x{g.dp}"
            + (f" ep={g.ep}" if g.ep > 1 else ""))


def _train_detail(plan: Plan) -> str:
    t = plan.parallelism.training
    return (f"{plan.resource_allocation.training.gpus} GPUs, tp={t.tp} pp={t.pp} cp={t.cp} dp={t.dp}"
            + (f" ep={t.ep}" if t.ep > 1 else "") + f" ZeRO-{t.zero_stage}")


def _phases(plan: Plan) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(generation-side, training-side) phases in the order they run."""
    ts, pl = plan.time_s, plan.placement
    gen = [("prefill", ts.prefill), ("decode", ts.decode)]
    train = [("old_logprob", ts.old_logprob)]
    both_on_gen = pl.reference == "generation" and pl.reward == "generation" and ts.reward == 0
    if pl.reference == "generation":
        # the plan reports the forwards on the engines under `reference`, the reward's included
        gen.append(("ref_reward" if both_on_gen else "reference", ts.reference))
    else:
        train.append(("reference", ts.reference))
    if pl.reward == "generation":
        if not both_on_gen:
            gen.append(("reward", ts.reward))
    else:
        train.append(("reward", ts.reward))
    train += [("value", ts.value), ("orchestration", ts.orchestration), ("train", ts.train)]
    colocated = plan.pipeline.mode == "colocated"
    if not colocated and ts.switch:  # disaggregated trainers' own state round trip (perf.step.trainer_switch_time)
        train.append(("switch", ts.switch))
    if plan.pipeline.mode != "async" and pl.reward == "generation" and pl.reference != "generation":
        # a reward model on the engines with the reference elsewhere: its time is in the step
        # but not in time_s; the serial modes let us recover it from the step
        rest = ts.step - sum(d for _, d in gen + train) - ts.weight_sync - (ts.switch if colocated else 0.0)
        if rest > 2e-3:
            gen = [(k, d) for k, d in gen if k != "reward"] + [("reward", ts.reward + rest)]
    return gen, train


def timeline_lanes(plan: Plan, title: str | None = None) -> Timeline:
    ts, mode = plan.time_s, plan.pipeline.mode
    gen, train = _phases(plan)
    G, T, S = sum(d for _, d in gen), sum(d for _, d in train), ts.weight_sync
    step = ts.step
    title = title or (f"one RL step: {mode}"
                      + (f", staleness {plan.pipeline.staleness}" if mode == "async" else "")
                      + f", {step:,.1f} s, {plan.throughput.tokens_per_s:,.0f} tokens/s")
    if mode == "colocated":
        lane = Lane(f"all {plan.resource_allocation.generation.gpus} GPUs (colocated)",
                    f"rollout: {_gen_detail(plan).split(', ', 1)[1]}\ntrain: {_train_detail(plan).split(', ', 1)[1]}")
        for ph, d in gen + train + [("weight_sync", S), ("switch", ts.switch)]:
            lane.add(ph, d)
        lane.pad(step)
        return Timeline(title, mode, max(step, lane.segments[-1].end if lane.segments else 0.0), [lane])
    g_lane = Lane("generation", _gen_detail(plan))
    t_lane = Lane("training", _train_detail(plan))
    if mode == "sync":
        for ph, d in gen:
            g_lane.add(ph, d)
        g_lane.pad(G + T)
        g_lane.add("weight_sync", S)
        t_lane.pad(G)
        for ph, d in train:
            t_lane.add(ph, d)
        t_lane.add("weight_sync", S)
        end = max(step, G + T + S)
        g_lane.pad(end)
        t_lane.pad(end)
        return Timeline(title, mode, end, [g_lane, t_lane])
    # async: step = max(G + e, T + S - e); recover e, the sync the engines wait for
    exposed = _exposed(step, G, T, S)
    g_lane.name = "generation (rollout k+1)"
    t_lane.name = "training (step k)"
    for ph, d in gen:
        g_lane.add(ph, d)
    g_lane.add("weight_sync", exposed)
    for ph, d in train:
        t_lane.add(ph, d)
    t_lane.add("weight_sync", S - exposed)
    end = max(step, G + exposed, T + S - exposed)
    g_lane.pad(end)
    t_lane.pad(end)
    return Timeline(title, mode, end, [g_lane, t_lane], overlap=(0.0, min(G, T)))


def _exposed(step: float, G: float, T: float, S: float) -> float:
    tol = 2e-3  # the plan's times are rounded to the millisecond
    e1 = step - G            # generation-bound: the step is G + e
    if -tol <= e1 <= S + tol and T + S - e1 <= step + tol:
        return min(max(e1, 0.0), S)
    e2 = T + S - step        # training-bound: the step is T + S - e
    if -tol <= e2 <= S + tol and G + e2 <= step + tol:
        return min(max(e2, 0.0), S)
    return min(max(e1, 0.0), S)


@dataclass
class Stack:
    name: str
    detail: str
    parts: list[tuple[str, float]]   # (MEMORY_PARTS key, GB)
    capacity: float

    @property
    def total(self) -> float:
        return sum(v for _, v in self.parts)


def memory_stacks(plan: Plan) -> list[Stack]:
    mg, mt = plan.memory_gb_per_gpu.generation, plan.memory_gb_per_gpu.training
    colocated = plan.pipeline.mode == "colocated"
    gen_parts = [(k, getattr(mg, k)) for k in ("weights", "kv_cache", "activations", "colocated_training", "other")]
    train_parts = [(k, getattr(mt, k)) for k in ("weights", "grads", "optimizer", "activations", "other_models",
                                                  "other")]
    return [
        Stack("rollout phase" if colocated else "generation", _gen_detail(plan),
              [(k, v) for k, v in gen_parts if v > 0], mg.capacity),
        Stack("training phase" if colocated else "training", _train_detail(plan),
              [(k, v) for k, v in train_parts if v > 0], mt.capacity),
    ]


@dataclass
class Series:
    gpu: str
    network: str
    colour: str
    dash: str
    points: list = field(default_factory=list)      # feasible rows, by cluster size
    infeasible: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.gpu if not self.network else f"{self.gpu}, {self.network}"


def sweep_series(rows: Sequence) -> list[Series]:
    gpus = list(dict.fromkeys(r.gpu for r in rows))
    nets = list(dict.fromkeys(r.network for r in rows))
    out: dict[tuple[str, str], Series] = {}
    for r in rows:
        key = (r.gpu, r.network)
        if key not in out:
            out[key] = Series(r.gpu, r.network if len(nets) > 1 else "",
                              SERIES_COLOURS[gpus.index(r.gpu) % len(SERIES_COLOURS)],
                              DASHES[nets.index(r.network) % len(DASHES)])
        (out[key].points if r.feasible else out[key].infeasible).append(r)
    for s in out.values():
        s.points.sort(key=lambda r: r.gpus)
    return list(out.values())


def pareto_staircase(rows: Sequence) -> list[tuple[float, float]]:
    """(USD per Mtok, tokens/s) of the front, cheapest first."""
    return sorted(((r.usd_per_mtok, r.tokens_per_s) for r in rows if r.pareto), key=lambda p: (p[0], p[1]))
