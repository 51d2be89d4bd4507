package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/sql/queries"
)

// SessionInitSQL is the session state every batch assumes. Filtered unique
// indexes (the episode dedupe index) reject writes from sessions without the
// ANSI options, and XACT_ABORT ON makes any error in a batch roll the whole
// batch back, which is what lets a failed batch be treated as not applied.
// Open sets it on its connector; set it yourself on a connector of your own.
const SessionInitSQL = "SET ANSI_NULLS ON; SET QUOTED_IDENTIFIER ON; SET ANSI_PADDING ON; " +
	"SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON; " +
	"SET NUMERIC_ROUNDABORT OFF; SET XACT_ABORT ON;"

// Open returns a pool on dsn (sqlserver://user:pass@host:1433?database=app)
// whose every connection runs SessionInitSQL: when it is opened and each time
// the pool hands it out again (go-mssqldb resets the session and re-applies
// it, one extra round trip per checkout).
//
// Every error the pool meets while opening a connection (dial, DNS, TLS,
// login, SessionInitSQL) is marked as a connect error, which the Store
// reports as claims.ErrRetryable: database/sql sends a batch only on a
// connection that opened, so nothing of it reached the server. A pool made
// otherwise still gets the dial, DNS and TLS-handshake errors classified
// (see retryable), not the others.
func Open(dsn string) (*sql.DB, error) {
	c, err := mssql.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: open: %w", err)
	}
	c.SessionInitSQL = SessionInitSQL
	return sql.OpenDB(connector{c}), nil
}

// connector marks the errors of opening a connection (connectError).
type connector struct{ c *mssql.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.c.Connect(ctx)
	if err != nil {
		// go-mssqldb returns the opened connection when SessionInitSQL
		// failed (and a nil *mssql.Conn otherwise); database/sql would
		// drop it without closing it.
		if mc, ok := conn.(*mssql.Conn); ok && mc != nil {
			_ = mc.Close()
		}
		return nil, connectError{err}
	}
	return conn, nil
}

func (c connector) Driver() driver.Driver { return c.c.Driver() }

// Store runs leasehold's T-SQL batches on a go-mssqldb pool, each batch on
// its own, never inside a caller's transaction: a batch that writes two
// tables opens and ends its own transaction. The exceptions are Maintain and
// InTx (workflows), which send batches in a transaction the Store begins
// itself (see inTx); the batches sent there nest in it.
type Store struct {
	db *sql.DB
	// tx, when set, is the transaction every batch runs in instead of the
	// pool: Maintain's or InTx's, on a copy of the Store made by inTx.
	tx *sql.Tx
	// txBound is tx's lock-wait bound (BoundTransaction), taken from the
	// context that began it.
	txBound time.Duration
	stmts   map[string]queries.Query
	// backoff is the wait before in-call retry number n (1, 2, ...).
	backoff func(n int) time.Duration
}

var (
	_ claims.Store      = (*Store)(nil)
	_ runner.Store      = (*Store)(nil)
	_ recovery.Store    = (*Store)(nil)
	_ membership.Store  = (*Store)(nil)
	_ maintenance.Store = (*Store)(nil)
)

// New returns a Store over db, which should come from Open. It fails when
// the embedded T-SQL does not load or lacks a statement the Store runs.
func New(db *sql.DB) (*Store, error) {
	stmts, err := queries.SQLServer()
	if err != nil {
		return nil, fmt.Errorf("sqlserver: load statements: %w", err)
	}
	for name, cols := range resultColumns {
		q, ok := stmts[name]
		if !ok {
			return nil, fmt.Errorf("sqlserver: statement %s missing from sql/queries/sqlserver", name)
		}
		if (q.Kind == ":exec") != (cols == nil) {
			return nil, fmt.Errorf("sqlserver: statement %s is %s in %s, which the Store does not expect", name, q.Kind, q.File)
		}
	}
	for _, name := range []string{boundTransaction, boundLockWait} {
		if q, ok := stmts[name]; !ok || q.Kind != ":exec" {
			return nil, fmt.Errorf("sqlserver: statement %s missing from sql/queries/sqlserver, or not :exec", name)
		}
	}
	return &Store{db: db, stmts: stmts, backoff: jitteredBackoff}, nil
}

