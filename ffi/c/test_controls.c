/* The C API of the controls fairq_config cannot carry (fairq_engine_builder_*: tiers, the
 * starvation guard, the wait boost, the feedback controller, bulkhead pools, the indicators'
 * top K), and what reads them back. assert.h only. Run by tests/c_controls.rs (cargo test) and
 * under valgrind memcheck by ffi/c/valgrind.sh. One "ok" line per test and a closing summary. */
#undef NDEBUG
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fairq.h"

#define MS 1000000ull
#define S (1000 * MS)
#define T0 (1000 * MS) /* virtual time origin for the _at calls */

static int passed = 0;

#define RUN(test)                         \
    do {                                  \
        test();                           \
        passed++;                         \
        printf("ok - %s\n", #test);       \
        fflush(stdout);                   \
    } while (0)

#define STR(s) (s), strlen(s)

static fairq_config enabled_config(void) {
    fairq_config c;
    fairq_config_default(&c);
    c.enabled = true;
    c.max_wait_ms = 86400000; /* a day: the virtual-time runs below never hit the budget */
    return c;
}

static fairq_engine_builder *new_builder(fairq_config c) {
    fairq_engine_builder *b = NULL;
    assert(fairq_engine_builder_new(&c, &b, NULL, 0) == FAIRQ_OK);
    assert(b != NULL);
    return b;
}

static fairq_engine *build(const fairq_engine_builder *b) {
    fairq_engine *e = NULL;
    assert(fairq_engine_builder_build(b, &e) == FAIRQ_OK);
    assert(e != NULL);
    return e;
}

static uint64_t key_of(const char *raw) {
    uint64_t k = 0;
    assert(fairq_tenant_key(raw, strlen(raw), &k) == FAIRQ_OK);
    return k;
}

static fairq_request request(uint64_t key, uint64_t user_data) {
    fairq_request r = {0};
    r.tenant_key = key;
    r.dimension = FAIRQ_DIM_USER;
    r.user_data = user_data;
    return r;
}

static uint64_t enqueue(fairq_engine *e, uint64_t key, uint64_t user_data, uint64_t now) {
    fairq_request r = request(key, user_data);
    fairq_enqueue_result res;
    assert(fairq_enqueue_at(e, &r, now, &res) == FAIRQ_QUEUED);
    return res.ticket;
}

static uint64_t enqueue_to(fairq_engine *e, uint64_t key, uint32_t downstream, uint64_t now) {
    fairq_request r = request(key, downstream);
    fairq_enqueue_result res;
    assert(fairq_enqueue_downstream_at(e, &r, downstream, now, &res) == FAIRQ_QUEUED);
    return res.ticket;
}

static fairq_grant grant(fairq_engine *e, uint64_t now) {
    fairq_grant g;
    assert(fairq_next_grant_at(e, now, &g) == FAIRQ_OK);
    return g;
}

static void complete(fairq_engine *e, uint64_t ticket, uint64_t now) {
    assert(fairq_complete_at(e, ticket, FAIRQ_OUTCOME_ADMITTED, 0, now, NULL) == FAIRQ_OK);
}

static fairq_indicators indicators(fairq_engine *e, uint64_t key, uint64_t now) {
    fairq_indicators ind;
    assert(fairq_tenant_indicators_at(e, key, now, &ind) == FAIRQ_OK);
    return ind;
}

static void assert_conserved(fairq_engine *e) {
    fairq_stats s;
    assert(fairq_get_stats(e, &s) == FAIRQ_OK);
    assert(s.enqueued == s.queued + s.in_flight + s.completed + s.cancelled + s.expired +
                             s.refused_after_wait);
}

/* The builder's message after a rejected setter. */
static const char *message(const fairq_engine_builder *b) {
    static char buf[512];
    size_t needed = 0;
    assert(fairq_engine_builder_message(b, buf, sizeof buf, &needed) == FAIRQ_OK);
    assert(needed == strlen(buf) + 1);
    return buf;
}

/* ------------------------------------------------------------------ the builder */

static void test_builder_life_cycle_and_errors(void) {
    fairq_config c = enabled_config();
    fairq_engine_builder *b = NULL;
    char msg[256] = "untouched";

    /* A bad base config is named, and nothing is written. */
    c.max_in_flight = 0;
    assert(fairq_engine_builder_new(&c, &b, msg, sizeof msg) == FAIRQ_ERR_INVALID_CONFIG);
    assert(b == NULL && strstr(msg, "max_in_flight") != NULL);
    c = enabled_config();
    assert(fairq_engine_builder_new(NULL, &b, NULL, 0) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_new(&c, NULL, NULL, 0) == FAIRQ_ERR_NULL);
    assert(b == NULL);
    fairq_engine_builder_free(NULL); /* no-op */

    /* NULL and foreign handles on every setter. */
    uint64_t garbage[64] = {0};
    fairq_engine_builder *bad = (fairq_engine_builder *)garbage;
    fairq_engine_builder *misaligned = (fairq_engine_builder *)((char *)garbage + 1);
    fairq_engine *e = NULL;
    assert(fairq_engine_builder_add_tier(NULL, STR("pro"), 4) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_add_tier(bad, STR("pro"), 4) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_engine_builder_add_tier(misaligned, STR("pro"), 4) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_engine_builder_set_starvation_guard(NULL, 30, 3) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_set_wait_boost(bad, 20000, 64) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_engine_builder_set_feedback(NULL, 300000, 50, 200) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_set_feedback_thresholds(bad, 90, 110, 100) ==
           FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_engine_builder_add_pool(NULL, 1, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_set_indicator_top_k(bad, 5) == FAIRQ_ERR_INVALID_HANDLE);
    assert(fairq_engine_builder_build(NULL, &e) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_build(bad, &e) == FAIRQ_ERR_INVALID_HANDLE && e == NULL);
    assert(fairq_engine_builder_message(NULL, msg, sizeof msg, NULL) == FAIRQ_ERR_NULL);
    fairq_engine_builder_free(bad); /* foreign memory: refused, nothing freed */

    b = new_builder(c);
    assert(fairq_engine_builder_build(b, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_add_tier(b, NULL, 3, 4) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_message(b, NULL, 8, NULL) == FAIRQ_ERR_NULL);
    assert(strcmp(message(b), "") == 0);

    /* A rejected setter names the field, changes nothing, and the next success clears it. */
    assert(fairq_engine_builder_set_starvation_guard(b, 30, 51) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.starvation_guard.min_share_percent") != NULL);
    assert(strstr(message(b), "0..=50") != NULL);
    size_t needed = 0;
    char tiny[4];
    assert(fairq_engine_builder_message(b, tiny, sizeof tiny, &needed) == FAIRQ_OK);
    assert(strlen(tiny) == 3 && needed > sizeof tiny); /* truncated, terminated */
    assert(fairq_engine_builder_set_wait_boost(b, 999, 64) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.wait_boost.after_ms") != NULL);
    assert(fairq_engine_builder_set_wait_boost(b, 1000, 0) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.wait_boost.max_boosted") != NULL);
    assert(fairq_engine_builder_set_feedback(b, 59999, 50, 200) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.feedback.period_ms") != NULL);
    assert(fairq_engine_builder_set_feedback(b, 60000, 9, 200) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.feedback.floor_percent") != NULL);
    assert(fairq_engine_builder_set_feedback(b, 60000, 50, 1001) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.feedback.ceiling_percent") != NULL);
    assert(fairq_engine_builder_set_feedback_thresholds(b, 90, 110, 100) ==
           FAIRQ_ERR_INVALID_CONFIG); /* the controller is off */
    assert(strstr(message(b), "policy.feedback") != NULL);
    assert(fairq_engine_builder_set_indicator_top_k(b, 1001) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "indicator_top_k") != NULL);
    uint32_t pool = 77;
    assert(fairq_engine_builder_add_pool(b, c.max_in_flight + 1, &pool) ==
           FAIRQ_ERR_INVALID_CONFIG);
    assert(pool == 77 && strstr(message(b), "downstream_max_in_flight") != NULL);
    assert(fairq_engine_builder_add_pool(b, 0, &pool) == FAIRQ_ERR_INVALID_CONFIG);
    assert(fairq_engine_builder_set_indicator_top_k(b, 3) == FAIRQ_OK);
    assert(strcmp(message(b), "") == 0);

    /* The rejected setters left every control off: the built engine has no pool, no tier. */
    e = build(b);
    uint32_t count = 9, w = 0;
    assert(fairq_pool_count(e, &count) == FAIRQ_OK && count == 0);
    assert(fairq_tier_weight(e, STR("pro"), &w) == FAIRQ_NOT_FOUND && w == 0);
    /* One builder builds any number of engines; freeing it leaves them working. */
    fairq_engine *e2 = build(b);
    fairq_engine_builder_free(b);
    uint64_t k = key_of("t");
    enqueue(e2, k, 1, T0);
    fairq_grant g = grant(e2, T0);
    complete(e2, g.ticket, T0);
    assert_conserved(e2);
    fairq_engine_free(e2);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ tiers */

static void test_tiers_name_weights_and_change_the_split(void) {
    fairq_engine_builder *b = new_builder(enabled_config());
    assert(fairq_engine_builder_add_tier(b, STR("enterprise"), 8) == FAIRQ_OK);
    assert(fairq_engine_builder_add_tier(b, STR("Pro"), 3) == FAIRQ_OK);
    assert(fairq_engine_builder_add_tier(b, STR("free"), 1) == FAIRQ_OK);
    /* Duplicate (case-insensitive), bad names, bad weights. */
    assert(fairq_engine_builder_add_tier(b, STR("PRO"), 2) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "duplicate tier") != NULL);
    assert(fairq_engine_builder_add_tier(b, STR("has space"), 2) == FAIRQ_ERR_INVALID_CONFIG);
    assert(fairq_engine_builder_add_tier(b, "", 0, 2) == FAIRQ_ERR_INVALID_CONFIG);
    assert(fairq_engine_builder_add_tier(b, STR("abcdefghijklmnopqrstuvwxyz0123456"), 2) ==
           FAIRQ_ERR_INVALID_CONFIG); /* 33 bytes */
    assert(fairq_engine_builder_add_tier(b, "\xff\xfe", 2, 2) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "UTF-8") != NULL);
    assert(fairq_engine_builder_add_tier(b, STR("zero"), 0) == FAIRQ_ERR_INVALID_CONFIG);
    assert(fairq_engine_builder_add_tier(b, STR("huge"), 10001) == FAIRQ_ERR_INVALID_CONFIG);
    /* Weights 8, 3, 1 and the default 1 use 3 of the 8 weight classes: 5 more fit, not 6. */
    const char *names[] = {"t2", "t4", "t5", "t6", "t7", "t9"};
    for (int i = 0; i < 5; i++)
        assert(fairq_engine_builder_add_tier(b, names[i], 2, (uint32_t)(i == 0 ? 2 : i + 3)) ==
               FAIRQ_OK);
    assert(fairq_engine_builder_add_tier(b, names[5], 2, 9) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "max_weight_classes") != NULL);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    uint32_t w = 0;
    assert(fairq_tier_weight(e, STR("pro"), &w) == FAIRQ_OK && w == 3);
    assert(fairq_tier_weight(e, STR("ENTERPRISE"), &w) == FAIRQ_OK && w == 8);
    assert(fairq_tier_weight(e, STR("gold"), &w) == FAIRQ_NOT_FOUND && w == 8);
    assert(fairq_tier_weight(e, NULL, 3, &w) == FAIRQ_ERR_NULL);
    assert(fairq_tier_weight(e, STR("pro"), NULL) == FAIRQ_ERR_NULL);

    uint64_t acme = key_of("acme"), globex = key_of("globex");
    assert(fairq_set_tier(e, STR("acme"), STR("pro")) == FAIRQ_OK);
    assert(fairq_set_tier_key(e, globex, STR("FREE")) == FAIRQ_OK);
    assert(fairq_set_tier(e, STR("acme"), STR("gold")) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_tier(e, "", 0, STR("pro")) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_tier_key(e, 0, STR("pro")) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_tier_key(e, acme, "\xff", 1) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_set_tier(NULL, STR("acme"), STR("pro")) == FAIRQ_ERR_NULL);
    assert(fairq_set_tier(e, NULL, 4, STR("pro")) == FAIRQ_ERR_NULL);
    assert(fairq_weight_of(e, acme, &w) == FAIRQ_OK && w == 3);
    assert(fairq_weight_of(e, globex, &w) == FAIRQ_OK && w == 1);

    /* Both backlogged: every window of W = 4 grants splits 3:1 (pro:free). */
    for (uint64_t i = 0; i < 40; i++) enqueue(e, i % 2 ? globex : acme, i, T0);
    int a = 0;
    for (int i = 0; i < 20; i++) {
        fairq_grant g = grant(e, T0);
        a += g.tenant_key == acme;
        if (i % 4 == 3) assert(a == 3 * (i + 1) / 4);
        complete(e, g.ticket, T0);
    }
    assert(a == 15);
    /* A tier change at run time moves the split: acme to enterprise (8) against free (1),
     * from acme's next turn on (exactly 8:1 in every window after the first). */
    assert(fairq_set_tier_key(e, acme, STR("enterprise")) == FAIRQ_OK);
    for (uint64_t i = 0; i < 30; i++) enqueue(e, acme, i, T0);
    a = 0;
    for (int i = 0; i < 27; i++) {
        fairq_grant g = grant(e, T0);
        a += g.tenant_key == acme;
        complete(e, g.ticket, T0);
    }
    printf("# tiers: pro:free 15:5 in 20 grants; after the move to enterprise, acme %d of 27\n",
           a);
    assert(a >= 22 && a <= 24);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ starvation guard */

/* A weight-1 tenant among 100 weight-8 ones, all backlogged, one grant per ms. Returns the
 * weak tenant's grants out of `grants`. */
static uint64_t crowd(int guard, uint64_t grants, uint64_t *guard_metric) {
    fairq_config c = enabled_config();
    c.tenant_queue_capacity = 4;
    fairq_engine_builder *b = new_builder(c);
    if (guard) assert(fairq_engine_builder_set_starvation_guard(b, 30, 3) == FAIRQ_OK);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);
    uint64_t weak = key_of("weak"), now = T0, mine = 0;
    enqueue(e, weak, 0, now);
    enqueue(e, weak, 0, now);
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof name, "big%d", i);
        uint64_t k = key_of(name);
        assert(fairq_set_weight_key(e, k, 8) == FAIRQ_OK);
        enqueue(e, k, 0, now);
        enqueue(e, k, 0, now);
    }
    for (uint64_t i = 0; i < grants; i++) {
        now += MS;
        fairq_grant g = grant(e, now);
        mine += g.tenant_key == weak;
        complete(e, g.ticket, now);
        enqueue(e, g.tenant_key, 0, now);
    }
    if (guard_metric) {
        size_t needed = 0;
        fairq_metrics_prometheus(e, NULL, 0, &needed);
        char *text = malloc(needed + 4096);
        assert(text && fairq_metrics_prometheus(e, text, needed + 4096, &needed) == FAIRQ_OK);
        const char *line = strstr(text, "rate_limit_fair_queue_guard_grants_total{");
        assert(line != NULL);
        *guard_metric = strtoull(strchr(line, '}') + 2, NULL, 10);
        free(text);
    }
    assert_conserved(e);
    fairq_engine_free(e);
    return mine;
}

static void test_starvation_guard_gives_a_share_floor(void) {
    const uint64_t grants = 20000;
    uint64_t without = crowd(0, grants, NULL), guard_grants = 0;
    uint64_t with = crowd(1, grants, &guard_grants);
    /* By weight it gets 1/801 of the grants (about 25); the guard's 3 % floor is 600. */
    printf("# starvation guard: weak tenant %llu of %llu grants without, %llu with (%llu by "
           "the guard)\n",
           (unsigned long long)without, (unsigned long long)grants, (unsigned long long)with,
           (unsigned long long)guard_grants);
    assert(without <= 40);
    assert(with * 100 >= 3 * grants && with * 100 <= 4 * grants);
    assert(guard_grants > 0 && guard_grants <= with);
}

/* ------------------------------------------------------------------ wait boost and tick */

static void test_wait_boost_starts_on_tick(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 1;
    fairq_engine_builder *b = new_builder(c);
    assert(fairq_engine_builder_set_wait_boost(b, 1000, 2) == FAIRQ_OK);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    uint64_t holder = key_of("holder");
    enqueue(e, holder, 0, T0);
    fairq_grant held = grant(e, T0); /* the only permit: nobody else is served */
    uint64_t w[3];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = key_of(name);
        enqueue(e, w[i], (uint64_t)i, T0);
    }
    fairq_tick_report r;
    memset(&r, 0xab, sizeof r);
    assert(fairq_tick_at(e, T0 + S / 2, &r) == FAIRQ_OK);
    assert(r.boosts_started == 0 && r.feedback_ran == 0); /* under the threshold */
    assert(fairq_tick_at(e, T0 + 2 * S, &r) == FAIRQ_OK);
    assert(r.boosts_started == 2); /* capped at max_boosted */
    assert(fairq_tick_at(e, T0 + 3 * S, NULL) == FAIRQ_OK);
    int boosted = 0;
    for (int i = 0; i < 3; i++) boosted += indicators(e, w[i], T0 + 3 * S).boosted;
    assert(boosted == 2);

    /* Served, a boost ends. */
    complete(e, held.ticket, T0 + 3 * S);
    fairq_grant g = grant(e, T0 + 3 * S);
    assert(indicators(e, g.tenant_key, T0 + 3 * S).boosted == 0);
    complete(e, g.ticket, T0 + 3 * S);
    size_t needed = 0;
    fairq_metrics_prometheus(e, NULL, 0, &needed);
    char *text = malloc(needed + 1024);
    assert(text && fairq_metrics_prometheus(e, text, needed + 1024, &needed) == FAIRQ_OK);
    assert(strstr(text, "rate_limit_fair_queue_boosted_tenants{") != NULL);
    free(text);
    assert(fairq_tick_at(NULL, T0, &r) == FAIRQ_ERR_NULL);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ feedback controller */

static void test_feedback_nudges_weights_within_floor_and_ceiling(void) {
    fairq_config c = enabled_config();
    fairq_engine_builder *b = new_builder(c);
    assert(fairq_engine_builder_set_feedback(b, 60000, 50, 200) == FAIRQ_OK);
    assert(fairq_engine_builder_set_feedback_thresholds(b, 90, 110, 100) == FAIRQ_OK);
    assert(fairq_engine_builder_set_feedback_thresholds(b, 9, 110, 100) ==
           FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "policy.feedback.low_ratio_percent") != NULL);
    /* The controller reads the indicators: they cannot be off with it on. */
    assert(fairq_engine_builder_set_indicators(b, false) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "indicators") != NULL);
    /* A guard of 50 % (a class is due after one grant of the others) hands b every other
     * grant, against its third by weight: b's fair-share ratio is about 1.5, a's 0.75. */
    assert(fairq_engine_builder_set_starvation_guard(b, 1, 50) == FAIRQ_OK);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    /* a weighs 4, b 2. One step a period, within [50 %, 200 %] of each weight. */
    uint64_t a = key_of("a"), bb = key_of("b");
    for (int i = 0; i < 2; i++) {
        assert(fairq_set_weight_key(e, i ? bb : a, i ? 2 : 4) == FAIRQ_OK);
        enqueue(e, i ? bb : a, 0, 0);
        enqueue(e, i ? bb : a, 0, 0);
    }
    uint32_t ea = 4, eb = 2;
    int runs = 0;
    for (uint64_t step = 1; step <= 12 * 600; step++) {
        uint64_t now = step * 100 * MS;
        fairq_tick_report r;
        assert(fairq_tick_at(e, now, &r) == FAIRQ_OK);
        if (r.feedback_ran) {
            uint32_t na = indicators(e, a, now).effective_weight;
            uint32_t nb = indicators(e, bb, now).effective_weight;
            assert(r.weights_raised + r.weights_lowered <= 2);
            assert((na > ea ? na - ea : ea - na) <= 1 && (nb > eb ? nb - eb : eb - nb) <= 1);
            assert(na >= 2 && na <= 8 && nb >= 1 && nb <= 4);
            if (runs++ == 0) assert(na == 5 && nb == 1); /* first period: a up, b down */
            ea = na;
            eb = nb;
        }
        fairq_grant g = grant(e, now);
        complete(e, g.ticket, now);
        enqueue(e, g.tenant_key, 0, now);
    }
    printf("# feedback: %d runs in 12 min, effective weights a %u, b %u (configured 4, 2)\n",
           runs, ea, eb);
    assert(runs >= 11 && runs <= 12);
    assert(ea == 7 && eb == 1); /* a's ratio is 1 at 7 against 1 */
    assert(indicators(e, a, 0).weight == 4); /* configured weight unchanged */
    assert(fairq_set_weight_key(e, a, 4) == FAIRQ_OK);
    assert(indicators(e, a, 0).effective_weight == 4); /* set_weight resets the nudge */
    assert(fairq_engine_builder_set_feedback(NULL, 0, 0, 0) == FAIRQ_ERR_NULL);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ bulkhead pools */

static void test_pools_keep_other_downstreams_flowing(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 8;
    fairq_engine_builder *b = new_builder(c);
    uint32_t slow = 9, fast = 9;
    assert(fairq_engine_builder_add_pool(b, 2, &slow) == FAIRQ_OK && slow == 0);
    assert(fairq_engine_builder_add_pool(b, 4, &fast) == FAIRQ_OK && fast == 1);
    assert(fairq_engine_builder_add_pool(b, 1, NULL) == FAIRQ_OK); /* index not wanted */
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    uint32_t count = 0;
    assert(fairq_pool_count(e, &count) == FAIRQ_OK && count == 3);
    fairq_pool_stats ps;
    memset(&ps, 0xab, sizeof ps);
    assert(fairq_pool_get_stats(e, 3, &ps) == FAIRQ_NOT_FOUND && ps.max_in_flight == 0xabababab);
    assert(fairq_pool_get_stats(e, 0, NULL) == FAIRQ_ERR_NULL);

    /* A downstream that names no pool is refused before anything happens. */
    fairq_request r = request(key_of("x"), 0);
    fairq_enqueue_result res;
    assert(fairq_enqueue_downstream_at(e, &r, 3, T0, &res) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_enqueue_downstream(e, NULL, 0, &res) == FAIRQ_ERR_NULL);
    assert(fairq_enqueue_downstream(e, &r, 0, NULL) == FAIRQ_ERR_NULL);
    fairq_stats st;
    assert(fairq_get_stats(e, &st) == FAIRQ_OK && st.enqueued == 0);

    /* The slow downstream's tenants hold its 2 permits and keep 6 more queued; the fast
     * downstream's tenant is served at once each time, never blocked behind them. */
    uint64_t s1 = key_of("slow-1"), s2 = key_of("slow-2"), f = key_of("fast");
    for (int i = 0; i < 4; i++) {
        enqueue_to(e, s1, slow, T0);
        enqueue_to(e, s2, slow, T0);
    }
    fairq_grant held[2];
    held[0] = grant(e, T0);
    held[1] = grant(e, T0);
    fairq_grant g;
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_EMPTY); /* pool 0 full: not ready */
    assert(fairq_pool_get_stats(e, slow, &ps) == FAIRQ_OK);
    assert(ps.in_flight == 2 && ps.max_in_flight == 2 && ps.blocked_tenants == 2 &&
           ps.blocks >= 2);
    for (int i = 0; i < 20; i++) {
        enqueue_to(e, f, fast, T0 + (uint64_t)i * MS);
        g = grant(e, T0 + (uint64_t)i * MS);
        assert(g.tenant_key == f);
        assert(fairq_pool_get_stats(e, fast, &ps) == FAIRQ_OK && ps.in_flight == 1);
        complete(e, g.ticket, T0 + (uint64_t)i * MS);
    }
    /* Freeing a slow permit wakes a blocked tenant. */
    complete(e, held[0].ticket, T0 + 30 * MS);
    g = grant(e, T0 + 30 * MS);
    assert(g.tenant_key == s1 || g.tenant_key == s2);
    assert(fairq_pool_get_stats(e, slow, &ps) == FAIRQ_OK && ps.in_flight == 2);
    complete(e, g.ticket, T0 + 31 * MS);
    complete(e, held[1].ticket, T0 + 31 * MS);
    int drained = 0;
    while (fairq_next_grant_at(e, T0 + 32 * MS, &g) == FAIRQ_OK) {
        complete(e, g.ticket, T0 + 32 * MS);
        drained++;
    }
    assert(drained == 5);
    assert(fairq_pool_get_stats(e, slow, &ps) == FAIRQ_OK && ps.in_flight == 0 &&
           ps.blocked_tenants == 0);

    size_t needed = 0;
    fairq_metrics_prometheus(e, NULL, 0, &needed);
    char *text = malloc(needed + 1024);
    assert(text && fairq_metrics_prometheus(e, text, needed + 1024, &needed) == FAIRQ_OK);
    assert(strstr(text, "rate_limit_fair_queue_downstream_blocks_total{") != NULL);
    free(text);
    assert_conserved(e);
    fairq_engine_free(e);

    /* Without pools, fairq_enqueue_downstream ignores downstream. */
    e = build(b = new_builder(enabled_config()));
    fairq_engine_builder_free(b);
    assert(fairq_enqueue_downstream_at(e, &r, 42, T0, &res) == FAIRQ_QUEUED);
    assert(fairq_pool_count(e, &count) == FAIRQ_OK && count == 0);
    assert(fairq_pool_get_stats(e, 0, &ps) == FAIRQ_NOT_FOUND);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ load shedding */

static void test_shedding_cuts_a_failing_pool_and_refuses_what_it_cannot_serve(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 8;
    fairq_engine_builder *b = new_builder(c);
    /* It works on pools: none yet. */
    assert(fairq_engine_builder_set_shedding(b, 2, 1000, 10) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "shedding") != NULL && strstr(message(b), "downstream") != NULL);
    assert(fairq_engine_builder_add_pool(b, 4, NULL) == FAIRQ_OK);
    assert(fairq_engine_builder_add_pool(b, 4, NULL) == FAIRQ_OK);
    assert(fairq_engine_builder_set_shedding(b, 101, 1000, 10) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "shedding.error_percent") != NULL);
    assert(fairq_engine_builder_set_shedding(b, 2, 50, 10) == FAIRQ_ERR_INVALID_CONFIG);
    assert(strstr(message(b), "shedding.window_ms") != NULL);
    assert(fairq_engine_builder_set_shedding(b, 2, 1000, 10) == FAIRQ_OK);
    assert(fairq_engine_builder_set_shedding(NULL, 2, 1000, 10) == FAIRQ_ERR_NULL);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    const uint64_t W = 1000 * MS;
    fairq_pool_shedding sh;
    memset(&sh, 0xab, sizeof sh);
    assert(fairq_pool_get_shedding(e, 0, &sh) == FAIRQ_OK);
    assert(sh.limit == 4 && sh.shedding == 0 && sh.cuts == 0 && isnan(sh.last_error_ratio));
    assert(fairq_pool_get_shedding(e, 2, &sh) == FAIRQ_NOT_FOUND);
    assert(fairq_pool_get_shedding(e, 0, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_report_downstream_at(e, 2, true, T0) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_report_downstream(NULL, 0, true) == FAIRQ_ERR_NULL);

    /* A window of 50 % errors (20 reports) on pool 0: judged at the next window's first
     * report, its limit is cut from 4 to 2. Pool 1 is untouched. */
    for (uint64_t i = 0; i < 20; i++)
        assert(fairq_report_downstream_at(e, 0, i % 2 == 0, T0 + i) == FAIRQ_OK);
    assert(fairq_report_downstream_at(e, 0, true, T0 + W) == FAIRQ_OK);
    assert(fairq_pool_get_shedding(e, 0, &sh) == FAIRQ_OK);
    assert(sh.limit == 2 && sh.shedding == 1 && sh.cuts == 1 && sh.last_error_ratio == 0.5);
    assert(sh.reports_ok == 11 && sh.reports_error == 10);
    assert(fairq_pool_get_shedding(e, 1, &sh) == FAIRQ_OK && sh.limit == 4 && sh.shedding == 0);

    /* Its 2 permits held and a tenant blocked on it: after 300 ms without an admission, a
     * request with a 200 ms budget is refused at once; pool 1 still queues one. */
    uint64_t now = T0 + W;
    fairq_grant held[2];
    enqueue_to(e, key_of("a"), 0, now);
    enqueue_to(e, key_of("a"), 0, now);
    enqueue_to(e, key_of("b"), 0, now);
    held[0] = grant(e, now);
    held[1] = grant(e, now);
    fairq_grant g;
    assert(fairq_next_grant_at(e, now, &g) == FAIRQ_EMPTY);
    fairq_request r = request(key_of("c"), 7);
    r.timeout_ns = 200 * MS;
    fairq_enqueue_result res;
    now += 300 * MS;
    assert(fairq_enqueue_downstream_at(e, &r, 0, now, &res) == FAIRQ_REFUSED);
    assert(res.reason == FAIRQ_REASON_DOWNSTREAM_SHEDDING && res.ticket == 0 && res.position == 0);
    assert(strcmp(fairq_reason_str(res.reason), "downstream_shedding") == 0);
    assert(fairq_enqueue_downstream_at(e, &r, 1, now, &res) == FAIRQ_QUEUED);
    fairq_stats st;
    assert(fairq_get_stats(e, &st) == FAIRQ_OK);
    assert(st.refused[FAIRQ_REASON_DOWNSTREAM_SHEDDING] == 1);

    size_t needed = 0;
    fairq_metrics_prometheus(e, NULL, 0, &needed);
    char *text = malloc(needed + 1024);
    assert(text && fairq_metrics_prometheus(e, text, needed + 1024, &needed) == FAIRQ_OK);
    assert(strstr(text, "rate_limit_fair_queue_downstream_shedding{tenant_dimension=\"user\","
                        "downstream=\"0\"} 1\n") != NULL);
    assert(strstr(text, "rate_limit_fair_queue_downstream_limit{tenant_dimension=\"user\","
                        "downstream=\"0\"} 2\n") != NULL);
    assert(strstr(text, "reason=\"downstream_shedding\"} 1\n") != NULL);
    free(text);
    for (int i = 0; i < 2; i++) complete(e, held[i].ticket, now);
    while (fairq_next_grant_at(e, now, &g) == FAIRQ_OK) complete(e, g.ticket, now);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* ------------------------------------------------------------------ indicators */

static void test_indicator_top_k_and_fairness(void) {
    fairq_engine_builder *b = new_builder(enabled_config());
    assert(fairq_engine_builder_set_indicator_top_k(b, 2) == FAIRQ_OK);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    fairq_fairness fz;
    assert(fairq_fairness_get_at(e, T0, &fz) == FAIRQ_OK);
    assert(fz.tenants == 0 && isnan(fz.fair_share_ratio_min) && isnan(fz.refusal_rate_max));

    /* Tenant i sends i + 1 requests; all served. */
    uint64_t keys[5];
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "k%d", i);
        keys[i] = key_of(name);
        for (int j = 0; j <= i; j++) enqueue(e, keys[i], 0, T0);
    }
    fairq_grant g;
    while (fairq_next_grant_at(e, T0 + MS, &g) == FAIRQ_OK) complete(e, g.ticket, T0 + MS);

    fairq_indicators top[4];
    size_t n = 99;
    assert(fairq_fairness_top_at(e, T0 + MS, top, 4, &n) == FAIRQ_OK);
    assert(n == 2); /* the engine's top K */
    assert(top[0].tenant_key == keys[4] && top[0].requests == 5);
    assert(top[1].tenant_key == keys[3] && top[1].requests == 4);
    assert(fairq_fairness_top_at(e, T0 + MS, top, 1, &n) == FAIRQ_OK && n == 1);
    assert(fairq_fairness_top_at(e, T0 + MS, NULL, 0, &n) == FAIRQ_OK && n == 0);
    assert(fairq_fairness_top_at(e, T0 + MS, NULL, 1, &n) == FAIRQ_ERR_NULL);
    assert(fairq_fairness_top_at(e, T0 + MS, top, 1, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_fairness_top(e, top, 4, &n) == FAIRQ_OK && n == 2);

    assert(fairq_fairness_get_at(e, T0 + MS, &fz) == FAIRQ_OK);
    assert(fz.tenants == 5);
    assert(fz.refusal_rate_min == 0.0 && fz.refusal_rate_max == 0.0);
    assert(fz.fair_share_ratio_min > 0.0 && fz.fair_share_ratio_max >= fz.fair_share_ratio_min);
    assert(fz.wait_p95_min_s >= 0.0 && fz.wait_p95_max_s >= fz.wait_p95_min_s);
    assert(fz.starvation_current_max_s == 0.0); /* nobody is waiting */
    assert(fairq_fairness_get(e, NULL) == FAIRQ_ERR_NULL);
    assert(fairq_fairness_get(NULL, &fz) == FAIRQ_ERR_NULL);

    /* The Prometheus text has per-tenant series for the top 2 only. */
    size_t needed = 0;
    fairq_metrics_prometheus(e, NULL, 0, &needed);
    char *text = malloc(needed + 1024);
    assert(text && fairq_metrics_prometheus(e, text, needed + 1024, &needed) == FAIRQ_OK);
    int series = 0;
    for (const char *p = text; (p = strstr(p, "rate_limit_fair_queue_tenant_requests_total{"));
         p++)
        series++;
    assert(series == 2);
    free(text);
    fairq_engine_free(e);
}

/* Seats: max_in_flight counts cost units; a request as costly as the limit runs alone. */
static void test_seats_count_cost_units(void) {
    fairq_config c = enabled_config();
    c.max_in_flight = 4;
    fairq_engine_builder *b = new_builder(c);
    assert(fairq_engine_builder_set_seats(NULL, true) == FAIRQ_ERR_NULL);
    assert(fairq_engine_builder_set_seats(b, true) == FAIRQ_OK);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);

    uint64_t k = key_of("wide");
    for (int i = 0; i < 2; i++) {
        fairq_request r = request(k, (uint64_t)i);
        r.cost = 2;
        fairq_enqueue_result res;
        assert(fairq_enqueue_at(e, &r, T0, &res) == FAIRQ_QUEUED);
    }
    fairq_request big = request(k, 9);
    big.cost = 10; /* above the limit: it will run alone */
    fairq_enqueue_result res;
    assert(fairq_enqueue_at(e, &big, T0, &res) == FAIRQ_QUEUED);
    fairq_grant g1 = grant(e, T0), g2 = grant(e, T0);
    assert(g1.cost == 2 && g2.cost == 2);
    fairq_grant g;
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_AT_CAPACITY);
    fairq_stats st;
    /* in_flight counts grants (two, holding all 4 seats) */
    assert(fairq_get_stats(e, &st) == FAIRQ_OK && st.in_flight == 2 && st.queued == 1);
    complete(e, g1.ticket, T0);
    assert(fairq_next_grant_at(e, T0, &g) == FAIRQ_AT_CAPACITY); /* 2 seats out */
    complete(e, g2.ticket, T0);
    g = grant(e, T0);
    assert(g.user_data == 9 && g.cost == 10);
    assert(fairq_get_stats(e, &st) == FAIRQ_OK && st.in_flight == 1 && st.queued == 0);
    fairq_grant none;
    assert(fairq_next_grant_at(e, T0, &none) == FAIRQ_AT_CAPACITY); /* it runs alone */
    complete(e, g.ticket, T0);
    assert_conserved(e);
    fairq_engine_free(e);
}

