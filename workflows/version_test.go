package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefinitionVersion(t *testing.T) {
	t.Parallel()
	base := Definition{ID: "report", Steps: []Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "enrich", Actor: "wf", Expectation: "enrich", After: []string{"extract"}},
		{ID: "score", Actor: "wf", Expectation: "score", After: []string{"extract"}},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"score", "enrich"}},
	}}
	v, err := base.Version()
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{16}$`, v)

	same := Definition{ID: "report", Steps: []Step{ // reordered, defaults spelled out
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"enrich", "score"}, MaxAttempts: 1, OnError: Abort},
		{ID: "score", Actor: "wf", Expectation: "score", After: []string{"extract"}},
		{ID: "enrich", Actor: "wf", Expectation: "enrich", After: []string{"extract"}},
		{ID: "extract", Actor: "wf", Expectation: "extract", MaxAttempts: 1},
	}}
	got, err := same.Version()
	require.NoError(t, err)
	require.Equal(t, v, got, "order and spelled-out defaults do not change the version")

	for name, change := range map[string]func(d *Definition){
		"renamed":      func(d *Definition) { d.Steps[3].ID = "deliver" },
		"added":        func(d *Definition) { d.Steps = append(d.Steps, Step{ID: "audit", Actor: "wf", Expectation: "audit"}) },
		"actor":        func(d *Definition) { d.Steps[0].Actor = "etl" },
		"expectation":  func(d *Definition) { d.Steps[0].Expectation = "pull" },
		"after":        func(d *Definition) { d.Steps[3].After = []string{"enrich"} },
		"max attempts": func(d *Definition) { d.Steps[1].MaxAttempts = 3 },
		"on error":     func(d *Definition) { d.Steps[1].OnError = Skip },
	} {
		d := base.clone()
		change(&d)
		other, err := d.Version()
		require.NoError(t, err, name)
		require.NotEqual(t, v, other, name)
	}
	_, err = Definition{ID: "empty"}.Version()
	require.ErrorIs(t, err, ErrInvalid)

	// The recorded form reads back to the same definition and version,
	// and a row changed behind leasehold's back is refused.
	d := base.clone()
	require.NoError(t, d.validate())
	version, raw := d.canonical()
	back, err := parseStored("report", version, raw)
	require.NoError(t, err)
	again, err := back.Version()
	require.NoError(t, err)
	require.Equal(t, version, again)
	_, err = parseStored("report", version, []byte(`{"steps":[{"id":"x","actor":"a","expectation":"b","after":[],"max_attempts":1,"on_error":"abort"}]}`))
	require.ErrorContains(t, err, "changed after it was recorded")
	_, err = parseStored("report", version, []byte(`{"steps":[]}`))
	require.ErrorIs(t, err, ErrInvalid)
}
