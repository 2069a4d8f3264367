"""NeMo-RL 0.7.0's OWN config loading and validation, run on rlsolve's NeMo-RL exports, in a process of its
own (NeMo-RL patches transformers' AutoTokenizer when its policy package is imported; that must not leak
into the other frameworks' checks).

    python tests/nemo_rl_check.py NEMO_RL_CHECKOUT EXPORT.yaml [EXPORT.yaml ...]

NEMO_RL_CHECKOUT is a checkout of NeMo-RL's git tag v0.7.0, or the part of it carried in tests/vendor (its PyPI name, nemo-rl 0.0.0, is a placeholder
that holds no code). For each export it does what `examples/run_grpo.py` does before it starts Ray: puts
the file at the checkout's root (where the export says to put it; its `defaults:` resolves from there),
`nemo_rl.utils.config.load_config` (inheritance from examples/configs/grpo_math_1B.yaml),
`register_omegaconf_resolvers` + `OmegaConf.to_container(resolve=True)`, and
`nemo_rl.algorithms.grpo.MasterConfig(**config)`: the pydantic model whose fields are NeMo-RL's TypedDicts
(PolicyConfig, ClippedPGLossConfig, DataConfig, GRPOConfig, ClusterConfig, ...), which NeMo-RL's own
tests/unit/test_config_validation.py also checks with pydantic's TypeAdapter; this runs that too.
Then the part of `nemo_rl.algorithms.grpo.setup` that splits the cluster between training, generation and
a reward model (grpo.py L520-801), run as written up to the clusters it builds: its RayVirtualCluster is a
recorder (no Ray), its Logger and CheckpointManager stand-ins, and it stops where the clusters are made
(CheckpointManager.get_resume_paths, L815). With env.reward_model, RewardModelEnvironment's own
__init__ (nemo_rl/environments/reward_model_environment.py L88-156) runs on the config's env.reward_model:
its config assertions, then the RayVirtualCluster of the reward model's own GPUs, recorded; it stops there
(before the tokenizer and the Policy, which load weights).
Then `VllmGeneration.__init__` on the engines' cluster (grpo.py L876) up to its placement groups, after what
run_grpo.py and grpo.setup do to the generation config (configure_generation_config, model_name): its checks of
the engine config (vllm_generation.py L105-170), and the engines' sharding it lays out, recorded.
An async GRPO export (grpo.async_grpo.enabled) then goes through `grpo.async_grpo_train`'s own checks of the
config (an async generation engine, importance-sampling correction: v0.7.0 grpo.py L3360-3386), which
run_grpo.py meets only once the workers are up; it stops where the function imports its async utilities.
A PPO export (one with a `ppo` section, for examples/run_ppo.py) goes through the same steps with PPO's own
classes: `nemo_rl.algorithms.ppo.MasterConfig` (its ValueConfig for the critic, PPOConfig, MseValueLossConfig) and
`ppo.setup` up to its cluster (ppo.py L187-415: the value model's config assertions, the colocated-generation
assertion, the reward model's share of the cluster; it stops at CheckpointManager.get_resume_paths, L452). Then
`nemo_rl.models.value.lm_value.Value.__init__` runs on the config's value section with the policy's cluster (ppo.py
L484-496 builds the Value workers on it): its backend choice and world-size arithmetic, up to the worker sharding it
lays out (pp x dp x cp x tp over the cluster's GPUs), recorded; it stops before it makes a Ray queue and workers.
Prints one JSON line per export: the validated config, the clusters ({name: GPUs per node bundle list}),
the engines' sharding ({axis: size}), "async_checks": "passed" for an async GRPO export, and, for
PPO, the value model's sharding ({axis: size}); or the error.

Shims (the least that lets `nemo_rl.algorithms.grpo` import on a CPU-only machine with the other
frameworks' pins; none is consulted by the config classes):
- stand-ins for modules NeMo-RL imports at module level for logging back-ends (mlflow, wandb, swanlab,
  torch.utils.tensorboard), audio data sets (soundfile, scipy.signal) and model loading (nemo_automodel);
- on Python < 3.12, `typing.TypedDict` is typing_extensions' backport of 3.12's (NeMo-RL requires Python
  3.12, and pydantic refuses the older class);
- transformers is presented as NeMo-RL's own pin (5.8.1, its pyproject) while NeMo-RL's policy package is
  imported: its import-time assertion (< 5.12) guards a tokenizer-loading patch, not the configs.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import shutil
import sys
import tempfile
import traceback
import types
import typing
from pathlib import Path

import typing_extensions

STAND_INS = ("mlflow", "wandb", "swanlab", "torch.utils.tensorboard", "soundfile", "scipy", "nemo_automodel")
NEMO_RL_TRANSFORMERS_PIN = "5.8.1"  # NeMo-RL v0.7.0 pyproject.toml: transformers>=5.5.0,<5.9.0 (megatron extra 5.8.1)


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any module under STAND_INS is an empty package whose attributes are placeholder classes."""

    def find_spec(self, name, path, target=None):
        if any(name == m or name.startswith(m + ".") for m in STAND_INS):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__version__ = "0"
        mod.__getattr__ = lambda attr: type(attr, (), {})
        return mod

    def exec_module(self, module):
        pass