/* The light-tenant lane (on by default): a tenant that comes back below its share is granted
 * at the next free permit, ahead of a backlogged tenant; off, it waits for its class's turn.
 * Returns whether the first grant after the light tenant's enqueue is its own. */
static bool light_tenant_served_first(int set_lane, bool on) {
    fairq_config c = enabled_config();
    c.max_in_flight = 1;
    fairq_engine_builder *b = new_builder(c);
    if (set_lane) {
        assert(fairq_engine_builder_set_light_lane(NULL, on) == FAIRQ_ERR_NULL);
        assert(fairq_engine_builder_set_light_lane(b, on) == FAIRQ_OK);
    }
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);
    uint64_t noisy = key_of("noisy"), light = key_of("light");
    assert(fairq_set_weight(e, STR("noisy"), 8) == FAIRQ_OK);
    for (int i = 0; i < 8; i++)
        enqueue(e, noisy, 1, T0);
    for (int i = 0; i < 20; i++) { /* the noisy tenant alone, kept backlogged */
        fairq_grant g = grant(e, T0);
        complete(e, g.ticket, T0);
        enqueue(e, noisy, 1, T0);
    }
    enqueue(e, light, 2, T0);
    fairq_grant g = grant(e, T0);
    complete(e, g.ticket, T0);
    assert_conserved(e);
    fairq_engine_free(e);
    return g.user_data == 2;
}

