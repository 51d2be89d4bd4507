package sqlserver

// Unit tests of the Go side only, with no SQL Server: the @held builder,
// error classification, result reading and the in-call retry, run against a
// fake database/sql driver that answers each statement as scripted. They say
// nothing about whether the T-SQL does what it should.

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/workflows"
)

func TestUnitHeldJSON(t *testing.T) {
	doc, err := heldJSON([]claims.Held{
		{Key: "k", Fence: 1},
		{Key: `a"b\c<é>`, Fence: 1<<62 + 1},
		{Key: "k", Fence: 1}, // listed twice: sent once
		{Key: "k", Fence: 2},
	})
	require.NoError(t, err)
	require.Equal(t, `[{"dedupe_key":"k","fence":1},{"dedupe_key":"a\"b\\c\u003cé\u003e","fence":4611686018427387905},{"dedupe_key":"k","fence":2}]`, doc)

	var back []map[string]any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&back))
	require.Equal(t, `a"b\c<é>`, back[1]["dedupe_key"])
	require.Equal(t, json.Number("4611686018427387905"), back[1]["fence"], "fences travel as exact integers")

	empty, err := heldJSON(nil)
	require.NoError(t, err)
	require.Equal(t, "[]", empty)
}

func TestUnitErrorClassification(t *testing.T) {
	chain := mssql.Error{Number: 3621, All: []mssql.Error{{Number: 2627}, {Number: 3621}}}
	dial := fmt.Errorf("unable to open tcp connection with host 'db:1433': %w",
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	// The forms of go-mssqldb v1.11's connect errors (tds.go connect,
	// protocol.go DialSqlConnection).
	dialTimeout := fmt.Errorf("unable to open tcp connection with host 'db:1433': %w",
		&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded})
	dns := &net.DNSError{Err: "no such host", Name: "db.example", IsNotFound: true}
	tlsPlain := fmt.Errorf("TLS Handshake failed: %v", errors.New("x509: certificate signed by unknown authority"))
	tlsStrict := fmt.Errorf("TLS Handshake failed: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})
	// Marked by Open's connector: whatever failed while the connection was
	// being opened.
	prelogin := connectError{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}}
	loginFailed := connectError{mssql.Error{Number: 18456, Message: "login error: Login failed for user 'app'."}}
	initFailed := connectError{driver.ErrBadConn}
	for _, tc := range []struct {
		name                         string
		err                          error
		inCall, retryable, duplicate bool
	}{
		{"deadlock victim 1205", mssql.Error{Number: 1205}, true, true, false},
		{"lock timeout 1222", mssql.Error{Number: 1222}, true, true, false},
		{"wrapped deadlock", fmt.Errorf("x: %w", mssql.Error{Number: 1205}), true, true, false},
		{"dup unique constraint 2627", mssql.Error{Number: 2627}, false, false, true},
		{"dup unique index 2601", mssql.Error{Number: 2601}, false, false, true},
		{"dup earlier in the chain", chain, false, false, true},
		{"other server error", mssql.Error{Number: 547}, false, false, false},
		{"bad connection before sending", driver.ErrBadConn, false, true, false},
		{"dial failure", dial, false, true, false},
		{"dial timeout", dialTimeout, false, true, false},
		{"DNS failure", dns, false, true, false},
		{"TLS handshake failure", tlsPlain, false, true, false},
		{"TLS handshake failure, strict encryption", tlsStrict, false, true, false},
		{"reset during prelogin (Open's pool)", prelogin, false, true, false},
		{"login failed (Open's pool)", loginFailed, false, true, false},
		{"SessionInitSQL failed (Open's pool)", initFailed, false, true, false},
		{"connection lost after sending", read, false, false, false},
		{"connection closed after sending", io.EOF, false, false, false},
		{"connection cut mid-result", fmt.Errorf("reading token: %w", io.ErrUnexpectedEOF), false, false, false},
		{"server message quoting the TLS text", mssql.Error{Number: 50000, Message: "TLS Handshake failed: x"}, false, false, false},
		{"cancelled", context.Canceled, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.inCall, retryInCall(tc.err), "retryInCall")
			require.Equal(t, tc.retryable, retryable(tc.err), "retryable")
			require.Equal(t, tc.duplicate, isDuplicate(tc.err), "isDuplicate")

			err := dbError("AcquireClaim", tc.err)
			require.Equal(t, tc.retryable, errors.Is(err, claims.ErrRetryable))
			require.True(t, strings.HasPrefix(err.Error(), "sqlserver: AcquireClaim: "), err.Error())
			var want, got mssql.Error
			if errors.As(tc.err, &want) { // not comparable: check it stays reachable
				require.ErrorAs(t, err, &got)
				require.Equal(t, want.Number, got.Number)
			} else {
				require.ErrorIs(t, err, tc.err)
			}
		})
	}
}

func TestUnitDatabaseUTC(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		paris = time.FixedZone("CET", 3600)
	}
	// A DSN with timezone=Europe/Paris makes go-mssqldb label the stored UTC
	// wall clock 10:00 as Paris time; it is 10:00 UTC all the same.
	wall := time.Date(2026, 1, 2, 10, 0, 0, 123456700, paris)
	require.Equal(t, time.Date(2026, 1, 2, 10, 0, 0, 123456700, time.UTC), databaseUTC(wall, "DATETIME2"))
	// A datetimeoffset carries its offset and is converted.
	off := time.Date(2026, 1, 2, 11, 0, 0, 0, time.FixedZone("", 3600))
	require.Equal(t, time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC), databaseUTC(off, "DATETIMEOFFSET"))
}

func TestUnitOpen(t *testing.T) {
	db, err := Open("sqlserver://user:pass@127.0.0.1:1?database=app&dial+timeout=1")
	require.NoError(t, err, "Open only builds a connector")
	require.NoError(t, db.Close())
	_, err = Open("sqlserver://user:pass@127.0.0.1:1?database=app&encrypt=nonsense")
	require.Error(t, err)
}

// TestUnitOpenMarksConnectErrors: on a pool made by Open, an error while
// the connection is being opened is retryable whatever its type, because
// database/sql sends a batch only on a connection that opened. The server
// here accepts the TCP connection and closes it at once, so go-mssqldb
// fails reading the prelogin answer: a read error that, on a connection
// that had sent a batch, would mean "may have committed".
func TestUnitOpenMarksConnectErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	dsn := "sqlserver://user:pass@" + ln.Addr().String() + "?database=app&dial+timeout=2&connection+timeout=2&disableretry=true"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	db, err := Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db)
	require.NoError(t, err)
	_, err = s.Renew(ctx, claims.Token{Key: "k", Owner: "a", Fence: 1}, time.Second)
	require.ErrorIs(t, err, claims.ErrRetryable, "nothing reached the server: %v", err)
	require.ErrorAs(t, err, new(connectError))
	require.Equal(t, 1, len(strings.Split(err.Error(), "sqlserver: RenewClaim: "))-1, err.Error())

	// The same failure on a pool not made by Open carries no mark; by its
	// type it cannot be told from a connection lost after a batch was sent.
	c, err := mssql.NewConnector(dsn)
	require.NoError(t, err)
	raw := sql.OpenDB(c)
	t.Cleanup(func() { _ = raw.Close() })
	_, err = raw.ExecContext(ctx, "SELECT 1")
	require.Error(t, err)
	require.False(t, retryable(err), "unmarked prelogin failure: %v", err)

	// A refused dial is classified on any pool.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	c, err = mssql.NewConnector("sqlserver://user:pass@" + addr + "?dial+timeout=2")
	require.NoError(t, err)
	refused := sql.OpenDB(c)
	t.Cleanup(func() { _ = refused.Close() })
	_, err = refused.ExecContext(ctx, "SELECT 1")
	require.Error(t, err)
	require.True(t, retryable(err), "refused dial: %v", err)
}

// TestUnitBounds: which batches travel behind which bound of bounds.sql,
// with which @bound_ms, and how the real texts are put together.
func TestUnitBounds(t *testing.T) {
	require.Equal(t, map[string]bool{"AcquireClaim": true, "ClaimForRecovery": true, "RequeueOrphan": true, "ClaimAvailable": true}, takeovers,
		"the takeover statements, as on Postgres")
	require.Equal(t, int64(1), boundMillis(300*time.Microsecond), "SET LOCK_TIMEOUT 0 would mean: never wait")
	require.Equal(t, int64(1500), boundMillis(1500*time.Millisecond))
	require.Equal(t, int64(math.MaxInt32), boundMillis(1000*24*time.Hour), "the batch casts @bound_ms to int")

	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult { return fakeResult{cols: resultColumns[name]} }
	ctx := claims.WithTxBound(context.Background(), 3*time.Second)
	tk := claims.Token{Key: "k", Owner: "a", Fence: 1}
	_, _ = f.store.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Minute})
	_, _, _ = f.store.ClaimForRecovery(ctx, 1, "a", time.Minute, time.Minute)
	_, _ = f.store.RequeueOrphan(ctx, 1, 0, "a", time.Minute)
	_, _ = f.store.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}, Limit: 2})
	for _, name := range []string{"AcquireClaim", "ClaimForRecovery", "RequeueOrphan", "ClaimAvailable"} {
		require.Equal(t, boundLockWait, f.bound(name), name)
		require.Equal(t, int64(3000), f.params[name]["bound_ms"], "%s: claims.TxBoundFrom(ctx)", name)
	}
	_, _ = f.store.Renew(ctx, tk, time.Minute)
	_, _ = f.store.CreateEpisode(ctx, episodes.New{ActorID: "x", Owner: "a", Lease: time.Minute})
	for _, name := range []string{"RenewClaim", "CreateEpisode"} {
		require.Empty(t, f.bound(name), "%s is not a takeover", name)
		require.NotContains(t, f.params[name], "bound_ms", name)
	}

	// The real texts: the bound's statement, then the batch's, in one call.
	s, err := New(nil)
	require.NoError(t, err)
	text, args, err := s.batch(ctx, "AcquireClaim", []any{sql.Named("dedupe_key", "k")})
	require.NoError(t, err)
	require.Equal(t, s.stmts[boundLockWait].SQL+"\n"+s.stmts["AcquireClaim"].SQL, text)
	require.Equal(t, []any{sql.Named("dedupe_key", "k"), sql.Named("bound_ms", int64(3000))}, args)
	inTx := s.inTx(&sql.Tx{}, 4*time.Second) // never used to send: batch only composes
	text, args, err = inTx.batch(ctx, "FinishEpisode", nil)
	require.NoError(t, err)
	require.Equal(t, s.stmts[boundTransaction].SQL+"\n"+s.stmts["FinishEpisode"].SQL, text)
	require.Equal(t, []any{sql.Named("bound_ms", int64(4000))}, args, "the transaction's bound, taken when it began")
	text, args, err = s.batch(ctx, "RenewClaim", nil)
	require.NoError(t, err)
	require.Equal(t, s.stmts["RenewClaim"].SQL, text)
	require.Empty(t, args)
}

