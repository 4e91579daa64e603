"""Python binding for fairq, the lock-free multi-tenant weighted fair admission queue.

One module, no compiled parts: it loads fairq's C library with ctypes. Install it with
``pip install ./ffi/python``; it looks for the library, in this order:

1. ``$FAIRQ_LIB``, the library's path;
2. an installed prefix (``ffi/c/install.sh PREFIX``): ``libfairq.so.0`` in the ``libdir`` that
   ``pkg-config fairq`` names (so ``PKG_CONFIG_PATH`` selects a prefix), then in this Python's
   ``sys.prefix/lib``, then wherever the dynamic linker finds it (``/usr/local/lib`` and the
   other system directories, ``LD_LIBRARY_PATH``);
3. the build tree, when this file is still in the repository: the freshest ``libfairq.so`` of
   ``target/release`` and ``target/debug``.

``library_path`` says which one was loaded.

    import fairq
    with fairq.Engine(enabled=True, max_in_flight=4) as q:
        q.set_weight("acme", 3)
        r = q.enqueue("acme", user_data=42)
        if not r.queued:
            ...  # answer 429 with r.reason and r.position
        g = q.next_grant()
        if g is not None and not g.expired:
            q.complete(g.ticket)  # the limiter re-check passed

Errors raise ``FairqError`` carrying the C status code and its name (``FAIRQ_ERR_...``).
An ``Engine`` may be used from many threads at once (ctypes releases the GIL during each call);
``close()`` must come after every other call has returned.
"""

import ctypes
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from ctypes import POINTER, Structure, byref, c_bool, c_char, c_char_p, c_int32, c_size_t
from ctypes import c_uint32, c_uint64, c_void_p

__version__ = "0.1.0"

__all__ = [
    "Engine",
    "FairqError",
    "Config",
    "EnqueueResult",
    "Grant",
    "Completion",
    "tenant_key",
    "now_ns",
    "version",
    "status_name",
    "reason_name",
    "dimension_name",
    "library_path",
]

# ---------------------------------------------------------------------------- stable numbers
# The same numbers as include/fairq.h; they never change meaning.

OK = 0
QUEUED = 1
REFUSED = 2
EMPTY = 3
AT_CAPACITY = 4
EXPIRED = 5
REQUEUED = 6
NOT_FOUND = 7
NOT_RUNNING = 8
ERR_NULL = -1
ERR_INVALID_CONFIG = -2
ERR_STALE_TICKET = -3
ERR_TICKET_STATE = -4
ERR_INVALID_ARGUMENT = -5
ERR_BUFFER_TOO_SMALL = -6
ERR_TOO_MANY_WEIGHT_CLASSES = -7
ERR_PANIC = -8
ERR_INVALID_HANDLE = -9
ERR_BUSY = -10
ERR_FLEET_SYNC = -11
ERR_THREAD = -12

REASON_NONE = 0
REASON_QUEUE_FULL = 1
REASON_TENANT_QUEUE_FULL = 2
REASON_TENANT_TABLE_FULL = 3
REASON_WAIT_EXCEEDS_BUDGET = 4
REASON_DEADLINE_EXCEEDED = 5
REASON_NOT_QUEUEABLE = 6
REASON_NO_TENANT = 7
REASON_DISABLED = 8
REASON_CANCELLED = 9
REASON_SLOTS = 16

DIM_USER = 0
DIM_API_KEY = 1
DIM_TEAM = 2
DIM_MODEL = 3
DIM_GLOBAL = 4
DIM_CLIENT = 5
DIM_BACKEND = 6
DIM_STORE = 7

TENANT_DIM_USER = 0
TENANT_DIM_API_KEY = 1
TENANT_DIM_TEAM = 2

OUTCOME_ADMITTED = 0
OUTCOME_STILL_REFUSED = 1

# ---------------------------------------------------------------------------- C structs


class Config(Structure):
    """``fairq_config``. Start from ``Config.default()``."""

    _fields_ = [
        ("enabled", c_bool),
        ("tenant_dimension", c_uint32),
        ("max_tenants", c_uint32),
        ("tenant_queue_capacity", c_uint32),
        ("queue_capacity", c_uint32),
        ("max_in_flight", c_uint32),
        ("default_weight", c_uint32),
        ("max_weight_classes", c_uint32),
        ("max_wait_ms", c_uint64),
        ("tenant_idle_ms", c_uint64),
    ]

    @classmethod
    def default(cls):
        config = cls()
        _lib.fairq_config_default(byref(config))
        return config