static void test_light_lane_serves_a_returning_tenant_first(void) {
    assert(light_tenant_served_first(0, false)); /* the default */
    assert(light_tenant_served_first(1, true));
    assert(!light_tenant_served_first(1, false));
}

/* ------------------------------------------------------------------ the status dump */

/* Whether every byte of `p[0..n]` is still `poison`. */
static bool untouched(const void *p, size_t n, unsigned char poison) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != poison) return false;
    return true;
}

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The JSON or text dump at `now` into a buffer of exactly the size it asks for (freed by the
 * caller), after checking that one byte less is refused and left untouched. */
static char *status_text(fairq_engine *e, uint32_t order, size_t k, uint32_t format,
                         uint64_t now) {
    size_t needed = 0;
    assert(fairq_queue_status_text_at(e, order, k, format, now, NULL, 0, &needed) ==
           FAIRQ_ERR_BUFFER_TOO_SMALL);
    assert(needed > 1);
    char *buf = malloc(needed);
    assert(buf);
    memset(buf, 0xA5, needed);
    size_t again = 0;
    assert(fairq_queue_status_text_at(e, order, k, format, now, buf, needed - 1, &again) ==
           FAIRQ_ERR_BUFFER_TOO_SMALL);
    assert(again == needed && untouched(buf, needed, 0xA5));
    assert(fairq_queue_status_text_at(e, order, k, format, now, buf, needed, &again) == FAIRQ_OK);
    assert(again == needed && strlen(buf) == needed - 1);
    return buf;
}

