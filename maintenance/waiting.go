package maintenance

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/membership"
)

// The waiting-for-node finding: raised by a maintenance run for the work of
// one (env, actor, expectation) that no live node can run and that has been
// due for longer than Config.WaitingForNodeAfter, cleared by the first run
// that finds none of it waiting. Its key is
// WaitingForNodeKeyPrefix + "<env>/<actor>/<expectation>"; the run clears
// only findings of ClassWaitingForNode, so an application should not raise
// findings of that class itself.
const (
	ClassWaitingForNode     = "waiting_for_node"
	SeverityWaitingForNode  = "warning"
	WaitingForNodeKeyPrefix = "leasehold/waiting-for-node/"
)

// WaitingFinding is one waiting-for-node finding a run raises, in the
// columns of RaiseWaitingForNodeFinding.
type WaitingFinding struct {
	Env     string
	Key     string
	ActorID string
	Summary string
	// Data is the JSON document of the finding: env, actor_id,
	// expectation_id, waiting (how many), since (RFC 3339, UTC, database
	// time), oldest_episode_id, and last_node and last_heartbeat_at when a
	// node row lists the pair.
	Data string
	// EpisodeID is the oldest waiting episode: raised_by_episode.
	EpisodeID int64
}

// WaitingKey is the waiting-for-node finding key of a pair in env.
func WaitingKey(env, actorID, expectationID string) string {
	return WaitingForNodeKeyPrefix + env + "/" + actorID + "/" + expectationID
}

// WaitingFindings turns what ListWaitingForNode read into what the run
// writes: the findings to raise (the overdue pairs), and waiting, the JSON
// array of {"env", "finding_key"} of every pair read, overdue or not,
// which ClearWaitingForNodeFindings keeps (a finding clears once its pair
// no longer waits at all). Every time in them is the database's.
func WaitingFindings(ws []membership.Waiting) (raise []WaitingFinding, waiting string, err error) {
	type kept struct {
		Env        string `json:"env"`
		FindingKey string `json:"finding_key"`
	}
	type data struct {
		Env             string `json:"env"`
		ActorID         string `json:"actor_id"`
		ExpectationID   string `json:"expectation_id"`
		Waiting         int64  `json:"waiting"`
		Since           string `json:"since"`
		OldestEpisodeID int64  `json:"oldest_episode_id"`
		LastNode        string `json:"last_node,omitempty"`
		LastHeartbeatAt string `json:"last_heartbeat_at,omitempty"`
	}
	keep := make([]kept, 0, len(ws))
	for _, w := range ws {
		key := WaitingKey(w.Env, w.ActorID, w.ExpectationID)
		keep = append(keep, kept{Env: w.Env, FindingKey: key})
		if !w.Overdue {
			continue
		}
		d := data{Env: w.Env, ActorID: w.ActorID, ExpectationID: w.ExpectationID, Waiting: w.Episodes,
			Since: w.Since.UTC().Format(time.RFC3339Nano), OldestEpisodeID: w.OldestEpisodeID, LastNode: w.LastNode}
		if w.LastNode != "" {
			d.LastHeartbeatAt = w.LastHeartbeatAt.UTC().Format(time.RFC3339Nano)
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, "", fmt.Errorf("maintenance: waiting-for-node finding %s: %w", key, err)
		}
		raise = append(raise, WaitingFinding{
			Env: w.Env, Key: key, ActorID: w.ActorID, Data: string(b), EpisodeID: w.OldestEpisodeID,
			Summary: fmt.Sprintf("%d queued episode(s) of %s in env %q, the oldest (episode %d) due since %s, are %s",
				w.Episodes, w.Pair(), w.Env, w.OldestEpisodeID, w.Since.UTC().Format(time.RFC3339), w.Reason()),
		})
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return nil, "", fmt.Errorf("maintenance: waiting-for-node findings: %w", err)
	}
	return raise, string(b), nil
}