def _import_nemo_rl(checkout: Path):
    sys.path.insert(0, str(checkout))
    # transformers first, without the stand-ins (it probes scipy and others itself); it swaps its lazy
    # module in sys.modules once, on this import
    from transformers import AutoProcessor, AutoTokenizer  # noqa: F401
    import transformers.models.auto  # noqa: F401
    sys.meta_path.insert(0, _StandIns())
    if sys.version_info < (3, 12):  # NeMo-RL requires 3.12; pydantic builds TypedDict schemas from 3.12's class
        typing.TypedDict = typing_extensions.TypedDict
    tf = sys.modules["transformers"]
    real = tf.__version__
    tf.__version__ = NEMO_RL_TRANSFORMERS_PIN
    try:
        import nemo_rl
        from nemo_rl.algorithms.grpo import MasterConfig
        import nemo_rl.algorithms.ppo  # noqa: F401  (PPO exports: _ppo_setup)
        import nemo_rl.environments.reward_model_environment  # noqa: F401  (run by _reward_model_cluster)
        import nemo_rl.models.value.lm_value  # noqa: F401  (run by _value_sharding)
        from nemo_rl.utils.config import load_config, register_omegaconf_resolvers
    finally:
        sys.modules["transformers"].__version__ = real
    version = nemo_rl.__version__
    if not version.startswith("0.7.0"):
        raise SystemExit(f"{checkout} holds NeMo-RL {version}, not 0.7.0: check out the tag v0.7.0")
    register_omegaconf_resolvers()
    return MasterConfig, load_config


def check(checkout: Path, exports: list[Path]) -> list[dict]:
    from omegaconf import OmegaConf
    from pydantic import TypeAdapter

    MasterConfig, load_config = _import_nemo_rl(checkout)
    import nemo_rl.algorithms.ppo as ppo  # imported by _import_nemo_rl
    adapters = {MasterConfig: TypeAdapter(MasterConfig), ppo.MasterConfig: TypeAdapter(ppo.MasterConfig)}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "examples").symlink_to(checkout / "examples")  # the file sits at a checkout's root
        for export in exports:
            placed = root / "nemo_rl_plan.yaml"
            shutil.copyfile(export, placed)
            try:
                config = OmegaConf.to_container(load_config(placed), resolve=True)
                is_ppo = "ppo" in config
                Master = ppo.MasterConfig if is_ppo else MasterConfig
                master = Master(**config)  # examples/run_grpo.py, examples/run_ppo.py
                adapters[Master].validate_python(config)  # tests/unit/test_config_validation.py
                row = {"file": str(export), "config": master.model_dump(mode="json")}
                with contextlib.redirect_stdout(sys.stderr):  # NeMo-RL prints progress; stdout is the JSON lines
                    clusters = _setup_clusters(Master(**config), ppo if is_ppo else None)
                    if is_ppo:
                        policy_gpus = sum(clusters["grpo_policy_cluster"])
                        row["value_sharding"] = _value_sharding(Master(**config).value, policy_gpus)
                    if "reward_model" in (config.get("env") or {}):
                        clusters.update(_reward_model_cluster(config["env"]["reward_model"]))
                    if not is_ppo and config["grpo"]["async_grpo"]["enabled"]:
                        row["async_checks"] = _async_grpo_checks(Master(**config))
                    engines = clusters.get("grpo_inference_cluster", clusters.get("grpo_policy_cluster"))
                    row["engine_sharding"] = _vllm_engine_checks(config, sum(engines),
                                                                 config["cluster"]["gpus_per_node"])
                row["clusters"] = clusters
                out.append(row)
            except Exception as e:  # the framework's verdict, reported to the test
                out.append({"file": str(export), "error": f"{type(e).__name__}: {e}",
                            "trace": traceback.format_exc(limit=3)})
    return out


class _Stop(Exception):
    """Raised by a stand-in where the code under check goes past what it checks."""


class _Recorder:
    """RayVirtualCluster's constructor, recording the bundles (GPUs per node) each cluster asks for."""

    made: dict[str, list[int]] = {}

    def __init__(self, name, bundle_ct_per_node_list, *args, stop: bool = False, **kwargs):
        _Recorder.made[name] = list(bundle_ct_per_node_list)
        if stop:
            raise _Stop(name)

    def get_placement_groups(self):
        return []


def _setup_clusters(master, algorithm=None) -> dict[str, list[int]]:
    """grpo.setup (or `algorithm`.setup: ppo) up to the clusters it builds (see the module's docstring)."""
    from unittest import mock
    import nemo_rl.algorithms.grpo as grpo

    grpo = algorithm or grpo

    class Checkpoints:
        def __init__(self, cfg):
            pass

        def get_latest_checkpoint_path(self):
            return None

        def load_training_info(self, path):
            return None

        def get_resume_paths(self, path):
            raise _Stop("clusters made")

    class Logger:
        def __init__(self, cfg):
            pass

        def log_hyperparams(self, params):
            pass

    steps = master.ppo if algorithm is not None else master.grpo
    prompts = [{"idx": i} for i in range(2 * steps["num_prompts_per_step"])]
    _Recorder.made = {}
    with mock.patch.object(grpo, "RayVirtualCluster", _Recorder), mock.patch.object(grpo, "Logger", Logger), \
            mock.patch.object(grpo, "CheckpointManager", Checkpoints):
        try:
            grpo.setup(master, tokenizer=None, dataset=prompts, val_dataset=prompts[:8])
        except _Stop:
            pass
    return dict(_Recorder.made)


