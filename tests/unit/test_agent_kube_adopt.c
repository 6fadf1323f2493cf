/* Re-adoption of claimed Pods (agent/runtime/kube/adopt.c): the envd token
 * seal (opens only with the same key, Pod and sandbox), the reading of a
 * claimed Pod's annotations, and the verdict for a Pod nobody holds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/kube/adopt.h"
#include "agent/runtime/kube/reconcile.h"

#define JOIN "abxc_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TOKEN "3f1e0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"

static void seal_round_trip(void **state)
{
    (void)state;
    struct kube_seal k, other;
    char sealed[KUBE_SEALED_MAX + 1], tok[RT_TOKEN_MAX + 1];

    assert_int_equal(kube_seal_init(&k, JOIN, "alpha"), 0);
    assert_true(k.on);
    assert_int_equal(kube_seal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", TOKEN, sealed,
                                     sizeof(sealed)),
                     0);
    assert_int_equal(strncmp(sealed, "v1.", 3), 0);
    assert_null(strstr(sealed, TOKEN)); /* not in clear */
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", sealed, tok, sizeof(tok)),
        0);
    assert_string_equal(tok, TOKEN);

    /* a second replica with the same join token and cluster opens it */
    assert_int_equal(kube_seal_init(&other, JOIN, "alpha"), 0);
    assert_int_equal(kube_unseal_token(&other, "default", "pod-a", "uid-1", "sbx1", "t/u", sealed,
                                       tok, sizeof(tok)),
                     0);
    assert_string_equal(tok, TOKEN);

    /* copied to another Pod, another uid, another sandbox id, another namespace */
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-b", "uid-1", "sbx1", "t/u", sealed, tok, sizeof(tok)),
        AB_EDENIED);
    assert_string_equal(tok, "");
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-a", "uid-2", "sbx1", "t/u", sealed, tok, sizeof(tok)),
        AB_EDENIED);
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx2", "t/u", sealed, tok, sizeof(tok)),
        AB_EDENIED);
    assert_int_equal(
        kube_unseal_token(&k, "other", "pod-a", "uid-1", "sbx1", "t/u", sealed, tok, sizeof(tok)),
        AB_EDENIED);
    /* the principal edited (the sandbox handed to another team) */
    assert_int_equal(kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "other/u", sealed,
                                       tok, sizeof(tok)),
                     AB_EDENIED);
    /* another cluster's key, a rotated join token */
    kube_seal_init(&other, JOIN, "beta");
    assert_int_equal(kube_unseal_token(&other, "default", "pod-a", "uid-1", "sbx1", "t/u", sealed,
                                       tok, sizeof(tok)),
                     AB_EDENIED);
    kube_seal_init(&other, "abxc_ffff", "alpha");
    assert_int_equal(kube_unseal_token(&other, "default", "pod-a", "uid-1", "sbx1", "t/u", sealed,
                                       tok, sizeof(tok)),
                     AB_EDENIED);
    /* tampered: one base64 digit changed */
    char bad[sizeof(sealed)];
    strcpy(bad, sealed);
    bad[10] = bad[10] == 'A' ? 'B' : 'A';
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", bad, tok, sizeof(tok)),
        AB_EDENIED);
    /* malformed */
    assert_int_equal(kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", "v2.xx", tok,
                                       sizeof(tok)),
                     AB_EINVAL);
    assert_int_equal(kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", "v1.!!!!",
                                       tok, sizeof(tok)),
                     AB_EINVAL);
    assert_int_equal(kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", "v1.AAAA",
                                       tok, sizeof(tok)),
                     AB_EINVAL);
    /* two seals of one token differ (a fresh nonce) */
    char again[sizeof(sealed)];
    kube_seal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", TOKEN, again, sizeof(again));
    assert_string_not_equal(again, sealed);
    /* the largest token fits */
    char big[RT_TOKEN_MAX + 1];
    memset(big, 'x', RT_TOKEN_MAX);
    big[RT_TOKEN_MAX] = '\0';
    assert_int_equal(kube_seal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", big, sealed,
                                     sizeof(sealed)),
                     0);
    assert_int_equal(
        kube_unseal_token(&k, "default", "pod-a", "uid-1", "sbx1", "t/u", sealed, tok, sizeof(tok)),
        0);
    assert_string_equal(tok, big);
    kube_seal_clear(&k);
    kube_seal_clear(&other);
}

