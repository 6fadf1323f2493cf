/* A sandbox's state record, written in place (sandbox.h, "The state record").
 *
 * <dir>/state.rec is two slots of equal size (the file's size / 2, never
 * changed in place). A slot is a header line and the JSON text:
 *
 *   "abxstate1 <gen, 16 hex> <len, 8 hex> <fnv-1a 64 of gen, len, text, 16 hex>\n" text
 *
 * A write goes to the slot that does not hold the newest valid record, with
 * the next generation: a write torn by the agent's death (SIGKILL between
 * two pages of one pwrite) fails its checksum and the reader takes the other
 * slot, the previous generation, which the torn write never touched. The
 * tmp + rename it replaces made an ext4 inode (and a directory entry, an
 * orphan-list entry, a freed inode) per write; this makes one per sandbox.
 * A text larger than a slot makes a new file with slots twice as large
 * (temporary file + rename: atomic, rare), and so does the first write. */
#include "agent/runtime/local/sandbox.h"

#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC_NAME "state.rec"
#define REC_MAGIC "abxstate1"
#define REC_HDR_LEN 53 /* "abxstate1 " + 16 + " " + 8 + " " + 16 + "\n" */
#define REC_SLOT_MIN 8192
#define REC_SLOT_MAX (4 * 1024 * 1024) /* a state of 4 MiB is a bug, not a sandbox */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t rec_sum(uint64_t gen, uint32_t len, const char *text)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, &gen, sizeof(gen));
    h = fnv(h, &len, sizeof(len));
    return fnv(h, text, len);
}

static void rec_header(char hdr[REC_HDR_LEN + 1], uint64_t gen, uint32_t len, const char *text)
{
    snprintf(hdr, REC_HDR_LEN + 1, REC_MAGIC " %016" PRIx64 " %08" PRIx32 " %016" PRIx64 "\n", gen,
             len, rec_sum(gen, len, text));
}

static int pread_all(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    size_t put = 0;
    while (put < len) {
        ssize_t w = pwrite(fd, (const char *)buf + put, len - put, off + (off_t)put);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        put += (size_t)w;
    }
    return 0;
}

/* Slot k of the file at fd (slot bytes each): its generation when valid,
 * and its text (caller frees) when text is not NULL. 0 or -1 (torn, empty,
 * not a record). */
static int slot_read(int fd, size_t slot, int k, uint64_t *gen, char **text, size_t *tlen)
{
    char hdr[REC_HDR_LEN + 1];
    uint64_t g, sum;
    uint32_t len;
    char *body;

    if (pread_all(fd, hdr, REC_HDR_LEN, (off_t)slot * k) != 0)
        return -1;
    hdr[REC_HDR_LEN] = '\0';
    if (memcmp(hdr, REC_MAGIC " ", sizeof(REC_MAGIC)) != 0 || hdr[REC_HDR_LEN - 1] != '\n' ||
        sscanf(hdr + sizeof(REC_MAGIC), "%16" SCNx64 " %8" SCNx32 " %16" SCNx64, &g, &len, &sum) !=
            3 ||
        len == 0 || len > slot - REC_HDR_LEN)
        return -1;
    if (!(body = malloc((size_t)len + 1)))
        return -1;
    if (pread_all(fd, body, len, (off_t)slot * k + REC_HDR_LEN) != 0 ||
        rec_sum(g, len, body) != sum) {
        free(body);
        return -1;
    }
    body[len] = '\0';
    *gen = g;
    if (text) {
        *text = body;
        *tlen = len;
    } else {
        explicit_bzero(body, len);
        free(body);
    }
    return 0;
}

/* The newest valid slot of the open record: its index (0/1) or -1. */
static int newest(int fd, size_t slot, uint64_t *gen)
{
    uint64_t g[2] = {0, 0};
    bool ok[2];
    for (int k = 0; k < 2; k++)
        ok[k] = slot_read(fd, slot, k, &g[k], NULL, NULL) == 0;
    if (!ok[0] && !ok[1])
        return -1;
    int k = ok[0] && (!ok[1] || g[0] > g[1]) ? 0 : 1;
    *gen = g[k];
    return k;
}

/* A new record file of slots of `slot` bytes, holding text in slot 0 at
 * generation gen: written beside it and renamed over it. */
