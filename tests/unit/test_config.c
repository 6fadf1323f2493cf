/* Config: precedence of flag > environment > file > default for every type,
 * flag grammar, and the exact wording of each error an operator can meet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/config.h"

struct tcfg {
    char *cluster_id;
    int64_t port;
    bool verbose;
    int64_t timeout_ms;
    int64_t max_body;
    char *listen;
    char *database_url;
};

#define ALIAS "CFGLOG_TEST_DATABASE_URL"

static const struct cfg_option opts[] = {
    {"cluster_id", CFG_STRING, NULL, true, offsetof(struct tcfg, cluster_id), "cluster name", NULL},
    {"port", CFG_INT, "7700", false, offsetof(struct tcfg, port), "listen port", NULL},
    {"verbose", CFG_BOOL, "false", false, offsetof(struct tcfg, verbose), "log more", NULL},
    {"timeout", CFG_DURATION, "30s", false, offsetof(struct tcfg, timeout_ms), "request timeout",
     NULL},
    {"max_body", CFG_SIZE, "1MiB", false, offsetof(struct tcfg, max_body), "largest body", NULL},
    {"listen", CFG_STRING, ":7700", false, offsetof(struct tcfg, listen), "address", NULL},
    {"database_url", CFG_STRING, NULL, false, offsetof(struct tcfg, database_url), "PostgreSQL URL",
     ALIAS},
};
#define NOPTS AB_ARRAY_LEN(opts)

static const char *const env_vars[] = {
    "AGENTBOX_CLUSTER_ID",   "AGENTBOX_PORT",     "AGENTBOX_VERBOSE",
    "AGENTBOX_TIMEOUT",      "AGENTBOX_MAX_BODY", "AGENTBOX_LISTEN",
    "AGENTBOX_DATABASE_URL", "AGENTBOX_CONFIG",   ALIAS,
};

static char g_paths[4][64];
static int g_npaths;

static int setup(void **state)
{
    for (size_t i = 0; i < AB_ARRAY_LEN(env_vars); i++)
        unsetenv(env_vars[i]);
    g_npaths = 0;
    return 0;
}

static int teardown(void **state)
{
    for (size_t i = 0; i < AB_ARRAY_LEN(env_vars); i++)
        unsetenv(env_vars[i]);
    for (int i = 0; i < g_npaths; i++)
        unlink(g_paths[i]);
    return 0;
}

/* A temp file holding len bytes of text; removed by teardown. */
static const char *temp_file(const char *text, size_t len)
{
    char *p = g_paths[g_npaths++];
    int fd;

    snprintf(p, sizeof(g_paths[0]), "/tmp/cfglog-test-XXXXXX");
    fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return p;
}

static const char *temp_yaml(const char *text)
{
    return temp_file(text, strlen(text));
}

static int load_v(struct tcfg *c, struct cfg_result *r, char *err, size_t errlen, char **argv)
{
    int argc = 0;

    while (argv[argc])
        argc++;
    return cfg_load(opts, NOPTS, c, argc, argv, r, err, errlen);
}

#define LOAD(c, r, err, ...) load_v((c), (r), (err), sizeof(err), (char *[]){__VA_ARGS__, NULL})

static void test_defaults(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "alpha"), 0);
    assert_string_equal(c.cluster_id, "alpha");
    assert_int_equal(c.port, 7700);
    assert_false(c.verbose);
    assert_int_equal(c.timeout_ms, 30000);
    assert_int_equal(c.max_body, 1024 * 1024);
    assert_string_equal(c.listen, ":7700");
    assert_null(c.database_url);
    assert_int_equal(r.npositional, 0);
    assert_false(r.help);
    cfg_free(opts, NOPTS, &c);
    assert_null(c.cluster_id);
    assert_null(c.listen);
}

