package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceKeyVersion(t *testing.T) {
	t.Parallel()
	conformance.RunKeyVersion(t, true, func(t *testing.T) conformance.KeyVersionBackend {
		pool := pgtest.Schema(t)
		return keyVersionBackend(pool)
	})
}

func keyVersionBackend(pool *pgxpool.Pool) conformance.KeyVersionBackend {
	return conformance.KeyVersionBackend{
		Store: postgres.New(pool),
		StartAt: func(t testing.TB, v int) {
			pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = $1, switched_at = NULL`, v)
		},
		InsertAsOldNode: func(t testing.TB, key string) error { return insertAsOldNode(t, pool, key) },
		BackdateSwitch: func(t testing.TB, d time.Duration) {
			pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET switched_at = switched_at - $1::interval`, d)
		},
		AgeNode: func(t testing.TB, id string, d time.Duration) {
			n := pgtest.Exec(t, pool, `UPDATE leasehold_nodes SET started_at = started_at - $2::interval,
				heartbeat_at = heartbeat_at - $2::interval WHERE node_id = $1`, id, d)
			require.EqualValues(t, 1, n, "no node %q", id)
		},
	}
}

// insertAsOldNode is CreateDeferredEpisode's insert as a node older than
// migration 00014 sends it: no key_version.
func insertAsOldNode(t testing.TB, pool *pgxpool.Pool, key string) error {
	_, err := pool.Exec(context.Background(), `INSERT INTO leasehold_episodes (
		actor_id, expectation_id, trigger_type, dedupe_key, status, max_attempts, source_stack, source_env, queued_at)
		VALUES ('a', 'e', 'event', $1, 'queued', 3, '', '', now())
		ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING`, key)
	return err
}

// The switch and a version 1 insert never interleave: an insert in flight
// commits before the switch (which then waits for it), and an insert that
// starts while the switch holds its lock waits and is then refused. Either
// way a version 2 node that looks the version 1 key up after the switch
// finds every row that holds one.
func TestKeySwitchWaitsForInsertsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = 1`)

	// An insert in flight: its transaction holds the table until it ends.
	inFlight, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = inFlight.Rollback(ctx) }()
	_, err = postgres.New(inFlight).CreateEpisode(ctx, keyed("event:a:e:in-flight", 1))
	require.NoError(t, err)

	switched := make(chan error, 1)
	go func() {
		_, _, err := s.SwitchKeyVersion(ctx, episodes.KeySwitch{LockWait: time.Minute})
		switched <- err
	}()
	waitForLockWait(t, pool, "leasehold_switch_key_version")
	select {
	case err := <-switched:
		t.Fatalf("the switch did not wait for the insert in flight: %v", err)
	default:
	}
	require.NoError(t, inFlight.Commit(ctx))
	require.NoError(t, <-switched)
	id, err := s.FindLiveEpisode(ctx, "event:a:e:in-flight")
	require.NoError(t, err)
	require.NotZero(t, id, "committed before the switch, and found after it")

	// The switch holding its lock (inside a transaction here, so that it
	// stays held): a version 1 insert waits for it, then reads version 2.
	pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = 1, switched_at = NULL`)
	sw, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = sw.Rollback(ctx) }()
	var v int
	require.NoError(t, sw.QueryRow(ctx, `SELECT leasehold_switch_key_version(15000, 60000)`).Scan(&v))
	require.Equal(t, 2, v)
	inserted := make(chan error, 1)
	go func() {
		_, err := s.CreateEpisode(ctx, keyed("event:a:e:behind-the-switch", 1))
		inserted <- err
	}()
	waitForLockWait(t, pool, "INSERT INTO leasehold_episodes")
	require.NoError(t, sw.Commit(ctx))
	require.ErrorIs(t, <-inserted, episodes.ErrKeyVersion)
	id, err = s.FindLiveEpisode(ctx, "event:a:e:behind-the-switch")
	require.NoError(t, err)
	require.Zero(t, id)
}

