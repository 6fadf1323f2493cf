/* The Kubernetes REST client: URL building, bounded requests through a token
 * bucket with Retry-After handling and token re-reads, and the list-then-watch
 * reflector (kubernetes-api.md §4.6, §12, §15). */
#include "agent/runtime/kube/client.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- URLs ------------------------------------------------------------------------ */

struct sbuf {
    char *p;
    size_t len, cap;
    bool over;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->over || b->len + n >= b->cap) {
        b->over = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* RFC 3986 unreserved characters pass; everything else is %XX. */
static void sb_enc(struct sbuf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            sb_put(b, (const char *)&c, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            sb_put(b, e, 3);
        }
    }
}

/* A path segment may not be empty, "." or "..", nor hold '/', '?', '#' or '%'. */
static bool segment_ok(const char *s)
{
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    return strpbrk(s, "/?#% ") == NULL;
}

static void sb_param(struct sbuf *b, bool *first, const char *k, const char *v)
{
    sb_str(b, *first ? "?" : "&");
    *first = false;
    sb_str(b, k);
    sb_str(b, "=");
    sb_enc(b, v);
}

int kube_url(char *out, size_t outlen, const char *server, const struct kube_ref *r,
             const struct kube_query *q, char *err, size_t errlen)
{
    struct sbuf b = {out, 0, outlen, false};
    if (outlen)
        out[0] = '\0';
    const struct {
        const char *v;
        const char *what;
        bool need;
    } parts[] = {
        {r->version, "version", true},
        {r->resource, "resource", true},
        {r->group && *r->group ? r->group : NULL, "group", false},
        {r->ns && *r->ns ? r->ns : NULL, "namespace", false},
        {r->name, "name", false},
        {r->sub, "subresource", false},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(parts); i++)
        if ((parts[i].need || parts[i].v) && !segment_ok(parts[i].v)) {
            snprintf(err, errlen, "kube url: %s '%s' is not a valid path segment", parts[i].what,
                     parts[i].v ? parts[i].v : "");
            return AB_EINVAL;
        }
    if (r->sub && !r->name) {
        snprintf(err, errlen, "kube url: a subresource needs a name");
        return AB_EINVAL;
    }
    sb_str(&b, server);
    if (r->group && *r->group) {
        sb_str(&b, "/apis/");
        sb_str(&b, r->group);
        sb_str(&b, "/");
    } else {
        sb_str(&b, "/api/");
    }
    sb_str(&b, r->version);
    if (r->ns && *r->ns) {
        sb_str(&b, "/namespaces/");
        sb_str(&b, r->ns);
    }
    sb_str(&b, "/");
    sb_str(&b, r->resource);
    if (r->name) {
        sb_str(&b, "/");
        sb_str(&b, r->name);
    }
    if (r->sub) {
        sb_str(&b, "/");
        sb_str(&b, r->sub);
    }
    if (q) {
        bool first = true;
        char num[24];
        if (q->label_selector && *q->label_selector)
            sb_param(&b, &first, "labelSelector", q->label_selector);
        if (q->field_selector && *q->field_selector)
            sb_param(&b, &first, "fieldSelector", q->field_selector);
        if (q->resource_version && *q->resource_version)
            sb_param(&b, &first, "resourceVersion", q->resource_version);
        if (q->resource_version_match && *q->resource_version_match)
            sb_param(&b, &first, "resourceVersionMatch", q->resource_version_match);
        if (q->limit > 0) {
            snprintf(num, sizeof(num), "%d", q->limit);
            sb_param(&b, &first, "limit", num);
        }
        if (q->cont && *q->cont)
            sb_param(&b, &first, "continue", q->cont);
        if (q->watch)
            sb_param(&b, &first, "watch", "1");
        if (q->bookmarks)
            sb_param(&b, &first, "allowWatchBookmarks", "true");
        if (q->timeout_s > 0) {
            snprintf(num, sizeof(num), "%d", q->timeout_s);
            sb_param(&b, &first, "timeoutSeconds", num);
        }
    }
    if (b.over) {
        snprintf(err, errlen, "kube url: longer than %zu bytes", outlen ? outlen - 1 : 0);
        if (outlen)
            out[0] = '\0';
        return AB_ELIMIT;
    }
    return 0;
}

/* --- lines ----------------------------------------------------------------------- */

void kube_lines_init(struct kube_lines *l, size_t max)
{
    *l = (struct kube_lines){.max = max};
}

void kube_lines_free(struct kube_lines *l)
{
    free(l->buf);
    *l = (struct kube_lines){.max = l->max};
}