/* A flood from one tenant (300 requests, 4 grants out and held) and a victim with one request
 * queued 2 ms before `now`: the dump shows the flood first with its depth, the victim with its
 * short wait, both under the names their weights were set with; once the flood is drained and
 * completed the rows go. */
static void test_status_dump_shows_a_flood_and_its_victim(void) {
    fairq_config c = enabled_config();
    c.max_tenants = 64;
    c.tenant_queue_capacity = 512;
    c.queue_capacity = 4096;
    c.max_in_flight = 4;
    fairq_engine_builder *b = new_builder(c);
    fairq_engine *e = build(b);
    fairq_engine_builder_free(b);
    const uint64_t now = T0 + 500 * MS;
    uint64_t flood = key_of("flood"), victim = key_of("victim");
    assert(fairq_set_weight(e, STR("flood"), 1) == FAIRQ_OK);
    assert(fairq_set_weight(e, STR("victim"), 1) == FAIRQ_OK);
    for (int i = 0; i < 300; i++) enqueue(e, flood, (uint64_t)i, T0);
    uint64_t out[4];
    size_t held = 0;
    for (; held < 4; held++) out[held] = grant(e, T0).ticket;
    enqueue(e, victim, 1000, now - 2 * MS);

    fairq_status_totals totals;
    fairq_tenant_status rows[4];
    size_t count = 99;
    memset(rows, 0xA5, sizeof rows);
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_DEPTH, now, &totals, rows, 4, &count) ==
           FAIRQ_OK);
    assert(count == 2);
    assert(totals.enabled == 1 && totals.in_flight == 4 && totals.max_in_flight == 4);
    assert(totals.queued == 297 && totals.queue_capacity == 4096 && totals.busy_tenants == 2);
    assert(totals.seats == 0 && totals.seats_in_flight == 0 && totals.pools == 0);
    assert(totals.weight_classes == 1);
    const fairq_tenant_status *f = &rows[0], *v = &rows[1];
    assert(f->tenant_key == flood && strcmp(f->name, "flood") == 0 && f->tier[0] == '\0');
    assert(f->queued == 296 && f->in_flight == 4 && f->granted == 4);
    assert(f->oldest_wait_ns == 500 * MS); /* its head was queued at T0 */
    assert(f->weight == 1 && f->effective_weight == 1);
    assert(f->light == 0 && f->parked == 0 && f->parked_for_ns == 0);
    assert(v->tenant_key == victim && strcmp(v->name, "victim") == 0);
    assert(v->queued == 1 && v->in_flight == 0 && v->granted == 0);
    assert(v->oldest_wait_ns == 2 * MS);
    assert(v->light == 1 && v->parked == 0); /* one request, nothing served yet */
    assert(untouched(&rows[2], 2 * sizeof rows[0], 0xA5)); /* only `count` rows written */

    /* By oldest wait the flood's head comes first too; one row asked for, both counted. */
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_OLDEST_WAIT, now, &totals, rows, 1,
                                 &count) == FAIRQ_OK);
    assert(count == 1 && rows[0].tenant_key == flood && totals.busy_tenants == 2);
    /* Totals only. */
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_DEPTH, now, &totals, NULL, 0, &count) ==
           FAIRQ_OK);
    assert(count == 0 && totals.queued == 297);

    /* Errors write nothing. */
    count = 99;
    memset(&totals, 0xA5, sizeof totals);
    memset(rows, 0xA5, sizeof rows);
    assert(fairq_queue_status_at(e, 2, now, &totals, rows, 4, &count) ==
           FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_DEPTH, now, &totals, NULL, 1, &count) ==
           FAIRQ_ERR_NULL);
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_DEPTH, now, &totals, rows, 4, NULL) ==
           FAIRQ_ERR_NULL);
    assert(fairq_queue_status_at(NULL, FAIRQ_STATUS_BY_DEPTH, now, &totals, rows, 4, &count) ==
           FAIRQ_ERR_NULL);
    assert(count == 99 && untouched(&totals, sizeof totals, 0xA5));
    assert(untouched(rows, sizeof rows, 0xA5));

    /* The JSON: sized by a first call, the flood's row before the victim's. */
    char *json = status_text(e, FAIRQ_STATUS_BY_DEPTH, 10, FAIRQ_STATUS_JSON, now);
    assert(starts_with(json, "{\"enabled\":true,\"in_flight\":4,"));
    assert(strstr(json, "\"queued\":297,") && strstr(json, "\"order\":\"depth\""));
    const char *fj = strstr(json, "{\"tenant\":"), *vj = strstr(json, "\"name\":\"victim\"");
    assert(fj && vj && fj < vj);
    assert(starts_with(strstr(fj, "\"name\":"), "\"name\":\"flood\","));
    assert(strstr(fj, "\"queued\":296,\"in_flight\":4,\"granted\":4,"));
    assert(strstr(vj, "\"oldest_wait_ns\":2000000,\"state\":\"light\""));
    free(json);
    json = status_text(e, FAIRQ_STATUS_BY_OLDEST_WAIT, 1, FAIRQ_STATUS_JSON, now);
    assert(strstr(json, "\"order\":\"oldest_wait\"") && strstr(json, "\"name\":\"flood\""));
    assert(!strstr(json, "victim")); /* k = 1 */
    free(json);

    /* The text table: the totals, a header line, a line per tenant, flood first. */
    char *table = status_text(e, FAIRQ_STATUS_BY_DEPTH, 10, FAIRQ_STATUS_TEXT, now);
    assert(starts_with(table, "enabled true  in flight 4/4  queued 297/4096  busy tenants 2"));
    const char *header = strstr(table, "\ntenant ");
    const char *ft = strstr(table, " flood "), *vt = strstr(table, " victim ");
    assert(header && ft && vt && header < ft && ft < vt);
    assert(strstr(ft, "backlogged") && strstr(vt, "light"));
    int lines = 0;
    for (const char *p = table; *p; p++) lines += *p == '\n';
    assert(lines == 4);
    free(table);

    /* Unknown order or format, a NULL buffer with a length: nothing written. */
    char buf[64];
    size_t needed = 12345;
    memset(buf, 0xA5, sizeof buf);
    assert(fairq_queue_status_text_at(e, FAIRQ_STATUS_BY_DEPTH, 10, 2, now, buf, sizeof buf,
                                      &needed) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_queue_status_text_at(e, 2, 10, FAIRQ_STATUS_JSON, now, buf, sizeof buf,
                                      &needed) == FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_queue_status_text(e, 7, 10, FAIRQ_STATUS_TEXT, buf, sizeof buf, &needed) ==
           FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_queue_status_text(e, FAIRQ_STATUS_BY_DEPTH, 10, 9, buf, sizeof buf, &needed) ==
           FAIRQ_ERR_INVALID_ARGUMENT);
    assert(fairq_queue_status_text_at(e, FAIRQ_STATUS_BY_DEPTH, 10, FAIRQ_STATUS_JSON, now, NULL,
                                      8, &needed) == FAIRQ_ERR_NULL);
    assert(needed == 12345 && untouched(buf, sizeof buf, 0xA5));
    /* Too small: `needed` is set (the one out-parameter an error writes), `buf` is not. */
    assert(fairq_queue_status_text_at(e, FAIRQ_STATUS_BY_DEPTH, 10, FAIRQ_STATUS_JSON, now, buf,
                                      sizeof buf, &needed) == FAIRQ_ERR_BUFFER_TOO_SMALL);
    assert(needed > sizeof buf && untouched(buf, sizeof buf, 0xA5));

    /* Drain the flood (and the victim), completing every grant: the rows go. */
    for (;;) {
        fairq_grant g;
        int32_t s = fairq_next_grant_at(e, now, &g);
        if (s == FAIRQ_OK) {
            out[held++] = g.ticket;
        } else if (s == FAIRQ_AT_CAPACITY) {
            while (held > 0) complete(e, out[--held], now);
        } else {
            assert(s == FAIRQ_EMPTY);
            break;
        }
    }
    while (held > 0) complete(e, out[--held], now);
    assert(fairq_queue_status_at(e, FAIRQ_STATUS_BY_DEPTH, now, &totals, rows, 4, &count) ==
           FAIRQ_OK);
    assert(count == 0);
    assert(totals.busy_tenants == 0 && totals.queued == 0 && totals.in_flight == 0);
    json = status_text(e, FAIRQ_STATUS_BY_DEPTH, 10, FAIRQ_STATUS_JSON, now);
    assert(strstr(json, "\"busy_tenants\":0,") && strstr(json, "\"tenants\":[]}"));
    free(json);

    /* The wall-clock forms come last: one clock per engine (a dump at a later time than the
     * engine has seen moves its clock there, which would change the exact waits above). */
    fairq_request r = request(victim, 2000);
    fairq_enqueue_result res;
    assert(fairq_enqueue(e, &r, &res) == FAIRQ_QUEUED);
    assert(fairq_queue_status(e, FAIRQ_STATUS_BY_DEPTH, NULL, rows, 4, &count) == FAIRQ_OK);
    assert(count == 1 && rows[0].tenant_key == victim && rows[0].queued == 1);
    assert(strcmp(rows[0].name, "victim") == 0);
    /* Sized first, with slack for the wait's digits; `needed` may be NULL. */
    assert(fairq_queue_status_text(e, FAIRQ_STATUS_BY_OLDEST_WAIT, 10, FAIRQ_STATUS_TEXT, NULL, 0,
                                   &needed) == FAIRQ_ERR_BUFFER_TOO_SMALL);
    size_t room = needed + 64;
    char *wall = malloc(room);
    assert(wall);
    assert(fairq_queue_status_text(e, FAIRQ_STATUS_BY_OLDEST_WAIT, 10, FAIRQ_STATUS_TEXT, wall,
                                   room, NULL) == FAIRQ_OK);
    assert(starts_with(wall, "enabled true  in flight 0/4  queued 1/4096  busy tenants 1"));
    assert(strstr(wall, " victim "));
    free(wall);
    assert(fairq_cancel(e, res.ticket) == FAIRQ_OK);
    assert_conserved(e);
    fairq_engine_free(e);
}

int main(void) {
    RUN(test_builder_life_cycle_and_errors);
    RUN(test_tiers_name_weights_and_change_the_split);
    RUN(test_starvation_guard_gives_a_share_floor);
    RUN(test_wait_boost_starts_on_tick);
    RUN(test_feedback_nudges_weights_within_floor_and_ceiling);
    RUN(test_pools_keep_other_downstreams_flowing);
    RUN(test_shedding_cuts_a_failing_pool_and_refuses_what_it_cannot_serve);
    RUN(test_indicator_top_k_and_fairness);
    RUN(test_seats_count_cost_units);
    RUN(test_light_lane_serves_a_returning_tenant_first);
    RUN(test_status_dump_shows_a_flood_and_its_victim);
    printf("c_controls: %d passed, 0 failed\n", passed);
    return 0;
}
