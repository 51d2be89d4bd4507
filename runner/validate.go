package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
)

// What Register, Fire, Tick and RunManual refuse before anything reaches the
// database: every refusal is ErrInvalid, whichever package noticed it, so
// that a bad input never comes back as a driver error (SQLSTATE 22021,
// 22P05) nor silently changes what was asked for.

// invalid wraps an input error of op as ErrInvalid, keeping err (e.g.
// dedupe.ErrInvalid) in the chain.
func invalid(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
}

// validID checks an actor or expectation id (episodes.CheckID).
func validID(what, id string) error {
	if err := episodes.CheckID(what, id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkEventName says why name cannot name an event, or returns nil. The
// name is written into the episode's trigger_ref (jsonb / nvarchar JSON),
// which holds neither NUL nor invalid UTF-8.
func checkEventName(name string) error {
	switch {
	case name == "":
		return errors.New("event name is empty")
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("event name %q contains NUL (U+0000), which the database cannot store", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("event name %q is not valid UTF-8", name)
	}
	return nil
}

// canonicalPayload is payload as it is stored and hashed (dedupe.Canonical,
// which refuses text that would not arrive unchanged).
func canonicalPayload(op string, payload any) (json.RawMessage, error) {
	raw, err := dedupe.Canonical(payload)
	if err != nil {
		return nil, invalid(op, err)
	}
	return raw, nil
}

// parseCron parses a Schedule's Cron as Register accepts it (see Schedule):
// the robfig/cron standard syntax minus what a window key, one UTC minute
// agreed by every node, cannot represent.
func parseCron(spec string) (cron.Schedule, error) {
	switch {
	case strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ="):
		// robfig/cron would take the zone (and panics on a prefix alone).
		return nil, errors.New("a CRON_TZ= or TZ= prefix is not supported: cron schedules are evaluated in UTC; write the expression in UTC")
	case strings.HasPrefix(spec, "@every"):
		// robfig/cron counts @every from each node's own start, so nodes
		// would name different windows, and a window is a whole minute.
		return nil, errors.New("@every is not supported: its ticks would differ from node to node and windows are whole minutes; use Schedule{Every: d}, aligned from the Unix epoch")
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, err
	}
	// A spec with no match in five years (Feb 30) gives the zero time,
	// which the scheduler would fire at once, in a loop.
	if s.Next(time.Now().UTC()).IsZero() {
		return nil, errors.New("the expression never fires")
	}
	return s, nil
}

func (a Actor) validate() error {
	if err := validID("actor", a.ID); err != nil {
		return err
	}
	if a.MaxConcurrent < 0 {
		return fmt.Errorf("%w: actor %q: max concurrent %d is negative", ErrInvalid, a.ID, a.MaxConcurrent)
	}
	if len(a.Expectations) == 0 {
		return fmt.Errorf("%w: actor %q has no expectations", ErrInvalid, a.ID)
	}
	seen := map[string]bool{}
	for _, e := range a.Expectations {
		if err := e.validate(); err != nil {
			return fmt.Errorf("actor %q: %w", a.ID, err)
		}
		if seen[e.ID] {
			return fmt.Errorf("%w: actor %q: expectation %q registered twice", ErrInvalid, a.ID, e.ID)
		}
		seen[e.ID] = true
	}
	return nil
}

func (e Expectation) validate() error {
	if err := validID("expectation", e.ID); err != nil {
		return err
	}
	switch {
	case e.Strategy == nil:
		return fmt.Errorf("%w: expectation %q has no strategy", ErrInvalid, e.ID)
	case e.Budget.MaxWall < 0 || e.Budget.MaxSteps < 0:
		return fmt.Errorf("%w: expectation %q: negative budget", ErrInvalid, e.ID)
	case e.MaxAttempts < 0:
		return fmt.Errorf("%w: expectation %q: negative max attempts", ErrInvalid, e.ID)
	case e.Retry.Backoff < 0 || e.Retry.MaxBackoff < 0:
		return fmt.Errorf("%w: expectation %q: negative retry backoff", ErrInvalid, e.ID)
	case e.Retry.MaxBackoff > 0 && e.Retry.MaxBackoff < e.Retry.Backoff:
		return fmt.Errorf("%w: expectation %q: retry max backoff %v is under the backoff %v", ErrInvalid, e.ID, e.Retry.MaxBackoff, e.Retry.Backoff)
	}
	switch e.Recovery {
	case "", RecoveryFail, RecoveryRestart:
	default:
		return fmt.Errorf("%w: expectation %q: unknown recovery policy %q", ErrInvalid, e.ID, e.Recovery)
	}
	switch t := e.Trigger.(type) {
	case Schedule:
		if (t.Cron == "") == (t.Every == 0) {
			return fmt.Errorf("%w: expectation %q: a schedule needs exactly one of Cron and Every", ErrInvalid, e.ID)
		}
		if t.Every < 0 || (t.Every > 0 && t.Every%time.Second != 0) {
			return fmt.Errorf("%w: expectation %q: interval %v must be a positive whole number of seconds", ErrInvalid, e.ID, t.Every)
		}
		if t.Cron != "" {
			if _, err := parseCron(t.Cron); err != nil {
				return fmt.Errorf("%w: expectation %q: cron %q: %v", ErrInvalid, e.ID, t.Cron, err)
			}
		}
	case Event:
		if err := checkEventName(t.Name); err != nil {
			return fmt.Errorf("%w: expectation %q: event trigger: %v", ErrInvalid, e.ID, err)
		}
	case Manual:
	case nil:
		return fmt.Errorf("%w: expectation %q has no trigger", ErrInvalid, e.ID)
	default:
		return fmt.Errorf("%w: expectation %q: unknown trigger %T", ErrInvalid, e.ID, t)
	}
	return nil
}
