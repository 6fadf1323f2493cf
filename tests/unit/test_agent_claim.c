/* agent/claim.c: the error→status table of each API surface, where a
 * reference goes, the image capability, and claim_start's refusals and
 * hand-off to the runtime (through a fake runtime that records the call). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agent/claim.h"
#include "agentbox/common.h"
#include "agentbox/ref.h"
#include "agentbox/sbxid.h"

/* Every code runtime.h documents, and the two a surface also meets. */
static void test_status_tables(void **state)
{
    (void)state;
    static const struct {
        int err, e2b, native;
    } rows[] = {
        {AB_ENOENT, 400, 404}, /* E2B: an unknown template is a bad request */
        {AB_EINVAL, 400, 400},   {AB_EEXIST, 409, 409},
        {AB_EBUSY, 503, 429}, /* E2B clients retry a 503; native callers read 429 */
        {AB_ETIMEOUT, 504, 504}, {AB_EIO, 502, 502},
        {AB_ECLOSED, 503, 503},  {AB_ENOMEM, 503, 503},
        {AB_EDENIED, 502, 503},  {AB_ELIMIT, 502, 503},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        assert_int_equal(claim_status(CLAIM_E2B, rows[i].err), rows[i].e2b);
        assert_int_equal(claim_status(CLAIM_NATIVE, rows[i].err), rows[i].native);
    }
}

static int where(const char *self, const char *tmpl, char *err, size_t errlen)
{
    struct ref r;
    assert_int_equal(ref_parse(tmpl, &r), 0);
    return claim_where(self, &r, err, errlen);
}

static void test_where(void **state)
{
    char err[256] = "";
    (void)state;
    assert_int_equal(where("alpha", "base", err, sizeof(err)), CLAIM_PLACE);
    assert_int_equal(where("alpha", "base//img:1", err, sizeof(err)), CLAIM_PLACE);
    assert_int_equal(where("alpha", "alpha::base", err, sizeof(err)), CLAIM_HERE);
    assert_int_equal(where("alpha", "alpha::base-2c4gi", err, sizeof(err)), CLAIM_HERE);
    assert_int_equal(where("alpha", "beta::base", err, sizeof(err)), CLAIM_REMOTE);
    assert_string_equal(err, "");
    /* a prefix that cannot be a cluster id is refused, naming it */
    assert_int_equal(where("alpha", "Not_A-Cluster::base", err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "'Not_A-Cluster' is not a cluster id"));
    err[0] = '\0';
    char long_prefix[64];
    memset(long_prefix, 'a', 30);
    snprintf(long_prefix + 30, sizeof(long_prefix) - 30, "::base");
    assert_int_equal(where("alpha", long_prefix, err, sizeof(err)), AB_EINVAL);
    assert_true(err[0] != '\0');
}

/* --- a fake runtime -------------------------------------------------------------------- */

struct fake_rt {
    struct rt rt;
    int calls;
    int answer; /* what claim returns */
    char ns[64], name[64], group[64];
    bool group_null;
    enum rt_target target;
    const struct rt_claim_options *o;
};

static int fake_claim(struct rt *rt, const char *ns, const char *name, enum rt_target target,
                      const char *scaling_group, const struct rt_claim_options *o, rt_claim_cb cb,
                      void *arg, uint64_t *ticket, char *err, size_t errlen)
{
    struct fake_rt *f = (struct fake_rt *)rt;
    (void)cb, (void)arg, (void)ticket;
    f->calls++;
    snprintf(f->ns, sizeof(f->ns), "%s", ns);
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->group_null = scaling_group == NULL;
    snprintf(f->group, sizeof(f->group), "%s", scaling_group ? scaling_group : "");
    f->target = target;
    f->o = o;
    if (f->answer)
        snprintf(err, errlen, "sandbox env %s/%s not found", ns, name);
    return f->answer;
}

static const struct rt_ops fake_ops = {.claim = fake_claim};

static void test_image_capability(void **state)
{
    struct fake_rt f = {.rt = {&fake_ops, "local", 0}};
    (void)state;
    assert_false(claim_image_ok(NULL));
    assert_false(claim_image_ok(&f.rt));
    f.rt.caps = RT_CAP_NETWORK_UPDATE;
    assert_false(claim_image_ok(&f.rt));
    /* the capability decides, whatever the kind says */
    f.rt.caps = RT_CAP_IMAGE_OVERRIDE;
    assert_true(claim_image_ok(&f.rt));
    f.rt.kind = "kube";
    f.rt.caps = 0;
    assert_false(claim_image_ok(&f.rt));
}

static void test_start(void **state)
{
    struct fake_rt f = {.rt = {&fake_ops, "fake", 0}};
    struct claim_deps d = {.rt = &f.rt, .cluster = "alpha"};
    char id[SBXID_MAX + 1], err[256] = "", cluster[SBXID_CLUSTER_MAX + 1];
    (void)state;

    assert_int_equal(claim_new_id(&d, id, sizeof(id)), 0);
    assert_int_equal(sbxid_cluster_of(id, cluster), 0);
    assert_string_equal(cluster, "alpha");

    struct claim_request req = {
        .ns = "team-a", .name = "base", .group = "", .target = RT_TARGET_ENV};
    req.o.id = id;
    req.o.access_token = "tok";
    assert_int_equal(claim_start(&d, &req, NULL, NULL, err, sizeof(err)), 0);
    assert_int_equal(f.calls, 1);
    assert_string_equal(f.ns, "team-a");
    assert_string_equal(f.name, "base");
    assert_true(f.group_null); /* "" means any member: the runtime gets NULL */
    assert_int_equal(f.target, RT_TARGET_ENV);
    assert_string_equal(f.o->id, id);
    assert_string_equal(f.o->access_token, "tok");

    req.group = "gpu";
    req.target = RT_TARGET_ENV_OR_POOL;
    assert_int_equal(claim_start(&d, &req, NULL, NULL, err, sizeof(err)), 0);
    assert_false(f.group_null);
    assert_string_equal(f.group, "gpu");
    assert_int_equal(f.target, RT_TARGET_ENV_OR_POOL);

    /* the runtime's refusal comes back as it was, message included */
    f.answer = AB_ENOENT;
    assert_int_equal(claim_start(&d, &req, NULL, NULL, err, sizeof(err)), AB_ENOENT);
    assert_string_equal(err, "sandbox env team-a/base not found");
    assert_int_equal(claim_status(CLAIM_E2B, AB_ENOENT), 400);

    /* without a runtime: refused before anything is asked */
    int calls = f.calls;
    d.rt = NULL;
    req.name = "base";
    assert_int_equal(claim_start(&d, &req, NULL, NULL, err, sizeof(err)), AB_ECLOSED);
    assert_non_null(strstr(err, "cluster 'alpha'"));
    assert_int_equal(claim_status(CLAIM_E2B, AB_ECLOSED), 503);
    assert_int_equal(f.calls, calls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_tables),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_image_capability),
        cmocka_unit_test(test_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