static int rec_create(const char *dir, size_t slot, uint64_t gen, const char *text, uint32_t len)
{
    char path[LSBX_DIR_MAX + 32], tmp[LSBX_DIR_MAX + 32], hdr[REC_HDR_LEN + 1];
    int fd;
    bool ok;

    snprintf(path, sizeof(path), "%s/" REC_NAME, dir);
    snprintf(tmp, sizeof(tmp), "%s/" REC_NAME ".tmp", dir);
    /* it holds the envd token: the agent's user only */
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return AB_EIO;
    rec_header(hdr, gen, len, text);
    ok = fchmod(fd, 0600) == 0 && ftruncate(fd, (off_t)slot * 2) == 0 &&
         pwrite_all(fd, hdr, REC_HDR_LEN, 0) == 0 && pwrite_all(fd, text, len, REC_HDR_LEN) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    unlink(tmp);
    return AB_EIO;
}

int lsbx_record_write(const char *dir, const char *text)
{
    char path[LSBX_DIR_MAX + 32], hdr[REC_HDR_LEN + 1];
    size_t tlen = strlen(text), slot = 0, need = REC_HDR_LEN + tlen;
    uint64_t gen = 0;
    struct stat st;
    int fd, k, rc = AB_EIO;

    if (tlen == 0 || need > REC_SLOT_MAX)
        return AB_ELIMIT;
    snprintf(path, sizeof(path), "%s/" REC_NAME, dir);
    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            return AB_EIO;
        for (slot = REC_SLOT_MIN; slot < need; slot *= 2)
            ;
        return rec_create(dir, slot, 1, text, (uint32_t)tlen);
    }
    if (fstat(fd, &st) != 0 || st.st_size < 2 * REC_SLOT_MIN || st.st_size % 2 != 0 ||
        st.st_size > 2 * (off_t)REC_SLOT_MAX)
        goto recreate; /* not a file this code made: start over */
    slot = (size_t)st.st_size / 2;
    k = newest(fd, slot, &gen);
    if (need > slot)
        goto recreate;
    /* the other slot; with no valid record at all, either */
    k = k < 0 ? 0 : 1 - k;
    rec_header(hdr, gen + 1, (uint32_t)tlen, text);
    {
        char *buf = malloc(need);
        if (!buf)
            goto out;
        memcpy(buf, hdr, REC_HDR_LEN);
        memcpy(buf + REC_HDR_LEN, text, tlen);
        rc = pwrite_all(fd, buf, need, (off_t)slot * k) == 0 ? 0 : AB_EIO;
        explicit_bzero(buf, need);
        free(buf);
    }
    goto out;
recreate:
    if (slot == 0 || need > slot) {
        size_t grown = REC_SLOT_MIN;
        while (grown < need)
            grown *= 2;
        slot = AB_MAX(grown, slot);
    }
    rc = rec_create(dir, slot, gen + 1, text, (uint32_t)tlen);
out:
    close(fd);
    return rc;
}

int lsbx_record_read(const char *dir, char **text, size_t *len, uint64_t *gen)
{
    char path[LSBX_DIR_MAX + 32];
    struct stat st;
    uint64_t g = 0;
    int fd, k, rc = AB_EINVAL;

    *text = NULL;
    snprintf(path, sizeof(path), "%s/" REC_NAME, dir);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? AB_ENOENT : AB_EIO;
    if (fstat(fd, &st) == 0 && st.st_size >= 2 * REC_SLOT_MIN && st.st_size % 2 == 0 &&
        st.st_size <= 2 * (off_t)REC_SLOT_MAX) {
        size_t slot = (size_t)st.st_size / 2;
        if ((k = newest(fd, slot, &g)) >= 0 && slot_read(fd, slot, k, &g, text, len) == 0) {
            if (gen)
                *gen = g;
            rc = 0;
        }
    }
    close(fd);
    return rc;
}

bool lsbx_record_exists(const char *dir)
{
    char path[LSBX_DIR_MAX + 32];
    struct stat st;

    snprintf(path, sizeof(path), "%s/" REC_NAME, dir);
    if (lstat(path, &st) == 0)
        return true;
    snprintf(path, sizeof(path), "%s/state.json", dir); /* an agent before state.rec */
    return lstat(path, &st) == 0;
}
