/* Logging: every event becomes one bounded line written with one write(), so
 * lines from several threads never interleave and a huge field can't make the
 * logger allocate. Text lines are logfmt-like, JSON lines are one object each.
 * Fields whose names look secret are masked here as a second line of defence
 * (callers are still expected to log_redact() secrets themselves). */
#include "agentbox/log.h"
#include "agentbox/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Longest line including the newline; longer events are cut and marked. */
#define LOG_LINE_MAX 8192
/* Room kept back for closing quotes/braces and the truncation marker. */
#define LOG_LINE_RESERVE 48
/* A caller that forgets the terminator must not walk the stack forever. */
#define LOG_FIELDS_MAX 64
#define LOG_REDACT_TMP 64

static atomic_int g_level = LOG_LEVEL_INFO;
static atomic_int g_json = 0;
static _Atomic(FILE *) g_stream = NULL; /* NULL means stderr */
static _Atomic(const char *) g_component = NULL;
static _Atomic(const char *) g_json_time = "ts";
static _Atomic(const char *) g_json_msg = "msg";

struct log_buf {
    char b[LOG_LINE_MAX];
    size_t len;
    size_t lim; /* soft limit for content; closers may go up to LOG_LINE_MAX */
    bool full;  /* content was cut */
};

void log_set_level(enum log_level level)
{
    if (level < LOG_LEVEL_DEBUG)
        level = LOG_LEVEL_DEBUG;
    if (level > LOG_LEVEL_ERROR)
        level = LOG_LEVEL_ERROR;
    atomic_store(&g_level, (int)level);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load(&g_level);
}

