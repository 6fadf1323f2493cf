/* Namespace normalisation and the per-team override. */
#include "hub/iam.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "hub/audit.h"
#include "hub/db.h"

/* Appends the normalised part to out (at len, bounded by cap); returns the new length. */
static size_t append_part(char *out, size_t len, size_t cap, const char *part)
{
    size_t start = len, i;

    for (i = 0; part[i] != '\0' && len + 1 < cap; i++) {
        unsigned char ch = (unsigned char)tolower((unsigned char)part[i]);
        out[len++] = (char)((isascii(ch) && (isdigit(ch) || islower(ch))) || ch == '-' ? ch : '-');
    }
    out[len] = '\0';
    /* trim '-' at both ends of this part */
    while (len > start && out[len - 1] == '-')
        out[--len] = '\0';
    i = start;
    while (i < len && out[i] == '-')
        i++;
    if (i > start) {
        memmove(out + start, out + i, len - i + 1);
        len -= i - start;
    }
    if (len == start && len + 8 < cap) {
        memcpy(out + len, "unknown", 8);
        len += 7;
    }
    return len;
}

static const char *trim_ws(const char *s, char *buf, size_t cap)
{
    size_t n;

    while (*s == ' ' || *s == '\t')
        s++;
    ab_strlcpy(buf, s, cap);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    return buf;
}

void iam_namespace_for(const char *team, const char *user, char out[IAM_NAMESPACE_MAX + 1])
{
    char t[IAM_TEAM_MAX + 1], u[IAM_USER_MAX + 1];
    char full[IAM_TEAM_MAX + IAM_USER_MAX + 16];
    char both[IAM_TEAM_MAX + IAM_USER_MAX + 2];
    uint8_t d[CRYPTO_SHA256_LEN];
    char hex[2 * CRYPTO_SHA256_LEN + 1];
    size_t len;

    trim_ws(team != NULL ? team : "", t, sizeof(t));
    trim_ws(user != NULL ? user : "", u, sizeof(u));
    if (t[0] == '\0') {
        ab_strlcpy(out, "default", IAM_NAMESPACE_MAX + 1);
        return;
    }
    memcpy(full, "t-", 3);
    len = append_part(full, 2, sizeof(full), t);
    full[len++] = '-';
    full[len] = '\0';
    len = append_part(full, len, sizeof(full), u);
    if (len <= IAM_NAMESPACE_MAX) {
        ab_strlcpy(out, full, IAM_NAMESPACE_MAX + 1);
        return;
    }
    snprintf(both, sizeof(both), "%s/%s", t, u);
    crypto_sha256(both, strlen(both), d);
    crypto_hex_encode(d, sizeof(d), hex);
    len = 56;
    while (len > 0 && full[len - 1] == '-')
        len--;
    snprintf(out, IAM_NAMESPACE_MAX + 1, "%.*s-%.6s", (int)len, full, hex);
}

int iam_namespace_is_valid(const char *ns)
{
    size_t n = ns != NULL ? strlen(ns) : 0, i;

    if (n == 0 || n > IAM_NAMESPACE_MAX || ns[0] == '-' || ns[n - 1] == '-')
        return 0;
    for (i = 0; i < n; i++) {
        char ch = ns[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'))
            return 0;
    }
    return 1;
}

int iam_check_name(const char *what, const char *s, char *err, size_t errlen)
{
    size_t n = s != NULL ? strlen(s) : 0, i;

    if (n == 0) {
        snprintf(err, errlen, "%s is required", what);
        return AB_EINVAL;
    }
    if (n > IAM_TEAM_MAX) {
        snprintf(err, errlen, "%s must be at most %d characters, got %zu", what, IAM_TEAM_MAX, n);
        return AB_EINVAL;
    }
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x21 || ch > 0x7e || ch == '/') {
            snprintf(err, errlen,
                     "%s may only hold printable ASCII without spaces or '/' (character %zu "
                     "is not)",
                     what, i + 1);
            return AB_EINVAL;
        }
    }
    return 0;
}

int iam_team_namespace_set_conn(PGconn *c, const char *team, const char *ns, const char *actor,
                                char *err, size_t errlen)
{
    const char *vals[3] = {team, ns, actor};
    struct audit_entry ae = {0};
    char line[256];
    PGresult *r = NULL;
    int rc;

    rc = iam_check_name("team", team, err, errlen);
    if (rc != 0)
        return rc;
    if (ns != NULL && !iam_namespace_is_valid(ns)) {
        snprintf(err, errlen,
                 "namespace '%s' is not a DNS label: use 1-63 characters of [a-z0-9-], "
                 "starting and ending with a letter or digit",
                 ns);
        return AB_EINVAL;
    }
    r = PQexec(c, "BEGIN");
    PQclear(r);
    if (ns != NULL)
        r = PQexecParams(c,
                         "INSERT INTO team_namespaces (team, namespace, updated_by) "
                         "VALUES ($1, $2, $3) ON CONFLICT (team) DO UPDATE SET "
                         "namespace = EXCLUDED.namespace, updated_at = now(), "
                         "updated_by = EXCLUDED.updated_by",
                         3, NULL, vals, NULL, NULL, 0);
    else
        r = PQexecParams(c, "DELETE FROM team_namespaces WHERE team = $1", 1, NULL, vals, NULL,
                         NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(err, errlen, "cannot store the namespace of team '%s': %s", team,
                 db_error_line(c, r, line, sizeof(line)));
        rc = AB_EIO;
        goto out;
    }
    if (ns == NULL && strcmp(PQcmdTuples(r), "0") == 0) {
        snprintf(err, errlen, "team '%s' has no namespace override", team);
        rc = AB_ENOENT;
        goto out;
    }
    ae.actor = actor;
    ae.action = ns != NULL ? "team.set-namespace" : "team.clear-namespace";
    ae.target = team;
    ae.namespace = ns;
    rc = audit_write_conn(c, &ae, err, errlen);
out:
    PQclear(r);
    r = PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK");
    if (rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(err, errlen, "cannot commit: %s", db_error_line(c, r, line, sizeof(line)));
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}