// TestUnitGrantsStampLocalStart: every method that grants a work claim
// returns it stamped with a local time taken before the granting batch was
// sent (here: before the fake saw it, also when a deadlock made the Store
// send it again), so the run's local lease clock never starts late.
func TestUnitGrantsStampLocalStart(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := map[string][]driver.Value{
		"AcquireClaim":     {"k", "claimed", "a", now.Add(time.Minute), now, int64(1), int64(1), "fresh", "w"},
		"CreateEpisode":    {true, int64(7), now, "queued", "episode:7", int64(1), int64(1), now.Add(time.Minute), now, "fresh"},
		"ClaimForRecovery": {int64(7), "x", "e", "event", nil, nil, int64(2), int64(3), "", "", nil, now, "episode:7", int64(2), int64(2), now.Add(time.Minute), now, "steal"},
		"ClaimAvailable":   {int64(7), "x", "e", nil, "episode:7", int64(3), int64(1), now.Add(time.Minute), now, "reclaim", true, int64(1), "x", "e", "event", nil, nil, int64(1), int64(3), "", "", nil, nil, nil, nil, now, now, now, nil},
	}
	f := newFake(t)
	var (
		mu        sync.Mutex
		firstSeen = map[string]time.Time{}
	)
	f.answer = func(name string, _ map[string]any) fakeResult {
		mu.Lock()
		if _, ok := firstSeen[name]; !ok {
			firstSeen[name] = time.Now()
		}
		mu.Unlock()
		if f.calls(name) == 1 { // the first try is a deadlock victim
			return fakeResult{err: mssql.Error{Number: 1205}}
		}
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{rows[name]}}
	}
	ctx := context.Background()
	for name, grant := range map[string]func() (claims.Claim, error){
		"AcquireClaim": func() (claims.Claim, error) {
			return f.store.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Minute, WorkType: "w"})
		},
		"CreateEpisode": func() (claims.Claim, error) {
			c, err := f.store.CreateEpisode(ctx, episodes.New{ActorID: "x", Owner: "a", Lease: time.Minute})
			return c.Claim, err
		},
		"ClaimForRecovery": func() (claims.Claim, error) {
			_, c, err := f.store.ClaimForRecovery(ctx, 7, "a", time.Minute, time.Minute)
			return c, err
		},
		"ClaimAvailable": func() (claims.Claim, error) {
			d, err := f.store.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Lease: time.Minute,
				Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}, Limit: 1})
			if err != nil {
				return claims.Claim{}, err
			}
			require.Len(t, d, 1)
			return d[0].Claim, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := time.Now()
			c, err := grant()
			after := time.Now()
			require.NoError(t, err)
			require.NotZero(t, c.Fence)
			require.Equal(t, 2, f.calls(name), "sent again after the deadlock")
			start := c.LocalStart()
			require.False(t, start.IsZero(), "a claim without a local start is refused by the heartbeat")
			require.False(t, start.Before(before), "taken during the call")
			require.False(t, start.After(firstSeen[name]), "taken before the first send")
			require.False(t, start.After(after))
		})
	}
}

// TestUnitStatementsLoad needs only the embedded T-SQL: New must find every
// statement this package runs.
func TestUnitStatementsLoad(t *testing.T) {
	s, err := New(nil)
	require.NoError(t, err)
	for name := range resultColumns {
		require.NotEmpty(t, strings.TrimSpace(s.stmts[name].SQL), name)
	}
}

// TestUnitCallsMatchResultColumns keeps resultColumns and the calls in sync:
// every s.query/s.queryRow/s.execRows/s.exec names a statement listed there,
// exec exactly the ones without a result set, and every listed statement is
// run.
func TestUnitCallsMatchResultColumns(t *testing.T) {
	calls := map[string]string{} // statement -> method
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"query", "queryRow", "execRows", "exec"}, sel.Sel.Name) {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "s" {
				return true
			}
			lit, ok := call.Args[1].(*ast.BasicLit)
			require.True(t, ok, "%s: statement name is not a literal", fset.Position(call.Pos()))
			name, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			calls[name] = sel.Sel.Name
			return true
		})
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(resultColumns)), slices.Collect(maps.Keys(calls)))
	stmts, err := queries.SQLServer()
	require.NoError(t, err)
	kind := map[string]string{"query": ":many", "queryRow": ":one", "execRows": ":execrows", "exec": ":exec"}
	for name, method := range calls {
		require.Equal(t, resultColumns[name] == nil, method == "exec", "%s run with %s", name, method)
		require.Equal(t, kind[method], stmts[name].Kind, "%s is run with %s", name, method)
	}
}

