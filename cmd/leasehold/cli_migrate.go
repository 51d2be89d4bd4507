package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"text/tabwriter"
	"time"

	"github.com/pressly/goose/v3"
)

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold migrate up|down|status [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "  up      apply every pending leasehold migration")
		fmt.Fprintln(w, "  down    roll back the most recent applied migration")
		fmt.Fprintln(w, "  status  list each migration's version, file and whether it is applied")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The URL's scheme chooses the dialect: postgres:// or postgresql:// (Postgres),")
		fmt.Fprintln(w, "sqlserver:// (SQL Server), sqlite: or file: (a SQLite file, created by migrate")
		fmt.Fprintln(w, "when missing). Versions are tracked in leasehold_schema_version.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "migrate", args, stdout, stderr)
	if !ok {
		return code
	}
	sub, rest, code, ok := subcommand(fs, "migrate", pos, stderr, "up", "down", "status")
	if !ok {
		return code
	}
	cmd := "migrate " + sub
	if err := noArgs(rest); err != nil {
		return exitCode(stderr, cmd, err)
	}
	raw, err := resolveURL(*rawURL)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	conn, err := openDB(ctx, raw, true)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	defer conn.close()
	p, err := conn.migrator()
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	if err := runMigration(ctx, p, sub, stdout); err != nil {
		return exitCode(stderr, cmd, err)
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
