package findings_test

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/findings"
)

// A node of the unset env raises a finding on behalf of a run whose episode
// was created in env "rc": the finding lands in "rc", so the node's default
// read does not see it and an explicit env override does. In a strategy, the
// holder is the *runner.Run passed to Step; here episode 2 runs in env "rc".
func Example() {
	ctx := context.Background()
	store := newFakeStore(map[int64]string{1: "", 2: "rc"}) // adapters/postgres.New(pool) in production
	f, err := findings.New(store, "")
	if err != nil {
		panic(err)
	}
	rcRun := newRun(2)

	fd, _ := f.Raise(ctx, rcRun, findings.Raise{Key: "disk:/var", Class: "limit_breach", Severity: "warn"})
	fd, _ = f.Raise(ctx, rcRun, findings.Raise{Key: "disk:/var", Class: "limit_breach", Severity: "critical"})
	fmt.Printf("raised in env %q, %d raises, severity %s\n", fd.Env, fd.RaiseCount, fd.Severity)

	mine, _ := f.ActiveFor(ctx, findings.Filter{})
	rc, _ := f.ActiveFor(ctx, findings.Filter{Env: new("rc"), Class: "limit_breach"})
	fmt.Printf("unset env sees %d, rc sees %d\n", len(mine), len(rc))

	cleared, _ := f.Clear(ctx, rcRun, "disk:/var")
	again, _ := f.Clear(ctx, rcRun, "disk:/var")
	fmt.Println("cleared:", cleared, again)
	// Output:
	// raised in env "rc", 2 raises, severity critical
	// unset env sees 0, rc sees 1
	// cleared: true false
}