// The bounds of bounds.sql. Neither is ever sent alone: a SET inside a
// parameterized call (go-mssqldb's sp_executesql) reverts when the call
// returns, so each is sent as the top of the batch it bounds, in the same
// call (batch), with @bound_ms from claims.TxBoundFrom.
const (
	// boundTransaction tops every batch sent inside a transaction the
	// Store began (InTx, Maintain).
	boundTransaction = "BoundTransaction"
	// boundLockWait tops each takeover batch sent on its own.
	boundLockWait = "BoundLockWait"
)

// takeovers are the statements that take a claim or an episode over from
// another holder, which may be frozen while holding the row: each is sent
// behind BoundLockWait, as on Postgres.
var takeovers = map[string]bool{
	"AcquireClaim":     true,
	"ClaimForRecovery": true,
	"RequeueOrphan":    true,
	"ClaimAvailable":   true,
}

// batch returns the text and arguments sent for the named statement: the
// statement itself, behind BoundTransaction inside the Store's transaction
// or behind BoundLockWait for a takeover, with @bound_ms added.
func (s *Store) batch(ctx context.Context, name string, args []any) (string, []any, error) {
	q, err := s.statement(name)
	if err != nil {
		return "", nil, err
	}
	bound, d := boundLockWait, claims.TxBoundFrom(ctx)
	switch {
	case s.tx != nil:
		bound, d = boundTransaction, s.txBound
	case !takeovers[name]:
		return q.SQL, args, nil
	}
	b, err := s.statement(bound)
	if err != nil {
		return "", nil, err
	}
	return b.SQL + "\n" + q.SQL, append(slices.Clip(args), sql.Named("bound_ms", boundMillis(d))), nil
}

// boundMillis is @bound_ms: d in whole milliseconds, at least 1 (SET
// LOCK_TIMEOUT 0 means "do not wait at all") and at most the int the batch
// casts it to.
func boundMillis(d time.Duration) int64 {
	return min(max(d.Milliseconds(), 1), math.MaxInt32)
}

