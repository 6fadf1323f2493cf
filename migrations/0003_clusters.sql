-- Tunnel sessions become one row per session (DESIGN §5): every session
-- a cluster opens gets its own epoch from cluster_session_epoch, so a
-- newer session is recognisable across hubs and a cluster's history of
-- connects stays visible. The latest row (highest epoch) of a cluster is its
-- current or last session; it is online while disconnected_at is NULL and
-- last_seen is recent (the hub writes last_seen every 10 s).

ALTER TABLE cluster_sessions DROP CONSTRAINT cluster_sessions_pkey;
ALTER TABLE cluster_sessions ADD PRIMARY KEY (epoch);
ALTER TABLE cluster_sessions
    ADD COLUMN agent_version text NOT NULL DEFAULT '' CHECK (length(agent_version) <= 63);
ALTER TABLE cluster_sessions
    ADD CONSTRAINT cluster_sessions_connected_check CHECK (connected = (disconnected_at IS NULL));
CREATE INDEX cluster_sessions_cluster_idx ON cluster_sessions (cluster_id, epoch DESC);
