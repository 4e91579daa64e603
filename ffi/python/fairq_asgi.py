"""ASGI middleware for fairq: fair queueing of HTTP requests per tenant, on asyncio.

Works with any ASGI server and framework (uvicorn, Starlette, FastAPI); standard library only::

    import fairq_asgi

    queue = fairq_asgi.FairQueue(
        enabled=True, max_in_flight=4,                      # any fairq_config field
        tenant=lambda scope: fairq_asgi.header(scope, "x-tenant"),
        metrics_path="/metrics",
    )
    queue.engine.set_weight("acme", 3)
    app.add_middleware(fairq_asgi.FairQueueMiddleware, queue=queue)   # Starlette, FastAPI
    # or, for any ASGI app: app = fairq_asgi.FairQueueMiddleware(app, queue=queue)

Each request is named a tenant. Without a limiter every request is queued under its tenant and
at most ``max_in_flight`` run at once, admitted by weight; with one, the requests it allows pass
untouched, and only those it refuses are queued, re-checked when granted, and requeued while it
still refuses. A waiting request costs no thread: it awaits a future that is resolved when the
engine grants it. Grants are taken on the event loop as soon as a request is queued or a permit
comes back, and by one dispatcher task per event loop that sleeps until the engine's
``next_wakeup_ns`` (a Retry-After passing). The granted request runs the app holding its
permit, which goes back when the response body ends. A client that disconnects
while its request waits (``http.disconnect``) cancels it; a request whose budget
(``min(max_wait_ms, timeout)``) runs out is answered 429 ``deadline_exceeded``.

Refusals are answered 429 with ``Retry-After``, ``x-fair-queue-position``,
``x-fair-queue-wait-ms`` and a JSON body ``{"error": {"type": "rate_limited", "message": ...,
"details": {"fair_queue": {"tenant_dimension", "reason", "position", "wait_ms"}}}}``. A request
admitted through the queue carries ``x-fair-queue-position``, ``x-fair-queue-wait-ms`` and
``x-fair-queue-estimated-wait-ms``, and the app finds an ``Admission`` in
``scope["fair_queue"]``.

While a request waits, the body its client sends is read (to notice a disconnect), up to 1 MiB
ahead of the app, and handed to the app unchanged once it is admitted.
"""

import asyncio
import ctypes
import itertools
import math
from collections import namedtuple

import fairq

__all__ = ["FairQueue", "FairQueueMiddleware", "Admission", "Refuse", "header"]

Admission = namedtuple("Admission", "position waited_ms estimated_wait_ms remaining_budget_ms")
Admission.__doc__ = """What an admitted request finds in ``scope["fair_queue"]``."""

Refuse = namedtuple("Refuse", "dimension retry_after")
Refuse.__doc__ = """A limiter's refusal: ``dimension`` (``fairq.DIM_USER`` ... or its name, e.g.
``"user"``; user, api_key, team and model are queued, the others answered 429 at once) and
``retry_after`` in seconds. A limiter returns None to allow."""

_DIMENSIONS = {"user": fairq.DIM_USER, "api_key": fairq.DIM_API_KEY, "team": fairq.DIM_TEAM,
               "model": fairq.DIM_MODEL, "global": fairq.DIM_GLOBAL, "client": fairq.DIM_CLIENT,
               "backend": fairq.DIM_BACKEND, "store": fairq.DIM_STORE}
_TENANT_DIMENSIONS = ("user", "api_key", "team")
_QUEUE_DIMENSION = {"user": fairq.DIM_USER, "api_key": fairq.DIM_API_KEY, "team": fairq.DIM_TEAM}


def header(scope, name):
    """The value of request header ``name`` (any case) as a str, or None."""
    wanted = name.lower().encode("latin-1")
    for key, value in scope.get("headers", ()):
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


# fairq_expire, for the budget timer (a private binding of our own: the module's Engine has no
# expire method yet). A fresh function object, so the module's own declarations are untouched.
_expire_fn = fairq._lib["fairq_expire"]
_expire_fn.restype = ctypes.c_int32
_expire_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(fairq._Completion)]


def _expire(engine, ticket):
    """Ends a queued ticket whose budget ran out: ``(reason, position, waited_ns)``; raises
    ``FairqError`` for a granted (``FAIRQ_ERR_TICKET_STATE``) or ended ticket."""
    out = fairq._Completion()
    fairq._check(_expire_fn(engine._handle, ticket, ctypes.byref(out)))
    return fairq.reason_name(out.reason), out.position, out.waited_ns


