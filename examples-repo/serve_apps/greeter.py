"""``GET /greet?name=Ada`` -> ``Hello, Ada!`` (the greeter application)."""

from ray import serve
from starlette.requests import Request


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.1})
class Greeter:
    def __init__(self, greeting: str = "Hello") -> None:
        self.greeting = greeting

    async def __call__(self, request: Request) -> str:
        name = request.query_params.get("name", "world")
        return f"{self.greeting}, {name}!"


app = Greeter.bind()
