-- The template catalogue (issue 16; reference agent-sandbox-behaviour.md
-- §6.1, crds-and-charts.md §2): SandboxTemplate objects stored once here and
-- synced to every cluster (hub/templates.c). crd is the whole object as the
-- admin wrote it, normalised by the hub (apiVersion, kind, metadata.name,
-- labels, annotations, spec); the name is the object's, a DNS subdomain.
CREATE TABLE sandbox_templates (
    name        text PRIMARY KEY
                CHECK (length(name) BETWEEN 1 AND 253 AND name ~ '^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$'),
    crd         jsonb NOT NULL CHECK (jsonb_typeof(crd) = 'object'),
    created_by  text NOT NULL DEFAULT '',
    updated_by  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
