"""A tiny Serve app for the test environment's acceptance tests (`import_path: hello:app`).

The Ray pod runner puts tests/integration/apps on the Ray heads' PYTHONPATH.
"""

from ray import serve
from starlette.requests import Request


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class Hello:
    def __init__(self, greeting: str = "hello from gitray testenv") -> None:
        self.greeting = greeting

    async def __call__(self, request: Request) -> str:
        return self.greeting


def build(args: dict[str, str]) -> serve.Application:
    """Application builder: `import_path: hello:build` with `args: {greeting: ...}`."""
    return Hello.bind(args.get("greeting", "hello from gitray testenv"))


app = Hello.bind()
