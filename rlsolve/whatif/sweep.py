"""What-if sweeps: solve one spec on many (GPU, nodes, network) clusters and compare.

`compare` is pure apart from its result cache: it prints nothing (progress goes to a callback
the caller chooses) and writes only cache files. Every combination is a copy of the spec with
`cluster.gpu`, `cluster.nodes` and `cluster.network` replaced; an infeasible combination is a
row with `status="infeasible"` and the reason, not an error; one that got no answer within the
time limit is `status="unknown"`, and is never cached (a later run may answer it).

Cache: one JSON file per combination under `cache_dir` (default ~/.cache/rlsolve/sweeps, or
$XDG_CACHE_HOME/rlsolve/sweeps), named by the SHA-256 of the combination's spec, the objective
and the content of the catalogs and of the performance model's code. A sweep that is
interrupted resumes where it stopped; an upgrade or a catalog edit never serves stale numbers.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import math
import multiprocessing
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from rlsolve.errors import InfeasibleError, NoAnswerError, SpecError
from rlsolve.reader import read_text

CACHE_FORMAT = 2  # 2: degrees as numbers
EXECUTORS = ("local", "ray")
Progress = Callable[[int, int], None]
DEGREES = ("gen_tp", "gen_pp", "gen_dp", "gen_ep", "train_tp", "train_pp", "train_cp", "train_dp", "train_ep",
           "train_zero_stage")


@dataclass
class Row:
    """One cluster of a what-if study and the best plan on it."""

    gpu: str
    nodes: int
    network: str
    gpus: int                                  # GPUs in the cluster (nodes x GPUs per node)
    status: str                                # optimal | feasible | infeasible | invalid | unknown (out of time)
    gpus_used: int = 0                         # GPUs the plan uses (the cost objective may idle some)
    tokens_per_s: float | None = None          # trained tokens/s (SPEC section 4)
    tokens_per_s_per_gpu: float | None = None  # per GPU used
    step_s: float | None = None
    mode: str | None = None                    # colocated | sync | async
    gen_gpus: int | None = None
    train_gpus: int | None = None
    # the plan's degrees, as numbers (None when infeasible)
    gen_tp: int | None = None
    gen_pp: int | None = None
    gen_dp: int | None = None                  # engine replicas
    gen_ep: int | None = None
    train_tp: int | None = None
    train_pp: int | None = None
    train_cp: int | None = None
    train_dp: int | None = None
    train_ep: int | None = None
    train_zero_stage: int | None = None
    objective: str = "throughput"
    price_usd_per_gpu_hour: float = 0.0
    price_source: str = ""
    usd_per_hour: float | None = None          # the GPUs used, per hour
    usd_per_mtok: float | None = None          # dollars per million trained tokens
    tdp_w: float = 0.0
    tokens_per_s_per_kw: float | None = None   # per kW of GPU board power (TDP) of the GPUs used
    pareto: bool = False                       # on the throughput / (USD per Mtok) Pareto front
    reason: str | None = None                  # why infeasible or invalid
    from_cache: bool = field(default=False, compare=False)

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible")

    @property
    def label(self) -> str:
        return f"{self.gpu} x {self.nodes} node{'s' if self.nodes != 1 else ''}, {self.network}"

    @property
    def generation(self) -> str | None:
        """The generation degrees as text, e.g. "tp=2 pp=1 dp=4"."""
        if self.gen_tp is None:
            return None
        return f"tp={self.gen_tp} pp={self.gen_pp} dp={self.gen_dp}" + (f" ep={self.gen_ep}" if self.gen_ep > 1 else "")

    @property
    def training(self) -> str | None:
        """The training degrees as text, e.g. "tp=4 pp=2 cp=1 dp=2 ZeRO-1"."""
        if self.train_tp is None:
            return None
        return (f"tp={self.train_tp} pp={self.train_pp} cp={self.train_cp} dp={self.train_dp}"
                + (f" ep={self.train_ep}" if self.train_ep > 1 else "") + f" ZeRO-{self.train_zero_stage}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("from_cache")
        return d


# --- the combinations ---------------------------------------------------------------------

def _canonical_gpus(names: Iterable[str]) -> list[str]:
    from rlsolve.hardware_db import find_gpu
    return _unique(find_gpu(str(n), field="--gpu").name for n in names)


def _canonical_networks(values: Iterable[Any]) -> list[Any]:
    from rlsolve.hardware_db import find_network
    out = []
    for v in values:
        if isinstance(v, dict):
            out.append(v)
        elif isinstance(v, (int, float)) or _is_number(v):
            out.append({"gbps": float(v)})  # an inline fabric given by its line rate
        else:
            out.append(find_network(str(v), field="--network").name)
    return _unique(out)


def _is_number(v: Any) -> bool:
    try:
        float(str(v))
        return True
    except ValueError:
        return False


def _unique(items: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen


def network_name(net: Any) -> str:
    if isinstance(net, dict):
        return f"{net['gbps']:g}G" if "gbps" in net else json.dumps(net, sort_keys=True)
    return str(net)


@dataclass(frozen=True)
class _Point:
    gpu: str
    nodes: int
    network: Any
    spec: dict            # the combination's spec, JSON-ready
    price: float
    price_source: str
    tdp_w: float
    gpus: int


def _points(base, gpus: Sequence[str], nodes: Sequence[int], networks: Sequence[Any],
            prices: dict[str, float]) -> list[_Point]:
    from rlsolve.hardware_db import find_gpu
    c = base.cluster
    base_gpu = find_gpu(c.gpu).name
    data = base.model_dump(mode="json", exclude_none=True)
    # Alternatives are not shown in a comparison; skipping them saves the re-solves.
    data["solver"] = {**data.get("solver", {}), "top_k": 0}
    out = []
    for g in gpus:
        hw = find_gpu(g)
        same = hw.name == base_gpu
        if g in prices:
            price, source = prices[g], "per-run override"
        elif same and c.price_per_gpu_hour_usd:
            price, source = c.price_per_gpu_hour_usd, "spec override (cluster.price_per_gpu_hour_usd)"
        else:
            price, source = hw.price_per_gpu_hour_usd, f"catalog {hw.price_date}: {hw.price_source}"
        for n in nodes:
            for net in networks:
                cluster = {"gpu": hw.name, "nodes": int(n), "network": net, "price_per_gpu_hour_usd": price}
                if same:  # a server shape the user gave for their GPU says nothing about another GPU's
                    for k in ("gpus_per_node", "nics_per_node"):
                        if getattr(c, k):
                            cluster[k] = getattr(c, k)
                spec = {**data, "cluster": cluster}
                gpn = cluster.get("gpus_per_node") or hw.default_gpus_per_node
                out.append(_Point(gpu=hw.name, nodes=int(n), network=net, spec=spec, price=price,
                                  price_source=source, tdp_w=hw.tdp_w, gpus=int(n) * gpn))
    return out


# --- one solve (runs in a worker process or a Ray task) -------------------------------------

def solve_point(spec: dict, objective: str | None) -> dict[str, Any]:
    """Solve one combination and return the plan's headline numbers (plain data, picklable).
    Top-level so process pools and Ray can ship it."""
    from rlsolve.solver import solve
    try:
        plan = solve(spec, objective=objective)
    except InfeasibleError as e:
        return {"status": "infeasible", "reason": "; ".join(e.reasons)}
    except NoAnswerError as e:  # out of time, not proven impossible: a row, never cached
        return {"status": "unknown", "reason": str(e)}
    except SpecError as e:
        return {"status": "invalid", "reason": str(e)}
    ra, par = plan.resource_allocation, plan.parallelism
    g, t = par.generation, par.training
    colocated = plan.pipeline.mode == "colocated"
    used = max(ra.generation.gpus, ra.training.gpus) if colocated else ra.generation.gpus + ra.training.gpus
    used += sum(g.gpus for g in (ra.auxiliary, ra.critic) if g is not None)  # groups of their own
    return {
        "status": plan.status, "mode": plan.pipeline.mode,
        "tokens_per_s": plan.throughput.tokens_per_s, "step_s": plan.time_s.step, "gpus_used": used,
        "gen_gpus": ra.generation.gpus, "train_gpus": ra.training.gpus,
        "gen_tp": g.tp, "gen_pp": g.pp, "gen_dp": g.dp, "gen_ep": g.ep,
        "train_tp": t.tp, "train_pp": t.pp, "train_cp": t.cp, "train_dp": t.dp, "train_ep": t.ep,
        "train_zero_stage": t.zero_stage,
    }


def _sig(x: float, digits: int = 6) -> float:
    """Round to significant digits: stable output without losing small costs."""
    return float(f"{x:.{digits}g}")


def _row(p: _Point, res: dict[str, Any], objective: str, from_cache: bool) -> Row:
    row = Row(gpu=p.gpu, nodes=p.nodes, network=network_name(p.network), gpus=p.gpus, status=res["status"],
              objective=objective, price_usd_per_gpu_hour=p.price, price_source=p.price_source, tdp_w=p.tdp_w,
              reason=res.get("reason"), from_cache=from_cache)
    if row.status in ("optimal", "feasible"):
        used = int(res["gpus_used"])
        tps = float(res["tokens_per_s"])
        row.gpus_used = used
        row.tokens_per_s = tps
        row.tokens_per_s_per_gpu = _sig(tps / used)
        row.step_s = res["step_s"]
        row.mode = res["mode"]
        row.gen_gpus, row.train_gpus = res["gen_gpus"], res["train_gpus"]
        for name in DEGREES:
            setattr(row, name, int(res[name]))
        row.usd_per_hour = _sig(used * p.price)
        row.usd_per_mtok = _sig(used * p.price / 3600.0 / tps * 1e6) if tps > 0 else math.inf
        row.tokens_per_s_per_kw = _sig(tps / (used * p.tdp_w / 1000.0))
    return row


# --- Pareto front -------------------------------------------------------------------------

def mark_pareto(rows: list[Row]) -> list[Row]:
    """Mark the feasible rows no other row beats on both throughput (higher) and dollars per
    million tokens (lower). Ties on both count as on the front."""
    ok = [r for r in rows if r.feasible and r.tokens_per_s is not None and r.usd_per_mtok is not None]
    for r in rows:
        r.pareto = False
    for r in ok:
        r.pareto = not any(o.tokens_per_s >= r.tokens_per_s and o.usd_per_mtok <= r.usd_per_mtok
                           and (o.tokens_per_s > r.tokens_per_s or o.usd_per_mtok < r.usd_per_mtok)
                           for o in ok)
    return rows


# --- cache --------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlsolve" / "sweeps"


_MODEL_CODE = ("perf", "solver", "models")


@lru_cache(maxsize=None)
def _code_digest() -> str:
    """The performance model and solver sources and the model/constants data files."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = [root / "resolve.py", root / "plan.py"]
    for sub in _MODEL_CODE:
        files += sorted(p for p in (root / sub).glob("*") if p.suffix in (".py", ".yaml"))
    for f in files:
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def catalog_digest() -> str:
    """Content of the hardware catalog as loaded (built-in plus any $RLSOLVE_CATALOG_DIR overlay)."""
    from rlsolve.hardware_db import load_catalog
    return hashlib.sha256(load_catalog().model_dump_json().encode()).hexdigest()


