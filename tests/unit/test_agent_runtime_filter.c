/* rt_filter_admits: which sandboxes a runtime's list shows, the table of
 * admitted and refused cases (another tenant's namespace or team, another
 * env, idle sandboxes without include_idle). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "agent/runtime/runtime.h"

struct row {
    struct rt_filter f;
    bool no_filter;
    bool running;
    const char *ns, *team, *env, *pool;
    bool admitted;
};

static const struct row rows[] = {
    /* no filter: every running sandbox, no idle one */
    {{0}, true, true, "default", "t1", "e", "e-1c", true},
    {{0}, true, false, "default", "t1", "e", "e-1c", false},
    /* an empty filter likewise; include_idle shows idle and starting ones */
    {{0}, false, true, "default", "t1", "e", "e-1c", true},
    {{0}, false, false, "default", "t1", "e", "e-1c", false},
    {{.include_idle = true}, false, false, "default", "t1", "e", "e-1c", true},
    /* the namespace: another tenant's is refused */
    {{.ns = "t-a-u"}, false, true, "t-a-u", "a", "e", "e-1c", true},
    {{.ns = "t-a-u"}, false, true, "t-b-u", "a", "e", "e-1c", false},
    {{.ns = "t-a-u"}, false, true, "t-a-u2", "a", "e", "e-1c", false},
    {{.ns = "t-a-u"}, false, true, "", "a", "e", "e-1c", false},
    {{.ns = ""}, false, true, "default", "a", "e", "e-1c", false},
    /* the team */
    {{.team = "a"}, false, true, "default", "a", "e", "e-1c", true},
    {{.team = "a"}, false, true, "default", "b", "e", "e-1c", false},
    {{.team = "a"}, false, true, "default", "", "e", "e-1c", false},
    /* env or pool: either name matches */
    {{.env_or_pool = "e"}, false, true, "default", "a", "e", "e-1c", true},
    {{.env_or_pool = "e-1c"}, false, true, "default", "a", "e", "e-1c", true},
    {{.env_or_pool = "p"}, false, true, "default", "a", "", "p", true},
    {{.env_or_pool = "other"}, false, true, "default", "a", "e", "e-1c", false},
    {{.env_or_pool = ""}, false, true, "default", "a", "e", "e-1c", false},
    {{.env_or_pool = ""}, false, true, "default", "a", "", "p", true},
    /* every part must hold */
    {{.ns = "n", .team = "a", .env_or_pool = "e"}, false, true, "n", "a", "e", "x", true},
    {{.ns = "n", .team = "a", .env_or_pool = "e"}, false, true, "n", "b", "e", "x", false},
    {{.ns = "n", .team = "a", .env_or_pool = "e"}, false, true, "m", "a", "e", "x", false},
    {{.ns = "n", .team = "a", .env_or_pool = "e", .include_idle = true},
     false,
     false,
     "n",
     "a",
     "e",
     "x",
     true},
    {{.ns = "n", .team = "a", .include_idle = true}, false, false, "m", "a", "e", "x", false},
};

static void table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        bool got = rt_filter_admits(r->no_filter ? NULL : &r->f, r->running, r->ns, r->team, r->env,
                                    r->pool);
        if (got != r->admitted)
            fail_msg("row %zu: ns=%s team=%s env=%s pool=%s running=%d: got %d", i, r->ns, r->team,
                     r->env, r->pool, r->running, got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
