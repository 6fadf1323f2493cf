/* An opt-in trace of one request across processes (issue 17: where a
 * forward's time goes). A process started with AGENTBOX_TRACE=1 logs one
 * line per stage a request passes when the request carries
 * X-AgentBox-Trace: <id> (1..64 of [A-Za-z0-9._-]), with the stage and
 * CLOCK_MONOTONIC in µs: one clock for every process of a machine, so the
 * stages of a forward line up across agent, hub and agent. The header
 * travels with the request (the agent's forward copies it, the hub's relay
 * passes it on). Off (the default), a stage costs one test of a cached flag;
 * a header without the variable logs nothing, so no caller can fill a log. */
#ifndef AGENTBOX_TRACE_H
#define AGENTBOX_TRACE_H

#include <stdbool.h>

#define AB_TRACE_HEADER "X-AgentBox-Trace"

/* AGENTBOX_TRACE=1 in the environment (read once). */
bool ab_trace_enabled(void);
/* Logs stage for trace id (NULL or malformed: nothing). Loop thread or any. */
void ab_trace(const char *id, const char *stage);

#endif
