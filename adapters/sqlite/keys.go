package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
)

// keyVersionAbort starts the message of migration 00014's insert trigger,
// which aborts a dedupe key of a version the file no longer uses (SQLite
// triggers cannot set an error code); dbError reports it as
// episodes.ErrKeyVersion.
const keyVersionAbort = "leasehold: key version"

var _ episodes.KeyVersioner = (*Store)(nil)

// KeyVersion runs GetKeyVersion: the dedupe key version the file uses, and
// when it moved there (nil: it started there).
func (s *Store) KeyVersion(ctx context.Context) (dedupe.KeyVersion, *time.Time, error) {
	row, err := s.q.GetKeyVersion(ctx, s.conn)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, errors.New("sqlite: GetKeyVersion: leasehold_key_version has no row (migration 00014 writes it)")
	}
	if err != nil {
		return 0, nil, dbError("GetKeyVersion", err)
	}
	return dedupe.KeyVersion(row.Version), fromMsPtr(row.SwitchedAt), nil
}

// SwitchKeyVersion runs SwitchKeyVersion under the write lock (BEGIN
// IMMEDIATE, which no insert runs beside): the file moves to key version 2
// unless a node whose heartbeat is within q.LiveWithin cannot compute it.
// It returns the version after the call and, when that is still 1, the
// nodes that kept it there (ListKeyVersionLaggards). q.LockWait does not
// apply: the connection's busy_timeout bounds the wait for the lock.
func (s *Store) SwitchKeyVersion(ctx context.Context, q episodes.KeySwitch) (dedupe.KeyVersion, []episodes.KeyLaggard, error) {
	q = q.WithDefaults()
	var version int64
	err := s.inTx(ctx, func(tx *Store) error {
		v, err := tx.q.SwitchKeyVersion(ctx, tx.conn, q.LiveWithin.Milliseconds())
		if errors.Is(err, sql.ErrNoRows) {
			row, rerr := tx.q.GetKeyVersion(ctx, tx.conn)
			v, err = row.Version, rerr
		}
		version = v
		return err
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
		out = append(out, episodes.NewKeyLaggard(r.NodeID, r.Stack, r.Env, r.KeyVersion, r.HeartbeatAgeMs))
	}
	return dedupe.KeyVersion(version), out, nil
}
