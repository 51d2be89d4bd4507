package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/database"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/membership"
	lhschema "github.com/leasehold/leasehold/sql/schema"
)

// cliSchema returns a migrated pgtest schema, its Store, and a URL whose
// connections use that schema.
func cliSchema(t *testing.T) (*postgres.Store, string, func(string) string) {
	t.Helper()
	pool := pgtest.Schema(t)
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	require.NotEmpty(t, schema)
	return postgres.New(pool), schemaURL(schema), func(key string) string { pgtest.ExpireClaim(t, pool, key); return key }
}

// schemaURL is the test server's URL with connections using schema alone.
func schemaURL(schema string) string {
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	return pgtest.URL() + sep + "search_path=" + schema
}

// emptySchema creates a schema with no leasehold migration applied (no
// version table either), dropped when t ends, and returns its name and a
// pool whose connections use it alone.
func emptySchema(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	admin, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	name, err := createDemoSchema(ctx, admin)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dropDemoSchema(context.Background(), admin, name)) })
	pool, err := openSchemaPool(ctx, pgtest.URL(), name, 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return name, pool
}

// versionTable reads leasehold's goose version table in pool's schema
// through goose's own store, as the CLI does.
func versionTable(t *testing.T, pool *pgxpool.Pool) (database.StoreExtender, *sql.DB) {
	t.Helper()
	vs, err := database.NewStore(database.DialectPostgres, lhschema.VersionTable)
	require.NoError(t, err)
	ext, ok := vs.(database.StoreExtender)
	require.True(t, ok)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return ext, db
}

// neededVersion is the newest migration this binary embeds, and the one
// before it (0 when there is only one).
func neededVersion(t *testing.T, db *sql.DB) (needed, previous int64) {
	t.Helper()
	p, err := postgres.NewMigrator(db)
	require.NoError(t, err)
	src := p.ListSources()
	require.NotEmpty(t, src)
	if len(src) > 1 {
		previous = src[len(src)-2].Version
	}
	return src[len(src)-1].Version, previous
}

// The read commands refuse a schema with no leasehold migration, with exit
// code 3 and a message naming the fix, print nothing on stdout (so -json
// consumers see no partial output) and create nothing: goose's Provider
// would create the version table just by reading it.
func TestCLISchemaMissing(t *testing.T) {
	name, pool := emptySchema(t)
	url := schemaURL(name)
	for _, args := range [][]string{
		{"ls", "-url", url},
		{"ls", "-url", url, "-json"},
	} {
		for _, cmd := range []struct {
			name string
			fn   func(context.Context, []string, io.Writer, io.Writer) int
		}{{"claims ls", claimsCmd}, {"episodes ls", episodesCmd}} {
			code, out, errOut := runCLI(t, cmd.fn, args...)
			require.Equal(t, 3, code, errOut)
			require.Empty(t, out)
			require.Equal(t, fmt.Sprintf("leasehold %s: leasehold schema not found in database %q, search_path %q: "+
				"run `leasehold migrate up`\n", cmd.name, "postgres", name), errOut)
		}
	}
	code, out, errOut := runCLI(t, sweepCmd, "-dry-run", "-json", "-url", url)
	require.Equal(t, 3, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "leasehold sweep: leasehold schema not found in")
	require.Contains(t, errOut, "run `leasehold migrate up`")

	vt, db := versionTable(t, pool)
	exists, err := vt.TableExists(t.Context(), db)
	require.NoError(t, err)
	require.False(t, exists, "a read command created %s", lhschema.VersionTable)

	// Migrated, the same commands work and -json is plain JSON.
	code, _, errOut = runCLI(t, migrateCmd, "up", "-url", url)
	require.Equal(t, 0, code, errOut)
	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
	var got []claimJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Empty(t, got)
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^ID\s+STATUS`, out)
	require.Equal(t, "0 episode(s)\n", errOut)
	code, out, errOut = runCLI(t, sweepCmd, "-dry-run", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var rep []sweepJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep, 1)
	require.Zero(t, rep[0].Found)
}

// A schema behind the binary's newest migration is refused with exit code 3;
// migrate up fixes it.
func TestCLISchemaBehind(t *testing.T) {
	_, url, _ := cliSchema(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, db := versionTable(t, pool)
	needed, previous := neededVersion(t, db)
	code, _, errOut := runCLI(t, migrateCmd, "down", "-url", url)
	require.Equal(t, 0, code, errOut)

	code, out, errOut := runCLI(t, claimsCmd, "ls", "-url", url, "-json")
	require.Equal(t, 3, code, errOut)
	require.Empty(t, out)
	if previous > 0 {
		require.Equal(t, fmt.Sprintf("leasehold claims ls: leasehold schema is at version %d, this binary needs %d: "+
			"run `leasehold migrate up`\n", previous, needed), errOut)
	} else { // one migration: rolled back, nothing is applied
		require.Contains(t, errOut, "leasehold schema not found in")
	}

	code, _, errOut = runCLI(t, migrateCmd, "up", "-url", url)
	require.Equal(t, 0, code, errOut)
	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, "[]", out)
}

// A schema newer than the binary is read anyway, with a warning on stderr
// that leaves -json output alone.
func TestCLISchemaNewer(t *testing.T) {
	store, url, _ := cliSchema(t)
	_, err := store.Acquire(t.Context(), claims.AcquireParams{Key: "job-1", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	vt, db := versionTable(t, pool)
	needed, _ := neededVersion(t, db)
	require.NoError(t, vt.Insert(t.Context(), db, database.InsertRequest{Version: needed + 1}))

	code, out, errOut := runCLI(t, claimsCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, fmt.Sprintf("leasehold claims ls: warning: leasehold schema is at version %d, this binary "+
		"knows only up to %d: the binary is older than the schema; reading anyway, but use a leasehold release at "+
		"least as new as your nodes'\n", needed+1, needed), errOut)
	var got []claimJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, "job-1", got[0].Key)
}

func TestCompareSchema(t *testing.T) {
	const where = `database "app", search_path "lh"`
	for _, tc := range []struct {
		name             string
		current, needed  int64
		wantErr, wantMsg string
	}{
		{name: "current", current: 2, needed: 2},
		{name: "none applied", current: 0, needed: 2,
			wantErr: "leasehold schema not found in " + where + ": run `leasehold migrate up`"},
		{name: "behind", current: 1, needed: 2,
			wantErr: "leasehold schema is at version 1, this binary needs 2: run `leasehold migrate up`"},
		{name: "newer", current: 3, needed: 2, wantMsg: "leasehold schema is at version 3, this binary knows only up to 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warning, err := compareSchema(tc.current, tc.needed, where)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, tc.wantErr)
				require.ErrorAs(t, err, new(schemaError))
				require.Equal(t, 3, exitCode(io.Discard, "claims ls", err))
			}
			if tc.wantMsg == "" {
				require.Empty(t, warning)
			} else {
				require.Contains(t, warning, tc.wantMsg)
			}
		})
	}
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
	require.Regexp(t, `^ID\s+STATUS\s+ERROR CLASS\s+ACTOR`, lines[0])
	require.Regexp(t, `^\d+\s+running\s+-\s+billing\s+charge\s+1/3\s+node-dead`, lines[1], "newest first")
	require.Regexp(t, `^\d+\s+queued\s+-\s+mailer\s+send\s+1/3\s+-`, lines[2])

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
	// No node has recorded billing/charge's policy: the CLI cannot know
	// it, and a sweeper would leave the orphan alone.
	require.Regexp(t, `(?m)^\d+\s+billing/charge\s+skip\s+-\s+unknown\s+.+$`, out)
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
	require.Equal(t, "skip", d.Action)
	require.Equal(t, "unknown", d.PolicySource)
	require.NotEmpty(t, d.Reason)

	// A node that runs billing records its policy when it starts: the dry
	// run then reports what the nodes will really do.
	require.NoError(t, store.PutAgentDefinition(ctx, episodes.Definition{ActorID: "billing", ExpectationID: "charge",
		RecoveryPolicy: "restart", MaxAttempts: 3}))
	code, out, errOut = runCLI(t, sweepCmd, "-dry-run", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^\d+\s+billing/charge\s+restart\s+restart\s+table\s+.+$`, out)

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
	code, out, errOut = runCLI(t, sweepCmd, "-url", url)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Equal(t, "leasehold sweep: sweep without -dry-run is refused: recovery restarts or fails each orphan "+
		"by its actor's recovery policy, which is compiled into your nodes, not this CLI, so the CLI must not act; "+
		"run recovery.Sweeper inside your nodes to recover, and 'leasehold sweep -dry-run' to inspect what it "+
		"would do\n", errOut)
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

