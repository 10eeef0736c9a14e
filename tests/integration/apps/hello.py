"""A tiny Serve app for the test environment's acceptance tests (`import_path: hello:app`).

The Ray pod runner puts tests/integration/apps on the Ray heads' PYTHONPATH; the real node's
Ray image has it in /opt/gitray-apps.
"""

from ray import serve
from starlette.requests import Request
from starlette.responses import PlainTextResponse


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class Hello:
    def __init__(self, greeting: str = "hello from gitray testenv", fail_every: int = 0) -> None:
        self.greeting = greeting
        self.fail_every = fail_every
        self.count = 0

    async def __call__(self, request: Request) -> PlainTextResponse:
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
