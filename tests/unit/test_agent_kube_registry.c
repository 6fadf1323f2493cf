/* Registry host rewrite (agent/runtime/kube/registry.c): the rule parser
 * and the rewrite of image references, as pure functions. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/kube/kube.h"
#include "agent/runtime/kube/registry.h"
#include "agentbox/loop.h"

static const char *rw1(const char *rules, const char *image)
{
    static char out[512];
    struct kube_rewrite rw = {0};
    char err[256];
    assert_int_equal(kube_rewrite_parse(&rw, rules, "test", err, sizeof(err)), 0);
    assert_int_equal(kube_rewrite_image(&rw, image, out, sizeof(out), NULL), 0);
    return out;
}

static void hosts(void **state)
{
    (void)state;
    char h[256];
    const char *rest;
    kube_image_host("python:3.12", h, sizeof(h), &rest);
    assert_string_equal(h, "docker.io");
    assert_string_equal(rest, "python:3.12");
    kube_image_host("team/app:1", h, sizeof(h), &rest);
    assert_string_equal(h, "docker.io");
    assert_string_equal(rest, "team/app:1");
    kube_image_host("ghcr.io/a/b:1", h, sizeof(h), &rest);
    assert_string_equal(h, "ghcr.io");
    assert_string_equal(rest, "a/b:1");
    kube_image_host("localhost/x", h, sizeof(h), &rest);
    assert_string_equal(h, "localhost");
    kube_image_host("reg:5000/x@sha256:ab", h, sizeof(h), &rest);
    assert_string_equal(h, "reg:5000");
    assert_string_equal(rest, "x@sha256:ab");
    /* a ':' after the first '/' is a tag, not a port */
    kube_image_host("x@sha256:ab", h, sizeof(h), &rest);
    assert_string_equal(h, "docker.io");
}

static void rewrites(void **state)
{
    (void)state;
    /* first matching FROM wins; others untouched */
    assert_string_equal(rw1("ghcr.io=ghcr.cn, ghcr.io=never.example", "ghcr.io/scitix/idle:0.0.10"),
                        "ghcr.cn/scitix/idle:0.0.10");
    assert_string_equal(rw1("ghcr.io=ghcr.cn", "quay.io/a/b:1"), "quay.io/a/b:1");
    /* host compared case-insensitively, ports are part of the host */
    assert_string_equal(rw1("GHCR.io=m.example", "ghcr.io/a:1"), "m.example/a:1");
    assert_string_equal(rw1("reg.example=m.example", "reg.example:5000/a:1"),
                        "reg.example:5000/a:1");
    assert_string_equal(rw1("reg.example:5000=m.example:443/pfx", "reg.example:5000/a@sha256:ff"),
                        "m.example:443/pfx/a@sha256:ff");
    /* Docker Hub: implied host, implied library/ */
    assert_string_equal(rw1("docker.io=mirror.cn/hub", "python:3.12"),
                        "mirror.cn/hub/library/python:3.12");
    assert_string_equal(rw1("docker.io=mirror.cn", "docker.io/python"), "mirror.cn/library/python");
    assert_string_equal(rw1("docker.io=mirror.cn", "team/app:1"), "mirror.cn/team/app:1");
    /* no rules, NULL and "" are the same */
    assert_string_equal(rw1(NULL, "ghcr.io/a:1"), "ghcr.io/a:1");
    assert_string_equal(rw1("", "ghcr.io/a:1"), "ghcr.io/a:1");
    bool changed = true;
    char out[32];
    struct kube_rewrite rw = {0};
    char err[256];
    assert_int_equal(kube_rewrite_parse(&rw, "a.io=b.io", "t", err, sizeof(err)), 0);
    assert_int_equal(kube_rewrite_image(&rw, "c.io/x", out, sizeof(out), &changed), 0);
    assert_false(changed);
    assert_int_equal(kube_rewrite_image(&rw, "a.io/x", out, sizeof(out), &changed), 0);
    assert_true(changed);
    assert_string_equal(out, "b.io/x");
    /* a result that does not fit is refused, not cut */
    assert_int_equal(
        kube_rewrite_image(&rw, "a.io/0123456789012345678901234567890", out, sizeof(out), &changed),
        AB_EINVAL);
    assert_string_equal(out, "");
}

