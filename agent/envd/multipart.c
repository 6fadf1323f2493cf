/* multipart/form-data, parsed as a stream.
 *
 * The delimiter is CRLF "--" boundary. Because a boundary may not hold CR,
 * a CR only ever starts a match, so a partial match never needs a KMP
 * fallback: on a mismatch the matched bytes are known (a prefix of the
 * delimiter) and go out as content. The body is treated as if it began with
 * CRLF so the first "--boundary" needs no special case.
 *
 * Speed: content is searched for the whole delimiter with memmem and goes
 * out in runs as long as the chunk fed; only a chunk's last dlen-1 bytes are
 * looked at one by one (a delimiter split across feeds), and only bytes of
 * a partial match carried into the next feed are compared byte by byte. */
#include "agent/envd/multipart.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agentbox/common.h"

enum mp_state {
    ST_PREAMBLE,
    ST_AFTER_DELIM, /* delimiter seen: "--" closes, CRLF opens a part */
    ST_CLOSE_DASH,  /* one '-' of the closing "--" seen */
    ST_DELIM_LF,    /* CR after the delimiter seen */
    ST_HEADERS,
    ST_BODY,
    ST_EPILOGUE,
    ST_ERROR,
};

struct envd_mp {
    struct envd_mp_callbacks cb;
    void *arg;
    enum mp_state state;
    char delim[4 + ENVD_MP_BOUNDARY_MAX + 1];
    size_t dlen;
    size_t match;
    char head[ENVD_MP_HEAD_MAX + 1];
    size_t head_len;
    size_t line_start;
    char name[ENVD_MP_NAME_MAX];
    char filename[ENVD_MP_NAME_MAX];
    int rc;
    char err[160];
};

/* Reads the next ";"-separated key=value parameter of a header value.
 * Values may be quoted with backslash escapes. Returns 1 when one was read,
 * 0 at the end, AB_ELIMIT when a key or value does not fit, AB_EINVAL when
 * malformed. */
static int next_param(const char **sp, char *key, size_t klen, char *val, size_t vlen)
{
    const char *s = *sp;
    size_t k = 0;
    size_t v = 0;

    while (*s == ';' || *s == ' ' || *s == '\t')
        s++;
    if (*s == '\0') {
        *sp = s;
        return 0;
    }
    while (*s != '\0' && *s != '=' && *s != ';' && *s != ' ' && *s != '\t') {
        if (k + 1 >= klen)
            return AB_ELIMIT;
        key[k++] = (char)tolower((unsigned char)*s++);
    }
    key[k] = '\0';
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s != '=') {
        val[0] = '\0';
        *sp = s;
        return k > 0 ? 1 : AB_EINVAL;
    }
    s++;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '"') {
        s++;
        while (*s != '"') {
            if (*s == '\0')
                return AB_EINVAL;
            if (*s == '\\' && s[1] != '\0')
                s++;
            if (v + 1 >= vlen)
                return AB_ELIMIT;
            val[v++] = *s++;
        }
        s++;
    } else {
        while (*s != '\0' && *s != ';' && *s != ' ' && *s != '\t') {
            if (v + 1 >= vlen)
                return AB_ELIMIT;
            val[v++] = *s++;
        }
    }
    val[v] = '\0';
    *sp = s;
    return 1;
}

