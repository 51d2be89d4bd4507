package sqlserver_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/episodes"
)

// TestConformanceMigrate16 is adapters/postgres's
// TestMigrate16MakesOpenRequestsAvailable on SQL Server: migration 00016
// with live work in the database. Every open request (pending and due
// later, pending and due, claimed by a poller) of a queued episode nobody
// holds becomes an available episode, due as it was (a claimed one at
// once); a request whose episode is held live, or ended, or archived, does
// not; every open request is closed. Then the database refuses a new
// request (error RetiredRequestsError), a poll takes what is due, and the
// migration goes down again with the available work pending.
func TestConformanceMigrate16(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := emptyDatabase(t, admin, dsn, false)
	p, err := sqlserver.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 15)
	require.NoError(t, err)

	episode := func(key, status string, archived bool) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.QueryRowContext(ctx, `INSERT INTO leasehold_episodes
			(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, max_attempts, source_stack, source_env, archived_at)
			OUTPUT inserted.id
			VALUES (N'a', N'e', N'event', @key, 1, @status, 3, N'', N'', CASE WHEN @archived = 1 THEN SYSUTCDATETIME() END)`,
			sql.Named("key", key), sql.Named("status", status), sql.Named("archived", archived)).Scan(&id))
		return id
	}
	request := func(id int64, status string, runAfter time.Duration) {
		t.Helper()
		_, err := db.ExecContext(ctx, `INSERT INTO leasehold_trigger_requests
			(episode_id, actor_id, expectation_id, source_node, status, opts, claimed_by, claim_until, fence, run_after)
			VALUES (@id, N'a', N'e', N'old-node', @status, N'{"o":1}',
				CASE WHEN @status = N'claimed' THEN N'old-poller' END,
				CASE WHEN @status = N'claimed' THEN DATEADD(minute, 1, SYSUTCDATETIME()) END,
				1, DATEADD(second, @s, SYSUTCDATETIME()))`,
			sql.Named("id", id), sql.Named("status", status), sql.Named("s", int(runAfter.Seconds())))
		require.NoError(t, err)
	}
	later := episode("later", "queued", false)
	request(later, "pending", time.Hour)
	due := episode("due", "queued", false)
	request(due, "pending", -time.Minute)
	claimed := episode("claimed", "queued", false)
	request(claimed, "claimed", time.Hour)
	held := episode("held", "queued", false)
	request(held, "pending", -time.Minute)
	_, err = db.ExecContext(ctx, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence, work_type)
		VALUES (N'held', N'claimed', N'node-x', DATEADD(minute, 1, SYSUTCDATETIME()), SYSUTCDATETIME(), 1, N'episode')`)
	require.NoError(t, err)
	canceled := episode("canceled", "canceled", false)
	request(canceled, "pending", -time.Minute)
	archived := episode("archived", "queued", true)
	request(archived, "pending", -time.Minute)

	_, err = p.UpTo(ctx, 16)
	require.NoError(t, err)

	runAfter := func(id int64) *time.Time {
		t.Helper()
		var at sql.NullTime
		require.NoError(t, db.QueryRowContext(ctx, `SELECT run_after FROM leasehold_episodes WHERE id = @id`,
			sql.Named("id", id)).Scan(&at))
		if !at.Valid {
			return nil
		}
		u := utcWall(at.Time)
		return &u
	}
	var now time.Time
	require.NoError(t, db.QueryRowContext(ctx, `SELECT SYSUTCDATETIME()`).Scan(&now))
	now = utcWall(now)
	require.NotNil(t, runAfter(later))
	require.WithinDuration(t, now.Add(time.Hour), *runAfter(later), time.Minute, "due as the request was")
	require.NotNil(t, runAfter(due))
	require.NotNil(t, runAfter(claimed))
	require.False(t, runAfter(claimed).After(now.Add(time.Second)), "a request a poller had claimed is due at once")
	for name, id := range map[string]int64{"held live": held, "canceled": canceled, "archived": archived} {
		require.Nil(t, runAfter(id), "the %s episode was made available", name)
	}
	var open int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM leasehold_trigger_requests
		WHERE status IN (N'pending', N'claimed')`).Scan(&open))
	require.Zero(t, open, "an open request is left for an old poller")

	_, err = db.ExecContext(ctx, `INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node)
		VALUES (@id, N'a', N'e', N'old-node')`, sql.Named("id", later))
	var me mssql.Error
	require.ErrorAs(t, err, &me)
	require.EqualValues(t, sqlserver.RetiredRequestsError, me.Number, "an old binary's request was accepted: %v", err)

	store, err := sqlserver.New(db)
	require.NoError(t, err)
	ds, err := store.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "new-node", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 10})
	require.NoError(t, err)
	got := map[int64]bool{}
	for _, d := range ds {
		require.True(t, d.Started)
		require.JSONEq(t, `{"o":1}`, string(d.Opts), "the request's opts came with it")
		got[d.EpisodeID] = true
	}
	require.Equal(t, map[int64]bool{due: true, claimed: true}, got, "the due work, once each")

	_, err = p.DownTo(ctx, 15)
	require.NoError(t, err)
	var status string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT status FROM leasehold_trigger_requests
		WHERE episode_id = @id AND status = N'pending'`, sql.Named("id", later)).Scan(&status))
	require.Equal(t, "pending", status, "down gives available work its request back")
}
