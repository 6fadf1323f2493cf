/* The egress CA in the sandbox's trust store (trust.h). */
#include "agent/envd/trust.h"

#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BEGIN_MARK "# agentbox egress CA: begin\n"
#define END_MARK "# agentbox egress CA: end\n"
#define PEM_BEGIN "-----BEGIN CERTIFICATE-----"
#define PEM_END "-----END CERTIFICATE-----"

/* Only certificates: every non-blank line is inside a BEGIN/END CERTIFICATE
 * pair, so a key (or anything else) can never be smuggled into the store. */
static int pem_ok(const char *pem, size_t len)
{
    int in = 0, certs = 0;
    size_t i = 0;
    if (memchr(pem, '\0', len))
        return 0;
    while (i < len) {
        const char *nl = memchr(pem + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - pem) : len, n = e - i;
        const char *l = pem + i;
        if (n && l[n - 1] == '\r')
            n--;
        if (n == strlen(PEM_BEGIN) && memcmp(l, PEM_BEGIN, n) == 0) {
            if (in)
                return 0;
            in = 1;
        } else if (n == strlen(PEM_END) && memcmp(l, PEM_END, n) == 0) {
            if (!in)
                return 0;
            in = 0;
            certs++;
        } else if (n > 0) {
            if (!in)
                return 0;
            for (size_t k = 0; k < n; k++)
                if (!(l[k] == '+' || l[k] == '/' || l[k] == '=' || (l[k] >= '0' && l[k] <= '9') ||
                      (l[k] >= 'a' && l[k] <= 'z') || (l[k] >= 'A' && l[k] <= 'Z')))
                    return 0;
        }
        i = e + 1;
    }
    return !in && certs > 0;
}

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int write_atomic(const char *path, const char *a, size_t alen, const char *b, size_t blen,
                        char *err, size_t errlen)
{
    char tmp[PATH_MAX + 16], dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    if (mkdirs(dir) != 0) {
        snprintf(err, errlen, "cannot create the directories of %s: %s", path, strerror(errno));
        return AB_EIO;
    }
    snprintf(tmp, sizeof(tmp), "%s.agentbox-tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        return AB_EIO;
    }
    int ok = write_all(fd, a, alen) == 0 && write_all(fd, b, blen) == 0 && fchmod(fd, 0644) == 0 &&
             fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return AB_EIO;
    }
    return 0;
}

/* The bundle at path without an earlier agentbox block (malloc'd; *len). */
static char *bundle_without_ours(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f)
        return errno == ENOENT ? calloc(1, 1) : NULL;
    char *buf = malloc(ENVD_TRUST_BUNDLE_MAX + 1);
    size_t n = buf ? fread(buf, 1, ENVD_TRUST_BUNDLE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    if (n > ENVD_TRUST_BUNDLE_MAX) {
        snprintf(err, errlen, "%s is larger than %d bytes", path, ENVD_TRUST_BUNDLE_MAX);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    char *b = strstr(buf, BEGIN_MARK);
    char *e = b ? strstr(b, END_MARK) : NULL;
    if (b && e) {
        e += strlen(END_MARK);
        memmove(b, e, n - (size_t)(e - buf) + 1);
        n -= (size_t)(e - b);
    }
    if (n && buf[n - 1] != '\n') /* the block starts on a line of its own */
        buf[n++] = '\n', buf[n] = '\0';
    *len = n;
    return buf;
}

/* The CA at ca_path, and the bundle read from src (less an earlier agentbox
 * block) with the CA appended, written to dst. */
static int install_at(const char *root, const char *pem, size_t len, const char *ca_path,
                      const char *src, const char *dst, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int nl = len && pem[len - 1] == '\n';
    snprintf(path, sizeof(path), "%s%s", root, ca_path);
    int rc = write_atomic(path, pem, len, "\n", nl ? 0 : 1, err, errlen);
    if (rc != 0)
        return rc;
    snprintf(path, sizeof(path), "%s%s", root, src);
    size_t blen;
    char e2[160] = "";
    char *bundle = bundle_without_ours(path, &blen, e2, sizeof(e2));
    if (!bundle) {
        snprintf(err, errlen, "cannot read %s: %s", path, e2[0] ? e2 : strerror(errno));
        return AB_EIO;
    }
    size_t blk_len = strlen(BEGIN_MARK) + len + 1 + strlen(END_MARK);
    char *blk = malloc(blk_len + 1);
    if (!blk) {
        free(bundle);
        return AB_ENOMEM;
    }
    snprintf(blk, blk_len + 1, "%s%.*s%s%s", BEGIN_MARK, (int)len, pem, nl ? "" : "\n", END_MARK);
    snprintf(path, sizeof(path), "%s%s", root, dst);
    rc = write_atomic(path, bundle, blen, blk, strlen(blk), err, errlen);
    free(blk);
    free(bundle);
    return rc;
}

int envd_trust_install(const char *root, const char *pem, size_t len, struct envd_trust_paths *out,
                       char *err, size_t errlen)
{
    if (len > ENVD_TRUST_PEM_MAX) {
        snprintf(err, errlen, "field 'egressCa' is longer than %d bytes", ENVD_TRUST_PEM_MAX);
        return AB_ELIMIT;
    }
    if (!pem_ok(pem, len)) {
        snprintf(err, errlen, "field 'egressCa' must hold PEM certificates and nothing else");
        return AB_EINVAL;
    }
    *out = (struct envd_trust_paths){ENVD_TRUST_CA_FILE, ENVD_TRUST_BUNDLE, false};
    int rc = install_at(root, pem, len, ENVD_TRUST_CA_FILE, ENVD_TRUST_BUNDLE, ENVD_TRUST_BUNDLE,
                        err, errlen);
    if (rc != AB_EIO)
        return rc;
    /* a read-only /etc: the same files where the sandbox can write */
    *out = (struct envd_trust_paths){ENVD_TRUST_FALLBACK_CA, ENVD_TRUST_FALLBACK_BUNDLE, true};
    return install_at(root, pem, len, ENVD_TRUST_FALLBACK_CA, ENVD_TRUST_BUNDLE,
                      ENVD_TRUST_FALLBACK_BUNDLE, err, errlen);
}

static void set_default(json_t *vars, const char *k, const char *v)
{
    if (!json_object_get(vars, k))
        json_object_set_new(vars, k, json_string(v));
}

void envd_trust_env(json_t *vars, const struct envd_trust_paths *where)
{
    set_default(vars, "NODE_EXTRA_CA_CERTS", where->ca_file);
    set_default(vars, "REQUESTS_CA_BUNDLE", where->bundle);
    if (where->fallback) {
        set_default(vars, "SSL_CERT_FILE", where->bundle);
        set_default(vars, "CURL_CA_BUNDLE", where->bundle);
    }
}
