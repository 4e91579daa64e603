/*
 * fairq: a lock-free, multi-tenant weighted fair admission queue. C API.
 *
 * Conventions
 * - Status: every function returns an int32_t status, except the *_str functions, fairq_version,
 *   fairq_now_ns, fairq_config_default, fairq_engine_free, fairq_engine_builder_free,
 *   fairq_fleet_config_default and fairq_fleet_free. FAIRQ_OK is 0, errors (FAIRQ_ERR_*) are negative, other outcomes
 *   (FAIRQ_QUEUED, FAIRQ_EMPTY, ...) are positive.
 *   Numbers never change meaning; fairq_status_str names them.
 * - Pointers: every pointer argument of every function is checked the same way, before
 *   anything happens: NULL where one is required gives FAIRQ_ERR_NULL, a pointer misaligned for
 *   its type gives FAIRQ_ERR_INVALID_ARGUMENT (an optional pointer may be NULL, but a non-NULL
 *   one must be aligned; an array or buffer may be NULL only with length 0). The engine handle
 *   is the exception: misaligned, or not a live engine, gives FAIRQ_ERR_INVALID_HANDLE.
 *   fairq_engine_free(NULL) and fairq_config_default(NULL) are no-ops.
 * - Error precedence: (1) the engine handle (NULL: FAIRQ_ERR_NULL; misaligned or not an
 *   engine: FAIRQ_ERR_INVALID_HANDLE); (2) every other pointer, in argument order (NULL:
 *   FAIRQ_ERR_NULL; misaligned: FAIRQ_ERR_INVALID_ARGUMENT); (3) values: codes, ranges, lengths,
 *   tenant key 0 (FAIRQ_ERR_INVALID_ARGUMENT, or FAIRQ_ERR_INVALID_CONFIG for a config); then
 *   the engine's own answer (FAIRQ_ERR_STALE_TICKET, FAIRQ_REFUSED, ...). The first failed check
 *   is returned, and on any error nothing changed in the engine.
 * - Out-parameters are written only when the returned status says so (FAIRQ_OK and the
 *   positive outcomes each function documents); on an error they are left untouched.
 * - Tenant keys: fairq_tenant_key and fairq_resolve_tenant never produce 0. Key 0 names no
 *   tenant: in a fairq_request it means "no identifier" (fairq_enqueue refuses the request with
 *   FAIRQ_REASON_NO_TENANT), and every function that names a tenant by key
 *   (fairq_set_weight_key, fairq_replace_weights entries, fairq_weight_of, fairq_tenant_granted,
 *   fairq_tenant_indicators) returns FAIRQ_ERR_INVALID_ARGUMENT for it.
 * - Freed engines: a handle passed to fairq_engine_free is like a pointer after free(): using
 *   it again is undefined behaviour. As a best-effort aid, fairq_engine_free poisons the
 *   handle's tag and every call checks it, so a stale handle usually gets
 *   FAIRQ_ERR_INVALID_HANDLE while its memory has not been reused. Do not rely on it.
 * - Ownership: the caller owns every struct and buffer it passes; fairq keeps no pointer to
 *   them after the call returns. Strings returned by fairq are static: never free them.
 *   The engine is owned by the caller from fairq_engine_new until fairq_engine_free.
 * - Panics: a bug inside fairq never unwinds into C; it returns FAIRQ_ERR_PANIC.
 * - Time: functions without _at read fairq_now_ns(); the _at variants take now_ns (monotonic
 *   nanoseconds) so a caller with its own clock, or a simulator, can drive time. Any now_ns is
 *   accepted, up to UINT64_MAX: deadlines saturate at UINT64_MAX and Retry-After times at
 *   UINT64_MAX - 2^21 (a request due later than that is ready from then on) instead of
 *   wrapping, and a clock that goes backwards is held at the latest time the engine has seen
 *   (to within 1 ms). Nothing wraps, fails, panics or stays stuck in a queue.
 *
 * Thread safety
 *   A fairq_engine may be shared by any number of threads. Every function may be called
 *   concurrently from any thread on the same engine, EXCEPT fairq_engine_free, which must be
 *   the last call on that engine (no other call may run during or after it).
 *
 * Fleet mode (optional)
 *   The fairq_fleet_* declarations sit inside #if defined(FAIRQ_FLEET). Compile with
 *   -DFAIRQ_FLEET only against a library built with cargo feature fleet (cargo build
 *   --features fleet); the default library does not export them. A fleet holds its engine
 *   alive until fairq_fleet_free, even past fairq_engine_free: free both. Every fairq_fleet_*
 *   call may run from any thread, except fairq_fleet_free, which must be the last one.
 *
 * ABI policy
 *   The shared library's SONAME is libfairq.so.<MAJOR>: libfairq.so.0 for every 0.x release.
 *   Under one SONAME the ABI only grows: functions, constants and structs are added; none is
 *   renamed, removed or renumbered, no status, reason or dimension number changes meaning, and
 *   no existing struct changes its layout (new fields come in new structs and functions).
 *   A change that cannot keep this takes a new SONAME and a new FAIRQ_VERSION_MAJOR.
 *   A program needs a library at least as new as the header it was compiled with: compare
 *   fairq_version() with FAIRQ_VERSION_MAJOR/MINOR/PATCH at start-up.
 *   Controls that fairq_config has no field for (weight tiers, the starvation guard, the wait
 *   boost, the feedback controller, bulkhead pools, the indicators' top K, and those added
 *   later) are set on a fairq_engine_builder, one setter function per control: a new control
 *   is a new setter, never a new field, and a program that does not call it gets the control's
 *   default (off). Requests name their bulkhead pool through fairq_enqueue_downstream, since
 *   fairq_request keeps its layout. So a program compiled against an older header keeps
 *   working, unchanged and with the same behaviour, against a newer library of the same SONAME;
 *   CI builds the quick start and the 0.1.0 C test suite against the 0.1.0 header
 *   (ffi/c/compat/fairq-0.1.0.h) and runs them against the current library.
 */

#ifndef FAIRQ_H
#define FAIRQ_H

