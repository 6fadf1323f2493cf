/* The live half of the E2B logs routes (logs.c) with narrow deps, so it runs
 * without the rest of the E2B API (tests drive it against a fake runtime).
 * Loop thread only. */
#ifndef AGENTBOX_AGENT_E2B_LOGS_H
#define AGENTBOX_AGENT_E2B_LOGS_H

#include <stdbool.h>

struct http_exchange;
struct loop;
struct rt;
struct rt_log_query;

/* The filters of a logs request: v1 start, limit; v2 cursor, limit,
 * direction, level, search. 0, or AB_EINVAL after answering 400 (a level
 * that is not debug, info, warn or error). */
int e2b_log_query(struct http_exchange *ex, bool v2, struct rt_log_query *q);

/* Answers ex with the log of sandbox id, live on rt (the caller looked it up
 * and checked ownership): the runtime's probe here, its read on a loop
 * worker, the answer back on the loop thread. v1 → {"logs": [{timestamp,
 * line}], "logEntries": [entries]}, v2 → {"logs": [entries]}. A runtime that
 * cannot read the log answers an empty list. */
void e2b_logs_live(struct loop *loop, struct rt *rt, struct http_exchange *ex, const char *id,
                   const struct rt_log_query *q, bool v2);

#endif
