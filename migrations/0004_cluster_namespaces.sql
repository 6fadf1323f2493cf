-- Namespaces a cluster may serve (issue 13, DESIGN §11): its capacity
-- REPORT records, lifecycle EVENTs and sandbox rows are accepted only for
-- these, and routing never places a tenant of another namespace on it.
-- NULL means every namespace (the default of `agentbox-hub cluster add`);
-- an empty array is not allowed (it would be a cluster that serves nobody:
-- disable it instead).

ALTER TABLE clusters ADD COLUMN namespaces text[]
    CHECK (namespaces IS NULL OR (
        cardinality(namespaces) BETWEEN 1 AND 64
        AND length(array_to_string(namespaces, ',')) <= 1023
        AND array_to_string(namespaces, ',') ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(,[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$'));
