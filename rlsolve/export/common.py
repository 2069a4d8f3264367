"""What every exporter shares: the pinned framework versions, the job (a plan's layout joined
with the spec it was solved for), the warnings, and the renderers for shell, YAML and JSON.

An exporter only translates. Anything of the plan that its framework cannot express becomes a
warning: returned in `ExportResult.warnings`, written into the output as a comment (a `_comment`
entry in JSON), and printed on stderr by the CLI. Nothing is dropped silently.
"""
from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable

import yaml

from rlsolve.models import Architecture
from rlsolve.frameworks.runtime import engine_default_max_num_seqs
from rlsolve.perf.generate import GenLayout, gen_other_bytes
from rlsolve.perf.hw import GB
from rlsolve.perf.step import AuxSide, aux_side
from rlsolve.plan import Layout
from rlsolve.resolve import PoolHW, Problem
from rlsolve.solver.rules import aux_shares_actor_degrees, pool_named
from rlsolve.spec import Spec


@dataclass(frozen=True)
class Pin:
    """The framework release an export targets. `series` is what the output states ("verl 0.9");
    `release` is the exact PyPI release whose own files the tests check the keys against."""

    name: str
    series: str
    release: str
    pypi: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.series}"


PINS: dict[str, Pin] = {
    "verl": Pin("verl", "0.9", "0.9.1", "verl"),
    "openrlhf": Pin("OpenRLHF", "0.11", "0.11.2", "openrlhf"),
    "megatron": Pin("Megatron-Core", "0.19", "0.19.2", "megatron-core"),
    "vllm": Pin("vLLM", "0.33", "0.33.0", "vllm"),
    "sglang": Pin("SGLang", "0.5", "0.5.23", "sglang"),
    "deepspeed": Pin("DeepSpeed", "0.19", "0.19.8", "deepspeed"),
}


@dataclass
class ExportResult:
    text: str
    warnings: list[str]
    filename: str
    target: str = ""
    framework: str = ""


