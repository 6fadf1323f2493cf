-- Console login and the approval gate (issue 16; reference §4.5).

-- Human users of the hub (`agentbox-hub user add`). password_hash is
-- "$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt b64>$<hash b64>" (hub/users.c): the
-- parameters travel with the hash so they can be raised without a migration.
CREATE TABLE console_users (
    username      text PRIMARY KEY CHECK (username ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    team          text NOT NULL CHECK (length(team) BETWEEN 1 AND 253),
    role          text NOT NULL DEFAULT 'tenant' CHECK (role IN ('tenant', 'admin')),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    password_at   timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz
);

-- Console sessions: only the SHA-256 of the token (and of its CSRF token) is
-- stored, so a database dump cannot log anyone in. Logout, `user passwd`
-- and `user disable` set revoked_at.
CREATE TABLE console_sessions (
    id          text PRIMARY KEY,
    token_hash  text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    csrf_hash   text NOT NULL CHECK (csrf_hash ~ '^[0-9a-f]{64}$'),
    username    text NOT NULL REFERENCES console_users (username),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX console_sessions_user_idx ON console_sessions (username) WHERE revoked_at IS NULL;

-- Approval requests made by the gate for agent-mode keys. Owner = (team,
-- user_name) of the key; fingerprint = SHA-256 over method, cluster, path
-- and body (hub/approvals.c).
CREATE TABLE approval_requests (
    id          text PRIMARY KEY CHECK (id ~ '^apr_[0-9a-f]{16}$'),
    fingerprint text NOT NULL,
    team        text NOT NULL,
    user_name   text NOT NULL,
    key_id      text NOT NULL DEFAULT '',
    session_id  text NOT NULL DEFAULT '',
    cluster     text NOT NULL DEFAULT '',
    method      text NOT NULL,
    path        text NOT NULL,
    operation   text NOT NULL,
    summary     text NOT NULL,
    once_only   boolean NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied')),
    scope       text CHECK (scope IN ('once', 'session', 'key')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    decided_at  timestamptz,
    decided_by  text,
    consumed_at timestamptz
);
CREATE INDEX approval_requests_fp_idx ON approval_requests (fingerprint, team, user_name);

-- Standing grants: scope 'session' (an X-AgentBox-Session-Id, 2 h) or 'key'
-- (the key's own recorded approval of an operation, until revoked).
CREATE TABLE approval_grants (
    id          text PRIMARY KEY,
    scope       text NOT NULL CHECK (scope IN ('session', 'key')),
    team        text NOT NULL,
    user_name   text NOT NULL,
    key_id      text NOT NULL DEFAULT '',
    session_id  text NOT NULL DEFAULT '',
    operation   text NOT NULL,
    approval_id text NOT NULL,
    granted_by  text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);
CREATE INDEX approval_grants_owner_idx ON approval_grants (team, user_name, operation)
    WHERE revoked_at IS NULL;