static void seal_off(void **state)
{
    (void)state;
    struct kube_seal k;
    char sealed[KUBE_SEALED_MAX + 1], tok[RT_TOKEN_MAX + 1];
    assert_int_equal(kube_seal_init(&k, NULL, "alpha"), 0);
    assert_false(k.on);
    assert_int_equal(kube_seal_token(&k, "d", "p", "u", "i", "t/u", TOKEN, sealed, sizeof(sealed)),
                     AB_EINVAL);
    assert_int_equal(kube_unseal_token(&k, "d", "p", "u", "i", "t/u", "v1.AAAA", tok, sizeof(tok)),
                     AB_EDENIED);
    assert_int_equal(kube_seal_init(&k, "", "alpha"), 0);
    assert_false(k.on);
}

static json_t *claimed_pod(const char *label_id, const char *ann_id, const char *end)
{
    json_t *ann = json_pack("{s:s,s:s,s:s,s:s}", KUBE_A_PRINCIPAL, "team-1/user-2",
                            KUBE_A_CLAIMED_AT, "2026-12-01T10:00:00Z", KUBE_A_METADATA,
                            "{\"suite\":\"kube\"}", KUBE_A_SEALED, "v1.abc");
    if (ann_id)
        json_object_set_new(ann, KUBE_L_SANDBOX, json_string(ann_id));
    if (end)
        json_object_set_new(ann, KUBE_A_END, json_string(end));
    json_t *labels = json_object();
    if (label_id)
        json_object_set_new(labels, KUBE_L_SANDBOX, json_string(label_id));
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "metadata", "name", "p", "namespace", "default",
                     "labels", labels, "annotations", ann);
}

static void claimed_read(void **state)
{
    (void)state;
    struct kube_claimed c;
    json_t *pod = claimed_pod("sbx1", "sbx1", "2026-12-01T10:05:00.250000Z");
    assert_int_equal(kube_claimed_read(pod, &c), 0);
    assert_string_equal(c.id, "sbx1");
    assert_string_equal(c.team, "team-1");
    assert_string_equal(c.owner, "user-2");
    assert_string_equal(c.principal, "team-1/user-2");
    assert_false(c.has_egress);
    assert_string_equal(c.sealed, "v1.abc");
    assert_int_equal(c.end_ms - c.claimed_ms, 300250);
    assert_non_null(c.metadata);
    assert_string_equal(json_string_value(json_object_get(c.metadata, "suite")), "kube");
    json_decref(c.metadata);
    json_decref(pod);

    /* label and annotation disagree, or one is missing: not a claim of ours */
    pod = claimed_pod("sbx1", "sbx2", NULL);
    kube_claimed_read(pod, &c);
    assert_string_equal(c.id, "");
    assert_null(c.metadata);
    json_decref(pod);
    pod = claimed_pod(NULL, "sbx1", NULL);
    kube_claimed_read(pod, &c);
    assert_string_equal(c.id, "");
    json_decref(pod);
    pod = claimed_pod("sbx1", "sbx1", NULL);
    kube_claimed_read(pod, &c);
    assert_int_equal(c.end_ms, 0);
    json_decref(c.metadata);
    json_decref(pod);
}

