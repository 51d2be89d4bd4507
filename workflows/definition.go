package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/leasehold/leasehold/episodes"
)

// ErrInvalid: a definition or call was rejected before the database.
var ErrInvalid = errors.New("workflows: invalid")

// OnError says what a step's final failure does to its workflow.
type OnError string

const (
	// Abort fails the instance: steps not started are skipped, running
	// ones finish but start nothing more. The default.
	Abort OnError = "abort"
	// Skip marks the step skipped, which satisfies its dependents as done
	// does, and the workflow goes on.
	Skip OnError = "skip"
)

// Definition is a workflow: steps with dependencies. Steps with no After
// start with the instance (fan-out when several); a step starts once every
// step it names in After is done or skipped (fan-in).
type Definition struct {
	ID    string
	Steps []Step
}

// Step is one step: an actor's expectation, run as an episode (trigger type
// workflow) by whichever full node's poller takes it.
type Step struct {
	ID          string
	Actor       string
	Expectation string
	After       []string
	// MaxAttempts is how many episodes the step may run: a failed,
	// partially failed or canceled episode is retried until then. Default 1.
	MaxAttempts int32
	OnError     OnError
}

// Column sizes of leasehold_workflow_instances, in characters.
const (
	maxSubjectLen = 512
	maxEnvLen     = 255
)

// checkText says why v cannot be stored as the text column what of at most
// max characters (no NUL, valid UTF-8), or returns nil.
func checkText(what, v string, max int) error {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s %q contains NUL (U+0000), which the database cannot store", what, v)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s %q is not valid UTF-8", what, v)
	case utf8.RuneCountInString(v) > max:
		return fmt.Errorf("%s has %d characters, more than %d", what, utf8.RuneCountInString(v), max)
	}
	return nil
}

// clone returns a deep copy of d: Register keeps no slice the caller can
// still change.
func (d Definition) clone() Definition {
	c := Definition{ID: d.ID, Steps: make([]Step, len(d.Steps))}
	for i, s := range d.Steps {
		s.After = slices.Clone(s.After)
		c.Steps[i] = s
	}
	return c
}

