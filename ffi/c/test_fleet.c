/* The fairq_fleet_* C API test suite: assert.h only. Run by tests/c_fleet.rs (cargo test
 * --features fleet), compiled with -DFAIRQ_FLEET against a library built with feature fleet.
 * Environment: FAIRQ_REDIS_URL, a live redis-server; FAIRQ_DEAD_REDIS_URL, a port nothing
 * listens on. Prints one "ok" line per test and a closing summary. */
#define _POSIX_C_SOURCE 200809L
#undef NDEBUG
#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fairq.h"

#ifndef FAIRQ_FLEET
#error "compile with -DFAIRQ_FLEET (and link a library built with --features fleet)"
#endif

#define MS 1000000ull

static int passed = 0;

#define RUN(test)                         \
    do {                                  \
        test();                           \
        passed++;                         \
        printf("ok - %s\n", #test);       \
        fflush(stdout);                   \
    } while (0)

static const char *env_url(const char *name) {
    const char *url = getenv(name);
    if (url == NULL || url[0] == '\0') {
        fprintf(stderr, "%s is not set\n", name);
        exit(2);
    }
    return url;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* An enabled engine where tenant "acme" was served once, so a fleet has a tenant to track. */
static fairq_engine *served_engine(void) {
    fairq_config c;
    fairq_config_default(&c);
    c.enabled = true;
    fairq_engine *e = NULL;
    assert(fairq_engine_new(&c, &e) == FAIRQ_OK);
    uint64_t key = 0;
    assert(fairq_tenant_key("acme", 4, &key) == FAIRQ_OK);
    fairq_request r = {0};
    r.tenant_key = key;
    r.dimension = FAIRQ_DIM_USER;
    fairq_enqueue_result er;
    assert(fairq_enqueue(e, &r, &er) == FAIRQ_QUEUED);
    fairq_grant g;
    assert(fairq_next_grant(e, &g) == FAIRQ_OK);
    assert(fairq_complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, NULL) == FAIRQ_OK);
    return e;
}

static fairq_fleet_config config_for(const char *url) {
    fairq_fleet_config c;
    fairq_fleet_config_default(&c);
    c.url = url;
    c.fleet = "c-test";
    c.replica = "c-1";
    c.period_ms = 50; /* socket timeout 25 ms: a dead port fails fast */
    return c;
}

static fairq_fleet *new_fleet(fairq_engine *e, fairq_fleet_config c) {
    fairq_fleet *f = NULL;
    char err[128] = "";
    int32_t s = fairq_fleet_new(e, &c, &f, err, sizeof err);
    if (s != FAIRQ_OK) fprintf(stderr, "fairq_fleet_new: %s: %s\n", fairq_status_str(s), err);
    assert(s == FAIRQ_OK && f != NULL);
    return f;
}

static fairq_fleet_status status_of(const fairq_fleet *f) {
    fairq_fleet_status st;
    assert(fairq_fleet_get_status(f, &st) == FAIRQ_OK);
    return st;
}

/* ------------------------------------------------------------------ tests */

static void test_defaults_and_codes(void) {
    fairq_fleet_config c;
    memset(&c, 0xab, sizeof c);
    fairq_fleet_config_default(&c);
    assert(strcmp(c.url, "redis://127.0.0.1:6379/") == 0);
    assert(strcmp(c.fleet, "default") == 0 && strcmp(c.replica, "replica") == 0);
    assert(c.period_ms == 100 && c.top_k == 256 && c.epoch_ms == 300000);
    assert(c.smoothing == 0.7 && c.stale_ms == 1000);
    fairq_fleet_config_default(NULL); /* no-op */

    assert(FAIRQ_NOT_RUNNING == 8 && FAIRQ_ERR_BUSY == -10 && FAIRQ_ERR_FLEET_SYNC == -11);
    assert(FAIRQ_ERR_THREAD == -12 && 0 - FAIRQ_ERR_THREAD == 12);
    assert(strcmp(fairq_status_str(FAIRQ_NOT_RUNNING), "FAIRQ_NOT_RUNNING") == 0);
    assert(strcmp(fairq_status_str(FAIRQ_ERR_BUSY), "FAIRQ_ERR_BUSY") == 0);
    assert(strcmp(fairq_status_str(FAIRQ_ERR_FLEET_SYNC), "FAIRQ_ERR_FLEET_SYNC") == 0);
    assert(strcmp(fairq_status_str(FAIRQ_ERR_THREAD), "FAIRQ_ERR_THREAD") == 0);
}

/* A config the library must refuse with `want`, naming `field` in the message. */
static void refused(fairq_engine *e, fairq_fleet_config c, int32_t want, const char *field) {
    fairq_fleet *f = (fairq_fleet *)(uintptr_t)0x1; /* sentinel: must stay untouched */
    char err[256];
    memset(err, 0, sizeof err);
    int32_t s = fairq_fleet_new(e, &c, &f, err, sizeof err);
    if (s != want || strstr(err, field) == NULL)
        fprintf(stderr, "want %s naming %s, got %s: \"%s\"\n", fairq_status_str(want), field,
                fairq_status_str(s), err);
    assert(s == want);
    assert(strstr(err, field) != NULL);
    assert(f == (fairq_fleet *)(uintptr_t)0x1);
}

static void test_invalid_config(void) {
    fairq_engine *e = served_engine();
    const char *url = env_url("FAIRQ_REDIS_URL");
    fairq_fleet_config c = config_for(url);

    c.period_ms = 10;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "period_ms");
    c = config_for(url);
    c.period_ms = 501;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "period_ms");
    c = config_for(url);
    c.top_k = 0;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "top_k");
    c = config_for(url);
    c.top_k = 4097;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "top_k");
    c = config_for(url);
    c.epoch_ms = 999;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "epoch_ms");
    c = config_for(url);
    c.smoothing = 0.0;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "smoothing");
    c = config_for(url);
    c.stale_ms = 10;
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "stale_ms");
    c = config_for(url);
    c.fleet = "";
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "fleet and replica");
    c = config_for(url);
    c.url = "not a url";
    refused(e, c, FAIRQ_ERR_INVALID_CONFIG, "url:");
    c = config_for(url);
    c.url = NULL;
    refused(e, c, FAIRQ_ERR_NULL, "url is NULL");
    c = config_for(url);
    c.replica = NULL;
    refused(e, c, FAIRQ_ERR_NULL, "replica is NULL");
    c = config_for(url);
    c.fleet = "caf\xff";
    refused(e, c, FAIRQ_ERR_INVALID_ARGUMENT, "fleet is not UTF-8");

    /* The message buffer is optional, and truncated to its size. */
    fairq_fleet *f = NULL;
    c = config_for(url);
    c.period_ms = 10;
    assert(fairq_fleet_new(e, &c, &f, NULL, 0) == FAIRQ_ERR_INVALID_CONFIG);
    char tiny[4] = {'x', 'x', 'x', 'x'};
    assert(fairq_fleet_new(e, &c, &f, tiny, sizeof tiny) == FAIRQ_ERR_INVALID_CONFIG);
    assert(tiny[3] == '\0' && strlen(tiny) == 3);
    assert(f == NULL);
    fairq_engine_free(e);
}

