/* Logging: one line per event, timestamp + level + message + key=value fields,
 * or JSON lines (log_set_json). Thread-safe: a line is written with one write().
 *
 *   LOG_INFO("tunnel connected", "cluster", id, "epoch", epoch_str);
 *
 * Fields are pairs of const char * terminated by the macro. Values that hold a
 * token or secret must pass through log_redact() first; field names that look
 * secret ("token", "key", "secret", "password", "authorization") are masked by
 * the logger itself as a second line of defence. */
#ifndef AGENTBOX_LOG_H
#define AGENTBOX_LOG_H

#include <stdio.h>
#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "debug|info|warn|error"; returns 0 or AB_EINVAL. */
int log_parse_level(const char *s, enum log_level *out);
void log_set_json(int on);
/* Key names of a JSON line's time and message (default "ts" and "msg"):
 * envd writes E2B's "timestamp" and "message", what its log API and CLI
 * carry. Not copied (string literals). */
void log_set_json_keys(const char *time_key, const char *msg_key);
/* Where lines go; default stderr. Not owned. */
void log_set_stream(FILE *f);
/* Component name put on every line as component=NAME, e.g. "hub". Not copied. */
void log_set_component(const char *name);

/* Fields: NULL-terminated list of (const char *key, const char *value) pairs. */
void log_write(enum log_level level, const char *msg, ...);

#define LOG_DEBUG(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__, (const char *)0)
#define LOG_INFO(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__, (const char *)0)
#define LOG_WARN(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__, (const char *)0)
#define LOG_ERROR(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__, (const char *)0)

/* Masks a secret for logging: keeps a recognisable prefix ("agbx_", "abxc_")
 * and at most 4 following characters, replaces the rest with "…" (ASCII
 * "..."). Writes into buf (always terminated); returns buf. */
const char *log_redact(const char *secret, char *buf, size_t buflen);

#endif
