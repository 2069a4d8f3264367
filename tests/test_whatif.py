"""What-if studies (issue 7): compare, cache, executors, output formats, pictures, CLI."""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import rlsolve
from rlsolve.cli.main import main

from conftest import ROOT
from rlsolve.errors import SpecError
from rlsolve.whatif import compare, render, write_memory, write_sweep_plot, write_timeline
from rlsolve.whatif.figdata import timeline_lanes
from rlsolve.whatif.sweep import cache_key, mark_pareto

SVG_NS = "{http://www.w3.org/2000/svg}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny(**over) -> dict:
    """A 1.5B GRPO job on one node: each solve takes well under a second."""
    spec = {
        "cluster": {"gpu": "H100-SXM-80GB", "nodes": 1, "network": "IB-NDR-400"},
        "model": {"policy": "qwen2.5-1.5b", "reference": "policy", "reward": "rule"},
        "rl": {"algorithm": "grpo", "prompts_per_step": 64, "samples_per_prompt": 4, "prompt_len": 256,
               "response_len": {"max": 1024, "mean": 512}, "mini_batches": 2, "max_staleness": 1},
    }
    for k, v in over.items():
        spec[k] = {**spec.get(k, {}), **v} if isinstance(v, dict) else v
    return spec


def ppo(modes: list[str]) -> dict:
    """PPO with a reward model and a critic: every phase of the timeline is present."""
    return tiny(model={"value": "policy", "reward": "qwen2.5-1.5b"}, rl={"algorithm": "ppo"},
                constraints={"modes": modes}, solver={"top_k": 0})