static void refuse(const char *rules, const char *want)
{
    struct kube_rewrite rw = {0};
    char err[512] = "";
    assert_int_equal(kube_rewrite_parse(&rw, "x.io=y.io", "first", err, sizeof(err)), 0);
    assert_int_equal(kube_rewrite_parse(&rw, rules, "annotation agentbox.navix.sh/registry-rewrite",
                                        err, sizeof(err)),
                     AB_EINVAL);
    if (!strstr(err, want) || !strstr(err, "agentbox.navix.sh/registry-rewrite"))
        fail_msg("rules '%s': error '%s' lacks '%s'", rules, err, want);
    assert_int_equal(rw.n, 1); /* unchanged on error */
}

static void parse_errors(void **state)
{
    (void)state;
    refuse("ghcr.io", "rule 1 'ghcr.io' must be FROM=TO");
    refuse("a.io=b.io,,c.io=d.io", "rule 2 is empty");
    refuse("a.io=b.io,", "rule 2 is empty");
    refuse("=b.io", "rule 1: FROM ''");
    refuse("a.io/x=b.io", "rule 1: FROM 'a.io/x'");
    refuse("a.io:port=b.io", "FROM 'a.io:port'");
    refuse("a.io=", "rule 1: TO ''");
    refuse("a.io=b.io/", "TO 'b.io/'");
    refuse("a.io=b.io//x", "TO 'b.io//x'");
    refuse("a.io=b.io/UP", "TO 'b.io/UP'");
    refuse("a.io=b io", "TO 'b io'");
    char many[1024] = "";
    for (int i = 0; i < KUBE_REWRITE_RULES_MAX; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sr%d.io=m.io", i ? "," : "",
                 i);
    refuse(many, "at most 16 rules");

    /* appending: annotation then flag, order kept */
    struct kube_rewrite rw = {0};
    char err[256];
    assert_int_equal(
        kube_rewrite_parse(&rw, " a.io=b.io , c.io:5000=d.io/p ", "t", err, sizeof(err)), 0);
    assert_int_equal(kube_rewrite_parse(&rw, "a.io=never.io", "t", err, sizeof(err)), 0);
    assert_int_equal(rw.n, 3);
    assert_string_equal(rw.r[1].from, "c.io:5000");
    assert_string_equal(rw.r[1].to, "d.io/p");
    char out[128];
    assert_int_equal(kube_rewrite_image(&rw, "a.io/x:1", out, sizeof(out), NULL), 0);
    assert_string_equal(out, "b.io/x:1");
}

/* The agent's --registry-rewrite: a malformed one stops the runtime from
 * starting, naming the flag (before any kubeconfig is read). */
static void flag_refused(void **state)
{
    (void)state;
    struct loop *l = loop_new(NULL);
    assert_non_null(l);
    struct krt_options o = {.loop = l,
                            .cluster_id = "alpha",
                            .kubeconfig = "/nonexistent/kubeconfig",
                            .registry_rewrite = "ghcr.io=ghcr.cn,bogus"};
    struct rt *rt = NULL;
    char err[512] = "";
    assert_int_equal(krt_new(&o, &rt, err, sizeof(err)), AB_EINVAL);
    assert_null(rt);
    if (!strstr(err, "--registry-rewrite: rule 2 'bogus' must be FROM=TO"))
        fail_msg("error: %s", err);
    /* a good flag gets past the rule to the (missing) kubeconfig */
    o.registry_rewrite = "ghcr.io=ghcr.cn";
    err[0] = '\0';
    assert_int_not_equal(krt_new(&o, &rt, err, sizeof(err)), 0);
    assert_null(strstr(err, "registry-rewrite"));
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hosts),
        cmocka_unit_test(rewrites),
        cmocka_unit_test(parse_errors),
        cmocka_unit_test(flag_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
