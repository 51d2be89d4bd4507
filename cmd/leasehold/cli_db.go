package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/workflows"
)

// connectTimeout bounds opening and pinging the database.
const connectTimeout = 10 * time.Second

// cliStore is what the operator commands need from a dialect adapter. The
// commands run no SQL of their own: only these adapter methods.
type cliStore interface {
	recovery.Store
	ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error)
	InspectEpisodes(ctx context.Context, q inspect.EpisodeQuery) ([]episodes.Episode, error)
	InspectEpisode(ctx context.Context, id int64) (inspect.Episode, error)
	InspectJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error)
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error)
	ListNodes(ctx context.Context) ([]membership.Row, error)
	membership.WaitingReader
	workflows.Store
	episodes.KeyVersioner
}

// dbConn is an open, reachable database of either dialect.
type dbConn struct {
	dialect  string // "postgres", "sqlserver" or "sqlite"
	store    cliStore
	migrator func() (*goose.Provider, error)
	// version reads the highest applied leasehold migration, 0 when none,
	// without writing (see requireSchema).
	version func(context.Context) (int64, error)
	where   string // the database and schema the tables are looked up in, for messages
	close   func()
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCode reports err on stderr as "leasehold <cmd>: err" and returns the
// exit code scripts branch on (listed in usage): 2 for a usage error, 3 for a
// leasehold schema missing or behind, else 1.
func exitCode(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "leasehold %s: %v\n", cmd, err)
	switch {
	case errors.As(err, new(usageError)):
		return 2
	case errors.As(err, new(schemaError)):
		return 3
	}
	return 1
}

// urlFlag adds the -url flag every database command takes.
func urlFlag(fs *flag.FlagSet) *string {
	return fs.String("url", "", "database URL: postgres://, postgresql://, sqlserver://, or a SQLite file:\n"+
		"sqlite:///abs/path.db, sqlite://rel/path.db, sqlite:path.db or file:path.db;\nthe default is DATABASE_URL")
}

// resolveURL returns the -url value, else DATABASE_URL.
func resolveURL(flagURL string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	return "", usagef("no database: pass -url or set DATABASE_URL")
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the database URL"
	}
	return u.Redacted()
}

// openDB opens the database raw names, choosing the adapter by the URL's
// scheme, and checks that it answers. A SQLite file that does not exist is
// created only when create is set (migrate); the other commands report it as
// a missing schema, creating nothing.
func openDB(ctx context.Context, raw string, create bool) (*dbConn, error) {
	if isSQLiteURL(raw) {
		return openSQLite(ctx, raw, create)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("invalid database URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	unreachable := func(err error) error {
		return fmt.Errorf("cannot reach %s: %w: check -url / DATABASE_URL", redact(raw), err)
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, usagef("invalid Postgres URL: %v", err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, unreachable(err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, unreachable(err)
		}
		sqlDB := stdlib.OpenDBFromPool(pool)
		version, err := versionReader(goose.DialectPostgres, sqlDB, pgUndefinedTable)
		if err != nil {
			_ = sqlDB.Close()
			pool.Close()
			return nil, err
		}
		return &dbConn{
			dialect:  "postgres",
			store:    postgres.New(pool),
			migrator: func() (*goose.Provider, error) { return postgres.NewMigrator(sqlDB) },
			version:  version,
			where:    pgWhere(cfg),
			close:    func() { _ = sqlDB.Close(); pool.Close() },
		}, nil
	case "sqlserver":
		sqlDB, err := sqlserver.Open(raw)
		if err != nil {
			return nil, usagef("invalid SQL Server URL: %v", err)
		}
		if err := sqlDB.PingContext(ctx); err != nil {
			_ = sqlDB.Close()
			return nil, unreachable(err)
		}
		store, err := sqlserver.New(sqlDB)
		if err != nil {
			_ = sqlDB.Close()
			return nil, err
		}
		version, err := versionReader(goose.DialectMSSQL, sqlDB, mssqlInvalidObject)
		if err != nil {
			_ = sqlDB.Close()
			return nil, err
		}
		return &dbConn{
			dialect:  "sqlserver",
			store:    store,
			migrator: func() (*goose.Provider, error) { return sqlserver.NewMigrator(sqlDB) },
			version:  version,
			where:    mssqlWhere(raw),
			close:    func() { _ = sqlDB.Close() },
		}, nil
	case "":
		return nil, usagef("database URL %q has no scheme: use %s", redact(raw), urlSchemes)
	default:
		return nil, usagef("unknown database URL scheme %q: use %s", u.Scheme, urlSchemes)
	}
}

// urlSchemes lists the URL forms openDB takes, for messages.
const urlSchemes = "postgres://, postgresql://, sqlserver://, sqlite: or file:"

// pgWhere names the Postgres database and search_path the tables are looked
// up in, as configured (the server's default when the URL sets none).
func pgWhere(cfg *pgxpool.Config) string {
	where := fmt.Sprintf("database %q", cfg.ConnConfig.Database)
	if sp := cfg.ConnConfig.RuntimeParams["search_path"]; sp != "" {
		return where + fmt.Sprintf(", search_path %q", sp)
	}
	return where + " (the server's default search_path)"
}

// mssqlWhere names the SQL Server database the tables are looked up in; the
// schema is the login's default.
func mssqlWhere(raw string) string {
	cfg, err := msdsn.Parse(raw)
	if err != nil || cfg.Database == "" {
		return "the login's default database and schema"
	}
	return fmt.Sprintf("database %q (the login's default schema)", cfg.Database)
}

// utc formats a database time for output.
func utc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// utcPtr formats an optional time; "" when unset.
func utcPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return utc(*t)
}

// dash shows an empty table cell as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJSONLines writes items as a JSON array, one element per line.
func writeJSONLines[T any](w io.Writer, items []T) error {
	var b strings.Builder
	b.WriteString("[\n")
	for i, it := range items {
		line, err := json.Marshal(it)
		if err != nil {
			return err
		}
		b.Write(line)
		if i < len(items)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	_, err := io.WriteString(w, b.String())
	return err
}
