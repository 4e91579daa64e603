/* fairq quick start: two tenants weighted 3:1 share a gateway's admission capacity.
 * Build (after ffi/c/install.sh): cc -std=c11 quickstart.c $(pkg-config --cflags --libs fairq) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fairq.h"

#define CHECK(call)                                                                  \
    do {                                                                             \
        int32_t s_ = (call);                                                         \
        if (s_ < 0) {                                                                \
            fprintf(stderr, "%s failed: %s\n", #call, fairq_status_str(s_));         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

int main(void) {
    fairq_config config;
    fairq_config_default(&config);
    config.enabled = true; /* off by default: a disabled engine refuses everything */
    config.max_in_flight = 4;

    fairq_engine *engine = NULL;
    CHECK(fairq_engine_new(&config, &engine));

    /* Tenants are known by a hash of their id; weights are looked up by the same key. */
    uint64_t acme, globex;
    CHECK(fairq_tenant_key("acme", strlen("acme"), &acme));
    CHECK(fairq_tenant_key("globex", strlen("globex"), &globex));
    CHECK(fairq_set_weight_key(engine, acme, 3));
    CHECK(fairq_set_weight_key(engine, globex, 1));

    /* The limiter refused 8 requests of each tenant: hold them instead of answering 429. */
    for (uint64_t i = 0; i < 16; i++) {
        fairq_request req = {0};
        req.tenant_key = i % 2 ? globex : acme;
        req.dimension = FAIRQ_DIM_USER;
        req.user_data = i; /* e.g. a pointer to the gateway's request */
        fairq_enqueue_result res;
        int32_t s = fairq_enqueue(engine, &req, &res);
        CHECK(s);
        if (s == FAIRQ_REFUSED) /* answer 429 with the reason and position */
            printf("refused %llu: %s\n", (unsigned long long)i, fairq_reason_str(res.reason));
    }

    /* Whenever capacity frees up: take grants until EMPTY or AT_CAPACITY. */
    int acme_grants = 0, globex_grants = 0;
    for (;;) {
        fairq_grant grant;
        int32_t s = fairq_next_grant(engine, &grant);
        CHECK(s);
        if (s == FAIRQ_EMPTY || s == FAIRQ_AT_CAPACITY) break;
        if (s == FAIRQ_EXPIRED) continue; /* answer 429: deadline_exceeded */
        if (grant.tenant_key == acme) acme_grants++; else globex_grants++;
        if (acme_grants + globex_grants == 8) /* while both wait, grants follow the weights */
            printf("first 8 grants, both waiting: acme %d, globex %d (weights 3:1)\n",
                   acme_grants, globex_grants);
        /* Re-check the limiter; it passes, so the request is admitted. */
        CHECK(fairq_complete(engine, grant.ticket, FAIRQ_OUTCOME_ADMITTED, 0, NULL));
    }
    printf("all granted: acme %d, globex %d\n", acme_grants, globex_grants);

    fairq_stats stats;
    CHECK(fairq_get_stats(engine, &stats));
    printf("enqueued %llu, granted %llu, completed %llu, queued %llu\n",
           (unsigned long long)stats.enqueued, (unsigned long long)stats.granted,
           (unsigned long long)stats.completed, (unsigned long long)stats.queued);

    size_t needed = 0;
    fairq_metrics_prometheus(engine, NULL, 0, &needed); /* size query */
    char *text = malloc(needed + 256);                   /* slack: metrics can grow */
    if (text && fairq_metrics_prometheus(engine, text, needed + 256, &needed) == FAIRQ_OK)
        fputs(text, stdout);
    free(text);

    fairq_engine_free(engine);
    return 0;
}