void kube_lines_reset(struct kube_lines *l)
{
    l->len = 0;
}

static int emit_line(const char *s, size_t n, kube_line_fn fn, void *arg)
{
    if (n > 0 && s[n - 1] == '\r')
        n--;
    return n ? fn(arg, s, n) : 0;
}

int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *arg)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (l->len + take > l->max)
            return AB_ELIMIT;
        if (nl && l->len == 0) {
            /* whole line in this chunk: no copy */
            int rc = emit_line(data, take, fn, arg);
            if (rc)
                return rc;
        } else {
            if (l->len + take + 1 > l->cap) {
                size_t cap = l->cap ? l->cap : 4096;
                while (cap < l->len + take + 1)
                    cap *= 2;
                if (cap > l->max + 1)
                    cap = l->max + 1;
                char *p = realloc(l->buf, cap);
                if (!p)
                    return AB_ENOMEM;
                l->buf = p;
                l->cap = cap;
            }
            memcpy(l->buf + l->len, data, take);
            l->len += take;
            if (nl) {
                size_t len = l->len;
                l->len = 0;
                int rc = emit_line(l->buf, len, fn, arg);
                if (rc)
                    return rc;
            }
        }
        if (!nl)
            break;
        data += take + 1;
        n -= take + 1;
    }
    return 0;
}

/* --- backoff, bucket, Retry-After ---------------------------------------------------- */

int64_t kube_backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms, uint64_t rnd)
{
    if (base_ms <= 0 || cap_ms <= 0)
        return 0;
    int64_t ceil = base_ms;
    for (unsigned i = 0; i < attempt && ceil < cap_ms; i++)
        ceil *= 2;
    if (ceil > cap_ms)
        ceil = cap_ms;
    return (int64_t)(rnd % (uint64_t)(ceil + 1));
}

void kube_bucket_init(struct kube_bucket *b, double qps, int burst, int64_t now_ms)
{
    b->qps = qps > 0 ? qps : 1;
    b->burst = burst > 0 ? burst : 1;
    b->tokens = b->burst;
    b->last_ms = now_ms;
}

int64_t kube_bucket_reserve(struct kube_bucket *b, int64_t now_ms)
{
    if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * b->qps / 1000.0;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ms = now_ms;
    }
    b->tokens -= 1;
    if (b->tokens >= 0)
        return 0;
    double ms = -b->tokens * 1000.0 / b->qps;
    return (int64_t)(ms + 0.999);
}

int64_t kube_retry_after_ms(const char *v)
{
    if (!v)
        return -1;
    while (*v == ' ')
        v++;
    if (*v < '0' || *v > '9')
        return -1;
    char *end;
    long long s = strtoll(v, &end, 10);
    while (*end == ' ' || *end == '\r' || *end == '\n')
        end++;
    if (*end || s < 0 || s > 86400)
        return -1;
    return (int64_t)s * 1000;
}

/* --- small encodings ---------------------------------------------------------------- */

int kube_pointer_escape(const char *key, char *out, size_t outlen)
{
    struct sbuf b = {out, 0, outlen, false};
    if (outlen)
        out[0] = '\0';
    for (const char *p = key; *p; p++) {
        if (*p == '~')
            sb_str(&b, "~0");
        else if (*p == '/')
            sb_str(&b, "~1");
        else
            sb_put(&b, p, 1);
    }
    if (b.over) {
        if (outlen)
            out[0] = '\0';
        return AB_ELIMIT;
    }
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

int kube_time_parse(const char *s, int64_t *ms)
{
    int Y, M, D, h, m, sec, n = 0;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &n) != 6 || n != 19)
        return AB_EINVAL;
    if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return AB_EINVAL;
    const char *p = s + 19;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int digits = 0;
        int64_t scale = 100;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            frac_ms += (*p - '0') * scale;
            scale /= 10;
        }
        if (digits == 0 || digits > 9)
            return AB_EINVAL;
    }
    int64_t off_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5 || oh > 23 || om > 59)
            return AB_EINVAL;
        off_min = (*p == '+' ? 1 : -1) * (oh * 60 + om);
        p += 6;
    } else {
        return AB_EINVAL;
    }
    if (*p)
        return AB_EINVAL;
    int64_t days = days_from_civil(Y, (unsigned)M, (unsigned)D);
    *ms = ((days * 86400 + h * 3600 + m * 60 + sec) - off_min * 60) * 1000 + frac_ms;
    return 0;
}

