package queries

import (
	"embed"
	"slices"
	"strings"
)

// The dialects, by the name of their folder under sql/queries.
const (
	DialectPostgres  = "postgres"
	DialectSQLServer = "sqlserver"
	DialectSQLite    = "sqlite"
)

// Dialects lists every dialect leasehold ships.
var Dialects = []string{DialectPostgres, DialectSQLServer, DialectSQLite}

// Only is a statement that some dialects declare and the others cannot:
// the one exception to "every dialect declares the same statements with the
// same kinds", which sql/queries/parity_test.go checks.
type Only struct {
	Name     string   // the statement's "-- name:"
	Dialects []string // the dialects that declare it
	Why      string   // why the others cannot
	Fallback string   // what the others do instead
	// PartOf, for a statement that is one step of an operation the other
	// dialects run as one statement (see part), names that operation's
	// statements, which every dialect declares.
	PartOf []string
}

// In reports whether dialect declares the statement.
func (o Only) In(dialect string) bool { return slices.Contains(o.Dialects, dialect) }

// DialectOnly is the list of statements that exist in some dialects only,
// each with its reason and the fallback elsewhere. Every other statement
// exists, under the same name and kind, in every dialect.
var DialectOnly = []Only{
	{
		Name:     "ListenTriggerRequests",
		Dialects: []string{DialectPostgres},
		Why: "LISTEN for the NOTIFY the episode triggers send when an episode becomes available (migration 00016; " +
			"the channel kept the trigger requests' name): " +
			"SQL Server and SQLite have no LISTEN/NOTIFY, and an SQLite trigger cannot reach another process",
		Fallback: "pollers poll on their interval, which on Postgres is the fallback for a lost notification too",
	},
	{
		Name:     "BoundTransaction",
		Dialects: []string{DialectPostgres, DialectSQLServer},
		Why: "a server-side bound on a transaction's lock waits and idle time: SQLite has no lock timeout " +
			"per transaction and nothing that ends an idle transaction",
		Fallback: "SQLite: busy_timeout (adapters/sqlite.BusyTimeout, set by Open on every connection) bounds " +
			"every wait for the database write lock, after which the statement fails SQLITE_BUSY " +
			"(claims.ErrRetryable, nothing applied); a process frozen inside a write transaction is not ended, " +
			"so writers keep failing retryably until it exits or resumes",
	},
	{
		Name:     "BoundLockWait",
		Dialects: []string{DialectSQLServer},
		Why: "a lock timeout sent on top of each takeover batch: T-SQL's SET LOCK_TIMEOUT is a statement of its own " +
			"(and reverts when the parameterized call ends); SQLite's busy_timeout is a connection setting",
		Fallback: "Postgres: each takeover statement (AcquireClaim, ClaimForRecovery, RequeueOrphan, " +
			"ClaimAvailable) takes bound_ms and sets its own lock_timeout, LOCAL, before it reaches a row, " +
			"so the bound costs no statement; SQLite: the connection's busy_timeout bounds each takeover's wait for " +
			"the write lock, as for every statement",
	},
	{
		Name:     "MaintenanceDue",
		Dialects: []string{DialectSQLite},
		Why: "a read before Maintain's BEGIN IMMEDIATE, so that a maintenance run with nothing to do does not " +
			"take SQLite's one write lock, which stops every writer of the file while held; a run on Postgres " +
			"or SQL Server locks only the rows it changes",
		Fallback: "Postgres and SQL Server run Maintain's statements directly",
	},
	{
		Name:     "DoomTransaction",
		Dialects: []string{DialectPostgres, DialectSQLite},
		Why: "what the adapter runs in the caller's transaction after a fenced FinishEpisode in it (on SQLite also " +
			"HoldClaim, which Postgres's leasehold_hold raises in itself) matched no row, " +
			"so that the transaction cannot commit (Postgres: leasehold_lease_lost raises LH001, which aborts it; " +
			"SQLite: a row whose deferred foreign key fails the COMMIT; migration 00011): SQL Server's FinishEpisode " +
			"does it in its own batch, since T-SQL can THROW there",
		Fallback: "SQL Server: FinishEpisode THROWs 51001 inside a caller's transaction when it matched nothing, " +
			"and XACT_ABORT rolls that whole transaction back",
	},
	{
		Name:     "RequeueOrphanLock",
		Dialects: []string{DialectPostgres},
		Why: "locks the orphan's claim row (NOWAIT: a row another sweeper or the holder has locked is skipped at once, " +
			"for the next sweep) before RequeueOrphan takes its snapshot, so that sweepers never queue behind each " +
			"other on one orphan (RequeueOrphan also re-checks the episode row's run_after under its own lock): " +
			"SQLite's write lock serializes whole transactions, and SQL Server's RequeueOrphan re-reads the " +
			"episode under UPDLOCK, HOLDLOCK after its claim lock",
		Fallback: "SQLite: RequeueOrphanTarget runs under the write lock; SQL Server: RequeueOrphan's locking read, " +
			"which waits for a locked claim row (bounded by its lock timeout, claims.TxBound) instead of skipping it",
	},

	{
		Name:     "SwitchKeyVersion",
		Dialects: []string{DialectPostgres, DialectSQLite},
		Why: "moving a database to dedupe key version 2 is safe only behind the insert trigger that refuses a " +
			"version 1 key afterwards (migration 00014), and on SQL Server that trigger would be T-SQL " +
			"that nothing in this repository can run to prove",
		Fallback: "SQL Server databases stay on key version 1 (leasehold_key_version's check pins it; GetKeyVersion " +
			"reads 1): a payload two producers write differently (1 and 1.0) is two keys there, as before; give such " +
			"events an event id",
	},

	// The steps of SQLite's multi-statement operations.
	part("AppendStepLease", "AppendStep"),
	part("AppendStepEpisode", "AppendStep"),
	part("CancelEpisodeTarget", "CancelEpisode"),
	part("CancelEpisodeFence", "CancelEpisode"),
	part("ClaimAvailableGrant", "ClaimAvailable"),
	part("ClaimAvailableStart", "ClaimAvailable"),
	part("ClaimForRecoveryGrant", "ClaimForRecovery"),
	part("CreateEpisodeGrant", "CreateEpisode"),
	part("FindingLeaseHeld", "UpdateFinding", "ClearFinding"),
	part("FinishEpisodeClaim", "FinishEpisode"),
	part("FinishEpisodeStep", "FinishEpisode"),
	part("FinishEpisodesClaims", "FinishEpisodes"),
	part("FinishEpisodesSteps", "FinishEpisodes"),
	part("RequeueOrphanTarget", "RequeueOrphan"),
	part("RequeueOrphanFence", "RequeueOrphan"),
	part("RetryEpisodeClaim", "RetryEpisode"),
}

