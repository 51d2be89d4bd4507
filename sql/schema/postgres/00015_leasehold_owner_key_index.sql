-- leasehold schema, version 15: the live-lease index names the key too.
--
-- Every fenced write checks its grant by (dedupe_key, owner_node, fence,
-- state = 'claimed'), and the check implies the predicate of
-- leasehold_work_claims_claimed_owner_idx. Guessing from statistics that
-- lag (a table written since its last analyze, or an owner it believes
-- holds one lease), the planner chose that index over the primary key and
-- read every live lease of the owner on each fenced write: measured, 4,000
-- rows and 0.7 ms per check for a node holding 4,000 leases (leasehold_hold
-- 500 us a call against 270 with the key in the index), so a node's writes
-- grew slower with the work it held. With the key after the owner, either
-- index reaches the one row, and the index still serves what it served:
-- an owner's live leases in key order (RenewClaims, ReleaseClaims, drain,
-- the dashboard's counts). Renewals stay HOT updates: lease_until is still
-- in no index.

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