def _value_sharding(value_config: dict, world_size: int) -> dict[str, int]:
    """Value.__init__ on `world_size` GPUs up to the sharding it lays its workers out by (see the module's
    docstring): {axis: size}."""
    import copy
    from unittest import mock
    import ray.util.queue
    from nemo_rl.models.value.lm_value import Value

    class Cluster:  # what Value.__init__ asks of the RayVirtualCluster before it makes workers
        def world_size(self):
            return world_size

    value = Value.__new__(Value)

    def stop(*a, **k):
        raise _Stop("value sharding laid out")

    with mock.patch.object(ray.util.queue, "Queue", stop):
        try:
            value.__init__(Cluster(), copy.deepcopy(value_config), tokenizer=None)
        except _Stop:
            pass
    sharding = value.sharding_annotations
    return {name: sharding.get_axis_size(name) for name in sharding.names}


def _async_grpo_checks(master) -> str:
    """grpo.async_grpo_train's own checks of the config, which examples/run_grpo.py meets only once it calls
    it with the workers built (v0.7.0 grpo.py L3360-3386: an async vLLM engine, importance-sampling
    correction, router replay): run as written up to its first use of a worker, the async utilities it then
    imports (stood in: they stop it there). "passed", or their AssertionError / NotImplementedError."""
    from unittest import mock
    import nemo_rl.algorithms.grpo as grpo

    class Stops(types.ModuleType):
        def __getattr__(self, name):
            raise _Stop("config checks passed")

    with mock.patch.dict(sys.modules, {"nemo_rl.algorithms.async_utils": Stops("nemo_rl.algorithms.async_utils")}):
        try:
            grpo.async_grpo_train(None, None, None, None, None, None, {}, None, None, None, {}, master,
                                  max_trajectory_age_steps=master.grpo["async_grpo"]["max_trajectory_age_steps"])
        except _Stop:
            return "passed"
    raise AssertionError("async_grpo_train went past its config checks without importing async_utils")


def _vllm_engine_checks(config: dict, world_size: int, gpus_per_node: int) -> dict[str, int]:
    """VllmGeneration.__init__ on the engines' cluster up to its placement groups: its own checks of the
    engine config (v0.7.0 vllm_generation.py L105-170: pipeline parallelism needs the async engine, EP a
    multiple of TP and, other than TP, no async engine; sampling parameters; required keys), after what
    examples/run_grpo.py (configure_generation_config, with a tokenizer's ids stood in) and grpo.setup
    (L810 model_name) do to the generation config. Returns the engines' sharding ({axis: size})."""
    import copy
    import nemo_rl.models.generation.vllm.vllm_generation as vg
    from nemo_rl.models.generation import configure_generation_config

    class Tokenizer:
        pad_token_id, eos_token_id = 0, 1

    class Cluster:  # what VllmGeneration.__init__ asks of the RayVirtualCluster before it places workers
        num_gpus_per_node = gpus_per_node

        def world_size(self):
            return world_size

        def _init_placement_groups(self, *args, **kwargs):
            raise _Stop("engine config checked")

    generation = configure_generation_config(copy.deepcopy(config["policy"]["generation"]), Tokenizer())
    generation["model_name"] = config["policy"]["model_name"]
    engine = vg.VllmGeneration.__new__(vg.VllmGeneration)
    # its __del__ shuts the workers down (and prints, to stdout, when there are none): none were made
    engine.worker_group = types.SimpleNamespace(shutdown=lambda **kwargs: True)
    try:
        engine.__init__(Cluster(), generation)
    except _Stop:
        pass
    sharding = engine.sharding_annotations
    return {name: sharding.get_axis_size(name) for name in sharding.names}


def _reward_model_cluster(rm_config: dict) -> dict[str, list[int]]:
    """RewardModelEnvironment.__init__ up to its cluster (see the module's docstring)."""
    import copy
    import functools
    from unittest import mock
    import nemo_rl.environments.reward_model_environment as rme

    cls = rme.RewardModelEnvironment.__ray_metadata__.modified_class  # the class under @ray.remote
    _Recorder.made = {}
    with mock.patch.object(rme, "RayVirtualCluster", functools.partial(_Recorder, stop=True)):
        try:
            cls.__new__(cls).__init__(copy.deepcopy(rm_config))
        except _Stop:
            pass
    return dict(_Recorder.made)


if __name__ == "__main__":
    for row in check(Path(sys.argv[1]).resolve(), [Path(p) for p in sys.argv[2:]]):
        print(json.dumps(row))