static void test_precedence_every_type(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];
    const char *path = temp_yaml("# settings\n"
                                 "cluster_id: file-id\n"
                                 "port: 1001\n"
                                 "verbose: yes\n"
                                 "timeout: 1s\n"
                                 "max_body: 1KiB\n"
                                 "listen: \"file addr\"\n");

    /* File over defaults. */
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), 0);
    assert_string_equal(c.cluster_id, "file-id");
    assert_int_equal(c.port, 1001);
    assert_true(c.verbose);
    assert_int_equal(c.timeout_ms, 1000);
    assert_int_equal(c.max_body, 1024);
    assert_string_equal(c.listen, "file addr");
    cfg_free(opts, NOPTS, &c);

    /* Environment over file. */
    setenv("AGENTBOX_CLUSTER_ID", "env-id", 1);
    setenv("AGENTBOX_PORT", "2002", 1);
    setenv("AGENTBOX_VERBOSE", "off", 1);
    setenv("AGENTBOX_TIMEOUT", "2m", 1);
    setenv("AGENTBOX_MAX_BODY", "2MiB", 1);
    setenv("AGENTBOX_LISTEN", "env:1", 1);
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), 0);
    assert_string_equal(c.cluster_id, "env-id");
    assert_int_equal(c.port, 2002);
    assert_false(c.verbose);
    assert_int_equal(c.timeout_ms, 120000);
    assert_int_equal(c.max_body, 2 * 1024 * 1024);
    assert_string_equal(c.listen, "env:1");
    cfg_free(opts, NOPTS, &c);

    /* Flags over environment. */
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path, "--cluster-id", "flag-id",
                          "--port=3003", "--verbose", "--timeout", "250ms", "--max-body=3GiB",
                          "--listen", "flag:2"),
                     0);
    assert_string_equal(c.cluster_id, "flag-id");
    assert_int_equal(c.port, 3003);
    assert_true(c.verbose);
    assert_int_equal(c.timeout_ms, 250);
    assert_int_equal(c.max_body, 3LL * 1024 * 1024 * 1024);
    assert_string_equal(c.listen, "flag:2");
    cfg_free(opts, NOPTS, &c);

    /* Each layer at once: flag, env, file and default on different keys. */
    unsetenv("AGENTBOX_PORT");
    unsetenv("AGENTBOX_TIMEOUT");
    unsetenv("AGENTBOX_MAX_BODY");
    unsetenv("AGENTBOX_VERBOSE");
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path, "--port", "4004"), 0);
    assert_int_equal(c.port, 4004);              /* flag */
    assert_string_equal(c.cluster_id, "env-id"); /* env */
    assert_int_equal(c.timeout_ms, 1000);        /* file */
    assert_null(c.database_url);                 /* default (none) */
    cfg_free(opts, NOPTS, &c);
}

static void test_bool_flag_forms(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    setenv("AGENTBOX_VERBOSE", "true", 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=a", "--no-verbose"), 0);
    assert_false(c.verbose);
    cfg_free(opts, NOPTS, &c);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=a", "--verbose=no"), 0);
    assert_false(c.verbose);
    cfg_free(opts, NOPTS, &c);
    unsetenv("AGENTBOX_VERBOSE");
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=a", "--verbose=ON"), 0);
    assert_true(c.verbose);
    cfg_free(opts, NOPTS, &c);

    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=a", "--no-verbose=1"), AB_EINVAL);
    assert_string_equal(err, "flag --no-verbose takes no value; use --verbose=false");
    assert_null(c.cluster_id);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=a", "--no-port"), AB_EINVAL);
    assert_non_null(strstr(err, "unknown flag '--no-port'"));
}

static void test_env_alias_lower_than_agentbox_var(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];
    const char *path = temp_yaml("cluster_id: a\ndatabase_url: postgres://file\n");

    setenv(ALIAS, "postgres://alias", 1);
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), 0);
    assert_string_equal(c.database_url, "postgres://alias"); /* alias beats file */
    cfg_free(opts, NOPTS, &c);

    setenv("AGENTBOX_DATABASE_URL", "postgres://agentbox", 1);
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), 0);
    assert_string_equal(c.database_url, "postgres://agentbox");
    cfg_free(opts, NOPTS, &c);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path, "--database-url", "pg://flag"), 0);
    assert_string_equal(c.database_url, "pg://flag");
    cfg_free(opts, NOPTS, &c);
}

static void test_config_from_environment(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];
    const char *a = temp_yaml("cluster_id: from-env-file\n");
    const char *b = temp_yaml("cluster_id: from-flag-file\n");

    setenv("AGENTBOX_CONFIG", a, 1);
    assert_int_equal(LOAD(&c, &r, err, "x"), 0);
    assert_string_equal(c.cluster_id, "from-env-file");
    cfg_free(opts, NOPTS, &c);
    assert_int_equal(LOAD(&c, &r, err, "--config=", "x"), AB_EINVAL);
    assert_string_equal(err, "flag --config: the file name is empty");
    {
        char arg[128];
        snprintf(arg, sizeof(arg), "--config=%s", b);
        assert_int_equal(LOAD(&c, &r, err, arg), 0);
    }
    assert_string_equal(c.cluster_id, "from-flag-file");
    cfg_free(opts, NOPTS, &c);
}

