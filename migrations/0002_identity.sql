-- Identity and secrets (DESIGN §9): team namespace overrides and the key
-- generations of the vault's encryption keys.

-- Per-team namespace override, set by an operator with
-- `agentbox-hub team set-namespace TEAM NS`. Without a row a key's namespace
-- is t-<team>-<user> (hub/iam.h). Applies to existing keys at once: the
-- effective namespace is resolved when a key is validated.
CREATE TABLE team_namespaces (
    team        text PRIMARY KEY CHECK (length(team) BETWEEN 1 AND 253),
    namespace   text NOT NULL CHECK (namespace ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text NOT NULL DEFAULT ''
);

-- Key generations of the hub's encryption keys. Every key is derived with
-- HKDF from the hub secret and its generation; the newest row is the one new
-- ciphertext uses. `agentbox-hub vault rotate-key` adds a row and re-encrypts
-- every vault value and stored API key token under it.
CREATE TABLE hub_key_generations (
    generation  integer PRIMARY KEY CHECK (generation >= 1),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO hub_key_generations (generation) VALUES (1);

-- Vault names follow reference §5.5 (at most 128 characters).
ALTER TABLE vault_secrets ADD CONSTRAINT vault_secrets_name_len CHECK (length(name) <= 128);

-- Revocation and expiry are scanned by time (hub/auth.c pushes them to agents).
CREATE INDEX api_keys_revoked_idx ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;
CREATE INDEX api_keys_expires_idx ON api_keys (expires_at) WHERE expires_at IS NOT NULL;