void kube_time_format(int64_t ms, bool micro, char out[32])
{
    time_t t = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    if (micro)
        snprintf(out + n, 32 - n, ".%06lldZ", (long long)(((ms % 1000) + 1000) % 1000) * 1000);
    else
        snprintf(out + n, 32 - n, "Z");
}

/* --- Status ------------------------------------------------------------------------- */

void kube_status_from_body(long code, const char *body, size_t len, struct kube_status *out)
{
    memset(out, 0, sizeof(*out));
    out->code = code;
    out->retry_after_s = -1;
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (j && kind && strcmp(kind, "Status") == 0) {
        const char *reason = json_string_value(json_object_get(j, "reason"));
        const char *msg = json_string_value(json_object_get(j, "message"));
        json_t *c = json_object_get(j, "code");
        if (json_is_integer(c))
            out->code = (long)json_integer_value(c);
        ab_strlcpy(out->reason, reason ? reason : "", sizeof(out->reason));
        ab_strlcpy(out->message, msg ? msg : "", sizeof(out->message));
        json_t *ra = json_object_get(json_object_get(j, "details"), "retryAfterSeconds");
        if (json_is_integer(ra))
            out->retry_after_s = json_integer_value(ra);
        json_decref(j);
        return;
    }
    json_decref(j);
    static const struct {
        long code;
        const char *reason;
    } map[] = {{400, "BadRequest"},
               {401, "Unauthorized"},
               {403, "Forbidden"},
               {404, "NotFound"},
               {405, "MethodNotAllowed"},
               {409, "Conflict"},
               {410, "Expired"},
               {413, "RequestEntityTooLarge"},
               {415, "UnsupportedMediaType"},
               {422, "Invalid"},
               {429, "TooManyRequests"},
               {500, "InternalError"},
               {503, "ServiceUnavailable"},
               {504, "Timeout"}};
    for (size_t i = 0; i < AB_ARRAY_LEN(map); i++)
        if (map[i].code == code)
            ab_strlcpy(out->reason, map[i].reason, sizeof(out->reason));
    if (!out->reason[0])
        ab_strlcpy(out->reason, code >= 500 ? "InternalError" : "Unknown", sizeof(out->reason));
    snprintf(out->message, sizeof(out->message),
             "the server responded with the status code %ld but did not return more information",
             code);
}

void kube_response_clear(struct kube_response *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* --- the client ---------------------------------------------------------------------- */

struct kube_client {
    struct kube_config cfg;
    struct kube_client_options o;
    pthread_mutex_t mu; /* bucket, token cache, counters */
    struct kube_bucket bucket;
    char token[KUBE_TOKEN_MAX];
    int64_t token_read_ms; /* 0 = never */
    uint64_t requests;
};

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static uint64_t rnd64(void)
{
    uint64_t r = 0;
    if (crypto_random(&r, sizeof(r)) < 0)
        r = (uint64_t)ab_now_us() * 6364136223846793005ULL;
    return r;
}

struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_options *opts, char *err,
                                    size_t errlen)
{
    if (!cfg->server[0]) {
        snprintf(err, errlen, "kube client: server is required");
        return NULL;
    }
    struct kube_client *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "kube client: out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->cfg.ca_pem = NULL;
    if (cfg->ca_pem) {
        c->cfg.ca_pem = malloc(cfg->ca_pem_len + 1);
        if (!c->cfg.ca_pem) {
            free(c);
            snprintf(err, errlen, "kube client: out of memory");
            return NULL;
        }
        memcpy(c->cfg.ca_pem, cfg->ca_pem, cfg->ca_pem_len);
        c->cfg.ca_pem[cfg->ca_pem_len] = '\0';
    }
    if (opts)
        c->o = *opts;
    if (c->o.timeout_ms <= 0)
        c->o.timeout_ms = 30000;
    if (c->o.max_body == 0)
        c->o.max_body = 16u << 20;
    if (c->o.qps <= 0)
        c->o.qps = 20;
    if (c->o.burst <= 0)
        c->o.burst = 30;
    if (c->o.max_retries == 0)
        c->o.max_retries = 5;
    if (c->o.max_retries < 0)
        c->o.max_retries = 0;
    if (c->o.retry_total_ms <= 0)
        c->o.retry_total_ms = 30000;
    if (c->o.token_ttl_ms <= 0)
        c->o.token_ttl_ms = 60000;
    if (c->o.retry_after_max_ms <= 0)
        c->o.retry_after_max_ms = 10000;
    pthread_mutex_init(&c->mu, NULL);
    kube_bucket_init(&c->bucket, c->o.qps, c->o.burst, ab_now_ms());
    ab_strlcpy(c->token, c->cfg.token, sizeof(c->token));
    return c;
}