static void test_null_and_bad_handles(void) {
    fairq_engine *e = served_engine();
    fairq_fleet_config c = config_for(env_url("FAIRQ_REDIS_URL"));
    fairq_fleet *f = NULL;
    fairq_fleet_status st;
    assert(fairq_fleet_new(NULL, &c, &f, NULL, 0) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_new(e, NULL, &f, NULL, 0) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_new(e, &c, NULL, NULL, 0) == FAIRQ_ERR_NULL);
    assert(f == NULL);
    assert(fairq_fleet_sync(NULL) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_sync_at(NULL, 1) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_start(NULL) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_stop(NULL) == FAIRQ_ERR_NULL);
    assert(fairq_fleet_get_status(NULL, &st) == FAIRQ_ERR_NULL);
    fairq_fleet_free(NULL); /* no-op */

    /* Readable, aligned memory that is not a fleet (nor an engine). */
    static uint64_t junk[512];
    for (size_t i = 0; i < 512; i++) junk[i] = 0xdeadbeefcafef00dull * (i + 1);
    fairq_fleet *bad = (fairq_fleet *)(void *)junk;
    assert(fairq_fleet_sync(bad) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_fleet_sync_at(bad, 1) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_fleet_start(bad) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_fleet_stop(bad) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_fleet_get_status(bad, &st) == FAIRQ_ERR_INVALID_HANDLE);
    fairq_fleet_free(bad); /* ignored, not freed */
    assert(fairq_fleet_new((fairq_engine *)(void *)junk, &c, &f, NULL, 0) ==
           FAIRQ_ERR_INVALID_HANDLE);

    f = new_fleet(e, c);
    assert(fairq_fleet_get_status(f, NULL) == FAIRQ_ERR_NULL);
    fairq_fleet_free(f);
    fairq_engine_free(e);
}