// resultColumns lists, for every statement the Store runs, the columns of
// its one result set, in order: those of the Postgres statement of the same
// name. nil means the batch returns no result set (:exec). The Store checks
// every result against it, so a batch that renamed, reordered or dropped a
// column fails loudly instead of scanning one column into another.
var resultColumns = map[string][]string{
	"AcquireClaim":      claimColumns,
	"RenewClaim":        {"lease_until"},
	"RenewClaims":       {"dedupe_key", "fence", "lease_until"},
	"CompleteClaim":     {"fence"},
	"FailClaim":         {"fence"},
	"ReleaseClaim":      {"fence"},
	"HoldClaim":         {"lease_until"},
	"ReleaseClaims":     {"dedupe_key", "fence"},
	"ListExpiredClaims": claimColumns,
	"ListClaims":        claimColumns,

	"CreateEpisode":      {"created", "id", "created_at", "status", "claim_key", "fence", "attempt", "lease_until", "claimed_at", "grant_kind"},
	"FindLiveEpisode":    {"id"},
	"StartEpisode":       {"id", "next_step_no"},
	"AppendStep":         {"step_no"},
	"FinishEpisode":      {"id"},
	"RetryEpisode":       {"id", "attempts", "status", "run_after"},
	"FinishEpisodes":     {"id"},
	"CancelEpisode":      {"id", "status", "cancel_requested_at"},
	"ListCancelRequests": {"id", "fence"},
	"RequeueEpisode":     {"id", "attempts", "run_after"},
	"GetEpisode": {
		"id", "actor_id", "expectation_id", "trigger_type", "trigger_ref", "dedupe_key",
		"status", "phase", "attempts", "max_attempts", "budget", "source_stack", "source_env",
		"owner_node", "payload", "result", "error_class", "error_detail", "queued_at",
		"started_at", "finished_at", "last_step_at", "archived_at", "created_at", "trace_parent",
	},
	"ListSteps": {"episode_id", "step_no", "fence", "data", "created_at"},

	"ListOrphanedEpisodes": {
		"id", "actor_id", "expectation_id", "status", "dedupe_key", "attempts",
		"max_attempts", "source_stack", "source_env", "owner_node", "last_seen_at",
		"claim_state", "claim_owner", "claim_lease_until",
	},
	"ClaimForRecovery": {
		"id", "actor_id", "expectation_id", "trigger_type", "trigger_ref", "dedupe_key", "attempts",
		"max_attempts", "source_stack", "source_env", "payload", "created_at", "claim_key",
		"fence", "claim_attempt", "lease_until", "claimed_at", "grant_kind",
	},
	"RequeueOrphan":          {"id", "status", "attempts", "max_attempts"},
	"GetAgentRecoveryPolicy": {"recovery_policy"},
	"PutAgentDefinition":     nil,

	"CreateDeferredEpisode":  {"created", "id", "created_at"},
	"CreateDeferredEpisodes": {"created", "id", "created_at", "dedupe_key"},
	"ClaimAvailable": {
		"episode_id", "picked_actor_id", "picked_expectation_id", "opts",
		"claim_key", "claim_fence", "attempt", "lease_until", "claimed_at", "grant_kind",
		"started", "next_step_no", "actor_id", "expectation_id", "trigger_type", "trigger_ref",
		"dedupe_key", "attempts", "max_attempts", "source_stack", "source_env", "payload", "result",
		"error_class", "error_detail", "created_at", "started_at", "last_step_at", "trace_parent",
	},
	"ExpireAvailable":  {"id"},
	"NextAvailableDue": {"wait_ms"},

	"RaiseFinding":       append([]string{"lease_held"}, findingColumns...),
	"UpdateFinding":      {"lease_held", "updated"},
	"ClearFinding":       {"lease_held", "cleared"},
	"ListActiveFindings": findingColumns,

	"RegisterNode":           nil,
	"HeartbeatNode":          nil,
	"DeregisterNode":         nil,
	"GetKeyVersion":          {"version", "switched_at"},
	"ListKeyVersionLaggards": {"node_id", "stack", "env", "key_version", "heartbeat_age_ms"},
	"ListNodes": {
		"node_id", "stack", "env", "mode", "draining", "started_at", "heartbeat_at",
		"heartbeat_age_ms", "live_leases",
	},
	"ListWaitingForNode": {
		"source_env", "actor_id", "expectation_id", "waiting", "waiting_since", "oldest_episode_id",
		"overdue", "last_node_id", "last_heartbeat_at",
	},

	"TryMaintenanceLock": {"acquired"},
	"ArchiveEpisodes":    rowsAffected,
	"PurgeArchivedSteps": rowsAffected,
	"MarkJournalsPurged": rowsAffected,
	"DeleteSpentClaims":  rowsAffected,
	"DeleteStaleNodes":   rowsAffected,

	"RaiseWaitingForNodeFinding":  rowsAffected,
	"ClearWaitingForNodeFindings": rowsAffected,

	"CreateWorkflowInstance":       {"id", "created_at"},
	"GetRunningWorkflowInstance":   instanceColumns,
	"InsertWorkflowStep":           nil,
	"LockWorkflowInstance":         instanceColumns,
	"GetWorkflowInstance":          instanceColumns,
	"ListWorkflowSteps":            stepColumns,
	"GetWorkflowStepByEpisode":     stepColumns,
	"StartWorkflowStep":            rowsAffected,
	"EndWorkflowStep":              rowsAffected,
	"SkipPendingWorkflowSteps":     rowsAffected,
	"FinishWorkflowInstance":       rowsAffected,
	"ListStalledWorkflowSteps":     {"instance_id", "step_id", "episode_id", "episode_status"},
	"ParkWorkflowInstance":         rowsAffected,
	"ListWorkflowInstances":        instanceColumns,
	"GetAgentMaxAttempts":          {"max_attempts"},
	"PutWorkflowDefinition":        nil,
	"GetWorkflowDefinition":        {"definition"},
	"MoveWorkflowStep":             rowsAffected,
	"DeleteWorkflowStep":           rowsAffected,
	"SetWorkflowDefinitionVersion": rowsAffected,

	"InspectEpisodes": {
		"id", "actor_id", "expectation_id", "trigger_type", "dedupe_key", "status", "phase",
		"attempts", "max_attempts", "source_stack", "source_env", "owner_node", "error_class",
		"created_at", "started_at", "finished_at", "last_step_at",
	},
	"InspectEpisode": {
		"id", "actor_id", "expectation_id", "trigger_type", "trigger_ref",
		"dedupe_key", "status", "phase", "attempts", "max_attempts",
		"source_stack", "source_env", "owner_node", "payload", "result",
		"error_class", "error_detail", "created_at", "started_at",
		"finished_at", "last_step_at", "archived_at",
		"claim_key", "claim_state", "claim_owner", "claim_fence", "claim_attempt", "claim_grant",
		"claim_work_type", "claim_claimed_at", "claim_lease_until", "claim_heartbeat_at", "claim_live",
		"run_after", "journal_steps",
	},
	"InspectJournal": {"step_no", "fence", "owner_node", "data", "created_at"},

	"DashboardClock":          dashboardClockColumns,
	"DashboardNodes":          dashboardNodesColumns,
	"DashboardDefinitions":    dashboardDefinitionsColumns,
	"DashboardStatusCounts":   dashboardStatusColumns,
	"DashboardOutcomes":       dashboardOutcomesColumns,
	"DashboardHandovers":      dashboardHandoversColumns,
	"DashboardEpisodes":       dashboardEpisodesColumns,
	"DashboardEpisode":        dashboardEpisodeColumns,
	"DashboardGrants":         dashboardGrantsColumns,
	"DashboardJournal":        dashboardJournalColumns,
	"DashboardWorkflows":      dashboardWorkflowsColumns,
	"DashboardFindings":       dashboardFindingsColumns,
	"DashboardFindingHistory": dashboardFindingsColumns,
}

