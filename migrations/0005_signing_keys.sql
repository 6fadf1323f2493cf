-- Generations of the hub's assertion signing key (issue 13, DESIGN §11).
-- The key pair of a generation is derived from the hub secret
-- (agentbox/assertion.h asrt_signer_from_secret_gen): no private key is
-- stored, only which generations are published. 'current' signs and is
-- published, 'previous' is published so assertions it signed verify until
-- they expire, 'retired' is refused everywhere. No row at all means
-- generation 0 is current (the key every hub had before rotation existed).
-- `agentbox-hub signing-key rotate` writes this table; every hub reads it on
-- its scan tick and tells its agents with an EVENT.
CREATE TABLE signing_keys (
    generation integer PRIMARY KEY CHECK (generation BETWEEN 0 AND 1000000),
    kid text NOT NULL CHECK (kid ~ '^[0-9a-f]{16}$'),
    state text NOT NULL CHECK (state IN ('current', 'previous', 'retired')),
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);

CREATE UNIQUE INDEX signing_keys_one_current ON signing_keys ((true)) WHERE state = 'current';
CREATE UNIQUE INDEX signing_keys_one_previous ON signing_keys ((true)) WHERE state = 'previous';
