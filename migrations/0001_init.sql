-- agentbox hub schema, version 1 (DESIGN §9).
--
-- Applied by `agentbox-hub migrate` in one transaction together with its
-- schema_migrations row. Never edit this file once it is applied anywhere:
-- add 0002_<name>.sql instead (migrate refuses a changed applied file).
--
-- Conventions: ids chosen by the hub are text; hashes are lowercase hex
-- SHA-256; secrets are AES-256-GCM ciphertext (with the tag appended) plus
-- nonce and key id, never plaintext; times are timestamptz written with the
-- database clock; "user" is a reserved word, so the column is user_name.

-- Member clusters. The join token is shown once; only its hash is kept.
CREATE TABLE clusters (
    id          text PRIMARY KEY
                CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$'),
    name        text NOT NULL DEFAULT '' CHECK (length(name) <= 253),
    region      text NOT NULL DEFAULT '' CHECK (length(region) <= 253),
    token_hash  text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    endpoints   jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    disabled    boolean NOT NULL DEFAULT false,
    disabled_at timestamptz
);

-- Session epochs come from one sequence so that a newer tunnel session of a
-- cluster always has a higher epoch than the one it replaces, across hubs.
CREATE SEQUENCE cluster_session_epoch AS bigint;

-- The live (or last) tunnel session of each cluster. One row per cluster:
-- a newer session overwrites it with a higher epoch.
CREATE TABLE cluster_sessions (
    cluster_id      text PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    hub_instance    text NOT NULL,
    epoch           bigint NOT NULL DEFAULT nextval('cluster_session_epoch'),
    connected       boolean NOT NULL DEFAULT true,
    connected_at    timestamptz NOT NULL DEFAULT now(),
    disconnected_at timestamptz,
    last_seen       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cluster_sessions_hub_idx ON cluster_sessions (hub_instance) WHERE connected;

-- Snapshot of the latest fresh capacity record per (cluster, namespace, env,
-- member pool), for the console. Routing reads memory, not this table.
CREATE TABLE federation_capacity (
    cluster_id       text NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    namespace        text NOT NULL,
    env              text NOT NULL,
    pool             text NOT NULL,
    scaling_group    text NOT NULL DEFAULT '',
    idle             integer NOT NULL DEFAULT 0 CHECK (idle >= 0),
    running          integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    pending          integer NOT NULL DEFAULT 0 CHECK (pending >= 0),
    desired          integer NOT NULL DEFAULT 0 CHECK (desired >= 0),
    autoscaling      boolean NOT NULL DEFAULT false,
    headroom         integer NOT NULL DEFAULT 0 CHECK (headroom >= -1), -- -1: unbounded
    saturated_for_ms bigint NOT NULL DEFAULT 0 CHECK (saturated_for_ms >= 0),
    sampled_at       timestamptz NOT NULL, -- received - age
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, namespace, env, pool)
);
CREATE INDEX federation_capacity_env_idx ON federation_capacity (namespace, env);

-- API keys: agbx_ + 64 hex. The SHA-256 is the lookup key; the raw token is
-- kept only encrypted (for retrieval by its owner).
CREATE TABLE api_keys (
    id               text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 253),
    hash             text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
    prefix           text NOT NULL CHECK (length(prefix) <= 32), -- display, e.g. agbx_1a2b
    token_ciphertext bytea,
    token_nonce      bytea CHECK (token_nonce IS NULL OR octet_length(token_nonce) = 12),
    token_key_id     text,
    name             text NOT NULL DEFAULT '',
    description      text NOT NULL DEFAULT '',
    team             text NOT NULL DEFAULT '',
    user_name        text NOT NULL DEFAULT '',
    namespace        text NOT NULL,
    role             text NOT NULL DEFAULT 'tenant' CHECK (role IN ('tenant', 'admin')),
    mode             text NOT NULL DEFAULT 'unrestricted'
                     CHECK (mode IN ('unrestricted', 'agent')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    revoked_at       timestamptz,
    last_used_at     timestamptz,
    CHECK ((token_ciphertext IS NULL) = (token_nonce IS NULL)),
    CHECK (expires_at IS NULL OR expires_at > created_at)
);
CREATE INDEX api_keys_owner_idx ON api_keys (namespace, user_name) WHERE revoked_at IS NULL;
CREATE INDEX api_keys_team_idx ON api_keys (team, user_name) WHERE revoked_at IS NULL;