static void test_sync_once_against_live_redis(void) {
    fairq_engine *e = served_engine();
    fairq_fleet *f = new_fleet(e, config_for(env_url("FAIRQ_REDIS_URL")));
    fairq_fleet_status st = status_of(f);
    assert(!st.has_synced && st.syncs == 0 && st.pipelines == 0 && !st.running);
    assert(st.consecutive_failures == 0 && !st.degraded);

    uint64_t before = fairq_now_ns();
    assert(fairq_fleet_sync(f) == FAIRQ_OK);
    st = status_of(f);
    assert(st.has_synced && st.last_sync_ns >= before && st.last_sync_ns <= fairq_now_ns());
    assert(st.consecutive_failures == 0 && !st.degraded);
    assert(st.syncs == 1 && st.pipelines == 1 && st.tenants_tracked == 1);

    /* _at records the caller's time. */
    uint64_t at = fairq_now_ns() + 5 * MS;
    assert(fairq_fleet_sync_at(f, at) == FAIRQ_OK);
    st = status_of(f);
    assert(st.last_sync_ns == at && st.syncs == 2 && st.pipelines == 2);
    fairq_fleet_free(f);
    fairq_engine_free(e);
}

static void test_dead_redis_fails_and_degrades_after_three(void) {
    fairq_engine *e = served_engine();
    fairq_fleet *f = new_fleet(e, config_for(env_url("FAIRQ_DEAD_REDIS_URL")));
    uint64_t now = fairq_now_ns();
    for (uint32_t i = 1; i <= 4; i++) {
        assert(fairq_fleet_sync_at(f, now + i * 50 * MS) == FAIRQ_ERR_FLEET_SYNC);
        fairq_fleet_status st = status_of(f);
        assert(st.consecutive_failures == i && st.syncs == i);
        assert(!st.has_synced);
        assert(st.degraded == (i >= 3));
    }
    fairq_fleet_free(f);
    fairq_engine_free(e);
}

static void wait_for_syncs(const fairq_fleet *f, uint64_t syncs) {
    for (int i = 0; i < 500 && status_of(f).syncs < syncs; i++) sleep_ms(10);
    assert(status_of(f).syncs >= syncs);
}