class Notes:
    """Warnings (decisions the framework cannot express) and plain remarks, in order, deduplicated."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.remarks: list[str] = []

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def note(self, text: str) -> None:
        if text not in self.remarks:
            self.remarks.append(text)


@dataclass(frozen=True)
class Role:
    """The GPUs of one role, in the node units launchers want."""

    gpus: int
    nodes: int
    per_node: int
    gpus_per_node: int  # the server size of the role's pool
    pool: str
    gpu: str = ""       # the pool's GPU type

    @property
    def whole_nodes(self) -> bool:
        return self.nodes * self.per_node == self.gpus


def split_nodes(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for a role: whole nodes, or part of one node."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return math.ceil(gpus / gpus_per_node), gpus_per_node


@dataclass
class Job:
    """A layout plus the facts of the spec an export needs (model ids, batch, lengths, node size)."""

    lay: Layout
    spec: Spec
    problem: Problem
    gen: Role
    train: Role
    notes: Notes = field(default_factory=Notes)
    aux: Role | None = None  # the auxiliary group (reference/reward on GPUs of their own), any pool
    critic_group: Role | None = None  # PPO: the critic's GPUs of its own (placement value: auxiliary)

    # --- the plan ---------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.lay.pipeline.mode

    @property
    def colocated(self) -> bool:
        return self.mode == "colocated"

    @property
    def staleness(self) -> int:
        return self.lay.pipeline.staleness

    @property
    def g(self):
        return self.lay.parallelism.generation

    @property
    def t(self):
        return self.lay.parallelism.training

    @property
    def critic_t(self):
        """The critic's own degrees (PPO), or the trainer's when the plan gives none."""
        return self.lay.parallelism.critic or self.lay.parallelism.training

    @property
    def opt(self):
        return self.lay.optimization

    @property
    def placement(self):
        return self.lay.placement

    @property
    def engine(self) -> str:
        return self.lay.resource_allocation.generation.engine or "vllm"

    @property
    def framework(self) -> str:
        return self.lay.resource_allocation.training.framework or "megatron"

    # --- the workload (the spec) --------------------------------------------------------------
    @property
    def algorithm(self) -> str:
        return self.spec.rl.algorithm

    @property
    def prompts(self) -> int:
        return self.spec.rl.prompts_per_step

    @property
    def n(self) -> int:
        return self.spec.rl.samples_per_prompt

    @property
    def samples(self) -> int:
        return self.spec.rl.samples

    @property
    def mini_batches(self) -> int:
        return self.spec.rl.mini_batches

    @property
    def epochs(self) -> int:
        return self.spec.rl.ppo_epochs

    @property
    def mini_batch_samples(self) -> int:
        """Samples per optimizer step: the global batch of Megatron and DeepSpeed."""
        return max(1, self.samples // self.mini_batches)

    @property
    def mini_batch_prompts(self) -> int:
        """Prompts per optimizer step (verl's ppo_mini_batch_size)."""
        return max(1, self.prompts // self.mini_batches)

    @property
    def prompt_len(self) -> int:
        return self.spec.rl.prompt_len

    @property
    def response_max(self) -> int:
        return self.spec.rl.response_len.max

    @property
    def max_len(self) -> int:
        return self.prompt_len + self.response_max

    @property
    def policy(self) -> Architecture:
        return self.problem.policy

    @property
    def has_reference(self) -> bool:
        return self.problem.reference is not None

    @property
    def reward_model(self) -> Architecture | None:
        return self.problem.reward

    @property
    def critic(self) -> Architecture | None:
        return self.problem.value

    @property
    def is_moe(self) -> bool:
        return self.policy.is_moe

    # --- derived values every exporter uses the same way ----------------------------------------
    def model_id(self, which: str) -> str:
        """Hugging Face id (or a shell placeholder, with a warning) of policy/reward/value."""
        arch = {"policy": self.policy, "reward": self.reward_model, "value": self.critic}[which]
        if arch is None:
            return ""
        if arch.hf_id:
            return arch.hf_id
        var = f"${which.upper()}_MODEL_PATH"
        self.notes.warn(f"the spec names no Hugging Face id for model.{which} ({arch.name}); "
                        f"set {var[1:]} to its checkpoint")
        return var

    def max_num_seqs(self) -> int:
        """The engine's concurrent-sequence cap. The plan's value, or (plan: no cap beyond KV memory) one
        that never binds: vLLM's default for the GPU, which the plan's engine reserved its profile run for
        (perf.step.gen_side), or, where a step's samples per engine replica in flight for staleness+1 steps
        are more, that many (the profile run then reserves for more rows than the plan counted)."""
        if self.opt.max_num_seqs:
            return int(self.opt.max_num_seqs)
        pool = pool_named(self.problem, self.gen.pool, "plan.resource_allocation.generation.pool")
        default = engine_default_max_num_seqs(pool.gpu.memory_bytes, pool.gpu.name)
        requests = math.ceil(self.samples * (self.staleness + 1) / max(1, self.g.dp))
        if requests <= default:
            self.notes.note(f"max_num_seqs {default}: the plan sets no cap beyond KV memory; vLLM's default for "
                            f"the GPU, which the plan's engine reserved memory for, holds a step's {requests} "
                            f"requests per replica (it never binds)")
            return default
        g = self.g
        lay = GenLayout(tp=g.tp, pp=g.pp, dp=g.dp, ep=g.ep)
        more = gen_other_bytes(self.problem.policy, lay, requests, self.problem.workload.engine_version) - \
            gen_other_bytes(self.problem.policy, lay, default, self.problem.workload.engine_version)
        # (the plan's engine reserved for vLLM's default: perf.step.gen_side keeps whether a layout fits
        # independent of the replica count; the difference is said, not hidden)
        self.notes.note(f"max_num_seqs {requests}: the plan sets no cap beyond KV memory, so the cap is a step's "
                        f"samples per engine replica (it never binds); vLLM's profile run reserves {more / GB:.2f} GB "
                        f"per GPU more than the plan counted (its sampler warm-up over {requests} rows, not "
                        f"{default}), so the KV cache comes out that much smaller")
        return requests

    @property
    def heterogeneous(self) -> bool:
        return self.gen.pool != self.train.pool

    def pools_note(self, framework: str) -> None:
        """Ray-based frameworks size resource pools by GPU count, not GPU type."""
        if self.heterogeneous:  # expressible (separate pools); which nodes they are is the launcher's business
            self.notes.note(f"the plan runs generation on pool {self.gen.pool!r} ({self.gen.gpu}) and training on "
                            f"pool {self.train.pool!r} ({self.train.gpu}); {framework} sizes its resource pools by GPU "
                            f"count, not GPU type: pin the roles to those nodes yourself (Ray node labels or custom "
                            f"resources)")

    def memory_fraction(self, framework: str, default: str) -> float | None:
        """The engine memory fraction implied by the plan (weights + KV + engine overhead over HBM)."""
        util = self.opt.gpu_memory_utilization
        if util is None:
            self.notes.warn(f"the plan gives no gpu_memory_utilization (kv_cache_gb={self.opt.kv_cache_gb}); "
                            f"{framework}'s default ({default}) applies")
        return util

    def aux_hosts(self) -> frozenset:
        """The models the plan runs on its auxiliary group."""
        return frozenset(m for m in ("reference", "reward") if getattr(self.placement, m) == "auxiliary")

    def aux_group(self) -> AuxSide | None:
        """The auxiliary group as the performance model scored it (its tensor-parallel degree and memory)."""
        if self.aux is None:
            return None
        pool = pool_named(self.problem, self.aux.pool, "plan.resource_allocation.auxiliary.pool")
        shared = aux_shares_actor_degrees(self.problem)
        return aux_side(self.problem, pool, self.aux.gpus, self.aux_hosts(), self.opt.reward_quantization,
                        tp=self.t.tp if shared else None)

    def reward_quant_note(self, framework: str) -> None:
        q = self.opt.reward_quantization
        if q != "none" and self.reward_model is not None:
            factor = {"int8": 2, "int4": 4}[q]
            self.notes.warn(f"reward model weight quantization {q} is not expressible in {framework}: it runs "
                            f"in bf16 ({factor}x the plan's reward weight memory) unless you point it at a "
                            f"pre-quantized checkpoint")

    def summary(self) -> list[str]:
        g, t, ra = self.g, self.t, self.lay.resource_allocation
        lines = [f"plan: {self.mode}" + (f", staleness {self.staleness}" if self.mode == "async" else "")
                 + f"; {self.algorithm} {self.policy.name}, {self.prompts} prompts x {self.n} samples, "
                 f"{self.mini_batches} mini-batches, prompt {self.prompt_len} + response {self.response_max} tokens",
                 f"generation: {self.gen.gpus} {self.gen.gpu} GPUs ({self.gen.nodes} node(s) x {self.gen.per_node}"
                 f"{', pool ' + self.gen.pool if self.heterogeneous else ''}), "
                 f"{ra.generation.engine or 'vllm'} tp={g.tp} pp={g.pp} replicas={g.dp} ep={g.ep}",
                 f"training: {self.train.gpus} {self.train.gpu} GPUs ({self.train.nodes} node(s) x {self.train.per_node}"
                 f"{', pool ' + self.train.pool if self.heterogeneous else ''}), "
                 f"{ra.training.framework or 'megatron'} tp={t.tp} pp={t.pp} cp={t.cp} dp={t.dp} ep={t.ep} vp={t.vp} "
                 f"ZeRO-{t.zero_stage} micro_batch={t.micro_batch} grad_accum={t.grad_accum} recompute={t.recompute}",
                 f"placement: reference={self.placement.reference} reward={self.placement.reward} "
                 f"value={self.placement.value}; reference_offload={self.opt.reference_offload} "
                 f"train_offload_during_rollout={self.opt.train_offload_during_rollout} "
                 f"gpu_memory_utilization={self.opt.gpu_memory_utilization} "
                 f"kv_cache_gb={None if self.opt.kv_cache_gb is None else round(self.opt.kv_cache_gb, 2)} "
                 f"max_num_seqs={self.opt.max_num_seqs}"]
        return lines


def build_job(lay: Layout, spec: Spec, problem: Problem) -> Job:
    ra = lay.resource_allocation
    roles = []
    for name, r in (("generation", ra.generation), ("training", ra.training), ("auxiliary", ra.auxiliary),
                    ("critic", ra.critic)):
        if r is None:
            roles.append(None)
            continue
        pool: PoolHW = pool_named(problem, r.pool, f"plan.resource_allocation.{name}.pool")
        nodes, per = split_nodes(r.gpus, pool.gpus_per_node)
        roles.append(Role(gpus=r.gpus, nodes=nodes, per_node=per, gpus_per_node=pool.gpus_per_node, pool=pool.name,
                          gpu=pool.gpu.name))
    job = Job(lay=lay, spec=spec, problem=problem, gen=roles[0], train=roles[1], aux=roles[2], critic_group=roles[3])
    t = lay.parallelism.training
    if t.micro_batch * t.dp * t.grad_accum != job.mini_batch_samples:
        job.notes.warn(f"the optimizer step of {job.mini_batch_samples} samples is not micro_batch {t.micro_batch} x "
                       f"dp {t.dp} x grad_accum {t.grad_accum}: Megatron and DeepSpeed reject such a batch; fix "
                       f"the layout or rl.mini_batches")
    for name, role in (("generation", job.gen), ("training", job.train), ("auxiliary", job.aux),
                       ("critic", job.critic_group)):
        if role is not None and not role.whole_nodes:
            job.notes.warn(f"{name} uses {role.gpus} GPUs, not whole {role.gpus_per_node}-GPU nodes: launchers "
                           f"count {role.nodes} x {role.per_node}; give the role whole nodes")
    return job


# --- rendering ---------------------------------------------------------------------------------

def comment_block(lines: Iterable[str], prefix: str = "# ") -> str:
    return "".join(f"{prefix}{line}\n" if line else prefix.rstrip() + "\n" for line in lines)


def header_lines(pin: Pin, job: Job, what: str) -> list[str]:
    lines = [f"rlsolve export -> {pin.label}: {what}",
             f"targets {pin.label} (keys checked against the {pin.pypi}=={pin.release} release's own files)"]
    lines += job.summary()
    return lines


def warning_lines(notes: Notes) -> list[str]:
    out = []
    for w in notes.warnings:
        out.append(f"WARNING: {w}")
    for r in notes.remarks:
        out.append(f"note: {r}")
    return out


def fmt_scalar(v: Any) -> str:
    """A value as a command-line word (Hydra and argparse alike)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(v)


def shell_word(v: str) -> str:
    """Quote for bash, but keep $VARS expandable."""
    if v.startswith("$") or v.startswith('"$'):
        return v if v.startswith('"') else f'"{v}"'
    return shlex.quote(v)


@dataclass
class Arg:
    """One command-line item: `--flag value`, a bare `--flag`, or a Hydra `key=value`."""

    key: str
    value: Any = None
    flag_only: bool = False
    comment: str = ""

    def words(self, style: str) -> list[str]:
        if style == "hydra":
            return [f"{self.key}={shell_word(fmt_scalar(self.value))}"]
        if self.flag_only:
            return [self.key]
        if isinstance(self.value, (list, tuple)):
            return [self.key] + [shell_word(fmt_scalar(x)) for x in self.value]
        return [self.key, shell_word(fmt_scalar(self.value))]


@dataclass
class Section:
    title: str
    args: list[Arg] = field(default_factory=list)

    def add(self, key: str, value: Any = None, comment: str = "", flag_only: bool = False) -> None:
        self.args.append(Arg(key, value, flag_only=flag_only, comment=comment))

    def flag(self, key: str, on: bool = True, comment: str = "") -> None:
        if on:
            self.args.append(Arg(key, None, flag_only=True, comment=comment))


def render_array(name: str, sections: list[Section], style: str) -> str:
    """A bash array with a comment per section (and per item where it explains a unit)."""
    out = [f"{name}=("]
    for s in sections:
        if not s.args:
            continue
        out.append(f"  # {s.title}")
        for a in s.args:
            line = "  " + " ".join(a.words(style))
            if a.comment:
                line += f"  # {a.comment}"
            out.append(line)
    out.append(")")
    return "\n".join(out) + "\n"


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=110, default_flow_style=False)


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{'a.b.c': 1} -> {'a': {'b': {'c': 1}}} (keys keep their first-seen order)."""
    out: dict[str, Any] = {}
    for dotted, v in flat.items():
        cur = out
        parts = dotted.lstrip("+").split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v
    return out
