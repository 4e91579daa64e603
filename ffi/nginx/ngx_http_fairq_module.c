/*
 * ngx_http_fairq_module: weighted fair admission of tenants in front of an upstream.
 *
 * Every request of a location with `fairq on` is handed to a fairq engine (include/fairq.h) as
 * a refused request of its tenant, in the precontent phase (after access checks, so an
 * authenticated identity such as $remote_user can name the tenant). The engine holds at most
 * `fairq_max_in_flight` permits:
 *
 * - enqueue, then next_grant at once returns this request: it proceeds untouched;
 * - otherwise the request is suspended (the phase handler returns NGX_AGAIN, the worker goes on
 *   serving others) until a running request finishes. Its pool cleanup calls fairq_complete,
 *   then takes the next grants ("pumps") and posts each granted request's event, which resumes
 *   the phases. A request admitted after waiting carries x-fair-queue-position,
 *   x-fair-queue-wait-ms and x-fair-queue-estimated-wait-ms;
 * - a per-request timer enforces the budget (min of fairq_max_wait and the engine's): on expiry
 *   the ticket is expired (fairq_expire) and the request answered 429 deadline_exceeded;
 * - a client that goes away while queued cancels its ticket (ngx_http_test_reading finalizes the
 *   request, and the pool cleanup cancels);
 * - a client that goes away after its grant landed but before the request resumed (both in one
 *   event-loop turn) abandons the grant: the cleanup completes the ticket as admitted, so the
 *   engine counts it once, as a grant, and the module counts it in abandoned_grants;
 * - refusals (on arrival or after waiting) answer 429 with Retry-After, x-fair-queue-position,
 *   x-fair-queue-wait-ms and a JSON body naming the tenant dimension, reason, position and wait.
 *
 * Scope: one engine per worker process, built in init_process. Fairness is exact inside a
 * worker and approximate across workers (as across replicas in seed 000); fairq_max_in_flight
 * is a per-worker bound. Everything here runs on the worker's event loop thread, so the ctx
 * pointers handed to the engine as user_data are only ever read back on that thread, and every
 * ctx cancels or completes its ticket before its pool goes away.
 *
 * Fleet mode (fairq_fleet_redis; compiled with -DFAIRQ_FLEET against a fleet build of the
 * library): each worker is one replica, <hostname>:<pid>, whose library-owned thread syncs
 * served cost with Redis every period. It starts in init_process (after fork) and stops in
 * exit_process; grants never wait for Redis.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <fairq.h>


#define NGX_HTTP_FAIRQ_NONE      0
#define NGX_HTTP_FAIRQ_QUEUED    1  /* holds a queued ticket; suspended */
#define NGX_HTTP_FAIRQ_GRANTED   2  /* granted, not resumed yet */
#define NGX_HTTP_FAIRQ_RUNNING   3  /* proceeding; holds a permit until its pool goes */
#define NGX_HTTP_FAIRQ_REFUSED   4  /* ticket ended (expired); 429 not sent yet */
#define NGX_HTTP_FAIRQ_DONE      5  /* nothing held */

#define NGX_HTTP_FAIRQ_NS_PER_MS  1000000ULL


typedef struct {
    ngx_str_t                   id;
    ngx_uint_t                  weight;
} ngx_http_fairq_weight_t;


typedef struct {
    ngx_flag_t                  used;
    ngx_uint_t                  tenant_dimension;   /* FAIRQ_TENANT_DIM_* */
    ngx_uint_t                  max_in_flight;
    ngx_uint_t                  queue_size;
    ngx_uint_t                  tenant_queue_size;
    ngx_uint_t                  max_tenants;
    ngx_uint_t                  default_weight;
    ngx_msec_t                  engine_max_wait;    /* largest fairq_max_wait anywhere */
    ngx_array_t                *weights;            /* ngx_http_fairq_weight_t */
    fairq_config                config;
    ngx_str_t                   fleet_redis;        /* NUL-terminated; empty: fleet off */
    ngx_str_t                   fleet_name;         /* NUL-terminated */
    ngx_msec_t                  fleet_period;
} ngx_http_fairq_main_conf_t;


typedef struct {
    ngx_flag_t                  enable;
    ngx_http_complex_value_t   *tenant;
    ngx_msec_t                  max_wait;
} ngx_http_fairq_loc_conf_t;


typedef struct {
    ngx_http_request_t         *request;
    ngx_event_t                 ev;          /* budget timer, and wake-up when granted */
    uint64_t                    ticket;
    uint64_t                    enqueued_ns;
    uint64_t                    estimated_wait_ns;
    uint64_t                    waited_ns;
    uint32_t                    position;
    uint32_t                    reason;
    unsigned                    state:3;
    unsigned                    suspended:1;
    unsigned                    after_wait:1;
} ngx_http_fairq_ctx_t;


/* Per worker process: the engine and what the module itself decided. */
typedef struct {
    fairq_engine               *engine;
#if defined(FAIRQ_FLEET)
    fairq_fleet                *fleet;
#endif
    const char                 *dimension;
    uint32_t                    request_dimension;  /* FAIRQ_DIM_* */
    ngx_event_t                 wakeup;
    uint64_t                    admitted_at_once;
    uint64_t                    admitted_after_wait;
    uint64_t                    refused[FAIRQ_REASON_SLOTS];
    uint64_t                    budget_timeouts;
    uint64_t                    client_cancels;
    uint64_t                    abandoned_grants;
    uint64_t                    wakeup_at;
} ngx_http_fairq_worker_t;


static ngx_http_fairq_worker_t  ngx_http_fairq_worker;


