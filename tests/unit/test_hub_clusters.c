/* hub/clusters_table.c: the token check of the tunnel handshake, the
 * refresh diff that revokes live sessions, and the API's view of sessions,
 * on a table filled by hand (no database). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "hub/clusters_table.h"

#define TOKEN_A "abxc_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define TOKEN_B "abxc_ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

static struct clusters_row row(const char *id, const char *token, bool disabled)
{
    struct clusters_row r;

    memset(&r, 0, sizeof(r));
    ab_strlcpy(r.id, id, sizeof(r.id));
    snprintf(r.name, sizeof(r.name), "name of %s", id);
    crypto_sha256_hex(token, r.token_hash);
    r.disabled = disabled;
    return r;
}

/* Loads rows into t; asserts success and returns the revocation count. */
static size_t load(struct clusters_table *t, const struct clusters_row *rows, size_t n,
                   struct clusters_revocation *revs)
{
    size_t nrevs = 99;

    assert_int_equal(clusters_table_replace(t, rows, n, revs, &nrevs), 0);
    return nrevs;
}

static void test_token_check(void **state)
{
    struct clusters_table t = {0};
    struct clusters_row rows[] = {row("prod-eu", TOKEN_A, false), row("lab", TOKEN_B, true)};
    char why[256];

    (void)state;
    /* Before the first load every id is unknown, and the reason says why. */
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", TOKEN_A, why, sizeof(why)),
                     AB_ENOENT);
    assert_non_null(strstr(why, "not loaded"));

    load(&t, rows, 2, NULL);
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", TOKEN_A, why, sizeof(why)), 0);

    assert_int_equal(clusters_table_check_token(&t, "prod-eu", TOKEN_B, why, sizeof(why)),
                     AB_ENOENT);
    assert_non_null(strstr(why, "wrong token for cluster 'prod-eu'"));
    assert_null(strstr(why, TOKEN_B));
    assert_null(strstr(why, "abxc_ff"));

    /* One character off: still refused. */
    char near[sizeof(TOKEN_A)];
    memcpy(near, TOKEN_A, sizeof(near));
    near[sizeof(near) - 2] = 'e';
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", near, why, sizeof(why)), AB_ENOENT);

    assert_int_equal(clusters_table_check_token(&t, "nope", TOKEN_A, why, sizeof(why)), AB_ENOENT);
    assert_non_null(strstr(why, "'nope' is not registered"));
    assert_non_null(strstr(why, "cluster add nope"));

    /* Disabled: 403 only for the holder of the right token. */
    assert_int_equal(clusters_table_check_token(&t, "lab", TOKEN_B, why, sizeof(why)), AB_EDENIED);
    assert_non_null(strstr(why, "'lab' is disabled"));
    assert_int_equal(clusters_table_check_token(&t, "lab", TOKEN_A, why, sizeof(why)), AB_ENOENT);
    assert_non_null(strstr(why, "wrong token"));

    clusters_table_free(&t);
}

static void test_token_check_bad_input(void **state)
{
    struct clusters_table t = {0};
    struct clusters_row rows[] = {row("prod-eu", TOKEN_A, false)};
    char why[256], big[CLUSTERS_TOKEN_MAX + 2];

    (void)state;
    load(&t, rows, 1, NULL);
    assert_int_equal(clusters_table_check_token(&t, "", TOKEN_A, why, sizeof(why)), AB_ENOENT);
    assert_non_null(strstr(why, "X-AgentBox-Cluster"));
    assert_int_equal(clusters_table_check_token(&t, NULL, TOKEN_A, why, sizeof(why)), AB_ENOENT);
    assert_int_equal(clusters_table_check_token(&t, "Prod-EU", TOKEN_A, why, sizeof(why)),
                     AB_ENOENT);
    assert_non_null(strstr(why, "not a valid cluster id"));
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", "", why, sizeof(why)), AB_ENOENT);
    assert_non_null(strstr(why, "missing cluster token"));
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", NULL, why, sizeof(why)), AB_ENOENT);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", big, why, sizeof(why)), AB_ENOENT);
    assert_non_null(strstr(why, "longer than"));
    /* A tiny why buffer is cut, never overrun. */
    assert_int_equal(clusters_table_check_token(&t, "prod-eu", TOKEN_B, why, 8), AB_ENOENT);
    assert_int_equal(strlen(why), 7);
    clusters_table_free(&t);
}