class _Identity(Structure):
    _fields_ = [
        ("user", c_char_p),
        ("user_len", c_size_t),
        ("team", c_char_p),
        ("team_len", c_size_t),
        ("api_key", c_char_p),
        ("api_key_len", c_size_t),
        ("team_is_placeholder", c_bool),
    ]


class _WeightEntry(Structure):
    _fields_ = [("tenant_key", c_uint64), ("weight", c_uint32)]


class _Request(Structure):
    _fields_ = [
        ("tenant_key", c_uint64),
        ("user_data", c_uint64),
        ("retry_after_ns", c_uint64),
        ("timeout_ns", c_uint64),
        ("dimension", c_uint32),
        ("cost", c_uint32),
    ]


class _EnqueueResult(Structure):
    _fields_ = [
        ("ticket", c_uint64),
        ("estimated_wait_ns", c_uint64),
        ("position", c_uint32),
        ("reason", c_uint32),
    ]


class _Grant(Structure):
    _fields_ = [
        ("ticket", c_uint64),
        ("tenant_key", c_uint64),
        ("user_data", c_uint64),
        ("waited_ns", c_uint64),
        ("estimated_wait_ns", c_uint64),
        ("remaining_budget_ns", c_uint64),
        ("cost", c_uint32),
        ("position", c_uint32),
        ("reason", c_uint32),
    ]


class _Completion(Structure):
    _fields_ = [
        ("estimated_wait_ns", c_uint64),
        ("waited_ns", c_uint64),
        ("position", c_uint32),
        ("reason", c_uint32),
    ]


class _Stats(Structure):
    _fields_ = [
        ("queued", c_uint64),
        ("in_flight", c_uint64),
        ("tenants", c_uint64),
        ("enqueued", c_uint64),
        ("granted", c_uint64),
        ("completed", c_uint64),
        ("requeued", c_uint64),
        ("cancelled", c_uint64),
        ("expired", c_uint64),
        ("refused_after_wait", c_uint64),
        ("refused", c_uint64 * REASON_SLOTS),
    ]


# The C struct for each Python mirror, for tests that compare them with the header.
C_STRUCTS = {
    "fairq_config": Config,
    "fairq_identity": _Identity,
    "fairq_weight_entry": _WeightEntry,
    "fairq_request": _Request,
    "fairq_enqueue_result": _EnqueueResult,
    "fairq_grant": _Grant,
    "fairq_completion": _Completion,
    "fairq_stats": _Stats,
}

# ---------------------------------------------------------------------------- loading


# The SONAME's major version: a library of another major has another ABI.
_SONAME = "libfairq.so.0"