static void test_unknown_key_with_line_and_suggestion(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512], want[512];
    const char *path = temp_yaml("cluster_id: a\nport: 1\nclustr_id: b\n");
    const char *path2 = temp_yaml("cluster_id: a\n\nzzzzzzzz: 1\n");

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 3: unknown key 'clustr_id'; did you mean 'cluster_id'?", path);
    assert_string_equal(err, want);
    assert_null(c.cluster_id); /* freed on error */

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path2), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 3: unknown key 'zzzzzzzz' (see --help for the options)", path2);
    assert_string_equal(err, want);
}

static void test_wrong_type_in_file_env_flag(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512], want[512];
    const char *p1 = temp_yaml("cluster_id: a\ntimeout: abc\n");
    const char *p2 = temp_yaml("cluster_id: a\n\n\nmax_body: 10MB\n");
    const char *p3 = temp_yaml("verbose: maybe\n");

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)p1), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 2: timeout: 'abc' is not a duration (use 500ms, 30s, 5m)", p1);
    assert_string_equal(err, want);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)p2), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 4: max_body: '10MB' is not a size (use 512, 64KiB, 1MiB, 2GiB)",
             p2);
    assert_string_equal(err, want);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)p3), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 1: verbose: 'maybe' is not a boolean "
             "(use true/false, yes/no, on/off, 1/0)",
             p3);
    assert_string_equal(err, want);

    setenv("AGENTBOX_TIMEOUT", "abc", 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a"), AB_EINVAL);
    assert_string_equal(
        err, "environment AGENTBOX_TIMEOUT: 'abc' is not a duration (use 500ms, 30s, 5m)");
    unsetenv("AGENTBOX_TIMEOUT");

    setenv("AGENTBOX_VERBOSE", "sure", 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a"), AB_EINVAL);
    assert_string_equal(err, "environment AGENTBOX_VERBOSE: 'sure' is not a boolean "
                             "(use true/false, yes/no, on/off, 1/0)");
    unsetenv("AGENTBOX_VERBOSE");

    setenv("AGENTBOX_PORT", "80x", 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a"), AB_EINVAL);
    assert_string_equal(
        err, "environment AGENTBOX_PORT: '80x' is not an integer (use digits, e.g. 8080)");
    unsetenv("AGENTBOX_PORT");

    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--port=eighty"), AB_EINVAL);
    assert_string_equal(err, "flag --port: 'eighty' is not an integer (use digits, e.g. 8080)");
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--timeout", "5 minutes"), AB_EINVAL);
    assert_string_equal(err, "flag --timeout: '5 minutes' is not a duration (use 500ms, 30s, 5m)");
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--max-body", "1.5GiB"), AB_EINVAL);
    assert_string_equal(err,
                        "flag --max-body: '1.5GiB' is not a size (use 512, 64KiB, 1MiB, 2GiB)");
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--verbose=2"), AB_EINVAL);
    assert_string_equal(err, "flag --verbose: '2' is not a boolean "
                             "(use true/false, yes/no, on/off, 1/0)");
    assert_null(c.cluster_id);
}

static void test_missing_required(void **state)
{
    static const struct cfg_option ropts[] = {
        {"database_url", CFG_STRING, NULL, true, offsetof(struct tcfg, database_url), "db", ALIAS},
    };
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    assert_int_equal(LOAD(&c, &r, err, "pos"), AB_EINVAL);
    assert_string_equal(err, "cluster_id is required: set --cluster-id, AGENTBOX_CLUSTER_ID or "
                             "cluster_id in the config file");
    /* An empty value is not a value. */
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id="), AB_EINVAL);
    assert_non_null(strstr(err, "cluster_id is required"));

    assert_int_equal(cfg_load(ropts, 1, &c, 0, (char *[]){NULL}, &r, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(
        err, "database_url is required: set --database-url, AGENTBOX_DATABASE_URL, " ALIAS
             " or database_url in the config file");
    setenv(ALIAS, "pg://x", 1);
    assert_int_equal(cfg_load(ropts, 1, &c, 0, (char *[]){NULL}, &r, err, sizeof(err)), 0);
    assert_string_equal(c.database_url, "pg://x");
    cfg_free(ropts, 1, &c);
}

static void test_help_skips_required(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    assert_int_equal(LOAD(&c, &r, err, "--help"), 0);
    assert_true(r.help);
    assert_null(c.cluster_id);
    assert_int_equal(c.port, 7700);
    cfg_free(opts, NOPTS, &c);
    assert_int_equal(LOAD(&c, &r, err, "sub", "-h"), 0);
    assert_true(r.help);
    assert_int_equal(r.npositional, 1);
    cfg_free(opts, NOPTS, &c);
}

static void test_unknown_flag(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--bogus"), AB_EINVAL);
    assert_string_equal(err, "unknown flag '--bogus' (see --help)");
    /* The value is never echoed: it could be a secret. */
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--portt=s3cret"), AB_EINVAL);
    assert_string_equal(err, "unknown flag '--portt'; did you mean '--port'?");
    assert_int_equal(LOAD(&c, &r, err, "-x"), AB_EINVAL);
    assert_string_equal(err, "unknown flag '-x' (flags are spelled --name; see --help)");
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--port"), AB_EINVAL);
    assert_string_equal(err, "flag --port needs a value: --port N");
    assert_int_equal(LOAD(&c, &r, err, "--config"), AB_EINVAL);
    assert_string_equal(err, "flag --config needs a value: --config FILE");
}

static void test_positionals(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];

    /* Intermixed with flags; a bool flag does not take the next word. */
    assert_int_equal(
        LOAD(&c, &r, err, "a", "--port", "5", "b", "--verbose", "c", "--cluster-id=x", "-"), 0);
    assert_int_equal(r.npositional, 4);
    assert_string_equal(r.positional[0], "a");
    assert_string_equal(r.positional[1], "b");
    assert_string_equal(r.positional[2], "c");
    assert_string_equal(r.positional[3], "-");
    assert_int_equal(c.port, 5);
    assert_true(c.verbose);
    cfg_free(opts, NOPTS, &c);

    /* "--" ends flags. */
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=x", "--port=1", "--", "--verbose", "-x"), 0);
    assert_int_equal(r.npositional, 2);
    assert_string_equal(r.positional[0], "--verbose");
    assert_string_equal(r.positional[1], "-x");
    assert_false(c.verbose);
    assert_int_equal(c.port, 1);
    cfg_free(opts, NOPTS, &c);

    /* Eight fit, nine do not. */
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id=x", "1", "2", "3", "4", "5", "6", "7", "8"),
                     0);
    assert_int_equal(r.npositional, CFG_MAX_POSITIONAL);
    cfg_free(opts, NOPTS, &c);
    assert_int_equal(
        LOAD(&c, &r, err, "--cluster-id=x", "1", "2", "3", "4", "5", "6", "7", "8", "nine"),
        AB_EINVAL);
    assert_string_equal(
        err, "too many arguments: at most 8 are accepted, 'nine' is one more (see --help)");

    /* No result struct: positionals are refused. */
    assert_int_equal(cfg_load(opts, NOPTS, &c, 2, (char *[]){"--cluster-id=x", "extra", NULL}, NULL,
                              err, sizeof(err)),
                     AB_EINVAL);
    assert_string_equal(err, "unexpected argument 'extra': this command takes none");
}

static void test_yaml_structure_errors(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512], want[512];
    const char *nested = temp_yaml("cluster_id: a\nport:\n  inner: 1\n");
    const char *list = temp_yaml("cluster_id: [a, b]\n");
    const char *dup = temp_yaml("cluster_id: a\nport: 1\nport: 2\n");
    const char *bad = temp_yaml("cluster_id: a\nport: 1: 2\n");

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)nested), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 3: 'port' must be a single value, not a mapping "
             "(options are flat: write port: VALUE)",
             nested);
    assert_string_equal(err, want);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)list), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 1: 'cluster_id' must be a single value, not a list "
             "(options are flat: write cluster_id: VALUE)",
             list);
    assert_string_equal(err, want);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)dup), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s line 3: key 'port' is already set on line 2; keep one", dup);
    assert_string_equal(err, want);

    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)bad), AB_EINVAL);
    snprintf(want, sizeof(want), "config file %s line 2: invalid YAML: ", bad);
    assert_true(strncmp(err, want, strlen(want)) == 0);

    assert_int_equal(
        cfg_load_yaml_buffer(opts, NOPTS, &c, "- a\n- b\n", 8, "t.yaml", err, sizeof(err)),
        AB_EINVAL);
    assert_string_equal(err, "config file t.yaml line 1: the top level must be a mapping of "
                             "'key: value' lines, found a list");
    assert_int_equal(
        cfg_load_yaml_buffer(opts, NOPTS, &c, "a: &x 1\nb: *x\n", 14, "t.yaml", err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "unknown key 'a'"));
    assert_int_equal(cfg_load_yaml_buffer(opts, NOPTS, &c, "port: &x 1\nlisten: *x\n", 22, "t.yaml",
                                          err, sizeof(err)),
                     AB_EINVAL);
    assert_string_equal(err, "config file t.yaml line 2: aliases (*name) are not supported; "
                             "write the value");
    assert_int_equal(cfg_load_yaml_buffer(opts, NOPTS, &c, "port: 1\n---\nport: 2\n", 20, "t.yaml",
                                          err, sizeof(err)),
                     AB_EINVAL);
    assert_string_equal(err, "config file t.yaml line 2: only one YAML document is allowed; "
                             "remove the second '---'");
}

