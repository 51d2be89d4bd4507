package workflows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Migrate moves a running instance to version toVersion of its workflow,
// with an explicit mapping of its steps: mapping names every step of the
// instance, each with the step of toVersion that takes its state (its
// status, attempts and episode; its max attempts become the new step's),
// or "" when the step is removed. Steps of toVersion that no step maps to
// are added, pending. Then the instance follows toVersion, its parked
// reason is cleared, and the steps whose dependencies are done or skipped
// start, in the same transaction, under the instance lock like every
// advance: nothing advances the instance halfway through its migration.
//
// toVersion is the version registered on this engine or one a node
// recorded (see Definition.Version). It is refused with ErrInvalid,
// naming what: an unknown version, a mapping that leaves out one of the
// instance's steps or names a step it does not have, maps two steps to one,
// maps to a step toVersion lacks, removes a running step (its episode's end
// would advance nothing: wait for it, or map it), or gives a step of
// toVersion that has the ID of one of the instance's steps to another
// step (step IDs are part of their episodes' dedupe keys, so an ID means
// one step for the instance's whole life). A running step's episode keeps
// the actor and expectation it was created with. ErrNoInstance when there
// is no such instance; an instance that has ended is refused.
func (e *Engine) Migrate(ctx context.Context, instanceID int64, toVersion string, mapping map[string]string) (Instance, error) {
	inst, evs, err := migrate(ctx, e.store, instanceID, toVersion, mapping, e.version)
	if err != nil {
		return Instance{}, err
	}
	e.publish(evs...)
	e.node.PollNow()
	return inst, nil
}

// Migrate is Engine.Migrate for an operator with no Engine (`leasehold
// workflows migrate`): toVersion must be recorded in the database (a node
// that registers it records it when it starts). by names the operator; it
// is not stored (since migration 00016 an available episode records no
// source node). Nothing is published: the steps' episodes are polled by
// the nodes like any deferred work.
func Migrate(ctx context.Context, store Store, by string, instanceID int64, toVersion string, mapping map[string]string) (Instance, error) {
	inst, _, err := migrate(ctx, store, instanceID, toVersion, mapping, recordedVersion)
	return inst, err
}

// migrate is Migrate's transaction: resolve finds toVersion's definition
// (in tx).
func migrate(ctx context.Context, store Store, instanceID int64, toVersion string, mapping map[string]string,
	resolve func(ctx context.Context, tx Tx, workflowID, version string) (*Definition, error)) (Instance, []Event, error) {
	var (
		inst Instance
		evs  []Event
	)
	err := store.InTx(ctx, func(tx Tx) error {
		evs = nil
		var err error
		if inst, err = tx.LockWorkflowInstance(ctx, instanceID); err != nil {
			return err
		}
		if inst.Status != InstanceRunning {
			return fmt.Errorf("%w: instance %d is %s", ErrInvalid, inst.ID, inst.Status)
		}
		to, err := resolve(ctx, tx, inst.WorkflowID, toVersion)
		if err != nil {
			return err
		}
		rows, err := tx.ListWorkflowSteps(ctx, inst.ID)
		if err != nil {
			return err
		}
		if err := checkMapping(to, rows, mapping); err != nil {
			return fmt.Errorf("%w: migrate instance %d to version %s: %v", ErrInvalid, inst.ID, toVersion, err)
		}
		if err := migrateSteps(ctx, tx, inst.ID, to, rows, mapping); err != nil {
			return err
		}
		ok, err := tx.SetWorkflowDefinitionVersion(ctx, inst.ID, toVersion)
		if err == nil && !ok {
			err = errors.New("the locked running instance was not migrated")
		}
		if err != nil {
			return err
		}
		inst.DefinitionVersion, inst.ParkedReason = toVersion, ""
		evs, err = startReady(ctx, tx, &inst, to)
		return err
	})
	if err != nil {
		return Instance{}, nil, fmt.Errorf("migrate workflow instance %d: %w", instanceID, err)
	}
	return inst, evs, nil
}

// recordedVersion returns the definition recorded for workflowID at
// version (GetWorkflowDefinition), checked to hash to it.
func recordedVersion(ctx context.Context, tx Tx, workflowID, version string) (*Definition, error) {
	if version == "" {
		return nil, fmt.Errorf("%w: migrate to which version? none given", ErrInvalid)
	}
	raw, found, err := tx.GetWorkflowDefinition(ctx, workflowID, version)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: workflow %q has no recorded version %q", ErrInvalid, workflowID, version)
	}
	d, err := parseStored(workflowID, version, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return d, nil
}

