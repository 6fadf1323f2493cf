/* A hand-written Kubernetes REST client over libcurl (kubernetes-api.md §11,
 * §12, §15): connection config (in-cluster or a minimal kubeconfig), bounded
 * requests with a client-side QPS/burst limit and Retry-After, and a
 * list-then-watch reflector with bookmarks, 410 → relist and jittered backoff.
 *
 * Threads: kube_request and kube_reflect BLOCK. Run short requests on a loop
 * worker (loop_submit) and a reflector on a thread of its own (a watch lives
 * for minutes and would hold a worker); never call them on the loop thread.
 * kube_submit wraps kube_request for code on the loop thread.
 * The pure helpers (URL, lines, backoff, bucket, status) run anywhere. One
 * kube_client may be shared by several threads. */
#ifndef AGENT_RUNTIME_KUBE_CLIENT_H
#define AGENT_RUNTIME_KUBE_CLIENT_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KUBE_SERVER_MAX 512
#define KUBE_TOKEN_MAX 8192
#define KUBE_PATH_MAX 1024
#define KUBE_NS_MAX 64
#define KUBE_URL_MAX 4096
#define KUBE_CONFIG_FILE_MAX (1024 * 1024)

/* Where and how to connect. A token file wins over a static token. */
struct kube_config {
    char server[KUBE_SERVER_MAX]; /* scheme://host:port, no trailing slash */
    char token[KUBE_TOKEN_MAX];   /* static bearer token, or "" */
    char token_file[KUBE_PATH_MAX];
    char ca_file[KUBE_PATH_MAX];
    char *ca_pem; /* decoded certificate-authority-data; owned, freed by kube_config_clear */
    size_t ca_pem_len;
    bool insecure; /* insecure-skip-tls-verify */
    char ns[KUBE_NS_MAX];
};

void kube_config_clear(struct kube_config *c);

/* Parses kubeconfig text (YAML). context NULL → current-context; dir is the
 * file's directory, for relative paths. Refuses exec/auth-provider users and
 * client certificates (not supported) with a message naming the field. */
int kube_config_parse_kubeconfig(const char *text, size_t len, const char *dir, const char *context,
                                 struct kube_config *out, char *err, size_t errlen);
/* In-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6
 * bracketed), token/ca.crt/namespace under sa_dir (NULL → the standard
 * /var/run/secrets/kubernetes.io/serviceaccount). AB_ENOENT when the
 * environment variables are absent (not in a cluster). */
int kube_config_in_cluster(const char *sa_dir, struct kube_config *out, char *err, size_t errlen);
/* path (a kubeconfig), else in-cluster, else the first file of $KUBECONFIG,
 * else ~/.kube/config. */
int kube_config_load(const char *path, struct kube_config *out, char *err, size_t errlen);

/* --- URLs (§1) ------------------------------------------------------------- */

/* group "" is the core group (/api/v1). ns NULL or "" → cluster-scoped or all
 * namespaces; name NULL → the collection. */
struct kube_ref {
    const char *group;
    const char *version;
    const char *ns;
    const char *resource; /* lower-case plural */
    const char *name;
    const char *sub; /* "status", "scale", or NULL */
};

struct kube_query {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version;
    const char *resource_version_match;
    const char *cont;
    int limit;
    bool watch;
    bool bookmarks;
    int timeout_s;
};

/* Builds server + path + query with every value percent-encoded. AB_EINVAL
 * naming the part for an empty/unsafe path segment; AB_ELIMIT when it does
 * not fit in outlen. */
int kube_url(char *out, size_t outlen, const char *server, const struct kube_ref *r,
             const struct kube_query *q, char *err, size_t errlen);

/* --- watch framing (§15.4) ---------------------------------------------------- */

/* Splits a byte stream into lines regardless of chunk boundaries. A partial
 * line longer than max is AB_ELIMIT (the stream must be dropped). */
struct kube_lines {
    char *buf;
    size_t len, cap, max;
};
typedef int (*kube_line_fn)(void *arg, const char *line, size_t len);
void kube_lines_init(struct kube_lines *l, size_t max);
void kube_lines_free(struct kube_lines *l);
void kube_lines_reset(struct kube_lines *l);
/* Calls fn once per complete non-empty line (without "\n" or "\r"); a non-zero
 * return of fn stops and is returned. */
int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *arg);

/* --- backoff and rate limit (§12, §15.21) -------------------------------------- */

/* Full jitter: uniform in [0, min(cap_ms, base_ms * 2^attempt)], from rnd. */
int64_t kube_backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms, uint64_t rnd);

/* Token bucket: qps tokens a second, at most burst stored. */
struct kube_bucket {
    double qps, burst, tokens;
    int64_t last_ms;
};
void kube_bucket_init(struct kube_bucket *b, double qps, int burst, int64_t now_ms);
/* Takes one token (possibly going into debt) and returns how many ms the
 * caller must wait before sending: 0 while the burst lasts. */
int64_t kube_bucket_reserve(struct kube_bucket *b, int64_t now_ms);

/* Retry-After as delta-seconds → ms; -1 when absent or not a number (HTTP
 * dates are not used by the API server). */
int64_t kube_retry_after_ms(const char *value);

