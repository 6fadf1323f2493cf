/* The kube client's pure parts (kubeconfig and in-cluster config, URL
 * building, watch line splitting, full-jitter backoff, the token bucket,
 * Retry-After, Status synthesis) as unit tests; and, with
 *   test_agent_kube_client --live KUBECONFIG NAMESPACE
 * a driver that tests/integration/kubeapi_client.test.mjs runs against the
 * in-test API server: a reflector over the namespace's Pods prints every event
 * on stdout, and stdin lines ("get PATH", "quit") issue single requests. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/loop.h"
#include "agent/runtime/kube/client.h"

static const char *KUBECONFIG = "apiVersion: v1\n"
                                "kind: Config\n"
                                "current-context: dev\n"
                                "clusters:\n"
                                "- name: other\n"
                                "  cluster: {server: 'https://other:1'}\n"
                                "- name: dev-cluster\n"
                                "  cluster:\n"
                                "    server: https://10.0.0.1:6443/\n"
                                "    certificate-authority: ca/ca.crt\n"
                                "    insecure-skip-tls-verify: true\n"
                                "users:\n"
                                "- name: dev-user\n"
                                "  user:\n"
                                "    token: abc.def\n"
                                "    tokenFile: tok\n"
                                "contexts:\n"
                                "- name: dev\n"
                                "  context: {cluster: dev-cluster, user: dev-user, namespace: "
                                "team-a}\n"
                                "- name: bare\n"
                                "  context: {cluster: other}\n";

static void kubeconfig_parsed(void **state)
{
    (void)state;
    struct kube_config c;
    char err[256] = "";
    assert_int_equal(kube_config_parse_kubeconfig(KUBECONFIG, strlen(KUBECONFIG), "/etc/kc", NULL,
                                                  &c, err, sizeof(err)),
                     0);
    assert_string_equal(c.server, "https://10.0.0.1:6443"); /* trailing slash cut */
    assert_string_equal(c.token, "abc.def");
    assert_string_equal(c.token_file, "/etc/kc/tok"); /* relative to the file's directory */
    assert_string_equal(c.ca_file, "/etc/kc/ca/ca.crt");
    assert_true(c.insecure);
    assert_string_equal(c.ns, "team-a");
    kube_config_clear(&c);

    assert_int_equal(kube_config_parse_kubeconfig(KUBECONFIG, strlen(KUBECONFIG), "/d", "bare", &c,
                                                  err, sizeof(err)),
                     0);
    assert_string_equal(c.server, "https://other:1");
    assert_string_equal(c.ns, "default");
    assert_false(c.insecure);
    assert_string_equal(c.token, "");
    kube_config_clear(&c);
}

static void kubeconfig_ca_data(void **state)
{
    (void)state;
    /* "-----PEM-----\n" in base64 */
    const char *y = "current-context: x\n"
                    "clusters: [{name: c, cluster: {server: 'https://h:1', "
                    "certificate-authority-data: LS0tLS1QRU0tLS0tLQo=}}]\n"
                    "contexts: [{name: x, context: {cluster: c}}]\n";
    struct kube_config c;
    char err[256] = "";
    assert_int_equal(kube_config_parse_kubeconfig(y, strlen(y), ".", NULL, &c, err, sizeof(err)),
                     0);
    assert_non_null(c.ca_pem);
    assert_int_equal(c.ca_pem_len, 14);
    assert_memory_equal(c.ca_pem, "-----PEM-----\n", 14);
    kube_config_clear(&c);
}

