package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// ErrSchema: the leasehold schema in the database is missing or older than
// the migrations this binary embeds, so its statements would fail (an
// undefined table or column). One sentinel for every dialect: adapters wrap
// it, runner.Node.Start returns it, and errors.Is finds it. Run the
// migrations (postgres.Migrate, sqlserver.Migrate, `leasehold migrate up`).
var ErrSchema = errors.New("leasehold: schema missing or older than this binary: run the migrations (leasehold migrate up)")

// Latest returns the newest migration version in fsys (goose file names:
// a version number, an underscore, a name), 0 when there is none.
func Latest(fsys fs.FS) int64 {
	files, _ := fs.Glob(fsys, "*.sql")
	var latest int64
	for _, f := range files {
		digits, _, _ := strings.Cut(f, "_")
		if v, err := strconv.ParseInt(digits, 10, 64); err == nil {
			latest = max(latest, v)
		}
	}
	return latest
}

// Check judges the database's leasehold version, current (0: none applied
// or no version table), against needed, the newest embedded migration. A
// schema newer than the binary passes: a rolling deploy runs old nodes on a
// migrated schema, and migrations only add.
func Check(current, needed int64, where string) error {
	switch {
	case current <= 0:
		return fmt.Errorf("%w: no leasehold schema found%s", ErrSchema, where)
	case current < needed:
		return fmt.Errorf("%w: the schema%s is at version %d, this binary needs %d", ErrSchema, where, current, needed)
	}
	return nil
}