void kube_client_free(struct kube_client *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c->cfg.ca_pem);
    explicit_bzero(c->token, sizeof(c->token));
    explicit_bzero(c->cfg.token, sizeof(c->cfg.token));
    free(c);
}

const char *kube_client_server(const struct kube_client *c)
{
    return c->cfg.server;
}

uint64_t kube_client_requests(const struct kube_client *c)
{
    pthread_mutex_t *mu = (pthread_mutex_t *)&c->mu;
    pthread_mutex_lock(mu);
    uint64_t n = c->requests;
    pthread_mutex_unlock(mu);
    return n;
}

/* The bearer header value: the token file is re-read by path (it is swapped
 * atomically through symlinks) when the cache is older than token_ttl_ms or
 * when force is set (after a 401). */
static void current_token(struct kube_client *c, bool force, char *out, size_t size)
{
    pthread_mutex_lock(&c->mu);
    int64_t now = ab_now_ms();
    if (c->cfg.token_file[0] &&
        (force || !c->token_read_ms || now - c->token_read_ms >= c->o.token_ttl_ms)) {
        FILE *f = fopen(c->cfg.token_file, "rb");
        if (f) {
            char buf[KUBE_TOKEN_MAX];
            size_t n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            if (n == sizeof(buf)) {
                LOG_WARN("kube: token file larger than the token limit; keeping the previous token",
                         "path", c->cfg.token_file);
                explicit_bzero(buf, sizeof(buf));
                goto done;
            }
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
                n--;
            buf[n] = '\0';
            ab_strlcpy(c->token, buf, sizeof(c->token));
            explicit_bzero(buf, sizeof(buf));
            c->token_read_ms = now;
        } else {
            LOG_WARN("kube: token file unreadable; keeping the previous token", "path",
                     c->cfg.token_file);
        }
    }
done:
    ab_strlcpy(out, c->token, size);
    pthread_mutex_unlock(&c->mu);
}

static void take_token(struct kube_client *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t wait = kube_bucket_reserve(&c->bucket, ab_now_ms());
    c->requests++;
    pthread_mutex_unlock(&c->mu);
    sleep_ms(wait);
}

struct xfer {
    char *body;
    size_t len, cap, max;
    bool over;
    char retry_after[32];
    /* streaming (watch): lines go to on_line instead of body */
    struct kube_lines *lines;
    kube_line_fn on_line;
    void *line_arg;
    int line_rc;
    atomic_bool *stop;
    CURL *curl;
};

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = sz * n;
    long code = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
    if (x->lines && code == 200) {
        int rc = kube_lines_feed(x->lines, p, len, x->on_line, x->line_arg);
        if (rc) {
            x->line_rc = rc;
            return 0; /* abort the transfer */
        }
        return len;
    }
    if (x->len + len > x->max) {
        x->over = true;
        return 0;
    }
    if (x->len + len + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 8192;
        while (cap < x->len + len + 1)
            cap *= 2;
        char *b = realloc(x->body, cap);
        if (!b)
            return 0;
        x->body = b;
        x->cap = cap;
    }
    memcpy(x->body + x->len, p, len);
    x->len += len;
    x->body[x->len] = '\0';
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = sz * n;
    if (len > 8 && strncasecmp(p, "warning:", 8) == 0) {
        /* deprecations, pruned unknown fields (trap 32): log, never fail */
        char w[512];
        size_t wl = AB_MIN(len - 8, sizeof(w) - 1);
        memcpy(w, p + 8, wl);
        w[wl] = '\0';
        w[strcspn(w, "\r\n")] = '\0';
        LOG_WARN("kube: API server warning", "warning", w);
    }
    if (len > 12 && strncasecmp(p, "retry-after:", 12) == 0) {
        size_t vl = len - 12;
        if (vl >= sizeof(x->retry_after))
            vl = sizeof(x->retry_after) - 1;
        memcpy(x->retry_after, p + 12, vl);
        x->retry_after[vl] = '\0';
    }
    return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    struct xfer *x = arg;
    return x->stop && atomic_load(x->stop) ? 1 : 0;
}

/* One easy handle per thread (loop workers, reflector threads), reset and
 * reused by every request of that thread: its connection cache keeps the
 * connection to the API server alive between requests, so a claim's patch
 * costs no TCP connect and, on a real cluster, no TLS handshake or CA
 * bundle parse. (libcurl does not support sharing one connection cache
 * between concurrent threads, hence a handle per thread.) Freed when the
 * thread ends. */