// TestUnitParamsMatchPostgres runs every Store method against the fake
// driver and checks the @ parameters each sends: the sqlc.arg names of the
// Postgres statement of the same name (RenewClaims and ReleaseClaims: @held
// instead of the two arrays), with the Go types the contract fixes.
func TestUnitParamsMatchPostgres(t *testing.T) {
	pg := postgresParams(t)
	pg["RenewClaims"] = []string{"held", "lease_ms", "owner_node"}
	pg["ReleaseClaims"] = []string{"held", "owner_node"}
	// Postgres unnests the batch's items from parallel arrays (cheaper for
	// its server than a JSON document); T-SQL reads them from @items
	// (OPENJSON), as SQLite does.
	pg["CreateDeferredEpisodes"] = slices.DeleteFunc(slices.Clone(pg["CreateDeferredEpisodes"]), func(p string) bool {
		return slices.Contains([]string{"dedupe_keys", "key_versions", "trigger_refs", "payloads", "trace_parents"}, p)
	})
	pg["CreateDeferredEpisodes"] = append(pg["CreateDeferredEpisodes"], "items")

	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		switch {
		case name == "TryMaintenanceLock": // acquired, so Maintain sends every batch
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{true}}}
		case name == "ListWaitingForNode": // overdue, so Maintain raises its finding
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{waitingRow(true)}}
		case slices.Equal(resultColumns[name], rowsAffected):
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{int64(0)}}}
		}
		return fakeResult{cols: resultColumns[name]}
	}
	s := f.store
	ctx := context.Background()
	tk := claims.Token{Key: "k", Owner: "a", Fence: 7}
	_, _ = s.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Second, WorkType: "w"})
	_, _ = s.Renew(ctx, tk, time.Second)
	_, _ = s.RenewMany(ctx, "a", []claims.Held{{Key: "k", Fence: 7}}, time.Second)
	_ = s.Complete(ctx, tk)
	_ = s.Fail(ctx, tk, nil)
	_ = s.Release(ctx, tk)
	_, _ = s.ListExpired(ctx, 10)
	_, _ = s.CreateEpisode(ctx, episodes.New{ActorID: "x", DedupeKey: "", MaxAttempts: 3, Owner: "a", Lease: time.Second})
	_, _ = s.StartEpisode(ctx, 1, tk)
	_ = s.AppendStep(ctx, 1, tk, 2, json.RawMessage(`{}`), time.Second)
	_ = s.FinishEpisode(ctx, 1, tk, episodes.Finish{Status: episodes.StatusDone})
	_, _ = s.RetryEpisode(ctx, 1, tk, episodes.Retry{ErrorClass: "error", Backoff: time.Second})
	_, _ = s.FinishEpisodes(ctx, "a", []episodes.FinishItem{{ID: 1, Token: tk, Finish: episodes.Finish{Status: episodes.StatusDone}}})
	_, _ = s.GetEpisode(ctx, 1)
	_, _ = s.ListSteps(ctx, 1)
	_, _ = s.ListOrphans(ctx, episodes.OrphanQuery{Limit: 5})
	_, _, _ = s.ClaimForRecovery(ctx, 1, "a", time.Second, time.Minute)
	_, _ = s.RequeueOrphan(ctx, 1, 0, "a", time.Minute)
	_, _ = s.CancelEpisode(ctx, 1, json.RawMessage(`{"reason":"x"}`))
	_, _ = s.ListCancelRequests(ctx, "a")
	_, _ = s.RequeueEpisode(ctx, 1, "a")
	_, _ = s.liveEpisode(ctx, "k", 0)
	_, _, _ = s.KeyVersion(ctx)
	_, _, _ = s.SwitchKeyVersion(ctx, episodes.KeySwitch{})
	_ = s.InTx(ctx, func(tx workflows.Tx) error { _, err := tx.(*Store).HoldClaim(ctx, tk); return err })
	_, _, _ = s.AgentRecoveryPolicy(ctx, "x", "y")
	_ = s.PutAgentDefinition(ctx, episodes.Definition{ActorID: "x", ExpectationID: "y", RecoveryPolicy: "retry", MaxAttempts: 3})
	_, _ = s.ListClaims(ctx, claims.ListQuery{Owner: "a", ExpiredOnly: true, Limit: 10})
	_, _ = s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", MaxAttempts: 3}})
	_, _ = s.CreateDeferredEpisodes(ctx, episodes.DeferredBatch{New: episodes.New{ActorID: "x", MaxAttempts: 3},
		Items: []episodes.BatchItem{{DedupeKey: "k"}}})
	_, _ = s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Lease: time.Second, Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}, {ActorID: `y"z`, ExpectationID: "f"}}, Limit: 5})
	_, _ = s.ExpireAvailable(ctx, episodes.ExpireQuery{Env: "rc", TTL: time.Hour})
	_, _, _ = s.NextAvailableDue(ctx, episodes.AvailableQuery{Env: "rc", Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}})
	_, _ = s.RaiseFinding(ctx, tk, 1, findings.Raise{Key: "f", Class: "c", Data: json.RawMessage(`{"n":1}`)})
	_, _ = s.UpdateFinding(ctx, tk, 1, "f", findings.Update{Severity: "high"})
	_, _ = s.ClearFinding(ctx, tk, 1, "f")
	_, _ = s.ActiveFindings(ctx, findings.Query{Env: "rc", Limit: 10})
	_, _ = s.ReleaseMany(ctx, "a", []claims.Held{{Key: "k", Fence: 7}})
	_ = s.RegisterNode(ctx, membership.Member{ID: "n", Stack: "s", Env: "rc", Mode: "full",
		Runnable: []episodes.Runnable{{ActorID: "billing", ExpectationID: "charge"}}})
	_ = s.HeartbeatNode(ctx, membership.Member{ID: "n", Mode: "full", Draining: true})
	_ = s.DeregisterNode(ctx, "n")
	_, _ = s.ListNodes(ctx)
	_, _, _ = s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "c-42"})
	_, _ = s.GetRunningWorkflowInstance(ctx, "w", "c-42", "")
	_ = s.InsertWorkflowStep(ctx, 1, "a", 2)
	_, _ = s.LockWorkflowInstance(ctx, 1)
	_, _ = s.GetWorkflowInstance(ctx, 1)
	_, _ = s.ListWorkflowSteps(ctx, 1)
	_, _, _ = s.GetWorkflowStepByEpisode(ctx, 9)
	_, _ = s.StartWorkflowStep(ctx, 1, "a", workflows.StepPending, 0, 9)
	_, _ = s.EndWorkflowStep(ctx, 1, "a", 9, workflows.StepDone)
	_, _ = s.SkipPendingWorkflowSteps(ctx, 1)
	_, _ = s.FinishWorkflowInstance(ctx, 1, workflows.InstanceFailed, json.RawMessage(`{"why":"x"}`))
	_, _ = s.ListStalledWorkflowSteps(ctx, workflows.StalledQuery{Env: "rc", Limit: 10})
	_, _ = s.ParkWorkflowInstance(ctx, 1, "renamed")
	_, _ = s.ListWorkflowInstances(ctx, workflows.ListQuery{WorkflowID: "w", Status: workflows.InstanceRunning, Limit: 10})
	_, _, _ = s.GetAgentMaxAttempts(ctx, "x", "y")
	_ = s.PutWorkflowDefinition(ctx, workflows.StoredDefinition{WorkflowID: "w", Version: "0123456789abcdef",
		Definition: json.RawMessage(`{"steps":[]}`), RecordedBy: "n"})
	_, _, _ = s.GetWorkflowDefinition(ctx, "w", "0123456789abcdef")
	_, _ = s.MoveWorkflowStep(ctx, 1, "a", "b", 2, workflows.StepRunning, 9)
	_, _ = s.DeleteWorkflowStep(ctx, 1, "a", workflows.StepPending, 0)
	_, _ = s.SetWorkflowDefinitionVersion(ctx, 1, "0123456789abcdef")
	_, _ = s.InspectEpisodes(ctx, inspect.EpisodeQuery{Status: episodes.StatusFailed, ErrorClass: "error", DedupeKey: "k", Limit: 10})
	_, _ = s.InspectEpisode(ctx, 1)
	_, _ = s.InspectJournal(ctx, 1, 10)
	_, _ = s.DashboardClock(ctx)
	_, _ = s.DashboardNodes(ctx)
	_, _ = s.DashboardDefinitions(ctx)
	_, _ = s.DashboardStatusCounts(ctx)
	_, _ = s.DashboardOutcomes(ctx, inspect.SeriesQuery{Window: time.Hour, Bucket: time.Minute})
	_, _ = s.DashboardHandovers(ctx, inspect.SeriesQuery{Window: time.Hour, Bucket: time.Minute})
	_, _ = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Status: episodes.StatusFailed, Env: new(string), DedupeKeyContains: "a%_[b", BeforeID: 9, Limit: 10})
	_, _ = s.DashboardEpisode(ctx, 1)
	_, _ = s.DashboardGrants(ctx, 1)
	_, _ = s.DashboardJournal(ctx, 1, 10)
	_, _ = s.DashboardWorkflows(ctx, inspect.WorkflowQuery{InstanceID: 1, Limit: 10})
	_, _ = s.DashboardFindings(ctx, inspect.FindingQuery{Status: "active", KeyContains: "k", Limit: 10})
	_, _ = s.DashboardFindingHistory(ctx, "rc", "k", 10)
	res, err := s.Maintain(ctx, maintenance.Plan{
		Retention: 30 * 24 * time.Hour, ClaimHorizon: 90 * 24 * time.Hour, RequestTTL: time.Hour,
		NodeStaleAfter: time.Minute, Batch: 500, WaitingForNodeAfter: 40 * 24 * time.Hour,
	})
	require.NoError(t, err)
	require.True(t, res.Ran)

	wantType := map[string]any{
		"ttl_ms":   int64(0),
		"lease_ms": int64(0), "stale_after_ms": int64(0), "fence": int64(0), "id": int64(0),
		"episode_id": int64(0), "step_no": int32(0), "max_attempts": int32(0), "max_rows": int32(0),
		"expired_only": false, "stale_only": false, "all_envs": false, "draining": false, "parked_only": false,
		"retention_ms": int64(0), "horizon_ms": int64(0),
		"instance_id": int64(0), "new_episode_id": int64(0), "from_episode_id": int64(0),
		"bound_ms": int64(0), "delay_ms": int64(0), "backoff_ms": int64(0), "start": false, "attempts": int32(0),
		"before_id": int64(0), "window_ms": int64(0), "bucket_ms": int64(0),
		"silent_after_ms": int64(0), "overdue_after_ms": int64(0),
		"key_version": int16(0), "live_ms": int64(0),
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(resultColumns)), slices.Collect(maps.Keys(f.params)), "every statement ran")
	// The bounds travel in the batch they top: BoundLockWait on the
	// takeovers (Postgres's take bound_ms themselves and set their own
	// lock_timeout), BoundTransaction, with the Postgres bound's
	// parameters, on every batch of Maintain's transaction
	// (ExpireAvailable ran there last).
	for _, name := range []string{"AcquireClaim", "ClaimForRecovery", "ClaimAvailable", "RequeueOrphan"} {
		require.Contains(t, pg[name], "bound_ms", "Postgres's %s bounds its own lock wait", name)
	}
	require.NotContains(t, pg, boundLockWait, "Postgres sends no BoundLockWait")
	require.Equal(t, []string{"bound_ms"}, pg[boundTransaction], "Postgres bounds.sql declares BoundTransaction(bound_ms)")
	wantBound := map[string]string{
		"AcquireClaim": boundLockWait, "ClaimForRecovery": boundLockWait, "ClaimAvailable": boundLockWait,
		"RequeueOrphan": boundLockWait, "HoldClaim": boundTransaction, "TryMaintenanceLock": boundTransaction, "ArchiveEpisodes": boundTransaction,
		"PurgeArchivedSteps": boundTransaction, "MarkJournalsPurged": boundTransaction,
		"ExpireAvailable": boundTransaction, "DeleteSpentClaims": boundTransaction,
		"DeleteStaleNodes": boundTransaction, "ListWaitingForNode": boundTransaction,
		"RaiseWaitingForNodeFinding": boundTransaction, "ClearWaitingForNodeFindings": boundTransaction,
	}
	for name := range f.params {
		require.Equal(t, wantBound[name], f.bounds[name], "%s is sent behind the wrong bound", name)
		if b := wantBound[name]; b != "" {
			if b == boundTransaction {
				pg[name] = append(slices.Clone(pg[name]), pg[b]...)
			}
			require.Equal(t, claims.TxBound(claims.DefaultLease).Milliseconds(), f.params[name]["bound_ms"],
				"%s: no bound on ctx: claims.TxBound(DefaultLease)", name)
		}
	}
	for name, args := range f.params {
		require.ElementsMatch(t, pg[name], slices.Collect(maps.Keys(args)), "%s parameters", name)
		for p, v := range args {
			if w, ok := wantType[p]; ok {
				require.IsType(t, w, v, "%s @%s", name, p)
			} else if v != nil {
				require.IsType(t, "", v, "%s @%s", name, p)
			}
		}
	}
	// NULLs: no dedupe key, no JSON.
	require.Nil(t, f.params["CreateEpisode"]["dedupe_key"])
	require.Nil(t, f.params["CreateEpisode"]["payload"])
	require.Nil(t, f.params["FailClaim"]["error_detail"])
	require.Equal(t, "{}", f.params["AppendStep"]["data"])
	require.Equal(t, `[{"dedupe_key":"k","fence":7}]`, f.params["RenewClaims"]["held"])
	require.Equal(t, int64(1000), f.params["AcquireClaim"]["lease_ms"])
	require.Equal(t, `[{"actor_id":"x","expectation_id":"e"},{"actor_id":"y\"z","expectation_id":"f"}]`, f.params["ClaimAvailable"]["runnable"], "the (actor, expectation) pairs travel as one JSON array")
	require.Equal(t, int32(5), f.params["ClaimAvailable"]["max_rows"])
	require.Nil(t, f.params["CreateDeferredEpisode"]["opts"])
	require.Nil(t, f.params["CreateDeferredEpisode"]["dedupe_key"])
	require.Equal(t, "", f.params["CreateDeferredEpisode"]["source_env"], "the unset env is '', never NULL")
	require.Equal(t, int64(3_600_000), f.params["ExpireAvailable"]["ttl_ms"])
	require.Equal(t, `{"n":1}`, f.params["RaiseFinding"]["data"])
	require.Nil(t, f.params["UpdateFinding"]["data"])
	require.Equal(t, `[{"dedupe_key":"k","fence":7}]`, f.params["ReleaseClaims"]["held"])
	require.Equal(t, true, f.params["HeartbeatNode"]["draining"])
	require.Equal(t, `[{"actor_id":"billing","expectation_id":"charge"}]`, f.params["RegisterNode"]["runnable"],
		"the node's pairs travel as ClaimAvailable's JSON array")
	require.Equal(t, `[]`, f.params["HeartbeatNode"]["runnable"], "no pairs is an empty array, never NULL")
	require.Equal(t, int64(40*24*3_600_000), f.params["ListWaitingForNode"]["overdue_after_ms"])
	require.Equal(t, membership.DefaultSilentAfter.Milliseconds(), f.params["ListWaitingForNode"]["silent_after_ms"])
	require.Equal(t, "leasehold/waiting-for-node/rc/billing/refund", f.params["RaiseWaitingForNodeFinding"]["finding_key"])
	require.Equal(t, int64(9), f.params["RaiseWaitingForNodeFinding"]["episode_id"], "raised by the oldest waiting episode")
	require.Equal(t, `[{"env":"rc","finding_key":"leasehold/waiting-for-node/rc/billing/refund"}]`,
		f.params["ClearWaitingForNodeFindings"]["waiting"])
	// Durations over 24.8 days travel whole, as bigint milliseconds: the
	// batches split them for DATEADD.
	require.Equal(t, int64(30*24*3_600_000), f.params["ArchiveEpisodes"]["retention_ms"])
	require.Equal(t, int64(90*24*3_600_000), f.params["DeleteSpentClaims"]["horizon_ms"])
	require.Equal(t, int32(500), f.params["PurgeArchivedSteps"]["max_rows"])
	require.Equal(t, int64(60_000), f.params["DeleteStaleNodes"]["stale_after_ms"])
	require.Equal(t, true, f.params["ExpireAvailable"]["all_envs"], "maintenance expires every env")
	require.Equal(t, int64(3_600_000), f.params["ExpireAvailable"]["ttl_ms"])
	require.Nil(t, f.params["CreateWorkflowInstance"]["payload"])
	require.Equal(t, "", f.params["CreateWorkflowInstance"]["env"], "the unset env is '', never NULL")
	require.Equal(t, `{"why":"x"}`, f.params["FinishWorkflowInstance"]["error_detail"])
	require.Equal(t, int64(0), f.params["StartWorkflowStep"]["from_episode_id"], "no episode yet is 0, as coalesce makes it")
	require.Equal(t, int32(10), f.params["ListStalledWorkflowSteps"]["max_rows"])
}