static void test_start_stop(void) {
    fairq_engine *e = served_engine();
    fairq_fleet *f = new_fleet(e, config_for(env_url("FAIRQ_REDIS_URL")));
    assert(fairq_fleet_stop(f) == FAIRQ_NOT_RUNNING);
    assert(fairq_fleet_start(f) == FAIRQ_OK);
    assert(status_of(f).running);
    assert(fairq_fleet_start(f) == FAIRQ_ERR_BUSY);
    assert(fairq_fleet_sync(f) == FAIRQ_ERR_BUSY);
    assert(fairq_fleet_sync_at(f, 1) == FAIRQ_ERR_BUSY);
    wait_for_syncs(f, 3); /* period 50 ms */
    assert(fairq_fleet_stop(f) == FAIRQ_OK);
    assert(fairq_fleet_stop(f) == FAIRQ_NOT_RUNNING);
    fairq_fleet_status st = status_of(f);
    assert(!st.running && st.has_synced && st.consecutive_failures == 0);
    assert(st.syncs >= 3 && st.pipelines == st.syncs);

    /* Back to the caller: it syncs again, then starts the thread again. */
    assert(fairq_fleet_sync(f) == FAIRQ_OK);
    assert(status_of(f).syncs == st.syncs + 1);
    assert(fairq_fleet_start(f) == FAIRQ_OK);
    wait_for_syncs(f, st.syncs + 2);
    fairq_fleet_free(f); /* stops the thread */
    fairq_engine_free(e);
}

static void test_free_while_running_and_engine_freed_first(void) {
    /* The engine goes first: the fleet's reference keeps it alive, and syncing still works. */
    fairq_engine *e = served_engine();
    fairq_fleet *f = new_fleet(e, config_for(env_url("FAIRQ_REDIS_URL")));
    fairq_engine_free(e);
    assert(fairq_fleet_sync(f) == FAIRQ_OK);
    assert(status_of(f).tenants_tracked == 1);
    assert(fairq_fleet_start(f) == FAIRQ_OK);
    wait_for_syncs(f, 2);
    fairq_fleet_free(f); /* stops the thread, then releases the engine */

    /* Free at once after start, against the dead port (the thread may be mid-sync). */
    e = served_engine();
    f = new_fleet(e, config_for(env_url("FAIRQ_DEAD_REDIS_URL")));
    assert(fairq_fleet_start(f) == FAIRQ_OK);
    fairq_fleet_free(f);
    fairq_engine_free(e);
}

struct reader {
    const fairq_fleet *fleet;
    int reads;
};

static void *read_status(void *arg) {
    struct reader *r = arg;
    for (r->reads = 0; r->reads < 2000; r->reads++) {
        fairq_fleet_status st;
        assert(fairq_fleet_get_status(r->fleet, &st) == FAIRQ_OK);
        assert(st.consecutive_failures == 0);
    }
    return NULL;
}

/* Status reads from other threads while the caller syncs and starts and stops the thread. */
static void test_status_from_other_threads(void) {
    fairq_engine *e = served_engine();
    fairq_fleet *f = new_fleet(e, config_for(env_url("FAIRQ_REDIS_URL")));
    struct reader readers[2] = {{f, 0}, {f, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) assert(pthread_create(&threads[i], NULL, read_status, &readers[i]) == 0);
    for (int i = 0; i < 5; i++) {
        assert(fairq_fleet_sync(f) == FAIRQ_OK);
        assert(fairq_fleet_start(f) == FAIRQ_OK);
        assert(fairq_fleet_stop(f) == FAIRQ_OK);
    }
    for (int i = 0; i < 2; i++) {
        assert(pthread_join(threads[i], NULL) == 0);
        assert(readers[i].reads == 2000);
    }
    fairq_fleet_free(f);
    fairq_engine_free(e);
}

int main(void) {
    RUN(test_defaults_and_codes);
    RUN(test_invalid_config);
    RUN(test_null_and_bad_handles);
    RUN(test_sync_once_against_live_redis);
    RUN(test_dead_redis_fails_and_degrades_after_three);
    RUN(test_start_stop);
    RUN(test_free_while_running_and_engine_freed_first);
    RUN(test_status_from_other_threads);
    printf("c_fleet: %d passed, 0 failed\n", passed);
    return 0;
}
