package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// showPayload holds characters a terminal acts on or hides: a newline (an
// escape in JSON text already), ESC (likewise), the C1 control CSI
// (U+009B) and a right-to-left override (U+202E), which JSON carries raw,
// and '<' and '&', which JSON output must not turn into \u escapes.
const showPayload = `{"note":"line1\nline2","esc":"\u001b[2J","csi":"\u009b31m","rtl":"a\u202eb","html":"<b>&"}`

// failedEpisode runs an episode the way two nodes would: node-a starts it
// and journals steps 1 and 2 under fence 1, its lease expires, node-b
// steals the claim (fence 2), restarts the episode, journals step 3 and
// fails it with step 4. It returns the episode ID.
func failedEpisode(t *testing.T, store *postgres.Store, expire func(string) string, key string) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerManual,
		TriggerRef: json.RawMessage(`{"by":"ops"}`), DedupeKey: key, MaxAttempts: 3,
		SourceStack: "hatch", SourceEnv: "rc", Payload: json.RawMessage(showPayload),
		Owner: "node-a", Lease: time.Minute,
	})
	require.NoError(t, err)
	require.True(t, c.Created)
	id, a := c.Episode.ID, c.Claim.Token
	_, err = store.StartEpisode(ctx, id, a)
	require.NoError(t, err)
	require.NoError(t, store.AppendStep(ctx, id, a, 1, json.RawMessage(`{"n":1}`), time.Minute))
	require.NoError(t, store.AppendStep(ctx, id, a, 2, json.RawMessage(`{"n":2}`), time.Minute))
	expire(key)
	stolen, err := store.Acquire(ctx, claims.AcquireParams{Key: key, Owner: "node-b", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	require.Equal(t, claims.GrantSteal, stolen.Grant)
	b := stolen.Token
	_, err = store.StartEpisode(ctx, id, b)
	require.NoError(t, err)
	require.NoError(t, store.AppendStep(ctx, id, b, 3, json.RawMessage(`{"n":3}`), time.Minute))
	require.NoError(t, store.FinishEpisode(ctx, id, b, episodes.Finish{
		Status: episodes.StatusFailed, ErrorClass: episodes.ClassError,
		ErrorDetail: json.RawMessage(`{"message":"card declined\u001b[2J"}`),
		StepNo:      4, StepData: json.RawMessage(`{"error":"card declined"}`),
	}))
	return id
}

func TestCLIEpisodesShow(t *testing.T) {
	store, url, expire := cliSchema(t)
	id := failedEpisode(t, store, expire, "bill-7")
	ids := strconv.FormatInt(id, 10)

	code, out, errOut := runCLI(t, episodesCmd, "show", ids, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
	for _, want := range []string{
		`(?m)^episode ` + ids + `$`,
		`(?m)^  status +failed$`,
		`(?m)^  attempt +1/3$`,
		`(?m)^  error class +error$`,
		`(?m)^  error detail +\{"message":"card declined\\u001b\[2J"\}$`,
		`(?m)^  actor +billing$`,
		`(?m)^  expectation +charge$`,
		`(?m)^  trigger +manual$`,
		`(?m)^  trigger ref +\{"by":"ops"\}$`,
		`(?m)^  dedupe key +bill-7$`,
		`(?m)^  owner +node-b$`,
		`(?m)^  stack +hatch$`,
		`(?m)^  env +rc$`,
		`(?m)^  result +-$`,
		`(?m)^  finished at +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		`(?m)^  available +-$`,
		`(?m)^claim bill-7$`,
		`(?m)^  state +failed$`,
		`(?m)^  fence +2$`,
		`(?m)^  attempt +2$`,
		`(?m)^  grant +steal$`,
		`(?m)^journal: 4 step\(s\)$`,
		`(?m)^  STEP +FENCE +OWNER +AT +DATA$`,
		// Steps 1 and 2 were node-a's, under fence 1: the claim records
		// only its current grant's owner, so theirs is not known.
		`(?m)^  1 +1 +- +\S+Z +\{"n":1\}$`,
		`(?m)^  2 +1 +- +\S+Z +\{"n":2\}$`,
		`(?m)^  3 +2 +node-b +\S+Z +\{"n":3\}$`,
		`(?m)^  4 +2 +node-b +\S+Z +\{"error":"card declined"\}$`,
	} {
		require.Regexp(t, want, out)
	}
	// The payload in text: every character a terminal acts on or hides is
	// a \u escape (or the \n JSON already had), so it stays on one line.
	payload := regexp.MustCompile(`(?m)^  payload +(.*)$`).FindStringSubmatch(out)
	require.NotNil(t, payload, out)
	require.Contains(t, payload[1], `"note":"line1\nline2"`)
	require.Contains(t, payload[1], `"esc":"\u001b[2J"`)
	require.Contains(t, payload[1], `"csi":"\u009b31m"`)
	require.Contains(t, payload[1], `"rtl":"a\u202eb"`)
	require.Contains(t, payload[1], `"html":"<b>&"`)
	var decoded map[string]string
	require.NoError(t, json.Unmarshal([]byte(payload[1]), &decoded), "the escaped payload is still JSON")
	require.Equal(t, "\u009b31m", decoded["csi"])
	for _, r := range out {
		require.True(t, r == '\n' || strconv.IsPrint(r), "text output holds %U", r)
	}

	code, out, errOut = runCLI(t, episodesCmd, "show", "-json", ids, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
	var got episodeShowJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, id, got.ID)
	require.Equal(t, "failed", got.Status)
	require.Equal(t, "error", got.ErrorClass)
	require.Equal(t, int32(1), got.Attempt)
	require.Equal(t, "node-b", got.Owner)
	require.Equal(t, "hatch", got.Stack)
	require.Equal(t, "rc", got.Env)
	require.JSONEq(t, showPayload, string(got.Payload))
	require.JSONEq(t, `{"message":"card declined\u001b[2J"}`, string(got.ErrorDetail))
	require.JSONEq(t, `{"by":"ops"}`, string(got.TriggerRef))
	require.Equal(t, "null", string(got.Result))
	// Verbatim: the characters JSON may carry raw are raw, '<' and '&' too.
	require.Contains(t, out, "\u009b31m")
	require.Contains(t, out, "a\u202eb")
	require.Contains(t, out, "<b>&")
	require.Equal(t, "bill-7", got.ClaimKey)
	require.NotNil(t, got.Claim)
	require.Equal(t, "bill-7", got.Claim.Key)
	require.Equal(t, "failed", got.Claim.State)
	require.Equal(t, "node-b", got.Claim.Owner)
	require.EqualValues(t, 2, got.Claim.Fence)
	require.Equal(t, "steal", got.Claim.Grant)
	require.False(t, got.Claim.Live)
	require.Empty(t, got.RunAfter, "not available work")
	require.EqualValues(t, 4, got.JournalSteps)
	require.Len(t, got.Journal, 4)
	for i, want := range []struct {
		fence int64
		owner string
	}{{1, ""}, {1, ""}, {2, "node-b"}, {2, "node-b"}} {
		s := got.Journal[i]
		require.Equal(t, int32(i+1), s.StepNo)
		require.Equal(t, want.fence, s.Fence, "step %d", i+1)
		require.Equal(t, want.owner, s.Owner, "step %d", i+1)
		_, err := time.Parse(time.RFC3339, s.CreatedAt)
		require.NoError(t, err)
	}
	require.JSONEq(t, `{"n":3}`, string(got.Journal[2].Data))

	// -steps keeps the last steps, and says so.
	code, out, errOut = runCLI(t, episodesCmd, "show", ids, "-steps", "2", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "journal: the last 2 of 4 steps (-steps N for more)\n")
	require.NotRegexp(t, `(?m)^  [12] +1 `, out)
	require.Regexp(t, `(?m)^  3 +2 +node-b `, out)
	code, out, errOut = runCLI(t, episodesCmd, "show", ids, "-steps", "1", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	got = episodeShowJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.EqualValues(t, 4, got.JournalSteps)
	require.Len(t, got.Journal, 1)
	require.Equal(t, int32(4), got.Journal[0].StepNo)

	code, out, errOut = runCLI(t, episodesCmd, "show", "987654321", "-url", url)
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, "leasehold episodes show: no episode 987654321\n", errOut)
}

// An episode with a live claim, one created unclaimed, and strings that
// could fake lines.
func TestCLIEpisodesShowClaims(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	live, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "mailer\nfake", ExpectationID: "send", TriggerType: episodes.TriggerEvent, DedupeKey: "mail\t1",
		MaxAttempts: 3, Owner: "node\x1ba", Lease: time.Hour,
	})
	require.NoError(t, err)
	unclaimed, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "mailer", ExpectationID: "send", TriggerType: episodes.TriggerEvent, MaxAttempts: 3,
	})
	require.NoError(t, err)

	code, out, errOut := runCLI(t, episodesCmd, "show", strconv.FormatInt(live.Episode.ID, 10), "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  status +queued$`, out)
	require.Regexp(t, `(?m)^  actor +"mailer\\nfake"$`, out)
	require.Regexp(t, `(?m)^  dedupe key +"mail\\t1"$`, out)
	require.Regexp(t, `(?m)^claim "mail\\t1"$`, out)
	require.Regexp(t, `(?m)^  state +claimed \(lease live\)$`, out)
	require.Regexp(t, `(?m)^  owner +"node\\x1ba"$`, out)
	require.Regexp(t, `(?m)^  fence +1$`, out)
	require.Regexp(t, `(?m)^  grant +fresh$`, out)
	require.Contains(t, out, "journal: no steps\n")

	code, out, errOut = runCLI(t, episodesCmd, "show", strconv.FormatInt(live.Episode.ID, 10), "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var got episodeShowJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "mailer\nfake", got.ActorID, "JSON is verbatim")
	require.Equal(t, "node\x1ba", got.Claim.Owner)
	require.True(t, got.Claim.Live)
	require.Equal(t, "claimed", got.Claim.State)
	require.NotEmpty(t, got.Claim.HeartbeatAt)
	require.NotNil(t, got.Journal)
	require.Empty(t, got.Journal)

	id := strconv.FormatInt(unclaimed.Episode.ID, 10)
	code, out, errOut = runCLI(t, episodesCmd, "show", id, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "\nclaim episode:"+id+": none (no node holds or held it)\n")
	code, out, errOut = runCLI(t, episodesCmd, "show", id, "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	got = episodeShowJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "episode:"+id, got.ClaimKey)
	require.Nil(t, got.Claim)
	require.Contains(t, out, `"claim": null`)
}

// A deferred episode is available work: show says when it falls due.
func TestCLIEpisodesShowAvailable(t *testing.T) {
	store, url, _ := cliSchema(t)
	d, err := store.CreateDeferredEpisode(context.Background(), episodes.Deferred{
		New:   episodes.New{ActorID: "mailer", ExpectationID: "send", TriggerType: episodes.TriggerEvent, MaxAttempts: 3},
		Delay: time.Hour,
	})
	require.NoError(t, err)
	require.True(t, d.Created)
	id := strconv.FormatInt(d.Episode.ID, 10)
	code, out, errOut := runCLI(t, episodesCmd, "show", id, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  available +due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, out)
	code, out, errOut = runCLI(t, episodesCmd, "show", id, "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var got episodeShowJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	due, err := time.Parse(time.RFC3339, got.RunAfter)
	require.NoError(t, err)
	created, err := time.Parse(time.RFC3339, got.CreatedAt)
	require.NoError(t, err)
	require.WithinDuration(t, created.Add(time.Hour), due, 2*time.Second, "due an hour after creation, on the database clock")
}

func TestCLIEpisodesLsFilters(t *testing.T) {
	store, url, expire := cliSchema(t)
	ctx := context.Background()
	failed := failedEpisode(t, store, expire, "bill-1")
	c, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "reporter", ExpectationID: "daily", TriggerType: episodes.TriggerSchedule, DedupeKey: "report-1",
		MaxAttempts: 1, Owner: "node-a", Lease: time.Minute,
	})
	require.NoError(t, err)
	_, err = store.StartEpisode(ctx, c.Episode.ID, c.Claim.Token)
	require.NoError(t, err)
	require.NoError(t, store.FinishEpisode(ctx, c.Episode.ID, c.Claim.Token, episodes.Finish{
		Status: episodes.StatusFailed, ErrorClass: episodes.ClassPanic,
	}))
	panicked := c.Episode.ID
	q, err := store.CreateEpisode(ctx, episodes.New{
		ActorID: "mailer", ExpectationID: "send", TriggerType: episodes.TriggerEvent, DedupeKey: "mail-1", MaxAttempts: 3,
	})
	require.NoError(t, err)
	queued := q.Episode.ID

	ls := func(args ...string) []episodeJSON {
		t.Helper()
		code, out, errOut := runCLI(t, episodesCmd, append([]string{"ls", "-json", "-url", url}, args...)...)
		require.Equal(t, 0, code, errOut)
		var got []episodeJSON
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		return got
	}
	ids := func(list []episodeJSON) []int64 {
		out := []int64{}
		for _, e := range list {
			out = append(out, e.ID)
		}
		return out
	}
	require.Equal(t, []int64{queued, panicked, failed}, ids(ls()))
	require.Equal(t, []int64{failed}, ids(ls("-error-class", "error")))
	require.Equal(t, []int64{panicked}, ids(ls("-error-class", "panic", "-status", "failed")))
	require.Empty(t, ls("-error-class", "Error"), "exact match")
	require.Empty(t, ls("-error-class", "panic", "-actor", "billing"))
	require.Equal(t, []int64{queued}, ids(ls("-dedupe-key", "mail-1")))
	require.Equal(t, []int64{failed}, ids(ls("-dedupe-key", "bill-1", "-status", "failed")))
	require.Empty(t, ls("-dedupe-key", "bill"), "exact match, no prefix")
	got := ls("-dedupe-key", "bill-1")
	require.Len(t, got, 1)
	require.Equal(t, "error", got[0].ErrorClass)
	require.Equal(t, "bill-1", got[0].DedupeKey)
	require.Empty(t, ls("-dedupe-key", "mail-1")[0].ErrorClass)

	// The table has the error class, "-" for none.
	code, out, errOut := runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Regexp(t, `^ID\s+STATUS\s+ERROR CLASS\s+ACTOR\s+EXPECTATION\s+ATTEMPT\s+OWNER`, lines[0])
	require.Regexp(t, `^`+strconv.FormatInt(queued, 10)+`\s+queued\s+-\s+mailer\s+send\s+1/3\s`, lines[1])
	require.Regexp(t, `^`+strconv.FormatInt(panicked, 10)+`\s+failed\s+panic\s+reporter\s+daily\s+1/1\s+node-a\s`, lines[2])
	require.Regexp(t, `^`+strconv.FormatInt(failed, 10)+`\s+failed\s+error\s+billing\s+charge\s+1/3\s+node-b\s`, lines[3])
	at := strings.Index(lines[0], "ERROR CLASS")
	require.Equal(t, "panic", lines[2][at:at+len("panic")], "aligned under its header")

	code, out, errOut = runCLI(t, episodesCmd, "ls", "-error-class", "panic", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	require.Equal(t, "1 episode(s)\n", errOut)
}

// episodes cancel and retry act through the cluster-wide statements: a
// failed episode is retried (available again as its next attempt, due at
// once), an available one is canceled at once, a live one is asked to
// stop, and what the action does not apply to exits 1 with the reason.
func TestCLIEpisodesCancelAndRetry(t *testing.T) {
	store, url, expire := cliSchema(t)
	ctx := context.Background()
	id := failedEpisode(t, store, expire, "bill-9")
	ids := strconv.FormatInt(id, 10)

	code, out, errOut := runCLI(t, episodesCmd, "retry", ids, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^episode `+ids+` is available again as attempt 2, due \d{4}-`, out)
	ep, err := store.GetEpisode(ctx, id)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, ep.Status)
	require.Equal(t, int32(2), ep.Attempt())

	code, _, errOut = runCLI(t, episodesCmd, "retry", ids, "-url", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "leasehold episodes retry: ")
	require.Contains(t, errOut, "not failed or canceled")

	code, out, errOut = runCLI(t, episodesCmd, "cancel", ids, "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var got actionJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, actionJSON{ID: id, Action: "cancel", Result: "canceled", Status: "canceled"}, got, "available: ended at once")

	live, err := store.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerManual,
		DedupeKey: "bill-10", MaxAttempts: 3, Owner: "node-a", Lease: time.Hour, Start: true})
	require.NoError(t, err)
	require.True(t, live.Started)
	code, out, errOut = runCLI(t, episodesCmd, "cancel", strconv.FormatInt(live.Episode.ID, 10), "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "its holder was asked to cancel it")
	reqs, err := store.ListCancelRequests(ctx, "node-a")
	require.NoError(t, err)
	require.Equal(t, []episodes.CancelRequest{{EpisodeID: live.Episode.ID, Fence: live.Claim.Fence}}, reqs)

	code, _, errOut = runCLI(t, episodesCmd, "cancel", "987654321", "-url", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
	code, _, errOut = runCLI(t, episodesCmd, "cancel", "-url", url)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "leasehold episodes cancel: missing episode ID")
	code, _, errOut = runCLI(t, episodesCmd, "retry", ids, "-steps", "3", "-url", url)
	require.Equal(t, 2, code, errOut)
}
