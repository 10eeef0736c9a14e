"""``GET /calc?op=add&a=2&b=3`` -> ``{"result": 5.0}`` (the calc application)."""

import operator

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

OPERATIONS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
}


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.1})
class Calculator:
    async def __call__(self, request: Request) -> JSONResponse:
        params = request.query_params
        op = OPERATIONS.get(params.get("op", "add"))
        if op is None:
            return JSONResponse({"error": f"op must be one of {sorted(OPERATIONS)}"}, 400)
        try:
            result = op(float(params.get("a", "0")), float(params.get("b", "0")))
        except (ValueError, ZeroDivisionError) as err:
            return JSONResponse({"error": str(err)}, 400)
        return JSONResponse({"result": result})


app = Calculator.bind()