// postgresParams reads the sqlc.arg/sqlc.narg names of every Postgres
// statement from sql/queries/postgres.
func postgresParams(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../sql/queries/postgres/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	nameRe := regexp.MustCompile(`(?m)^-- name: (\w+) :\w+`)
	argRe := regexp.MustCompile(`sqlc\.n?arg\((\w+)\)`)
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(b)
		locs := nameRe.FindAllStringSubmatchIndex(src, -1)
		for i, loc := range locs {
			end := len(src)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			name := src[loc[2]:loc[3]]
			seen := map[string]bool{}
			for _, m := range argRe.FindAllStringSubmatch(src[loc[1]:end], -1) {
				if !seen[m[1]] {
					seen[m[1]] = true
					out[name] = append(out[name], m[1])
				}
			}
		}
	}
	return out
}

func TestUnitEmptyResultMapping(t *testing.T) {
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult { return fakeResult{cols: resultColumns[name]} }
	s, ctx := f.store, context.Background()
	tk := claims.Token{Key: "k", Owner: "a", Fence: 1}

	_, err := s.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Second})
	require.ErrorIs(t, err, claims.ErrBusy)
	_, err = s.Renew(ctx, tk, time.Second)
	require.ErrorIs(t, err, claims.ErrNotOwner)
	require.ErrorIs(t, s.Complete(ctx, tk), claims.ErrNotOwner)
	require.ErrorIs(t, s.Fail(ctx, tk, nil), claims.ErrNotOwner)
	require.ErrorIs(t, s.Release(ctx, tk), claims.ErrNotOwner)
	renewed, err := s.RenewMany(ctx, "a", []claims.Held{{Key: "k", Fence: 1}}, time.Second)
	require.NoError(t, err)
	require.Empty(t, renewed)
	res, err := s.CreateEpisode(ctx, episodes.New{ActorID: "x", DedupeKey: "d"})
	require.NoError(t, err)
	require.False(t, res.Created)
	_, err = s.StartEpisode(ctx, 1, tk)
	require.ErrorIs(t, err, episodes.ErrLeaseLost)
	require.ErrorIs(t, s.AppendStep(ctx, 1, tk, 1, nil, time.Second), episodes.ErrLeaseLost)
	require.ErrorIs(t, s.FinishEpisode(ctx, 1, tk, episodes.Finish{Status: episodes.StatusDone}), episodes.ErrLeaseLost)
	_, err = s.GetEpisode(ctx, 42)
	require.ErrorIs(t, err, episodes.ErrNotFound)
	_, _, err = s.ClaimForRecovery(ctx, 1, "a", time.Second, time.Second)
	require.ErrorIs(t, err, claims.ErrBusy)
	_, found, err := s.AgentRecoveryPolicy(ctx, "x", "y")
	require.NoError(t, err)
	require.False(t, found)
	none, err := s.ListExpired(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, 1, f.calls("AcquireClaim"), "no retry of a busy answer")

	deferred, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", DedupeKey: "d"}})
	require.NoError(t, err)
	require.False(t, deferred.Created)
	taken, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}, Limit: 5})
	require.NoError(t, err)
	require.Empty(t, taken, "no row: nothing was due")
	expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, expired)
	active, err := s.ActiveFindings(ctx, findings.Query{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, active)
	// The findings batches always answer one row: none breaks the contract
	// and is an error, not a lost lease.
	_, err = s.RaiseFinding(ctx, tk, 1, findings.Raise{Key: "f"})
	require.Error(t, err)
	require.NotErrorIs(t, err, findings.ErrLeaseLost)
	_, err = s.ClearFinding(ctx, tk, 1, "f")
	require.Error(t, err)
	require.NotErrorIs(t, err, findings.ErrLeaseLost)

	_, created, err := s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
	require.NoError(t, err)
	require.False(t, created, "no row: an instance is running")
	_, err = s.GetRunningWorkflowInstance(ctx, "w", "s", "")
	require.ErrorIs(t, err, ErrNoInstance)
	_, err = s.GetWorkflowInstance(ctx, 1)
	require.ErrorIs(t, err, ErrNoInstance)
	_, err = s.LockWorkflowInstance(ctx, 1)
	require.ErrorIs(t, err, ErrNoInstance)
	_, found, err = s.GetWorkflowStepByEpisode(ctx, 1)
	require.NoError(t, err)
	require.False(t, found)
	steps, err := s.ListWorkflowSteps(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, steps)
	// An :execrows batch always answers its count: none breaks the contract.
	_, err = s.StartWorkflowStep(ctx, 1, "a", workflows.StepPending, 0, 2)
	require.ErrorContains(t, err, "sqlserver: StartWorkflowStep: no row count returned")
}

// TestUnitFinishEpisodeThrowInTx: FinishEpisode's THROW 51001, which it
// sends inside a caller's transaction when it matched no row (XACT_ABORT
// has rolled that transaction back: TestStaticFinishEpisodeDoomsTheCallersTransaction),
// is claims.ErrLeaseLost, and the batch is sent once (sent again, it would
// run in autocommit). On its own an empty answer still is.
func TestUnitFinishEpisodeThrowInTx(t *testing.T) {
	f := newFake(t)
	f.answer = func(string, map[string]any) fakeResult {
		return fakeResult{err: mssql.Error{Number: HoldLostError, Message: "leasehold: lease lost"}}
	}
	ctx := context.Background()
	tk := claims.Token{Key: "k", Owner: "a", Fence: 1}
	tx, err := f.store.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	err = f.store.WithTx(tx).FinishEpisode(ctx, 9, tk, episodes.Finish{Status: episodes.StatusDone})
	require.ErrorIs(t, err, episodes.ErrLeaseLost)
	require.NotErrorIs(t, err, claims.ErrRetryable)
	require.Equal(t, 1, f.calls("FinishEpisode"))

	f.answer = func(name string, _ map[string]any) fakeResult { return fakeResult{cols: resultColumns[name]} }
	require.ErrorIs(t, f.store.FinishEpisode(ctx, 9, tk, episodes.Finish{Status: episodes.StatusDone}), episodes.ErrLeaseLost)
}

func TestUnitDuplicateKeyMapping(t *testing.T) {
	f := newFake(t)
	f.answer = func(string, map[string]any) fakeResult { return fakeResult{err: mssql.Error{Number: 2601}} }
	s, ctx := f.store, context.Background()
	_, err := s.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Second})
	require.ErrorIs(t, err, claims.ErrBusy)
	res, err := s.CreateEpisode(ctx, episodes.New{ActorID: "x", DedupeKey: "d"})
	require.NoError(t, err)
	require.False(t, res.Created)
	_, _, err = s.ClaimForRecovery(ctx, 1, "a", time.Second, time.Second)
	require.ErrorIs(t, err, claims.ErrBusy)
	deferred, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", DedupeKey: "d"}})
	require.NoError(t, err, "a duplicate deferred episode is not an error")
	require.False(t, deferred.Created)
	_, created, err := s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
	require.NoError(t, err, "outside a transaction a duplicate instance is not an error")
	require.False(t, created)
	// Elsewhere a duplicate is an error like any other (as in Postgres).
	err = s.AppendStep(ctx, 1, claims.Token{Key: "k", Owner: "a", Fence: 1}, 1, nil, time.Second)
	require.Error(t, err)
	require.NotErrorIs(t, err, episodes.ErrLeaseLost)
	require.NotErrorIs(t, err, claims.ErrRetryable)
	require.Equal(t, 1, f.calls("AcquireClaim"), "a duplicate is not retried")
}

func TestUnitDeadlockRetriedInCall(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claimRow := []driver.Value{"k", "claimed", "a", now.Add(time.Second), now, int64(1), int64(1), "fresh", "w"}
	for _, midStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("midStream=%v", midStream), func(t *testing.T) {
			f := newFake(t)
			f.answer = func(name string, _ map[string]any) fakeResult {
				if f.calls(name) <= 2 {
					r := fakeResult{cols: resultColumns[name], err: mssql.Error{Number: 1205}}
					if midStream { // OUTPUT had begun: a row, then the error
						r.rows, r.errAfterRows = [][]driver.Value{claimRow}, true
					}
					return r
				}
				return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{claimRow}}
			}
			c, err := f.store.Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Second})
			require.NoError(t, err)
			require.Equal(t, 3, f.calls("AcquireClaim"))
			want := claims.Claim{
				Token: claims.Token{Key: "k", Owner: "a", Fence: 1}, State: claims.StateClaimed, Attempt: 1,
				LeaseUntil: now.Add(time.Second), ClaimedAt: now, Grant: claims.GrantFresh, WorkType: "w",
			}
			require.False(t, c.LocalStart().IsZero(), "a granted claim carries its local start")
			want.SetLocalStart(c.LocalStart())
			require.Equal(t, want, c)
		})
	}
}

