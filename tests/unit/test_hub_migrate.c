/* The pure parts of hub/migrate.c: names, ordering, checksums, comparison
 * with schema_migrations rows, scanning a directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "hub/migrate.h"

static void test_parse_good_names(void **state)
{
    char err[256] = "";
    int v = -1;

    (void)state;
    assert_int_equal(migrate_parse_name("0001_init.sql", &v, err, sizeof(err)), 0);
    assert_int_equal(v, 1);
    assert_int_equal(migrate_parse_name("0042_add-keys_V2.sql", &v, err, sizeof(err)), 0);
    assert_int_equal(v, 42);
    assert_int_equal(migrate_parse_name("9999_last.sql", &v, err, sizeof(err)), 0);
    assert_int_equal(v, 9999);
}

static void test_parse_skips_non_migrations(void **state)
{
    char err[256] = "";
    int v = -1;

    (void)state;
    assert_int_equal(migrate_parse_name("README.md", &v, err, sizeof(err)), AB_ENOENT);
    assert_int_equal(migrate_parse_name("0001_init.sql~", &v, err, sizeof(err)), AB_ENOENT);
    assert_int_equal(migrate_parse_name(".0001_init.sql", &v, err, sizeof(err)), AB_ENOENT);
    assert_int_equal(migrate_parse_name(".", &v, err, sizeof(err)), AB_ENOENT);
    assert_int_equal(v, -1);
}

static void test_parse_rejects_bad_names(void **state)
{
    static const char *bad[] = {
        "001_init.sql",   "00001_init.sql", "0000_zero.sql", "0001init.sql", "0001_.sql",
        "0001_in it.sql", "abcd_init.sql",  "1_x.sql",       "0001_ü.sql",
    };
    char err[256];
    int v;

    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        int rc;

        err[0] = '\0';
        rc = migrate_parse_name(bad[i], &v, err, sizeof(err));
        if (rc == AB_ENOENT)
            fail_msg("%s was skipped, not refused", bad[i]);
        assert_int_equal(rc, AB_EINVAL);
        /* The message names the file. */
        assert_non_null(strstr(err, bad[i]));
    }
    err[0] = '\0';
    assert_int_equal(migrate_parse_name("0001_in it.sql", &v, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "letters, digits"));
}

static void test_parse_rejects_long_name(void **state)
{
    char name[MIGRATE_NAME_MAX + 10];
    char err[256] = "";
    int v;

    (void)state;
    memset(name, 'a', sizeof(name));
    memcpy(name, "0001_", 5);
    memcpy(name + sizeof(name) - 5, ".sql", 5);
    assert_int_equal(migrate_parse_name(name, &v, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "longer than"));
}

