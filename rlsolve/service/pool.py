"""A bounded pool of solver workers.

At most `workers` tasks run at once and at most `max_queue` more wait for a worker; any
request beyond that is refused at once with `Overloaded` (HTTP 503 + Retry-After), and so is
one that waits longer than `queue_timeout_s`. Nothing queues without bound.

`executor="process"` (the default) runs each task in a long-lived worker process (spawned,
so the server's threads and event loop are not forked). A task that overruns its wall-clock
budget has its process stopped and replaced (`DeadlineExceeded`, HTTP 504), so a runaway
enumeration cannot hold a worker forever; a crashed worker is replaced too (`WorkerLost`,
HTTP 503). `executor="thread"` runs tasks on threads of the server process (CP-SAT releases
the GIL); it cannot stop a running task, so the budget is not enforced there.
"""
from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlsolve.service.worker import run_task, warm


class Overloaded(Exception):
    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(Exception):
    def __init__(self, seconds: float):
        super().__init__(f"the work did not finish within its budget of {seconds:g} s")
        self.seconds = seconds


class WorkerLost(Exception):
    pass


def _worker_main(conn: Any) -> None:  # runs in the child process
    # The parent decides when workers stop (it drains them on SIGTERM); a terminal's Ctrl-C
    # or a SIGTERM sent to the whole process group must not kill a solve half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        warm()
        conn.send("ready")
        while True:
            msg = conn.recv()
            if msg is None:
                return
            kind, payload = msg
            conn.send(run_task(kind, payload))
    except (EOFError, OSError, KeyboardInterrupt):  # the parent went away
        return


class _ProcessWorker:
    def __init__(self, ctx: Any, index: int):
        self.ctx, self.index = ctx, index
        self.proc: Any = None
        self.conn: Any = None
        self.spawn()

    def spawn(self) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child,), daemon=True, name=f"rlsolve-worker-{self.index}")
        proc.start()
        child.close()
        self.proc, self.conn = proc, parent

    def wait_ready(self, timeout: float) -> None:
        if not self.conn.poll(timeout) or self.conn.recv() != "ready":
            raise WorkerLost(f"worker {self.index} did not start within {timeout:g} s")

    def stop(self, timeout: float = 2.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(1.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)
        self.conn.close()

    def kill_and_respawn(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(2.0)
        self.conn.close()
        self.spawn()

    def call(self, kind: str, payload: dict, budget_s: float) -> dict:
        """Blocking; runs on one of the pool's I/O threads."""
        try:
            self.conn.send((kind, payload))
            deadline = time.monotonic() + budget_s
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill_and_respawn()
                    raise DeadlineExceeded(budget_s)
                if self.conn.poll(min(left, 0.5)):
                    msg = self.conn.recv()
                    if msg == "ready":  # a respawned worker announcing itself
                        continue
                    return msg
                if not self.proc.is_alive():
                    raise EOFError
        except (EOFError, OSError, BrokenPipeError) as e:
            code = self.proc.exitcode
            self.kill_and_respawn()
            raise WorkerLost(f"the worker process ended unexpectedly (exit code {code}); it was replaced") from e


class _ThreadWorker:
    def __init__(self, index: int):
        self.index = index

    def call(self, kind: str, payload: dict, budget_s: float) -> dict:
        return run_task(kind, payload)

    def stop(self, timeout: float = 2.0) -> None:
        pass


class SolverPool:
    def __init__(self, workers: int = 2, max_queue: int = 32, queue_timeout_s: float = 30.0,
                 executor: str = "process", start_timeout_s: float = 120.0):
        if executor not in ("process", "thread"):
            raise ValueError("executor must be 'process' or 'thread'")
        self.n_workers, self.max_queue = workers, max_queue
        self.queue_timeout_s, self.executor, self.start_timeout_s = queue_timeout_s, executor, start_timeout_s
        self._workers: list[Any] = []
        self._idle: asyncio.Queue | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.admitted = 0      # running + waiting
        self.running = 0
        self.completed = 0
        self.rejected = 0
        self.deadline_kills = 0
        self.lost = 0
        self._ema_s = 1.0      # smoothed task wall time, for Retry-After
        self.closed = False

    # --- life cycle -------------------------------------------------------------------------
    def _start_blocking(self) -> list[Any]:
        if self.executor == "thread":
            warm()
            return [_ThreadWorker(i) for i in range(self.n_workers)]
        ctx = mp.get_context("spawn")
        workers = [_ProcessWorker(ctx, i) for i in range(self.n_workers)]
        for w in workers:
            w.wait_ready(self.start_timeout_s)
        return workers

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._threads = ThreadPoolExecutor(max_workers=self.n_workers, thread_name_prefix="rlsolve-pool")
        self._workers = await loop.run_in_executor(self._threads, self._start_blocking)
        self._idle = asyncio.Queue()
        for w in self._workers:
            self._idle.put_nowait(w)

    async def close(self) -> None:
        self.closed = True
        loop = asyncio.get_running_loop()
        workers, self._workers = self._workers, []
        if workers:
            await loop.run_in_executor(None, lambda: [w.stop() for w in workers])
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    # --- admission --------------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        return max(0, self.admitted - self.running)

    def retry_after(self) -> int:
        return int(min(60, max(1, math.ceil(self._ema_s * (self.waiting + 1) / self.n_workers))))

    def stats(self) -> dict[str, Any]:
        return {"executor": self.executor, "workers": self.n_workers, "max_queue": self.max_queue,
                "running": self.running, "waiting": self.waiting, "completed": self.completed,
                "rejected": self.rejected, "deadline_kills": self.deadline_kills, "workers_lost": self.lost,
                "mean_task_s": round(self._ema_s, 3)}

    async def submit(self, kind: str, payload: dict, budget_s: float) -> dict:
        """Run one task; raises Overloaded, DeadlineExceeded or WorkerLost."""
        if self._idle is None or self.closed:
            raise Overloaded("the server is starting or shutting down", retry_after=5)
        if self.admitted >= self.n_workers + self.max_queue:
            self.rejected += 1
            raise Overloaded(f"all {self.n_workers} workers are busy and {self.max_queue} requests are waiting",
                             retry_after=self.retry_after())
        self.admitted += 1
        handed_off = False
        try:
            try:
                worker = await asyncio.wait_for(self._idle.get(), timeout=self.queue_timeout_s)
            except asyncio.TimeoutError:
                self.rejected += 1
                raise Overloaded(f"no worker became free within {self.queue_timeout_s:g} s",
                                 retry_after=self.retry_after()) from None
            loop = asyncio.get_running_loop()
            self.running += 1
            t0 = time.monotonic()
            fut = loop.run_in_executor(self._threads, worker.call, kind, payload, budget_s)
            handed_off = True

            def _done(f: asyncio.Future) -> None:  # frees the slot when the work ends, even if the client left
                self.running -= 1
                self.admitted -= 1
                self._ema_s = 0.8 * self._ema_s + 0.2 * (time.monotonic() - t0)
                exc = None if f.cancelled() else f.exception()
                if isinstance(exc, DeadlineExceeded):
                    self.deadline_kills += 1
                elif isinstance(exc, WorkerLost):
                    self.lost += 1
                elif exc is None and not f.cancelled():
                    self.completed += 1
                self._idle.put_nowait(worker)

            fut.add_done_callback(_done)
            return await asyncio.shield(fut)
        finally:
            if not handed_off:
                self.admitted -= 1
