/* Env events of the local runtime (runtime.h "Env events"): one JSON line per
 * event appended to <manifests>/.agentbox-events.ndjson, beside the API's
 * overlay (not in it: the overlay's signature counts every file there, and
 * an event must not look like a manifest change that forces a full reload).
 * The seed loader skips it (a dot name, not *.yaml).
 *
 * Bounded: once the file holds LRT_EVENTS_KEEP * 2 lines it is rewritten
 * with the last LRT_EVENTS_KEEP (temp file + rename, so a crash leaves the
 * old or the new file). Appends are small writes on the loop thread without
 * fsync: an event lost in a power cut is acceptable, a stalled loop is not. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"
#include "agentbox/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LRT_EVENTS_KEEP 2048
#define LRT_EVENTS_FILE ".agentbox-events.ndjson"
#define LRT_EVENT_LINE_MAX 1024

static int events_path(const struct lrt *rt, char *out, size_t len)
{
    return (size_t)snprintf(out, len, "%s/%s", rt->manifests, LRT_EVENTS_FILE) < len ? 0
                                                                                     : AB_ELIMIT;
}

static json_t *event_json(const struct rt_event *e)
{
    return json_pack("{s:I,s:s,s:s,s:s,s:s}", "ms", (json_int_t)e->ms, "ns", e->ns, "env", e->env,
                     "reason", e->reason, "message", e->message);
}

static bool event_parse(const char *line, struct rt_event *e)
{
    json_t *j = json_loads(line, 0, NULL);
    const char *ns = json_string_value(json_object_get(j, "ns"));
    const char *env = json_string_value(json_object_get(j, "env"));
    const char *reason = json_string_value(json_object_get(j, "reason"));
    const char *msg = json_string_value(json_object_get(j, "message"));
    bool ok = ns && env && reason && msg && json_is_integer(json_object_get(j, "ms"));

    if (ok) {
        memset(e, 0, sizeof(*e));
        e->ms = json_integer_value(json_object_get(j, "ms"));
        ab_strlcpy(e->ns, ns, sizeof(e->ns));
        ab_strlcpy(e->env, env, sizeof(e->env));
        ab_strlcpy(e->reason, reason, sizeof(e->reason));
        ab_strlcpy(e->message, msg, sizeof(e->message));
    }
    json_decref(j);
    return ok;
}

/* The last LRT_EVENTS_KEEP lines of path, in order, into lines (each
 * malloc'ed); *n their count, *total the lines read. */
static void read_tail(const char *path, char **lines, int *n, int *total)
{
    char buf[LRT_EVENT_LINE_MAX];
    FILE *f = fopen(path, "r");
    int k = 0;

    *n = 0;
    *total = 0;
    if (!f)
        return;
    while (fgets(buf, sizeof(buf), f)) {
        size_t l = strlen(buf);
        if (l == 0 || buf[l - 1] != '\n')
            continue; /* longer than any event we write, or a torn last line */
        free(lines[k]);
        lines[k] = strdup(buf);
        k = (k + 1) % LRT_EVENTS_KEEP;
        (*total)++;
    }
    fclose(f);
    *n = AB_MIN(*total, LRT_EVENTS_KEEP);
    /* rotate so lines[0] is the oldest kept */
    if (*total > LRT_EVENTS_KEEP) {
        char **tmp = calloc(LRT_EVENTS_KEEP, sizeof(*tmp));
        if (!tmp)
            return;
        for (int i = 0; i < LRT_EVENTS_KEEP; i++)
            tmp[i] = lines[(k + i) % LRT_EVENTS_KEEP];
        memcpy(lines, tmp, LRT_EVENTS_KEEP * sizeof(*tmp));
        free(tmp);
    }
}

/* Rewrites the file with its last LRT_EVENTS_KEEP lines; sets rt->nevents. */
static void compact(struct lrt *rt, const char *path)
{
    char **lines = calloc(LRT_EVENTS_KEEP, sizeof(*lines)), tmp[sizeof(rt->manifests) + 64];
    int n = 0, total = 0;
    FILE *f;

    if (!lines)
        return;
    read_tail(path, lines, &n, &total);
    rt->nevents = n;
    if (total > n && (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) < sizeof(tmp) &&
        (f = fopen(tmp, "w"))) {
        for (int i = 0; i < n; i++)
            fputs(lines[i], f);
        if (fclose(f) == 0 && rename(tmp, path) == 0)
            rt->nevents = n;
        else
            LOG_WARN("cannot rewrite the env events file", "file", path, "error", strerror(errno));
    }
    for (int i = 0; i < LRT_EVENTS_KEEP; i++)
        free(lines[i]);
    free(lines);
}

void lrt_event_record(struct rt *base, const struct rt_event *e)
{
    struct lrt *rt = (struct lrt *)base;
    char path[sizeof(rt->manifests) + 64];
    json_t *j = event_json(e);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    FILE *f;

    json_decref(j);
    if (!text || strlen(text) >= LRT_EVENT_LINE_MAX - 1 || events_path(rt, path, sizeof(path))) {
        free(text);
        return;
    }
    if (!(f = fopen(path, "a"))) {
        LOG_WARN("cannot append to the env events file", "file", path, "error", strerror(errno));
        free(text);
        return;
    }
    fprintf(f, "%s\n", text);
    free(text);
    if (fclose(f) != 0)
        LOG_WARN("cannot append to the env events file", "file", path, "error", strerror(errno));
    if (++rt->nevents >= LRT_EVENTS_KEEP * 2)
        compact(rt, path);
}

int lrt_events_load(struct rt *base, rt_event_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    char path[sizeof(rt->manifests) + 64];
    char **lines;
    int n = 0, total = 0;
    struct rt_event e;

    if (events_path(rt, path, sizeof(path)) != 0)
        return AB_ELIMIT;
    if (!(lines = calloc(LRT_EVENTS_KEEP, sizeof(*lines))))
        return AB_ENOMEM;
    read_tail(path, lines, &n, &total);
    rt->nevents = total;
    for (int i = 0; i < n; i++)
        if (lines[i] && event_parse(lines[i], &e))
            fn(arg, &e);
    for (int i = 0; i < LRT_EVENTS_KEEP; i++)
        free(lines[i]);
    free(lines);
    if (total >= LRT_EVENTS_KEEP * 2)
        compact(rt, path);
    return 0;
}