# H100 x 1 node fits; L4 (24 GB) x 1 node cannot hold a 70B policy, and neither can one H100 node.
BIG = tiny(model={"policy": "llama-3.1-70b"})


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A 2 GPU x 2 node study through the process pool, plus one infeasible point."""
    cache = tmp_path_factory.mktemp("cache")
    rows = compare(tiny(), gpus=["H100-SXM-80GB", "L4"], nodes=[1, 2], workers=2, cache_dir=cache)
    return rows, cache


@pytest.fixture(scope="module")
def plans():
    return {m: rlsolve.solve(ppo([m])) for m in ("colocated", "sync", "async")}


def parse_svg(path_or_text) -> ET.Element:
    text = Path(path_or_text).read_text() if isinstance(path_or_text, Path) else path_or_text
    assert len(text) > 500
    root = ET.fromstring(text)
    assert root.tag == f"{SVG_NS}svg"
    assert float(root.get("width").removesuffix("pt")) > 100 and float(root.get("height").removesuffix("pt")) > 100
    drawn = [e for e in root.iter() if e.tag[len(SVG_NS):] in ("rect", "circle", "line", "polyline", "path")]
    assert len(drawn) >= 10 and root.findall(f".//{SVG_NS}text")
    return root


# --- compare ------------------------------------------------------------------------------

def test_rows_numbers_and_order(study):
    rows, _ = study
    assert [(r.gpu, r.nodes) for r in rows] == [("H100-SXM-80GB", 1), ("H100-SXM-80GB", 2), ("L4", 1), ("L4", 2)]
    from rlsolve.hardware_db import find_gpu
    for r in rows:
        assert r.feasible and r.status == "optimal", r.reason
        hw = find_gpu(r.gpu)
        assert r.gpus == r.nodes * hw.default_gpus_per_node
        assert 0 < r.gpus_used <= r.gpus
        assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_s / r.gpus_used, rel=1e-3)
        assert r.price_usd_per_gpu_hour == hw.price_per_gpu_hour_usd and r.price_source.startswith("catalog")
        assert r.usd_per_mtok == pytest.approx(r.gpus_used * hw.price_per_gpu_hour_usd / 3600 / r.tokens_per_s * 1e6,
                                               rel=1e-3)
        assert r.tokens_per_s_per_kw == pytest.approx(r.tokens_per_s / (r.gpus_used * hw.tdp_w / 1000), rel=1e-3)
        assert r.mode in ("colocated", "sync", "async") and "tp=" in r.generation and "ZeRO-" in r.training
        assert isinstance(r.gen_tp, int) and r.gen_tp * r.gen_pp * r.gen_dp == r.gen_gpus
    # the same point solved alone gives the same plan
    one = rlsolve.solve(tiny(cluster={"gpu": "L4", "nodes": 2}))
    assert rows[3].tokens_per_s == one.throughput.tokens_per_s and rows[3].mode == one.pipeline.mode


def test_pareto_front_is_the_nondominated_set(study):
    rows, _ = study
    assert any(r.pareto for r in rows)
    for r in rows:
        dominated = any(o.tokens_per_s >= r.tokens_per_s and o.usd_per_mtok <= r.usd_per_mtok
                        and (o.tokens_per_s, o.usd_per_mtok) != (r.tokens_per_s, r.usd_per_mtok) for o in rows)
        assert r.pareto == (not dominated)


def test_pareto_marks_synthetic_rows():
    from rlsolve.whatif import Row
    mk = lambda t, c, s="optimal": Row(gpu="X", nodes=1, network="n", gpus=8, status=s, gpus_used=8,  # noqa: E731
                                       tokens_per_s=t, usd_per_mtok=c)
    rows = mark_pareto([mk(10, 1.0), mk(20, 2.0), mk(15, 2.5), mk(20, 2.0), mk(None, None, "infeasible")])
    assert [r.pareto for r in rows] == [True, True, False, True, False]


def test_infeasible_point_is_a_row_not_an_error(tmp_path):
    rows = compare(BIG, gpus=["H100-SXM-80GB", "L4"], nodes=[1], workers=1, cache_dir=tmp_path)
    assert [r.status for r in rows] == ["infeasible", "infeasible"]
    assert all("GB" in r.reason and not r.pareto and r.tokens_per_s is None for r in rows)
    text = render(rows, "table")
    assert f"infeasible: L4 x 1 node, IB-NDR-400: {rows[1].reason}" in text


def test_a_point_out_of_time_is_an_unknown_row_never_cached(tmp_path, monkeypatch):
    import rlsolve.solver

    def out_of_time(spec, objective=None, **options):
        raise rlsolve.NoAnswerError(0.5, "the optimum")
    monkeypatch.setattr(rlsolve.solver, "solve", out_of_time)
    rows = compare(tiny(), gpus=["L4"], nodes=[1], workers=1, cache_dir=tmp_path)
    assert [r.status for r in rows] == ["unknown"] and "time limit" in rows[0].reason and not rows[0].feasible
    assert not list(tmp_path.glob("*.json"))  # a later run searches again


def test_time_limit_reaches_every_solve(tmp_path, monkeypatch):
    """compare(time_limit_s=) (the CLI's --time-limit, which the unknown rows' message names) sets each point's
    solver.time_limit_s; the spec's own limit otherwise."""
    import rlsolve.solver
    seen = []

    def record(spec, objective=None, **options):
        seen.append(spec["solver"]["time_limit_s"])  # each point's spec travels to its worker as a dict
        raise rlsolve.NoAnswerError(seen[-1], "the optimum")
    monkeypatch.setattr(rlsolve.solver, "solve", record)
    compare(tiny(), gpus=["L4"], nodes=[1, 2], workers=1, cache_dir=False, time_limit_s=77.0)
    compare(tiny(), gpus=["L4"], nodes=[1], workers=1, cache_dir=False)
    assert seen == [77.0, 77.0, 10.0]
    r = run("compare", write(tmp_path, tiny()), "--time-limit", "0", "--no-cache")
    assert r.exit_code == 2 and "--time-limit" in r.output and "Traceback" not in r.output


def test_cache_resumes_an_interrupted_sweep(study, tmp_path):
    rows, cache = study
    files = sorted(cache.glob("*.json"))
    assert len(files) == 4
    seen = []
    again = compare(tiny(), gpus=["H100-SXM-80GB", "L4"], nodes=[1, 2], workers=2, cache_dir=cache,
                    progress=lambda done, total: seen.append((done, total)))
    assert all(r.from_cache for r in again)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in rows]
    assert seen[-1] == (4, 4)
    # an interruption: one result missing, one cut short mid-write
    files[0].unlink()
    files[1].write_text('{"key": "')
    seen.clear()
    resumed = compare(tiny(), gpus=["H100-SXM-80GB", "L4"], nodes=[1, 2], workers=1, cache_dir=cache,
                      progress=lambda done, total: seen.append((done, total)))
    assert sum(not r.from_cache for r in resumed) == 2
    assert [r.to_dict() for r in resumed] == [r.to_dict() for r in rows]
    assert seen[-1] == (4, 4) and seen[0][0] >= 2
    assert len(list(cache.glob("*.json"))) == 4 and not list(cache.glob(".tmp-*"))


