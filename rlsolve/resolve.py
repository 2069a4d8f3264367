"""Resolve a validated Spec into concrete hardware and architectures (the `Problem`).

Kept apart from spec.py so the schema stays pure data and catalog look-ups happen once."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rlsolve.errors import SpecError
from rlsolve.hardware_db import GPU, Network, find_gpu, find_network, inline_network
from rlsolve.models import Architecture, resolve_model
from rlsolve.workload import Workload, workload_of

if TYPE_CHECKING:  # spec.py imports this module to check catalog names while loading
    from rlsolve.spec import Pool, Spec


@dataclass(frozen=True)
class PoolHW:
    """One homogeneous pool with its catalog entries resolved."""

    name: str
    gpu: GPU
    nodes: int
    gpus_per_node: int
    network: Network
    nics_per_node: int
    price_per_gpu_hour_usd: float

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def nic_gbytes_per_gpu(self) -> float:
        """Inter-node bandwidth per GPU per direction, GB/s (line rate)."""
        return self.network.gbytes_per_s * self.nics_per_node / self.gpus_per_node

    @cached_property
    def scaleup_size(self) -> int:
        """GPUs that reach each other over NVLink: the node, or the rack for NVL72."""
        if self.gpu.nvlink_gbps_per_dir <= 0:
            return 1
        domain = self.gpu.nvlink_domain
        # A rack-scale domain (NVL72) spans servers; otherwise NVLink stops at the server.
        return domain if domain > self.gpu.default_gpus_per_node else min(domain, self.gpus_per_node)


@dataclass(frozen=True)
class Problem:
    spec: Spec
    pools: tuple[PoolHW, ...]
    policy: Architecture
    reference: Architecture | None
    reward: Architecture | None  # None = rule-based reward on the CPU
    value: Architecture | None
    workload: Workload
    profile: dict[str, Any] = field(default_factory=dict)

    @property
    def pool(self) -> PoolHW:
        return self.pools[0]


def _network(value: Any, field_name: str) -> Network:
    if not isinstance(value, str):  # an inline {gbps, latency_us}
        return inline_network(value.gbps, value.latency_us)
    return find_network(value, field=field_name)


def _pool(p: Pool, prefix: str) -> PoolHW:
    gpu = find_gpu(p.gpu, field=f"{prefix}.gpu")
    gpn = p.gpus_per_node or gpu.default_gpus_per_node
    return PoolHW(name=p.name, gpu=gpu, nodes=p.nodes, gpus_per_node=gpn,
                  network=_network(p.network, f"{prefix}.network"),
                  nics_per_node=p.nics_per_node or gpn,
                  price_per_gpu_hour_usd=p.price_per_gpu_hour_usd or gpu.price_per_gpu_hour_usd)


# The critic (PPO value model) and a reward model are the transformer with its LM head replaced by a linear
# layer of width 1 (one score per token); the input embedding stays, and the new head is a layer of its own
# (never tied). Each framework builds them so:
#   verl 0.9.1 (pip wheel) verl/workers/engine/fsdp/transformer_impl.py:296-300 (hf_config.num_labels = 1,
#     load_valuehead_model -> AutoModelForTokenClassification, verl/utils/model.py:645); Megatron critic
#     verl/models/mcore/model_initializer.py:89-93 (output_layer = LinearForLastLayer(hidden, output_size=1));
#     at the verl rows' commits: verl@36c10bff7 verl/workers/fsdp_workers.py:697,715 (critic) and :960,978
#     (reward model), the same at tag v0.3.0.post1 :694,703 and :953,962.
#   OpenRLHF 0.11.2 (pip wheel) openrlhf/models/model.py:186 (RewardModel) and :254 (CriticModel):
#     nn.Linear(config.hidden_size, 1, bias=False) on the bare base model (no lm_head).
#   NeMo-RL v0.7.0 nemo_rl/models/value/workers/dtensor_value_worker_v2.py:180 (num_labels = 1) and
#     nemo_rl/models/automodel/setup.py:358-372 (reward models: ForSequenceClassification / ForTokenClassification,
#     num_labels = 1).
# (HF's ForTokenClassification head has a bias: one parameter, left out.)
SCALAR_HEAD_WIDTH = 1


def scalar_head(arch: Architecture) -> Architecture:
    """`arch` as a value or reward model: the output layer 1 wide (SCALAR_HEAD_WIDTH), untied."""
    return Architecture.model_validate({**arch.model_dump(), "output_width": SCALAR_HEAD_WIDTH,
                                        "tied_embeddings": False})


def _aux(value: Any, policy: Architecture, field_name: str, allow_rule: bool = False,
         scalar: bool = False) -> Architecture | None:
    """The reference (an LM, `scalar` False), reward or value model (`scalar`: its head one wide)."""
    if value is None:
        return None
    if isinstance(value, str) and value.lower() == "rule":
        if allow_rule:
            return None
        raise SpecError("'rule' is only valid for model.reward; use policy, a catalog name or null", field=field_name)
    arch = policy if isinstance(value, str) and value.lower() == "policy" else resolve_model(value, field=field_name)
    return scalar_head(arch) if scalar else arch


def resolve(spec: Spec, profile: dict[str, Any] | None = None) -> Problem:
    if spec.cluster.pools:
        pools = tuple(_pool(p, f"cluster.pools.{i}") for i, p in enumerate(spec.cluster.pools))
    else:
        pools = (_pool(spec.cluster.pool_list()[0], "cluster"),)
    policy = resolve_model(spec.model.policy, field="model.policy")
    return Problem(
        spec=spec, pools=pools, policy=policy,
        reference=_aux(spec.model.reference, policy, "model.reference"),
        reward=_aux(spec.model.reward, policy, "model.reward", allow_rule=True, scalar=True),
        value=_aux(spec.model.value, policy, "model.value", scalar=True),
        workload=workload_of(spec),
        profile=dict(profile or {}),
    )
