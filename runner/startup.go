package runner

import (
	"context"
	"log/slog"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/sql/schema"
)

// ErrSchema: the database's leasehold schema is missing or older than this
// binary's migrations (schema.ErrSchema, the one sentinel of every
// dialect). Start returns it; run the migrations first.
var ErrSchema = schema.ErrSchema

// SchemaChecker is implemented by adapters that can tell whether the
// database's leasehold schema is current (postgres.Store, sqlserver.Store).
type SchemaChecker interface {
	CheckSchema(ctx context.Context) error
}

// CheckSchema reports, wrapping ErrSchema, when the database's leasehold
// schema is missing or older than this binary needs; nil when it is current
// or the store cannot tell (it does not implement SchemaChecker). Start
// calls it; health probes may (health.Schema).
func (n *Node) CheckSchema(ctx context.Context) error {
	c, ok := n.store.(SchemaChecker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.WriteTimeout)
	defer cancel()
	return c.CheckSchema(ctx)
}

// recordDefinitions upserts the recovery policy and max attempts of every
// registered expectation (PutAgentDefinition), so that a sweeper on a node
// without an actor's code, and the operator CLI, know what the nodes that
// run it would do with its orphans. A failure is logged and retried with
// the membership refresh until it succeeds.
func (n *Node) recordDefinitions(ctx context.Context) {
	if n.definitionsRecorded.Load() {
		return
	}
	for _, as := range n.actors {
		for _, e := range as.exps {
			d := episodes.Definition{ActorID: as.actor.ID, ExpectationID: e.ID,
				RecoveryPolicy: string(e.Recovery), MaxAttempts: e.MaxAttempts}
			err := n.retryingUntil(ctx, func(ctx context.Context) error { return n.store.PutAgentDefinition(ctx, d) })
			if err != nil {
				n.log.WarnContext(ctx, "leasehold: recording definitions failed; will retry",
					slog.String("actor", d.ActorID), slog.String("expectation", d.ExpectationID), slog.Any("error", err))
				return
			}
		}
	}
	n.definitionsRecorded.Store(true)
}