static void kubeconfig_refusals(void **state)
{
    (void)state;
    struct {
        const char *yaml;
        const char *needle;
    } cases[] = {
        {"clusters: []\n", "no current-context"},
        {"current-context: nope\ncontexts: []\n", "context 'nope' not found"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: gone}}]\n", "cluster 'gone'"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: '10.0.0.1:6443'}}]\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         "server must be an http(s):// URL"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {exec: {command: aws}}}]\n"
         "contexts: [{name: x, context: {cluster: c, user: u}}]\n",
         "'exec' is not supported"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h', "
         "certificate-authority-data: '!!notbase64'}}]\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         "certificate-authority-data is not base64"},
        {"current-context: [unclosed\n", "kubeconfig line"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
        struct kube_config c;
        char err[256] = "";
        assert_true(kube_config_parse_kubeconfig(cases[i].yaml, strlen(cases[i].yaml), ".", NULL,
                                                 &c, err, sizeof(err)) < 0);
        if (!strstr(err, cases[i].needle))
            fail_msg("case %zu: '%s' does not contain '%s'", i, err, cases[i].needle);
        assert_null(c.ca_pem);
    }
}

static void in_cluster(void **state)
{
    (void)state;
    char dir[] = "/tmp/kube-sa-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/token", dir);
    FILE *f = fopen(path, "w");
    fputs("tok-1\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/namespace", dir);
    f = fopen(path, "w");
    fputs("agentbox-system\n", f);
    fclose(f);

    struct kube_config c;
    char err[256] = "";
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof(err)), AB_ENOENT);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "https://10.96.0.1:443");
    assert_string_equal(c.ns, "agentbox-system");
    snprintf(path, sizeof(path), "%s/token", dir);
    assert_string_equal(c.token_file, path);
    snprintf(path, sizeof(path), "%s/ca.crt", dir);
    assert_string_equal(c.ca_file, path);
    kube_config_clear(&c);

    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1); /* IPv6 needs brackets (trap 23) */
    assert_int_equal(kube_config_in_cluster(dir, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "https://[fd00::1]:443");
    kube_config_clear(&c);

    assert_int_equal(kube_config_in_cluster("/nonexistent-sa", &c, err, sizeof(err)), AB_ENOENT);
    assert_non_null(strstr(err, "automountServiceAccountToken"));
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

static void urls(void **state)
{
    (void)state;
    char u[512], err[128];
    struct kube_ref pods = {.version = "v1", .ns = "team-a", .resource = "pods"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h:6443", &pods, NULL, err, sizeof(err)), 0);
    assert_string_equal(u, "https://h:6443/api/v1/namespaces/team-a/pods");

    struct kube_ref st = {.group = "agents.navix.sh",
                          .version = "v1alpha1",
                          .ns = "team-a",
                          .resource = "sandboxpools",
                          .name = "e2b-1c2gi",
                          .sub = "status"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &st, NULL, err, sizeof(err)), 0);
    assert_string_equal(
        u,
        "https://h/apis/agents.navix.sh/v1alpha1/namespaces/team-a/sandboxpools/e2b-1c2gi/status");

    struct kube_ref tmpl = {.group = "agents.navix.sh",
                            .version = "v1alpha1",
                            .resource = "sandboxtemplates",
                            .name = "e2b-envd"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &tmpl, NULL, err, sizeof(err)), 0);
    assert_string_equal(u, "https://h/apis/agents.navix.sh/v1alpha1/sandboxtemplates/e2b-envd");

    /* selectors and continue tokens are encoded (trap 24) */
    struct kube_query q = {
        .label_selector = "agentbox.navix.sh/sandbox-pool=p,agentbox.navix.sh/sandbox-phase in "
                          "(idle,starting)",
        .resource_version = "48213",
        .cont = "eyJ2Ijo+/=",
        .limit = 500,
        .watch = true,
        .bookmarks = true,
        .timeout_s = 290};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &pods, &q, err, sizeof(err)), 0);
    assert_string_equal(u, "https://h/api/v1/namespaces/team-a/pods"
                           "?labelSelector=agentbox.navix.sh%2Fsandbox-pool%3Dp%2Cagentbox.navix."
                           "sh%2Fsandbox-phase%20in%20%28idle%2Cstarting%29"
                           "&resourceVersion=48213&limit=500&continue=eyJ2Ijo%2B%2F%3D"
                           "&watch=1&allowWatchBookmarks=true&timeoutSeconds=290");

    /* refusals: unsafe segments, subresource without a name, overflow */
    struct kube_ref bad = {.version = "v1", .ns = "../kube-system", .resource = "pods"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &bad, NULL, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "namespace"));
    struct kube_ref bad2 = {.version = "v1", .resource = "pods", .name = "a/b"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &bad2, NULL, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "name"));
    struct kube_ref bad3 = {.version = "v1", .resource = "pods", .sub = "status"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &bad3, NULL, err, sizeof(err)), AB_EINVAL);
    struct kube_ref nores = {.version = "v1"};
    assert_int_equal(kube_url(u, sizeof(u), "https://h", &nores, NULL, err, sizeof(err)),
                     AB_EINVAL);
    char tiny[24];
    assert_int_equal(kube_url(tiny, sizeof(tiny), "https://h", &pods, NULL, err, sizeof(err)),
                     AB_ELIMIT);
    assert_string_equal(tiny, "");
}

