/* See agentbox/trace.h. */
#include "agentbox/trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentbox/log.h"

#define TRACE_ID_MAX 64

bool ab_trace_enabled(void)
{
    /* 0 unknown, 1 off, 2 on; a race reads the environment twice, harmlessly */
    static atomic_int state;
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == 0) {
        const char *v = getenv("AGENTBOX_TRACE");
        s = v && strcmp(v, "1") == 0 ? 2 : 1;
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s == 2;
}

static bool id_ok(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        if (n >= TRACE_ID_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                   (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return n > 0;
}

void ab_trace(const char *id, const char *stage)
{
    if (!id || !ab_trace_enabled() || !id_ok(id))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char us[32];
    snprintf(us, sizeof(us), "%lld", (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    LOG_INFO("trace", "id", id, "stage", stage, "mono_us", us);
}