/* --- small encodings (§15.12, §15.28) ------------------------------------------ */

/* A label or annotation key as a JSON Pointer segment: "~" → "~0", "/" → "~1".
 * AB_ELIMIT when it does not fit. */
int kube_pointer_escape(const char *key, char *out, size_t outlen);

/* metav1.Time ("2025-06-01T12:00:00Z") or MicroTime ("…:00.123456Z"), and
 * RFC 3339 offsets; → ms since the epoch. AB_EINVAL otherwise. */
int kube_time_parse(const char *s, int64_t *ms);
/* Writes metav1.Time (micro false) or MicroTime (micro true, six decimals) in UTC. */
void kube_time_format(int64_t ms, bool micro, char out[32]);

/* --- responses (§7) ---------------------------------------------------------- */

struct kube_status {
    long code;
    char reason[64];
    char message[512];
    int64_t retry_after_s; /* details.retryAfterSeconds, or -1 */
};
/* A Status from the body when it is one; otherwise synthesised from the code
 * (APF 429s and proxies answer plain text or HTML, §7.4). */
void kube_status_from_body(long code, const char *body, size_t len, struct kube_status *out);

struct kube_response {
    long code;
    char *body; /* NUL-terminated; owned, freed by kube_response_clear */
    size_t len;
    struct kube_status status; /* filled when code is not 2xx */
};
void kube_response_clear(struct kube_response *r);

/* --- the client ---------------------------------------------------------------- */

struct kube_client_options {
    int64_t timeout_ms;         /* whole request; 0 → 30000 */
    size_t max_body;            /* response bytes; 0 → 16 MiB */
    double qps;                 /* 0 → 20 */
    int burst;                  /* 0 → 30 */
    int max_retries;            /* 429/5xx with Retry-After; 0 → 5, -1 → none */
    int64_t retry_total_ms;     /* cap on time spent sleeping for retries; 0 → 30000 */
    int64_t token_ttl_ms;       /* token file cache; 0 → 60000 */
    int64_t retry_after_max_ms; /* a larger Retry-After is not waited for; 0 → 10000 */
};

struct kube_client;

/* Copies cfg (ca_pem included). NULL with err on failure. */
struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_options *opts, char *err,
                                    size_t errlen);
void kube_client_free(struct kube_client *c);
const char *kube_client_server(const struct kube_client *c);

/* One request (BLOCKING; worker thread). Returns 0 when an HTTP answer came
 * (any code: check out->code), AB_ETIMEOUT / AB_EIO for transport failures,
 * AB_ELIMIT when the body exceeded max_body. Waits for the bucket; retries 429
 * and 5xx that carry Retry-After (bounded); re-reads the token and retries once
 * on 401. body may be NULL. */
int kube_request(struct kube_client *c, const char *method, const char *url,
                 const char *content_type, const char *body, size_t body_len,
                 struct kube_response *out);

/* kube_request on a loop worker, for code on the loop thread: method, url,
 * content type and body are copied; done(arg, rc, resp) then runs on the loop
 * thread (rc as kube_request's, or AB_ECLOSED when the loop shut down first);
 * resp is valid only during the call. Returns AB_EBUSY when the worker queue
 * is full, and then done is never called. c must outlive the job. */
struct loop;
typedef void (*kube_done_fn)(void *arg, int rc, struct kube_response *resp);
int kube_submit(struct loop *l, struct kube_client *c, const char *method, const char *url,
                const char *content_type, const char *body, size_t body_len, kube_done_fn done,
                void *arg);

/* Requests sent (attempts, retries included) — for tests and metrics. */
uint64_t kube_client_requests(const struct kube_client *c);

/* --- reflector (§4.6) ------------------------------------------------------------ */

enum kube_event {
    KUBE_ADDED,
    KUBE_MODIFIED,
    KUBE_DELETED,
    KUBE_SYNCED, /* a list has been applied; obj is NULL */
};
/* obj is borrowed for the call. A non-zero return stops kube_reflect with it. */
typedef int (*kube_event_fn)(void *arg, enum kube_event ev, json_t *obj);

struct kube_reflect_stats {
    unsigned lists, watches, relists_410, errors, bookmarks;
    char last_rv[64];
};

struct kube_reflect_options {
    struct kube_ref ref; /* a collection */
    const char *label_selector;
    const char *field_selector;
    int page_limit;      /* 0 → 500 */
    int watch_timeout_s; /* 0 → 300; jittered down by up to a fifth per watch */
    int64_t backoff_base_ms, backoff_cap_ms; /* 0 → 800, 30000 */
    size_t max_line;                         /* 0 → 8 MiB */
    atomic_bool *stop;                /* set from any thread to end kube_reflect (returns 0) */
    struct kube_reflect_stats *stats; /* optional */
};

/* Lists (paginated), reports the diff against what it reported before (deletes
 * included) then KUBE_SYNCED, then watches from the list's resourceVersion:
 * events as they come, bookmarks only move the resume point, EOF re-watches at
 * once, ERROR/HTTP 410 relists, other failures back off with full jitter. */
int kube_reflect(struct kube_client *c, const struct kube_reflect_options *o, kube_event_fn fn,
                 void *arg);

#endif
