package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
)

func TestCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":               "",
		"job-1":          "job-1",
		"event:a:e:ab12": "event:a:e:ab12",
		"with space":     "with space",
		"café ünïcode 😀": "café ünïcode 😀",
		"\uFFFD":         "\uFFFD",
		"a\nb":           `"a\nb"`,
		"a\tb":           `"a\tb"`,
		"a\rb":           `"a\rb"`,
		"\x1b[31mred":    `"\x1b[31mred"`,
		"bad\xff":        `"bad\xff"`,
		"rtl\u202eevil":  `"rtl\u202eevil"`,
		`"quoted"`:       `"\"quoted\""`,
		`mid"quote`:      `mid"quote`,
	} {
		require.Equal(t, want, cell(in), "%q", in)
	}
}

// A key holding a newline printed a fake extra row; it is escaped in text
// output and verbatim in JSON.
func TestCLIListsEscapeControlCharacters(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	const fakeKey = "job-1\njob-2  claimed  node-z"
	_, err := store.Acquire(ctx, claims.AcquireParams{Key: fakeKey, Owner: "node\ta", Lease: time.Minute, WorkType: "billing"})
	require.NoError(t, err)
	_, err = store.Acquire(ctx, claims.AcquireParams{Key: "plain-key", Owner: "node-b", Lease: time.Minute, WorkType: "billing"})
	require.NoError(t, err)

	code, out, errOut := runCLI(t, claimsCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, out, `"job-1\njob-2  claimed  node-z"`)
	require.Contains(t, out, `"node\ta"`)
	require.Regexp(t, `(?m)^plain-key\s+claimed\s+node-b\s`, out, "plain keys print unchanged")

	code, out, errOut = runCLI(t, claimsCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	var got []claimJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	keys := []string{got[0].Key, got[1].Key}
	require.ElementsMatch(t, []string{fakeKey, "plain-key"}, keys, "JSON stays verbatim")

	_, err = store.CreateEpisode(ctx, episodes.New{
		ActorID: "mailer\nfake", ExpectationID: "send\r", TriggerType: episodes.TriggerEvent, MaxAttempts: 3,
		SourceEnv: "rc\x1b",
	})
	require.NoError(t, err)
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^\d+\s+queued\s+-\s+"mailer\\nfake"\s+"send\\r"\s+1/3\s+-\s+-\s+"rc\\x1b"\s`, lines[1])

	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url, "-json")
	require.Equal(t, 0, code, errOut)
	var eps []episodeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &eps), out)
	require.Len(t, eps, 1)
	require.Equal(t, "mailer\nfake", eps[0].ActorID)
	require.Equal(t, "rc\x1b", eps[0].Env)
}

// nodes ls escapes a node identity holding a newline in its text output.
func TestCLINodesLsEscapesControlCharacters(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-a\nnode-z", Stack: "s\tt", Mode: "full"}))
	code, out, errOut := runCLI(t, nodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	require.Contains(t, out, `"node-a\nnode-z"`)
	require.Contains(t, out, `"s\tt"`)
}
