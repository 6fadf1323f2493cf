/* GET /healthz (the process answers), /readyz (PostgreSQL answers),
 * /metrics (Prometheus text), and the loop's lag as the hub itself sees it
 * (agentbox_hub_loop_lag_seconds). Loop thread; /readyz's query runs on a
 * database worker. */
#include "hub/hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "hub/db.h"

/* One /readyz request. Freed by whichever of done() and the deadline timer
 * comes second: done() always comes (db.h), so done() frees. */
struct ready_check {
    struct hub *hub;
    struct http_exchange *ex;
    struct loop_timer deadline;
    bool answered;
    char err[256]; /* written by the worker, read after done() */
};

static void healthz(struct http_exchange *ex, void *arg)
{
    static const char body[] = "{\"status\":\"ok\"}";

    (void)arg;
    http_respond(ex, 200, "application/json", body, sizeof(body) - 1, NULL, 0);
}

/* One /metrics answer, rendered on a worker: at 10,000 sessions the page is
 * ~4 MiB (30,000 federation series, 10,000 per-session gauges), 100+ ms of
 * sorting and printing that on the loop was a lag spike at every scrape. The
 * registry is safe to render from any thread (metrics.h). */
struct metrics_page {
    struct http_exchange *ex;
    char *text; /* malloc'd by metrics_render; NULL when it ran out of memory */
    size_t len;
};

static void metrics_page_render(void *arg)
{
    struct metrics_page *p = arg;
    p->text = metrics_render(metrics_default(), &p->len);
}

static void metrics_page_done(void *arg, int status)
{
    struct metrics_page *p = arg;

    if (status != 0)
        http_respond_error(p->ex, 503, "the hub is shutting down");
    else if (p->text == NULL)
        http_respond_error(p->ex, 500, "out of memory rendering metrics");
    else
        http_respond(p->ex, 200, "text/plain; version=0.0.4; charset=utf-8", p->text, p->len, NULL,
                     0);
    free(p->text);
    free(p);
}

static void metrics(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    struct metrics_page *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        http_respond_error(ex, 500, "out of memory rendering metrics");
        return;
    }
    p->ex = ex;
    int st = loop_submit(h->loop, metrics_page_render, metrics_page_done, p);
    if (st != 0) {
        free(p);
        http_respond_error(ex, 503, "metrics: %s; retry shortly",
                           st == AB_EBUSY ? "the worker queue is full" : ab_strerror(st));
    }
}

static void answer_unavailable(struct http_exchange *ex, struct hub *h, int status, const char *own)
{
    char why[256];

    if (status == AB_EBUSY) {
        http_respond_error(ex, 503,
                           "database unavailable: %zu jobs queued, the limit; retry "
                           "shortly",
                           db_pool_pending(h->db));
        return;
    }
    if (status == AB_ECLOSED) {
        http_respond_error(ex, 503, "database unavailable: the hub is shutting down");
        return;
    }
    if (own != NULL && own[0] != '\0')
        ab_strlcpy(why, own, sizeof(why));
    else
        db_pool_last_error(h->db, why, sizeof(why));
    if (why[0] == '\0')
        ab_strlcpy(why, ab_strerror(status), sizeof(why));
    http_respond_error(ex, 503, "database unavailable: %s", why);
}

static int ready_job(PGconn *c, void *arg)
{
    struct ready_check *rc = arg;
    PGresult *r = PQexec(c, "SELECT 1");
    int ret = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        db_error_line(c, r, rc->err, sizeof(rc->err));
        ret = AB_EIO;
    }
    PQclear(r);
    return ret;
}

static void ready_done(void *arg, int status)
{
    struct ready_check *rc = arg;
    static const char body[] = "{\"status\":\"ready\"}";

    loop_timer_cancel(&rc->deadline);
    if (!rc->answered) {
        if (status == 0)
            http_respond(rc->ex, 200, "application/json", body, sizeof(body) - 1, NULL, 0);
        else
            answer_unavailable(rc->ex, rc->hub, status, rc->err);
    }
    free(rc);
}

static void ready_deadline(struct loop_timer *t)
{
    struct ready_check *rc = t->arg;

    rc->answered = true;
    http_respond_error(rc->ex, 503, "database unavailable: no answer within %lld ms",
                       (long long)rc->hub->cfg->ready_timeout_ms);
}

static void readyz(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    struct ready_check *rc;
    int st;

    rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    rc->hub = h;
    rc->ex = ex;
    st = db_submit(h->db, ready_job, ready_done, rc);
    if (st != 0) {
        free(rc);
        answer_unavailable(ex, h, st, NULL);
        return;
    }
    loop_timer_start(h->loop, &rc->deadline, h->cfg->ready_timeout_ms, ready_deadline, rc);
}

int hub_health_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/healthz", healthz, h, 0},
        {"GET", "/readyz", readyz, h, 0},
    };

    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}

/* A timer every LAG_INTERVAL_MS; how late it fires is how long the loop
 * was busy with something else (DESIGN §12: p99 <= 20 ms at 10,000
 * agents). Measured here, not only by a client's /healthz, because a
 * client's own scheduling on a loaded machine adds to what it sees. */
#define LAG_INTERVAL_MS 50

static void lag_tick(struct loop_timer *t)
{
    struct hub *h = t->arg;
    int64_t now = ab_now_us();
    metrics_observe(h->m_lag, NULL, (double)AB_MAX(0, now - h->lag_due_us) / 1e6);
    h->lag_due_us = now + LAG_INTERVAL_MS * 1000;
    loop_timer_start(h->loop, &h->lag_timer, LAG_INTERVAL_MS, lag_tick, h);
}

static void lag_start(struct hub *h)
{
    static const double buckets[] = {0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03,
                                     0.05,  0.1,   0.2,   0.5,  1,     2};
    h->m_lag = metrics_register(metrics_default(), "agentbox_hub_loop_lag_seconds",
                                "How late a 50 ms timer on the hub's loop fires: the time the "
                                "loop was busy elsewhere.",
                                METRIC_HISTOGRAM, NULL, buckets, AB_ARRAY_LEN(buckets));
    h->lag_due_us = ab_now_us() + LAG_INTERVAL_MS * 1000;
    loop_timer_start(h->loop, &h->lag_timer, LAG_INTERVAL_MS, lag_tick, h);
}

void hub_metrics_stop(struct hub *h)
{
    loop_timer_cancel(&h->lag_timer);
    http_server_stop(h->metrics);
    h->metrics = NULL;
}

int hub_metrics_start(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/metrics", metrics, h, 0},
        {"GET", "/healthz", healthz, h, 0},
    };
    struct http_server_options so = {0};

    h->metrics_router = http_router_new(routes, AB_ARRAY_LEN(routes));
    if (h->metrics_router == NULL) {
        snprintf(err, errlen, "cannot create the metrics router");
        return AB_ENOMEM;
    }
    so.listen = h->cfg->metrics_listen;
    so.router = h->metrics_router;
    so.name = "metrics";
    int rc = http_server_start(h->loop, &so, &h->metrics, err, errlen);
    if (rc != 0)
        return rc;
    LOG_INFO("metrics listening", "listen", h->cfg->metrics_listen);
    lag_start(h);
    return 0;
}
