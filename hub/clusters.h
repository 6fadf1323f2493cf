/* hub/clusters.h — the registered clusters, kept in memory for the tunnel
 * handshake (which must decide synchronously) and refreshed from PostgreSQL.
 *
 * Everything here runs on the loop thread. Database work goes through the
 * hub's db pool; its results are applied on the loop thread. A cluster added
 * with `agentbox-hub cluster add` is known here within one refresh (2 s). */
#ifndef AGENTBOX_HUB_CLUSTERS_H
#define AGENTBOX_HUB_CLUSTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/common.h"

struct loop;
struct db_pool;
struct clusters;

#define CLUSTERS_REFRESH_MS 2000      /* reload of the clusters table */
#define CLUSTERS_TOUCH_FLUSH_MS 10000 /* batched last_seen writes */
#define CLUSTERS_ONLINE_WINDOW_S 30   /* a session row is online while last_seen is this recent */
#define CLUSTERS_MAX 10000            /* clusters held in memory; more is a refresh error */
#define CLUSTERS_NS_BUF 1024          /* a cluster's namespace list "a,b" (migration 0004) */
#define CLUSTERS_NS_COUNT_MAX 64      /* names in it */

struct cluster_info {
    char id[AB_CLUSTER_ID_BUF];
    char name[128];
    char region[64];
    bool disabled;
    bool online;
    int64_t epoch;        /* live (or latest) session epoch; 0 when none */
    int64_t last_seen_ms; /* wall clock, ms since 1970; 0 when never seen */
    char agent_version[64];
    char namespaces[CLUSTERS_NS_BUF]; /* assigned at registration: "a,b"; "" = every one */
};

/* What the registry may use; neither owned. */
struct clusters_deps {
    struct loop *loop;
    struct db_pool *db;
};

/* Creates the registry and starts the refresh timer (every 2 s, the first
 * at once) and the last_seen flush timer (every 10 s). Free with
 * clusters_free before loop_free. */
int clusters_new(const struct clusters_deps *d, struct clusters **out, char *err, size_t errlen);
/* Cancels the timers. Database jobs still in flight keep the memory until
 * their done() ran (db_pool_free runs them), so call it before or after
 * db_pool_free. NULL is fine. */
void clusters_free(struct clusters *c);

/* Synchronous, for the WebSocket upgrade: 0 ok; AB_ENOENT unknown cluster or
 * wrong token (→ 401); AB_EDENIED disabled (→ 403). why gets a message for
 * the JSON reason (never the token). Compares SHA-256(token) in constant
 * time. The token is checked before the disabled flag, so only the holder of
 * the right token learns that a cluster is disabled. Before the first
 * successful refresh every id is unknown (why says the registry is not loaded). */
int clusters_check_token(struct clusters *c, const char *cluster_id, const char *token, char *why,
                         size_t whylen);
/* The trust boundary between a cluster and the tenants (DESIGN §11): whether
 * a cluster whose assigned list is `list` ("a,b"; "" or NULL: every
 * namespace) may serve namespace ns. Pure. */
bool clusters_list_has_ns(const char *list, const char *ns);
/* The same for a registered cluster by id; false for an unknown one (so a
 * session that outlived its row serves nobody). */
bool clusters_serves_ns(struct clusters *c, const char *cluster_id, const char *ns);
/* Checks and normalises a --namespaces value "a, b,a" → "a,b" into out:
 * names are DNS labels of at most 63 characters, at most
 * CLUSTERS_NS_COUNT_MAX of them; "" or "*" means every namespace (out "").
 * AB_EINVAL with err naming the bad name. */
int clusters_parse_ns_list(const char *in, char *out, size_t outlen, char *err, size_t errlen);

/* Starts a refresh now (or right after the one in flight). */
void clusters_refresh_now(struct clusters *c);
/* True once a refresh succeeded. */
bool clusters_is_loaded(struct clusters *c);
/* This hub's instance id, written to cluster_sessions.hub_instance
 * ("<hostname>-<8 hex>", new per process). */
const char *clusters_hub_instance(struct clusters *c);

/* A session came up: allocates the next epoch in cluster_sessions (one row
 * per session: cluster, hub instance id, epoch, connected_at, last_seen,
 * agent_version) asynchronously through the db pool; done(arg, 0, epoch) or
 * done(arg, err, 0) on the loop thread. The database clock is used for times.
 * Errors: AB_ENOENT the cluster is not in the database, AB_EDENIED it is
 * disabled, AB_EIO/AB_EBUSY/AB_ECLOSED from the pool. Returns 0 (done will
 * run exactly once) or an error without calling done. agent_version is cut
 * to 63 bytes. Older sessions of the cluster still marked connected are
 * closed in the same transaction. */
int clusters_session_begin(struct clusters *c, const char *cluster_id, const char *agent_version,
                           void (*done)(void *arg, int status, int64_t epoch), void *arg);
/* Marks the session live/dead in memory (online flag for the API) and
 * records disconnection in the DB (async, best effort). Ending an epoch that
 * is not the live one only records it in the DB (a newer session stays). */
void clusters_session_online(struct clusters *c, const char *cluster_id, int64_t epoch);
void clusters_session_end(struct clusters *c, const char *cluster_id, int64_t epoch);

/* Called (on the loop thread) when a refresh finds a cluster newly disabled,
 * its token rotated or the cluster deleted: the tunnel server closes its live
 * session. reason is "cluster disabled", "token rotated" or "cluster removed".
 * The hook may call clusters_* functions. */
void clusters_set_revoke_hook(struct clusters *c,
                              void (*fn)(void *arg, const char *cluster_id, const char *reason),
                              void *arg);

/* last_seen: marks a session as seen now (in memory); a 10 s timer writes all
 * marked sessions' last_seen = now() in one UPDATE. */
void clusters_touch(struct clusters *c, const char *cluster_id, int64_t epoch);

/* Copies one cluster's state. 0, or AB_ENOENT when unknown in memory. */
int clusters_get(struct clusters *c, const char *cluster_id, struct cluster_info *out);

/* The registry in memory, for the console (dashboard-api/clusters_api.c):
 * clusters_count entries sorted by id; clusters_at copies entry i (AB_ENOENT
 * past the end). clusters_last_error: why the last refresh failed ("" when it
 * did not). */
size_t clusters_count(struct clusters *c);
int clusters_at(struct clusters *c, size_t i, struct cluster_info *out);
const char *clusters_last_error(struct clusters *c);

/* `agentbox-hub cluster ...` (cluster_cli.c); argv[0] is the first argument
 * after "cluster". Returns the exit status: 0 done, 1 refused or failed,
 * 2 bad usage. */
int hub_cluster_main(int argc, char **argv);

#endif
