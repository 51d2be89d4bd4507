package runner

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/dedupe"
)

// What parseCron accepts is keyed as the scheduler keys it (schedule.go
// fires Tick at spec.Next, Tick names dedupe.CronWindow of it): every tick
// is a whole UTC minute, so CronWindow leaves it unchanged, and nodes whose
// clocks or starts differ by seconds plan the same tick.
func TestAcceptedCronTicksAreTheirOwnWindow(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	base := time.Date(2026, 3, 29, 0, 59, 41, 123, paris) // a DST change in Paris
	for _, spec := range []string{"* * * * *", "*/7 * * * *", "0 9 * * 1-5", "@hourly", "@daily", "@weekly", "@monthly", "@yearly"} {
		s, err := parseCron(spec)
		require.NoError(t, err, spec)
		for i := range 500 {
			now := base.Add(time.Duration(i) * 37 * time.Minute)
			tick := s.Next(now.UTC())
			require.Equal(t, tick, dedupe.CronWindow(tick), "%s at %v", spec, now)
			require.Equal(t, time.UTC, tick.Location(), spec)
			require.Equal(t, tick, s.Next(now.Add(-13*time.Second).UTC()), "%s: a node 13 s behind plans the same tick", spec)
		}
	}
}

// Why @every is refused rather than keyed: robfig/cron counts it from the
// moment Next is asked, so two nodes started 17 s apart name two windows.
func TestEveryDescriptorWouldSplitWindows(t *testing.T) {
	s, err := cron.ParseStandard("@every 1m")
	require.NoError(t, err)
	a := time.Date(2026, 1, 1, 0, 0, 50, 0, time.UTC)
	b := a.Add(17 * time.Second)
	require.NotEqual(t, dedupe.CronWindow(s.Next(a)), dedupe.CronWindow(s.Next(b)))
	_, err = parseCron("@every 1m")
	require.ErrorContains(t, err, "Schedule{Every: d}")
}