-- Vault: write-only values scoped to (namespace, user_name); user_name ''
-- is the namespace-wide scope. The AAD binds scope, name and version.
CREATE TABLE vault_secrets (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace   text NOT NULL,
    user_name   text NOT NULL DEFAULT '',
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 253),
    version     integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    ciphertext  bytea NOT NULL,
    nonce       bytea NOT NULL CHECK (octet_length(nonce) = 12),
    key_id      text NOT NULL,
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace, user_name, name)
);

-- Sandboxes the hub has seen. No foreign key to clusters: the history stays
-- when a cluster is removed. Ids are <cluster>-<20 chars [a-z0-9]>.
CREATE TABLE sandboxes (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?-[a-z0-9]{20}$'),
    cluster_id  text NOT NULL,
    namespace   text NOT NULL,
    env         text NOT NULL DEFAULT '',
    pool        text NOT NULL DEFAULT '',
    team        text NOT NULL DEFAULT '',
    user_name   text NOT NULL DEFAULT '',
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'claimed', 'running', 'paused', 'ended')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    claimed_at  timestamptz,
    started_at  timestamptz,
    ended_at    timestamptz,
    end_reason  text,
    CHECK ((state = 'ended') = (ended_at IS NOT NULL))
);
CREATE INDEX sandboxes_cluster_idx ON sandboxes (cluster_id) WHERE state <> 'ended';
CREATE INDEX sandboxes_owner_idx ON sandboxes (namespace, user_name, created_at DESC);
CREATE INDEX sandboxes_env_idx ON sandboxes (namespace, env, created_at DESC);

-- Events shown per env and sandbox in the console (newest first).
CREATE TABLE events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    cluster_id  text,
    namespace   text NOT NULL DEFAULT '',
    env         text NOT NULL DEFAULT '',
    sandbox_id  text,
    type        text NOT NULL DEFAULT 'Normal' CHECK (type IN ('Normal', 'Warning')),
    reason      text NOT NULL,
    message     text NOT NULL DEFAULT '',
    details     jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX events_env_idx ON events (namespace, env, at DESC);
CREATE INDEX events_sandbox_idx ON events (sandbox_id, at DESC) WHERE sandbox_id IS NOT NULL;
CREATE INDEX events_at_idx ON events (at);

-- Approval requests of agent-mode keys (reference §4.5). A decided request
-- with scope 'session' or 'key' is also the grant; grant_expires_at bounds it.
CREATE TABLE approvals (
    id               text PRIMARY KEY,
    key_id           text REFERENCES api_keys (id) ON DELETE CASCADE,
    owner            text NOT NULL,             -- namespace/user of the requester
    session_id       text NOT NULL DEFAULT '',  -- X-AgentBox-Session-Id
    cluster_id       text,
    operation        text NOT NULL,             -- e.g. sandbox.delete
    summary          text NOT NULL,
    once_only        boolean NOT NULL DEFAULT false,
    fingerprint      text NOT NULL,
    request          jsonb NOT NULL DEFAULT '{}'::jsonb, -- method, route, params
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'consumed',
                                       'revoked')),
    scope            text CHECK (scope IN ('once', 'session', 'key')),
    decided_by       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    decided_at       timestamptz,
    consumed_at      timestamptz,
    grant_expires_at timestamptz,
    CHECK (status = 'pending' OR status = 'expired' OR decided_at IS NOT NULL)
);
CREATE INDEX approvals_pending_idx ON approvals (owner, fingerprint) WHERE status = 'pending';
CREATE INDEX approvals_grants_idx ON approvals (owner, operation)
    WHERE status = 'approved' AND scope IN ('session', 'key');
CREATE INDEX approvals_key_idx ON approvals (key_id) WHERE key_id IS NOT NULL;

-- Who did what to the platform's state. Never holds a token or secret value.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,                  -- key:<id>, console:<user>, cli, cluster:<id>
    action      text NOT NULL,                  -- e.g. cluster.add, apikey.revoke, vault.put
    target      text NOT NULL DEFAULT '',
    namespace   text NOT NULL DEFAULT '',
    cluster_id  text,
    outcome     text NOT NULL DEFAULT 'ok' CHECK (outcome IN ('ok', 'denied', 'error')),
    request_id  text,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, at DESC);
CREATE INDEX audit_log_target_idx ON audit_log (action, target);
