package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"text/tabwriter"
	"time"

	"github.com/pressly/goose/v3"
)

// runMigrate is the migrate command.
func runMigrate(ctx context.Context, args []string) int {
	return migrateCmd(ctx, args, os.Stdout, os.Stderr)
}

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := urlFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: leasehold migrate up|down|status [-url URL]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  up      apply every pending leasehold migration")
		fmt.Fprintln(stderr, "  down    roll back the most recent applied migration")
		fmt.Fprintln(stderr, "  status  list each migration's version, file and whether it is applied")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "The URL's scheme chooses the dialect: postgres:// or postgresql:// (Postgres),")
		fmt.Fprintln(stderr, "sqlserver:// (SQL Server). Versions are tracked in leasehold_schema_version.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	sub, code, ok := parseSub(fs, args)
	if !ok {
		return code
	}
	switch sub {
	case "up", "down", "status":
	case "":
		fs.Usage()
		return 2
	default:
		return exitCode(stderr, "migrate", usagef("unknown subcommand %q: want up, down or status", sub))
	}
	raw, err := resolveURL(*rawURL)
	if err != nil {
		return exitCode(stderr, "migrate", err)
	}
	conn, err := openDB(ctx, raw)
	if err != nil {
		return exitCode(stderr, "migrate", err)
	}
	defer conn.close()
	p, err := conn.migrator()
	if err != nil {
		return exitCode(stderr, "migrate", err)
	}
	if err := runMigration(ctx, p, sub, stdout); err != nil {
		return exitCode(stderr, "migrate "+sub, err)
	}
	return 0
}

// runMigration runs one migrate subcommand on p.
func runMigration(ctx context.Context, p *goose.Provider, sub string, w io.Writer) error {
	switch sub {
	case "up":
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(w, "applied %d %s (%s)\n", r.Source.Version, path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		}
		if err != nil {
			return err
		}
		if len(res) == 0 {
			fmt.Fprintln(w, "nothing to apply: the schema is current")
		}
		return nil
	case "down":
		r, err := p.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			fmt.Fprintln(w, "nothing to roll back: no migration is applied")
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "rolled back %d %s (%s)\n", r.Source.Version, path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		return nil
	default: // status
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tFILE\tSTATE\tAPPLIED AT")
		for _, s := range st {
			at := "-"
			if s.State == goose.StateApplied && !s.AppliedAt.IsZero() {
				at = utc(s.AppliedAt)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, path.Base(s.Source.Path), s.State, at)
		}
		return tw.Flush()
	}
}
