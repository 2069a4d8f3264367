"""Run each framework's OWN validation code on an export (the pinned releases, installed without their
GPU dependencies by the README's test step: `pip install --no-deps --ignore-requires-python -r
tests/frameworks.txt`). Nothing here re-implements a framework's checks: each function feeds the
exported text to the code the framework runs at launch and returns what that code built.

- verl 0.9.1: Hydra compose of `ppo_trainer` with the script's overrides (or the exported YAML as the
  config), `verl.utils.config.validate_config` (as `main_ppo.main` calls it), the rollout section
  instantiated to `RolloutConfig` the way verl's agent loop does (`omega_conf_to_dataclass`).
- OpenRLHF 0.11.2: `python -m openrlhf.cli.train_ppo_ray` run as `__main__` with the script's flags:
  its argparse parser, `hierarchize` and every post-parse check; then `train(args)` up to where it
  would start Ray actors (its colocation assertions run), with Ray's placement calls stubbed; then
  DeepSpeed's config check of each actor group (`DeepSpeedConfig` of the config OpenRLHF's strategy
  builds for it, at the group's world size), which each group's `deepspeed.initialize` runs; and
  `create_vllm_engines` itself, each engine's `RolloutRayActor.__init__` up to vLLM's `AsyncEngineArgs`.
- vLLM 0.33.0: the `vllm serve` subcommand parser, `validate_parsed_serve_args`, and
  `AsyncEngineArgs.from_cli_args` (VLLM_TARGET_DEVICE=cpu: vLLM's own switch for a CPU platform).
- SGLang 0.5.23: `sglang.srt.server_args.prepare_server_args` (parser + ServerArgs.__post_init__).
- DeepSpeed 0.19.8: `DeepSpeedConfig(config)` with `deepspeed.comm`'s world size and rank set to what
  the file launches on (its batch assertion divides by that world size).
- Megatron-Core 0.19.2 (`megatron.training`): `parse_args()` + `validate_args()` with WORLD_SIZE =
  the launch's GPUs.
Shims, each the least that lets the framework's module import on a CPU-only Python 3.11:
`flash_attn` (a CUDA-only package; OpenRLHF imports three names at module level and calls none of
them while parsing), `typing.override` (Python 3.12; Megatron-Core 0.19 imports it).
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
import re
import runpy
import shlex
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


class Reached(Exception):
    """Raised by a stub where the framework would start GPU work: everything before it ran."""

    def __init__(self, payload: Any = None):
        super().__init__("reached")
        self.payload = payload


# --- shims ---------------------------------------------------------------------------------------

def _shim_flash_attn() -> None:
    if "flash_attn" in sys.modules:
        return
    names = {"flash_attn": {}, "flash_attn.bert_padding": dict.fromkeys(
        ("index_first_axis", "pad_input", "rearrange", "unpad_input")),
        "flash_attn.utils": {}, "flash_attn.utils.distributed": {"all_gather": None}}
    for name, attrs in names.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = mod
    sys.modules["flash_attn"].bert_padding = sys.modules["flash_attn.bert_padding"]
    sys.modules["flash_attn"].utils = sys.modules["flash_attn.utils"]
    sys.modules["flash_attn.utils"].distributed = sys.modules["flash_attn.utils.distributed"]


def _shim_transfer_queue() -> None:
    """verl 0.9.1's v1 trainer imports TransferQueue (its data plane between Ray actors) at module level and
    uses it only once `TaskRunnerV1.run` calls tq.init: the one class its modules import by name stands in."""
    if "transfer_queue" in sys.modules:
        return
    mod = types.ModuleType("transfer_queue")
    mod.KVBatchMeta = type("KVBatchMeta", (), {})
    mod.__spec__ = importlib.machinery.ModuleSpec("transfer_queue", None)
    sys.modules["transfer_queue"] = mod


def _shim_typing_override() -> None:
    if not hasattr(typing, "override"):
        import typing_extensions
        typing.override = typing_extensions.override


# --- parsing an exported script --------------------------------------------------------------------

def bash_array(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"{name}=(")
    end = start + lines[start:].index(")")
    return shlex.split("\n".join(lines[start + 1:end]), comments=True)


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Substitute the script's $VARS with test values."""
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), w) for w in words]