static void test_limits(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512], want[512];
    size_t big = CFG_FILE_MAX + 1;
    char *text = malloc(big);
    char *val = malloc(CFG_VALUE_MAX + 2);
    const char *path;

    memset(text, '#', big);
    path = temp_file(text, big);
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path), AB_EINVAL);
    snprintf(want, sizeof(want),
             "config file %s is larger than the 1 MiB limit; keep only settings in it", path);
    assert_string_equal(err, want);
    /* Exactly the limit is fine. */
    path = temp_file(text, CFG_FILE_MAX);
    assert_int_equal(LOAD(&c, &r, err, "--config", (char *)path, "--cluster-id", "a"), 0);
    cfg_free(opts, NOPTS, &c);

    memset(val, 'v', CFG_VALUE_MAX + 1);
    val[CFG_VALUE_MAX + 1] = '\0';
    setenv("AGENTBOX_LISTEN", val, 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a"), AB_EINVAL);
    assert_string_equal(err, "environment AGENTBOX_LISTEN: value is 65537 bytes, longer than the "
                             "64 KiB limit; shorten it");
    val[CFG_VALUE_MAX] = '\0';
    setenv("AGENTBOX_LISTEN", val, 1);
    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a"), 0);
    assert_int_equal(strlen(c.listen), CFG_VALUE_MAX);
    cfg_free(opts, NOPTS, &c);

    assert_int_equal(LOAD(&c, &r, err, "--config", "/nonexistent/agentbox.yaml"), AB_EINVAL);
    assert_string_equal(err, "config file /nonexistent/agentbox.yaml (from --config): cannot "
                             "open: No such file or directory; check the path");
    free(val);
    free(text);
}

