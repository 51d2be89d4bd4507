package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// cliSchema returns a migrated pgtest schema, its Store, and a URL whose
// connections use that schema.
func cliSchema(t *testing.T) (*postgres.Store, string, func(string) string) {
	t.Helper()
	pool := pgtest.Schema(t)
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	require.NotEmpty(t, schema)
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	url := pgtest.URL() + sep + "search_path=" + schema
	return postgres.New(pool), url, func(key string) string { pgtest.ExpireClaim(t, pool, key); return key }
}

// runCLI runs one command function in-process.
func runCLI(t *testing.T, cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cmd(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLIMigrateStatus(t *testing.T) {
	_, url, _ := cliSchema(t)
	code, out, errOut := runCLI(t, migrateCmd, "status", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^1\s+00001_leasehold_init\.sql\s+applied\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s*$`, out)

	// up on a current schema applies nothing; flags may come first too.
	code, out, errOut = runCLI(t, migrateCmd, "-url", url, "up")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "nothing to apply")
}

func TestCLIClaimsLs(t *testing.T) {
	store, url, expire := cliSchema(t)
	ctx := context.Background()
	for _, k := range []string{"job-live", "job-old"} {
		_, err := store.Acquire(ctx, claims.AcquireParams{Key: k, Owner: "node-a", Lease: time.Minute, WorkType: "billing"})
		require.NoError(t, err)
	}
	_, err := store.Acquire(ctx, claims.AcquireParams{Key: "job-b", Owner: "node-b", Lease: time.Minute, WorkType: "billing"})
	require.NoError(t, err)
	expire("job-old")

	code, out, errOut := runCLI(t, claimsCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Regexp(t, `^KEY\s+STATE\s+OWNER\s+FENCE`, lines[0])
	require.Regexp(t, `^job-old\s+claimed\s+node-a\s+1\s+1\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, lines[1], "soonest deadline first")
	// Aligned columns: STATE starts at the same offset on every line.
	at := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		require.Equal(t, "claimed", l[at:at+len("claimed")], out)
	}

	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json", "-owner", "node-a")
	require.Equal(t, 0, code, errOut)
	var got []claimJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 2)
	for _, c := range got {
		require.Equal(t, "node-a", c.Owner)
		_, err := time.Parse(time.RFC3339, c.LeaseUntil)
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(c.LeaseUntil, "Z"), c.LeaseUntil)
	}

	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json", "-expired")
	require.Equal(t, 0, code, errOut)
	got = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, "job-old", got[0].Key)

	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json", "-limit", "1")
	require.Equal(t, 0, code, errOut)
	got = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)

	code, _, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-limit", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-limit must be positive")
}

// newRunningOrphan creates a running episode whose claim has expired.
func newRunningOrphan(t *testing.T, store *postgres.Store, expire func(string) string, actor, key string) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: actor, ExpectationID: "charge", TriggerType: episodes.TriggerManual, DedupeKey: key,
		MaxAttempts: 3, Owner: "node-dead", Lease: time.Minute,
	})
	require.NoError(t, err)
	require.True(t, c.Created)
	_, err = store.StartEpisode(ctx, c.Episode.ID, c.Claim.Token)
	require.NoError(t, err)
	expire(key)
	return c.Episode.ID
}

func TestCLIEpisodesLs(t *testing.T) {
	store, url, expire := cliSchema(t)
	ctx := context.Background()
	queued, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "mailer", ExpectationID: "send", TriggerType: episodes.TriggerEvent, MaxAttempts: 3,
	})
	require.NoError(t, err)
	running := newRunningOrphan(t, store, expire, "billing", "bill-1")

	code, out, errOut := runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^ID\s+STATUS\s+ACTOR`, lines[0])
	require.Regexp(t, `^\d+\s+running\s+billing\s+charge\s+0/3\s+node-dead`, lines[1], "newest first")
	require.Regexp(t, `^\d+\s+queued\s+mailer\s+send\s+0/3\s+-`, lines[2])

	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-json", "-status", "running")
	require.Equal(t, 0, code, errOut)
	var got []episodeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, running, got[0].ID)
	require.Equal(t, "node-dead", got[0].Owner)
	require.NotEmpty(t, got[0].StartedAt)

	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-json", "-actor", "mailer")
	require.Equal(t, 0, code, errOut)
	got = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, queued.Episode.ID, got[0].ID)

	// Just started: not stale with -stale-after 1h; stale with 0s, since its
	// last_step_at is in the past on the database clock by now.
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-json", "-stale", "-stale-after", "1h")
	require.Equal(t, 0, code, errOut)
	got = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Empty(t, got)
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-json", "-stale", "-stale-after", "0s")
	require.Equal(t, 0, code, errOut)
	got = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, running, got[0].ID)

	code, _, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-status", "bogus")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown -status "bogus"`)
}

func TestCLISweepDryRun(t *testing.T) {
	store, url, expire := cliSchema(t)
	ctx := context.Background()
	id := newRunningOrphan(t, store, expire, "billing", "bill-orphan")
	before, err := store.GetEpisode(ctx, id)
	require.NoError(t, err)

	code, out, errOut := runCLI(t, sweepCmd, "-dry-run", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "dry run")
	require.Regexp(t, `(?m)^\d+\s+billing/charge\s+fail\s+fail\s+default\s+.+$`, out)
	require.Contains(t, out, "found 1, claimed 0, restarted 0, failed 0, skipped 0")

	code, out, errOut = runCLI(t, sweepCmd, "-dry-run", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var rep []sweepJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep, 1)
	require.True(t, rep[0].DryRun)
	require.Equal(t, 1, rep[0].Found)
	require.Len(t, rep[0].Decisions, 1)
	d := rep[0].Decisions[0]
	require.Equal(t, id, d.EpisodeID)
	require.Equal(t, "fail", d.Action)
	require.Equal(t, "default", d.PolicySource)
	require.NotEmpty(t, d.Reason)

	// Nothing changed: the episode is still running under the dead node's
	// expired claim.
	after, err := store.GetEpisode(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before, after)
	expired, err := store.ListClaims(ctx, claims.ListQuery{ExpiredOnly: true, Limit: 10})
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, "node-dead", expired[0].Owner)
	require.EqualValues(t, 1, expired[0].Fence)

	// Acting is the nodes' job: they know the compiled recovery policies.
	code, _, errOut = runCLI(t, sweepCmd, "-url", url)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "only -dry-run is supported")
	after, err = store.GetEpisode(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestCLIBadURL(t *testing.T) {
	code, _, errOut := runCLI(t, claimsCmd, "ls", "-url", "mysql://root@localhost/app")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown database URL scheme "mysql"`)
	require.Contains(t, errOut, "postgres://")

	code, _, errOut = runCLI(t, migrateCmd, "status", "-url", "postgres://postgres:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot reach")
	require.Contains(t, errOut, "check -url / DATABASE_URL")
	require.NotContains(t, errOut, "secret")

	t.Setenv("DATABASE_URL", "")
	code, _, errOut = runCLI(t, sweepCmd, "-dry-run")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "pass -url or set DATABASE_URL")

	code, _, _ = runCLI(t, migrateCmd, "sideways", "-url", "postgres://x")
	require.Equal(t, 2, code)
}