// The help says what scripts can rely on: the exit codes, and that sweep
// only dry-runs and why.
func TestCLIUsage(t *testing.T) {
	var b bytes.Buffer
	usage(&b)
	require.Contains(t, b.String(), "3  leasehold schema missing or older than this binary: run 'leasehold migrate up'")

	code, out, errOut := runCLI(t, sweepCmd, "-h")
	require.Equal(t, 0, code)
	require.Empty(t, errOut)
	require.Contains(t, out, "usage: leasehold sweep -dry-run ")
	require.Contains(t, out, "-dry-run is required: sweep without it is refused (exit code 2).")
	require.Contains(t, out, "run a recovery.Sweeper in each one")
}

func TestCLINodesLs(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-a", Stack: "hatch", Env: "rc", Mode: "full"}))
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-b", Mode: "trigger_only"}))
	require.NoError(t, store.HeartbeatNode(ctx, membership.Member{ID: "node-b", Mode: "trigger_only", Draining: true}))
	_, err := store.Acquire(ctx, claims.AcquireParams{Key: "job", Owner: "node-a", Lease: time.Minute, WorkType: "billing"})
	require.NoError(t, err)

	code, out, errOut := runCLI(t, nodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^NODE\s+STACK\s+ENV\s+MODE\s+DRAINING`, lines[0])
	require.Regexp(t, `^node-a\s+hatch\s+rc\s+full\s+false\s+\S+\s+\S+ ago\s+1$`, lines[1])
	require.Regexp(t, `^node-b\s+-\s+-\s+trigger_only\s+true\s+`, lines[2])
	require.Contains(t, errOut, "2 node(s)")

	code, out, errOut = runCLI(t, nodesCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	var got []nodeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 2)
	require.Equal(t, int64(1), got[0].LiveLeases)
	require.True(t, got[1].Draining)
	require.GreaterOrEqual(t, got[0].HeartbeatAgeMs, int64(0))

	code, _, errOut = runCLI(t, nodesCmd, "rm", "-url", url)
	require.Equal(t, 2, code, errOut)
}
