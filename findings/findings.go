package findings

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// Statuses of a finding.
const (
	StatusActive  = "active"
	StatusCleared = "cleared"
)

// ErrLeaseLost: the write was made on behalf of an episode whose work claim
// the caller no longer holds (or which is no longer running); nothing was
// written. It is claims.ErrLeaseLost.
var ErrLeaseLost = claims.ErrLeaseLost

// ErrInvalid: a finding was rejected before reaching the database.
var ErrInvalid = errors.New("findings: invalid")

// Finding is a finding row.
type Finding struct {
	ID               int64
	Key              string
	Env              string
	Status           string
	Class            string
	Severity         string
	Summary          string
	Data             json.RawMessage
	ActorID          string
	SourceStack      string
	RaisedByEpisode  int64
	UpdatedByEpisode int64
	// RaiseCount is how many raises this active finding absorbed: 1 when
	// it was first raised.
	RaiseCount int32
	RaisedAt   time.Time
	UpdatedAt  time.Time
}

// Raise describes a finding to raise.
type Raise struct {
	Key      string // required, at most 512 characters
	Class    string // at most 128 characters
	Severity string // at most 32 characters
	Summary  string
	Data     json.RawMessage
}

// Update changes the details of an active finding.
type Update struct {
	Severity string
	Summary  string
	Data     json.RawMessage
}

// Query selects active findings of one env. Env is matched exactly: "" is
// the unset env. Class, ActorID and Key "" mean any.
type Query struct {
	Env     string
	Class   string
	ActorID string
	Key     string
	Limit   int
}

// Store is what findings need from a dialect adapter. Writes are fenced on
// the episode's work claim t and take env and stack from the episode row.
type Store interface {
	// RaiseFinding returns ErrLeaseLost when t is not the live claim of
	// running episode episodeID.
	RaiseFinding(ctx context.Context, t claims.Token, episodeID int64, r Raise) (Finding, error)
	// UpdateFinding reports false when no finding with key is active.
	UpdateFinding(ctx context.Context, t claims.Token, episodeID int64, key string, u Update) (bool, error)
	// ClearFinding reports false when no finding with key was active.
	ClearFinding(ctx context.Context, t claims.Token, episodeID int64, key string) (bool, error)
	ActiveFindings(ctx context.Context, q Query) ([]Finding, error)
}