func TestUnitPersistentDeadlockIsRetryable(t *testing.T) {
	for _, number := range []int32{1205, 1222} {
		f := newFake(t)
		f.answer = func(string, map[string]any) fakeResult { return fakeResult{err: mssql.Error{Number: number}} }
		_, err := f.store.Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Second})
		require.ErrorIs(t, err, claims.ErrRetryable)
		require.NotErrorIs(t, err, claims.ErrBusy)
		require.Equal(t, maxAttempts, f.calls("AcquireClaim"))
		require.ErrorContains(t, err, "sqlserver: AcquireClaim: ")

		err = f.store.PutAgentDefinition(context.Background(), episodes.Definition{ActorID: "x", ExpectationID: "y", RecoveryPolicy: "p"})
		require.ErrorIs(t, err, claims.ErrRetryable)
		require.Equal(t, maxAttempts, f.calls("PutAgentDefinition"), "exec retries too")
	}
}

func TestUnitCancelledDuringBackoff(t *testing.T) {
	f := newFake(t)
	f.store.backoff = func(int) time.Duration { return time.Hour }
	ctx, cancel := context.WithCancel(context.Background())
	f.answer = func(string, map[string]any) fakeResult {
		cancel()
		return fakeResult{err: mssql.Error{Number: 1205}}
	}
	_, err := f.store.Renew(ctx, claims.Token{Key: "k", Owner: "a", Fence: 1}, time.Second)
	require.ErrorIs(t, err, claims.ErrRetryable, "the victim's batch was rolled back")
	require.Equal(t, 1, f.calls("RenewClaim"))
}

func TestUnitResultContract(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx, tk := context.Background(), claims.Token{Key: "k", Owner: "a", Fence: 1}

	f := newFake(t)
	f.answer = func(string, map[string]any) fakeResult {
		return fakeResult{cols: []string{"until"}, rows: [][]driver.Value{{now}}}
	}
	_, err := f.store.Renew(ctx, tk, time.Second)
	require.ErrorContains(t, err, "result columns [until], want [lease_until]")

	f.answer = func(string, map[string]any) fakeResult {
		return fakeResult{cols: []string{"LEASE_UNTIL"}, rows: [][]driver.Value{{now}, {now}}}
	}
	_, err = f.store.Renew(ctx, tk, time.Second)
	require.ErrorContains(t, err, "2 rows, want at most one")

	f.answer = func(string, map[string]any) fakeResult {
		return fakeResult{cols: []string{"fence"}, rows: [][]driver.Value{{int64(1)}}, second: true}
	}
	require.ErrorContains(t, f.store.Complete(ctx, tk), "more than one result set")

	f.answer = func(string, map[string]any) fakeResult {
		return fakeResult{cols: []string{"lease_until"}, rows: [][]driver.Value{{nil}}}
	}
	_, err = f.store.Renew(ctx, tk, time.Second)
	require.ErrorContains(t, err, "sqlserver: RenewClaim: column 1: NULL")
}

func TestUnitScanEpisode(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{
			int64(9), "actor", "exp", "event", `{"e":1}`, nil,
			"running", nil, int64(2), int64(3), nil, "stack", "env",
			"node-a", `{"p":true}`, nil, nil, nil, created,
			created, nil, created, nil, created,
		}}}
	}
	e, err := f.store.GetEpisode(context.Background(), 9)
	require.NoError(t, err)
	require.Equal(t, episodes.Episode{
		ID: 9, ActorID: "actor", ExpectationID: "exp", TriggerType: episodes.TriggerEvent,
		TriggerRef: json.RawMessage(`{"e":1}`), Status: episodes.StatusRunning, Attempts: 2, MaxAttempts: 3,
		SourceStack: "stack", SourceEnv: "env", OwnerNode: "node-a", Payload: json.RawMessage(`{"p":true}`),
		CreatedAt: created, StartedAt: &created, LastStepAt: &created,
	}, e)
}

func TestUnitAvailable(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ctx := context.Background()
	f := newFake(t)
	var answer map[string][][]driver.Value
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: answer[name]}
	}
	s := f.store
	runnable := []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}

	t.Run("create", func(t *testing.T) {
		answer = map[string][][]driver.Value{"CreateDeferredEpisode": {{true, int64(9), now}}}
		n := episodes.New{ActorID: "x", ExpectationID: "e", TriggerType: episodes.TriggerEvent, DedupeKey: "d", MaxAttempts: 2, SourceEnv: "rc"}
		got, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: n, Opts: json.RawMessage(`{"o":1}`), Delay: time.Second})
		require.NoError(t, err)
		require.Equal(t, episodes.DeferredCreated{
			Created: true,
			Episode: episodes.Episode{
				ID: 9, ActorID: "x", ExpectationID: "e", TriggerType: episodes.TriggerEvent, DedupeKey: "d",
				Status: episodes.StatusQueued, MaxAttempts: 2, SourceEnv: "rc", CreatedAt: now,
			},
		}, got)
		require.Equal(t, `{"o":1}`, f.params["CreateDeferredEpisode"]["opts"])
		require.Equal(t, int64(1000), f.params["CreateDeferredEpisode"]["delay_ms"])
	})

	t.Run("create batch", func(t *testing.T) {
		answer = map[string][][]driver.Value{
			"CreateDeferredEpisodes": {{true, int64(9), now, "a"}, {false, int64(0), now, "b"}},
			"FindLiveEpisode":        {{int64(4)}},
		}
		got, err := s.CreateDeferredEpisodes(ctx, episodes.DeferredBatch{New: episodes.New{ActorID: "x", ExpectationID: "e", MaxAttempts: 2},
			Items: []episodes.BatchItem{{DedupeKey: "b"}, {DedupeKey: "a"}}})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, episodes.DeferredCreated{ExistingID: 4}, got[0], "a duplicate: the live episode, read with FindLiveEpisode")
		require.True(t, got[1].Created)
		require.Equal(t, int64(9), got[1].Episode.ID)
		require.Equal(t, "a", got[1].Episode.DedupeKey, "in the items' order, matched by key")
	})

	t.Run("claim", func(t *testing.T) {
		before := f.calls("ClaimAvailable")
		got, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Limit: 5})
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Runnable: runnable})
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, before, f.calls("ClaimAvailable"), "no actors or no room: nothing is sent")

		answer = map[string][][]driver.Value{"ClaimAvailable": {
			{int64(9), "x", "e", `{"o":1}`, "k", int64(4), int64(2), now.Add(time.Minute), now, "reclaim",
				true, int64(3), "x", "e", "event", `{"t":1}`, "k", int64(1), int64(3), "", "prod", `{"p":1}`, nil, nil, nil,
				now.Add(-time.Hour), now, now, "00-tp"},
			// Held live elsewhere: picked, not granted, not started.
			{int64(10), "x", "e", nil, "", int64(0), int64(0), now, now, "",
				false, int64(1), nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
		}}
		got, err = s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Lease: time.Minute, Env: "prod", Stack: "s",
			Runnable: runnable, Limit: 5})
		require.NoError(t, err)
		require.Equal(t, map[string]any{"max_rows": int32(5), "source_env": "prod", "source_stack": "s",
			"runnable": `[{"actor_id":"x","expectation_id":"e"}]`, "owner_node": "a", "lease_ms": int64(60_000),
			"bound_ms": claims.TxBound(claims.DefaultLease).Milliseconds()}, f.params["ClaimAvailable"])
		require.Len(t, got, 2)
		want := claims.Claim{
			Token: claims.Token{Key: "k", Owner: "a", Fence: 4}, State: claims.StateClaimed, Attempt: 2,
			LeaseUntil: now.Add(time.Minute), ClaimedAt: now, Grant: claims.GrantReclaim, WorkType: "episode",
		}
		require.False(t, got[0].Claim.LocalStart().IsZero(), "a granted claim carries its local start")
		want.SetLocalStart(got[0].Claim.LocalStart())
		started := now
		require.Equal(t, episodes.Dispatched{EpisodeID: 9, ActorID: "x", ExpectationID: "e", Opts: json.RawMessage(`{"o":1}`),
			Claim: want, Started: true, NextStep: 3, Episode: episodes.Episode{
				ID: 9, ActorID: "x", ExpectationID: "e", TriggerType: episodes.TriggerEvent, TriggerRef: json.RawMessage(`{"t":1}`),
				DedupeKey: "k", Status: episodes.StatusRunning, Attempts: 1, MaxAttempts: 3, SourceEnv: "prod", OwnerNode: "a",
				Payload: json.RawMessage(`{"p":1}`), CreatedAt: now.Add(-time.Hour), StartedAt: &started, LastStepAt: &started,
				TraceParent: "00-tp",
			}}, got[0])
		require.Equal(t, episodes.Dispatched{EpisodeID: 10, ActorID: "x", ExpectationID: "e", NextStep: 1}, got[1],
			"held live elsewhere: the zero claim")
	})

	t.Run("expire", func(t *testing.T) {
		answer = map[string][][]driver.Value{"ExpireAvailable": {{int64(9)}, {int64(10)}}}
		got, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{Env: "rc", Stack: "s", TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []int64{9, 10}, got)
		require.Equal(t, map[string]any{"source_env": "rc", "source_stack": "s", "ttl_ms": int64(3_600_000), "all_envs": false},
			f.params["ExpireAvailable"], "a poller expires its own env only")
	})

	t.Run("next due", func(t *testing.T) {
		before := f.calls("NextAvailableDue")
		_, ok, err := s.NextAvailableDue(ctx, episodes.AvailableQuery{Env: "rc"})
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, before, f.calls("NextAvailableDue"), "no actors: nothing is sent")

		answer = map[string][][]driver.Value{"NextAvailableDue": {{int64(1500)}}}
		wait, ok, err := s.NextAvailableDue(ctx, episodes.AvailableQuery{Env: "rc", Runnable: runnable})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 1500*time.Millisecond, wait)
		answer = map[string][][]driver.Value{"NextAvailableDue": {{int64(-1)}}}
		_, ok, err = s.NextAvailableDue(ctx, episodes.AvailableQuery{Env: "rc", Runnable: runnable})
		require.NoError(t, err)
		require.False(t, ok, "-1: nothing waits")
	})
}

