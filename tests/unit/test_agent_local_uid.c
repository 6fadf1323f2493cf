/* Host uid slices of the local runtime (pool.c, adopt.c): each sandbox gets
 * its own LSBX_UID_COUNT ids above uid_base, none is shared, a slice comes
 * back once its sandbox is freed, and an adopted sandbox's recorded slice is
 * taken only when it is one of this runtime's and free. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/local/lrt.h"

static struct lsb *sbx(struct lrt *rt)
{
    struct lsb *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->rt = rt;
    s->next = rt->sbxs;
    rt->sbxs = s;
    return s;
}

static void slices_are_distinct_and_reused(void **state)
{
    struct lrt rt;
    struct lsb *a, *b, *c, *d;
    (void)state;

    memset(&rt, 0, sizeof(rt));
    rt.uid_base = LSBX_UID_BASE_DEFAULT;
    rt.uid_slots = 3;
    a = sbx(&rt);
    b = sbx(&rt);
    c = sbx(&rt);
    d = sbx(&rt);
    assert_int_equal(lrt_uid_take(a), 0);
    assert_int_equal(lrt_uid_take(b), 0);
    assert_int_equal(lrt_uid_take(c), 0);
    assert_true(a->uid_slot != b->uid_slot && b->uid_slot != c->uid_slot &&
                a->uid_slot != c->uid_slot);
    /* all slices held: the next sandbox gets none rather than a shared one */
    assert_int_equal(lrt_uid_take(d), AB_ELIMIT);
    assert_int_equal(d->uid_slot, 0);
    /* b is gone: its slice is the next one given */
    int freed = b->uid_slot;
    lrt_sbx_unlink_free(b);
    assert_int_equal(lrt_uid_take(d), 0);
    assert_int_equal(d->uid_slot, freed);

    lrt_sbx_unlink_free(a);
    lrt_sbx_unlink_free(c);
    lrt_sbx_unlink_free(d);
    assert_null(rt.sbxs);
}

static void adopted_slices(void **state)
{
    struct lrt rt;
    struct lsb *a, *b;
    const uint32_t base = LSBX_UID_BASE_DEFAULT;
    (void)state;

    memset(&rt, 0, sizeof(rt));
    rt.uid_base = base;
    rt.uid_slots = 4;
    a = sbx(&rt);
    b = sbx(&rt);
    assert_int_equal(lrt_uid_adopt(a, base + 2 * LSBX_UID_COUNT), 0);
    assert_int_equal(a->uid_slot, 3);
    /* held by a, not a slice, below the base, past the last slice */
    assert_int_equal(lrt_uid_adopt(b, base + 2 * LSBX_UID_COUNT), AB_EINVAL);
    assert_int_equal(lrt_uid_adopt(b, base + 1000), AB_EINVAL);
    assert_int_equal(lrt_uid_adopt(b, base - LSBX_UID_COUNT), AB_EINVAL);
    assert_int_equal(lrt_uid_adopt(b, base + 4 * LSBX_UID_COUNT), AB_EINVAL);
    assert_int_equal(b->uid_slot, 0);
    /* a new sandbox never gets an adopted one's slice */
    assert_int_equal(lrt_uid_take(b), 0);
    assert_int_equal(b->uid_slot, 1);
    lrt_sbx_unlink_free(a);
    lrt_sbx_unlink_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(slices_are_distinct_and_reused),
        cmocka_unit_test(adopted_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
