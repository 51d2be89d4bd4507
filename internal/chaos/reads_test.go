//go:build unix

package chaos_test

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// reads is the driver's own connection to the suite's database: the
// statements of chaos.sql (Postgres) or chaos_sqlite.sql (SQLite), run by
// name, with Postgres's types on both sides (time.Time for every instant).
// The invariant checks are written once against it.
type reads interface {
	QueryRow(ctx context.Context, name string, args ...any) rowScanner
	Query(ctx context.Context, name string, args ...any) (rowsScanner, error)
}

type rowScanner interface {
	Scan(dest ...any) error
}

type rowsScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// pgReads runs chaos.sql on a pgx pool: exactly the pool's own calls.
type pgReads struct{ pool *pgxpool.Pool }

func (p pgReads) QueryRow(ctx context.Context, name string, args ...any) rowScanner {
	return p.pool.QueryRow(ctx, query(name), args...)
}

func (p pgReads) Query(ctx context.Context, name string, args ...any) (rowsScanner, error) {
	rows, err := p.pool.Query(ctx, query(name), args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// sqliteReads runs chaos_sqlite.sql on a database/sql handle. SQLite keeps
// every instant as INTEGER milliseconds since the Unix epoch: a time.Time
// argument is sent as its UnixMilli, and a *time.Time destination is
// scanned from the integer (UTC).
type sqliteReads struct{ db *sql.DB }

func (s sqliteReads) QueryRow(ctx context.Context, name string, args ...any) rowScanner {
	return sqliteRow{s.db.QueryRowContext(ctx, sqliteQuery(name), msArgs(args)...)}
}

func (s sqliteReads) Query(ctx context.Context, name string, args ...any) (rowsScanner, error) {
	rows, err := s.db.QueryContext(ctx, sqliteQuery(name), msArgs(args)...)
	if err != nil {
		return nil, err
	}
	return sqliteRows{rows}, nil
}

type sqliteRow struct{ row *sql.Row }

func (r sqliteRow) Scan(dest ...any) error {
	d, fix := msDests(dest)
	if err := r.row.Scan(d...); err != nil {
		return err
	}
	fix()
	return nil
}

type sqliteRows struct{ rows *sql.Rows }

func (r sqliteRows) Next() bool { return r.rows.Next() }
func (r sqliteRows) Err() error { return r.rows.Err() }
func (r sqliteRows) Close()     { _ = r.rows.Close() }

func (r sqliteRows) Scan(dest ...any) error {
	d, fix := msDests(dest)
	if err := r.rows.Scan(d...); err != nil {
		return err
	}
	fix()
	return nil
}

// msArgs replaces every time.Time argument by its milliseconds.
func msArgs(args []any) []any {
	out := slices.Clone(args)
	for i, a := range out {
		if tm, ok := a.(time.Time); ok {
			out[i] = tm.UnixMilli()
		}
	}
	return out
}

// msDests replaces every *time.Time destination by an *int64; fix, called
// after a successful Scan, stores the instants.
func msDests(dest []any) (out []any, fix func()) {
	out = slices.Clone(dest)
	var fixes []func()
	for i, d := range dest {
		if tp, ok := d.(*time.Time); ok {
			ms := new(int64)
			out[i] = ms
			fixes = append(fixes, func() { *tp = time.UnixMilli(*ms).UTC() })
		}
	}
	return out, func() {
		for _, f := range fixes {
			f()
		}
	}
}
