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
 * - refusals (on arrival or after waiting) answer 429 with x-fair-queue-position,
 *   x-fair-queue-wait-ms and a JSON body naming the tenant dimension, reason, position and wait,
 *   and Retry-After unless no retry can succeed (no tenant).
 *
 * Scope: one engine per worker process, built in init_process. Fairness is exact inside a
 * worker and approximate across workers (as across replicas); fairq_max_in_flight
 * is a per-worker bound. Everything here runs on the worker's event loop thread, so the ctx
 * pointers handed to the engine as user_data are only ever read back on that thread, and every
 * ctx cancels or completes its ticket before its pool goes away.
 *
 * Controls (fairq_tier, fairq_starvation_guard, fairq_wait_boost, fairq_feedback, fairq_pool,
 * fairq_shed) go on a fairq_engine_builder (nginx -t builds one to check them); each worker
 * builds its engine from it. fairq_tenant_tier and fairq_downstream are evaluated per request.
 * With a wait boost or a feedback controller, a per-worker timer calls fairq_tick every second.
 * With fairq_shed, the cleanup of a request that ran reports its response status to its pool
 * (fairq_report_downstream: an error from 500 up) before it completes the ticket.
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
    ngx_str_t                   name;        /* name=: its metrics label; empty: none given */
} ngx_http_fairq_weight_t;


/* A configured tenant's name in the metrics: its tenant key and the label value (escaped). */
typedef struct {
    uint64_t                    key;
    ngx_str_t                   label;
} ngx_http_fairq_tenant_name_t;

/* The longest name= value: Prometheus labels are for people, not payloads. */
#define NGX_HTTP_FAIRQ_NAME_MAX  128

/* fairq_status: the tenants listed without ?k=, and the most ?k= lists. */
#define NGX_HTTP_FAIRQ_STATUS_K      20
#define NGX_HTTP_FAIRQ_STATUS_K_MAX  1000


/* fairq_tier NAME WEIGHT and fairq_pool NAME MAX: a name and a number. */
typedef struct {
    ngx_str_t                   name;
    ngx_uint_t                  value;
} ngx_http_fairq_named_t;


/* The most values fairq_tenant takes: user, team, api_key. */
#define NGX_HTTP_FAIRQ_TENANT_VALUES  3


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
    ngx_array_t                *names;              /* ngx_http_fairq_tenant_name_t, by key */
    size_t                      name_max;           /* the longest label in names */
    ngx_flag_t                  api_key_values;     /* a fairq_tenant takes an API key value */
    ngx_array_t                *tiers;              /* ngx_http_fairq_named_t: weight */
    ngx_array_t                *pools;              /* ngx_http_fairq_named_t: max */
    ngx_uint_t                  default_pool;       /* index of the pool named "default" */
    ngx_uint_t                  guard_per_minute;   /* 0: no starvation guard */
    ngx_uint_t                  guard_percent;
    ngx_msec_t                  boost_after;        /* 0: no wait boost */
    ngx_uint_t                  boost_max;
    ngx_msec_t                  feedback_period;    /* 0: no feedback controller */
    ngx_uint_t                  feedback_floor;
    ngx_uint_t                  feedback_ceiling;
    ngx_uint_t                  shed_percent;       /* 0: no load shedding */
    ngx_msec_t                  shed_window;
    fairq_config                config;
    ngx_str_t                   fleet_redis;        /* NUL-terminated; empty: fleet off */
    ngx_str_t                   fleet_name;         /* NUL-terminated */
    ngx_msec_t                  fleet_period;
} ngx_http_fairq_main_conf_t;


typedef struct {
    ngx_flag_t                  enable;
    /* fairq_tenant: one value (the configured dimension's identifier), or user, team and
     * api_key in that order (the first non-empty one names the tenant). */
    ngx_http_complex_value_t   *tenant[NGX_HTTP_FAIRQ_TENANT_VALUES];
    ngx_uint_t                  ntenant;
    ngx_http_complex_value_t   *tenant_tier;        /* fairq_tenant_tier */
    ngx_http_complex_value_t   *downstream;         /* fairq_downstream */
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
    uint32_t                    dimension;   /* FAIRQ_TENANT_DIM_* of the value that named it */
    uint32_t                    downstream;  /* its pool, with fairq_pool */
    unsigned                    state:3;
    unsigned                    named:1;     /* a non-empty value named the tenant */
    unsigned                    suspended:1;
    unsigned                    after_wait:1;
} ngx_http_fairq_ctx_t;


/* Per worker process: the engine and what the module itself decided. */
typedef struct {
    fairq_engine               *engine;
#if defined(FAIRQ_FLEET)
    fairq_fleet                *fleet;
#endif
    uint32_t                    request_dimension;  /* FAIRQ_TENANT_DIM_* configured */
    ngx_event_t                 wakeup;
    uint64_t                    admitted_at_once;
    uint64_t                    admitted_after_wait;
    uint64_t                    refused[FAIRQ_REASON_SLOTS];
    uint64_t                    budget_timeouts;
    uint64_t                    client_cancels;
    uint64_t                    abandoned_grants;
    uint64_t                    wakeup_at;
    ngx_event_t                 tick;        /* fairq_tick every second (boost, feedback) */
    uint64_t                    ticks;
    uint64_t                    boosts_started;
    uint64_t                    feedback_runs;
    uint64_t                    weights_raised;
    uint64_t                    weights_lowered;
    uint64_t                    tier_changes;
    uint64_t                    unknown_tiers;
} ngx_http_fairq_worker_t;


static ngx_http_fairq_worker_t  ngx_http_fairq_worker;


static ngx_int_t ngx_http_fairq_handler(ngx_http_request_t *r);
static void ngx_http_fairq_event_handler(ngx_event_t *ev);
static void ngx_http_fairq_cleanup(void *data);
static void ngx_http_fairq_report(ngx_http_fairq_ctx_t *ctx);
static void ngx_http_fairq_pump(void);
static void ngx_http_fairq_wakeup_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_fairq_send_refusal(ngx_http_request_t *r,
    ngx_http_fairq_ctx_t *ctx);
static ngx_int_t ngx_http_fairq_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_fairq_metrics_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_fairq_status_handler(ngx_http_request_t *r);
static void ngx_http_fairq_tick_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_fairq_builder(ngx_http_fairq_main_conf_t *fmcf,
    fairq_engine_builder **out, char *msg, size_t len);
static ngx_int_t ngx_http_fairq_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_fairq_dimension_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_fairq_downstream_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