static ngx_int_t ngx_http_fairq_handler(ngx_http_request_t *r);
static void ngx_http_fairq_event_handler(ngx_event_t *ev);
static void ngx_http_fairq_cleanup(void *data);
static void ngx_http_fairq_pump(void);
static void ngx_http_fairq_wakeup_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_fairq_send_refusal(ngx_http_request_t *r,
    ngx_http_fairq_ctx_t *ctx);
static ngx_int_t ngx_http_fairq_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_fairq_metrics_handler(ngx_http_request_t *r);

static void *ngx_http_fairq_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_fairq_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_fairq_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_fairq_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_fairq_weight(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_check_range(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_fairq_fleet_str(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_fleet_period(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_fairq_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_fairq_init_process(ngx_cycle_t *cycle);
static void ngx_http_fairq_exit_process(ngx_cycle_t *cycle);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;


static ngx_conf_enum_t  ngx_http_fairq_dimensions[] = {
    { ngx_string("user"), FAIRQ_TENANT_DIM_USER },
    { ngx_string("api_key"), FAIRQ_TENANT_DIM_API_KEY },
    { ngx_string("team"), FAIRQ_TENANT_DIM_TEAM },
    { ngx_null_string, 0 }
};


/* Ranges from fairq.h (fairq_config); checked again by fairq_config_check. */
typedef struct {
    ngx_conf_post_handler_pt    post_handler;
    ngx_uint_t                  low;
    ngx_uint_t                  high;
} ngx_http_fairq_range_t;

static ngx_http_fairq_range_t  ngx_http_fairq_in_flight_range =
    { ngx_http_fairq_check_range, 1, 1048576 };
static ngx_http_fairq_range_t  ngx_http_fairq_queue_range =
    { ngx_http_fairq_check_range, 1, 16777216 };
static ngx_http_fairq_range_t  ngx_http_fairq_tenant_queue_range =
    { ngx_http_fairq_check_range, 1, 1048576 };
static ngx_http_fairq_range_t  ngx_http_fairq_tenants_range =
    { ngx_http_fairq_check_range, 1, 4194304 };
static ngx_http_fairq_range_t  ngx_http_fairq_weight_range =
    { ngx_http_fairq_check_range, 1, 10000 };
static ngx_http_fairq_range_t  ngx_http_fairq_wait_range =
    { ngx_http_fairq_check_range, 1, 86400000 };


static ngx_command_t  ngx_http_fairq_commands[] = {

    { ngx_string("fairq"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_fairq_loc_conf_t, enable),
      NULL },

    { ngx_string("fairq_tenant"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_fairq_loc_conf_t, tenant),
      NULL },

    { ngx_string("fairq_max_wait"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_fairq_loc_conf_t, max_wait),
      &ngx_http_fairq_wait_range },

    { ngx_string("fairq_tenant_dimension"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, tenant_dimension),
      &ngx_http_fairq_dimensions },

    { ngx_string("fairq_max_in_flight"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, max_in_flight),
      &ngx_http_fairq_in_flight_range },

    { ngx_string("fairq_queue_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, queue_size),
      &ngx_http_fairq_queue_range },

    { ngx_string("fairq_tenant_queue_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, tenant_queue_size),
      &ngx_http_fairq_tenant_queue_range },

    { ngx_string("fairq_max_tenants"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, max_tenants),
      &ngx_http_fairq_tenants_range },

    { ngx_string("fairq_default_weight"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, default_weight),
      &ngx_http_fairq_weight_range },

    { ngx_string("fairq_weight"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_fairq_weight,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_fleet_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_fairq_fleet_str,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, fleet_redis),
      NULL },

    { ngx_string("fairq_fleet_name"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_fairq_fleet_str,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, fleet_name),
      NULL },

    { ngx_string("fairq_fleet_period"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_fairq_fleet_period,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_fairq_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_fairq_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_fairq_init,                   /* postconfiguration */

    ngx_http_fairq_create_main_conf,       /* create main configuration */
    ngx_http_fairq_init_main_conf,         /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_fairq_create_loc_conf,        /* create location configuration */
    ngx_http_fairq_merge_loc_conf          /* merge location configuration */
};


ngx_module_t  ngx_http_fairq_module = {
    NGX_MODULE_V1,
    &ngx_http_fairq_module_ctx,            /* module context */
    ngx_http_fairq_commands,               /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_fairq_init_process,           /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_fairq_exit_process,           /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* ------------------------------------------------------------------ request flow */


/*
 * The request's ctx. An internal redirect clears r->ctx, so fall back to the pool cleanup that
 * owns the ctx (as the realip module does): a request is enqueued once, whatever locations it
 * passes through.
 */
static ngx_http_fairq_ctx_t *
ngx_http_fairq_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t    *cln;
    ngx_http_fairq_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_fairq_module);

    if (ctx == NULL && (r->internal || r->filter_finalize)) {
        for (cln = r->pool->cleanup; cln; cln = cln->next) {
            if (cln->handler == ngx_http_fairq_cleanup) {
                ctx = cln->data;
                ngx_http_set_ctx(r, ctx, ngx_http_fairq_module);
                break;
            }
        }
    }

    return ctx;
}


static ngx_int_t
ngx_http_fairq_handler(ngx_http_request_t *r)
{
    int32_t                      rc;
    ngx_str_t                    tenant;
    ngx_msec_t                   budget;
    fairq_request                req;
    ngx_pool_cleanup_t          *cln;
    fairq_enqueue_result         res;
    ngx_http_fairq_ctx_t        *ctx;
    ngx_http_fairq_loc_conf_t   *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_fairq_module);

    if (!flcf->enable || r != r->main || ngx_http_fairq_worker.engine == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_fairq_get_ctx(r);

    if (ctx != NULL) {
        switch (ctx->state) {

        case NGX_HTTP_FAIRQ_QUEUED:
            return NGX_AGAIN;               /* still waiting; not ours to resume */

        case NGX_HTTP_FAIRQ_GRANTED:
            ctx->state = NGX_HTTP_FAIRQ_RUNNING;
            return NGX_DECLINED;

        default:
            return NGX_DECLINED;            /* admitted (or answered) already */
        }
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_fairq_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->state = NGX_HTTP_FAIRQ_DONE;
    cln->handler = ngx_http_fairq_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_fairq_module);

    ngx_memzero(&req, sizeof(fairq_request));
    req.user_data = (uint64_t) (uintptr_t) ctx;
    req.dimension = ngx_http_fairq_worker.request_dimension;

    budget = flcf->max_wait;
    req.timeout_ns = (uint64_t) budget * NGX_HTTP_FAIRQ_NS_PER_MS;

    if (flcf->tenant) {
        if (ngx_http_complex_value(r, flcf->tenant, &tenant) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* Empty means no tenant: tenant_key 0 makes the engine refuse it no_tenant. */
        if (tenant.len
            && fairq_tenant_key((const char *) tenant.data, tenant.len,
                                &req.tenant_key) != FAIRQ_OK)
        {
            req.tenant_key = 0;
        }
    }

    rc = fairq_enqueue(ngx_http_fairq_worker.engine, &req, &res);

    if (rc == FAIRQ_REFUSED) {
        ctx->reason = res.reason;
        ctx->position = res.position;
        ngx_http_finalize_request(r, ngx_http_fairq_send_refusal(r, ctx));
        return NGX_DONE;
    }

    if (rc != FAIRQ_QUEUED) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "fairq_enqueue failed: %s", fairq_status_str(rc));
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->state = NGX_HTTP_FAIRQ_QUEUED;
    ctx->ticket = res.ticket;
    ctx->position = res.position;
    ctx->estimated_wait_ns = res.estimated_wait_ns;
    ctx->enqueued_ns = fairq_now_ns();

    ngx_http_fairq_pump();

    if (ctx->state == NGX_HTTP_FAIRQ_GRANTED) {
        /* A permit was free and this request's turn came at once: proceed untouched. */
        ctx->state = NGX_HTTP_FAIRQ_RUNNING;
        ngx_http_fairq_worker.admitted_at_once++;
        return NGX_DECLINED;
    }

    if (ctx->state == NGX_HTTP_FAIRQ_REFUSED) {
        ctx->state = NGX_HTTP_FAIRQ_DONE;
        ngx_http_finalize_request(r, ngx_http_fairq_send_refusal(r, ctx));
        return NGX_DONE;
    }

    /* Queued: suspend without blocking the worker, as limit_req's delay does. */

    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;     /* the cleanup cancels the ticket */
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "fairq queued, position %uD, estimated %uL ms, budget %M",
                   ctx->position, ctx->estimated_wait_ns / NGX_HTTP_FAIRQ_NS_PER_MS,
                   budget);

    ctx->ev.handler = ngx_http_fairq_event_handler;
    ctx->ev.data = r;
    ctx->ev.log = r->connection->log;
    ctx->suspended = 1;

    /* Just past the engine's deadline, so a free permit lets the engine report the expiry. */
    ngx_add_timer(&ctx->ev, budget + 2);

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/* A suspended request was granted, expired, or its budget timer fired. */
static void
ngx_http_fairq_event_handler(ngx_event_t *ev)
{
    int32_t                rc;
    ngx_connection_t      *c;
    ngx_http_request_t    *r;
    ngx_http_fairq_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;
    ctx = ngx_http_fairq_get_ctx(r);

    if (ctx == NULL) {
        return;
    }

    ngx_http_set_log_request(c->log, r);

    if (ev->timedout) {
        ev->timedout = 0;

        if (ctx->state == NGX_HTTP_FAIRQ_QUEUED) {
            /* Let the engine report the expiry itself if a permit is free. */
            ngx_http_fairq_pump();
        }

        if (ctx->state == NGX_HTTP_FAIRQ_QUEUED) {
            /*
             * All permits are busy, so next_grant answers AT_CAPACITY without looking at
             * deadlines: expire the ticket here (counted deadline_exceeded by the engine).
             */
            rc = fairq_expire(ngx_http_fairq_worker.engine, ctx->ticket, NULL);
            if (rc != FAIRQ_OK) {
                ngx_log_error(NGX_LOG_ERR, c->log, 0,
                              "fairq_expire on budget expiry: %s",
                              fairq_status_str(rc));
            }

            ngx_http_fairq_worker.budget_timeouts++;
            ctx->state = NGX_HTTP_FAIRQ_REFUSED;
            ctx->reason = FAIRQ_REASON_DEADLINE_EXCEEDED;
            ctx->waited_ns = fairq_now_ns() - ctx->enqueued_ns;
            ngx_http_fairq_pump();
        }
    }

    if (ctx->state == NGX_HTTP_FAIRQ_QUEUED) {
        return;
    }

    ctx->suspended = 0;

    if (ev->timer_set) {
        ngx_del_timer(ev);
    }

    if (ev->posted) {
        ngx_delete_posted_event(ev);
    }

    if (ctx->state == NGX_HTTP_FAIRQ_REFUSED) {
        ctx->state = NGX_HTTP_FAIRQ_DONE;
        r->read_event_handler = ngx_http_block_reading;
        ngx_http_finalize_request(r, ngx_http_fairq_send_refusal(r, ctx));

    } else if (ctx->state == NGX_HTTP_FAIRQ_GRANTED) {
        ctx->after_wait = 1;
        ngx_http_fairq_worker.admitted_after_wait++;
        r->read_event_handler = ngx_http_block_reading;
        r->write_event_handler = ngx_http_core_run_phases;
        ngx_http_core_run_phases(r);     /* re-enters the handler: GRANTED → RUNNING */
    }

    ngx_http_run_posted_requests(c);
}


/* The request's pool goes away: give back what its ctx holds, then hand out freed permits. */
static void
ngx_http_fairq_cleanup(void *data)
{
    ngx_http_fairq_ctx_t *ctx = data;

    int32_t  rc;

    if (ctx->ev.timer_set) {
        ngx_del_timer(&ctx->ev);
    }

    if (ctx->ev.posted) {
        ngx_delete_posted_event(&ctx->ev);
    }

    if (ngx_http_fairq_worker.engine == NULL) {
        return;
    }

    switch (ctx->state) {

    case NGX_HTTP_FAIRQ_QUEUED:
        /* The client went away (or the request failed) while queued. */
        rc = fairq_cancel(ngx_http_fairq_worker.engine, ctx->ticket);
        ngx_http_fairq_worker.client_cancels++;
        break;

    case NGX_HTTP_FAIRQ_GRANTED:
        /*
         * The grant landed, but the client went away in the same event-loop turn, before the
         * posted event resumed the request. The engine already counted the grant: end the
         * ticket as a grant (admitted, the permit goes back at once), not as a cancel, so the
         * request is counted once. The module counts it apart from the admitted ones.
         */
        rc = fairq_complete(ngx_http_fairq_worker.engine, ctx->ticket,
                            FAIRQ_OUTCOME_ADMITTED, 0, NULL);
        ngx_http_fairq_worker.abandoned_grants++;
        break;

    case NGX_HTTP_FAIRQ_RUNNING:
        rc = fairq_complete(ngx_http_fairq_worker.engine, ctx->ticket,
                            FAIRQ_OUTCOME_ADMITTED, 0, NULL);
        break;

    case NGX_HTTP_FAIRQ_REFUSED:
        /*
         * The engine ended the ticket (expired) and counted the refusal, but the client went
         * away before the 429 was sent: count the refusal here, once, as the 429 would have.
         */
        ngx_http_fairq_worker.refused[ctx->reason % FAIRQ_REASON_SLOTS]++;
        ctx->state = NGX_HTTP_FAIRQ_DONE;
        return;

    default:
        return;
    }

    ctx->state = NGX_HTTP_FAIRQ_DONE;

    if (rc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "fairq: ending ticket %uL: %s", ctx->ticket,
                      fairq_status_str(rc));
    }

    ngx_http_fairq_pump();
}


/*
 * Takes grants until the engine answers EMPTY or AT_CAPACITY, marks each request, and posts
 * the event of those that are suspended (the one whose handler is running right now is not
 * suspended yet and reads its state when the pump returns). Then re-arms the wake-up timer for
 * parked tenants.
 */
static void
ngx_http_fairq_pump(void)
{
    int32_t                rc;
    uint64_t               at, now;
    ngx_msec_t             delay;
    fairq_grant            g;
    ngx_http_fairq_ctx_t  *ctx;

    for ( ;; ) {
        rc = fairq_next_grant(ngx_http_fairq_worker.engine, &g);

        if (rc != FAIRQ_OK && rc != FAIRQ_EXPIRED) {
            if (rc < 0) {
                ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                              "fairq_next_grant failed: %s", fairq_status_str(rc));
            }
            break;
        }

        ctx = (ngx_http_fairq_ctx_t *) (uintptr_t) g.user_data;

        if (ctx->state != NGX_HTTP_FAIRQ_QUEUED || ctx->ticket != g.ticket) {
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                          "fairq: grant for a request that is not queued");
            if (rc == FAIRQ_OK) {
                (void) fairq_cancel(ngx_http_fairq_worker.engine, g.ticket);
            }
            continue;
        }

        ctx->position = g.position;
        ctx->waited_ns = g.waited_ns;

        if (rc == FAIRQ_OK) {
            ctx->state = NGX_HTTP_FAIRQ_GRANTED;
            ctx->estimated_wait_ns = g.estimated_wait_ns;

        } else {
            ctx->state = NGX_HTTP_FAIRQ_REFUSED;
            ctx->reason = g.reason;
        }

        if (ctx->suspended) {
            ngx_post_event(&ctx->ev, &ngx_posted_events);
        }
    }

    if (fairq_next_wakeup_ns(ngx_http_fairq_worker.engine, &at) != FAIRQ_OK) {
        return;
    }

    if (ngx_http_fairq_worker.wakeup.timer_set) {
        if (ngx_http_fairq_worker.wakeup_at == at) {
            return;
        }
        ngx_del_timer(&ngx_http_fairq_worker.wakeup);
    }

    now = fairq_now_ns();
    delay = at > now ? (ngx_msec_t) ((at - now + NGX_HTTP_FAIRQ_NS_PER_MS - 1)
                                     / NGX_HTTP_FAIRQ_NS_PER_MS)
                     : 1;
    ngx_http_fairq_worker.wakeup_at = at;
    ngx_add_timer(&ngx_http_fairq_worker.wakeup, delay);
}


static void
ngx_http_fairq_wakeup_handler(ngx_event_t *ev)
{
    if (ngx_http_fairq_worker.engine != NULL) {
        ngx_http_fairq_pump();
    }
}


/* ------------------------------------------------------------------ responses */


static ngx_int_t
ngx_http_fairq_add_header(ngx_http_request_t *r, char *key, u_char *value,
    size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value.data = value;
    h->value.len = len;

    return NGX_OK;
}


static ngx_int_t
ngx_http_fairq_add_number(ngx_http_request_t *r, char *key, uint64_t n)
{
    u_char  *p, *last;

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    last = ngx_sprintf(p, "%uL", n);

    return ngx_http_fairq_add_header(r, key, p, last - p);
}


/* Sends the headers already set and the body [pos, last) from the request pool. */
static ngx_int_t
ngx_http_fairq_send(ngx_http_request_t *r, u_char *pos, u_char *last)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = pos;
    b->last = last;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* 429 with Retry-After, the x-fair-queue-* headers and the JSON error body. */
static ngx_int_t
ngx_http_fairq_send_refusal(ngx_http_request_t *r, ngx_http_fairq_ctx_t *ctx)
{
    size_t        len;
    u_char       *body, *last;
    uint64_t      wait_ms, retry_s, hint_ns;
    ngx_int_t     rc;
    const char   *reason;

    ngx_http_fairq_worker.refused[ctx->reason % FAIRQ_REASON_SLOTS]++;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    reason = fairq_reason_str(ctx->reason);
    wait_ms = ctx->waited_ns / NGX_HTTP_FAIRQ_NS_PER_MS;

    /* Retry after the wait the queue expected (or served), at least a second. */
    hint_ns = ngx_max(ctx->estimated_wait_ns, ctx->waited_ns);
    retry_s = ngx_max((hint_ns + 999999999ULL) / 1000000000ULL, 1);

    len = sizeof("{\"error\": {\"type\": \"rate_limited\", \"message\": "
                 "\"fair queue refused the request: \", \"details\": "
                 "{\"fair_queue\": {\"tenant_dimension\": \"\", \"reason\": \"\", "
                 "\"position\": , \"wait_ms\": }}}}\n")
          + ngx_strlen(reason) * 2 + ngx_strlen(ngx_http_fairq_worker.dimension)
          + NGX_INT64_LEN * 2;

    body = ngx_pnalloc(r->pool, len);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_snprintf(body, len,
                        "{\"error\": {\"type\": \"rate_limited\", \"message\": "
                        "\"fair queue refused the request: %s\", \"details\": "
                        "{\"fair_queue\": {\"tenant_dimension\": \"%s\", "
                        "\"reason\": \"%s\", \"position\": %uD, "
                        "\"wait_ms\": %uL}}}}\n",
                        reason, ngx_http_fairq_worker.dimension, reason,
                        ctx->position, wait_ms);

    r->headers_out.status = NGX_HTTP_TOO_MANY_REQUESTS;
    r->headers_out.content_length_n = last - body;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (ngx_http_fairq_add_number(r, "Retry-After", retry_s) != NGX_OK
        || ngx_http_fairq_add_number(r, "x-fair-queue-position", ctx->position)
           != NGX_OK
        || ngx_http_fairq_add_number(r, "x-fair-queue-wait-ms", wait_ms) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_fairq_send(r, body, last);
}


/* A request admitted after waiting tells the client how long and where it waited. */
static ngx_int_t
ngx_http_fairq_header_filter(ngx_http_request_t *r)
{
    ngx_http_fairq_ctx_t  *ctx;

    if (r != r->main || ngx_http_fairq_worker.engine == NULL) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_fairq_get_ctx(r);

    if (ctx != NULL && ctx->after_wait && ctx->state == NGX_HTTP_FAIRQ_RUNNING) {
        ctx->after_wait = 0;   /* once, even if an error page sends headers again */

        if (ngx_http_fairq_add_number(r, "x-fair-queue-position", ctx->position)
            != NGX_OK
            || ngx_http_fairq_add_number(r, "x-fair-queue-wait-ms",
                                         ctx->waited_ns / NGX_HTTP_FAIRQ_NS_PER_MS)
               != NGX_OK
            || ngx_http_fairq_add_number(r, "x-fair-queue-estimated-wait-ms",
                                         ctx->estimated_wait_ns
                                         / NGX_HTTP_FAIRQ_NS_PER_MS)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_next_header_filter(r);
}


/* The engine's Prometheus text, then this worker's own counters. */
static ngx_int_t
ngx_http_fairq_metrics_handler(ngx_http_request_t *r)
{
    size_t        needed, cap, len, extra;
    u_char       *buf, *p, *end;
    int32_t       frc;
    uint32_t      reason;
    ngx_int_t     rc, tries;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_fairq_worker.engine == NULL) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    extra = 4096;
    needed = 0;
    buf = NULL;
    frc = fairq_metrics_prometheus(ngx_http_fairq_worker.engine, NULL, 0, &needed);

    for (tries = 0; tries < 3; tries++) {
        cap = needed + 1024;
        buf = ngx_pnalloc(r->pool, cap + extra);
        if (buf == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        frc = fairq_metrics_prometheus(ngx_http_fairq_worker.engine, (char *) buf,
                                       cap, &needed);
        if (frc != FAIRQ_ERR_BUFFER_TOO_SMALL) {
            break;
        }
    }

    if (frc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "fairq_metrics_prometheus failed: %s", fairq_status_str(frc));
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_strlen(buf);
    p = buf + len;
    end = buf + cap + extra;

    p = ngx_slprintf(p, end,
            "# HELP fairq_nginx_admitted_total Requests this nginx worker let through "
            "the fair queue.\n"
            "# TYPE fairq_nginx_admitted_total counter\n"
            "fairq_nginx_admitted_total{after_wait=\"false\"} %uL\n"
            "fairq_nginx_admitted_total{after_wait=\"true\"} %uL\n"
            "# HELP fairq_nginx_refused_total Requests this nginx worker refused, by "
            "reason: a 429, or none when the client went away first.\n"
            "# TYPE fairq_nginx_refused_total counter\n",
            ngx_http_fairq_worker.admitted_at_once,
            ngx_http_fairq_worker.admitted_after_wait);

    for (reason = 1; reason <= FAIRQ_REASON_CANCELLED; reason++) {
        p = ngx_slprintf(p, end, "fairq_nginx_refused_total{reason=\"%s\"} %uL\n",
                         fairq_reason_str(reason),
                         ngx_http_fairq_worker.refused[reason]);
    }

    p = ngx_slprintf(p, end,
            "# HELP fairq_nginx_budget_timeouts_total Queued requests whose budget "
            "timer ended them while every permit was busy (expired in the engine, "
            "answered deadline_exceeded).\n"
            "# TYPE fairq_nginx_budget_timeouts_total counter\n"
            "fairq_nginx_budget_timeouts_total %uL\n"
            "# HELP fairq_nginx_client_cancels_total Queued requests whose client went "
            "away before they were granted (the engine's cancelled).\n"
            "# TYPE fairq_nginx_client_cancels_total counter\n"
            "fairq_nginx_client_cancels_total %uL\n"
            "# HELP fairq_nginx_abandoned_grants_total Grants whose client went away before "
            "the request resumed (the engine counts them as grants).\n"
            "# TYPE fairq_nginx_abandoned_grants_total counter\n"
            "fairq_nginx_abandoned_grants_total %uL\n"
            "# HELP fairq_nginx_worker_info The nginx worker whose engine this is "
            "(one engine per worker).\n"
            "# TYPE fairq_nginx_worker_info gauge\n"
            "fairq_nginx_worker_info{pid=\"%P\"} 1\n",
            ngx_http_fairq_worker.budget_timeouts,
            ngx_http_fairq_worker.client_cancels,
            ngx_http_fairq_worker.abandoned_grants, ngx_pid);

#if defined(FAIRQ_FLEET)
    if (ngx_http_fairq_worker.fleet != NULL) {
        fairq_fleet_status  st;

        ngx_memzero(&st, sizeof(fairq_fleet_status));
        (void) fairq_fleet_get_status(ngx_http_fairq_worker.fleet, &st);

        p = ngx_slprintf(p, end,
                "# HELP fairq_nginx_fleet_syncs_total Fleet syncs this worker's thread "
                "attempted.\n"
                "# TYPE fairq_nginx_fleet_syncs_total counter\n"
                "fairq_nginx_fleet_syncs_total %uL\n"
                "# HELP fairq_nginx_fleet_consecutive_failures Failed fleet syncs since the "
                "last success.\n"
                "# TYPE fairq_nginx_fleet_consecutive_failures gauge\n"
                "fairq_nginx_fleet_consecutive_failures %uD\n"
                "# HELP fairq_nginx_fleet_synced 1 once a fleet sync has succeeded.\n"
                "# TYPE fairq_nginx_fleet_synced gauge\n"
                "fairq_nginx_fleet_synced %d\n"
                "# HELP fairq_nginx_fleet_degraded 1 while this worker runs on local "
                "fairness (Redis failing or stale).\n"
                "# TYPE fairq_nginx_fleet_degraded gauge\n"
                "fairq_nginx_fleet_degraded %d\n",
                st.syncs, st.consecutive_failures, st.has_synced ? 1 : 0,
                st.degraded ? 1 : 0);
    }
#endif

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = p - buf;
    ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    return ngx_http_fairq_send(r, buf, p);
}


/* ------------------------------------------------------------------ configuration */


static void *
ngx_http_fairq_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_fairq_main_conf_t  *fmcf;

    fmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_fairq_main_conf_t));
    if (fmcf == NULL) {
        return NULL;
    }

    fmcf->tenant_dimension = NGX_CONF_UNSET_UINT;
    fmcf->max_in_flight = NGX_CONF_UNSET_UINT;
    fmcf->queue_size = NGX_CONF_UNSET_UINT;
    fmcf->tenant_queue_size = NGX_CONF_UNSET_UINT;
    fmcf->max_tenants = NGX_CONF_UNSET_UINT;
    fmcf->default_weight = NGX_CONF_UNSET_UINT;
    fmcf->fleet_period = NGX_CONF_UNSET_MSEC;

    return fmcf;
}


/* Runs before the locations are merged: the defaults; the engine config is checked later. */
static char *
ngx_http_fairq_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    fairq_config  d;

    fairq_config_default(&d);

    ngx_conf_init_uint_value(fmcf->tenant_dimension, FAIRQ_TENANT_DIM_USER);
    ngx_conf_init_uint_value(fmcf->max_in_flight, d.max_in_flight);
    ngx_conf_init_uint_value(fmcf->queue_size, d.queue_capacity);
    ngx_conf_init_uint_value(fmcf->tenant_queue_size, d.tenant_queue_capacity);
    ngx_conf_init_uint_value(fmcf->max_tenants, d.max_tenants);
    ngx_conf_init_uint_value(fmcf->default_weight, d.default_weight);
    ngx_conf_init_msec_value(fmcf->fleet_period, 100);

    if (fmcf->fleet_name.data == NULL) {
        ngx_str_set(&fmcf->fleet_name, "nginx");     /* a literal: NUL-terminated */
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_fairq_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_fairq_loc_conf_t  *flcf;

    flcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_fairq_loc_conf_t));
    if (flcf == NULL) {
        return NULL;
    }

    /* flcf->tenant = NULL; */

    flcf->enable = NGX_CONF_UNSET;
    flcf->max_wait = NGX_CONF_UNSET_MSEC;

    return flcf;
}


static char *
ngx_http_fairq_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_fairq_loc_conf_t *prev = parent;
    ngx_http_fairq_loc_conf_t *conf = child;

    ngx_http_fairq_main_conf_t  *fmcf;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_msec_value(conf->max_wait, prev->max_wait, 30000);

    if (conf->tenant == NULL) {
        conf->tenant = prev->tenant;
    }

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);

    if (conf->enable) {
        fmcf->used = 1;

        if (conf->tenant == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"fairq on\" needs \"fairq_tenant\"");
            return NGX_CONF_ERROR;
        }
    }

    /* The engine's budget is the largest any location asks for; each request passes its
     * own location's as its timeout, so min(engine, location) is the location's. */
    if (conf->max_wait > fmcf->engine_max_wait) {
        fmcf->engine_max_wait = conf->max_wait;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_fairq_check_range(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_fairq_range_t *range = post;

    ngx_uint_t  *np = data;

    if (*np < range->low || *np > range->high) {
        return "is out of range";
    }

    return NGX_CONF_OK;
}


/* fairq_fleet_redis, fairq_fleet_name: a non-empty string, kept NUL-terminated. */
static char *
ngx_http_fairq_fleet_str(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t  *field, *value;

    field = (ngx_str_t *) ((char *) conf + cmd->offset);
    value = cf->args->elts;

#if !defined(FAIRQ_FLEET)
    if (field == &((ngx_http_fairq_main_conf_t *) conf)->fleet_redis) {
        return "needs a module built with fleet mode (build.sh with FAIRQ_FLEET=1)";
    }
#endif

    if (field->data != NULL) {
        return "is duplicate";
    }

    if (value[1].len == 0) {
        return "needs a non-empty value";
    }

    field->len = value[1].len;
    field->data = ngx_pnalloc(cf->pool, value[1].len + 1);
    if (field->data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(field->data, value[1].data, value[1].len);
    field->data[field->len] = '\0';

    return NGX_CONF_OK;
}


/* fairq_fleet_period: a bare number is ms (unlike nginx's time slots); "100ms" works too. */
static char *
ngx_http_fairq_fleet_period(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (fmcf->fleet_period != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);
    if (n == NGX_ERROR) {
        n = ngx_parse_time(&value[1], 0);
    }

    if (n == NGX_ERROR || n < 50 || n > 500) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "fairq_fleet_period \"%V\" is out of range (50..500 ms)",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    fmcf->fleet_period = (ngx_msec_t) n;

    return NGX_CONF_OK;
}


static char *
ngx_http_fairq_weight(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t                 n;
    ngx_str_t                *value;
    ngx_http_fairq_weight_t  *w;

    value = cf->args->elts;

    if (value[1].len == 0) {
        return "needs a non-empty identifier";
    }

    n = ngx_atoi(value[2].data, value[2].len);
    if (n == NGX_ERROR || n < 1 || n > 10000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid weight \"%V\" (1..10000)", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (fmcf->weights == NULL) {
        fmcf->weights = ngx_array_create(cf->pool, 4, sizeof(ngx_http_fairq_weight_t));
        if (fmcf->weights == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    w = ngx_array_push(fmcf->weights);
    if (w == NULL) {
        return NGX_CONF_ERROR;
    }

    w->id = value[1];
    w->weight = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


static char *
ngx_http_fairq_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t    *clcf;
    ngx_http_fairq_main_conf_t  *fmcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_fairq_metrics_handler;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);
    fmcf->used = 1;

    return NGX_CONF_OK;
}


/* After every location is merged: build the engine config and check it (nginx -t says why). */
static ngx_int_t
ngx_http_fairq_init(ngx_conf_t *cf)
{
    char                         msg[256];
    ngx_uint_t                   i, j, distinct;
    fairq_config                *c;
    ngx_http_handler_pt         *h;
    ngx_http_fairq_weight_t     *w;
    ngx_http_core_main_conf_t   *cmcf;
    ngx_http_fairq_main_conf_t  *fmcf;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);

    c = &fmcf->config;
    fairq_config_default(c);
    c->enabled = true;
    c->tenant_dimension = (uint32_t) fmcf->tenant_dimension;
    c->max_in_flight = (uint32_t) fmcf->max_in_flight;
    c->queue_capacity = (uint32_t) fmcf->queue_size;
    c->tenant_queue_capacity = (uint32_t) fmcf->tenant_queue_size;
    c->max_tenants = (uint32_t) fmcf->max_tenants;
    c->default_weight = (uint32_t) fmcf->default_weight;
    c->max_wait_ms = fmcf->engine_max_wait ? fmcf->engine_max_wait : 30000;

    /* Room for every distinct configured weight plus the default, and some run-time slack. */
    distinct = 1;
    w = fmcf->weights ? fmcf->weights->elts : NULL;
    for (i = 0; fmcf->weights && i < fmcf->weights->nelts; i++) {
        for (j = 0; j < i && w[j].weight != w[i].weight; j++) { /* void */ }
        if (j == i && w[i].weight != fmcf->default_weight) {
            distinct++;
        }
    }
    c->max_weight_classes = (uint32_t) ngx_min(ngx_max(distinct + 4, 8), 64);

    if (fmcf->used && fairq_config_check(c, msg, sizeof(msg)) != FAIRQ_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "fairq: invalid configuration: %s",
                           msg);
        return NGX_ERROR;
    }

    if (!fmcf->used) {
        return NGX_OK;
    }

#if defined(FAIRQ_FLEET)
    if (fmcf->fleet_redis.len) {
        /* nginx -t names a bad URL or name; _new does not connect, nothing runs. */
        int32_t               rc;
        fairq_config          ec;
        fairq_fleet          *fleet;
        fairq_engine         *engine;
        fairq_fleet_config    fc;

        fairq_fleet_config_default(&fc);
        fc.url = (const char *) fmcf->fleet_redis.data;
        fc.fleet = (const char *) fmcf->fleet_name.data;
        fc.replica = "nginx-t";
        fc.period_ms = fmcf->fleet_period;

        fairq_config_default(&ec);             /* a small engine, only for the check */
        ec.enabled = true;

        rc = fairq_engine_new(&ec, &engine);
        if (rc != FAIRQ_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "fairq_engine_new failed: %s",
                               fairq_status_str(rc));
            return NGX_ERROR;
        }

        msg[0] = '\0';
        fleet = NULL;
        rc = fairq_fleet_new(engine, &fc, &fleet, msg, sizeof(msg));
        fairq_fleet_free(fleet);
        fairq_engine_free(engine);

        if (rc != FAIRQ_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "fairq: invalid fleet configuration: "
                               "%s (%s)", msg, fairq_status_str(rc));
            return NGX_ERROR;
        }
    }
#endif

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_fairq_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_fairq_header_filter;

    return NGX_OK;
}


