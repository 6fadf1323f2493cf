/* The sandbox state record (agent/runtime/local/state.c): in place, two
 * generations, torn writes detected.
 *
 * - writes keep the file's inode (the tmp + rename before made one per write)
 * - a torn newest slot (garbage over part of it) is skipped: the previous
 *   generation is read, and the next write does not overwrite it
 * - a writer SIGKILLed at arbitrary points of a loop of writes never leaves
 *   the record unreadable or older than the last write it finished
 * - a text that outgrows the slots makes a larger file; limits refused
 * - a state.json of an earlier agent is still read */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/runtime/local/sandbox.h"
#include "agentbox/common.h"

static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/abx-state-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *read_back(uint64_t *gen)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(lsbx_record_read(g_dir, &text, &len, gen), 0);
    assert_int_equal(strlen(text), len);
    return text;
}

static ino_t inode_of(void)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof(path), "%s/state.rec", g_dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* it holds the envd token */
    return st.st_ino;
}

static void test_in_place(void **state)
{
    (void)state;
    char text[64];
    uint64_t gen = 0;

    assert_int_equal(lsbx_record_read(g_dir, &(char *){NULL}, &(size_t){0}, NULL), AB_ENOENT);
    assert_false(lsbx_record_exists(g_dir));
    assert_int_equal(lsbx_record_write(g_dir, "{\"n\":0}"), 0);
    assert_true(lsbx_record_exists(g_dir));
    ino_t ino = inode_of();
    for (int i = 1; i <= 100; i++) {
        snprintf(text, sizeof(text), "{\"n\":%d}", i);
        assert_int_equal(lsbx_record_write(g_dir, text), 0);
        assert_int_equal(inode_of(), ino); /* no new inode per write */
    }
    char *t = read_back(&gen);
    assert_string_equal(t, "{\"n\":100}");
    assert_int_equal(gen, 101);
    free(t);
    /* a shorter text after a longer one reads back exactly */
    assert_int_equal(lsbx_record_write(g_dir, "{\"x\":1,\"pad\":\"aaaaaaaaaaaaaaaaaaaa\"}"), 0);
    assert_int_equal(lsbx_record_write(g_dir, "{}"), 0);
    assert_int_equal(lsbx_record_write(g_dir, "{\"y\":2}"), 0);
    t = read_back(NULL);
    assert_string_equal(t, "{\"y\":2}");
    free(t);
}

/* Garbage over the middle of the newest slot: what a write cut between two
 * pages leaves. */
