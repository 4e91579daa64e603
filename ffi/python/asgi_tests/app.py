"""The test server for test_asgi.py: an upstream behind FairQueueMiddleware, in Starlette or
FastAPI, under uvicorn, on a listening socket the test hands over.

    FAIRQ_TEST='{"framework": "starlette", ...}' python app.py FD

The upstream has 4 workers (a FIFO semaphore) and takes ``base_ms`` ± 20 % per request. Paths
under /_test/ bypass the middleware: stats, the /hold gate, the engine switch.
"""

import asyncio
import json
import os
import socket
import sys

import fairq_asgi

SETTINGS = json.loads(os.environ.get("FAIRQ_TEST", "{}"))


def service_time(request_id, base):
    """``base`` × [0.8, 1.2), from a hash of the request id."""
    mask = (1 << 64) - 1
    x = ((request_id * 0x9E3779B97F4A7C15) & mask) ^ 0x5851F42D4C957F2D
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 32
    return base * (0.8 + 0.4 * (x % 10000) / 10000)


class Upstream:
    def __init__(self, base_ms):
        self.base = base_ms / 1000.0
        self.workers = asyncio.Semaphore(4)
        self.gate = asyncio.Semaphore(0)
        self.seen = set()
        self.duplicates = 0
        self.handled = 0

    def record(self, headers):
        request_id = int(headers.get("x-req-id", "0"))
        if request_id and request_id in self.seen:
            self.duplicates += 1
        self.seen.add(request_id)
        self.handled += 1
        return request_id

    async def work(self, headers):
        request_id = self.record(headers)
        async with self.workers:
            await asyncio.sleep(service_time(request_id, self.base))
        return "ok"

    async def hold(self, headers):
        self.record(headers)
        await self.gate.acquire()
        return "released"


def admission_text(scope):
    a = scope.get("fair_queue")
    return "none" if a is None else "position=%d waited_ms=%d" % (a.position, a.waited_ms)


async def two_chunks():
    yield b"first "
    await asyncio.sleep(0.2)
    yield b"last"


def build_app(up):
    if SETTINGS.get("framework") == "fastapi":
        return build_fastapi(up)
    return build_starlette(up)


def build_fastapi(up):
    from fastapi import FastAPI, Request
    from fastapi.responses import PlainTextResponse, Response, StreamingResponse

    app = FastAPI()

    @app.get("/work", response_class=PlainTextResponse)
    async def work(request: Request):
        return await up.work(request.headers)

    @app.get("/hold", response_class=PlainTextResponse)
    async def hold(request: Request):
        return await up.hold(request.headers)

    @app.get("/admission", response_class=PlainTextResponse)
    async def admission(request: Request):
        return admission_text(request.scope)

    @app.get("/stream")
    async def stream():
        return StreamingResponse(two_chunks())

    @app.post("/echo")
    async def echo(request: Request):
        return Response(await request.body())

    return app


def build_starlette(up):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def work(request):
        return PlainTextResponse(await up.work(request.headers))

    async def hold(request):
        return PlainTextResponse(await up.hold(request.headers))

    async def admission(request):
        return PlainTextResponse(admission_text(request.scope))

    async def stream(request):
        return StreamingResponse(two_chunks())

    async def echo(request):
        return Response(await request.body())

    return Starlette(routes=[Route("/work", work), Route("/hold", hold),
                             Route("/admission", admission), Route("/stream", stream),
                             Route("/echo", echo, methods=["POST"])])


def make_limiter(checks):
    """Refuses "global" (not queueable, Retry-After 2 s); refuses "retried" on arrival and at its
    first grant (40 ms), allows it at the second; allows the others."""
    def limiter(scope, tenant_key):
        checks[0] += 1
        tenant = fairq_asgi.header(scope, "x-tenant")
        if tenant == "global":
            return fairq_asgi.Refuse("global", 2.0)
        if tenant == "retried" and checks[0] <= 2:
            return fairq_asgi.Refuse("user", 0.040)
        return None
    return limiter


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    up = Upstream(SETTINGS.get("base_ms", 50))
    app = build_app(up)
    checks = [0]
    queue = None
    if SETTINGS.get("middleware", True):
        if SETTINGS.get("identity"):
            naming = {"identity": lambda scope: {
                "user": fairq_asgi.header(scope, "x-user"),
                "team": fairq_asgi.header(scope, "x-team"),
                "api_key": fairq_asgi.header(scope, "x-api-key")}}
        else:
            naming = {"tenant": lambda scope: fairq_asgi.header(scope, "x-tenant")}
        queue = fairq_asgi.FairQueue(
            **naming,
            limiter=make_limiter(checks) if SETTINGS.get("limiter") else None,
            metrics_path="/metrics",
            timeout=SETTINGS.get("timeout"),
            enabled=True, max_in_flight=4, **SETTINGS.get("config", {}))
        for tenant, weight in SETTINGS.get("weights", {}).items():
            queue.engine.set_weight(tenant, weight)
        app.add_middleware(fairq_asgi.FairQueueMiddleware, queue=queue)
    answered = set()
    twice = [0]

    async def json_response(send, value):
        body = json.dumps(value).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    async def outer(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/_test/stats":
            await json_response(send, {
                "engine": queue.engine.stats() if queue else None,
                "waiting": queue.waiting() if queue else 0,
                "rss_kib": rss_kib(), "duplicates": up.duplicates, "handled": up.handled,
                "answered_twice": twice[0], "checks": checks[0],
                "tasks": len(asyncio.all_tasks())})
            return
        if path == "/_test/release":
            for _ in range(int(scope["query_string"] or b"1")):
                up.gate.release()
            await json_response(send, {})
            return
        if path == "/_test/granted":
            await json_response(send, queue.engine.tenant_granted(scope["query_string"].decode()))
            return
        if path == "/_test/disable":
            queue.engine.set_enabled(False)
            await json_response(send, {})
            return
        request_id = fairq_asgi.header(scope, "x-req-id")

        async def counting_send(message):
            if message["type"] == "http.response.start" and request_id is not None:
                if request_id in answered:
                    twice[0] += 1
                answered.add(request_id)
            await send(message)

        await app(scope, receive, counting_send)

    import uvicorn

    sock = socket.socket(fileno=int(sys.argv[1]))
    config = uvicorn.Config(outer, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
