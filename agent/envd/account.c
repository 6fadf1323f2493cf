/* Accounts from the sandbox's files. See account.h. */
#include "agent/envd/account.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"

#define FIELDS_MAX 7

/* One line of a colon-separated file, split in place. */
struct line {
    char buf[ENVD_ACCOUNT_LINE_MAX + 2];
    char *f[FIELDS_MAX];
    int n;
};

/* Reads the next usable line of fp into l, split into at most FIELDS_MAX
 * fields (the last keeps any further colons). false at the end. */
static bool next_line(FILE *fp, struct line *l)
{
    while (fgets(l->buf, sizeof(l->buf), fp)) {
        size_t len = strlen(l->buf);
        if (len > 0 && l->buf[len - 1] != '\n' && !feof(fp)) {
            /* longer than a line may be: skip the rest of it */
            int c;
            while ((c = fgetc(fp)) != EOF && c != '\n')
                ;
            continue;
        }
        l->buf[strcspn(l->buf, "\r\n")] = '\0';
        if (l->buf[0] == '\0' || l->buf[0] == '#' || l->buf[0] == '+' || l->buf[0] == '-')
            continue;
        l->n = 0;
        char *p = l->buf;
        while (l->n < FIELDS_MAX) {
            l->f[l->n++] = p;
            char *c = l->n < FIELDS_MAX ? strchr(p, ':') : NULL;
            if (!c)
                break;
            *c = '\0';
            p = c + 1;
        }
        return true;
    }
    return false;
}

/* A decimal id below 2^32 - 1 ((uid_t)-1 means "none" to the kernel). */
static bool parse_id(const char *s, uint32_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v >= UINT32_MAX)
            return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* A passwd line (name:pw:uid:gid:gecos:dir:shell) into out. */
static bool passwd_entry(const struct line *l, struct envd_account *out)
{
    uint32_t uid, gid;
    if (l->n < 6 || l->f[0][0] == '\0' || strlen(l->f[0]) > ENVD_ACCOUNT_NAME_MAX ||
        !parse_id(l->f[2], &uid) || !parse_id(l->f[3], &gid) || strlen(l->f[5]) >= PATH_MAX)
        return false;
    ab_strlcpy(out->name, l->f[0], sizeof(out->name));
    out->uid = (uid_t)uid;
    out->gid = (gid_t)gid;
    ab_strlcpy(out->home, l->f[5], sizeof(out->home));
    return true;
}

static int passwd_find(const char *passwd, const char *name, uid_t uid, struct envd_account *out)
{
    FILE *fp = fopen(passwd, "re");
    struct line *l = fp ? malloc(sizeof(*l)) : NULL;
    int rc = AB_ENOENT;
    if (l) {
        while (rc != 0 && next_line(fp, l)) {
            if (passwd_entry(l, out) && (name ? strcmp(out->name, name) == 0 : out->uid == uid))
                rc = 0;
        }
    }
    free(l);
    if (fp)
        fclose(fp);
    return rc;
}

int envd_account_by_name(const char *passwd, const char *name, struct envd_account *out)
{
    return passwd_find(passwd, name, 0, out);
}

int envd_account_by_uid(const char *passwd, uid_t uid, struct envd_account *out)
{
    return passwd_find(passwd, NULL, uid, out);
}

/* Each group line (name:pw:gid:members) with a valid gid, to fn; stops when fn
 * returns false. */
static void each_group(const char *group,
                       bool (*fn)(void *arg, const char *name, gid_t gid, char *members), void *arg)
{
    FILE *fp = fopen(group, "re");
    struct line *l = fp ? malloc(sizeof(*l)) : NULL;
    if (l) {
        uint32_t gid;
        bool more = true;
        while (more && next_line(fp, l))
            if (l->n >= 3 && l->f[0][0] != '\0' && parse_id(l->f[2], &gid))
                more = fn(arg, l->f[0], (gid_t)gid, l->n >= 4 ? l->f[3] : (char *)"");
    }
    free(l);
    if (fp)
        fclose(fp);
}

struct name_of {
    gid_t gid;
    char *name;
    size_t len;
    bool found;
};

static bool match_gid(void *arg, const char *name, gid_t gid, char *members)
{
    struct name_of *q = arg;
    if (gid != q->gid || strlen(name) >= q->len)
        return true;
    ab_strlcpy(q->name, name, q->len);
    q->found = true;
    return false;
}

int envd_group_name(const char *group, gid_t gid, char *name, size_t len)
{
    struct name_of q = {gid, name, len, false};
    each_group(group, match_gid, &q);
    return q.found ? 0 : AB_ENOENT;
}

struct member_of {
    const char *name;
    gid_t *out;
    int n, max;
};

static bool add_gid(struct member_of *q, gid_t gid)
{
    for (int i = 0; i < q->n; i++)
        if (q->out[i] == gid)
            return true;
    if (q->n == q->max)
        return false;
    q->out[q->n++] = gid;
    return true;
}

static bool match_member(void *arg, const char *name, gid_t gid, char *members)
{
    struct member_of *q = arg;
    for (char *save = NULL, *m = strtok_r(members, ",", &save); m; m = strtok_r(NULL, ",", &save))
        if (strcmp(m, q->name) == 0)
            return add_gid(q, gid);
    return true;
}

int envd_groups_of(const char *group, const char *name, gid_t primary, gid_t *out, int max)
{
    struct member_of q = {name, out, 0, max};
    if (max <= 0)
        return 0;
    add_gid(&q, primary);
    each_group(group, match_member, &q);
    return q.n;
}
