"""Settings of `rlsolve serve`, kept free of FastAPI so the CLI can check them first."""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Literal

TOKEN_ENV = "RLSOLVE_TOKEN"
MIB = 1024 * 1024


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`; anything else (0.0.0.0 included) is exposed."""
    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServiceConfig:
    """Everything the service needs; `rlsolve serve` fills it from its flags.

    Time: a request's CP-SAT time limit is `?time_limit_s=`, else the body's
    `solver.time_limit_s` when the body sets it, else `default_time_limit_s`; never more than
    `max_time_limit_s`. The work then has `budget_s()` of wall time (every CP-SAT call it may
    make, plus `grace_s` for enumeration) before its worker is stopped and the request
    answered 504. A request waits at most `queue_timeout_s` for a free worker (503 after)."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 2                      # solves running at once
    max_queue: int = 32                   # admitted requests waiting for a worker; beyond: 503
    executor: Literal["process", "thread"] = "process"
    token: str | None = None              # bearer token; required when host is not loopback
    default_time_limit_s: float = 10.0    # the library's default (Spec.solver.time_limit_s)
    max_time_limit_s: float = 60.0
    grace_s: float = 60.0                 # enumeration and explanation time on top of CP-SAT's limit
    queue_timeout_s: float = 30.0
    max_body_bytes: int = MIB
    max_solver_workers: int = 2           # CP-SAT search workers per solve (spec.solver.workers is capped)
    max_compare_points: int = 64
    max_gpus: int = 16384                 # largest cluster a request may describe (see limits.py)
    graceful_timeout_s: float = 30.0      # SIGTERM: how long in-flight requests may finish
    log_requests: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.token is None:
            self.token = os.environ.get(TOKEN_ENV) or None

    def budget_s(self, time_limit_s: float, top_k: int = 3, points: int = 1) -> float:
        """Wall-clock budget of one request: per point, the optimum and up to 2 + top_k
        runner-ups, each at most two CP-SAT calls (deterministic mode adds a tie-break solve)."""
        solves = 1 + 2 + max(0, min(int(top_k), 8))
        return points * solves * 2 * time_limit_s + self.grace_s

    def check(self) -> None:
        """Raise ValueError naming the setting and the fix."""
        if self.workers < 1:
            raise ValueError("--workers must be at least 1")
        if self.max_queue < 0:
            raise ValueError("--queue must be 0 or more")
        if not (0 < self.default_time_limit_s <= self.max_time_limit_s):
            raise ValueError("the default time limit must be positive and at most the cap")
        if self.grace_s < 0 or self.queue_timeout_s <= 0:
            raise ValueError("--grace must be 0 or more and the queue timeout positive")
        if not 0 <= self.port <= 65535:
            raise ValueError("--port must be in 0..65535")
        if not is_loopback(self.host) and not self.token:
            raise ValueError(f"--host {self.host} is not a loopback address: give a bearer token with --token "
                             f"or ${TOKEN_ENV} (clients then send 'Authorization: Bearer <token>')")