static void test_yaml_buffer_applies_on_top(void **state)
{
    struct tcfg c;
    struct cfg_result r;
    char err[512];
    const char *doc = "# comment\n"
                      "listen: '0.0.0.0:1'\n"
                      "port: ~\n"
                      "database_url:\n"
                      "cluster_id: \"\"\n"
                      "verbose: On\n";

    assert_int_equal(LOAD(&c, &r, err, "--cluster-id", "a", "--port", "9"), 0);
    assert_int_equal(
        cfg_load_yaml_buffer(opts, NOPTS, &c, doc, strlen(doc), "mem", err, sizeof(err)), 0);
    assert_string_equal(c.listen, "0.0.0.0:1"); /* old string freed (ASan would notice) */
    assert_int_equal(c.port, 9);                /* null leaves it */
    assert_null(c.database_url);
    assert_string_equal(c.cluster_id, ""); /* quoted empty is a value */
    assert_true(c.verbose);
    assert_int_equal(cfg_load_yaml_buffer(opts, NOPTS, &c, "", 0, "mem", err, sizeof(err)), 0);
    assert_int_equal(
        cfg_load_yaml_buffer(opts, NOPTS, &c, "---\n...\n", 8, "mem", err, sizeof(err)), 0);
    assert_int_equal(
        cfg_load_yaml_buffer(opts, NOPTS, &c, "port: \"7\"\0x", 12, "mem", err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "config file mem"));
    cfg_free(opts, NOPTS, &c);
    assert_null(c.listen);
    assert_null(c.cluster_id);
    cfg_free(opts, NOPTS, &c); /* twice is harmless */
}

