/* The pure parts of start commands and readiness checks (startcmd.h). */
#include "agent/runtime/startcmd.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rt_start_spec_from(struct rt_start_spec *s, const struct mf_runtime *rts, int n)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < n && i < MF_RUNTIMES_MAX; i++) {
        if (rts[i].start_command[0] && !s->cmd[0]) {
            ab_strlcpy(s->cmd, rts[i].start_command, sizeof(s->cmd));
            ab_strlcpy(s->cmd_rt, rts[i].name, sizeof(s->cmd_rt));
        }
        /* envd's own probe is what the runtime already waits for */
        if (rts[i].probe.kind != MF_PROBE_NONE && strcmp(rts[i].name, "envd") != 0) {
            s->probes[s->nprobes].p = rts[i].probe;
            ab_strlcpy(s->probes[s->nprobes].rt, rts[i].name, sizeof(s->probes[0].rt));
            s->nprobes++;
        }
    }
}

bool rt_start_spec_needed(const struct rt_start_spec *s)
{
    return s->cmd[0] || s->nprobes > 0;
}

int rt_start_request(const char *cmd, uint8_t **out, size_t *len)
{
    json_t *req = json_pack("{s:{s:s, s:[s,s], s:{}, s:s}, s:b}", "process", "cmd", "/bin/bash",
                            "args", "-c", cmd, "envs", "cwd", "/home/user", "stdin", 0);
    char *js = req ? json_dumps(req, JSON_COMPACT) : NULL;
    size_t n = js ? strlen(js) : 0;
    uint8_t *env = js ? malloc(5 + n) : NULL;

    json_decref(req);
    *out = NULL;
    *len = 0;
    if (!env) {
        free(js);
        return AB_ENOMEM;
    }
    env[0] = 0;
    env[1] = (uint8_t)(n >> 24);
    env[2] = (uint8_t)(n >> 16);
    env[3] = (uint8_t)(n >> 8);
    env[4] = (uint8_t)n;
    memcpy(env + 5, js, n);
    free(js);
    *out = env;
    *len = 5 + n;
    return 0;
}

static void ring_put(struct rt_start_stream *st, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        st->ring[st->rpos] = (char)d[i];
        st->rpos = (st->rpos + 1) % RT_START_RING;
    }
    st->rlen = AB_MIN(st->rlen + n, (size_t)RT_START_RING);
}

static int on_event(struct rt_start_stream *st, json_t *ev)
{
    json_t *e = json_object_get(ev, "event"), *x;
    const char *k;
    json_t *v;

    if ((x = json_object_get(e, "start")) != NULL) {
        if (st->started)
            return 0;
        st->started = true;
        return RT_START_EV_STARTED;
    }
    if ((x = json_object_get(e, "data")) != NULL) {
        json_object_foreach(x, k, v)
        {
            const char *b64 = json_string_value(v);
            size_t blen = b64 ? strlen(b64) : 0, w = 0;
            uint8_t *raw;

            if (!blen || !(raw = malloc(blen / 4 * 3 + 3)))
                continue;
            if (crypto_base64_decode(b64, blen, raw, blen / 4 * 3 + 3, &w) == 0)
                ring_put(st, raw, w);
            free(raw);
        }
        return 0;
    }
    if ((x = json_object_get(e, "end")) != NULL && !st->exited) {
        st->exited = true;
        st->exit_code = (int)json_integer_value(json_object_get(x, "exitCode"));
        return RT_START_EV_EXITED;
    }
    return 0;
}