static pthread_key_t handle_key;
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;
static bool handle_key_ok;

static void handle_free(void *h)
{
    curl_easy_cleanup(h);
}

static void handle_key_init(void)
{
    handle_key_ok = pthread_key_create(&handle_key, handle_free) == 0;
}

/* The calling thread's handle, reset; *own: the caller frees it (no key). */
static CURL *thread_handle(bool *own)
{
    CURL *h;

    pthread_once(&handle_once, handle_key_init);
    *own = !handle_key_ok;
    if (handle_key_ok && (h = pthread_getspecific(handle_key))) {
        curl_easy_reset(h);
        return h;
    }
    if ((h = curl_easy_init()) && handle_key_ok && pthread_setspecific(handle_key, h) != 0)
        *own = true;
    return h;
}

/* One HTTP exchange, no retries. timeout_ms bounds the whole transfer. */
static int perform(struct kube_client *c, const char *method, const char *url, const char *ctype,
                   const char *body, size_t body_len, int64_t timeout_ms, bool force_token,
                   struct xfer *x, long *code)
{
    bool own;
    CURL *h = thread_handle(&own);
    if (!h)
        return AB_ENOMEM;
    x->curl = h;
    struct curl_slist *hdr = NULL;
    char auth[KUBE_TOKEN_MAX + 32];
    char tok[KUBE_TOKEN_MAX];
    current_token(c, force_token, tok, sizeof(tok));
    hdr = curl_slist_append(hdr, "Accept: application/json");
    if (tok[0]) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
        hdr = curl_slist_append(hdr, auth);
        explicit_bzero(auth, sizeof(auth));
    }
    explicit_bzero(tok, sizeof(tok));
    char ct[128];
    if (ctype) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        hdr = curl_slist_append(hdr, ct);
    }
    hdr = curl_slist_append(hdr, "Expect:");
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "agentbox-agent/kube");
    if (x->stop) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    }
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    if (c->cfg.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (c->cfg.ca_pem) {
            struct curl_blob blob = {c->cfg.ca_pem, c->cfg.ca_pem_len, CURL_BLOB_COPY};
            curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
        } else if (c->cfg.ca_file[0]) {
            curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
        }
    }
    CURLcode cc = curl_easy_perform(h);
    *code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_slist_free_all(hdr);
    /* Nothing of this request may outlive it in the kept handle. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    if (own)
        curl_easy_cleanup(h);
    x->curl = NULL;
    if (x->over)
        return AB_ELIMIT;
    if (cc == CURLE_OK)
        return 0;
    if (x->line_rc)
        return x->line_rc;
    if (cc == CURLE_ABORTED_BY_CALLBACK)
        return AB_ECLOSED;
    /* a watch that ran into its own deadline after a 200 ended normally */
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return *code == 200 && x->lines ? 0 : AB_ETIMEOUT;
    LOG_DEBUG("kube: request failed", "method", method, "url", url, "error",
              errbuf[0] ? errbuf : curl_easy_strerror(cc));
    return AB_EIO;
}

int kube_request(struct kube_client *c, const char *method, const char *url,
                 const char *content_type, const char *body, size_t body_len,
                 struct kube_response *out)
{
    memset(out, 0, sizeof(*out));
    int64_t slept = 0;
    bool reauth = false;
    for (int attempt = 0;; attempt++) {
        struct xfer x = {.max = c->o.max_body};
        long code = 0;
        take_token(c);
        int rc = perform(c, method, url, content_type, body, body_len, c->o.timeout_ms, reauth, &x,
                         &code);
        if (rc < 0) {
            free(x.body);
            return rc;
        }
        if (code == 401 && !reauth && c->cfg.token_file[0]) {
            /* the token may have rotated under us: re-read and retry once */
            reauth = true;
            free(x.body);
            attempt--;
            continue;
        }
        int64_t ra = kube_retry_after_ms(x.retry_after);
        bool retryable = (code == 429 || code >= 500) && ra >= 0;
        if (retryable && attempt < c->o.max_retries && ra <= c->o.retry_after_max_ms &&
            slept + ra <= c->o.retry_total_ms) {
            free(x.body);
            sleep_ms(ra);
            slept += ra;
            continue;
        }
        out->code = code;
        out->body = x.body ? x.body : strdup("");
        out->len = x.len;
        if (!out->body)
            return AB_ENOMEM;
        if (code < 200 || code > 299)
            kube_status_from_body(code, out->body, out->len, &out->status);
        return 0;
    }
}

