-- Statements of the public test kit (package leaseholdtest) on SQLite: the
-- twins of testkit.sql, on SQLite's clock (milliseconds since the Unix
-- epoch, read inside the statement). They move database time for a test
-- instead of sleeping, and decide nothing in production. Loaded by name.

-- name: ExpireLease :execrows
-- Makes the lease on claim key ?1 past on the database clock, as if its
-- holder had stopped renewing it a second ago.
UPDATE leasehold_work_claims
SET lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - 1000
WHERE dedupe_key = ?1 AND state = 'claimed';

-- name: MakeDue :execrows
-- Makes available episode ?1 due now: the next poll takes it.
UPDATE leasehold_episodes
SET run_after = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = ?1 AND run_after IS NOT NULL;