struct got {
    char lines[8][64];
    int n;
    int stop_at;
};

static int on_line(void *arg, const char *line, size_t len)
{
    struct got *g = arg;
    if (g->n < 8) {
        snprintf(g->lines[g->n], sizeof(g->lines[0]), "%.*s", (int)len, line);
        g->n++;
    }
    return g->stop_at && g->n == g->stop_at ? 42 : 0;
}

static int feed(struct kube_lines *l, const char *s, struct got *g)
{
    return kube_lines_feed(l, s, strlen(s), on_line, g);
}

static void lines(void **state)
{
    (void)state;
    struct kube_lines l;
    kube_lines_init(&l, 16);
    struct got g = {0};
    /* split across chunks, several per chunk, CRLF, empty lines skipped */
    assert_int_equal(feed(&l, "{\"a\"", &g), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(kube_lines_feed(&l, ":1}\n{\"b\":2}\r\n\n{\"c\"",
                                     strlen(":1}\n{\"b\":2}\r\n\n{\"c\""), on_line, &g),
                     0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.lines[0], "{\"a\":1}");
    assert_string_equal(g.lines[1], "{\"b\":2}");
    assert_int_equal(feed(&l, ":3}\n", &g), 0);
    assert_int_equal(g.n, 3);
    assert_string_equal(g.lines[2], "{\"c\":3}");
    /* a line over the limit, whole or in pieces */
    assert_int_equal(feed(&l, "0123456789abcdefX\n", &g), AB_ELIMIT);
    kube_lines_reset(&l);
    assert_int_equal(feed(&l, "0123456789", &g), 0);
    assert_int_equal(feed(&l, "abcdefX", &g), AB_ELIMIT);
    kube_lines_reset(&l);
    /* exactly the limit is fine */
    assert_int_equal(feed(&l, "0123456789abcdef\n", &g), 0);
    assert_string_equal(g.lines[3], "0123456789abcdef");
    /* the callback stops the feed */
    struct got s = {.stop_at = 1};
    assert_int_equal(feed(&l, "x\ny\n", &s), 42);
    assert_int_equal(s.n, 1);
    kube_lines_free(&l);
}

static void backoff(void **state)
{
    (void)state;
    /* full jitter: [0, min(cap, base * 2^n)] */
    assert_int_equal(kube_backoff_ms(0, 800, 30000, 0), 0);
    assert_int_equal(kube_backoff_ms(0, 800, 30000, 800), 800);
    assert_int_equal(kube_backoff_ms(0, 800, 30000, 801), 0);
    assert_int_equal(kube_backoff_ms(2, 800, 30000, 3200), 3200);
    assert_int_equal(kube_backoff_ms(100, 800, 30000, 30000), 30000); /* no overflow at n=100 */
    int64_t max = 0;
    for (uint64_t r = 0; r < 100000; r += 7) {
        int64_t d = kube_backoff_ms(3, 800, 30000, r * 2654435761u);
        assert_true(d >= 0 && d <= 6400);
        if (d > max)
            max = d;
    }
    assert_true(max > 6000); /* the range is used, not just its floor */
    for (unsigned n = 0; n < 64; n++)
        assert_true(kube_backoff_ms(n, 800, 30000, UINT64_MAX) <= 30000);
    assert_int_equal(kube_backoff_ms(3, 0, 30000, 5), 0);
}

static void bucket(void **state)
{
    (void)state;
    struct kube_bucket b;
    kube_bucket_init(&b, 5, 10, 1000);
    for (int i = 0; i < 10; i++)
        assert_int_equal(kube_bucket_reserve(&b, 1000), 0); /* the burst */
    assert_int_equal(kube_bucket_reserve(&b, 1000), 200);   /* then 1/qps apart */
    assert_int_equal(kube_bucket_reserve(&b, 1000), 400);
    /* after 400 ms the debt is paid: the next waits one interval */
    assert_int_equal(kube_bucket_reserve(&b, 1400), 200);
    /* a long quiet spell refills only up to the burst */
    kube_bucket_init(&b, 5, 2, 0);
    assert_int_equal(kube_bucket_reserve(&b, 100000), 0);
    assert_int_equal(kube_bucket_reserve(&b, 100000), 0);
    assert_int_equal(kube_bucket_reserve(&b, 100000), 200);
    /* a million requests at qps 20 would take 50000 s: the wait says so */
    kube_bucket_init(&b, 20, 1, 0);
    int64_t w = 0;
    for (int i = 0; i < 1001; i++)
        w = kube_bucket_reserve(&b, 0);
    assert_int_equal(w, 50000);
}

static void retry_after_and_status(void **state)
{
    (void)state;
    assert_int_equal(kube_retry_after_ms("1"), 1000);
    assert_int_equal(kube_retry_after_ms(" 3\r\n"), 3000);
    assert_int_equal(kube_retry_after_ms(NULL), -1);
    assert_int_equal(kube_retry_after_ms(""), -1);
    assert_int_equal(kube_retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT"), -1);
    assert_int_equal(kube_retry_after_ms("-1"), -1);
    assert_int_equal(kube_retry_after_ms("5x"), -1);

    struct kube_status s;
    const char *conflict =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"Operation cannot be fulfilled on pods \\\"p\\\": the object has been "
        "modified\",\"reason\":\"Conflict\",\"details\":{\"name\":\"p\",\"kind\":\"pods\"},"
        "\"code\":409}";
    kube_status_from_body(409, conflict, strlen(conflict), &s);
    assert_int_equal(s.code, 409);
    assert_string_equal(s.reason, "Conflict");
    assert_non_null(strstr(s.message, "the object has been modified"));
    assert_int_equal(s.retry_after_s, -1);

    const char *big = "{\"kind\":\"Status\",\"reason\":\"Timeout\",\"code\":504,\"details\":"
                      "{\"retryAfterSeconds\":1}}";
    kube_status_from_body(504, big, strlen(big), &s);
    assert_int_equal(s.retry_after_s, 1);

    /* APF: plain text (trap 20) */
    const char *apf = "Too many requests, please try again later.\n";
    kube_status_from_body(429, apf, strlen(apf), &s);
    assert_int_equal(s.code, 429);
    assert_string_equal(s.reason, "TooManyRequests");
    assert_non_null(strstr(s.message, "status code 429"));
    /* a JSON body that is not a Status (a proxy) */
    kube_status_from_body(502, "{\"error\":1}", 11, &s);
    assert_string_equal(s.reason, "InternalError");
    kube_status_from_body(404, NULL, 0, &s);
    assert_string_equal(s.reason, "NotFound");
}

static void pointer_and_time(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(kube_pointer_escape("agentbox.navix.sh/sandbox-phase", out, sizeof(out)), 0);
    assert_string_equal(out, "agentbox.navix.sh~1sandbox-phase");
    assert_int_equal(kube_pointer_escape("a~b/c", out, sizeof(out)), 0);
    assert_string_equal(out, "a~0b~1c");
    assert_int_equal(kube_pointer_escape("a/b", out, 4), AB_ELIMIT);
    assert_string_equal(out, "");

    int64_t ms;
    assert_int_equal(kube_time_parse("2025-06-01T12:10:04Z", &ms), 0);
    assert_int_equal(ms, 1748779804000LL);
    assert_int_equal(kube_time_parse("2025-06-01T12:10:04.123456Z", &ms), 0);
    assert_int_equal(ms, 1748779804123LL);
    assert_int_equal(kube_time_parse("2025-06-01T14:10:04+02:00", &ms), 0);
    assert_int_equal(ms, 1748779804000LL);
    assert_int_equal(kube_time_parse("1970-01-01T00:00:00Z", &ms), 0);
    assert_int_equal(ms, 0);
    const char *bad[] = {"2025-06-01 12:10:04Z",
                         "2025-06-01T12:10:04",
                         "2025-13-01T12:10:04Z",
                         "2025-06-01T12:10:04.Z",
                         "2025-06-01T12:10:04Zjunk",
                         "",
                         "x"};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
        assert_int_equal(kube_time_parse(bad[i], &ms), AB_EINVAL);

    char t[32];
    kube_time_format(1748779804123LL, false, t);
    assert_string_equal(t, "2025-06-01T12:10:04Z");
    kube_time_format(1748779804123LL, true, t);
    assert_string_equal(t, "2025-06-01T12:10:04.123000Z");
    assert_int_equal(kube_time_parse(t, &ms), 0);
    assert_int_equal(ms, 1748779804123LL); /* round trip */
}

/* --- the live driver ------------------------------------------------------------- */

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&out_mu);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

static int on_event(void *arg, enum kube_event ev, json_t *obj)
{
    (void)arg;
    static const char *names[] = {"ADDED", "MODIFIED", "DELETED", "SYNCED"};
    if (ev == KUBE_SYNCED) {
        say("SYNCED");
        return 0;
    }
    json_t *md = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(md, "name"));
    const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
    const char *img = json_string_value(json_object_get(
        json_array_get(json_object_get(json_object_get(obj, "spec"), "containers"), 0), "image"));
    say("%s %s %s %s", names[ev], name ? name : "-", rv ? rv : "-", img ? img : "-");
    return 0;
}