static void test_replace_sorts_and_finds(void **state)
{
    struct clusters_table t = {0};
    struct clusters_row rows[] = {row("c", TOKEN_A, false), row("a", TOKEN_B, false),
                                  row("b-2", TOKEN_A, false)};
    struct clusters_row dup[] = {row("x", TOKEN_A, false), row("x", TOKEN_B, false)};
    size_t nrevs = 0;

    (void)state;
    assert_int_equal(load(&t, rows, 3, NULL), 0);
    assert_int_equal(t.n, 3);
    assert_string_equal(t.v[0].row.id, "a");
    assert_string_equal(t.v[1].row.id, "b-2");
    assert_string_equal(t.v[2].row.id, "c");
    assert_non_null(clusters_table_find(&t, "b-2"));
    assert_null(clusters_table_find(&t, "b"));

    /* A duplicate id is refused and leaves the table as it was. */
    assert_int_equal(clusters_table_replace(&t, dup, 2, NULL, &nrevs), AB_EINVAL);
    assert_int_equal(t.n, 3);
    assert_non_null(clusters_table_find(&t, "a"));

    /* Empty refresh: everything gone. */
    struct clusters_revocation revs[3];
    assert_int_equal(load(&t, NULL, 0, revs), 3);
    assert_int_equal(t.n, 0);
    assert_null(clusters_table_find(&t, "a"));
    clusters_table_free(&t);
}

static void test_replace_revokes(void **state)
{
    struct clusters_table t = {0};
    struct clusters_row first[] = {row("keep", TOKEN_A, false),   row("dis", TOKEN_A, false),
                                   row("rot", TOKEN_A, false),    row("gone", TOKEN_A, false),
                                   row("was-off", TOKEN_A, true), row("still-off", TOKEN_A, true)};
    struct clusters_row second[] = {row("keep", TOKEN_A, false),     row("dis", TOKEN_A, true),
                                    row("rot", TOKEN_B, false),      row("was-off", TOKEN_A, false),
                                    row("still-off", TOKEN_A, true), row("new", TOKEN_B, false)};
    struct clusters_revocation revs[6];
    size_t n;
    int seen = 0;

    (void)state;
    /* The first load revokes nothing, even disabled clusters. */
    assert_int_equal(load(&t, first, 6, revs), 0);
    n = load(&t, second, 6, revs);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(revs[i].id, "dis") == 0) {
            assert_string_equal(revs[i].reason, "cluster disabled");
            seen |= 1;
        } else if (strcmp(revs[i].id, "rot") == 0) {
            assert_string_equal(revs[i].reason, "token rotated");
            seen |= 2;
        } else if (strcmp(revs[i].id, "gone") == 0) {
            assert_string_equal(revs[i].reason, "cluster removed");
            seen |= 4;
        } else {
            fail_msg("unexpected revocation of %s (%s)", revs[i].id, revs[i].reason);
        }
    }
    assert_int_equal(seen, 7);
    /* The same rows again: nothing changed, nothing revoked. */
    assert_int_equal(load(&t, second, 6, revs), 0);
    clusters_table_free(&t);
}

