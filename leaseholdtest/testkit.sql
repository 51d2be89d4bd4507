-- Statements of the public test kit (package leaseholdtest), Postgres only:
-- they move database time for a test instead of sleeping, and decide
-- nothing in production. Loaded by name.

-- name: ExpireLease :execrows
-- Makes the lease on claim key $1 past on the database clock, as if its
-- holder had stopped renewing it a second ago: recovery and takeovers then
-- treat it as expired at once.
UPDATE leasehold_work_claims
SET lease_until = now() - interval '1 second'
WHERE dedupe_key = $1 AND state = 'claimed';

-- name: MakeDue :execrows
-- Makes available episode $1 due now (a delayed run, or a retry waiting
-- out its backoff): the next poll takes it.
UPDATE leasehold_episodes
SET run_after = now()
WHERE id = $1 AND run_after IS NOT NULL;