func validID(what, id string) error {
	if err := episodes.CheckID(what, id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// validate checks the definition and fills defaults; the steps must form
// a DAG.
func (d *Definition) validate() error {
	if err := validID("workflow", d.ID); err != nil {
		return err
	}
	if len(d.Steps) == 0 {
		return fmt.Errorf("%w: workflow %q has no steps", ErrInvalid, d.ID)
	}
	byID := map[string]*Step{}
	for i := range d.Steps {
		s := &d.Steps[i]
		if err := validID("step", s.ID); err != nil {
			return fmt.Errorf("workflow %q: %w", d.ID, err)
		}
		if _, dup := byID[s.ID]; dup {
			return fmt.Errorf("%w: workflow %q: step %q defined twice", ErrInvalid, d.ID, s.ID)
		}
		if err := validID("actor", s.Actor); err != nil {
			return fmt.Errorf("workflow %q step %q: %w", d.ID, s.ID, err)
		}
		if err := validID("expectation", s.Expectation); err != nil {
			return fmt.Errorf("workflow %q step %q: %w", d.ID, s.ID, err)
		}
		if s.MaxAttempts == 0 {
			s.MaxAttempts = 1
		}
		if s.MaxAttempts < 0 {
			return fmt.Errorf("%w: workflow %q step %q: negative max attempts", ErrInvalid, d.ID, s.ID)
		}
		switch s.OnError {
		case "":
			s.OnError = Abort
		case Abort, Skip:
		default:
			return fmt.Errorf("%w: workflow %q step %q: on error %q (want abort or skip)", ErrInvalid, d.ID, s.ID, s.OnError)
		}
		byID[s.ID] = s
	}
	for _, s := range d.Steps {
		for _, dep := range s.After {
			if _, ok := byID[dep]; !ok {
				return fmt.Errorf("%w: workflow %q step %q: unknown dependency %q", ErrInvalid, d.ID, s.ID, dep)
			}
		}
	}
	// Kahn's algorithm: every step must become startable.
	indeg := map[string]int{}
	for _, s := range d.Steps {
		indeg[s.ID] = len(s.After)
	}
	var ready []string
	for _, s := range d.Steps {
		if indeg[s.ID] == 0 {
			ready = append(ready, s.ID)
		}
	}
	seen := 0
	for len(ready) > 0 {
		id := ready[0]
		ready = ready[1:]
		seen++
		for _, s := range d.Steps {
			for _, dep := range s.After {
				if dep == id {
					if indeg[s.ID]--; indeg[s.ID] == 0 {
						ready = append(ready, s.ID)
					}
				}
			}
		}
	}
	if seen != len(d.Steps) {
		return fmt.Errorf("%w: workflow %q: steps depend on each other in a cycle", ErrInvalid, d.ID)
	}
	return nil
}

func (d *Definition) step(id string) (*Step, bool) {
	for i := range d.Steps {
		if d.Steps[i].ID == id {
			return &d.Steps[i], true
		}
	}
	return nil, false
}

// versionLen is the length of a definition version: the first 16 hex
// characters (64 bits) of the SHA-256 of the canonical JSON.
const versionLen = 16

// canonicalStep and canonicalDefinition are the canonical JSON of a
// definition, what its version hashes and what leasehold_workflow_definitions
// stores: steps sorted by ID, each with its After sorted and the defaults
// of MaxAttempts and OnError applied. The workflow ID is not part of it:
// the version is always read with its workflow.
type canonicalStep struct {
	ID          string   `json:"id"`
	Actor       string   `json:"actor"`
	Expectation string   `json:"expectation"`
	After       []string `json:"after"`
	MaxAttempts int32    `json:"max_attempts"`
	OnError     OnError  `json:"on_error"`
}

type canonicalDefinition struct {
	Steps []canonicalStep `json:"steps"`
}

// Version is the definition's version: the first 16 hex characters of the
// SHA-256 of its canonical JSON (steps sorted by ID, each with actor,
// expectation, After sorted, MaxAttempts and OnError with their defaults
// applied). Definitions that differ only in the order of their steps or of
// an After list, or in spelling a default out, have the same version; any
// other change (a step renamed, added or removed, another actor or
// expectation, other dependencies, attempts or on-error rule) makes
// another. An instance follows the version it was started with. ErrInvalid
// when the definition is not valid (see Engine.Register).
func (d Definition) Version() (string, error) {
	d = d.clone()
	if err := d.validate(); err != nil {
		return "", err
	}
	v, _ := d.canonical()
	return v, nil
}

// canonical returns the version and canonical JSON of a validated
// definition.
func (d *Definition) canonical() (version string, raw json.RawMessage) {
	c := canonicalDefinition{Steps: make([]canonicalStep, len(d.Steps))}
	for i, s := range d.Steps {
		after := slices.Clone(s.After)
		if after == nil {
			after = []string{}
		}
		slices.Sort(after)
		c.Steps[i] = canonicalStep{ID: s.ID, Actor: s.Actor, Expectation: s.Expectation, After: after,
			MaxAttempts: s.MaxAttempts, OnError: s.OnError}
	}
	slices.SortFunc(c.Steps, func(a, b canonicalStep) int { return strings.Compare(a.ID, b.ID) })
	raw, _ = json.Marshal(c) // strings, slices and integers only: it cannot fail
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:versionLen], raw
}

// parseStored decodes the canonical JSON recorded for workflowID at
// version, validates it and checks that it hashes to version: a row edited
// behind leasehold's back is refused, never followed.
func parseStored(workflowID, version string, raw json.RawMessage) (*Definition, error) {
	var c canonicalDefinition
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("the definition recorded for workflow %q version %s is not its JSON: %w", workflowID, version, err)
	}
	d := Definition{ID: workflowID, Steps: make([]Step, len(c.Steps))}
	for i, s := range c.Steps {
		d.Steps[i] = Step(s)
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("the definition recorded for workflow %q version %s: %w", workflowID, version, err)
	}
	if got, _ := d.canonical(); got != version {
		return nil, fmt.Errorf("the definition recorded for workflow %q version %s hashes to %s (changed after it was recorded)",
			workflowID, version, got)
	}
	return &d, nil
}