struct aget {
    struct loop *loop;
    struct kube_client *c;
    char url[KUBE_URL_MAX];
    int64_t t0;
};

static void aget_done(void *arg, int rc, struct kube_response *r)
{
    struct aget *a = arg;
    say("ARESP %d %ld onloop=%d %lld", rc, r->code, loop_on_loop_thread(a->loop) ? 1 : 0,
        (long long)(ab_now_ms() - a->t0));
    free(a);
}

/* Runs on the loop thread: hands the request to a worker. */
static void aget_start(void *arg, int status)
{
    struct aget *a = arg;
    if (status == 0 && kube_submit(a->loop, a->c, "GET", a->url, NULL, NULL, 0, aget_done, a) == 0)
        return;
    say("ARESP refused");
    free(a);
}

static void *loop_thread(void *arg)
{
    loop_run(arg);
    return NULL;
}

struct live {
    struct kube_client *c;
    struct kube_reflect_options o;
    int rc;
};

static void *reflect_thread(void *arg)
{
    struct live *l = arg;
    l->rc = kube_reflect(l->c, &l->o, on_event, NULL);
    return NULL;
}

static int live(const char *kubeconfig, const char *ns)
{
    struct kube_config cfg;
    char err[512];
    if (kube_config_load(kubeconfig, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    struct kube_client_options co = {
        .qps = atof(getenv("KUBE_QPS") ? getenv("KUBE_QPS") : "50"),
        .burst = 5,
        .timeout_ms = 5000,
        .max_body = getenv("KUBE_MAX_BODY") ? (size_t)atol(getenv("KUBE_MAX_BODY")) : 0};
    struct kube_client *c = kube_client_new(&cfg, &co, err, sizeof(err));
    kube_config_clear(&cfg);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    atomic_bool stop = false;
    struct kube_reflect_stats st = {0};
    struct live l = {.c = c,
                     .o = {.ref = {.version = "v1", .ns = ns, .resource = "pods"},
                           .page_limit = 2,
                           .watch_timeout_s = 2,
                           .backoff_base_ms = 50,
                           .backoff_cap_ms = 400,
                           .stop = &stop,
                           .stats = &st}};
    pthread_t t, lt;
    pthread_create(&t, NULL, reflect_thread, &l);
    struct loop *loop = loop_new(&(struct loop_options){.workers = 2});
    if (!loop) {
        fprintf(stderr, "loop_new failed\n");
        return 2;
    }
    pthread_create(&lt, NULL, loop_thread, loop);
    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (strcmp(line, "quit") == 0)
            break;
        if (strncmp(line, "aget ", 5) == 0) {
            struct aget *a = calloc(1, sizeof(*a));
            a->loop = loop;
            a->c = c;
            a->t0 = ab_now_ms();
            snprintf(a->url, sizeof(a->url), "%s%s", kube_client_server(c), line + 5);
            if (loop_post(loop, aget_start, a) < 0) {
                say("ARESP refused");
                free(a);
            }
            continue;
        }
        if (strncmp(line, "req ", 4) == 0) {
            /* req METHOD PATH CONTENT-TYPE BODY... */
            char method[16], path[1024], ctype[128];
            int off = 0;
            if (sscanf(line + 4, "%15s %1023s %127s %n", method, path, ctype, &off) < 3) {
                say("RESP bad-command");
                continue;
            }
            const char *body = line + 4 + off;
            char url[KUBE_URL_MAX];
            snprintf(url, sizeof(url), "%s%s", kube_client_server(c), path);
            struct kube_response r;
            int rc = kube_request(c, method, url, ctype, body, strlen(body), &r);
            say("RESP %d %ld %s 0", rc, r.code,
                r.code / 100 == 2 || !r.status.reason[0] ? "-" : r.status.reason);
            kube_response_clear(&r);
            continue;
        }
        if (strncmp(line, "get ", 4) == 0) {
            char url[KUBE_URL_MAX];
            snprintf(url, sizeof(url), "%s%s", kube_client_server(c), line + 4);
            struct kube_response r;
            int64_t t0 = ab_now_ms();
            int rc = kube_request(c, "GET", url, NULL, NULL, 0, &r);
            say("RESP %d %ld %s %lld", rc, r.code,
                r.code / 100 == 2 || !r.status.reason[0] ? "-" : r.status.reason,
                (long long)(ab_now_ms() - t0));
            kube_response_clear(&r);
        }
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    loop_stop(loop);
    pthread_join(lt, NULL);
    loop_free(loop);
    say("STATS lists=%u watches=%u relists=%u bookmarks=%u errors=%u requests=%llu rc=%d", st.lists,
        st.watches, st.relists_410, st.bookmarks, st.errors,
        (unsigned long long)kube_client_requests(c), l.rc);
    kube_client_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--live") == 0)
        return live(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kubeconfig_parsed),
        cmocka_unit_test(kubeconfig_ca_data),
        cmocka_unit_test(kubeconfig_refusals),
        cmocka_unit_test(in_cluster),
        cmocka_unit_test(urls),
        cmocka_unit_test(lines),
        cmocka_unit_test(backoff),
        cmocka_unit_test(bucket),
        cmocka_unit_test(retry_after_and_status),
        cmocka_unit_test(pointer_and_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
