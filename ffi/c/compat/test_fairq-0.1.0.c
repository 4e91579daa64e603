/* A frozen copy of the C API test suite as it stood at version 0.1.0, the release whose header
 * is ffi/c/compat/fairq-0.1.0.h. tests/c_controls.rs compiles it against that header and runs it
 * against the current library: a program written for 0.1.0 must keep working unchanged (the ABI
 * only grows). Do not update it to newer API; newer tests belong in ffi/c/test_*.c. */
#define _POSIX_C_SOURCE 200809L
#undef NDEBUG
#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fairq.h"

#define MS 1000000ull
#define T0 (1000 * MS) /* virtual time origin for the _at calls */

static int passed = 0;

#define RUN(test)                         \
    do {                                  \
        test();                           \
        passed++;                         \
        printf("ok - %s\n", #test);       \
        fflush(stdout);                   \
    } while (0)

static fairq_config enabled_config(void) {
    fairq_config c;
    fairq_config_default(&c);
    c.enabled = true;
    return c;
}

static fairq_engine *new_engine(fairq_config c) {
    fairq_engine *e = NULL;
    assert(fairq_engine_new(&c, &e) == FAIRQ_OK);
    assert(e != NULL);
    return e;
}

static uint64_t key_of(const char *raw) {
    uint64_t k = 0;
    assert(fairq_tenant_key(raw, strlen(raw), &k) == FAIRQ_OK);
    assert(k != 0);
    return k;
}

static fairq_request request(uint64_t key, uint64_t user_data) {
    fairq_request r = {0};
    r.tenant_key = key;
    r.dimension = FAIRQ_DIM_USER;
    r.user_data = user_data;
    return r;
}

static int32_t enqueue_at(fairq_engine *e, fairq_request r, uint64_t now, fairq_enqueue_result *out) {
    return fairq_enqueue_at(e, &r, now, out);
}

static fairq_stats stats_of(fairq_engine *e) {
    fairq_stats s;
    assert(fairq_get_stats(e, &s) == FAIRQ_OK);
    return s;
}

/* Every ticket that entered a queue ended exactly once, or is still queued or in flight. */
static void assert_conserved(fairq_engine *e) {
    fairq_stats s = stats_of(e);
    assert(s.enqueued == s.queued + s.in_flight + s.completed + s.cancelled + s.expired +
                             s.refused_after_wait);
}

/* ------------------------------------------------------------------ version and names */

static void test_version(void) {
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", FAIRQ_VERSION_MAJOR, FAIRQ_VERSION_MINOR,
             FAIRQ_VERSION_PATCH);
    assert(strcmp(fairq_version(), expected) == 0);
    uint64_t a = fairq_now_ns(), b = fairq_now_ns();
    assert(b >= a);
}

static void test_status_and_reason_names(void) {
    static const struct { int32_t code; const char *name; } statuses[] = {
        {FAIRQ_OK, "FAIRQ_OK"},
        {FAIRQ_QUEUED, "FAIRQ_QUEUED"},
        {FAIRQ_REFUSED, "FAIRQ_REFUSED"},
        {FAIRQ_EMPTY, "FAIRQ_EMPTY"},
        {FAIRQ_AT_CAPACITY, "FAIRQ_AT_CAPACITY"},
        {FAIRQ_EXPIRED, "FAIRQ_EXPIRED"},
        {FAIRQ_REQUEUED, "FAIRQ_REQUEUED"},
        {FAIRQ_NOT_FOUND, "FAIRQ_NOT_FOUND"},
        {FAIRQ_ERR_NULL, "FAIRQ_ERR_NULL"},
        {FAIRQ_ERR_INVALID_CONFIG, "FAIRQ_ERR_INVALID_CONFIG"},
        {FAIRQ_ERR_STALE_TICKET, "FAIRQ_ERR_STALE_TICKET"},
        {FAIRQ_ERR_TICKET_STATE, "FAIRQ_ERR_TICKET_STATE"},
        {FAIRQ_ERR_INVALID_ARGUMENT, "FAIRQ_ERR_INVALID_ARGUMENT"},
        {FAIRQ_ERR_BUFFER_TOO_SMALL, "FAIRQ_ERR_BUFFER_TOO_SMALL"},
        {FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES, "FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES"},
        {FAIRQ_ERR_PANIC, "FAIRQ_ERR_PANIC"},
        {FAIRQ_ERR_INVALID_HANDLE, "FAIRQ_ERR_INVALID_HANDLE"},
    };
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        assert(strcmp(fairq_status_str(statuses[i].code), statuses[i].name) == 0);
    /* The stable numbers themselves. */
    assert(FAIRQ_OK == 0 && FAIRQ_QUEUED == 1 && FAIRQ_REFUSED == 2 && FAIRQ_EMPTY == 3);
    assert(FAIRQ_AT_CAPACITY == 4 && FAIRQ_EXPIRED == 5 && FAIRQ_REQUEUED == 6);
    assert(FAIRQ_NOT_FOUND == 7 && FAIRQ_ERR_NULL == -1 && FAIRQ_ERR_PANIC == -8);
    assert(0 - FAIRQ_ERR_NULL == 1); /* the negative macros are parenthesised */
    assert(strcmp(fairq_status_str(12345), "FAIRQ_UNKNOWN_STATUS") == 0);

    static const char *reasons[] = {"none", "queue_full", "tenant_queue_full",
                                    "tenant_table_full", "wait_exceeds_budget",
                                    "deadline_exceeded", "not_queueable", "no_tenant",
                                    "disabled", "cancelled"};
    for (uint32_t r = 0; r <= FAIRQ_REASON_CANCELLED; r++)
        assert(strcmp(fairq_reason_str(r), reasons[r]) == 0);
    assert(strcmp(fairq_reason_str(99), "unknown") == 0);
    assert(FAIRQ_REASON_QUEUE_FULL == 1 && FAIRQ_REASON_CANCELLED == 9);

    static const char *dims[] = {"user", "api_key", "team", "model",
                                 "global", "client", "backend", "store"};
    for (uint32_t d = 0; d <= FAIRQ_DIM_STORE; d++)
        assert(strcmp(fairq_dimension_str(d), dims[d]) == 0);
    assert(strcmp(fairq_dimension_str(8), "unknown") == 0);
}