struct envd_mp *envd_mp_new(const char *content_type, const struct envd_mp_callbacks *cb, void *arg,
                            char *err, size_t errlen)
{
    static const char media[] = "multipart/form-data";
    char key[32];
    char val[256];
    char v[256];
    const char *s = content_type;
    struct envd_mp *m;
    int rc;

    if (s == NULL || strncasecmp(s, media, sizeof(media) - 1) != 0 ||
        (s[sizeof(media) - 1] != ';' && s[sizeof(media) - 1] != ' ' &&
         s[sizeof(media) - 1] != '\0')) {
        snprintf(err, errlen,
                 "Content-Type must be multipart/form-data or "
                 "application/octet-stream");
        return NULL;
    }
    s += sizeof(media) - 1;
    val[0] = '\0';
    while ((rc = next_param(&s, key, sizeof(key), v, sizeof(v))) > 0) {
        if (strcmp(key, "boundary") == 0)
            memcpy(val, v, sizeof(val));
    }
    if (rc < 0) {
        snprintf(err, errlen, "Content-Type parameters are malformed or longer than %zu bytes",
                 sizeof(v) - 1);
        return NULL;
    }
    if (val[0] == '\0') {
        snprintf(err, errlen, "Content-Type multipart/form-data needs a boundary parameter");
        return NULL;
    }
    if (strlen(val) > ENVD_MP_BOUNDARY_MAX) {
        snprintf(err, errlen, "multipart boundary is longer than %d bytes", ENVD_MP_BOUNDARY_MAX);
        return NULL;
    }
    if (strpbrk(val, "\r\n") != NULL) {
        snprintf(err, errlen, "multipart boundary may not contain CR or LF");
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->cb = *cb;
    m->arg = arg;
    m->dlen = (size_t)snprintf(m->delim, sizeof(m->delim), "\r\n--%s", val);
    m->match = 2; /* the virtual CRLF before the first boundary */
    m->state = ST_PREAMBLE;
    return m;
}

void envd_mp_free(struct envd_mp *m)
{
    free(m);
}

static int fail(struct envd_mp *m, int rc, const char *msg)
{
    m->state = ST_ERROR;
    m->rc = rc;
    if (msg != NULL)
        ab_strlcpy(m->err, msg, sizeof(m->err));
    else if (m->err[0] == '\0')
        snprintf(m->err, sizeof(m->err), "upload stopped: %s", ab_strerror(rc));
    return rc;
}

/* One header line (without CRLF) of the current part. */
static int header_line(struct envd_mp *m, char *line)
{
    char *colon = strchr(line, ':');
    const char *s;
    char key[32];
    char val[ENVD_MP_NAME_MAX];
    int rc;

    if (colon == NULL)
        return fail(m, AB_EINVAL, "multipart part header line has no ':'");
    *colon = '\0';
    if (strcasecmp(line, "content-disposition") != 0)
        return 0;
    s = colon + 1;
    while (*s == ' ' || *s == '\t')
        s++;
    if (strncasecmp(s, "form-data", 9) != 0)
        return fail(m, AB_EINVAL, "multipart part Content-Disposition must be form-data");
    s += 9;
    while ((rc = next_param(&s, key, sizeof(key), val, sizeof(val))) > 0) {
        if (strcmp(key, "name") == 0)
            ab_strlcpy(m->name, val, sizeof(m->name));
        else if (strcmp(key, "filename") == 0)
            ab_strlcpy(m->filename, val, sizeof(m->filename));
    }
    if (rc == AB_ELIMIT)
        return fail(m, AB_ELIMIT, "multipart part name or filename is longer than 4096 bytes");
    if (rc < 0)
        return fail(m, AB_EINVAL, "multipart part Content-Disposition is malformed");
    return 0;
}

/* Adds one byte to the header block; at the empty line the part begins. */
static int header_byte(struct envd_mp *m, char c)
{
    int rc;

    if (m->head_len >= ENVD_MP_HEAD_MAX)
        return fail(m, AB_ELIMIT, "multipart part headers are longer than 16 KiB");
    m->head[m->head_len++] = c;
    if (c != '\n' || m->head_len - m->line_start < 2 || m->head[m->head_len - 2] != '\r')
        return 0;
    m->head[m->head_len - 2] = '\0';
    if (m->head_len - 2 == m->line_start) {
        m->state = ST_BODY;
        m->match = 0;
        rc = m->cb.on_part != NULL ? m->cb.on_part(m->arg, m->name, m->filename) : 0;
        return rc != 0 ? fail(m, rc, NULL) : 0;
    }
    rc = header_line(m, m->head + m->line_start);
    m->line_start = m->head_len;
    return rc;
}

static int emit(struct envd_mp *m, const void *data, size_t len)
{
    int rc;

    if (len == 0 || m->cb.on_data == NULL)
        return 0;
    rc = m->cb.on_data(m->arg, data, len);
    return rc != 0 ? fail(m, rc, NULL) : 0;
}

static void begin_part(struct envd_mp *m)
{
    m->head_len = 0;
    m->line_start = 0;
    m->name[0] = '\0';
    m->filename[0] = '\0';
    m->state = ST_HEADERS;
}

/* Where the content of p[i..len) that surely is content ends: the first
 * CR of the last dlen-1 bytes whose rest is a prefix of the delimiter (it
 * may continue in the next feed), else len. */
static size_t tail_start(const struct envd_mp *m, const uint8_t *p, size_t i, size_t len)
{
    size_t k = len - i > m->dlen - 1 ? len - (m->dlen - 1) : i;

    for (; k < len; k++) {
        if (p[k] == '\r' && memcmp(p + k, m->delim, len - k) == 0)
            return k;
    }
    return len;
}

int envd_mp_feed(struct envd_mp *m, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t i = 0;
    int rc = 0;

    while (i < len && rc == 0) {
        switch (m->state) {
        case ST_PREAMBLE:
        case ST_BODY: {
            bool body = m->state == ST_BODY;
            if (m->match == 0) {
                const uint8_t *d = memmem(p + i, len - i, m->delim, m->dlen);
                size_t end = d != NULL ? (size_t)(d - p) : tail_start(m, p, i, len);
                if (body)
                    rc = emit(m, p + i, end - i);
                if (rc != 0)
                    break;
                /* At a whole delimiter, or at a prefix of one that ends the
                 * chunk: the byte-wise branch below consumes it. */
                i = end;
                if (i < len) {
                    m->match = 1;
                    i++;
                    if (d != NULL) {
                        m->match = m->dlen - 1;
                        i += m->dlen - 2;
                        continue; /* p[i] is the delimiter's last byte */
                    }
                }
            } else if (p[i] == (uint8_t)m->delim[m->match]) {
                i++;
                if (++m->match == m->dlen) {
                    m->match = 0;
                    m->state = ST_AFTER_DELIM;
                    if (body && m->cb.on_part_end != NULL) {
                        rc = m->cb.on_part_end(m->arg);
                        if (rc != 0)
                            fail(m, rc, NULL);
                    }
                }
            } else {
                /* The bytes matched so far were content; look at p[i] again. */
                if (body)
                    rc = emit(m, m->delim, m->match);
                m->match = 0;
            }
            break;
        }
        case ST_AFTER_DELIM:
            if (p[i] == '-')
                m->state = ST_CLOSE_DASH;
            else if (p[i] == '\r')
                m->state = ST_DELIM_LF;
            else if (p[i] != ' ' && p[i] != '\t')
                rc = fail(m, AB_EINVAL, "multipart boundary is followed by neither CRLF nor --");
            i++;
            break;
        case ST_CLOSE_DASH:
            if (p[i++] == '-')
                m->state = ST_EPILOGUE;
            else
                rc = fail(m, AB_EINVAL, "multipart boundary is followed by neither CRLF nor --");
            break;
        case ST_DELIM_LF:
            if (p[i++] == '\n')
                begin_part(m);
            else
                rc = fail(m, AB_EINVAL, "multipart boundary line does not end with CRLF");
            break;
        case ST_HEADERS:
            rc = header_byte(m, (char)p[i++]);
            break;
        case ST_EPILOGUE:
            i = len;
            break;
        case ST_ERROR:
            return m->rc;
        }
    }
    return m->state == ST_ERROR ? m->rc : rc;
}

int envd_mp_finish(struct envd_mp *m)
{
    if (m->state == ST_ERROR)
        return m->rc;
    if (m->state != ST_EPILOGUE)
        return fail(m, AB_EINVAL,
                    m->state == ST_PREAMBLE ? "multipart body has no boundary line"
                                            : "multipart body ends before its closing boundary");
    return 0;
}

const char *envd_mp_error(const struct envd_mp *m)
{
    return m->err;
}

bool envd_mp_is_done(const struct envd_mp *m)
{
    return m->state == ST_EPILOGUE;
}
