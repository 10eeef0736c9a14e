"""A tiny Serve app for the test environment's acceptance tests (`import_path: hello:app`).

The Ray pod runner puts tests/integration/apps on the Ray heads' PYTHONPATH; the real node's
Ray image has it in /opt/gitray-apps.

A request with ``?unhealthy=1`` makes the app unhealthy for good, on the pod that answered: it
leaves a marker file, and from then on Serve's health check of every replica there fails (a
Serve application that goes bad after convergence, for gitray's health watch).
"""

import os

from ray import serve
from starlette.requests import Request
from starlette.responses import PlainTextResponse

UNHEALTHY_MARKER = "/tmp/gitray-hello-unhealthy"


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class Hello:
    def __init__(self, greeting: str = "hello from gitray testenv", fail_every: int = 0) -> None:
        self.greeting = greeting
        self.fail_every = fail_every
        self.count = 0

    def check_health(self) -> None:
        if os.path.exists(UNHEALTHY_MARKER):
            raise RuntimeError(f"made unhealthy on purpose ({UNHEALTHY_MARKER} exists)")

    async def __call__(self, request: Request) -> PlainTextResponse:
        if request.query_params.get("unhealthy") == "1":
            with open(UNHEALTHY_MARKER, "w") as marker:
                marker.write("unhealthy\n")
            return PlainTextResponse("unhealthy from now on")
        self.count += 1
        if self.fail_every and self.count % self.fail_every == 0:
            # a bad version: every fail_every-th request of this replica is a server error
            return PlainTextResponse(f"{self.greeting}: failed request {self.count}", 500)
        return PlainTextResponse(self.greeting)


def build(args: dict[str, str]) -> serve.Application:
    """Application builder: `import_path: hello:build` with `args: {greeting: ...}` and, for a
    version that fails a share of its requests, `fail_every: N` (every N-th request: HTTP 500)."""
    return Hello.bind(args.get("greeting", "hello from gitray testenv"),
                      int(args.get("fail_every", 0)))


app = Hello.bind()