def cache_key(spec: dict, objective: str, catalog: str | None = None) -> str:
    import rlsolve
    blob = json.dumps({"format": CACHE_FORMAT, "version": rlsolve.__version__, "spec": spec,
                       "objective": objective, "catalog": catalog or catalog_digest(),
                       "code": _code_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_read(directory: Path | None, key: str) -> dict | None:
    if directory is None:
        return None
    path = directory / f"{key}.json"
    try:
        data = json.loads(read_text(path, "cache entry"))
    except (OSError, ValueError, RecursionError):  # SpecError is a ValueError
        return None  # absent, or cut short by an interruption: solve again
    return data.get("result") if isinstance(data, dict) and data.get("key") == key else None


def _cache_write(directory: Path | None, key: str, result: dict) -> None:
    # invalid: the spec is fixed and rerun; unknown: a longer time limit, or a faster machine,
    # may answer it (caching it would serve "no answer" as if it were the answer)
    if directory is None or result.get("status") in ("invalid", "unknown"):
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "result": result}, f)
        os.replace(tmp, directory / f"{key}.json")  # atomic: never a half-written entry
    except OSError:
        pass  # a read-only cache must not fail the study


# --- progress -----------------------------------------------------------------------------

class ClickProgress:
    """A click progress bar on stderr that appears only once a sweep has run for `delay` s."""

    def __init__(self, label: str = "solving", delay: float = 1.0):
        self.label, self.delay = label, delay
        self.t0 = time.monotonic()
        self._bar = None
        self._shown = 0

    def __call__(self, done: int, total: int) -> None:
        import sys

        import click
        if self._bar is None:
            if time.monotonic() - self.t0 < self.delay or done >= total:
                return
            self._bar = click.progressbar(length=total, label=self.label, file=sys.stderr, show_pos=True,
                                          show_eta=True)
            self._bar.__enter__()
        if done > self._shown:
            self._bar.update(done - self._shown)
            self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


