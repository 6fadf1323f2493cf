/* A sandbox log as text → entries (runtime.h, "Usage and logs"): what every
 * runtime's log reader shares, whatever the text came from (a file, the
 * Kubernetes log API). Pure functions, any thread. */
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

void rt_log_free(struct rt_log *l)
{
    if (!l)
        return;
    free(l->entries);
    free(l->buf);
    memset(l, 0, sizeof(*l));
}

size_t rt_log_leading_time(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return 0;
    int64_t frac = 0;
    if (*p == '.') {
        int digits = 0;
        p++;
        while (isdigit((unsigned char)*p)) {
            if (digits < 3)
                frac = frac * 10 + (*p - '0');
            digits++;
            p++;
        }
        while (digits < 3) {
            frac *= 10;
            digits++;
        }
    }
    if (*p == 'Z')
        p++;
    *ms = (int64_t)timegm(&tm) * 1000 + frac;
    return (size_t)(p - s);
}

enum rt_log_level rt_log_infer_level(const char *s)
{
    char tok[16];
    size_t n = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '[' || *s == '(' || *s == '<')
        s++;
    while (n < sizeof(tok) - 1 && isalpha((unsigned char)s[n])) {
        tok[n] = (char)toupper((unsigned char)s[n]);
        n++;
    }
    tok[n] = '\0';
    char after = s[n];
    if (!(after == '\0' || after == ' ' || after == '\t' || after == ']' || after == ')' ||
          after == '>' || after == ':'))
        return RT_LOG_INFO;
    if (!strcmp(tok, "TRACE") || !strcmp(tok, "DEBUG"))
        return RT_LOG_DEBUG;
    if (!strcmp(tok, "WARN") || !strcmp(tok, "WARNING"))
        return RT_LOG_WARN;
    if (!strcmp(tok, "ERROR") || !strcmp(tok, "ERR") || !strcmp(tok, "FATAL") ||
        !strcmp(tok, "CRITICAL"))
        return RT_LOG_ERROR;
    return RT_LOG_INFO;
}

/* A JSON line (envd's own log, reference §2.6: one object with "timestamp"
 * or "time" or "ts", "level" and "message"): its time and level. Keys are
 * found as `"key":"`: inside a JSON string every quote is escaped, so only
 * a real key matches. False for a line that is not a JSON object. */
static bool json_line_meta(const char *line, int64_t *ms, enum rt_log_level *lvl)
{
    static const char *const time_keys[] = {"\"timestamp\":\"", "\"time\":\"", "\"ts\":\""};
    const char *v = strstr(line, "\"level\":\"");

    if (line[0] != '{')
        return false;
    *lvl = RT_LOG_INFO;
    if (v) {
        char tok[16];
        size_t n = 0;
        v += strlen("\"level\":\"");
        while (n < sizeof(tok) - 1 && v[n] && v[n] != '"') {
            tok[n] = v[n];
            n++;
        }
        tok[n] = '\0';
        *lvl = rt_log_infer_level(tok);
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(time_keys); i++) {
        const char *t = strstr(line, time_keys[i]);
        if (t && rt_log_leading_time(t + strlen(time_keys[i]), ms) > 0)
            break;
    }
    return true;
}

int rt_log_from_text(char *text, size_t len, bool partial_first, int64_t default_ms,
                     const struct rt_log_query *q, struct rt_log *out)
{
    /* the last RT_LOG_LINES_MAX non-empty lines, in a ring */
    char **lines = malloc(RT_LOG_LINES_MAX * sizeof(*lines));
    size_t nl = 0, head = 0;
    int64_t limit = q->limit <= 0 || q->limit > RT_LOG_LINES_MAX ? RT_LOG_LINES_MAX : q->limit;
    char *p = text, *end = text + len;

    memset(out, 0, sizeof(*out));
    out->entries = malloc(RT_LOG_LINES_MAX * sizeof(*out->entries));
    if (!lines || !out->entries) {
        free(lines);
        free(out->entries);
        free(text);
        out->entries = NULL;
        return AB_ENOMEM;
    }
    out->buf = text;
    if (partial_first) {
        char *nlp = memchr(p, '\n', (size_t)(end - p));
        p = nlp ? nlp + 1 : end;
    }
    while (p < end && *p) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        if (e)
            *e = '\0';
        if (*p) {
            lines[(head + nl) % RT_LOG_LINES_MAX] = p;
            if (nl < RT_LOG_LINES_MAX)
                nl++;
            else
                head = (head + 1) % RT_LOG_LINES_MAX;
        }
        if (!e)
            break;
        p = e + 1;
    }
    for (size_t k = 0; k < nl && (int64_t)out->n < limit; k++) {
        size_t idx =
            q->backward ? (head + nl - 1 - k) % RT_LOG_LINES_MAX : (head + k) % RT_LOG_LINES_MAX;
        const char *line = lines[idx];
        int64_t ms = default_ms;
        enum rt_log_level lvl;
        if (!json_line_meta(line, &ms, &lvl))
            lvl = rt_log_infer_level(line + rt_log_leading_time(line, &ms));
        if (q->start_ms > 0 && ms < q->start_ms)
            continue;
        if (lvl < q->min_level)
            continue;
        if (q->search[0] && !strstr(line, q->search))
            continue;
        out->entries[out->n++] = (struct rt_log_entry){.ms = ms, .level = lvl, .line = line};
    }
    free(lines);
    return 0;
}