def _pkg_config_libdir():
    """The libdir of ``pkg-config fairq``, or None (no pkg-config, no fairq.pc)."""
    if shutil.which("pkg-config") is None:
        return None
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "fairq"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _find_library():
    """The path (or SONAME) to load, and where it was found; see the module's docstring."""
    explicit = os.environ.get("FAIRQ_LIB")
    if explicit:
        return explicit
    tried = []
    for libdir in (_pkg_config_libdir(), os.path.join(sys.prefix, "lib")):
        if libdir:
            path = os.path.join(libdir, _SONAME)
            if os.path.exists(path):
                return path
            tried.append(path)
    try:
        ctypes.CDLL(_SONAME)  # the dynamic linker's own search
        return _SONAME
    except OSError:
        tried.append(_SONAME + " (dynamic linker)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.exists(os.path.join(root, "Cargo.toml")):
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
        candidates = [os.path.join(target, p, "libfairq.so") for p in ("release", "debug")]
        found = [c for c in candidates if os.path.exists(c)]
        if found:
            return max(found, key=os.path.getmtime)  # the freshest build
        tried += candidates
    raise OSError(
        "fairq's C library not found (tried %s): install it (ffi/c/install.sh PREFIX, then "
        "PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), build it (cargo build --release), or set "
        "FAIRQ_LIB to its path" % ", ".join(tried)
    )


library_path = _find_library()
_lib = ctypes.CDLL(library_path)
_E = c_void_p  # const fairq_engine *

for _name, _res, _args in [
    ("fairq_version", c_char_p, []),
    ("fairq_now_ns", c_uint64, []),
    ("fairq_config_default", None, [POINTER(Config)]),
    ("fairq_config_check", c_int32, [POINTER(Config), c_char_p, c_size_t]),
    ("fairq_engine_new", c_int32, [POINTER(Config), POINTER(c_void_p)]),
    ("fairq_engine_free", None, [_E]),
    ("fairq_set_enabled", c_int32, [_E, c_bool]),
    ("fairq_is_enabled", c_int32, [_E, POINTER(c_bool)]),
    ("fairq_tenant_key", c_int32, [c_char_p, c_size_t, POINTER(c_uint64)]),
    ("fairq_resolve_tenant", c_int32,
     [_E, POINTER(_Identity), POINTER(c_uint64), POINTER(c_uint32)]),
    ("fairq_set_weight", c_int32, [_E, c_char_p, c_size_t, c_uint32]),
    ("fairq_set_weight_key", c_int32, [_E, c_uint64, c_uint32]),
    ("fairq_replace_weights", c_int32, [_E, POINTER(_WeightEntry), c_size_t, c_uint32]),
    ("fairq_weight_of", c_int32, [_E, c_uint64, POINTER(c_uint32)]),
    ("fairq_tenant_granted", c_int32, [_E, c_uint64, POINTER(c_uint64), POINTER(c_uint64)]),
    ("fairq_enqueue", c_int32, [_E, POINTER(_Request), POINTER(_EnqueueResult)]),
    ("fairq_enqueue_at", c_int32, [_E, POINTER(_Request), c_uint64, POINTER(_EnqueueResult)]),
    ("fairq_next_grant", c_int32, [_E, POINTER(_Grant)]),
    ("fairq_next_grant_at", c_int32, [_E, c_uint64, POINTER(_Grant)]),
    ("fairq_next_wakeup_ns", c_int32, [_E, POINTER(c_uint64)]),
    ("fairq_complete", c_int32, [_E, c_uint64, c_uint32, c_uint64, POINTER(_Completion)]),
    ("fairq_complete_at", c_int32,
     [_E, c_uint64, c_uint32, c_uint64, c_uint64, POINTER(_Completion)]),
    ("fairq_complete_with_cost", c_int32,
     [_E, c_uint64, c_uint32, c_uint64, c_uint32, POINTER(_Completion)]),
    ("fairq_complete_with_cost_at", c_int32,
     [_E, c_uint64, c_uint32, c_uint64, c_uint32, c_uint64, POINTER(_Completion)]),
    ("fairq_cancel", c_int32, [_E, c_uint64]),
    ("fairq_cancel_at", c_int32, [_E, c_uint64, c_uint64]),
    ("fairq_get_stats", c_int32, [_E, POINTER(_Stats)]),
    ("fairq_metrics_prometheus", c_int32, [_E, POINTER(c_char), c_size_t, POINTER(c_size_t)]),
    ("fairq_status_str", c_char_p, [c_int32]),
    ("fairq_reason_str", c_char_p, [c_uint32]),
    ("fairq_dimension_str", c_char_p, [c_uint32]),
]:
    _fn = getattr(_lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# ---------------------------------------------------------------------------- errors, names


def status_name(status):
    """The name of a status code, e.g. ``"FAIRQ_ERR_STALE_TICKET"``."""
    return _lib.fairq_status_str(status).decode()


def reason_name(reason):
    """The snake_case name of a refusal reason, e.g. ``"queue_full"`` (``"none"`` for 0)."""
    return _lib.fairq_reason_str(reason).decode()


def dimension_name(dimension):
    """The snake_case name of a dimension code, e.g. ``"api_key"``."""
    return _lib.fairq_dimension_str(dimension).decode()


class FairqError(Exception):
    """A call failed. ``status`` is the C status code, ``name`` its ``FAIRQ_ERR_*`` name."""

    def __init__(self, status, detail=None):
        self.status = status
        self.name = status_name(status)
        message = self.name if detail is None else "%s: %s" % (self.name, detail)
        super().__init__(message)


def _check(status, detail=None):
    if status < 0:
        raise FairqError(status, detail)
    return status


def version():
    """The library version, ``"MAJOR.MINOR.PATCH"``."""
    return _lib.fairq_version().decode()


def now_ns():
    """The monotonic clock the methods without ``now_ns`` use."""
    return _lib.fairq_now_ns()


def tenant_key(raw):
    """The 64-bit tenant key of a raw identifier (str or bytes), the same in every binding."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    key = c_uint64()
    _check(_lib.fairq_tenant_key(data, len(data), byref(key)))
    return key.value


def _key(tenant):
    """A tenant given as a raw id (str/bytes), a key (int), or None (no identifier: 0)."""
    if tenant is None:
        return 0
    if isinstance(tenant, int):
        return tenant
    return tenant_key(tenant)


# ---------------------------------------------------------------------------- results

EnqueueResult = namedtuple(
    "EnqueueResult", "queued ticket position estimated_wait_ns reason reason_code"
)
EnqueueResult.__doc__ = """What enqueue did. ``queued`` False: refused with ``reason``."""

Grant = namedtuple(
    "Grant",
    "ticket tenant_key user_data waited_ns estimated_wait_ns remaining_budget_ns cost position "
    "expired reason",
)
Grant.__doc__ = """A grant, or (``expired`` True) a queued request whose budget ran out."""

Completion = namedtuple("Completion", "status position estimated_wait_ns waited_ns reason")
Completion.__doc__ = """What complete did: ``status`` is "completed", "requeued" or "refused"."""

_COMPLETION_STATUS = {OK: "completed", REQUEUED: "requeued", REFUSED: "refused"}


def _now_args(now_ns):
    return () if now_ns is None else (now_ns,)


# ---------------------------------------------------------------------------- engine


class Engine:
    """A fair admission queue. ``Engine(enabled=True, max_in_flight=4, ...)`` takes any
    ``fairq_config`` field as a keyword; unset fields keep their defaults. Use it as a context
    manager, or call ``close()``. Every method accepts ``now_ns=`` (monotonic ns) to drive time
    explicitly; without it the library's clock is read."""

    def __init__(self, config=None, **fields):
        if config is None:
            config = Config.default()
        for name, value in fields.items():
            if name not in dict(Config._fields_):
                raise TypeError("unknown config field %r" % name)
            setattr(config, name, value)
        message = ctypes.create_string_buffer(256)
        _check(_lib.fairq_config_check(byref(config), message, len(message)),
               message.value.decode(errors="replace"))
        handle = c_void_p()
        _check(_lib.fairq_engine_new(byref(config), byref(handle)))
        self._handle = handle.value

    # -- life cycle

    def close(self):
        """Releases the engine. Idempotent. No other call may run during or after it."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.fairq_engine_free(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown may have torn down the module already
            pass

    # -- switches and weights

    def set_enabled(self, enabled):
        _check(_lib.fairq_set_enabled(self._handle, bool(enabled)))

    @property
    def enabled(self):
        out = c_bool()
        _check(_lib.fairq_is_enabled(self._handle, byref(out)))
        return out.value

    def set_weight(self, tenant, weight):
        """Sets a tenant's weight (1..=10000) by raw id or key."""
        _check(_lib.fairq_set_weight_key(self._handle, _key(tenant), weight))

    def replace_weights(self, weights, default_weight=1):
        """Replaces the whole weight table: ``{tenant (raw id or key): weight}``."""
        entries = (_WeightEntry * max(len(weights), 1))()
        for i, (tenant, weight) in enumerate(weights.items()):
            entries[i] = _WeightEntry(_key(tenant), weight)
        _check(_lib.fairq_replace_weights(self._handle, entries, len(weights), default_weight))

    def weight_of(self, tenant):
        out = c_uint32()
        _check(_lib.fairq_weight_of(self._handle, _key(tenant), byref(out)))
        return out.value

    def tenant_granted(self, tenant):
        """``(grants, cost units)`` since the tenant took its slot, or None if it holds none."""
        grants, cost = c_uint64(), c_uint64()
        status = _check(
            _lib.fairq_tenant_granted(self._handle, _key(tenant), byref(grants), byref(cost))
        )
        return None if status == NOT_FOUND else (grants.value, cost.value)

    def resolve_tenant(self, user=None, team=None, api_key=None, team_is_placeholder=False):
        """``(key, tenant dimension name)`` by the configured dimension, then user, team,
        api_key; None when the request carries no identifier."""
        def raw(value):
            if value is None:
                return None, 0
            data = value.encode() if isinstance(value, str) else bytes(value)
            return data, len(data)

        identity = _Identity(*raw(user), *raw(team), *raw(api_key), team_is_placeholder)
        key, dim = c_uint64(), c_uint32()
        status = _check(
            _lib.fairq_resolve_tenant(self._handle, byref(identity), byref(key), byref(dim))
        )
        if status == NOT_FOUND:
            return None
        return key.value, ("user", "api_key", "team")[dim.value]

    # -- the admission cycle

    def enqueue(self, tenant, dimension=DIM_USER, user_data=0, cost=1, retry_after_ns=0,
                timeout_ns=0, now_ns=None):
        """Holds a refused request in its tenant's queue, or refuses it at once."""
        request = _Request(_key(tenant), user_data, retry_after_ns, timeout_ns, dimension, cost)
        out = _EnqueueResult()
        if now_ns is None:
            status = _lib.fairq_enqueue(self._handle, byref(request), byref(out))
        else:
            status = _lib.fairq_enqueue_at(self._handle, byref(request), now_ns, byref(out))
        _check(status)
        return EnqueueResult(status == QUEUED, out.ticket, out.position, out.estimated_wait_ns,
                             reason_name(out.reason), out.reason)

    def next_grant(self, now_ns=None):
        """The next request by weighted fair order: a ``Grant`` (``expired`` True for one whose
        budget ran out: answer it with ``reason``), or None when nothing is ready or
        ``max_in_flight`` grants are out."""
        out = _Grant()
        if now_ns is None:
            status = _check(_lib.fairq_next_grant(self._handle, byref(out)))
        else:
            status = _check(_lib.fairq_next_grant_at(self._handle, now_ns, byref(out)))
        if status in (EMPTY, AT_CAPACITY):
            return None
        return Grant(out.ticket, out.tenant_key, out.user_data, out.waited_ns,
                     out.estimated_wait_ns, out.remaining_budget_ns, out.cost, out.position,
                     status == EXPIRED, reason_name(out.reason))

    def complete(self, ticket, admitted=True, retry_after_ns=0, actual_cost=None, now_ns=None):
        """Ends a grant: admitted, or (``admitted=False``) still refused, requeued after
        ``retry_after_ns`` if its budget allows."""
        outcome = OUTCOME_ADMITTED if admitted else OUTCOME_STILL_REFUSED
        out = _Completion()
        if actual_cost is None:
            fn = _lib.fairq_complete if now_ns is None else _lib.fairq_complete_at
            args = (self._handle, ticket, outcome, retry_after_ns)
        else:
            fn = _lib.fairq_complete_with_cost if now_ns is None else _lib.fairq_complete_with_cost_at
            args = (self._handle, ticket, outcome, retry_after_ns, actual_cost)
        status = _check(fn(*args, *_now_args(now_ns), byref(out)))
        return Completion(_COMPLETION_STATUS[status], out.position, out.estimated_wait_ns,
                          out.waited_ns, reason_name(out.reason))

    def cancel(self, ticket, now_ns=None):
        """Ends a queued or granted ticket."""
        if now_ns is None:
            _check(_lib.fairq_cancel(self._handle, ticket))
        else:
            _check(_lib.fairq_cancel_at(self._handle, ticket, now_ns))

    def next_wakeup_ns(self):
        """When a parked tenant may become ready (monotonic ns), or None."""
        out = c_uint64()
        status = _check(_lib.fairq_next_wakeup_ns(self._handle, byref(out)))
        return None if status == EMPTY else out.value

    # -- observability

    def stats(self):
        """A dict of gauges and counters; ``refused`` maps reason names to counts."""
        out = _Stats()
        _check(_lib.fairq_get_stats(self._handle, byref(out)))
        stats = {name: getattr(out, name) for name, _ in _Stats._fields_ if name != "refused"}
        stats["refused"] = {
            reason_name(code): out.refused[code]
            for code in range(REASON_QUEUE_FULL, REASON_CANCELLED + 1)
        }
        return stats

    def metrics(self):
        """The Prometheus text exposition."""
        needed = c_size_t(0)
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            status = _lib.fairq_metrics_prometheus(self._handle, buf, size, byref(needed))
            if status != ERR_BUFFER_TOO_SMALL:
                _check(status)
                return buf.value.decode()
            size = needed.value + 1024  # metrics can grow between calls