static void *ngx_http_fairq_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_fairq_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_fairq_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_fairq_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_fairq_weight(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_tenant(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_named(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_starvation_guard(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_wait_boost(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_feedback(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_shed(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_fairq_status(ngx_conf_t *cf, ngx_command_t *cmd,
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
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_fairq_tenant,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_tenant_tier"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_fairq_loc_conf_t, tenant_tier),
      NULL },

    { ngx_string("fairq_downstream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_fairq_loc_conf_t, downstream),
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
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE23,
      ngx_http_fairq_weight,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_tier"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_fairq_named,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, tiers),
      NULL },

    { ngx_string("fairq_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_fairq_named,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_fairq_main_conf_t, pools),
      NULL },

    { ngx_string("fairq_starvation_guard"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_fairq_starvation_guard,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_wait_boost"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_fairq_wait_boost,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_feedback"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE3,
      ngx_http_fairq_feedback,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("fairq_shed"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_fairq_shed,
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

    { ngx_string("fairq_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_fairq_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_fairq_module_ctx = {
    ngx_http_fairq_add_variables,          /* preconfiguration */
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


/*
 * The request's tenant key (0: no identifier, refused no_tenant) and, in ctx->dimension, the
 * FAIRQ_TENANT_DIM_* of the value that named it. One fairq_tenant value is the configured
 * dimension's identifier. With two or three (user, team, api_key), the configured dimension's
 * value comes first if it is not empty, then the first non-empty one in user, team, api_key
 * order: the order of fairq_resolve_tenant, applied here because header values need not be
 * UTF-8, which that function requires.
 */
static ngx_int_t
ngx_http_fairq_resolve(ngx_http_request_t *r, ngx_http_fairq_loc_conf_t *flcf,
    ngx_http_fairq_ctx_t *ctx, uint64_t *key)
{
    ngx_str_t   values[NGX_HTTP_FAIRQ_TENANT_VALUES];
    uint32_t    order[4], dim;
    ngx_uint_t  i, v;

    *key = 0;
    ctx->dimension = ngx_http_fairq_worker.request_dimension;

    for (i = 0; i < flcf->ntenant; i++) {
        if (ngx_http_complex_value(r, flcf->tenant[i], &values[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    order[0] = ngx_http_fairq_worker.request_dimension;
    order[1] = FAIRQ_TENANT_DIM_USER;
    order[2] = FAIRQ_TENANT_DIM_TEAM;
    order[3] = FAIRQ_TENANT_DIM_API_KEY;

    for (i = 0; i < 4; i++) {
        dim = order[i];

        if (flcf->ntenant == 1) {
            v = 0;                      /* the one value is the configured dimension's */
            if (i > 0) {
                break;
            }

        } else {
            v = dim == FAIRQ_TENANT_DIM_USER ? 0 : dim == FAIRQ_TENANT_DIM_TEAM ? 1 : 2;
            if (v >= flcf->ntenant) {
                continue;
            }
        }

        if (values[v].len == 0) {
            continue;
        }

        if (fairq_tenant_key((const char *) values[v].data, values[v].len, key)
            != FAIRQ_OK)
        {
            *key = 0;
            return NGX_OK;
        }

        ctx->dimension = dim;
        ctx->named = 1;
        return NGX_OK;
    }

    return NGX_OK;
}


/*
 * fairq_tenant_tier: puts the tenant in the tier the variable names, when its weight is not
 * that tier's already (one lock-free lookup per request; fairq_set_tier_key only on a change).
 * An empty value changes nothing; a tier the engine does not know is counted and ignored.
 */
static void
ngx_http_fairq_apply_tier(ngx_http_request_t *r, ngx_http_fairq_loc_conf_t *flcf,
    uint64_t key)
{
    int32_t     rc;
    uint32_t    want, have;
    ngx_str_t   tier;

    if (ngx_http_complex_value(r, flcf->tenant_tier, &tier) != NGX_OK || tier.len == 0) {
        return;
    }

    if (fairq_tier_weight(ngx_http_fairq_worker.engine, (const char *) tier.data, tier.len,
                          &want)
        != FAIRQ_OK)
    {
        ngx_http_fairq_worker.unknown_tiers++;
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "fairq: unknown tier \"%V\"", &tier);
        return;
    }

    if (fairq_weight_of(ngx_http_fairq_worker.engine, key, &have) == FAIRQ_OK
        && have == want)
    {
        return;
    }

    rc = fairq_set_tier_key(ngx_http_fairq_worker.engine, key, (const char *) tier.data,
                            tier.len);
    if (rc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "fairq_set_tier_key \"%V\": %s", &tier, fairq_status_str(rc));
        return;
    }

    ngx_http_fairq_worker.tier_changes++;
}


/* fairq_downstream: the pool the value names; the "default" pool when it names none. */
static uint32_t
ngx_http_fairq_pool_of(ngx_http_request_t *r, ngx_http_fairq_main_conf_t *fmcf,
    ngx_http_fairq_loc_conf_t *flcf)
{
    ngx_str_t                name;
    ngx_uint_t               i;
    ngx_http_fairq_named_t  *pool;

    if (flcf->downstream == NULL
        || ngx_http_complex_value(r, flcf->downstream, &name) != NGX_OK
        || name.len == 0)
    {
        return (uint32_t) fmcf->default_pool;
    }

    pool = fmcf->pools->elts;

    for (i = 0; i < fmcf->pools->nelts; i++) {
        if (pool[i].name.len == name.len
            && ngx_strncmp(pool[i].name.data, name.data, name.len) == 0)
        {
            return (uint32_t) i;
        }
    }

    return (uint32_t) fmcf->default_pool;
}


static ngx_int_t
ngx_http_fairq_handler(ngx_http_request_t *r)
{
    int32_t                      rc;
    ngx_msec_t                   budget;
    fairq_request                req;
    ngx_pool_cleanup_t          *cln;
    fairq_enqueue_result         res;
    ngx_http_fairq_ctx_t        *ctx;
    ngx_http_fairq_loc_conf_t   *flcf;
    ngx_http_fairq_main_conf_t  *fmcf;

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

    budget = flcf->max_wait;
    req.timeout_ns = (uint64_t) budget * NGX_HTTP_FAIRQ_NS_PER_MS;

    /* No non-empty value means no tenant: tenant_key 0 makes the engine refuse no_tenant. */
    if (ngx_http_fairq_resolve(r, flcf, ctx, &req.tenant_key) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* FAIRQ_TENANT_DIM_{USER,API_KEY,TEAM} and FAIRQ_DIM_{USER,API_KEY,TEAM} share codes. */
    req.dimension = ctx->dimension;

    if (req.tenant_key && flcf->tenant_tier) {
        ngx_http_fairq_apply_tier(r, flcf, req.tenant_key);
    }

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_fairq_module);

    if (fmcf->pools) {
        ctx->downstream = ngx_http_fairq_pool_of(r, fmcf, flcf);
        rc = fairq_enqueue_downstream(ngx_http_fairq_worker.engine, &req, ctx->downstream,
                                      &res);

    } else {
        rc = fairq_enqueue(ngx_http_fairq_worker.engine, &req, &res);
    }

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


/*
 * fairq_shed: tells the request's pool how its downstream answered. The request's memory is
 * still there while its pool's cleanups run. A status from 500 up (the upstream's, or nginx's
 * own 502/504 when it failed) is an error; a request that never got a status, or whose client
 * went away first (499), says nothing about the downstream and is not reported.
 */
static void
ngx_http_fairq_report(ngx_http_fairq_ctx_t *ctx)
{
    int32_t                      rc;
    ngx_uint_t                   status;
    ngx_http_request_t          *r;
    ngx_http_fairq_main_conf_t  *fmcf;

    r = ctx->request;
    fmcf = ngx_http_get_module_main_conf(r, ngx_http_fairq_module);

    if (fmcf->shed_percent == 0 || fmcf->pools == NULL) {
        return;
    }

    status = r->headers_out.status;
    if (status < 100 || status == NGX_HTTP_CLIENT_CLOSED_REQUEST) {
        return;
    }

    rc = fairq_report_downstream(ngx_http_fairq_worker.engine, ctx->downstream,
                                 status < NGX_HTTP_INTERNAL_SERVER_ERROR);
    if (rc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0, "fairq_report_downstream: %s",
                      fairq_status_str(rc));
    }
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
        ngx_http_fairq_report(ctx);
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


/* Every second, with a wait boost or a feedback controller: the engine's slow policies. */
static void
ngx_http_fairq_tick_handler(ngx_event_t *ev)
{
    int32_t             rc;
    fairq_tick_report   report;

    if (ngx_http_fairq_worker.engine == NULL) {
        return;
    }

    rc = fairq_tick(ngx_http_fairq_worker.engine, &report);
    if (rc == FAIRQ_OK) {
        ngx_http_fairq_worker.ticks++;
        ngx_http_fairq_worker.boosts_started += report.boosts_started;
        ngx_http_fairq_worker.feedback_runs += report.feedback_ran;
        ngx_http_fairq_worker.weights_raised += report.weights_raised;
        ngx_http_fairq_worker.weights_lowered += report.weights_lowered;

    } else {
        ngx_log_error(NGX_LOG_ERR, ev->log, 0, "fairq_tick failed: %s",
                      fairq_status_str(rc));
    }

    if (!ngx_exiting) {
        ngx_add_timer(ev, 1000);
    }
}


/* ------------------------------------------------------------------ variables */


static ngx_http_variable_t  ngx_http_fairq_vars[] = {

    { ngx_string("fairq_tenant_dimension"), NULL, ngx_http_fairq_dimension_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("fairq_downstream"), NULL, ngx_http_fairq_downstream_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_int_t
ngx_http_fairq_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_fairq_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static void
ngx_http_fairq_static_value(ngx_http_variable_value_t *v, const char *text)
{
    v->len = ngx_strlen(text);
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = (u_char *) text;
}


/* $fairq_tenant_dimension: user, team or api_key, the value that named the tenant. */
static ngx_int_t
ngx_http_fairq_dimension_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    ngx_http_fairq_ctx_t  *ctx;

    ctx = ngx_http_fairq_get_ctx(r->main);

    if (ctx == NULL || !ctx->named) {
        v->not_found = 1;
        return NGX_OK;
    }

    ngx_http_fairq_static_value(v, fairq_dimension_str(ctx->dimension));

    return NGX_OK;
}


/* $fairq_downstream: the name of the request's pool (fairq_pool). */
static ngx_int_t
ngx_http_fairq_downstream_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    ngx_http_fairq_ctx_t        *ctx;
    ngx_http_fairq_named_t      *pool;
    ngx_http_fairq_main_conf_t  *fmcf;

    ctx = ngx_http_fairq_get_ctx(r->main);
    fmcf = ngx_http_get_module_main_conf(r, ngx_http_fairq_module);

    if (ctx == NULL || fmcf->pools == NULL || ctx->downstream >= fmcf->pools->nelts) {
        v->not_found = 1;
        return NGX_OK;
    }

    pool = fmcf->pools->elts;
    v->len = pool[ctx->downstream].name.len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = pool[ctx->downstream].name.data;

    return NGX_OK;
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


/*
 * Whether sending the same request again later can succeed. A request that names no tenant
 * (no_tenant: every fairq_tenant value empty) is refused again however long the client waits:
 * its 429 carries no Retry-After. Every other reason passes with time: permits and queue room
 * free up, tenants leave the table, a pool stops shedding, a budget starts afresh, a global
 * limit (not_queueable, which the module's tenant dimensions never give) lets it through.
 */
static ngx_uint_t
ngx_http_fairq_retryable(uint32_t reason)
{
    switch (reason) {

    case FAIRQ_REASON_NO_TENANT:
        return 0;

    default:
        return 1;
    }
}


/* 429 with the x-fair-queue-* headers, the JSON error body and, when waiting can help,
 * Retry-After. */
static ngx_int_t
ngx_http_fairq_send_refusal(ngx_http_request_t *r, ngx_http_fairq_ctx_t *ctx)
{
    size_t        len;
    u_char       *body, *last;
    uint64_t      wait_ms, retry_s, hint_ns;
    ngx_int_t     rc;
    const char   *reason, *dimension;

    ngx_http_fairq_worker.refused[ctx->reason % FAIRQ_REASON_SLOTS]++;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    reason = fairq_reason_str(ctx->reason);
    dimension = fairq_dimension_str(ctx->dimension);
    wait_ms = ctx->waited_ns / NGX_HTTP_FAIRQ_NS_PER_MS;

    /* Retry after the wait the queue expected (or served), at least a second. */
    hint_ns = ngx_max(ctx->estimated_wait_ns, ctx->waited_ns);
    retry_s = ngx_max((hint_ns + 999999999ULL) / 1000000000ULL, 1);

    len = sizeof("{\"error\": {\"type\": \"rate_limited\", \"message\": "
                 "\"fair queue refused the request: \", \"details\": "
                 "{\"fair_queue\": {\"tenant_dimension\": \"\", \"reason\": \"\", "
                 "\"position\": , \"wait_ms\": }}}}\n")
          + ngx_strlen(reason) * 2 + ngx_strlen(dimension) + NGX_INT64_LEN * 2;

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
                        reason, dimension, reason, ctx->position, wait_ms);

    r->headers_out.status = NGX_HTTP_TOO_MANY_REQUESTS;
    r->headers_out.content_length_n = last - body;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if ((ngx_http_fairq_retryable(ctx->reason)
         && ngx_http_fairq_add_number(r, "Retry-After", retry_s) != NGX_OK)
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


/*
 * The engine's text (len bytes at *buf) with tenant_name="..." after each tenant="<key>" label
 * of a configured tenant's series (see ngx_http_fairq_init_names), in a new buffer with `extra`
 * bytes of room after it; *buf and *len then describe the new text.
 */
static ngx_int_t
ngx_http_fairq_name_tenants(ngx_http_request_t *r, ngx_http_fairq_main_conf_t *fmcf,
    u_char **buf, size_t *len, size_t extra)
{
    u_char                        *p, *end, *q, *out, *o, c;
    size_t                         count;
    uint64_t                       key;
    ngx_uint_t                     lo, hi, mid, i;
    ngx_http_fairq_tenant_name_t  *n, *found;

    static const char              tag[] = "tenant=\"";
    static const char              named[] = ",tenant_name=\"";

    end = *buf + *len;
    count = 0;

    for (p = *buf; (p = ngx_strlcasestrn(p, end, (u_char *) tag, sizeof(tag) - 2)) != NULL;
         p++)
    {
        count++;
    }

    if (count == 0) {
        return NGX_OK;
    }

    out = ngx_pnalloc(r->pool, *len + count * (sizeof(named) + fmcf->name_max) + extra);
    if (out == NULL) {
        return NGX_ERROR;
    }

    n = fmcf->names->elts;
    o = out;
    p = *buf;

    while (p < end) {
        q = ngx_strlcasestrn(p, end, (u_char *) tag, sizeof(tag) - 2);
        if (q == NULL) {
            o = ngx_cpymem(o, p, end - p);
            break;
        }

        /* A whole label (after '{' or ','), 16 hex digits and the closing quote. */
        q += sizeof(tag) - 1;
        o = ngx_cpymem(o, p, q - p);
        p = q;

        if (q - (sizeof(tag) - 1) == *buf
            || (q[-(ssize_t) sizeof(tag)] != '{' && q[-(ssize_t) sizeof(tag)] != ',')
            || end - q < 17 || q[16] != '"')
        {
            continue;
        }

        key = 0;
        for (i = 0; i < 16; i++) {
            c = q[i];
            if (c >= '0' && c <= '9') {
                key = key << 4 | (uint64_t) (c - '0');
            } else if (c >= 'a' && c <= 'f') {
                key = key << 4 | (uint64_t) (c - 'a' + 10);
            } else {
                break;
            }
        }

        if (i < 16) {
            continue;
        }

        found = NULL;
        lo = 0;
        hi = fmcf->names->nelts;
        while (lo < hi) {
            mid = lo + (hi - lo) / 2;
            if (n[mid].key == key) {
                found = &n[mid];
                break;
            }
            if (n[mid].key < key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }

        o = ngx_cpymem(o, q, 17);
        p = q + 17;

        if (found != NULL) {
            o = ngx_cpymem(o, named, sizeof(named) - 1);
            o = ngx_cpymem(o, found->label.data, found->label.len);
            *o++ = '"';
        }
    }

    *buf = out;
    *len = o - out;

    return NGX_OK;
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
    ngx_uint_t    i;

    ngx_http_fairq_named_t      *pool;
    ngx_http_fairq_main_conf_t  *fmcf;

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

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_fairq_module);

    /* The module's own lines: fixed ones, plus one per pool (names are at most 64 bytes). */
    extra = 8192 + (fmcf->pools ? fmcf->pools->nelts * 192 : 0);
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
    end = buf + cap + extra;

    if (fmcf->names) {
        if (ngx_http_fairq_name_tenants(r, fmcf, &buf, &len, extra) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        end = buf + len + extra;
    }

    p = buf + len;

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

    for (reason = 1; reason <= FAIRQ_REASON_DOWNSTREAM_SHEDDING; reason++) {
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

    if (ngx_http_fairq_worker.tick.handler != NULL) {
        p = ngx_slprintf(p, end,
                "# HELP fairq_nginx_policy_ticks_total fairq_tick calls of this worker's "
                "one-second timer (on with a wait boost or a feedback controller).\n"
                "# TYPE fairq_nginx_policy_ticks_total counter\n"
                "fairq_nginx_policy_ticks_total %uL\n"
                "# HELP fairq_nginx_boosts_started_total Wait boosts the ticks started.\n"
                "# TYPE fairq_nginx_boosts_started_total counter\n"
                "fairq_nginx_boosts_started_total %uL\n"
                "# HELP fairq_nginx_feedback_runs_total Feedback controller periods the "
                "ticks ran.\n"
                "# TYPE fairq_nginx_feedback_runs_total counter\n"
                "fairq_nginx_feedback_runs_total %uL\n"
                "# HELP fairq_nginx_feedback_weights_total Effective weights the feedback "
                "controller moved by 1, by direction.\n"
                "# TYPE fairq_nginx_feedback_weights_total counter\n"
                "fairq_nginx_feedback_weights_total{direction=\"raised\"} %uL\n"
                "fairq_nginx_feedback_weights_total{direction=\"lowered\"} %uL\n",
                ngx_http_fairq_worker.ticks, ngx_http_fairq_worker.boosts_started,
                ngx_http_fairq_worker.feedback_runs, ngx_http_fairq_worker.weights_raised,
                ngx_http_fairq_worker.weights_lowered);
    }

    if (fmcf->tiers) {
        p = ngx_slprintf(p, end,
                "# HELP fairq_nginx_tier_changes_total Tenants fairq_tenant_tier moved to "
                "another tier.\n"
                "# TYPE fairq_nginx_tier_changes_total counter\n"
                "fairq_nginx_tier_changes_total %uL\n"
                "# HELP fairq_nginx_unknown_tiers_total Requests whose fairq_tenant_tier "
                "named no fairq_tier (the tenant kept its weight).\n"
                "# TYPE fairq_nginx_unknown_tiers_total counter\n"
                "fairq_nginx_unknown_tiers_total %uL\n",
                ngx_http_fairq_worker.tier_changes, ngx_http_fairq_worker.unknown_tiers);
    }

    if (fmcf->pools) {
        p = ngx_slprintf(p, end,
                "# HELP fairq_nginx_pool_info Each fairq_pool: its name and bound by the "
                "engine's downstream label.\n"
                "# TYPE fairq_nginx_pool_info gauge\n");
        pool = fmcf->pools->elts;
        for (i = 0; i < fmcf->pools->nelts; i++) {
            p = ngx_slprintf(p, end,
                    "fairq_nginx_pool_info{downstream=\"%ui\",pool=\"%V\","
                    "max_in_flight=\"%ui\"} 1\n",
                    i, &pool[i].name, pool[i].value);
        }
    }

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


/*
 * The status dump of this worker's engine (fairq_queue_status_text): JSON,
 * {"worker":N,"pid":P,"status":<the engine's dump>}, or with ?format=text a line
 * "worker N pid P" and the engine's table. ?k= (tenants listed, at most
 * NGX_HTTP_FAIRQ_STATUS_K_MAX) and ?order=depth|oldest_wait; a value it cannot take answers 400.
 */
static ngx_int_t
ngx_http_fairq_status_handler(ngx_http_request_t *r)
{
    size_t        needed, cap, head, k;
    u_char       *buf, *p, *end;
    int32_t       frc;
    uint32_t      order, format;
    ngx_int_t     rc, tries, n;
    ngx_str_t     value, bad;

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

    k = NGX_HTTP_FAIRQ_STATUS_K;
    order = FAIRQ_STATUS_BY_DEPTH;
    format = FAIRQ_STATUS_JSON;
    ngx_str_null(&bad);

    if (ngx_http_arg(r, (u_char *) "k", 1, &value) == NGX_OK) {
        n = ngx_atoi(value.data, value.len);
        if (n == NGX_ERROR) {
            ngx_str_set(&bad, "invalid k: a whole number of tenants\n");
        } else {
            k = ngx_min((size_t) n, NGX_HTTP_FAIRQ_STATUS_K_MAX);
        }
    }

    if (ngx_http_arg(r, (u_char *) "order", 5, &value) == NGX_OK) {
        if (value.len == 5 && ngx_strncmp(value.data, "depth", 5) == 0) {
            order = FAIRQ_STATUS_BY_DEPTH;
        } else if (value.len == 11 && ngx_strncmp(value.data, "oldest_wait", 11) == 0) {
            order = FAIRQ_STATUS_BY_OLDEST_WAIT;
        } else {
            ngx_str_set(&bad, "invalid order: depth or oldest_wait\n");
        }
    }

    if (ngx_http_arg(r, (u_char *) "format", 6, &value) == NGX_OK) {
        if (value.len == 4 && ngx_strncmp(value.data, "json", 4) == 0) {
            format = FAIRQ_STATUS_JSON;
        } else if (value.len == 4 && ngx_strncmp(value.data, "text", 4) == 0) {
            format = FAIRQ_STATUS_TEXT;
        } else {
            ngx_str_set(&bad, "invalid format: json or text\n");
        }
    }

    if (bad.len) {
        r->headers_out.status = NGX_HTTP_BAD_REQUEST;
        r->headers_out.content_length_n = bad.len;
        ngx_str_set(&r->headers_out.content_type, "text/plain; charset=utf-8");
        r->headers_out.content_type_len = r->headers_out.content_type.len;
        r->headers_out.content_type_lowcase = NULL;

        return ngx_http_fairq_send(r, bad.data, bad.data + bad.len);
    }

    /* The worker's line before the engine's dump, and the JSON's closing brace after it. */
    head = sizeof("{\"worker\":,\"pid\":,\"status\":") - 1 + 2 * NGX_INT64_LEN;
    needed = 0;
    buf = NULL;
    p = NULL;
    frc = fairq_queue_status_text(ngx_http_fairq_worker.engine, order, k, format, NULL, 0,
                                  &needed);

    for (tries = 0; tries < 3; tries++) {
        cap = needed + 1024;
        buf = ngx_pnalloc(r->pool, head + cap + 2);
        if (buf == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (format == FAIRQ_STATUS_JSON) {
            p = ngx_sprintf(buf, "{\"worker\":%ui,\"pid\":%P,\"status\":", ngx_worker,
                            ngx_pid);
        } else {
            p = ngx_sprintf(buf, "worker %ui pid %P\n", ngx_worker, ngx_pid);
        }

        frc = fairq_queue_status_text(ngx_http_fairq_worker.engine, order, k, format,
                                      (char *) p, cap, &needed);
        if (frc != FAIRQ_ERR_BUFFER_TOO_SMALL) {
            break;
        }
    }

    if (frc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "fairq_queue_status_text failed: %s", fairq_status_str(frc));
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    end = p + ngx_strlen(p);

    if (format == FAIRQ_STATUS_JSON) {
        *end++ = '}';
        *end++ = LF;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = end - buf;
    if (format == FAIRQ_STATUS_JSON) {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    } else {
        ngx_str_set(&r->headers_out.content_type, "text/plain; charset=utf-8");
    }
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    return ngx_http_fairq_send(r, buf, end);
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
    fmcf->guard_per_minute = NGX_CONF_UNSET_UINT;
    fmcf->guard_percent = NGX_CONF_UNSET_UINT;
    fmcf->boost_after = NGX_CONF_UNSET_MSEC;
    fmcf->boost_max = NGX_CONF_UNSET_UINT;
    fmcf->feedback_period = NGX_CONF_UNSET_MSEC;
    fmcf->feedback_floor = NGX_CONF_UNSET_UINT;
    fmcf->feedback_ceiling = NGX_CONF_UNSET_UINT;
    fmcf->shed_percent = NGX_CONF_UNSET_UINT;
    fmcf->shed_window = NGX_CONF_UNSET_MSEC;

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
    ngx_conf_init_uint_value(fmcf->guard_per_minute, 0);
    ngx_conf_init_uint_value(fmcf->guard_percent, 0);
    ngx_conf_init_msec_value(fmcf->boost_after, 0);
    ngx_conf_init_uint_value(fmcf->boost_max, 64);
    ngx_conf_init_msec_value(fmcf->feedback_period, 0);
    ngx_conf_init_uint_value(fmcf->feedback_floor, 0);
    ngx_conf_init_uint_value(fmcf->feedback_ceiling, 0);
    ngx_conf_init_uint_value(fmcf->shed_percent, 0);
    ngx_conf_init_msec_value(fmcf->shed_window, 0);

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

    if (conf->ntenant == 0) {
        ngx_memcpy(conf->tenant, prev->tenant, sizeof(conf->tenant));
        conf->ntenant = prev->ntenant;
    }

    if (conf->tenant_tier == NULL) {
        conf->tenant_tier = prev->tenant_tier;
    }

    if (conf->downstream == NULL) {
        conf->downstream = prev->downstream;
    }

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);

    if (conf->enable) {
        fmcf->used = 1;

        if (conf->ntenant == 0) {
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
    ngx_str_null(&w->name);

    /* name=LABEL: the tenant's label in the metrics, in place of its identifier. */
    if (cf->args->nelts == 4) {
        if (value[3].len <= 5 || ngx_strncmp(value[3].data, "name=", 5) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" (name=LABEL)", &value[3]);
            return NGX_CONF_ERROR;
        }

        w->name.data = value[3].data + 5;
        w->name.len = value[3].len - 5;

        if (w->name.len > NGX_HTTP_FAIRQ_NAME_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "name \"%V\" is longer than %d bytes", &w->name,
                               NGX_HTTP_FAIRQ_NAME_MAX);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* fairq_tenant VALUE [VALUE [VALUE]]: one value, or user, team and api_key. */
static char *
ngx_http_fairq_tenant(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_loc_conf_t *flcf = conf;

    ngx_str_t                         *value;
    ngx_uint_t                         i;
    ngx_http_fairq_main_conf_t        *fmcf;
    ngx_http_compile_complex_value_t   ccv;

    if (flcf->ntenant) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        flcf->tenant[i - 1] = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (flcf->tenant[i - 1] == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
        ccv.cf = cf;
        ccv.value = &value[i];
        ccv.complex_value = flcf->tenant[i - 1];

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    flcf->ntenant = cf->args->nelts - 1;

    /* A third value is an API key: fairq_weight identifiers may then be API keys. */
    if (flcf->ntenant == NGX_HTTP_FAIRQ_TENANT_VALUES) {
        fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);
        fmcf->api_key_values = 1;
    }

    return NGX_CONF_OK;
}


/* A count in ms: a bare number, or an nginx time ("20s", "5m"); NGX_ERROR if neither. */
static ngx_int_t
ngx_http_fairq_parse_ms(ngx_str_t *value)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);
    if (n == NGX_ERROR) {
        n = ngx_parse_time(value, 0);
    }

    return n;
}


/* A percentage: a bare number or one ending in '%'; NGX_ERROR if neither. */
static ngx_int_t
ngx_http_fairq_parse_percent(ngx_str_t *value)
{
    size_t  len;

    len = value->len;
    if (len > 1 && value->data[len - 1] == '%') {
        len--;
    }

    return ngx_atoi(value->data, len);
}


/*
 * fairq_tier NAME WEIGHT and fairq_pool NAME MAX_IN_FLIGHT. The library checks tier names and
 * every range when the configuration is checked (ngx_http_fairq_init); pool names are checked
 * here, since they become metric label values.
 */
static char *
ngx_http_fairq_named(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char                   c;
    ngx_int_t                n;
    ngx_str_t               *value;
    ngx_uint_t               i, is_pool;
    ngx_array_t            **list;
    ngx_http_fairq_named_t  *entry;

    list = (ngx_array_t **) ((char *) conf + cmd->offset);
    value = cf->args->elts;
    is_pool = cmd->offset == offsetof(ngx_http_fairq_main_conf_t, pools);

    n = ngx_atoi(value[2].data, value[2].len);
    if (n == NGX_ERROR || n < 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid %s \"%V\" (a number, at least 1)",
                           is_pool ? "max_in_flight" : "weight", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (is_pool) {
        if (value[1].len == 0 || value[1].len > 64) {
            return "needs a pool name of 1..64 bytes";
        }

        for (i = 0; i < value[1].len; i++) {
            c = value[1].data[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                  || c == '_' || c == '-' || c == '.' || c == ':'))
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid pool name \"%V\" (letters, digits, "
                                   "'_', '-', '.', ':')", &value[1]);
                return NGX_CONF_ERROR;
            }
        }
    }

    if (*list == NULL) {
        *list = ngx_array_create(cf->pool, 4, sizeof(ngx_http_fairq_named_t));
        if (*list == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    entry = (*list)->elts;
    for (i = 0; is_pool && i < (*list)->nelts; i++) {
        if (entry[i].name.len == value[1].len
            && ngx_strncmp(entry[i].name.data, value[1].data, value[1].len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate pool \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    entry = ngx_array_push(*list);
    if (entry == NULL) {
        return NGX_CONF_ERROR;
    }

    entry->name = value[1];
    entry->value = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


/* fairq_starvation_guard PER_MINUTE PERCENT */
static char *
ngx_http_fairq_starvation_guard(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t   n, pct;
    ngx_str_t  *value;

    if (fmcf->guard_per_minute != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);
    pct = ngx_http_fairq_parse_percent(&value[2]);

    if (n == NGX_ERROR || n < 1 || pct == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fairq_starvation_guard \"%V %V\" (grants a minute, "
                           "at least 1; percent of all grants)", &value[1], &value[2]);
        return NGX_CONF_ERROR;
    }

    fmcf->guard_per_minute = (ngx_uint_t) n;
    fmcf->guard_percent = (ngx_uint_t) pct;

    return NGX_CONF_OK;
}


/* fairq_wait_boost AFTER [MAX_BOOSTED]: AFTER in ms (a bare number) or a time ("20s"). */
static char *
ngx_http_fairq_wait_boost(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t   after, max;
    ngx_str_t  *value;

    if (fmcf->boost_after != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;
    after = ngx_http_fairq_parse_ms(&value[1]);
    max = cf->args->nelts > 2 ? ngx_atoi(value[2].data, value[2].len) : 64;

    if (after == NGX_ERROR || after < 1 || max == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fairq_wait_boost \"%V\" (a time: ms, or \"20s\"; then "
                           "the most tenants boosted at once)", &value[1]);
        return NGX_CONF_ERROR;
    }

    fmcf->boost_after = (ngx_msec_t) after;
    fmcf->boost_max = (ngx_uint_t) max;

    return NGX_CONF_OK;
}


/* fairq_feedback PERIOD FLOOR_PERCENT CEILING_PERCENT: PERIOD in ms or a time ("5m"). */
static char *
ngx_http_fairq_feedback(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t   period, floor, ceiling;
    ngx_str_t  *value;

    if (fmcf->feedback_period != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;
    period = ngx_http_fairq_parse_ms(&value[1]);
    floor = ngx_http_fairq_parse_percent(&value[2]);
    ceiling = ngx_http_fairq_parse_percent(&value[3]);

    if (period == NGX_ERROR || period < 1 || floor == NGX_ERROR || ceiling == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fairq_feedback \"%V %V %V\" (a period: ms, or \"5m\"; "
                           "then floor and ceiling percents)", &value[1], &value[2],
                           &value[3]);
        return NGX_CONF_ERROR;
    }

    fmcf->feedback_period = (ngx_msec_t) period;
    fmcf->feedback_floor = (ngx_uint_t) floor;
    fmcf->feedback_ceiling = (ngx_uint_t) ceiling;

    return NGX_CONF_OK;
}


/* fairq_shed ERROR_PERCENT WINDOW: WINDOW in ms or a time ("5s"). */
static char *
ngx_http_fairq_shed(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_fairq_main_conf_t *fmcf = conf;

    ngx_int_t   pct, window;
    ngx_str_t  *value;

    if (fmcf->shed_percent != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    pct = ngx_http_fairq_parse_percent(&value[1]);
    window = ngx_http_fairq_parse_ms(&value[2]);

    if (pct == NGX_ERROR || pct < 1 || window == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fairq_shed \"%V %V\" (an error percent, at least 1; a "
                           "window: ms, or \"5s\")", &value[1], &value[2]);
        return NGX_CONF_ERROR;
    }

    fmcf->shed_percent = (ngx_uint_t) pct;
    fmcf->shed_window = (ngx_msec_t) window;

    return NGX_CONF_OK;
}


/*
 * The engine builder of the configuration: fairq_config plus every control. A rejected one
 * leaves "directive: the library's message (field, range)" in msg.
 */
static ngx_int_t
ngx_http_fairq_builder(ngx_http_fairq_main_conf_t *fmcf, fairq_engine_builder **out,
    char *msg, size_t len)
{
    char                     why[256];
    int32_t                  rc;
    u_char                  *last;
    ngx_uint_t               i;
    const char              *what;
    fairq_engine_builder    *b;
    ngx_http_fairq_named_t  *t;

    *out = NULL;
    b = NULL;

    rc = fairq_engine_builder_new(&fmcf->config, &b, msg, len);
    if (rc != FAIRQ_OK) {
        return NGX_ERROR;
    }

    what = "fairq_tier";
    t = fmcf->tiers ? fmcf->tiers->elts : NULL;
    for (i = 0; fmcf->tiers && i < fmcf->tiers->nelts; i++) {
        rc = fairq_engine_builder_add_tier(b, (const char *) t[i].name.data, t[i].name.len,
                                           (uint32_t) ngx_min(t[i].value, 0xffffffff));
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    what = "fairq_starvation_guard";
    if (fmcf->guard_per_minute) {
        rc = fairq_engine_builder_set_starvation_guard(
                 b, (uint32_t) ngx_min(fmcf->guard_per_minute, 0xffffffff),
                 (uint32_t) ngx_min(fmcf->guard_percent, 0xffffffff));
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    what = "fairq_wait_boost";
    if (fmcf->boost_after) {
        rc = fairq_engine_builder_set_wait_boost(b, fmcf->boost_after,
                 (uint32_t) ngx_min(fmcf->boost_max, 0xffffffff));
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    what = "fairq_feedback";
    if (fmcf->feedback_period) {
        rc = fairq_engine_builder_set_feedback(b, fmcf->feedback_period,
                 (uint32_t) ngx_min(fmcf->feedback_floor, 0xffffffff),
                 (uint32_t) ngx_min(fmcf->feedback_ceiling, 0xffffffff));
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    what = "fairq_pool";
    t = fmcf->pools ? fmcf->pools->elts : NULL;
    for (i = 0; fmcf->pools && i < fmcf->pools->nelts; i++) {
        rc = fairq_engine_builder_add_pool(b, (uint32_t) ngx_min(t[i].value, 0xffffffff),
                                           NULL);
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    what = "fairq_shed";
    if (fmcf->shed_percent) {
        /* min_requests 0: the library's default (20 reports in a window) */
        rc = fairq_engine_builder_set_shedding(b, (uint32_t) ngx_min(fmcf->shed_percent,
                                                                    0xffffffff),
                                               fmcf->shed_window, 0);
        if (rc != FAIRQ_OK) {
            goto failed;
        }
    }

    *out = b;
    return NGX_OK;

failed:

    why[0] = '\0';
    (void) fairq_engine_builder_message(b, why, sizeof(why), NULL);
    fairq_engine_builder_free(b);
    if (len > 0) {
        last = ngx_snprintf((u_char *) msg, len - 1, "%s: %s (%s)", what, why,
                            fairq_status_str(rc));
        *last = '\0';
    }

    return NGX_ERROR;
}


/*
 * A location answered by one of the module's own handlers (metrics, status): the worker then
 * always builds an engine.
 */
static char *
ngx_http_fairq_content(ngx_conf_t *cf, ngx_http_handler_pt handler)
{
    ngx_http_core_loc_conf_t    *clcf;
    ngx_http_fairq_main_conf_t  *fmcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = handler;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_fairq_module);
    fmcf->used = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_fairq_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_fairq_content(cf, ngx_http_fairq_metrics_handler);
}


static char *
ngx_http_fairq_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_fairq_content(cf, ngx_http_fairq_status_handler);
}


static ngx_int_t
ngx_http_fairq_cmp_names(const void *one, const void *two)
{
    const ngx_http_fairq_tenant_name_t  *a = one, *b = two;

    return a->key < b->key ? -1 : a->key > b->key;
}


/*
 * The names /metrics gives configured tenants, by tenant key: a fairq_weight's name=, else its
 * identifier, unless identifiers may be API keys (fairq_tenant_dimension api_key, or a
 * fairq_tenant with an API-key value): a secret never becomes a label, so only name= does.
 * Every other tenant keeps only its hashed key.
 */
static ngx_int_t
ngx_http_fairq_init_names(ngx_conf_t *cf, ngx_http_fairq_main_conf_t *fmcf)
{
    u_char                        *p;
    size_t                         len;
    uint64_t                       key;
    ngx_str_t                     *src;
    ngx_uint_t                     i, j, api_keys;
    ngx_http_fairq_weight_t       *w;
    ngx_http_fairq_tenant_name_t  *n;

    if (fmcf->weights == NULL) {
        return NGX_OK;
    }

    api_keys = fmcf->api_key_values || fmcf->tenant_dimension == FAIRQ_TENANT_DIM_API_KEY;

    fmcf->names = ngx_array_create(cf->pool, fmcf->weights->nelts,
                                   sizeof(ngx_http_fairq_tenant_name_t));
    if (fmcf->names == NULL) {
        return NGX_ERROR;
    }

    w = fmcf->weights->elts;

    for (i = 0; i < fmcf->weights->nelts; i++) {
        src = w[i].name.len ? &w[i].name : api_keys ? NULL : &w[i].id;
        if (src == NULL) {
            continue;
        }

        if (fairq_tenant_key((const char *) w[i].id.data, w[i].id.len, &key) != FAIRQ_OK) {
            continue;
        }

        /* Escaped as a label value: backslash, double quote and newline. */
        len = 0;
        for (j = 0; j < src->len; j++) {
            len += (src->data[j] == '\\' || src->data[j] == '"' || src->data[j] == '\n')
                   ? 2 : 1;
        }

        n = ngx_array_push(fmcf->names);
        if (n == NULL) {
            return NGX_ERROR;
        }

        n->key = key;
        n->label.len = len;
        n->label.data = ngx_pnalloc(cf->pool, len);
        if (n->label.data == NULL) {
            return NGX_ERROR;
        }

        p = n->label.data;
        for (j = 0; j < src->len; j++) {
            switch (src->data[j]) {
            case '\\':
                *p++ = '\\'; *p++ = '\\';
                break;
            case '"':
                *p++ = '\\'; *p++ = '"';
                break;
            case '\n':
                *p++ = '\\'; *p++ = 'n';
                break;
            default:
                *p++ = src->data[j];
            }
        }

        fmcf->name_max = ngx_max(fmcf->name_max, len);
    }

    if (fmcf->names->nelts == 0) {
        fmcf->names = NULL;
        return NGX_OK;
    }

    /* Sorted by key for the lookup; of two fairq_weight lines for one tenant the last wins,
     * as it does for the weight. */
    n = fmcf->names->elts;
    ngx_sort(n, fmcf->names->nelts, sizeof(ngx_http_fairq_tenant_name_t),
             ngx_http_fairq_cmp_names);

    for (i = 0, j = 0; i < fmcf->names->nelts; i++) {
        if (j > 0 && n[j - 1].key == n[i].key) {
            n[j - 1] = n[i];
        } else {
            n[j++] = n[i];
        }
    }

    fmcf->names->nelts = j;

    return NGX_OK;
}


/* After every location is merged: build the engine config and check it (nginx -t says why). */
static ngx_int_t
ngx_http_fairq_init(ngx_conf_t *cf)
{
    char                         msg[512];
    ngx_uint_t                   i, j, distinct, *weights, nweights;
    fairq_config                *c;
    ngx_http_handler_pt         *h;
    fairq_engine_builder        *builder;
    ngx_http_fairq_named_t      *t, *pool;
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

    /*
     * Room for every distinct configured weight (fairq_weight, fairq_tier) plus the default,
     * and some run-time slack; more with a feedback controller, whose nudges need classes.
     */
    nweights = 1 + (fmcf->weights ? fmcf->weights->nelts : 0)
               + (fmcf->tiers ? fmcf->tiers->nelts : 0);
    weights = ngx_palloc(cf->temp_pool, nweights * sizeof(ngx_uint_t));
    if (weights == NULL) {
        return NGX_ERROR;
    }
    nweights = 0;
    weights[nweights++] = fmcf->default_weight;
    w = fmcf->weights ? fmcf->weights->elts : NULL;
    for (i = 0; fmcf->weights && i < fmcf->weights->nelts; i++) {
        weights[nweights++] = w[i].weight;
    }
    t = fmcf->tiers ? fmcf->tiers->elts : NULL;
    for (i = 0; fmcf->tiers && i < fmcf->tiers->nelts; i++) {
        weights[nweights++] = t[i].value;
    }
    distinct = 0;
    for (i = 0; i < nweights; i++) {
        for (j = 0; j < i && weights[j] != weights[i]; j++) { /* void */ }
        distinct += j == i;
    }
    c->max_weight_classes = (uint32_t) ngx_min(ngx_max(distinct + (fmcf->feedback_period
                                                                   ? 16 : 4), 8), 64);

    /* With pools, a request whose fairq_downstream names none goes to "default": declared,
     * or added here with the whole fairq_max_in_flight (then only the global bound holds). */
    if (fmcf->pools) {
        pool = fmcf->pools->elts;
        for (i = 0; i < fmcf->pools->nelts; i++) {
            if (pool[i].name.len == 7 && ngx_strncmp(pool[i].name.data, "default", 7) == 0) {
                break;
            }
        }

        if (i == fmcf->pools->nelts) {
            pool = ngx_array_push(fmcf->pools);
            if (pool == NULL) {
                return NGX_ERROR;
            }
            ngx_str_set(&pool->name, "default");
            pool->value = fmcf->max_in_flight;
        }

        fmcf->default_pool = i;
    }

    if (!fmcf->used) {
        return NGX_OK;
    }

    /* Every control through the builder, as each worker will: nginx -t names a bad one. */
    if (ngx_http_fairq_builder(fmcf, &builder, msg, sizeof(msg)) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "fairq: invalid configuration: %s", msg);
        return NGX_ERROR;
    }

    fairq_engine_builder_free(builder);

    if (ngx_http_fairq_init_names(cf, fmcf) != NGX_OK) {
        return NGX_ERROR;
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
    char                         msg[512];
    int32_t                      rc;
    uint64_t                     key;
    ngx_uint_t                   i, api_keys;
    fairq_engine_builder        *builder;
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

    if (ngx_http_fairq_builder(fmcf, &builder, msg, sizeof(msg)) != NGX_OK) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "fairq: invalid configuration: %s", msg);
        return NGX_ERROR;
    }

    rc = fairq_engine_builder_build(builder, &ngx_http_fairq_worker.engine);
    fairq_engine_builder_free(builder);
    if (rc != FAIRQ_OK) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "fairq_engine_new failed: %s", fairq_status_str(rc));
        ngx_http_fairq_worker.engine = NULL;
        return NGX_ERROR;
    }

    /*
     * A weight set by identifier makes the identifier the tenant's name in fairq_status's dump.
     * Where identifiers may be API keys (the rule of the names in /metrics), the weights go by
     * tenant key instead, so that the dump never shows a configured key.
     */
    api_keys = fmcf->api_key_values || fmcf->tenant_dimension == FAIRQ_TENANT_DIM_API_KEY;
    w = fmcf->weights ? fmcf->weights->elts : NULL;
    for (i = 0; fmcf->weights && i < fmcf->weights->nelts; i++) {
        if (api_keys) {
            rc = fairq_tenant_key((const char *) w[i].id.data, w[i].id.len, &key);
            if (rc == FAIRQ_OK) {
                rc = fairq_set_weight_key(ngx_http_fairq_worker.engine, key,
                                          (uint32_t) w[i].weight);
            }
        } else {
            rc = fairq_set_weight(ngx_http_fairq_worker.engine, (const char *) w[i].id.data,
                                  w[i].id.len, (uint32_t) w[i].weight);
        }
        if (rc != FAIRQ_OK) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                          "fairq_weight \"%V\" %ui: %s", &w[i].id, w[i].weight,
                          fairq_status_str(rc));
            return NGX_ERROR;
        }
    }

    /* The configured dimension: the label of a single fairq_tenant value. */
    ngx_http_fairq_worker.request_dimension = fmcf->config.tenant_dimension;

    ngx_http_fairq_worker.wakeup.handler = ngx_http_fairq_wakeup_handler;
    ngx_http_fairq_worker.wakeup.log = cycle->log;
    ngx_http_fairq_worker.wakeup.data = &ngx_http_fairq_worker;
    ngx_http_fairq_worker.wakeup.cancelable = 1;

    if (fmcf->boost_after || fmcf->feedback_period) {
        ngx_http_fairq_worker.tick.handler = ngx_http_fairq_tick_handler;
        ngx_http_fairq_worker.tick.log = cycle->log;
        ngx_http_fairq_worker.tick.data = &ngx_http_fairq_worker;
        ngx_http_fairq_worker.tick.cancelable = 1;
        ngx_add_timer(&ngx_http_fairq_worker.tick, 1000);
    }

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

    if (ngx_http_fairq_worker.tick.timer_set) {
        ngx_del_timer(&ngx_http_fairq_worker.tick);
    }

#if defined(FAIRQ_FLEET)
    fairq_fleet_free(ngx_http_fairq_worker.fleet);     /* stops the sync thread */
    ngx_http_fairq_worker.fleet = NULL;
#endif

    fairq_engine_free(ngx_http_fairq_worker.engine);
    ngx_http_fairq_worker.engine = NULL;
}