func TestUnitFindings(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ctx, tk := context.Background(), claims.Token{Key: "k", Owner: "a", Fence: 1}
	f := newFake(t)
	var answer map[string][]driver.Value
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{answer[name]}}
	}
	s := f.store
	nulls := make([]driver.Value, len(findingColumns))

	answer = map[string][]driver.Value{"RaiseFinding": append([]driver.Value{int64(0)}, nulls...)}
	_, err := s.RaiseFinding(ctx, tk, 7, findings.Raise{Key: "f"})
	require.ErrorIs(t, err, findings.ErrLeaseLost)

	answer = map[string][]driver.Value{"RaiseFinding": append([]driver.Value{int64(1)}, nulls...)}
	_, err = s.RaiseFinding(ctx, tk, 7, findings.Raise{Key: "f"})
	require.ErrorContains(t, err, "lease held but no finding returned")
	require.NotErrorIs(t, err, findings.ErrLeaseLost)

	answer = map[string][]driver.Value{"RaiseFinding": {
		int64(1), int64(5), "f", "rc", "active", "c", "high", "sum", `{"n":1}`, "x", "s",
		int64(6), int64(7), int64(2), now, now.Add(time.Second),
	}}
	got, err := s.RaiseFinding(ctx, tk, 7, findings.Raise{Key: "f"})
	require.NoError(t, err)
	require.Equal(t, findings.Finding{
		ID: 5, Key: "f", Env: "rc", Status: findings.StatusActive, Class: "c", Severity: "high",
		Summary: "sum", Data: json.RawMessage(`{"n":1}`), ActorID: "x", SourceStack: "s",
		RaisedByEpisode: 6, UpdatedByEpisode: 7, RaiseCount: 2, RaisedAt: now, UpdatedAt: now.Add(time.Second),
	}, got)

	for _, tc := range []struct {
		held, n int64
		want    bool
		err     error
	}{
		{0, 0, false, findings.ErrLeaseLost},
		{1, 0, false, nil},
		{1, 1, true, nil},
	} {
		answer = map[string][]driver.Value{"UpdateFinding": {tc.held, tc.n}, "ClearFinding": {tc.held, tc.n}}
		updated, err := s.UpdateFinding(ctx, tk, 7, "f", findings.Update{})
		require.ErrorIs(t, err, tc.err)
		require.Equal(t, tc.want, updated)
		cleared, err := s.ClearFinding(ctx, tk, 7, "f")
		require.ErrorIs(t, err, tc.err)
		require.Equal(t, tc.want, cleared)
	}
}

// TestUnitRaiseFindingDuplicateSentOnce: a raise that lost an insert race
// (2601) is sent once more, and only once.
func TestUnitRaiseFindingDuplicateSentOnce(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	row := []driver.Value{
		int64(1), int64(5), "f", "", "active", "", "", "", nil, "x", "",
		int64(6), int64(7), int64(2), now, now,
	}
	ctx, tk := context.Background(), claims.Token{Key: "k", Owner: "a", Fence: 1}

	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		if f.calls(name) == 1 {
			return fakeResult{err: mssql.Error{Number: 2601}}
		}
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{row}}
	}
	got, err := f.store.RaiseFinding(ctx, tk, 7, findings.Raise{Key: "f"})
	require.NoError(t, err)
	require.Equal(t, int32(2), got.RaiseCount)
	require.Equal(t, 2, f.calls("RaiseFinding"))

	f = newFake(t)
	f.answer = func(string, map[string]any) fakeResult { return fakeResult{err: mssql.Error{Number: 2601}} }
	_, err = f.store.RaiseFinding(ctx, tk, 7, findings.Raise{Key: "f"})
	require.True(t, isDuplicate(err), "a persistent duplicate surfaces: %v", err)
	require.NotErrorIs(t, err, findings.ErrLeaseLost)
	require.Equal(t, 2, f.calls("RaiseFinding"))
}

func TestUnitWorkflows(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ctx := context.Background()
	f := newFake(t)
	var answer map[string][][]driver.Value
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: answer[name]}
	}
	s := f.store

	answer = map[string][][]driver.Value{"CreateWorkflowInstance": {{int64(5), now}}}
	id, created, err := s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s", Payload: json.RawMessage(`{"a":1}`),
		DefinitionVersion: "0123456789abcdef"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int64(5), id)
	require.Equal(t, `{"a":1}`, f.params["CreateWorkflowInstance"]["payload"])
	require.Equal(t, "0123456789abcdef", f.params["CreateWorkflowInstance"]["definition_version"])

	running := []driver.Value{int64(5), "w", "s", "rc", "st", "running", `{"a":1}`, nil, now, nil, "step b renamed", "0123456789abcdef"}
	ended := []driver.Value{int64(6), "w", "s", "", "", "failed", nil, `{"why":"x"}`, now, now.Add(time.Second), nil, ""}
	answer = map[string][][]driver.Value{"LockWorkflowInstance": {running}, "GetWorkflowInstance": {ended}}
	inst, err := s.LockWorkflowInstance(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, workflows.Instance{
		ID: 5, WorkflowID: "w", Subject: "s", Env: "rc", SourceStack: "st", Status: workflows.InstanceRunning,
		Payload: json.RawMessage(`{"a":1}`), CreatedAt: now, ParkedReason: "step b renamed", DefinitionVersion: "0123456789abcdef",
	}, inst)
	inst, err = s.GetWorkflowInstance(ctx, 6)
	require.NoError(t, err)
	finished := now.Add(time.Second)
	require.Equal(t, workflows.Instance{
		ID: 6, WorkflowID: "w", Subject: "s", Status: workflows.InstanceFailed,
		ErrorDetail: json.RawMessage(`{"why":"x"}`), CreatedAt: now, FinishedAt: &finished,
	}, inst)

	answer = map[string][][]driver.Value{"ListWorkflowSteps": {
		{int64(5), "a", "running", int64(9), int64(1), int64(2), now},
		{int64(5), "b", "pending", int64(0), int64(0), int64(1), now},
	}}
	steps, err := s.ListWorkflowSteps(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, []workflows.StepState{
		{InstanceID: 5, StepID: "a", Status: workflows.StepRunning, EpisodeID: 9, Attempts: 1, MaxAttempts: 2, UpdatedAt: now},
		{InstanceID: 5, StepID: "b", Status: workflows.StepPending, Attempts: 0, MaxAttempts: 1, UpdatedAt: now},
	}, steps)

	answer = map[string][][]driver.Value{"GetWorkflowDefinition": {{`{"steps":[]}`}}}
	raw, found, err := s.GetWorkflowDefinition(ctx, "w", "0123456789abcdef")
	require.NoError(t, err)
	require.True(t, found)
	require.JSONEq(t, `{"steps":[]}`, string(raw))
	require.Equal(t, map[string]any{"workflow_id": "w", "version": "0123456789abcdef"}, f.params["GetWorkflowDefinition"])
	answer = map[string][][]driver.Value{}
	_, found, err = s.GetWorkflowDefinition(ctx, "w", "fedcba9876543210")
	require.NoError(t, err)
	require.False(t, found, "no row is not found, not an error")

	answer = map[string][][]driver.Value{"ListStalledWorkflowSteps": {{int64(5), "a", int64(9), "partially_failed"}}}
	stalled, err := s.ListStalledWorkflowSteps(ctx, workflows.StalledQuery{Env: "rc", Stack: "st", Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []workflows.Stalled{{InstanceID: 5, StepID: "a", EpisodeID: 9, EpisodeStatus: episodes.StatusPartiallyFailed}}, stalled)
	require.Equal(t, map[string]any{"env": "rc", "source_stack": "st", "max_rows": int32(3)}, f.params["ListStalledWorkflowSteps"])

	for _, n := range []int64{0, 1} {
		answer = map[string][][]driver.Value{}
		for _, name := range []string{"StartWorkflowStep", "EndWorkflowStep", "SkipPendingWorkflowSteps", "FinishWorkflowInstance",
			"MoveWorkflowStep", "DeleteWorkflowStep", "SetWorkflowDefinitionVersion"} {
			answer[name] = [][]driver.Value{{n}}
		}
		ok, err := s.MoveWorkflowStep(ctx, 5, "a", "b", 3, workflows.StepRunning, 9)
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		require.Equal(t, map[string]any{"new_step_id": "b", "max_attempts": int32(3), "instance_id": int64(5), "step_id": "a",
			"from_status": "running", "from_episode_id": int64(9)}, f.params["MoveWorkflowStep"])
		ok, err = s.DeleteWorkflowStep(ctx, 5, "c", workflows.StepPending, 0)
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		ok, err = s.SetWorkflowDefinitionVersion(ctx, 5, "v")
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		ok, err = s.StartWorkflowStep(ctx, 5, "a", workflows.StepRunning, 9, 10)
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		ok, err = s.EndWorkflowStep(ctx, 5, "a", 10, workflows.StepDone)
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		ok, err = s.FinishWorkflowInstance(ctx, 5, workflows.InstanceDone, nil)
		require.NoError(t, err)
		require.Equal(t, n == 1, ok)
		skipped, err := s.SkipPendingWorkflowSteps(ctx, 5)
		require.NoError(t, err)
		require.Equal(t, n, skipped)
	}
}