/* Generated by cbindgen from src/ffi/ (build.rs, cbindgen.toml). Do not edit by hand. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAIRQ_VERSION_MAJOR 0
#define FAIRQ_VERSION_MINOR 2
#define FAIRQ_VERSION_PATCH 0


// Success.
#define FAIRQ_OK 0

// `fairq_enqueue`: the request is held in its tenant's queue; the result has its ticket.
#define FAIRQ_QUEUED 1

// The request was refused; the result carries the reason (`FAIRQ_REASON_*`) and position.
#define FAIRQ_REFUSED 2

// `fairq_next_grant`: nothing is ready now. `fairq_next_wakeup_ns`: nothing is parked.
#define FAIRQ_EMPTY 3

// `fairq_next_grant`: `max_in_flight` grants are out; complete one first.
#define FAIRQ_AT_CAPACITY 4

// `fairq_next_grant`: a queued request's budget ran out; the grant struct carries its
// `user_data` and reason `FAIRQ_REASON_DEADLINE_EXCEEDED`. Answer it; it was never granted.
#define FAIRQ_EXPIRED 5

// `fairq_complete` (still refused): the request is back in its tenant's queue; its ticket stays
// valid.
#define FAIRQ_REQUEUED 6

// The thing asked about does not exist (no identifier to resolve, tenant holds no slot).
#define FAIRQ_NOT_FOUND 7

// `fairq_fleet_stop`: no sync thread was running; nothing changed (stopping is idempotent).
#define FAIRQ_NOT_RUNNING 8

// A required pointer argument was NULL.
#define FAIRQ_ERR_NULL (-1)

// A `fairq_config` field is out of range (`fairq_config_check` names it).
#define FAIRQ_ERR_INVALID_CONFIG (-2)

// The ticket already ended, or was never issued.
#define FAIRQ_ERR_STALE_TICKET (-3)

// The ticket is live but not in a state for this call (e.g. completing a queued ticket).
#define FAIRQ_ERR_TICKET_STATE (-4)

// An argument is out of range (cost, weight, dimension code, outcome code, misaligned pointer).
#define FAIRQ_ERR_INVALID_ARGUMENT (-5)

// The caller's buffer is too small; the size needed was reported.
#define FAIRQ_ERR_BUFFER_TOO_SMALL (-6)

// A new distinct weight would exceed `max_weight_classes`.
#define FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES (-7)

// A bug inside fairq panicked; the panic was caught at the boundary.
#define FAIRQ_ERR_PANIC (-8)

// The engine pointer does not point to a live `fairq_engine` (a debugging aid, not a
// guarantee: only readable memory can be checked).
#define FAIRQ_ERR_INVALID_HANDLE (-9)

// The fleet's library sync thread is running: `fairq_fleet_sync` would race it and a second
// `fairq_fleet_start` would run two loops. Stop it first.
#define FAIRQ_ERR_BUSY (-10)

// A fleet sync failed (Redis refused, timed out or answered unexpectedly). The failure is
// recorded in the fleet status and the unsent deltas are kept for the next sync.
#define FAIRQ_ERR_FLEET_SYNC (-11)

// The OS could not start the fleet's sync thread. The fleet went with it: later syncs and
// starts give this status too; free it and make a new one.
#define FAIRQ_ERR_THREAD (-12)

// No refusal (the request was queued, granted or completed).
#define FAIRQ_REASON_NONE 0

// The global queue bound is reached.
#define FAIRQ_REASON_QUEUE_FULL 1

// The tenant's queue bound is reached.
#define FAIRQ_REASON_TENANT_QUEUE_FULL 2

// No tenant slot is free.
#define FAIRQ_REASON_TENANT_TABLE_FULL 3

// The Retry-After does not fit the remaining budget.
#define FAIRQ_REASON_WAIT_EXCEEDS_BUDGET 4

// The budget ran out while queued.
#define FAIRQ_REASON_DEADLINE_EXCEEDED 5

// The refusing dimension names no tenant (global, client, backend, store).
#define FAIRQ_REASON_NOT_QUEUEABLE 6

// The request has no user, team or API key identifier.
#define FAIRQ_REASON_NO_TENANT 7

// The engine is disabled.
#define FAIRQ_REASON_DISABLED 8

// The caller cancelled the request.
#define FAIRQ_REASON_CANCELLED 9

// Its downstream's bulkhead pool is shedding load (its error rate passed the threshold) and
// cannot serve it within its budget.
#define FAIRQ_REASON_DOWNSTREAM_SHEDDING 10

// Length of `fairq_stats.refused`, indexed by reason code (room for reasons added later).
#define FAIRQ_REASON_SLOTS 16

// Per-user limit (queueable).
#define FAIRQ_DIM_USER 0

// Per-API-key limit (queueable).
#define FAIRQ_DIM_API_KEY 1

// Per-team limit (queueable).
#define FAIRQ_DIM_TEAM 2

// Per-model limit (queueable).
#define FAIRQ_DIM_MODEL 3

// Global limit: refused at once (`not_queueable`).
#define FAIRQ_DIM_GLOBAL 4

// Per-client (pre-auth) limit: refused at once.
#define FAIRQ_DIM_CLIENT 5

// Per-backend candidate filter: refused at once.
#define FAIRQ_DIM_BACKEND 6

// Store failure (fail-closed 503): refused at once.
#define FAIRQ_DIM_STORE 7

// `fairq_config.tenant_dimension`: the user id names the tenant (default).
#define FAIRQ_TENANT_DIM_USER 0

// `fairq_config.tenant_dimension`: the API key's stable identifier names the tenant.
#define FAIRQ_TENANT_DIM_API_KEY 1

// `fairq_config.tenant_dimension`: the team id names the tenant.
#define FAIRQ_TENANT_DIM_TEAM 2

// `fairq_complete`: the re-check passed; the request is admitted and its ticket ends.
#define FAIRQ_OUTCOME_ADMITTED 0

// `fairq_complete`: the limiter still refuses; requeue after `retry_after_ns`, within budget.
#define FAIRQ_OUTCOME_STILL_REFUSED 1

// `order`: the most requests queued first.
#define FAIRQ_STATUS_BY_DEPTH 0

// `order`: the longest-waiting queue head first.
#define FAIRQ_STATUS_BY_OLDEST_WAIT 1

// `format`: one JSON object.
#define FAIRQ_STATUS_JSON 0

// `format`: a text table, a line per tenant.
#define FAIRQ_STATUS_TEXT 1

// Bytes of `fairq_tenant_status::name`, its NUL included.
#define FAIRQ_STATUS_NAME_LEN 64

// Bytes of `fairq_tenant_status::tier`, its NUL included (tier names are at most 32 bytes).
#define FAIRQ_STATUS_TIER_LEN 40

// An engine. Opaque: made by `fairq_engine_new`, released by `fairq_engine_free`.
typedef struct fairq_engine fairq_engine;

// Builds engines with every control (tiers, starvation guard, wait boost, feedback controller,
// bulkhead pools, indicator top K). Opaque: made by `fairq_engine_builder_new`, released by
// `fairq_engine_builder_free`. Not for concurrent use: calls on one builder must not overlap
// (the engines it builds are, as always, shared freely).
typedef struct fairq_engine_builder fairq_engine_builder;

#if defined(FAIRQ_FLEET)
// A fleet member (feature `fleet`; declared when `FAIRQ_FLEET` is defined). Opaque: made by
// `fairq_fleet_new`, released by `fairq_fleet_free`.
typedef struct fairq_fleet fairq_fleet;
#endif

// How an engine is sized and what it does. Start from `fairq_config_default`, then change
// fields. Ranges are checked by `fairq_config_check` and `fairq_engine_new`.
//
// Besides each field's range, the engine's fixed tables must fit in 4 GiB (4294967296 bytes),
// so the largest values cannot all be used at once. The tables take
// `S * (640 + 16 * R) + max_weight_classes * (256 + 16 * S) + 64 * (queue_capacity +
// max_in_flight)` bytes, where `S = max_tenants + max_tenants / 4 + 1` (tenant slots) and
// `R = tenant_queue_capacity + tenant_queue_capacity / 2 + 1` (ring entries per tenant): about
// `max_tenants * (820 + 30 * tenant_queue_capacity + 20 * max_weight_classes)` bytes plus the
// tickets. For
// example, with the other fields at their defaults, `max_tenants` 4194304 fits only with
// `tenant_queue_capacity` 1, and `tenant_queue_capacity` 1048576 only with `max_tenants` up to
// 135. Over the cap, `fairq_config_check` names the fields whose product is too large and the
// bytes needed.
typedef struct fairq_config {
    // Off by default: a disabled engine refuses every request with `FAIRQ_REASON_DISABLED`.
    bool enabled;
    // Which identifier names the tenant: `FAIRQ_TENANT_DIM_*`. Default user.
    uint32_t tenant_dimension;
    // Tenant table capacity. A new tenant is refused `FAIRQ_REASON_TENANT_TABLE_FULL` while
    // `max_tenants` tenants are active; a tenant coming back to its own idle slot is always let
    // in, so up to `max_tenants + max_tenants / 4 + 1` (the table's slots) can be active.
    // 1..=4194304 (and the table cap above). Default 1024.
    uint32_t max_tenants;
    // Per-tenant queue bound. 1..=1048576 (and the table cap above). Default 64.
    uint32_t tenant_queue_capacity;
    // Global bound on queued requests. 1..=16777216. Default 4096.
    uint32_t queue_capacity;
    // Most grants out at once. 1..=1048576. Default 8.
    uint32_t max_in_flight;
    // Weight of a tenant with no entry. 1..=10000. Default 1.
    uint32_t default_weight;
    // Most distinct weights in use at once. 1..=64. Default 8.
    uint32_t max_weight_classes;
    // Longest a request may wait, in ms. 1..=86400000. Default 30000.
    uint64_t max_wait_ms;
    // How long an idle tenant keeps its slot, in ms. 0..=86400000. Default 1000.
    uint64_t tenant_idle_ms;
} fairq_config;

// The identifiers a request carries, for `fairq_resolve_tenant`. Each is a byte string with a
// length (not NUL-terminated); NULL or length 0 means "absent". Values must be UTF-8.
typedef struct fairq_identity {
    // User id.
    const char *user;
    // Bytes in `user`.
    size_t user_len;
    // Team id.
    const char *team;
    // Bytes in `team`.
    size_t team_len;
    // The API key's stable, non-secret identifier.
    const char *api_key;
    // Bytes in `api_key`.
    size_t api_key_len;
    // True when `team` is the placeholder a key without a team carries: not an identifier.
    bool team_is_placeholder;
} fairq_identity;

// One entry of a weight table for `fairq_replace_weights`.
typedef struct fairq_weight_entry {
    // The tenant (`fairq_tenant_key` of its raw identifier); 0 names no tenant and makes
    // `fairq_replace_weights` fail with `FAIRQ_ERR_INVALID_ARGUMENT`.
    uint64_t tenant_key;
    // Its weight, 1..=10000.
    uint32_t weight;
} fairq_weight_entry;

// A request a limiter just refused, handed to `fairq_enqueue`. Zero-initialise it, then set
// the fields: `{0}` plus a tenant key and a dimension is a valid cost-1 request.
typedef struct fairq_request {
    // The tenant (`fairq_tenant_key`, `fairq_resolve_tenant`, never 0); 0 means the request
    // carries no identifier: `fairq_enqueue` refuses it with `FAIRQ_REASON_NO_TENANT` (status
    // `FAIRQ_REFUSED`, not an error).
    uint64_t tenant_key;
    // Opaque caller data, returned with the grant (a request pointer, an id).
    uint64_t user_data;
    // The limiter's Retry-After, in ns: not ready before now + this.
    uint64_t retry_after_ns;
    // The request's remaining total timeout, in ns; 0 means none (the budget is `max_wait_ms`).
    uint64_t timeout_ns;
    // The limiter dimension that refused it: `FAIRQ_DIM_*`.
    uint32_t dimension;
    // Estimated cost in resource units, 1..=1000000; 0 means 1.
    uint32_t cost;
} fairq_request;

// What `fairq_enqueue` did.
typedef struct fairq_enqueue_result {
    // `FAIRQ_QUEUED`: the handle for `fairq_cancel` and, once granted, `fairq_complete`.
    // `FAIRQ_REFUSED`: 0.
    uint64_t ticket;
    // `FAIRQ_QUEUED`: the wait to expect, in ns: Retry-After, plus what the tenant's requests
    // that found nothing ahead waited, plus its measured time between grants for each request
    // ahead (a tenant with nothing measured is estimated from other tenants by weight; an engine
    // that measured nothing yet tells only the Retry-After).
    uint64_t estimated_wait_ns;
    // The 1-based place in the tenant's queue it has, or would have had (0: not applicable).
    uint32_t position;
    // `FAIRQ_REFUSED`: why (`FAIRQ_REASON_*`). `FAIRQ_QUEUED`: `FAIRQ_REASON_NONE`.
    uint32_t reason;
} fairq_enqueue_result;

// What `fairq_next_grant` released. On `FAIRQ_OK` a grant: re-check the limiter, then call
// `fairq_complete`. On `FAIRQ_EXPIRED` a queued request whose budget ran out: answer it with
// `reason`, `position` and `waited_ns`; its ticket has already ended.
typedef struct fairq_grant {
    // The ticket: granted, holding one in-flight permit (`FAIRQ_OK`); ended (`FAIRQ_EXPIRED`).
    uint64_t ticket;
    // The tenant it belongs to.
    uint64_t tenant_key;
    // The caller data given at enqueue.
    uint64_t user_data;
    // Time since its first enqueue, in ns.
    uint64_t waited_ns;
    // The estimate made at (re)enqueue, in ns (`FAIRQ_OK` only).
    uint64_t estimated_wait_ns;
    // Budget left for later stages, in ns (`FAIRQ_OK` only).
    uint64_t remaining_budget_ns;
    // Its cost in resource units (`FAIRQ_OK` only).
    uint32_t cost;
    // Its position at (re)enqueue.
    uint32_t position;
    // `FAIRQ_EXPIRED`: `FAIRQ_REASON_DEADLINE_EXCEEDED`. `FAIRQ_OK`: `FAIRQ_REASON_NONE`.
    uint32_t reason;
} fairq_grant;

// What `fairq_complete` did, when the caller asks (the pointer may be NULL).
typedef struct fairq_completion {
    // `FAIRQ_REQUEUED`: the wait to expect, in ns, estimated as at enqueue.
    uint64_t estimated_wait_ns;
    // `FAIRQ_REFUSED`: time it spent queued, in ns.
    uint64_t waited_ns;
    // `FAIRQ_REQUEUED`/`FAIRQ_REFUSED`: 1-based place it has, or would have had.
    uint32_t position;
    // `FAIRQ_REFUSED`: why (`FAIRQ_REASON_*`); otherwise `FAIRQ_REASON_NONE`.
    uint32_t reason;
} fairq_completion;

// The engine's gauges and counters (`fairq_get_stats`, which says what a read guarantees).
// Counters only grow; gauges stay within their bounds.
typedef struct fairq_stats {
    // Requests queued now.
    uint64_t queued;
    // Grants out now.
    uint64_t in_flight;
    // Tenants holding a slot now (with queued or in-flight requests, or a cancelled one that no
    // `fairq_next_grant` has swept yet); see `fairq_get_stats` for its bound.
    uint64_t tenants;
    // Requests accepted into a queue (each ticket once).
    uint64_t enqueued;
    // Grants made (a requeued ticket can be granted again).
    uint64_t granted;
    // Tickets ended admitted.
    uint64_t completed;
    // Grants put back into their queue (still refused).
    uint64_t requeued;
    // Tickets ended by `fairq_cancel`.
    uint64_t cancelled;
    // Tickets ended by their deadline while queued (returned as `FAIRQ_EXPIRED`, or ended by
    // `fairq_expire`).
    uint64_t expired;
    // Tickets ended because a requeue did not fit.
    uint64_t refused_after_wait;
    // All refusals, on arrival and after waiting, indexed by reason code (`FAIRQ_REASON_*`);
    // index 0 and unused codes stay 0. Conservation, once no call is running:
    // `enqueued == queued + in_flight + completed + cancelled + expired + refused_after_wait`.
    uint64_t refused[FAIRQ_REASON_SLOTS];
} fairq_stats;

#if defined(FAIRQ_FLEET)
// How a replica takes part in a fleet (feature `fleet`; declared when `FAIRQ_FLEET` is
// defined). Start from `fairq_fleet_config_default`, then change fields. Strings are
// NUL-terminated UTF-8, read only during `fairq_fleet_new`.
typedef struct fairq_fleet_config {
    // Redis URL. Default `"redis://127.0.0.1:6379/"`. A Redis Cluster:
    // `"redis+cluster://host:port,host:port/"`, or several URLs separated by commas (the seed
    // nodes).
    const char *url;
    // Fleet name, the same on every replica (it forms the keys' hash tag). Not empty. Default
    // `"default"`.
    const char *fleet;
    // This replica's name, unique in the fleet (heartbeat, batch numbers, rates). Not empty.
    // Default `"replica"`.
    const char *replica;
    // Sync period P in ms, 50..=500. Default 100. Socket timeouts are P/2. Replicas of one
    // fleet may use different periods.
    uint64_t period_ms;
    // Epoch length in ms, at least 1000; keys expire after two epochs. Default 300000.
    uint64_t epoch_ms;
    // Data older than this (ms, at least `period_ms`) degrades the replica to local fairness.
    // Default 1000.
    uint64_t stale_ms;
    // EWMA weight of the newest local and fleet rates per period, in (0, 1]. Default 0.7.
    double smoothing;
    // Most tenants whose deltas, and most whose rates, one sync sends (K), 1..=4096. Default
    // 256.
    uint32_t top_k;
} fairq_fleet_config;
#endif

#if defined(FAIRQ_FLEET)
// Where a fleet's sync loop stands (feature `fleet`; declared when `FAIRQ_FLEET` is defined).
typedef struct fairq_fleet_status {
    // `now_ns` of the last successful sync; meaningful only when `has_synced`.
    uint64_t last_sync_ns;
    // Sync requests sent to Redis (one `EVALSHA` per sync; two in a sync that had to reload
    // the script after a Redis restart or failover).
    uint64_t pipelines;
    // Syncs attempted.
    uint64_t syncs;
    // Tenants with local fleet state.
    uint64_t tenants_tracked;
    // Failed syncs since the last success.
    uint32_t consecutive_failures;
    // A sync has succeeded at least once.
    bool has_synced;
    // Factors are relaxing back to full weight (3 failures in a row, or stale data).
    bool degraded;
    // The library sync thread is running (`fairq_fleet_start`).
    bool running;
} fairq_fleet_status;
#endif

// One tenant's fairness indicators (`fairq_tenant_indicators`; in C a typedef and a function
// cannot share a name), cumulative since the tenant took its slot (see `docs/operating.md`,
// "Fairness indicators", for the exact definitions). A ratio that is not defined
// yet is NaN.
typedef struct fairq_indicators {
    // The tenant key.
    uint64_t tenant_key;
    // `enqueue` calls that reached the tenant's slot.
    uint64_t requests;
    // Refused on arrival or after waiting (cancellations excluded).
    uint64_t refused;
    // Grants made.
    uint64_t granted;
    // Cost units granted.
    uint64_t granted_cost;
    // Requests that left the queue (granted or expired): the wait samples.
    uint64_t waits;
    // 0.95 quantile of the waits, in ns (0 when `waits` is 0).
    uint64_t wait_p95_ns;
    // Age of the open starvation window (ready, no grant), in ns; 0 when not ready.
    uint64_t starvation_current_ns;
    // Longest starvation window so far, the open one included, in ns.
    uint64_t starvation_longest_ns;
    // `refused / requests`; NaN before any request.
    double refusal_rate;
    // Cost units expected by weight while ready.
    double expected_cost;
    // `granted_cost / expected_cost`; NaN until one unit is expected.
    double fair_share_ratio;
    // Configured weight (tier, `fairq_set_weight`, or the default).
    uint32_t weight;
    // Weight the scheduler uses now (the feedback controller may have nudged it).
    uint32_t effective_weight;
    // 1 while the tenant holds a +1 wait boost.
    uint32_t boosted;
    // 1 while the tenant is ready (its head could be granted now).
    uint32_t ready;
} fairq_indicators;

// What one `fairq_tick` did.
typedef struct fairq_tick_report {
    // Wait boosts started.
    uint32_t boosts_started;
    // 1 when the feedback controller's period had passed and it ran.
    uint32_t feedback_ran;
    // Effective weights raised by 1.
    uint32_t weights_raised;
    // Effective weights lowered by 1.
    uint32_t weights_lowered;
} fairq_tick_report;

// The engine's totals in a status dump (`fairq_queue_status`).
typedef struct fairq_status_totals {
    // Grants out now.
    uint64_t in_flight;
    // With seats on, the permits (cost units) the grants out hold; 0 with seats off.
    uint64_t seats_in_flight;
    // Requests queued now.
    uint64_t queued;
    // Tenants with requests queued or in flight now (the rows that could be listed).
    uint64_t busy_tenants;
    // The configured bounds.
    uint32_t max_in_flight;
    // The configured bound on requests queued.
    uint32_t queue_capacity;
    // Weight classes in use.
    uint32_t weight_classes;
    // Bulkhead pools (their figures are in `fairq_queue_status_text`'s dump).
    uint32_t pools;
    // 1 while new requests are queued (`fairq_set_enabled`).
    uint32_t enabled;
    // 1 with seats on.
    uint32_t seats;
} fairq_status_totals;

// One tenant in a status dump (`fairq_queue_status`). Each row is a consistent view of one
// tenant; the rows together are not one instant's picture.
typedef struct fairq_tenant_status {
    // The tenant key.
    uint64_t tenant_key;
    // Requests waiting.
    uint64_t queued;
    // Grants out.
    uint64_t in_flight;
    // Grants since the tenant took its slot.
    uint64_t granted;
    // How long the request at the head of its queue has waited, in ns (0 with none queued).
    uint64_t oldest_wait_ns;
    // With `parked` 1: how long until its head may be granted (its Retry-After), in ns.
    uint64_t parked_for_ns;
    // Configured weight.
    uint32_t weight;
    // The weight it is scheduled at now (feedback controller, fleet mode).
    uint32_t effective_weight;
    // 1 with at most one request waiting and no more than its share lately (the light-tenant
    // lane serves it first); 0 when it is backlogged.
    uint32_t light;
    // 1 when its head waits out a Retry-After.
    uint32_t parked;
    // The identifier it was given a weight or tier under (`fairq_set_weight`, `fairq_set_tier`),
    // NUL-terminated, cut to whole UTF-8 characters; empty when the engine was not told.
    char name[FAIRQ_STATUS_NAME_LEN];
    // The configured tier whose weight it has, NUL-terminated; empty when none.
    char tier[FAIRQ_STATUS_TIER_LEN];
} fairq_tenant_status;

// One bulkhead pool's gauges and counter (`fairq_pool_get_stats`).
typedef struct fairq_pool_stats {
    // Grants of this pool out now.
    uint64_t in_flight;
    // Tenants whose head request waits for a permit of this pool now.
    uint64_t blocked_tenants;
    // Times a tenant blocked on this pool (counter).
    uint64_t blocks;
    // The pool's configured bound.
    uint32_t max_in_flight;
} fairq_pool_stats;

// One bulkhead pool's load-shedding stage (`fairq_pool_get_shedding`).
typedef struct fairq_pool_shedding {
    // Error ratio of the pool's last judged window; NaN before the first.
    double last_error_ratio;
    // Times the limit was cut.
    uint64_t cuts;
    // Calls reported ok (`fairq_report_downstream`).
    uint64_t reports_ok;
    // Calls reported failed.
    uint64_t reports_error;
    // The in-flight limit in force: the pool's bound, unless shedding cut it.
    uint32_t limit;
    // 1 while the pool sheds (its limit is under its bound).
    uint32_t shedding;
} fairq_pool_shedding;

// Fairness indicators over every tenant holding a slot (`fairq_fairness_get`): the smallest
// and largest value of each. A min/max that no tenant has yet (no tenant expected a cost unit,
// waited, or sent a request) is NaN. The usual alerts read straight off it:
// `fair_share_ratio_min < 0.7`, `starvation_current_max_s > 30`, `refusal_rate_max -
// refusal_rate_min > 0.15`.
typedef struct fairq_fairness {
    // Tenants holding a slot (active, or idle and not reused yet).
    uint64_t tenants;
    // Over tenants with at least one expected cost unit.
    double fair_share_ratio_min;
    // Over tenants with at least one expected cost unit.
    double fair_share_ratio_max;
    // Wait p95 in seconds, over tenants with at least one wait.
    double wait_p95_min_s;
    // Wait p95 in seconds, over tenants with at least one wait.
    double wait_p95_max_s;
    // Over tenants with at least one request.
    double refusal_rate_min;
    // Over tenants with at least one request.
    double refusal_rate_max;
    // Open starvation window in seconds (0 when not ready).
    double starvation_current_min_s;
    // Open starvation window in seconds (0 when not ready).
    double starvation_current_max_s;
    // Longest starvation window so far, in seconds.
    double starvation_longest_min_s;
    // Longest starvation window so far, in seconds.
    double starvation_longest_max_s;
} fairq_fairness;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The library version, `"MAJOR.MINOR.PATCH"` (matches `FAIRQ_VERSION_*` of the header it was
// built with). Static: never free it.
const char *fairq_version(void);

// The monotonic clock the functions without `_at` read, in ns since the first call in this
// process. Pass it (or your own monotonic clock, consistently) to the `_at` functions.
uint64_t fairq_now_ns(void);

// Fills `*config` with the defaults (disabled; 1024 tenants; 64 per tenant; 4096 queued; 8 in
// flight; weight 1; 30 s budget). NULL, or a pointer misaligned for `fairq_config`, is a no-op:
// nothing is written (this function has no status to report it).
//
// # Safety
// A non-NULL `config` must be valid for a write of a `fairq_config`.
void fairq_config_default(struct fairq_config *config);

// Checks `*config`. `FAIRQ_OK`, or `FAIRQ_ERR_INVALID_CONFIG` with a message naming the field
// and its range copied into `buf` (truncated, NUL-terminated; `buf` may be NULL or `len` 0:
// no message). The message of the table cap names the fields whose product is too large and
// the bytes needed. `FAIRQ_ERR_NULL` for a NULL `config`, `FAIRQ_ERR_INVALID_ARGUMENT` for a
// misaligned one.
//
// # Safety
// `config` must point to an initialised `fairq_config`; a non-NULL `buf` must be valid for
// writes of `len` bytes.
int32_t fairq_config_check(const struct fairq_config *config, char *buf, size_t len);

// Builds an engine from `*config` and writes it to `*engine_out`. All memory is allocated
// here. Pointers first, in order (`config`, then `engine_out`: NULL → `FAIRQ_ERR_NULL`,
// misaligned → `FAIRQ_ERR_INVALID_ARGUMENT`), then `FAIRQ_ERR_INVALID_CONFIG` when a field is
// out of range or the tables would pass the 4 GiB cap (`fairq_config_check` says which).
// Release it with `fairq_engine_free`.
//
// # Safety
// `config` must point to an initialised `fairq_config`; `engine_out` must be valid for a
// write of a pointer.
int32_t fairq_engine_new(const struct fairq_config *config, struct fairq_engine **engine_out);

// Releases an engine and everything it holds. NULL is a no-op, and so is a pointer that is
// misaligned or not a live engine (see `FAIRQ_ERR_INVALID_HANDLE`). Must be the last call on
// this engine: no other thread may be using it, and outstanding tickets become meaningless. A
// fleet made from it (`fairq_fleet_new`) keeps the engine itself alive, and may go on running,
// until `fairq_fleet_free`: free the fleet too.
//
// A freed handle is like a pointer after `free()`: using it (freeing it again included) is
// undefined behaviour. As a best-effort aid only, this function poisons the handle's tag before
// releasing its memory, and every call checks the tag, so a stale handle usually gets
// `FAIRQ_ERR_INVALID_HANDLE` (or, for `fairq_engine_free`, is ignored) as long as its memory
// has not been reused. Do not rely on it.
//
// # Safety
// A non-NULL `engine` must come from `fairq_engine_new` and not have been freed.
void fairq_engine_free(struct fairq_engine *engine);

// Turns the engine on or off at run time. Off refuses new requests with
// `FAIRQ_REASON_DISABLED`; what is already queued still drains through `fairq_next_grant`.
//
// # Safety
// `engine` must be NULL or a live engine.
int32_t fairq_set_enabled(const struct fairq_engine *engine, bool enabled);

// Writes whether new requests are queued to `*enabled`.
//
// # Safety
// `engine` must be NULL or a live engine; `enabled` must be NULL or writable.
int32_t fairq_is_enabled(const struct fairq_engine *engine, bool *enabled);

// Hashes a raw identifier (user id, team id, API key id; `len` bytes, not NUL-terminated) to
// the 64-bit tenant key used by requests and weights. The function is specified, so the same
// bytes give the same key in every process, build, CPU and binding: XXH3-64 with seed 0 over
// the `len` bytes, 0 mapped to 1 (so a key is never 0). Test vectors: `"acme"` ->
// `0x44ad98655d8858e1`; `"0123456789abcdef"` repeated 64 times (1 KiB) ->
// `0x540ffccbf24ea528`; `"naïve-租户"` (UTF-8, 13 bytes) -> `0xd812649601f883b6`; the function
// over no bytes is `0x2d06800538d394c2`, but an empty identifier is refused here.
// `FAIRQ_ERR_NULL` for a NULL `raw` with `len` > 0 or a NULL `key_out`;
// `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned `key_out` or an empty identifier.
//
// # Safety
// `raw` must be valid for reads of `len` bytes; `key_out` must be writable.
int32_t fairq_tenant_key(const char *raw, size_t len, uint64_t *key_out);

// Resolves the tenant of a request from its identifiers: the engine's configured
// `tenant_dimension` first, then user, team, API key (empty values and a placeholder team do
// not count). `FAIRQ_OK` writes the key and, if `dimension_out` is not NULL, the
// `FAIRQ_TENANT_DIM_*` used; the key is never 0. `FAIRQ_NOT_FOUND` when the request has no
// identifier (enqueue it with `tenant_key` 0 to refuse it `no_tenant`). A NULL string in the
// identity is absent, whatever its length. `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned
// `identity`, `key_out` or `dimension_out`, and (after the pointers) for a non-UTF-8 string.
//
// # Safety
// `engine` must be NULL or a live engine; `identity` must point to a `fairq_identity` whose
// non-NULL strings are readable for their lengths; the out-pointers must be writable.
int32_t fairq_resolve_tenant(const struct fairq_engine *engine,
                             const struct fairq_identity *identity,
                             uint64_t *key_out,
                             uint32_t *dimension_out);

// Sets the weight (1..=10000) of the tenant whose raw identifier is the `len` bytes at `raw`,
// at run time. A live tenant takes it at its next turn. `FAIRQ_ERR_NULL` for a NULL `raw` with
// `len` > 0; `FAIRQ_ERR_INVALID_ARGUMENT` for an empty identifier or a weight out of range;
// `FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES` when it would exceed `max_weight_classes`.
//
// # Safety
// `engine` must be NULL or a live engine; `raw` must be valid for reads of `len` bytes.
int32_t fairq_set_weight(const struct fairq_engine *engine,
                         const char *raw,
                         size_t len,
                         uint32_t weight);

// `fairq_set_weight` by tenant key (from `fairq_tenant_key`). Key 0 names no tenant:
// `FAIRQ_ERR_INVALID_ARGUMENT`.
//
// # Safety
// `engine` must be NULL or a live engine.
int32_t fairq_set_weight_key(const struct fairq_engine *engine,
                             uint64_t tenant_key,
                             uint32_t weight);

// Replaces the whole weight table with `count` entries and a new default weight, at run time,
// without stopping traffic. Tenants not listed get `default_weight`. All or nothing: on an
// error the old table stays. `entries` may be NULL when `count` is 0 (`FAIRQ_ERR_NULL`
// otherwise); a non-NULL `entries` must be aligned (`FAIRQ_ERR_INVALID_ARGUMENT`).
// `FAIRQ_ERR_INVALID_ARGUMENT` for an entry with key 0 or a weight out of 1..=10000.
//
// # Safety
// `engine` must be NULL or a live engine; `entries` must be valid for reads of `count`
// entries.
int32_t fairq_replace_weights(const struct fairq_engine *engine,
                              const struct fairq_weight_entry *entries,
                              size_t count,
                              uint32_t default_weight);

// Writes the weight the tenant gets now (its live slot's, else the table's) to `*weight_out`.
// `FAIRQ_ERR_INVALID_ARGUMENT` for key 0 (it names no tenant).
//
// # Safety
// `engine` must be NULL or a live engine; `weight_out` must be writable.
int32_t fairq_weight_of(const struct fairq_engine *engine,
                        uint64_t tenant_key,
                        uint32_t *weight_out);

// Writes the grants and cost units granted to a tenant since it took its slot. `FAIRQ_NOT_FOUND`
// when it holds no slot (idle long enough to be evicted, or never seen).
// `FAIRQ_ERR_INVALID_ARGUMENT` for key 0 (it names no tenant).
//
// # Safety
// `engine` must be NULL or a live engine; both out-pointers must be writable.
int32_t fairq_tenant_granted(const struct fairq_engine *engine,
                             uint64_t tenant_key,
                             uint64_t *grants_out,
                             uint64_t *cost_out);

// `fairq_enqueue_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_enqueue_at`.
int32_t fairq_enqueue(const struct fairq_engine *engine,
                      const struct fairq_request *request,
                      struct fairq_enqueue_result *result);

// Holds a refused request in its tenant's queue (`FAIRQ_QUEUED`: `result` has the ticket,
// position and estimated wait), or refuses it at once (`FAIRQ_REFUSED`: `result` has the
// reason and the position it would have had; a request with `tenant_key` 0 is refused
// `FAIRQ_REASON_NO_TENANT`). `now_ns` is monotonic ns. `FAIRQ_ERR_NULL` for a NULL `request`
// or `result`, `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned one and (after the pointers) for
// a dimension code or cost out of range.
//
// # Safety
// `engine` must be NULL or a live engine; `request` must point to an initialised
// `fairq_request`; `result` must be writable.
int32_t fairq_enqueue_at(const struct fairq_engine *engine,
                         const struct fairq_request *request,
                         uint64_t now_ns,
                         struct fairq_enqueue_result *result);

// `fairq_next_grant_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_next_grant_at`.
int32_t fairq_next_grant(const struct fairq_engine *engine, struct fairq_grant *grant);

// Releases the next request by weighted fair order among tenants whose head is ready.
// `FAIRQ_OK`: `*grant` is a grant holding an in-flight permit; re-check the limiter, then
// `fairq_complete` (or `fairq_cancel`). `FAIRQ_EXPIRED`: `*grant` is a queued request whose
// budget ran out (reason `FAIRQ_REASON_DEADLINE_EXCEEDED`, with its `user_data`); answer it,
// its ticket has ended. `FAIRQ_EMPTY`: nothing ready for this caller (nothing queued is ready,
// or the tenant whose turn it is, the only one ready or the one taking most of the grants, is
// being served by a caller on another thread, which goes on calling). `FAIRQ_AT_CAPACITY`:
// `max_in_flight` grants are out. Call it until `FAIRQ_EMPTY` or `FAIRQ_AT_CAPACITY` after
// every enqueue and complete, and when `fairq_next_wakeup_ns` passes.
//
// # Safety
// `engine` must be NULL or a live engine; `grant` must be writable.
int32_t fairq_next_grant_at(const struct fairq_engine *engine,
                            uint64_t now_ns,
                            struct fairq_grant *grant);

// When a parked tenant may next become ready (monotonic ns): set a timer and call
// `fairq_next_grant` then. `FAIRQ_EMPTY` (nothing written) when nothing is parked.
//
// # Safety
// `engine` must be NULL or a live engine; `wakeup_out` must be writable.
int32_t fairq_next_wakeup_ns(const struct fairq_engine *engine, uint64_t *wakeup_out);

// `fairq_complete_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_complete_at`.
int32_t fairq_complete(const struct fairq_engine *engine,
                       uint64_t ticket,
                       uint32_t outcome,
                       uint64_t retry_after_ns,
                       struct fairq_completion *completion);

// Ends a grant after the limiter re-check and gives its in-flight permit back.
// `FAIRQ_OUTCOME_ADMITTED`: the ticket ends (`FAIRQ_OK`). `FAIRQ_OUTCOME_STILL_REFUSED`: the
// request goes back into its tenant's queue, ready after `retry_after_ns`, if that fits its
// budget (`FAIRQ_REQUEUED`, ticket stays valid), else the ticket ends (`FAIRQ_REFUSED`, reason
// `wait_exceeds_budget` or a full queue). `completion` may be NULL; when not, it must be
// aligned (`FAIRQ_ERR_INVALID_ARGUMENT`) and it gets the details.
// `FAIRQ_ERR_INVALID_ARGUMENT` for an outcome code out of range (checked before the ticket).
// `FAIRQ_ERR_STALE_TICKET` / `FAIRQ_ERR_TICKET_STATE` for a ticket that is not granted now
// (ended, forged, queued, completed twice).
//
// A `fairq_cancel` of the same ticket racing a still-refused completion ends the request
// exactly once: if the cancel ends the ticket first, this returns `FAIRQ_ERR_STALE_TICKET`; if
// this call owns the ticket first, the cancel waits for the requeue, then cancels the
// requeued ticket, and this returns `FAIRQ_REQUEUED`. In the rare case that the push back
// into the tenant's queue fails after the ticket was published and the cancel ended it
// meanwhile, this also returns `FAIRQ_REQUEUED` (the cancel returned `FAIRQ_OK`; the request
// ended once, cancelled). So after `FAIRQ_REQUEUED` the ticket is queued, or was ended by the
// cancel that raced it.
//
// # Safety
// `engine` must be NULL or a live engine; `completion` must be NULL or writable.
int32_t fairq_complete_at(const struct fairq_engine *engine,
                          uint64_t ticket,
                          uint32_t outcome,
                          uint64_t retry_after_ns,
                          uint64_t now_ns,
                          struct fairq_completion *completion);

// `fairq_complete_with_cost_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_complete_with_cost_at`.
int32_t fairq_complete_with_cost(const struct fairq_engine *engine,
                                 uint64_t ticket,
                                 uint32_t outcome,
                                 uint64_t retry_after_ns,
                                 uint32_t actual_cost,
                                 struct fairq_completion *completion);

// `fairq_complete_at` that also corrects the tenant's charge to the request's actual cost
// (0..=1000000 resource units), so fairness counts what was really used.
//
// # Safety
// `engine` must be NULL or a live engine; `completion` must be NULL or writable.
int32_t fairq_complete_with_cost_at(const struct fairq_engine *engine,
                                    uint64_t ticket,
                                    uint32_t outcome,
                                    uint64_t retry_after_ns,
                                    uint32_t actual_cost,
                                    uint64_t now_ns,
                                    struct fairq_completion *completion);

// `fairq_cancel_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_cancel_at`.
int32_t fairq_cancel(const struct fairq_engine *engine, uint64_t ticket);

// Ends a queued or granted ticket (the client went away); a granted ticket gives its permit
// back. Counted as `cancelled`: for a budget timer use `fairq_expire`, counted as
// `deadline_exceeded`. `FAIRQ_ERR_STALE_TICKET` when it already ended.
//
// Racing a still-refused `fairq_complete` of the same ticket, exactly one of the two ends the
// request: a cancel that reaches the ticket while the completion requeues it waits for the
// requeue, then cancels the requeued ticket (`FAIRQ_OK`; the completion returns
// `FAIRQ_REQUEUED`); a cancel that comes after the completion ended the ticket gets
// `FAIRQ_ERR_STALE_TICKET`.
//
// # Safety
// `engine` must be NULL or a live engine.
int32_t fairq_cancel_at(const struct fairq_engine *engine, uint64_t ticket, uint64_t now_ns);

// `fairq_expire_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_expire_at`.
int32_t fairq_expire(const struct fairq_engine *engine,
                     uint64_t ticket,
                     struct fairq_completion *refusal);

// Ends a queued ticket whose budget the caller's own timer says has run out, counted as
// `deadline_exceeded` (use it instead of `fairq_cancel` for budget timers: while
// `max_in_flight` grants are out the engine cannot reach expired heads itself). When `refusal`
// is not NULL it gets the reason, position and wait. `FAIRQ_ERR_TICKET_STATE` for a granted
// ticket, `FAIRQ_ERR_STALE_TICKET` when it already ended. A non-NULL `refusal` must be aligned
// (`FAIRQ_ERR_INVALID_ARGUMENT`, nothing ended).
//
// # Safety
// `engine` must be NULL or a live engine; `refusal` must be NULL or writable.
int32_t fairq_expire_at(const struct fairq_engine *engine,
                        uint64_t ticket,
                        uint64_t now_ns,
                        struct fairq_completion *refusal);

// Fills `*stats` with the gauges and counters. Lock-free, O(`max_tenants`): for metrics, not
// per request. What it guarantees while other calls run:
// - each field is read atomically, but the struct is not one atomic snapshot: fields are read
//   one after another while other threads go on;
// - the gauges `queued` and `in_flight` never read above their bounds (`queue_capacity`,
//   `max_in_flight`);
// - `tenants` counts the tenants holding a slot: at most the table's `max_tenants +
//   max_tenants / 4 + 1` slots (a tenant coming back to its own idle slot is let in even when
//   `max_tenants` others are active), and while calls run it may briefly count a slot that is
//   changing hands twice;
// - counters never decrease from one call to the next (on one thread);
// - once no call is running on the engine, `enqueued == completed + cancelled + expired +
//   refused_after_wait + queued + in_flight`, and `tenants` is exact.
//
// # Safety
// `engine` must be NULL or a live engine; `stats` must be writable.
int32_t fairq_get_stats(const struct fairq_engine *engine, struct fairq_stats *stats);

// Renders the metrics in the Prometheus text format into `buf` (NUL-terminated). `*needed`
// (if not NULL) gets the bytes required including the NUL. `FAIRQ_ERR_BUFFER_TOO_SMALL` when
// `len` is less than that: nothing is written to `buf`, but `*needed` is set, so call once
// with `buf` NULL and `len` 0 to size it (metrics can grow between calls: allow slack, or
// retry). `FAIRQ_ERR_NULL` for a NULL `buf` with `len` > 0.
//
// # Safety
// `engine` must be NULL or a live engine; a non-NULL `buf` must be valid for writes of `len`
// bytes; `needed` must be NULL or writable.
int32_t fairq_metrics_prometheus(const struct fairq_engine *engine,
                                 char *buf,
                                 size_t len,
                                 size_t *needed);

// The name of a status code, e.g. `"FAIRQ_ERR_NULL"`; `"FAIRQ_UNKNOWN_STATUS"` for any other
// number. The string is static: never free it.
const char *fairq_status_str(int32_t status);

// The snake_case name of a refusal reason, as used in metrics (`"queue_full"`, ...); `"none"`
// for 0 and `"unknown"` for any other number. The string is static: never free it.
const char *fairq_reason_str(uint32_t reason);

// The snake_case name of a dimension (`"user"`, `"api_key"`, ...); `"unknown"` for any other
// number. The string is static: never free it.
const char *fairq_dimension_str(uint32_t dimension);

#if defined(FAIRQ_FLEET)
// Fills `*config` with the defaults of `FleetConfig` (period 100 ms, K 256, epoch 5 min, EWMA
// 0.5, stale 1 s; url `"redis://127.0.0.1:6379/"`, fleet `"default"`, replica `"replica"`, as
// static strings: never free them). NULL is a no-op. Feature `fleet`; declared when
// `FAIRQ_FLEET` is defined.
//
// # Safety
// A non-NULL `config` must be valid for a write of a `fairq_fleet_config`.
void fairq_fleet_config_default(struct fairq_fleet_config *config);
#endif

#if defined(FAIRQ_FLEET)
// Makes a fleet member for `engine` from `*config` and writes it to `*fleet_out`. It connects
// lazily, at the first sync, and holds the engine alive until `fairq_fleet_free` (even past
// `fairq_engine_free`). Nothing runs until `fairq_fleet_sync` or `fairq_fleet_start`.
// `FAIRQ_ERR_INVALID_CONFIG` for a field out of range or a URL Redis cannot parse,
// `FAIRQ_ERR_NULL` for a NULL string, `FAIRQ_ERR_INVALID_ARGUMENT` for a non-UTF-8 one; on
// these a message naming the field is copied into `err` (truncated, NUL-terminated; `err` may
// be NULL or `err_len` 0). Feature `fleet`; declared when `FAIRQ_FLEET` is defined.
//
// # Safety
// `engine` must be NULL or a live engine; `config` must point to an initialised
// `fairq_fleet_config` whose strings are NULL or NUL-terminated; `fleet_out` must be writable;
// a non-NULL `err` must be valid for writes of `err_len` bytes.
int32_t fairq_fleet_new(const struct fairq_engine *engine,
                        const struct fairq_fleet_config *config,
                        struct fairq_fleet **fleet_out,
                        char *err,
                        size_t err_len);
#endif

#if defined(FAIRQ_FLEET)
// Releases a fleet: stops its sync thread if one runs (waiting for a sync in progress, at most
// the socket timeout), closes its connection and drops its reference to the engine. NULL is a
// no-op. Must be the last call on this fleet. Feature `fleet`; declared when `FAIRQ_FLEET` is
// defined.
//
// # Safety
// A non-NULL `fleet` must come from `fairq_fleet_new` and not have been freed.
void fairq_fleet_free(struct fairq_fleet *fleet);
#endif

#if defined(FAIRQ_FLEET)
// `fairq_fleet_sync_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_fleet_sync_at`.
int32_t fairq_fleet_sync(const struct fairq_fleet *fleet);
#endif

#if defined(FAIRQ_FLEET)
// One sync at `now_ns` (monotonic, the `fairq_now_ns` clock the library thread uses): one
// round trip to Redis, blocking up to the socket timeout (P/2) at worst, so call it every period
// from a thread where that is fine (evenly spaced or not: rates are measured over time).
// `FAIRQ_OK`, or `FAIRQ_ERR_FLEET_SYNC` when Redis failed: the failure is recorded in the
// status and the unsent deltas are kept (a batch that may have reached Redis is resent
// unchanged, and Redis applies it once). `FAIRQ_ERR_BUSY` while
// the library thread runs (nothing is done). Concurrent syncs on one fleet run one after the
// other. Feature `fleet`; declared when `FAIRQ_FLEET` is defined.
//
// # Safety
// `fleet` must be NULL or a live fleet.
int32_t fairq_fleet_sync_at(const struct fairq_fleet *fleet, uint64_t now_ns);
#endif

#if defined(FAIRQ_FLEET)
// Starts the library-owned sync thread: it syncs every period (±10% jitter) until
// `fairq_fleet_stop` or `fairq_fleet_free`. Start it after `fork()` (NGINX: in
// `init_process`), and do not fork while it runs: the child would not have the thread.
// `FAIRQ_ERR_BUSY` when it already runs, `FAIRQ_ERR_THREAD` when the OS cannot start a
// thread (the fleet is then lost: free it). Feature `fleet`; declared when `FAIRQ_FLEET` is
// defined.
//
// # Safety
// `fleet` must be NULL or a live fleet.
int32_t fairq_fleet_start(const struct fairq_fleet *fleet);
#endif

#if defined(FAIRQ_FLEET)
// Stops the library sync thread and waits for it (a sync in progress finishes first, at most
// the socket timeout); the fleet can then be synced by the caller or started again.
// `FAIRQ_OK`, or `FAIRQ_NOT_RUNNING` when no thread ran (stopping twice is harmless). Feature
// `fleet`; declared when `FAIRQ_FLEET` is defined.
//
// # Safety
// `fleet` must be NULL or a live fleet.
int32_t fairq_fleet_stop(const struct fairq_fleet *fleet);
#endif

#if defined(FAIRQ_FLEET)
// Writes where the sync loop stands to `*status`: last successful sync, consecutive failures,
// degraded, tenants tracked, pipelines, syncs, and whether the library thread runs. Never
// waits for a sync: while another call holds the fleet (a caller's sync, a start or a stop) it
// writes the status as of the call before. (Named `_get_` because in C the struct
// `fairq_fleet_status` takes that name.) Feature `fleet`; declared when `FAIRQ_FLEET` is
// defined.
//
// # Safety
// `fleet` must be NULL or a live fleet; `status` must be writable.
int32_t fairq_fleet_get_status(const struct fairq_fleet *fleet, struct fairq_fleet_status *status);
#endif

// `fairq_tenant_indicators_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_tenant_indicators_at`.
int32_t fairq_tenant_indicators(const struct fairq_engine *engine,
                                uint64_t tenant_key,
                                struct fairq_indicators *out);

// Reads one tenant's fairness indicators, with starvation windows measured at `now_ns`.
// Lock-free. `FAIRQ_OK` fills `*out`; `FAIRQ_NOT_FOUND` when the tenant holds no slot (never
// seen, or its idle slot was reused). `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned `out` and
// for key 0 (it names no tenant).
//
// # Safety
// `engine` must be NULL or a live engine; `out` must be writable.
int32_t fairq_tenant_indicators_at(const struct fairq_engine *engine,
                                   uint64_t tenant_key,
                                   uint64_t now_ns,
                                   struct fairq_indicators *out);

// `fairq_tick_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_tick_at`.
int32_t fairq_tick(const struct fairq_engine *engine, struct fairq_tick_report *report);

// Runs the slow policies on the caller's thread: starts due wait boosts and, once per feedback
// period, nudges weights. Call it about once a second when a wait boost or the feedback
// controller is configured; it does nothing otherwise. `report` may be NULL.
//
// # Safety
// `engine` must be NULL or a live engine; `report` must be NULL or writable.
int32_t fairq_tick_at(const struct fairq_engine *engine,
                      uint64_t now_ns,
                      struct fairq_tick_report *report);

// `fairq_queue_status_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_queue_status_at`.
int32_t fairq_queue_status(const struct fairq_engine *engine,
                           uint32_t order,
                           struct fairq_status_totals *totals,
                           struct fairq_tenant_status *rows,
                           size_t cap,
                           size_t *count);

// A status dump at `now_ns`: the engine's totals into `*totals` (NULL: not wanted), and the
// `cap` largest tenants by `order` (`FAIRQ_STATUS_BY_*`) into `rows[0..*count]`, largest first.
// `totals->busy_tenants` says how many could have been listed. O(`max_tenants`), off the hot
// path: it reads the live tables without stopping the scheduler (each row is one tenant's
// consistent view) and allocates while it runs. `rows` may be NULL only with `cap` 0.
// `FAIRQ_ERR_INVALID_ARGUMENT` for an unknown `order` or a misaligned pointer.
//
// # Safety
// `engine` must be NULL or a live engine; `totals` NULL or writable; a non-NULL `rows` valid
// for writes of `cap` elements; `count` writable.
int32_t fairq_queue_status_at(const struct fairq_engine *engine,
                              uint32_t order,
                              uint64_t now_ns,
                              struct fairq_status_totals *totals,
                              struct fairq_tenant_status *rows,
                              size_t cap,
                              size_t *count);

// `fairq_queue_status_text_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_queue_status_text_at`.
int32_t fairq_queue_status_text(const struct fairq_engine *engine,
                                uint32_t order,
                                size_t k,
                                uint32_t format,
                                char *buf,
                                size_t len,
                                size_t *needed);

// The status dump at `now_ns` with the `k` largest tenants by `order`, rendered as
// `FAIRQ_STATUS_JSON` or `FAIRQ_STATUS_TEXT` into `buf` (NUL-terminated; the fields are
// described in docs/operating.md). `*needed` (if not NULL) gets the bytes required including
// the NUL. `FAIRQ_ERR_BUFFER_TOO_SMALL` when `len` is less than that: nothing is written to
// `buf`, but `*needed` is set, so call once with `buf` NULL and `len` 0 to size it (the dump
// can grow between calls: allow slack, or retry). `FAIRQ_ERR_NULL` for a NULL `buf` with `len`
// > 0; `FAIRQ_ERR_INVALID_ARGUMENT` for an unknown `order` or `format`.
//
// # Safety
// `engine` must be NULL or a live engine; a non-NULL `buf` must be valid for writes of `len`
// bytes; `needed` must be NULL or writable.
int32_t fairq_queue_status_text_at(const struct fairq_engine *engine,
                                   uint32_t order,
                                   size_t k,
                                   uint32_t format,
                                   uint64_t now_ns,
                                   char *buf,
                                   size_t len,
                                   size_t *needed);

// Makes a builder from `*config` (every field of `fairq_config` applies; every control it
// lacks starts off) and writes it to `*builder_out`. `FAIRQ_ERR_INVALID_CONFIG` when a field
// is out of range, with the message naming it copied into `buf` (truncated, NUL-terminated;
// `buf` may be NULL or `len` 0). Release it with `fairq_engine_builder_free`.
//
// # Safety
// `config` must point to an initialised `fairq_config`; `builder_out` must be valid for a
// write of a pointer; a non-NULL `buf` must be valid for writes of `len` bytes.
int32_t fairq_engine_builder_new(const struct fairq_config *config,
                                 struct fairq_engine_builder **builder_out,
                                 char *buf,
                                 size_t len);

// Releases a builder. NULL is a no-op. Engines it built are not affected.
//
// # Safety
// A non-NULL `builder` must come from `fairq_engine_builder_new` and not have been freed, and
// no other call may use it during or after this one.
void fairq_engine_builder_free(struct fairq_engine_builder *builder);

// Copies the message of the last rejected setter (the field at fault and its range) into
// `buf` (truncated, NUL-terminated); an empty string when the last setter succeeded. `*needed`
// (if not NULL) gets the bytes the whole message takes, its NUL included.
//
// # Safety
// `builder` must be NULL or a live builder; a non-NULL `buf` must be valid for writes of `len`
// bytes; `needed` must be NULL or writable.
int32_t fairq_engine_builder_message(const struct fairq_engine_builder *builder,
                                     char *buf,
                                     size_t len,
                                     size_t *needed);

// Adds a weight tier: `name` (`name_len` bytes, ASCII letters, digits, `_` or `-`, 1..=32,
// matched case-insensitively) weighs `weight` (1..=10000). At most 16 tiers, distinct names;
// the tiers and `default_weight` together need at most `max_weight_classes` distinct weights
// (their weight classes are made when the engine is built, so `fairq_set_tier` never runs out
// of them). `FAIRQ_ERR_INVALID_CONFIG` (see `fairq_engine_builder_message`) otherwise.
//
// # Safety
// `builder` must be NULL or a live builder; `name` must be valid for reads of `name_len`
// bytes.
int32_t fairq_engine_builder_add_tier(struct fairq_engine_builder *builder,
                                      const char *name,
                                      size_t name_len,
                                      uint32_t weight);

// Turns the starvation guard on: each weight class with ready tenants gets at least the
// larger of `min_grants_per_minute` (1..=60000) grants a minute or `min_share_percent`
// (0..=50; 0: no share floor) % of all grants. `min_grants_per_minute` 0 turns it off again.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_starvation_guard(struct fairq_engine_builder *builder,
                                                  uint32_t min_grants_per_minute,
                                                  uint32_t min_share_percent);

// Turns the wait boost on: a tenant ready and unserved for longer than `after_ms`
// (1000..=3600000) gets +1 weight until it is served; at most `max_boosted` (1..=65536)
// tenants at once. Boosts start in `fairq_tick`: call it about once a second. `after_ms` 0
// turns it off again.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_wait_boost(struct fairq_engine_builder *builder,
                                            uint64_t after_ms,
                                            uint32_t max_boosted);

// Turns the feedback controller on: once per `period_ms` (60000..=3600000) of `fairq_tick`
// calls, each tenant's effective weight moves by 1 towards its fair share, within
// `floor_percent` (10..=100) and `ceiling_percent` (100..=1000) of its configured weight. The
// thresholds keep their values (defaults: raise below 90 %, lower above 110 %, judge tenants
// expecting at least 100 cost units a period; see
// `fairq_engine_builder_set_feedback_thresholds`). `period_ms` 0 turns it off again.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_feedback(struct fairq_engine_builder *builder,
                                          uint64_t period_ms,
                                          uint32_t floor_percent,
                                          uint32_t ceiling_percent);

// The feedback controller's thresholds: raise a tenant whose period fair-share ratio is below
// `low_ratio_percent` (10..=100), lower one above `high_ratio_percent` (100..=1000), and judge
// only tenants that expected at least `min_expected_cost` (1..=1000000000) cost units in the
// period. Needs the controller on (`fairq_engine_builder_set_feedback` first):
// `FAIRQ_ERR_INVALID_CONFIG` otherwise.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_feedback_thresholds(struct fairq_engine_builder *builder,
                                                     uint32_t low_ratio_percent,
                                                     uint32_t high_ratio_percent,
                                                     uint64_t min_expected_cost);

// Adds a bulkhead pool: at most `max_in_flight` (1..=the config's `max_in_flight`) grants of
// requests to this downstream are out at once, on top of the global bound, so one slow
// downstream holds only its own permits. Writes the pool's number, the `downstream` that
// `fairq_enqueue_downstream` takes, to `*downstream_out` (0 for the first pool, then 1, ...).
// At most 64 pools. With no pool (the default) every request shares the one global pool.
//
// # Safety
// `builder` must be NULL or a live builder; `downstream_out` must be NULL or writable.
int32_t fairq_engine_builder_add_pool(struct fairq_engine_builder *builder,
                                      uint32_t max_in_flight,
                                      uint32_t *downstream_out);

// Turns load shedding on for the bulkhead pools (add them first): when a pool's downstream
// error rate over a window of `window_ms` (100..=3600000) passes `error_percent` (1..=100; the
// usual rule is 2), with at least `min_requests` (1..=1000000; 0: the default, 20) reports in
// the window, the pool's in-flight limit is cut in half (never below 1); each calm window grows
// it back by an eighth of the pool's bound. While a pool's limit is cut, a request to it that
// cannot be served within its budget is refused at once with
// `FAIRQ_REASON_DOWNSTREAM_SHEDDING`. Feed it with `fairq_report_downstream`.
// `error_percent` 0 turns it off again.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_shedding(struct fairq_engine_builder *builder,
                                          uint32_t error_percent,
                                          uint64_t window_ms,
                                          uint32_t min_requests);

// Turns the fairness indicators (per-tenant wait p95, refusal rate, fair-share ratio,
// starvation window, and the engine-wide wait histogram) on or off. On by default; off saves a
// few atomic writes per request, and `fairq_tenant_indicators` then answers `FAIRQ_NOT_FOUND`.
// The wait boost and the feedback controller need them: `FAIRQ_ERR_INVALID_CONFIG` when either
// is on.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_indicators(struct fairq_engine_builder *builder, bool on);

// How many tenants get their own fairness-indicator series in the Prometheus text (the top K
// by requests; the min/max aggregates cover every tenant), 0..=1000. Default 20.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_indicator_top_k(struct fairq_engine_builder *builder,
                                                 uint32_t top_k);

// Seats: `max_in_flight` counts cost units instead of requests. A grant takes its request's
// cost in permits (at least 1) and `fairq_complete` or `fairq_cancel` gives the same number
// back. A request whose cost is `max_in_flight` or more runs alone: once it is next, no other
// grant starts until the grants out have ended. Off by default.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_seats(struct fairq_engine_builder *builder, bool on);

// The light-tenant lane: a tenant that becomes ready (from idle, after a Retry-After, or when
// its pool frees) and has not had more than its fair share is granted at the next free permit,
// ahead of the weight classes' rotation, for one visit; then it joins its class's rotation.
// Backlogged tenants keep exact weighted shares of what the others leave, and through the lane
// no tenant gets more than three grants ahead of its share. On by default (also for engines
// made with `fairq_engine_new`); `false` turns it off.
//
// # Safety
// `builder` must be NULL or a live builder.
int32_t fairq_engine_builder_set_light_lane(struct fairq_engine_builder *builder, bool on);

// Builds an engine from the builder's configuration and writes it to `*engine_out`; the
// builder is unchanged and can build more. Release the engine with `fairq_engine_free`.
//
// # Safety
// `builder` must be NULL or a live builder; `engine_out` must be valid for a write of a
// pointer.
int32_t fairq_engine_builder_build(const struct fairq_engine_builder *builder,
                                   struct fairq_engine **engine_out);

// Puts the tenant whose raw identifier is the `raw_len` bytes at `raw` in tier `tier`
// (`tier_len` bytes, case-insensitive): its weight becomes the tier's, at run time, like
// `fairq_set_weight`. `FAIRQ_ERR_INVALID_ARGUMENT` for an empty identifier or a tier the
// engine was not built with.
//
// # Safety
// `engine` must be NULL or a live engine; `raw` and `tier` must be valid for reads of their
// lengths.
int32_t fairq_set_tier(const struct fairq_engine *engine,
                       const char *raw,
                       size_t raw_len,
                       const char *tier,
                       size_t tier_len);

// `fairq_set_tier` by tenant key (from `fairq_tenant_key`). Key 0 is invalid.
//
// # Safety
// `engine` must be NULL or a live engine; `tier` must be valid for reads of `tier_len` bytes.
int32_t fairq_set_tier_key(const struct fairq_engine *engine,
                           uint64_t tenant_key,
                           const char *tier,
                           size_t tier_len);

// Writes the weight of tier `tier` (`tier_len` bytes, case-insensitive) to `*weight_out`.
// `FAIRQ_NOT_FOUND` (nothing written) when the engine has no such tier.
//
// # Safety
// `engine` must be NULL or a live engine; `tier` must be valid for reads of `tier_len` bytes;
// `weight_out` must be writable.
int32_t fairq_tier_weight(const struct fairq_engine *engine,
                          const char *tier,
                          size_t tier_len,
                          uint32_t *weight_out);

// `fairq_enqueue_downstream_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_enqueue_downstream_at`.
int32_t fairq_enqueue_downstream(const struct fairq_engine *engine,
                                 const struct fairq_request *request,
                                 uint32_t downstream,
                                 struct fairq_enqueue_result *result);

// `fairq_enqueue_at` for a request to bulkhead pool `downstream` (from
// `fairq_engine_builder_add_pool`): its grant takes a permit of that pool too, so it waits
// while the pool is full, and other pools' requests go ahead of it. With no pool configured
// `downstream` is ignored (as `fairq_enqueue_at` does: it is `downstream` 0).
// `FAIRQ_ERR_INVALID_ARGUMENT` for a `downstream` that names no pool.
//
// # Safety
// `engine` must be NULL or a live engine; `request` must point to an initialised
// `fairq_request`; `result` must be writable.
int32_t fairq_enqueue_downstream_at(const struct fairq_engine *engine,
                                    const struct fairq_request *request,
                                    uint32_t downstream,
                                    uint64_t now_ns,
                                    struct fairq_enqueue_result *result);

// Writes the number of bulkhead pools (0 when none is configured) to `*count_out`.
//
// # Safety
// `engine` must be NULL or a live engine; `count_out` must be writable.
int32_t fairq_pool_count(const struct fairq_engine *engine, uint32_t *count_out);

// Fills `*stats` with pool `downstream`'s gauges. `FAIRQ_NOT_FOUND` (nothing written) when no
// such pool is configured.
//
// # Safety
// `engine` must be NULL or a live engine; `stats` must be writable.
int32_t fairq_pool_get_stats(const struct fairq_engine *engine,
                             uint32_t downstream,
                             struct fairq_pool_stats *stats);

// `fairq_report_downstream_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_report_downstream_at`.
int32_t fairq_report_downstream(const struct fairq_engine *engine, uint32_t downstream, bool ok);

// Reports whether a call to pool `downstream`'s downstream succeeded (`ok`: for HTTP, any
// status under 500), for load shedding's error rate: call it once per granted request that
// reached the downstream, next to `fairq_complete`. A no-op while load shedding is off.
// `FAIRQ_ERR_INVALID_ARGUMENT` for a `downstream` that names no pool (when pools are
// configured).
//
// # Safety
// `engine` must be NULL or a live engine.
int32_t fairq_report_downstream_at(const struct fairq_engine *engine,
                                   uint32_t downstream,
                                   bool ok,
                                   uint64_t now_ns);

// Fills `*out` with pool `downstream`'s shedding stage. `FAIRQ_NOT_FOUND` (nothing written)
// when no such pool is configured. Without load shedding the limit is the pool's bound and
// `shedding` 0.
//
// # Safety
// `engine` must be NULL or a live engine; `out` must be writable.
int32_t fairq_pool_get_shedding(const struct fairq_engine *engine,
                                uint32_t downstream,
                                struct fairq_pool_shedding *out);

// `fairq_fairness_get_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_fairness_get_at`.
int32_t fairq_fairness_get(const struct fairq_engine *engine, struct fairq_fairness *out);

// Fills `*out` with the indicators' min/max over every tenant, starvation windows measured at
// `now_ns`. Scans the tenant table (O(max_tenants), no lock, off the hot path).
//
// # Safety
// `engine` must be NULL or a live engine; `out` must be writable.
int32_t fairq_fairness_get_at(const struct fairq_engine *engine,
                              uint64_t now_ns,
                              struct fairq_fairness *out);

// `fairq_fairness_top_at` at `fairq_now_ns()`.
//
// # Safety
// As `fairq_fairness_top_at`.
int32_t fairq_fairness_top(const struct fairq_engine *engine,
                           struct fairq_indicators *out,
                           size_t cap,
                           size_t *count_out);

// Writes the indicators of the tenants with the most requests, most first, into `out[0..]`:
// at most `cap` of them and at most the engine's indicator top K (the tenants the Prometheus
// text shows). `*count_out` gets how many were written; `out` may be NULL when `cap` is 0
// (0 is written). Scans the tenant table (O(max_tenants), no lock, off the hot path).
//
// # Safety
// `engine` must be NULL or a live engine; a non-NULL `out` must be valid for writes of `cap`
// entries; `count_out` must be writable.
int32_t fairq_fairness_top_at(const struct fairq_engine *engine,
                              uint64_t now_ns,
                              struct fairq_indicators *out,
                              size_t cap,
                              size_t *count_out);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* FAIRQ_H */