static void test_parsers(void **state)
{
    int64_t v;
    bool b;

    assert_int_equal(cfg_parse_duration("250ms", &v), 0);
    assert_int_equal(v, 250);
    assert_int_equal(cfg_parse_duration("30s", &v), 0);
    assert_int_equal(v, 30000);
    assert_int_equal(cfg_parse_duration("5m", &v), 0);
    assert_int_equal(v, 300000);
    assert_int_equal(cfg_parse_duration("1h", &v), 0);
    assert_int_equal(v, 3600000);
    assert_int_equal(cfg_parse_duration("1m30s", &v), 0);
    assert_int_equal(v, 90000);
    assert_int_equal(cfg_parse_duration("10", &v), 0);
    assert_int_equal(v, 10000);
    assert_int_equal(cfg_parse_duration("0", &v), 0);
    assert_int_equal(v, 0);
    const char *bad_d[] = {"",
                           "abc",
                           "5x",
                           "-1",
                           "1.5s",
                           "10 s",
                           " 1s",
                           "1m30",
                           "s",
                           "99999999999999999999",
                           "9999999999999999h"};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad_d); i++)
        assert_int_equal(cfg_parse_duration(bad_d[i], &v), AB_EINVAL);

    assert_int_equal(cfg_parse_size("512", &v), 0);
    assert_int_equal(v, 512);
    assert_int_equal(cfg_parse_size("64KiB", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(cfg_parse_size("1MiB", &v), 0);
    assert_int_equal(v, 1048576);
    assert_int_equal(cfg_parse_size("2GiB", &v), 0);
    assert_int_equal(v, 2147483648LL);
    assert_int_equal(cfg_parse_size("3mi", &v), 0);
    assert_int_equal(v, 3 * 1048576);
    assert_int_equal(cfg_parse_size("7B", &v), 0);
    assert_int_equal(v, 7);
    const char *bad_s[] = {"",       "MiB",   "10MB",          "-1",
                           "1.5GiB", "1 KiB", "9999999999TiB", "99999999999999999999"};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad_s); i++)
        assert_int_equal(cfg_parse_size(bad_s[i], &v), AB_EINVAL);

    const char *yes[] = {"true", "TRUE", "yes", "on", "1"};
    const char *no[] = {"false", "No", "off", "0"};
    for (size_t i = 0; i < AB_ARRAY_LEN(yes); i++) {
        b = false;
        assert_int_equal(cfg_parse_bool(yes[i], &b), 0);
        assert_true(b);
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(no); i++) {
        b = true;
        assert_int_equal(cfg_parse_bool(no[i], &b), 0);
        assert_false(b);
    }
    assert_int_equal(cfg_parse_bool("", &b), AB_EINVAL);
    assert_int_equal(cfg_parse_bool("y", &b), AB_EINVAL);
    assert_int_equal(cfg_parse_bool("2", &b), AB_EINVAL);
}

static void test_print_help(void **state)
{
    FILE *f = tmpfile();
    char buf[8192];
    size_t n;
    const char *lines[16];
    int nl = 0;
    long col = -1;

    cfg_print_help(f, "agentbox-hub serve [flags]", "Run the hub.", opts, NOPTS);
    rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);

    assert_true(strncmp(buf, "Usage: agentbox-hub serve [flags]\n\nRun the hub.\n", 48) == 0);
    for (char *p = strtok(buf, "\n"); p && nl < 16; p = strtok(NULL, "\n"))
        lines[nl++] = p;
    /* Every option row names the flag, env var, key and default, env aligned. */
    for (int i = 0; i < nl; i++) {
        const char *env = strstr(lines[i], "AGENTBOX_");

        if (!env)
            continue;
        if (col < 0)
            col = env - lines[i];
        assert_int_equal(env - lines[i], col);
    }
    assert_true(col > 0);
    buf[n] = '\0';
    {
        int found = 0;
        for (int i = 0; i < nl; i++) {
            if (strstr(lines[i], "--timeout DURATION") && strstr(lines[i], "AGENTBOX_TIMEOUT") &&
                strstr(lines[i], " timeout ") && strstr(lines[i], "30s") &&
                strstr(lines[i], "request timeout"))
                found++;
            if (strstr(lines[i], "--cluster-id VALUE") && strstr(lines[i], "(required)"))
                found++;
            if (strstr(lines[i], "--[no-]verbose") && strstr(lines[i], "false"))
                found++;
            if (strstr(lines[i], "AGENTBOX_DATABASE_URL, " ALIAS))
                found++;
            if (strstr(lines[i], "--config FILE") && strstr(lines[i], "AGENTBOX_CONFIG"))
                found++;
        }
        assert_int_equal(found, 5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bool_flag_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_alias_lower_than_agentbox_var, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_from_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key_with_line_and_suggestion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_type_in_file_env_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_required, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_skips_required, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positionals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_structure_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_buffer_applies_on_top, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parsers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_help, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
