package runner

import (
	"errors"
	"fmt"
	"maps"
)

// Mode says what a node (or one actor on it) does with its triggers. It can
// be changed at runtime, node-wide or per actor, without a restart.
//
//	mode          triggers fire  runs locally  trigger request written  polls requests
//	full          yes            yes           no (runs directly)       yes
//	trigger_only  yes            no            yes                      no
//	disabled      no             no            no                       no
//
// In trigger_only the episode row is still created (so UIs show it), with
// its trigger request, by one statement; a full node's poller runs it.
type Mode string

const (
	ModeFull        Mode = "full"
	ModeTriggerOnly Mode = "trigger_only"
	ModeDisabled    Mode = "disabled"
)

// ErrDisabled: the trigger was refused because the node, or its actor, is
// in mode disabled.
var ErrDisabled = errors.New("runner: disabled")

func (m Mode) valid() error {
	switch m {
	case ModeFull, ModeTriggerOnly, ModeDisabled:
		return nil
	}
	return fmt.Errorf("%w: unknown mode %q (want full, trigger_only or disabled)", ErrInvalid, m)
}

// modes is an immutable snapshot; writers swap a new one in, so reads on the
// trigger path take no lock.
type modes struct {
	node      Mode
	overrides map[string]Mode
}

func (m *modes) of(actorID string) Mode {
	if o, ok := m.overrides[actorID]; ok {
		return o
	}
	return m.node
}

// Status is a node's identity and modes, for operators.
type Status struct {
	Identity  string
	Stack     string
	Env       string
	Mode      Mode
	Overrides map[string]Mode // per actor; a copy
}

// Status returns the node's identity, mode and per-actor overrides.
func (n *Node) Status() Status {
	m := n.modes.Load()
	return Status{Identity: n.id, Stack: n.cfg.StackSlug, Env: n.cfg.Env, Mode: m.node, Overrides: maps.Clone(m.overrides)}
}

// Executes reports whether the node runs episodes locally (mode full); the
// recovery sweeper of a node that does not skips its sweeps.
func (n *Node) Executes() bool { return n.Mode() == ModeFull }

// Mode returns the node-wide mode.
func (n *Node) Mode() Mode { return n.modes.Load().node }

// ActorMode returns the mode that applies to actorID: its override, else
// the node's mode.
func (n *Node) ActorMode(actorID string) Mode { return n.modes.Load().of(actorID) }

// SetMode switches the node-wide mode; the next trigger sees it. Episodes
// already running continue.
func (n *Node) SetMode(m Mode) error {
	if err := m.valid(); err != nil {
		return err
	}
	n.swapModes(func(cur *modes) *modes { return &modes{node: m, overrides: cur.overrides} })
	return nil
}

// SetActorMode overrides the mode of one registered actor.
func (n *Node) SetActorMode(actorID string, m Mode) error {
	if err := m.valid(); err != nil {
		return err
	}
	if _, ok := n.actors[actorID]; !ok {
		return fmt.Errorf("%w: actor %q", ErrUnknown, actorID)
	}
	n.swapModes(func(cur *modes) *modes {
		o := maps.Clone(cur.overrides)
		if o == nil {
			o = map[string]Mode{}
		}
		o[actorID] = m
		return &modes{node: cur.node, overrides: o}
	})
	return nil
}

// ClearActorMode removes actorID's override; the node's mode applies again.
func (n *Node) ClearActorMode(actorID string) {
	n.swapModes(func(cur *modes) *modes {
		o := maps.Clone(cur.overrides)
		delete(o, actorID)
		return &modes{node: cur.node, overrides: o}
	})
}

// ClearActorModes removes every override.
func (n *Node) ClearActorModes() {
	n.swapModes(func(cur *modes) *modes { return &modes{node: cur.node} })
}

func (n *Node) swapModes(next func(*modes) *modes) {
	for {
		cur := n.modes.Load()
		if n.modes.CompareAndSwap(cur, next(cur)) {
			n.pollWake() // a node that became full polls at once
			return
		}
	}
}
