/* The agent's capacity reporter (DESIGN §6): one record per (namespace, env,
 * member pool) of the runtime, sent to the hub as a REPORT frame over the
 * tunnel. The full set goes every 5 s, at once when a session comes up, and
 * ~100 ms after an env's idle count changes (the runtime's pool status is
 * polled every 200 ms and diffed). Payload: see hub/federation.h. Loop
 * thread only. */
#ifndef AGENTBOX_AGENT_REPORTER_H
#define AGENTBOX_AGENT_REPORTER_H

#include <jansson.h>
#include <stdint.h>

struct hub_link;
struct loop;
struct rt;
struct fed_reporter;

/* What the reporter reads at each tick; borrowed, must outlive it. */
struct fed_reporter_deps {
    struct loop *loop;
    struct rt *rt; /* NULL: nothing to report */
    struct hub_link *hub;
};

#define FED_REPORT_INTERVAL_MS 5000
#define FED_REPORT_POLL_MS 200
#define FED_REPORT_DEBOUNCE_MS 100
#define FED_REPORT_RECORDS_LIMIT 10000 /* the hub refuses more */

/* Starts the timers; asks the hub link for a session at each tick, so it may
 * start before the tunnel exists. */
int fed_reporter_start(const struct fed_reporter_deps *deps, struct fed_reporter **out, char *err,
                       size_t errlen);
/* Cancels the timers and frees. NULL is fine. */
void fed_reporter_stop(struct fed_reporter *r);

/* The REPORT for rt's pools that belong to an env: {"full":true,"seq":seq,
 * "records":[...]}. New reference; *sig gets a digest of every member's
 * identity and idle count (what the diff compares). */
json_t *fed_reporter_build(struct rt *rt, uint64_t seq, uint64_t *sig);

#endif
