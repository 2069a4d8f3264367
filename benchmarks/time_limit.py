"""Does `--time-limit T` bound the whole run? (issue 17: within T + 1 s plus start-up, with an
honest status: a plan, or exit 4 "unknown"; never exit 3 unless infeasibility is proven.)

Run: python benchmarks/time_limit.py [--cap 600]
Each case runs `python -m rlsolve.cli.main SPEC --time-limit T --format json` in a fresh
process (so start-up is included, and measured separately as a fresh interpreter importing
what a solve imports: the CLI, the schema and the solver with OR-Tools), killed after
--cap seconds. Prints per case: the limit, wall seconds, wall minus start-up, the exit code,
the plan's status (or the first line of stderr) and whether it met T + 1 s.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

DEEPSEEK_100K = {  # the DeepSeek-V2 GRPO example on 100,000 nodes (800,000 GPUs)
    "cluster": {"gpu": "H100-SXM-80GB", "nodes": 100_000, "network": "IB-NDR-400"},
    "model": {"policy": "deepseek-v2", "reference": "policy", "reward": "rule"},
    "rl": {"algorithm": "grpo", "prompts_per_step": 1024, "samples_per_prompt": 8, "prompt_len": 1024,
           "response_len": {"max": 16384, "mean": 4096}, "mini_batches": 8, "max_staleness": 1},
}
LLAMA405_100K = {  # a 405B dense GRPO job on 100,000 nodes
    "cluster": {"gpu": "H100-SXM-80GB", "nodes": 100_000, "network": "IB-NDR-400"},
    "model": {"policy": "llama-3.1-405b", "reference": "policy", "reward": "rule"},
    "rl": {"algorithm": "grpo", "prompts_per_step": 1024, "samples_per_prompt": 16, "prompt_len": 1024,
           "response_len": {"max": 8192, "mean": 3072}, "mini_batches": 4, "max_staleness": 1},
}
CASES = [  # (label, spec: a dict or an example file, time limit in s)
    ("deepseek-v2 GRPO, 100,000 nodes", DEEPSEEK_100K, 2.0),
    ("llama-3.1-405b GRPO, 100,000 nodes", LLAMA405_100K, 0.01),
    ("examples/ppo-7b-8xh100.yaml", ROOT / "examples" / "ppo-7b-8xh100.yaml", 0.001),
]


def _run(args: list[str], cap: float) -> tuple[float, int | None, str, str]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "rlsolve.cli.main", *args], capture_output=True, text=True,
                           timeout=cap, cwd=ROOT)
        return time.perf_counter() - t0, p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, None, "", f"killed after the {cap:g} s cap"


def _status(rc: int | None, out: str, err: str) -> str:
    if rc == 0:
        try:
            plan = json.loads(out)
            gap = plan.get("solver", {}).get("gap")
            return f"{plan['status']}" + (f" (gap {gap:g})" if gap else "")
        except (ValueError, KeyError, TypeError):
            return "exit 0 but no JSON plan on stdout"
    line = (err.strip().splitlines() or [""])[-1]
    return line[:160] + ("..." if len(line) > 160 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=600.0, help="kill a run after this many seconds")
    args = ap.parse_args()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import rlsolve.cli.main, rlsolve.spec, rlsolve.solver"], check=True, cwd=ROOT)
    startup = time.perf_counter() - t0
    print(f"start-up (python -c 'import rlsolve.cli.main, rlsolve.spec, rlsolve.solver'): {startup:.2f} s", flush=True)
    print(f"{'case':36s} {'limit_s':>8s} {'wall_s':>8s} {'-start':>8s} {'exit':>5s}  {'<=T+1':5s}  status", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for label, spec, limit in CASES:
            path = spec
            if isinstance(spec, dict):
                path = Path(tmp) / "spec.yaml"
                path.write_text(yaml.safe_dump(spec))
            wall, rc, out, err = _run([str(path), "--time-limit", str(limit), "--format", "json"], args.cap)
            within = wall - startup <= limit + 1.0
            print(f"{label:36s} {limit:>8g} {wall:>8.2f} {wall - startup:>8.2f} {str(rc):>5s}  "
                  f"{'yes' if within else 'NO':5s}  {_status(rc, out, err)}", flush=True)


if __name__ == "__main__":
    main()
