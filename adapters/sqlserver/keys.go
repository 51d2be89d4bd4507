package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
)

var _ episodes.KeyVersioner = (*Store)(nil)

// ErrNoKeySwitch: SQL Server databases stay on dedupe key version 1
// (queries.DialectOnly: SwitchKeyVersion).
var ErrNoKeySwitch = errors.New("sqlserver: a SQL Server database stays on dedupe key version 1: " +
	"the switch needs an insert guard this adapter does not have (give events an event id when producers write payloads differently)")

// KeyVersion runs GetKeyVersion: 1, which the table's check pins.
func (s *Store) KeyVersion(ctx context.Context) (dedupe.KeyVersion, *time.Time, error) {
	var (
		version  int64
		switched sql.NullTime
	)
	if err := s.queryRow(ctx, "GetKeyVersion").Scan(&version, &switched); err != nil {
		return 0, nil, fmt.Errorf("sqlserver: GetKeyVersion: %w", err)
	}
	var at *time.Time
	if switched.Valid {
		at = &switched.Time
	}
	return dedupe.KeyVersion(version), at, nil
}

// SwitchKeyVersion refuses (ErrNoKeySwitch) without a statement, naming
// the live nodes ListKeyVersionLaggards reads for the operator all the
// same.
func (s *Store) SwitchKeyVersion(ctx context.Context, q episodes.KeySwitch) (dedupe.KeyVersion, []episodes.KeyLaggard, error) {
	q = q.WithDefaults()
	rows, err := s.query(ctx, "ListKeyVersionLaggards", sql.Named("live_ms", q.LiveWithin.Milliseconds()))
	if err != nil {
		return 0, nil, err
	}
	var out []episodes.KeyLaggard
	for rows.Next() {
		var (
			id, stack, env string
			kv, ageMs      int64
		)
		if err := rows.Scan(&id, &stack, &env, &kv, &ageMs); err != nil {
			return 0, nil, err
		}
		out = append(out, episodes.NewKeyLaggard(id, stack, env, kv, ageMs))
	}
	return dedupe.KeyVersion(1), out, ErrNoKeySwitch
}
