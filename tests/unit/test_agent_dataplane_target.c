/* Data-plane target extraction (agent/dataplane_target.c): a table of the
 * Host headers, sandbox headers and paths an untrusted client may send, with
 * what each must become, and the 400 message that names the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agent/dataplane_target.h"
#include "agentbox/common.h"
#include "agentbox/sbxid.h"

#define ID "alpha-abcdefghij0123456789" /* a well-formed id of cluster "alpha" */
#define DOM "e2b.example"

struct row {
    const char *name;
    struct dp_target_req req;
    const char *domain;
    int rc;
    const char *id;   /* rc 0: the id cut out */
    int port;         /* rc 0 */
    const char *path; /* rc 0: the target sent on */
    const char *msg;  /* rc AB_EINVAL: a substring the message must hold */
};

static char long_id[200], long_host[300], long_target[9000], long_label_host[200];

static const struct row rows[] = {
    /* ---- a domain that carries the port the SDK's URLs need ---- */
    {.name = "domain with a port",
     .req = {.target = "/files", .host = "49983-" ID "." DOM ":8443"},
     .domain = DOM ":8443",
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/files"},
    {.name = "domain with a port, another domain",
     .req = {.target = "/", .host = "49983-" ID ".other.example:8443"},
     .domain = DOM ":8443",
     .rc = AB_ENOENT},
    /* ---- headers ---- */
    {.name = "e2b headers",
     .req = {.target = "/files?path=a", .e2b_id = ID, .e2b_port = "49983"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/files?path=a"},
    {.name = "x headers",
     .req = {.target = "/", .x_id = ID, .x_port = "8080"},
     .domain = DOM,
     .rc = 0,
     .id = ID,
     .port = 8080,
     .path = "/"},
    {.name = "e2b headers win over host and path",
     .req = {.target = "/sandboxes/other-x/1/p",
             .host = "2-" ID "." DOM,
             .e2b_id = ID,
             .e2b_port = "3"},
     .domain = DOM,
     .rc = 0,
     .id = ID,
     .port = 3,
     .path = "/sandboxes/other-x/1/p"},
    {.name = "id without port",
     .req = {.target = "/", .e2b_id = ID},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "missing E2b-Sandbox-Port header when E2b-Sandbox-Id is set"},
    {.name = "port without id",
     .req = {.target = "/", .x_port = "80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "missing X-Sandbox-Id header when X-Sandbox-Port is set"},
    {.name = "empty id with port",
     .req = {.target = "/", .e2b_id = "", .e2b_port = "80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "missing E2b-Sandbox-Id header"},
    {.name = "empty id, no port: not named",
     .req = {.target = "/", .e2b_id = ""},
     .domain = NULL,
     .rc = AB_ENOENT},
    {.name = "port 0",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "0"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "invalid port in E2b-Sandbox-Port header: must be an integer from 1 to 65535"},
    {.name = "port 65536",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "65536"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "from 1 to 65535"},
    {.name = "port 65535",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "65535"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 65535,
     .path = "/"},
    {.name = "port 1",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "1"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 1,
     .path = "/"},
    {.name = "port six digits",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "000080"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "E2b-Sandbox-Port"},
    {.name = "port signed",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = "+80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "E2b-Sandbox-Port"},
    {.name = "port negative",
     .req = {.target = "/", .x_id = ID, .x_port = "-1"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "X-Sandbox-Port"},
    {.name = "port with space",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = " 80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "E2b-Sandbox-Port"},
    {.name = "port empty",
     .req = {.target = "/", .e2b_id = ID, .e2b_port = ""},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "E2b-Sandbox-Port"},
    {.name = "id too long",
     .req = {.target = "/", .e2b_id = long_id, .e2b_port = "80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "E2b-Sandbox-Id is longer than 95 characters"},
    {.name = "target too long (headers)",
     .req = {.target = long_target, .e2b_id = ID, .e2b_port = "80"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "request target is longer than 8191 bytes"},
    /* ---- host, with a domain ---- */
    {.name = "host",
     .req = {.target = "/x?y=1", .host = "49983-" ID "." DOM},
     .domain = DOM,
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/x?y=1"},
    {.name = "host with :port and trailing dot",
     .req = {.target = "/", .host = "8080-" ID "." DOM ".:443"},
     .domain = DOM,
     .rc = 0,
     .id = ID,
     .port = 8080,
     .path = "/"},
    {.name = "host domain matched case-insensitively",
     .req = {.target = "/", .host = "80-" ID ".E2B.Example"},
     .domain = DOM,
     .rc = 0,
     .id = ID,
     .port = 80},
    /* the id is cut out verbatim: the caller's sbxid check refuses uppercase */
    {.name = "host uppercase id kept verbatim",
     .req = {.target = "/", .host = "80-ALPHA-X." DOM},
     .domain = DOM,
     .rc = 0,
     .id = "ALPHA-X",
     .port = 80},
    {.name = "host of another domain: not named",
     .req = {.target = "/", .host = "80-" ID ".evil.example"},
     .domain = DOM,
     .rc = AB_ENOENT},
    {.name = "host suffix without the dot: not named",
     .req = {.target = "/", .host = "80-" ID "x" DOM},
     .domain = DOM,
     .rc = AB_ENOENT},
    {.name = "host is the domain: not named",
     .req = {.target = "/", .host = DOM},
     .domain = DOM,
     .rc = AB_ENOENT},
    {.name = "host two labels",
     .req = {.target = "/", .host = "a.80-" ID "." DOM},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "must be <port>-<sandbox id>." DOM " (one label)"},
    {.name = "host without port",
     .req = {.target = "/", .host = ID "." DOM},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "must be <port>-<sandbox id>." DOM},
    {.name = "host port out of range",
     .req = {.target = "/", .host = "70000-" ID "." DOM},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "host '70000-" ID "." DOM "' must be"},
    {.name = "host port 0",
     .req = {.target = "/", .host = "0-" ID "." DOM},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "must be <port>-<sandbox id>"},
    {.name = "host empty id",
     .req = {.target = "/", .host = "80-." DOM},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "must be <port>-<sandbox id>"},
    {.name = "host over-long label",
     .req = {.target = "/", .host = long_label_host},
     .domain = DOM,
     .rc = AB_EINVAL,
     .msg = "must be <port>-<sandbox id>"},
    {.name = "host over 255 bytes: not named",
     .req = {.target = "/", .host = long_host},
     .domain = DOM,
     .rc = AB_ENOENT},
    {.name = "host empty: not named",
     .req = {.target = "/", .host = ""},
     .domain = DOM,
     .rc = AB_ENOENT},
    /* a NUL ends the header: what follows it is never read */
    {.name = "host cut at a NUL",
     .req = {.target = "/", .host = "80-" ID "\0.evil." DOM},
     .domain = DOM,
     .rc = AB_ENOENT},
    {.name = "IPv6 literal: not named",
     .req = {.target = "/", .host = "[::1]:8091"},
     .domain = DOM,
     .rc = AB_ENOENT},
    /* ---- host, without a domain: only when the label carries a valid id ---- */
    {.name = "host no domain",
     .req = {.target = "/p", .host = "49983-" ID ".anything:80"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/p"},
    {.name = "host no domain, empty domain",
     .req = {.target = "/p", .host = "49983-" ID ".anything"},
     .domain = "",
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/p"},
    {.name = "host no domain, bad id: not named",
     .req = {.target = "/", .host = "80-nope.example"},
     .domain = NULL,
     .rc = AB_ENOENT},
    {.name = "host no domain, uppercase id: not named",
     .req = {.target = "/", .host = "80-ALPHA-X.example"},
     .domain = NULL,
     .rc = AB_ENOENT},
    {.name = "host no domain, bad port: not named",
     .req = {.target = "/", .host = "99999-" ID ".example"},
     .domain = NULL,
     .rc = AB_ENOENT},
    {.name = "host no domain, no dot: not named",
     .req = {.target = "/", .host = "localhost:8091"},
     .domain = NULL,
     .rc = AB_ENOENT},
    /* ---- path ---- */
    {.name = "path",
     .req = {.target = "/sandboxes/" ID "/49983/files?path=%2Fa"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 49983,
     .path = "/files?path=%2Fa"},
    {.name = "path bare",
     .req = {.target = "/sandboxes/" ID "/80"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 80,
     .path = "/"},
    {.name = "path trailing slash",
     .req = {.target = "/sandboxes/" ID "/80/"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 80,
     .path = "/"},
    {.name = "path query only",
     .req = {.target = "/sandboxes/" ID "/80?a=/sandboxes/"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 80,
     .path = "/?a=/sandboxes/"},
    {.name = "path under a prefix",
     .req = {.target = "/data/sandboxes/" ID "/81/x/y"},
     .domain = NULL,
     .rc = 0,
     .id = ID,
     .port = 81,
     .path = "/x/y"},
    {.name = "path prefix only in the query: not named",
     .req = {.target = "/x?/sandboxes/" ID "/80/"},
     .domain = NULL,
     .rc = AB_ENOENT},
    {.name = "path no id",
     .req = {.target = "/sandboxes//80/x"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "must contain at least sandbox ID and port"},
    {.name = "path no port",
     .req = {.target = "/sandboxes/" ID},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "must contain at least sandbox ID and port"},
    {.name = "path empty port",
     .req = {.target = "/sandboxes/" ID "//x"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "must contain at least sandbox ID and port"},
    {.name = "path port out of range",
     .req = {.target = "/sandboxes/" ID "/65536/x"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "invalid port number \"65536\" in URL path"},
    {.name = "path port not a number",
     .req = {.target = "/sandboxes/" ID "/http/x"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "invalid port number \"http\" in URL path"},
    {.name = "path port quoted at most 16 bytes",
     .req = {.target = "/sandboxes/" ID "/12345678901234567890/"},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "\"1234567890123456\" in URL path"},
    {.name = "path id too long",
     .req = {.target = long_target},
     .domain = NULL,
     .rc = AB_EINVAL,
     .msg = "sandbox id in the URL path is longer than 95 characters"},
    {.name = "nothing: not named", .req = {.target = "/healthz"}, .domain = DOM, .rc = AB_ENOENT},
    {.name = "NULL target: not named", .req = {.target = NULL}, .domain = DOM, .rc = AB_ENOENT},
};

static void fill_long_inputs(void)
{
    memset(long_id, 'a', sizeof(long_id) - 1);
    memset(long_host, 'a', sizeof(long_host) - 1);
    /* a 120-byte id: longer than dp_target.id, short enough for a 255-byte host */
    snprintf(long_label_host, sizeof(long_label_host), "80-%0120d." DOM, 7);
    /* "/sandboxes/<8000 a>/80/": refused for the id in the path form, and too
     * long to forward in the header form */
    memcpy(long_target, "/sandboxes/", 11);
    memset(long_target + 11, 'a', sizeof(long_target) - 1 - 11);
    memcpy(long_target + 8011, "/80/", 4);
}

static void test_table(void **state)
{
    fill_long_inputs();
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        const struct row *w = &rows[i];
        struct dp_target t;
        char err[512] = "";
        int rc = dp_target_parse(&w->req, w->domain, &t, err, sizeof(err));

        print_message("%s: rc %d err '%s'\n", w->name, rc, err);
        assert_int_equal(rc, w->rc);
        if (rc == 0) {
            assert_string_equal(t.id, w->id);
            assert_int_equal(t.port, w->port);
            if (w->path)
                assert_string_equal(t.path, w->path);
            assert_string_equal(err, ""); /* success writes no message */
        } else if (rc == AB_EINVAL) {
            assert_non_null(w->msg);
            assert_non_null(strstr(err, w->msg));
        } else {
            assert_string_equal(err, ""); /* "not named" is not a 400 of its own */
        }
    }
}

/* Every refused form leaves a message: the 400 never has an empty error. */
static void test_err_always_set_and_bounded(void **state)
{
    fill_long_inputs();
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        struct dp_target t;
        char err[24];
        memset(err, 'Z', sizeof(err));
        if (dp_target_parse(&rows[i].req, rows[i].domain, &t, err, sizeof(err)) == AB_EINVAL) {
            assert_true(err[0] != '\0' && err[0] != 'Z');
            assert_int_equal(strlen(err), sizeof(err) - 1); /* truncated, still terminated */
        }
    }
}

static void test_cluster(void **state)
{
    static const struct {
        const char *id, *cluster; /* NULL: refused */
    } cases[] = {
        {ID, "alpha"},
        {"a-b-c-abcdefghij0123456789", "a-b-c"},
        {"ALPHA-ABCDEFGHIJ0123456789", NULL}, /* ids are lower case */
        {"alpha-ABCDEFGHIJ0123456789", NULL},
        {"alpha-abcdefghij012345678", NULL},   /* suffix one short */
        {"alpha-abcdefghij01234567890", NULL}, /* one long */
        {"-abcdefghij0123456789", NULL},       /* no cluster */
        {"abcdefghij0123456789", NULL},
        {"alpha_abcdefghij0123456789", NULL},
        {"abcdefghijklmnopqrstuvwxy-abcdefghij0123456789", NULL}, /* cluster of 25 */
        {"", NULL},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
        struct dp_target t = {.port = 1};
        char cluster[SBXID_CLUSTER_MAX + 1] = "", err[256] = "";
        ab_strlcpy(t.id, cases[i].id, sizeof(t.id));
        int rc = dp_target_cluster(&t, cluster, err, sizeof(err));
        print_message("'%s': rc %d cluster '%s' err '%s'\n", cases[i].id, rc, cluster, err);
        if (cases[i].cluster) {
            assert_int_equal(rc, 0);
            assert_string_equal(cluster, cases[i].cluster);
        } else {
            char want[200];
            assert_int_equal(rc, AB_EINVAL);
            snprintf(want, sizeof(want),
                     "sandbox id '%s' is malformed: expected <cluster>-<20 characters [a-z0-9]>",
                     cases[i].id);
            assert_string_equal(err, want);
        }
    }
}

static void test_port(void **state)
{
    assert_int_equal(dp_target_port("49983", 5), 49983);
    assert_int_equal(dp_target_port("499830", 5), 49983); /* only len bytes are read */
    assert_int_equal(dp_target_port("65535", 5), 65535);
    assert_int_equal(dp_target_port("65536", 5), 0);
    assert_int_equal(dp_target_port("99999", 5), 0);
    assert_int_equal(dp_target_port("0", 1), 0);
    assert_int_equal(dp_target_port("00001", 5), 1);
    assert_int_equal(dp_target_port("", 0), 0);
    assert_int_equal(dp_target_port("1a", 2), 0);
    assert_int_equal(dp_target_port("1\0002", 3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_err_always_set_and_bounded),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
