package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
)

// KeyVersionCode is the SQLSTATE migration 00014's insert trigger raises
// for a dedupe key of a version the database no longer uses; the adapter
// reports it as episodes.ErrKeyVersion.
const KeyVersionCode = "LH002"

var _ episodes.KeyVersioner = (*Store)(nil)

// KeyVersion runs GetKeyVersion: the dedupe key version the database uses,
// and when it moved there (nil: it started there).
func (s *Store) KeyVersion(ctx context.Context) (dedupe.KeyVersion, *time.Time, error) {
	row, err := s.q.GetKeyVersion(ctx, s.conn)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, errors.New("postgres: GetKeyVersion: leasehold_key_version has no row (migration 00014 writes it)")
	}
	if err != nil {
		return 0, nil, dbError("GetKeyVersion", err)
	}
	return dedupe.KeyVersion(row.Version), row.SwitchedAt, nil
}

// SwitchKeyVersion runs SwitchKeyVersion (leasehold_switch_key_version,
// its own transaction): the database moves to key version 2 unless a node
// whose heartbeat is within q.LiveWithin cannot compute it. It returns the
// version after the call and, when that is still 1, the nodes that kept
// it there (ListKeyVersionLaggards).
func (s *Store) SwitchKeyVersion(ctx context.Context, q episodes.KeySwitch) (dedupe.KeyVersion, []episodes.KeyLaggard, error) {
	q = q.WithDefaults()
	version, err := s.q.SwitchKeyVersion(ctx, s.conn, db.SwitchKeyVersionParams{
		LiveMs: q.LiveWithin.Milliseconds(), LockWaitMs: q.LockWait.Milliseconds(),
	})
	if err != nil {
		return 0, nil, dbError("SwitchKeyVersion", err)
	}
	if version >= 2 {
		return dedupe.KeyVersion(version), nil, nil
	}
	rows, err := s.q.ListKeyVersionLaggards(ctx, s.conn, q.LiveWithin.Milliseconds())
	if err != nil {
		return dedupe.KeyVersion(version), nil, dbError("ListKeyVersionLaggards", err)
	}
	out := make([]episodes.KeyLaggard, 0, len(rows))
	for _, r := range rows {
		out = append(out, episodes.NewKeyLaggard(r.NodeID, r.Stack, r.Env, int64(r.KeyVersion), r.HeartbeatAgeMs))
	}
	return dedupe.KeyVersion(version), out, nil
}
