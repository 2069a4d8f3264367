"""Plans a framework can run: every example solved for every target framework exports to it with no
warning, passes that framework's OWN validators (tests/framework_validators.py runs them), and the
numbers the validators built equal the plan's. The engine and trainer exports (vLLM, SGLang,
DeepSpeed, Megatron-LM) of every plan pass their validators too. Plus the capability catalog and
the rules the solver uses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import rlsolve
from rlsolve.cli.main import main
from rlsolve.errors import SpecError
from rlsolve.export import export_plan, prepare
from rlsolve.frameworks import capabilities, generation_ok, placement_ok, training_ok
from rlsolve.frameworks.catalog import Catalog, _catalog

from conftest import EXAMPLES, ROOT
from test_export import CHECKS

FRAMEWORK_EXPORTS = {"verl": ("verl", "verl-yaml"), "openrlhf": ("openrlhf",), "nemo-rl": ("nemo-rl",)}


def _installed() -> bool:
    try:
        import deepspeed, megatron.core, openrlhf, sglang, verl, vllm  # noqa: F401,E401
        return True
    except ImportError:
        return False


if not _installed():
    reason = ("the frameworks' validators are not installed: pip install --no-deps --ignore-requires-python "
              "-r tests/frameworks.txt")
    if os.environ.get("CI"):
        raise RuntimeError(reason)  # CI installs them: a missing one is a broken install step, not a skip
    pytest.skip(reason, allow_module_level=True)

import framework_validators as fv  # noqa: E402  (imports the frameworks)

_plans: dict[tuple[str, str], object] = {}


def solved(example: Path, framework: str):
    """(spec dict, plan dict) or the SpecError the target raised; solved once per session."""
    key = (example.stem, framework)
    if key not in _plans:
        spec = yaml.safe_load(example.read_text())
        spec["target"] = {"framework": framework}
        try:  # (a time limit a loaded machine meets too: these tests check exports, not solve time)
            _plans[key] = (spec, rlsolve.solve(spec, time_limit_s=120).model_dump(mode="json"))
        except SpecError as e:
            _plans[key] = e
    return _plans[key]


def _nemo_rl_check(checkout, *files) -> list[dict]:
    """NeMo-RL's own config code run on export files (tests/nemo_rl_check.py): one JSON row per file."""
    out = subprocess.run([sys.executable, str(ROOT / "tests/nemo_rl_check.py"), str(checkout), *map(str, files)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


# examples a target cannot run: the framework's own limits, named in the refusal (none today: NeMo-RL runs PPO,
# and a cluster of several pools on one of them, tests below)
REFUSED: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("framework", list(FRAMEWORK_EXPORTS))
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_plan_for_a_target_exports_to_it_and_passes_its_validators(example, framework):
    got = solved(example, framework)
    if (example.stem, framework) in REFUSED:
        assert isinstance(got, SpecError) and got.field == REFUSED[(example.stem, framework)]
        assert f"target {framework}" in str(got) and "source:" in str(got)
        return
    assert not isinstance(got, SpecError), got
    spec, plan = got
    job = prepare(plan, spec)
    for target in FRAMEWORK_EXPORTS[framework]:
        res = export_plan(plan, spec, target)
        assert res.warnings == [], (target, res.warnings)
        CHECKS[target](job, res)  # the exported numbers are the plan's
        if target in fv.VALIDATORS:
            built = fv.VALIDATORS[target](res, job)
            _same_numbers(target, built, job)


def _same_numbers(target: str, built, job) -> None:
    """What the framework's own code built from the export equals the plan."""
    t, g = job.t, job.g
    if target in ("verl", "verl-yaml"):
        cfg = built
        ar = cfg.actor_rollout_ref
        assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == job.train.gpus
        assert ar.rollout.tensor_model_parallel_size == g.tp and ar.rollout.pipeline_model_parallel_size == 1
        assert cfg.data.train_batch_size * ar.rollout.n == job.samples
        assert ar.actor.ppo_mini_batch_size * ar.rollout.n == job.mini_batch_samples
        assert ar.rollout.gpu_memory_utilization == job.opt.gpu_memory_utilization
        if ar.actor.strategy == "megatron":
            mg = ar.actor.megatron
            assert (mg.tensor_model_parallel_size, mg.pipeline_model_parallel_size, mg.context_parallel_size,
                    mg.expert_model_parallel_size) == (t.tp, t.pp, t.cp, t.ep)
        else:
            assert ar.actor.strategy in ("fsdp", "fsdp2") and t.tp == t.pp == t.ep == 1
            assert ar.actor.fsdp_config.ulysses_sequence_parallel_size == t.cp
        if not job.colocated:
            assert ar.rollout.nnodes * ar.rollout.n_gpus_per_node == job.gen.gpus
        run = fv.verl_trainer_built  # verl's trainer, workers and LLM servers as TaskRunnerV1 builds them
        assert run["trainer"] == ("PPOTrainerSync" if job.colocated else "PPOTrainerSeparateAsync")
        assert sum(run["pools"]["global_pool"]) == job.train.gpus
        replicas = [r for rs in run["replicas"].values() for r in rs]  # every engine GPU of the plan serves
        assert sum(w for w, _ in replicas) == job.gen.gpus and {w for w, _ in replicas} == {g.tp * g.pp * ar.rollout.data_parallel_size}
        engines = {name: e for v in run["roles"].values() for name, e in v["engines"].items()}
        assert all(v["world"] == job.train.gpus for v in run["roles"].values())
        assert all(e.engine_config.micro_batch_size_per_gpu in (None, t.micro_batch) and
                   e.engine_config.infer_micro_batch_size_per_gpu == t.micro_batch for e in engines.values())
        for e in engines.values():  # the actor's and the reference's engines run the plan's training layout
            if ar.actor.strategy == "megatron":
                assert (e.engine_config.tensor_model_parallel_size, e.engine_config.pipeline_model_parallel_size,
                        e.engine_config.context_parallel_size) == (t.tp, t.pp, t.cp)
            else:
                assert e.engine_config.ulysses_sequence_parallel_size == t.cp
        dp, per_rank = run["optimizer_steps"]["actor"]  # verl's split of an optimizer step is the plan's
        assert dp == t.dp and per_rank == t.micro_batch * t.grad_accum
        if job.critic is not None:
            c = job.critic_t
            assert run["optimizer_steps"]["critic"] == (c.dp, job.mini_batch_samples // c.dp)
        rm = cfg.reward.reward_model
        if rm.enable:  # the reward model's servers verl builds fill its pool (the plan's group, or the trainers)
            assert sum(w for w, _ in run["reward_replicas"]) == sum(run["pools"][run["reward_pool"]])
        if job.aux is not None and "reward" in job.aux_hosts():  # the plan's group of its own: verl's reward pool
            from verl.utils.config import omega_conf_to_dataclass
            from verl.workers.config import RolloutConfig
            assert rm.enable and rm.enable_resource_pool and rm.nnodes * rm.n_gpus_per_node == job.aux.gpus
            assert isinstance(omega_conf_to_dataclass(rm.rollout), RolloutConfig)
            assert rm.rollout.tensor_model_parallel_size == job.aux_group().tp
            pools = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node + rm.nnodes * rm.n_gpus_per_node + (
                0 if job.colocated else ar.rollout.nnodes * ar.rollout.n_gpus_per_node)
            assert pools == job.gen.gpus * (not job.colocated) + job.train.gpus + job.aux.gpus  # no GPU outside the plan
        else:
            assert not rm.enable_resource_pool
        if job.critic is not None:  # the critic's own degrees, as verl built them
            c, cc = job.critic_t, cfg.critic
            assert cc.ppo_micro_batch_size_per_gpu == c.micro_batch
            if cc.strategy == "megatron":
                assert (cc.megatron.tensor_model_parallel_size, cc.megatron.pipeline_model_parallel_size,
                        cc.megatron.context_parallel_size, cc.megatron.expert_model_parallel_size) == \
                    (c.tp, c.pp, c.cp, c.ep)
            else:
                assert cc.strategy in ("fsdp", "fsdp2") and c.tp == c.pp == c.ep == 1
                assert cc.fsdp.ulysses_sequence_parallel_size == c.cp
    elif target == "openrlhf":
        args = built["args"]
        assert args.actor.num_nodes * args.actor.num_gpus_per_node == job.train.gpus
        assert args.vllm.num_engines * args.vllm.tensor_parallel_size == job.gen.gpus
        assert args.vllm.tensor_parallel_size == g.tp
        assert (args.ds.tensor_parallel_size, args.ds.ring_attn_size, args.ds.zero_stage) == (t.tp, t.cp, t.zero_stage)
        assert args.rollout.batch_size * args.rollout.n_samples_per_prompt == job.samples
        assert args.train.batch_size == job.mini_batch_samples
        assert args.vllm.gpu_memory_utilization == job.opt.gpu_memory_utilization
        actor = next(gr for gr in built["groups"] if gr[0] == "PolicyModelActor")
        assert actor[1] * actor[2] == job.train.gpus
        ds = built["deepspeed"]  # DeepSpeed's own batch split of each group, as its deepspeed.initialize checks it
        assert ds["PolicyModelActor"].gradient_accumulation_steps == t.grad_accum
        assert all(c.train_micro_batch_size_per_gpu == t.micro_batch for c in ds.values())
        assert set(ds) == {gr[0] for gr in built["groups"]}
        engines = built["vllm_engine_args"]  # vLLM's AsyncEngineArgs of each engine OpenRLHF starts
        assert len(engines) == g.dp and {e.tensor_parallel_size for e in engines} == {g.tp * g.pp}
        assert {e.gpu_memory_utilization for e in engines} == {job.opt.gpu_memory_utilization}
        assert {(e.max_num_seqs, e.max_model_len, e.enable_sleep_mode) for e in engines} == \
            {(None, args.data.max_len, job.colocated)}  # no cap: OpenRLHF has no flag (the plan scores vLLM's default)
        for model, cls in (("reference", "ReferenceModelActor"), ("reward", "RewardModelActor")):
            if getattr(job.placement, model) == "auxiliary":  # a Ray actor group of its own on the plan's GPUs
                group = next(gr for gr in built["groups"] if gr[0] == cls)
                _, nodes, per_node, shared_pg, _, replica = group
                assert (nodes * per_node, shared_pg, replica) == (job.aux.gpus, False, t.tp * t.cp)
                assert job.aux.gpus % replica == 0 and job.aux_group().tp == t.tp
        if job.critic_group is not None:  # the critic's own Ray actor group, apart from the actor's, on the plan's GPUs
            group = next(gr for gr in built["groups"] if gr[0] == "CriticModelActor")
            _, nodes, per_node, shared_pg, _, replica = group
            assert (nodes * per_node, shared_pg, replica) == (job.critic_group.gpus, False, t.tp * t.cp)
            c = job.lay.parallelism.critic  # the plan's critic degrees are the ones OpenRLHF runs it with
            assert (c.tp, c.cp, c.zero_stage, c.micro_batch) == (args.ds.tensor_parallel_size, args.ds.ring_attn_size,
                                                                 args.ds.zero_stage, args.train.micro_batch_size)
            assert c.tp * c.cp * c.dp == job.critic_group.gpus and c.pp == 1


@pytest.mark.parametrize("framework", ["any", *FRAMEWORK_EXPORTS])
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_engine_and_trainer_exports_pass_their_validators(example, framework):
    got = solved(example, framework)
    if isinstance(got, SpecError):
        return  # a refusal, checked above
    spec, plan = got
    job = prepare(plan, spec)
    t, g = job.t, job.g
    engines = fv.vllm(export_plan(plan, spec, "vllm"), job)
    for eng in engines:
        assert (eng.tensor_parallel_size, eng.pipeline_parallel_size) == (g.tp, g.pp)
        assert eng.gpu_memory_utilization == job.opt.gpu_memory_utilization
    sa = fv.sglang(export_plan(plan, spec, "sglang"), job)
    assert sa.pp_size == g.pp and sa.tp_size % g.tp == 0
    mem = rlsolve.estimate(spec, plan).memory_gb_per_gpu.generation
    assert sa.mem_fraction_static == pytest.approx((mem.weights + mem.kv_cache) / mem.capacity, abs=1e-3)
    ds_cfg, world = fv.deepspeed(export_plan(plan, spec, "deepspeed"), job)
    assert world == job.train.gpus
    assert ds_cfg.train_micro_batch_size_per_gpu * ds_cfg.gradient_accumulation_steps * t.dp == job.mini_batch_samples
    assert ds_cfg.zero_optimization_stage == t.zero_stage
    margs = fv.megatron(export_plan(plan, spec, "megatron"), job)
    assert (margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size, margs.context_parallel_size,
            margs.expert_model_parallel_size, margs.data_parallel_size) == (t.tp, t.pp, t.cp, t.ep, t.dp)
    assert (margs.micro_batch_size, margs.global_batch_size) == (t.micro_batch, job.mini_batch_samples)
    a = job.policy
    assert (margs.num_layers, margs.hidden_size, margs.num_attention_heads) == (a.layers, a.hidden, a.heads)
    assert margs.normalization == "RMSNorm" and margs.position_embedding_type == "rope"
    assert margs.add_bias_linear is False and margs.untie_embeddings_and_output_weights != a.tied_embeddings
    assert margs.tokenizer_type == "HuggingFaceTokenizer" and margs.tokenizer_model == a.hf_id
    if not a.is_mla:
        assert margs.num_query_groups == a.n_kv_heads
    name = a.name
    assert margs.qk_layernorm == name.startswith("qwen3")
    assert margs.rotary_base == {"llama-3.1": 500000, "qwen2.5": 1000000, "qwen3": 1000000,
                                 "deepseek-v2": 10000}[next(f for f in ("llama-3.1", "qwen2.5", "qwen3", "deepseek-v2")
                                                            if name.startswith(f))]
    assert margs.use_rope_scaling == name.startswith("llama-3.1")


# --- NeMo-RL: its own config loading and validation, given a checkout of its source ----------------

NEMO_RL_SUBSET = ROOT / "tests/vendor/nemo-rl-v0.7.0-config-subset.tar.gz"


@pytest.fixture(scope="module")
def nemo_rl_checkout(tmp_path_factory) -> Path:
    """NeMo-RL v0.7.0's source as the checker needs it: $NEMO_RL_CHECKOUT (a checkout of the tag) when set,
    otherwise the part of it that its config validation imports, unmodified, which travels with this
    repository (tests/vendor/make_nemo_rl_subset.py says how it was cut; NeMo-RL is not on PyPI)."""
    given = os.environ.get("NEMO_RL_CHECKOUT")
    if given:
        return Path(given)
    where = tmp_path_factory.mktemp("nemo-rl-v0.7.0")
    with tarfile.open(NEMO_RL_SUBSET) as tar:
        tar.extractall(where, filter="data")
    return where


def test_nemo_rl_exports_pass_nemo_rl_config_validation(tmp_path, nemo_rl_checkout):
    """Every example's NeMo-RL export, loaded as examples/run_grpo.py loads it and validated by NeMo-RL's
    MasterConfig (its TypedDicts through pydantic), in a process of its own; the validated numbers are the
    plan's. And a wrong value is refused by the same code (the check can fail)."""
    from test_export import check_nemo_rl
    jobs, files = [], []
    for example in EXAMPLES:
        got = solved(example, "nemo-rl")
        if isinstance(got, SpecError):
            continue  # a refusal, checked above
        spec, plan = got
        res = export_plan(plan, spec, "nemo-rl")
        path = tmp_path / f"{example.stem}.yaml"
        path.write_text(res.text)
        jobs.append(prepare(plan, spec))
        files.append(path)
    # wrong values, each refused by NeMo-RL's own code: its config classes, async_grpo_train's checks (an async
    # export on vLLM's synchronous engine) and VllmGeneration's (a sampling parameter out of range)
    broken = [tmp_path / f"broken-{k}.yaml" for k in range(3)]
    first_async = next(f for f, job in zip(files, jobs) if job.mode == "async")
    for path, source, change in ((broken[0], files[0], lambda d: d["policy"].update(train_micro_batch_size="eight")),
                                 (broken[1], first_async,
                                  lambda d: d["policy"]["generation"]["vllm_cfg"].update(async_engine=False)),
                                 (broken[2], files[0], lambda d: d["policy"]["generation"].update(top_p=0.0))):
        doc = yaml.safe_load(source.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc))
    rows = _nemo_rl_check(nemo_rl_checkout, *files, *broken)
    assert len(rows) == len(files) + 3
    for job, row in zip(jobs, rows):
        assert "error" not in row, (row["file"], row.get("error"), row.get("trace"))
        config = row["config"]
        base = "examples/configs/" + ("ppo_math_1B" if job.algorithm == "ppo" else
                                      "grpo_" + ("rm_1B" if rm_cluster(job) else "math_1B")) + ".yaml"
        check_nemo_rl(job, yaml.safe_dump({"defaults": base, **config}))
        assert config["policy"]["logprob_batch_size"] == config["policy"]["train_micro_batch_size"]  # TP>=4 rule
        # the clusters NeMo-RL's own grpo.setup / ppo.setup (and RewardModelEnvironment) built from the export:
        # the plan's GPUs
        made = {name: sum(bundles) for name, bundles in row["clusters"].items()}
        if job.algorithm == "ppo":  # colocated; the value model's workers on the policy's GPUs, the plan's degrees
            c = job.critic_t
            assert job.colocated and made == {"grpo_policy_cluster": job.train.gpus, **rm_cluster(job)}
            assert row["value_sharding"] == {"pipeline_parallel": c.pp, "data_parallel": c.dp,
                                             "context_parallel": c.cp, "tensor_parallel": c.tp}
        elif job.colocated:
            assert made == {"grpo_policy_cluster": job.train.gpus, **rm_cluster(job)}, (row["file"], made)
        else:
            assert made == {"grpo_train_cluster": job.train.gpus, "grpo_inference_cluster": job.gen.gpus,
                            **rm_cluster(job)}, (row["file"], made)
        # an async GRPO export also passes async_grpo_train's own config checks (async engine, IS correction)
        assert row.get("async_checks") == ("passed" if job.mode == "async" else None), row["file"]
        # and VllmGeneration's (pp, ep and the async engine, sampling, required keys) lays the plan's engines out
        assert row["engine_sharding"] == {"data_parallel": job.g.dp, "pipeline_parallel": job.g.pp,
                                          "tensor_parallel": job.g.tp}, row["file"]
    assert any("grpo_reward_model_cluster" in row["clusters"] for row in rows[:-3])  # the 70B reward model's case
    assert any("value_sharding" in row for row in rows[:-3])  # the PPO examples' (ppo.setup and Value ran)
    assert "train_micro_batch_size" in rows[-3]["error"]
    assert "async_engine=true" in rows[-2]["error"], rows[-2].get("error")
    assert "top_p" in rows[-1]["error"], rows[-1].get("error")


RM_BASE = {"cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "network": "IB-NDR-400"},
           "model": {"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "qwen2.5-1.5b"},
           "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 512,
                  "response_len": {"max": 2048, "mean": 1024}, "mini_batches": 2, "max_staleness": 0},
           "target": {"framework": "nemo-rl"}}
# each branch of NeMo-RL's cluster split with a reward model (grpo.py setup): one node (the reward model's
# gpus_per_node out of cluster.gpus_per_node), colocated or not; the policy on one node and the reward model on
# another; colocated trainers and the reward model on nodes of their own (the 70B example: several nodes each)
RM_VARIANTS = {"one-node-colocated": (1, {"modes": ["colocated"]}),
               "one-node-sync": (1, {"modes": ["sync"]}),
               "policy-node-and-reward-node": (2, {"modes": ["sync"], "training": {"gpus": [4]},
                                                   "generation": {"gpus": [4]}}),
               "colocated-node-and-reward-node": (2, {"modes": ["colocated"], "training": {"gpus": [8]}}),
               # PPO (ppo.py setup L376-406 splits the same way once data.env_name is reward_model; colocated only)
               "ppo-one-node": (1, {"modes": ["colocated"]}),
               "ppo-colocated-node-and-reward-node": (2, {"modes": ["colocated"], "training": {"gpus": [8]}})}


def test_nemo_rl_reward_model_exports_split_the_cluster_as_planned(tmp_path, nemo_rl_checkout):
    """A reward model on GPUs of its own (env.reward_model): NeMo-RL's own grpo.setup (ppo.setup for PPO) splits the exported
    cluster into the plan's training and generation GPUs, and RewardModelEnvironment accepts the reward
    model's config and asks for the plan's auxiliary GPUs, in every branch of the split."""
    jobs, files = [], []
    for name, (nodes, cons) in RM_VARIANTS.items():
        spec = yaml.safe_load(yaml.safe_dump(RM_BASE))
        spec["cluster"]["nodes"], spec["constraints"] = nodes, cons
        if name.startswith("ppo"):
            spec["rl"]["algorithm"], spec["model"]["value"] = "ppo", "policy"
        plan = rlsolve.solve(spec).model_dump(mode="json")
        assert plan["placement"]["reward"] == "auxiliary", name
        res = export_plan(plan, spec, "nemo-rl")
        assert res.warnings == [], (name, res.warnings)
        job = prepare(plan, spec)
        CHECKS["nemo-rl"](job, res)
        path = tmp_path / f"{name}.yaml"
        path.write_text(res.text)
        jobs.append(job)
        files.append(path)
    broken = tmp_path / "broken.yaml"  # RewardModelEnvironment refuses CPU offload: the check can fail
    doc = yaml.safe_load(files[0].read_text())
    doc["env"]["reward_model"]["dtensor_cfg"]["cpu_offload"] = True
    broken.write_text(yaml.safe_dump(doc))
    rows = _nemo_rl_check(nemo_rl_checkout, *files, broken)
    assert len(rows) == len(files) + 1 and "CPU offload" in rows.pop()["error"]
    nodes = set()
    for job, row in zip(jobs, rows):
        assert "error" not in row, (row["file"], row.get("error"), row.get("trace"))
        made = {name: sum(bundles) for name, bundles in row["clusters"].items()}
        want = {"grpo_policy_cluster": job.train.gpus} if job.colocated else \
            {"grpo_train_cluster": job.train.gpus, "grpo_inference_cluster": job.gen.gpus}
        assert made == {**want, "grpo_reward_model_cluster": job.aux.gpus}, (row["file"], made)
        nodes.add((job.colocated, row["config"]["cluster"]["num_nodes"]))
    assert nodes == {(True, 1), (False, 1), (False, 2), (True, 2)}  # every branch ran


def rm_cluster(job) -> dict[str, int]:
    """The reward model's own cluster (RewardModelEnvironment's), when the plan runs one."""
    return {"grpo_reward_model_cluster": job.aux.gpus} if "reward" in job.aux_hosts() else {}


# --- the case: the solver no longer picks what the target cannot express ---------------------

def test_seventy_b_reward_model_plan_for_verl_is_runnable_as_planned():
    spec = yaml.safe_load((ROOT / "examples/grpo-70b-64xh100.yaml").read_text())
    spec["target"] = {"framework": "verl"}
    plan = rlsolve.solve(spec)
    assert plan.optimization.reward_quantization in ("none", "int8")
    if plan.pipeline.mode == "async":
        assert plan.placement.reward in ("auxiliary", "cpu")
    assert export_plan(plan, spec, "verl").warnings == []


def test_reward_on_the_trainers_in_async_only_exports_to_openrlhf_and_passes_its_validators():
    """OpenRLHF 0.11.2 runs a reward model on the trainers' GPUs in async mode only; the plan for it
    (tests/test_target_oracle.py: per-mode placement) exports with no warning and OpenRLHF's own
    train_ppo_ray accepts it with the plan's numbers."""
    from test_target_oracle import _one_pool_reward_job
    spec = _one_pool_reward_job("openrlhf", ["sync", "async"])
    spec["model"] = {"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "qwen2.5-1.5b"}
    plan = rlsolve.solve(spec)
    assert (plan.pipeline.mode, plan.placement.reward) == ("async", "training")
    plan = plan.model_dump(mode="json")
    res = export_plan(plan, spec, "openrlhf")
    assert res.warnings == []
    job = prepare(plan, spec)
    CHECKS["openrlhf"](job, res)
    _same_numbers("openrlhf", fv.openrlhf(res, job), job)


def test_seventy_b_reward_model_on_a_group_of_its_own_in_one_pool_exports_to_openrlhf():
    """The issue's 70B GRPO job with a 70B reward model on one pool of 64 H100, OpenRLHF target, synchronous:
    OpenRLHF 0.11.2 runs the reward model there only as an actor group of its own (no --train.colocate_all),
    with the actor's DeepSpeed degrees. The plan gives it GPUs of the same pool beside the engines and the
    trainers, and OpenRLHF's own train_ppo_ray builds exactly those groups (no GPU outside the plan)."""
    spec = yaml.safe_load((ROOT / "examples/grpo-70b-64xh100.yaml").read_text())
    spec["target"] = {"framework": "openrlhf"}
    spec["constraints"] = {"modes": ["sync"]}
    plan = rlsolve.solve(spec)
    ra, t = plan.resource_allocation, plan.parallelism.training
    assert plan.placement.reward == "auxiliary" and ra.auxiliary.pool == ra.training.pool == ra.generation.pool
    assert ra.generation.gpus + ra.training.gpus + ra.auxiliary.gpus <= 64
    assert ra.auxiliary.gpus % (t.tp * t.cp) == 0
    plan = plan.model_dump(mode="json")
    res = export_plan(plan, spec, "openrlhf")
    assert res.warnings == []
    job = prepare(plan, spec)
    CHECKS["openrlhf"](job, res)
    built = fv.openrlhf(res, job)
    _same_numbers("openrlhf", built, job)
    assert sum(n * g for cls, n, g, *_ in built["groups"] if cls in ("PolicyModelActor", "RewardModelActor")) + \
        built["args"].vllm.num_engines * built["args"].vllm.tensor_parallel_size <= 64


def test_openrlhf_auxiliary_groups_split_the_actors_batch_evenly_as_deepspeed_requires():
    """OpenRLHF 0.11.2 initializes the reward model's DeepSpeed engine with the actor's --train.batch_size and
    --train.micro_batch_size (get_ds_eval_config), and DeepSpeedConfig asserts that batch is micro x grad_accum x
    the group's world size. The rule table asks it of an auxiliary group (rules.aux_group_violations): with 32
    trainers and 8 engine GPUs on the 64, the remaining 24 are 12 replicas of the actor's tp x ring = 2, over
    which 2,048 samples do not split into micro-batches of 4, so no plan uses all 64; the plan on fewer GPUs passes DeepSpeed's own check for
    every group; a plan edited to the 24-GPU group is refused at export (the field named); and its launch
    script, edited so, is refused by DeepSpeed's check (the validator can fail)."""
    spec = yaml.safe_load((ROOT / "examples/grpo-70b-64xh100.yaml").read_text())
    spec["target"] = {"framework": "openrlhf"}
    spec["constraints"] = {"modes": ["sync"], "linear": ["training.gpus == 32", "generation.gpus == 8", "gpus == 64"]}
    with pytest.raises(rlsolve.InfeasibleError) as e:
        rlsolve.solve(spec, time_limit_s=120)
    # the explanation names the rule with the plan that breaks it, and the linear constraints that lifted give plans
    assert any("target openrlhf" in r and "24 GPUs are 12 replicas of the actor's tp x cp = 2" in r and
               "2048 samples" in r for r in e.value.reasons), e.value.reasons
    assert any(r.startswith("constraints.linear 'gpus == 64'") for r in e.value.reasons), e.value.reasons
    spec["constraints"]["linear"] = ["training.gpus == 32", "generation.gpus == 8"]
    plan = rlsolve.solve(spec, time_limit_s=120)
    t, aux = plan.parallelism.training, plan.resource_allocation.auxiliary
    assert plan.placement.reward == "auxiliary" and aux.gpus == 16 and (t.tp, t.cp, t.micro_batch) == (2, 1, 4)
    plan = plan.model_dump(mode="json")
    job = prepare(plan, spec)
    res = export_plan(plan, spec, "openrlhf")
    assert not res.warnings, res.warnings
    fv.openrlhf(res, job)  # every group's DeepSpeedConfig accepts the batch
    uneven = yaml.safe_load(yaml.safe_dump(plan))
    uneven["resource_allocation"]["auxiliary"]["gpus"] = 24
    with pytest.raises(SpecError, match="resource_allocation.auxiliary.gpus"):
        export_plan(uneven, spec, "openrlhf")
    assert "  --reward.num_nodes 2\n" in res.text
    res.text = res.text.replace("  --reward.num_nodes 2\n", "  --reward.num_nodes 3\n")
    with pytest.raises(AssertionError, match="train_batch_size is not equal to micro_batch_per_gpu"):
        fv.openrlhf(res, job)


@pytest.mark.parametrize("example, key, value, refusal", [
    ("ppo-7b-8xh100", "actor_rollout_ref.rollout.tensor_model_parallel_size", 3, "is not divisible by infer_world_size"),
    ("grpo-hetero-h20-h800", "trainer.v1.separate_async.parameter_sync_step", 3,
     "train_batch_size must equal parameter_sync_step"),
    ("grpo-hetero-h20-h800", "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive", "nccl/nixl/mooncake"),
])
def test_verl_trainer_checks_past_validate_config_refuse_a_broken_export(example, key, value, refusal):
    """verl 0.9.1 checks the config again once TaskRunnerV1 builds the trainer and its workers: the separate_async
    trainer's own asserts, and the hybrid worker's rollout mesh (world % tp x dp x pp). validate_config passes
    each edit below; the validator (fv._verl_trainer) runs those checks, so an export that breaks one fails."""
    got = solved(ROOT / f"examples/{example}.yaml", "verl")
    spec, plan = got
    job = prepare(plan, spec)
    res = export_plan(plan, spec, "verl")
    fv.verl(res, job)  # the export as is passes
    line = next(w for w in res.text.splitlines() if w.strip().startswith(key + "="))
    broken = types.SimpleNamespace(**{**vars(res), "text": res.text.replace(line, f"  {key}={value}")})
    with pytest.raises(AssertionError, match=refusal):
        fv.verl(broken, job)


def test_reward_pool_of_its_own_in_one_pool_exports_to_verl():
    """verl 0.9.1's separate_async trainer needs the reward model on a resource pool of its own; on one
    pool the plan gives it GPUs beside the rollout and trainer pools, and verl's config carries exactly
    those GPUs and the tensor-parallel degree the plan scored (checked in `_same_numbers`)."""
    from test_target_oracle import _one_pool_reward_job
    spec = _one_pool_reward_job("verl", ["sync", "async"])
    spec["model"] = {"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "qwen2.5-1.5b"}
    plan = rlsolve.solve(spec)
    ra = plan.resource_allocation
    assert (plan.pipeline.mode, plan.placement.reward) == ("async", "auxiliary")
    assert ra.auxiliary.pool == ra.training.pool and ra.generation.gpus + ra.training.gpus + ra.auxiliary.gpus <= 8
    plan = plan.model_dump(mode="json")
    for target in FRAMEWORK_EXPORTS["verl"]:
        res = export_plan(plan, spec, target)
        assert res.warnings == []
        job = prepare(plan, spec)
        CHECKS[target](job, res)
        _same_numbers(target, fv.verl(res, job), job)


def _ppo_7b_on_16_a100(target: str) -> dict:
    return {"cluster": {"gpu": "A100-SXM-40GB", "nodes": 4, "gpus_per_node": 4, "network": "IB-NDR-400"},
            "model": {"policy": "qwen2.5-7b", "reference": "policy", "value": "policy"},
            "rl": {"algorithm": "ppo", "prompts_per_step": 64, "samples_per_prompt": 4, "prompt_len": 512,
                   "response_len": {"max": 2048, "mean": 512}, "mini_batches": 2, "max_staleness": 1},
            "target": {"framework": target}, "solver": {"top_k": 0}}


def _with_other_critic_degrees(spec: dict, plan):
    from rlsolve.errors import SpecError
    base = plan.model_dump(mode="json")
    t = base["parallelism"]["training"]
    n = t["tp"] * t["pp"] * t["cp"] * t["dp"]
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 3, 4):
            if n % (tp * pp) or (tp, pp) == (t["tp"], t["pp"]):
                continue
            critic = {**base["parallelism"]["critic"], "tp": tp, "pp": pp, "cp": 1, "dp": n // (tp * pp),
                      "sequence_parallel": tp > 1}
            lay = {**base, "parallelism": {**base["parallelism"], "critic": critic}}
            try:
                return rlsolve.estimate(spec, lay)
            except (SpecError, rlsolve.InfeasibleError):
                continue
    raise AssertionError("no other legal critic degrees on the trainer's GPUs")


def test_the_critics_own_layout_exports_to_verl_and_passes_its_validators():
    """verl 0.9.1 trains the critic with degrees of its own on the trainer's GPUs: on 16 A100-40GB the
    7B PPO plan gives it other degrees than the actor's, the export carries them (critic.megatron.*)
    with no warning, and verl's own compose + validate_config builds them. OpenRLHF 0.11.2 has one set
    of DeepSpeed degrees: its plan's critic is the actor's."""
    spec = _ppo_7b_on_16_a100("verl")
    plan = rlsolve.solve(spec)
    c, t = plan.parallelism.critic, plan.parallelism.training
    if (c.tp, c.pp, c.cp, c.dp) == (t.tp, t.pp, t.cp, t.dp):
        # the optimum kept the actor's degrees: re-score the plan with the critic at other degrees
        # of the same GPUs (estimate applies the rule table, so only a legal one is kept)
        plan = _with_other_critic_degrees(spec, plan)
        c = plan.parallelism.critic
    assert (c.tp, c.pp, c.cp, c.dp) != (t.tp, t.pp, t.cp, t.dp)
    plan_d = plan.model_dump(mode="json")
    job = prepare(plan_d, spec)
    for target in ("verl", "verl-yaml"):
        res = export_plan(plan_d, spec, target)
        assert res.warnings == []
        _same_numbers(target, fv.verl(res, job), job)
    other = rlsolve.solve(_ppo_7b_on_16_a100("openrlhf"))
    oc, ot = other.parallelism.critic, other.parallelism.training
    assert (oc.tp, oc.pp, oc.cp, oc.dp, oc.micro_batch) == (ot.tp, ot.pp, ot.cp, ot.dp, ot.micro_batch)
    assert export_plan(other.model_dump(mode="json"), _ppo_7b_on_16_a100("openrlhf"), "openrlhf").warnings == []


def test_deepseek_rollout_has_no_pipeline_stages_for_verl_but_may_for_any():
    spec = yaml.safe_load((ROOT / "examples/grpo-deepseek-v2-256xh100.yaml").read_text())
    assert rlsolve.solve(spec).parallelism.generation.pp > 1  # unrestricted: the model's best
    spec["target"] = {"framework": "verl"}
    assert rlsolve.solve(spec).parallelism.generation.pp == 1


# --- the catalog and the rules ---------------------------------------------------------------------

def test_every_capability_names_its_source():
    cat = _catalog()
    for name, caps in cat.frameworks.items():
        for field, entry in caps:
            if isinstance(entry, dict):
                for sub in entry.values():
                    assert "source" in type(sub).model_fields and len(sub.source) > 10, (name, field)
            elif hasattr(entry, "source"):
                assert len(entry.source) > 10, (name, field)


def test_catalog_rejects_unknown_keys():
    data = yaml.safe_load((ROOT / "rlsolve/frameworks/capabilities.yaml").read_text())
    data["frameworks"]["verl"]["modes"]["colour"] = "blue"
    with pytest.raises(ValueError, match="colour"):
        Catalog.model_validate(data)


def test_rules_give_reasons():
    verl = capabilities("verl")
    v = generation_ok(verl, "vllm", 8, 4, 8)
    assert not v and "pipeline" in v.reason and "rollout.py" in v.reason
    assert generation_ok(verl, "vllm", 4, 1, 8, ep=8) and not generation_ok(verl, "vllm", 4, 1, 8, ep=12)
    assert not generation_ok(capabilities("openrlhf"), "vllm", 4, 1, 8, ep=8)
    assert not training_ok(capabilities("openrlhf"), 2, 2, 1, 1, 1, 1, "none")
    assert training_ok(verl, 1, 1, 2, 1, 1, 3, "full")
    v = placement_ok(verl, "async", reference="training", reward="training", value="none")
    assert not v and "reward" in v.reason
    assert not placement_ok(verl, "colocated", reference="training", reward="training", value="none",
                            reward_quantization="int4")
    assert not placement_ok(capabilities("openrlhf"), "sync", reference="auxiliary", reward="auxiliary", value="none",
                            auxiliary=("reference", "reward"))
    assert generation_ok(None, "vllm", 8, 8, 1, ep=3) and placement_ok(None, "sync", reference="generation",
                                                                       reward="generation", value="training")


def test_unknown_version_and_framework_are_input_errors():
    spec = yaml.safe_load((ROOT / "examples/ppo-7b-8xh100.yaml").read_text())
    spec["target"] = {"framework": "verl", "version": "0.3.0"}
    with pytest.raises(SpecError, match="target.version|0.9.1"):
        rlsolve.load_spec(spec)
    spec["target"] = {"framework": "trlx"}
    with pytest.raises(SpecError):
        rlsolve.load_spec(spec)


def test_cli_framework_flag(tmp_path):
    out = tmp_path / "plan.yaml"
    r = CliRunner().invoke(main, ["solve", str(ROOT / "examples/grpo-deepseek-v2-256xh100.yaml"), "--framework", "verl",
                                  "--format", "yaml", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["parallelism"]["generation"]["pp"] == 1
    spec = yaml.safe_load((ROOT / "examples/grpo-hetero-h20-h800.yaml").read_text())
    spec["target"] = {"framework": "nemo-rl", "version": "0.5.0"}
    bad = tmp_path / "old-nemo-rl.yaml"
    bad.write_text(yaml.safe_dump(spec))
    r = CliRunner().invoke(main, ["solve", str(bad)])
    assert r.exit_code == 2 and "target.version" in r.output and "Traceback" not in r.output


def test_docs_capability_tables_are_the_catalog():
    from rlsolve.frameworks.table import markdown
    text = (ROOT / "docs/export.md").read_text()
    begin, end = "<!-- capability tables: begin -->\n", "\n<!-- capability tables: end -->"
    assert text[text.index(begin) + len(begin):text.index(end)] == markdown()


@pytest.mark.parametrize("enable_sleep", [False, True])
def test_openrlhf_trains_a_critic_group_while_the_actor_trains_as_the_catalog_says(monkeypatch, enable_sleep):
    """capabilities.yaml `critic_group_concurrent` for OpenRLHF, checked on OpenRLHF's own PPO step
    (`BasePPOTrainer.ppo_train` with recording stand-ins for its Ray groups): without --ds.enable_sleep
    both fits start before either is joined; with it (colocated sleep mode) the critic's fit is joined
    before the actor's starts."""
    fv._shim_flash_attn()
    import openrlhf.trainer.ppo_trainer as orl_trainer
    events: list[tuple[str, str]] = []

    class Group:
        def __init__(self, name: str):
            self.name = name

        def async_run_method(self, method_name, **kwargs):
            events.append(("start", f"{self.name}.{method_name}"))
            return [self.name]

    def get(refs):
        events.append(("join", ",".join(map(str, refs))))
        return [{} for _ in refs]

    monkeypatch.setattr(orl_trainer, "ray", types.SimpleNamespace(get=get))
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(critic=types.SimpleNamespace(freezing_steps=0),
                                   ds=types.SimpleNamespace(enable_sleep=enable_sleep)),
        critic_model_group=Group("critic"), actor_model_group=Group("actor"), kl_ctl=types.SimpleNamespace(value=0.0))
    orl_trainer.BasePPOTrainer.ppo_train(trainer, global_steps=1)
    fits = [i for i, e in enumerate(events) if e[0] == "start" and e[1].endswith(".fit")]
    first_join = next(i for i, e in enumerate(events) if e[0] == "join" and i > fits[0])
    concurrent = len(fits) == 2 and fits[1] < first_join
    assert concurrent == (not enable_sleep)
    assert capabilities("openrlhf").critic_group_concurrent.value is True  # the catalog's fact: groups of their own don't sleep


def test_openrlhf_ppo_in_sync_mode_plans_the_critic_group_it_runs(tmp_path):
    """OpenRLHF runs a PPO critic beside separate vLLM engines only on a --critic.* group of its own
    (placements sync value: auxiliary), concurrently with the actor: the plan has that group (its GPUs
    counted), the export gives it to --critic.num_nodes x num_gpus_per_node with no warning, and OpenRLHF's
    own train_ppo_ray builds a critic actor group of exactly those GPUs, apart from the actor's."""
    spec = yaml.safe_load((ROOT / "examples/ppo-1.5b-8xh100.yaml").read_text())
    spec["constraints"] = {"modes": ["sync"]}
    spec["target"] = {"framework": "openrlhf"}
    plan = rlsolve.solve(spec)
    ra = plan.resource_allocation
    assert plan.pipeline.mode == "sync" and plan.placement.value == "auxiliary" and ra.critic is not None
    used = ra.generation.gpus + ra.training.gpus + ra.critic.gpus + (ra.auxiliary.gpus if ra.auxiliary else 0)
    assert used <= 8
    plan_d = plan.model_dump(mode="json")
    job = prepare(plan_d, spec)
    res = export_plan(plan_d, spec, "openrlhf")
    assert res.warnings == [], res.warnings
    CHECKS["openrlhf"](job, res)
    built = fv.VALIDATORS["openrlhf"](res, job)
    _same_numbers("openrlhf", built, job)
    assert any(gr[0] == "CriticModelActor" for gr in built["groups"])
    assert rlsolve.estimate(spec, plan).time_s.step == plan.time_s.step  # the layout re-scores to the same step
    roles = yaml.safe_load(export_plan(plan_d, spec, "yaml").text)["roles"]
    assert roles["critic"]["gpus"] == ra.critic.gpus
    assert "critic group" in " ".join(export_plan(plan_d, spec, "verl").warnings)  # verl cannot run it: said
    # the CLI says the same; for target any the critic stays on the trainers (the shape is searched for a target
    # that runs it)
    path = tmp_path / "ppo-sync.yaml"
    del spec["target"]
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "plan.yaml"
    for framework, value in (("openrlhf", "auxiliary"), ("any", "training")):
        r = CliRunner().invoke(main, ["solve", str(path), "--framework", framework, "--format", "yaml", "-o", str(out)])
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
        assert yaml.safe_load(out.read_text())["placement"]["value"] == value


def test_critic_group_layouts_are_checked_and_its_time_is_the_longer_phase():
    """A critic group's layout rules name their field (exit 2 through `estimate`), and its time term is
    max(actor forwards, critic forward) + max(actor update, critic update), written as what it adds."""
    from rlsolve.perf.step import critic_group_excess
    assert critic_group_excess(10.0, 20.0, 4.0, 25.0) == 5.0  # forward hidden, update 5 s longer
    assert critic_group_excess(10.0, 20.0, 12.0, 19.0) == 2.0  # forward 2 s longer, update hidden
    assert critic_group_excess(10.0, 20.0, 1.0, 1.0) == 0.0
    spec = yaml.safe_load((ROOT / "examples/ppo-1.5b-8xh100.yaml").read_text())
    spec["constraints"] = {"modes": ["sync"]}
    spec["target"] = {"framework": "openrlhf"}
    lay = rlsolve.solve(spec).model_dump(mode="json")
    no_group = json.loads(json.dumps(lay))
    no_group["resource_allocation"]["critic"] = None
    with pytest.raises(SpecError) as e:
        rlsolve.estimate(spec, no_group)
    assert e.value.field == "layout.resource_allocation.critic"
    too_big = json.loads(json.dumps(lay))
    too_big["resource_allocation"]["critic"]["gpus"] = 16
    with pytest.raises(SpecError) as e:
        rlsolve.estimate(spec, too_big)
    assert "critic" in e.value.field


def test_nemo_rl_rollout_pipeline_needs_its_async_engine_which_runs_no_dp_inside_vllm():
    """NeMo-RL v0.7.0 vllm_generation.py L117-134: pipeline_parallel_size > 1 asserts async_engine, and an
    EP other than TP (vLLM's DP) asserts it is off, so pp > 1 with ep != tp cannot run."""
    caps = capabilities("nemo-rl")
    assert generation_ok(caps, "vllm", tp=2, pp=2, dp=1, ep=2)
    assert generation_ok(caps, "vllm", tp=2, pp=1, dp=1, ep=4)
    refused = generation_ok(caps, "vllm", tp=2, pp=2, dp=1, ep=4)
    assert not refused and "async engine" in refused.reason


def test_nemo_rl_rollout_pipeline_exports_the_async_engine_with_the_plans_cap(tmp_path, nemo_rl_checkout):
    """A NeMo-RL plan with rollout pp=2 exports vllm_cfg.async_engine (else NeMo-RL asserts) and passes the
    plan's sequence cap through vllm_kwargs (else AsyncLLM holds 128); NeMo-RL's MasterConfig accepts it."""
    spec = yaml.safe_load((ROOT / "examples/grpo-8b-16xa100.yaml").read_text())
    spec["target"] = {"framework": "nemo-rl"}
    spec.setdefault("constraints", {})["generation"] = {"pp": 2}
    plan = rlsolve.solve(spec).model_dump(mode="json")
    assert plan["parallelism"]["generation"]["pp"] == 2
    res = export_plan(plan, spec, "nemo-rl")
    assert res.warnings == []
    job = prepare(plan, spec)
    doc = yaml.safe_load(res.text)
    gen = doc["policy"]["generation"]
    assert gen["vllm_cfg"]["async_engine"] is True and gen["vllm_cfg"]["pipeline_parallel_size"] == 2
    assert gen["vllm_kwargs"]["max_num_seqs"] == job.max_num_seqs() > 128
    path = tmp_path / "pp2.yaml"
    path.write_text(res.text)
    row = _nemo_rl_check(nemo_rl_checkout, path)[0]
    assert "error" not in row, (row.get("error"), row.get("trace"))
    assert row["config"]["policy"]["generation"]["vllm_kwargs"]["max_num_seqs"] == job.max_num_seqs()


def test_nemo_rl_ppo_runs_colocated_with_the_critics_own_backend_and_nemo_rl_refuses_what_it_cannot_run(
        tmp_path, nemo_rl_checkout):
    """NeMo-RL 0.7 PPO (ppo.py): the plan for the 1.5B PPO example is colocated with the critic on the policy's
    GPUs; a critic on Megatron with pp=2 cp=2 beside an FSDP policy is a legal plan (the value backend is its own,
    capabilities.yaml critic_training) and exports value.megatron_cfg with packed sequences, whose Value workers
    NeMo-RL lays out as planned. A DTensor critic with cp=2 is not legal (the export refuses the plan), and
    NeMo-RL's own ppo.setup refuses it written by hand; so does it non-colocated generation and a value tp that
    does not divide the policy's GPUs."""
    from rlsolve import load_spec
    from rlsolve.plan import Plan
    from rlsolve.resolve import resolve
    from rlsolve.solver.validate import plan_violations
    spec = yaml.safe_load((ROOT / "examples/ppo-1.5b-8xh100.yaml").read_text())
    spec["target"] = {"framework": "nemo-rl"}
    plan = rlsolve.solve(spec).model_dump(mode="json")
    assert (plan["pipeline"]["mode"], plan["placement"]["value"]) == ("colocated", "training")
    n = plan["resource_allocation"]["training"]["gpus"]
    problem = resolve(load_spec(spec))
    mega = yaml.safe_load(yaml.safe_dump(plan))
    mega["parallelism"]["training"].update(zero_stage=3, pp=1, tp=1, ep=1)  # the policy on FSDP
    mega["parallelism"]["critic"].update(tp=1, pp=2, cp=2, dp=n // 4, zero_stage=1, recompute="selective",
                                         micro_batch=1, grad_accum=problem.workload.global_batch // (n // 4))
    assert not [v for v in plan_violations(problem, Plan.model_validate(mega)) if "critic" in v]
    dtensor_cp = yaml.safe_load(yaml.safe_dump(mega))
    dtensor_cp["parallelism"]["critic"].update(pp=1, cp=2, dp=n // 2, zero_stage=3, recompute="none",
                                               grad_accum=problem.workload.global_batch // (n // 2))
    assert any("no critic training strategy" in v for v in plan_violations(problem, Plan.model_validate(dtensor_cp)))
    # a DTensor critic over the policy's GPUs (the hand-written refusals below start from it; the solver's own
    # critic may run either backend)
    fsdp = yaml.safe_load(yaml.safe_dump(plan))
    fsdp["parallelism"]["critic"].update(tp=1, pp=1, cp=1, dp=n, zero_stage=3, recompute="none", micro_batch=2,
                                         grad_accum=problem.workload.global_batch // (n * 2))
    assert not [v for v in plan_violations(problem, Plan.model_validate(fsdp)) if "critic" in v]
    files, jobs = [], []
    for name, p in (("plan", plan), ("megatron-critic", mega), ("fsdp-critic", fsdp)):
        res = export_plan(p, spec, "nemo-rl")
        assert res.warnings == [], (name, res.warnings)
        job = prepare(p, spec)
        CHECKS["nemo-rl"](job, res)
        files.append(tmp_path / f"{name}.yaml")
        files[-1].write_text(res.text)
        jobs.append(job)
    assert yaml.safe_load(files[1].read_text())["value"]["megatron_cfg"]["enabled"] is True
    with pytest.raises(SpecError) as err:  # a plan for the target is checked against its rules before export
        export_plan(dtensor_cp, spec, "nemo-rl")
    assert err.value.field == "layout.parallelism.critic"
    assert yaml.safe_load(files[2].read_text())["value"]["dtensor_cfg"]["enabled"] is True
    doc = yaml.safe_load(files[2].read_text())  # written by hand, NeMo-RL's own setup refuses it too
    doc["value"]["dtensor_cfg"]["context_parallel_size"] = 2
    files.append(tmp_path / "dtensor-cp.yaml")
    files[-1].write_text(yaml.safe_dump(doc))
    doc = yaml.safe_load(files[2].read_text())
    doc["policy"]["generation"]["colocated"]["enabled"] = False
    files.append(tmp_path / "sync.yaml")
    files[-1].write_text(yaml.safe_dump(doc))
    doc = yaml.safe_load(files[2].read_text())
    doc["value"]["dtensor_cfg"]["tensor_parallel_size"] = 3
    files.append(tmp_path / "value-tp3.yaml")
    files[-1].write_text(yaml.safe_dump(doc))
    rows = _nemo_rl_check(nemo_rl_checkout, *files)
    for job, row in zip(jobs, rows):
        assert "error" not in row, (row["file"], row.get("error"), row.get("trace"))
        c = job.critic_t
        assert row["value_sharding"] == {"pipeline_parallel": c.pp, "data_parallel": c.dp, "context_parallel": c.cp,
                                         "tensor_parallel": c.tp}
        assert {k: sum(b) for k, b in row["clusters"].items()} == {"grpo_policy_cluster": job.train.gpus,
                                                                   **rm_cluster(job)}
    assert "Context parallelism (CP>1) is currently not supported for the DTensor PPO value" in rows[3]["error"]
    assert "PPO currently requires colocated generation" in rows[4]["error"]
    assert "must be divisible by PP * CP * TP (3)" in rows[5]["error"]


def test_nemo_rl_on_a_cluster_of_two_gpu_types_plans_one_pool_and_says_the_other_is_idle(tmp_path, nemo_rl_checkout):
    """NeMo-RL 0.7 cannot pin a role to a GPU type (its placement-group bundles ask for any GPU:
    virtual_cluster.py), so on H20 + H800 pools the plan puts every role on one pool, whose nodes form the Ray
    cluster, and says the other is idle (plan explanation, export note); the GPUs counted are that pool's.
    NeMo-RL's own grpo.setup builds its clusters from the export with exactly those GPUs. A layout with roles on
    both pools is refused for this target, naming the source; verl (which pins pools) may use both."""
    from rlsolve import load_spec
    from rlsolve.plan import Plan
    from rlsolve.resolve import resolve
    from rlsolve.solver.validate import plan_violations
    got = solved(ROOT / "examples/grpo-hetero-h20-h800.yaml", "nemo-rl")
    assert not isinstance(got, SpecError), got
    spec, plan = got
    ra = plan["resource_allocation"]
    pools = {ra["generation"]["pool"], ra["training"]["pool"]} | ({ra["auxiliary"]["pool"]} if ra["auxiliary"] else set())
    assert len(pools) == 1
    (used,) = pools
    idle = [p for p in spec["cluster"]["pools"] if p["name"] != used]
    text = " ".join(plan["explanation"])
    assert "one pool" in text and all(f"{p['name']!r}" in text and "left idle" in text for p in idle)
    pool_gpus = next(p["nodes"] * 8 for p in spec["cluster"]["pools"] if p["name"] == used)
    gpus = ra["training"]["gpus"] if plan["pipeline"]["mode"] == "colocated" else \
        ra["training"]["gpus"] + ra["generation"]["gpus"]
    assert gpus <= pool_gpus
    res = export_plan(plan, spec, "nemo-rl")
    assert res.warnings == [] and f"start the Ray cluster on pool {used!r}'s nodes only" in res.text
    path = tmp_path / "hetero.yaml"
    path.write_text(res.text)
    row = _nemo_rl_check(nemo_rl_checkout, path)[0]
    assert "error" not in row, (row.get("error"), row.get("trace"))
    assert sum(sum(b) for b in row["clusters"].values()) == gpus  # NeMo-RL asks Ray for the plan's GPUs only
    problem = resolve(load_spec(spec))
    split = yaml.safe_load(yaml.safe_dump(plan))
    other = idle[0]["name"]
    if split["pipeline"]["mode"] == "colocated":  # the same step on two pools: engines on one, trainers on the other
        split["pipeline"]["mode"] = "sync"
    split["resource_allocation"]["generation"]["pool"] = other
    bad = [v for v in plan_violations(problem, Plan.model_validate(split)) if "one pool" in v]
    assert bad and "virtual_cluster.py" in bad[0]
    spec_verl = {**spec, "target": {"framework": "verl"}}
    assert not [v for v in plan_violations(resolve(load_spec(spec_verl)), Plan.model_validate(split))
                if "one pool" in v]


@pytest.mark.parametrize("framework", ["verl", "nemo-rl", "any"])
def test_an_uneven_pipeline_exports_its_stage_split_and_passes_the_validators(framework):
    """A pipeline degree that does not divide the layers runs as Megatron-Core expresses it, the first and last
    stage set apart and the middle even (rules.pipeline_split), with no stage above ceil(layers / pp) as the
    model times it: Qwen3-8B's 36 layers over pp=8 are 3 | 6 x 5 | 3. Megatron's validate_args (run on every
    target's Megatron arguments) rejects the degree without the split; verl's and NeMo-RL's configs carry it."""
    spec = yaml.safe_load((ROOT / "examples" / "grpo-8b-16xa100.yaml").read_text())
    spec["target"] = {"framework": framework}
    spec["model"]["policy"] = "qwen3-8b"
    spec["constraints"] = {**spec.get("constraints", {}), "training": {"pp": [8]}}
    plan = rlsolve.solve(spec, time_limit_s=120).model_dump(mode="json")
    job = prepare(plan, spec)
    assert job.t.pp == 8 and job.policy.layers == 36
    margs = fv.megatron(export_plan(plan, spec, "megatron"), job)
    assert (margs.decoder_first_pipeline_num_layers, margs.decoder_last_pipeline_num_layers) == (3, 3)
    assert margs.pipeline_model_parallel_size == 8
    for target in FRAMEWORK_EXPORTS.get(framework, ()):
        res = export_plan(plan, spec, target)
        assert res.warnings == [], (target, res.warnings)
        if target in ("verl", "verl-yaml"):
            built = fv.VALIDATORS[target](res, job)
            over = built.actor_rollout_ref.actor.megatron.override_transformer_config
            assert (over.num_layers_in_first_pipeline_stage, over.num_layers_in_last_pipeline_stage) == (3, 3)
        elif target == "nemo-rl":
            assert "num_layers_in_first_pipeline_stage: 3" in res.text
            assert "num_layers_in_last_pipeline_stage: 3" in res.text

