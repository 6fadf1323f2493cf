/* vis_template_visible: the table of who sees a template under reference
 * §6.1's rules (public, admin, team AND users inside a rule, OR across). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "agentbox/visibility.h"

struct row {
    const char *spec; /* JSON */
    bool admin;
    const char *team, *user;
    bool visible;
};

static const struct row rows[] = {
    /* public */
    {"{}", false, "t", "u", true},
    {"{\"visibility\":{}}", false, "t", "u", true},
    {"{\"visibility\":{\"rules\":[]}}", false, "", "", true},
    {"{\"visibility\":{\"rules\":\"not an array\"}}", false, "t", "u", true},
    /* admins see everything */
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", true, "b", "x", true},
    /* a team rule */
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", false, "a", "x", true},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", false, "b", "x", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", false, "A", "x", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", false, "", "", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"}]}}", false, NULL, NULL, false},
    /* a users rule, any team */
    {"{\"visibility\":{\"rules\":[{\"users\":[\"u1\",\"u2\"]}]}}", false, "z", "u2", true},
    {"{\"visibility\":{\"rules\":[{\"users\":[\"u1\",\"u2\"]}]}}", false, "z", "u3", false},
    {"{\"visibility\":{\"rules\":[{\"users\":[7,null,\"u1\"]}]}}", false, "z", "7", false},
    /* team AND users inside one rule */
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\",\"users\":[\"u1\"]}]}}", false, "a", "u1", true},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\",\"users\":[\"u1\"]}]}}", false, "a", "u2", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\",\"users\":[\"u1\"]}]}}", false, "b", "u1", false},
    /* OR across rules */
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"},{\"users\":[\"u9\"]}]}}", false, "b", "u9",
     true},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"},{\"team\":\"b\"}]}}", false, "b", "u", true},
    {"{\"visibility\":{\"rules\":[{\"team\":\"a\"},{\"team\":\"b\"}]}}", false, "c", "u", false},
    /* a rule with neither part (or empty ones) grants nothing */
    {"{\"visibility\":{\"rules\":[{}]}}", false, "a", "u", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"\",\"users\":[]}]}}", false, "", "", false},
    {"{\"visibility\":{\"rules\":[{\"team\":\"\",\"users\":[\"u\"]}]}}", false, "x", "u", true},
    {"{\"visibility\":{\"rules\":[{\"team\":5}]}}", false, "5", "u", false},
};

static void table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_error_t e;
        json_t *spec = json_loads(rows[i].spec, 0, &e);
        bool got;
        assert_non_null(spec);
        got = vis_template_visible(spec, rows[i].admin, rows[i].team, rows[i].user);
        if (got != rows[i].visible)
            fail_msg("row %zu: %s team=%s user=%s admin=%d: got %d", i, rows[i].spec,
                     rows[i].team ? rows[i].team : "(null)", rows[i].user ? rows[i].user : "(null)",
                     rows[i].admin, got);
        json_decref(spec);
    }
}

static void no_spec_is_public(void **state)
{
    (void)state;
    assert_true(vis_template_visible(NULL, false, "t", "u"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table),
        cmocka_unit_test(no_spec_is_public),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