int rt_start_feed(struct rt_start_stream *st, const void *d, size_t len)
{
    size_t off = 0;
    int evs = 0;

    if (st->status != 200) { /* a unary-style error body: keep its text */
        size_t have = strlen(st->err), n = AB_MIN(len, sizeof(st->err) - 1 - have);
        memcpy(st->err + have, d, n);
        st->err[have + n] = '\0';
        return 0;
    }
    if (st->elen + len > st->ecap) {
        size_t cap = AB_MAX(st->ecap * 2, st->elen + len);
        uint8_t *nb;
        if (cap > RT_START_ENVELOPE_MAX + 5 || !(nb = realloc(st->ebuf, cap))) {
            st->elen = 0; /* drop what cannot be framed; the process lives on */
            return 0;
        }
        st->ebuf = nb;
        st->ecap = cap;
    }
    memcpy(st->ebuf + st->elen, d, len);
    st->elen += len;
    while (st->elen - off >= 5) {
        const uint8_t *h = st->ebuf + off;
        uint32_t plen = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
        json_t *ev;

        if (plen > RT_START_ENVELOPE_MAX) {
            off = st->elen;
            break;
        }
        if (st->elen - off < 5 + (size_t)plen)
            break;
        ev = json_loadb((const char *)h + 5, plen, 0, NULL);
        if (ev && (h[0] & 0x02)) { /* end of stream: {} or {"error":{...}} */
            const char *m =
                json_string_value(json_object_get(json_object_get(ev, "error"), "message"));
            if (m)
                snprintf(st->err, sizeof(st->err), "%s", m);
        } else if (ev) {
            evs |= on_event(st, ev);
        }
        json_decref(ev);
        off += 5 + (size_t)plen;
    }
    memmove(st->ebuf, st->ebuf + off, st->elen - off);
    st->elen -= off;
    return evs;
}

void rt_start_stream_clear(struct rt_start_stream *st)
{
    free(st->ebuf);
    st->ebuf = NULL;
    st->elen = st->ecap = 0;
}

void rt_start_tail(const struct rt_start_stream *st, char *out, size_t outlen)
{
    char tmp[RT_START_TAIL_MAX + 1];
    size_t n = AB_MIN(st->rlen, (size_t)RT_START_TAIL_MAX), start, i, k = 0;
    int lines = 0;

    start = (st->rpos + RT_START_RING - n) % RT_START_RING;
    for (i = 0; i < n; i++)
        tmp[i] = st->ring[(start + i) % RT_START_RING];
    while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r'))
        n--;
    /* keep the last RT_START_TAIL_LINES lines */
    for (i = n; i > 0; i--) {
        if (tmp[i - 1] == '\n' && ++lines >= RT_START_TAIL_LINES) {
            k = i;
            break;
        }
    }
    for (i = k; i < n; i++) {
        unsigned char c = (unsigned char)tmp[i];
        tmp[i] = c == '\n' ? '\n' : (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    tmp[n] = '\0';
    snprintf(out, outlen, "%s", tmp + k);
}

void rt_start_probe_name(const struct rt_start_spec *s, int i, const char *host, char *out,
                         size_t outlen)
{
    const struct mf_probe *pr = &s->probes[i].p;

    if (pr->kind == MF_PROBE_HTTP)
        snprintf(out, outlen, "readiness check httpGet http://%s:%d%.80s of runtime '%s'", host,
                 (int)pr->port, pr->path, s->probes[i].rt);
    else
        snprintf(out, outlen, "readiness check tcpSocket %s:%d of runtime '%s'", host,
                 (int)pr->port, s->probes[i].rt);
}

void rt_start_describe(const struct rt_start_spec *s, const struct rt_start_stream *st,
                       const char *what, char *out, size_t outlen)
{
    char tail[RT_START_TAIL_MAX + 1], state[96];
    int n;

    n = snprintf(out, outlen, "%s", what);
    if (!s->cmd[0] || n < 0 || (size_t)n >= outlen)
        return;
    if (st->exited)
        snprintf(state, sizeof(state), "exited with code %d", st->exit_code);
    else if (st->started)
        snprintf(state, sizeof(state), "is running");
    else
        snprintf(state, sizeof(state), "did not start");
    rt_start_tail(st, tail, sizeof(tail));
    snprintf(out + n, outlen - (size_t)n, "; the start command of runtime '%s' %s; %s%s", s->cmd_rt,
             state, tail[0] ? "its output ends:\n" : "it printed nothing", tail);
}
