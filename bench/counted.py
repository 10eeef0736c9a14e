"""Run the real gitray CLI and record every HTTP request its Kubernetes client makes.

    python bench/counted.py COUNTS.json gitray-arguments...

Counts go to COUNTS.json as {"VERB resource": n} (verbs as the API server names them: list,
get, watch, create, update, patch, delete; discovery for /api, /apis and /version). The file
is rewritten every half second and at exit, so a SIGKILLed process leaves its last counts.
This only observes the client: requests still go to the real API server.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def classify(method: str, url: str) -> str:
    parts = urlsplit(url)
    path = parts.path.strip("/").split("/")
    params = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    watching = str(params.get("watch", "")).lower() in {"true", "1"}
    # /api/v1/[namespaces/NS/]RES[/NAME[/SUB]]  or  /apis/GROUP/VERSION/[namespaces/NS/]RES...
    if path and path[0] == "api":
        rest = path[2:]
    elif path and path[0] == "apis":
        rest = path[3:]
    else:
        return f"{method} {'/'.join(path) or '/'}"
    if not rest:
        return "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, named = rest[0], len(rest) >= 2
    if rest[0] == "namespaces" and len(rest) < 3:
        resource, named = "namespaces", len(rest) == 2
    verb = {"GET": "get" if named else ("watch" if watching else "list"), "POST": "create",
            "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method)
    return f"{verb} {resource}"


_dump_lock = threading.Lock()


def _dump(path: Path) -> None:
    with _dump_lock:  # the periodic thread and the exit path both write
        with _lock:
            data = json.dumps(dict(sorted(_counts.items())))
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(data)
        os.replace(tmp, path)


def install(path: Path) -> None:
    from kubernetes.client import rest

    original = rest.RESTClientObject.request

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            _counts[classify(method, url)] += 1
        return original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = request  # type: ignore[method-assign]

    def loop() -> None:
        while True:
            threading.Event().wait(0.5)
            _dump(path)

    threading.Thread(target=loop, daemon=True, name="bench-counts").start()
    atexit.register(_dump, path)


def main() -> None:
    path = Path(sys.argv[1])
    install(path)
    sys.argv = ["gitray", *sys.argv[2:]]
    from gitray.cli import main as gitray_main

    code = gitray_main()
    _dump(path)
    sys.exit(code)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