# --- verl ----------------------------------------------------------------------------------------

def _hf_dir(arch, root: Path) -> str:
    """A local model directory for verl's HFModelConfig (it reads config.json where a run would
    download it): the architecture's shape as a Llama-style config."""
    d = root / f"model-{arch.name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": arch.hidden,
        "num_hidden_layers": arch.layers, "num_attention_heads": arch.heads, "num_key_value_heads": arch.n_kv_heads,
        "intermediate_size": arch.ffn or 4 * arch.hidden, "vocab_size": arch.vocab, "max_position_embeddings": 131072}))
    return str(d)


def verl(result, job) -> Any:
    """verl's own compose + validate_config + RolloutConfig; returns the composed config."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import RolloutConfig

    with tempfile.TemporaryDirectory() as tmp:
        # verl builds the critic's HFModelConfig from the model directory: a local one stands in
        extra = []
        if job.critic is not None:
            extra = [f"critic.model.path={_hf_dir(job.critic, Path(tmp))}", "+critic.model.load_tokenizer=false"]
        GlobalHydra.instance().clear()
        if result.target == "verl":
            words = expand(bash_array(result.text, "VERL_ARGS"), {"TRAIN_FILES": "/data/train.parquet",
                                                                  "VAL_FILES": "/data/val.parquet"})
            with initialize_config_module("verl.trainer.config", version_base=None):
                cfg = compose("ppo_trainer", overrides=words + extra)
        else:
            Path(tmp, "verl_plan.yaml").write_text(result.text)
            os.environ.setdefault("TRAIN_FILES", "/data/train.parquet")
            os.environ.setdefault("VAL_FILES", "/data/val.parquet")
            with initialize_config_dir(config_dir=tmp, version_base=None):
                cfg = compose("verl_plan", overrides=extra)
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        assert isinstance(rollout, RolloutConfig)
        GlobalHydra.instance().clear()
        global verl_trainer_built
        verl_trainer_built = _verl_trainer(cfg, job, Path(tmp))
        return cfg


verl_trainer_built: dict = {}  # what _verl_trainer built for the last verl() call (the config stays verl's own)


class _Recorded:
    """verl's TrainingWorker where it would build a model engine: keeps the config it was given."""

    def __init__(self, config):
        self.config = config

    def reset(self):
        pass

    def set_loss_fn(self, loss_fn):
        pass

    def get_dispatch_collect(self):
        return {}