// TestUnitInTx: the Go side of InTx only (the fake decides what the
// batches answer): one READ COMMITTED transaction, every statement of a
// workflows.Tx sent in it (the Go method of each name runs the statement of
// that name), commit or rollback, and no retry inside the transaction.
func TestUnitInTx(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	tk := claims.Token{Key: "k", Owner: "a", Fence: 1}
	instance := []driver.Value{int64(5), "w", "s", "", "", "running", nil, nil, now, nil, nil, ""}
	step := []driver.Value{int64(5), "a", "running", int64(9), int64(1), int64(1), now}
	answers := map[string][][]driver.Value{
		"FinishEpisode":              {{int64(9)}},
		"CreateDeferredEpisode":      {{true, int64(10), now}},
		"CreateWorkflowInstance":     {{int64(5), now}},
		"GetRunningWorkflowInstance": {instance},
		"LockWorkflowInstance":       {instance},
		"ListWorkflowSteps":          {step},
		"GetWorkflowStepByEpisode":   {step},
		"GetWorkflowDefinition":      {{`{"steps":[]}`}},
	}
	answer := func(name string, _ map[string]any) fakeResult {
		if slices.Equal(resultColumns[name], rowsAffected) {
			return fakeResult{cols: rowsAffected, rows: [][]driver.Value{{int64(1)}}}
		}
		return fakeResult{cols: resultColumns[name], rows: answers[name]}
	}
	ctx := context.Background()

	t.Run("every statement in the transaction", func(t *testing.T) {
		// ctx bounds the wait of a batch wrongly sent to the pool: with one
		// connection, held by the transaction, it would wait for ever. Its
		// bound (claims.WithTxBound) tops every batch of the transaction.
		ctx, cancel := context.WithTimeout(claims.WithTxBound(ctx, 2500*time.Millisecond), 10*time.Second)
		defer cancel()
		f := newFake(t)
		f.answer = answer
		f.store.db.SetMaxOpenConns(1)
		err := f.store.InTx(ctx, func(tx workflows.Tx) error {
			require.NoError(t, tx.FinishEpisode(ctx, 9, tk, episodes.Finish{Status: episodes.StatusDone}))
			d, err := tx.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", DedupeKey: "workflow:5:b:1"}})
			require.NoError(t, err)
			require.True(t, d.Created)
			_, created, err := tx.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
			require.NoError(t, err)
			require.True(t, created)
			_, err = tx.GetRunningWorkflowInstance(ctx, "w", "s", "")
			require.NoError(t, err)
			require.NoError(t, tx.InsertWorkflowStep(ctx, 5, "a", 1))
			_, err = tx.LockWorkflowInstance(ctx, 5)
			require.NoError(t, err)
			_, err = tx.ListWorkflowSteps(ctx, 5)
			require.NoError(t, err)
			_, found, err := tx.GetWorkflowStepByEpisode(ctx, 9)
			require.NoError(t, err)
			require.True(t, found)
			_, _, err = tx.GetAgentMaxAttempts(ctx, "x", "e")
			require.NoError(t, err)
			require.NoError(t, tx.PutWorkflowDefinition(ctx, workflows.StoredDefinition{WorkflowID: "w", Version: "v", Definition: json.RawMessage(`{"steps":[]}`)}))
			_, found, err = tx.GetWorkflowDefinition(ctx, "w", "v")
			require.NoError(t, err)
			require.True(t, found)
			for _, run := range []func() (bool, error){
				func() (bool, error) { return tx.StartWorkflowStep(ctx, 5, "b", workflows.StepPending, 0, 10) },
				func() (bool, error) { return tx.EndWorkflowStep(ctx, 5, "a", 9, workflows.StepDone) },
				func() (bool, error) { n, err := tx.SkipPendingWorkflowSteps(ctx, 5); return n == 1, err },
				func() (bool, error) { return tx.FinishWorkflowInstance(ctx, 5, workflows.InstanceDone, nil) },
				func() (bool, error) { return tx.ParkWorkflowInstance(ctx, 5, "") },
				func() (bool, error) { return tx.MoveWorkflowStep(ctx, 5, "a", "b", 1, workflows.StepRunning, 9) },
				func() (bool, error) { return tx.DeleteWorkflowStep(ctx, 5, "c", workflows.StepPending, 0) },
				func() (bool, error) { return tx.SetWorkflowDefinitionVersion(ctx, 5, "v") },
			} {
				ok, err := run()
				require.NoError(t, err)
				require.True(t, ok)
			}
			return nil
		})
		require.NoError(t, err)
		want := []string{"begin Read Committed"}
		txType := reflect.TypeFor[workflows.Tx]()
		for i := range txType.NumMethod() {
			want = append(want, txType.Method(i).Name)
		}
		ev := f.events()
		require.Equal(t, "begin Read Committed", ev[0])
		require.Equal(t, "commit", ev[len(ev)-1])
		require.ElementsMatch(t, want, ev[:len(ev)-1], "each Tx method sends the statement of its name, in the transaction")
		for _, name := range want[1:] {
			require.Equal(t, boundTransaction, f.bound(name), "%s: every batch of the transaction is bounded", name)
			require.Equal(t, int64(2500), f.params[name]["bound_ms"], "%s: the bound of InTx's ctx", name)
		}
	})

	t.Run("fn's error rolls back", func(t *testing.T) {
		f := newFake(t)
		f.answer = answer
		boom := errors.New("boom")
		err := f.store.InTx(ctx, func(tx workflows.Tx) error {
			_, _, err := tx.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
			require.NoError(t, err)
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, []string{"begin Read Committed", "CreateWorkflowInstance", "rollback"}, f.events())
	})

	t.Run("no retry inside the transaction", func(t *testing.T) {
		f := newFake(t)
		f.answer = func(name string, p map[string]any) fakeResult {
			if name == "LockWorkflowInstance" {
				return fakeResult{err: mssql.Error{Number: 1205}}
			}
			return answer(name, p)
		}
		err := f.store.InTx(ctx, func(tx workflows.Tx) error {
			_, err := tx.LockWorkflowInstance(ctx, 5)
			return err
		})
		require.ErrorIs(t, err, claims.ErrRetryable, "the whole transaction was rolled back: the caller may run it again")
		require.Equal(t, 1, f.calls("LockWorkflowInstance"), "sent again, it would run in autocommit")
		require.Equal(t, []string{"begin Read Committed", "LockWorkflowInstance", "rollback"}, f.events())
	})

	t.Run("a duplicate inside the transaction is an error", func(t *testing.T) {
		f := newFake(t)
		f.answer = func(string, map[string]any) fakeResult { return fakeResult{err: mssql.Error{Number: 2601}} }
		err := f.store.InTx(ctx, func(tx workflows.Tx) error {
			_, created, err := tx.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
			require.False(t, created)
			require.True(t, isDuplicate(err), "XACT_ABORT rolled the transaction back: not 'not created'")
			d, err := tx.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", DedupeKey: "d"}})
			require.False(t, d.Created)
			require.True(t, isDuplicate(err), "XACT_ABORT rolled the transaction back: not 'not created'")
			return err
		})
		require.True(t, isDuplicate(err))
		require.NotContains(t, f.events(), "commit")
	})

	t.Run("not nested", func(t *testing.T) {
		f := newFake(t)
		f.answer = answer
		err := f.store.InTx(ctx, func(tx workflows.Tx) error {
			return tx.(*Store).InTx(ctx, func(workflows.Tx) error { return nil })
		})
		require.ErrorContains(t, err, "already inside a transaction")
	})

	t.Run("no database", func(t *testing.T) {
		s, err := New(nil)
		require.NoError(t, err)
		require.ErrorContains(t, s.InTx(ctx, func(workflows.Tx) error { return nil }), "no database")
	})
}

// fake is a database/sql driver that answers every batch with a scripted
// result. Its Store's statements are their own names, so the fake knows
// which one ran: a batch is the statement's name, after a line naming its
// bound (BoundLockWait, BoundTransaction) when it has one.
type fake struct {
	store  *Store
	answer func(name string, params map[string]any) fakeResult

	mu     sync.Mutex
	n      map[string]int
	params map[string]map[string]any // last parameters per statement
	bounds map[string]string         // last bound each statement was sent behind ("" for none)
	// log is every statement run and every transaction event (begin,
	// commit, rollback), in order.
	log []string
}

type fakeResult struct {
	cols         []string
	rows         [][]driver.Value
	err          error // before any row, or after them with errAfterRows
	errAfterRows bool
	second       bool // announce a second result set
}

func newFake(t *testing.T) *fake {
	f := &fake{n: map[string]int{}, params: map[string]map[string]any{}, bounds: map[string]string{}}
	stmts := map[string]queries.Query{}
	for name := range resultColumns {
		stmts[name] = queries.Query{Name: name, SQL: name}
	}
	for _, name := range []string{boundTransaction, boundLockWait} {
		stmts[name] = queries.Query{Name: name, SQL: name, Kind: ":exec"}
	}
	db := sql.OpenDB(fakeConnector{f})
	t.Cleanup(func() { _ = db.Close() })
	f.store = &Store{db: db, stmts: stmts, backoff: func(int) time.Duration { return time.Millisecond }}
	return f
}

func (f *fake) calls(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[name]
}

func (f *fake) run(batch string, args []driver.NamedValue) fakeResult {
	bound, name, ok := strings.Cut(batch, "\n")
	if !ok {
		bound, name = "", batch
	}
	params := map[string]any{}
	for _, a := range args {
		params[a.Name] = a.Value
	}
	f.mu.Lock()
	f.n[name]++
	f.params[name] = params
	f.bounds[name] = bound
	f.log = append(f.log, name)
	f.mu.Unlock()
	return f.answer(name, params)
}

func (f *fake) event(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, e)
}

func (f *fake) bound(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bounds[name]
}

func (f *fake) events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

type fakeConnector struct{ f *fake }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return fakeConn(c), nil }
func (c fakeConnector) Driver() driver.Driver                        { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("use the connector") }

type fakeConn struct{ f *fake }