def test_cache_key_covers_spec_objective_and_catalog(monkeypatch):
    spec = rlsolve.load_spec(tiny()).model_dump(mode="json")
    k = cache_key(spec, "throughput")
    assert k == cache_key(spec, "throughput")
    assert k != cache_key(spec, "cost")
    other = {**spec, "rl": {**spec["rl"], "prompts_per_step": 128}}
    assert k != cache_key(other, "throughput")
    assert k != cache_key(spec, "throughput", catalog="a different catalog")


def test_cache_disabled_and_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from rlsolve.whatif import default_cache_dir
    assert default_cache_dir() == tmp_path / "rlsolve" / "sweeps"
    rows = compare(tiny(), cache_dir=False)
    assert len(rows) == 1 and rows[0].feasible and not (tmp_path / "rlsolve").exists()


def test_prices_override_per_run_and_from_the_spec(study, tmp_path):
    rows, cache = study
    base = {r.gpu: r for r in rows if r.nodes == 1}
    over = compare(tiny(cluster={"price_per_gpu_hour_usd": 1.0}), gpus=["H100-SXM-80GB", "L4"], nodes=[1],
                   prices={"L4": 0.5}, cache_dir=tmp_path)
    h100, l4 = over
    assert h100.price_usd_per_gpu_hour == 1.0 and h100.price_source.startswith("spec override")
    assert l4.price_usd_per_gpu_hour == 0.5 and l4.price_source == "per-run override"
    # the spec's price is for its own GPU; the throughput does not change, the cost does
    assert h100.tokens_per_s == base["H100-SXM-80GB"].tokens_per_s
    assert h100.usd_per_mtok == pytest.approx(base["H100-SXM-80GB"].usd_per_mtok / base["H100-SXM-80GB"]
                                              .price_usd_per_gpu_hour, rel=1e-3)


def test_bad_inputs_raise_spec_error():
    with pytest.raises(SpecError, match="did you mean"):
        compare(tiny(), gpus=["H100-SXM-80"], cache_dir=False)
    with pytest.raises(SpecError, match="network"):
        compare(tiny(), networks=["IB-NDR-4000"], cache_dir=False)
    with pytest.raises(SpecError, match="executor"):
        compare(tiny(), executor="dask", cache_dir=False)
    with pytest.raises(SpecError, match="price"):
        compare(tiny(), prices={"L4": -1}, cache_dir=False)
    pools = tiny()
    pools["cluster"] = {"pools": [{"name": "a", "gpu": "H100-SXM-80GB", "nodes": 1}]}
    with pytest.raises(SpecError, match="single-pool"):
        compare(pools, cache_dir=False)


def test_output_formats(study):
    rows, _ = study
    table = render(rows, "table")
    assert "tokens/s" in table and "$/Mtok" in table and "Pareto" in table
    assert "prices: H100-SXM-80GB $" in table
    data = json.loads(render(rows, "json"))
    assert len(data) == 4 and {"gpu", "tokens_per_s", "usd_per_mtok", "tokens_per_s_per_kw", "pareto"} <= set(data[0])
    import csv
    import io
    parsed = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert len(parsed) == 4 and float(parsed[0]["tokens_per_s"]) == rows[0].tokens_per_s
    # degrees are numbers, one column each, in both machine formats
    for name in ("gen_tp", "gen_pp", "gen_dp", "train_tp", "train_pp", "train_cp", "train_dp", "train_zero_stage"):
        assert isinstance(data[0][name], int) and data[0][name] == getattr(rows[0], name)
        assert int(parsed[0][name]) == getattr(rows[0], name)
    assert "generation" not in data[0] and "training" not in parsed[0]
    md = render(rows, "markdown").splitlines()
    assert md[0].startswith("| gpu |") and md[1].startswith("|---") and len([x for x in md if x.startswith("| ")]) == 5


