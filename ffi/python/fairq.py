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

Every control of the C API is a keyword of ``Engine``: ``tiers={"pro": 4, "free": 1}``,
``starvation_guard=StarvationGuard()``, ``wait_boost=WaitBoost()``,
``feedback=FeedbackController()`` (``True`` takes each one's defaults), ``pools=[4, 4]`` (bulkhead
pools; ``enqueue(..., downstream=0)``), ``shedding=Shedding()`` (load shedding on the pools, fed
by ``report_downstream``), ``indicators=False`` (the fairness indicators, on by default),
``indicator_top_k=20``, ``seats=True`` (``max_in_flight`` counts cost units; a request at least
as costly as the limit runs alone) and ``light_lane=False`` (the light-tenant lane, on by default:
a tenant that becomes ready below its fair share is granted next). ``status()`` and
``status_text()`` are the status dump: the busiest tenants now, for an operator. ``Fleet`` runs
fleet mode when the library was built with it (``HAS_FLEET``).

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
from ctypes import c_double, c_uint32, c_uint64, c_void_p

__version__ = "0.2.0"

__all__ = [
    "Engine",
    "Fleet",
    "FairqError",
    "Config",
    "FleetConfig",
    "StarvationGuard",
    "WaitBoost",
    "FeedbackController",
    "Shedding",
    "EnqueueResult",
    "Grant",
    "Completion",
    "Refusal",
    "TickReport",
    "Indicators",
    "Fairness",
    "PoolStats",
    "PoolShedding",
    "FleetStatus",
    "QueueStatus",
    "TenantStatus",
    "HAS_FLEET",
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
REASON_DOWNSTREAM_SHEDDING = 10
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

STATUS_BY_DEPTH = 0
STATUS_BY_OLDEST_WAIT = 1
STATUS_JSON = 0
STATUS_TEXT = 1
STATUS_NAME_LEN = 64
STATUS_TIER_LEN = 40

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


class _Indicators(Structure):
    _fields_ = [
        ("tenant_key", c_uint64),
        ("requests", c_uint64),
        ("refused", c_uint64),
        ("granted", c_uint64),
        ("granted_cost", c_uint64),
        ("waits", c_uint64),
        ("wait_p95_ns", c_uint64),
        ("starvation_current_ns", c_uint64),
        ("starvation_longest_ns", c_uint64),
        ("refusal_rate", c_double),
        ("expected_cost", c_double),
        ("fair_share_ratio", c_double),
        ("weight", c_uint32),
        ("effective_weight", c_uint32),
        ("boosted", c_uint32),
        ("ready", c_uint32),
    ]


class _TickReport(Structure):
    _fields_ = [
        ("boosts_started", c_uint32),
        ("feedback_ran", c_uint32),
        ("weights_raised", c_uint32),
        ("weights_lowered", c_uint32),
    ]


class _PoolStats(Structure):
    _fields_ = [
        ("in_flight", c_uint64),
        ("blocked_tenants", c_uint64),
        ("blocks", c_uint64),
        ("max_in_flight", c_uint32),
    ]


class _Fairness(Structure):
    _fields_ = [
        ("tenants", c_uint64),
        ("fair_share_ratio_min", c_double),
        ("fair_share_ratio_max", c_double),
        ("wait_p95_min_s", c_double),
        ("wait_p95_max_s", c_double),
        ("refusal_rate_min", c_double),
        ("refusal_rate_max", c_double),
        ("starvation_current_min_s", c_double),
        ("starvation_current_max_s", c_double),
        ("starvation_longest_min_s", c_double),
        ("starvation_longest_max_s", c_double),
    ]


class _PoolShedding(Structure):
    _fields_ = [
        ("last_error_ratio", c_double),
        ("cuts", c_uint64),
        ("reports_ok", c_uint64),
        ("reports_error", c_uint64),
        ("limit", c_uint32),
        ("shedding", c_uint32),
    ]


class _StatusTotals(Structure):
    _fields_ = [
        ("in_flight", c_uint64),
        ("seats_in_flight", c_uint64),
        ("queued", c_uint64),
        ("busy_tenants", c_uint64),
        ("max_in_flight", c_uint32),
        ("queue_capacity", c_uint32),
        ("weight_classes", c_uint32),
        ("pools", c_uint32),
        ("enabled", c_uint32),
        ("seats", c_uint32),
    ]


class _TenantStatus(Structure):
    _fields_ = [
        ("tenant_key", c_uint64),
        ("queued", c_uint64),
        ("in_flight", c_uint64),
        ("granted", c_uint64),
        ("oldest_wait_ns", c_uint64),
        ("parked_for_ns", c_uint64),
        ("weight", c_uint32),
        ("effective_weight", c_uint32),
        ("light", c_uint32),
        ("parked", c_uint32),
        ("name", c_char * STATUS_NAME_LEN),
        ("tier", c_char * STATUS_TIER_LEN),
    ]


class FleetConfig(Structure):
    """``fairq_fleet_config``. Start from ``FleetConfig.default()``; ``Fleet`` takes its fields
    as keywords (strings for ``url``, ``fleet`` and ``replica``)."""

    _fields_ = [
        ("url", c_char_p),
        ("fleet", c_char_p),
        ("replica", c_char_p),
        ("period_ms", c_uint64),
        ("epoch_ms", c_uint64),
        ("stale_ms", c_uint64),
        ("smoothing", c_double),
        ("top_k", c_uint32),
    ]

    @classmethod
    def default(cls):
        config = cls()
        _lib.fairq_fleet_config_default(byref(config))
        return config


class _FleetStatus(Structure):
    _fields_ = [
        ("last_sync_ns", c_uint64),
        ("pipelines", c_uint64),
        ("syncs", c_uint64),
        ("tenants_tracked", c_uint64),
        ("consecutive_failures", c_uint32),
        ("has_synced", c_bool),
        ("degraded", c_bool),
        ("running", c_bool),
    ]


# The C struct for each Python mirror, for tests that compare them with the header.
C_STRUCTS = {
    "fairq_indicators": _Indicators,
    "fairq_tick_report": _TickReport,
    "fairq_pool_stats": _PoolStats,
    "fairq_pool_shedding": _PoolShedding,
    "fairq_fairness": _Fairness,
    "fairq_status_totals": _StatusTotals,
    "fairq_tenant_status": _TenantStatus,
    "fairq_fleet_config": FleetConfig,
    "fairq_fleet_status": _FleetStatus,
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
_B = c_void_p  # fairq_engine_builder *
_F = c_void_p  # const fairq_fleet *

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
    ("fairq_expire", c_int32, [_E, c_uint64, POINTER(_Completion)]),
    ("fairq_expire_at", c_int32, [_E, c_uint64, c_uint64, POINTER(_Completion)]),
    ("fairq_tick", c_int32, [_E, POINTER(_TickReport)]),
    ("fairq_tick_at", c_int32, [_E, c_uint64, POINTER(_TickReport)]),
    ("fairq_tenant_indicators", c_int32, [_E, c_uint64, POINTER(_Indicators)]),
    ("fairq_tenant_indicators_at", c_int32, [_E, c_uint64, c_uint64, POINTER(_Indicators)]),
    ("fairq_engine_builder_new", c_int32,
     [POINTER(Config), POINTER(c_void_p), c_char_p, c_size_t]),
    ("fairq_engine_builder_free", None, [_B]),
    ("fairq_engine_builder_message", c_int32, [_B, c_char_p, c_size_t, POINTER(c_size_t)]),
    ("fairq_engine_builder_add_tier", c_int32, [_B, c_char_p, c_size_t, c_uint32]),
    ("fairq_engine_builder_set_starvation_guard", c_int32, [_B, c_uint32, c_uint32]),
    ("fairq_engine_builder_set_wait_boost", c_int32, [_B, c_uint64, c_uint32]),
    ("fairq_engine_builder_set_feedback", c_int32, [_B, c_uint64, c_uint32, c_uint32]),
    ("fairq_engine_builder_set_feedback_thresholds", c_int32,
     [_B, c_uint32, c_uint32, c_uint64]),
    ("fairq_engine_builder_add_pool", c_int32, [_B, c_uint32, POINTER(c_uint32)]),
    ("fairq_engine_builder_set_indicator_top_k", c_int32, [_B, c_uint32]),
    ("fairq_engine_builder_set_indicators", c_int32, [_B, c_bool]),
    ("fairq_engine_builder_set_seats", c_int32, [_B, c_bool]),
    ("fairq_engine_builder_set_light_lane", c_int32, [_B, c_bool]),
    ("fairq_engine_builder_set_shedding", c_int32, [_B, c_uint32, c_uint64, c_uint32]),
    ("fairq_report_downstream", c_int32, [_E, c_uint32, c_bool]),
    ("fairq_report_downstream_at", c_int32, [_E, c_uint32, c_bool, c_uint64]),
    ("fairq_pool_get_shedding", c_int32, [_E, c_uint32, POINTER(_PoolShedding)]),
    ("fairq_engine_builder_build", c_int32, [_B, POINTER(c_void_p)]),
    ("fairq_set_tier", c_int32, [_E, c_char_p, c_size_t, c_char_p, c_size_t]),
    ("fairq_set_tier_key", c_int32, [_E, c_uint64, c_char_p, c_size_t]),
    ("fairq_tier_weight", c_int32, [_E, c_char_p, c_size_t, POINTER(c_uint32)]),
    ("fairq_enqueue_downstream", c_int32,
     [_E, POINTER(_Request), c_uint32, POINTER(_EnqueueResult)]),
    ("fairq_enqueue_downstream_at", c_int32,
     [_E, POINTER(_Request), c_uint32, c_uint64, POINTER(_EnqueueResult)]),
    ("fairq_pool_count", c_int32, [_E, POINTER(c_uint32)]),
    ("fairq_pool_get_stats", c_int32, [_E, c_uint32, POINTER(_PoolStats)]),
    ("fairq_fairness_get", c_int32, [_E, POINTER(_Fairness)]),
    ("fairq_fairness_get_at", c_int32, [_E, c_uint64, POINTER(_Fairness)]),
    ("fairq_fairness_top", c_int32, [_E, POINTER(_Indicators), c_size_t, POINTER(c_size_t)]),
    ("fairq_fairness_top_at", c_int32,
     [_E, c_uint64, POINTER(_Indicators), c_size_t, POINTER(c_size_t)]),
    ("fairq_queue_status", c_int32,
     [_E, c_uint32, POINTER(_StatusTotals), POINTER(_TenantStatus), c_size_t,
      POINTER(c_size_t)]),
    ("fairq_queue_status_at", c_int32,
     [_E, c_uint32, c_uint64, POINTER(_StatusTotals), POINTER(_TenantStatus), c_size_t,
      POINTER(c_size_t)]),
    ("fairq_queue_status_text", c_int32,
     [_E, c_uint32, c_size_t, c_uint32, POINTER(c_char), c_size_t, POINTER(c_size_t)]),
    ("fairq_queue_status_text_at", c_int32,
     [_E, c_uint32, c_size_t, c_uint32, c_uint64, POINTER(c_char), c_size_t,
      POINTER(c_size_t)]),
]:
    _fn = getattr(_lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# Fleet mode is in the library only when it was built with cargo feature `fleet`.
HAS_FLEET = hasattr(_lib, "fairq_fleet_new")
if HAS_FLEET:
    for _name, _res, _args in [
        ("fairq_fleet_config_default", None, [POINTER(FleetConfig)]),
        ("fairq_fleet_new", c_int32,
         [_E, POINTER(FleetConfig), POINTER(c_void_p), c_char_p, c_size_t]),
        ("fairq_fleet_free", None, [_F]),
        ("fairq_fleet_sync", c_int32, [_F]),
        ("fairq_fleet_sync_at", c_int32, [_F, c_uint64]),
        ("fairq_fleet_start", c_int32, [_F]),
        ("fairq_fleet_stop", c_int32, [_F]),
        ("fairq_fleet_get_status", c_int32, [_F, POINTER(_FleetStatus)]),
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


def _is_key(tenant):
    """Whether ``tenant`` is a key (int) or None rather than a raw identifier."""
    return tenant is None or isinstance(tenant, int)


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

Refusal = namedtuple("Refusal", "reason position waited_ns reason_code")
Refusal.__doc__ = """A request ended with a refusal (``expire``): ``reason`` is its name."""

TickReport = namedtuple("TickReport",
                        "boosts_started feedback_ran weights_raised weights_lowered")
TickReport.__doc__ = """What one ``tick`` did."""

Indicators = namedtuple(
    "Indicators",
    "tenant_key requests refused granted granted_cost waits wait_p95_ns starvation_current_ns "
    "starvation_longest_ns refusal_rate expected_cost fair_share_ratio weight effective_weight "
    "boosted ready",
)
Indicators.__doc__ = """One tenant's fairness indicators, cumulative since it took its slot;
``refusal_rate`` and ``fair_share_ratio`` are None while undefined."""

Fairness = namedtuple(
    "Fairness",
    "tenants fair_share_ratio_min fair_share_ratio_max wait_p95_min_s wait_p95_max_s "
    "refusal_rate_min refusal_rate_max starvation_current_min_s starvation_current_max_s "
    "starvation_longest_min_s starvation_longest_max_s",
)
Fairness.__doc__ = """The indicators' min and max over every tenant holding a slot; None where
no tenant has the indicator yet."""

PoolStats = namedtuple("PoolStats", "in_flight blocked_tenants blocks max_in_flight")
PoolStats.__doc__ = """One bulkhead pool's gauges and counter."""

PoolShedding = namedtuple("PoolShedding",
                          "limit shedding last_error_ratio cuts reports_ok reports_error")
PoolShedding.__doc__ = """One bulkhead pool's load-shedding stage: the in-flight limit in
force, whether it is cut, the last judged window's error ratio (None before the first)."""

Shedding = namedtuple("Shedding", "error_percent window_ms min_requests",
                      defaults=(2, 5000, 20))
Shedding.__doc__ = """Load shedding on the bulkhead pools: a pool over ``error_percent``
(1..=100) errors in a window of ``window_ms`` (100..=3600000), with at least ``min_requests``
reports, has its in-flight limit cut in half; calm windows grow it back."""

FleetStatus = namedtuple(
    "FleetStatus",
    "last_sync_ns pipelines syncs tenants_tracked consecutive_failures has_synced degraded "
    "running",
)
FleetStatus.__doc__ = """Where a fleet's sync loop stands."""

QueueStatus = namedtuple(
    "QueueStatus",
    "enabled in_flight seats_in_flight max_in_flight queued queue_capacity busy_tenants "
    "weight_classes pools order tenants",
)
QueueStatus.__doc__ = """A status dump (``Engine.status``): the engine's totals now and
``tenants``, the busiest ``TenantStatus`` rows, largest first by ``order`` ("depth" or
"oldest_wait"). ``busy_tenants`` counts every tenant with requests queued or in flight (the rows
that could be listed); ``seats_in_flight`` is None with seats off; ``pools`` is the number of
bulkhead pools (``pool_stats`` and ``pool_shedding`` read each)."""

TenantStatus = namedtuple(
    "TenantStatus",
    "tenant_key name tier weight effective_weight queued in_flight granted oldest_wait_ns light "
    "parked_for_ns state",
)
TenantStatus.__doc__ = """One tenant in a status dump, a consistent view of it (the rows together
are not one instant's picture). ``name`` is the identifier it was given a weight or tier under
(``set_weight``/``set_tier`` with a str or bytes), None when the engine was only given its key;
``tier`` None when it has none; ``oldest_wait_ns`` is its queue head's wait (0 with none queued);
``parked_for_ns`` how long until a Retry-After lets its head go, None when not parked; ``state``
is "parked", "idle" (nothing queued), "light" (the light-tenant lane serves it first) or
"backlogged"."""

_STATUS_ORDERS = {"depth": STATUS_BY_DEPTH, "oldest_wait": STATUS_BY_OLDEST_WAIT}
_STATUS_ORDER_NAMES = {code: name for name, code in _STATUS_ORDERS.items()}
_STATUS_FORMATS = {"json": STATUS_JSON, "text": STATUS_TEXT}

StarvationGuard = namedtuple("StarvationGuard", "min_grants_per_minute min_share_percent",
                             defaults=(30, 3))
StarvationGuard.__doc__ = """Minimum service per weight class: the larger of
``min_grants_per_minute`` (1..=60000) or ``min_share_percent`` (0..=50) % of all grants."""

WaitBoost = namedtuple("WaitBoost", "after_ms max_boosted", defaults=(20000, 64))
WaitBoost.__doc__ = """+1 weight for a tenant ready and unserved longer than ``after_ms``
(1000..=3600000), at most ``max_boosted`` (1..=65536) at once; started by ``tick``."""

FeedbackController = namedtuple(
    "FeedbackController",
    "period_ms floor_percent ceiling_percent low_ratio_percent high_ratio_percent "
    "min_expected_cost",
    defaults=(300000, 50, 200, 90, 110, 100),
)
FeedbackController.__doc__ = """The slow weight controller run by ``tick`` once per
``period_ms`` (60000..=3600000); see include/fairq.h for every range."""


def _nan_none(value):
    return None if value != value else value  # NaN is the only value unequal to itself


def _indicators(out):
    return Indicators(out.tenant_key, out.requests, out.refused, out.granted, out.granted_cost,
                      out.waits, out.wait_p95_ns, out.starvation_current_ns,
                      out.starvation_longest_ns, _nan_none(out.refusal_rate), out.expected_cost,
                      _nan_none(out.fair_share_ratio), out.weight, out.effective_weight,
                      bool(out.boosted), bool(out.ready))


def _text(value):
    return value.encode() if isinstance(value, str) else bytes(value)


def _now_args(now_ns):
    return () if now_ns is None else (now_ns,)


def _status_code(value, codes, what):
    """The C number of a status dump's order or format, given by name or number."""
    if isinstance(value, int):
        return value  # the C side refuses one it does not know
    code = codes.get(value)
    if code is None:
        raise FairqError(ERR_INVALID_ARGUMENT, "unknown status %s %r (%s)"
                         % (what, value, ", ".join(codes)))
    return code


def _c_text(field):
    """A NUL-terminated ``char[]`` field as str, None when empty."""
    return field.decode(errors="replace") or None


def _tenant_status(row):
    queued, light = row.queued, bool(row.light)
    parked_for_ns = row.parked_for_ns if row.parked else None
    if parked_for_ns is not None:
        state = "parked"
    elif queued == 0:
        state = "idle"
    elif light:
        state = "light"
    else:
        state = "backlogged"
    return TenantStatus(row.tenant_key, _c_text(row.name), _c_text(row.tier), row.weight,
                        row.effective_weight, queued, row.in_flight, row.granted,
                        row.oldest_wait_ns, light, parked_for_ns, state)


# ---------------------------------------------------------------------------- engine


class Engine:
    """A fair admission queue. ``Engine(enabled=True, max_in_flight=4, ...)`` takes any
    ``fairq_config`` field as a keyword; unset fields keep their defaults. Use it as a context
    manager, or call ``close()``. Every method accepts ``now_ns=`` (monotonic ns) to drive time
    explicitly; without it the library's clock is read."""

    def __init__(self, config=None, *, tiers=None, starvation_guard=None, wait_boost=None,
                 feedback=None, pools=None, shedding=None, indicators=None,
                 indicator_top_k=None, seats=None, light_lane=None, **fields):
        if config is None:
            config = Config.default()
        for name, value in fields.items():
            if name not in dict(Config._fields_):
                raise TypeError("unknown config field %r" % name)
            setattr(config, name, value)
        message = ctypes.create_string_buffer(512)
        builder = c_void_p()
        _check(_lib.fairq_engine_builder_new(byref(config), byref(builder), message,
                                             len(message)),
               message.value.decode(errors="replace"))
        try:
            self._apply_controls(builder, tiers, starvation_guard, wait_boost, feedback, pools,
                                 shedding, indicators, indicator_top_k)
            if seats is not None:
                _check(_lib.fairq_engine_builder_set_seats(builder, bool(seats)))
            if light_lane is not None:
                _check(_lib.fairq_engine_builder_set_light_lane(builder, bool(light_lane)))
            handle = c_void_p()
            _check(_lib.fairq_engine_builder_build(builder, byref(handle)))
        finally:
            _lib.fairq_engine_builder_free(builder)
        self._handle = handle.value
        self.pools = len(pools or ())

    @staticmethod
    def _apply_controls(builder, tiers, guard, boost, feedback, pools, shedding, indicators,
                        top_k):
        """Each control through its builder setter; a rejected one raises with the message
        naming the field and its range."""
        def setter(status):
            if status < 0:
                buf = ctypes.create_string_buffer(512)
                _lib.fairq_engine_builder_message(builder, buf, len(buf), None)
                raise FairqError(status, buf.value.decode(errors="replace"))

        if indicators is not None:  # first: the boost and the controller need them on
            setter(_lib.fairq_engine_builder_set_indicators(builder, bool(indicators)))
        for name, weight in (tiers or {}).items():
            data = _text(name)
            setter(_lib.fairq_engine_builder_add_tier(builder, data, len(data), weight))
        if guard:
            g = StarvationGuard() if guard is True else StarvationGuard(*guard)
            setter(_lib.fairq_engine_builder_set_starvation_guard(builder, *g))
        if boost:
            b = WaitBoost() if boost is True else WaitBoost(*boost)
            setter(_lib.fairq_engine_builder_set_wait_boost(builder, *b))
        if feedback:
            f = FeedbackController() if feedback is True else FeedbackController(*feedback)
            setter(_lib.fairq_engine_builder_set_feedback(builder, f.period_ms, f.floor_percent,
                                                          f.ceiling_percent))
            setter(_lib.fairq_engine_builder_set_feedback_thresholds(
                builder, f.low_ratio_percent, f.high_ratio_percent, f.min_expected_cost))
        for max_in_flight in pools or ():
            setter(_lib.fairq_engine_builder_add_pool(builder, max_in_flight, None))
        if shedding:
            s = Shedding() if shedding is True else Shedding(*shedding)
            setter(_lib.fairq_engine_builder_set_shedding(builder, *s))
        if top_k is not None:
            setter(_lib.fairq_engine_builder_set_indicator_top_k(builder, top_k))

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
        """Sets a tenant's weight (1..=10000) by raw id or key. Given a raw id (str or bytes),
        the engine keeps it as the tenant's name in the status dump; given a key, it has none."""
        if _is_key(tenant):
            _check(_lib.fairq_set_weight_key(self._handle, _key(tenant), weight))
        else:
            raw = _text(tenant)
            _check(_lib.fairq_set_weight(self._handle, raw, len(raw), weight))

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

    def set_tier(self, tenant, tier):
        """Puts a tenant (raw id or key) in a tier the engine was built with: its weight
        becomes the tier's. An unknown tier raises ``FAIRQ_ERR_INVALID_ARGUMENT``. A raw id
        becomes the tenant's name in the status dump, as with ``set_weight``."""
        name = _text(tier)
        if _is_key(tenant):
            _check(_lib.fairq_set_tier_key(self._handle, _key(tenant), name, len(name)))
        else:
            raw = _text(tenant)
            _check(_lib.fairq_set_tier(self._handle, raw, len(raw), name, len(name)))

    def tier_weight(self, tier):
        """The weight of a tier (case-insensitive), or None when the engine has no such tier."""
        name, out = _text(tier), c_uint32()
        status = _check(_lib.fairq_tier_weight(self._handle, name, len(name), byref(out)))
        return None if status == NOT_FOUND else out.value

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
                timeout_ns=0, now_ns=None, downstream=None):
        """Holds a refused request in its tenant's queue, or refuses it at once. ``downstream``
        names its bulkhead pool (0, 1, ... in the order of ``pools``)."""
        request = _Request(_key(tenant), user_data, retry_after_ns, timeout_ns, dimension, cost)
        out = _EnqueueResult()
        h = self._handle
        if downstream is None and now_ns is None:
            status = _lib.fairq_enqueue(h, byref(request), byref(out))
        elif downstream is None:
            status = _lib.fairq_enqueue_at(h, byref(request), now_ns, byref(out))
        elif now_ns is None:
            status = _lib.fairq_enqueue_downstream(h, byref(request), downstream, byref(out))
        else:
            status = _lib.fairq_enqueue_downstream_at(h, byref(request), downstream, now_ns,
                                                      byref(out))
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

    def expire(self, ticket, now_ns=None):
        """Ends a queued ticket whose budget the caller's own timer says has run out (counted
        ``deadline_exceeded``); returns its ``Refusal``."""
        out = _Completion()
        if now_ns is None:
            _check(_lib.fairq_expire(self._handle, ticket, byref(out)))
        else:
            _check(_lib.fairq_expire_at(self._handle, ticket, now_ns, byref(out)))
        return Refusal(reason_name(out.reason), out.position, out.waited_ns, out.reason)

    def tick(self, now_ns=None):
        """Runs the slow policies (wait boosts, the feedback controller) on this thread; call
        it about once a second when either is on. Returns a ``TickReport``."""
        out = _TickReport()
        if now_ns is None:
            _check(_lib.fairq_tick(self._handle, byref(out)))
        else:
            _check(_lib.fairq_tick_at(self._handle, now_ns, byref(out)))
        return TickReport(out.boosts_started, bool(out.feedback_ran), out.weights_raised,
                          out.weights_lowered)

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
            for code in range(REASON_QUEUE_FULL, REASON_DOWNSTREAM_SHEDDING + 1)
        }
        return stats

    def indicators(self, tenant, now_ns=None):
        """A tenant's (raw id or key) ``Indicators``, or None when it holds no slot."""
        out = _Indicators()
        if now_ns is None:
            status = _check(_lib.fairq_tenant_indicators(self._handle, _key(tenant), byref(out)))
        else:
            status = _check(_lib.fairq_tenant_indicators_at(self._handle, _key(tenant), now_ns,
                                                            byref(out)))
        return None if status == NOT_FOUND else _indicators(out)

    def fairness(self, now_ns=None):
        """The indicators' min and max over every tenant (``Fairness``)."""
        out = _Fairness()
        if now_ns is None:
            _check(_lib.fairq_fairness_get(self._handle, byref(out)))
        else:
            _check(_lib.fairq_fairness_get_at(self._handle, now_ns, byref(out)))
        return Fairness(out.tenants, *(_nan_none(getattr(out, f)) for f, _ in
                                       _Fairness._fields_[1:]))

    def fairness_top(self, limit=1000, now_ns=None):
        """The ``Indicators`` of the tenants with the most requests, most first: at most
        ``limit`` and at most the engine's ``indicator_top_k``."""
        cap = max(int(limit), 0)
        out = (_Indicators * max(cap, 1))()
        n = c_size_t()
        if now_ns is None:
            _check(_lib.fairq_fairness_top(self._handle, out, cap, byref(n)))
        else:
            _check(_lib.fairq_fairness_top_at(self._handle, now_ns, out, cap, byref(n)))
        return [_indicators(out[i]) for i in range(n.value)]

    def pool_stats(self, downstream):
        """Bulkhead pool ``downstream``'s ``PoolStats``, or None when there is no such pool."""
        out = _PoolStats()
        status = _check(_lib.fairq_pool_get_stats(self._handle, downstream, byref(out)))
        if status == NOT_FOUND:
            return None
        return PoolStats(out.in_flight, out.blocked_tenants, out.blocks, out.max_in_flight)

    def report_downstream(self, downstream, ok, now_ns=None):
        """Reports whether a call to pool ``downstream`` succeeded (for HTTP: status < 500),
        for load shedding; a no-op while it is off."""
        if now_ns is None:
            _check(_lib.fairq_report_downstream(self._handle, downstream, bool(ok)))
        else:
            _check(_lib.fairq_report_downstream_at(self._handle, downstream, bool(ok), now_ns))

    def pool_shedding(self, downstream):
        """Pool ``downstream``'s ``PoolShedding``, or None when there is no such pool."""
        out = _PoolShedding()
        status = _check(_lib.fairq_pool_get_shedding(self._handle, downstream, byref(out)))
        if status == NOT_FOUND:
            return None
        return PoolShedding(out.limit, bool(out.shedding), _nan_none(out.last_error_ratio),
                            out.cuts, out.reports_ok, out.reports_error)

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

    def status(self, k=20, order="depth", now_ns=None):
        """The status dump: a ``QueueStatus`` with the engine's totals and at most ``k``
        tenants (those with requests queued or in flight), largest first by ``order``:
        "depth" (most queued) or "oldest_wait" (longest-waiting queue head). It scans the
        tenant table (O(max_tenants)): for an operator, not for every request."""
        code = _status_code(order, _STATUS_ORDERS, "order")
        cap = max(int(k), 0)
        totals, rows, count = _StatusTotals(), (_TenantStatus * max(cap, 1))(), c_size_t()
        h = self._handle
        if now_ns is None:
            _check(_lib.fairq_queue_status(h, code, byref(totals), rows, cap, byref(count)))
        else:
            _check(_lib.fairq_queue_status_at(h, code, now_ns, byref(totals), rows, cap,
                                              byref(count)))
        return QueueStatus(
            bool(totals.enabled), totals.in_flight,
            totals.seats_in_flight if totals.seats else None, totals.max_in_flight,
            totals.queued, totals.queue_capacity, totals.busy_tenants, totals.weight_classes,
            totals.pools, _STATUS_ORDER_NAMES[code],
            [_tenant_status(rows[i]) for i in range(count.value)])

    def status_text(self, k=20, order="depth", format="json", now_ns=None):
        """The status dump rendered by the library: ``format`` "json" (one object, the keys as
        16 hex digits) or "text" (a table, a line per tenant). ``k`` and ``order`` as in
        ``status``."""
        code = _status_code(order, _STATUS_ORDERS, "order")
        fmt = _status_code(format, _STATUS_FORMATS, "format")
        k = max(int(k), 0)
        needed = c_size_t(0)

        def render(buf, size):
            if now_ns is None:
                return _lib.fairq_queue_status_text(self._handle, code, k, fmt, buf, size,
                                                    byref(needed))
            return _lib.fairq_queue_status_text_at(self._handle, code, k, fmt, now_ns, buf, size,
                                                   byref(needed))

        status = render(None, 0)  # sizes it: FAIRQ_ERR_BUFFER_TOO_SMALL with needed set
        if status != ERR_BUFFER_TOO_SMALL:
            _check(status)  # an unknown order or format, a closed engine
        for _ in range(2):  # once more if the dump grew between the calls
            buf = ctypes.create_string_buffer(needed.value)
            status = render(buf, len(buf))
            if status != ERR_BUFFER_TOO_SMALL:
                break
        _check(status)
        return buf.value.decode(errors="replace")  # the text form has no NUL, JSON escapes it


# ---------------------------------------------------------------------------- fleet mode


class Fleet:
    """Fleet mode: this engine's replica of a fleet that shares served cost through Redis, so
    fairness holds across replicas. Needs a library built with cargo feature ``fleet``
    (``HAS_FLEET``). ``Fleet(engine, url="redis://...", fleet="api", replica="host-1",
    period_ms=100)`` takes any ``fairq_fleet_config`` field as a keyword. Run the loop with
    ``sync()`` on your own timer, or ``start()`` a library thread. Keeps its engine alive until
    ``close()``, which must come after every other call on the fleet."""

    def __init__(self, engine, **fields):
        if not HAS_FLEET:
            raise OSError("fairq's library at %s was built without fleet mode (cargo build "
                          "--features fleet)" % library_path)
        config = FleetConfig.default()
        for name, value in fields.items():
            if name not in dict(FleetConfig._fields_):
                raise TypeError("unknown fleet config field %r" % name)
            setattr(config, name, _text(value) if isinstance(value, str) else value)
        err = ctypes.create_string_buffer(512)
        handle = c_void_p()
        _check(_lib.fairq_fleet_new(engine._handle, byref(config), byref(handle), err,
                                    len(err)), err.value.decode(errors="replace"))
        self._handle = handle.value

    def close(self):
        """Stops the sync thread if it runs and releases the fleet. Idempotent."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.fairq_fleet_free(handle)

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

    def sync(self, now_ns=None):
        """One sync with Redis on this thread (blocks up to the socket timeout, P/2). A failed
        sync raises ``FAIRQ_ERR_FLEET_SYNC`` (the deltas are kept for the next one);
        ``FAIRQ_ERR_BUSY`` while the library thread runs."""
        if now_ns is None:
            _check(_lib.fairq_fleet_sync(self._handle))
        else:
            _check(_lib.fairq_fleet_sync_at(self._handle, now_ns))

    def start(self):
        """Starts the library's sync thread (one sync every period)."""
        _check(_lib.fairq_fleet_start(self._handle))

    def stop(self):
        """Stops the sync thread; False when none was running."""
        return _check(_lib.fairq_fleet_stop(self._handle)) == OK

    def status(self):
        """A ``FleetStatus``; never waits for a sync in progress."""
        out = _FleetStatus()
        _check(_lib.fairq_fleet_get_status(self._handle, byref(out)))
        return FleetStatus(out.last_sync_ns, out.pipelines, out.syncs, out.tenants_tracked,
                           out.consecutive_failures, out.has_synced, out.degraded, out.running)