// rowsAffected is the result of an :execrows batch: one row, the number of
// rows its writing statement changed, counted from that statement's OUTPUT
// rows. Postgres returns the count through the driver instead.
var rowsAffected = []string{"rows_affected"}

var claimColumns = []string{
	"dedupe_key", "state", "owner_node", "lease_until", "claimed_at", "attempt", "fence",
	"grant_kind", "work_type",
}

var instanceColumns = []string{
	"id", "workflow_id", "subject", "env", "source_stack", "status", "payload", "error_detail",
	"created_at", "finished_at", "parked_reason", "definition_version",
}

var stepColumns = []string{
	"instance_id", "step_id", "status", "episode_id", "attempts", "max_attempts", "updated_at",
}

// In-call retries of deadlock victims and lock timeouts.
const (
	maxAttempts = 4 // the first try and three retries
	baseBackoff = 10 * time.Millisecond
	maxBackoff  = 200 * time.Millisecond
)

// jitteredBackoff waits a random time in [d/2, d), d doubling from
// baseBackoff, so the victims of one deadlock do not collide again in step.
func jitteredBackoff(n int) time.Duration {
	d := min(baseBackoff<<(n-1), maxBackoff)
	return d/2 + rand.N(d/2)
}

func (s *Store) statement(name string) (queries.Query, error) {
	q, ok := s.stmts[name]
	if !ok {
		return queries.Query{}, fmt.Errorf("sqlserver: %s: no such statement", name)
	}
	return q, nil
}

// query runs the named batch and reads its whole result set before
// returning, so that an error the server sends after some rows (a deadlock
// victim whose OUTPUT had begun) is retried like one sent before them.
// Every argument must be a sql.Named value for one of the batch's @
// parameters.
func (s *Store) query(ctx context.Context, name string, args ...any) (*resultSet, error) {
	return s.read(ctx, name, args)
}

// queryRow runs a batch that returns at most one row. Its Scan returns
// sql.ErrNoRows for an empty result, which the callers map to busy, not
// owner, lease lost or duplicate.
func (s *Store) queryRow(ctx context.Context, name string, args ...any) *row {
	rs, err := s.read(ctx, name, args)
	return &row{rs: rs, err: err}
}