struct submit_job {
    struct kube_client *c;
    char *method, *url, *ctype, *body;
    size_t body_len;
    kube_done_fn done;
    void *arg;
    int rc;
    struct kube_response resp;
};

static void submit_free(struct submit_job *j)
{
    free(j->method);
    free(j->url);
    free(j->ctype);
    free(j->body);
    kube_response_clear(&j->resp);
    free(j);
}

static void submit_work(void *arg)
{
    struct submit_job *j = arg;
    j->rc = kube_request(j->c, j->method, j->url, j->ctype, j->body, j->body_len, &j->resp);
}

static void submit_done(void *arg, int status)
{
    struct submit_job *j = arg;
    j->done(j->arg, status ? status : j->rc, &j->resp);
    submit_free(j);
}

int kube_submit(struct loop *l, struct kube_client *c, const char *method, const char *url,
                const char *content_type, const char *body, size_t body_len, kube_done_fn done,
                void *arg)
{
    struct submit_job *j = calloc(1, sizeof(*j));
    if (!j)
        return AB_ENOMEM;
    j->c = c;
    j->done = done;
    j->arg = arg;
    j->method = strdup(method);
    j->url = strdup(url);
    j->ctype = content_type ? strdup(content_type) : NULL;
    j->body_len = body_len;
    if (body) {
        j->body = malloc(body_len + 1);
        if (j->body) {
            memcpy(j->body, body, body_len);
            j->body[body_len] = '\0';
        }
    }
    if (!j->method || !j->url || (content_type && !j->ctype) || (body && !j->body)) {
        submit_free(j);
        return AB_ENOMEM;
    }
    int rc = loop_submit(l, submit_work, submit_done, j);
    if (rc < 0)
        submit_free(j);
    return rc;
}

/* --- reflector ---------------------------------------------------------------------- */

struct reflector {
    struct kube_client *c;
    const struct kube_reflect_options *o;
    kube_event_fn fn;
    void *arg;
    json_t *known; /* "ns/name" → resourceVersion string, what fn has been told */
    char rv[64];   /* resume point */
    bool relist;   /* a 410 came: list again */
    bool failed;   /* an ERROR event other than 410 */
    int cb_rc;     /* non-zero return of fn */
    struct kube_reflect_stats *st;
};

static void obj_key(json_t *obj, char *out, size_t size)
{
    json_t *md = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *name = json_string_value(json_object_get(md, "name"));
    snprintf(out, size, "%s/%s", ns ? ns : "", name ? name : "");
}

static const char *obj_rv(json_t *obj)
{
    const char *v =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    return v ? v : "";
}

static void set_rv(struct reflector *r, const char *v)
{
    ab_strlcpy(r->rv, v, sizeof(r->rv));
    if (r->st)
        ab_strlcpy(r->st->last_rv, v, sizeof(r->st->last_rv));
}

static int tell(struct reflector *r, enum kube_event ev, json_t *obj)
{
    int rc = r->fn(r->arg, ev, obj);
    if (rc)
        r->cb_rc = rc;
    return rc;
}

static bool stopping(const struct reflector *r)
{
    return r->o->stop && atomic_load(r->o->stop);
}

/* Sleeps in slices so a stop request is noticed. */
static void nap(const struct reflector *r, int64_t ms)
{
    int64_t end = ab_now_ms() + ms;
    while (!stopping(r) && ab_now_ms() < end)
        sleep_ms(AB_MIN(50, end - ab_now_ms()));
}

/* Paginated list; on success replaces `known` and tells fn the difference
 * (trap 2: objects gone meanwhile become DELETED), then KUBE_SYNCED. */
