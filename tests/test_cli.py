"""The command line: the main job, output formats, and every bad input of the core issue."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rlsolve.cli.main import main

from conftest import ROOT, small_spec

EX = str(ROOT / "examples" / "ppo-7b-8xh100.yaml")


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


def write(tmp_path: Path, data, name="spec.yaml") -> str:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


def test_main_job_table_json_yaml_and_output_file(tmp_path):
    r = run("--objective", "throughput", EX, "--format", "table")
    assert r.exit_code == 0, r.output
    assert "tokens/s" in r.output and "bottleneck phase" in r.output
    r = run(EX, "--format", "json")
    plan = json.loads(r.output)
    for key in ("status", "pipeline", "resource_allocation", "placement", "parallelism", "optimization",
                "memory_gb_per_gpu", "time_s", "throughput", "metrics", "solver", "explanation"):
        assert key in plan
    out = tmp_path / "plan.yaml"
    r = run("solve", EX, "--format", "yaml", "-o", str(out))
    assert r.exit_code == 0
    assert yaml.safe_load(out.read_text())["status"] == "optimal"


def test_estimate_rescores_a_plan_file(tmp_path):
    out = tmp_path / "plan.yaml"
    run(EX, "-o", str(out), "--format", "json")
    r = run("estimate", EX, str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    solved = yaml.safe_load(out.read_text())
    again = json.loads(r.output)
    assert again["time_s"] == solved["time_s"]
    assert again["throughput"] == solved["throughput"]


def test_catalog_commands_and_schema():
    assert "H100-SXM-80GB" in run("gpus").output
    assert "IB-NDR-400" in run("gpus", "--networks").output
    assert "llama-3.1-70b" in run("models").output
    schema = json.loads(run("schema").output)
    assert "cluster" in schema["properties"]
    assert schema["$defs"]["RL"]["properties"]["prompts_per_step"]["description"]


def test_explain_with_layout(tmp_path):
    spec = write(tmp_path, small_spec())
    out = tmp_path / "plan.yaml"
    run(spec, "-o", str(out), "--format", "json")
    data = yaml.safe_load(out.read_text())
    data["parallelism"]["training"]["micro_batch"] = 1
    data["parallelism"]["training"]["grad_accum"] = 1
    r = run("explain", spec, write(tmp_path, data, "mine.yaml"))
    assert r.exit_code == 0, r.output
    assert "your layout" in r.output


BAD = {
    "unknown gpu": (small_spec(cluster={"gpu": "H100-SXM"}), "cluster.gpu", "H100-SXM-80GB"),
    "unknown model": (small_spec(model={"policy": "llama-3.1-7b"}), "model.policy", "llama-3.1-8b"),
    "missing field": ({"cluster": {"gpu": "H100", "nodes": 1}, "model": {"policy": "llama-3.1-8b"}}, "rl", "add it"),
    "mistyped field": (small_spec(rl={"prompts_per_stepp": 3}), "rl.prompts_per_stepp", "spelling"),
    "zero nodes": (small_spec(cluster={"nodes": 0}), "cluster.nodes", "greater than 0"),
    "negative count": (small_spec(rl={"samples_per_prompt": -4}), "rl.samples_per_prompt", "greater than 0"),
    "unknown network": (small_spec(cluster={"network": "IB-NDR-4000"}), "cluster.network", "did you mean"),
    "mean above max": (small_spec(rl={"response_len": {"max": 100, "mean": 200}}), "rl.response_len", "exceed"),
    "control character in a key": (small_spec(solver={"top_k": 1, "x\x1ey": 1}), "solver.x\\x1ey", "unknown field"),
    "engine share above 1": (small_spec(constraints={"generation": {"gpu_memory_utilization": 1.5}}),
                             "constraints.generation", "a fraction of GPU memory from 0.05 to 1"),
    "engine share as a list": (small_spec(constraints={"generation": {"gpu_memory_utilization": [0.5, 0.6]}}),
                               "constraints.generation", "gpu_memory_utilization: [0.5, 0.6] is not a fraction"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_exit_2_one_line_names_the_field(tmp_path, case):
    spec, field, hint = BAD[case]
    out = tmp_path / "plan.yaml"
    r = CliRunner().invoke(main, [write(tmp_path, spec), "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert field in lines[0] and hint in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize("text,hint", [("cluster: [1, 2\n", "YAML syntax error"), ("", "empty"),
                                       ("- a\n- b\n", "mapping")])
def test_yaml_problems_exit_2(tmp_path, text, hint):
    r = CliRunner().invoke(main, [write(tmp_path, text)])
    assert r.exit_code == 2 and hint in r.output and "Traceback" not in r.output


def test_missing_file_exit_2(tmp_path):
    r = CliRunner().invoke(main, [str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "file not found" in r.output


def test_layout_tp_not_dividing_heads_exit_2(tmp_path):
    spec = write(tmp_path, small_spec())
    out = tmp_path / "plan.yaml"
    run(spec, "-o", str(out), "--format", "json")
    data = yaml.safe_load(out.read_text())
    data["parallelism"]["generation"].update(tp=3, dp=1)
    data["resource_allocation"]["generation"]["gpus"] = 3
    r = CliRunner().invoke(main, ["estimate", spec, write(tmp_path, data, "bad.yaml")])
    assert r.exit_code == 2, r.output
    assert "layout.parallelism.generation.tp" in r.output and "heads" in r.output


def test_model_that_cannot_fit_exit_3(tmp_path):
    spec = write(tmp_path, small_spec(cluster={"gpu": "L4", "nodes": 1, "gpus_per_node": 2},
                                      model={"policy": "llama-3.1-70b"}))
    out = tmp_path / "plan.yaml"
    r = CliRunner().invoke(main, [spec, "-o", str(out)])
    assert r.exit_code == 3, r.output
    assert "infeasible" in r.output and "GB" in r.output and "Traceback" not in r.output
    assert not out.exists()