int log_parse_level(const char *s, enum log_level *out)
{
    static const struct {
        const char *name;
        enum log_level level;
    } names[] = {
        {"debug", LOG_LEVEL_DEBUG},  {"info", LOG_LEVEL_INFO},   {"warn", LOG_LEVEL_WARN},
        {"warning", LOG_LEVEL_WARN}, {"error", LOG_LEVEL_ERROR},
    };

    if (!s || !out)
        return AB_EINVAL;
    for (size_t i = 0; i < AB_ARRAY_LEN(names); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return AB_EINVAL;
}

void log_set_json(int on)
{
    atomic_store(&g_json, on ? 1 : 0);
}

void log_set_json_keys(const char *time_key, const char *msg_key)
{
    atomic_store(&g_json_time, time_key != NULL ? time_key : "ts");
    atomic_store(&g_json_msg, msg_key != NULL ? msg_key : "msg");
}

void log_set_stream(FILE *f)
{
    atomic_store(&g_stream, f);
}

void log_set_component(const char *name)
{
    atomic_store(&g_component, name);
}

/* ---- redaction ---- */

static bool has_prefix(const char *s, const char *p, bool icase)
{
    size_t n = strlen(p);

    return icase ? strncasecmp(s, p, n) == 0 : strncmp(s, p, n) == 0;
}

/* Shows only the part of a secret that identifies its kind: "Bearer ", then a
 * key prefix, then at most 4 characters (fewer for short secrets, so that a
 * short secret is never shown whole). */
const char *log_redact(const char *secret, char *buf, size_t buflen)
{
    static const char *const prefixes[] = {"agbx_", "abxc_"};
    size_t keep = 0, rest, show;
    const char *p;

    if (!buf || buflen == 0)
        return "";
    buf[0] = '\0';
    if (!secret) {
        ab_strlcpy(buf, "(null)", buflen);
        return buf;
    }
    if (secret[0] == '\0')
        return buf;

    p = secret;
    if (has_prefix(p, "Bearer ", true)) {
        keep += 7;
        p += 7;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(prefixes); i++) {
        if (has_prefix(p, prefixes[i], false)) {
            keep += strlen(prefixes[i]);
            p += strlen(prefixes[i]);
            break;
        }
    }
    rest = strlen(p);
    show = rest < 8 ? 0 : AB_MIN((size_t)4, rest / 4);
    keep += show;

    /* Copy the kept part (bounded by buflen), then the ellipsis if it fits. */
    if (keep > buflen - 1)
        keep = buflen - 1;
    memcpy(buf, secret, keep);
    buf[keep] = '\0';
    if (buflen - 1 - keep >= 3)
        memcpy(buf + keep, "...", 4);
    return buf;
}

/* Field names that probably hold a secret. Matching is case-insensitive and by
 * substring, except "key", which would hit too many harmless names unless it is
 * the whole name or its last word. */
static bool key_is_secret(const char *key)
{
    static const char *const words[] = {"token",         "secret",    "password", "passwd",
                                        "authorization", "api_key",   "apikey",   "api-key",
                                        "private_key",   "credential"};
    char low[128];
    size_t n = 0;

    for (; key[n] && n < sizeof(low) - 1; n++) {
        char c = key[n];
        low[n] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    low[n] = '\0';
    for (size_t i = 0; i < AB_ARRAY_LEN(words); i++) {
        if (strstr(low, words[i]))
            return true;
    }
    if (strcmp(low, "key") == 0)
        return true;
    if (n > 4 && (strcmp(low + n - 4, "_key") == 0 || strcmp(low + n - 4, "-key") == 0))
        return true;
    return false;
}

/* ---- bounded line building ---- */

/* Appends all of s or nothing; once something did not fit, nothing more does,
 * so a cut line never has a hole in the middle. */
static bool put(struct log_buf *lb, const char *s, size_t n)
{
    if (lb->full)
        return false;
    if (lb->len + n > lb->lim) {
        lb->full = true;
        return false;
    }
    memcpy(lb->b + lb->len, s, n);
    lb->len += n;
    return true;
}

static bool puts_(struct log_buf *lb, const char *s)
{
    return put(lb, s, strlen(s));
}

/* For closers that must land even after the line was cut; the reserve makes
 * room for them. */
static void put_force(struct log_buf *lb, const char *s)
{
    size_t n = strlen(s);

    if (lb->len + n > LOG_LINE_MAX)
        n = LOG_LINE_MAX - lb->len;
    memcpy(lb->b + lb->len, s, n);
    lb->len += n;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t need;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        need = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        need = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        need = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

/* JSON string: control characters escaped, invalid UTF-8 replaced by U+FFFD so
 * the line always parses. Cut at a character boundary if the line is full; the
 * closing quote is always written. */
static bool put_json_str(struct log_buf *lb, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);

    if (!put(lb, "\"", 1))
        return false;
    for (size_t i = 0; i < n;) {
        char tmp[8];
        const char *unit = tmp;
        size_t ulen, adv = 1;
        unsigned char c = s[i];

        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            ulen = 2;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            tmp[0] = '\\';
            tmp[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            ulen = 2;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            ulen = 6;
        } else if (c < 0x80) {
            unit = (const char *)s + i;
            ulen = 1;
        } else if ((adv = utf8_len(s + i, n - i)) > 0) {
            unit = (const char *)s + i;
            ulen = adv;
        } else {
            memcpy(tmp, "\\ufffd", 6);
            ulen = 6;
            adv = 1;
        }
        if (!put(lb, unit, ulen))
            break;
        i += adv;
    }
    put_force(lb, "\"");
    return true;
}

static bool text_needs_quotes(const char *s)
{
    if (*s == '\0')
        return true;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

/* Text value: bare when it is one plain token, else quoted with \" \\ \n \r \t
 * and \xNN escapes, so a value can never forge a second line or field. */
static bool put_text_value(struct log_buf *lb, const char *s)
{
    if (!text_needs_quotes(s)) {
        /* A bare token may be cut anywhere; it stays one token. */
        size_t n = strlen(s), room;

        if (lb->full)
            return false;
        room = lb->lim - lb->len;
        if (n > room) {
            n = room;
            lb->full = true;
        }
        if (n == 0)
            return false;
        memcpy(lb->b + lb->len, s, n);
        lb->len += n;
        return true;
    }
    if (!put(lb, "\"", 1))
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char tmp[8];
        size_t ulen = 2;

        tmp[0] = '\\';
        if (c == '"' || c == '\\')
            tmp[1] = (char)c;
        else if (c == '\n')
            tmp[1] = 'n';
        else if (c == '\r')
            tmp[1] = 'r';
        else if (c == '\t')
            tmp[1] = 't';
        else if (c < 0x20 || c == 0x7f)
            ulen = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", c);
        else {
            tmp[0] = (char)c;
            ulen = 1;
        }
        if (!put(lb, tmp, ulen))
            break;
    }
    put_force(lb, "\"");
    return true;
}

/* Keys come from code, but keep them one safe token anyway. */
static void put_key(struct log_buf *lb, const char *key, bool json)
{
    char k[128];
    size_t n = 0;

    for (; key[n] && n < sizeof(k) - 1; n++) {
        char c = key[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        k[n] = ok ? c : '_';
    }
    if (n == 0)
        k[n++] = '_';
    k[n] = '\0';
    if (json) {
        put(lb, ",\"", 2);
        puts_(lb, k);
        put(lb, "\":", 2);
    } else {
        put(lb, " ", 1);
        puts_(lb, k);
        put(lb, "=", 1);
    }
}

static void put_field(struct log_buf *lb, const char *key, const char *value, bool json)
{
    size_t before = lb->len;

    bool ok;

    put_key(lb, key, json);
    ok = !lb->full && (json ? put_json_str(lb, value) : put_text_value(lb, value));
    /* Never leave a key without its value behind. */
    if (!ok)
        lb->len = before;
}

static void put_timestamp(struct log_buf *lb, bool json)
{
    struct timespec ts;
    struct tm tm;
    char tbuf[64];
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tbuf + n, sizeof(tbuf) - n, ".%03ldZ", ts.tv_nsec / 1000000);
    if (json) {
        puts_(lb, "{\"");
        puts_(lb, atomic_load(&g_json_time));
        puts_(lb, "\":\"");
        puts_(lb, tbuf);
        puts_(lb, "\"");
    } else {
        puts_(lb, tbuf);
    }
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere left to report a logging failure */
        }
        p += w;
        n -= (size_t)w;
    }
}

