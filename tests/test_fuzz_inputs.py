"""Issue 17, property: byte-level mutations of every input the CLI reads never end in a
traceback. Every example spec, a plan file, a profile file and a case file are mutated (bit
flips, bytes dropped, duplicated, truncated; YAML tokens, anchors, aliases, NULs, Latin-1 and
UTF-16 marks and odd numbers inserted) and run through the CLI in-process (click's CliRunner)
with a fixed seed: RUNS_PER_SEED runs per file, over 2,000 in all. Every run must end with
exit code 0, 2, 3 or 4, no exception, and for a failure exactly one line on stderr of
readable length.

Solving is stubbed out in this test: `rlsolve.solver.solve` is replaced by the reading and
validation path (`load_spec`, then `estimate` of the unmutated example's own plan on the
mutated spec, which runs the catalog lookups and the performance model), so a mutation that
stays valid (nodes: 1 -> 10001) cannot make one run take minutes. The real solver on valid
inputs is tested elsewhere (test_cli, test_solver). Each run is also bounded by an alarm, so
a hang fails the test instead of stalling CI."""
from __future__ import annotations

import random
import signal
import traceback
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import rlsolve.solver
from rlsolve.cli.main import main
from rlsolve.errors import MAX_MESSAGE_CHARS
from rlsolve.solver.estimate import estimate
from rlsolve.spec import load_spec

from conftest import EXAMPLES, ROOT

SEED = 17
RUNS_PER_SEED = 190          # x 11 seed files = 2,090 runs
RUN_ALARM_S = 20             # one run longer than this is a hang
EXIT_CODES = {0, 2, 3, 4}

TOKENS = [b"\x00", b"\xff", b"\xe9", b"\xfe\xff", b"\xef\xbb\xbf", b"\x01", b"\t", b"\r", b"\n", b" ", b"#",
          b"&a ", b"*a", b"&b [*a, *a, *a]", b"<<: *a", b"[", b"]", b"{", b"}", b", ", b": ", b"- ", b"? ",
          b"'", b'"', b"|", b">", b"!!binary ", b"!!python/object:os.system ", b"!!set ", b"!!float ", b"!!int ",
          b"%YAML 1.1\n---\n", b"---\n", b"...\n", b"~", b"null", b"true", b"no", b"-1", b"0", b"0.0", b"1e999",
          b".nan", b"-.inf", b"0x1F", b"0o17", b"1_000", b"99999999999999999999", b"2024-13-45", b"\\u0000"]
NUMBERS = [b"0", b"-1", b"1.5", b"true", b"null", b"1e9", b".nan", b"100001", b"7", b"3", b"'8'", b"[]", b"{}"]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three random byte-level edits."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:                      # flip bits
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:                            # insert a YAML / encoding token
            buf[pos:pos] = rng.choice(TOKENS)
        elif op == 2 and buf:                    # drop a range
            buf[pos:pos + rng.randint(1, 40)] = b""
        elif op == 3 and buf:                    # duplicate a range (repeated keys, nesting)
            start = rng.randrange(len(buf))
            chunk = buf[start:start + rng.randint(1, 120)]
            buf[pos:pos] = chunk
        elif op == 4:                            # truncate
            del buf[pos:]
        elif op == 5:                            # swap two lines
            lines = bytes(buf).split(b"\n")
            if len(lines) > 2:
                i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
                buf = bytearray(b"\n".join(lines))
        elif op in (6, 7):                       # replace a number: mostly still valid YAML
            digits = [i for i, c in enumerate(buf) if chr(c).isdigit()]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < len(buf) and chr(buf[j]).isdigit() or (j < len(buf) and buf[j] in b"._"):
                    j += 1
                buf[i:j] = rng.choice(NUMBERS)
        elif op == 8 and buf:                    # replace a byte by any byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    return bytes(buf)