static void egress_flags(void **state)
{
    (void)state;
    char f[32];
    struct kube_claimed c;
    kube_egress_flags_format(true, false, f);
    assert_string_equal(f, "internet=1,private=0");
    static const struct {
        const char *v;
        bool ok, inet, priv;
    } cases[] = {
        {"internet=1,private=0", true, true, false},    {"internet=0,private=1", true, false, true},
        {"internet=2,private=0", false, false, false},  {"internet=1", false, false, false},
        {"internet=1,private=0x", false, false, false}, {"", false, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *pod = claimed_pod("sbx1", "sbx1", NULL);
        json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            KUBE_A_EGRESS, json_string(cases[i].v));
        kube_claimed_read(pod, &c);
        assert_int_equal(c.has_egress, cases[i].ok);
        if (cases[i].ok) {
            assert_int_equal(c.internet, cases[i].inet);
            assert_int_equal(c.allow_private, cases[i].priv);
        }
        json_decref(c.metadata);
        json_decref(pod);
    }
}

static void verdicts(void **state)
{
    (void)state;
    struct kube_claimed c = {.id = "sbx1", .claimed_ms = 1000000, .end_ms = 2000000};
    const int64_t su = 120000;
    /* armed and running: adopt when the token opens, else release */
    assert_int_equal(kube_adopt_decide(KUBE_PH_RUNNING, &c, true, true, 1500000, su),
                     KUBE_ADOPT_YES);
    assert_int_equal(kube_adopt_decide(KUBE_PH_RUNNING, &c, true, false, 1500000, su),
                     KUBE_ADOPT_RELEASE);
    assert_int_equal(kube_adopt_decide(KUBE_PH_RUNNING, &c, false, true, 1500000, su),
                     KUBE_ADOPT_RELEASE);
    /* past its end still adopted: the timer releases it at once */
    assert_int_equal(kube_adopt_decide(KUBE_PH_RUNNING, &c, true, true, 3000000, su),
                     KUBE_ADOPT_YES);
    /* a claim under way (no end-at yet): left alone for the startup timeout */
    struct kube_claimed st = {.id = "sbx2", .claimed_ms = 1000000};
    assert_int_equal(kube_adopt_decide(KUBE_PH_STARTING, &st, false, false, 1000000 + su - 1, su),
                     KUBE_ADOPT_WAIT);
    assert_int_equal(kube_adopt_decide(KUBE_PH_STARTING, &st, true, false, 1000000 + su, su),
                     KUBE_ADOPT_RELEASE);
    /* running label without end-at (an older agent's claim): released */
    assert_int_equal(kube_adopt_decide(KUBE_PH_RUNNING, &st, true, true, 1000001, su),
                     KUBE_ADOPT_RELEASE);
    /* no claim time at all */
    struct kube_claimed none = {0};
    assert_int_equal(kube_adopt_decide(KUBE_PH_STARTING, &none, true, false, 5, su),
                     KUBE_ADOPT_RELEASE);
    /* idle, stopping: not a claim */
    assert_int_equal(kube_adopt_decide(KUBE_PH_IDLE, &c, true, true, 1500000, su), KUBE_ADOPT_NO);
    assert_int_equal(kube_adopt_decide(KUBE_PH_STOPPING, &c, true, true, 1500000, su),
                     KUBE_ADOPT_NO);
}

static void strip(void **state)
{
    (void)state;
    json_t *patch = json_pack("{s:{s:{s:n}}}", "metadata", "annotations", KUBE_A_PRINCIPAL);
    kube_adopt_strip(patch);
    const json_t *ann = json_object_get(json_object_get(patch, "metadata"), "annotations");
    assert_true(json_is_null(json_object_get(ann, KUBE_A_SEALED)));
    assert_true(json_is_null(json_object_get(ann, KUBE_A_END)));
    assert_true(json_is_null(json_object_get(ann, KUBE_A_EGRESS)));
    assert_true(json_is_null(json_object_get(ann, KUBE_A_PRINCIPAL)));
    json_decref(patch);
    kube_adopt_strip(NULL); /* no patch: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seal_round_trip), cmocka_unit_test(seal_off),
        cmocka_unit_test(claimed_read),    cmocka_unit_test(egress_flags),
        cmocka_unit_test(verdicts),        cmocka_unit_test(strip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
