package main

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/adapters/postgres"
)

// schemas creates the run's throwaway schemas and drops them: each
// system-round gets a fresh one, migrated by its system and holding the
// ledger, and drops it once verified; whatever is left is dropped when the
// run ends, Ctrl-C included. A fresh schema is the whole state a system
// starts a round with: no row, index entry or dead tuple of an earlier
// round, and no table list that a new migration could make stale.
type schemas struct {
	admin  *pgx.Conn
	prefix string
	cfg    config

	mu   sync.Mutex
	live map[string]bool
}

func newSchemas(admin *pgx.Conn, cfg config, prefix string) *schemas {
	return &schemas{admin: admin, prefix: prefix, cfg: cfg, live: map[string]bool{}}
}

// create makes the schema prefix_suffix, empty.
func (s *schemas) create(ctx context.Context, suffix string) (string, error) {
	name := s.prefix + "_" + suffix
	if _, err := s.admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.live[name] = true
	s.mu.Unlock()
	return name, nil
}

// fresh makes one system-round's schema: created, migrated by leasehold
// (postgres.Migrate, through database/sql as the library documents) or by
// River (rivermigrate), and given the ledger table.
func (s *schemas) fresh(ctx context.Context, space int, river bool) (string, error) {
	suffix := fmt.Sprintf("%d_leasehold", space)
	if river {
		suffix = fmt.Sprintf("%d_river", space)
	}
	name, err := s.create(ctx, suffix)
	if err != nil {
		return "", err
	}
	if river {
		err = migrateRiver(ctx, s.cfg, name)
	} else {
		err = migrateLeasehold(ctx, s.cfg.url, name)
	}
	if err != nil {
		return "", err
	}
	if _, err := s.admin.Exec(ctx, fmt.Sprintf(ledgerDDL, pgx.Identifier{name, "compare_ledger"}.Sanitize())); err != nil {
		return "", fmt.Errorf("schema %s: ledger: %w", name, err)
	}
	return name, nil
}

// drop removes name and everything in it.
func (s *schemas) drop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "compare: drop schema %s: %v\n", name, err)
		return
	}
	s.mu.Lock()
	delete(s.live, name)
	s.mu.Unlock()
}

// dropAll removes every schema still there.
func (s *schemas) dropAll() {
	s.mu.Lock()
	names := make([]string, 0, len(s.live))
	for n := range s.live {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		s.drop(n)
	}
}

// migrateLeasehold applies leasehold's migrations into schema.
func migrateLeasehold(ctx context.Context, url, schema string) error {
	pool, err := newPool(ctx, url, schema, 2, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := postgres.Migrate(ctx, db); err != nil {
		return fmt.Errorf("schema %s: %w", schema, err)
	}
	return nil
}

// migrateRiver applies River's migrations into schema.
func migrateRiver(ctx context.Context, cfg config, schema string) error {
	pool, err := newPool(ctx, cfg.url, schema, 2, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: cfg.logger})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate schema %s: %w", schema, err)
	}
	return nil
}

// ownDatabase creates the database name for the run and returns url pointed
// at it, so that pg_stat_database.xact_commit counts this run's sessions
// alone, and a function that drops it. When the role may not create
// databases it returns url unchanged and the reason, and the run uses that
// database, shared with whatever else runs there.
func ownDatabase(ctx context.Context, admin *pgx.Conn, url, name string) (string, func(), string, error) {
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return url, func() {}, fmt.Sprintf("CREATE DATABASE failed (%v): the run uses %s, shared with other sessions", err,
			admin.Config().Database), nil
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "compare: drop database %s: %v\n", name, err)
		}
	}
	own, err := withDatabase(url, name)
	if err != nil {
		drop()
		return url, func() {}, "", err
	}
	return own, drop, "the run's own database " + name + ": only this run's sessions", nil
}

// withDatabase is url (a postgres:// URL or a key=value string) naming
// database name instead of its own.
func withDatabase(raw, name string) (string, error) {
	if !strings.Contains(raw, "://") {
		return raw + " dbname=" + name, nil // libpq: the last dbname wins
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