def _on_alarm(signum, frame):
    raise TimeoutError(f"one run took over {RUN_ALARM_S} s")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """The files to mutate, each with the command that reads it: (name, bytes, args(path))."""
    tmp = tmp_path_factory.mktemp("fuzz-seeds")
    spec = str(ROOT / "examples" / "ppo-7b-8xh100.yaml")
    plans = {}
    for ex in EXAMPLES:
        plan = rlsolve.solver.solve(str(ex))
        plans[ex.name] = plan
    plan_file = tmp / "plan.yaml"
    r = CliRunner().invoke(main, [spec, "--format", "yaml", "-o", str(plan_file)])
    assert r.exit_code == 0, r.output
    profile = {"profile": {"H100-SXM-80GB": {"gemm_fraction": 0.61, "attention_fraction": 0.42, "hbm_fraction": 0.8,
                                             "nvlink_busbw_fraction": 0.7, "kernel_launch_us": 6.5}}}
    cases = yaml.safe_load((ROOT / "tests" / "data" / "reference_cases.yaml").read_text())
    kinds = {}
    for row in cases["cases"]:  # one row of each kind keeps a run short
        kinds.setdefault(row["kind"], row)
    out = []
    for ex in EXAMPLES:
        out.append((ex.name, ex.read_bytes(), lambda p: [p, "--format", "json", "--time-limit", "1"], ex.name))
    out.append(("plan.yaml", plan_file.read_bytes(), lambda p: ["estimate", spec, p, "--format", "json"], None))
    out.append(("plan.yaml (export)", plan_file.read_bytes(),
                lambda p: ["export", p, "--to", "verl", "--spec", spec], None))
    out.append(("profile.yaml", yaml.safe_dump(profile).encode(),
                lambda p: [spec, "--profile", p, "--format", "json"], "ppo-7b-8xh100.yaml"))
    out.append(("cases.yaml", yaml.safe_dump({"version": 1, "cases": list(kinds.values())}).encode(),
                lambda p: ["cases", p, "--format", "json"], None))
    return out, plans


def test_mutated_inputs_never_end_in_a_traceback(seeds, tmp_path, monkeypatch):
    files, plans = seeds
    current = {"plan": None}

    def reading_path_only(spec, objective=None, profile=None, **options):
        """The solve stub (see the module docstring): validate, then score a known layout."""
        s = load_spec(spec)
        s.solver.model_validate({**s.solver.model_dump(), **options})
        return estimate(s, current["plan"] or plans["ppo-7b-8xh100.yaml"], profile=profile, objective=objective)

    monkeypatch.setattr(rlsolve.solver, "solve", reading_path_only)
    rng = random.Random(SEED)
    runner = CliRunner()
    failures, runs, codes = [], 0, {}
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for name, data, args, plan_name in files:
            current["plan"] = plans.get(plan_name) if plan_name else None
            for k in range(RUNS_PER_SEED):
                mutated = mutate(data, rng)
                path = tmp_path / f"input{Path(name.split(' ')[0]).suffix}"
                path.write_bytes(mutated)
                signal.setitimer(signal.ITIMER_REAL, RUN_ALARM_S)
                try:
                    r = runner.invoke(main, args(str(path)))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                runs += 1
                codes[r.exit_code] = codes.get(r.exit_code, 0) + 1
                problem = None
                if r.exception is not None and not isinstance(r.exception, SystemExit):
                    problem = "".join(traceback.format_exception(r.exception)[-3:])
                elif r.exit_code not in EXIT_CODES:
                    problem = f"exit code {r.exit_code}"
                elif r.exit_code != 0:
                    lines = [line for line in r.stderr.splitlines() if line.strip()]
                    if len(lines) != 1 or len(lines[0]) > MAX_MESSAGE_CHARS + 200:
                        problem = f"{len(lines)} stderr lines, first {len(lines[0]) if lines else 0} chars"
                if problem:
                    failures.append(f"{name} run {k}: {problem}\n  input: {mutated[:300]!r}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert runs >= 2000
    assert not failures, f"{len(failures)} of {runs} runs failed (exit codes {codes}):\n" + "\n".join(failures[:8])
    # the mutations reach past the parser: some inputs stay valid, most are refused
    assert codes.get(0, 0) > 50 and codes.get(2, 0) > 500, codes