// A repeatable read transaction whose snapshot predates the switch cannot
// insert a version 1 key after it: its read of the version would be the
// old one, so the guard locks the row, and the transaction fails to
// serialize (retryable) instead.
func TestKeySwitchFailsARepeatableReadTransactionThatPredatesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = 1`)

	rr, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = rr.Rollback(ctx) }()
	var n int
	require.NoError(t, rr.QueryRow(ctx, `SELECT count(*) FROM leasehold_nodes`).Scan(&n)) // takes the snapshot

	v, _, err := s.SwitchKeyVersion(ctx, episodes.KeySwitch{})
	require.NoError(t, err)
	require.Equal(t, dedupe.KeyV2, v)

	_, err = postgres.New(rr).CreateEpisode(ctx, keyed("event:a:e:stale-snapshot", 1))
	require.ErrorIs(t, err, claims.ErrRetryable, "a serialization failure: the transaction runs again and reads version 2")
	require.NoError(t, rr.Rollback(ctx))
	id, err := s.FindLiveEpisode(ctx, "event:a:e:stale-snapshot")
	require.NoError(t, err)
	require.Zero(t, id)
}

// The switch waits for the episodes table no longer than its LockWait:
// behind a long transaction it fails retryably and changes nothing.
func TestKeySwitchGivesUpBehindALongTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = 1`)
	long, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = long.Rollback(ctx) }()
	_, err = postgres.New(long).CreateEpisode(ctx, keyed("event:a:e:long", 0))
	require.NoError(t, err)

	_, _, err = s.SwitchKeyVersion(ctx, episodes.KeySwitch{LockWait: 100 * time.Millisecond})
	require.ErrorIs(t, err, claims.ErrRetryable)
	v, _, err := s.KeyVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, dedupe.KeyV1, v)
}

func keyed(key string, v int16) episodes.New {
	return episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent, DedupeKey: key, KeyVersion: v, MaxAttempts: 3}
}

// waitForLockWait waits until a backend whose query contains text waits
// for a lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, text string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, text).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 5*time.Millisecond, "nothing waits for a lock in %q", text)
}

// Migration 00014 on a schema that held work starts it at version 1 (its
// live keys are version 1 keys, and its old nodes write them): nodes hash
// under version 1 until the switch, and a key written before the
// migration stays a duplicate. A schema that held nothing starts at 2.
func TestKeyVersionMigration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed string
		want dedupe.KeyVersion
	}{
		{"with an episode", `INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key, status, max_attempts, source_stack, source_env)
			VALUES ('a', 'e', 'event', 'event:a:e:before-14', 'queued', 3, '', '')`, dedupe.KeyV1},
		{"with a node", `INSERT INTO leasehold_nodes (node_id, mode) VALUES ('node-old', 'full')`, dedupe.KeyV1},
		{"empty", ``, dedupe.KeyV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := freshSchema(t)
			db := schemaDB(t, name)
			p, err := postgres.NewMigrator(db)
			require.NoError(t, err)
			_, err = p.UpTo(t.Context(), 13)
			require.NoError(t, err)
			if tc.seed != "" {
				_, err = db.ExecContext(t.Context(), tc.seed)
				require.NoError(t, err)
			}
			_, err = p.Up(t.Context())
			require.NoError(t, err)

			cfg, err := pgxpool.ParseConfig(pgtest.URL())
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["search_path"] = name
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s := postgres.New(pool)
			v, at, err := s.KeyVersion(t.Context())
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			require.Nil(t, at)
			if tc.want == dedupe.KeyV1 {
				_, err := s.CreateEpisode(t.Context(), keyed("event:a:e:after-14", 1))
				require.NoError(t, err, "a version 1 key on a version 1 database")
			}

			// Down and up again: the version table, the columns, the guard
			// and the switch go and come back.
			_, err = p.DownTo(t.Context(), 13)
			require.NoError(t, err)
			_, err = p.Up(t.Context())
			require.NoError(t, err)
		})
	}
}
