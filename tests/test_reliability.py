"""Issue 17, regression tests: every input through one guarded reader, every flag by the rule
of the field it overrides, every write atomic and all-or-nothing, "no answer in time" kept
apart from "infeasible". Each case of the issue is here by its number."""
from __future__ import annotations

import errno
import json
import os
from xml.etree import ElementTree
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rlsolve.cli.main import main
from rlsolve.errors import MAX_MESSAGE_CHARS, NoAnswerError, SpecError
from rlsolve.reader import MAX_DEPTH, MAX_INPUT_BYTES, parse_yaml, read_yaml

from conftest import ROOT, small_spec

EX = ROOT / "examples" / "ppo-7b-8xh100.yaml"
EX_TEXT = EX.read_text()


def cli(*args: str, input: "str | bytes | None" = None):
    """Run the CLI in-process; a traceback would surface as r.exception."""
    return CliRunner().invoke(main, list(args), input=input)


def refused(r, *words: str) -> None:
    """Exit 2, no traceback, one line on stderr-or-stdout that holds every word."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for w in words:
        assert w in lines[0], (w, lines[0])


def write(tmp_path: Path, data: "str | bytes", name: str = "spec.yaml") -> str:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


def alias_bomb(levels: int, width: int = 9) -> str:
    """The classic billion-laughs shape: each level a list of `width` aliases of the one below."""
    rows = [f"    x0: &x0 [{', '.join(['1'] * width)}]"]
    rows += [f"    x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(rows)


# --- 3. tracebacks instead of exit 2 ------------------------------------------------------------

@pytest.mark.parametrize("data,words", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["binary", "UTF-8"]),
    (EX_TEXT.replace("Seed", "S\xe9ed").encode("latin-1"), ["not UTF-8", "0xe9", "save it as UTF-8"]),
    (EX_TEXT.encode("utf-16"), ["UTF-16", "save it as UTF-8"]),
    (EX_TEXT.encode("utf-16-le"), ["binary"]),  # no byte-order mark: the NUL bytes give it away
])
def test_binary_latin1_utf16_spec_exit_2(tmp_path, data, words):
    refused(cli(write(tmp_path, data)), "spec file", *words)


def test_utf8_with_byte_order_mark_is_read(tmp_path):
    r = cli(write(tmp_path, "\ufeff" + EX_TEXT), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["status"] == "optimal"


@pytest.mark.parametrize("text", ["a: " + "[" * 100_000 + "]" * 100_000 + "\n",
                                  "a: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
                                  "".join(" " * i + "- \n" for i in range(300))],
                         ids=["flow-lists", "flow-maps", "block-lists"])
def test_deeply_nested_input_exit_2(tmp_path, text):
    refused(cli(write(tmp_path, text)), f"more than {MAX_DEPTH} levels")


def test_nesting_a_spec_needs_is_accepted():
    assert parse_yaml("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)) is not None


def test_output_into_a_missing_folder_exit_2_and_nothing_written(tmp_path):
    refused(cli(str(EX), "-o", str(tmp_path / "no" / "plan.yaml")), "-o", "does not exist")
    refused(cli(str(EX), "--timeline", str(tmp_path / "no" / "t.svg")), "--timeline", "does not exist")
    refused(cli("export", str(tmp_path / "p.yaml"), "--to", "verl", "--spec", str(EX), "-o",
                str(tmp_path / "no" / "run.sh")), "-o", "does not exist")
    assert not (tmp_path / "no").exists()


def test_profile_pointing_at_a_binary_file_exit_2(tmp_path):
    refused(cli(str(EX), "--profile", write(tmp_path, bytes(range(256)), "profile.yaml")), "--profile", "binary")


# --- 4. alias bombs, input size --------------------------------------------------------------

def test_alias_bomb_in_a_list_field_exit_2_fast(tmp_path):
    # 9 levels of 9: 9^9 ~ 387 million values from well under a kilobyte
    text = EX_TEXT + "bomb:\n" + alias_bomb(9) + "\nconstraints:\n  generation:\n    tp: *x8\n"
    assert len(text.encode()) - len(EX_TEXT) < 800
    r = cli(write(tmp_path, text))
    refused(r, "aliases", "expand to more than")


def test_six_level_bomb_gives_a_short_message(tmp_path):
    # small enough to pass the reader (9^5 values): the field's own check refuses it, in one short line
    text = EX_TEXT + "bomb:\n" + alias_bomb(5) + "\n"
    text = text.replace("bomb:", "constraints:\n  generation:\n    tp: *x4\nbomb:")
    r = cli(write(tmp_path, text))
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert len(r.output) < MAX_MESSAGE_CHARS + 200 and r.output.count("\n") == 1, len(r.output)


def test_recursive_alias_exit_2(tmp_path):
    refused(cli(write(tmp_path, "a: &a [1, *a]\n")), "cycle")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_stops_at_the_size_cap():
    refused(cli("/dev/zero"), "input limit")


def test_oversized_file_exit_2(tmp_path):
    refused(cli(write(tmp_path, "a: 1\n" + "#" * MAX_INPUT_BYTES)), "input limit")


# --- 5. flags by the rule of the field they override -----------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--time-limit", "0"], ["--time-limit", "solver.time_limit_s", "greater than 0"]),
    (["--time-limit", "-1"], ["--time-limit", "greater than 0"]),
    (["--time-limit", "nan"], ["--time-limit", "finite"]),
    (["--time-limit", "inf"], ["--time-limit", "finite"]),
    (["--time-limit", "1e9"], ["--time-limit", "86400"]),
    (["--top", "-1"], ["--top", "solver.top_k"]),
    (["--top", "51"], ["--top", "50"]),
])
def test_bad_flags_exit_2(args, words):
    refused(cli(str(EX), *args), *words)


def test_the_same_values_in_the_file_are_refused_too(tmp_path):
    for solver in ({"time_limit_s": 0}, {"time_limit_s": float("nan")}, {"top_k": -1}):
        refused(cli(write(tmp_path, yaml.safe_dump(small_spec(solver=solver)))), "solver.")


def test_profile_given_a_spec_file_exit_2():
    refused(cli(str(EX), "--profile", str(EX)), "--profile", "is a spec", "rlsolve calibrate")


@pytest.mark.parametrize("profile,words", [
    ({"H100-SXM-80GB": {"gemm_fraction": 0}}, ["positive"]),
    ({"H100-SXM-80GB": {"gemm_fraction": True}}, ["positive"]),
    ({"H100-SXM-80GB": {"gemm_fractoin": 0.5}}, ["unknown efficiency", "gemm_fraction"]),
    ({"H999": {"gemm_fraction": 0.5}}, ["unknown GPU"]),
    ({"H100-SXM-80GB": 0.5}, ["not a profile"]),
])
def test_bad_profiles_exit_2(tmp_path, profile, words):
    refused(cli(str(EX), "--profile", write(tmp_path, yaml.safe_dump({"profile": profile}), "p.yaml")), *words)


def test_compare_nodes_flag_uses_the_nodes_rule():
    refused(cli("compare", str(EX), "--nodes", "0", "--no-cache"), "--nodes", "cluster.nodes")
    refused(cli("compare", str(EX), "--nodes", "100001", "--no-cache"), "--nodes", "100000")


# --- 6. head width -----------------------------------------------------------------------------

def test_hidden_not_divisible_by_heads_needs_head_dim(tmp_path):
    spec = small_spec(model={"policy": {"layers": 32, "hidden": 4100, "heads": 32}})
    refused(cli(write(tmp_path, yaml.safe_dump(spec))), "hidden (4100)", "heads (32)", "head_dim")
    spec["model"]["policy"]["head_dim"] = 128  # stated: accepted
    r = cli(write(tmp_path, yaml.safe_dump(spec)), "--format", "json")
    assert r.exit_code == 0, r.output


# --- 7. writes --------------------------------------------------------------------------------

def test_output_over_the_input_is_refused_and_the_input_kept(tmp_path):
    spec = write(tmp_path, EX_TEXT)
    refused(cli(spec, "-o", spec), "-o", "input")
    assert Path(spec).read_text() == EX_TEXT
    refused(cli(str(EX), "--profile", spec, "-o", spec), "-o", "input")
    refused(cli("estimate", spec, spec, "-o", spec), "-o", "input")


def test_two_outputs_on_one_file_refused(tmp_path):
    refused(cli(str(EX), "--timeline", str(tmp_path / "a.svg"), "-o", str(tmp_path / "a.svg")), "--timeline")


def test_a_failed_output_writes_nothing(tmp_path):
    plan, pic = tmp_path / "p.yaml", tmp_path / "t.gif"
    refused(cli(str(EX), "--timeline", str(pic), "-o", str(plan)), "--timeline", ".svg, .png or .pdf")
    assert not plan.exists() and not pic.exists()
    assert list(tmp_path.iterdir()) == []


def test_plan_and_timeline_both_written(tmp_path):
    plan, pic = tmp_path / "p.json", tmp_path / "t.svg"
    r = cli(str(EX), "--timeline", str(pic), "-o", str(plan), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(plan.read_text())["status"] == "optimal" and ElementTree.parse(pic).getroot().tag.endswith("svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "t.svg"]  # no temporary files left


def test_full_disk_leaves_the_old_file_and_no_traceback(tmp_path, monkeypatch):
    plan = tmp_path / "p.yaml"
    plan.write_text("old plan\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    refused(cli(str(EX), "-o", str(plan)), "-o", "No space left")
    assert plan.read_text() == "old plan\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]


def test_written_file_keeps_the_usual_permissions(tmp_path):
    plan = tmp_path / "p.yaml"
    assert cli(str(EX), "-o", str(plan)).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert plan.stat().st_mode & 0o777 == 0o666 & ~umask


# --- 8. the CLI as strict as the service -------------------------------------------------------

@pytest.mark.parametrize("change,field", [
    ({"cluster": {"nodes": True}}, "cluster.nodes"),
    ({"cluster": {"nodes": "2"}}, "cluster.nodes"),
    ({"cluster": {"nodes": 2.5}}, "cluster.nodes"),
    ({"rl": {"prompts_per_step": True}}, "rl.prompts_per_step"),
    ({"solver": {"deterministic": 1}}, "solver.deterministic"),
])
def test_types_are_not_coerced(tmp_path, change, field):
    refused(cli(write(tmp_path, yaml.safe_dump(small_spec(**change)))), field)


def test_inline_architecture_is_strict_too(tmp_path):
    spec = small_spec(model={"policy": {"layers": True, "hidden": 4096, "heads": 32}})
    refused(cli(write(tmp_path, yaml.safe_dump(spec))), "model.policy.layers")


def test_duplicate_keys_refused(tmp_path):
    refused(cli(write(tmp_path, EX_TEXT + "objective: cost\nobjective: throughput\n")), "'objective' twice")
    nested = EX_TEXT.replace("  nodes: 1\n", "  nodes: 1\n  nodes: 2\n")
    refused(cli(write(tmp_path, nested)), "'nodes' twice", "line")


def test_merge_keys_may_still_be_overridden():
    assert parse_yaml("base: &b {x: 1, y: 2}\nuse: {<<: *b, y: 3}\n")["use"] == {"x": 1, "y": 3}


# --- 9. messages -------------------------------------------------------------------------------

def test_a_huge_unknown_gpu_name_is_clipped():
    from rlsolve.spec import load_spec
    with pytest.raises(SpecError) as e:
        load_spec(small_spec(cluster={"gpu": "X" * 5_000_000}))
    assert len(str(e.value)) < MAX_MESSAGE_CHARS + 50 and "(5,000,00" in str(e.value)


def test_a_huge_unknown_gpu_name_in_a_file_is_clipped(tmp_path):
    r = cli(write(tmp_path, EX_TEXT.replace("H100-SXM-80GB", "X" * 1_000_000)))
    refused(r, "cluster.gpu", "unknown GPU", "(1,000,00")
    assert len(r.output) < MAX_MESSAGE_CHARS + 50


def test_dash_reads_the_spec_from_stdin():
    r = cli("-", "--format", "json", input=EX_TEXT)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["status"] == "optimal"
    r = cli("solve", "-", "--format", "json", input=EX_TEXT)
    assert r.exit_code == 0, r.output
    refused(cli("-", input=""), "standard input is empty")


def test_missing_file_names_the_dash():
    refused(cli("no-such-spec.yaml"), "file not found", "give - to read standard input")


def test_every_reader_uses_the_guarded_reader(tmp_path):
    """Plans, layouts, case files and catalog overlays go through the same guards."""
    bad = write(tmp_path, b"\xff\xfe\x00binary", "bad.yaml")
    refused(cli("estimate", str(EX), bad), "layout file", "UTF-16")
    refused(cli("export", bad, "--to", "verl", "--spec", str(EX)), "UTF-16")
    refused(cli("cases", bad), "cases file", "UTF-16")
    refused(cli("timeline", str(EX), str(tmp_path / "t.svg"), "--plan", bad), "UTF-16")
    with pytest.raises(SpecError, match="twice"):
        read_yaml(write(tmp_path, "a: 1\na: 2\n", "dup.yaml"), what="plan file")


def test_catalog_overlay_goes_through_the_reader(tmp_path, monkeypatch):
    from rlsolve.hardware_db import OVERLAY_ENV, load_catalog
    (tmp_path / "site.yaml").write_text("gpus: []\ngpus: []\n")
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path))
    load_catalog.cache_clear()
    try:
        with pytest.raises(SpecError, match="twice"):
            load_catalog()
    finally:
        monkeypatch.delenv(OVERLAY_ENV)
        load_catalog.cache_clear()


# --- 1. no answer in time is not infeasible ----------------------------------------------------

def _no_answer(*args, **kwargs):
    raise NoAnswerError(2.0, "CP-SAT search")


def test_no_answer_exits_4_with_one_line(monkeypatch):
    import rlsolve.solver
    monkeypatch.setattr(rlsolve.solver, "solve", _no_answer)
    r = cli(str(EX), "--time-limit", "2")
    assert r.exit_code == 4 and isinstance(r.exception, SystemExit), r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("unknown: ") and "2 s" in lines[0]


def test_compare_never_caches_no_answer(tmp_path, monkeypatch):
    import rlsolve.solver
    monkeypatch.setattr(rlsolve.solver, "solve", _no_answer)
    cache = tmp_path / "cache"
    r = cli("compare", str(EX), "--nodes", "1,2", "--workers", "1", "--cache-dir", str(cache), "--format", "json")
    assert r.exit_code == 4, r.output
    rows = json.loads(r.output[:r.output.rindex("]") + 1])
    assert [row["status"] for row in rows] == ["unknown", "unknown"]
    assert not cache.exists() or list(cache.iterdir()) == []
    assert "unknown: no combination solved" in r.output


def test_readme_states_the_limits_the_reader_enforces():
    from rlsolve.reader import MAX_NODES
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"at most {MAX_INPUT_BYTES // 2**20} MiB" in text
    assert f"nested at most {MAX_DEPTH} levels" in text
    assert f"at most {MAX_NODES:,} values" in text