/* One engine per worker process. */
static ngx_int_t
ngx_http_fairq_init_process(ngx_cycle_t *cycle)
{
    int32_t                      rc;
    ngx_uint_t                   i;
    ngx_http_fairq_weight_t     *w;
    ngx_http_fairq_main_conf_t  *fmcf;

    ngx_memzero(&ngx_http_fairq_worker, sizeof(ngx_http_fairq_worker_t));

    fmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_fairq_module);
    if (fmcf == NULL || !fmcf->used) {
        return NGX_OK;
    }

    if (ngx_strncmp(fairq_version(), "0.", 2) != 0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "fairq: library %s does not match header %d.%d",
                      fairq_version(), FAIRQ_VERSION_MAJOR, FAIRQ_VERSION_MINOR);
        return NGX_ERROR;
    }

    rc = fairq_engine_new(&fmcf->config, &ngx_http_fairq_worker.engine);
    if (rc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "fairq_engine_new failed: %s", fairq_status_str(rc));
        ngx_http_fairq_worker.engine = NULL;
        return NGX_ERROR;
    }

    w = fmcf->weights ? fmcf->weights->elts : NULL;
    for (i = 0; fmcf->weights && i < fmcf->weights->nelts; i++) {
        rc = fairq_set_weight(ngx_http_fairq_worker.engine, (const char *) w[i].id.data,
                              w[i].id.len, (uint32_t) w[i].weight);
        if (rc != FAIRQ_OK) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                          "fairq_weight \"%V\" %ui: %s", &w[i].id, w[i].weight,
                          fairq_status_str(rc));
            return NGX_ERROR;
        }
    }

    /* FAIRQ_TENANT_DIM_{USER,API_KEY,TEAM} and FAIRQ_DIM_{USER,API_KEY,TEAM} share codes. */
    ngx_http_fairq_worker.request_dimension = fmcf->config.tenant_dimension;
    ngx_http_fairq_worker.dimension = fairq_dimension_str(fmcf->config.tenant_dimension);

    ngx_http_fairq_worker.wakeup.handler = ngx_http_fairq_wakeup_handler;
    ngx_http_fairq_worker.wakeup.log = cycle->log;
    ngx_http_fairq_worker.wakeup.data = &ngx_http_fairq_worker;
    ngx_http_fairq_worker.wakeup.cancelable = 1;

