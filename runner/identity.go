package runner

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/claims"
)

// resolveIdentity picks the node identity once, at construction: the static
// string, else the function's answer, else a random per-process identity
// nonode-<pid>-<hex>, unique for the process lifetime but not across
// restarts (a restarted process must not inherit its predecessor's leases).
func resolveIdentity(static string, fn func() (string, error)) (string, error) {
	id := static
	if id == "" && fn != nil {
		v, err := fn()
		if err != nil {
			return "", fmt.Errorf("%w: node identity: %v", ErrInvalid, err)
		}
		id = v
	}
	if id == "" {
		b := make([]byte, 6)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("node identity: %w", err)
		}
		id = fmt.Sprintf("nonode-%d-%s", os.Getpid(), hex.EncodeToString(b))
	}
	if err := claims.ValidateOwner(id); err != nil {
		return "", fmt.Errorf("%w: node identity: %v", ErrInvalid, err)
	}
	return id, nil
}