def _verl_trainer(composed, job, tmp: Path) -> dict:
    """What verl 0.9.1's `TaskRunnerV1.run` does with the validated config before GPU work: the trainer class
    of `trainer.v1.trainer_mode` built on the resolved config (PPOTrainerSeparateAsync.__init__ asserts
    train_batch_size == parameter_sync_step x ppo_mini_batch_size, a standalone rollout pool, a non-naive
    checkpoint engine and a reward resource pool; the replay buffer and the hybrid-rollout switch config are
    built), its resource pools (`_init_resource_pool_mgr`), each actor/rollout/ref worker's `init_model` on the
    global pool's world size up to its model engines (the actor/ref/rollout dataclasses, the micro-batch
    asserts, the rollout mesh's `world_size % (tp x dp x pp)` assert), and the LLM server replicas
    `LLMServerManager` builds (hybrid on the trainer's workers, or standalone on the rollout pool; each
    RolloutReplica asserts its world fits its nodes). Stubbed where Ray or CUDA work starts: the model engines
    (TrainingWorker), torch's device mesh, the rollout class, the checkpoint engine, the replicas' launch.
    Returns what was built: pools, per-role engine configs and meshes, replicas per manager."""
    import asyncio
    import copy

    from omegaconf import OmegaConf, open_dict
    _shim_transfer_queue()
    import verl.workers.engine_workers as ew
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.workers.rollout import llm_server

    cfg = copy.deepcopy(composed)
    with open_dict(cfg):
        cfg.transfer_queue.enable = True  # as TaskRunnerV1.run sets it
        # the policy's HFModelConfig reads config.json where a run downloads it: a local one stands in
        cfg.actor_rollout_ref.model.path = _hf_dir(job.policy, tmp)
        cfg.actor_rollout_ref.model.load_tokenizer = False
    OmegaConf.resolve(cfg)
    trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)
    trainer._init_resource_pool_mgr()
    pools = {k: list(v) for k, v in trainer.resource_pool_manager.resource_pool_spec.items()}
    world = sum(pools["global_pool"])
    out: dict[str, Any] = {"trainer": type(trainer).__name__, "pools": pools, "roles": {}, "replicas": {}}

    env = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")}
    stubs = [(ew, "init_device_mesh", None), (ew, "get_rollout_class", lambda name, mode: lambda **k: None),
             (ew.CheckpointEngineRegistry, "new", staticmethod(lambda *a, **k: None)),
             (ew.torch.distributed, "get_rank", lambda *a: 0), (ew, "aggressive_empty_cache", lambda **k: None)]
    saved = [(obj, name, obj.__dict__[name] if isinstance(obj, type) else getattr(obj, name)) for obj, name, _ in stubs]
    try:
        os.environ.update(WORLD_SIZE=str(world), RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        for role, remote_cls in trainer.role_worker_mapping.items():
            cls = remote_cls.__ray_metadata__.modified_class
            if not issubclass(cls, ew.ActorRolloutRefWorker):
                continue
            meshes, engines = [], {}
            stubs[0] = (ew, "init_device_mesh", lambda dev, mesh_shape, mesh_dim_names: meshes.append(tuple(mesh_shape)))
            for obj, name, value in stubs:
                setattr(obj, name, value)
            worker = cls(config=copy.deepcopy(cfg.actor_rollout_ref), role=str(role),
                         distillation_config=cfg.get("distillation"))
            worker.actor_worker_cls = lambda config: engines.setdefault("actor", config) and _Recorded(config)
            worker.ref_worker_cls = lambda config: engines.setdefault("ref", config) and _Recorded(config)
            worker.set_dispatch_collect = lambda **k: None
            worker.init_model()
            out["roles"][str(role)] = {"world": world, "engines": engines, "rollout_mesh": meshes}
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    # each optimizer step: the trainer hands TrainingWorker.train_mini_batch ppo_mini_batch_size x rollout.n samples
    # (v1/trainer_base.py _update_actor L1829-1830, _update_critic L1806-1807), which asserts they split over the
    # engine's data-parallel ranks (engine_workers.py L266-269)
    from verl.utils.config import omega_conf_to_dataclass
    n = cfg.actor_rollout_ref.rollout.n
    steps = [("actor", next(v["engines"]["actor"] for v in out["roles"].values() if "actor" in v["engines"]).engine_config,
              cfg.actor_rollout_ref.actor.ppo_mini_batch_size * n)]
    if trainer.use_critic:
        steps.append(("critic", omega_conf_to_dataclass(cfg.critic).engine, cfg.critic.ppo_mini_batch_size * n))
    out["optimizer_steps"] = {name: _verl_train_mini_batch(engine, samples, world) for name, engine, samples in steps}
    async def launched(self, *a, **k):
        pass

    managers = []
    if getattr(trainer, "_enable_hybrid_replicas", True):
        managers.append(("hybrid", dict(worker_group=types.SimpleNamespace(world_size=world))))
    if type(trainer).__name__ == "PPOTrainerSeparateAsync":
        managers.append(("standalone", {}))
    for name, kwargs in managers:
        manager = llm_server.LLMServerManager(config=cfg, **kwargs)
        replica_cls = manager.rollout_replica_class
        saved_init = replica_cls.init_hybrid, replica_cls.init_standalone
        replica_cls.init_hybrid = replica_cls.init_standalone = launched
        try:  # _initialize_llm_servers: the replicas, then their (unlaunched) addresses and the metrics checks
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                asyncio.run(manager._initialize_llm_servers())
        finally:
            replica_cls.init_hybrid, replica_cls.init_standalone = saved_init
        out["replicas"][name] = [(r.world_size, r.nnodes) for r in manager.rollout_replicas]
    if cfg.reward.reward_model.enable:
        from verl.trainer.ppo.utils import Role
        out["reward_pool"] = trainer.mapping[Role.RewardModel]
        out["reward_replicas"] = _verl_reward_servers(cfg, trainer, pools)
    return out


def _verl_train_mini_batch(engine_config, samples: int, world: int) -> tuple[int, int]:
    """TrainingWorker.train_mini_batch's own split of a mini-batch over the engine's data-parallel ranks, up to
    its data iterator; the engine's dp: FSDPEngine.get_data_parallel_size (world // ulysses) run on the
    engine's config, Megatron's world // (tp x pp x cp) (Megatron-Core parallel_state's data-parallel size,
    which MegatronEngine.get_data_parallel_size returns). Returns (dp, samples per dp rank)."""
    import torch
    from tensordict import TensorDict
    import verl.workers.engine_workers as ew
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    if hasattr(engine_config, "ulysses_sequence_parallel_size"):
        saved = torch.distributed.get_world_size
        torch.distributed.get_world_size = lambda *a: world
        try:
            dp = FSDPEngine.get_data_parallel_size(types.SimpleNamespace(
                ulysses_sequence_parallel_size=engine_config.ulysses_sequence_parallel_size))
        finally:
            torch.distributed.get_world_size = saved
    else:
        e = engine_config
        dp = world // (e.tensor_model_parallel_size * e.pipeline_model_parallel_size * e.context_parallel_size)
    data = TensorDict({}, batch_size=[max(1, samples // dp)])
    tu.assign_non_tensor(data, mini_batch_size=samples, epochs=1)
    worker = types.SimpleNamespace(engine=types.SimpleNamespace(get_data_parallel_size=lambda: dp,
                                                                get_data_parallel_rank=lambda: 0))

    def iterator(data, mini_batch_size, **k):
        raise Reached(mini_batch_size)

    saved_it = tu.make_iterator
    tu.make_iterator = iterator
    try:
        ew.TrainingWorker.train_mini_batch(worker, data)
        raise AssertionError("train_mini_batch did not reach its data iterator")
    except Reached as r:
        return dp, r.payload
    finally:
        tu.make_iterator = saved_it


def _verl_reward_servers(cfg, trainer, pools: dict) -> list:
    """verl's RewardModelManager._initialize_llm_servers (experimental/reward_loop/reward_model.py L51-95), as
    RewardLoopManager runs it on the reward model's resource pool (its own, or the trainer's global pool): the
    replica count (asserted > 0), each RolloutReplica (its nodes asserted), and split_resource_pool's asserts
    (the pool's world divisible by the replica's tp x dp x pp) up to the pool's Ray placement groups. The
    reward model's HF config and tokenizer (read where a run downloads them) are not loaded."""
    from verl.experimental.reward_loop import reward_model as vrm
    from verl.trainer.ppo.utils import Role

    def placement_groups(**k):
        raise Reached()

    pool = types.SimpleNamespace(world_size=sum(pools[trainer.mapping[Role.RewardModel]]), store=None,
                                 get_placement_groups=placement_groups)
    manager = types.SimpleNamespace(config=cfg.reward.reward_model, resource_pool=pool, _run_all=None)
    saved = vrm.HFModelConfig
    vrm.HFModelConfig = lambda path: types.SimpleNamespace(path=path, get_processor=lambda: None)
    try:
        vrm.RewardModelManager._initialize_llm_servers(manager)
        raise AssertionError("RewardModelManager did not reach the reward pool's placement groups")
    except Reached:
        pass
    finally:
        vrm.HFModelConfig = saved
    return [(r.world_size, r.nnodes) for r in manager.rollout_replicas]


# --- OpenRLHF ------------------------------------------------------------------------------------

def openrlhf(result, job) -> Any:
    """OpenRLHF's train_ppo_ray as __main__: parser, hierarchize, post-parse checks, then train()
    until its first Ray actor group. Returns the parsed (hierarchical) args."""
    _shim_flash_attn()
    import ray
    import ray.util.placement_group  # noqa: F401  (ray.util's attribute of that name is the function)
    ray_pg = sys.modules["ray.util.placement_group"]
    import openrlhf.trainer.ray as orl_ray
    import openrlhf.trainer.ray.launcher as orl_launcher
    import openrlhf.utils as orl_utils

    words = expand(bash_array(result.text, "OPENRLHF_ARGS"),
                   {"PROMPT_DATASET": "/data/prompts.jsonl", "REWARD_FUNC": "/data/reward.py",
                    "POLICY_MODEL_PATH": "/models/policy"})
    seen: dict[str, Any] = {}

    class Group:
        """Records each actor group train() asks for instead of starting Ray actors."""

        def __init__(self, num_nodes, num_gpus_per_node, cls, pg=None, num_gpus_per_actor=1, duplicate_actors=1):
            seen.setdefault("groups", []).append((re.search(r"(\w+Actor)\b", str(cls)).group(1), num_nodes, num_gpus_per_node, pg is not None,
                                                  num_gpus_per_actor, duplicate_actors))

    def stop_at_trainer(*a, **k):
        raise Reached()

    patches = [(ray, "is_initialized", lambda: True), (ray, "get", lambda x: x),
               (ray_pg, "placement_group", lambda bundles, strategy=None: types.SimpleNamespace(ready=lambda: None)),
               (orl_utils, "get_strategy", lambda args: seen.setdefault("args", args) and
                types.SimpleNamespace(print=lambda *a: None)),
               (orl_ray, "create_vllm_engines", lambda *a, **k: seen.setdefault("vllm", (a, k))),
               (orl_launcher, "RayActorGroup", Group)]
    import openrlhf.trainer.ppo_trainer as orl_trainer
    import openrlhf.trainer.ppo_trainer_async as orl_trainer_async
    for mod in (orl_trainer, orl_trainer_async):
        for name in ("PPOTrainer", "PPOTrainerAsync"):
            if hasattr(mod, name):
                patches.append((mod, name, types.SimpleNamespace(remote=stop_at_trainer)))
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    argv = sys.argv
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        sys.argv = ["train_ppo_ray.py", *words]
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=False)
    except Reached:
        pass
    finally:
        sys.argv = argv
        for obj, name, value in saved:
            setattr(obj, name, value)
    assert "args" in seen and "groups" in seen, "train() did not reach its actor groups"
    seen["deepspeed"] = _openrlhf_deepspeed(seen)
    if "vllm" in seen:
        seen["vllm_engine_args"] = _openrlhf_vllm_engines(*seen["vllm"])
    return seen


def _openrlhf_vllm_engines(args: tuple, kwargs: dict) -> list:
    """OpenRLHF's own `create_vllm_engines` with the arguments train() passed it (openrlhf/trainer/ray/
    vllm_engine.py L209-313: the engine kwargs it builds), then each `RolloutRayActor.__init__` up to
    `vllm.AsyncLLMEngine.from_engine_args`: its device/env setup and `vllm.AsyncEngineArgs(**kwargs)`, vLLM's
    own dataclass for them (an unknown or mistyped kwarg fails there). Stubbed: Ray's placement group and
    bundle table, the actors' scheduling, and the engine start. Returns each engine's AsyncEngineArgs."""
    import asyncio

    import openrlhf.trainer.ray.vllm_engine as orl_vllm
    import vllm

    made: list[dict] = []
    remote = types.SimpleNamespace(remote=lambda **kw: made.append(kw))
    stubs = [(orl_vllm, "placement_group", lambda bundles, strategy=None: types.SimpleNamespace(ready=lambda: None)),
             (orl_vllm, "get_bundle_indices", lambda pg, i, n: list(range(i * n, (i + 1) * n))),
             (orl_vllm, "PlacementGroupSchedulingStrategy", lambda **k: None),
             (orl_vllm, "RolloutRayActor", types.SimpleNamespace(options=lambda **k: remote)),
             (orl_vllm, "batch_vllm_engine_call", lambda *a, **k: None), (orl_vllm.ray, "get", lambda x: x)]
    actor_cls = orl_vllm.RolloutRayActor.__ray_metadata__.modified_class
    built = []

    def engine(engine_args):
        raise Reached(engine_args)

    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in stubs] + [(vllm.AsyncLLMEngine, "from_engine_args",
                                                                            vllm.AsyncLLMEngine.from_engine_args)]
    env = dict(os.environ)
    try:
        for obj, name, value in stubs:
            setattr(obj, name, value)
        orl_vllm.create_vllm_engines(*args, **kwargs)
        vllm.AsyncLLMEngine.from_engine_args = engine
        os.environ.setdefault("RAY_ADDRESS", "127.0.0.1:6379")  # (else it asks the running Ray worker)
        with tempfile.TemporaryDirectory() as tmp:
            for kw in made:
                urls = kw.get("remote_rm_url")
                urls = [urls] if isinstance(urls, str) else urls
                if urls and urls[0].endswith(".py"):  # the script's $REWARD_FUNC: the user's file, which the
                    user = Path(tmp, "reward.py")  # executor imports; one with its entry point stands in
                    user.write_text("def reward_func(queries, prompts, labels):\n    raise NotImplementedError\n")
                    kw = {**kw, "remote_rm_url": [str(user), *urls[1:]]}
                try:
                    with contextlib.redirect_stdout(open(os.devnull, "w")):
                        asyncio.run(actor_cls.__init__(object.__new__(actor_cls), **kw))
                except Reached as r:
                    built.append(r.payload)
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        os.environ.clear()
        os.environ.update(env)
    assert len(built) == len(made), "RolloutRayActor.__init__ did not reach its engine"
    return built


def _openrlhf_deepspeed(seen: dict) -> dict[str, Any]:
    """DeepSpeed's own config check of every actor group train() asked for, as the group's
    `deepspeed.initialize` runs it on its own GPUs: OpenRLHF's real strategy (`get_strategy`) builds
    `get_ds_train_config()` for the actor and critic and `get_ds_eval_config(offload=--ref/--reward.offload)`
    for the reference and reward models (openrlhf/utils/deepspeed/deepspeed.py L431-500: both carry
    train_batch_size = --train.batch_size x ring x tp and --train.micro_batch_size), and
    `DeepSpeedConfig` asserts train_batch_size == micro x grad_accum x the group's world size
    (deepspeed/runtime/config.py _batch_assertion; OpenRLHF passes no mpu, so the world is every rank
    of the group). Returns the DeepSpeedConfig of each group by actor class."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from openrlhf.utils import get_strategy

    args = seen["args"]
    strategy = get_strategy(args)
    offload = {"ReferenceModelActor": args.ref.offload, "RewardModelActor": args.reward.offload}
    out = {}
    for cls, nodes, per_node, *_ in seen["groups"]:
        cfg = (strategy.get_ds_train_config() if cls in ("PolicyModelActor", "CriticModelActor")
               else strategy.get_ds_eval_config(offload=offload[cls]))
        with _deepspeed_world(nodes * per_node), contextlib.redirect_stdout(open(os.devnull, "w")):
            out[cls] = DeepSpeedConfig(cfg)
    return out


@contextlib.contextmanager
def _deepspeed_world(world: int):
    """deepspeed.comm's world size and rank as rank 0 of a launch on `world` GPUs sees them."""
    import deepspeed.comm as ds_comm
    saved = ds_comm.get_world_size, ds_comm.get_rank
    ds_comm.get_world_size = lambda group=None: world
    ds_comm.get_rank = lambda group=None: 0
    try:
        yield
    finally:
        ds_comm.get_world_size, ds_comm.get_rank = saved


# --- vLLM ----------------------------------------------------------------------------------------

def vllm(result, job) -> Any:
    """`vllm serve MODEL ARGS...` through vLLM's own parser and EngineArgs; one per server layout
    (a multi-node server's rank-0 node and a secondary, headless node)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model = re.search(r"^vllm serve (\S+) ", result.text, re.M).group(1)
    model = expand([model], {"POLICY_MODEL_PATH": "/models/policy"})[0]
    words = bash_array(result.text, "VLLM_ARGS")
    out = []
    for node_rank in ("0", "1"):
        node = _node_args(result.text, node_rank)
        parser = FlexibleArgumentParser()
        ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
        args = parser.parse_args(["serve", model, *words, *node])
        validate_parsed_serve_args(args)
        out.append(AsyncEngineArgs.from_cli_args(args))
    return out


def _node_args(text: str, node_rank: str) -> list[str]:
    """The script's NODE_ARGS for one node: the array plus the `--headless` it appends past node 0."""
    m = re.search(r"^NODE_ARGS=\((.*)\)$", text, re.M)
    words = shlex.split(m.group(1)) if m else []
    env = {"NODE_RANK": node_rank, "HEAD_ADDR": "10.0.0.1", "MASTER_ADDR": "10.0.0.1"}
    words = [_shell_value(w, env) for w in words]
    if node_rank != "0" and "NODE_ARGS+=(--headless)" in text:
        words.append("--headless")
    return words


def _shell_value(word: str, env: dict[str, str]) -> str:
    word = re.sub(r"\$\{(\w+):-[^}]*\}", lambda m: env[m.group(1)], word)
    arith = re.fullmatch(r"\$\(\((.*)\)\)", word)
    return str(eval(arith.group(1), {"__builtins__": {}})) if arith else word  # the script's $(( a * b ))


# --- SGLang --------------------------------------------------------------------------------------

def sglang(result, job) -> Any:
    from sglang.srt.server_args import prepare_server_args
    model = re.search(r"--model-path (\S+) ", result.text).group(1)
    model = expand([model], {"POLICY_MODEL_PATH": "/models/policy"})[0]
    words = bash_array(result.text, "SGLANG_ARGS")
    node = _node_args(result.text, "0")
    return prepare_server_args(["--model-path", model, *words, *node])


# --- DeepSpeed -----------------------------------------------------------------------------------

def deepspeed(result, job) -> Any:
    """DeepSpeedConfig as `deepspeed --num_nodes N --num_gpus G` would build it on rank 0."""
    from deepspeed.runtime.config import DeepSpeedConfig

    m = re.search(r"deepspeed --num_nodes (\d+) --num_gpus (\d+)", result.text)
    world = int(m.group(1)) * int(m.group(2))
    cfg = json.loads(result.text)
    with _deepspeed_world(world):
        return DeepSpeedConfig(cfg), world


# --- Megatron-LM ---------------------------------------------------------------------------------

def megatron(result, job) -> Any:
    """Megatron's parse_args + validate_args on the exported arguments, at the launch's world size."""
    _shim_typing_override()
    import megatron.training.arguments as mg_args
    from megatron.training.arguments import parse_args, validate_args

    m = re.search(r"torchrun --nnodes (\d+) --nproc-per-node (\d+)", result.text)
    world = int(m.group(1)) * int(m.group(2))
    words = expand(bash_array(result.text, "MEGATRON_ARGS"), {"POLICY_MODEL_PATH": "/models/policy",
                                                             "DATA_PATH": "/data/prompts"})
    exports = dict(re.findall(r"^export (\w+)=(\S+)", result.text, re.M))
    argv, env = sys.argv, {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", *exports)}
    try:
        sys.argv = ["train_rl.py", *words]
        os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0", **exports)
        args = parse_args()
        # validate_args asks CUDA for the GPU's compute capability: answer with the plan's GPU's
        saved = mg_args.get_device_arch_version
        mg_args.get_device_arch_version = lambda: _arch_major(job.train.gpu)
        try:
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                validate_args(args)
        finally:
            mg_args.get_device_arch_version = saved
        return args
    finally:
        sys.argv = argv
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _arch_major(gpu: str) -> int:
    """CUDA compute capability major of a catalog GPU (8 Ampere/Ada, 9 Hopper, 10 Blackwell)."""
    name = gpu.upper()
    if name.startswith(("B", "GB")):
        return 10
    if name.startswith("H"):
        return 9
    return 8


VALIDATORS = {"verl": verl, "verl-yaml": verl, "openrlhf": openrlhf, "vllm": vllm, "sglang": sglang,
              "deepspeed": deepspeed, "megatron": megatron}


def load_yaml(text: str) -> Any:
    return yaml.safe_load(text)