#if defined(FAIRQ_FLEET)
    if (fmcf->fleet_redis.len) {
        u_char              *replica;
        char                 err[256];
        fairq_fleet_config   fc;

        /* One replica per worker; a fleet failure leaves the worker on local fairness. */
        replica = ngx_pnalloc(cycle->pool, cycle->hostname.len + NGX_INT64_LEN + 2);
        if (replica == NULL) {
            return NGX_ERROR;
        }
        ngx_sprintf(replica, "%V:%P%Z", &cycle->hostname, ngx_pid);

        fairq_fleet_config_default(&fc);
        fc.url = (const char *) fmcf->fleet_redis.data;
        fc.fleet = (const char *) fmcf->fleet_name.data;
        fc.replica = (const char *) replica;
        fc.period_ms = fmcf->fleet_period;

        err[0] = '\0';
        rc = fairq_fleet_new(ngx_http_fairq_worker.engine, &fc,
                             &ngx_http_fairq_worker.fleet, err, sizeof(err));
        if (rc != FAIRQ_OK) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "fairq_fleet_new failed: %s (%s); fleet mode off in this worker",
                          err, fairq_status_str(rc));
            ngx_http_fairq_worker.fleet = NULL;
            return NGX_OK;
        }

        rc = fairq_fleet_start(ngx_http_fairq_worker.fleet);
        if (rc != FAIRQ_OK) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "fairq_fleet_start failed: %s; fleet mode off in this worker",
                          fairq_status_str(rc));
            fairq_fleet_free(ngx_http_fairq_worker.fleet);
            ngx_http_fairq_worker.fleet = NULL;
            return NGX_OK;
        }

        ngx_log_error(NGX_LOG_INFO, cycle->log, 0,
                      "fairq fleet \"%s\": replica \"%s\", period %M ms",
                      fc.fleet, replica, fmcf->fleet_period);
    }
#endif

    return NGX_OK;
}


static void
ngx_http_fairq_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_http_fairq_worker.wakeup.timer_set) {
        ngx_del_timer(&ngx_http_fairq_worker.wakeup);
    }

#if defined(FAIRQ_FLEET)
    fairq_fleet_free(ngx_http_fairq_worker.fleet);     /* stops the sync thread */
    ngx_http_fairq_worker.fleet = NULL;
#endif

    fairq_engine_free(ngx_http_fairq_worker.engine);
    ngx_http_fairq_worker.engine = NULL;
}
