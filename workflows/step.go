package workflows

import (
	"encoding/json"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/runner"
)

// StepRef is which workflow step an episode is an attempt of. It is the
// episode's trigger_ref, which every path that hands a run its episode
// (creation, the poller's dispatch, recovery) carries, so a strategy learns
// it the same way on a first run and on a recovered one.
type StepRef struct {
	WorkflowID string `json:"workflow"`
	InstanceID int64  `json:"instance"`
	StepID     string `json:"step"`
	Attempt    int32  `json:"attempt"` // the step's attempt: 1 for its first episode
}

// StepOf returns the step that r's episode is an attempt of; false for an
// episode of no workflow.
func StepOf(r *runner.Run) (StepRef, bool) { return StepOfEpisode(r.Episode) }

// StepOfEpisode returns the step that ep is an attempt of; false for an
// episode of no workflow.
func StepOfEpisode(ep episodes.Episode) (StepRef, bool) {
	if ep.TriggerType != episodes.TriggerWorkflow {
		return StepRef{}, false
	}
	var ref StepRef
	if err := json.Unmarshal(ep.TriggerRef, &ref); err != nil || ref.InstanceID == 0 || ref.StepID == "" {
		return StepRef{}, false
	}
	return ref, true
}
