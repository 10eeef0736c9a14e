"""Logging setup: plain text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from gitray.core.timefmt import utc_timestamp

__all__ = ["setup_logging"]

_STANDARD = set(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": utc_timestamp(datetime.fromtimestamp(record.created, UTC), digits=3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update({k: v for k, v in vars(record).items()
                     if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(level: str = "info", json_format: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("kubernetes", "urllib3", "httpx", "httpcore", "git"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # "skipped: maximum number of running instances reached" every poll during a long pass
    # is expected (one pass at a time), not a warning worth a log line.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