static int do_list(struct reflector *r)
{
    char url[KUBE_URL_MAX], err[256], cont[4096] = "";
    json_t *seen = json_object();
    json_t *items_all = json_array();
    char list_rv[64] = "";
    int rc = 0;
    for (;;) {
        struct kube_query q = {.label_selector = r->o->label_selector,
                               .field_selector = r->o->field_selector,
                               .limit = r->o->page_limit > 0 ? r->o->page_limit : 500,
                               .cont = cont};
        if ((rc = kube_url(url, sizeof(url), r->c->cfg.server, &r->o->ref, &q, err, sizeof(err))) <
            0) {
            LOG_WARN("kube: list refused", "error", err);
            goto out;
        }
        struct kube_response resp;
        if (r->st)
            r->st->lists++;
        rc = kube_request(r->c, "GET", url, NULL, NULL, 0, &resp);
        if (rc < 0)
            goto out;
        if (resp.code == 410 && cont[0]) {
            /* continue token expired: start over for a consistent snapshot */
            kube_response_clear(&resp);
            cont[0] = '\0';
            json_array_clear(items_all);
            continue;
        }
        if (resp.code != 200) {
            char cs[16];
            snprintf(cs, sizeof(cs), "%ld", resp.code);
            LOG_WARN("kube: list failed", "url", url, "code", cs, "reason", resp.status.reason,
                     "message", resp.status.message);
            kube_response_clear(&resp);
            rc = AB_EIO;
            goto out;
        }
        json_t *j = json_loadb(resp.body, resp.len, 0, NULL);
        kube_response_clear(&resp);
        json_t *md = json_object_get(j, "metadata");
        const char *lrv = json_string_value(json_object_get(md, "resourceVersion"));
        const char *next = json_string_value(json_object_get(md, "continue"));
        json_t *items = json_object_get(j, "items");
        if (!j || !lrv || (items && !json_is_array(items))) {
            json_decref(j);
            LOG_WARN("kube: list answer is not a list", "url", url);
            rc = AB_EIO;
            goto out;
        }
        if (!list_rv[0])
            ab_strlcpy(list_rv, lrv, sizeof(list_rv));
        size_t i;
        json_t *it;
        json_array_foreach(items, i, it) json_array_append(items_all, it);
        if (next && strlen(next) >= sizeof(cont)) {
            json_decref(j);
            rc = AB_ELIMIT;
            goto out;
        }
        ab_strlcpy(cont, next ? next : "", sizeof(cont));
        json_decref(j);
        if (!cont[0])
            break; /* an empty page with a token is legal: only an empty token ends */
    }
    size_t i;
    json_t *it;
    char key[600];
    json_array_foreach(items_all, i, it)
    {
        obj_key(it, key, sizeof(key));
        const char *before = json_string_value(json_object_get(r->known, key));
        const char *now = obj_rv(it);
        json_object_set_new(seen, key, json_string(now));
        if (!before) {
            if (tell(r, KUBE_ADDED, it))
                goto out;
        } else if (strcmp(before, now) != 0) {
            if (tell(r, KUBE_MODIFIED, it))
                goto out;
        }
    }
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(r->known, tmp, k, v)
    {
        if (json_object_get(seen, k))
            continue;
        /* a tombstone: the name is all fn can know of it */
        json_t *gone = json_pack("{s:{s:s}}", "metadata", "name", strchr(k, '/') + 1);
        const char *slash = strchr(k, '/');
        if (slash != k)
            json_object_set_new(json_object_get(gone, "metadata"), "namespace",
                                json_stringn(k, (size_t)(slash - k)));
        int stop = tell(r, KUBE_DELETED, gone);
        json_decref(gone);
        if (stop)
            goto out;
    }
    json_decref(r->known);
    r->known = seen;
    seen = NULL;
    set_rv(r, list_rv);
    tell(r, KUBE_SYNCED, NULL);
out:
    json_decref(seen);
    json_decref(items_all);
    return r->cb_rc ? r->cb_rc : rc;
}

static int on_watch_line(void *arg, const char *line, size_t len)
{
    struct reflector *r = arg;
    json_t *j = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *obj = json_object_get(j, "object");
    if (!j || !type || !json_is_object(obj)) {
        json_decref(j);
        LOG_WARN("kube: watch line is not an event; re-watching");
        r->failed = true;
        return AB_EIO;
    }
    int rc = 0;
    char key[600];
    if (strcmp(type, "BOOKMARK") == 0) {
        /* not an object: only the resume point moves (trap 5) */
        if (r->st)
            r->st->bookmarks++;
        set_rv(r, obj_rv(obj));
    } else if (strcmp(type, "ERROR") == 0) {
        json_t *code = json_object_get(obj, "code");
        if (json_integer_value(code) == 410) {
            r->relist = true;
            if (r->st)
                r->st->relists_410++;
        } else {
            r->failed = true;
        }
        rc = AB_ECLOSED;
    } else {
        enum kube_event ev = strcmp(type, "ADDED") == 0      ? KUBE_ADDED
                             : strcmp(type, "MODIFIED") == 0 ? KUBE_MODIFIED
                             : strcmp(type, "DELETED") == 0  ? KUBE_DELETED
                                                             : (enum kube_event) - 1;
        if ((int)ev < 0) {
            r->failed = true;
            rc = AB_EIO;
        } else {
            obj_key(obj, key, sizeof(key));
            if (ev == KUBE_DELETED)
                json_object_del(r->known, key);
            else
                json_object_set_new(r->known, key, json_string(obj_rv(obj)));
            set_rv(r, obj_rv(obj));
            if (tell(r, ev, obj))
                rc = r->cb_rc;
        }
    }
    json_decref(j);
    return rc;
}