func (fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (fakeConn) Close() error                        { return nil }
func (fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("use BeginTx") }

// BeginTx logs "begin <isolation>"; the transaction logs its end.
func (c fakeConn) BeginTx(_ context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.f.event("begin " + sql.IsolationLevel(opts.Isolation).String())
	return fakeTx(c), nil
}

type fakeTx struct{ f *fake }

func (tx fakeTx) Commit() error   { tx.f.event("commit"); return nil }
func (tx fakeTx) Rollback() error { tx.f.event("rollback"); return nil }

// CheckNamedValue passes values through as the Store wrote them (after
// driver.Valuer), so the tests see int32 and int64 apart.
func (fakeConn) CheckNamedValue(nv *driver.NamedValue) error {
	if v, ok := nv.Value.(driver.Valuer); ok {
		val, err := v.Value()
		nv.Value = val
		return err
	}
	return nil
}

func (c fakeConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r := c.f.run(query, args)
	if r.err != nil && !r.errAfterRows {
		return nil, r.err
	}
	return &fakeRows{r: r}, nil
}

func (c fakeConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if r := c.f.run(query, args); r.err != nil {
		return nil, r.err
	}
	return driver.RowsAffected(0), nil
}

type fakeRows struct {
	r fakeResult
	i int
}

func (r *fakeRows) Columns() []string { return r.r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.i < len(r.r.rows) {
		copy(dest, r.r.rows[r.i])
		r.i++
		return nil
	}
	if r.r.errAfterRows {
		return r.r.err
	}
	return io.EOF
}

func (r *fakeRows) ColumnTypeDatabaseTypeName(int) string { return "DATETIME2" }
func (r *fakeRows) HasNextResultSet() bool                { return r.r.second }
func (r *fakeRows) NextResultSet() error {
	if !r.r.second {
		return io.EOF
	}
	r.r.second, r.r.rows, r.i = false, nil, 0
	return nil
}

func countOf(events []string, e string) int {
	n := 0
	for _, x := range events {
		if x == e {
			n++
		}
	}
	return n
}

func TestUnitReleaseMany(t *testing.T) {
	ctx := context.Background()
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{"k", int64(7)}}}
	}
	none, err := f.store.ReleaseMany(ctx, "a", nil)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Zero(t, f.calls("ReleaseClaims"), "nothing held: nothing sent")

	got, err := f.store.ReleaseMany(ctx, "a", []claims.Held{{Key: "k", Fence: 7}, {Key: "gone", Fence: 2}, {Key: "k", Fence: 7}})
	require.NoError(t, err)
	require.Equal(t, []claims.Held{{Key: "k", Fence: 7}}, got, "only the released pairs come back")
	require.Equal(t, `[{"dedupe_key":"k","fence":7},{"dedupe_key":"gone","fence":2}]`, f.params["ReleaseClaims"]["held"],
		"a pair listed twice is sent once")
	require.Equal(t, "a", f.params["ReleaseClaims"]["owner_node"])
}

func TestUnitListNodes(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{
			{"a", "s", "rc", "full", true, now, now.Add(time.Second), int64(1500), int64(3)},
			{"b", "", "", "trigger_only", false, now, now, int64(0), int64(0)},
		}}
	}
	got, err := f.store.ListNodes(context.Background())
	require.NoError(t, err)
	require.Equal(t, []membership.Row{
		{
			Member:    membership.Member{ID: "a", Stack: "s", Env: "rc", Mode: "full", Draining: true},
			StartedAt: now, HeartbeatAt: now.Add(time.Second), HeartbeatAge: 1500 * time.Millisecond, LiveLeases: 3,
		},
		{Member: membership.Member{ID: "b", Mode: "trigger_only"}, StartedAt: now, HeartbeatAt: now},
	}, got)
}

// TestUnitMaintain: the Go side of Maintain only (the fake decides what the
// batches answer): one READ COMMITTED transaction, the lock first, the
// Postgres order, the counts, and rollback without in-call retries on any
// error.
func TestUnitMaintain(t *testing.T) {
	ctx := context.Background()
	plan := maintenance.Plan{
		Retention: time.Hour, ClaimHorizon: 24 * time.Hour, RequestTTL: time.Hour, NodeStaleAfter: time.Minute, Batch: 100,
	}
	count := map[string]int64{
		"ArchiveEpisodes": 3, "PurgeArchivedSteps": 40, "MarkJournalsPurged": 2,
		"DeleteSpentClaims": 5, "DeleteStaleNodes": 1, "RaiseWaitingForNodeFinding": 1,
		"ClearWaitingForNodeFindings": 2,
	}
	answer := func(acquired bool, failing string) func(string, map[string]any) fakeResult {
		return func(name string, _ map[string]any) fakeResult {
			switch {
			case name == failing:
				return fakeResult{err: mssql.Error{Number: 1205}}
			case name == "TryMaintenanceLock":
				return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{acquired}}}
			case name == "ExpireAvailable":
				return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{int64(10)}, {int64(11)}, {int64(12)}}}
			case name == "ListWaitingForNode": // one pair overdue, one not yet
				return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{waitingRow(true), waitingRow(false)}}
			}
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{count[name]}}}
		}
	}

	t.Run("held elsewhere", func(t *testing.T) {
		f := newFake(t)
		f.answer = answer(false, "")
		res, err := f.store.Maintain(ctx, plan)
		require.NoError(t, err)
		require.Equal(t, maintenance.Result{}, res, "Ran false, nothing counted")
		require.Equal(t, []string{"begin Read Committed", "TryMaintenanceLock", "rollback"}, f.events())
	})

	t.Run("runs", func(t *testing.T) {
		f := newFake(t)
		f.answer = answer(true, "")
		res, err := f.store.Maintain(ctx, plan)
		require.NoError(t, err)
		require.Equal(t, maintenance.Result{
			Ran: true, Archived: 3, StepsPurged: 40, JournalsMarked: 2, EpisodesExpired: 3,
			ClaimsDeleted: 5, NodesDeleted: 1, WaitingRaised: 1, WaitingCleared: 2,
		}, res)
		require.Equal(t, []string{
			"begin Read Committed", "TryMaintenanceLock", "ArchiveEpisodes", "PurgeArchivedSteps",
			"MarkJournalsPurged", "ExpireAvailable", "DeleteSpentClaims", "DeleteStaleNodes",
			"ListWaitingForNode", "RaiseWaitingForNodeFinding", "ClearWaitingForNodeFindings", "commit",
		}, f.events(), "one transaction, the Postgres order; only the overdue pair raises")
		require.Equal(t, true, f.params["ExpireAvailable"]["all_envs"])
	})

	for _, failing := range []string{"TryMaintenanceLock", "PurgeArchivedSteps", "ExpireAvailable", "DeleteStaleNodes",
		"ListWaitingForNode", "RaiseWaitingForNodeFinding", "ClearWaitingForNodeFindings"} {
		t.Run("deadlock in "+failing, func(t *testing.T) {
			f := newFake(t)
			f.answer = answer(true, failing)
			res, err := f.store.Maintain(ctx, plan)
			require.ErrorIs(t, err, claims.ErrRetryable, "the whole run was rolled back: safe to run again")
			require.ErrorContains(t, err, "sqlserver: "+failing+": ")
			require.Equal(t, maintenance.Result{}, res)
			require.Equal(t, maxAttempts, f.calls(failing), "the whole run is sent again, never the batch alone")
			ev := f.events()
			require.Equal(t, maxAttempts, countOf(ev, "begin Read Committed"), "one transaction per attempt")
			require.Equal(t, maxAttempts, countOf(ev, "rollback"))
			require.NotContains(t, ev, "commit")
			for i, e := range ev {
				if e == failing {
					require.Equal(t, "rollback", ev[i+1], "nothing is sent after the failed batch in its transaction")
				}
			}
		})
	}

	t.Run("deadlock once", func(t *testing.T) {
		f := newFake(t)
		ok := answer(true, "")
		f.answer = func(name string, p map[string]any) fakeResult {
			if name == "DeleteSpentClaims" && f.calls(name) == 1 {
				return fakeResult{err: mssql.Error{Number: 1205}}
			}
			return ok(name, p)
		}
		res, err := f.store.Maintain(ctx, plan)
		require.NoError(t, err)
		require.Equal(t, int64(3), res.Archived, "the counts of the run that committed")
		ev := f.events()
		require.Equal(t, 2, countOf(ev, "begin Read Committed"))
		require.Equal(t, 2, countOf(ev, "ArchiveEpisodes"), "the second run starts over")
		require.Equal(t, []string{"ClearWaitingForNodeFindings", "commit"}, ev[len(ev)-2:])
	})

	t.Run("other errors are not retried", func(t *testing.T) {
		f := newFake(t)
		ok := answer(true, "")
		f.answer = func(name string, p map[string]any) fakeResult {
			if name == "MarkJournalsPurged" {
				return fakeResult{err: mssql.Error{Number: 547}}
			}
			return ok(name, p)
		}
		_, err := f.store.Maintain(ctx, plan)
		require.Error(t, err)
		require.NotErrorIs(t, err, claims.ErrRetryable)
		require.Equal(t, 1, f.calls("MarkJournalsPurged"))
		require.NotContains(t, f.events(), "commit")
	})

	t.Run("invalid plan", func(t *testing.T) {
		f := newFake(t)
		f.answer = answer(true, "")
		for _, p := range []maintenance.Plan{{Batch: 0}, {Batch: maintenance.MaxBatch + 1}, {Batch: 1, Retention: -time.Second}} {
			_, err := f.store.Maintain(ctx, p)
			require.ErrorIs(t, err, maintenance.ErrInvalid, "%+v", p)
		}
		require.Empty(t, f.events(), "nothing sent")
	})

	t.Run("no row count", func(t *testing.T) {
		f := newFake(t)
		inner := answer(true, "")
		f.answer = func(name string, p map[string]any) fakeResult {
			if name == "ArchiveEpisodes" {
				return fakeResult{cols: resultColumns[name]}
			}
			return inner(name, p)
		}
		_, err := f.store.Maintain(ctx, plan)
		require.ErrorContains(t, err, "sqlserver: ArchiveEpisodes: no row count returned")
		require.NotContains(t, f.events(), "commit")
	})

	t.Run("no database", func(t *testing.T) {
		s, err := New(nil)
		require.NoError(t, err)
		_, err = s.Maintain(ctx, plan)
		require.ErrorContains(t, err, "no database")
	})
}

// waitingRow is a ListWaitingForNode row: billing/refund waiting in env rc
// (overdue), or billing/charge (not yet), last seen on node-7.
func waitingRow(overdue bool) []driver.Value {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if overdue {
		return []driver.Value{"rc", "billing", "refund", int64(2), now.Add(-2 * time.Hour), int64(9), true, "node-7", now.Add(-time.Hour)}
	}
	return []driver.Value{"rc", "billing", "charge", int64(1), now, int64(10), false, "", nil}
}
