package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
)

// ErrKeyVersion: the database moved to a newer dedupe key version while a
// caller's transaction was creating episodes under the older one
// (episodes.ErrKeyVersion), and the episode was not created. Roll that
// transaction back (on Postgres it can no longer commit) and run it again:
// the node hashes under the new version from then on. Outside a caller's
// transaction the node retries by itself.
var ErrKeyVersion = episodes.ErrKeyVersion

// LiveEpisodeFinder reads the live (not archived) episode that holds a
// dedupe key, 0 for none (FindLiveEpisode; it decides nothing). Every
// adapter has it. A node needs it once its database uses dedupe key
// version 2, to find a trigger fired before the switch under its version 1
// key.
type LiveEpisodeFinder interface {
	FindLiveEpisode(ctx context.Context, key string) (int64, error)
}

// keyVersion is the dedupe key version the database uses, read when first
// needed and again after the database refused a key (forgetKeyVersion). A
// store without episodes.KeyVersioner hashes under version 1.
func (n *Node) keyVersion(ctx context.Context) (dedupe.KeyVersion, error) {
	if v := n.keyVer.Load(); v != 0 {
		return dedupe.KeyVersion(v), nil
	}
	kv, ok := n.store.(episodes.KeyVersioner)
	if !ok {
		n.keyVer.Store(int32(dedupe.KeyV1))
		return dedupe.KeyV1, nil
	}
	v, _, err := kv.KeyVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the database's dedupe key version: %w", err)
	}
	if !v.Valid() {
		return 0, fmt.Errorf("%w: the database uses dedupe key version %d, which this build (newest %d) does not compute; upgrade this node",
			ErrSchema, int(v), int(dedupe.LatestKeyVersion))
	}
	n.keyVer.Store(int32(v))
	return v, nil
}

// forgetKeyVersion makes the next keyVersion read the database again, when
// err says the database refused a key of the version this node had read.
// It reports whether it did.
func (n *Node) forgetKeyVersion(err error) bool {
	if !errors.Is(err, episodes.ErrKeyVersion) {
		return false
	}
	n.keyVer.Store(0)
	return true
}

// eventKeys is an event's dedupe key in every version, folded into env,
// and its trigger ref.
func eventKeys(as *actorState, e *Expectation, env, event, eventID string, raw json.RawMessage) (dedupe.EventKeys, json.RawMessage, error) {
	keys, err := dedupe.EventKeysOf(as.actor.ID, e.ID, eventID, raw)
	if err == nil {
		keys.V1, err = dedupe.InEnv(env, keys.V1)
	}
	if err == nil {
		keys.V2, err = dedupe.InEnv(env, keys.V2)
	}
	if err != nil {
		return dedupe.EventKeys{}, nil, invalid(fmt.Sprintf("fire %s/%s", as.actor.ID, e.ID), err)
	}
	ref, _ := json.Marshal(map[string]string{"event": event, "event_id": eventID})
	return keys, ref, nil
}

// keyFor is the dedupe key (and its version, zero for a key no version
// changes) an event with keys gets under the database's version. existing
// is the live episode that already holds the event's version 1 key when
// the database uses version 2 and the two keys differ: the same trigger,
// fired before the database moved, which this one duplicates. After the
// switch no version 1 key is inserted again (migration 00014's trigger),
// so that read cannot miss one being written.
func (n *Node) keyFor(ctx context.Context, finder any, keys dedupe.EventKeys) (key string, version int16, existing int64, err error) {
	if !keys.Sensitive() {
		return keys.V2, 0, 0, nil
	}
	v, err := n.keyVersion(ctx)
	if err != nil {
		return "", 0, 0, err
	}
	if v == dedupe.KeyV1 {
		return keys.V1, int16(v), 0, nil
	}
	f, ok := finder.(LiveEpisodeFinder)
	if !ok {
		return "", 0, 0, fmt.Errorf("%w: the database uses dedupe key version %d and the store (%T) cannot read a live episode by key (FindLiveEpisode)",
			ErrInvalid, int(v), finder)
	}
	existing, err = f.FindLiveEpisode(ctx, keys.V1)
	if err != nil {
		return "", 0, 0, fmt.Errorf("read the live episode of the version 1 key: %w", err)
	}
	return keys.At(v), int16(v), existing, nil
}