def test_ray_executor_matches_the_local_pool(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'rlsolve[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        got = compare(tiny(), gpus=["H100-SXM-80GB", "L4"], nodes=[1], executor="ray", cache_dir=tmp_path)
    finally:
        ray.shutdown()
    local = compare(tiny(), gpus=["H100-SXM-80GB", "L4"], nodes=[1], workers=1, cache_dir=False)
    assert [r.to_dict() for r in got] == [r.to_dict() for r in local]
    assert len(list(tmp_path.glob("*.json"))) == 2


# --- pictures -----------------------------------------------------------------------------
# Every picture is a matplotlib Figure (rlsolve.whatif.figures); the tests read the Figure
# before it is saved (labels, scales, series, legend entries) and the saved SVG's text.

def synthetic_study():
    """Two GPU types x two networks x 8..64 GPUs, one point infeasible: no solving needed."""
    from rlsolve.whatif import Row
    rows = []
    for gpu, speed in (("H100-SXM-80GB", 1000.0), ("L4", 150.0)):
        for net, factor in (("IB-NDR-400", 1.0), ("Eth-100", 0.97)):
            for nodes in (1, 2, 4, 8):
                n = nodes * 8
                if gpu == "L4" and nodes == 1 and net == "Eth-100":
                    rows.append(Row(gpu=gpu, nodes=nodes, network=net, gpus=n, status="infeasible", reason="memory"))
                    continue
                tps = speed * n ** 0.9 * factor * 100
                rows.append(Row(gpu=gpu, nodes=nodes, network=net, gpus=n, status="optimal", gpus_used=n,
                                tokens_per_s=tps, usd_per_mtok=n * (3.0 if gpu == "L4" else 6.0) / 3600 / tps * 1e6))
    return mark_pareto(rows)


def figure_texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text") and a.get_text())]


def svg_texts(path) -> str:
    root = parse_svg(path)
    return " ".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text"))


def test_sweep_figure_labels_series_and_legend(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional extra: pip install 'rlsolve[plot]')")
    from rlsolve.whatif.figures import INFEASIBLE_LABEL, sweep_figure
    rows = synthetic_study()
    fig = sweep_figure(rows)
    ax_tps, ax_cost, ax_front = fig.axes
    for ax in (ax_tps, ax_cost):  # 8..64 GPUs: a log axis, and its label says so
        assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
        assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16", "32", "64"]
    assert ax_tps.get_ylabel() == "trained tokens/s" and "USD per million" in ax_cost.get_ylabel()
    # one line per (GPU, network) series, each with its own style: colour by GPU, line and marker by network
    lines = [ln for ln in ax_tps.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) == 4
    assert len({(ln.get_color(), ln.get_linestyle(), ln.get_marker()) for ln in lines}) == 4
    assert len({ln.get_linestyle() for ln in lines}) == 2 and len({ln.get_marker() for ln in lines}) == 2
    # large numbers carry thousands separators
    fig.canvas.draw()
    assert any("," in t.get_text() for t in ax_tps.get_yticklabels())
    # the legend is the figure's, outside every axes, and names every series, the front and the crosses
    (legend,) = fig.legends
    entries = [t.get_text() for t in legend.get_texts()]
    assert {"H100-SXM-80GB, IB-NDR-400", "H100-SXM-80GB, Eth-100", "L4, IB-NDR-400", "L4, Eth-100"} <= set(entries)
    assert any(e.startswith("Pareto front") for e in entries) and any(INFEASIBLE_LABEL in e for e in entries)
    box = legend.get_window_extent()
    assert all(not box.overlaps(ax.get_window_extent()) for ax in fig.axes)
    out = tmp_path / "study.svg"
    write_sweep_plot(rows, out)
    text = svg_texts(out)
    assert "cluster GPUs (log scale)" in text and "L4, Eth-100" in text and "Pareto front" in text


@pytest.mark.parametrize("mode", ["colocated", "sync", "async"])
def test_timeline_figure_names_every_block(plans, mode, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional extra: pip install 'rlsolve[plot]')")
    from rlsolve.whatif.figdata import PHASES
    from rlsolve.whatif.figures import timeline_figure
    plan = plans[mode]
    tl = timeline_lanes(plan)
    assert len(tl.lanes) == (1 if mode == "colocated" else 2)
    phases = {s.phase for lane in tl.lanes for s in lane.segments}
    assert {"decode", "train", "value", "old_logprob"} <= phases
    # the plan rounds every time to the millisecond, so n phases laid end to end may drift from the
    # rounded step by up to (n + 1) half-milliseconds (unrounded, they add up to it exactly)
    drift = 5e-4 * (max(len(lane.segments) for lane in tl.lanes) + 1)
    for lane in tl.lanes:  # lanes are contiguous and end at the step
        assert lane.segments[0].start == 0
        assert all(a.end == pytest.approx(b.start) for a, b in zip(lane.segments, lane.segments[1:]))
        assert lane.segments[-1].end == pytest.approx(tl.step, abs=drift)
    assert tl.step == pytest.approx(plan.time_s.step, abs=drift)
    fig = timeline_figure(plan, gpu_names={"main": "H100-SXM-80GB"})
    ax_time, ax_mem = fig.axes
    legend = [t.get_text() for t in ax_time.get_legend().get_texts()]
    for phase in phases:  # every block is in the legend (and the wide ones on the bar too)
        assert PHASES[phase][0] in legend, (phase, legend)
    assert "old log-probs" in legend
    if mode == "async":
        assert any("overlap" in e for e in legend)
    lanes = " ".join(t.get_text() for t in ax_time.get_yticklabels())
    assert lanes.count("H100-SXM-80GB") == len(tl.lanes)  # each GPU group names its GPU type
    on_bars = [t.get_text() for t in ax_time.texts]
    assert any(t.startswith("decode") for t in on_bars)
    # memory: a stacked bar per role, a labelled capacity line each
    assert ax_mem.get_ylabel() == "GB per GPU"
    mem_legend = [t.get_text() for t in ax_mem.get_legend().get_texts()]
    assert "GPU memory capacity" in mem_legend and "weights" in mem_legend
    cap = [t.get_text() for t in ax_mem.texts if t.get_text().startswith("capacity")]
    assert cap == ["capacity 85 GB (H100-SXM-80GB)"] * 2  # 84.94e9 bytes, as the H100 reports its 80 GB
    out = tmp_path / "t.svg"
    write_timeline(plan, out, spec=ppo([mode]))
    text = svg_texts(out)
    assert "old log-probs" in text and "GB per GPU" in text and "H100-SXM-80GB" in text


def test_heterogeneous_timeline_names_each_pools_gpu(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional extra: pip install 'rlsolve[plot]')")
    from rlsolve.whatif import pool_gpus
    from rlsolve.whatif.figures import timeline_figure
    spec = ROOT / "examples" / "grpo-hetero-h20-h800.yaml"
    plan = rlsolve.solve(spec, top_k=0)
    names = pool_gpus(spec)
    assert names == {"rollout": "H20-96GB", "train": "H800-SXM-80GB"}
    fig = timeline_figure(plan, gpu_names=names)
    ax_time, ax_mem = fig.axes
    lanes = " ".join(t.get_text() for t in ax_time.get_yticklabels())
    used = {plan.resource_allocation.generation.pool, plan.resource_allocation.training.pool}
    for pool in used:
        assert f"pool {pool}: {names[pool]}" in lanes
    caps = " ".join(t.get_text() for t in ax_mem.texts)
    for pool in used:
        assert names[pool] in caps


def test_every_format_is_written(plans, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (optional extra: pip install 'rlsolve[plot]')")
    rows = synthetic_study()
    for ext, magic in (("png", PNG_MAGIC), ("pdf", b"%PDF"), ("svg", b"<?xml")):
        write_sweep_plot(rows, tmp_path / f"s.{ext}")
        write_timeline(plans["async"], tmp_path / f"t.{ext}")
        write_memory(plans["colocated"], tmp_path / f"m.{ext}")
        for name in ("s", "t", "m"):
            data = (tmp_path / f"{name}.{ext}").read_bytes()
            assert data.startswith(magic) and len(data) > 10_000, (name, ext)
    # the same plan gives the same SVG (no dates, no random ids): the docs' gallery is reproducible
    write_timeline(plans["async"], tmp_path / "again.svg")
    assert (tmp_path / "again.svg").read_bytes() == (tmp_path / "t.svg").read_bytes()


def test_pictures_without_matplotlib_name_the_install(monkeypatch, plans, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    for ext in ("svg", "png", "pdf"):
        with pytest.raises(SpecError, match=r"pip install 'rlsolve\[plot\]'"):
            write_timeline(plans["sync"], tmp_path / f"t.{ext}")
    with pytest.raises(SpecError, match=r"\.svg, \.png or \.pdf"):
        write_memory(plans["sync"], tmp_path / "m.gif")
    assert not list(tmp_path.iterdir())  # nothing written


# --- command line -------------------------------------------------------------------------

def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write(tmp_path: Path, data, name="spec.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_cli_compare_formats_and_plot(study, tmp_path):
    _, cache = study
    spec = write(tmp_path, tiny())
    args = ["compare", spec, "--gpu", "H100-SXM-80GB,L4", "--nodes", "1,2", "--cache-dir", str(cache)]
    r = run(*args, "--plot", str(tmp_path / "p.svg"))
    assert r.exit_code == 0, r.output
    assert "H100-SXM-80GB" in r.output and "L4" in r.output and "pareto" in r.output
    parse_svg(tmp_path / "p.svg")
    assert len(json.loads(run(*args, "--format", "json").output)) == 4
    assert run(*args, "--format", "csv").output.startswith("gpu,nodes,network")
    assert run(*args, "--format", "markdown").output.startswith("| gpu |")


def test_cli_compare_errors(tmp_path, monkeypatch):
    spec = write(tmp_path, tiny())
    r = run("compare", spec, "--nodes", "four")
    assert r.exit_code == 2 and "--nodes" in r.output and "Traceback" not in r.output
    r = run("compare", spec, "--gpu", "H100-SXM-80")
    assert r.exit_code == 2 and "did you mean" in r.output
    r = run("compare", spec, "--price", "L4")
    assert r.exit_code == 2 and "GPU=USD" in r.output
    r = run("compare", spec, "--plot", str(tmp_path / "p.gif"), "--no-cache")
    assert r.exit_code == 2 and ".svg, .png or .pdf" in r.output
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = run("compare", spec, "--plot", str(tmp_path / "p.png"), "--no-cache")
    assert r.exit_code == 2 and "pip install 'rlsolve[plot]'" in r.output
    r = run("compare", write(tmp_path, BIG, "big.yaml"), "--gpu", "L4", "--no-cache")
    assert r.exit_code == 3 and "infeasible" in r.output


def test_cli_timeline(tmp_path):
    spec = write(tmp_path, ppo(["async"]))
    out, mem = tmp_path / "t.svg", tmp_path / "m.svg"
    r = run("timeline", spec, str(out), "--memory", str(mem))
    assert r.exit_code == 0, r.output
    parse_svg(out)
    parse_svg(mem)
    # a given plan is drawn re-scored, not re-solved
    plan = tmp_path / "plan.yaml"
    assert run("solve", spec, "--format", "yaml", "-o", str(plan)).exit_code == 0
    r = run("timeline", spec, str(tmp_path / "t2.svg"), "--plan", str(plan), "--no-memory-panel")
    assert r.exit_code == 0, r.output
    assert "GB per GPU" not in svg_texts(tmp_path / "t2.svg") and "seconds into the step" in svg_texts(
        tmp_path / "t2.svg")
    r = run("timeline", spec, str(tmp_path / "t3.pdf"), "--no-memory-panel")
    assert r.exit_code == 0 and (tmp_path / "t3.pdf").read_bytes().startswith(b"%PDF")
    r = run("timeline", spec, str(tmp_path / "t.gif"))
    assert r.exit_code == 2 and ".svg, .png or .pdf" in r.output


def test_the_docs_gallery_is_generated_and_its_pictures_exist():
    """docs/whatif.md's gallery is the output of benchmarks/gallery.py: every picture it shows
    is in docs/img and is an SVG whose text names what the caption says."""
    doc = (ROOT / "docs" / "whatif.md").read_text()
    section = doc.split("<!-- gallery:begin -->")[1].split("<!-- gallery:end -->")[0]
    assert "python benchmarks/gallery.py --write docs/whatif.md" in section
    import re
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
    assert len(pictures) == 4
    for rel in pictures:
        text = svg_texts(ROOT / "docs" / rel)
        assert ("Pareto front" in text) if "study" in rel else ("seconds into the step" in text and "capacity" in text)


def test_gpus_used_counts_the_groups_of_their_own():
    """OpenRLHF sync PPO on 8 H100: 2 engine + 2 training GPUs, and the reward and critic each on a group
    of its own; a what-if row must count all of them (it priced only the first two)."""
    from rlsolve.whatif.sweep import solve_point
    spec = yaml.safe_load((ROOT / "examples" / "ppo-1.5b-8xh100.yaml").read_text())
    spec["target"] = {"framework": "openrlhf"}
    spec.setdefault("constraints", {})["modes"] = ["sync"]
    row = solve_point(spec, None)
    assert row["status"] == "optimal" and row["mode"] == "sync"
    assert row["gpus_used"] > row["gen_gpus"] + row["train_gpus"]
    assert row["gpus_used"] <= 8
