package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
)

// KeyVersionStore is the dedupe key version surface of an adapter
// (sql/queries/<dialect>/keys.sql, migration 00014) with the statements
// that create episodes under a key version.
type KeyVersionStore interface {
	DeferredStore
	episodes.KeyVersioner
	RegisterNode(ctx context.Context, m membership.Member) error
	FindLiveEpisode(ctx context.Context, key string) (int64, error)
}

// KeyVersionBackend is what the key version scenarios need from one
// isolated backend.
type KeyVersionBackend struct {
	Store KeyVersionStore
	// StartAt sets the database's key version to v, as migration 00014
	// leaves a database that already held work (1) or a new one (2).
	// Test-only; unused where the dialect does not switch.
	StartAt func(t testing.TB, v int)
	// InsertAsOldNode inserts an episode holding key with no key_version,
	// as a node older than migration 00014 writes one, and returns the
	// insert's error.
	InsertAsOldNode func(t testing.TB, key string) error
	// AgeNode moves node id's heartbeat back by d.
	AgeNode func(t testing.TB, id string, d time.Duration)
	// BackdateSwitch moves the switch's recorded instant back by d.
	BackdateSwitch func(t testing.TB, d time.Duration)
}

// RunKeyVersion runs the scenarios of the cluster's dedupe key version:
// the version a new database starts at, the switch that waits for every
// live node to compute version 2, and the guard that refuses, on every
// creating statement, a version 1 key once the database has moved, so that
// the set of live version 1 keys a version 2 node looks its trigger up in
// can only shrink.
//
// switchable says whether the dialect moves to version 2 at all (Postgres,
// SQLite); SQL Server stays on version 1 (queries.DialectOnly:
// SwitchKeyVersion), and only its scenarios run there.
func RunKeyVersion(t *testing.T, switchable bool, newBackend func(t *testing.T) KeyVersionBackend) {
	t.Run("ANewDatabaseStartsAtTheNewestVersionItCanMoveTo", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		v, at, err := b.Store.KeyVersion(ctx(t))
		require.NoError(t, err)
		require.Nil(t, at, "it started there")
		if switchable {
			require.Equal(t, dedupe.KeyV2, v)
		} else {
			require.Equal(t, dedupe.KeyV1, v)
		}
	})

	if !switchable {
		t.Run("TheDatabaseStaysOnVersion1", func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			v, _, err := b.Store.SwitchKeyVersion(ctx(t), episodes.KeySwitch{})
			require.Error(t, err, "the dialect has no switch")
			require.Equal(t, dedupe.KeyV1, v)
			_, err = b.Store.CreateEpisode(ctx(t), newKeyed("event:a:e:one", 1))
			require.NoError(t, err, "version 1 keys are its keys")
			require.NoError(t, b.InsertAsOldNode(t, "event:a:e:old"), "so are an old node's")
		})
		return
	}

	t.Run("AVersion1KeyIsRefusedOnceTheDatabaseMoved", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		b.StartAt(t, 1)
		s := b.Store
		// On version 1 every key goes in: a version 1 key, one every
		// version shares (0, written as 2), an old node's.
		before, err := s.CreateEpisode(ctx(t), newKeyed("event:a:e:v1-before", 1))
		require.NoError(t, err)
		require.True(t, before.Created)
		_, err = s.CreateEpisode(ctx(t), newKeyed("event:a:e:shared-before", 0))
		require.NoError(t, err)
		require.NoError(t, b.InsertAsOldNode(t, "event:a:e:old-before"))

		v, laggards, err := s.SwitchKeyVersion(ctx(t), episodes.KeySwitch{})
		require.NoError(t, err)
		require.Empty(t, laggards)
		require.Equal(t, dedupe.KeyV2, v)
		got, at, err := s.KeyVersion(ctx(t))
		require.NoError(t, err)
		require.Equal(t, dedupe.KeyV2, got)
		require.NotNil(t, at, "the switch's instant")

		// Every creating statement refuses a version 1 key now, and writes
		// nothing of it.
		_, err = s.CreateEpisode(ctx(t), newKeyed("event:a:e:v1-after", 1))
		require.ErrorIs(t, err, episodes.ErrKeyVersion)
		_, err = s.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: newKeyed("event:a:e:v1-deferred", 1)})
		require.ErrorIs(t, err, episodes.ErrKeyVersion)
		_, err = s.CreateDeferredEpisodes(ctx(t), episodes.DeferredBatch{New: newKeyed("", 0),
			Items: []episodes.BatchItem{{DedupeKey: "event:a:e:batch-v2", KeyVersion: 2}, {DedupeKey: "event:a:e:batch-v1", KeyVersion: 1}}})
		require.ErrorIs(t, err, episodes.ErrKeyVersion)
		require.Error(t, b.InsertAsOldNode(t, "event:a:e:old-after"), "a node older than the key version writes a version 1 key")
		for _, key := range []string{"event:a:e:v1-after", "event:a:e:v1-deferred", "event:a:e:batch-v2", "event:a:e:batch-v1", "event:a:e:old-after"} {
			id, err := s.FindLiveEpisode(ctx(t), key)
			require.NoError(t, err)
			require.Zero(t, id, "%s was written", key)
		}

		// Version 2 keys and shared ones go in, alone and batched; the
		// version 1 keys written before stay, for a version 2 node to find.
		for _, n := range []episodes.New{newKeyed("event:a:e:v2-after", 2), newKeyed("event:a:e:shared-after", 0)} {
			c, err := s.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			require.True(t, c.Created)
		}
		d, err := s.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: newKeyed("event:a:e:v2-deferred", 2)})
		require.NoError(t, err)
		require.True(t, d.Created)
		created, err := s.CreateDeferredEpisodes(ctx(t), episodes.DeferredBatch{New: newKeyed("", 0),
			Items: []episodes.BatchItem{{DedupeKey: "event:a:e:batch-v2", KeyVersion: 2}, {DedupeKey: "event:a:e:batch-shared"}}})
		require.NoError(t, err)
		require.Len(t, created, 2)
		id, err := s.FindLiveEpisode(ctx(t), "event:a:e:v1-before")
		require.NoError(t, err)
		require.Equal(t, before.Episode.ID, id)
		id, err = s.FindLiveEpisode(ctx(t), "event:a:e:old-before")
		require.NoError(t, err)
		require.NotZero(t, id)

		// A duplicate of a version 1 key written before is still a
		// duplicate (not refused: nothing is inserted).
		again, err := s.CreateEpisode(ctx(t), newKeyed("event:a:e:shared-before", 0))
		require.NoError(t, err)
		require.False(t, again.Created)
	})

	t.Run("TheSwitchWaitsForEveryLiveNode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		b.StartAt(t, 1)
		s := b.Store
		require.NoError(t, s.RegisterNode(ctx(t), membership.Member{ID: "node-new", Mode: "full", KeyVersion: 2}))
		require.NoError(t, s.RegisterNode(ctx(t), membership.Member{ID: "node-old", Env: "rc", Mode: "trigger_only"})) // computes version 1 only
		require.NoError(t, s.RegisterNode(ctx(t), membership.Member{ID: "node-gone", Mode: "full"}))
		b.AgeNode(t, "node-gone", membership.DefaultSilentAfter+time.Second)

		v, laggards, err := s.SwitchKeyVersion(ctx(t), episodes.KeySwitch{})
		require.NoError(t, err)
		require.Equal(t, dedupe.KeyV1, v, "node-old would write version 1 keys")
		require.Len(t, laggards, 1, "%+v", laggards)
		require.Equal(t, "node-old", laggards[0].NodeID)
		require.Equal(t, "rc", laggards[0].Env)
		require.Equal(t, dedupe.KeyV1, laggards[0].KeyVersion)
		_, err = s.CreateEpisode(ctx(t), newKeyed("event:a:e:still-v1", 1))
		require.NoError(t, err, "refused: still version 1")

		// A node that comes back at version 2 no longer holds it; one
		// silent past LiveWithin neither.
		require.NoError(t, s.RegisterNode(ctx(t), membership.Member{ID: "node-old", Env: "rc", Mode: "trigger_only", KeyVersion: 2}))
		v, laggards, err = s.SwitchKeyVersion(ctx(t), episodes.KeySwitch{LiveWithin: time.Hour})
		require.NoError(t, err)
		require.Equal(t, dedupe.KeyV1, v, "node-gone is live within an hour")
		require.Len(t, laggards, 1)
		require.Equal(t, "node-gone", laggards[0].NodeID)
		v, laggards, err = s.SwitchKeyVersion(ctx(t), episodes.KeySwitch{})
		require.NoError(t, err)
		require.Equal(t, dedupe.KeyV2, v)
		require.Empty(t, laggards)
		b.BackdateSwitch(t, time.Hour) // so that a second switch's instant would differ
		_, switched, err := s.KeyVersion(ctx(t))
		require.NoError(t, err)
		require.NotNil(t, switched)
		v, _, err = s.SwitchKeyVersion(ctx(t), episodes.KeySwitch{})
		require.NoError(t, err)
		require.Equal(t, dedupe.KeyV2, v, "once, and for good")
		_, again, err := s.KeyVersion(ctx(t))
		require.NoError(t, err)
		require.Equal(t, switched.UnixMicro(), again.UnixMicro(), "a second switch changes nothing")
	})
}

// newKeyed is an episode to create holding key under key version v.
func newKeyed(key string, v int16) episodes.New {
	return episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
		DedupeKey: key, KeyVersion: v, MaxAttempts: 3}
}