static void test_sessions_in_memory(void **state)
{
    struct clusters_table t = {0};
    struct clusters_row rows[] = {row("a", TOKEN_A, false), row("b", TOKEN_B, false)};
    struct cluster_info ci;
    int64_t epochs[4];

    (void)state;
    rows[1].db_epoch = 7;
    rows[1].db_online = true; /* live on another hub */
    rows[1].db_last_seen_ms = 5000;
    ab_strlcpy(rows[1].agent_version, "0.3.0", sizeof(rows[1].agent_version));
    load(&t, rows, 2, NULL);

    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_false(ci.online);
    assert_int_equal(ci.epoch, 0);
    assert_int_equal(ci.last_seen_ms, 0);
    assert_string_equal(ci.name, "name of a");
    clusters_table_info(clusters_table_find(&t, "b"), &ci);
    assert_true(ci.online);
    assert_int_equal(ci.epoch, 7);
    assert_int_equal(ci.last_seen_ms, 5000);
    assert_string_equal(ci.agent_version, "0.3.0");

    clusters_table_online(&t, "a", 10, 1000);
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_true(ci.online);
    assert_int_equal(ci.epoch, 10);
    assert_int_equal(ci.last_seen_ms, 1000);

    /* An older session coming up late does not replace the live one. */
    clusters_table_online(&t, "a", 9, 1100);
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_int_equal(ci.epoch, 10);

    /* Live state survives a refresh. */
    load(&t, rows, 2, NULL);
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_true(ci.online);
    assert_int_equal(ci.epoch, 10);

    clusters_table_touch(&t, "a", 10, 2000);
    clusters_table_touch(&t, "b", 7, 2500);
    clusters_table_touch(&t, "unknown", 3, 2500);
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_int_equal(ci.last_seen_ms, 2000);
    assert_int_equal(clusters_table_take_seen(&t, epochs, 4), 2);
    assert_int_equal(epochs[0], 10);
    assert_int_equal(epochs[1], 7);
    /* Touches are taken once; a live session is seen at every flush. */
    assert_int_equal(clusters_table_take_seen(&t, epochs, 4), 1);
    assert_int_equal(epochs[0], 10);
    /* Bounded: entries past max wait for the next flush. */
    clusters_table_touch(&t, "a", 10, 3000);
    clusters_table_touch(&t, "b", 7, 3000);
    assert_int_equal(clusters_table_take_seen(&t, epochs, 1), 1);
    assert_int_equal(epochs[0], 10);
    assert_int_equal(clusters_table_take_seen(&t, epochs, 4), 2);
    assert_int_equal(epochs[1], 7);
    /* A touch of an older session than the live one is written too. */
    clusters_table_touch(&t, "a", 9, 3000);
    assert_int_equal(clusters_table_take_seen(&t, epochs, 4), 2);
    assert_int_equal(epochs[0], 10);
    assert_int_equal(epochs[1], 9);
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_int_equal(ci.last_seen_ms, 3000);

    /* Ending an older epoch leaves the live session. */
    assert_false(clusters_table_end(&t, "a", 9));
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_true(ci.online);
    assert_true(clusters_table_end(&t, "a", 10));
    clusters_table_info(clusters_table_find(&t, "a"), &ci);
    assert_false(ci.online);
    assert_int_equal(ci.last_seen_ms, 3000);

    /* Ending the session the database says is online turns it offline now. */
    assert_false(clusters_table_end(&t, "b", 7));
    clusters_table_info(clusters_table_find(&t, "b"), &ci);
    assert_false(ci.online);
    clusters_table_free(&t);
}

static void test_format_time(void **state)
{
    char out[32];

    (void)state;
    clusters_format_time(INT64_C(1714564800123), out, sizeof(out));
    assert_string_equal(out, "2024-05-01T12:00:00Z");
    clusters_format_time(0, out, sizeof(out));
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    clusters_format_time(INT64_C(1714564800123), out, 5);
    assert_string_equal(out, "");
}

/* The namespace boundary: a table of allowed and refused cases. */
static void test_namespace_list(void **state)
{
    static const struct {
        const char *list, *ns;
        bool ok;
    } cases[] = {
        {"", "default", true}, {NULL, "team-a", true},    {"a,b", "a", true},
        {"a,b", "b", true},    {"a,b", "c", false},       {"a,b", "", false},
        {"", "", false},       {"a,b", NULL, false},      {"ab", "a", false},
        {"a", "ab", false},    {"team-a", "team", false}, {"x,team-a", "team-a", true},
        {"a,b", "a,b", false},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (clusters_list_has_ns(cases[i].list, cases[i].ns) != cases[i].ok)
            fail_msg("case %zu: list '%s' ns '%s' should be %s", i,
                     cases[i].list ? cases[i].list : "(null)", cases[i].ns ? cases[i].ns : "(null)",
                     cases[i].ok ? "allowed" : "refused");
    }
}

static void test_namespace_parse(void **state)
{
    char out[CLUSTERS_NS_BUF], err[256];
    (void)state;
    assert_int_equal(clusters_parse_ns_list("*", out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "");
    assert_int_equal(clusters_parse_ns_list("", out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "");
    assert_int_equal(clusters_parse_ns_list("a, b,a", out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "a,b");
    assert_int_equal(clusters_parse_ns_list("a,,b", out, sizeof(out), err, sizeof(err)), AB_EINVAL);
    assert_int_equal(clusters_parse_ns_list("Team", out, sizeof(out), err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "'Team'"));
    assert_int_equal(clusters_parse_ns_list("-a", out, sizeof(out), err, sizeof(err)), AB_EINVAL);
    assert_int_equal(clusters_parse_ns_list("a,*", out, sizeof(out), err, sizeof(err)), AB_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_check),
        cmocka_unit_test(test_token_check_bad_input),
        cmocka_unit_test(test_replace_sorts_and_finds),
        cmocka_unit_test(test_replace_revokes),
        cmocka_unit_test(test_sessions_in_memory),
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_namespace_list),
        cmocka_unit_test(test_namespace_parse),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