static void tear_newest(void)
{
    char path[128], *t;
    uint64_t gen;
    struct stat st;

    t = read_back(&gen);
    free(t);
    snprintf(path, sizeof(path), "%s/state.rec", g_dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    /* the newest is the slot of gen's parity: generation 1 went to slot 0 */
    off_t slot = st.st_size / 2, at = (gen % 2 == 1 ? 0 : slot) + 60;
    assert_int_equal(pwrite(fd, "XXXX", 4, at), 4);
    close(fd);
}

static void test_torn_write(void **state)
{
    (void)state;
    uint64_t gen = 0;

    assert_int_equal(lsbx_record_write(g_dir, "{\"phase\":\"idle\",\"pad\":\"0123456789\"}"), 0);
    assert_int_equal(lsbx_record_write(g_dir, "{\"phase\":\"running\",\"pad\":\"0123456789\"}"), 0);
    tear_newest();
    char *t = read_back(&gen);
    assert_string_equal(t, "{\"phase\":\"idle\",\"pad\":\"0123456789\"}"); /* the previous one */
    assert_int_equal(gen, 1);
    free(t);
    /* the next write goes over the torn slot, never over the one still valid */
    assert_int_equal(lsbx_record_write(g_dir, "{\"phase\":\"running\",\"again\":true}"), 0);
    t = read_back(&gen);
    assert_string_equal(t, "{\"phase\":\"running\",\"again\":true}");
    assert_int_equal(gen, 2);
    free(t);
    tear_newest();
    t = read_back(&gen);
    assert_string_equal(t, "{\"phase\":\"idle\",\"pad\":\"0123456789\"}");
    free(t);
    /* both torn: unreadable, not a wrong record */
    assert_int_equal(lsbx_record_write(g_dir, "{\"phase\":\"running\",\"pad\":\"0123456789\"}"), 0);
    tear_newest();
    char path[128];
    snprintf(path, sizeof(path), "%s/state.rec", g_dir);
    int fd = open(path, O_RDWR);
    assert_int_equal(pwrite(fd, "XXXX", 4, 60), 4);
    assert_int_equal(pwrite(fd, "XXXX", 4, 8192 + 60), 4);
    close(fd);
    char *none = NULL;
    size_t len = 0;
    assert_int_equal(lsbx_record_read(g_dir, &none, &len, NULL), AB_EINVAL);
    assert_null(none);
}

/* A text of `pages` pages, numbered n (so a mix of two writes is visible). */
static void big_text(char *buf, size_t cap, int n)
{
    int k = snprintf(buf, cap, "{\"n\":%d,\"pad\":\"", n);
    size_t want = 3 * 4096 + (size_t)(n % 977);
    while ((size_t)k < want && (size_t)k < cap - 3)
        buf[k++] = (char)('a' + n % 26);
    buf[k++] = '"';
    buf[k++] = '}';
    buf[k] = '\0';
}

/* The writer is killed wherever it is: the record must read as a whole
 * text, at least as new as the last write the writer reported done. */
static void test_sigkill_mid_write(void **state)
{
    (void)state;
    static char text[20000];

    for (int round = 0; round < 60; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            for (int n = 1;; n++) {
                big_text(text, sizeof(text), round * 100000 + n);
                if (lsbx_record_write(g_dir, text) != 0)
                    _exit(1);
                if (write(p[1], &n, sizeof(n)) != sizeof(n))
                    _exit(2);
            }
        }
        close(p[1]);
        int done = 0, n = 0, want = 1 + round % 7;
        while (done < want && read(p[0], &n, sizeof(n)) == sizeof(n))
            done = n;
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        /* what it reported after `done` may have landed too: read the pipe dry */
        while (read(p[0], &n, sizeof(n)) == sizeof(n))
            done = n;
        close(p[0]);
        uint64_t gen;
        char *t = read_back(&gen);
        int got = 0;
        assert_int_equal(sscanf(t, "{\"n\":%d,", &got), 1);
        assert_true(got >= round * 100000 + done);
        big_text(text, sizeof(text), got);
        assert_string_equal(t, text); /* whole: never a mix of two writes */
        free(t);
    }
}

static void test_grow_and_limits(void **state)
{
    (void)state;
    size_t n = 100000;
    char *big = malloc(n + 16);
    assert_non_null(big);
    assert_int_equal(lsbx_record_write(g_dir, "{\"small\":1}"), 0);
    ino_t ino = inode_of();
    snprintf(big, n + 16, "{\"p\":\"");
    memset(big + 6, 'z', n - 8);
    memcpy(big + n - 2, "\"}", 3);
    assert_int_equal(lsbx_record_write(g_dir, big), 0); /* outgrows 8 KiB slots */
    assert_true(inode_of() != ino);
    uint64_t gen;
    char *t = read_back(&gen);
    assert_string_equal(t, big);
    assert_int_equal(gen, 2);
    free(t);
    ino = inode_of();
    assert_int_equal(lsbx_record_write(g_dir, "{\"small\":2}"), 0);
    assert_int_equal(inode_of(), ino); /* and stays in place afterwards */
    free(big);
    assert_int_equal(lsbx_record_write(g_dir, ""), AB_ELIMIT);
    size_t huge = 5 * 1024 * 1024;
    char *h = malloc(huge);
    assert_non_null(h);
    memset(h, 'a', huge - 1);
    h[huge - 1] = '\0';
    assert_int_equal(lsbx_record_write(g_dir, h), AB_ELIMIT);
    free(h);
}

/* A sandbox adopted from an agent before state.rec: its state.json is read,
 * and the first write makes the record, which is read from then on. */
static void test_legacy_state_json(void **state)
{
    (void)state;
    char path[128];
    struct lsbx s;

    snprintf(path, sizeof(path), "%s/state.json", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"id\":\"old1\",\"token\":\"t\",\"pid\":1,\"start_time\":5,\"info\":{\"phase\":"
          "\"idle\"}}",
          f);
    fclose(f);
    assert_true(lsbx_record_exists(g_dir));
    assert_int_equal(lsbx_state_read(g_dir, &s), 0);
    assert_string_equal(s.id, "old1");
    s.start_time = 6;
    assert_int_equal(lsbx_state_write(&s), 0);
    lsbx_release(&s);
    assert_int_equal(lsbx_state_read(g_dir, &s), 0);
    assert_int_equal(s.start_time, 6);
    lsbx_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_mid_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_legacy_state_json, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
