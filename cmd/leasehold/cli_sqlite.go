package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
)

// SQLite URLs. A SQLite database is a file, named by a URL of scheme sqlite
// or file. The path is what follows the scheme's colon, without a leading
// "//", up to a "?", percent-decoded:
//
//	sqlite:///var/lib/app/leasehold.db   /var/lib/app/leasehold.db
//	sqlite:/var/lib/app/leasehold.db     the same
//	sqlite://leasehold.db                leasehold.db, relative to the working directory
//	sqlite:data/leasehold.db             data/leasehold.db, relative
//	file:///var/lib/app/leasehold.db     /var/lib/app/leasehold.db
//	file:leasehold.db                    leasehold.db, relative
//
// What follows a "?" is passed to the driver (modernc.org/sqlite DSN
// parameters, such as _busy_timeout=5000); the adapter sets WAL, foreign
// keys and BEGIN IMMEDIATE itself and refuses a URL that sets them
// otherwise. An in-memory database (":memory:") is refused: each connection
// would have its own, and no other process could see it.

// isSQLiteURL reports whether raw names a SQLite file: scheme sqlite or file.
func isSQLiteURL(raw string) bool {
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return false
	}
	scheme = strings.ToLower(scheme)
	return scheme == "sqlite" || scheme == "file"
}

// sqlitePath splits a SQLite URL into its file path and the driver
// parameters after "?" ("" for none).
func sqlitePath(raw string) (path, params string, err error) {
	_, rest, _ := strings.Cut(raw, ":")
	rest = strings.TrimPrefix(rest, "//")
	rest, params, _ = strings.Cut(rest, "?")
	path, err = url.PathUnescape(rest)
	if err != nil {
		return "", "", usagef("invalid SQLite URL %q: %v", raw, err)
	}
	switch {
	case path == "":
		return "", "", usagef("SQLite URL %q names no file: use sqlite:///abs/path.db, sqlite://rel/path.db, sqlite:path.db or file:path.db", raw)
	case strings.HasPrefix(path, ":memory:") || strings.Contains(params, "mode=memory"):
		return "", "", usagef("SQLite URL %q is an in-memory database, which only one connection sees: name a file", raw)
	}
	return path, params, nil
}

// sqliteURL is the sqlite:// URL of the file at path (made absolute), as
// the commands print it.
func sqliteURL(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "sqlite://" + (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath()
}

// openSQLite opens the SQLite file raw names. Unless create is set, a file
// that does not exist is a missing schema (exit code 3), and none is created.
func openSQLite(ctx context.Context, raw string, create bool) (*dbConn, error) {
	path, params, err := sqlitePath(raw)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	where := "SQLite file " + abs
	if !create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, schemaError{fmt.Sprintf("leasehold schema not found: there is no %s: run `leasehold migrate up` to create it", where)}
		}
	}
	dsn := path
	if params != "" {
		dsn += "?" + params
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	db, err := sqlite.Open(ctx, dsn)
	if errors.Is(err, claims.ErrInvalid) {
		return nil, usagef("invalid SQLite URL %q: %v", raw, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w: check -url / DATABASE_URL", where, err)
	}
	version, err := versionReader(goose.DialectSQLite3, db, sqliteNoSuchTable)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &dbConn{
		dialect:  "sqlite",
		store:    sqlite.New(db),
		migrator: func() (*goose.Provider, error) { return sqlite.NewMigrator(db) },
		version:  version,
		where:    where,
		close:    func() { _ = db.Close() },
	}, nil
}

// sqliteNoSuchTable is SQLite's "no such table" (SQLITE_ERROR with that
// message: SQLite gives it no code of its own).
func sqliteNoSuchTable(err error) bool {
	return strings.Contains(err.Error(), "no such table")
}