# --- executors ----------------------------------------------------------------------------

def _pool_context() -> multiprocessing.context.BaseContext:
    """fork where it is safe (Linux): workers start at once with the solver imported, and a
    caller's script needs no `if __name__ == "__main__"` guard. The solver leaves no threads
    running between solves, so nothing is forked mid-lock. Elsewhere (macOS, Windows): spawn."""
    import sys
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _run_local(todo: list[tuple[int, dict]], objective: str | None, workers: int,
               done_cb: Callable[[int, dict], None], tick: Callable[[], None]) -> None:
    if workers <= 1 or len(todo) <= 1:
        for i, spec in todo:
            done_cb(i, solve_point(spec, objective))
            tick()
        return
    import rlsolve.solver  # noqa: F401  (imported once here, inherited by forked workers)
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context())
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork in a process with threads (numpy's idle BLAS pool)
            warnings.filterwarnings("ignore", message=".*multi-threaded.*fork.*", category=DeprecationWarning)
            futures = {pool.submit(solve_point, spec, objective): i for i, spec in todo}
        pending = set(futures)
        while pending:
            finished, pending = cf.wait(pending, timeout=0.25, return_when=cf.FIRST_COMPLETED)
            for f in finished:
                done_cb(futures[f], f.result())
            tick()
    except BaseException:
        # interrupted: what finished is cached; drop the rest without waiting for it
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_ray(todo: list[tuple[int, dict]], objective: str | None, address: str | None,
             done_cb: Callable[[int, dict], None], tick: Callable[[], None]) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError("the Ray executor needs Ray: pip install 'rlsolve[ray]'", field="executor") from None
    started = False
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=2)(solve_point)
        refs = {task.remote(spec, objective): i for i, spec in todo}
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=min(len(pending), 64), timeout=0.25)
            for ref in finished:
                done_cb(refs[ref], ray.get(ref))
            tick()
    finally:
        if started:
            ray.shutdown()


