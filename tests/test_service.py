"""`rlsolve serve`: a real uvicorn server on a free 127.0.0.1 port, hit with httpx; its own
OpenAPI document fuzzed with schemathesis; the spec loader and the CLI fuzzed with
hypothesis (1,000+ generated specs): only documented status codes / exit codes 0, 2, 3,
never a 5xx or a traceback. Every server here binds 127.0.0.1 and nothing else."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import rlsolve
from rlsolve.cli.main import main
from rlsolve.present import plan_dict

from conftest import ROOT

fastapi = pytest.importorskip("fastapi", reason="the serve extra is not installed")
httpx = pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("uvicorn")

from rlsolve.service.examples import INFEASIBLE_SPEC, TINY_LAYOUT, TINY_SPEC  # noqa: E402

HOST = "127.0.0.1"  # never any other address
TOKEN = "test-token-5f2c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Generated specs are small and their solves short: the whole file stays well under a minute
# of solver time on two cores.
# a tiny solve takes well under a second; the limit leaves room for a freshly started worker on a loaded machine
FAST = {"time_limit_s": 5, "top_k": 0}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """`python -m rlsolve.cli.main serve` in a subprocess, its JSON log in a temporary file."""

    def __init__(self, *args: str, env: dict | None = None, start_timeout: float = 120.0):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="rlsolve-serve-", suffix=".log")[1])
        self._log_fh = self.log.open("wb")
        cmd = [sys.executable, "-m", "rlsolve.cli.main", "serve", "--host", HOST, "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log_fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not start in {start_timeout} s:\n{self.log.read_text()}")

    def client(self, **kw) -> "httpx.Client":
        return httpx.Client(base_url=self.url, timeout=120.0, **kw)

    def lines(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log_fh.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def api():
    """The main server: two worker processes, no token (the load server below has one)."""
    srv = Server("--workers", "2", "--max-time-limit", "30", env={"RLSOLVE_TOKEN": ""})
    yield srv
    srv.stop()
    srv.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def http(api):
    with api.client() as c:
        yield c


def tiny(**over) -> dict:
    spec = json.loads(json.dumps(TINY_SPEC))
    for k, v in over.items():
        spec[k] = {**spec.get(k, {}), **v} if isinstance(v, dict) else v
    return spec


# --- the endpoints -----------------------------------------------------------------------------

def test_solve_answers_exactly_what_the_library_answers(http, tmp_path):
    r = http.post("/v1/solve", json=TINY_SPEC)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == plan_dict(rlsolve.solve(TINY_SPEC))  # deterministic mode: identical
    assert r.headers["x-request-id"]
    # byte for byte what `rlsolve solve --format json` prints
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(TINY_SPEC))
    cli = CliRunner().invoke(main, ["solve", str(path), "--format", "json"])
    assert cli.exit_code == 0 and cli.output == r.text


def test_solve_query_options(http):
    r = http.post("/v1/solve", json=tiny(), params={"objective": "cost", "time_limit_s": 1})
    assert r.status_code == 200, r.text
    assert r.json() == plan_dict(rlsolve.solve(tiny(), objective="cost", time_limit_s=1))
    r = http.post("/v1/solve", json=tiny(), params={"time_limit_s": 31})  # over the cap (30)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "time_limit_s"]


def test_estimate_and_a_plan_round_trip(http):
    r = http.post("/v1/estimate", json={"spec": TINY_SPEC, "layout": TINY_LAYOUT})
    assert r.status_code == 200, r.text
    assert r.json() == plan_dict(rlsolve.estimate(TINY_SPEC, TINY_LAYOUT))
    plan = http.post("/v1/solve", json=TINY_SPEC).json()
    again = http.post("/v1/estimate", json={"spec": TINY_SPEC, "layout": plan}).json()  # a whole plan is a layout
    assert again["time_s"] == plan["time_s"] and again["status"] == "estimate"


def test_explain_gives_both_plans_and_the_differences(http):
    r = http.post("/v1/explain", json={"spec": TINY_SPEC, "layout": TINY_LAYOUT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plan"] == plan_dict(rlsolve.solve(TINY_SPEC))
    assert body["layout"] == plan_dict(rlsolve.estimate(TINY_SPEC, TINY_LAYOUT))
    assert body["layout_fits"] is True
    step = next(d for d in body["differences"] if d["term"] == "time_s.step")
    assert step["delta"] == pytest.approx(body["layout"]["time_s"]["step"] - body["plan"]["time_s"]["step"])
    assert step["delta"] >= 0  # the optimum is never slower than a hand-written layout
    assert "your layout" in body["summary"]
    plain = http.post("/v1/explain", json={"spec": TINY_SPEC}).json()
    assert plain["layout"] is None and plain["differences"] == [] and plain["explanation"]


def test_explain_with_a_layout_that_does_not_fit(http):
    spec = tiny(model={"policy": "llama-3.1-8b"}, cluster={"gpu": "L4", "gpus_per_node": 8, "nodes": 2})
    lay = {"pipeline": {"mode": "colocated"},
           "resource_allocation": {"generation": {"gpus": 1}, "training": {"gpus": 1}},
           "parallelism": {"generation": {"tp": 1, "dp": 1}, "training": {"dp": 1, "zero_stage": 0}}}
    r = http.post("/v1/explain", json={"spec": spec, "layout": lay})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["layout_fits"] is False and body["layout"] is None and body["differences"] == []
    with pytest.raises(rlsolve.InfeasibleError) as e:
        rlsolve.estimate(spec, lay)
    assert body["layout_reasons"] == e.value.reasons
    assert body["plan"]["status"] in ("optimal", "feasible")


def test_compare_answers_what_the_cli_prints(http):
    from rlsolve.whatif import compare, render
    body = {"spec": TINY_SPEC, "gpus": ["H100-SXM-80GB", "H200-SXM-141GB"], "nodes": [1]}
    r = http.post("/v1/compare", json=body)
    assert r.status_code == 200, r.text
    rows = compare(TINY_SPEC, gpus=body["gpus"], nodes=[1], workers=1, cache_dir=False)
    assert r.json()["result"] == json.loads(render(rows, "json"))  # `rlsolve compare --format json`
    assert all(isinstance(row["gen_tp"], int) and isinstance(row["train_dp"], int) for row in r.json()["result"])
    r = http.post("/v1/compare", json={"spec": TINY_SPEC, "gpus": ["H1000"]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "gpus"
    r = http.post("/v1/compare", json={"spec": TINY_SPEC, "gpus": ["H100-SXM-80GB"] * 9, "nodes": list(range(1, 9))})
    assert r.status_code == 422  # 72 points: over the per-request cap


def test_export_calls_export_plan(http):
    from rlsolve.export import export_plan
    r = http.post("/v1/export", json={"spec": TINY_SPEC, "target": "verl"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plan"] == plan_dict(rlsolve.solve(TINY_SPEC))
    assert body["content"] == export_plan(rlsolve.solve(TINY_SPEC), TINY_SPEC, "verl").text
    again = http.post("/v1/export", json={"spec": TINY_SPEC, "plan": body["plan"], "target": "vllm"})
    assert again.status_code == 200 and again.json()["plan"] is None and again.json()["content"]
    bad = json.loads(json.dumps(TINY_LAYOUT))
    bad["parallelism"]["generation"]["dp"] = 3
    r = http.post("/v1/export", json={"spec": TINY_SPEC, "plan": bad, "target": "vllm"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("plan."), r.text
    assert http.post("/v1/export", json={"spec": TINY_SPEC, "target": "nope"}).status_code == 422


def test_catalogs_health_and_openapi(api, http):
    gpus = http.get("/v1/gpus").json()
    assert {"H100-SXM-80GB", "B200-SXM-180GB"} <= {g["name"] for g in gpus["gpus"]}
    assert "IB-NDR-400" in {n["name"] for n in gpus["networks"]}
    models = http.get("/v1/models").json()["models"]
    assert any(m["name"] == "llama-3.1-70b" and m["total_params_b"] > 60 for m in models)
    health = http.get("/healthz").json()
    assert health["status"] == "ok" and health["pool"]["workers"] == 2
    doc = http.get("/openapi.json").json()
    for path in ("/v1/solve", "/v1/estimate", "/v1/explain", "/v1/compare", "/v1/export"):
        codes = set(doc["paths"][path]["post"]["responses"])
        assert {"200", "409", "413", "415", "422", "503", "504"} <= codes, (path, codes)
        assert "500" not in codes and "401" not in codes  # no token on this server: no 401 either
    assert "securitySchemes" not in doc.get("components", {})


# --- bad input ----------------------------------------------------------------------------------

def test_invalid_bodies_get_422_with_the_field_path(http):
    r = http.post("/v1/solve", json=tiny(cluster={"nodes": 0}))
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "cluster", "nodes"] and d["field"] == "cluster.nodes"
    r = http.post("/v1/solve", json=tiny(cluster={"gpu": "H1000"}))  # a catalog check inside the library
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "cluster.gpu" and "did you mean" in r.json()["message"]
    r = http.post("/v1/estimate", json={"spec": tiny(model={"policy": "nope-7b"}), "layout": TINY_LAYOUT})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "spec.model.policy"
    bad = json.loads(json.dumps(TINY_LAYOUT))
    bad["parallelism"]["training"]["tp"] = 3
    r = http.post("/v1/estimate", json={"spec": TINY_SPEC, "layout": bad})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("layout.parallelism.training")
    r = http.post("/v1/solve", json={**TINY_SPEC, "clutser": {}})
    assert r.status_code == 422 and any(d["field"] == "clutser" for d in r.json()["detail"])
    r = http.post("/v1/solve", content=b'{"cluster": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    r = http.post("/v1/solve", content=b"cluster: {}", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 415
    for body in ([], "x", 3, None):
        assert http.post("/v1/solve", json=body).status_code == 422


def test_infeasible_is_409_with_the_reasons_in_numbers(http):
    r = http.post("/v1/solve", json=INFEASIBLE_SPEC)
    assert r.status_code == 409, r.text
    with pytest.raises(rlsolve.InfeasibleError) as e:
        rlsolve.solve(INFEASIBLE_SPEC)
    assert r.json()["error"] == "infeasible" and r.json()["reasons"] == e.value.reasons
    assert any(ch.isdigit() for ch in r.json()["reasons"][0])


def test_bodies_over_1_mib_are_refused_with_413(http):
    pad = "x" * (1024 * 1024)
    r = http.post("/v1/solve", json={**TINY_SPEC, "pad": pad})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"

    def chunks():  # no Content-Length: counted while reading
        for _ in range(20):
            yield b"x" * (128 * 1024)
    r = http.post("/v1/solve", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_unknown_paths_and_methods(http):
    assert http.get("/v1/nope").status_code == 404
    r = http.get("/v1/solve")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    r = http.post("/v1/solve", json=TINY_SPEC, params={"time_limit": 5})  # misspelt: not silently ignored
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "time_limit"]
    assert "time_limit_s" in r.json()["detail"][0]["msg"]


def test_one_json_log_line_per_request(api, http):
    rid = "log-check-1234"
    http.get("/v1/gpus", headers={"X-Request-ID": rid})
    http.post("/v1/solve", json=tiny(cluster={"nodes": 0}), headers={"X-Request-ID": rid + "b"})
    time.sleep(0.3)
    lines = [x for x in api.lines() if x.get("logger") == "rlsolve.service.access"]
    mine = [x for x in lines if x.get("request_id") == rid]
    assert len(mine) == 1 and mine[0]["status"] == 200 and mine[0]["path"] == "/v1/gpus" and mine[0]["ms"] >= 0
    assert [x["status"] for x in lines if x.get("request_id") == rid + "b"] == [422]
    assert all("Traceback" not in json.dumps(x) for x in api.lines())


def test_the_cli_refuses_an_exposed_address_without_a_token_and_needs_the_extra():
    env = {**os.environ, "RLSOLVE_TOKEN": ""}
    p = subprocess.run([sys.executable, "-m", "rlsolve.cli.main", "serve", "--host", "0.0.0.0"], capture_output=True,
                       text=True, timeout=60, env=env, cwd=str(ROOT))
    assert p.returncode == 2 and "token" in p.stderr and "Traceback" not in p.stderr
    code = ("import sys, runpy; sys.modules['fastapi'] = None\n"
            "sys.argv = ['rlsolve serve']; runpy.run_module('rlsolve.service', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert p.returncode == 2 and 'pip install "rlsolve[serve]"' in p.stderr and "Traceback" not in p.stderr


@contextlib.contextmanager
def in_process_server():
    """create_app() inside another program: uvicorn on a thread, the thread executor, 127.0.0.1."""
    import threading

    import uvicorn

    from rlsolve.service import ServiceConfig
    from rlsolve.service.app import create_app
    port = free_port()
    app = create_app(ServiceConfig(port=port, workers=1, executor="thread", log_requests=False, token=""))
    server = uvicorn.Server(uvicorn.Config(app, host=HOST, port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=60) as c:
            yield c
    finally:
        server.should_exit = True
        thread.join(30)
    assert not thread.is_alive()


def test_thread_executor_in_process_embedding():
    with in_process_server() as c:
        assert c.get("/healthz").json()["pool"]["executor"] == "thread"
        r = c.post("/v1/solve", json=TINY_SPEC)
        assert r.status_code == 200 and r.json() == plan_dict(rlsolve.solve(TINY_SPEC))
        assert c.post("/v1/solve", json=INFEASIBLE_SPEC).status_code == 409


def test_no_answer_in_time_is_504_naming_the_limit(monkeypatch):
    """NoAnswerError (the CP-SAT limit ran out with the status unknown) is never a 409: the
    service answers 504 with the limit, the way the CLI exits 4."""
    def out_of_time(spec, objective=None, **options):
        raise rlsolve.NoAnswerError(1.0, "the optimum")
    monkeypatch.setattr(rlsolve, "solve", out_of_time)  # the thread executor runs in this process
    with in_process_server() as c:
        for path, body in (("/v1/solve", TINY_SPEC), ("/v1/explain", {"spec": TINY_SPEC}),
                           ("/v1/export", {"spec": TINY_SPEC, "target": "verl"})):
            r = c.post(path, json=body)
            assert r.status_code == 504, (path, r.text)
            assert r.json()["error"] == "deadline_exceeded" and "time limit of 1 s" in r.json()["message"]


# --- load: 503, 504, SIGTERM (a second server: one worker, no queue, short grace) -------------------

# about a second of enumeration on two cores: far over a 0.06 s budget, long enough to catch in flight
SLOW = yaml.safe_load((ROOT / "examples" / "grpo-deepseek-v2-256xh100.yaml").read_text())


def test_token_overload_deadline_and_clean_shutdown():
    """A second server: a token, one worker, no queue, no grace beyond the CP-SAT time limits."""
    srv = Server("--workers", "1", "--queue", "0", "--grace", "0", env={"RLSOLVE_TOKEN": TOKEN})
    try:
        with srv.client() as anon:  # the token comes from $RLSOLVE_TOKEN
            r = anon.post("/v1/solve", json=TINY_SPEC)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert anon.get("/v1/gpus", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert anon.get("/healthz").status_code == 200  # probes and the document stay open
            doc = anon.get("/openapi.json").json()
            assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
            assert "401" in doc["paths"]["/v1/solve"]["post"]["responses"]
        with srv.client(headers=AUTH) as c:
            # a solve that overruns its budget (3 solves x 2 x 0.01 s, no grace): 504, worker replaced
            r = c.post("/v1/solve", json={**SLOW, "solver": {"top_k": 0}}, params={"time_limit_s": 0.01})
            assert r.status_code == 504, r.text
            assert r.json()["error"] == "deadline_exceeded"
            # the replacement worker answers the next request
            assert c.post("/v1/solve", json=tiny(solver=FAST)).status_code == 200
            # one worker, no queue: of three at once, the ones that find the worker busy get 503
            body = tiny(model={"policy": "llama-3.1-8b"}, cluster={"nodes": 2}, solver={"time_limit_s": 2, "top_k": 2})
            with cf.ThreadPoolExecutor(3) as ex:
                codes = list(ex.map(lambda _: c.post("/v1/solve", json=body), range(3)))
            statuses = sorted(x.status_code for x in codes)
            assert statuses.count(200) >= 1 and 503 in statuses, statuses
            busy = next(x for x in codes if x.status_code == 503)
            assert int(busy.headers["retry-after"]) >= 1 and busy.json()["retry_after_s"] >= 1
            # SIGTERM while a request runs: it still gets its answer, then the server exits cleanly
            with cf.ThreadPoolExecutor(1) as ex:
                fut = ex.submit(c.post, "/v1/solve", json=SLOW)
                deadline = time.monotonic() + 30
                while c.get("/healthz").json()["pool"]["running"] == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert not fut.done()
                srv.proc.send_signal(signal.SIGTERM)
                r = fut.result(timeout=120)
                assert r.status_code == 200, r.text
                assert r.json() == plan_dict(rlsolve.solve(SLOW))
        assert srv.proc.wait(60) == 0
        events = [x.get("msg") for x in srv.lines() if x.get("logger") == "rlsolve.service"]
        assert "stopping" in events and "stopped" in events
        assert "Traceback" not in srv.log.read_text()
    finally:
        srv.stop(signal.SIGKILL)
        srv.log.unlink(missing_ok=True)


# --- schemathesis: the API against its own OpenAPI document -----------------------------------------

# Phases: the document's examples and random fuzzing (max_examples per operation, positive and
# negative data) for every operation; the boundary-value "coverage" phase, which sends some
# 500 requests per operation, for /v1/solve only (the spec is the same schema in every POST
# body). RLSOLVE_FUZZ_ALL=1 runs it on every operation (about 4,100 requests, about a minute).
FUZZ_ALL = os.environ.get("RLSOLVE_FUZZ_ALL") == "1"


@pytest.fixture(scope="module")
def api_schema(api):
    from schemathesis.config import SchemathesisConfig
    config = {} if FUZZ_ALL else {
        "phases": {"coverage": {"enabled": False}},
        "operations": [{"include-path": "/v1/solve", "phases": {"coverage": {"enabled": True}}}]}
    return schemathesis.openapi.from_url(api.url + "/openapi.json", config=SchemathesisConfig.from_dict(config))


schema = schemathesis.pytest.from_fixture("api_schema")


def no_5xx_and_json_errors(ctx, response, case):
    """Never a 5xx (the server is idle, so 503 cannot be due) but the honest 504 of a request
    whose own time limit left no time for an answer; every error has our shape."""
    if response.status_code == 504:
        assert response.json()["error"] == "deadline_exceeded", response.text[:500]
        return
    assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    if response.status_code >= 400:
        body = response.json()
        assert body["error"] and body["message"], body


@schema.parametrize()
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case, api):
    from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                                   response_headers_conformance, response_schema_conformance,
                                                   status_code_conformance)
    case.call_and_validate(base_url=api.url, timeout=120,
                           checks=[status_code_conformance, content_type_conformance,
                                   response_headers_conformance, response_schema_conformance,
                                   negative_data_rejection],
                           additional_checks=[schemathesis.check(no_5xx_and_json_errors)])


# --- hypothesis: the spec loader and the CLI ------------------------------------------------------

GPUS = ["H100-SXM-80GB", "h100-sxm-80gb", "A100-SXM-40GB", "L4", "H200-SXM-141GB", "MI300X", "B200-SXM-180GB",
        "GB200-NVL72"]
NETS = ["IB-NDR-400", "RoCE-200", "Eth-100", "ib-ndr-400", "IB-XDR-800"]
MODELS = ["qwen2.5-0.5b", "qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.1-8b", "Qwen/Qwen2.5-0.5B"]
junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=8),
                 st.lists(st.integers(-2, 9), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
                 st.sampled_from(["H1OO", "qwen2.5-0.5", "dpo", "pipelined", "", "policy", "rule", "fp4", "-1"]),
                 st.sampled_from([0, -1, 10**9, 2**63, 1e-300, 1e300, float("inf"), 0.5]))

# A spec meant to be valid (small enough to solve in well under a second) ...
inline_arch = st.fixed_dictionaries({"layers": st.integers(2, 8), "hidden": st.sampled_from([256, 512]),
                                     "heads": st.sampled_from([4, 8])},
                                    optional={"kv_heads": st.sampled_from([1, 2, 4]), "vocab": st.integers(1000, 4096)})
model_ref = st.one_of(st.sampled_from(MODELS), inline_arch, st.fixed_dictionaries({"params_b": st.floats(0.1, 2)}))
cluster = st.fixed_dictionaries(
    {"gpu": st.sampled_from(GPUS), "nodes": st.integers(1, 2)},
    optional={"gpus_per_node": st.sampled_from([1, 2, 4, 8]),
              "network": st.one_of(st.sampled_from(NETS), st.fixed_dictionaries({"gbps": st.floats(25, 800)})),
              "price_per_gpu_hour_usd": st.floats(0.5, 10)})
model = st.fixed_dictionaries(
    {"policy": model_ref},
    optional={"reference": st.sampled_from([None, "policy", "qwen2.5-0.5b"]),
              "reward": st.sampled_from(["rule", "policy", "qwen2.5-0.5b"]),
              "value": st.sampled_from([None, "policy"]), "lora_rank": st.sampled_from([0, 8]),
              "precision": st.sampled_from(["bf16", "fp8"])})
resp_len = st.one_of(st.integers(16, 512),
                     st.integers(16, 512).flatmap(lambda m: st.fixed_dictionaries({"max": st.just(m)},
                                                                                  optional={"mean": st.integers(1, m)})))
rl = st.fixed_dictionaries(
    {"prompts_per_step": st.integers(1, 16), "prompt_len": st.integers(16, 512), "response_len": resp_len},
    optional={"algorithm": st.sampled_from(["grpo", "ppo"]), "samples_per_prompt": st.integers(1, 4),
              "mini_batches": st.integers(1, 4), "ppo_epochs": st.integers(1, 2), "max_staleness": st.integers(0, 2)})
constraints = st.fixed_dictionaries(
    {}, optional={"modes": st.lists(st.sampled_from(["colocated", "sync", "async"]), min_size=1, max_size=3,
                                    unique=True),
                  "min_headroom": st.floats(0, 0.5),
                  "generation": st.dictionaries(st.sampled_from(["tp", "dp"]),
                                                st.one_of(st.sampled_from([1, 2]), st.just([1, 2])), max_size=1),
                  "training": st.one_of(st.just({}), st.fixed_dictionaries({"tp": st.sampled_from([1, 2, [1, 2]])}),
                                        st.fixed_dictionaries({"zero_stage": st.sampled_from([0, 1, 3, [1, 3]])}),
                                        st.fixed_dictionaries({"recompute": st.sampled_from(["full", ["none",
                                                                                                     "selective"]])}))})
solver_opts = st.fixed_dictionaries({"time_limit_s": st.just(0.5), "top_k": st.sampled_from([0, 0, 1])},
                                    optional={"workers": st.just(1), "deterministic": st.booleans()})


# A failure is reported at once with its spec; shrinking a solver run can take many minutes.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@st.composite
def valid_specs(draw) -> dict:
    spec = {"cluster": draw(cluster), "model": draw(model), "rl": draw(rl), "solver": draw(solver_opts)}
    if draw(st.booleans()):
        spec["constraints"] = draw(constraints)
    if draw(st.integers(0, 4)) == 0:
        spec["objective"] = draw(st.sampled_from(["throughput", "cost"]))
    return spec


def _paths(node, prefix=()):
    """Every key path in a nested dict (for the mutations)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


