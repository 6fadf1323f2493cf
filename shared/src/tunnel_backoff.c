/* Reconnect backoff for the agent's tunnel: exponential with full jitter
 * (AWS's "full jitter" variant), so that a hub restart does not bring every
 * agent back in the same wave (remotedialer's fixed 5 s sleep did). */
#include "agentbox/tunnel.h"

#define BACKOFF_BASE_DEFAULT 500
#define BACKOFF_CAP_DEFAULT 30000
#define BACKOFF_RESET_DEFAULT 60000
#define BACKOFF_ATTEMPT_MAX 31 /* base << 31 is past any 32-bit cap already */

void tun_backoff_init(struct tun_backoff *b, uint32_t base_ms, uint32_t cap_ms,
                      uint32_t reset_after_ms)
{
    b->base_ms = base_ms ? base_ms : BACKOFF_BASE_DEFAULT;
    b->cap_ms = cap_ms ? cap_ms : BACKOFF_CAP_DEFAULT;
    if (b->base_ms > b->cap_ms)
        b->base_ms = b->cap_ms;
    b->reset_after_ms = reset_after_ms ? reset_after_ms : BACKOFF_RESET_DEFAULT;
    b->attempt = 0;
}

uint32_t tun_backoff_ceiling(const struct tun_backoff *b)
{
    uint64_t c = (uint64_t)b->base_ms
                 << (b->attempt > BACKOFF_ATTEMPT_MAX ? BACKOFF_ATTEMPT_MAX : b->attempt);

    return c > b->cap_ms ? b->cap_ms : (uint32_t)c;
}

uint32_t tun_backoff_next(struct tun_backoff *b, int64_t connected_ms, uint32_t rnd)
{
    uint32_t ceil;

    if (connected_ms >= (int64_t)b->reset_after_ms)
        b->attempt = 0;
    ceil = tun_backoff_ceiling(b);
    if (b->attempt < BACKOFF_ATTEMPT_MAX)
        b->attempt++;
    /* Uniform in [0, ceil] without modulo bias worth speaking of. */
    return (uint32_t)(((uint64_t)rnd * ((uint64_t)ceil + 1)) >> 32);
}