# --- the study ----------------------------------------------------------------------------

def compare(spec, gpus: Sequence[str] | None = None, nodes: Sequence[int] | None = None,
            networks: Sequence[Any] | None = None, objective: str | None = None, executor: str = "local",
            address: str | None = None, workers: int | None = None, cache_dir: "str | os.PathLike | bool | None" = None,
            progress: "Progress | bool | None" = None, prices: dict[str, float] | None = None,
            time_limit_s: float | None = None) -> list[Row]:
    """Solve `spec` on every (GPU, nodes, network) combination and return one Row each, in
    the order gpus x nodes x networks, with the throughput-cost Pareto front marked.

    gpus / nodes / networks: lists (None: the spec's own value). networks take catalog names
    or `{gbps: N}`. objective: throughput | cost (None: the spec's). executor: "local" (a
    process pool of `workers`, default the CPU count) or "ray" (`ray.init(address=address)`
    unless Ray is already initialized). cache_dir: where results are cached (None: the
    default, False: no cache). progress: a callable(done, total), True for a click progress
    bar on stderr once the sweep has run a second, or None. prices: GPU name -> USD per
    GPU-hour, overriding the catalog and the spec for this run. time_limit_s: each solve's limit
    (None: the spec's solver.time_limit_s).

    Raises SpecError for a bad spec, GPU or network name; never for an infeasible point."""
    from rlsolve.hardware_db import find_gpu
    from rlsolve.spec import load_spec
    base = load_spec(spec)
    if time_limit_s is not None:
        base = base.model_copy(update={"solver": base.solver.model_copy(update={"time_limit_s": time_limit_s})})
    objective = objective or base.objective
    if objective not in ("throughput", "cost"):
        raise SpecError(f"unknown objective {objective!r}; use throughput or cost", field="objective")
    if executor not in EXECUTORS:
        raise SpecError(f"unknown executor {executor!r}; use local or ray", field="executor")
    if base.cluster.pools:
        raise SpecError("compare replaces cluster.gpu/nodes/network; give a single-pool cluster, not pools",
                        field="cluster.pools")
    gpu_list = _canonical_gpus(gpus or [base.cluster.gpu])
    node_list = _unique(int(n) for n in (nodes or [base.cluster.nodes]))
    if any(n <= 0 for n in node_list):
        raise SpecError(f"node counts must be positive, got {node_list}", field="--nodes")
    net_list = _canonical_networks(networks or [base.cluster.network if isinstance(base.cluster.network, str)
                                                else base.cluster.network.model_dump(exclude_none=True)])
    price_map = {}
    for name, usd in (prices or {}).items():
        if not (isinstance(usd, (int, float)) and usd > 0):
            raise SpecError(f"price for {name} must be a positive number of USD per GPU-hour, got {usd!r}",
                            field="--price")
        price_map[find_gpu(name, field="--price").name] = float(usd)
    points = _points(base, gpu_list, node_list, net_list, price_map)

    directory = None if cache_dir is False else Path(cache_dir or default_cache_dir()).expanduser()
    catalog = catalog_digest()
    keys = [cache_key(p.spec, objective, catalog) for p in points]
    results: list[dict | None] = [_cache_read(directory, k) for k in keys]
    cached = [r is not None for r in results]
    todo = [(i, p.spec) for i, p in enumerate(points) if results[i] is None]

    bar = ClickProgress() if progress is True else None
    report: Progress | None = bar if bar is not None else (progress or None)
    total = len(points)

    def done_cb(i: int, res: dict) -> None:
        results[i] = res
        _cache_write(directory, keys[i], res)

    def tick() -> None:
        if report:
            report(sum(r is not None for r in results), total)

    try:
        if todo:
            if executor == "ray":
                _run_ray(todo, objective, address, done_cb, tick)
            else:
                n = workers or os.cpu_count() or 1
                _run_local(todo, objective, min(n, len(todo)), done_cb, tick)
        tick()
    finally:
        if bar is not None:
            bar.close()
    rows = [_row(p, res, objective, c) for p, res, c in zip(points, results, cached)]  # type: ignore[arg-type]
    return mark_pareto(rows)