@st.composite
def specs(draw) -> dict:
    """... and, half the time, the same with one to three mutations: a value replaced by junk of
    any type, a required key dropped, an unknown key added."""
    spec = draw(valid_specs())
    if draw(st.booleans()):
        return spec
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(spec))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = spec
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["junk", "junk", "junk", "drop", "extra"]))
        if action == "junk":
            value = draw(junk)
            parent[path[-1]] = value
        elif action == "drop":
            parent.pop(path[-1])
        else:
            parent[draw(st.sampled_from(["bogus", "nodess", "Policy"]))] = draw(junk)
    return spec


BAD_CONSTRAINTS = [{"training": {"max_gpus": "x"}}, {"generation": {"max_gpus": None}},
                   {"training": {"zero_stage": "x"}}, {"training": {"zero_stage": 1.5}},
                   {"training": {"zero_stage": 8}}, {"training": {"recompute": "x"}}, {"training": {"recompute": None}}]
FOUND_BY_FUZZING = [tiny(rl={"response_len": float("inf")}), tiny(rl={"samples_per_prompt": 2**63})] + [
    tiny(constraints=c) for c in BAD_CONSTRAINTS]


@pytest.mark.parametrize("spec", FOUND_BY_FUZZING, ids=lambda s: json.dumps({k: s[k] for k in ("rl", "constraints")
                                                                             if k in s})[:80])