// version returns the definition of workflowID at version: the one
// registered here (recorded in tx, so the instance's version is in the
// database like every other), else the recorded one.
func (e *Engine) version(ctx context.Context, tx Tx, workflowID, version string) (*Definition, error) {
	if version == "" {
		return nil, fmt.Errorf("%w: migrate to which version? none given", ErrInvalid)
	}
	if reg, ok := e.def(workflowID); ok && reg.version == version {
		if err := tx.PutWorkflowDefinition(ctx, reg.stored(e.node.ID())); err != nil {
			return nil, err
		}
		return reg.def, nil
	}
	d, unrecorded, err := e.definitionOf(ctx, tx, &Instance{WorkflowID: workflowID, DefinitionVersion: version})
	switch {
	case err != nil:
		return nil, err
	case d == nil || unrecorded != "":
		return nil, fmt.Errorf("%w: workflow %q has no recorded version %q", ErrInvalid, workflowID, version)
	}
	return d, nil
}

// checkMapping says what is wrong with mapping the instance's step rows to
// the steps of to (see Migrate), or returns nil.
func checkMapping(to *Definition, rows []StepState, mapping map[string]string) error {
	have := make(map[string]StepState, len(rows))
	for _, r := range rows {
		have[r.StepID] = r
		if _, ok := mapping[r.StepID]; !ok {
			return fmt.Errorf("the mapping does not say what becomes of step %q", r.StepID)
		}
	}
	taken := map[string]string{}
	for _, old := range slices.Sorted(maps.Keys(mapping)) {
		r, ok := have[old]
		if !ok {
			return fmt.Errorf("the instance has no step %q", old)
		}
		target := mapping[old]
		if target == "" {
			if r.Status == StepRunning {
				return fmt.Errorf("step %q is running: wait for its episode to end, or map it", old)
			}
			continue
		}
		if _, ok := to.step(target); !ok {
			return fmt.Errorf("step %q is mapped to %q, which the version does not have", old, target)
		}
		if prev, dup := taken[target]; dup {
			return fmt.Errorf("steps %q and %q are both mapped to %q", prev, old, target)
		}
		taken[target] = old
	}
	for _, s := range to.Steps {
		if _, ok := have[s.ID]; ok && mapping[s.ID] != s.ID {
			return fmt.Errorf("the version's step %q has the ID of one of the instance's steps: map that step to itself", s.ID)
		}
	}
	return nil
}

// migrateSteps moves, removes and adds the step rows, each conditioned on
// the state read under the lock.
func migrateSteps(ctx context.Context, tx Tx, instanceID int64, to *Definition, rows []StepState, mapping map[string]string) error {
	mapped := map[string]bool{}
	for _, r := range rows {
		target := mapping[r.StepID]
		var ok bool
		var err error
		if target == "" {
			ok, err = tx.DeleteWorkflowStep(ctx, instanceID, r.StepID, r.Status, r.EpisodeID)
		} else {
			sd, _ := to.step(target)
			mapped[target] = true
			ok, err = tx.MoveWorkflowStep(ctx, instanceID, r.StepID, target, sd.MaxAttempts, r.Status, r.EpisodeID)
		}
		if err == nil && !ok {
			err = fmt.Errorf("step %q changed under the instance lock", r.StepID)
		}
		if err != nil {
			return err
		}
	}
	for _, s := range to.Steps {
		if !mapped[s.ID] {
			if err := tx.InsertWorkflowStep(ctx, instanceID, s.ID, s.MaxAttempts); err != nil {
				return err
			}
		}
	}
	return nil
}

// RecordDefinition records d under its version (PutWorkflowDefinition) as
// a node that registers it does when it starts, by naming who recorded
// it, and returns the version: an operator can so record the definition a
// migration moves instances to before any node that runs it is deployed.
// A version already recorded is left as it is. ErrInvalid when d is not
// valid (see Engine.Register).
func RecordDefinition(ctx context.Context, store Store, d Definition, by string) (string, error) {
	d = d.clone()
	if err := d.validate(); err != nil {
		return "", err
	}
	version, raw := d.canonical()
	err := store.PutWorkflowDefinition(ctx, StoredDefinition{WorkflowID: d.ID, Version: version, Definition: raw, RecordedBy: by})
	if err != nil {
		return "", fmt.Errorf("record workflow %q version %s: %w", d.ID, version, err)
	}
	return version, nil
}