// part is a statement of SQLite alone that is one step of the operations
// of, each of which SQLite runs as several statements in one BEGIN IMMEDIATE
// transaction (the transaction in Go, every deciding condition in the
// statements) where Postgres and SQL Server run one statement: SQLite has
// no data-modifying CTEs, sqlc's SQLite grammar no UPDATE ... FROM, and no
// statement writes two tables. The write lock, held from BEGIN IMMEDIATE
// to COMMIT, makes the steps one decision, as the single statement is
// elsewhere.
func part(name string, of ...string) Only {
	return Only{
		Name:     name,
		Dialects: []string{DialectSQLite},
		Why:      "one step of " + strings.Join(of, ", ") + ", which SQLite runs as several statements in one BEGIN IMMEDIATE transaction",
		Fallback: "Postgres and SQL Server do this step inside " + strings.Join(of, ", ") + " itself",
		PartOf:   of,
	}
}

// MissingFrom returns, by statement name, the DialectOnly entries that
// dialect does not declare.
func MissingFrom(dialect string) map[string]Only {
	out := map[string]Only{}
	for _, o := range DialectOnly {
		if !o.In(dialect) {
			out[o.Name] = o
		}
	}
	return out
}

//go:embed sqlite/*.sql
var sqliteFiles embed.FS

// SQLite returns the statements of sql/queries/sqlite by name. The SQLite
// adapter runs them through the code sqlc generated (package db/sqlitedb);
// this is for the parity checks and tools.
func SQLite() (map[string]Query, error) {
	return Parse(sqliteFiles, "sqlite/*.sql")
}