def test_inputs_the_fuzzers_found_raise_spec_error(spec):
    """These crashed the library with a traceback (OverflowError, TypeError, KeyError) until the
    property tests below found them; they must stay SpecError (CLI exit 2, HTTP 422)."""
    with pytest.raises(rlsolve.SpecError):
        rlsolve.solve(spec, time_limit_s=0.5, top_k=0)


def test_denormal_network_bandwidth_is_refused():
    # found by schemathesis: 5e-324 Gbit/s used to pass the schema and divide by zero
    with pytest.raises(rlsolve.SpecError):
        rlsolve.solve(tiny(cluster={"network": {"gbps": 5e-324}}), time_limit_s=0.5, top_k=0)


@pytest.mark.parametrize("cons", BAD_CONSTRAINTS, ids=lambda c: json.dumps(c))
def test_the_service_refuses_constraint_values_of_the_wrong_shape(http, cons):
    r = http.post("/v1/solve", json=tiny(constraints=cons))
    assert r.status_code == 422, r.text
    role = next(iter(cons))
    assert r.json()["detail"][0]["field"].startswith(f"constraints.{role}")


def test_the_service_refuses_non_json_numbers_and_absurd_values(http):
    """NaN/Infinity/1e400 are not JSON; a 5e-324 Gbit/s network or 10^12 nodes is no cluster:
    422 with the field, before any solver code runs (the library would divide by zero)."""
    raw = json.dumps(TINY_SPEC).replace('"response_len": {"max": 512, "mean": 256}', '"response_len": Infinity')
    for body in (raw, raw.replace("Infinity", "NaN"), raw.replace("Infinity", "1e400")):
        r = http.post("/v1/solve", content=body.encode(), headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid", r.text
    r = http.post("/v1/solve", json=tiny(cluster={"network": {"gbps": 5e-324}}))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "cluster.network.gbps"
    r = http.post("/v1/solve", json=tiny(cluster={"nodes": 10**12}))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "cluster.nodes"
    r = http.post("/v1/solve", json=tiny(cluster={"nodes": 4096, "gpus_per_node": 8}))  # 32,768 GPUs > 16,384
    assert r.status_code == 422 and "at most 16,384" in r.json()["message"]
    r = http.post("/v1/solve", json=tiny(solver={"deterministic": 1}))  # strict JSON types: 1 is not true
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "solver.deterministic"


@given(spec=specs())
@settings(max_examples=800, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
def test_spec_loader_accepts_or_raises_spec_error_only(spec):
    try:
        loaded = rlsolve.load_spec(spec)
    except rlsolve.SpecError as e:
        assert str(e)
        event("SpecError")
        return
    except Exception as e:  # noqa: BLE001 - anything else is a bug; say which spec
        raise AssertionError(f"{type(e).__name__}: {e}\nspec = {spec!r}") from e
    event("loaded")
    assert isinstance(loaded, rlsolve.Spec)


yaml_text = st.one_of(specs().map(lambda s: yaml.safe_dump(s, sort_keys=False)),
                      st.sampled_from(["", "- a\n- b\n", "cluster: [\n", "42\n", "cluster: {gpu: H100\n", "\t x: 1"]),
                      st.text(max_size=40))


@given(text=yaml_text)
@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_spec_loader_reads_any_file_without_crashing(text):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "spec.yaml"
        p.write_text(text)
        try:
            rlsolve.load_spec(str(p))
        except rlsolve.SpecError:
            pass


@given(spec=specs())
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
def test_cli_exits_0_2_3_or_4_and_never_prints_a_traceback(spec):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "spec.yaml"
        p.write_text(yaml.safe_dump(spec, sort_keys=False))
        r = CliRunner().invoke(main, ["solve", str(p), "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), (repr(r.exception), spec)
    assert r.exit_code in (0, 2, 3, 4), (r.exit_code, r.output, spec)
    assert "Traceback" not in r.output
    event(f"exit {r.exit_code}")
    if r.exit_code == 0:
        assert json.loads(r.stdout)["status"] in ("optimal", "feasible")
    elif r.exit_code == 2:
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    elif r.exit_code == 3:
        assert r.stderr.startswith("infeasible: "), r.stderr
    else:  # no answer within the spec's own time limit: honest, one line
        assert r.stderr.startswith("unknown: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_fuzzing_reached_every_endpoint_and_no_request_failed(api):
    """Runs after the schemathesis test (file order): it did reach every operation, some
    requests were solved (200) and none of the server's access lines is a 5xx."""
    from collections import Counter
    lines = [x for x in api.lines() if x.get("logger") == "rlsolve.service.access"]
    per_path = Counter(x["path"] for x in lines)
    statuses = Counter((x["path"], x["status"]) for x in lines)
    print("requests per path:", dict(per_path))
    print("statuses:", dict(sorted(statuses.items())))
    for path in ("/v1/solve", "/v1/estimate", "/v1/explain", "/v1/compare", "/v1/export"):
        assert per_path[path] >= 30, (path, per_path)
    assert per_path["/v1/gpus"] >= 1 and per_path["/v1/models"] >= 1
    assert statuses[("/v1/solve", 200)] >= 1 and statuses[("/v1/solve", 422)] >= 1
    # a 504 answers a request whose own time limit was too short (checked by the fuzz test)
    failed = [x for x in lines if x["status"] >= 500 and x["status"] != 504]
    assert not failed, failed[:3]


def test_single_pool_price_past_the_pool_bound_is_a_spec_error():
    """Found by the property test: the single-pool form accepted a price the Pool it builds
    rejects, so a raw pydantic error escaped instead of a SpecError naming the field."""
    spec = {"cluster": {"gpu": "H200-SXM-141GB", "nodes": 2, "price_per_gpu_hour_usd": 1e9},
            "model": {"policy": "llama-3.1-8b"},
            "rl": {"prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 16,
                   "response_len": {"max": 64, "mean": 32}}}
    with pytest.raises(rlsolve.SpecError) as e:
        rlsolve.load_spec(spec)
    assert "price_per_gpu_hour_usd" in str(e.value)