class FairQueue:
    """An engine and its dispatcher, shared by every request of one event loop.

    ``FairQueue(config=None, *, tenant=None, identity=None, limiter=None, metrics_path=None,
    timeout=None, **config_fields)``:

    - ``config``: a ``fairq.Config``; ``config_fields`` set its fields (``enabled=True``,
      ``max_in_flight=4``, ...). ``queue.engine`` is the engine (weights, stats, on/off).
    - ``tenant(scope)``: the tenant's raw identifier (str), or None when the request names none
      (429 ``no_tenant``); in the config's ``tenant_dimension``.
    - ``identity(scope)``: instead of ``tenant``, a dict of ``user``, ``team``, ``api_key``,
      ``team_is_placeholder``; the engine resolves the tenant (the configured dimension first,
      then user, team, API key).
    - ``limiter(scope, tenant_key)``: None to allow, or a ``Refuse``. ``tenant_key`` is None
      when the request names no tenant.
    - ``metrics_path``: serves the engine's Prometheus text on GET.
    - ``timeout``: every request's total timeout in seconds; its budget is the smaller of this
      and ``max_wait_ms``.
    """

    def __init__(self, config=None, *, tenant=None, identity=None, limiter=None,
                 metrics_path=None, timeout=None, **config_fields):
        if (tenant is None) == (identity is None):
            raise ValueError("FairQueue needs exactly one of tenant= and identity=")
        if metrics_path is not None and not str(metrics_path).startswith("/"):
            raise ValueError("metrics_path must start with '/', got %r" % (metrics_path,))
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0
                                        and math.isfinite(timeout)):
            raise ValueError("timeout must be a positive number of seconds, got %r" % (timeout,))
        if config is None:
            config = fairq.Config.default()
        for name, value in config_fields.items():
            if name not in dict(fairq.Config._fields_):
                raise TypeError("unknown config field %r" % name)
            setattr(config, name, value)
        self.engine = fairq.Engine(config)
        self.metrics_path = metrics_path
        self._tenant = tenant
        self._identity = identity
        self._limiter = limiter
        self._dimension = _TENANT_DIMENSIONS[config.tenant_dimension]
        self._budget = config.max_wait_ms / 1000.0
        if timeout is not None:
            self._budget = min(self._budget, float(timeout))
        self._timeout_ns = 0 if timeout is None else int(timeout * 1e9)
        self._waiters = {}  # request id (the engine's user_data) -> future of its event
        self._ids = itertools.count(1)
        self._loop = None
        self._wake = None
        self._armed = None  # the wake-up the dispatcher sleeps until
        self._dispatcher = None

    def waiting(self):
        """Requests waiting for their grant now."""
        return len(self._waiters)

    def close(self):
        """Stops the dispatcher and frees the engine; after the server has stopped."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        self.engine.close()

    # -- the dispatcher

    def _ensure_dispatcher(self):
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._dispatcher.done():
            self._loop = loop
            self._wake = asyncio.Event()
            self._armed = None
            self._dispatcher = loop.create_task(self._dispatch())

    async def _dispatch(self):
        """Sleeps until the engine's next wake-up (a parked tenant's Retry-After passes), then
        takes the grants it has."""
        while True:
            # Cleared before draining: a wake-up that comes while it drains is kept.
            self._wake.clear()
            self._drain(rearm=False)
            self._armed = at = self.engine.next_wakeup_ns()
            if at is None:
                await self._wake.wait()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, (at - fairq.now_ns()) / 1e9))
            except asyncio.TimeoutError:
                pass

    def _drain(self, rearm=True):
        """Takes every grant the engine has now and hands each to its request. Called on the
        event loop when a request is queued and when a permit comes back: everything here runs
        on that one thread, so this is the dispatcher's work done without a task switch. The
        dispatcher task is woken only when the engine's next wake-up moved earlier."""
        while True:
            grant = self.engine.next_grant()
            if grant is None:
                if rearm:
                    at = self.engine.next_wakeup_ns()
                    if at is not None and (self._armed is None or at < self._armed):
                        self._wake.set()
                return
            future = self._waiters.pop(grant.user_data, None)
            if grant.expired:
                if future is not None and not future.done():
                    future.set_result((grant.reason, grant.position, grant.waited_ns))
            elif future is None or future.done():
                try:  # the request went away: the permit goes back (and is taken again below)
                    self.engine.cancel(grant.ticket)
                except fairq.FairqError:
                    pass
            else:
                future.set_result(grant)

    def _cancel(self, ticket):
        try:
            self.engine.cancel(ticket)
        except fairq.FairqError:
            pass  # it ended already
        self._drain()

    # -- one request

    def _resolve(self, scope):
        """``(tenant key or None, tenant dimension name)``."""
        if self._identity is not None:
            resolved = self.engine.resolve_tenant(**self._identity(scope))
            return (None, self._dimension) if resolved is None else resolved
        raw = self._tenant(scope)
        return (fairq.tenant_key(raw) if raw else None), self._dimension

    async def handle(self, app, scope, receive, send):
        if self.metrics_path is not None and scope["path"] == self.metrics_path \
                and scope["method"] == "GET":
            body = self.engine.metrics().encode()
            await _respond(send, 200, b"text/plain; version=0.0.4; charset=utf-8", body)
            return
        key, tenant_dimension = self._resolve(scope)
        dimension, retry_after = _QUEUE_DIMENSION[tenant_dimension], 0.0
        if self._limiter is not None:
            decision = self._limiter(scope, key)
            if decision is None:
                await app(scope, receive, send)
                return
            dimension = _DIMENSIONS.get(decision.dimension, decision.dimension)
            retry_after = float(decision.retry_after)

        self._ensure_dispatcher()
        request_id = next(self._ids)
        future = self._loop.create_future()
        self._waiters[request_id] = future
        try:
            queued = self.engine.enqueue(key, dimension=dimension, user_data=request_id,
                                         retry_after_ns=int(retry_after * 1e9),
                                         timeout_ns=self._timeout_ns)
        except fairq.FairqError as error:
            del self._waiters[request_id]
            await _respond(send, 500, b"text/plain", str(error).encode())
            return
        if not queued.queued:
            del self._waiters[request_id]
            if queued.reason == "disabled" and self._limiter is None:
                await app(scope, receive, send)  # off: as if the middleware were not there
                return
            await _refuse(send, queued.reason, queued.position, 0, tenant_dimension, retry_after)
            return
        self._drain()

        ticket = queued.ticket
        listener = _DisconnectListener(receive)
        # On the engine's clock: uvloop's loop.time() is cached at each loop turn, in ms.
        deadline = fairq.now_ns() + int(self._budget * 1e9)
        grant = None
        try:
            while grant is None:
                if future.done():
                    done = (future,)  # granted by the drain above: no need to wait
                else:
                    listener.start()
                    remaining = None
                    if deadline is not None:
                        remaining = max(0.0, (deadline - fairq.now_ns()) / 1e9)
                    waits = {future} if listener.paused else {future, listener.task}
                    done, _ = await asyncio.wait(waits, timeout=remaining,
                                                 return_when=asyncio.FIRST_COMPLETED)
                if listener.task in done and not listener.paused:
                    return  # the client went away: `finally` cancels
                if done and future not in done:
                    continue  # the listener paused its read: wait on for the grant
                if not done:
                    if fairq.now_ns() < deadline:
                        continue  # the loop's timer fired a little early
                    deadline = None  # the budget ran out
                    try:
                        reason, position, waited_ns = _expire(self.engine, ticket)
                    except fairq.FairqError:
                        continue  # granted or ended meanwhile: that event is on its way
                    self._waiters.pop(request_id, None)
                    await _refuse(send, reason, position, waited_ns, tenant_dimension,
                                  retry_after)
                    return
                event = future.result()
                if not isinstance(event, fairq.Grant):  # expired by the engine
                    await _refuse(send, *event, tenant_dimension, retry_after)
                    return
                if self._limiter is not None:
                    decision = self._limiter(scope, key)
                    if decision is not None:
                        # Still refused: back into its queue, within its budget.
                        retry_after = float(decision.retry_after)
                        future = self._loop.create_future()
                        self._waiters[request_id] = future
                        done = self.engine.complete(event.ticket, admitted=False,
                                                    retry_after_ns=int(retry_after * 1e9))
                        self._drain()
                        if done.status == "requeued":
                            continue
                        self._waiters.pop(request_id, None)
                        await _refuse(send, done.reason, done.position, done.waited_ns,
                                      tenant_dimension, retry_after)
                        return
                grant = event
        finally:
            if grant is None:
                self._abandon(request_id, ticket, future)
            listener.stop()

        await self._run(app, scope, listener.replay(receive), send, grant)

    def _abandon(self, request_id, ticket, future):
        """The request stops waiting (answered, disconnected or cancelled): whatever it still
        holds goes back."""
        if self._waiters.pop(request_id, None) is not None:
            self._cancel(ticket)  # still queued
        elif future.done() and not future.cancelled() \
                and isinstance(future.result(), fairq.Grant) and not future.result().expired:
            self._cancel(future.result().ticket)  # granted, not taken: nothing if it ran

    async def _run(self, app, scope, receive, send, grant):
        """Runs the app holding the grant's permit until the response body ends."""
        admission = Admission(grant.position, grant.waited_ns // 1_000_000,
                              grant.estimated_wait_ns // 1_000_000,
                              grant.remaining_budget_ns // 1_000_000)
        extra = [(b"x-fair-queue-position", b"%d" % admission.position),
                 (b"x-fair-queue-wait-ms", b"%d" % admission.waited_ms),
                 (b"x-fair-queue-estimated-wait-ms", b"%d" % admission.estimated_wait_ms)]
        held = [True]

        def release():
            if held[0]:
                held[0] = False
                try:
                    self.engine.complete(grant.ticket)
                except fairq.FairqError:
                    pass
                self._drain()

        async def send_holding(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", ())) + extra)
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()

        try:
            await app(dict(scope, fair_queue=admission), receive, send_holding)
        finally:
            release()  # the app ended without finishing the body, or raised: admitted all the same


class _DisconnectListener:
    """Reads the request's messages while it waits: an ``http.disconnect`` ends the wait, the
    body is kept for the app. Past ``BODY_AHEAD`` bytes of body it stops reading (``paused``):
    the app reads the rest itself, and a client that leaves meanwhile is noticed by the app's
    read or when the budget ends."""

    BODY_AHEAD = 1 << 20

    def __init__(self, receive):
        self.messages = []
        self.receive = receive
        self.task = None
        self.paused = False

    def start(self):
        if self.task is None:
            self.task = asyncio.ensure_future(self._listen(self.receive))

    async def _listen(self, receive):
        kept = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            self.messages.append(message)
            kept += len(message.get("body", b""))
            if kept >= self.BODY_AHEAD and message.get("more_body", False):
                self.paused = True
                return

    def stop(self):
        if self.task is not None:
            self.task.cancel()

    def replay(self, receive):
        messages = self.messages

        async def replayed():
            if messages:
                return messages.pop(0)
            return await receive()
        return replayed


async def _respond(send, status, content_type, body, headers=()):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", b"%d" % len(body))] + list(headers)})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send, reason, position, waited_ns, tenant_dimension, retry_after):
    """429 with Retry-After (whole seconds, at least 1: the longer of the limiter's hint and the
    wait already spent; none for a request that names no tenant, which sent again is refused
    again), the position and wait headers and the JSON body."""
    wait_ms = waited_ns // 1_000_000
    retry_s = max(1, math.ceil(max(retry_after, waited_ns / 1e9)))
    body = ('{"error": {"type": "rate_limited", "message": "fair queue refused the request: %s", '
            '"details": {"fair_queue": {"tenant_dimension": "%s", "reason": "%s", '
            '"position": %d, "wait_ms": %d}}}}\n'
            % (reason, tenant_dimension, reason, position, wait_ms)).encode()
    headers = [(b"x-fair-queue-position", b"%d" % position),
               (b"x-fair-queue-wait-ms", b"%d" % wait_ms)]
    if reason != "no_tenant":
        headers.insert(0, (b"retry-after", b"%d" % retry_s))
    await _respond(send, 429, b"application/json", body, headers)


class FairQueueMiddleware:
    """The ASGI middleware: ``FairQueueMiddleware(app, queue=FairQueue(...))``, or with Starlette
    and FastAPI ``app.add_middleware(FairQueueMiddleware, queue=queue)``. Scopes other than
    ``http`` (lifespan, websocket) pass through."""

    def __init__(self, app, queue):
        self.app = app
        self.queue = queue

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.queue.handle(self.app, scope, receive, send)
