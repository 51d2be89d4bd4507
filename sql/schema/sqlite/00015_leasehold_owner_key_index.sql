-- leasehold schema, version 15 (SQLite): the live-lease index names the key
-- too. The translation of sql/schema/postgres/00015: a fenced write's
-- check (dedupe_key, owner_node, fence, state = 'claimed') reaches its one
-- row through either index, never through every live lease of the owner,
-- whatever the query planner guesses (SQLite keeps no statistics unless
-- ANALYZE runs). Renewals write no index entry: lease_until is in none.

-- +goose Up
DROP INDEX leasehold_work_claims_claimed_owner_idx;
CREATE INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node, dedupe_key)
    WHERE state = 'claimed';

-- +goose Down
DROP INDEX leasehold_work_claims_claimed_owner_idx;
CREATE INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node)
    WHERE state = 'claimed';