static void test_checksum(void **state)
{
    char out[65];

    (void)state;
    migrate_checksum("", 0, out);
    assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    migrate_checksum("abc", 3, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void fill(struct migrate_file *f, int version, const char *name, const char *sql)
{
    memset(f, 0, sizeof(*f));
    f->version = version;
    ab_strlcpy(f->name, name, sizeof(f->name));
    migrate_checksum(sql, strlen(sql), f->checksum);
}

static void test_sort_orders_by_version_not_text(void **state)
{
    struct migrate_file f[3];
    char err[256] = "";

    (void)state;
    fill(&f[0], 10, "0010_c.sql", "c");
    fill(&f[1], 2, "0002_b.sql", "b");
    fill(&f[2], 1, "0001_a.sql", "a");
    assert_int_equal(migrate_sort(f, 3, err, sizeof(err)), 0);
    assert_int_equal(f[0].version, 1);
    assert_int_equal(f[1].version, 2);
    assert_int_equal(f[2].version, 10);
}

static void test_sort_refuses_duplicate_versions(void **state)
{
    struct migrate_file f[2];
    char err[256] = "";

    (void)state;
    fill(&f[0], 3, "0003_a.sql", "a");
    fill(&f[1], 3, "0003_b.sql", "b");
    assert_int_equal(migrate_sort(f, 2, err, sizeof(err)), AB_EEXIST);
    assert_non_null(strstr(err, "0003_a.sql"));
    assert_non_null(strstr(err, "0003_b.sql"));
}

static struct migrate_applied row(const struct migrate_file *f)
{
    struct migrate_applied a;

    memset(&a, 0, sizeof(a));
    a.version = f->version;
    ab_strlcpy(a.name, f->name, sizeof(a.name));
    ab_strlcpy(a.checksum, f->checksum, sizeof(a.checksum));
    ab_strlcpy(a.applied_at, "2024-01-01T00:00:00Z", sizeof(a.applied_at));
    return a;
}

static void test_compare_applied_and_pending(void **state)
{
    struct migrate_file f[3];
    struct migrate_set set = {f, 3};
    struct migrate_applied a[1];
    struct migrate_entry e[4];
    size_t n = 0;
    char err[256] = "";

    (void)state;
    fill(&f[0], 1, "0001_a.sql", "a");
    fill(&f[1], 2, "0002_b.sql", "b");
    fill(&f[2], 3, "0003_c.sql", "c");
    a[0] = row(&f[0]);
    assert_int_equal(migrate_compare(&set, a, 1, e, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    assert_int_equal(e[0].state, MIGRATE_APPLIED);
    assert_int_equal(e[1].state, MIGRATE_PENDING);
    assert_int_equal(e[2].state, MIGRATE_PENDING);
    assert_ptr_equal(e[1].file, &f[1]);

    /* Nothing applied at all: everything pending. */
    assert_int_equal(migrate_compare(&set, NULL, 0, e, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(e[i].state, MIGRATE_PENDING);
}

static void test_compare_refuses_changed_file(void **state)
{
    struct migrate_file f[2];
    struct migrate_set set = {f, 2};
    struct migrate_applied a[2];
    struct migrate_entry e[4];
    size_t n = 0;
    char err[512] = "";

    (void)state;
    fill(&f[0], 1, "0001_init.sql", "create table x();");
    fill(&f[1], 2, "0002_more.sql", "b");
    a[0] = row(&f[0]);
    a[1] = row(&f[1]);
    fill(&f[0], 1, "0001_init.sql", "create table x(); -- edited");
    assert_int_equal(migrate_compare(&set, a, 2, e, &n, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(e[0].state, MIGRATE_CHANGED);
    assert_int_equal(e[1].state, MIGRATE_APPLIED);
    assert_non_null(strstr(err, "0001_init.sql"));
    assert_non_null(strstr(err, "changed"));
}

static void test_compare_refuses_missing_renamed_out_of_order(void **state)
{
    struct migrate_file f[3];
    struct migrate_set set = {f, 2};
    struct migrate_applied a[3];
    struct migrate_entry e[6];
    size_t n = 0;
    char err[512] = "";

    (void)state;
    /* Applied 1, 2, 3; only files 1, 2 exist. */
    fill(&f[0], 1, "0001_a.sql", "a");
    fill(&f[1], 2, "0002_b.sql", "b");
    fill(&f[2], 3, "0003_c.sql", "c");
    for (int i = 0; i < 3; i++)
        a[i] = row(&f[i]);
    assert_int_equal(migrate_compare(&set, a, 3, e, &n, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(n, 3);
    assert_int_equal(e[2].state, MIGRATE_MISSING);
    assert_non_null(strstr(err, "0003_c.sql"));

    /* Version 2 recorded under another name. */
    set.n = 3;
    fill(&f[1], 2, "0002_renamed.sql", "b");
    assert_int_equal(migrate_compare(&set, a, 3, e, &n, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(e[1].state, MIGRATE_RENAMED);
    assert_non_null(strstr(err, "0002_renamed.sql"));

    /* Applied 1 and 3, file 2 new: refused as out of order. */
    fill(&f[1], 2, "0002_b.sql", "b");
    a[1] = a[2];
    assert_int_equal(migrate_compare(&set, a, 2, e, &n, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(n, 3);
    assert_int_equal(e[1].state, MIGRATE_OUT_OF_ORDER);
    assert_non_null(strstr(err, "0002_b.sql"));
}

/* A scratch directory for scan tests, removed at the end. */
static char scratch[64];

static void write_file(const char *name, const char *content)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", scratch, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void remove_scratch(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
    assert_int_equal(system(cmd), 0);
}

static void test_scan_reads_sorted_and_skips_others(void **state)
{
    struct migrate_set set = {0};
    char err[512] = "";

    (void)state;
    snprintf(scratch, sizeof(scratch), "/tmp/test_hub_migrate.XXXXXX");
    assert_non_null(mkdtemp(scratch));
    write_file("0010_ten.sql", "select 10;");
    write_file("0002_two.sql", "select 2;");
    write_file("README.md", "not a migration");
    write_file("0002_two.sql~", "editor backup");
    assert_int_equal(migrate_scan(scratch, &set, err, sizeof(err)), 0);
    assert_int_equal(set.n, 2);
    assert_string_equal(set.files[0].name, "0002_two.sql");
    assert_string_equal(set.files[0].sql, "select 2;");
    assert_int_equal(set.files[0].len, 9);
    assert_string_equal(set.files[1].name, "0010_ten.sql");
    migrate_set_free(&set);

    /* A malformed .sql name fails the whole scan, naming the file. */
    write_file("3_bad.sql", "x");
    assert_int_equal(migrate_scan(scratch, &set, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "3_bad.sql"));
    remove_scratch();
}

static void test_scan_missing_and_empty_dir(void **state)
{
    struct migrate_set set = {0};
    char err[512] = "";

    (void)state;
    assert_int_equal(migrate_scan("/nonexistent/migrations", &set, err, sizeof(err)), AB_ENOENT);
    assert_non_null(strstr(err, "/nonexistent/migrations"));
    assert_non_null(strstr(err, "--migrations-dir"));

    snprintf(scratch, sizeof(scratch), "/tmp/test_hub_migrate.XXXXXX");
    assert_non_null(mkdtemp(scratch));
    assert_int_equal(migrate_scan(scratch, &set, err, sizeof(err)), AB_ENOENT);
    assert_non_null(strstr(err, "no migration files"));
    remove_scratch();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good_names),
        cmocka_unit_test(test_parse_skips_non_migrations),
        cmocka_unit_test(test_parse_rejects_bad_names),
        cmocka_unit_test(test_parse_rejects_long_name),
        cmocka_unit_test(test_checksum),
        cmocka_unit_test(test_sort_orders_by_version_not_text),
        cmocka_unit_test(test_sort_refuses_duplicate_versions),
        cmocka_unit_test(test_compare_applied_and_pending),
        cmocka_unit_test(test_compare_refuses_changed_file),
        cmocka_unit_test(test_compare_refuses_missing_renamed_out_of_order),
        cmocka_unit_test(test_scan_reads_sorted_and_skips_others),
        cmocka_unit_test(test_scan_missing_and_empty_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
