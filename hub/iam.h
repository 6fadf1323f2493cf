/* IAM: which Kubernetes-style namespace a team and user act in
 * (reference agent-sandbox-behaviour.md §5.4).
 *
 * The namespace of (team, user) is a per-team override when an operator set
 * one (`agentbox-hub team set-namespace TEAM NS`, table team_namespaces),
 * else t-<team>-<user> normalised by iam_namespace_for. Pure functions here
 * run on any thread; the *_conn functions block on PostgreSQL and belong on a
 * database worker or in a CLI. */
#ifndef AGENTBOX_HUB_IAM_H
#define AGENTBOX_HUB_IAM_H

#include <stddef.h>

#include <libpq-fe.h>

#define IAM_NAMESPACE_MAX 63 /* a DNS label */
#define IAM_TEAM_MAX 253
#define IAM_USER_MAX 253

/* t-<team>-<user>: each part lower-cased, every character outside [a-z0-9-]
 * replaced by '-', leading and trailing '-' trimmed, an empty part becomes
 * "unknown"; an empty team (after trimming whitespace) gives "default".
 * A result longer than 63 characters keeps its first 56 characters (trailing
 * '-' trimmed) and appends '-' and 6 hex of SHA-256("team/user"), so two long
 * names that share a prefix stay apart. out has IAM_NAMESPACE_MAX + 1 bytes. */
void iam_namespace_for(const char *team, const char *user, char out[IAM_NAMESPACE_MAX + 1]);

/* True for a DNS label: [a-z0-9]([a-z0-9-]*[a-z0-9])?, at most 63 characters. */
int iam_namespace_is_valid(const char *ns);

/* Checks a team or user name given by an operator or a request: 1..253
 * bytes, printable ASCII without '/' (which would make "team/user" pairs
 * ambiguous). what names the field in the message. */
int iam_check_name(const char *what, const char *s, char *err, size_t errlen);

/* Sets (ns non-NULL) or clears (ns NULL) the namespace override of team.
 * AB_EINVAL names a bad namespace; clearing an absent override is AB_ENOENT. */
int iam_team_namespace_set_conn(PGconn *c, const char *team, const char *ns, const char *actor,
                                char *err, size_t errlen);

/* `agentbox-hub team set-namespace|clear-namespace|list` (key_cli.c). Exit status. */
int iam_team_cli_main(int argc, char **argv);

#endif