/* One watch from r->rv until EOF, 410, error or stop. 0 = ended normally. */
static int do_watch(struct reflector *r)
{
    char url[KUBE_URL_MAX], err[256];
    int base = r->o->watch_timeout_s > 0 ? r->o->watch_timeout_s : 300;
    /* jitter so replicas do not reconnect in lockstep (trap 3) */
    int timeout = base - (int)(rnd64() % (uint64_t)(base / 5 + 1));
    if (timeout < 1)
        timeout = 1;
    struct kube_query q = {.label_selector = r->o->label_selector,
                           .field_selector = r->o->field_selector,
                           .resource_version = r->rv,
                           .watch = true,
                           .bookmarks = true,
                           .timeout_s = timeout};
    int rc = kube_url(url, sizeof(url), r->c->cfg.server, &r->o->ref, &q, err, sizeof(err));
    if (rc < 0) {
        LOG_WARN("kube: watch refused", "error", err);
        return rc;
    }
    struct kube_lines lines;
    kube_lines_init(&lines, r->o->max_line ? r->o->max_line : 8u << 20);
    struct xfer x = {.max = 64 * 1024,
                     .lines = &lines,
                     .on_line = on_watch_line,
                     .line_arg = r,
                     .stop = r->o->stop};
    long code = 0;
    if (r->st)
        r->st->watches++;
    take_token(r->c);
    rc = perform(r->c, "GET", url, NULL, NULL, 0, (int64_t)(timeout + 30) * 1000, false, &x, &code);
    kube_lines_free(&lines);
    if (rc == 0 && code != 200) {
        struct kube_status st;
        kube_status_from_body(code, x.body, x.len, &st);
        if (code == 410) {
            r->relist = true;
            if (r->st)
                r->st->relists_410++;
        } else if (code == 401) {
            /* the token rotated: re-read it before the next attempt (trap 22) */
            char tok[KUBE_TOKEN_MAX];
            current_token(r->c, true, tok, sizeof(tok));
            explicit_bzero(tok, sizeof(tok));
            rc = AB_EDENIED;
        } else {
            char cs[16];
            snprintf(cs, sizeof(cs), "%ld", code);
            LOG_WARN("kube: watch failed", "url", url, "code", cs, "reason", st.reason, "message",
                     st.message);
            int64_t ra = kube_retry_after_ms(x.retry_after);
            if (ra > 0)
                nap(r, AB_MIN(ra, r->c->o.retry_after_max_ms));
            rc = AB_EIO;
        }
    }
    free(x.body);
    if (r->relist)
        return 0;
    if (r->failed) {
        r->failed = false;
        return AB_EIO;
    }
    return rc;
}

int kube_reflect(struct kube_client *c, const struct kube_reflect_options *o, kube_event_fn fn,
                 void *arg)
{
    struct reflector r = {.c = c,
                          .o = o,
                          .fn = fn,
                          .arg = arg,
                          .known = json_object(),
                          .relist = true,
                          .st = o->stats};
    int64_t base = o->backoff_base_ms > 0 ? o->backoff_base_ms : 800;
    int64_t cap = o->backoff_cap_ms > 0 ? o->backoff_cap_ms : 30000;
    unsigned failures = 0;
    int rc = 0;
    while (!stopping(&r)) {
        bool listing = r.relist;
        if (listing) {
            r.relist = false;
            rc = do_list(&r);
        } else {
            rc = do_watch(&r);
        }
        if (r.cb_rc) {
            rc = r.cb_rc;
            break;
        }
        if (stopping(&r)) {
            rc = 0;
            break;
        }
        if (rc == 0) {
            failures = 0; /* EOF of a watch: re-watch at once */
            continue;
        }
        if (listing)
            r.relist = true; /* a failed list is retried as a list, never as a watch */
        if (r.st)
            r.st->errors++;
        nap(&r, kube_backoff_ms(failures, base, cap, rnd64()));
        if (failures < 30)
            failures++;
    }
    json_decref(r.known);
    return stopping(&r) ? 0 : rc;
}