// execRows runs an :execrows batch and returns its one number,
// rows_affected. A batch that sends no row breaks the contract: an error.
func (s *Store) execRows(ctx context.Context, name string, args ...any) (int64, error) {
	rs, err := s.read(ctx, name, args)
	var n int64
	err = (&row{rs: rs, err: err}).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("sqlserver: %s: no row count returned", name)
	}
	return n, err
}

// read runs the named batch (as batch composes it), retrying as withRetry
// does, reads the result and checks its columns.
func (s *Store) read(ctx context.Context, name string, args []any) (*resultSet, error) {
	text, args, err := s.batch(ctx, name, args)
	if err != nil {
		return nil, err
	}
	var rs *resultSet
	err = s.withRetry(ctx, name, func() error {
		rows, err := s.conn().QueryContext(ctx, text, args...)
		if err != nil {
			return err
		}
		rs, err = readAll(name, rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := rs.checkColumns(resultColumns[name]); err != nil {
		return nil, err
	}
	return rs, nil
}

// exec runs a batch that returns no result set.
func (s *Store) exec(ctx context.Context, name string, args ...any) error {
	text, args, err := s.batch(ctx, name, args)
	if err != nil {
		return err
	}
	return s.withRetry(ctx, name, func() error {
		_, err := s.conn().ExecContext(ctx, text, args...)
		return err
	})
}

// execer is where a batch runs: a *sql.DB or a *sql.Tx.
type execer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// conn returns the transaction the Store is bound to, else the pool.
func (s *Store) conn() execer {
	if s.tx != nil {
		return s.tx
	}
	return s.db
}

// inTx returns a copy of s whose batches all run in tx, through the same
// query, queryRow, execRows and exec (and so the same statement checks),
// each behind BoundTransaction with bound.
func (s *Store) inTx(tx *sql.Tx, bound time.Duration) *Store {
	c := *s
	c.tx, c.txBound = tx, bound
	return &c
}

// lostRace reports a duplicate-key error that means only "another writer
// got there first", answered like the batch's empty result: on its own a
// failed batch wrote nothing. Inside a transaction (inTx) it is an error
// like any other: XACT_ABORT has rolled back the whole transaction, and a
// caller that took it for "not created" and went on would send its next
// batches in autocommit.
func (s *Store) lostRace(err error) bool { return s.tx == nil && isDuplicate(err) }

// withRetry runs try until it succeeds, fails with an error that is not
// retried in the call, or maxAttempts tries have failed, and returns the
// last error through dbError. A cancelled ctx ends the backoff early.
//
// In a transaction (inTx) try runs once: a deadlock victim's or a lock
// timeout's error has rolled back the whole transaction under XACT_ABORT,
// not just this batch, and sending the batch again would run it outside any
// transaction. The caller of the transaction decides.
func (s *Store) withRetry(ctx context.Context, name string, try func() error) error {
	if s.tx != nil {
		if err := try(); err != nil {
			return dbError(name, err)
		}
		return nil
	}
	var err error
	for n := 1; ; n++ {
		if err = try(); err == nil {
			return nil
		}
		if !retryInCall(err) || n == maxAttempts {
			return dbError(name, err)
		}
		t := time.NewTimer(s.backoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return dbError(name, err)
		case <-t.C:
		}
	}
}

// resultSet is one batch result, read to the end and normalised (times in
// UTC) while the connection was held.
type resultSet struct {
	name string
	cols []string
	rows [][]any
	next int // index of the row Scan reads, plus one
}

// readAll reads the one result set of rows and closes rows. A second result
// set breaks the statement contract and is an error. Errors the server sent
// after the last row come from rows.Err or rows.Close.
func readAll(name string, rows *sql.Rows) (rs *resultSet, err error) {
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			rs, err = nil, cerr
		}
	}()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	rs = &resultSet{name: name, cols: cols}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if t, ok := v.(time.Time); ok {
				vals[i] = databaseUTC(t, types[i].DatabaseTypeName())
			}
		}
		rs.rows = append(rs.rows, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if rows.NextResultSet() {
		return nil, fmt.Errorf("more than one result set; the batch must return exactly one")
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return rs, nil
}

// databaseUTC returns t as a UTC time. SQL Server's datetime2 carries no
// zone: leasehold writes every datetime2 with SYSUTCDATETIME(), so its wall
// clock is UTC. go-mssqldb attaches the DSN's timezone (UTC unless the DSN
// sets one) to that wall clock, so the wall clock is kept and marked UTC;
// t.UTC() would shift it whenever a DSN names another zone. A
// datetimeoffset carries its offset and is converted.
func databaseUTC(t time.Time, dbType string) time.Time {
	if strings.EqualFold(dbType, "DATETIMEOFFSET") {
		return t.UTC()
	}
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// checkColumns reports a result whose columns differ from want.
func (r *resultSet) checkColumns(want []string) error {
	if want == nil {
		return fmt.Errorf("sqlserver: %s: returns no result set; run it with exec", r.name)
	}
	if len(r.cols) != len(want) || !slicesEqualFold(r.cols, want) {
		return fmt.Errorf("sqlserver: %s: result columns %v, want %v (the Postgres statement's)", r.name, r.cols, want)
	}
	return nil
}

func slicesEqualFold(a, b []string) bool {
	for i := range a {
		if !strings.EqualFold(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Next advances to the next row.
func (r *resultSet) Next() bool {
	if r.next >= len(r.rows) {
		return false
	}
	r.next++
	return true
}

// Scan copies the current row into dest.
func (r *resultSet) Scan(dest ...any) error {
	if r.next == 0 {
		return fmt.Errorf("sqlserver: %s: Scan called before Next", r.name)
	}
	if err := scanValues(r.rows[r.next-1], dest); err != nil {
		return fmt.Errorf("sqlserver: %s: %w", r.name, err)
	}
	return nil
}

// row is the result of queryRow.
type row struct {
	rs  *resultSet
	err error
}

// Scan copies the single row into dest; sql.ErrNoRows when there is none.
func (r *row) Scan(dest ...any) error {
	switch {
	case r.err != nil:
		return r.err
	case len(r.rs.rows) == 0:
		return sql.ErrNoRows
	case len(r.rs.rows) > 1:
		return fmt.Errorf("sqlserver: %s: %d rows, want at most one", r.rs.name, len(r.rs.rows))
	}
	r.rs.next = 1
	return r.rs.Scan(dest...)
}

// scanner is a row that Scan reads: a *row or a *resultSet after Next.
type scanner interface{ Scan(dest ...any) error }

// scanValues assigns the driver values of one row to dest. It handles the
// destination types the adapter uses: *string, *int64, *int32, *time.Time,
// *any and sql.Scanner (sql.NullString, sql.NullTime, ...).
func scanValues(vals, dest []any) error {
	if len(vals) != len(dest) {
		return fmt.Errorf("%d columns, %d destinations", len(vals), len(dest))
	}
	for i, v := range vals {
		if err := assign(dest[i], v); err != nil {
			return fmt.Errorf("column %d: %w", i+1, err)
		}
	}
	return nil
}

var errNull = errors.New("NULL in a non-nullable destination")

func assign(dest, v any) error {
	switch d := dest.(type) {
	case *any:
		*d = v
		return nil
	case sql.Scanner:
		return d.Scan(v)
	}
	if v == nil {
		return errNull
	}
	switch d := dest.(type) {
	case *string:
		switch s := v.(type) {
		case string:
			*d = s
			return nil
		case []byte:
			*d = string(s)
			return nil
		}
	case *bool: // bit
		switch b := v.(type) {
		case bool:
			*d = b
			return nil
		case int64:
			*d = b != 0
			return nil
		}
	case *int64:
		if n, ok := v.(int64); ok {
			*d = n
			return nil
		}
	case *int32:
		if n, ok := v.(int64); ok {
			if int64(int32(n)) != n {
				return fmt.Errorf("value %d out of int32 range", n)
			}
			*d = int32(n)
			return nil
		}
	case *time.Time:
		if t, ok := v.(time.Time); ok {
			*d = t
			return nil
		}
	default:
		return fmt.Errorf("unsupported destination %T", dest)
	}
	return fmt.Errorf("cannot scan %T into %T", v, dest)
}