void log_write(enum log_level level, const char *msg, ...)
{
    static const char *const upper[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    static const char *const lower[] = {"debug", "info", "warn", "error"};
    struct log_buf lb;
    bool json = atomic_load(&g_json) != 0;
    const char *component = atomic_load(&g_component);
    FILE *stream = atomic_load(&g_stream);
    int lvl = (int)level;
    va_list ap;

    if (lvl < LOG_LEVEL_DEBUG)
        lvl = LOG_LEVEL_DEBUG;
    if (lvl > LOG_LEVEL_ERROR)
        lvl = LOG_LEVEL_ERROR;
    if (lvl < atomic_load(&g_level))
        return;
    if (!stream)
        stream = stderr;

    lb.len = 0;
    lb.lim = LOG_LINE_MAX - LOG_LINE_RESERVE;
    lb.full = false;

    put_timestamp(&lb, json);
    if (json) {
        put_field(&lb, "level", lower[lvl], true);
        if (component)
            put_field(&lb, "component", component, true);
        put_field(&lb, atomic_load(&g_json_msg), msg ? msg : "", true);
    } else {
        puts_(&lb, " ");
        puts_(&lb, upper[lvl]);
        if (component)
            put_field(&lb, "component", component, false);
        put_field(&lb, "msg", msg ? msg : "", false);
    }

    va_start(ap, msg);
    for (int i = 0; i < LOG_FIELDS_MAX; i++) {
        const char *key = va_arg(ap, const char *);
        const char *value;
        char red[LOG_REDACT_TMP];

        if (!key)
            break;
        /* A NULL value also ends the list: with an odd number of arguments it
         * is the terminator, and reading past it would be undefined. */
        value = va_arg(ap, const char *);
        if (value && key_is_secret(key))
            value = log_redact(value, red, sizeof(red));
        put_field(&lb, key, value ? value : "(null)", json);
        if (!value)
            break;
    }
    va_end(ap);

    if (lb.full)
        put_force(&lb, json ? ",\"truncated\":true" : " truncated=true");
    put_force(&lb, json ? "}\n" : "\n");
    write_all(fileno(stream), lb.b, lb.len);
}
