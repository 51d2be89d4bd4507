package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

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

// reachDatabase makes Start's database calls, each under ctx (bounded by
// WriteTimeout when ctx has no deadline) and retried until it succeeds or
// ctx ends: the schema check (ErrSchema fails at once), the membership row
// (RegisterNode), and the definitions (PutAgentDefinition of every
// registered expectation's recovery policy and max attempts, so that a
// sweeper on a node without an actor's code, and the operator CLI, know
// what the nodes that run it would do with its orphans), then the
// finisher's own definitions when it is a DefinitionRecorder (the workflow
// engine's versioned workflow definitions).
func (n *Node) reachDatabase(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.WriteTimeout)
		defer cancel()
	}
	if err := untilReached(ctx, "check the schema", n.CheckSchema); err != nil {
		return err
	}
	err := untilReached(ctx, "register the node", func(ctx context.Context) error {
		return n.store.RegisterNode(ctx, n.member(false))
	})
	if err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(n.actors)) {
		as := n.actors[id]
		for _, r := range as.runnable {
			e := as.exps[r.ExpectationID]
			d := episodes.Definition{ActorID: r.ActorID, ExpectationID: r.ExpectationID,
				RecoveryPolicy: string(e.Recovery), MaxAttempts: e.MaxAttempts}
			err := untilReached(ctx, fmt.Sprintf("record the definition of %s/%s", d.ActorID, d.ExpectationID), func(ctx context.Context) error {
				return n.store.PutAgentDefinition(ctx, d)
			})
			if err != nil {
				return err
			}
		}
	}
	if r, ok := n.finisher.(DefinitionRecorder); ok {
		if err := untilReached(ctx, "record the workflow definitions", r.RecordDefinitions); err != nil {
			return err
		}
	}
	return nil
}

// DefinitionRecorder is a Finisher that records definitions of its own
// when the node starts, after the agent definitions, under Start's ctx and
// retried like them: the workflow engine (package workflows) records every
// workflow definition registered on it, under its version. RecordDefinitions
// must be idempotent.
type DefinitionRecorder interface {
	RecordDefinitions(ctx context.Context) error
}

// untilReached runs call until it succeeds, it fails with ErrSchema, or
// ctx ends, backing off between tries; the error names what, with the
// last failure.
func untilReached(ctx context.Context, what string, call func(context.Context) error) error {
	backoff := 20 * time.Millisecond
	for {
		err := call(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrSchema):
			return err
		case ctx.Err() != nil || !backOff(ctx, &backoff):
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, context.Cause(ctx))
		}
	}
}
