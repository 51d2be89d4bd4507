package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// instanceStatuses are the statuses List filters on.
var instanceStatuses = []string{InstanceRunning, InstanceDone, InstanceFailed, InstanceCanceled}

// List returns instances, newest first (an operator read that locks
// nothing; see ListQuery). It needs no Engine, so the CLI uses it too.
func List(ctx context.Context, store Store, q ListQuery) ([]Instance, error) {
	if q.Status != "" && !slices.Contains(instanceStatuses, q.Status) {
		return nil, fmt.Errorf("%w: list: status %q (want one of %v)", ErrInvalid, q.Status, instanceStatuses)
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	list, err := store.ListWorkflowInstances(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list workflow instances: %w", err)
	}
	return list, nil
}

// Cancel ends a running instance as canceled, under the instance lock like
// every advance: steps not started are skipped and nothing starts any more.
// Episodes of running steps are not interrupted: they run to their end,
// which records the step's status and starts nothing. canceled is false
// (and inst the instance as it is) when the instance had already ended;
// ErrNoInstance when there is none. reason is stored in the instance's
// error detail. It needs no Engine, so the CLI uses it too; Engine.Cancel
// also publishes workflow.canceled.
func Cancel(ctx context.Context, store Store, id int64, reason string) (inst Instance, canceled bool, err error) {
	if err := checkText("reason", reason, 4096); err != nil {
		return Instance{}, false, fmt.Errorf("%w: cancel instance %d: %v", ErrInvalid, id, err)
	}
	detail, err := json.Marshal(map[string]string{"reason": "canceled", "message": reason})
	if err != nil {
		return Instance{}, false, err
	}
	err = store.InTx(ctx, func(tx Tx) error {
		canceled = false
		var err error
		if inst, err = tx.LockWorkflowInstance(ctx, id); err != nil || inst.Status != InstanceRunning {
			return err
		}
		if _, err := tx.SkipPendingWorkflowSteps(ctx, id); err != nil {
			return err
		}
		ok, err := tx.FinishWorkflowInstance(ctx, id, InstanceCanceled, detail)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("the locked running instance was not ended")
		}
		canceled = true
		inst.Status, inst.ErrorDetail = InstanceCanceled, detail
		return nil
	})
	if err != nil {
		return Instance{}, false, fmt.Errorf("cancel workflow instance %d: %w", id, err)
	}
	return inst, canceled, nil
}

// List returns instances, newest first; see the package-level List.
func (e *Engine) List(ctx context.Context, q ListQuery) ([]Instance, error) {
	return List(ctx, e.store, q)
}

// Cancel ends a running instance as canceled (see the package-level
// Cancel) and publishes workflow.canceled.
func (e *Engine) Cancel(ctx context.Context, id int64, reason string) (Instance, bool, error) {
	inst, canceled, err := Cancel(ctx, e.store, id, reason)
	if err == nil && canceled {
		e.publish(Event{Kind: WorkflowCanceled, InstanceID: inst.ID, WorkflowID: inst.WorkflowID, Status: InstanceCanceled})
	}
	return inst, canceled, err
}