/* ------------------------------------------------------------------ NULL and garbage */

static void test_null_arguments(void) {
    fairq_engine *e = new_engine(enabled_config());
    fairq_config c = enabled_config();
    fairq_request r = request(key_of("t"), 0);
    fairq_enqueue_result er;
    fairq_grant g;
    fairq_stats st;
    fairq_identity id = {0};
    fairq_weight_entry w = {key_of("t"), 2};
    uint64_t u64 = 0, u64b = 0;
    uint32_t u32 = 0;
    bool flag = false;
    size_t needed = 0;
    char buf[16];

    fairq_engine_free(NULL);      /* no-op */
    fairq_config_default(NULL);   /* no-op */
    assert(fairq_config_check(NULL, buf, sizeof buf) == FAIRQ_ERR_NULL);
    assert(fairq_engine_new(NULL, &e) == FAIRQ_ERR_NULL);
    assert(fairq_engine_new(&c, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_set_enabled(NULL, true) == FAIRQ_ERR_NULL);
    assert(fairq_is_enabled(NULL, &flag) == FAIRQ_ERR_NULL);
    assert(fairq_is_enabled(e, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_tenant_key(NULL, 3, &u64) == FAIRQ_ERR_NULL);
    assert(fairq_tenant_key("abc", 3, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_resolve_tenant(NULL, &id, &u64, &u32) == FAIRQ_ERR_NULL);
    assert(fairq_resolve_tenant(e, NULL, &u64, &u32) == FAIRQ_ERR_NULL);
    assert(fairq_resolve_tenant(e, &id, NULL, &u32) == FAIRQ_ERR_NULL);
    assert(fairq_set_weight(NULL, "a", 1, 2) == FAIRQ_ERR_NULL);
    assert(fairq_set_weight(e, NULL, 1, 2) == FAIRQ_ERR_NULL);
    assert(fairq_set_weight_key(NULL, 1, 2) == FAIRQ_ERR_NULL);
    assert(fairq_replace_weights(NULL, &w, 1, 1) == FAIRQ_ERR_NULL);
    assert(fairq_replace_weights(e, NULL, 1, 1) == FAIRQ_ERR_NULL);
    assert(fairq_weight_of(NULL, 1, &u32) == FAIRQ_ERR_NULL);
    assert(fairq_weight_of(e, 1, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_tenant_granted(NULL, 1, &u64, &u64b) == FAIRQ_ERR_NULL);
    assert(fairq_tenant_granted(e, 1, NULL, &u64b) == FAIRQ_ERR_NULL);
    assert(fairq_tenant_granted(e, 1, &u64, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue(NULL, &r, &er) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue(e, NULL, &er) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue(e, &r, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue_at(NULL, &r, T0, &er) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue_at(e, NULL, T0, &er) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue_at(e, &r, T0, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_next_grant(NULL, &g) == FAIRQ_ERR_NULL);
    assert(fairq_next_grant(e, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_next_grant_at(NULL, T0, &g) == FAIRQ_ERR_NULL);
    assert(fairq_next_grant_at(e, T0, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_next_wakeup_ns(NULL, &u64) == FAIRQ_ERR_NULL);
    assert(fairq_next_wakeup_ns(e, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_complete(NULL, 1, FAIRQ_OUTCOME_ADMITTED, 0, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_complete_at(NULL, 1, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_complete_with_cost(NULL, 1, FAIRQ_OUTCOME_ADMITTED, 0, 1, NULL) ==
           FAIRQ_ERR_NULL);
    assert(fairq_complete_with_cost_at(NULL, 1, FAIRQ_OUTCOME_ADMITTED, 0, 1, T0, NULL) ==
           FAIRQ_ERR_NULL);
    assert(fairq_cancel(NULL, 1) == FAIRQ_ERR_NULL);
    assert(fairq_cancel_at(NULL, 1, T0) == FAIRQ_ERR_NULL);
    assert(fairq_get_stats(NULL, &st) == FAIRQ_ERR_NULL);
    assert(fairq_get_stats(e, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_metrics_prometheus(NULL, buf, sizeof buf, &needed) == FAIRQ_ERR_NULL);
    assert(fairq_metrics_prometheus(e, NULL, 10, &needed) == FAIRQ_ERR_NULL);

    /* NULL out-pointers were checked before anything happened: nothing was queued. */
    st = stats_of(e);
    assert(st.enqueued == 0 && st.queued == 0);
    assert(u64 == 0 && u64b == 0 && u32 == 0 && !flag && needed == 0);
    fairq_engine_free(e);
}

static void test_garbage_handles(void) {
    /* Readable memory that is not an engine is rejected, not used. */
    _Alignas(128) static uint64_t junk[1024];
    for (size_t i = 0; i < 1024; i++) junk[i] = 0xdeadbeefcafef00dull * (i + 1);
    fairq_engine *bad = (fairq_engine *)(void *)junk;
    fairq_request r = request(1, 0);
    fairq_enqueue_result er;
    fairq_grant g;
    fairq_stats st;
    uint64_t u64;
    size_t needed;
    assert(fairq_enqueue(bad, &r, &er) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_next_grant(bad, &g) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_complete(bad, 1, 0, 0, NULL) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_cancel(bad, 1) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_get_stats(bad, &st) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_next_wakeup_ns(bad, &u64) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_metrics_prometheus(bad, NULL, 0, &needed) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_set_weight_key(bad, 1, 2) == FAIRQ_ERR_INVALID_HANDLE);
    fairq_engine_free(bad); /* ignored, not freed */
    fairq_engine *misaligned_engine = (fairq_engine *)(void *)((char *)junk + 8);
    assert(fairq_get_stats(misaligned_engine, &st) == FAIRQ_ERR_INVALID_HANDLE);
    fairq_engine_free(misaligned_engine);

    /* Garbage tickets and codes on a real engine. */
    fairq_engine *e = new_engine(enabled_config());
    uint64_t garbage[] = {0, 1, 0xffffffffffffffffull, 0x0000000100000000ull,
                          0x12345678deadbeefull, 0x00000001ffffffffull};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        assert(fairq_complete_at(e, garbage[i], FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) ==
               FAIRQ_ERR_STALE_TICKET);
        assert(fairq_cancel_at(e, garbage[i], T0) == FAIRQ_ERR_STALE_TICKET);
    }
    assert(fairq_complete_at(e, 1, 7, 0, T0, NULL) == FAIRQ_ERR_INVALID_ARGUMENT);
    r = request(key_of("t"), 0);
    r.dimension = 99;
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_ERR_INVALID_ARGUMENT);
    r.dimension = FAIRQ_DIM_USER;
    r.cost = 2000000;
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_ERR_INVALID_ARGUMENT);
    /* A misaligned out-pointer is an invalid argument, not a crash. */
    uint64_t words[3];
    fairq_stats *misaligned = (fairq_stats *)(void *)((char *)words + 1);
    assert(fairq_get_stats(e, misaligned) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(stats_of(e).enqueued == 0);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ config */

static void test_config(void) {
    fairq_config c;
    fairq_config_default(&c);
    assert(!c.enabled && c.max_in_flight == 8 && c.default_weight == 1);
    assert(c.tenant_dimension == FAIRQ_TENANT_DIM_USER && c.max_wait_ms == 30000);
    char msg[256];
    assert(fairq_config_check(&c, msg, sizeof msg) == FAIRQ_OK);

    c.max_in_flight = 0;
    memset(msg, 0, sizeof msg);
    assert(fairq_config_check(&c, msg, sizeof msg) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(msg, "max_in_flight") != NULL);
    assert(fairq_config_check(&c, NULL, 0) == FAIRQ_ERR_INVALID_CONFIG);
    char tiny[4] = {'x', 'x', 'x', 'x'};
    assert(fairq_config_check(&c, tiny, sizeof tiny) == FAIRQ_ERR_INVALID_CONFIG);
    assert(tiny[3] == '\0'); /* truncated, terminated */

    fairq_engine *sentinel = (fairq_engine *)(void *)&c;
    fairq_engine *e = sentinel;
    assert(fairq_engine_new(&c, &e) == FAIRQ_ERR_INVALID_CONFIG);
    assert(e == sentinel); /* out-parameter untouched on error */

    fairq_config_default(&c);
    c.tenant_dimension = 9;
    assert(fairq_config_check(&c, msg, sizeof msg) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(msg, "tenant_dimension") != NULL);
    fairq_config_default(&c);
    c.max_weight_classes = 65;
    assert(fairq_config_check(&c, msg, sizeof msg) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(msg, "max_weight_classes") != NULL);

    fairq_config_default(&c);
    e = new_engine(c);
    bool on = true;
    assert(fairq_is_enabled(e, &on) == FAIRQ_OK && !on);
    assert(fairq_set_enabled(e, true) == FAIRQ_OK);
    assert(fairq_is_enabled(e, &on) == FAIRQ_OK && on);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ refusals on arrival */

static void test_disabled_not_queueable_no_tenant(void) {
    fairq_config c;
    fairq_config_default(&c); /* disabled */
    fairq_engine *e = new_engine(c);
    fairq_enqueue_result er;
    fairq_request r = request(key_of("t"), 1);
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_DISABLED && er.ticket == 0);

    assert(fairq_set_enabled(e, true) == FAIRQ_OK);
    uint32_t not_queueable[] = {FAIRQ_DIM_GLOBAL, FAIRQ_DIM_CLIENT, FAIRQ_DIM_BACKEND,
                                FAIRQ_DIM_STORE};
    for (size_t i = 0; i < 4; i++) {
        r.dimension = not_queueable[i];
        assert(enqueue_at(e, r, T0, &er) == FAIRQ_REFUSED);
        assert(er.reason == FAIRQ_REASON_NOT_QUEUEABLE);
    }
    uint32_t queueable[] = {FAIRQ_DIM_USER, FAIRQ_DIM_API_KEY, FAIRQ_DIM_TEAM, FAIRQ_DIM_MODEL};
    for (size_t i = 0; i < 4; i++) {
        r.dimension = queueable[i];
        assert(enqueue_at(e, r, T0, &er) == FAIRQ_QUEUED);
        assert(er.reason == FAIRQ_REASON_NONE && er.ticket != 0 && er.position == i + 1);
    }
    r = request(0, 1); /* no identifier */
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_NO_TENANT);

    fairq_stats s = stats_of(e);
    assert(s.refused[FAIRQ_REASON_DISABLED] == 1);
    assert(s.refused[FAIRQ_REASON_NOT_QUEUEABLE] == 4);
    assert(s.refused[FAIRQ_REASON_NO_TENANT] == 1);
    assert(s.enqueued == 4 && s.queued == 4);
    fairq_engine_free(e);
}

static void test_bounds(void) {
    fairq_config c = enabled_config();
    c.max_tenants = 2;
    c.tenant_queue_capacity = 2;
    c.queue_capacity = 3;
    c.tenant_idle_ms = 60000;
    fairq_engine *e = new_engine(c);
    fairq_enqueue_result er;
    uint64_t a = key_of("a"), b = key_of("b"), x = key_of("x");
    assert(enqueue_at(e, request(a, 1), T0, &er) == FAIRQ_QUEUED && er.position == 1);
    assert(enqueue_at(e, request(a, 2), T0, &er) == FAIRQ_QUEUED && er.position == 2);
    /* tenant_queue_full: the third of tenant a, with the position it would have had. */
    assert(enqueue_at(e, request(a, 3), T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_TENANT_QUEUE_FULL && er.position == 3);
    assert(enqueue_at(e, request(b, 4), T0, &er) == FAIRQ_QUEUED);
    /* queue_full: 3 queued in all. */
    assert(enqueue_at(e, request(b, 5), T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_QUEUE_FULL && er.position == 2);
    /* tenant_table_full: a third tenant while a and b hold both slots. */
    assert(enqueue_at(e, request(x, 6), T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_TENANT_TABLE_FULL);
    fairq_stats s = stats_of(e);
    assert(s.refused[FAIRQ_REASON_TENANT_QUEUE_FULL] == 1);
    assert(s.refused[FAIRQ_REASON_QUEUE_FULL] == 1);
    assert(s.refused[FAIRQ_REASON_TENANT_TABLE_FULL] == 1);
    assert(s.tenants == 2 && s.queued == 3);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ budget and deadline */

static void test_wait_exceeds_budget_and_deadline(void) {
    fairq_config c = enabled_config();
    c.max_wait_ms = 100;
    fairq_engine *e = new_engine(c);
    fairq_enqueue_result er;
    uint64_t t = key_of("t");

    /* Retry-After longer than the budget: refused on arrival. */
    fairq_request r = request(t, 1);
    r.retry_after_ns = 200 * MS;
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_WAIT_EXCEEDS_BUDGET && er.position == 1);
    /* The request's own timeout shortens the budget. */
    r.retry_after_ns = 50 * MS;
    r.timeout_ns = 20 * MS;
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_REFUSED);
    assert(er.reason == FAIRQ_REASON_WAIT_EXCEEDS_BUDGET);

    /* deadline_exceeded: queued, never granted in time; next_grant hands back its user_data. */
    r = request(t, 4242);
    r.timeout_ns = 10 * MS;
    assert(enqueue_at(e, r, T0, &er) == FAIRQ_QUEUED);
    uint64_t expired_ticket = er.ticket;
    fairq_grant g;
    memset(&g, 0, sizeof g);
    assert(fairq_next_grant_at(e, T0 + 20 * MS, &g) == FAIRQ_EXPIRED);
    assert(g.user_data == 4242 && g.reason == FAIRQ_REASON_DEADLINE_EXCEEDED);
    assert(g.ticket == expired_ticket && g.tenant_key == t && g.waited_ns >= 10 * MS);
    assert(fairq_cancel_at(e, expired_ticket, T0 + 20 * MS) == FAIRQ_ERR_STALE_TICKET);
    assert(fairq_next_grant_at(e, T0 + 20 * MS, &g) == FAIRQ_EMPTY);

    /* A requeue whose Retry-After does not fit the remaining budget ends the ticket. */
    r = request(t, 7);
    assert(enqueue_at(e, r, T0 + 30 * MS, &er) == FAIRQ_QUEUED);
    assert(fairq_next_grant_at(e, T0 + 30 * MS, &g) == FAIRQ_OK && g.user_data == 7);
    assert(g.remaining_budget_ns <= 100 * MS && g.remaining_budget_ns > 0);
    fairq_completion done;
    assert(fairq_complete_at(e, g.ticket, FAIRQ_OUTCOME_STILL_REFUSED, 500 * MS, T0 + 40 * MS,
                             &done) == FAIRQ_REFUSED);
    assert(done.reason == FAIRQ_REASON_WAIT_EXCEEDS_BUDGET && done.waited_ns == 10 * MS);
    assert(fairq_complete_at(e, g.ticket, 0, 0, T0 + 40 * MS, NULL) == FAIRQ_ERR_STALE_TICKET);

    fairq_stats s = stats_of(e);
    assert(s.refused[FAIRQ_REASON_WAIT_EXCEEDS_BUDGET] == 3);
    assert(s.refused[FAIRQ_REASON_DEADLINE_EXCEEDED] == 1);
    assert(s.expired == 1 && s.refused_after_wait == 1 && s.in_flight == 0);
    assert_conserved(e);
    fairq_engine_free(e);
}

static void test_requeue_and_wakeup(void) {
    fairq_engine *e = new_engine(enabled_config());
    fairq_enqueue_result er;
    fairq_grant g;
    uint64_t wake = 0;
    assert(fairq_next_wakeup_ns(e, &wake) == FAIRQ_EMPTY && wake == 0);
    assert(enqueue_at(e, request(key_of("t"), 9), T0, &er) == FAIRQ_QUEUED);
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_OK);
    fairq_completion done;
    assert(fairq_complete_at(e, g.ticket, FAIRQ_OUTCOME_STILL_REFUSED, 50 * MS, T0 + MS,
                             &done) == FAIRQ_REQUEUED);
    assert(done.position == 1 && done.estimated_wait_ns >= 50 * MS);
    /* Not ready yet: parked, and the wakeup says when to look again. */
    assert(fairq_next_grant_at(e, T0 + 2 * MS, &g) == FAIRQ_EMPTY);
    assert(fairq_next_wakeup_ns(e, &wake) == FAIRQ_OK);
    assert(wake > T0 && wake <= T0 + 60 * MS);
    assert(fairq_next_grant_at(e, T0 + 60 * MS, &g) == FAIRQ_OK && g.user_data == 9);
    assert(fairq_complete_with_cost_at(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, 3, T0 + 61 * MS,
                                       NULL) == FAIRQ_OK);
    fairq_stats s = stats_of(e);
    assert(s.requeued == 1 && s.completed == 1 && s.granted == 2 && s.queued == 0);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ tickets */

static void test_stale_forged_and_double_completed_tickets(void) {
    fairq_engine *e = new_engine(enabled_config());
    fairq_enqueue_result er;
    fairq_grant g;
    uint64_t t = key_of("t");
    assert(enqueue_at(e, request(t, 1), T0, &er) == FAIRQ_QUEUED);
    uint64_t queued = er.ticket;
    /* Completing a queued (not granted) ticket: wrong state. */
    assert(fairq_complete_at(e, queued, 0, 0, T0, NULL) == FAIRQ_ERR_TICKET_STATE);
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_OK && g.ticket == queued);
    /* Forged: same slot, another generation; or another slot entirely. */
    uint64_t forged = queued ^ (1ull << 40);
    assert(fairq_complete_at(e, forged, 0, 0, T0, NULL) == FAIRQ_ERR_STALE_TICKET);
    assert(fairq_cancel_at(e, forged, T0) == FAIRQ_ERR_STALE_TICKET);
    assert(fairq_complete_at(e, queued + 1, 0, 0, T0, NULL) == FAIRQ_ERR_STALE_TICKET);
    /* Complete once: fine; twice: stale, and nothing is counted twice. */
    assert(fairq_complete_at(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_OK);
    fairq_completion done = {1, 2, 3, 4};
    assert(fairq_complete_at(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, &done) ==
           FAIRQ_ERR_STALE_TICKET);
    assert(done.estimated_wait_ns == 1 && done.reason == 4); /* untouched on error */
    assert(fairq_cancel_at(e, g.ticket, T0) == FAIRQ_ERR_STALE_TICKET);

    /* Cancel a queued ticket, then a granted one; both only once. */
    assert(enqueue_at(e, request(t, 2), T0, &er) == FAIRQ_QUEUED);
    assert(fairq_cancel_at(e, er.ticket, T0) == FAIRQ_OK);
    assert(fairq_cancel_at(e, er.ticket, T0) == FAIRQ_ERR_STALE_TICKET);
    assert(enqueue_at(e, request(t, 3), T0, &er) == FAIRQ_QUEUED);
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_OK && g.user_data == 3);
    assert(fairq_cancel(e, g.ticket) == FAIRQ_OK);
    assert(fairq_complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, NULL) ==
           FAIRQ_ERR_STALE_TICKET);

    fairq_stats s = stats_of(e);
    assert(s.completed == 1 && s.cancelled == 2 && s.refused[FAIRQ_REASON_CANCELLED] == 2);
    assert(s.in_flight == 0 && s.queued == 0);
    assert_conserved(e);
    fairq_engine_free(e);
}

static void test_max_in_flight(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 2;
    fairq_engine *e = new_engine(c);
    fairq_enqueue_result er;
    fairq_grant g1, g2, g3;
    for (uint64_t i = 0; i < 4; i++)
        assert(enqueue_at(e, request(key_of(i % 2 ? "a" : "b"), i), T0, &er) == FAIRQ_QUEUED);
    assert(fairq_next_grant_at(e, T0, &g1) == FAIRQ_OK);
    assert(fairq_next_grant_at(e, T0, &g2) == FAIRQ_OK);
    memset(&g3, 0xab, sizeof g3);
    assert(fairq_next_grant_at(e, T0, &g3) == FAIRQ_AT_CAPACITY);
    assert(g3.ticket == 0xababababababababull); /* untouched */
    assert(stats_of(e).in_flight == 2);
    assert(fairq_complete_at(e, g1.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_OK);
    assert(fairq_next_grant_at(e, T0, &g3) == FAIRQ_OK);
    assert(fairq_next_grant_at(e, T0, &g1) == FAIRQ_AT_CAPACITY);
    assert(fairq_complete_at(e, g2.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_OK);
    assert(fairq_complete_at(e, g3.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_OK);
    assert(fairq_next_grant_at(e, T0, &g1) == FAIRQ_OK);
    assert(fairq_complete_at(e, g1.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0, NULL) == FAIRQ_OK);
    assert(fairq_next_grant_at(e, T0, &g1) == FAIRQ_EMPTY);
    assert(stats_of(e).in_flight == 0 && stats_of(e).completed == 4);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ weights */

static void test_weight_share_3_to_1(void) {
    fairq_config c = enabled_config();
    c.tenant_queue_capacity = 1024;
    fairq_engine *e = new_engine(c);
    uint64_t a = key_of("acme"), b = key_of("globex");
    assert(fairq_set_weight(e, "acme", 4, 3) == FAIRQ_OK);
    uint32_t w = 0;
    assert(fairq_weight_of(e, a, &w) == FAIRQ_OK && w == 3);
    assert(fairq_weight_of(e, b, &w) == FAIRQ_OK && w == 1);
    fairq_enqueue_result er;
    for (uint64_t i = 0; i < 600; i++) {
        assert(enqueue_at(e, request(a, i), T0, &er) == FAIRQ_QUEUED);
        assert(enqueue_at(e, request(b, i), T0, &er) == FAIRQ_QUEUED);
    }
    /* Both backlogged and ready: every window of W = 4 grants holds exactly 3 a and 1 b. */
    for (int window = 0; window < 200; window++) {
        int got_a = 0;
        for (int k = 0; k < 4; k++) {
            fairq_grant g;
            assert(fairq_next_grant_at(e, T0 + MS, &g) == FAIRQ_OK);
            got_a += g.tenant_key == a;
            assert(fairq_complete_at(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, T0 + MS, NULL) ==
                   FAIRQ_OK);
        }
        assert(got_a == 3);
    }
    uint64_t grants = 0, cost = 0;
    assert(fairq_tenant_granted(e, a, &grants, &cost) == FAIRQ_OK);
    assert(grants == 600 && cost == 600);
    assert(fairq_tenant_granted(e, key_of("nobody"), &grants, &cost) == FAIRQ_NOT_FOUND);
    fairq_engine_free(e);
}

static void test_weight_errors_and_bulk_replace(void) {
    fairq_config c = enabled_config();
    c.max_weight_classes = 3; /* the default weight takes one */
    fairq_engine *e = new_engine(c);
    uint64_t a = key_of("a"), b = key_of("b"), d = key_of("d");
    assert(fairq_set_weight(e, "a", 1, 0) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_weight(e, "a", 1, 10001) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_weight(e, "", 0, 2) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_weight_key(e, 0, 2) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_weight_key(e, a, 2) == FAIRQ_OK);
    assert(fairq_set_weight_key(e, b, 3) == FAIRQ_OK);
    assert(fairq_set_weight_key(e, d, 4) == FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES);

    /* Bulk replacement is all or nothing. */
    fairq_weight_entry bad[] = {{a, 3}, {b, 0}};
    assert(fairq_replace_weights(e, bad, 2, 1) == FAIRQ_ERR_INVALID_ARGUMENT);
    fairq_weight_entry too_many[] = {{a, 3}, {b, 7}};
    assert(fairq_replace_weights(e, too_many, 2, 1) == FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES);
    uint32_t w = 0;
    assert(fairq_weight_of(e, a, &w) == FAIRQ_OK && w == 2);
    assert(fairq_weight_of(e, b, &w) == FAIRQ_OK && w == 3);
    fairq_weight_entry table[] = {{a, 3}, {d, 3}};
    assert(fairq_replace_weights(e, table, 2, 1) == FAIRQ_OK);
    assert(fairq_weight_of(e, a, &w) == FAIRQ_OK && w == 3);
    assert(fairq_weight_of(e, d, &w) == FAIRQ_OK && w == 3);
    assert(fairq_weight_of(e, b, &w) == FAIRQ_OK && w == 1); /* not listed: the default */
    fairq_weight_entry zero_key[] = {{0, 2}};
    assert(fairq_replace_weights(e, zero_key, 1, 1) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_replace_weights(e, NULL, 0, 2) == FAIRQ_OK); /* empty table, default 2 */
    assert(fairq_weight_of(e, a, &w) == FAIRQ_OK && w == 2);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ identity */

static void test_resolve_tenant(void) {
    fairq_config c = enabled_config();
    c.tenant_dimension = FAIRQ_TENANT_DIM_TEAM;
    fairq_engine *e = new_engine(c);
    fairq_identity id = {0};
    uint64_t key = 0;
    uint32_t dim = 99;

    assert(fairq_resolve_tenant(e, &id, &key, &dim) == FAIRQ_NOT_FOUND);
    assert(key == 0 && dim == 99);

    id.user = "alice";
    id.user_len = 5;
    id.team = "blue";
    id.team_len = 4;
    id.api_key = "key-1";
    id.api_key_len = 5;
    /* The configured dimension (team) first. */
    assert(fairq_resolve_tenant(e, &id, &key, &dim) == FAIRQ_OK);
    assert(key == key_of("blue") && dim == FAIRQ_TENANT_DIM_TEAM);
    /* A placeholder team is not an identifier: fall back to the user. */
    id.team_is_placeholder = true;
    assert(fairq_resolve_tenant(e, &id, &key, NULL) == FAIRQ_OK && key == key_of("alice"));
    /* No user: team is a placeholder, so the API key. */
    id.user = NULL;
    assert(fairq_resolve_tenant(e, &id, &key, &dim) == FAIRQ_OK);
    assert(key == key_of("key-1") && dim == FAIRQ_TENANT_DIM_API_KEY);
    /* Empty values count as absent. */
    id.api_key_len = 0;
    assert(fairq_resolve_tenant(e, &id, &key, &dim) == FAIRQ_NOT_FOUND);
    /* Not UTF-8. */
    id.user = "\xff\xfe";
    id.user_len = 2;
    assert(fairq_resolve_tenant(e, &id, &key, &dim) == FAIRQ_ERR_INVALID_ARGUMENT);
    /* Keys are stable and binary-safe. */
    uint64_t k1 = 0, k2 = 0;
    assert(fairq_tenant_key("a\0b", 3, &k1) == FAIRQ_OK);
    assert(fairq_tenant_key("a\0c", 3, &k2) == FAIRQ_OK && k1 != k2);
    assert(fairq_tenant_key("x", 0, &k1) == FAIRQ_ERR_INVALID_ARGUMENT);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ metrics */

static void test_metrics(void) {
    fairq_engine *e = new_engine(enabled_config());
    fairq_enqueue_result er;
    assert(enqueue_at(e, request(key_of("t"), 1), T0, &er) == FAIRQ_QUEUED);
    size_t needed = 0;
    assert(fairq_metrics_prometheus(e, NULL, 0, &needed) == FAIRQ_ERR_BUFFER_TOO_SMALL);
    assert(needed > 100);
    /* Too small: nothing written to the buffer, the size needed reported. (Some metrics depend
     * on time, so the size can change between calls: size with slack.) */
    char small[16];
    memset(small, 'z', sizeof small);
    size_t again = 0;
    assert(fairq_metrics_prometheus(e, small, sizeof small, &again) ==
           FAIRQ_ERR_BUFFER_TOO_SMALL);
    assert(again > sizeof small && small[0] == 'z' && small[15] == 'z');
    size_t cap = needed + 4096;
    char *buf = malloc(cap);
    assert(buf != NULL);
    assert(fairq_metrics_prometheus(e, buf, cap, &needed) == FAIRQ_OK);
    assert(strlen(buf) == needed - 1);
    assert(fairq_metrics_prometheus(e, buf, cap, NULL) == FAIRQ_OK);
    assert(strstr(buf, "rate_limit_fair_queue_depth 1\n") != NULL);
    assert(strstr(buf, "reason=\"queue_full\"") != NULL);
    free(buf);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ stress */

#define STRESS_THREADS 4
/* Iterations per thread; each makes at least 2 calls, so 4 x 125000 x 2 >= 10^6 operations.
 * FAIRQ_STRESS_ITERS overrides it (the valgrind run in .ci/run uses fewer). */
#define STRESS_ITERS 125000

static uint64_t stress_iters(void) {
    const char *env = getenv("FAIRQ_STRESS_ITERS");
    if (env != NULL && *env != '\0') return strtoull(env, NULL, 10);
    return STRESS_ITERS;
}

typedef struct {
    fairq_engine *engine;
    int id;
    uint64_t ops, queued, granted, expired, completed, requeued, cancelled, refused_after;
} stress_ctx;

static void *stress_thread(void *arg) {
    stress_ctx *ctx = arg;
    char name[16];
    uint64_t keys[4];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "t%d-%d", ctx->id, i);
        keys[i] = key_of(name);
    }
    uint64_t iters = stress_iters();
    for (uint64_t i = 0; i < iters; i++) {
        fairq_request r = request(keys[i % 4], i);
        r.cost = 1 + (uint32_t)(i % 3);
        fairq_enqueue_result er;
        int32_t s = fairq_enqueue(ctx->engine, &r, &er);
        ctx->ops++;
        assert(s == FAIRQ_QUEUED || s == FAIRQ_REFUSED);
        if (s == FAIRQ_QUEUED) {
            ctx->queued++;
            if (i % 13 == 0) { /* the client went away: may race with another thread's grant */
                int32_t c = fairq_cancel(ctx->engine, er.ticket);
                ctx->ops++;
                assert(c == FAIRQ_OK || c == FAIRQ_ERR_STALE_TICKET || c == FAIRQ_ERR_TICKET_STATE);
                if (c == FAIRQ_OK) ctx->cancelled++;
            }
        }
        fairq_grant g;
        s = fairq_next_grant(ctx->engine, &g);
        ctx->ops++;
        if (s == FAIRQ_EXPIRED) {
            assert(g.reason == FAIRQ_REASON_DEADLINE_EXCEEDED);
            ctx->expired++;
        } else if (s == FAIRQ_OK) {
            ctx->granted++;
            uint32_t outcome = i % 7 == 0 ? FAIRQ_OUTCOME_STILL_REFUSED : FAIRQ_OUTCOME_ADMITTED;
            fairq_completion done;
            int32_t c = fairq_complete(ctx->engine, g.ticket, outcome, 0, &done);
            ctx->ops++;
            /* A canceller may have ended the grant first. */
            assert(c == FAIRQ_OK || c == FAIRQ_REQUEUED || c == FAIRQ_REFUSED ||
                   c == FAIRQ_ERR_STALE_TICKET);
            if (c == FAIRQ_OK) ctx->completed++;
            if (c == FAIRQ_REQUEUED) ctx->requeued++;
            if (c == FAIRQ_REFUSED) ctx->refused_after++;
        } else {
            assert(s == FAIRQ_EMPTY || s == FAIRQ_AT_CAPACITY);
        }
    }
    return NULL;
}

static void test_stress_four_threads(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 3; /* fewer permits than threads: AT_CAPACITY happens */
    c.tenant_queue_capacity = 256;
    c.queue_capacity = 2048;
    fairq_engine *e = new_engine(c);
    fairq_set_weight(e, "t0-0", 5, 4);
    stress_ctx ctx[STRESS_THREADS];
    pthread_t threads[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        memset(&ctx[i], 0, sizeof ctx[i]);
        ctx[i].engine = e;
        ctx[i].id = i;
        assert(pthread_create(&threads[i], NULL, stress_thread, &ctx[i]) == 0);
    }
    stress_ctx total = {0};
    for (int i = 0; i < STRESS_THREADS; i++) {
        assert(pthread_join(threads[i], NULL) == 0);
        total.ops += ctx[i].ops;
        total.queued += ctx[i].queued;
        total.granted += ctx[i].granted;
        total.expired += ctx[i].expired;
        total.completed += ctx[i].completed;
        total.requeued += ctx[i].requeued;
        total.cancelled += ctx[i].cancelled;
        total.refused_after += ctx[i].refused_after;
    }
    /* Drain what is left: everything still queued gets granted (or expires) and completes. */
    for (int spins = 0;; spins++) {
        assert(spins < 10000000);
        fairq_grant g;
        int32_t s = fairq_next_grant(e, &g);
        total.ops++;
        if (s == FAIRQ_EMPTY) {
            if (stats_of(e).queued == 0) break;
            continue;
        }
        assert(s == FAIRQ_OK || s == FAIRQ_EXPIRED);
        if (s == FAIRQ_EXPIRED) {
            total.expired++;
            continue;
        }
        total.granted++;
        assert(fairq_complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, NULL) == FAIRQ_OK);
        total.completed++;
    }
    fairq_stats s = stats_of(e);
    assert(total.ops >= 2 * STRESS_THREADS * stress_iters());
    /* Conservation: every queued ticket ended exactly once, and the engine agrees with the
     * callers' own tallies. */
    assert(s.queued == 0 && s.in_flight == 0);
    assert(s.enqueued == total.queued);
    assert(s.granted == total.granted);
    assert(s.completed == total.completed);
    assert(s.requeued == total.requeued);
    assert(s.cancelled == total.cancelled);
    assert(s.expired == total.expired);
    assert(s.refused_after_wait == total.refused_after);
    assert(s.enqueued == s.completed + s.cancelled + s.expired + s.refused_after_wait);
    printf("# stress: %llu operations, %llu enqueued, %llu granted, %llu cancelled\n",
           (unsigned long long)total.ops, (unsigned long long)s.enqueued,
           (unsigned long long)s.granted, (unsigned long long)s.cancelled);
    fairq_engine_free(e);
}

int main(void) {
    RUN(test_version);
    RUN(test_status_and_reason_names);
    RUN(test_null_arguments);
    RUN(test_garbage_handles);
    RUN(test_config);
    RUN(test_disabled_not_queueable_no_tenant);
    RUN(test_bounds);
    RUN(test_wait_exceeds_budget_and_deadline);
    RUN(test_requeue_and_wakeup);
    RUN(test_stale_forged_and_double_completed_tickets);
    RUN(test_max_in_flight);
    RUN(test_weight_share_3_to_1);
    RUN(test_weight_errors_and_bulk_replace);
    RUN(test_resolve_tenant);
    RUN(test_metrics);
    RUN(test_stress_four_threads);
    printf("c_api: %d passed, 0 failed\n", passed);
    return 0;
}
