"""Load test of `rlsolve serve`: 500 requests, 32 at a time, 20 % of them malformed, against a
real server on 127.0.0.1 that this script starts (and stops with SIGTERM) itself.

Run:  python benchmarks/service_load.py [--requests 500] [--concurrency 32] [--malformed 0.2]
                                       [--workers 2] [--seed 0] [--json out.json]

Checks, printed at the end (exit status 1 if one fails):
- zero 5xx answers (503 included: the default queue holds 32 waiting requests);
- every valid request answered correctly: the same JSON as the library gives in this process
  (`rlsolve.solve`, `rlsolve.estimate`, `rlsolve.export.export_plan`; 409 with the same reasons
  for the infeasible ones); every malformed one refused with its 4xx (422, 413 or 415);
- one access-log line per request; the server exits 0 on SIGTERM.
Figures: p50/p90/p99 latency (all, valid, malformed), requests per second, wall time.
Traffic stays on the loopback address; the run is bounded (--budget seconds) and stops itself."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import rlsolve
from rlsolve.export import export_plan
from rlsolve.present import plan_dict

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only


# --- the request mix ---------------------------------------------------------------------------

def spec(gpu="H100-SXM-80GB", gpn=2, nodes=1, policy="qwen2.5-0.5b", prompts=8, algo="grpo", value=None,
         reward="rule", response=512) -> dict:
    return {"cluster": {"gpu": gpu, "nodes": nodes, "gpus_per_node": gpn, "network": "IB-NDR-400"},
            "model": {"policy": policy, "reference": "policy", "reward": reward, "value": value},
            "rl": {"algorithm": algo, "prompts_per_step": prompts, "samples_per_prompt": 4, "prompt_len": 256,
                   "response_len": {"max": response, "mean": response // 2}, "mini_batches": 2},
            "solver": {"time_limit_s": 2, "top_k": 1}}


SPECS = [spec(), spec(gpn=4, prompts=16), spec(gpn=8, policy="qwen2.5-1.5b", prompts=16),
         spec(gpn=8, policy="llama-3.1-8b", prompts=16, response=1024),
         spec(gpu="A100-SXM-80GB", gpn=4, algo="ppo", value="policy", reward="qwen2.5-0.5b"),
         spec(gpu="H200-SXM-141GB", gpn=8, nodes=2, policy="llama-3.1-8b", prompts=32)]
INFEASIBLE = spec(gpu="L4", gpn=8, policy="llama-3.1-70b")
LAYOUT = {"pipeline": {"mode": "colocated"},
          "resource_allocation": {"generation": {"gpus": 2}, "training": {"gpus": 2, "framework": "fsdp"}},
          "placement": {"reference": "training", "reward": "cpu", "value": "none"},
          "parallelism": {"generation": {"tp": 1, "dp": 2}, "training": {"dp": 2, "zero_stage": 3}}}


@dataclass
class Req:
    kind: str                     # what it exercises
    method: str
    path: str
    body: Any = None              # JSON body
    raw: bytes | None = None      # or raw bytes
    ctype: str = "application/json"
    params: dict = field(default_factory=dict)
    expect: int = 200
    key: str = ""                 # which expected answer to compare with


def valid_requests(rng: random.Random, n: int) -> list[Req]:
    kinds = ["solve"] * 10 + ["estimate"] * 3 + ["explain"] * 2 + ["infeasible", "gpus", "models"] + ["export"] * 2
    out = []
    for _ in range(n):
        k = rng.choice(kinds)
        i = rng.randrange(len(SPECS))
        if k == "solve":
            out.append(Req(k, "POST", "/v1/solve", SPECS[i], key=f"solve{i}"))
        elif k == "estimate":
            out.append(Req(k, "POST", "/v1/estimate", {"spec": SPECS[0], "layout": LAYOUT}, key="estimate"))
        elif k == "explain":
            out.append(Req(k, "POST", "/v1/explain", {"spec": SPECS[0], "layout": LAYOUT}, key="explain"))
        elif k == "infeasible":
            out.append(Req(k, "POST", "/v1/solve", INFEASIBLE, expect=409, key="infeasible"))
        elif k == "export":
            out.append(Req(k, "POST", "/v1/export", {"spec": SPECS[i], "target": "verl"}, key=f"export{i}"))
        else:
            out.append(Req(k, "GET", f"/v1/{k}", key=k))
    return out


def malformed_requests(rng: random.Random, n: int) -> list[Req]:
    def broken(mut) -> dict:
        s = json.loads(json.dumps(rng.choice(SPECS)))
        mut(s)
        return s

    makers = [
        lambda: Req("bad-json", "POST", "/v1/solve", raw=b'{"cluster": {"gpu": "H100-SXM-80GB", ', expect=422),
        lambda: Req("not-utf8", "POST", "/v1/solve", raw=b"\xff\xfe{}", expect=422),
        lambda: Req("not-json", "POST", "/v1/solve", raw=b"cluster: {}", ctype="application/yaml", expect=415),
        lambda: Req("empty", "POST", "/v1/solve", raw=b"", expect=422),
        lambda: Req("array", "POST", "/v1/solve", [1, 2, 3], expect=422),
        lambda: Req("missing-rl", "POST", "/v1/solve", broken(lambda s: s.pop("rl")), expect=422),
        lambda: Req("nodes-0", "POST", "/v1/solve", broken(lambda s: s["cluster"].update(nodes=0)), expect=422),
        lambda: Req("nodes-str", "POST", "/v1/solve", broken(lambda s: s["cluster"].update(nodes="8")), expect=422),
        lambda: Req("unknown-gpu", "POST", "/v1/solve", broken(lambda s: s["cluster"].update(gpu="H1000")),
                    expect=422),
        lambda: Req("unknown-model", "POST", "/v1/solve", broken(lambda s: s["model"].update(policy="llama-9")),
                    expect=422),
        lambda: Req("typo-key", "POST", "/v1/solve", broken(lambda s: s.update(clutser={})), expect=422),
        lambda: Req("mean>max", "POST", "/v1/solve",
                    broken(lambda s: s["rl"].update(response_len={"max": 10, "mean": 20})), expect=422),
        lambda: Req("infinity", "POST", "/v1/solve",
                    raw=json.dumps(SPECS[0]).replace('"time_limit_s": 2', '"time_limit_s": Infinity').encode(),
                    expect=422),
        lambda: Req("bad-layout", "POST", "/v1/estimate",
                    {"spec": SPECS[0], "layout": {**LAYOUT, "parallelism": {"generation": {"tp": 3, "dp": 2},
                                                                          "training": {"dp": 2}}}}, expect=422),
        lambda: Req("bad-query", "POST", "/v1/solve", SPECS[0], params={"time_limit_s": "-1"}, expect=422),
        lambda: Req("typo-query", "POST", "/v1/solve", SPECS[0], params={"time_limit": "5"}, expect=422),
        lambda: Req("too-large", "POST", "/v1/solve", raw=b'{"pad": "' + b"x" * (1024 * 1024 + 10) + b'"}',
                    expect=413),
    ]
    return [rng.choice(makers)() for _ in range(n)]


def expected_answers() -> dict[str, Any]:
    """What the library says, computed here, for every valid request."""
    exp: dict[str, Any] = {}
    for i, s in enumerate(SPECS):
        plan = rlsolve.solve(s)
        exp[f"solve{i}"] = plan_dict(plan)
        exp[f"export{i}"] = export_plan(plan, s, "verl").text
    exp["estimate"] = plan_dict(rlsolve.estimate(SPECS[0], LAYOUT))
    exp["explain"] = (exp["solve0"], exp["estimate"])
    try:
        rlsolve.solve(INFEASIBLE)
        raise SystemExit("the infeasible spec solved: fix the benchmark")
    except rlsolve.InfeasibleError as e:
        exp["infeasible"] = e.reasons
    from rlsolve.hardware_db import list_gpus
    from rlsolve.models import list_models
    exp["gpus"] = sorted(g.name for g in list_gpus())
    exp["models"] = sorted(m.name for m in list_models())
    return exp


def correct(req: Req, status: int, body: Any, exp: dict[str, Any]) -> bool:
    if status != req.expect:
        return False
    if req.expect != 200 and req.kind != "infeasible":
        return isinstance(body, dict) and bool(body.get("error")) and bool(body.get("message"))
    want = exp[req.key]
    if req.kind == "infeasible":
        return body.get("reasons") == want
    if req.kind == "explain":
        return body["plan"] == want[0] and body["layout"] == want[1] and bool(body["differences"])
    if req.kind == "export":
        return body.get("content") == want
    if req.kind == "gpus":
        return sorted(g["name"] for g in body["gpus"]) == want
    if req.kind == "models":
        return sorted(m["name"] for m in body["models"]) == want
    return body == want


# --- the server ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    fh = log.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "rlsolve.cli.main", "serve", "--host", HOST, "--port", str(port),
                             "--workers", str(workers)], stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
                            env={**os.environ, "RLSOLVE_TOKEN": ""})
    url = f"http://{HOST}:{port}"
    t_end = time.monotonic() + 120
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start within 120 s")


# --- the load -----------------------------------------------------------------------------------

@dataclass
class Result:
    req: Req
    status: int
    ms: float
    ok: bool


async def run_load(url: str, reqs: list[Req], concurrency: int, exp: dict, budget_s: float) -> list[Result]:
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits) as client:
        async def one(r: Req) -> Result:
            async with sem:
                t0 = time.perf_counter()
                content = r.raw if r.raw is not None else json.dumps(r.body).encode() if r.body is not None else None
                headers = {"Content-Type": r.ctype} if content is not None else {}
                try:
                    resp = await client.request(r.method, r.path, content=content, headers=headers, params=r.params)
                except httpx.HTTPError as e:  # counted with the 5xx: no answer at all
                    print(f"transport error on {r.kind}: {e!r}", file=sys.stderr)
                    return Result(r, 0, (time.perf_counter() - t0) * 1000, False)
                ms = (time.perf_counter() - t0) * 1000
                try:
                    body = resp.json()
                except ValueError:
                    body = None
                return Result(r, resp.status_code, ms, correct(r, resp.status_code, body, exp))
        return await asyncio.wait_for(asyncio.gather(*(one(r) for r in reqs)), timeout=budget_s)


def _by_kind(results: list[Result]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in results:
        out.setdefault(r.req.kind, []).append(r.ms)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--malformed", type=float, default=0.2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=600.0, help="Stop the load after this many seconds.")
    ap.add_argument("--json", default=None, help="Also write the figures here.")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    n_bad = round(a.requests * a.malformed)
    reqs = valid_requests(rng, a.requests - n_bad) + malformed_requests(rng, n_bad)
    rng.shuffle(reqs)
    t0 = time.perf_counter()
    exp = expected_answers()
    print(f"expected answers computed in-process: {time.perf_counter() - t0:.1f} s", flush=True)

    log = Path(tempfile.mkstemp(prefix="rlsolve-load-", suffix=".log")[1])
    proc, url = start_server(a.workers, log)
    try:
        t0 = time.perf_counter()
        results = asyncio.run(run_load(url, reqs, a.concurrency, exp, a.budget))
        wall = time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            exit_code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = -9
    access = [x for x in (json.loads(line) for line in log.read_text().splitlines() if line.startswith("{"))
              if x.get("logger") == "rlsolve.service.access" and x.get("path", "").startswith("/v1/")]

    valid = [r for r in results if r.req.expect in (200, 409)]
    bad = [r for r in results if r.req.expect not in (200, 409)]
    five = [r for r in results if r.status >= 500 or r.status == 0]
    by_status: dict[int, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    lat = [r.ms for r in results]
    figures = {
        "requests": len(results), "concurrency": a.concurrency, "workers": a.workers, "malformed": len(bad),
        "wall_s": round(wall, 2), "requests_per_s": round(len(results) / wall, 1),
        "status_counts": dict(sorted(by_status.items())), "5xx": len(five),
        "valid_correct": sum(r.ok for r in valid), "valid": len(valid),
        "malformed_rejected_as_expected": sum(r.ok for r in bad),
        "latency_ms": {name: {"p50": round(pct(x, 50), 1), "p90": round(pct(x, 90), 1), "p99": round(pct(x, 99), 1),
                              "max": round(max(x), 1) if x else None}
                       for name, x in (("all", lat), ("valid", [r.ms for r in valid]),
                                       ("solve", [r.ms for r in valid if r.req.kind == "solve"]),
                                       ("malformed", [r.ms for r in bad]))},
        "latency_ms_by_kind": {k: {"n": len(v), "p50": round(pct(v, 50), 1), "max": round(max(v), 1)}
                               for k, v in sorted(_by_kind(results).items())},
        "access_log_lines": len(access), "server_exit_code": exit_code,
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
    }
    checks = {
        "zero 5xx": len(five) == 0,
        "every valid request answered correctly": figures["valid_correct"] == len(valid),
        "every malformed request refused with its 4xx": figures["malformed_rejected_as_expected"] == len(bad),
        "one access-log line per request": len(access) == len(results),
        "clean exit on SIGTERM": exit_code == 0,
    }
    print(f"{len(results)} requests ({len(valid)} valid, {len(bad)} malformed) at concurrency {a.concurrency}, "
          f"{a.workers} workers, {os.cpu_count()} CPUs: {wall:.1f} s, {figures['requests_per_s']} req/s")
    print("status counts: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_status.items())))
    for name, q in figures["latency_ms"].items():
        print(f"latency {name:9s} p50 {q['p50']:8.1f} ms   p90 {q['p90']:8.1f} ms   p99 {q['p99']:8.1f} ms   "
              f"max {q['max']} ms")
    wrong = [r for r in results if not r.ok][:5]
    for r in wrong:
        print(f"  wrong: {r.req.kind} {r.req.path} -> {r.status} (expected {r.req.expect})")
    for name, ok in checks.items():
        print(f"[{'PASS' if ok else 'FAIL'}] {name}")
    figures["checks"] = checks
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    log.unlink(missing_ok=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
