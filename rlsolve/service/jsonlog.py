"""One JSON object per line on stderr: one line per request (`rlsolve.service.access`) and the
server's own events (`rlsolve.service`)."""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

ACCESS = logging.getLogger("rlsolve.service.access")
EVENTS = logging.getLogger("rlsolve.service")


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                                + f".{int(record.msecs):03d}Z", "level": record.levelname.lower(),
                                "logger": record.name}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        else:
            data["msg"] = record.getMessage()
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


def setup(level: int = logging.INFO, stream: Any = None) -> None:
    """Send the service's loggers (and uvicorn's) to `stream` as JSON lines. Idempotent."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    for name in ("rlsolve.service", "uvicorn", "uvicorn.error"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(level)
        log.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # our middleware writes the access line


def access(**fields: Any) -> None:
    ACCESS.info("request", extra={"fields": fields})


def event(msg: str, level: int = logging.INFO, **fields: Any) -> None:
    EVENTS.log(level, msg, extra={"fields": {"msg": msg, **fields}})
