// Package leasehold starts what a production node runs, with one call: the
// runner's node (triggers, leases, runs), its recovery sweeper (orphans of
// crashed nodes, each taken over exactly once) and its maintenance runner
// (archiving, which frees dedupe keys; spent claims; stale membership
// rows), each with the defaults the seed specifies unless configured.
//
//	node, err := leasehold.Start(ctx, leasehold.Config{Node: runner.Config{
//		Store: postgres.New(pool), TriggerWaker: postgres.NewNotifier(pool),
//	}}, billing, monitoring)
//	...
//	defer node.Stop(shutdownCtx) // stops sweeping and maintenance, then drains
//
// Every node of a cluster may run all three: the database decides which
// node recovers an orphan (recovery.sql) and which runs maintenance at a
// time (its maintenance lock). Nothing here coordinates on its own.
package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// Config configures Start.
type Config struct {
	// Node is the runner's configuration; Node.Store must also implement
	// recovery.Store and maintenance.Store (every leasehold adapter does)
	// unless the part that needs it is disabled.
	Node runner.Config
	// Recovery configures the sweeper; the zero value is the seed's
	// defaults (first sweep 2 minutes after start, then every minute).
	Recovery recovery.SweeperConfig
	// Maintenance configures the maintenance runner; the zero value is its
	// defaults (7 days of retention, a run every 10 minutes). Its Lease
	// defaults to Node.Lease.
	Maintenance maintenance.Config
	// NoRecovery and NoMaintenance leave the part out (it runs elsewhere,
	// e.g. maintenance in a cron job).
	NoRecovery, NoMaintenance bool
}

// Node is a started runner.Node with its sweeper and maintenance runner.
type Node struct {
	*runner.Node
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// ErrInvalid: Start was given a configuration it cannot start.
var ErrInvalid = errors.New("leasehold: invalid")

// Start creates the node, registers actors, starts it (see runner.Node.Start:
// it refuses a schema that is missing or older than the binary), then its
// recovery sweeper and maintenance runner. ctx bounds Start only; the node
// runs until Stop.
func Start(ctx context.Context, cfg Config, actors ...runner.Actor) (*Node, error) {
	logger := cfg.Node.Logger
	if logger == nil {
		logger = slog.Default()
	}
	node, err := runner.NewNode(cfg.Node)
	if err != nil {
		return nil, err
	}
	for _, a := range actors {
		if err := node.Register(a); err != nil {
			return nil, err
		}
	}
	var sweeper *recovery.Sweeper
	if !cfg.NoRecovery {
		store, ok := cfg.Node.Store.(recovery.Store)
		if !ok {
			return nil, fmt.Errorf("%w: the store %T does not implement recovery.Store (set NoRecovery to run without a sweeper)", ErrInvalid, cfg.Node.Store)
		}
		rec, err := recovery.New(store, node, logger, cfg.Node.Observer)
		if err != nil {
			return nil, err
		}
		if sweeper, err = recovery.NewSweeper(rec, cfg.Recovery); err != nil {
			return nil, err
		}
	}
	var maint *maintenance.Runner
	if !cfg.NoMaintenance {
		store, ok := cfg.Node.Store.(maintenance.Store)
		if !ok {
			return nil, fmt.Errorf("%w: the store %T does not implement maintenance.Store (set NoMaintenance to run without it)", ErrInvalid, cfg.Node.Store)
		}
		mcfg := cfg.Maintenance
		if mcfg.Lease == 0 {
			mcfg.Lease = node.Lease()
		}
		if maint, err = maintenance.NewRunner(store, mcfg, logger, cfg.Node.Observer); err != nil {
			return nil, err
		}
	}
	if err := node.Start(ctx); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	n := &Node{Node: node, cancel: cancel}
	if sweeper != nil {
		n.bg.Go(func() { _ = sweeper.Run(bg) })
	}
	if maint != nil {
		n.bg.Go(func() { _ = maint.Run(bg) })
	}
	return n, nil
}

// Stop stops the sweeper and the maintenance runner, then drains the node
// (runner.Node.Drain: current steps finish, the rest is handed over at
// once) by ctx's deadline.
func (n *Node) Stop(ctx context.Context) (runner.DrainSummary, error) {
	n.cancel()
	n.bg.Wait()
	return n.Drain(ctx)
}
